//! The packet and its chunks as values (RFC 9260 section 3, RFC 8260 for
//! I-DATA, RFC 4820 for PAD). Encoding and decoding live in `wire`; nothing
//! here knows about bytes on the wire except the type numbers.
//!
//! User data is `Bytes` that share the received datagram, so a DATA chunk
//! costs no copy on its way to the application.

use bytes::Bytes;

/// Chunk type numbers (RFC 9260 section 3.2, RFC 8260, RFC 4820).
pub mod kind {
    /// Payload data.
    pub const DATA: u8 = 0;
    /// Initiation.
    pub const INIT: u8 = 1;
    /// Initiation acknowledgement.
    pub const INIT_ACK: u8 = 2;
    /// Selective acknowledgement.
    pub const SACK: u8 = 3;
    /// Heartbeat request.
    pub const HEARTBEAT: u8 = 4;
    /// Heartbeat acknowledgement.
    pub const HEARTBEAT_ACK: u8 = 5;
    /// Abort.
    pub const ABORT: u8 = 6;
    /// Shutdown.
    pub const SHUTDOWN: u8 = 7;
    /// Shutdown acknowledgement.
    pub const SHUTDOWN_ACK: u8 = 8;
    /// Operation error.
    pub const ERROR: u8 = 9;
    /// State cookie.
    pub const COOKIE_ECHO: u8 = 10;
    /// Cookie acknowledgement.
    pub const COOKIE_ACK: u8 = 11;
    /// Shutdown complete.
    pub const SHUTDOWN_COMPLETE: u8 = 14;
    /// Interleaved payload data (RFC 8260).
    pub const I_DATA: u8 = 64;
    /// Padding (RFC 4820), used for path MTU probes.
    pub const PAD: u8 = 132;
}

/// Error cause codes (RFC 9260 section 3.3.10).
pub mod cause {
    /// Invalid Stream Identifier.
    pub const INVALID_STREAM: u16 = 1;
    /// Missing Mandatory Parameter.
    pub const MISSING_PARAMETER: u16 = 2;
    /// Stale Cookie Error (info: the staleness in microseconds, u32).
    pub const STALE_COOKIE: u16 = 3;
    /// Out of Resource.
    pub const OUT_OF_RESOURCE: u16 = 4;
    /// Unrecognized Chunk Type (info: the chunk).
    pub const UNRECOGNIZED_CHUNK: u16 = 6;
    /// Invalid Mandatory Parameter.
    pub const INVALID_PARAMETER: u16 = 7;
    /// Unrecognized Parameters (info: the parameters).
    pub const UNRECOGNIZED_PARAMETERS: u16 = 8;
    /// No User Data (info: the TSN, u32).
    pub const NO_USER_DATA: u16 = 9;
    /// Cookie Received While Shutting Down.
    pub const COOKIE_WHILE_SHUTTING_DOWN: u16 = 10;
    /// User-Initiated Abort (info: an upper-layer reason).
    pub const USER_ABORT: u16 = 12;
    /// Protocol Violation (info: a description).
    pub const PROTOCOL_VIOLATION: u16 = 13;
}

/// An SCTP packet: the common header and its chunks, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Sender's port.
    pub src_port: u16,
    /// Receiver's port.
    pub dst_port: u16,
    /// Verification tag.
    pub vtag: u32,
    /// The chunks, in the order they are on the wire.
    pub chunks: Vec<Chunk>,
}

/// One chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// DATA or I-DATA.
    Data(DataChunk),
    /// INIT.
    Init(Init),
    /// INIT ACK (carries the state cookie).
    InitAck(Init),
    /// SACK.
    Sack(Sack),
    /// HEARTBEAT with its opaque sender-specific information.
    Heartbeat(Bytes),
    /// HEARTBEAT ACK echoing that information.
    HeartbeatAck(Bytes),
    /// ABORT.
    Abort {
        /// The T bit: the verification tag is the receiver's own (reflected).
        reflected: bool,
        /// Why.
        causes: Vec<ErrorCause>,
    },
    /// SHUTDOWN.
    Shutdown {
        /// The sender's cumulative TSN ack.
        cum_tsn_ack: u32,
    },
    /// SHUTDOWN ACK.
    ShutdownAck,
    /// SHUTDOWN COMPLETE.
    ShutdownComplete {
        /// The T bit, as for ABORT.
        reflected: bool,
    },
    /// ERROR.
    Error(Vec<ErrorCause>),
    /// COOKIE ECHO with the cookie from INIT ACK.
    CookieEcho(Bytes),
    /// COOKIE ACK.
    CookieAck,
    /// PAD (RFC 4820): this many bytes of padding value, to make a probe packet
    /// of a given size.
    Pad(u16),
    /// A chunk type this stack does not implement, kept so that the caller can
    /// act on the two high bits of its type (RFC 9260 section 3.2).
    Unknown {
        /// Chunk type.
        kind: u8,
        /// Chunk flags.
        flags: u8,
        /// Value, without header and padding.
        value: Bytes,
    },
}

