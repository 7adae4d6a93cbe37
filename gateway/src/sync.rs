//! The one lock helper every part of the gateway uses, and the one wait for
//! the shutdown signal.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking over the data of a holder that panicked. Every critical
/// section in the gateway leaves its state consistent before it can panic (no
/// section spans a call that may), so a poisoned lock holds usable data and one
/// panicking request must not take every later one down with it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; drop it here, not in a caller's
    // `select!`.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
