//! The gateway-origin wire protocol: message types, an I/O-free codec, and the
//! per-association [`Session`] state machine that decides how to react to every
//! malformed or unexpected message.
//!
//! docs/protocol.md is the specification; this crate follows it. It never touches
//! sockets, tasks or clocks: the transport (`gateway-transport`) moves bytes, the
//! binaries (`gateway`, `origin`) drive a [`Session`] per association.
//!
//! Start with [`Message`] (the layout) and [`Session::handle_message`] (the checks).

pub mod error;
pub mod kind;
pub mod message;
pub mod session;

pub use error::{DecodeError, ErrorCode, Reaction};
pub use message::{
    Capabilities, GoAway, HeldEntry, Hello, Message, MessageType, PUSH_ID_BIT, PushBudget,
    PushPromise, Request, RequestClass, RequestId, StreamBacklog, TunnelOpen, Urgency, is_push_id,
    push_head_host,
};
pub use session::{PushAllowance, Role, Session, SessionConfig};

/// Protocol version carried in HELLO.
pub const VERSION: u16 = 1;
/// Bytes of the fixed header in front of every message.
pub const HEADER_LEN: usize = 8;
/// Stream that carries control messages; data streams are 1..=n.
pub const CONTROL_STREAM: u16 = 0;
/// Largest REQUEST_BODY or RESPONSE_BODY payload, bytes. Bounded so that the
/// origin's scheduler can interleave responses at this granularity.
pub const MAX_CHUNK: usize = 64 * 1024;
/// Largest request or response head (request or status line plus fields), bytes.
pub const MAX_HEAD: usize = 64 * 1024;
/// Largest reason text in RESET or GOAWAY, bytes of UTF-8.
pub const MAX_REASON: usize = 1024;
/// Most entries in one FEEDBACK message.
pub const MAX_FEEDBACK_ENTRIES: usize = 4096;
/// Tunnel bytes the gateway may send on a tunnel before the origin's first
/// TUNNEL_CREDIT, and the most it may ever have unconsumed at the origin, bytes.
pub const TUNNEL_WINDOW: u32 = 256 * 1024;
/// Longest server name in TUNNEL_OPEN, bytes (a DNS name's limit).
pub const MAX_SERVER_NAME: usize = 255;
/// Most held entries in one PUSH_BUDGET.
pub const MAX_HELD_ENTRIES: usize = 512;
/// Longest target (path and query) of one held entry, bytes.
pub const MAX_HELD_TARGET: usize = 8192;
/// Most header fields in a push's request head (PUSH_PROMISE).
pub const MAX_PUSH_FIELDS: usize = 64;
/// Pages whose push allowance (PUSH_BUDGET) each side keeps at once; the
/// oldest is forgotten beyond it (docs/protocol.md, "PUSH").
pub const MAX_PUSH_PAGES: usize = 256;
/// Largest message this protocol produces, bytes: transports size buffers by it.
pub const MAX_MESSAGE: usize = HEADER_LEN + 4 + MAX_HEAD;

#[cfg(test)]
mod tests;
