//! The persistent HTTP cache (RFC 9111), shared by SCTP-mapped and direct
//! traffic. docs/cache.md has the design, the decisions and the state of work.
//!
//! - [`policy`]: the I/O-free RFC 9111 core (storable? fresh? validate? 304
//!   merge, invalidation, Vary keys, answers with Age/304/206/HEAD). Start here.
//! - [`store`]: the redb database: chunked bodies, the commit protocol that
//!   makes an entry visible only when complete and verified, SIEVE eviction,
//!   purge, stats, read-only open. Blocking: call it from `spawn_blocking`.
//! - [`coalesce`]: one upstream fetch per key, streamed to every waiter.
//! - [`config`]: the `[cache]` section.
//!
//! What it never does: touch sockets, or block an async executor thread.

pub mod coalesce;
pub mod config;
pub mod policy;
pub mod store;
