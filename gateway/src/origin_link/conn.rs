//! One established association: its protocol [`Session`], the requests open on
//! it, and the receive task that dispatches responses to them.
//!
//! The session sits behind a short `std` mutex shared by the receive task (which
//! feeds it every received message) and the callers (which record the requests
//! they send and the ones they abandon). No lock is held across an await.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use gateway_protocol::{
    CONTROL_STREAM, Capabilities, ErrorCode, GoAway, MAX_HEAD, MAX_PUSH_PAGES, Message, PushBudget,
    PushPromise, Reaction, Request, RequestClass, RequestId, Session, Urgency, is_push_id,
    push_head_host,
};
use gateway_transport::{Association, BackendKind, TransportError};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::OriginRequest;
use super::backlog::Backlog;
use super::error::LinkError;
use super::pin::stream_for;
use super::push::{
    LinkPushCounters, LinkPushes, PUSH_URGENCY, PageBudget, PushOffer, PushPage, PushResponse,
};
use crate::browser_socket::BrowserSocket;
use crate::sync::lock;

/// Messages queued toward one response's reader (head, body chunks, end). With
/// chunks of at most 64 KiB that is at most 1 MiB per response; when the queue
/// is full the receive task waits for the reader (see the module docs).
pub(crate) const RESPONSE_QUEUE: usize = 16;
/// A reader that takes nothing from its full queue for this long loses its
/// request (CANCEL), so that one stuck reader holds the association's receive
/// side at most this long.
pub(crate) const DELIVERY_STALL_LIMIT: Duration = Duration::from_secs(5);
/// Longest wait for a graceful close, or for a control message to be queued.
pub(crate) const CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// What the receive task hands to one request's reader, in order.
#[derive(Debug)]
pub(crate) enum Event {
    /// The parsed RESPONSE_HEAD.
    Head(http::response::Parts),
    /// One RESPONSE_BODY chunk.
    Data(Bytes),
    /// RESPONSE_END with its body length.
    End(u64),
    /// TUNNEL_DATA; `end`: the origin closed its half.
    Tunnel { data: Bytes, end: bool },
    /// TUNNEL_CREDIT: this many more bytes may be sent.
    Credit(u32),
}

/// Where a request's error is left before its queue is closed without END. The
/// reader takes it after the events queued ahead of it.
pub(crate) type Outcome = Arc<Mutex<Option<LinkError>>>;

fn settle(outcome: &Outcome, error: LinkError) {
    lock(outcome).get_or_insert(error);
}

/// The receive task's end of one open request.
#[derive(Debug)]
struct Slot {
    stream: u16,
    tx: mpsc::Sender<Event>,
    outcome: Outcome,
    head_seen: bool,
    /// Tunnel: this side sent END (the slot goes when the origin's END comes).
    tunnel_sent_end: bool,
    /// A push: its page's request id.
    push_page: Option<RequestId>,
    /// Held while the request's PRIORITY watcher may send; dropped with the
    /// slot (whichever way the request ends), which stops the watcher.
    _priority_watch: Option<oneshot::Sender<()>>,
}

impl Slot {
    /// A fresh slot; with `watch_priority`, also the receiver its PRIORITY
    /// watcher stops on when the slot goes.
    fn open(
        stream: u16,
        tx: mpsc::Sender<Event>,
        outcome: &Outcome,
        push_page: Option<RequestId>,
        watch_priority: bool,
    ) -> (Slot, Option<oneshot::Receiver<()>>) {
        let (watching, ended) = if watch_priority {
            let (watching, ended) = oneshot::channel();
            (Some(watching), Some(ended))
        } else {
            (None, None)
        };
        let slot = Slot {
            stream,
            tx,
            outcome: Arc::clone(outcome),
            head_seen: false,
            tunnel_sent_end: false,
            push_page,
            _priority_watch: watching,
        };
        (slot, ended)
    }

    /// Ends the request with `error`; dropping `tx` closes the reader's queue.
    fn fail(self, error: LinkError) {
        settle(&self.outcome, error);
    }

    /// The error for an association that ended under this request.
    fn fail_with_association(self, reason: &str) {
        let error = if self.head_seen {
            LinkError::Broken(reason.to_owned())
        } else {
            LinkError::Unavailable(reason.to_owned())
        };
        self.fail(error);
    }
}

/// Where an association is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnStatus {
    /// New requests are taken.
    Accepting,
    /// No new requests (GOAWAY either way); open ones finish.
    Retired(String),
    /// The association is gone; every request on it has ended.
    Ended(String),
}

impl ConnStatus {
    pub(crate) fn reason(&self) -> &str {
        match self {
            ConnStatus::Accepting => "accepting",
            ConnStatus::Retired(reason) | ConnStatus::Ended(reason) => reason,
        }
    }
}

