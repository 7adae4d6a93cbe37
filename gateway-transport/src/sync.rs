//! The one lock helper of every backend.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking over the data of a holder that panicked: every
/// critical section leaves its state consistent between calls into a core or
/// the kernel, so one panicking task must not take the association down.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
