//! Per-stream backlog at the gateway and the FEEDBACK that reports it: the
//! I/O-free core ([`Backlog`]) that the association's feedback driver feeds.
//!
//! ```text
//!  origin ──RESPONSE_BODY──► receive task ──► response queue ──► front (hyper) ──► browser socket ──► browser
//!                            handle_received     handle_delivered                  SIOCOUTQ: unsent + unacked
//!                            └──────────── queued ─────────────┘                  └─── socket_queued ───┘
//!  backlog(stream) = queued(stream) + socket_queued(stream)
//! ```
//!
//! - **queued**: RESPONSE_BODY bytes the association delivered for requests on
//!   the stream and that the front has not yet taken from the response's queue.
//!   Counted per request, so a request that ends with bytes still queued (its
//!   reader went away) gives them back at once ([`Backlog::handle_request_ended`]):
//!   nothing leaks.
//! - **socket_queued**: the sum, over the browser connections pinned to the
//!   stream, of their TCP sockets' unsent and unacknowledged bytes
//!   (`ioctl(SIOCOUTQ)`), set afresh at every tick
//!   ([`Backlog::handle_socket_queues`]).
//!
//! Invariants: `queued(stream)` is the sum of `received - delivered` over the
//! stream's open requests; a request's delivered bytes never exceed its
//! received bytes (extra delivered bytes, which a correct caller never reports,
//! are counted in `delivered` but do not lower `queued`).
//!
//! FEEDBACK ([`Backlog::poll_feedback`]) goes out at most once per interval and
//! lists the streams whose backlog differs from what the origin last heard or
//! that received bytes since their last report (the origin counts the bytes it
//! sent on a stream since its last report toward the backlog, and a report
//! replaces that estimate: a busy stream whose figure happens to be unchanged
//! must still be confirmed, or the origin's estimate would only grow), at most [`MAX_FEEDBACK_ENTRIES`] per message (the rest follow at the next
//! tick). One exception to the interval: a stream whose backlog has grown by
//! [`FEEDBACK_GROWTH_STEP`] or more since its last report is reported at once,
//! because the origin can pour a whole interval's worth of the association's
//! rate into a stream whose browser is slow (a burst at the start of a
//! response, typically); decreases and small changes wait for the tick.
//! Nothing is sent while every stream is at the value last reported, so an
//! idle association carries no FEEDBACK; [`Backlog::poll_timeout`] says when
//! the driver must look again (`None`: idle, wait for bytes).
//!
//! **Arrived bytes.** To an origin that announced `FEEDBACK_ARRIVED`, each
//! entry also carries the bytes of every message that had arrived on the
//! stream when the backlog was measured ([`Backlog::handle_arrived`], counted
//! before the message is even parsed, so that nothing the origin wrote is
//! missed: heads, ends, resets, bytes of requests that have ended). The origin
//! counts everything it wrote beyond them as on its way to the backlog, which
//! the figure cannot include: the bytes on the WAN and in both transports'
//! buffers when it was measured. Without them, each report replaced the
//! origin's count with a figure that missed about one round trip of the
//! stream's rate, and a slow browser's stream could hold its window plus that
//! (docs/gateway-origin-link.md). A stream whose arrived bytes changed since
//! its last report is not settled: the origin hears about a response's last
//! message too.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use gateway_protocol::{MAX_FEEDBACK_ENTRIES, RequestId, StreamBacklog};
use serde::{Deserialize, Serialize};

/// Growth of one stream's backlog since its last report, in bytes, that is
/// reported at once instead of at the next tick: two 64 KiB chunks, so at most
/// one FEEDBACK per 128 KiB received on top of the ticks.
pub const FEEDBACK_GROWTH_STEP: u64 = 128 * 1024;

/// One data stream's figures, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFigures {
    /// The data stream.
    pub stream: u16,
    /// RESPONSE_BODY bytes received for requests on it, in total.
    pub received: u64,
    /// Bytes of those the front took from the response queues, in total.
    pub delivered: u64,
    /// Bytes of those dropped because their request ended first, in total.
    pub discarded: u64,
    /// Bytes in the response queues now.
    pub queued: u64,
    /// Unsent and unacknowledged bytes in the pinned browser sockets, at the
    /// last tick.
    pub socket_queued: u64,
    /// `queued + socket_queued`.
    pub backlog: u64,
    /// Largest backlog seen at a tick or on arrival.
    pub peak: u64,
    /// What the origin heard last (`None`: never reported).
    pub reported: Option<u32>,
    /// Bytes of every message that arrived on the stream, in total.
    pub arrived: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct StreamState {
    received: u64,
    delivered: u64,
    discarded: u64,
    queued: u64,
    socket_queued: u64,
    peak: u64,
    reported: Option<u32>,
    /// Bytes received since the last report.
    unreported: u64,
    /// Bytes of every message that arrived on the stream.
    arrived: u64,
    /// `arrived` at the last report.
    arrived_reported: u64,
}

