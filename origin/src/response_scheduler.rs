//! The response scheduler: which pending response of an association sends its
//! next chunk. (Not the SCTP stream scheduler, `sctp::StreamSchedulerKind`,
//! which orders what the transport already holds; with its default, `fcfs`,
//! the transport keeps the order decided here.)
//!
//! I/O-free and clock-free: the driver reports arrivals, readiness, bytes sent,
//! completions and depth measurements through `handle_*` calls and asks
//! [`ResponseScheduler::poll_next`] for the job whose next chunk goes out. It is called once
//! per chunk, so every policy can preempt at chunk granularity.
//!
//! Policies ([`ResponsePolicyKind`]; each a `ResponsePolicy` in `policy.rs`,
//! registered by one line of its `policies!` list):
//! - **FCFS**: the earliest arrival runs to completion; nothing passes it, not
//!   even while it has no chunk ready or its stream is full.
//! - **RR**: round robin over streams, one chunk per stream per turn.
//! - **SCF**: shortest remaining bytes first (SRPT at chunk granularity); the
//!   thesis's Shortest Connection First made preemptive.
//! - **Priority**: demand before prefetch, then RFC 9218 urgency, then arrival.
//! - **WFQ**: weighted fair queueing between classes by bytes sent, FCFS inside a
//!   class.
//! - **Queue-aware**: another policy's order, skipping streams whose backlog at the
//!   gateway (FEEDBACK, plus the bytes sent that it cannot include) is above a
//!   window or whose bytes in the transport are above a per-stream target. A
//!   stream held back because its browser does not read (see below) keeps at
//!   most one message in the transport from then on.
//!
//! The gateway backlog a queue-aware decision uses is the last report plus
//! what the origin sent that the report cannot include. With the arrived
//! bytes in the report ([`ResponseScheduler::handle_gateway_backlog_arrived`]), that
//! is exact: every byte written on the stream beyond those the gateway had
//! received when it measured (on the WAN, in either transport's buffers, or
//! sent after the report left). Without them
//! ([`ResponseScheduler::handle_gateway_backlog`]), only the bytes sent since the
//! report arrived count, and the bytes in flight when it was measured (about
//! one round trip of the stream's rate) are forgotten at every report.
//!
//! **Browser-limited streams.** A stream held back for its backlog while the
//! gateway itself reported at least half the window (the bytes wait for the
//! browser, not on the path) is *browser-limited* until it has no job left.
//! Sending to it does not bring its responses' end closer; it only refills
//! buffers. Such a stream still comes first in SCF's order when its window
//! opens again, but it may have only one message in the transport at a time,
//! so it takes about `chunk / transport_target` of the link (an eighth with
//! the shipped 16 KiB chunks and 128 KiB target) and the other streams keep
//! the rest. Without this rule a browser that reads in bursts (curl's
//! `--limit-rate` reads what has piled up at once, then pauses for seconds)
//! emptied its backlog and its own socket buffer, and its stream took one of
//! the two streams' worth the transport target admits, half the link, for as
//! long as the refill took (in one slow-consumer round at 20 Mbit/s before
//! this rule, only one of the fast downloads ran for the first 2.7 s of their
//! phase, and they kept 0.89 of their rate).
//!
//! A job's class and urgency may change while it runs
//! ([`ResponseScheduler::handle_reprioritize`], the gateway's PRIORITY): a prefetch the
//! browser now waits for is promoted to demand.
//!
//! **Pushes** (docs/protocol.md, "PUSH") come in below every request
//! ([`ResponseScheduler::handle_push_arrival`]): the policy first chooses
//! among the requests (demand and prefetch alike) and only when it picks none
//! among the render-blocking pushes, then among the other pushes. A push thus
//! never takes a chunk a request could have had, whatever the policy; pushes
//! fill what requests leave, ordered among themselves by the same policy. A
//! push the gateway reprioritises (PRIORITY under its push id: a browser now
//! waits for it) becomes a request of the class and urgency given.
//!
//! Independently of the policy, nothing is handed out while the bytes waiting in
//! the transport are at or above [`ResponseSchedulerConfig::transport_target`]: a deep
//! transport queue would send in its own FIFO order, not the scheduler's.
//!
//! What it decided is counted in a [`ResponseSchedulerTally`] (the origin's
//! `/metrics`): chunks handed out, and how often work began to be held back,
//! by reason. Holds are counted when they begin (a stream that was not held at
//! the previous decision is now), not at every decision, so the figures do not
//! depend on how often the driver asks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gateway_protocol::{RequestClass, RequestId, Urgency};
use serde::{Deserialize, Serialize};