#[derive(Debug)]
struct ConnState {
    session: Session,
    next_id: RequestId,
    open: HashMap<RequestId, Slot>,
    accepting: bool,
    /// Pages a PUSH_BUDGET was sent for, by request id, oldest first; at most
    /// twice the session's `MAX_PUSH_PAGES`, so that the session forgets a
    /// page before this does.
    push_pages: VecDeque<(RequestId, PushPage)>,
    /// The highest MAX_PUSHES sent.
    push_granted: u64,
}

/// Pages remembered for their pushes (see `ConnState::push_pages`).
const PUSH_PAGES_KEPT: usize = 2 * MAX_PUSH_PAGES;

/// What the receive task does after the session judged a message.
enum Step {
    Nothing,
    Deliver {
        id: RequestId,
        tx: mpsc::Sender<Event>,
        outcome: Outcome,
        event: Event,
    },
    /// A promised push for the taker (handed on outside the state lock: a
    /// refused offer's drop cancels the push, which takes the lock).
    Offer(PushOffer),
    GoAway(ErrorCode),
}

/// One association after its HELLO exchange.
#[derive(Debug)]
pub(crate) struct Conn {
    name: Arc<str>,
    assoc: Association,
    data_streams: u16,
    /// Largest REQUEST_BODY chunk the origin accepts.
    max_chunk: usize,
    /// Per data stream: held while a request is numbered and sent, because ids
    /// must rise within a stream in the order the origin receives them, and the
    /// transport orders a stream's messages by when their `send` completed.
    send_order: Box<[tokio::sync::Mutex<()>]>,
    state: Mutex<ConnState>,
    status: watch::Sender<ConnStatus>,
    /// Wakes the receive task when a request ends elsewhere (a dropped reader),
    /// so that a retired association closes as soon as it is idle.
    idle: Notify,
    /// Per-stream backlog of response bytes (the FEEDBACK core). Locked after
    /// `state` when both are held, never the other way round.
    backlog: Mutex<Backlog>,
    /// Wakes the feedback driver when response bytes arrive.
    activity: Notify,
    /// Where pushes go, when both sides announced PUSH.
    pushes: Option<LinkPushes>,
}

impl Conn {
    /// Wraps an association whose HELLO exchange `session` has completed.
    pub(crate) fn new(
        name: Arc<str>,
        assoc: Association,
        session: Session,
        feedback_interval: Duration,
        pushes: Option<LinkPushes>,
    ) -> Self {
        let pushes = pushes.filter(|_| session.pushes_negotiated());
        let data_streams = session.data_streams().max(1);
        let max_chunk = (session.peer_max_chunk() as usize).max(1);
        let mut backlog = Backlog::new(feedback_interval);
        if session
            .peer_capabilities()
            .contains(Capabilities::FEEDBACK_ARRIVED)
        {
            backlog.report_arrived();
        }
        Self {
            name,
            assoc,
            data_streams,
            max_chunk,
            send_order: (0..data_streams)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            state: Mutex::new(ConnState {
                session,
                next_id: 1,
                open: HashMap::new(),
                accepting: true,
                push_pages: VecDeque::new(),
                push_granted: 0,
            }),
            status: watch::Sender::new(ConnStatus::Accepting),
            idle: Notify::new(),
            backlog: Mutex::new(backlog),
            activity: Notify::new(),
            pushes,
        }
    }

    /// Whether pushes were negotiated (both HELLOs carried PUSH, and this
    /// link takes them).
    pub(crate) fn takes_pushes(&self) -> bool {
        self.pushes.is_some()
    }

    /// The first MAX_PUSHES, once the association is up (nothing without
    /// pushes negotiated).
    pub(crate) async fn grant_pushes(&self) {
        if let Some(grant) = self.push_grant_due() {
            let _ = self.send(CONTROL_STREAM, grant).await;
        }
    }

    /// The MAX_PUSHES owed now, if any, recorded as sent: `in_flight` plus
    /// every push that has ended (the promised ones, refused included, minus
    /// those still open). Cumulative, so it only grows.
    fn push_grant_due(&self) -> Option<Message> {
        let pushes = self.pushes.as_ref()?;
        let mut state = lock(&self.state);
        let session = &state.session;
        let ended = session
            .pushes_promised()
            .saturating_sub(session.open_pushes() as u64);
        let due = (u64::from(pushes.in_flight) + ended).min(u64::from(u32::MAX));
        if due <= state.push_granted {
            return None;
        }
        state.push_granted = due;
        let max = due as u32;
        state.session.handle_max_pushes_sent(max);
        Some(Message::MaxPushes { max })
    }

    /// Grants one more push for each that ended since the last grant.
    fn top_up_pushes(&self) {
        if let Some(grant) = self.push_grant_due() {
            self.send_detached(CONTROL_STREAM, grant);
        }
    }

    /// The association itself (the feedback driver sends on it).
    pub(crate) fn association(&self) -> &Association {
        &self.assoc
    }

