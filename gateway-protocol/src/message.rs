//! Message types and their byte layout (docs/protocol.md, "Messages").
//!
//! Every message is one transport message: SCTP keeps the boundary, and the
//! framed-TCP backend adds its own length prefix below this layer. So a message is
//! decoded from a complete byte slice; there is no "need more bytes" state here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, ErrorCode};
pub use crate::kind::{MessageType, PUSH_ID_BIT, RequestId, is_push_id};
use crate::{
    HEADER_LEN, MAX_CHUNK, MAX_FEEDBACK_ENTRIES, MAX_HEAD, MAX_HELD_ENTRIES, MAX_HELD_TARGET,
    MAX_PUSH_FIELDS, MAX_REASON, MAX_SERVER_NAME,
};

/// Flag bit: no more bytes follow for this request (REQUEST, REQUEST_BODY), or
/// from this side of a tunnel (TUNNEL_DATA).
pub const FLAG_END: u8 = 0x01;
/// Flag bit: this message answers one of the same type (HELLO, PING).
pub const FLAG_ACK: u8 = 0x01;
/// Held-entry flag bit (PUSH_BUDGET): the gateway's copy is fresh; push
/// nothing for this URL.
pub const HELD_FRESH: u8 = 0x01;
/// Bytes of a held entry before its target, entity-tag and date.
const HELD_ENTRY_FIXED: usize = 6;

/// Whether a request is for a browser waiting now, or speculative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum RequestClass {
    /// A browser asked for it.
    Demand = 0,
    /// The gateway's prefetch queue asked for it; served after demand.
    Prefetch = 1,
}

impl RequestClass {
    /// Maps the wire value; `None` for values this version does not know.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Demand),
            1 => Some(Self::Prefetch),
            _ => None,
        }
    }
}

/// RFC 9218 urgency: 0 is the most urgent, 7 the least; 3 is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Urgency(u8);

impl Urgency {
    /// The most urgent level.
    pub const HIGHEST: Urgency = Urgency(0);
    /// RFC 9218's default.
    pub const DEFAULT: Urgency = Urgency(3);
    /// The least urgent level.
    pub const LOWEST: Urgency = Urgency(7);

    /// `None` above 7.
    pub fn new(level: u8) -> Option<Self> {
        (level <= 7).then_some(Self(level))
    }

    /// The numeric level, 0..=7.
    pub fn level(self) -> u8 {
        self.0
    }
}

impl Default for Urgency {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// HELLO: sent first by each side on stream 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Set on the origin's answer to the gateway's HELLO.
    pub ack: bool,
    /// Protocol version; see [`crate::VERSION`].
    pub version: u16,
    /// Data streams (1..=n) this side will use; the association may grant fewer.
    pub data_streams: u16,
    /// Largest body chunk this side will accept, bytes.
    pub max_chunk: u32,
    /// Bit set of [`Capabilities`].
    pub capabilities: Capabilities,
}

/// Optional features, one bit each. Unknown bits are ignored on receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities(pub u32);

impl Capabilities {
    /// The sender sends (gateway) or acts on (origin) FEEDBACK.
    pub const FEEDBACK: Capabilities = Capabilities(1 << 0);
    /// The sender distinguishes demand from prefetch requests.
    pub const PREFETCH_CLASS: Capabilities = Capabilities(1 << 1);
    /// The sender may send (gateway) or acts on (origin) PRIORITY. A gateway
    /// sends PRIORITY only to an origin that announced this bit.
    pub const PRIORITY: Capabilities = Capabilities(1 << 2);
    /// The sender may open (gateway) or serves (origin) TLS tunnels. A gateway
    /// sends TUNNEL_OPEN only to an origin that announced this bit.
    pub const TUNNEL: Capabilities = Capabilities(1 << 3);
    /// Gateway: takes pushes (and sends MAX_PUSHES and PUSH_BUDGET); origin:
    /// may push. An origin pushes only to a gateway that announced this bit,
    /// and a gateway sends MAX_PUSHES and PUSH_BUDGET only to an origin that
    /// did.
    pub const PUSH: Capabilities = Capabilities(1 << 4);
    /// FEEDBACK entries carry the bytes that arrived on each stream
    /// ([`StreamBacklog::arrived`]): a gateway sends them only to an origin
    /// that announced this bit, and such an origin counts every byte it sent
    /// beyond them as still on its way to the backlog.
    pub const FEEDBACK_ARRIVED: Capabilities = Capabilities(1 << 5);

    /// True if every bit of `other` is set.
    pub fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Capabilities {
    type Output = Capabilities;
    fn bitor(self, rhs: Self) -> Self {
        Capabilities(self.0 | rhs.0)
    }
}

/// One stream's backlog at the gateway: bytes received from the association and
/// not yet delivered to the browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBacklog {
    /// The data stream.
    pub stream: u16,
    /// Backlog in bytes, saturated at `u32::MAX`.
    pub bytes: u32,
    /// Bytes of every message that arrived on the stream since HELLO, when
    /// `bytes` was measured, modulo 2^32 ([`Capabilities::FEEDBACK_ARRIVED`]):
    /// the origin's bytes sent beyond this are in flight toward the gateway,
    /// which `bytes` cannot include. `None`: the 6-byte entry without it.
    /// Within one FEEDBACK every entry has it or none has.
    pub arrived: Option<u32>,
}

