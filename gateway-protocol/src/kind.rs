//! The identities every other module names: the message type code and the
//! request id. A leaf: it imports nothing of this crate, so that `message`
//! (the layouts) and `error` (the reactions) can both use them without
//! importing each other.

/// Identifies one request and its response within an association. Chosen by the
/// gateway, never 0 (0 marks control messages that concern no request). Ids
/// with the top bit set ([`PUSH_ID_BIT`]) are push ids, chosen by the origin.
pub type RequestId = u32;

/// The bit that marks a push id: the origin numbers its pushes from
/// `0x8000_0000` up, the gateway its requests below it, so the two never meet.
pub const PUSH_ID_BIT: RequestId = 1 << 31;

/// True for an id in the origin's push space.
pub fn is_push_id(id: RequestId) -> bool {
    id & PUSH_ID_BIT != 0
}

/// The one-byte type code in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// Control: version, stream count, capabilities.
    Hello = 0x01,
    /// Control: per-stream backlog at the gateway.
    Feedback = 0x02,
    /// Control: stop sending the response to a request.
    Cancel = 0x03,
    /// Control: the association is closing; no new requests.
    GoAway = 0x04,
    /// Control: liveness probe and round-trip measurement.
    Ping = 0x05,
    /// Control: how many pushes in all the origin may promise (cumulative).
    MaxPushes = 0x06,
    /// Data: an HTTP/1.1 request head with urgency and class.
    Request = 0x10,
    /// Data: a chunk of a request body.
    RequestBody = 0x11,
    /// Data: new urgency and class for a request in flight.
    Priority = 0x12,
    /// Data: open a TLS tunnel to an original destination, by server name.
    TunnelOpen = 0x13,
    /// Data: tunnel bytes, either direction; END half-closes the sender's side.
    TunnelData = 0x14,
    /// Data: the origin grants the gateway more tunnel bytes.
    TunnelCredit = 0x15,
    /// Data: the gateway takes pushes for this page, within a budget, and
    /// lists what it already holds.
    PushBudget = 0x16,
    /// Data: an HTTP/1.1 response head.
    ResponseHead = 0x20,
    /// Data: a chunk of a response body.
    ResponseBody = 0x21,
    /// Data: the response is complete; carries the body length for verification.
    ResponseEnd = 0x22,
    /// Data: the request or response was abandoned, with a reason.
    Reset = 0x23,
    /// Data: the origin pushes a response; this is the request it answers.
    PushPromise = 0x24,
}

impl MessageType {
    /// Maps a wire code to a type; `None` for codes this version does not know.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0x01 => Self::Hello,
            0x02 => Self::Feedback,
            0x03 => Self::Cancel,
            0x04 => Self::GoAway,
            0x05 => Self::Ping,
            0x06 => Self::MaxPushes,
            0x10 => Self::Request,
            0x11 => Self::RequestBody,
            0x12 => Self::Priority,
            0x13 => Self::TunnelOpen,
            0x14 => Self::TunnelData,
            0x15 => Self::TunnelCredit,
            0x16 => Self::PushBudget,
            0x20 => Self::ResponseHead,
            0x21 => Self::ResponseBody,
            0x22 => Self::ResponseEnd,
            0x23 => Self::Reset,
            0x24 => Self::PushPromise,
            _ => return None,
        })
    }

    /// Control messages travel on stream 0 only; data messages never do.
    pub fn is_control(self) -> bool {
        (self as u8) < 0x10
    }
}