    /// The per-stream backlog core.
    pub(crate) fn backlog(&self) -> MutexGuard<'_, Backlog> {
        lock(&self.backlog)
    }

    /// Resolves when response bytes have arrived since the last call.
    pub(crate) async fn activity(&self) {
        self.activity.notified().await;
    }

    /// Whether the origin announced it acts on FEEDBACK.
    pub(crate) fn origin_takes_feedback(&self) -> bool {
        lock(&self.state)
            .session
            .peer_capabilities()
            .contains(Capabilities::FEEDBACK)
    }

    pub(crate) fn kind(&self) -> BackendKind {
        self.assoc.kind()
    }

    pub(crate) fn data_streams(&self) -> u16 {
        self.data_streams
    }

    pub(crate) fn abort(&self) {
        self.assoc.abort();
    }

    pub(crate) fn accepting(&self) -> bool {
        lock(&self.state).accepting
    }

    pub(crate) fn status(&self) -> watch::Receiver<ConnStatus> {
        self.status.subscribe()
    }

    /// Numbers and sends one request on the data stream `pinned` maps to. The
    /// returned [`Pending`] yields the response; dropping it abandons the request.
    pub(crate) async fn send_request(
        self: &Arc<Self>,
        pinned: u16,
        request: OriginRequest,
        socket: Option<Arc<BrowserSocket>>,
        budget: Option<PageBudget>,
    ) -> Result<Pending, LinkError> {
        if request.head.is_empty() {
            return Err(LinkError::Unsendable("empty request head"));
        }
        if request.head.len() > MAX_HEAD {
            return Err(LinkError::Unsendable(
                "request head above MAX_HEAD (64 KiB)",
            ));
        }
        let stream = stream_for(pinned, self.data_streams);
        let mut priority = request.priority;
        let _order = self.send_order[usize::from(stream) - 1].lock().await;
        let Opened {
            id,
            rx,
            outcome,
            watch_ended,
        } = self.open_slot(stream, priority.is_some(), false)?;
        // From here on, dropping this future abandons the request.
        let guard = RequestGuard {
            conn: Arc::clone(self),
            id,
            socket,
        };
        let mut body = request.body;
        let mut sent = (clamped_urgency(request.urgency), request.class);
        // A promotion made before the REQUEST leaves travels in it.
        if let Some(watched) = &mut priority
            && watched.has_changed().unwrap_or(false)
        {
            let (urgency, class) = *watched.borrow_and_update();
            sent = (clamped_urgency(urgency), class);
        }
        let head = Message::Request(Request {
            id,
            urgency: sent.0,
            class: sent.1,
            end: body.is_empty(),
            head: request.head,
        });
        self.send(stream, head).await?;
        // Right after its REQUEST, before any body, so that the origin reads
        // it before it decides what to push.
        if let Some(budget) = budget.and_then(|b| self.record_budget(id, stream, b)) {
            self.send(stream, budget).await?;
        }
        if let (Some(watched), Some(ended)) = (priority, watch_ended) {
            // Spawned only now: a PRIORITY must follow its REQUEST on the stream.
            tokio::spawn(watch_priority(
                Arc::downgrade(self),
                id,
                stream,
                watched,
                ended,
                sent,
            ));
        }
        while !body.is_empty() {
            let data = body.split_to(body.len().min(self.max_chunk));
            let end = body.is_empty();
            self.send(stream, Message::RequestBody { id, end, data })
                .await?;
        }
        Ok(Pending { guard, rx, outcome })
    }

    /// Records the PUSH_BUDGET for page `id` on `stream` and returns it, or
    /// `None` when it is not to be sent (pushes not negotiated, or every
    /// page allowance has a push open).
    fn record_budget(&self, id: RequestId, stream: u16, budget: PageBudget) -> Option<Message> {
        self.pushes.as_ref()?;
        let PageBudget {
            page,
            max_pushes,
            max_bytes,
            held,
        } = budget;
        let fields = PushBudget {
            page: id,
            max_pushes,
            max_bytes,
            held,
        };
        let mut state = lock(&self.state);
        state
            .session
            .handle_push_budget_sent(&fields, stream, &page.host_field)
            .ok()?;
        let message = Message::PushBudget(fields);
        // The taker bounds it; one the origin would reset the page for is
        // never sent: the page goes without pushes instead (the allowance
        // recorded above only waits to be forgotten).
        if let Err(why) = message.check_limits() {
            tracing::debug!(origin = %self.name, id, why, "PUSH_BUDGET not sent");
            return None;
        }
        if state.push_pages.len() >= PUSH_PAGES_KEPT {
            state.push_pages.pop_front();
        }
        state.push_pages.push_back((id, page));
        Some(message)
    }

    /// Numbers a request on `stream` and opens its slot, under the state lock.
    /// With `watches_priority`, and an origin that takes PRIORITY, the slot
    /// holds the sender whose drop ends the request's PRIORITY watcher.
    fn open_slot(
        &self,
        stream: u16,
        watches_priority: bool,
        tunnel: bool,
    ) -> Result<Opened, LinkError> {
        let mut state = lock(&self.state);
        if !state.accepting {
            return Err(LinkError::Unavailable(format!(
                "origin {}: {}",
                self.name,
                self.status.borrow().reason()
            )));
        }
        let id = state.next_id;
        let Some(next) = id.checked_add(1) else {
            self.retire(&mut state, "request ids used up".into());
            return Err(LinkError::Unavailable("request ids used up".into()));
        };
        if tunnel && !state.session.may_open_tunnel() {
            return Err(LinkError::Unavailable(format!(
                "origin {} does not serve tunnels",
                self.name
            )));
        }
        let recorded = if tunnel {
            state.session.handle_tunnel_sent(id, stream)
        } else {
            state.session.handle_request_sent(id, stream)
        };
        if recorded.is_err() {
            // Ids only rise and the stream is in range: this is a bug here.
            return Err(LinkError::Unavailable(format!(
                "session refused request {id} on stream {stream}"
            )));
        }
        state.next_id = next;
        let (tx, rx) = mpsc::channel(RESPONSE_QUEUE);
        let outcome = Outcome::default();
        // An origin without PRIORITY would ignore it: watch nothing then.
        let origin_takes_priority = state
            .session
            .peer_capabilities()
            .contains(Capabilities::PRIORITY);
        let (slot, watch_ended) = Slot::open(
            stream,
            tx,
            &outcome,
            None,
            watches_priority && origin_takes_priority,
        );
        state.open.insert(id, slot);
        lock(&self.backlog).handle_request_opened(id, stream);
        Ok(Opened {
            id,
            rx,
            outcome,
            watch_ended,
        })
    }

    /// Numbers and sends TUNNEL_OPEN on the data stream `pinned` maps to.
    pub(crate) async fn send_tunnel_open(
        self: &Arc<Self>,
        pinned: u16,
        destination: std::net::SocketAddr,
        server_name: String,
        socket: Option<Arc<BrowserSocket>>,
    ) -> Result<(Pending, u16), LinkError> {
        let stream = stream_for(pinned, self.data_streams);
        let _order = self.send_order[usize::from(stream) - 1].lock().await;
        let Opened {
            id, rx, outcome, ..
        } = self.open_slot(stream, false, true)?;
        let guard = RequestGuard {
            conn: Arc::clone(self),
            id,
            socket,
        };
        let open = gateway_protocol::TunnelOpen {
            id,
            destination,
            server_name,
        };
        self.send(stream, Message::TunnelOpen(open)).await?;
        Ok((Pending { guard, rx, outcome }, stream))
    }

    /// Sends tunnel bytes (`end`: and closes this half). After both halves
    /// closed the tunnel is forgotten.
    pub(crate) async fn send_tunnel_data(
        &self,
        stream: u16,
        id: RequestId,
        data: Bytes,
        end: bool,
    ) -> Result<(), LinkError> {
        self.send(stream, Message::TunnelData { id, end, data })
            .await?;
        if end {
            let mut state = lock(&self.state);
            let over = state.session.handle_tunnel_end_sent(id);
            if over {
                state.open.remove(&id);
                lock(&self.backlog).handle_request_ended(id);
            } else if let Some(slot) = state.open.get_mut(&id) {
                slot.tunnel_sent_end = true;
            }
        }
        Ok(())
    }

    async fn send(&self, stream: u16, message: Message) -> Result<(), LinkError> {
        self.assoc
            .send(stream, message.to_bytes())
            .await
            .map_err(|e| LinkError::Unavailable(format!("sending failed: {}", describe(&e))))
    }

    /// Sends without waiting: the receive task and `Drop` must never block on a
    /// full send queue.
    fn send_detached(&self, stream: u16, message: Message) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let assoc = self.assoc.clone();
        runtime.spawn(async move {
            let send = assoc.send(stream, message.to_bytes());
            let _ = tokio::time::timeout(CLOSE_LIMIT, send).await;
        });
    }

    /// Stops taking new requests; the receive task closes the association once
    /// the open ones have ended.
    fn retire(&self, state: &mut ConnState, reason: String) {
        state.accepting = false;
        self.status.send_if_modified(|status| {
            let fresh = *status == ConnStatus::Accepting;
            if fresh {
                *status = ConnStatus::Retired(reason);
            }
            fresh
        });
        self.idle.notify_one();
    }

    /// Abandons a request whose reader went away: CANCEL once the response has
    /// begun, else RESET CANCELLED on the request's own stream, where it cannot
    /// overtake the REQUEST (CANCEL on stream 0 could, and would be ignored).
    fn cancel(&self, id: RequestId) {
        let mut state = lock(&self.state);
        lock(&self.backlog).handle_request_ended(id);
        let Some(slot) = state.open.remove(&id) else {
            return;
        };
        state.session.handle_request_finished(id);
        // A page abandoned: the session has forgotten its pushes, and the
        // origin stops them on this CANCEL or RESET (docs/protocol.md, "The
        // page and its pushes"); their readers learn it now.
        let orphans: Vec<RequestId> = state
            .open
            .iter()
            .filter(|(_, s)| s.push_page == Some(id))
            .map(|(push, _)| *push)
            .collect();
        for push in orphans {
            if let Some(orphan) = state.open.remove(&push) {
                lock(&self.backlog).handle_request_ended(push);
                orphan.fail(LinkError::Unavailable(
                    "the push's page was abandoned".into(),
                ));
            }
        }
        let idle = !state.accepting && state.open.is_empty();
        drop(state);
        if slot.head_seen {
            self.send_detached(CONTROL_STREAM, Message::Cancel { id });
        } else {
            let reset = Message::Reset {
                id,
                code: ErrorCode::Cancelled,
                reason: "abandoned by the gateway".into(),
            };
            self.send_detached(slot.stream, reset);
        }
        if idle {
            self.idle.notify_one();
        }
        if self.pushes.is_some() {
            self.top_up_pushes();
        }
    }

    /// Shutdown: GOAWAY to the origin, then no new requests.
    pub(crate) async fn go_away(&self, reason: &str) {
        let last_request = {
            let mut state = lock(&self.state);
            self.retire(&mut state, reason.to_owned());
            state.next_id - 1
        };
        let goaway = Message::GoAway(GoAway {
            last_request,
            code: ErrorCode::NoError,
            reason: reason.to_owned(),
        });
        let send = self.assoc.send(CONTROL_STREAM, goaway.to_bytes());
        let _ = tokio::time::timeout(CLOSE_LIMIT, send).await;
    }

    /// Waits until the receive task has finished, at most `limit`.
    pub(crate) async fn wait_ended(&self, limit: Duration) -> bool {
        let mut status = self.status.subscribe();
        let ended = status.wait_for(|s| matches!(s, ConnStatus::Ended(_)));
        matches!(tokio::time::timeout(limit, ended).await, Ok(Ok(_)))
    }

    /// The receive task: runs until the association ends, then fails whatever is
    /// still open.
    pub(crate) async fn run(self: Arc<Self>) {
        let reason = self.receive().await;
        let slots: Vec<Slot> = {
            let mut state = lock(&self.state);
            state.accepting = false;
            state.open.drain().map(|(_, slot)| slot).collect()
        };
        for slot in slots {
            slot.fail_with_association(&reason);
        }
        self.status.send_replace(ConnStatus::Ended(reason));
    }

    async fn receive(self: &Arc<Self>) -> String {
        loop {
            if self.drained() {
                return self.close().await;
            }
            let received = tokio::select! {
                received = self.assoc.recv() => received,
                () = self.idle.notified() => continue,
            };
            let message = match received {
                Ok(message) => message,
                Err(e) => return describe(&e),
            };
            let step = self.handle_received(message.stream, &message.data);
            if self.pushes.is_some() {
                self.top_up_pushes();
            }
            match step {
                Step::Nothing => {}
                Step::Deliver {
                    id,
                    tx,
                    outcome,
                    event,
                } => self.deliver(id, tx, outcome, event).await,
                Step::Offer(offer) => self.hand_on(offer),
                Step::GoAway(code) => {
                    gateway_transport::warn_limited!(
                        origin = %self.name,
                        ?code,
                        "origin broke the protocol; sending GOAWAY"
                    );
                    let last_request = lock(&self.state).next_id - 1;
                    let goaway = Message::GoAway(GoAway {
                        last_request,
                        code,
                        reason: "protocol error".into(),
                    });
                    let send = self.assoc.send(CONTROL_STREAM, goaway.to_bytes());
                    let _ = tokio::time::timeout(CLOSE_LIMIT, send).await;
                    self.close().await;
                    return format!("origin broke the protocol ({code:?}); sent GOAWAY");
                }
            }
        }
    }

    fn drained(&self) -> bool {
        let state = lock(&self.state);
        !state.accepting && state.open.is_empty()
    }

    async fn close(&self) -> String {
        match tokio::time::timeout(CLOSE_LIMIT, self.assoc.close()).await {
            Ok(Ok(())) => {}
            _ => self.assoc.abort(),
        }
        format!("closed after GOAWAY ({})", self.status.borrow().reason())
    }

    /// Hands one event to a request's reader, waiting while its queue is full
    /// (this is the backpressure), at most [`DELIVERY_STALL_LIMIT`].
    async fn deliver(
        &self,
        id: RequestId,
        tx: mpsc::Sender<Event>,
        outcome: Outcome,
        event: Event,
    ) {
        match tokio::time::timeout(DELIVERY_STALL_LIMIT, tx.send(event)).await {
            // A closed queue means the reader is gone; its guard cancelled.
            Ok(_) => {}
            Err(_) => {
                gateway_transport::warn_limited!(
                    origin = %self.name,
                    id,
                    "response reader stalled for {DELIVERY_STALL_LIMIT:?}; cancelling it"
                );
                settle(&outcome, LinkError::Stalled(DELIVERY_STALL_LIMIT));
                self.cancel(id);
            }
        }
    }

    /// Gives a promised push to the taker; a full queue cancels it.
    fn hand_on(&self, offer: PushOffer) {
        let Some(pushes) = &self.pushes else {
            return;
        };
        if let Err(refused) = pushes.sink.try_send(offer) {
            LinkPushCounters::inc(&pushes.counters.busy);
            // Dropped here, outside the state lock: the push is cancelled.
            drop(refused);
        }
    }

    /// A PUSH_PROMISE the session accepted: a slot under the push id, and
    /// an offer for the taker. A promise for a page this link forgot is
    /// refused.
    fn take_promise(
        self: &Arc<Self>,
        state: &mut ConnState,
        stream: u16,
        promise: PushPromise,
    ) -> Step {
        let PushPromise { id, page, head } = promise;
        let page_id = page;
        let known = state
            .push_pages
            .iter()
            .find(|(p, _)| *p == page)
            .map(|(_, known)| known.clone());
        let Some(page) = known.filter(|_| self.pushes.is_some()) else {
            state.session.handle_request_finished(id);
            self.send_detached(stream, reset(id, ErrorCode::Refused, "page forgotten"));
            return Step::Nothing;
        };
        let (tx, rx) = mpsc::channel(RESPONSE_QUEUE);
        let outcome = Outcome::default();
        let origin_takes_priority = state
            .session
            .peer_capabilities()
            .contains(Capabilities::PRIORITY);
        let (slot, ended) = Slot::open(stream, tx, &outcome, Some(page_id), origin_takes_priority);
        state.open.insert(id, slot);
        lock(&self.backlog).handle_request_opened(id, stream);
        let guard = RequestGuard {
            conn: Arc::clone(self),
            id,
            socket: None,
        };
        let pushed = (PUSH_URGENCY, RequestClass::Prefetch);
        let (promote, promoted) = watch::channel(pushed);
        if let Some(ended) = ended {
            let sent = (clamped_urgency(pushed.0), pushed.1);
            tokio::spawn(watch_priority(
                Arc::downgrade(self),
                id,
                stream,
                promoted,
                ended,
                sent,
            ));
        }
        Step::Offer(PushOffer {
            page,
            id,
            head,
            response: PushResponse::new(Pending { guard, rx, outcome }),
            promote,
        })
    }

    /// Counts a promise the session reset, by why: another host than its
    /// page's, or any other rule broken.
    fn count_refused_promise(&self, state: &ConnState, bytes: &Bytes) {
        let Some(pushes) = &self.pushes else {
            return;
        };
        let other_host = match Message::decode(bytes) {
            Ok(Message::PushPromise(promise)) => state
                .push_pages
                .iter()
                .find(|(p, _)| *p == promise.page)
                .zip(push_head_host(&promise.head).ok())
                .is_some_and(|((_, page), host)| !host.eq_ignore_ascii_case(&page.host_field)),
            _ => false,
        };
        let counter = if other_host {
            &pushes.counters.other_host
        } else {
            &pushes.counters.protocol
        };
        LinkPushCounters::inc(counter);
    }

    fn handle_received(self: &Arc<Self>, stream: u16, bytes: &Bytes) -> Step {
        if stream != CONTROL_STREAM {
            // Every message, before the session judges it: the origin counts
            // all it wrote on the stream (FEEDBACK's arrived bytes).
            lock(&self.backlog).handle_arrived(stream, bytes.len() as u64);
            self.activity.notify_one();
        }
        let mut state = lock(&self.state);
        let message = match state.session.handle_message(stream, bytes) {
            Ok(message) => message,
            Err(Reaction::Ignore) => return Step::Nothing,
            Err(Reaction::Reset { id, code }) => {
                // The session has already forgotten the request.
                if is_push_id(id) && !state.open.contains_key(&id) {
                    // A promise it refused.
                    self.count_refused_promise(&state, bytes);
                }
                if let Some(slot) = state.open.remove(&id) {
                    slot.fail(LinkError::Malformed(format!(
                        "origin broke the protocol on stream {stream} (RESET {code:?} sent)"
                    )));
                }
                drop(state);
                self.send_detached(stream, reset(id, code, "malformed or unexpected message"));
                return Step::Nothing;
            }
            Err(Reaction::GoAway { code }) => return Step::GoAway(code),
        };
        match message {
            Message::Ping { ack: false, opaque } => {
                self.send_detached(CONTROL_STREAM, Message::Ping { ack: true, opaque });
            }
            Message::GoAway(goaway) => self.handle_goaway(&mut state, goaway),
            Message::PushPromise(promise) => {
                return self.take_promise(&mut state, stream, promise);
            }
            Message::ResponseHead { id, head } => {
                let Some(slot) = state.open.get_mut(&id) else {
                    return Step::Nothing;
                };
                match http_semantics::parse_response_head(&head) {
                    Ok(parsed) => {
                        let parts = with_reason(parsed);
                        slot.head_seen = true;
                        return Step::Deliver {
                            id,
                            tx: slot.tx.clone(),
                            outcome: Arc::clone(&slot.outcome),
                            event: Event::Head(parts),
                        };
                    }
                    Err(why) => {
                        state.session.handle_request_finished(id);
                        if let Some(slot) = state.open.remove(&id) {
                            slot.fail(LinkError::Malformed(format!("response head: {why}")));
                        }
                        drop(state);
                        let code = ErrorCode::ProtocolError;
                        self.send_detached(stream, reset(id, code, "malformed response head"));
                    }
                }
            }
            Message::ResponseBody { id, data } => {
                if let Some(slot) = state.open.get(&id) {
                    // Counted before it is queued, so that the reader can never
                    // take more than was counted.
                    lock(&self.backlog).handle_received(id, data.len() as u64);
                    self.activity.notify_one();
                    return Step::Deliver {
                        id,
                        tx: slot.tx.clone(),
                        outcome: Arc::clone(&slot.outcome),
                        event: Event::Data(data),
                    };
                }
            }
            Message::ResponseEnd { id, body_len } => {
                // The session has checked body_len and forgotten the request.
                if let Some(slot) = state.open.remove(&id) {
                    return Step::Deliver {
                        id,
                        tx: slot.tx,
                        outcome: slot.outcome,
                        event: Event::End(body_len),
                    };
                }
            }
            Message::TunnelData { id, end, data } => {
                return self.handle_tunnel_data(&mut state, id, end, data);
            }
            Message::TunnelCredit { id, bytes } => {
                if let Some(slot) = state.open.get(&id) {
                    return Step::Deliver {
                        id,
                        tx: slot.tx.clone(),
                        outcome: Arc::clone(&slot.outcome),
                        event: Event::Credit(bytes),
                    };
                }
            }
            Message::Reset { id, code, reason } => {
                if let Some(slot) = state.open.remove(&id) {
                    slot.fail(LinkError::Reset { code, reason });
                }
            }
            // HELLO was answered before this task started, PING answers need
            // nothing, and the session refuses everything else at the gateway.
            _ => {}
        }
        Step::Nothing
    }

    /// TUNNEL_DATA from the origin: counted like response bytes (the backlog
    /// and FEEDBACK see tunnels as they see responses) and delivered; the slot
    /// goes once both halves have ended.
    fn handle_tunnel_data(
        &self,
        state: &mut ConnState,
        id: RequestId,
        end: bool,
        data: Bytes,
    ) -> Step {
        let Some(slot) = state.open.get_mut(&id) else {
            return Step::Nothing;
        };
        slot.head_seen = true;
        lock(&self.backlog).handle_received(id, data.len() as u64);
        self.activity.notify_one();
        let tx = slot.tx.clone();
        let outcome = Arc::clone(&slot.outcome);
        if end && slot.tunnel_sent_end {
            // Both halves closed: the session has forgotten it too.
            state.open.remove(&id);
        }
        Step::Deliver {
            id,
            tx,
            outcome,
            event: Event::Tunnel { data, end },
        }
    }

    /// The origin takes no new requests; those above `last_request` were not
    /// processed and fail as such (safe to retry), the rest finish.
    fn handle_goaway(&self, state: &mut ConnState, goaway: GoAway) {
        let unprocessed: Vec<RequestId> = state
            .open
            .keys()
            .copied()
            // `last_request` concerns request ids only: promised pushes finish.
            .filter(|id| !is_push_id(*id) && *id > goaway.last_request)
            .collect();
        for id in unprocessed {
            state.session.handle_request_finished(id);
            if let Some(slot) = state.open.remove(&id) {
                slot.fail_with_association(&format!(
                    "origin went away before processing it: {}",
                    goaway.reason
                ));
            }
        }
        let reason = if goaway.reason.is_empty() {
            format!("origin sent GOAWAY ({:?})", goaway.code)
        } else {
            format!("origin sent GOAWAY ({:?}: {})", goaway.code, goaway.reason)
        };
        self.retire(state, reason);
    }
}