impl StreamBacklog {
    /// Bytes of one entry on the wire: 10 with `arrived`, 6 without.
    fn wire_len(entries: &[StreamBacklog]) -> usize {
        if entries.first().is_some_and(|e| e.arrived.is_some()) {
            10
        } else {
            6
        }
    }
}

/// GOAWAY: the sender will accept no new requests; requests with an id above
/// `last_request` were not processed and may be retried elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// Highest request id the sender processed or will finish.
    pub last_request: RequestId,
    /// Why.
    pub code: ErrorCode,
    /// Human-readable detail, at most [`MAX_REASON`] bytes of UTF-8.
    pub reason: String,
}

/// REQUEST: an HTTP/1.1 request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The request id.
    pub id: RequestId,
    /// RFC 9218 urgency.
    pub urgency: Urgency,
    /// Demand or prefetch.
    pub class: RequestClass,
    /// True if no REQUEST_BODY follows.
    pub end: bool,
    /// The request line and header fields, CRLF-separated, ending with an empty line.
    pub head: Bytes,
}

/// TUNNEL_OPEN: carry one browser's TLS connection, ClientHello first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelOpen {
    /// The tunnel's id (a request id).
    pub id: RequestId,
    /// The address and port the browser dialled.
    pub destination: SocketAddr,
    /// The ClientHello's server name (SNI), lower-case ASCII, 1..=255 bytes.
    pub server_name: String,
}

/// What the gateway already holds for one URL of a page (PUSH_BUDGET): the
/// origin pushes nothing for a fresh entry, and for a stale one pushes the
/// answer to a conditional request built from these validators (often a 304).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEntry {
    /// The stored copy is fresh: push nothing for this URL.
    pub fresh: bool,
    /// The URL's path and query (origin-form, on the page's host), 1 to
    /// [`MAX_HELD_TARGET`] visible ASCII bytes starting with `/`.
    pub target: Bytes,
    /// The stored response's ETag field value, verbatim (`"x"` or `W/"x"`);
    /// empty if it had none. At most 255 visible ASCII bytes.
    pub etag: Bytes,
    /// The stored response's Last-Modified field value, verbatim; empty if
    /// it had none. At most 255 bytes of visible ASCII and spaces.
    pub last_modified: Bytes,
}

/// PUSH_BUDGET: the gateway takes pushes for page `page` within these limits,
/// and already holds `held`. Sent on the page's stream, after its REQUEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushBudget {
    /// The page's request id.
    pub page: RequestId,
    /// Pushes the origin may promise for this page, in all.
    pub max_pushes: u16,
    /// RESPONSE_BODY bytes the page's pushes may carry, in all.
    pub max_bytes: u32,
    /// What the gateway holds of the page's closure; at most
    /// [`MAX_HELD_ENTRIES`].
    pub held: Vec<HeldEntry>,
}

