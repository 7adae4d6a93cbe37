//! A sans-I/O SCTP core: RFC 9260 with I-DATA and the stream schedulers of
//! RFC 8260, built for carrying many short web flows over one association.
//!
//! It never touches a socket, a clock or a random source of its own: datagrams
//! come in with the time they arrived, and what goes out (datagrams, events for
//! the application, the next deadline) is drained through `poll_*` calls. Time
//! and randomness are passed in, so every test is deterministic. The model is
//! quinn-proto; the driver that puts this on a UDP socket lives in
//! `gateway-transport` (`userspace`).
//!
//! Two levels, as in quinn-proto:
//! - `Endpoint` demultiplexes datagrams to associations and answers INITs
//!   statelessly (a signed state cookie, RFC 9260 section 5.1.3), so an INIT
//!   flood allocates nothing;
//! - `Association` is one association's state machine.
//!
//! Policy sits behind small traits the association calls at defined points:
//! congestion control (`congestion`), the acknowledgement policy (`ack`) and
//! the stream scheduler (`stream_scheduler`).
//!
//! Module map:
//! - `chunk`: the packet and chunk types; `wire`: their encoding and decoding
//!   (CRC32c included);
//! - `seq`: serial-number arithmetic for TSNs, SSNs and MIDs;
//! - `recv`: the data receiver (TSN tracking, gap reports, reassembly,
//!   ordered and unordered delivery, the receive window);
//! - `send`: the data sender (per-stream queues, fragmentation, the
//!   retransmission queue, per-stream accounting);
//! - `pacer`: the token bucket that spaces DATA packets over the round trip;
//! - `rtt`: the RTT estimator and RTO (RFC 9260 section 6.3);
//! - `congestion`, `ack`, `stream_scheduler`: the pluggable policies;
//! - `cookie`: the HMAC-signed state cookie;
//! - `config`: the settings, with RFC 9260's defaults;
//! - `association`, `endpoint`: the two levels above.

pub mod ack;
mod association;
pub mod chunk;
mod config;
pub mod congestion;
pub mod cookie;
mod endpoint;
mod pacer;
mod recv;
pub mod rtt;
mod send;
pub mod seq;
pub mod stream_scheduler;
pub mod wire;

pub use association::{
    Association, AssociationError, Event, Incoming, Message, State, Stats, Transmit,
};
pub use config::{Config, ConfigError, DEFAULT_MAX_COOKIE_EXTENSION, DEFAULT_MTU, MIN_MTU};
pub use endpoint::{
    AssocHandle, DEFAULT_INIT_ACKS_PER_SECOND, DatagramEvent, Endpoint, EndpointStats, Limits,
};
pub use send::{Counters, SendError, StreamStats};