mod policy;

pub use policy::ResponsePolicyKind;

/// The response scheduler's settings; the `[response_scheduler]` table of
/// origin.toml (`[scheduler]` before, still read with a deprecation line).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseSchedulerConfig {
    /// The policy.
    pub policy: ResponsePolicyKind,
    /// Nothing is handed out while this many bytes or more wait in the transport.
    pub transport_target: u64,
    /// WFQ: share of demand against prefetch (`demand_weight : prefetch_weight`).
    pub demand_weight: u32,
    /// WFQ: see `demand_weight`.
    pub prefetch_weight: u32,
    /// Queue-aware: skip a stream whose backlog at the gateway exceeds this, bytes.
    pub backlog_window: u64,
    /// Queue-aware: skip a stream with more than this many bytes in the transport.
    pub stream_transport_target: u64,
}

impl Default for ResponseSchedulerConfig {
    fn default() -> Self {
        Self {
            policy: ResponsePolicyKind::Scf,
            transport_target: 128 * 1024,
            demand_weight: 8,
            prefetch_weight: 1,
            backlog_window: 1024 * 1024,
            stream_transport_target: 64 * 1024,
        }
    }
}

/// What the driver knows about a response when its request arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSpec {
    /// The request.
    pub id: RequestId,
    /// The stream it came on, and its response goes on.
    pub stream: u16,
    /// Demand or prefetch.
    pub class: RequestClass,
    /// RFC 9218 urgency.
    pub urgency: Urgency,
    /// Response bytes still to send (head and body); `None` while unknown (a proxied
    /// response without Content-Length), which SCF treats as larger than any known.
    pub remaining: Option<u64>,
}

/// The scheduler's decisions since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseSchedulerTally {
    /// Messages (chunks) handed to the transport.
    pub chunks: u64,
    /// Queue-aware: times a stream with a ready job began to be passed over
    /// because its gateway backlog was above `backlog_window`.
    pub held_for_backlog: u64,
    /// Queue-aware: times a stream with a ready job began to be passed over
    /// because its bytes in the transport reached `stream_transport_target`.
    pub held_for_stream_transport: u64,
    /// Every policy: times the transport's total reached `transport_target`,
    /// holding back everything.
    pub held_for_transport: u64,
}

/// One stream as the scheduler sees it ([`ResponseScheduler::stream_views`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamView {
    /// The stream.
    pub stream: u16,
    /// Its jobs.
    pub jobs: usize,
    /// Some job on it has a chunk waiting.
    pub ready: bool,
    /// The least remaining bytes of its jobs (`u64::MAX`: unknown).
    pub remaining: Option<u64>,
    /// Bytes of every message written on it, in total.
    pub written: u64,
    /// The last reported backlog.
    pub reported: Option<u64>,
    /// The arrived bytes of the last report.
    pub arrived: Option<u32>,
    /// The backlog a queue-aware decision holds it to.
    pub backlog: Option<u64>,
    /// Its bytes in the transport, where known.
    pub in_transport: Option<u64>,
    /// Queue-aware: its browser does not keep up (see the module docs).
    pub browser_limited: bool,
    /// Queue-aware: why it was passed over at the last decision.
    pub held: Option<&'static str>,
}

/// The gateway's last FEEDBACK for one stream, and what it cannot include.
#[derive(Debug, Clone, Copy, Default)]
struct GatewayReport {
    /// The reported backlog (0 before any report).
    backlog: u64,
    /// The bytes that had arrived on the stream when it was measured, modulo
    /// 2^32, if the report said.
    arrived: Option<u32>,
    /// Without `arrived`: bytes sent on the stream since the report came.
    sent_since: u64,
}

/// Why the queue-aware policy passes a stream over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Backlog,
    StreamTransport,
}

/// Which jobs a policy chooses among, in the order the scheduler offers them:
/// a policy sees a later tier only when it picks nothing in the earlier ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    /// Requests of the gateway, demand and prefetch (and promoted pushes).
    Request,
    /// Pushes of what a page needs before it can render.
    RenderBlockingPush,
    /// The other pushes.
    Push,
}