/// PUSH_PROMISE: the origin pushes the response to `head` for page `page`.
/// Its response follows on the same stream, under the push id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushPromise {
    /// The push id (top bit set, [`PUSH_ID_BIT`]).
    pub id: RequestId,
    /// The page's request id (a gateway request id that carried a PUSH_BUDGET).
    pub page: RequestId,
    /// The request the pushed response answers: `GET` with an origin-form
    /// target, exactly one `Host`, the fields the origin assumed, never
    /// credentials nor a body. See [`push_head_host`].
    pub head: Bytes,
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// See [`Hello`].
    Hello(Hello),
    /// Backlog per stream, at most [`MAX_FEEDBACK_ENTRIES`] entries.
    Feedback(Vec<StreamBacklog>),
    /// Stop the response to `id` at the next chunk.
    Cancel {
        /// The request whose response to stop.
        id: RequestId,
    },
    /// See [`GoAway`].
    GoAway(GoAway),
    /// Liveness probe; answered with the same `opaque` and `ack` set.
    Ping {
        /// Set on the answer.
        ack: bool,
        /// Echoed back unchanged.
        opaque: u64,
    },
    /// The origin may promise `max` pushes in all on this association
    /// (cumulative: it only grows).
    MaxPushes {
        /// Pushes granted since the association began.
        max: u32,
    },
    /// See [`Request`].
    Request(Request),
    /// A chunk of the request body.
    RequestBody {
        /// The request id.
        id: RequestId,
        /// True on the last chunk.
        end: bool,
        /// At most [`MAX_CHUNK`] bytes.
        data: Bytes,
    },
    /// Serve an open request at this urgency and class from now on (a prefetch
    /// promoted to demand, say). Travels on the request's stream.
    Priority {
        /// The request id.
        id: RequestId,
        /// RFC 9218 urgency.
        urgency: Urgency,
        /// Demand or prefetch.
        class: RequestClass,
    },
    /// See [`TunnelOpen`].
    TunnelOpen(TunnelOpen),
    /// Tunnel bytes, in either direction.
    TunnelData {
        /// The tunnel's id.
        id: RequestId,
        /// The sender sends no more bytes on this tunnel (half-close).
        end: bool,
        /// At most the receiver's `max_chunk` bytes; empty only with `end`.
        data: Bytes,
    },
    /// The gateway may send `bytes` more TUNNEL_DATA bytes on this tunnel.
    TunnelCredit {
        /// The tunnel's id.
        id: RequestId,
        /// Bytes granted, added to what is left of the window.
        bytes: u32,
    },
    /// See [`PushBudget`].
    PushBudget(PushBudget),
    /// See [`PushPromise`].
    PushPromise(PushPromise),
    /// The response status line and header fields.
    ResponseHead {
        /// The request id.
        id: RequestId,
        /// Status line and header fields, CRLF-separated, ending with an empty line.
        head: Bytes,
    },
    /// A chunk of the response body.
    ResponseBody {
        /// The request id.
        id: RequestId,
        /// At most [`MAX_CHUNK`] bytes.
        data: Bytes,
    },
    /// The response is complete.
    ResponseEnd {
        /// The request id.
        id: RequestId,
        /// Total body bytes sent in RESPONSE_BODY messages; the receiver checks it.
        body_len: u64,
    },
    /// The request (or its response) was abandoned.
    Reset {
        /// The request id.
        id: RequestId,
        /// Why.
        code: ErrorCode,
        /// Human-readable detail, at most [`MAX_REASON`] bytes of UTF-8.
        reason: String,
    },
}

