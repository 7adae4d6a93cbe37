//! The association driver: one task per association that feeds the protocol
//! [`Session`], starts a producer per request, and sends response chunks in the
//! order the [`ResponseScheduler`] picks.
//!
//! ```text
//!  reader task ──(stream, bytes)──┐
//!                                 ▼
//!  producer tasks ──chunks──► driver loop ──► Association::send
//!  (one per request,          (Session, ResponseScheduler, jobs)
//!   bounded by permits)
//! ```
//!
//! Control messages (HELLO answer, PING answer, RESET, GOAWAY) bypass the
//! scheduler. Response messages go one chunk at a time, and only while the bytes
//! waiting in the transport are below the scheduler's target, so the order on the
//! wire is the scheduler's. CANCEL stops a response before its next chunk;
//! PRIORITY changes a response's class and urgency from its next chunk on.
//!
//! What produces a response is a [`Handler`]; the origin binary's handler serves
//! files or proxies, tests use their own.
//!
//! With `[push] enabled` the origin announces PUSH and, for a page whose
//! gateway sent a PUSH_BUDGET, pushes what [`Handler::pushes`] names, below
//! every request in the scheduler (`server/push.rs`, docs/protocol.md "PUSH").

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gateway_protocol::{
    Capabilities, ErrorCode, GoAway, Message, Reaction, Request, RequestClass, RequestId, Role,
    Session, SessionConfig, TunnelOpen, Urgency, is_push_id,
};
use gateway_transport::{Association, TransportError};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::AbortHandle;

use crate::ebpf::EgressCounters;
use crate::egress::{EgressDepth, Learned};
use crate::metrics::{OriginMetrics, SchedulerCounters, Tally};
use crate::response_scheduler::{JobSpec, ResponseScheduler, ResponseSchedulerConfig};
use crate::tls::Tunnels;

mod push;
mod schedule_trace;
mod tunnel;
pub use push::{PUSHES_AT_ONCE, PushConfig, PushTarget};
use push::{PushJob, Pushes};
use schedule_trace::{ScheduleTrace, Wait};
use tunnel::{Inbound, TunnelSink, TunnelTask};

/// Chunks a producer may have queued ahead of the sender, per request.
const CHUNKS_AHEAD: usize = 4;
/// Events queued toward the driver loop (received messages and produced chunks).
const EVENT_QUEUE: usize = 1024;
/// How often the driver re-checks a full transport queue.
const TRANSPORT_POLL: Duration = Duration::from_millis(1);
/// A transport queue that stays full without draining this long is logged: the
/// association is alive but not moving data.
const STALL_WARNING: Duration = Duration::from_secs(2);
/// Kernel SCTP with `tc_sctp`: how often the per-stream counters are read
/// (one map lookup per stream with bytes queued). Between reads the depth
/// only grows with what is written, so a stale figure holds back, never
/// lets through.
const EGRESS_READ_INTERVAL: Duration = Duration::from_millis(1);
/// How often the whole map is walked while this association's tag is not
/// known yet.
const EGRESS_LEARN_INTERVAL: Duration = Duration::from_millis(20);

/// A request as the handler sees it.
#[derive(Debug, Clone)]
pub struct IncomingRequest {
    /// Its id on the association.
    pub id: RequestId,
    /// The stream it came on.
    pub stream: u16,
    /// The REQUEST message (urgency, class, head).
    pub request: Request,
    /// The request body, complete.
    pub body: Bytes,
    /// Decrypted from a TLS tunnel the origin terminates (then `id` and
    /// `stream` are the tunnel's, shared by every request of that TLS
    /// connection), not a REQUEST message: the access log's `via=tls`.
    pub tunnelled: bool,
}

/// What a handler produces for one request.
#[derive(Debug)]
pub struct Reply<B> {
    /// The rendered response head (status line, fields, empty line).
    pub head: Bytes,
    /// Body bytes that will follow, if known (SCF orders by it).
    pub body_len: Option<u64>,
    /// The body, pulled chunk by chunk.
    pub body: B,
}

/// A response body that yields chunks of at most `max` bytes.
pub trait BodySource: Send + 'static {
    /// The next chunk, or `None` at the end.
    fn next_chunk(
        &mut self,
        max: usize,
    ) -> impl Future<Output = std::io::Result<Option<Bytes>>> + Send;
}

/// A body held in memory.
impl BodySource for Bytes {
    async fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Bytes>> {
        if self.is_empty() {
            return Ok(None);
        }
        let n = max.min(self.len());
        Ok(Some(self.split_to(n)))
    }
}

/// Produces responses. Implemented by the origin's file and proxy service and by
/// tests.
pub trait Handler: Send + Sync + 'static {
    /// The body type of its replies.
    type Body: BodySource;

    /// Answers one request. Failures are replies too (a 4xx or 5xx head); an
    /// error of the body source later becomes a RESET.
    fn handle(&self, request: IncomingRequest) -> impl Future<Output = Reply<Self::Body>> + Send;

    /// What `page` will need, to push to the gateway (docs/protocol.md,
    /// "PUSH"), render-blocking targets first, then in document order. Asked
    /// once per page whose gateway invited pushes (PUSH_BUDGET), after the
    /// page's head has been produced; each target is then answered by
    /// [`Handler::handle`] as a GET without credentials. By default nothing.
    fn pushes(&self, page: &IncomingRequest) -> impl Future<Output = Vec<PushTarget>> + Send {
        let _ = page;
        push::no_pushes()
    }
}

