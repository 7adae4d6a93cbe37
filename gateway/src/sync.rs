//! The lock helper every part of the gateway uses (the workspace's one, from
//! `gateway-transport`: both daemons and every backend lock the same way),
//! and the one wait for the shutdown signal.

pub use gateway_transport::sync::lock;

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; drop it here, not in a caller's
    // `select!`.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