impl Message {
    /// The type code this message is sent with.
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::Hello(_) => MessageType::Hello,
            Message::Feedback(_) => MessageType::Feedback,
            Message::Cancel { .. } => MessageType::Cancel,
            Message::GoAway(_) => MessageType::GoAway,
            Message::Ping { .. } => MessageType::Ping,
            Message::MaxPushes { .. } => MessageType::MaxPushes,
            Message::Request(_) => MessageType::Request,
            Message::RequestBody { .. } => MessageType::RequestBody,
            Message::Priority { .. } => MessageType::Priority,
            Message::TunnelOpen(_) => MessageType::TunnelOpen,
            Message::TunnelData { .. } => MessageType::TunnelData,
            Message::TunnelCredit { .. } => MessageType::TunnelCredit,
            Message::PushBudget(_) => MessageType::PushBudget,
            Message::PushPromise(_) => MessageType::PushPromise,
            Message::ResponseHead { .. } => MessageType::ResponseHead,
            Message::ResponseBody { .. } => MessageType::ResponseBody,
            Message::ResponseEnd { .. } => MessageType::ResponseEnd,
            Message::Reset { .. } => MessageType::Reset,
        }
    }

    /// The request this message concerns; 0 for HELLO, FEEDBACK, GOAWAY, PING
    /// and MAX_PUSHES. For PUSH_BUDGET, the page; for PUSH_PROMISE, the push.
    pub fn request_id(&self) -> RequestId {
        match self {
            Message::Hello(_)
            | Message::Feedback(_)
            | Message::GoAway(_)
            | Message::Ping { .. }
            | Message::MaxPushes { .. } => 0,
            Message::Cancel { id }
            | Message::RequestBody { id, .. }
            | Message::Priority { id, .. }
            | Message::TunnelData { id, .. }
            | Message::TunnelCredit { id, .. }
            | Message::ResponseHead { id, .. }
            | Message::ResponseBody { id, .. }
            | Message::ResponseEnd { id, .. }
            | Message::Reset { id, .. } => *id,
            Message::Request(r) => r.id,
            Message::TunnelOpen(t) => t.id,
            Message::PushBudget(b) => b.page,
            Message::PushPromise(p) => p.id,
        }
    }

    /// Bytes [`Message::encode`] will write.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Message::Hello(_) => 12,
                Message::Feedback(entries) => 2 + StreamBacklog::wire_len(entries) * entries.len(),
                Message::Cancel { .. } => 0,
                Message::GoAway(g) => 6 + g.reason.len(),
                Message::Ping { .. } => 8,
                Message::MaxPushes { .. } => 4,
                Message::Request(r) => 4 + r.head.len(),
                Message::RequestBody { data, .. } | Message::ResponseBody { data, .. } => {
                    data.len()
                }
                Message::Priority { .. } => 4,
                Message::TunnelOpen(t) => {
                    4 + match t.destination {
                        SocketAddr::V4(_) => 4,
                        SocketAddr::V6(_) => 16,
                    } + t.server_name.len()
                }
                Message::TunnelData { data, .. } => data.len(),
                Message::TunnelCredit { .. } => 4,
                Message::PushBudget(b) => push_budget_len(b),
                Message::PushPromise(p) => 4 + p.head.len(),
                Message::ResponseHead { head, .. } => head.len(),
                Message::ResponseEnd { .. } => 8,
                Message::Reset { reason, .. } => 2 + reason.len(),
            }
    }

    /// Appends the wire form to `out`.
    ///
    /// Encoding never fails: a message that breaks a limit (an oversized chunk, a
    /// reason longer than [`MAX_REASON`]) is a bug in the sender, caught by
    /// `debug_assert` here and by [`Message::decode`] at the peer.
    pub fn encode(&self, out: &mut BytesMut) {
        debug_assert!(
            self.check_limits().is_ok(),
            "encoding {self:?} breaks a limit"
        );
        out.reserve(self.encoded_len());
        let flags = match self {
            Message::Hello(h) if h.ack => FLAG_ACK,
            Message::Ping { ack: true, .. } => FLAG_ACK,
            Message::Request(r) if r.end => FLAG_END,
            Message::RequestBody { end: true, .. } => FLAG_END,
            Message::TunnelData { end: true, .. } => FLAG_END,
            _ => 0,
        };
        out.put_u8(self.message_type() as u8);
        out.put_u8(flags);
        out.put_u16(0);
        out.put_u32(self.request_id());
        match self {
            Message::Hello(h) => {
                out.put_u16(h.version);
                out.put_u16(h.data_streams);
                out.put_u32(h.max_chunk);
                out.put_u32(h.capabilities.0);
            }
            Message::Feedback(entries) => {
                out.put_u16(entries.len() as u16);
                let wide = StreamBacklog::wire_len(entries) == 10;
                for e in entries {
                    out.put_u16(e.stream);
                    out.put_u32(e.bytes);
                    if wide {
                        out.put_u32(e.arrived.unwrap_or(0));
                    }
                }
            }
            Message::Cancel { .. } => {}
            Message::GoAway(g) => {
                out.put_u32(g.last_request);
                out.put_u16(g.code.to_code());
                out.put_slice(g.reason.as_bytes());
            }
            Message::Ping { opaque, .. } => out.put_u64(*opaque),
            Message::MaxPushes { max } => out.put_u32(*max),
            Message::Request(r) => {
                out.put_u8(r.urgency.level());
                out.put_u8(r.class as u8);
                out.put_u16(0);
                out.put_slice(&r.head);
            }
            Message::RequestBody { data, .. } | Message::ResponseBody { data, .. } => {
                out.put_slice(data)
            }
            Message::Priority { urgency, class, .. } => {
                out.put_u8(urgency.level());
                out.put_u8(*class as u8);
                out.put_u16(0);
            }
            Message::TunnelOpen(t) => encode_tunnel_open(t, out),
            Message::TunnelData { data, .. } => out.put_slice(data),
            Message::TunnelCredit { bytes, .. } => out.put_u32(*bytes),
            Message::PushBudget(b) => encode_push_budget(b, out),
            Message::PushPromise(p) => {
                out.put_u32(p.page);
                out.put_slice(&p.head);
            }
            Message::ResponseHead { head, .. } => out.put_slice(head),
            Message::ResponseEnd { body_len, .. } => out.put_u64(*body_len),
            Message::Reset { code, reason, .. } => {
                out.put_u16(code.to_code());
                out.put_slice(reason.as_bytes());
            }
        }
    }

    /// The wire form as a new buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out.freeze()
    }

    /// Decodes one complete message. `Bytes` payloads share `input`'s buffer.
    ///
    /// Every error carries the reaction the receiver owes the peer; see
    /// [`DecodeError::reaction`].
    pub fn decode(input: &Bytes) -> Result<Message, DecodeError> {
        let (header, payload) = Header::read(input)?;
        match header.kind {
            MessageType::Hello
            | MessageType::Feedback
            | MessageType::GoAway
            | MessageType::Ping
            | MessageType::MaxPushes => header.decode_control(payload),
            MessageType::Request
            | MessageType::RequestBody
            | MessageType::Cancel
            | MessageType::Priority
            | MessageType::PushBudget => header.decode_request(payload),
            MessageType::TunnelOpen | MessageType::TunnelData | MessageType::TunnelCredit => {
                header.decode_tunnel(payload)
            }
            MessageType::ResponseHead
            | MessageType::ResponseBody
            | MessageType::ResponseEnd
            | MessageType::Reset
            | MessageType::PushPromise => header.decode_response(payload),
        }
    }

    /// Checks the limits a sender must respect; used by `encode` in debug builds
    /// and by tests.
    pub fn check_limits(&self) -> Result<(), &'static str> {
        match self {
            Message::Feedback(e) if e.len() > MAX_FEEDBACK_ENTRIES => {
                Err("too many FEEDBACK entries")
            }
            Message::Feedback(e)
                if e.iter()
                    .any(|x| x.arrived.is_some() != e[0].arrived.is_some()) =>
            {
                Err("FEEDBACK entries with and without the arrived bytes")
            }
            Message::GoAway(GoAway { reason, .. }) | Message::Reset { reason, .. }
                if reason.len() > MAX_REASON =>
            {
                Err("reason longer than MAX_REASON")
            }
            Message::Request(r) if r.head.is_empty() || r.head.len() > MAX_HEAD => {
                Err("request head empty or above MAX_HEAD")
            }
            Message::ResponseHead { head, .. } if head.is_empty() || head.len() > MAX_HEAD => {
                Err("response head empty or above MAX_HEAD")
            }
            Message::RequestBody { data, .. }
            | Message::ResponseBody { data, .. }
            | Message::TunnelData { data, .. }
                if data.len() > MAX_CHUNK =>
            {
                Err("chunk above MAX_CHUNK")
            }
            Message::TunnelOpen(t) if !valid_server_name(&t.server_name) => {
                Err("server name empty, too long or not a DNS name")
            }
            Message::TunnelData { data, end, .. } if data.is_empty() && !end => {
                Err("empty TUNNEL_DATA without END")
            }
            Message::PushBudget(b) => check_push_budget(b),
            Message::PushPromise(p) => check_push_promise(p),
            m if m.message_type() != MessageType::Hello
                && !matches!(
                    m,
                    Message::Feedback(_)
                        | Message::GoAway(_)
                        | Message::Ping { .. }
                        | Message::MaxPushes { .. }
                )
                && m.request_id() == 0 =>
            {
                Err("request id 0")
            }
            _ => Ok(()),
        }
    }
}

