//! A userspace WAN emulator for hosts without netem: it forwards Ethernet frames
//! between two interfaces (AF_PACKET raw sockets, one blocking thread per
//! direction) and gives each direction a one-way delay with optional jitter,
//! Bernoulli or Gilbert-Elliott loss, a bottleneck rate and a queue limit, and
//! on request one deterministic drop (the Nth frame above a size).
//!
//! The benchmarks run it in the testbed's middle `wan` namespace between `gw0`
//! and `origin0` (the testbed's `WanEmulator` starts it there); docs/wan-emulator.md
//! describes the model, its precision and how it was validated.
//!
//! What it never does: touch a frame's bytes, reorder frames (unless asked),
//! or forward frames this host sent itself. It needs CAP_NET_RAW, and offloads
//! (GRO, GSO, TSO, tx checksumming) off on the interfaces it forwards between
//! and on the endpoints' interfaces: oversized frames are dropped and counted.
//!
//! Where to start: [`model::Link`] (the I/O-free link model: loss, queue, rate,
//! delay), then [`driver::Emulator`] (the threads and sockets around it) and
//! [`cli::Cli`].

pub mod cli;
pub mod driver;
mod error;
pub mod model;
pub mod packet;
pub mod units;

pub use driver::{DirectionConfig, DirectionStats, DriverOptions, Emulator};
pub use error::{ConfigError, ParseError, WanemError};
pub use model::{DropNth, GilbertElliott, Link, LinkConfig, LossModel, Rate, Verdict};