impl StreamState {
    fn backlog(&self) -> u64 {
        self.queued.saturating_add(self.socket_queued)
    }

    /// The value FEEDBACK carries: bytes, saturated at `u32::MAX`.
    fn wire_value(&self) -> u32 {
        u32::try_from(self.backlog()).unwrap_or(u32::MAX)
    }

    fn note_peak(&mut self) {
        self.peak = self.peak.max(self.backlog());
    }

    fn is_settled(&self, with_arrived: bool) -> bool {
        self.unreported == 0
            && self.reported.unwrap_or(0) == self.wire_value()
            && (!with_arrived || self.arrived == self.arrived_reported)
    }

    /// Grown so much since the last report that it cannot wait for the tick.
    fn is_urgent(&self) -> bool {
        let reported = u64::from(self.reported.unwrap_or(0));
        u64::from(self.wire_value()) >= reported + FEEDBACK_GROWTH_STEP
    }
}

#[derive(Debug, Clone, Copy)]
struct RequestTally {
    stream: u16,
    queued: u64,
}

/// The per-stream backlog of one association. See the module docs.
#[derive(Debug)]
pub struct Backlog {
    interval: Duration,
    streams: BTreeMap<u16, StreamState>,
    requests: HashMap<RequestId, RequestTally>,
    /// No FEEDBACK before this (one interval after the last look that was due).
    next_allowed: Option<Instant>,
    /// FEEDBACK messages handed out.
    sent: u64,
    /// Entries carry the arrived bytes (the origin announced `FEEDBACK_ARRIVED`).
    with_arrived: bool,
}

