//! The per-association protocol state machine: handshake, stream placement and
//! per-request sequencing. I/O-free: the driver hands it every received transport
//! message with its stream number and tells it what it sent; it answers with the
//! message to act on or the [`Reaction`] owed to the peer.
//!
//! What it checks is the "Errors" table of docs/protocol.md; what it leaves to the
//! application is everything about HTTP.

use std::collections::HashMap;

use bytes::Bytes;

use crate::error::{DecodeError, ErrorCode, Reaction};
use crate::message::{Capabilities, Hello, Message, MessageType, RequestId};
use crate::{CONTROL_STREAM, MAX_CHUNK, TUNNEL_WINDOW, VERSION};

/// Which end of the association this session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends HELLO first, issues requests, receives responses.
    Gateway,
    /// Answers HELLO, receives requests, sends responses.
    Origin,
}

/// What this side offers in its HELLO.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Data streams the transport granted (streams 1..=n).
    pub data_streams: u16,
    /// Largest body chunk this side accepts, bytes; at most [`MAX_CHUNK`].
    pub max_chunk: u32,
    /// Capabilities offered.
    pub capabilities: Capabilities,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            data_streams: 1,
            max_chunk: MAX_CHUNK as u32,
            capabilities: Capabilities::FEEDBACK
                | Capabilities::PREFETCH_CLASS
                | Capabilities::PRIORITY
                | Capabilities::TUNNEL,
        }
    }
}

/// One open tunnel's half-closes and, at the origin, the gateway's window.
#[derive(Debug, Clone, Copy)]
struct TunnelState {
    /// The peer sent TUNNEL_DATA with END.
    received_end: bool,
    /// This side sent TUNNEL_DATA with END.
    sent_end: bool,
    /// Origin: bytes the gateway may still send (TUNNEL_WINDOW, plus credit
    /// granted, minus bytes received).
    window: u64,
}

