//! The per-association protocol state machine: handshake, stream placement and
//! per-request sequencing. I/O-free: the driver hands it every received transport
//! message with its stream number and tells it what it sent; it answers with the
//! message to act on or the [`Reaction`] owed to the peer.
//!
//! What it checks is the "Errors" table of docs/protocol.md; what it leaves to the
//! application is everything about HTTP, except the few rules a push's request
//! head must keep (GET, the page's host, no credentials).
//!
//! Pushes (docs/protocol.md, "PUSH") live beside the requests: a push is an
//! open entry under its push id, tied to its page's allowance (the
//! PUSH_BUDGET), and the association-wide grant (MAX_PUSHES) counts promises.
//!
//! ```text
//!  gateway                                          origin
//!  REQUEST page ──────── page's stream ───────────▶
//!  PUSH_BUDGET page ──── page's stream ───────────▶ allowance opens
//!  MAX_PUSHES n ──────── stream 0 ────────────────▶ grant (cumulative)
//!            ◀─ any stream ─ PUSH_PROMISE push (page, GET head)
//!            ◀─ same stream ─ RESPONSE_HEAD/BODY/END push
//!  CANCEL push (stream 0) or RESET push ──────────▶ push ends
//!  CANCEL/RESET page ─────────────────────────────▶ allowance and pushes end
//! ```

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::error::{DecodeError, ErrorCode, Reaction};
use crate::message::{
    Capabilities, Hello, Message, MessageType, PushBudget, PushPromise, RequestId, is_push_id,
    push_head_host,
};
use crate::{CONTROL_STREAM, MAX_CHUNK, MAX_PUSH_PAGES, TUNNEL_WINDOW, VERSION};

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
    /// Set for a push: its page's request id.
    push_page: Option<RequestId>,
    /// Gateway: a PUSH_BUDGET was sent for this request (its allowance may
    /// since have been forgotten).
    budgeted: bool,
}

impl OpenRequest {
    fn new(stream: u16, phase: Phase) -> Self {
        Self {
            stream,
            phase,
            body_bytes: 0,
            tunnel: None,
            push_page: None,
            budgeted: false,
        }
    }
}

/// One page's push allowance (its PUSH_BUDGET), as each side counts it.
#[derive(Debug, Clone)]
struct PushPage {
    /// Gateway: the page's Host, which each of its pushes must name.
    host: Bytes,
    /// Promises the page may still take.
    pushes_left: u16,
    /// RESPONSE_BODY bytes its pushes may still carry.
    bytes_left: u64,
    /// Its pushes still open.
    open_pushes: u32,
}