impl Tier {
    const ALL: [Tier; 3] = [Tier::Request, Tier::RenderBlockingPush, Tier::Push];
}

#[derive(Debug, Clone, Copy)]
struct Job {
    spec: JobSpec,
    /// Requests before pushes (see the module docs).
    tier: Tier,
    /// Arrival order, the tie-breaker of every policy.
    seq: u64,
    /// False while the job has no chunk to send (file read or upstream pending).
    ready: bool,
}

/// Picks the next chunk. See the module docs.
#[derive(Debug)]
pub struct ResponseScheduler {
    config: ResponseSchedulerConfig,
    jobs: BTreeMap<RequestId, Job>,
    next_seq: u64,
    /// RR: the stream served last.
    last_stream: Option<u16>,
    /// WFQ: bytes sent per class divided by the class weight (virtual time), kept
    /// exact by scaling with the product of both weights.
    class_virtual: [u128; 2],
    /// Queue-aware inputs: the last report per stream.
    gateway_backlog: HashMap<u16, GatewayReport>,
    /// Bytes of every message written on each stream, in total
    /// ([`handle_written`](Self::handle_written)).
    written: HashMap<u16, u64>,
    /// The gateway announced FEEDBACK: sent bytes count toward the backlog.
    gateway_reports: bool,
    /// Bytes in the transport per stream where known, sorted by stream: looked up for every job on every decision, so a binary
    /// search over a few entries rather than a hashed map.
    stream_in_transport: Vec<(u16, u64)>,
    transport_queued: u64,
    /// Every policy but FCFS skips a stream with this many bytes or more in the
    /// transport (FCFS waits for it): the transport's own per-stream limit, beyond
    /// which sending would block.
    stream_limit: u64,
    /// Decisions so far.
    tally: ResponseSchedulerTally,
    /// Queue-aware: the streams passed over at the last decision, and why.
    held: HashMap<u16, Hold>,
    /// The transport was at its target at the last decision.
    transport_full: bool,
    /// The tier the policy is choosing in now ([`Self::poll_next`]).
    serving: Tier,
    /// Queue-aware: the browser-limited streams (see the module docs).
    browser_limited: BTreeSet<u16>,
}

impl ResponseScheduler {
    /// An empty scheduler.
    pub fn new(config: ResponseSchedulerConfig) -> Self {
        Self {
            config,
            jobs: BTreeMap::new(),
            next_seq: 0,
            last_stream: None,
            class_virtual: [0; 2],
            gateway_backlog: HashMap::new(),
            written: HashMap::new(),
            gateway_reports: false,
            stream_in_transport: Vec::new(),
            transport_queued: 0,
            stream_limit: u64::MAX,
            tally: ResponseSchedulerTally::default(),
            held: HashMap::new(),
            transport_full: false,
            serving: Tier::Request,
            browser_limited: BTreeSet::new(),
        }
    }

    /// What it decided so far (see the module docs).
    pub fn tally(&self) -> ResponseSchedulerTally {
        self.tally
    }

    /// Sets the per-stream transport limit every policy respects (see
    /// `stream_limit`); by default there is none.
    pub fn set_stream_limit(&mut self, bytes: u64) {
        self.stream_limit = bytes;
    }

    /// The policy in force.
    pub fn policy(&self) -> ResponsePolicyKind {
        self.config.policy
    }

    /// Jobs not yet done.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True if no job is pending.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// True if some job has a chunk waiting, whether or not a queue limit holds it
    /// back now.
    pub fn has_ready(&self) -> bool {
        self.jobs.values().any(|j| j.ready)
    }

    /// A request arrived; its job starts not ready (no chunk yet).
    pub fn handle_arrival(&mut self, spec: JobSpec) {
        self.arrive(spec, Tier::Request);
    }

    /// A push was promised: its job comes below every request, the
    /// render-blocking ones above the others (see the module docs), and
    /// starts not ready.
    pub fn handle_push_arrival(&mut self, spec: JobSpec, render_blocking: bool) {
        let tier = if render_blocking {
            Tier::RenderBlockingPush
        } else {
            Tier::Push
        };
        self.arrive(spec, tier);
    }

    fn arrive(&mut self, spec: JobSpec, tier: Tier) {
        self.activate_class(spec.class);
        self.jobs.insert(
            spec.id,
            Job {
                spec,
                tier,
                seq: self.next_seq,
                ready: false,
            },
        );
        self.next_seq += 1;
    }