/// Per-association settings, from the origin's config.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Scheduler settings.
    pub response_scheduler: ResponseSchedulerConfig,
    /// Body bytes per RESPONSE_BODY.
    pub chunk_size: usize,
    /// Requests open at once; more are refused.
    pub max_open_requests: usize,
    /// Largest request body accepted, bytes.
    pub max_request_body: u64,
    /// The transport's per-stream send queue limit: a stream at or above it is
    /// skipped, so that `send` never blocks the driver.
    pub stream_queue_limit: u64,
    /// Kernel SCTP: `tc_sctp`'s counters, from which the depth of each
    /// stream's send queue is derived (`crate::egress`); none, or another
    /// backend: the transport's own `buffered()`, if it has one.
    pub egress: Option<Arc<EgressCounters>>,
    /// `[tls]` loaded: the origin announces TUNNEL and serves tunnels; `None`,
    /// it refuses them.
    pub tunnels: Option<Tunnels>,
}

/// Counters for one association, reported when it ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AssociationStats {
    /// Requests received.
    pub requests: u64,
    /// Responses completed with RESPONSE_END.
    pub completed: u64,
    /// Responses stopped by CANCEL.
    pub cancelled: u64,
    /// Requests answered with RESET (refused, malformed, failed).
    pub reset: u64,
    /// Body bytes sent (pushes' included).
    pub body_bytes: u64,
    /// PUSH_PROMISEs sent.
    pub pushes_promised: u64,
    /// Of those, conditional GETs revalidating a copy the gateway holds stale.
    pub push_revalidations: u64,
    /// Pushes not made: the gateway holds them fresh.
    pub pushes_skipped_fresh: u64,
    /// Body bytes of pushes sent.
    pub push_body_bytes: u64,
    /// Promised pushes the gateway stopped (CANCEL or RESET of the push or
    /// of its page).
    pub pushes_cancelled: u64,
}

/// One association's counters, and the origin's when it keeps figures.
struct Counts {
    association: AssociationStats,
    origin: Option<OriginMetrics>,
    /// The origin's scheduler series for this association's policy.
    scheduler: Option<SchedulerCounters>,
}

impl Counts {
    fn add(&mut self, tally: Tally) {
        let s = &mut self.association;
        match tally {
            Tally::Request => s.requests += 1,
            Tally::Completed => s.completed += 1,
            Tally::Cancelled => s.cancelled += 1,
            Tally::Reset => s.reset += 1,
            Tally::BodyBytes(n) => s.body_bytes += n,
            Tally::PushPromised { conditional } => {
                s.pushes_promised += 1;
                s.push_revalidations += u64::from(conditional);
            }
            Tally::PushesSkippedFresh(n) => s.pushes_skipped_fresh += n,
            Tally::PushBodyBytes(n) => s.push_body_bytes += n,
            Tally::PushCancelled => s.pushes_cancelled += 1,
        }
        if let Some(origin) = &self.origin {
            origin.count(tally);
        }
    }

    /// Brings the scheduler's series up to `tally`.
    fn scheduler(&mut self, tally: crate::response_scheduler::ResponseSchedulerTally) {
        if let Some(counters) = &mut self.scheduler {
            counters.add(tally);
        }
    }
}

/// Why the association ended.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The transport failed or the peer went away without closing.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The peer broke the protocol; GOAWAY was sent.
    #[error("peer broke the protocol ({0:?}); sent GOAWAY")]
    Protocol(ErrorCode),
}

enum Event {
    Received(u16, Bytes),
    ReceiveEnded(TransportError),
    Produced(RequestId, Produced),
    /// A tunnel wrote this many of the gateway's bytes: grant them again.
    Credit(RequestId, u32),
    /// `Handler::pushes` answered for this page.
    PushTargets(RequestId, Vec<PushTarget>),
}

enum Produced {
    Head {
        head: Bytes,
        body_len: Option<u64>,
    },
    Body(Bytes),
    End,
    Failed(String),
    /// Tunnel bytes toward the gateway.
    TunnelData(Bytes),
    /// The tunnel's far end closed its half.
    TunnelEnd,
}

struct Job {
    stream: u16,
    ready: VecDeque<Produced>,
    producer: Option<AbortHandle>,
    permits: Arc<Semaphore>,
    body_sent: u64,
    head_len: u64,
    /// A tunnel's input queue (bounded by the gateway's window); `None` for a
    /// request.
    tunnel_in: Option<mpsc::UnboundedSender<Inbound>>,
    /// Tunnel: END sent / received.
    sent_end: bool,
    received_end: bool,
    /// Set for a push.
    push: Option<PushJob>,
}

impl Job {
    /// A job whose producer (a request's handler task, or a tunnel's) has
    /// just been spawned: nothing ready, nothing sent.
    fn new(
        stream: u16,
        producer: AbortHandle,
        permits: Arc<Semaphore>,
        tunnel_in: Option<mpsc::UnboundedSender<Inbound>>,
    ) -> Job {
        Job {
            stream,
            ready: VecDeque::new(),
            producer: Some(producer),
            permits,
            body_sent: 0,
            head_len: 0,
            tunnel_in,
            sent_end: false,
            received_end: false,
            push: None,
        }
    }
}

struct PendingBody {
    request: Request,
    stream: u16,
    body: BytesMut,
}

