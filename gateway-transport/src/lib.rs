//! The association layer: whole messages on numbered streams between one gateway
//! and one origin, over one of two backends, or four with the `baselines`
//! feature.
//!
//! - [`BackendKind::Kernel`]: Linux SCTP, one-to-one sockets (`kernel` module).
//! - [`BackendKind::Userspace`]: our own sans-I/O SCTP core (the `sctp` crate) on a
//!   UDP socket, RFC 6951 framing, for hosts without the SCTP module (`userspace`
//!   module).
//! - `BackendKind::FramedTcp` (`baselines`): the same API multiplexed on one TCP
//!   connection; the head-of-line-blocking baseline (`framed_tcp` module).
//! - `BackendKind::Quic` (`baselines`): one QUIC connection (quinn), one QUIC
//!   stream per stream number; the multistream transport our SCTP is measured
//!   against (`quic` module).
//!
//! The two baselines exist to be measured against; the daemons' default build
//! does not compile them (nor quinn and rustls), and a configuration that names
//! one is refused there with a line that says so.
//!
//! Every backend keeps message boundaries and per-stream order, imposes no order
//! across streams, negotiates stream counts (a peer that grants fewer is used with
//! fewer) and reports abort, close and time-out as [`TransportError`]s.
//!
//! It never parses what it carries: the protocol lives in `gateway-protocol`.
//! The one exception is [`hello`], the gateway's HELLO exchange that opens a
//! protocol session on a fresh association, kept here so that the gateway and
//! the origin's tools share it.
//! Start reading at [`connect`], [`Listener`] and [`Association`].
//!
//! Module map (`A > B`: A may import B): `lib` (declarations and re-exports
//! only) > `hello`, `doctor` > `association` (the facade: [`Association`],
//! [`Listener`], [`connect`]) > `backend` (the [`BackendKind`] list; the only
//! place that names every backend) > one module per backend (`kernel`,
//! `userspace`, `framed_tcp`, `quic`, none importing another) > `contract`
//! (the traits each backend implements) > `config` > {`error`, `host`,
//! `message`, `sync` (the workspace's one lock helper, which the daemons
//! re-export), `log_limit`}. Inside the crate a module imports what it uses
//! from the module that defines it, never through `lib`. Adding a backend
//! is one module and one line in `backend`'s `backends!` list.

mod association;
mod backend;
mod config;
mod contract;
pub mod doctor;
mod error;
#[cfg(feature = "baselines")]
pub mod framed_tcp;
pub mod hello;
mod host;
pub mod kernel;
pub mod log_limit;
mod message;
#[cfg(feature = "baselines")]
pub mod quic;
pub mod sync;
pub mod userspace;

pub use association::{Association, Listener, connect};
pub use backend::{BackendChoice, BackendKind, Wire};
pub use config::{
    AssociationConfig, Congestion, DeprecatedKeys, FLAT_KEYS, KernelConfig, QuicConfig,
    SCTP_UDP_PORT, UdpOffload, UserspaceConfig, duration_ms,
};
pub use error::TransportError;
pub use message::{Message, StreamCounts};
/// What [`Association::sctp_stats`] returns, nameable without depending on
/// the `sctp` crate.
pub use sctp::{
    Counters as SctpCounters, DEFAULT_INIT_ACKS_PER_SECOND, Limits as SctpLimits,
    Stats as SctpStats, stream_scheduler::StreamSchedulerKind,
};
