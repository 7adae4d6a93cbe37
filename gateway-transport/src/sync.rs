//! The one lock helper of the workspace: every backend here, the gateway and
//! the origin lock their `std::sync::Mutex`es through [`lock`] (the daemons'
//! own `sync` modules re-export it), so that what a poisoned lock means is
//! decided once.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking over the data of a holder that panicked. Every
/// critical section that locks through it leaves its state consistent before
/// it can panic (no section spans a call that may: into a core, the kernel or
/// a handler), so a poisoned lock holds usable data, and one panicking task,
/// request or association must not take every later one down with it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
