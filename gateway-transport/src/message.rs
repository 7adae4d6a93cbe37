//! What an association delivers and how many streams it has: the leaf every
//! backend and the facade in lib.rs share, so that no backend imports the
//! facade.

use bytes::Bytes;

/// One received message and the stream it arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stream number, below [`StreamCounts::inbound`].
    pub stream: u16,
    /// The message, boundaries as sent.
    pub data: Bytes,
}

/// Streams usable after negotiation, counting stream 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCounts {
    /// Streams this side may send on: 0..outbound.
    pub outbound: u16,
    /// Streams the peer may send on: 0..inbound.
    pub inbound: u16,
}