/// The fixed header of a message being decoded, and the checks every payload
/// layout shares. Control messages (HELLO, FEEDBACK, GOAWAY, PING) belong to
/// the association (as does MAX_PUSHES); the others to one request or push,
/// named by a non-zero id.
#[derive(Debug, Clone, Copy)]
struct Header {
    kind: MessageType,
    flags: u8,
    id: u32,
}

impl Header {
    /// Reads the header off `input`; returns it and the payload (sharing
    /// `input`'s buffer).
    fn read(input: &Bytes) -> Result<(Header, Bytes), DecodeError> {
        if input.len() < HEADER_LEN {
            return Err(DecodeError::ShortHeader { len: input.len() });
        }
        let mut buf = input.clone();
        let code = buf.get_u8();
        let flags = buf.get_u8();
        let _reserved = buf.get_u16();
        let id = buf.get_u32();
        let Some(kind) = MessageType::from_code(code) else {
            return Err(DecodeError::UnknownType { code, id });
        };
        let header = Header { kind, flags, id };
        let needs_id = !matches!(
            kind,
            MessageType::Hello
                | MessageType::Feedback
                | MessageType::GoAway
                | MessageType::Ping
                | MessageType::MaxPushes
        );
        if needs_id && id == 0 {
            return Err(header.bad("request id 0"));
        }
        Ok((header, buf))
    }

    fn bad(self, what: &'static str) -> DecodeError {
        DecodeError::BadPayload {
            kind: self.kind,
            id: self.id,
            what,
        }
    }

    /// The payload must be exactly `n` bytes.
    fn exact(self, buf: &Bytes, n: usize) -> Result<(), DecodeError> {
        if buf.len() == n {
            Ok(())
        } else {
            Err(self.bad("payload length does not match the type's layout"))
        }
    }

    /// The payload must be at most `limit` bytes.
    fn at_most(self, buf: &Bytes, limit: usize) -> Result<(), DecodeError> {
        if buf.len() > limit {
            return Err(DecodeError::TooLarge {
                kind: self.kind,
                id: self.id,
                len: buf.len(),
                limit,
            });
        }
        Ok(())
    }

