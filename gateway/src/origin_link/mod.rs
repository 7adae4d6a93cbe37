//! The gateway's side of one association per origin.
//!
//! An [`OriginLink`] is a cheap handle on a background task that connects to the
//! origin, exchanges HELLO, and reconnects with backoff whenever the association
//! dies or the origin sends GOAWAY. The HTTP front-end pins each browser flow to a
//! data stream ([`OriginLink::pin`]) and sends its requests with
//! [`OriginLink::request`], which returns the response head and a
//! [`ResponseBody`]. A request can be promoted while in flight (a prefetch that
//! a browser joined) through [`OriginRequest::priority`], which makes the link
//! send PRIORITY. docs/gateway-origin-link.md is the overview; the error
//! mapping is on [`LinkError`].
//!
//! ```text
//!  caller ──request()──► Conn::send_request ──REQUEST──► Association::send
//!     ▲                       (Session: id, stream)
//!     │ head, body chunks
//!  per-request queue ◄── Conn::run (receive task: Session::handle_message,
//!  (bounded)                         RESPONSE_* / RESET / GOAWAY / PING)
//! ```
//!
//! # Backpressure
//!
//! Each response has a queue of [`RESPONSE_QUEUE`](conn::RESPONSE_QUEUE) events.
//! When a browser reads slowly, its queue fills and the receive task *waits*: it
//! stops reading the association, whose single receive window then fills, and
//! the origin's sends on every stream stall. A slow browser thus slows the whole
//! association to its pace, which is correct (nothing is dropped, memory stays
//! bounded) but is head-of-line blocking across streams. Two things bound it: a
//! reader that takes nothing for [`DELIVERY_STALL_LIMIT`](conn::DELIVERY_STALL_LIMIT)
//! loses its request ([`LinkError::Stalled`]), and FEEDBACK: the per-stream
//! backlog ([`backlog`]: response bytes received and not yet taken by the
//! front, plus the pinned browser sockets' unacknowledged bytes) is reported on
//! stream 0 ([`feedback`]), so that the origin's queue-aware scheduler holds
//! back the slow stream before the queue fills. Browser sockets are registered
//! with [`StreamPin::watch_socket`].
//!
//! # Pushes
//!
//! Spawned with [`LinkPushes`] ([`OriginLink::spawn_with_pushes`]), the link
//! announces PUSH, grants MAX_PUSHES, sends a page's [`PageBudget`] as
//! PUSH_BUDGET right after its REQUEST ([`OriginLink::request_page`]) and
//! hands each promised push to the taker as a [`PushOffer`] (the `push`
//! module's docs; docs/gateway-origin-link.md, "Pushes").
//!
//! It never touches HTTP semantics beyond parsing the response head (with the
//! `http-semantics` crate, which the origin renders it with): caching,
//! hop-by-hop fields and status decisions belong to the front-end.

mod backlog;
mod backoff;
mod body;
mod conn;
mod error;
mod feedback;
mod pin;
mod push;
mod supervisor;
mod tunnel;

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use gateway_protocol::RequestClass;
use gateway_transport::{AssociationConfig, BackendKind, SctpCounters, SctpStats};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::browser_socket::BrowserSocket;
use crate::config::{FeedbackConfig, OriginEntry};
use crate::sync::lock;
use conn::{CLOSE_LIMIT, Conn};
use pin::PinTable;

pub use backlog::{Backlog, FEEDBACK_GROWTH_STEP, StreamFigures};
pub use body::ResponseBody;
pub use error::LinkError;
pub use push::{
    LinkPushCounters, LinkPushes, PUSH_URGENCY, PageBudget, PushOffer, PushPage, PushResponse,
};
pub use tunnel::{OriginTunnel, TunnelEvent};

/// Longest wait in [`OriginLink::shutdown`] for open requests to finish after
/// GOAWAY before the association is aborted.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// The first connection attempt is under way.
    Connecting,
    /// An association is established and its HELLO answered.
    Up,
    /// No usable association (unreachable, lost, or the origin went away):
    /// reconnecting with backoff.
    Down,
    /// [`OriginLink::shutdown`] ran or every handle was dropped.
    ShutDown,
}

