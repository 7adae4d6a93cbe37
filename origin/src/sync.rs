//! The lock helper every part of the origin uses: the workspace's one, from
//! `gateway-transport` (both daemons and every backend lock the same way).

pub use gateway_transport::sync::lock;