    /// The gateway reprioritised a request in flight (PRIORITY): from its next
    /// chunk on the job is served as `class` at `urgency`, by every policy that
    /// looks at them (Priority, WFQ). It keeps its arrival order, so a prefetch
    /// promoted to demand goes ahead of every prefetch and ranks among demand
    /// jobs of its urgency by when it arrived.
    ///
    /// WFQ accounting: the bytes the job already sent stay charged to the class
    /// it had (they were served as that class); its later bytes are charged to
    /// the new one. A class that the move makes active starts at the least
    /// virtual time of the active classes, exactly as for an arrival, so a
    /// promotion earns no burst from the class's idle time.
    ///
    /// A push reprioritised becomes a request (the gateway says a browser
    /// waits for it), keeping its arrival order.
    ///
    /// An unknown id (the job has ended) is ignored: PRIORITY may cross a
    /// response's end.
    pub fn handle_reprioritize(&mut self, id: RequestId, class: RequestClass, urgency: Urgency) {
        let Some(old_class) = self.jobs.get(&id).map(|j| j.spec.class) else {
            return;
        };
        if old_class != class {
            // While the job still counts in its old class, which stays active
            // until the move: the floor includes that class's virtual time.
            self.activate_class(class);
        }
        if let Some(job) = self.jobs.get_mut(&id) {
            job.spec.class = class;
            job.spec.urgency = urgency;
            job.tier = Tier::Request;
        }
    }

    /// A job is about to join `class`. A class becoming active starts at the
    /// least virtual time of the active ones, so idle time earns it no burst.
    fn activate_class(&mut self, class: RequestClass) {
        let class = class_index(class);
        if self
            .jobs
            .values()
            .any(|j| class_index(j.spec.class) == class)
        {
            return;
        }
        let floor = self
            .jobs
            .values()
            .map(|j| self.class_virtual[class_index(j.spec.class)])
            .min();
        if let Some(floor) = floor {
            self.class_virtual[class] = self.class_virtual[class].max(floor);
        }
    }

    /// Whether the job has a chunk waiting to be sent.
    pub fn handle_ready(&mut self, id: RequestId, ready: bool) {
        if let Some(job) = self.jobs.get_mut(&id) {
            job.ready = ready;
        }
    }

    /// The total response size became known (or changed, as for a proxied response
    /// whose head arrived).
    pub fn handle_size(&mut self, id: RequestId, remaining: u64) {
        if let Some(job) = self.jobs.get_mut(&id) {
            job.spec.remaining = Some(remaining);
        }
    }

    /// A chunk of `bytes` of job `id` was handed to the transport.
    pub fn handle_sent(&mut self, id: RequestId, bytes: u64) {
        if let Some(job) = self.jobs.get_mut(&id) {
            self.tally.chunks += 1;
            if let Some(remaining) = &mut job.spec.remaining {
                *remaining = remaining.saturating_sub(bytes);
            }
            let class = class_index(job.spec.class);
            // bytes / own weight, times (demand weight * prefetch weight).
            let other_weight = match job.spec.class {
                RequestClass::Demand => self.config.prefetch_weight,
                RequestClass::Prefetch => self.config.demand_weight,
            };
            self.class_virtual[class] += u128::from(bytes) * u128::from(other_weight);
            self.last_stream = Some(job.spec.stream);
            // On their way to the gateway's backlog, which its next report
            // will include; until then they count here, so a stream never gets
            // more than its window beyond what the gateway last reported.
            if self.gateway_reports {
                let report = self.gateway_backlog.entry(job.spec.stream).or_default();
                report.sent_since = report.sent_since.saturating_add(bytes);
            }
        }
    }

    /// The job finished, was cancelled or failed: forget it. A stream left
    /// without jobs is no longer browser-limited.
    pub fn handle_done(&mut self, id: RequestId) {
        let Some(job) = self.jobs.remove(&id) else {
            return;
        };
        let stream = job.spec.stream;
        if !self.jobs.values().any(|j| j.spec.stream == stream) {
            self.browser_limited.remove(&stream);
        }
    }