/// [`OriginLink::transport`]'s answer.
#[derive(Debug, Clone)]
pub struct TransportFigures {
    /// An association is established and its HELLO answered.
    pub up: bool,
    /// Our SCTP stack's state of the current association (smoothed RTT,
    /// congestion window, bytes in flight, ...): `None` while down and for
    /// the backends whose stacks do not say (kernel SCTP, framed TCP, QUIC).
    pub sctp: Option<SctpStats>,
    /// Our SCTP stack's counters since the link started, every association
    /// summed; `None` for the other backends.
    pub counters: Option<SctpCounters>,
}

/// `a + b`, field by field (saturating).
pub(crate) fn sum_counters(a: &SctpCounters, b: &SctpCounters) -> SctpCounters {
    let SctpCounters {
        packets_sent,
        packets_received,
        port_changes,
        retransmitted_chunks,
        lost_by_sack,
        lost_by_reorder_timer,
        tail_probes,
        rto_expirations,
        spurious_recoveries,
    } = *b;
    SctpCounters {
        packets_sent: a.packets_sent.saturating_add(packets_sent),
        packets_received: a.packets_received.saturating_add(packets_received),
        port_changes: a.port_changes.saturating_add(port_changes),
        retransmitted_chunks: a.retransmitted_chunks.saturating_add(retransmitted_chunks),
        lost_by_sack: a.lost_by_sack.saturating_add(lost_by_sack),
        lost_by_reorder_timer: a
            .lost_by_reorder_timer
            .saturating_add(lost_by_reorder_timer),
        tail_probes: a.tail_probes.saturating_add(tail_probes),
        rto_expirations: a.rto_expirations.saturating_add(rto_expirations),
        spurious_recoveries: a.spurious_recoveries.saturating_add(spurious_recoveries),
    }
}

/// One request for an origin.
#[derive(Debug, Clone)]
pub struct OriginRequest {
    /// A whole HTTP/1.1 request head, ending in CRLFCRLF, at most
    /// `gateway_protocol::MAX_HEAD` bytes.
    pub head: Bytes,
    /// The request body, possibly empty, already bounded by the caller. Its
    /// framing in the head (Content-Length, chunked) is for the origin's
    /// information only; the protocol carries the bytes.
    pub body: Bytes,
    /// RFC 9218 urgency, 0 (most urgent) to 7; larger values count as 7.
    pub urgency: u8,
    /// Browser demand or the gateway's prefetch.
    pub class: RequestClass,
    /// Reprioritisation in flight, `None` for a request whose priority never
    /// changes. While the request is open, each change of the watched
    /// `(urgency, class)` sends one PRIORITY for it (the latest value; equal
    /// values are skipped), if the origin announced PRIORITY; an older origin
    /// keeps serving it at `urgency` and `class`. A change made before the
    /// REQUEST goes out is carried by the REQUEST itself. Urgency is clamped to
    /// 7 like `urgency`. See [`OriginLink::request`].
    pub priority: Option<watch::Receiver<(u8, RequestClass)>>,
}

/// A browser flow's data stream, pinned for the flow's lifetime; released on
/// drop.
pub struct StreamPin {
    shared: Arc<Shared>,
    stream: u16,
    /// The browser connection whose flow holds the pin, if watched.
    socket: OnceLock<Arc<BrowserSocket>>,
}

impl StreamPin {
    /// The data stream pinned (1..). On an association that negotiated fewer
    /// streams the pin folds onto `(stream - 1) % n + 1`.
    pub fn stream(&self) -> u16 {
        self.stream
    }

    /// Counts `socket`'s unsent and unacknowledged bytes toward this stream's
    /// backlog for as long as `socket` lives (the link keeps a weak
    /// reference), and the response bytes of this pin's requests that were
    /// handed on toward it and not yet written to it. Only the first call
    /// counts.
    pub fn watch_socket(&self, socket: &Arc<BrowserSocket>) {
        if self.socket.set(Arc::clone(socket)).is_err() {
            return;
        }
        let mut sockets = lock(&self.shared.sockets);
        sockets.retain(|(_, s)| s.strong_count() > 0);
        sockets.push((self.stream, Arc::downgrade(socket)));
    }
}