impl Backlog {
    /// An empty tracker that reports at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            streams: BTreeMap::new(),
            requests: HashMap::new(),
            next_allowed: None,
            sent: 0,
            with_arrived: false,
        }
    }

    /// Entries carry the arrived bytes from now on (see the module docs).
    pub fn report_arrived(&mut self) {
        self.with_arrived = true;
    }

    /// One message of `bytes` (header included, any type, for any request or
    /// none) arrived on data stream `stream`.
    pub fn handle_arrived(&mut self, stream: u16, bytes: u64) {
        let state = self.streams.entry(stream).or_default();
        state.arrived = state.arrived.wrapping_add(bytes);
    }

    /// A request was sent on `stream`; its response bytes will count there.
    /// An id still open (which the link never reuses) ends first.
    pub fn handle_request_opened(&mut self, id: RequestId, stream: u16) {
        self.handle_request_ended(id);
        self.requests.insert(id, RequestTally { stream, queued: 0 });
        self.streams.entry(stream).or_default();
    }

    /// `bytes` of RESPONSE_BODY for `id` arrived and go to its reader's queue.
    /// Ignored for a request that has ended (the bytes are dropped).
    pub fn handle_received(&mut self, id: RequestId, bytes: u64) {
        let Some(tally) = self.requests.get_mut(&id) else {
            return;
        };
        tally.queued += bytes;
        let stream = self.streams.entry(tally.stream).or_default();
        stream.received += bytes;
        stream.unreported += bytes;
        stream.queued += bytes;
        stream.note_peak();
    }

    /// The front took `bytes` of `id`'s body from its queue (toward the
    /// browser socket).
    pub fn handle_delivered(&mut self, id: RequestId, bytes: u64) {
        let Some(tally) = self.requests.get_mut(&id) else {
            return;
        };
        let taken = bytes.min(tally.queued);
        tally.queued -= taken;
        let stream = self.streams.entry(tally.stream).or_default();
        stream.delivered += bytes;
        stream.queued -= taken;
    }

    /// The request ended (complete, reset, cancelled, reader gone): bytes still
    /// in its queue are dropped with it.
    pub fn handle_request_ended(&mut self, id: RequestId) {
        let Some(tally) = self.requests.remove(&id) else {
            return;
        };
        let stream = self.streams.entry(tally.stream).or_default();
        stream.queued -= tally.queued;
        stream.discarded += tally.queued;
    }

    /// The browser sockets' unsent and unacknowledged bytes per stream, measured
    /// now; streams not listed have none. Repeated streams add up.
    pub fn handle_socket_queues(&mut self, per_stream: &[(u16, u64)]) {
        for state in self.streams.values_mut() {
            state.socket_queued = 0;
        }
        for &(stream, bytes) in per_stream {
            let state = self.streams.entry(stream).or_default();
            state.socket_queued = state.socket_queued.saturating_add(bytes);
        }
        for state in self.streams.values_mut() {
            state.note_peak();
        }
    }

    /// The FEEDBACK entries to send now, if any is due (the interval has
    /// passed, or a stream grew by [`FEEDBACK_GROWTH_STEP`]): the streams whose
    /// backlog differs from their last report, lowest stream first, at most
    /// [`MAX_FEEDBACK_ENTRIES`]. Marks them reported.
    pub fn poll_feedback(&mut self, now: Instant) -> Option<Vec<StreamBacklog>> {
        if !self.is_due(now) {
            return None;
        }
        let with_arrived = self.with_arrived;
        let entries: Vec<StreamBacklog> = self
            .streams
            .iter_mut()
            .filter(|(_, s)| !s.is_settled(with_arrived))
            .take(MAX_FEEDBACK_ENTRIES)
            .map(|(&stream, s)| {
                let bytes = s.wire_value();
                s.reported = Some(bytes);
                s.unreported = 0;
                s.arrived_reported = s.arrived;
                StreamBacklog {
                    stream,
                    bytes,
                    // Modulo 2^32 on the wire: the truncation is the point.
                    arrived: with_arrived.then_some(s.arrived as u32),
                }
            })
            .collect();
        if entries.is_empty() {
            // Nothing to say while a backlog stands still (a stuck browser):
            // look again an interval later, so the driver does not spin. An
            // idle core keeps its slot: the first bytes are reported at once.
            if self.streams.values().any(|s| s.backlog() > 0) {
                self.next_allowed = Some(now + self.interval);
            }
            return None;
        }
        self.next_allowed = Some(now + self.interval);
        self.sent += 1;
        Some(entries)
    }

    /// Whether a FEEDBACK may go out now (the interval has passed, or a stream
    /// grew by [`FEEDBACK_GROWTH_STEP`]): the driver measures the sockets
    /// before polling then.
    pub fn is_due(&self, now: Instant) -> bool {
        self.next_allowed.is_none_or(|at| now >= at)
            || self.streams.values().any(StreamState::is_urgent)
    }

    /// When the driver should measure and poll again: `None` while every
    /// stream's backlog is zero and reported as such (idle: wait for bytes);
    /// otherwise the next moment a FEEDBACK may go out (possibly already past).
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let busy = self
            .streams
            .values()
            .any(|s| s.backlog() > 0 || !s.is_settled(self.with_arrived));
        busy.then(|| self.next_allowed.unwrap_or(now).max(now))
    }

    /// Per-stream figures, lowest stream first (streams that never carried a
    /// request or socket bytes are absent).
    pub fn figures(&self) -> Vec<StreamFigures> {
        self.streams
            .iter()
            .map(|(&stream, s)| StreamFigures {
                stream,
                received: s.received,
                delivered: s.delivered,
                discarded: s.discarded,
                queued: s.queued,
                socket_queued: s.socket_queued,
                backlog: s.backlog(),
                peak: s.peak,
                reported: s.reported,
                arrived: s.arrived,
            })
            .collect()
    }

    /// FEEDBACK messages handed out so far.
    pub fn feedback_sent(&self) -> u64 {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(20);

    fn entry(stream: u16, bytes: u32) -> StreamBacklog {
        StreamBacklog {
            stream,
            bytes,
            arrived: None,
        }
    }

    fn figures(b: &Backlog, stream: u16) -> StreamFigures {
        b.figures()
            .into_iter()
            .find(|f| f.stream == stream)
            .unwrap_or_default()
    }

    #[test]
    fn backlog_is_queued_plus_socket_bytes_per_stream() {
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(1, 1);
        b.handle_request_opened(2, 1);
        b.handle_request_opened(3, 2);
        b.handle_received(1, 1000);
        b.handle_received(2, 500);
        b.handle_received(3, 70);
        b.handle_delivered(1, 400);
        b.handle_socket_queues(&[(1, 300), (2, 5), (1, 1)]);
        let one = figures(&b, 1);
        assert_eq!(
            (one.received, one.delivered, one.queued, one.socket_queued),
            (1500, 400, 1100, 301)
        );
        assert_eq!(one.backlog, 1401);
        assert_eq!(figures(&b, 2).backlog, 75);
        // Socket figures are replaced, not added, at the next tick.
        b.handle_socket_queues(&[]);
        assert_eq!(figures(&b, 1).backlog, 1100);
        // The peak was before the front took 400 bytes.
        assert_eq!(figures(&b, 1).peak, 1500);
    }

    #[test]
    fn an_ended_request_gives_its_queued_bytes_back() {
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(7, 3);
        b.handle_received(7, 64 * 1024);
        b.handle_delivered(7, 16 * 1024);
        b.handle_request_ended(7);
        let f = figures(&b, 3);
        assert_eq!((f.queued, f.discarded, f.backlog), (0, 48 * 1024, 0));
        // Bytes for it after the end are not counted anywhere.
        b.handle_received(7, 10);
        b.handle_delivered(7, 10);
        b.handle_request_ended(7);
        assert_eq!(figures(&b, 3).received, 64 * 1024);
        assert_eq!(figures(&b, 3).backlog, 0);
    }

    #[test]
    fn delivered_beyond_received_never_underflows() {
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(1, 1);
        b.handle_received(1, 10);
        b.handle_delivered(1, 25);
        b.handle_request_ended(1);
        let f = figures(&b, 1);
        assert_eq!((f.queued, f.delivered, f.discarded), (0, 25, 0));
    }

    #[test]
    fn feedback_reports_changes_once_per_interval_and_nothing_when_idle() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        assert_eq!(b.poll_timeout(t0), None, "nothing ever happened");
        assert_eq!(b.poll_feedback(t0), None);
        b.handle_request_opened(1, 4);
        assert_eq!(b.poll_timeout(t0), None, "a request without bytes is idle");
        b.handle_received(1, 4096);
        assert_eq!(b.poll_timeout(t0), Some(t0));
        assert_eq!(b.poll_feedback(t0), Some(vec![entry(4, 4096)]));
        // More bytes within the interval wait for it.
        b.handle_received(1, 4096);
        assert_eq!(b.poll_feedback(t0 + TICK / 2), None);
        assert_eq!(b.poll_timeout(t0 + TICK / 2), Some(t0 + TICK));
        assert_eq!(b.poll_feedback(t0 + TICK), Some(vec![entry(4, 8192)]));
        // Unchanged and nothing received: nothing is sent, and the driver
        // looks again an interval later (it must not spin on a stuck browser).
        assert_eq!(b.poll_feedback(t0 + 3 * TICK), None);
        assert_eq!(b.poll_timeout(t0 + 3 * TICK), Some(t0 + 4 * TICK));
        // Drained: one last report of 0 at the next look, then idle.
        b.handle_delivered(1, 8192);
        assert_eq!(b.poll_feedback(t0 + 3 * TICK), None);
        assert_eq!(b.poll_feedback(t0 + 4 * TICK), Some(vec![entry(4, 0)]));
        assert_eq!(b.poll_timeout(t0 + 4 * TICK), None);
        assert_eq!(b.poll_feedback(t0 + 10 * TICK), None);
        assert_eq!(b.feedback_sent(), 3);
    }

    #[test]
    fn fast_growth_is_reported_before_the_tick() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(1, 1);
        b.handle_request_opened(2, 2);
        b.handle_received(1, 1000);
        assert_eq!(b.poll_feedback(t0), Some(vec![entry(1, 1000)]));
        b.handle_received(2, 10);
        b.handle_received(1, FEEDBACK_GROWTH_STEP - 1);
        assert_eq!(b.poll_feedback(t0), None, "not grown enough");
        b.handle_received(1, 1000);
        let grown = 2000 + FEEDBACK_GROWTH_STEP as u32 - 1;
        // Every unsettled stream rides along.
        assert_eq!(
            b.poll_feedback(t0),
            Some(vec![entry(1, grown), entry(2, 10)])
        );
        // A large decrease waits for the tick.
        b.handle_delivered(1, u64::from(grown));
        assert_eq!(b.poll_feedback(t0 + TICK / 2), None);
        assert_eq!(b.poll_feedback(t0 + TICK), Some(vec![entry(1, 0)]));
    }

    #[test]
    fn feedback_lists_only_changed_streams_in_order() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        for (id, stream) in [(1, 5), (2, 2), (3, 9)] {
            b.handle_request_opened(id, stream);
            b.handle_received(id, 100);
        }
        assert_eq!(
            b.poll_feedback(t0),
            Some(vec![entry(2, 100), entry(5, 100), entry(9, 100)])
        );
        b.handle_delivered(3, 100);
        b.handle_socket_queues(&[(2, 100), (5, 0)]);
        assert_eq!(
            b.poll_feedback(t0 + TICK),
            Some(vec![entry(2, 200), entry(9, 0)])
        );
    }

    #[test]
    fn feedback_is_bounded_and_the_rest_follows() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        let streams = MAX_FEEDBACK_ENTRIES as u32 + 10;
        for id in 1..=streams {
            let stream = u16::try_from(id).expect("fits");
            b.handle_request_opened(id, stream);
            b.handle_received(id, 1);
        }
        let first = b.poll_feedback(t0).expect("due");
        assert_eq!(first.len(), MAX_FEEDBACK_ENTRIES);
        assert_eq!(first[0], entry(1, 1));
        let rest = b.poll_feedback(t0 + TICK).expect("due");
        assert_eq!(rest.len(), 10);
        assert_eq!(rest[0].stream, MAX_FEEDBACK_ENTRIES as u16 + 1);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Open(RequestId, u16),
        Received(RequestId, u64),
        Delivered(RequestId, u64),
        Ended(RequestId),
        Sockets(Vec<(u16, u64)>),
        Poll(u64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let id = 1..8u32;
        let stream = 1..5u16;
        prop_oneof![
            (id.clone(), stream.clone()).prop_map(|(i, s)| Step::Open(i, s)),
            (id.clone(), 0..200_000u64).prop_map(|(i, b)| Step::Received(i, b)),
            (id.clone(), 0..200_000u64).prop_map(|(i, b)| Step::Delivered(i, b)),
            id.prop_map(Step::Ended),
            proptest::collection::vec((stream, 0..100_000u64), 0..4).prop_map(Step::Sockets),
            (0..50u64).prop_map(Step::Poll),
        ]
    }

    proptest::proptest! {
        /// Any sequence of calls: queued bytes equal the model's, nothing is
        /// reported that differs from the figures, and once every request has
        /// ended and the sockets are empty, one report of 0 per stream at most
        /// follows and the core goes idle.
        #[test]
        fn any_sequence_keeps_the_books_and_ends_idle(
            steps in proptest::collection::vec(step(), 0..120)
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut b = Backlog::new(TICK);
            // The model: per open request, its stream and queued bytes.
            let mut open: HashMap<RequestId, (u16, u64)> = HashMap::new();
            let mut sockets: BTreeMap<u16, u64> = BTreeMap::new();
            let mut reported: BTreeMap<u16, u32> = BTreeMap::new();
            for step in steps {
                match step {
                    Step::Open(id, stream) => {
                        b.handle_request_opened(id, stream);
                        open.insert(id, (stream, 0));
                    }
                    Step::Received(id, bytes) => {
                        b.handle_received(id, bytes);
                        if let Some((_, q)) = open.get_mut(&id) {
                            *q += bytes;
                        }
                    }
                    Step::Delivered(id, bytes) => {
                        b.handle_delivered(id, bytes);
                        if let Some((_, q)) = open.get_mut(&id) {
                            *q -= bytes.min(*q);
                        }
                    }
                    Step::Ended(id) => {
                        b.handle_request_ended(id);
                        open.remove(&id);
                    }
                    Step::Sockets(per_stream) => {
                        b.handle_socket_queues(&per_stream);
                        sockets.clear();
                        for (s, bytes) in per_stream {
                            *sockets.entry(s).or_default() += bytes;
                        }
                    }
                    Step::Poll(ms) => {
                        now += Duration::from_millis(ms);
                        if let Some(entries) = b.poll_feedback(now) {
                            proptest::prop_assert!(entries.len() <= MAX_FEEDBACK_ENTRIES);
                            for e in entries {
                                reported.insert(e.stream, e.bytes);
                            }
                        }
                        // No spinning: a driver woken now has been answered
                        // and sleeps until later (or until bytes arrive).
                        proptest::prop_assert!(
                            b.poll_timeout(now).is_none_or(|at| at > now),
                            "the driver would spin at {:?}",
                            b.figures()
                        );
                    }
                }
                for f in b.figures() {
                    let queued: u64 = open
                        .values()
                        .filter(|(s, _)| *s == f.stream)
                        .map(|(_, q)| q)
                        .sum();
                    let socket = sockets.get(&f.stream).copied().unwrap_or(0);
                    proptest::prop_assert_eq!(f.queued, queued, "{:?}", f);
                    proptest::prop_assert_eq!(f.backlog, queued + socket);
                    proptest::prop_assert!(f.peak >= f.backlog);
                    proptest::prop_assert_eq!(f.reported, reported.get(&f.stream).copied());
                }
            }
            // Everything ends and drains: at most one more report, of zeros.
            let ids: Vec<RequestId> = open.keys().copied().collect();
            for id in ids {
                b.handle_request_ended(id);
            }
            b.handle_socket_queues(&[]);
            now += TICK;
            if let Some(entries) = b.poll_feedback(now) {
                proptest::prop_assert!(entries.iter().all(|e| e.bytes == 0), "{:?}", entries);
            }
            proptest::prop_assert_eq!(b.poll_timeout(now + TICK), None);
            proptest::prop_assert_eq!(b.poll_feedback(now + 10 * TICK), None);
        }
    }

    #[test]
    fn huge_backlogs_saturate_on_the_wire() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(1, 1);
        b.handle_received(1, u64::from(u32::MAX) + 5);
        assert_eq!(b.poll_feedback(t0), Some(vec![entry(1, u32::MAX)]));
        // Still saturated, but bytes arrived: confirmed all the same.
        b.handle_received(1, 5);
        assert_eq!(b.poll_feedback(t0 + TICK), Some(vec![entry(1, u32::MAX)]));
        assert_eq!(b.poll_feedback(t0 + 2 * TICK), None);
    }

    #[test]
    fn entries_carry_the_arrived_bytes_and_a_last_message_is_reported() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(1, 3);
        b.handle_arrived(3, 100);
        b.handle_received(1, 88);
        // Without the capability: the 6-byte entries, as before.
        assert_eq!(b.poll_feedback(t0), Some(vec![entry(3, 88)]));
        b.report_arrived();
        b.handle_arrived(3, 50);
        b.handle_received(1, 38);
        let wide = |bytes, arrived| StreamBacklog {
            stream: 3,
            bytes,
            arrived: Some(arrived),
        };
        assert_eq!(b.poll_feedback(t0 + TICK), Some(vec![wide(126, 150)]));
        // The response's end carries no body, and the request is over: the
        // backlog figure is unchanged, but the origin counted those bytes
        // as on their way and must hear they arrived.
        b.handle_arrived(3, 16);
        b.handle_request_ended(1);
        assert_eq!(b.poll_feedback(t0 + 2 * TICK), Some(vec![wide(0, 166)]));
        assert_eq!(b.poll_timeout(t0 + 3 * TICK), None, "settled");
        // Bytes for a request that has ended still count as arrived.
        b.handle_arrived(3, 1000);
        b.handle_received(1, 988);
        assert_eq!(b.poll_feedback(t0 + 3 * TICK), Some(vec![wide(0, 1166)]));
        assert_eq!(figures(&b, 3).arrived, 1166);
    }

    #[test]
    fn a_busy_stream_is_confirmed_even_when_its_figure_is_unchanged() {
        let t0 = Instant::now();
        let mut b = Backlog::new(TICK);
        b.handle_request_opened(1, 1);
        b.handle_received(1, 100);
        b.handle_delivered(1, 100);
        // Bytes came and went within the tick: the figure is 0 as before, but
        // the origin counted 100 sent bytes and must hear they are gone.
        assert_eq!(b.poll_feedback(t0), Some(vec![entry(1, 0)]));
        assert_eq!(b.poll_timeout(t0 + TICK), None, "idle again");
        assert_eq!(b.poll_feedback(t0 + TICK), None);
    }
}