/// Sends one PRIORITY for request `id` per change of `watched`, until the
/// request ends (its slot drops `ended`'s sender), the caller drops the watch
/// sender, or the association goes. `sent` is what the origin has now.
async fn watch_priority(
    conn: Weak<Conn>,
    id: RequestId,
    stream: u16,
    mut watched: watch::Receiver<(u8, RequestClass)>,
    mut ended: oneshot::Receiver<()>,
    mut sent: (Urgency, RequestClass),
) {
    loop {
        tokio::select! {
            biased;
            _ = &mut ended => return,
            changed = watched.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let (urgency, class) = *watched.borrow_and_update();
        let wanted = (clamped_urgency(urgency), class);
        if wanted == sent {
            continue;
        }
        let Some(conn) = conn.upgrade() else {
            return;
        };
        if !lock(&conn.state).session.may_send_priority(id) {
            return;
        }
        let (urgency, class) = wanted;
        let priority = Message::Priority { id, urgency, class };
        // A send held up by a full stream queue must not outlive the request.
        tokio::select! {
            biased;
            _ = &mut ended => return,
            result = conn.send(stream, priority) => {
                if result.is_err() {
                    return;
                }
            }
        }
        tracing::debug!(
            origin = %conn.name,
            id,
            ?class,
            urgency = urgency.level(),
            "PRIORITY sent"
        );
        sent = wanted;
    }
}

/// RFC 9218 urgency from a caller's level; above 7 counts as 7.
fn clamped_urgency(level: u8) -> Urgency {
    Urgency::new(level.min(Urgency::LOWEST.level())).unwrap_or_default()
}

/// A parsed RESPONSE_HEAD as the front takes it: an unusual reason phrase
/// rides along as hyper's `ReasonPhrase`, which hyper writes back to the
/// browser.
fn with_reason(parsed: http_semantics::ParsedResponseHead) -> http::response::Parts {
    let mut parts = parsed.parts;
    if let Some(reason) = parsed.reason
        && let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.into_bytes())
    {
        parts.extensions.insert(reason);
    }
    parts
}