impl fmt::Debug for StreamPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPin")
            .field("origin", &self.shared.name)
            .field("stream", &self.stream)
            .finish()
    }
}

impl Drop for StreamPin {
    fn drop(&mut self) {
        lock(&self.shared.pins).unpin(self.stream);
    }
}

/// What the handle, the pins and the background task share.
struct Shared {
    name: Arc<str>,
    address: SocketAddr,
    kind: BackendKind,
    transport: AssociationConfig,
    fail_open: bool,
    reconnect_min: Duration,
    reconnect_max: Duration,
    /// Data streams a pin may get while no association says otherwise.
    configured_streams: u16,
    state: watch::Sender<LinkState>,
    /// The association taking new requests, if any.
    current: Mutex<Option<Arc<Conn>>>,
    /// Why the link is down, for [`LinkError::Unavailable`].
    down_reason: Mutex<String>,
    pins: Mutex<PinTable>,
    /// A request found the link down: reconnect now (rate-limited).
    kick: Notify,
    shutdown: watch::Sender<bool>,
    /// Per-stream backlog reports to the origin.
    feedback: FeedbackConfig,
    /// Browser sockets by pinned stream, measured by the feedback driver.
    sockets: Mutex<Vec<(u16, Weak<BrowserSocket>)>>,
    /// Pushes taken (`[push]` on, the cache on): PUSH announced in HELLO.
    pushes: Option<LinkPushes>,
    /// Our SCTP stack's counts of the associations that have ended, summed,
    /// so that [`OriginLink::transport`]'s counters never go back at a
    /// reconnection. Locked after `current`, never before.
    ended_counters: Mutex<SctpCounters>,
}

/// Dropped with the last [`OriginLink`] clone.
struct Handle {
    shared: Arc<Shared>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    /// Without [`OriginLink::shutdown`], the association is aborted.
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        if let Some(task) = lock(&self.supervisor).take() {
            task.abort();
        }
        if let Some(conn) = lock(&self.shared.current).take() {
            conn.abort();
        }
        self.shared.state.send_replace(LinkState::ShutDown);
    }
}

/// A cheap handle on the link to one origin. Clones share it; when the last
/// clone is dropped the association is aborted (call
/// [`shutdown`](Self::shutdown) for a graceful end).
#[derive(Clone)]
pub struct OriginLink {
    inner: Arc<Handle>,
}

impl fmt::Debug for OriginLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.inner.shared;
        f.debug_struct("OriginLink")
            .field("name", &shared.name)
            .field("address", &shared.address)
            .field("backend", &shared.kind)
            .field("state", &*shared.state.borrow())
            .finish_non_exhaustive()
    }
}

impl OriginLink {
    /// The association, if it is up and takes new requests; otherwise the
    /// reconnect loop is woken and the caller gets `Unavailable` with why.
    fn accepting_conn(&self) -> Result<Arc<Conn>, LinkError> {
        let shared = &self.inner.shared;
        let conn = lock(&shared.current).clone().filter(|c| c.accepting());
        conn.ok_or_else(|| {
            shared.kick.notify_one();
            LinkError::Unavailable(format!(
                "origin {} is down: {}",
                shared.name,
                lock(&shared.down_reason)
            ))
        })
    }

    /// Starts the background task that connects to `entry.address` with
    /// `entry.backend` and `entry.transport`, exchanges HELLO, and re-establishes
    /// the association with exponential backoff (`reconnect_min` doubling to
    /// `reconnect_max`, ±25% jitter) whenever it dies. Must be called within a
    /// tokio runtime. `entry` is expected to have passed
    /// [`GatewayConfig::validate`](crate::config::GatewayConfig::validate).
    pub fn spawn(entry: &OriginEntry) -> OriginLink {
        Self::spawn_with_pushes(entry, None)
    }