/// Serves one association until it ends, without pushes. Returns its
/// counters on a clean close.
pub async fn drive<H: Handler>(
    assoc: Association,
    handler: Arc<H>,
    config: DriverConfig,
) -> Result<AssociationStats, DriverError> {
    drive_counted(assoc, handler, config, PushConfig::default(), None).await
}

/// [`drive`] with `[push]`'s settings, also counting into the origin's
/// figures (`[metrics]`) as things happen, so that an association ending in
/// an error still counts.
///
/// (`push` is not a field of [`DriverConfig`] so that the struct literals
/// other crates' tests write stay valid.)
pub async fn drive_counted<H: Handler>(
    assoc: Association,
    handler: Arc<H>,
    config: DriverConfig,
    push: PushConfig,
    metrics: Option<OriginMetrics>,
) -> Result<AssociationStats, DriverError> {
    let _open = metrics.as_ref().map(OriginMetrics::association_opened);
    let streams = assoc.streams();
    let data_streams = streams
        .outbound
        .min(streams.inbound)
        .saturating_sub(1)
        .max(1);
    let session = Session::new(
        Role::Origin,
        SessionConfig {
            data_streams,
            max_chunk: gateway_protocol::MAX_CHUNK as u32,
            capabilities: Capabilities::FEEDBACK
                | Capabilities::FEEDBACK_ARRIVED
                | Capabilities::PREFETCH_CLASS
                | Capabilities::PRIORITY
                | tunnel_capability(&config)
                | push_capability(&push),
        },
    );
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let reader = tokio::spawn(read_loop(assoc.clone(), events_tx.clone()));
    let mut scheduler = ResponseScheduler::new(config.response_scheduler.clone());
    scheduler.set_stream_limit(config.stream_queue_limit);
    let egress = EgressInput::start(&assoc, config.egress.as_ref());
    let scheduler_counters = metrics
        .as_ref()
        .map(|m| m.scheduler(config.response_scheduler.policy));
    let mut driver = Driver {
        assoc,
        handler,
        session,
        scheduler,
        config,
        jobs: HashMap::new(),
        pending_bodies: HashMap::new(),
        events_tx,
        counts: Counts {
            association: AssociationStats::default(),
            scheduler: scheduler_counters,
            origin: metrics,
        },
        stall: None,
        egress,
        depths: Vec::new(),
        job_streams: BTreeMap::new(),
        pushes: Pushes::new(push),
        trace: ScheduleTrace::new(),
    };
    let result = driver.run(events_rx).await;
    if let Some(egress) = &driver.egress {
        egress.counters.forget(driver.assoc.peer_addr());
    }
    reader.abort();
    driver.pushes.abort_all();
    for job in driver.jobs.values() {
        if let Some(producer) = &job.producer {
            producer.abort();
        }
    }
    result.map(|()| driver.counts.association)
}

fn push_capability(push: &PushConfig) -> Capabilities {
    if push.enabled {
        Capabilities::PUSH
    } else {
        Capabilities::default()
    }
}

fn tunnel_capability(config: &DriverConfig) -> Capabilities {
    if config.tunnels.is_some() {
        Capabilities::TUNNEL
    } else {
        Capabilities::default()
    }
}

async fn read_loop(assoc: Association, events: mpsc::Sender<Event>) {
    loop {
        let event = match assoc.recv().await {
            Ok(m) => Event::Received(m.stream, m.data),
            Err(e) => Event::ReceiveEnded(e),
        };
        let ended = matches!(event, Event::ReceiveEnded(_));
        if events.send(event).await.is_err() || ended {
            return;
        }
    }
}

struct Driver<H: Handler> {
    assoc: Association,
    handler: Arc<H>,
    session: Session,
    scheduler: ResponseScheduler,
    config: DriverConfig,
    jobs: HashMap<RequestId, Job>,
    pending_bodies: HashMap<RequestId, PendingBody>,
    events_tx: mpsc::Sender<Event>,
    counts: Counts,
    /// Since when, and at what depth, the transport has been full.
    stall: Option<(tokio::time::Instant, u64)>,
    /// Kernel SCTP with `tc_sctp`: the per-stream send-queue depth.
    egress: Option<EgressInput>,
    /// (stream, bytes in the transport) of the streams with jobs, rebuilt
    /// before each decision; kept to reuse its allocation.
    depths: Vec<(u16, u64)>,
    /// How many of `jobs` each stream carries: the streams whose depth is
    /// read, in order and once each however many jobs share one.
    job_streams: BTreeMap<u16, usize>,
    /// What is pushed, and waits to be (`server/push.rs`).
    pushes: Pushes,
    /// The debug time series (`origin::schedule`).
    trace: ScheduleTrace,
}

/// One association's use of `tc_sctp`'s counters: the depth core and when the
/// map was last read.
struct EgressInput {
    counters: Arc<EgressCounters>,
    depth: EgressDepth,
    peer: std::net::SocketAddr,
    last_read: Option<tokio::time::Instant>,
    /// `chunk_limit + malformed` of the egress walker when the association
    /// started: a packet walked in part later may be ours, undercounted (a
    /// GSO packet of more chunks than the walker's bound, tiny messages
    /// bundled).
    cut_at_start: u64,
    /// Why the figures stopped being used, once that happened.
    given_up: bool,
}