    /// FEEDBACK from the gateway: bytes of `stream` not yet delivered to browsers.
    ///
    /// Once the gateway has announced FEEDBACK
    /// ([`handle_gateway_reports`](Self::handle_gateway_reports)), the bytes
    /// sent on a stream are added to its last reported figure (0 before any
    /// report) until the next report replaces it: the queue-aware policy then
    /// holds the stream back once it has sent its window beyond what the
    /// gateway last reported, without waiting for the report that would show it
    /// (on a fast path a whole report interval's worth of the association's
    /// rate could otherwise pour into a slow browser's stream). Such a gateway
    /// reports every stream that received bytes since its previous report.
    ///
    /// A report without the arrived bytes forgets what was in flight toward
    /// the gateway when it was measured: prefer
    /// [`handle_gateway_backlog_arrived`](Self::handle_gateway_backlog_arrived).
    pub fn handle_gateway_backlog(&mut self, stream: u16, bytes: u64) {
        self.gateway_backlog.insert(
            stream,
            GatewayReport {
                backlog: bytes,
                arrived: None,
                sent_since: 0,
            },
        );
    }

    /// FEEDBACK with the arrived bytes ([`Capabilities::FEEDBACK_ARRIVED`]):
    /// `bytes` not yet delivered to browsers when the gateway had received
    /// `arrived` bytes (modulo 2^32) of the messages written on `stream`. The
    /// stream's backlog is then `bytes` plus every byte written on it beyond
    /// `arrived` ([`handle_written`](Self::handle_written)): those sent after
    /// the report left and those still on their way when it was measured.
    /// An `arrived` beyond what was written (which a correct gateway never
    /// reports) counts as nothing in flight.
    ///
    /// [`Capabilities::FEEDBACK_ARRIVED`]: gateway_protocol::Capabilities::FEEDBACK_ARRIVED
    pub fn handle_gateway_backlog_arrived(&mut self, stream: u16, bytes: u64, arrived: u32) {
        self.gateway_backlog.insert(
            stream,
            GatewayReport {
                backlog: bytes,
                arrived: Some(arrived),
                sent_since: 0,
            },
        );
    }

    /// `bytes` of one message (any type, header included) were handed to the
    /// transport on `stream`: what the gateway counts as arrived there.
    pub fn handle_written(&mut self, stream: u16, bytes: u64) {
        let written = self.written.entry(stream).or_insert(0);
        *written = written.wrapping_add(bytes);
    }

    /// The backlog at the gateway the queue-aware policy holds `stream` to:
    /// the last report plus what it cannot include; `None` before any report
    /// from a gateway that did not announce FEEDBACK.
    pub fn gateway_backlog(&self, stream: u16) -> Option<u64> {
        let report = self.gateway_backlog.get(&stream)?;
        let unseen = match report.arrived {
            Some(arrived) => {
                let written = self.written.get(&stream).copied().unwrap_or(0);
                // Modulo 2^32, as on the wire: the truncation is the point.
                let in_flight = (written as u32).wrapping_sub(arrived);
                if in_flight > u32::MAX / 2 {
                    0
                } else {
                    u64::from(in_flight)
                }
            }
            None => report.sent_since,
        };
        Some(report.backlog.saturating_add(unseen))
    }

    /// The gateway announced FEEDBACK: from now on the bytes sent on every
    /// stream count toward its gateway backlog until a report replaces them
    /// (see [`handle_gateway_backlog`](Self::handle_gateway_backlog)).
    pub fn handle_gateway_reports(&mut self) {
        self.gateway_reports = true;
    }

    /// Bytes waiting in the transport: in total, and for each stream where known
    /// (the eBPF egress counters give it; userspace accounting gives the total).
    pub fn handle_transport_queued(&mut self, total: u64, per_stream: &[(u16, u64)]) {
        self.transport_queued = total;
        self.stream_in_transport.clear();
        self.stream_in_transport.extend_from_slice(per_stream);
        if !self.stream_in_transport.is_sorted() {
            self.stream_in_transport.sort_unstable();
        }
    }

    /// Bytes waiting in the transport at the last measurement.
    pub fn transport_queued(&self) -> u64 {
        self.transport_queued
    }

    /// The job whose next chunk should be sent now, if any may be.
    pub fn poll_next(&mut self) -> Option<RequestId> {
        let full = self.transport_queued >= self.config.transport_target;
        if full && !self.transport_full {
            self.tally.held_for_transport += 1;
        }
        self.transport_full = full;
        if full {
            return None;
        }
        let policy = self.config.policy.policy();
        if policy.counts_holds() {
            self.note_holds();
        }
        for tier in Tier::ALL {
            self.serving = tier;
            if let Some(id) = policy.choose(self) {
                return Some(id);
            }
        }
        None
    }