    fn flag(self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// HELLO, FEEDBACK, GOAWAY, PING.
    fn decode_control(self, mut buf: Bytes) -> Result<Message, DecodeError> {
        let bad = |what| self.bad(what);
        Ok(match self.kind {
            MessageType::Hello => {
                self.exact(&buf, 12)?;
                Message::Hello(Hello {
                    ack: self.flag(FLAG_ACK),
                    version: buf.get_u16(),
                    data_streams: buf.get_u16(),
                    max_chunk: buf.get_u32(),
                    capabilities: Capabilities(buf.get_u32()),
                })
            }
            MessageType::Feedback => {
                if buf.len() < 2 {
                    return Err(bad("missing entry count"));
                }
                let count = usize::from(buf.get_u16());
                if count > MAX_FEEDBACK_ENTRIES {
                    return Err(bad("more entries than MAX_FEEDBACK_ENTRIES"));
                }
                // 6-byte entries, or 10 with the arrived bytes: the length
                // tells them apart (count is the same for both).
                let wide = count > 0 && buf.len() == count * 10;
                if !wide {
                    self.exact(&buf, count * 6)?;
                }
                let entries = (0..count)
                    .map(|_| StreamBacklog {
                        stream: buf.get_u16(),
                        bytes: buf.get_u32(),
                        arrived: wide.then(|| buf.get_u32()),
                    })
                    .collect();
                Message::Feedback(entries)
            }
            MessageType::GoAway => {
                if buf.len() < 6 {
                    return Err(bad("GOAWAY shorter than 6 bytes"));
                }
                let last_request = buf.get_u32();
                let code = ErrorCode::from_code(buf.get_u16());
                let reason = reason(buf).map_err(bad)?;
                Message::GoAway(GoAway {
                    last_request,
                    code,
                    reason,
                })
            }
            MessageType::Ping => {
                self.exact(&buf, 8)?;
                Message::Ping {
                    ack: self.flag(FLAG_ACK),
                    opaque: buf.get_u64(),
                }
            }
            MessageType::MaxPushes => {
                self.exact(&buf, 4)?;
                Message::MaxPushes { max: buf.get_u32() }
            }
            _ => unreachable!("decode dispatches only control types here"),
        })
    }

    /// REQUEST, REQUEST_BODY, CANCEL, PRIORITY, PUSH_BUDGET: the gateway's
    /// side of a request.
    fn decode_request(self, mut buf: Bytes) -> Result<Message, DecodeError> {
        let (bad, id) = (|what| self.bad(what), self.id);
        Ok(match self.kind {
            MessageType::Request => {
                if buf.len() < 4 {
                    return Err(bad("REQUEST shorter than 4 bytes"));
                }
                let (urgency, class) = priority_fields(&mut buf).map_err(bad)?;
                if buf.is_empty() {
                    return Err(bad("empty request head"));
                }
                self.at_most(&buf, MAX_HEAD)?;
                Message::Request(Request {
                    id,
                    urgency,
                    class,
                    end: self.flag(FLAG_END),
                    head: buf,
                })
            }
            MessageType::RequestBody => {
                self.at_most(&buf, MAX_CHUNK)?;
                Message::RequestBody {
                    id,
                    end: self.flag(FLAG_END),
                    data: buf,
                }
            }
            MessageType::Cancel => {
                self.exact(&buf, 0)?;
                Message::Cancel { id }
            }
            MessageType::Priority => {
                self.exact(&buf, 4)?;
                let (urgency, class) = priority_fields(&mut buf).map_err(bad)?;
                Message::Priority { id, urgency, class }
            }
            MessageType::PushBudget => {
                self.at_most(&buf, MAX_HEAD)?;
                let budget = push_budget_fields(id, buf).map_err(bad)?;
                Message::PushBudget(budget)
            }
            _ => unreachable!("decode dispatches only request types here"),
        })
    }

    /// TUNNEL_OPEN, TUNNEL_DATA, TUNNEL_CREDIT.
    fn decode_tunnel(self, mut buf: Bytes) -> Result<Message, DecodeError> {
        let (bad, id) = (|what| self.bad(what), self.id);
        Ok(match self.kind {
            MessageType::TunnelOpen => {
                let (destination, server_name) = tunnel_open_fields(buf).map_err(bad)?;
                Message::TunnelOpen(TunnelOpen {
                    id,
                    destination,
                    server_name,
                })
            }
            MessageType::TunnelData => {
                self.at_most(&buf, MAX_CHUNK)?;
                let end = self.flag(FLAG_END);
                if buf.is_empty() && !end {
                    return Err(bad("empty TUNNEL_DATA without END"));
                }
                Message::TunnelData { id, end, data: buf }
            }
            MessageType::TunnelCredit => {
                self.exact(&buf, 4)?;
                Message::TunnelCredit {
                    id,
                    bytes: buf.get_u32(),
                }
            }
            _ => unreachable!("decode dispatches only tunnel types here"),
        })
    }

    /// RESPONSE_HEAD, RESPONSE_BODY, RESPONSE_END, RESET, PUSH_PROMISE: the
    /// origin's side.
    fn decode_response(self, mut buf: Bytes) -> Result<Message, DecodeError> {
        let (bad, id) = (|what| self.bad(what), self.id);
        Ok(match self.kind {
            MessageType::ResponseHead => {
                if buf.is_empty() {
                    return Err(bad("empty response head"));
                }
                self.at_most(&buf, MAX_HEAD)?;
                Message::ResponseHead { id, head: buf }
            }
            MessageType::ResponseBody => {
                self.at_most(&buf, MAX_CHUNK)?;
                Message::ResponseBody { id, data: buf }
            }
            MessageType::ResponseEnd => {
                self.exact(&buf, 8)?;
                Message::ResponseEnd {
                    id,
                    body_len: buf.get_u64(),
                }
            }
            MessageType::Reset => {
                if buf.len() < 2 {
                    return Err(bad("RESET shorter than 2 bytes"));
                }
                let code = ErrorCode::from_code(buf.get_u16());
                Message::Reset {
                    id,
                    code,
                    reason: reason(buf).map_err(bad)?,
                }
            }
            MessageType::PushPromise => {
                if buf.len() < 4 {
                    return Err(bad("PUSH_PROMISE shorter than 4 bytes"));
                }
                let page = buf.get_u32();
                self.at_most(&buf, MAX_HEAD)?;
                let promise = PushPromise {
                    id,
                    page,
                    head: buf,
                };
                check_push_promise(&promise).map_err(bad)?;
                Message::PushPromise(promise)
            }
            _ => unreachable!("decode dispatches only response types here"),
        })
    }
}

/// The 4 bytes REQUEST and PRIORITY share: urgency u8, class u8, reserved u16.
/// The caller has checked that they are there.
fn priority_fields(buf: &mut Bytes) -> Result<(Urgency, RequestClass), &'static str> {
    let urgency = Urgency::new(buf.get_u8()).ok_or("urgency above 7")?;
    let class = RequestClass::from_code(buf.get_u8()).ok_or("unknown request class")?;
    let _reserved = buf.get_u16();
    Ok((urgency, class))
}