impl EgressInput {
    /// For a kernel association when `tc_sctp` is loaded; `None` otherwise.
    fn start(assoc: &Association, counters: Option<&Arc<EgressCounters>>) -> Option<Self> {
        let counters = counters?;
        let kernel = assoc.kernel()?;
        let peer = assoc.peer_addr();
        let local = match kernel.local_addr() {
            Ok(local) => local,
            Err(e) => {
                tracing::warn!(%peer, "no per-stream depth: the local address is unknown: {e}");
                return None;
            }
        };
        let cut_at_start = match counters.egress_stats() {
            Ok(stats) => stats.chunk_limit + stats.malformed,
            Err(e) => {
                tracing::warn!(%peer, "no per-stream depth: reading tc_sctp's stats failed: {e}");
                return None;
            }
        };
        Some(Self {
            counters: Arc::clone(counters),
            depth: EgressDepth::new(local.port(), peer.port(), ebpf_loader::monotonic_ns()),
            peer,
            last_read: None,
            cut_at_start,
            given_up: false,
        })
    }

    fn handle_written(&mut self, stream: u16, bytes: usize) {
        self.depth.handle_written(stream, bytes as u64);
    }

    /// Reads the map if due and returns (total, per stream); `None` while the
    /// association's keys are unknown or after giving up.
    fn refresh(&mut self) -> Option<(u64, Vec<(u16, u64)>)> {
        if self.given_up {
            return None;
        }
        let now = tokio::time::Instant::now();
        let interval = match self.depth.learned() {
            Learned::Unknown => EGRESS_LEARN_INTERVAL,
            Learned::Tag(_) => EGRESS_READ_INTERVAL,
            Learned::Ambiguous(_) => return None,
        };
        if self
            .last_read
            .is_none_or(|at| now.duration_since(at) >= interval)
        {
            self.last_read = Some(now);
            if let Err(why) = self.read() {
                tracing::warn!(
                    peer = %self.peer,
                    "per-stream depth from tc_sctp given up for this association: {why}"
                );
                self.given_up = true;
                self.counters.forget(self.peer);
                return None;
            }
        }
        let figures = self.depth.per_stream()?;
        self.counters.publish(self.peer, &figures.1);
        Some(figures)
    }

    fn read(&mut self) -> Result<(), String> {
        let error = |e: ebpf_loader::EbpfError| format!("reading the map failed: {e}");
        match self.depth.learned() {
            Learned::Unknown => {
                let streams = self.counters.streams().map_err(error)?;
                self.depth
                    .handle_candidates(streams.iter().map(|(key, counters)| (key, counters)));
                match self.depth.learned() {
                    Learned::Tag(tag) => tracing::debug!(
                        peer = %self.peer,
                        "tc_sctp: this association's packets carry tag {tag:#010x}"
                    ),
                    Learned::Ambiguous(tags) => {
                        return Err(format!(
                            "several associations use its ports (tags {tags:x?}); the maps                              cannot tell them apart"
                        ));
                    }
                    Learned::Unknown => {}
                }
            }
            Learned::Tag(_) => {
                let streams: Vec<u16> = self.depth.streams_to_read().collect();
                for stream in streams {
                    let Some(key) = self.depth.key(stream) else {
                        continue;
                    };
                    let counters = self.counters.stream(&key).map_err(error)?;
                    self.depth
                        .handle_left(stream, counters.map(|c| c.data_bytes));
                }
            }
            Learned::Ambiguous(_) => {}
        }
        let stats = self.counters.egress_stats().map_err(error)?;
        let cut = stats.chunk_limit + stats.malformed;
        if cut > self.cut_at_start {
            return Err(format!(
                "tc_sctp walked {} packet(s) only in part since the association started \
                 (more chunks than its bound in a GSO packet on {}? docs/ebpf.md): the bytes \
                 that left would be undercounted",
                cut - self.cut_at_start,
                self.counters.interface()
            ));
        }
        Ok(())
    }
}

impl<H: Handler> Driver<H> {
    async fn run(&mut self, mut events: mpsc::Receiver<Event>) -> Result<(), DriverError> {
        loop {
            // Drain everything that is already waiting before deciding what to
            // send: the transport depth is then read once per decision, not
            // once per event.
            let first = match events.try_recv() {
                Ok(event) => Some(event),
                Err(mpsc::error::TryRecvError::Disconnected) => return Ok(()),
                Err(mpsc::error::TryRecvError::Empty) => None,
            };
            let waiting = self.trace.enabled().then(tokio::time::Instant::now);
            let (first, wait) = if first.is_some() || self.has_sendable() {
                (first, None)
            } else if !self.scheduler.has_ready() {
                match events.recv().await {
                    Some(event) => (Some(event), Some(Wait::Work)),
                    None => return Ok(()),
                }
            } else if self.watch_for_stall() == 0 {
                // Ready work held back with nothing in the transport: the policy
                // holds it (queue-aware: a gateway backlog above its window), and
                // only an event (FEEDBACK, a request, a chunk) can change that.
                match events.recv().await {
                    Some(event) => (Some(event), Some(Wait::Policy)),
                    None => return Ok(()),
                }
            } else {
                // Ready work held back by a full transport queue (in total or on
                // its stream): look again shortly.
                let event = tokio::select! {
                    event = events.recv() => match event {
                        Some(event) => Some(event),
                        None => return Ok(()),
                    },
                    () = tokio::time::sleep(TRANSPORT_POLL) => None,
                };
                (event, Some(Wait::Transport))
            };
            if let (Some(at), Some(wait)) = (waiting, wait) {
                self.trace.handle_wait(wait, at.elapsed());
            }
            self.trace.poll(&self.scheduler);
            if let Some(event) = first {
                if let Some(done) = self.handle_event(event).await? {
                    return done;
                }
                continue;
            }
            self.send_next_chunk().await?;
        }
    }

