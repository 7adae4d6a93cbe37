//! The gateway daemon's library half. `src/main.rs` is a thin CLI over it; tests
//! and tools reach the parts directly.
//!
//! How a browser request travels (docs/gateway.md has the whole picture):
//!
//! 1. [`intercept`] installs the nftables table and policy routes that make TPROXY
//!    deliver browser TCP to port 80 to the gateway.
//! 2. [`listener`] accepts it on `IP_TRANSPARENT` sockets; the accepted socket's
//!    local address is the original destination.
//! 3. [`front`] speaks HTTP/1.1 to the browser, enforces limits, checks Host
//!    against the destination and asks [`route`] where the request goes.
//! 4. Mapped requests travel over the origin's association ([`origin_link`]), on
//!    the stream their browser flow is pinned to; the rest go over plain TCP to the
//!    original destination ([`direct`]).
//!
//! What it never does: start anything on its own. Every socket, rule and
//! attachment is made by an explicit call and undone by dropping what it returned
//! (or by `gateway cleanup` after a crash).

pub mod admin;
pub mod body;
pub mod cache;
pub mod config;
pub mod daemon;
pub mod direct;
pub mod ebpf;
pub mod front;
pub mod intercept;
pub mod listener;
pub mod origin_link;
pub mod prefetch;
pub mod route;
pub mod sync;