fn reason(buf: Bytes) -> Result<String, &'static str> {
    if buf.len() > MAX_REASON {
        return Err("reason longer than MAX_REASON");
    }
    String::from_utf8(buf.to_vec()).map_err(|_| "reason is not UTF-8")
}

/// TUNNEL_OPEN's payload: port u16, family u8 (4 or 6), reserved u8, the
/// address (4 or 16 bytes), then the server name.
fn encode_tunnel_open(t: &TunnelOpen, out: &mut BytesMut) {
    out.put_u16(t.destination.port());
    match t.destination.ip() {
        IpAddr::V4(v4) => {
            out.put_u8(4);
            out.put_u8(0);
            out.put_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.put_u8(6);
            out.put_u8(0);
            out.put_slice(&v6.octets());
        }
    }
    out.put_slice(t.server_name.as_bytes());
}

fn tunnel_open_fields(mut buf: Bytes) -> Result<(SocketAddr, String), &'static str> {
    if buf.len() < 4 {
        return Err("TUNNEL_OPEN shorter than 4 bytes");
    }
    let port = buf.get_u16();
    let family = buf.get_u8();
    let _reserved = buf.get_u8();
    let ip = match family {
        4 if buf.len() >= 4 => {
            let mut octets = [0; 4];
            buf.copy_to_slice(&mut octets);
            IpAddr::V4(Ipv4Addr::from(octets))
        }
        6 if buf.len() >= 16 => {
            let mut octets = [0; 16];
            buf.copy_to_slice(&mut octets);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        4 | 6 => return Err("TUNNEL_OPEN address cut short"),
        _ => return Err("TUNNEL_OPEN address family neither 4 nor 6"),
    };
    let name = String::from_utf8(buf.to_vec()).map_err(|_| "server name is not UTF-8")?;
    if !valid_server_name(&name) {
        return Err("server name empty, too long or not a DNS name");
    }
    Ok((SocketAddr::new(ip, port), name))
}

/// A server name as SNI carries it: 1..=255 bytes of lower-case letters,
/// digits, `-`, `_` and `.` (RFC 6066 host names; upper case is folded by the
/// sender).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// PUSH_BUDGET's payload: max_pushes u16, held count u16, max_bytes u32, then
/// the held entries, each: flags u8, etag length u8, date length u8, reserved
/// u8, target length u16, then the target, the entity-tag and the date.
fn encode_push_budget(b: &PushBudget, out: &mut BytesMut) {
    out.put_u16(b.max_pushes);
    out.put_u16(b.held.len() as u16);
    out.put_u32(b.max_bytes);
    for e in &b.held {
        out.put_u8(if e.fresh { HELD_FRESH } else { 0 });
        out.put_u8(e.etag.len() as u8);
        out.put_u8(e.last_modified.len() as u8);
        out.put_u8(0);
        out.put_u16(e.target.len() as u16);
        out.put_slice(&e.target);
        out.put_slice(&e.etag);
        out.put_slice(&e.last_modified);
    }
}

/// PUSH_BUDGET's payload length, bytes.
fn push_budget_len(b: &PushBudget) -> usize {
    8 + b
        .held
        .iter()
        .map(|e| HELD_ENTRY_FIXED + e.target.len() + e.etag.len() + e.last_modified.len())
        .sum::<usize>()
}