    /// Refreshes the transport depth, warns if it has not moved for long, and
    /// returns it.
    fn watch_for_stall(&mut self) -> u64 {
        let depth = self.refresh_transport_depth();
        if depth == 0 {
            // Nothing waits in the transport: the policy holds the work back
            // (queue-aware, a gateway backlog above its window), no stall.
            self.stall = None;
            return 0;
        }
        let now = tokio::time::Instant::now();
        match self.stall {
            Some((since, at_depth)) if at_depth == depth => {
                if now.duration_since(since) >= STALL_WARNING {
                    let streams: Vec<(u16, Option<usize>)> = self
                        .jobs
                        .values()
                        .map(|j| (j.stream, self.assoc.buffered(j.stream)))
                        .collect();
                    gateway_transport::warn_limited!(
                        depth,
                        ?streams,
                        "transport queue has not drained for {STALL_WARNING:?}"
                    );
                    self.stall = Some((now, depth));
                }
            }
            _ => self.stall = Some((now, depth)),
        }
        depth
    }

    fn refresh_transport_depth(&mut self) -> u64 {
        if let Some((total, per_stream)) = self.egress.as_mut().and_then(EgressInput::refresh) {
            self.scheduler.handle_transport_queued(total, &per_stream);
            return total;
        }
        let mut per_stream = std::mem::take(&mut self.depths);
        per_stream.clear();
        self.assoc
            .buffered_each(self.job_streams.keys().copied(), &mut per_stream);
        let total = per_stream.iter().map(|(_, depth)| depth).sum();
        self.scheduler.handle_transport_queued(total, &per_stream);
        self.depths = per_stream;
        total
    }

    fn has_sendable(&mut self) -> bool {
        self.refresh_transport_depth();
        let sendable = self.scheduler.poll_next().is_some();
        self.counts.scheduler(self.scheduler.tally());
        sendable
    }

    /// `Some(result)` when the association is over.
    async fn handle_event(
        &mut self,
        event: Event,
    ) -> Result<Option<Result<(), DriverError>>, DriverError> {
        match event {
            Event::Received(stream, bytes) => self.handle_received(stream, bytes).await,
            Event::ReceiveEnded(TransportError::Closed) => Ok(Some(Ok(()))),
            Event::ReceiveEnded(e) => Ok(Some(Err(DriverError::Transport(e)))),
            Event::Produced(id, produced) => {
                let Some(job) = self.jobs.get_mut(&id) else {
                    return Ok(None);
                };
                let is_head = matches!(produced, Produced::Head { .. });
                if let Produced::Head { head, body_len } = &produced {
                    job.head_len = head.len() as u64;
                    if let Some(push) = &mut job.push {
                        push.body_len = *body_len;
                    }
                    if let Some(len) = body_len {
                        self.scheduler.handle_size(id, job.head_len + len);
                    }
                }
                job.ready.push_back(produced);
                // A push is the scheduler's only once promised, in id order.
                let preparing = job.push.as_ref().is_some_and(|p| !p.promised);
                let page = job.push.is_none();
                if !preparing {
                    self.scheduler.handle_ready(id, true);
                }
                if is_head && preparing {
                    self.promise_ready().await?;
                } else if is_head && page {
                    self.maybe_ask(id);
                }
                Ok(None)
            }
            Event::PushTargets(page, targets) => {
                self.handle_push_targets(page, targets);
                self.promise_ready().await?;
                Ok(None)
            }
            Event::Credit(id, bytes) => {
                if let Some(job) = self.jobs.get(&id) {
                    let stream = job.stream;
                    self.session.handle_credit_sent(id, bytes);
                    let credit = Message::TunnelCredit { id, bytes }.to_bytes();
                    let len = credit.len();
                    self.send_watched(stream, credit).await?;
                    self.note_written(stream, len);
                }
                Ok(None)
            }
        }
    }

