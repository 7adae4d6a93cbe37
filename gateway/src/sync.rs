//! The lock helper every part of the gateway uses: the workspace's one, from
//! `gateway-transport` (both daemons and every backend lock the same way).

pub use gateway_transport::sync::lock;
