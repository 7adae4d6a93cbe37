//! The origin: an HTTP/1.1 server whose clients are gateways on SCTP associations,
//! and the stream schedulers that decide which response chunk goes out next.
//!
//! Start with [`scheduler`]: the I/O-free core every response passes through.

pub mod access;
pub mod config;
pub mod files;
pub mod http;
pub mod proxy;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod synthetic;
