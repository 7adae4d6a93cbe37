//! The one lock helper every part of the origin uses.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking over the data of a holder that panicked: every
/// critical section in the origin leaves its state consistent before it can
/// panic, so one failed association must not take every later one down.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