/// What an origin may still push for a page ([`Session::push_allowance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushAllowance {
    /// Promises it may send for the page now: the page's own count, capped by
    /// what is left of the association's grant.
    pub pushes: u64,
    /// RESPONSE_BODY bytes the page's pushes may still carry.
    pub bytes: u64,
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
    /// Highest push id promised per data stream (origin sent, gateway received).
    last_push_id: HashMap<u16, RequestId>,
    /// Push allowances by page, and the order they came in (oldest first).
    push_pages: HashMap<RequestId, PushPage>,
    push_page_order: VecDeque<RequestId>,
    /// The association's push grant: the highest MAX_PUSHES sent (gateway) or
    /// received (origin).
    pushes_granted: u64,
    /// PUSH_PROMISEs sent (origin) or received (gateway), refused ones included.
    pushes_promised: u64,
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
            last_push_id: HashMap::new(),
            push_pages: HashMap::new(),
            push_page_order: VecDeque::new(),
            pushes_granted: 0,
            pushes_promised: 0,
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
        if id == 0 || is_push_id(id) || stream == CONTROL_STREAM || stream > self.data_streams {
            return Err(ErrorCode::InternalError);
        }
        let last = self.last_id.entry(stream).or_insert(0);
        if id <= *last || self.open.contains_key(&id) {
            return Err(ErrorCode::InternalError);
        }
        *last = id;
        self.open.insert(id, OpenRequest::new(stream, Phase::Head));
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
            self.forget(id);
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

    /// Either side: forget a request or push that this side ended (origin sent
    /// RESPONSE_END or RESET; gateway sent CANCEL or RESET). Later messages for it
    /// are ignored. At the gateway, ending a page also ends its push allowance
    /// and forgets its pushes: the origin stops them when the CANCEL or RESET
    /// arrives (docs/protocol.md, "PUSH").
    pub fn handle_request_finished(&mut self, id: RequestId) {
        self.forget(id);
        if self.role == Role::Gateway {
            self.retire_push_page(id);
        }
    }

    /// True once both sides announced [`Capabilities::PUSH`].
    pub fn pushes_negotiated(&self) -> bool {
        self.config.capabilities.contains(Capabilities::PUSH)
            && self.peer_capabilities.contains(Capabilities::PUSH)
    }

    /// Gateway: records a MAX_PUSHES about to be sent. A grant never shrinks:
    /// a smaller `max` than before changes nothing (and the origin ignores it).
    pub fn handle_max_pushes_sent(&mut self, max: u32) {
        self.pushes_granted = self.pushes_granted.max(u64::from(max));
    }

    /// Gateway: records a PUSH_BUDGET about to be sent on `stream` for a page
    /// whose request head names `host`. The page must be an open request on
    /// that stream without a budget yet, and the origin must take pushes.
    /// `Refused` when pushes are not negotiated or [`MAX_PUSH_PAGES`] pages
    /// with pushes still open hold every place (send no budget then); other
    /// errors are bugs in the caller. Records nothing on error.
    pub fn handle_push_budget_sent(
        &mut self,
        budget: &PushBudget,
        stream: u16,
        host: &[u8],
    ) -> Result<(), ErrorCode> {
        debug_assert_eq!(self.role, Role::Gateway);
        if !self.pushes_negotiated() {
            return Err(ErrorCode::Refused);
        }
        let page = budget.page;
        let fits = self
            .open
            .get(&page)
            .is_some_and(|o| o.stream == stream && o.tunnel.is_none() && o.push_page.is_none());
        if !fits || self.push_pages.contains_key(&page) || host.is_empty() {
            return Err(ErrorCode::InternalError);
        }
        if self.push_pages.len() >= MAX_PUSH_PAGES && !self.make_push_page_room() {
            return Err(ErrorCode::Refused);
        }
        self.add_push_page(page, budget, Bytes::copy_from_slice(host));
        if let Some(open) = self.open.get_mut(&page) {
            open.budgeted = true;
        }
        Ok(())
    }

    /// Origin: what it may still push for `page`, or `None` when it may push
    /// nothing for it (no budget, the budget spent, no grant left, pushes not
    /// negotiated, or the gateway is going away).
    pub fn push_allowance(&self, page: RequestId) -> Option<PushAllowance> {
        if self.role != Role::Origin || !self.pushes_negotiated() || self.state != State::Open {
            return None;
        }
        let granted = self.pushes_granted.saturating_sub(self.pushes_promised);
        let allowance = self.push_pages.get(&page)?;
        let pushes = granted.min(u64::from(allowance.pushes_left));
        (pushes > 0).then_some(PushAllowance {
            pushes,
            bytes: allowance.bytes_left,
        })
    }

    /// Origin: records a PUSH_PROMISE `id` for `page` about to be sent on
    /// `stream`. `Refused` when [`Session::push_allowance`] allows none;
    /// `InternalError` for an id that lacks the push bit, does not rise on
    /// its stream or is open, or a stream out of range. Records nothing on
    /// error.
    pub fn handle_push_sent(
        &mut self,
        id: RequestId,
        page: RequestId,
        stream: u16,
    ) -> Result<(), ErrorCode> {
        debug_assert_eq!(self.role, Role::Origin);
        if !is_push_id(id) || stream == CONTROL_STREAM || stream > self.data_streams {
            return Err(ErrorCode::InternalError);
        }
        if self
            .last_push_id
            .get(&stream)
            .is_some_and(|last| id <= *last)
            || self.open.contains_key(&id)
        {
            return Err(ErrorCode::InternalError);
        }
        if self.push_allowance(page).is_none() {
            return Err(ErrorCode::Refused);
        }
        self.last_push_id.insert(stream, id);
        self.pushes_promised += 1;
        self.open_push(id, page, stream);
        Ok(())
    }

    /// Origin: records `len` RESPONSE_BODY bytes about to be sent for push
    /// `id`. `TooLarge` (and nothing recorded) if they would take its page
    /// beyond the budget: reset the push instead.
    pub fn handle_push_body_sent(&mut self, id: RequestId, len: usize) -> Result<(), ErrorCode> {
        let Some(page) = self.open.get(&id).and_then(|o| o.push_page) else {
            return Ok(());
        };
        // An allowance is kept while a push of its page is open; a push
        // whose page the gateway ended is being stopped anyway.
        let Some(allowance) = self.push_pages.get_mut(&page) else {
            return Ok(());
        };
        if len as u64 > allowance.bytes_left {
            return Err(ErrorCode::TooLarge);
        }
        allowance.bytes_left -= len as u64;
        Ok(())
    }

    /// Origin: the pushes of `page` still open, so that a CANCEL or RESET of
    /// the page can stop each of them.
    pub fn pushes_of(&self, page: RequestId) -> Vec<RequestId> {
        let mut pushes: Vec<RequestId> = self
            .open
            .iter()
            .filter(|(_, o)| o.push_page == Some(page))
            .map(|(id, _)| *id)
            .collect();
        pushes.sort_unstable();
        pushes
    }

    /// PUSH_PROMISEs sent (origin) or received (gateway) since the
    /// association began, refused and malformed ones included: what the
    /// grant counts. A gateway that keeps `k` pushes in flight grants
    /// `k + pushes_promised() - open_pushes()` (docs/protocol.md, MAX_PUSHES).
    pub fn pushes_promised(&self) -> u64 {
        self.pushes_promised
    }

    /// Pushes open now (either side).
    pub fn open_pushes(&self) -> usize {
        self.open.values().filter(|o| o.push_page.is_some()).count()
    }

    /// Removes an open request or push; a push leaves its page's count.
    fn forget(&mut self, id: RequestId) -> Option<OpenRequest> {
        let open = self.open.remove(&id)?;
        if let Some(page) = open.push_page
            && let Some(allowance) = self.push_pages.get_mut(&page)
        {
            allowance.open_pushes = allowance.open_pushes.saturating_sub(1);
        }
        Some(open)
    }

    /// Ends `page`'s allowance. The gateway also forgets the page's pushes
    /// (anything later for them is ignored); the origin keeps them open until
    /// it has stopped each ([`Session::pushes_of`]).
    fn retire_push_page(&mut self, page: RequestId) {
        if self.push_pages.remove(&page).is_none() {
            return;
        }
        self.push_page_order.retain(|p| *p != page);
        if self.role == Role::Gateway {
            self.open.retain(|_, o| o.push_page != Some(page));
        }
    }

    /// Forgets the oldest allowance none of whose pushes is open; false if
    /// every one has a push open. Both sides keep the allowance of a page
    /// with pushes open, so that its byte budget is counted to the end.
    fn make_push_page_room(&mut self) -> bool {
        let Some(at) = self
            .push_page_order
            .iter()
            .position(|p| self.push_pages.get(p).is_none_or(|a| a.open_pushes == 0))
        else {
            return false;
        };
        if let Some(old) = self.push_page_order.remove(at) {
            self.push_pages.remove(&old);
        }
        true
    }

    fn add_push_page(&mut self, page: RequestId, budget: &PushBudget, host: Bytes) {
        self.push_pages.insert(
            page,
            PushPage {
                host,
                pushes_left: budget.max_pushes,
                bytes_left: u64::from(budget.max_bytes),
                open_pushes: 0,
            },
        );
        self.push_page_order.push_back(page);
    }

    fn open_push(&mut self, id: RequestId, page: RequestId, stream: u16) {
        if let Some(allowance) = self.push_pages.get_mut(&page) {
            allowance.pushes_left = allowance.pushes_left.saturating_sub(1);
            allowance.open_pushes += 1;
        }
        let mut open = OpenRequest::new(stream, Phase::Head);
        open.push_page = Some(page);
        self.open.insert(id, open);
    }

    /// The highest id this side issued or saw on `stream`, in the space `id`
    /// belongs to (requests or pushes).
    fn seen_on_stream(&self, stream: u16, id: RequestId) -> bool {
        let last = if is_push_id(id) {
            &self.last_push_id
        } else {
            &self.last_id
        };
        last.get(&stream).is_some_and(|last| id <= *last)
    }

    /// Validates one received transport message. `Ok` is a message for the
    /// application; `Err` is what to do instead ([`Reaction::Ignore`] included).
    pub fn handle_message(&mut self, stream: u16, bytes: &Bytes) -> Result<Message, Reaction> {
        let message = Message::decode(bytes).map_err(|e| self.react_to_decode_error(stream, e))?;
        let kind = message.message_type();
        if kind == MessageType::Priority && self.ignores_priority() {
            return Err(Reaction::Ignore);
        }
        if self.ignores_push_offers(kind) {
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
            Message::Feedback(_) => match self.role {
                Role::Origin => Ok(message),
                Role::Gateway => Err(protocol_error),
            },
            Message::Cancel { id } => match self.role {
                Role::Origin => {
                    self.retire_push_page(*id);
                    Ok(message)
                }
                Role::Gateway => Err(protocol_error),
            },
            Message::MaxPushes { max } => match self.role {
                Role::Origin => {
                    self.pushes_granted = self.pushes_granted.max(u64::from(*max));
                    Ok(message)
                }
                Role::Gateway => Err(protocol_error),
            },
            Message::PushPromise(_) => match self.role {
                Role::Gateway => self.push_promised(stream, message),
                Role::Origin => Err(protocol_error),
            },
            Message::Request(_)
            | Message::RequestBody { .. }
            | Message::Priority { .. }
            | Message::PushBudget(_)
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
                    self.retire_push_page(id);
                    if self.forget(id).is_some() {
                        Ok(message)
                    } else {
                        Err(Reaction::Ignore)
                    }
                }
                (Role::Origin, _) => Err(protocol_error),
            },
        }
    }

    fn react_to_decode_error(&mut self, stream: u16, error: DecodeError) -> Reaction {
        let kind = match error {
            DecodeError::BadPayload { kind, .. } | DecodeError::TooLarge { kind, .. } => Some(kind),
            DecodeError::ShortHeader { .. } | DecodeError::UnknownType { .. } => None,
        };
        if kind == Some(MessageType::Priority) && self.ignores_priority() {
            return Reaction::Ignore;
        }
        if kind.is_some_and(|k| self.ignores_push_offers(k)) {
            return Reaction::Ignore;
        }
        let reaction = error.reaction();
        if kind == Some(MessageType::PushBudget) && self.role == Role::Gateway {
            // A message the gateway never receives, however it is laid out.
            return Reaction::GoAway {
                code: ErrorCode::ProtocolError,
            };
        }
        if kind == Some(MessageType::PushPromise) {
            return self.bad_push_promise(stream, reaction);
        }
        if let Reaction::Reset { id, .. } = reaction {
            // A request we do not know cannot be reset: there is nothing to stop.
            if self.forget(id).is_none() {
                return Reaction::Ignore;
            }
        }
        reaction
    }

    /// An origin that did not announce PUSH ignores MAX_PUSHES and
    /// PUSH_BUDGET (to one that predates them they are unknown types), and so
    /// does one whose gateway did not announce PUSH: it will push nothing.
    fn ignores_push_offers(&self, kind: MessageType) -> bool {
        self.role == Role::Origin
            && matches!(kind, MessageType::MaxPushes | MessageType::PushBudget)
            && !self.pushes_negotiated()
    }

    /// A PUSH_PROMISE that did not decode. Where a well-formed one would be a
    /// protocol error of the association, so is this one; otherwise the push
    /// is refused by RESET (its id now counts as seen on the stream, so what
    /// follows for it is ignored) and counts against the grant.
    fn bad_push_promise(&mut self, stream: u16, reaction: Reaction) -> Reaction {
        let protocol_error = Reaction::GoAway {
            code: ErrorCode::ProtocolError,
        };
        let Reaction::Reset { id, .. } = reaction else {
            return reaction;
        };
        if self.role != Role::Gateway
            || self.state == State::AwaitingHello
            || stream == CONTROL_STREAM
            || stream > self.data_streams
            || !self.pushes_negotiated()
            || !is_push_id(id)
        {
            return protocol_error;
        }
        self.pushes_promised += 1;
        if self.pushes_promised > self.pushes_granted {
            return protocol_error;
        }
        if !self.seen_on_stream(stream, id) {
            self.last_push_id.insert(stream, id);
        }
        self.forget(id);
        reaction
    }

    /// Gateway: a well-formed PUSH_PROMISE on `stream`. The checks, in order:
    /// pushes negotiated, the grant, the id's order on its stream, the
    /// origin's GOAWAY, the page's allowance, its count and its host.
    fn push_promised(&mut self, stream: u16, message: Message) -> Result<Message, Reaction> {
        let Message::PushPromise(PushPromise { id, page, head }) = &message else {
            unreachable!("push_promised is only called with PUSH_PROMISE");
        };
        let (id, page) = (*id, *page);
        let protocol_error = Reaction::GoAway {
            code: ErrorCode::ProtocolError,
        };
        if !self.pushes_negotiated() {
            return Err(protocol_error);
        }
        self.pushes_promised += 1;
        if self.pushes_promised > self.pushes_granted {
            return Err(protocol_error);
        }
        let reset = |code| Err(Reaction::Reset { id, code });
        if self.seen_on_stream(stream, id) || self.open.contains_key(&id) {
            self.forget(id);
            return reset(ErrorCode::ProtocolError);
        }
        self.last_push_id.insert(stream, id);
        if self.state == State::PeerGoingAway {
            return reset(ErrorCode::Refused);
        }
        let Some(allowance) = self.push_pages.get(&page) else {
            // An open page without a budget never invited pushes; a page the
            // gateway ended or forgot is a normal race.
            let open_page = self
                .open
                .get(&page)
                .is_some_and(|o| o.push_page.is_none() && !o.budgeted);
            return reset(if open_page {
                ErrorCode::ProtocolError
            } else {
                ErrorCode::Refused
            });
        };
        let same_host = push_head_host(head).is_ok_and(|h| h.eq_ignore_ascii_case(&allowance.host));
        if allowance.pushes_left == 0 || !same_host {
            return reset(ErrorCode::ProtocolError);
        }
        self.open_push(id, page, stream);
        Ok(message)
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
                if is_push_id(id) {
                    // The push space is the origin's own.
                    return reset(id, ErrorCode::ProtocolError);
                }
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
                self.open.insert(id, OpenRequest::new(stream, phase));
                Ok(message)
            }
            Message::TunnelOpen(open) => {
                let id = open.id;
                if is_push_id(id) {
                    return reset(id, ErrorCode::ProtocolError);
                }
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
                let mut tunnel = OpenRequest::new(stream, Phase::Body);
                tunnel.tunnel = Some(TunnelState::new());
                self.open.insert(id, tunnel);
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
                if open.stream != stream
                    || open.phase != Phase::Head
                    || open.tunnel.is_some()
                    || open.push_page.is_some()
                {
                    self.forget(id);
                    return reset(id, ErrorCode::ProtocolError);
                }
                if data.len() > self.config.max_chunk as usize {
                    self.forget(id);
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
                    return if self.seen_on_stream(stream, id) {
                        Err(Reaction::Ignore)
                    } else {
                        reset(id, ErrorCode::ProtocolError)
                    };
                };
                if open.stream != stream || open.tunnel.is_some() {
                    self.forget(id);
                    return reset(id, ErrorCode::ProtocolError);
                }
                Ok(message)
            }
            Message::PushBudget(budget) => {
                self.push_budget_received(stream, budget.clone(), message)
            }
            _ => unreachable!("origin_receives is only called with request messages"),
        }
    }

    /// Origin: a PUSH_BUDGET (pushes negotiated; see `ignores_push_offers`).
    /// Taken for an open request on its stream, and for one that has ended
    /// there (the origin may answer a page before reading its budget); a
    /// second budget for an open page, one on another stream, for a tunnel or
    /// a push, or for an id never seen there, is a protocol error of it.
    fn push_budget_received(
        &mut self,
        stream: u16,
        budget: PushBudget,
        message: Message,
    ) -> Result<Message, Reaction> {
        let page = budget.page;
        let reset = Err(Reaction::Reset {
            id: page,
            code: ErrorCode::ProtocolError,
        });
        let misplaced = |open: &OpenRequest| {
            open.stream != stream || open.tunnel.is_some() || open.push_page.is_some()
        };
        match self.open.get(&page) {
            Some(open) if misplaced(open) || self.push_pages.contains_key(&page) => {
                self.forget(page);
                self.retire_push_page(page);
                return reset;
            }
            Some(_) => {}
            None if !self.seen_on_stream(stream, page) => return reset,
            None if self.push_pages.contains_key(&page) => return Err(Reaction::Ignore),
            None => {}
        }
        if self.push_pages.len() >= MAX_PUSH_PAGES && !self.make_push_page_room() {
            // Every allowance has a push open: take no more (the origin then
            // pushes nothing for this page; the gateway's count stays right).
            return Err(Reaction::Ignore);
        }
        self.add_push_page(page, &budget, Bytes::new());
        Ok(message)
    }

    /// TUNNEL_DATA, at either side: on its tunnel's stream, within the
    /// receiver's chunk limit, not after the sender's END, and at the origin
    /// within the window it granted.
    fn tunnel_data_received(&mut self, stream: u16, message: Message) -> Result<Message, Reaction> {
        let Message::TunnelData { id, end, data } = &message else {
            unreachable!("tunnel_data_received is only called with TUNNEL_DATA");
        };
        let (id, end, len) = (*id, *end, data.len());
        let seen = self.seen_on_stream(stream, id);
        let Some(open) = self.open.get_mut(&id) else {
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
            _ if open.stream != stream || open.push_page.is_some() => Err(ErrorCode::ProtocolError),
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
                    self.forget(id);
                }
                Ok(message)
            }
            Err(code) => {
                self.forget(id);
                Err(Reaction::Reset { id, code })
            }
        }
    }

    fn gateway_receives(&mut self, stream: u16, message: Message) -> Result<Message, Reaction> {
        let id = message.request_id();
        let issued = self.seen_on_stream(stream, id);
        let push_bytes_left = self
            .open
            .get(&id)
            .and_then(|o| o.push_page)
            .and_then(|page| self.push_pages.get(&page))
            .map(|a| a.bytes_left);
        let Some(open) = self.open.get_mut(&id) else {
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
                    let len = data.len() as u64;
                    if data.len() > self.config.max_chunk as usize
                        || push_bytes_left.is_some_and(|left| len > left)
                    {
                        Err(violation(ErrorCode::TooLarge))
                    } else {
                        open.body_bytes += len;
                        if let Some(page) = open.push_page
                            && let Some(allowance) = self.push_pages.get_mut(&page)
                        {
                            allowance.bytes_left -= len;
                        }
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
        self.forget(id);
        outcome
    }
}