    async fn handle_received(
        &mut self,
        stream: u16,
        bytes: Bytes,
    ) -> Result<Option<Result<(), DriverError>>, DriverError> {
        let message = match self.session.handle_message(stream, &bytes) {
            Ok(message) => message,
            Err(Reaction::Ignore) => return Ok(None),
            Err(Reaction::Reset { id, code }) => {
                self.pending_bodies.remove(&id);
                self.counts.add(Tally::Reset);
                self.send_reset(stream, id, code, "malformed or unexpected message")
                    .await?;
                return Ok(None);
            }
            Err(Reaction::GoAway { code }) => {
                gateway_transport::warn_limited!(
                    ?code,
                    stream,
                    "peer broke the protocol; sending GOAWAY"
                );
                let goaway = Message::GoAway(GoAway {
                    last_request: 0,
                    code,
                    reason: "protocol error".into(),
                });
                let _ = self.send_control(goaway.to_bytes()).await;
                let _ = self.assoc.close().await;
                return Ok(Some(Err(DriverError::Protocol(code))));
            }
        };
        match message {
            Message::Hello(hello) => {
                if hello.capabilities.contains(Capabilities::FEEDBACK) {
                    self.scheduler.handle_gateway_reports();
                }
                self.send_control(self.session.hello().to_bytes()).await?;
            }
            Message::Ping { ack: false, opaque } => {
                let pong = Message::Ping { ack: true, opaque };
                self.send_control(pong.to_bytes()).await?;
            }
            Message::Ping { ack: true, .. } | Message::GoAway(_) => {}
            Message::Feedback(entries) => {
                tracing::debug!(target: "origin::schedule", ?entries, "FEEDBACK");
                for e in entries {
                    let bytes = u64::from(e.bytes);
                    match e.arrived {
                        Some(arrived) => self
                            .scheduler
                            .handle_gateway_backlog_arrived(e.stream, bytes, arrived),
                        None => self.scheduler.handle_gateway_backlog(e.stream, bytes),
                    }
                }
            }
            Message::Cancel { id } => self.cancel(id, true).await?,
            Message::Reset { id, .. } => self.cancel(id, false).await?,
            Message::Request(request) => self.handle_request(stream, request).await?,
            Message::RequestBody { id, end, data } => {
                self.handle_request_body(stream, id, end, data).await?;
            }
            Message::Priority { id, urgency, class } => self.reprioritize(id, urgency, class),
            Message::TunnelOpen(open) => self.open_tunnel(stream, open).await?,
            Message::TunnelData { id, end, data } => self.tunnel_input(id, end, data),
            Message::ResponseHead { .. }
            | Message::ResponseBody { .. }
            | Message::ResponseEnd { .. }
            | Message::TunnelCredit { .. }
            | Message::PushPromise(_) => {
                // The session refuses these at the origin; nothing reaches here.
            }
            // The session passes these on only with pushes negotiated.
            Message::MaxPushes { max } => self.handle_max_pushes(max),
            Message::PushBudget(budget) => self.handle_push_budget(budget),
        }
        Ok(None)
    }

    /// A REQUEST: refused beyond `max_open_requests`, started when it has no
    /// body, else held until its body is complete.
    async fn handle_request(&mut self, stream: u16, request: Request) -> Result<(), DriverError> {
        self.counts.add(Tally::Request);
        if self.open_requests() >= self.config.max_open_requests {
            self.session.handle_request_finished(request.id);
            self.counts.add(Tally::Reset);
            self.send_reset(
                stream,
                request.id,
                ErrorCode::Refused,
                "too many open requests",
            )
            .await?;
        } else if request.end {
            self.note_page(stream, &request);
            self.start(stream, request, Bytes::new());
        } else {
            self.note_page(stream, &request);
            self.pending_bodies.insert(
                request.id,
                PendingBody {
                    request,
                    stream,
                    body: BytesMut::new(),
                },
            );
        }
        Ok(())
    }

    /// A REQUEST_BODY: appended within `max_request_body` (beyond it, the
    /// request is reset); the last one starts the request.
    async fn handle_request_body(
        &mut self,
        stream: u16,
        id: RequestId,
        end: bool,
        data: Bytes,
    ) -> Result<(), DriverError> {
        let Some(pending) = self.pending_bodies.get_mut(&id) else {
            return Ok(());
        };
        if pending.body.len() as u64 + data.len() as u64 > self.config.max_request_body {
            self.pending_bodies.remove(&id);
            self.session.handle_request_finished(id);
            self.counts.add(Tally::Reset);
            self.send_reset(stream, id, ErrorCode::TooLarge, "request body too large")
                .await?;
            return Ok(());
        }
        pending.body.extend_from_slice(&data);
        if end && let Some(p) = self.pending_bodies.remove(&id) {
            self.start(p.stream, p.request, p.body.freeze());
        }
        Ok(())
    }

    fn start(&mut self, stream: u16, request: Request, body: Bytes) {
        let id = request.id;
        tracing::debug!(id, stream, class = ?request.class, "request");
        let permits = Arc::new(Semaphore::new(CHUNKS_AHEAD));
        self.scheduler.handle_arrival(JobSpec {
            id,
            stream,
            class: request.class,
            urgency: request.urgency,
            remaining: None,
        });
        let incoming = IncomingRequest {
            id,
            stream,
            request,
            body,
            tunnelled: false,
        };
        let producer = tokio::spawn(produce(
            Arc::clone(&self.handler),
            incoming,
            self.events_tx.clone(),
            Arc::clone(&permits),
            self.config.chunk_size,
        ));
        self.insert_job(id, Job::new(stream, producer.abort_handle(), permits, None));
    }

    /// Requests and tunnels open (pushes are bounded apart).
    fn open_requests(&self) -> usize {
        (self.jobs.len() + self.pending_bodies.len()).saturating_sub(self.pushes.running())
    }

    fn insert_job(&mut self, id: RequestId, job: Job) {
        *self.job_streams.entry(job.stream).or_default() += 1;
        if let Some(old) = self.jobs.insert(id, job) {
            self.forget_stream(old.stream);
        }
    }

    fn remove_job(&mut self, id: RequestId) -> Option<Job> {
        let job = self.jobs.remove(&id)?;
        self.forget_stream(job.stream);
        Some(job)
    }

    /// One job fewer on `stream`.
    fn forget_stream(&mut self, stream: u16) {
        if let Some(count) = self.job_streams.get_mut(&stream) {
            *count -= 1;
            if *count == 0 {
                self.job_streams.remove(&stream);
            }
        }
    }