    /// As [`spawn`](Self::spawn); with `pushes`, the link announces PUSH,
    /// grants `in_flight` pushes and hands each promise to `pushes.sink`
    /// (docs/protocol.md, "PUSH").
    pub fn spawn_with_pushes(entry: &OriginEntry, pushes: Option<LinkPushes>) -> OriginLink {
        let t = &entry.transport;
        let configured_streams = t
            .streams
            .min(t.max_inbound_streams)
            .saturating_sub(1)
            .max(1);
        let (kind, why) = entry.backend.decide();
        tracing::info!(origin = %entry.name, "transport: {kind} ({why})");
        let shared = Arc::new(Shared {
            name: Arc::from(entry.name.as_str()),
            address: entry.address,
            kind,
            transport: entry.transport.clone(),
            fail_open: entry.fail_open,
            reconnect_min: entry.reconnect_min,
            reconnect_max: entry.reconnect_max.max(entry.reconnect_min),
            configured_streams,
            state: watch::Sender::new(LinkState::Connecting),
            current: Mutex::new(None),
            down_reason: Mutex::new("connecting".into()),
            pins: Mutex::new(PinTable::new(configured_streams)),
            kick: Notify::new(),
            shutdown: watch::Sender::new(false),
            feedback: entry.feedback,
            sockets: Mutex::new(Vec::new()),
            pushes,
            ended_counters: Mutex::new(SctpCounters::default()),
        });
        let task = tokio::spawn(supervisor::supervise(Arc::clone(&shared)));
        OriginLink {
            inner: Arc::new(Handle {
                shared,
                supervisor: Mutex::new(Some(task)),
            }),
        }
    }

    /// The origin's name from the configuration.
    pub fn name(&self) -> &str {
        &self.inner.shared.name
    }

    /// The backend this link uses (`auto` resolved at spawn).
    pub fn backend(&self) -> BackendKind {
        self.inner.shared.kind
    }

    /// Where the link is.
    pub fn state(&self) -> LinkState {
        *self.inner.shared.state.borrow()
    }

    /// Association established and HELLO answered.
    pub fn is_up(&self) -> bool {
        self.state() == LinkState::Up
    }

    /// Waits until up or `timeout`; returns [`is_up`](Self::is_up).
    pub async fn wait_up(&self, timeout: Duration) -> bool {
        let mut state = self.inner.shared.state.subscribe();
        let up = state.wait_for(|s| matches!(s, LinkState::Up | LinkState::ShutDown));
        let _ = tokio::time::timeout(timeout, up).await;
        self.is_up()
    }

    /// Pins a browser flow (one TCP connection) to a data stream for its
    /// lifetime: the data stream with the fewest pinned flows, lowest number on
    /// ties, among the current association's streams (the configured ones while
    /// down). Released on drop.
    pub fn pin(&self) -> StreamPin {
        let shared = &self.inner.shared;
        let usable = lock(&shared.current)
            .as_ref()
            .map_or(shared.configured_streams, |conn| conn.data_streams());
        let stream = lock(&shared.pins).pin(usable);
        StreamPin {
            shared: Arc::clone(shared),
            stream,
            socket: OnceLock::new(),
        }
    }

    /// The current association's per-stream backlog figures (empty while down)
    /// and the FEEDBACK messages sent on it.
    pub fn backlog(&self) -> (Vec<StreamFigures>, u64) {
        let conn = lock(&self.inner.shared.current).clone();
        conn.map_or((Vec::new(), 0), |conn| {
            let backlog = conn.backlog();
            (backlog.figures(), backlog.feedback_sent())
        })
    }

    /// The live browser connections pinned to the current association, by
    /// data stream (empty while down): what the eBPF browser-flow figures are
    /// looked up for.
    pub fn browser_sockets(&self) -> Vec<(u16, Arc<BrowserSocket>)> {
        let conn = lock(&self.inner.shared.current).clone();
        conn.map_or_else(Vec::new, |conn| {
            feedback::live_sockets(&self.inner.shared, conn.data_streams())
        })
    }

    /// What the transport says about this link now, for the metrics: our
    /// SCTP stack's figures for the current association (none while down, or
    /// on another backend), and its counters summed over every association
    /// this link has had (none on another backend).
    pub fn transport(&self) -> TransportFigures {
        let shared = &self.inner.shared;
        let current = lock(&shared.current);
        let sctp = current
            .as_ref()
            .and_then(|conn| conn.association().sctp_stats());
        let counters = (shared.kind == BackendKind::Userspace).then(|| {
            let ended = *lock(&shared.ended_counters);
            sctp.as_ref()
                .map_or(ended, |stats| sum_counters(&ended, &stats.counters))
        });
        drop(current);
        TransportFigures {
            up: self.is_up(),
            sctp,
            counters,
        }
    }