    /// Per stream with a job, what a queue-aware decision sees now (for the
    /// driver's debug time series, `origin::schedule`).
    pub fn stream_views(&self) -> Vec<StreamView> {
        let mut views: BTreeMap<u16, StreamView> = BTreeMap::new();
        for job in self.jobs.values() {
            let stream = job.spec.stream;
            let view = views.entry(stream).or_insert_with(|| {
                let report = self.gateway_backlog.get(&stream);
                StreamView {
                    stream,
                    jobs: 0,
                    ready: false,
                    remaining: None,
                    written: self.written.get(&stream).copied().unwrap_or(0),
                    reported: report.map(|r| r.backlog),
                    arrived: report.and_then(|r| r.arrived),
                    backlog: self.gateway_backlog(stream),
                    in_transport: self.in_transport(stream),
                    browser_limited: self.browser_limited.contains(&stream),
                    held: self.held.get(&stream).map(|h| match h {
                        Hold::Backlog => "backlog",
                        Hold::StreamTransport => "stream-transport",
                    }),
                }
            });
            view.jobs += 1;
            view.ready |= job.ready;
            let remaining = job.spec.remaining.unwrap_or(u64::MAX);
            view.remaining = Some(view.remaining.map_or(remaining, |r| r.min(remaining)));
        }
        views.into_values().collect()
    }
}

impl ResponseScheduler {
    /// Whether `job` may send now as far as the transport is concerned: it
    /// has a chunk ready and its stream is below the transport's own
    /// per-stream limit. Every policy chooses among these.
    fn sendable(&self, job: &Job) -> bool {
        job.tier == self.serving
            && job.ready
            && self
                .in_transport(job.spec.stream)
                .is_none_or(|t| t < self.stream_limit)
    }

    /// The jobs of the tier being chosen in, by request id.
    fn tier_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter(|j| j.tier == self.serving)
    }

    /// The jobs that may send now (see [`Self::sendable`]), by request id.
    fn sendable_jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter(|j| self.sendable(j))
    }

    /// Queue-aware: false for a browser-limited stream with a message in the
    /// transport (see the module docs).
    fn may_queue_more(&self, stream: u16) -> bool {
        !self.browser_limited.contains(&stream) || self.in_transport(stream).is_none_or(|t| t == 0)
    }

    /// The bytes of `stream` in the transport, where known.
    fn in_transport(&self, stream: u16) -> Option<u64> {
        self.stream_in_transport
            .binary_search_by_key(&stream, |&(s, _)| s)
            .ok()
            .map(|i| self.stream_in_transport[i].1)
    }

    /// Queue-aware: which streams with a ready job the policy passes over
    /// now, counting those that were not passed over (for that reason) at the
    /// previous decision.
    fn note_holds(&mut self) {
        let (window, target) = (
            self.config.backlog_window,
            self.config.stream_transport_target,
        );
        let mut held = HashMap::new();
        for job in self.jobs.values().filter(|j| j.ready) {
            let stream = job.spec.stream;
            let hold = if self.gateway_backlog(stream).is_some_and(|b| b > window) {
                let reported = self.gateway_backlog.get(&stream).map_or(0, |r| r.backlog);
                if reported >= window / 2 {
                    self.browser_limited.insert(stream);
                }
                Hold::Backlog
            } else if self.in_transport(stream).is_some_and(|t| t >= target)
                || !self.may_queue_more(stream)
            {
                Hold::StreamTransport
            } else {
                continue;
            };
            held.insert(stream, hold);
        }
        for (stream, hold) in &held {
            if self.held.get(stream) != Some(hold) {
                match hold {
                    Hold::Backlog => self.tally.held_for_backlog += 1,
                    Hold::StreamTransport => self.tally.held_for_stream_transport += 1,
                }
            }
        }
        self.held = held;
    }
}

fn scf_key(job: &Job) -> (u64, u64) {
    (job.spec.remaining.unwrap_or(u64::MAX), job.seq)
}

fn class_index(class: RequestClass) -> usize {
    match class {
        RequestClass::Demand => 0,
        RequestClass::Prefetch => 1,
    }
}

#[cfg(test)]
mod tests;