fn reset(id: RequestId, code: ErrorCode, reason: &str) -> Message {
    Message::Reset {
        id,
        code,
        reason: reason.to_owned(),
    }
}

/// A transport error in the words of the log lines ("unreachable (connection
/// refused)").
pub(crate) fn describe(error: &TransportError) -> String {
    match error {
        TransportError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused".into()
        }
        TransportError::Io(e) => e.to_string(),
        TransportError::ConnectTimeout(limit) => format!("no answer within {limit:?}"),
        TransportError::Aborted => "the origin aborted the association".into(),
        TransportError::Closed => "the association was closed".into(),
        other => other.to_string(),
    }
}

/// Abandons its request when dropped before the response ended (a no-op after).
#[derive(Debug)]
pub(crate) struct RequestGuard {
    conn: Arc<Conn>,
    id: RequestId,
    /// The browser connection the body goes to, if known.
    socket: Option<Arc<BrowserSocket>>,
}

impl RequestGuard {
    /// The request's id.
    pub(crate) fn id(&self) -> RequestId {
        self.id
    }

    /// The reader took `bytes` of the body from its queue.
    pub(crate) fn delivered(&self, bytes: u64) {
        lock(&self.conn.backlog).handle_delivered(self.id, bytes);
        if let Some(socket) = &self.socket {
            socket.handed(bytes);
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.conn.cancel(self.id);
    }
}

/// A request numbered and given its slot, not yet sent.
struct Opened {
    id: RequestId,
    rx: mpsc::Receiver<Event>,
    outcome: Outcome,
    /// Ends when the slot goes: the PRIORITY watcher's stop signal.
    watch_ended: Option<oneshot::Receiver<()>>,
}

/// A sent request waiting for its response.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) guard: RequestGuard,
    pub(crate) rx: mpsc::Receiver<Event>,
    pub(crate) outcome: Outcome,
}

impl Pending {
    /// The error left for a queue that closed without END.
    pub(crate) fn take_error(
        outcome: &Outcome,
        otherwise: impl FnOnce() -> LinkError,
    ) -> LinkError {
        lock(outcome).take().unwrap_or_else(otherwise)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An origin's own reason phrase reaches the browser (hyper writes a
    /// `ReasonPhrase` extension back); a canonical one adds nothing.
    #[test]
    fn an_unusual_reason_phrase_rides_along() {
        let parsed = http_semantics::parse_response_head(b"HTTP/1.0 404 Nothing Here\r\n\r\n")
            .expect("a valid head");
        let parts = with_reason(parsed);
        let reason = parts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .expect("kept");
        assert_eq!(reason.as_bytes(), b"Nothing Here");

        let parsed =
            http_semantics::parse_response_head(b"HTTP/1.1 200 OK\r\n\r\n").expect("a valid head");
        assert!(
            with_reason(parsed)
                .extensions
                .get::<hyper::ext::ReasonPhrase>()
                .is_none()
        );
    }
}