impl TunnelState {
    fn new() -> Self {
        Self {
            received_end: false,
            sent_end: false,
            window: u64::from(TUNNEL_WINDOW),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No HELLO received yet.
    AwaitingHello,
    /// HELLO exchanged.
    Open,
    /// The peer sent GOAWAY; no new requests either way.
    PeerGoingAway,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Gateway: sent, no RESPONSE_HEAD yet. Origin: receiving the request body.
    Head,
    /// Gateway: RESPONSE_HEAD seen, body chunks flowing. Origin: request complete.
    Body,
}

#[derive(Debug, Clone, Copy)]
struct OpenRequest {
    stream: u16,
    phase: Phase,
    body_bytes: u64,
    /// Set for a tunnel (TUNNEL_OPEN), `None` for a request.
    tunnel: Option<TunnelState>,
}

/// The state of one association's protocol.
#[derive(Debug)]
pub struct Session {
    role: Role,
    config: SessionConfig,
    state: State,
    /// Data streams both sides may use: the minimum of both HELLOs.
    data_streams: u16,
    /// Chunk limit the peer accepts, from its HELLO.
    peer_max_chunk: u32,
    peer_capabilities: Capabilities,
    open: HashMap<RequestId, OpenRequest>,
    /// Highest request id seen (origin) or issued (gateway) per data stream. Ids
    /// increase within a stream; across streams the transport does not order them.
    last_id: HashMap<u16, RequestId>,
}

impl Session {
    /// A session that has exchanged nothing yet.
    pub fn new(role: Role, config: SessionConfig) -> Self {
        let data_streams = config.data_streams;
        Self {
            role,
            config,
            state: State::AwaitingHello,
            data_streams,
            peer_max_chunk: MAX_CHUNK as u32,
            peer_capabilities: Capabilities::default(),
            open: HashMap::new(),
            last_id: HashMap::new(),
        }
    }

    /// The HELLO this side sends: the gateway first, the origin in answer (`ack`).
    pub fn hello(&self) -> Message {
        Message::Hello(Hello {
            ack: self.role == Role::Origin,
            version: VERSION,
            data_streams: self.config.data_streams,
            max_chunk: self.config.max_chunk,
            capabilities: self.config.capabilities,
        })
    }

    /// True once the peer's HELLO has been accepted.
    pub fn is_open(&self) -> bool {
        self.state != State::AwaitingHello
    }

    /// True once the peer sent GOAWAY.
    pub fn peer_going_away(&self) -> bool {
        self.state == State::PeerGoingAway
    }

    /// Data streams usable in both directions (1..=n), after the handshake.
    pub fn data_streams(&self) -> u16 {
        self.data_streams
    }

    /// The largest body chunk the peer accepts.
    pub fn peer_max_chunk(&self) -> u32 {
        self.peer_max_chunk
    }

    /// Capabilities the peer announced.
    pub fn peer_capabilities(&self) -> Capabilities {
        self.peer_capabilities
    }

    /// Requests currently open.
    pub fn open_requests(&self) -> usize {
        self.open.len()
    }

    /// Gateway: whether a PRIORITY for `id` may be sent now, that is, the origin
    /// announced [`Capabilities::PRIORITY`] and the request is open (sent, and its
    /// response has not ended). The PRIORITY goes on the request's stream.
    ///
    /// Even so it may cross the response's end in flight; the origin ignores it
    /// then (docs/protocol.md, PRIORITY).
    pub fn may_send_priority(&self, id: RequestId) -> bool {
        self.role == Role::Gateway
            && self.peer_capabilities.contains(Capabilities::PRIORITY)
            && self.open.contains_key(&id)
    }

    /// Gateway: records a REQUEST about to be sent on `stream`. Fails (and records
    /// nothing) if the id would break the per-stream ordering or the stream is not a
    /// data stream: both are bugs in the caller.
    pub fn handle_request_sent(&mut self, id: RequestId, stream: u16) -> Result<(), ErrorCode> {
        debug_assert_eq!(self.role, Role::Gateway);
        if id == 0 || stream == CONTROL_STREAM || stream > self.data_streams {
            return Err(ErrorCode::InternalError);
        }
        let last = self.last_id.entry(stream).or_insert(0);
        if id <= *last || self.open.contains_key(&id) {
            return Err(ErrorCode::InternalError);
        }
        *last = id;
        self.open.insert(
            id,
            OpenRequest {
                stream,
                phase: Phase::Head,
                body_bytes: 0,
                tunnel: None,
            },
        );
        Ok(())
    }

    /// Gateway: whether the origin serves tunnels (announced
    /// [`Capabilities::TUNNEL`]); TUNNEL_OPEN goes only to one that does.
    pub fn may_open_tunnel(&self) -> bool {
        self.role == Role::Gateway && self.peer_capabilities.contains(Capabilities::TUNNEL)
    }

    /// Gateway: records a TUNNEL_OPEN about to be sent on `stream`; the same
    /// rules as [`Session::handle_request_sent`], and the origin must serve
    /// tunnels.
    pub fn handle_tunnel_sent(&mut self, id: RequestId, stream: u16) -> Result<(), ErrorCode> {
        if !self.may_open_tunnel() {
            return Err(ErrorCode::Refused);
        }
        self.handle_request_sent(id, stream)?;
        if let Some(open) = self.open.get_mut(&id) {
            open.tunnel = Some(TunnelState::new());
        }
        Ok(())
    }

    /// Either side: this side sent TUNNEL_DATA with END on tunnel `id`. Returns
    /// true when the tunnel is over (the peer's END came too): it is forgotten.
    pub fn handle_tunnel_end_sent(&mut self, id: RequestId) -> bool {
        let Some(tunnel) = self.open.get_mut(&id).and_then(|o| o.tunnel.as_mut()) else {
            return true;
        };
        tunnel.sent_end = true;
        if tunnel.received_end {
            self.open.remove(&id);
            return true;
        }
        false
    }

    /// Origin: this side sent TUNNEL_CREDIT of `bytes` for tunnel `id`.
    pub fn handle_credit_sent(&mut self, id: RequestId, bytes: u32) {
        if let Some(tunnel) = self.open.get_mut(&id).and_then(|o| o.tunnel.as_mut()) {
            tunnel.window = tunnel.window.saturating_add(u64::from(bytes));
        }
    }

    /// Either side: forget a request that this side ended (origin sent
    /// RESPONSE_END or RESET; gateway sent CANCEL or RESET). Later messages for it
    /// are ignored.
    pub fn handle_request_finished(&mut self, id: RequestId) {
        self.open.remove(&id);
    }

    /// Validates one received transport message. `Ok` is a message for the
    /// application; `Err` is what to do instead ([`Reaction::Ignore`] included).
    pub fn handle_message(&mut self, stream: u16, bytes: &Bytes) -> Result<Message, Reaction> {
        let message = Message::decode(bytes).map_err(|e| self.react_to_decode_error(e))?;
        let kind = message.message_type();
        if kind == MessageType::Priority && self.ignores_priority() {
            return Err(Reaction::Ignore);
        }
        let protocol_error = Reaction::GoAway {
            code: ErrorCode::ProtocolError,
        };
        if kind.is_control() != (stream == CONTROL_STREAM) {
            return Err(protocol_error);
        }
        if stream > self.data_streams {
            return Err(protocol_error);
        }
        if self.state == State::AwaitingHello {
            return match message {
                Message::Hello(hello) => self.accept_hello(hello),
                _ => Err(protocol_error),
            };
        }
        match &message {
            Message::Hello(_) => Err(protocol_error),
            Message::GoAway(_) => {
                self.state = State::PeerGoingAway;
                Ok(message)
            }
            Message::Ping { .. } => Ok(message),
            Message::Feedback(_) | Message::Cancel { .. } => match self.role {
                Role::Origin => Ok(message),
                Role::Gateway => Err(protocol_error),
            },
            Message::Request(_)
            | Message::RequestBody { .. }
            | Message::Priority { .. }
            | Message::TunnelOpen(_) => match self.role {
                Role::Origin => self.origin_receives(stream, message),
                Role::Gateway => Err(protocol_error),
            },
            Message::TunnelData { .. } => self.tunnel_data_received(stream, message),
            Message::TunnelCredit { .. } => match self.role {
                Role::Gateway => self.gateway_receives(stream, message),
                Role::Origin => Err(protocol_error),
            },
            Message::ResponseHead { .. }
            | Message::ResponseBody { .. }
            | Message::ResponseEnd { .. }
            | Message::Reset { .. } => match (self.role, &message) {
                (Role::Gateway, _) => self.gateway_receives(stream, message),
                // The gateway resets requests it abandons; nothing else flows back.
                (Role::Origin, Message::Reset { id, .. }) => {
                    let id = *id;
                    if self.open.remove(&id).is_some() {
                        Ok(message)
                    } else {
                        Err(Reaction::Ignore)
                    }
                }
                (Role::Origin, _) => Err(protocol_error),
            },
        }
    }

    fn react_to_decode_error(&mut self, error: DecodeError) -> Reaction {
        if let DecodeError::BadPayload {
            kind: MessageType::Priority,
            ..
        } = error
            && self.ignores_priority()
        {
            return Reaction::Ignore;
        }
        let reaction = error.reaction();
        if let Reaction::Reset { id, .. } = reaction {
            // A request we do not know cannot be reset: there is nothing to stop.
            if self.open.remove(&id).is_none() {
                return Reaction::Ignore;
            }
        }
        reaction
    }

    /// An origin that did not announce PRIORITY ignores every PRIORITY, wherever
    /// and however it arrives, as an origin that predates the type would (to it,
    /// 0x12 is an unknown type).
    fn ignores_priority(&self) -> bool {
        self.role == Role::Origin && !self.config.capabilities.contains(Capabilities::PRIORITY)
    }

    fn accept_hello(&mut self, hello: Hello) -> Result<Message, Reaction> {
        let expect_ack = self.role == Role::Gateway;
        if hello.version != VERSION {
            return Err(Reaction::GoAway {
                code: ErrorCode::VersionMismatch,
            });
        }
        if hello.ack != expect_ack || hello.data_streams == 0 || hello.max_chunk == 0 {
            return Err(Reaction::GoAway {
                code: ErrorCode::ProtocolError,
            });
        }
        self.data_streams = self.config.data_streams.min(hello.data_streams);
        self.peer_max_chunk = hello.max_chunk.min(MAX_CHUNK as u32);
        self.peer_capabilities = hello.capabilities;
        self.state = State::Open;
        Ok(Message::Hello(hello))
    }

    fn origin_receives(&mut self, stream: u16, message: Message) -> Result<Message, Reaction> {
        let reset = |id, code| Err(Reaction::Reset { id, code });
        match &message {
            Message::Request(request) => {
                let id = request.id;
                if self.state == State::PeerGoingAway {
                    return reset(id, ErrorCode::Refused);
                }
                let last = self.last_id.entry(stream).or_insert(0);
                if id <= *last || self.open.contains_key(&id) {
                    return reset(id, ErrorCode::ProtocolError);
                }
                *last = id;
                let phase = if request.end {
                    Phase::Body
                } else {
                    Phase::Head
                };
                self.open.insert(
                    id,
                    OpenRequest {
                        stream,
                        phase,
                        body_bytes: 0,
                        tunnel: None,
                    },
                );
                Ok(message)
            }
            Message::TunnelOpen(open) => {
                let id = open.id;
                if self.state == State::PeerGoingAway
                    || !self.config.capabilities.contains(Capabilities::TUNNEL)
                {
                    return reset(id, ErrorCode::Refused);
                }
                let last = self.last_id.entry(stream).or_insert(0);
                if id <= *last || self.open.contains_key(&id) {
                    return reset(id, ErrorCode::ProtocolError);
                }
                *last = id;
                self.open.insert(
                    id,
                    OpenRequest {
                        stream,
                        phase: Phase::Body,
                        body_bytes: 0,
                        tunnel: Some(TunnelState::new()),
                    },
                );
                Ok(message)
            }
            Message::RequestBody { id, end, data } => {
                let (id, end) = (*id, *end);
                let Some(open) = self.open.get_mut(&id) else {
                    let seen = self.last_id.get(&stream).is_some_and(|last| id <= *last);
                    return if seen {
                        Err(Reaction::Ignore)
                    } else {
                        reset(id, ErrorCode::ProtocolError)
                    };
                };
                if open.stream != stream || open.phase != Phase::Head || open.tunnel.is_some() {
                    self.open.remove(&id);
                    return reset(id, ErrorCode::ProtocolError);
                }
                if data.len() > self.config.max_chunk as usize {
                    self.open.remove(&id);
                    return reset(id, ErrorCode::TooLarge);
                }
                open.body_bytes += data.len() as u64;
                if end {
                    open.phase = Phase::Body;
                }
                Ok(message)
            }
            Message::Priority { id, .. } => {
                let id = *id;
                let Some(open) = self.open.get(&id) else {
                    // A request that has ended is normal: the PRIORITY crossed
                    // its RESPONSE_END or RESET in flight.
                    let seen = self.last_id.get(&stream).is_some_and(|last| id <= *last);
                    return if seen {
                        Err(Reaction::Ignore)
                    } else {
                        reset(id, ErrorCode::ProtocolError)
                    };
                };
                if open.stream != stream || open.tunnel.is_some() {
                    self.open.remove(&id);
                    return reset(id, ErrorCode::ProtocolError);
                }
                Ok(message)
            }
            _ => unreachable!("origin_receives is only called with request messages"),
        }
    }

    /// TUNNEL_DATA, at either side: on its tunnel's stream, within the
    /// receiver's chunk limit, not after the sender's END, and at the origin
    /// within the window it granted.
    fn tunnel_data_received(&mut self, stream: u16, message: Message) -> Result<Message, Reaction> {
        let Message::TunnelData { id, end, data } = &message else {
            unreachable!("tunnel_data_received is only called with TUNNEL_DATA");
        };
        let (id, end, len) = (*id, *end, data.len());
        let Some(open) = self.open.get_mut(&id) else {
            let seen = self.last_id.get(&stream).is_some_and(|last| id <= *last);
            return Err(match (seen, self.role) {
                (true, _) => Reaction::Ignore,
                (false, Role::Origin) => Reaction::Reset {
                    id,
                    code: ErrorCode::ProtocolError,
                },
                (false, Role::Gateway) => Reaction::GoAway {
                    code: ErrorCode::ProtocolError,
                },
            });
        };
        let role = self.role;
        let max_chunk = self.config.max_chunk as usize;
        let verdict = match open.tunnel.as_mut() {
            _ if open.stream != stream => Err(ErrorCode::ProtocolError),
            None => Err(ErrorCode::ProtocolError),
            Some(t) if t.received_end => Err(ErrorCode::ProtocolError),
            Some(_) if len > max_chunk => Err(ErrorCode::TooLarge),
            Some(t) if role == Role::Origin && len as u64 > t.window => {
                Err(ErrorCode::ProtocolError)
            }
            Some(t) => {
                if role == Role::Origin {
                    t.window -= len as u64;
                }
                t.received_end = end;
                Ok(end && t.sent_end)
            }
        };
        match verdict {
            Ok(over) => {
                if over {
                    self.open.remove(&id);
                }
                Ok(message)
            }
            Err(code) => {
                self.open.remove(&id);
                Err(Reaction::Reset { id, code })
            }
        }
    }

    fn gateway_receives(&mut self, stream: u16, message: Message) -> Result<Message, Reaction> {
        let id = message.request_id();
        let Some(open) = self.open.get_mut(&id) else {
            let issued = self.last_id.get(&stream).is_some_and(|last| id <= *last);
            // Late messages for a request we cancelled or finished are expected;
            // answers to requests never issued on this stream mean a confused peer.
            return Err(if issued {
                Reaction::Ignore
            } else {
                Reaction::GoAway {
                    code: ErrorCode::ProtocolError,
                }
            });
        };
        let violation = |code| Reaction::Reset { id, code };
        let outcome = if open.stream != stream {
            Err(violation(ErrorCode::ProtocolError))
        } else if open.tunnel.is_some() {
            // A tunnel stays open through credits; RESET ends it; a
            // response message has no place on it.
            match message {
                Message::TunnelCredit { .. } => return Ok(message),
                Message::Reset { .. } => Ok(message),
                _ => Err(violation(ErrorCode::ProtocolError)),
            }
        } else if matches!(message, Message::TunnelCredit { .. }) {
            Err(violation(ErrorCode::ProtocolError))
        } else {
            match (&message, open.phase) {
                (Message::ResponseHead { .. }, Phase::Head) => {
                    open.phase = Phase::Body;
                    return Ok(message);
                }
                (Message::ResponseBody { data, .. }, Phase::Body) => {
                    if data.len() > self.config.max_chunk as usize {
                        Err(violation(ErrorCode::TooLarge))
                    } else {
                        open.body_bytes += data.len() as u64;
                        return Ok(message);
                    }
                }
                (Message::ResponseEnd { body_len, .. }, Phase::Body) => {
                    if *body_len == open.body_bytes {
                        Ok(message)
                    } else {
                        Err(violation(ErrorCode::ProtocolError))
                    }
                }
                (Message::Reset { .. }, _) => Ok(message),
                _ => Err(violation(ErrorCode::ProtocolError)),
            }
        };
        // Every path that reaches here ends the request.
        self.open.remove(&id);
        outcome
    }
}