fn push_budget_fields(page: RequestId, mut buf: Bytes) -> Result<PushBudget, &'static str> {
    if is_push_id(page) {
        return Err("PUSH_BUDGET for a push id");
    }
    if buf.len() < 8 {
        return Err("PUSH_BUDGET shorter than 8 bytes");
    }
    let max_pushes = buf.get_u16();
    let count = usize::from(buf.get_u16());
    let max_bytes = buf.get_u32();
    if count > MAX_HELD_ENTRIES {
        return Err("more held entries than MAX_HELD_ENTRIES");
    }
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        if buf.len() < HELD_ENTRY_FIXED {
            return Err("held entry cut short");
        }
        let flags = buf.get_u8();
        let etag_len = usize::from(buf.get_u8());
        let date_len = usize::from(buf.get_u8());
        let _reserved = buf.get_u8();
        let target_len = usize::from(buf.get_u16());
        if buf.len() < target_len + etag_len + date_len {
            return Err("held entry cut short");
        }
        let entry = HeldEntry {
            fresh: flags & HELD_FRESH != 0,
            target: buf.split_to(target_len),
            etag: buf.split_to(etag_len),
            last_modified: buf.split_to(date_len),
        };
        check_held_entry(&entry)?;
        held.push(entry);
    }
    if !buf.is_empty() {
        return Err("bytes after the last held entry");
    }
    Ok(PushBudget {
        page,
        max_pushes,
        max_bytes,
        held,
    })
}

/// A held entry names one URL by a plain origin-form target and carries
/// validators that can be copied into a conditional request as they are; a
/// stale entry without a validator could not be revalidated.
fn check_held_entry(e: &HeldEntry) -> Result<(), &'static str> {
    let visible = |b: &u8| (0x21..=0x7e).contains(b);
    if e.target.is_empty()
        || e.target.len() > MAX_HELD_TARGET
        || e.target[0] != b'/'
        || !e.target.iter().all(visible)
    {
        return Err("held target empty, too long, not origin-form or not visible ASCII");
    }
    if e.etag.len() > usize::from(u8::MAX) || !e.etag.iter().all(visible) {
        return Err("held entity-tag too long or not visible ASCII");
    }
    if e.last_modified.len() > usize::from(u8::MAX)
        || !e.last_modified.iter().all(|b| *b == b' ' || visible(b))
    {
        return Err("held date too long or not visible ASCII");
    }
    if !e.fresh && e.etag.is_empty() && e.last_modified.is_empty() {
        return Err("stale held entry without a validator");
    }
    Ok(())
}

fn check_push_budget(b: &PushBudget) -> Result<(), &'static str> {
    if b.page == 0 || is_push_id(b.page) {
        return Err("PUSH_BUDGET for request id 0 or a push id");
    }
    if b.held.len() > MAX_HELD_ENTRIES {
        return Err("more held entries than MAX_HELD_ENTRIES");
    }
    b.held.iter().try_for_each(check_held_entry)?;
    if push_budget_len(b) > MAX_HEAD {
        return Err("PUSH_BUDGET above MAX_HEAD");
    }
    Ok(())
}

fn check_push_promise(p: &PushPromise) -> Result<(), &'static str> {
    if !is_push_id(p.id) {
        return Err("PUSH_PROMISE whose id lacks the push bit");
    }
    if p.page == 0 || is_push_id(p.page) {
        return Err("PUSH_PROMISE for page 0 or for a push");
    }
    if p.head.len() > MAX_HEAD {
        return Err("push request head above MAX_HEAD");
    }
    push_head_host(&p.head).map(|_| ())
}

/// Request fields a push may never assume: credentials (a push is for
/// everyone who asks the page's host) and a body (a push answers a GET).
const FORBIDDEN_PUSH_FIELDS: [&str; 5] = [
    "cookie",
    "authorization",
    "proxy-authorization",
    "content-length",
    "transfer-encoding",
];

/// Checks a push's request head and returns its `Host` value: an HTTP/1.1
/// `GET` with an origin-form target (`/path?query`), exactly one non-empty
/// `Host`, at most [`MAX_PUSH_FIELDS`] fields, none of
/// Cookie, Authorization, Proxy-Authorization, Content-Length or
/// Transfer-Encoding, and nothing after the empty line. Parsed with
/// `httparse`.
pub fn push_head_host(head: &[u8]) -> Result<&[u8], &'static str> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_PUSH_FIELDS];
    let mut request = httparse::Request::new(&mut fields);
    let parsed = match request.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("push request head is incomplete"),
        Err(httparse::Error::TooManyHeaders) => {
            return Err("push request head has more than MAX_PUSH_FIELDS fields");
        }
        Err(_) => return Err("push request head is not HTTP/1.1"),
    };
    if parsed != head.len() {
        return Err("bytes after the push request head");
    }
    if request.method != Some("GET") {
        return Err("push request method is not GET");
    }
    if request.version != Some(1) {
        return Err("push request is not HTTP/1.1");
    }
    if !request.path.is_some_and(|p| p.starts_with('/')) {
        return Err("push request target is not origin-form");
    }
    let mut host = None;
    for field in request.headers.iter() {
        if field.name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Err("push request head with two Host fields");
            }
            host = Some(field.value);
        } else if FORBIDDEN_PUSH_FIELDS
            .iter()
            .any(|n| field.name.eq_ignore_ascii_case(n))
        {
            return Err("push request head carries credentials or a body");
        }
    }
    host.filter(|h| !h.is_empty())
        .ok_or("push request head without a Host")
}