/// Whether a data chunk is DATA (RFC 9260) or I-DATA (RFC 8260).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// DATA: 16-bit SSN, fragments of a message have consecutive TSNs.
    Data,
    /// I-DATA: 32-bit MID and a fragment sequence number, so messages of
    /// different streams may interleave.
    IData,
}

/// A DATA or I-DATA chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataChunk {
    /// DATA or I-DATA.
    pub kind: DataKind,
    /// U: unordered.
    pub unordered: bool,
    /// B: first fragment of a message.
    pub beginning: bool,
    /// E: last fragment of a message.
    pub ending: bool,
    /// I: the receiver should SACK at once (RFC 7053).
    pub immediate: bool,
    /// Transmission sequence number.
    pub tsn: u32,
    /// Stream identifier.
    pub stream: u16,
    /// DATA: the stream sequence number (SSN, 16 bits, widened). I-DATA: the
    /// message identifier (MID).
    pub mid: u32,
    /// I-DATA only: the fragment sequence number; 0 for the first fragment
    /// (whose header field carries the PPID instead) and always 0 for DATA.
    pub fsn: u32,
    /// Payload protocol identifier. On the wire for DATA and for the first
    /// fragment of I-DATA; 0 on other I-DATA fragments.
    pub ppid: u32,
    /// The user data (never empty on a valid chunk).
    pub payload: Bytes,
}

/// INIT or INIT ACK (RFC 9260 sections 3.3.2 and 3.3.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Init {
    /// The tag the receiver must put in every packet it sends us.
    pub initiate_tag: u32,
    /// Advertised receiver window credit, bytes.
    pub a_rwnd: u32,
    /// Number of outbound streams the sender wants.
    pub outbound_streams: u16,
    /// Maximum inbound streams the sender accepts.
    pub inbound_streams: u16,
    /// The sender's first TSN.
    pub initial_tsn: u32,
    /// INIT ACK only: the state cookie.
    pub cookie: Option<Bytes>,
    /// Chunk types of the Supported Extensions parameter (RFC 5061 section
    /// 4.2.7); I-DATA support is `kind::I_DATA` here.
    pub extensions: Vec<u8>,
    /// Cookie Preservative: extra cookie lifetime asked for, milliseconds.
    pub cookie_preservative: Option<u32>,
    /// Decoded INIT: unknown parameters whose type asks for a report (whole
    /// parameters, header included). Encoded INIT ACK: emitted inside
    /// Unrecognized Parameter parameters.
    pub unrecognized: Vec<Bytes>,
}

impl Init {
    /// The sender offers or accepts I-DATA.
    pub fn supports_idata(&self) -> bool {
        self.extensions.contains(&kind::I_DATA)
    }
}

/// SACK (RFC 9260 section 3.3.4).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sack {
    /// Every TSN up to this one was received.
    pub cum_tsn_ack: u32,
    /// Advertised receiver window credit, bytes.
    pub a_rwnd: u32,
    /// Received blocks above the cumulative ack, as offsets from it.
    pub gaps: Vec<GapBlock>,
    /// TSNs received more than once since the last SACK.
    pub dups: Vec<u32>,
}

/// A gap ack block: TSNs `cum_tsn_ack + start ..= cum_tsn_ack + end` arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapBlock {
    /// Offset of the block's first TSN from the cumulative ack (at least 1).
    pub start: u16,
    /// Offset of its last TSN (at least `start`).
    pub end: u16,
}

/// An error cause in ABORT or ERROR (RFC 9260 section 3.3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorCause {
    /// One of [`cause`]'s codes, or another the peer sent.
    pub code: u16,
    /// The cause-specific information, without header and padding.
    pub info: Bytes,
}

impl ErrorCause {
    /// A cause with `code` and `info`.
    pub fn new(code: u16, info: impl Into<Bytes>) -> Self {
        ErrorCause {
            code,
            info: info.into(),
        }
    }
}