    /// Whether FEEDBACK goes to the current association's origin (on in the
    /// configuration, and announced by the origin).
    pub fn sends_feedback(&self) -> bool {
        let shared = &self.inner.shared;
        shared.feedback.enabled
            && lock(&shared.current)
                .as_ref()
                .is_some_and(|conn| conn.origin_takes_feedback())
    }

    /// Whether the current association's origin takes pushes (both HELLOs
    /// carried PUSH): only then is a [`PageBudget`] worth building.
    pub fn takes_pushes(&self) -> bool {
        lock(&self.inner.shared.current)
            .as_ref()
            .is_some_and(|conn| conn.takes_pushes())
    }

    /// Flows pinned to `stream` now (for tests and statistics).
    pub fn pinned(&self, stream: u16) -> u32 {
        lock(&self.inner.shared.pins).pinned(stream)
    }

    /// Sends one request on the pin's stream and waits for the response head.
    ///
    /// While the link is down this fails at once with
    /// [`LinkError::Unavailable`] and asks the background task to reconnect now
    /// (at most once per `reconnect_min`). Dropping the future abandons the
    /// request (RESET CANCELLED to the origin), so a caller's time-out around it
    /// is clean.
    ///
    /// With [`OriginRequest::priority`] set, the caller can promote the request
    /// while it is in flight, before or after the head arrives, for instance a
    /// prefetch that a browser request has joined:
    /// `promote.send_replace((urgency, RequestClass::Demand))`. The PRIORITY
    /// travels on the request's stream, behind its REQUEST; once the response
    /// has ended, or the request was abandoned, changes are not sent.
    pub async fn request(
        &self,
        pin: &StreamPin,
        req: OriginRequest,
    ) -> Result<http::Response<ResponseBody>, LinkError> {
        self.request_page(pin, req, None).await
    }

    /// As [`request`](Self::request), for a page that invites pushes:
    /// `budget` goes as PUSH_BUDGET right after the REQUEST, if the origin
    /// takes pushes (else it is dropped).
    pub async fn request_page(
        &self,
        pin: &StreamPin,
        req: OriginRequest,
        budget: Option<PageBudget>,
    ) -> Result<http::Response<ResponseBody>, LinkError> {
        debug_assert!(
            Arc::ptr_eq(&pin.shared, &self.inner.shared),
            "pin of another origin"
        );
        let conn = self.accepting_conn()?;
        let socket = pin.socket.get().cloned();
        let mut pending = conn.send_request(pin.stream, req, socket, budget).await?;
        match pending.rx.recv().await {
            Some(conn::Event::Head(parts)) => Ok(http::Response::from_parts(
                parts,
                ResponseBody::new(pending),
            )),
            // The session lets nothing but a head come first.
            Some(_) => Err(LinkError::Malformed("body before the response head".into())),
            None => Err(conn::Pending::take_error(&pending.outcome, || {
                LinkError::Unavailable("the association's receive task ended".into())
            })),
        }
    }

    /// GOAWAY, then a graceful close once open requests have finished (at most
    /// [`SHUTDOWN_GRACE`], then abort); stops reconnecting. New requests fail
    /// with [`LinkError::Unavailable`] from the start of the call.
    pub async fn shutdown(&self) {
        let shared = &self.inner.shared;
        if shared.shutdown.send_replace(true) {
            return;
        }
        let task = lock(&self.inner.supervisor).take();
        if let Some(mut task) = task
            && tokio::time::timeout(CLOSE_LIMIT, &mut task).await.is_err()
        {
            task.abort();
        }
        let conn = lock(&shared.current).take();
        if let Some(conn) = conn {
            conn.go_away("gateway shutting down").await;
            if !conn.wait_ended(SHUTDOWN_GRACE).await {
                conn.abort();
                conn.wait_ended(CLOSE_LIMIT).await;
            }
        }
        *lock(&shared.down_reason) = "shut down".into();
        shared.state.send_replace(LinkState::ShutDown);
        tracing::info!("origin {}: shut down", shared.name);
    }
}