    /// TUNNEL_OPEN: starts the tunnel's task as a demand job, or refuses a
    /// name `[tls]` does not know (RESET REFUSED: the gateway can still take
    /// the browser to the original destination).
    async fn open_tunnel(&mut self, stream: u16, open: TunnelOpen) -> Result<(), DriverError> {
        let id = open.id;
        self.counts.add(Tally::Request);
        let route = self
            .config
            .tunnels
            .as_ref()
            .and_then(|t| t.route(&open.server_name).map(|route| (route, t.clone())));
        let full = self.open_requests() >= self.config.max_open_requests;
        let Some((route, tunnels)) = route.filter(|_| !full) else {
            tracing::debug!(id, stream, name = %open.server_name, full, "tunnel refused");
            self.session.handle_request_finished(id);
            self.counts.add(Tally::Reset);
            let why = if full {
                "too many open requests"
            } else {
                "no certificate or passthrough for this name"
            };
            return self.send_reset(stream, id, ErrorCode::Refused, why).await;
        };
        tracing::debug!(id, stream, name = %open.server_name, dst = %open.destination, ?route, "tunnel");
        let permits = Arc::new(Semaphore::new(CHUNKS_AHEAD));
        self.scheduler.handle_arrival(JobSpec {
            id,
            stream,
            class: RequestClass::Demand,
            urgency: Urgency::DEFAULT,
            remaining: None,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let task = TunnelTask {
            route,
            tunnels,
            handler: Arc::clone(&self.handler),
            stream,
            chunk_size: self.config.chunk_size,
            max_request_body: self.config.max_request_body,
        };
        let sink = TunnelSink {
            id,
            events: self.events_tx.clone(),
            permits: Arc::clone(&permits),
        };
        let producer = tokio::spawn(tunnel::run(task, rx, sink));
        self.insert_job(
            id,
            Job::new(stream, producer.abort_handle(), permits, Some(tx)),
        );
        Ok(())
    }

    /// TUNNEL_DATA from the gateway (the session checked it against the
    /// window): into the tunnel's queue; with END, the tunnel is over once
    /// this side's END went out too.
    fn tunnel_input(&mut self, id: RequestId, end: bool, data: Bytes) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if let Some(tx) = &job.tunnel_in {
            if !data.is_empty() {
                let _ = tx.send(Inbound::Data(data));
            }
            if end {
                let _ = tx.send(Inbound::End);
            }
        }
        if end {
            job.received_end = true;
            if job.sent_end {
                self.finish_tunnel(id);
            }
        }
    }

    /// Both halves of a tunnel are closed: forget it.
    fn finish_tunnel(&mut self, id: RequestId) {
        self.remove_job(id);
        self.scheduler.handle_done(id);
        self.session.handle_request_finished(id);
        self.counts.add(Tally::Completed);
    }

    /// PRIORITY: the request is served at `urgency` and `class` from its next
    /// chunk on; one still receiving its body starts with them. The session
    /// passes PRIORITY only for requests it holds open, so an id found in
    /// neither map would be a request already forgotten here: nothing to do.
    fn reprioritize(&mut self, id: RequestId, urgency: Urgency, class: RequestClass) {
        tracing::debug!(id, ?class, urgency = urgency.level(), "reprioritised");
        if let Some(pending) = self.pending_bodies.get_mut(&id) {
            pending.request.urgency = urgency;
            pending.request.class = class;
        } else if self.jobs.contains_key(&id) {
            self.scheduler.handle_reprioritize(id, class, urgency);
        }
    }

    /// Stops a response at the next chunk. `answer` sends RESET CANCELLED (for
    /// CANCEL); a RESET from the gateway needs no answer.
    ///
    /// A page's CANCEL or RESET also ends its pushes (docs/protocol.md,
    /// "PUSH"), also when the page itself has ended.
    async fn cancel(&mut self, id: RequestId, answer: bool) -> Result<(), DriverError> {
        self.pending_bodies.remove(&id);
        if !is_push_id(id) {
            self.end_page_pushes(id);
        }
        let Some(job) = self.remove_job(id) else {
            return Ok(());
        };
        if let Some(producer) = job.producer {
            producer.abort();
        }
        self.scheduler.handle_done(id);
        self.session.handle_request_finished(id);
        self.counts.add(Tally::Cancelled);
        if let Some(push) = &job.push {
            if push.promised {
                self.counts.add(Tally::PushCancelled);
            }
            self.push_ended();
        }
        if answer {
            self.send_reset(job.stream, id, ErrorCode::Cancelled, "cancelled")
                .await?;
        }
        Ok(())
    }

    async fn send_reset(
        &mut self,
        stream: u16,
        id: RequestId,
        code: ErrorCode,
        reason: &str,
    ) -> Result<(), DriverError> {
        let reset = Message::Reset {
            id,
            code,
            reason: reason.to_owned(),
        };
        let bytes = reset.to_bytes();
        let len = bytes.len();
        self.assoc.send(stream, bytes).await?;
        self.note_written(stream, len);
        Ok(())
    }

    /// Sends a control message on stream 0.
    async fn send_control(&mut self, bytes: Bytes) -> Result<(), TransportError> {
        let len = bytes.len();
        self.assoc.send(0, bytes).await?;
        self.note_written(0, len);
        Ok(())
    }

    /// `len` bytes of one message were handed to the transport on `stream`:
    /// with kernel SCTP and `tc_sctp`, they wait in the send queue until the
    /// egress counters see them leave.
    fn note_written(&mut self, stream: u16, len: usize) {
        self.scheduler.handle_written(stream, len as u64);
        self.trace.handle_written(stream, len);
        if let Some(egress) = &mut self.egress {
            egress.handle_written(stream, len);
        }
    }

    /// `Association::send`, warning when it blocks for long: the scheduler keeps
    /// streams below the transport's limit, so a long wait means the transport
    /// itself is stuck.
    async fn send_watched(&self, stream: u16, data: Bytes) -> Result<(), DriverError> {
        let send = self.assoc.send(stream, data);
        tokio::pin!(send);
        loop {
            match tokio::time::timeout(STALL_WARNING, &mut send).await {
                Ok(result) => return Ok(result?),
                Err(_) => gateway_transport::warn_limited!(
                    stream,
                    buffered = ?self.assoc.buffered(stream),
                    "send blocked for {STALL_WARNING:?}"
                ),
            }
        }
    }

    async fn send_next_chunk(&mut self) -> Result<(), DriverError> {
        let Some(id) = self.scheduler.poll_next() else {
            return Ok(());
        };
        let Some(job) = self.jobs.get_mut(&id) else {
            self.scheduler.handle_done(id);
            return Ok(());
        };
        let Some(produced) = job.ready.pop_front() else {
            self.scheduler.handle_ready(id, false);
            return Ok(());
        };
        job.permits.add_permits(1);
        let stream = job.stream;
        let tunnel_end = matches!(produced, Produced::TunnelEnd);
        let (message, sent, finished) = match produced {
            Produced::Head { head, .. } => {
                let len = head.len() as u64;
                (Message::ResponseHead { id, head }, len, false)
            }
            Produced::Body(data)
                if job.push.is_some()
                    && self.session.handle_push_body_sent(id, data.len()).is_err() =>
            {
                // A push of unknown length beyond its page's budget: end it
                // rather than send bytes the gateway would refuse.
                if let Some(producer) = job.producer.take() {
                    producer.abort();
                }
                let (code, reason) = push::TOO_LARGE;
                let reason = reason.to_owned();
                (Message::Reset { id, code, reason }, 0, true)
            }
            Produced::Body(data) => {
                let len = data.len() as u64;
                job.body_sent += len;
                self.counts.add(Tally::BodyBytes(len));
                if job.push.is_some() {
                    self.counts.add(Tally::PushBodyBytes(len));
                }
                (Message::ResponseBody { id, data }, len, false)
            }
            Produced::End => (
                Message::ResponseEnd {
                    id,
                    body_len: job.body_sent,
                },
                0,
                true,
            ),
            Produced::Failed(reason) => (
                Message::Reset {
                    id,
                    code: ErrorCode::InternalError,
                    reason,
                },
                0,
                true,
            ),
            Produced::TunnelData(data) => {
                let len = data.len() as u64;
                job.body_sent += len;
                self.counts.add(Tally::BodyBytes(len));
                let message = Message::TunnelData {
                    id,
                    end: false,
                    data,
                };
                (message, len, false)
            }
            Produced::TunnelEnd => {
                job.sent_end = true;
                let message = Message::TunnelData {
                    id,
                    end: true,
                    data: Bytes::new(),
                };
                (message, 0, false)
            }
        };
        if job.ready.is_empty() {
            self.scheduler.handle_ready(id, false);
        }
        let is_reset = matches!(message, Message::Reset { .. });
        let job_body_sent = job.body_sent;
        let is_push = job.push.is_some();
        let bytes = message.to_bytes();
        let len = bytes.len();
        self.send_watched(stream, bytes).await?;
        self.note_written(stream, len);
        self.scheduler.handle_sent(id, sent);
        self.counts.scheduler(self.scheduler.tally());
        if tunnel_end {
            let received_end = self.jobs.get(&id).is_some_and(|job| job.received_end);
            if self.session.handle_tunnel_end_sent(id) || received_end {
                self.finish_tunnel(id);
            }
            return Ok(());
        }
        if finished {
            tracing::debug!(
                id,
                stream,
                body_bytes = job_body_sent,
                reset = is_reset,
                "response done"
            );
            self.remove_job(id);
            self.scheduler.handle_done(id);
            self.session.handle_request_finished(id);
            if is_reset {
                self.counts.add(Tally::Reset);
            } else {
                self.counts.add(Tally::Completed);
            }
            if is_push {
                self.push_ended();
            }
        }
        Ok(())
    }
}

/// Runs the handler and pulls its body, at most [`CHUNKS_AHEAD`] chunks ahead
/// of the sender.
async fn produce<H: Handler>(
    handler: Arc<H>,
    request: IncomingRequest,
    events: mpsc::Sender<Event>,
    permits: Arc<Semaphore>,
    chunk_size: usize,
) {
    let id = request.id;
    let reply = handler.handle(request).await;
    let mut body = reply.body;
    let mut next = Some(Produced::Head {
        head: reply.head,
        body_len: reply.body_len,
    });
    while let Some(item) = next.take() {
        let last = matches!(item, Produced::End | Produced::Failed(_));
        match permits.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return,
        }
        if events.send(Event::Produced(id, item)).await.is_err() || last {
            return;
        }
        next = Some(match body.next_chunk(chunk_size).await {
            Ok(Some(chunk)) => Produced::Body(chunk),
            Ok(None) => Produced::End,
            Err(e) => {
                tracing::warn!(id, error = %e, "reading the response body failed");
                Produced::Failed(format!("body read failed: {e}"))
            }
        });
    }
}
