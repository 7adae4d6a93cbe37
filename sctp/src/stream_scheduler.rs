//! Stream schedulers (RFC 8260 section 3): which outbound stream the next DATA
//! or I-DATA fragment comes from. (Not the origin's response scheduler, which
//! decides which response hands its next chunk to the association at all;
//! `transport.userspace.stream_scheduler` picks one of these.)
//!
//! The sender (`send`) owns the per-stream queues; a scheduler only knows which
//! streams hold data (are *active*), what it has served, and the per-stream
//! value of RFC 8260 section 4.3.2. The sender drives it:
//!
//! ```text
//!   sender                                   scheduler
//!   message queued on an empty stream  ----> activate(stream, order)
//!   room in the packet for a fragment  ----> pick() -> Some(stream)
//!   fragment taken from `stream`       ----> consumed(stream, bytes, done, next)
//!   the packet is full                 ----> end_packet()
//!   stream reset, association aborted  ----> deactivate(stream)
//!   SCTP_STREAM_SCHEDULER_VALUE        ----> set_value(stream, value)
//! ```
//!
//! Without I-DATA the fragments of one message need consecutive TSNs, so the
//! sender keeps taking from a half-sent message whatever `pick` says and asks
//! the scheduler only at message boundaries; with I-DATA it asks before every
//! fragment. Every scheduler here therefore moves on after each *fragment*
//! ([`StreamScheduler::consumed`]), which without I-DATA is the same as moving on
//! after each message (the sender pins the stream until the message is done),
//! and with I-DATA lets a large message share the association with small ones
//! instead of holding them back (the head-of-line blocking RFC 8260 section 1
//! introduces I-DATA to remove).
//!
//! The schedulers ([`StreamSchedulerKind`]):
//! - **FCFS** (3.1): the active stream whose head message was queued first;
//!   messages leave in the order the application gave them.
//! - **Round robin** (3.2): active streams in turn, in cyclic stream-id order
//!   after the stream served last, one fragment per turn (one message per turn
//!   without I-DATA, see above).
//! - **Round robin per packet** (3.3): one stream fills a whole packet; the next
//!   packet goes to the next active stream. It is work-conserving: if the
//!   packet's stream runs dry, the rest of the packet goes to the next active
//!   stream (whose turn that then is) rather than leaving room unused. Without
//!   I-DATA a packet may open with the tail of another stream's half-sent
//!   message; that tail does not use up the turn of the packet's stream, which
//!   follows it in the same packet (or keeps its turn for the next one).
//! - **Priority** (3.4): the lowest value first (lower is more urgent, as the
//!   value of 4.3.2 is used by the common stacks); equal values round robin
//!   with one cursor per priority level, so interleaved urgent traffic cannot
//!   starve a stream of a lower level that keeps being skipped.
//! - **Fair capacity** (3.5) and **weighted fair queueing** (3.6): the active
//!   stream with the least *virtual service*: bytes served times
//!   [`VIRTUAL_UNITS_PER_BYTE`] divided by the stream's weight (always 1 for
//!   fair capacity). The size of the next fragment is not known at `pick`, so
//!   streams are ordered by what they have been served (start-time fair
//!   queueing), not by virtual finish times; ties go to the lowest stream id.
//!   A stream that becomes active starts at the scheduler's virtual time (the
//!   least service among active streams), so idle time earns no credit to
//!   burst with later.
//!
//! Invariants, for every scheduler:
//! - `pick` changes no state and returns `Some` exactly when a stream is
//!   active, and then an active stream;
//! - memory is proportional to the `streams` given to [`build`] (per-stream
//!   arrays and sets of active streams); nothing grows with traffic;
//! - virtual service stays bounded: it is rebased to zero before it nears the
//!   top of `u64`, and all of its arithmetic saturates;
//! - stream ids at or above `streams` are a broken invariant of the sender
//!   (it checks the user's stream id against the negotiated count): they trip
//!   a debug assertion and are ignored otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound::{Excluded, Included, Unbounded};
use std::str::FromStr;

/// Which scheduler an association uses (RFC 8260 section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamSchedulerKind {
    /// First come, first served (3.1), `fcfs`.
    Fcfs,
    /// Round robin over streams (3.2), `rr`.
    #[default]
    RoundRobin,
    /// Round robin, one stream per packet (3.3), `rr-packet`.
    RoundRobinPerPacket,
    /// Strict priority, round robin within a level (3.4), `priority`.
    Priority,
    /// Equal bytes per stream (3.5), `fc`.
    FairCapacity,
    /// Bytes per stream in proportion to its weight (3.6), `wfq`.
    WeightedFair,
}

impl StreamSchedulerKind {
    /// Every scheduler, in the order of RFC 8260 section 3.
    pub const ALL: [StreamSchedulerKind; 6] = [
        StreamSchedulerKind::Fcfs,
        StreamSchedulerKind::RoundRobin,
        StreamSchedulerKind::RoundRobinPerPacket,
        StreamSchedulerKind::Priority,
        StreamSchedulerKind::FairCapacity,
        StreamSchedulerKind::WeightedFair,
    ];

    /// The name `FromStr` accepts and `Display` prints.
    fn name(self) -> &'static str {
        match self {
            StreamSchedulerKind::Fcfs => "fcfs",
            StreamSchedulerKind::RoundRobin => "rr",
            StreamSchedulerKind::RoundRobinPerPacket => "rr-packet",
            StreamSchedulerKind::Priority => "priority",
            StreamSchedulerKind::FairCapacity => "fc",
            StreamSchedulerKind::WeightedFair => "wfq",
        }
    }
}

impl FromStr for StreamSchedulerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StreamSchedulerKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown stream scheduler `{s}` (expected fcfs, rr, rr-packet, priority, fc or wfq)"
                )
            })
    }
}

impl fmt::Display for StreamSchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A stream scheduler: picks the stream the next DATA fragment comes from.
pub trait StreamScheduler: Send + fmt::Debug {
    /// `stream` went from empty to holding data; `order` is the enqueue order
    /// (a counter across all streams) of its head message, for FCFS.
    /// Activating a stream that is already active only updates its order.
    fn activate(&mut self, stream: u16, order: u64);

    /// The stream to take the next fragment from, or None if no stream is
    /// active. Does not change state by itself (calling it twice gives the
    /// same answer).
    fn pick(&mut self) -> Option<u16>;

    /// `bytes` of user data were taken from `stream` (which was returned by
    /// `pick`, or is the stream of a half-sent DATA message). `next` is None if
    /// the stream is now empty (it becomes inactive), else the enqueue order of
    /// its head message (unchanged while a message is half-sent), and the
    /// stream is then active even if it was not before. `message_done`: that
    /// fragment ended its message.
    fn consumed(&mut self, stream: u16, bytes: usize, message_done: bool, next: Option<u64>);

    /// The packet being filled is full: round robin per packet moves on.
    fn end_packet(&mut self);

    /// The stream's data was dropped (reset or abort): it becomes inactive.
    fn deactivate(&mut self, stream: u16);

    /// RFC 8260 4.3.2's value for `stream`: the priority (lower is more
    /// urgent, default [`DEFAULT_PRIORITY`]) for Priority, the weight (higher
    /// is more, default [`DEFAULT_WEIGHT`], 0 taken as [`MIN_WEIGHT`]) for
    /// WeightedFair; ignored by the others. It may change while the stream is
    /// active and applies from the next `pick`.
    fn set_value(&mut self, stream: u16, value: u16);

    /// Panics if the scheduler's internal state is inconsistent.
    #[cfg(test)]
    fn check_invariants(&self);
}

/// Builds the scheduler of `kind` for an association with `streams` outbound
/// streams.
pub fn build(kind: StreamSchedulerKind, streams: u16) -> Box<dyn StreamScheduler> {
    match kind {
        StreamSchedulerKind::Fcfs => Box::new(Fcfs::new(streams)),
        StreamSchedulerKind::RoundRobin => Box::new(RoundRobin::new(streams, false)),
        StreamSchedulerKind::RoundRobinPerPacket => Box::new(RoundRobin::new(streams, true)),
        StreamSchedulerKind::Priority => Box::new(Priority::new(streams)),
        StreamSchedulerKind::FairCapacity => Box::new(Fair::new(streams, false)),
        StreamSchedulerKind::WeightedFair => Box::new(Fair::new(streams, true)),
    }
}

/// Priority of a stream nobody set one for: the most urgent, so that streams
/// are round robin until the application ranks some of them lower.
pub const DEFAULT_PRIORITY: u16 = 0;

/// Weight of a stream nobody set one for under weighted fair queueing: every
/// stream equal, and any weight the application sets is at least as much.
pub const DEFAULT_WEIGHT: u16 = 1;

/// The least weight; a weight of 0 would never be served in proportion to
/// anything, so it is taken as this.
pub const MIN_WEIGHT: u16 = 1;

/// Virtual service units charged per byte at weight 1. It is 2^16 so that a
/// byte at the largest weight (65535) still costs at least one unit, and the
/// rounding of `bytes * units / weight` is under a 65536th of a byte.
pub const VIRTUAL_UNITS_PER_BYTE: u64 = 1 << 16;

/// Virtual time, in units of [`VIRTUAL_UNITS_PER_BYTE`], above which the fair
/// schedulers subtract it from every stream's service. 2^60 units is 2^44
/// bytes (16 TiB) at weight 1, so rebasing (O(streams)) is rare, and the 2^64
/// ceiling leaves room for the service a stream runs ahead of virtual time
/// (one fragment, or one whole message while the sender pins it).
pub const REBASE_VIRTUAL_TIME: u64 = 1 << 60;

/// Whether `stream` is one of the `streams` the scheduler was built for.
fn in_range(stream: u16, streams: u16) -> bool {
    debug_assert!(
        stream < streams,
        "stream {stream} beyond the {streams} outbound streams"
    );
    stream < streams
}

/// The first stream of `set` after `last` in cyclic id order.
fn next_after(set: &BTreeSet<u16>, last: Option<u16>) -> Option<u16> {
    let after = last.and_then(|last| set.range((Excluded(last), Unbounded)).next());
    after.or_else(|| set.first()).copied()
}

/// FCFS (RFC 8260 3.1): active streams ordered by the enqueue order of their
/// head message.
#[derive(Debug)]
struct Fcfs {
    streams: u16,
    /// Per stream: the head message's order while active.
    head: Vec<Option<u64>>,
    /// `(order, stream)` of every active stream; the first is picked.
    queue: BTreeSet<(u64, u16)>,
}

impl Fcfs {
    fn new(streams: u16) -> Self {
        Self {
            streams,
            head: vec![None; usize::from(streams)],
            queue: BTreeSet::new(),
        }
    }

    fn set_head(&mut self, stream: u16, order: Option<u64>) {
        if !in_range(stream, self.streams) {
            return;
        }
        let slot = &mut self.head[usize::from(stream)];
        if let Some(old) = slot.take() {
            self.queue.remove(&(old, stream));
        }
        if let Some(order) = order {
            self.queue.insert((order, stream));
            *slot = Some(order);
        }
    }
}

impl StreamScheduler for Fcfs {
    fn activate(&mut self, stream: u16, order: u64) {
        self.set_head(stream, Some(order));
    }

    fn pick(&mut self) -> Option<u16> {
        self.queue.first().map(|&(_, stream)| stream)
    }

    fn consumed(&mut self, stream: u16, _bytes: usize, _message_done: bool, next: Option<u64>) {
        self.set_head(stream, next);
    }

    fn end_packet(&mut self) {}

    fn deactivate(&mut self, stream: u16) {
        self.set_head(stream, None);
    }

    fn set_value(&mut self, _stream: u16, _value: u16) {}

    #[cfg(test)]
    fn check_invariants(&self) {
        let from_heads: BTreeSet<(u64, u16)> = (0..self.streams)
            .filter_map(|s| self.head[usize::from(s)].map(|order| (order, s)))
            .collect();
        assert_eq!(from_heads, self.queue);
    }
}

/// Round robin (RFC 8260 3.2) and, with `per_packet`, round robin per packet
/// (3.3).
#[derive(Debug)]
struct RoundRobin {
    streams: u16,
    per_packet: bool,
    active: BTreeSet<u16>,
    /// The stream served last: the turn goes to the next active one after it.
    last: Option<u16>,
    /// Per packet: the stream the packet being filled belongs to.
    packet: Option<u16>,
}

impl RoundRobin {
    fn new(streams: u16, per_packet: bool) -> Self {
        Self {
            streams,
            per_packet,
            active: BTreeSet::new(),
            last: None,
            packet: None,
        }
    }
}

impl StreamScheduler for RoundRobin {
    fn activate(&mut self, stream: u16, _order: u64) {
        if in_range(stream, self.streams) {
            self.active.insert(stream);
        }
    }

    fn pick(&mut self) -> Option<u16> {
        match self.packet {
            Some(stream) if self.active.contains(&stream) => Some(stream),
            _ => next_after(&self.active, self.last),
        }
    }

    fn consumed(&mut self, stream: u16, _bytes: usize, _message_done: bool, next: Option<u64>) {
        if !in_range(stream, self.streams) {
            return;
        }
        if self.per_packet {
            // The packet belongs to the stream whose turn it is, which `pick`
            // named. A fragment from another stream is the sender finishing a
            // half-sent DATA message: it neither takes the turn nor moves the
            // cursor, or a stream whose messages keep straddling packets would
            // take every packet.
            if let Some(owner) = self.pick() {
                self.packet = Some(owner);
                if owner == stream {
                    self.last = Some(stream);
                }
            }
        } else {
            self.last = Some(stream);
        }
        match next {
            Some(_) => self.active.insert(stream),
            None => self.active.remove(&stream),
        };
    }

    fn end_packet(&mut self) {
        self.packet = None;
    }

    fn deactivate(&mut self, stream: u16) {
        self.active.remove(&stream);
    }

    fn set_value(&mut self, _stream: u16, _value: u16) {}

    #[cfg(test)]
    fn check_invariants(&self) {
        assert!(self.active.iter().all(|&s| s < self.streams));
        assert!(self.per_packet || self.packet.is_none());
    }
}

/// Priority (RFC 8260 3.4): the lowest value first, round robin within a value.
#[derive(Debug)]
struct Priority {
    streams: u16,
    /// Per stream: its priority, lower is more urgent.
    priority: Vec<u16>,
    /// Per stream: whether it holds data.
    is_active: Vec<bool>,
    /// `(priority, stream)` of every active stream.
    active: BTreeSet<(u16, u16)>,
    /// Per priority level with an active stream: the stream of that level
    /// served last. One cursor per level, because a single one would be moved
    /// by the more urgent levels and could skip the same stream every time.
    /// Dropped when its level empties, so it holds at most one entry per
    /// active stream.
    last: BTreeMap<u16, u16>,
}

impl Priority {
    fn new(streams: u16) -> Self {
        Self {
            streams,
            priority: vec![DEFAULT_PRIORITY; usize::from(streams)],
            is_active: vec![false; usize::from(streams)],
            active: BTreeSet::new(),
            last: BTreeMap::new(),
        }
    }

    fn level_is_empty(&self, level: u16) -> bool {
        self.active
            .range((level, 0)..=(level, u16::MAX))
            .next()
            .is_none()
    }

    fn remove(&mut self, stream: u16) {
        let index = usize::from(stream);
        if !std::mem::take(&mut self.is_active[index]) {
            return;
        }
        let level = self.priority[index];
        self.active.remove(&(level, stream));
        if self.level_is_empty(level) {
            self.last.remove(&level);
        }
    }

    fn insert(&mut self, stream: u16) {
        let index = usize::from(stream);
        self.is_active[index] = true;
        self.active.insert((self.priority[index], stream));
    }
}

impl StreamScheduler for Priority {
    fn activate(&mut self, stream: u16, _order: u64) {
        if in_range(stream, self.streams) {
            self.insert(stream);
        }
    }

    fn pick(&mut self) -> Option<u16> {
        let &(level, first) = self.active.first()?;
        let after = self.last.get(&level).and_then(|&last| {
            self.active
                .range((Excluded((level, last)), Included((level, u16::MAX))))
                .next()
        });
        Some(after.map_or(first, |&(_, stream)| stream))
    }

    fn consumed(&mut self, stream: u16, _bytes: usize, _message_done: bool, next: Option<u64>) {
        if !in_range(stream, self.streams) {
            return;
        }
        match next {
            Some(_) => {
                self.insert(stream);
                self.last.insert(self.priority[usize::from(stream)], stream);
            }
            // Removing it drops the cursor of a level it leaves empty.
            None => self.remove(stream),
        }
    }

    fn end_packet(&mut self) {}

    fn deactivate(&mut self, stream: u16) {
        if in_range(stream, self.streams) {
            self.remove(stream);
        }
    }

    fn set_value(&mut self, stream: u16, value: u16) {
        if !in_range(stream, self.streams) {
            return;
        }
        let was_active = self.is_active[usize::from(stream)];
        self.remove(stream);
        self.priority[usize::from(stream)] = value;
        if was_active {
            self.insert(stream);
        }
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        let expected: BTreeSet<(u16, u16)> = (0..self.streams)
            .filter(|&s| self.is_active[usize::from(s)])
            .map(|s| (self.priority[usize::from(s)], s))
            .collect();
        assert_eq!(expected, self.active);
        for &level in self.last.keys() {
            assert!(!self.level_is_empty(level), "cursor of empty level {level}");
        }
    }
}

/// Fair capacity (RFC 8260 3.5) and, with `weighted`, weighted fair queueing
/// (3.6): the active stream with the least virtual service.
#[derive(Debug)]
struct Fair {
    streams: u16,
    weighted: bool,
    /// Per stream: its weight (all [`DEFAULT_WEIGHT`] unless `weighted`).
    weight: Vec<u16>,
    /// Per stream: virtual service, bytes served times
    /// [`VIRTUAL_UNITS_PER_BYTE`] over the weight, since the last rebase.
    service: Vec<u64>,
    /// Per stream: whether it holds data.
    is_active: Vec<bool>,
    /// `(service, stream)` of every active stream; the first is picked.
    active: BTreeSet<(u64, u16)>,
    /// The least service of an active stream when a fragment was last taken;
    /// never decreases (between rebases). Activated streams start here.
    virtual_time: u64,
    /// [`REBASE_VIRTUAL_TIME`]; a field so that tests can rebase early.
    rebase_at: u64,
}

impl Fair {
    fn new(streams: u16, weighted: bool) -> Self {
        Self {
            streams,
            weighted,
            weight: vec![DEFAULT_WEIGHT; usize::from(streams)],
            service: vec![0; usize::from(streams)],
            is_active: vec![false; usize::from(streams)],
            active: BTreeSet::new(),
            virtual_time: 0,
            rebase_at: REBASE_VIRTUAL_TIME,
        }
    }

    fn set_active(&mut self, stream: u16, active: bool) {
        let index = usize::from(stream);
        if self.is_active[index] {
            self.active.remove(&(self.service[index], stream));
        }
        self.is_active[index] = active;
        if active {
            self.active.insert((self.service[index], stream));
        }
    }

    /// Subtracts the virtual time from every stream's service. Active streams
    /// are all at or above it, so their order is kept; idle ones below it
    /// would be raised to it on activation anyway.
    fn rebase(&mut self) {
        let shift = self.virtual_time;
        for service in &mut self.service {
            *service = service.saturating_sub(shift);
        }
        self.virtual_time = 0;
        self.active = self
            .active
            .iter()
            .map(|&(service, stream)| (service.saturating_sub(shift), stream))
            .collect();
    }
}

impl StreamScheduler for Fair {
    fn activate(&mut self, stream: u16, _order: u64) {
        if !in_range(stream, self.streams) {
            return;
        }
        let index = usize::from(stream);
        if !self.is_active[index] {
            // Idle time earns no credit: start no earlier than virtual time.
            self.service[index] = self.service[index].max(self.virtual_time);
        }
        self.set_active(stream, true);
    }

    fn pick(&mut self) -> Option<u16> {
        self.active.first().map(|&(_, stream)| stream)
    }

    fn consumed(&mut self, stream: u16, bytes: usize, _message_done: bool, next: Option<u64>) {
        if !in_range(stream, self.streams) {
            return;
        }
        if let Some(&(least, _)) = self.active.first() {
            self.virtual_time = self.virtual_time.max(least);
        }
        let index = usize::from(stream);
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let weight = u64::from(self.weight[index].max(MIN_WEIGHT));
        // At least one unit, so that even empty fragments move the stream on
        // and cannot hold the scheduler on it.
        let charge = (bytes.saturating_mul(VIRTUAL_UNITS_PER_BYTE) / weight).max(1);
        let was_active = self.is_active[index];
        self.set_active(stream, false);
        self.service[index] = self.service[index].saturating_add(charge);
        if next.is_some() {
            if !was_active {
                self.service[index] = self.service[index].max(self.virtual_time);
            }
            self.set_active(stream, true);
        }
        if self.virtual_time >= self.rebase_at {
            self.rebase();
        }
    }

    fn end_packet(&mut self) {}

    fn deactivate(&mut self, stream: u16) {
        if in_range(stream, self.streams) {
            self.set_active(stream, false);
        }
    }

    fn set_value(&mut self, stream: u16, value: u16) {
        if self.weighted && in_range(stream, self.streams) {
            self.weight[usize::from(stream)] = value.max(MIN_WEIGHT);
        }
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        let expected: BTreeSet<(u64, u16)> = (0..self.streams)
            .filter(|&s| self.is_active[usize::from(s)])
            .map(|s| (self.service[usize::from(s)], s))
            .collect();
        assert_eq!(expected, self.active);
        assert!(
            self.active
                .iter()
                .all(|&(service, _)| service >= self.virtual_time)
        );
        assert!(self.virtual_time < self.rebase_at);
        assert!(self.weighted || self.weight.iter().all(|&w| w == DEFAULT_WEIGHT));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    /// A message in the simulated sender: its enqueue order and the sizes of
    /// the fragments still to send.
    #[derive(Debug)]
    struct Message {
        order: u64,
        fragments: VecDeque<usize>,
    }

    /// A minimal sender driving a scheduler as `send` will: per-stream queues,
    /// and without I-DATA the stream of a half-sent message pinned.
    #[derive(Debug)]
    struct Sim {
        sched: Box<dyn StreamScheduler>,
        queues: Vec<VecDeque<Message>>,
        next_order: u64,
        idata: bool,
        /// Without I-DATA: the stream whose message is half-sent.
        pinned: Option<u16>,
    }

    impl Sim {
        fn new(kind: StreamSchedulerKind, streams: u16, idata: bool) -> Self {
            Self::with(build(kind, streams), streams, idata)
        }

        fn with(sched: Box<dyn StreamScheduler>, streams: u16, idata: bool) -> Self {
            Self {
                sched,
                queues: (0..streams).map(|_| VecDeque::new()).collect(),
                next_order: 0,
                idata,
                pinned: None,
            }
        }

        /// Queues one message of `fragments` (their sizes) on `stream`.
        fn enqueue(&mut self, stream: u16, fragments: &[usize]) {
            let order = self.next_order;
            self.next_order += 1;
            let queue = &mut self.queues[usize::from(stream)];
            queue.push_back(Message {
                order,
                fragments: fragments.iter().copied().collect(),
            });
            if queue.len() == 1 {
                self.sched.activate(stream, order);
            }
        }

        /// Queues `count` single-fragment messages of `bytes` on `stream`.
        fn enqueue_many(&mut self, stream: u16, count: usize, bytes: usize) {
            for _ in 0..count {
                self.enqueue(stream, &[bytes]);
            }
        }

        fn has_data(&self, stream: u16) -> bool {
            !self.queues[usize::from(stream)].is_empty()
        }

        fn any_data(&self) -> bool {
            self.queues.iter().any(|q| !q.is_empty())
        }

        /// Sends one fragment; the stream it came from.
        fn send(&mut self) -> Option<u16> {
            let picked = self.sched.pick();
            assert_eq!(picked, self.sched.pick(), "pick changed its answer");
            let stream = match self.pinned {
                Some(stream) if !self.idata => stream,
                _ => picked?,
            };
            let queue = &mut self.queues[usize::from(stream)];
            let head = queue.front_mut().expect("picked an empty stream");
            let bytes = head.fragments.pop_front().expect("empty message");
            let done = head.fragments.is_empty();
            if done {
                queue.pop_front();
            }
            let next = queue.front().map(|m| m.order);
            self.pinned = (!self.idata && !done).then_some(stream);
            self.sched.consumed(stream, bytes, done, next);
            Some(stream)
        }

        /// Sends up to `n` fragments, ending a packet after every `per_packet`.
        fn send_packets(&mut self, n: usize, per_packet: usize) -> Vec<u16> {
            let mut sent = Vec::new();
            for i in 0..n {
                let Some(stream) = self.send() else { break };
                sent.push(stream);
                if (i + 1) % per_packet == 0 {
                    self.sched.end_packet();
                }
            }
            sent
        }

        fn send_all(&mut self) -> Vec<u16> {
            self.send_packets(usize::MAX, usize::MAX)
        }

        fn reset(&mut self, stream: u16) {
            self.queues[usize::from(stream)].clear();
            if self.pinned == Some(stream) {
                self.pinned = None;
            }
            self.sched.deactivate(stream);
        }
    }

    #[test]
    fn names_round_trip() {
        for kind in StreamSchedulerKind::ALL {
            assert_eq!(kind.to_string().parse::<StreamSchedulerKind>(), Ok(kind));
        }
        let names: Vec<String> = StreamSchedulerKind::ALL
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(names, ["fcfs", "rr", "rr-packet", "priority", "fc", "wfq"]);
        assert_eq!(
            StreamSchedulerKind::default(),
            StreamSchedulerKind::RoundRobin
        );
        let err = "drr"
            .parse::<StreamSchedulerKind>()
            .expect_err("not a scheduler");
        assert!(err.contains("`drr`") && err.contains("rr-packet, priority, fc or wfq"));
    }

    #[test]
    fn nothing_active_picks_nothing() {
        for kind in StreamSchedulerKind::ALL {
            let mut sched = build(kind, 4);
            assert_eq!(sched.pick(), None, "{kind}");
            sched.activate(2, 0);
            assert_eq!(sched.pick(), Some(2), "{kind}");
            sched.deactivate(2);
            assert_eq!(sched.pick(), None, "{kind}");
            sched.check_invariants();
        }
    }

    #[test]
    fn consumed_with_next_keeps_a_stream_active_and_none_drops_it() {
        for kind in StreamSchedulerKind::ALL {
            let mut sched = build(kind, 4);
            sched.activate(1, 0);
            sched.consumed(1, 10, true, Some(1));
            assert_eq!(sched.pick(), Some(1), "{kind}");
            sched.consumed(1, 10, true, None);
            assert_eq!(sched.pick(), None, "{kind}");
            sched.check_invariants();
        }
    }

    #[test]
    fn fcfs_follows_enqueue_order_across_streams() {
        let mut sim = Sim::new(StreamSchedulerKind::Fcfs, 4, true);
        sim.enqueue(2, &[10]);
        sim.enqueue(1, &[10]);
        sim.enqueue(2, &[10]);
        sim.enqueue(0, &[10, 10]);
        sim.enqueue(1, &[10]);
        assert_eq!(sim.send_all(), [2, 1, 2, 0, 0, 1]);
    }

    #[test]
    fn rr_interleaves_fragments_with_idata() {
        let mut sim = Sim::new(StreamSchedulerKind::RoundRobin, 4, true);
        sim.enqueue(0, &[10, 10, 10]);
        sim.enqueue_many(1, 2, 10);
        sim.enqueue(3, &[10]);
        assert_eq!(sim.send_all(), [0, 1, 3, 0, 1, 0]);
    }

    #[test]
    fn rr_takes_whole_messages_without_idata() {
        let mut sim = Sim::new(StreamSchedulerKind::RoundRobin, 4, false);
        sim.enqueue(0, &[10, 10, 10]);
        sim.enqueue_many(1, 2, 10);
        sim.enqueue(3, &[10]);
        assert_eq!(sim.send_all(), [0, 0, 0, 1, 3, 1]);
    }

    #[test]
    fn rr_wraps_and_takes_newcomers_in_id_order() {
        let mut sim = Sim::new(StreamSchedulerKind::RoundRobin, 8, true);
        sim.enqueue_many(5, 3, 10);
        sim.enqueue_many(2, 3, 10);
        assert_eq!(sim.send_packets(2, 1), [2, 5]);
        // The cursor is at 5: 7 after it comes before 1, which wraps.
        sim.enqueue(1, &[10]);
        sim.enqueue(7, &[10]);
        assert_eq!(sim.send_all(), [7, 1, 2, 5, 2, 5]);
    }

    #[test]
    fn rr_per_packet_gives_each_packet_to_one_stream() {
        let mut sim = Sim::new(StreamSchedulerKind::RoundRobinPerPacket, 4, true);
        sim.enqueue(0, &[10, 10, 10, 10]);
        sim.enqueue_many(1, 2, 10);
        sim.enqueue(2, &[10]);
        // Packets of two fragments: 2 runs dry halfway through the third
        // packet, and 0 fills the rest of it.
        assert_eq!(sim.send_packets(usize::MAX, 2), [0, 0, 1, 1, 2, 0, 0]);
    }

    #[test]
    fn rr_per_packet_spilled_message_keeps_the_next_stream_its_turn() {
        let mut sim = Sim::new(StreamSchedulerKind::RoundRobinPerPacket, 4, false);
        sim.enqueue(0, &[10, 10, 10]);
        sim.enqueue(0, &[10]);
        sim.enqueue_many(1, 3, 10);
        // 0's first message spills into the second packet, which is 1's turn:
        // 1 follows in the same packet, and 0 has the third.
        assert_eq!(sim.send_packets(usize::MAX, 2), [0, 0, 0, 1, 0, 1, 1]);
    }

    #[test]
    fn rr_per_packet_straddling_messages_do_not_starve_others() {
        let mut sim = Sim::new(StreamSchedulerKind::RoundRobinPerPacket, 4, false);
        for _ in 0..5 {
            sim.enqueue(0, &[10, 10, 10]);
        }
        sim.enqueue(1, &[10]);
        // Three fragments into packets of two: every message of 0 ends inside
        // a packet. Were the spilled tail to take the packet, 0 would start
        // its next message there and 1 would wait for all of them.
        let mut expected = vec![0, 0, 0, 1];
        expected.extend([0; 12]);
        assert_eq!(sim.send_packets(usize::MAX, 2), expected);
    }

    #[test]
    fn priority_serves_lowest_value_first_and_rr_within_a_value() {
        let mut sim = Sim::new(StreamSchedulerKind::Priority, 4, true);
        sim.sched.set_value(0, 2);
        sim.sched.set_value(1, 1);
        sim.sched.set_value(2, 1);
        sim.sched.set_value(3, 0);
        sim.enqueue(0, &[10]);
        sim.enqueue_many(1, 2, 10);
        sim.enqueue_many(2, 2, 10);
        sim.enqueue(3, &[10]);
        assert_eq!(sim.send_all(), [3, 1, 2, 1, 2, 0]);
    }

    #[test]
    fn priority_levels_keep_their_own_rr_cursor() {
        let mut sim = Sim::new(StreamSchedulerKind::Priority, 4, true);
        sim.sched.set_value(1, 1);
        sim.sched.set_value(3, 1);
        sim.enqueue_many(1, 3, 10);
        sim.enqueue_many(3, 3, 10);
        let mut sent = Vec::new();
        for _ in 0..3 {
            // Urgent 2 comes and goes between level-1 fragments; one shared
            // cursor would then always resume after 2, at 3, and starve 1.
            sim.enqueue(2, &[10]);
            sent.extend(sim.send_packets(2, 1));
        }
        assert_eq!(sent, [2, 1, 2, 3, 2, 1]);
    }

    #[test]
    fn priority_change_applies_while_active() {
        let mut sim = Sim::new(StreamSchedulerKind::Priority, 4, true);
        sim.enqueue_many(0, 2, 10);
        sim.enqueue_many(1, 2, 10);
        assert_eq!(sim.send_packets(1, 1), [0]);
        sim.sched.set_value(0, 5);
        assert_eq!(sim.send_all(), [1, 1, 0]);
        sim.sched.check_invariants();
    }

    #[test]
    fn fair_capacity_equalises_bytes() {
        let mut sim = Sim::new(StreamSchedulerKind::FairCapacity, 4, true);
        sim.enqueue(0, &[1000, 1000]);
        sim.enqueue_many(1, 10, 100);
        // A tie goes to the lowest id; 1 then needs ten fragments to catch up.
        assert_eq!(sim.send_all(), [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn fair_capacity_ignores_weights() {
        let mut sim = Sim::new(StreamSchedulerKind::FairCapacity, 4, true);
        sim.sched.set_value(0, 100);
        sim.enqueue_many(0, 3, 100);
        sim.enqueue_many(1, 3, 100);
        assert_eq!(sim.send_all(), [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn fair_capacity_gives_no_credit_for_idle_time() {
        let mut sim = Sim::new(StreamSchedulerKind::FairCapacity, 4, true);
        sim.enqueue_many(0, 20, 100);
        assert_eq!(sim.send_packets(10, 1), [0; 10]);
        // 1 starts at the virtual time (0's service before its last fragment),
        // not at zero bytes: it alternates with 0 instead of taking ten turns.
        sim.enqueue_many(1, 5, 100);
        let sent = sim.send_all();
        assert_eq!(sent[..10], [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]);
        assert!(sent[10..].iter().all(|&s| s == 0));
    }

    #[test]
    fn wfq_shares_bytes_by_weight() {
        let mut sim = Sim::new(StreamSchedulerKind::WeightedFair, 4, true);
        sim.sched.set_value(0, 3);
        sim.enqueue_many(0, 12, 100);
        sim.enqueue_many(1, 4, 100);
        assert_eq!(
            sim.send_all(),
            [0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn wfq_weight_zero_counts_as_one() {
        let mut sim = Sim::new(StreamSchedulerKind::WeightedFair, 4, true);
        sim.sched.set_value(0, 0);
        sim.enqueue_many(0, 3, 100);
        sim.enqueue_many(1, 3, 100);
        assert_eq!(sim.send_all(), [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn fair_rebase_keeps_the_order() {
        let mut early = Fair::new(4, true);
        early.rebase_at = 3 * VIRTUAL_UNITS_PER_BYTE;
        let mut a = Sim::with(Box::new(early), 4, true);
        let mut b = Sim::with(Box::new(Fair::new(4, true)), 4, true);
        for sim in [&mut a, &mut b] {
            sim.sched.set_value(2, 2);
            sim.enqueue_many(0, 30, 7);
            sim.enqueue_many(2, 30, 5);
            sim.enqueue_many(3, 30, 3);
        }
        let mut sent = 0;
        while let Some(stream) = a.send() {
            // Checks that virtual time stayed under the early threshold.
            a.sched.check_invariants();
            assert_eq!(Some(stream), b.send());
            sent += 1;
        }
        assert_eq!(sent, 90);
    }

    /// Streams in the property test.
    const STREAMS: u16 = 6;
    /// Most fragments in one message of the property test.
    const MAX_FRAGMENTS: usize = 4;
    /// Largest fragment of the property test, bytes (the smallest is 1).
    const MAX_BYTES: usize = 4;
    /// Largest value of the property test (a weight of 0 counts as 1).
    const MAX_VALUE: u16 = 3;

    #[derive(Debug, Clone)]
    enum Op {
        Enqueue(u16, Vec<usize>),
        Send,
        EndPacket,
        Reset(u16),
        SetValue(u16, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..STREAMS, prop::collection::vec(1..=MAX_BYTES, 1..=MAX_FRAGMENTS))
                .prop_map(|(s, f)| Op::Enqueue(s, f)),
            6 => Just(Op::Send),
            2 => Just(Op::EndPacket),
            1 => (0..STREAMS).prop_map(Op::Reset),
            1 => (0..STREAMS, 0..=MAX_VALUE).prop_map(|(s, v)| Op::SetValue(s, v)),
        ]
    }

    /// How long each stream with data has waited, in the unit its scheduler
    /// is fair in: fragments sent, or non-empty packets for round robin per
    /// packet.
    #[derive(Debug)]
    struct Waits {
        kind: StreamSchedulerKind,
        idata: bool,
        waited: Vec<u64>,
        packet_used: bool,
        priority: Vec<u16>,
    }

    impl Waits {
        /// The longest a stream with data may wait under `kind`, if bounded.
        fn bound(kind: StreamSchedulerKind, idata: bool) -> Option<u64> {
            let streams = u64::from(STREAMS);
            let fragments = MAX_FRAGMENTS as u64;
            match kind {
                // Each send moves the cursor towards the waiting stream
                // without passing it.
                StreamSchedulerKind::RoundRobin | StreamSchedulerKind::RoundRobinPerPacket
                    if idata =>
                {
                    Some(streams)
                }
                // A pinned message holds a turn for all of its fragments.
                StreamSchedulerKind::RoundRobin => Some(streams * fragments),
                // Counted in packets; a pinned message's tail may take a
                // packet per fragment before the turn's stream is served.
                StreamSchedulerKind::RoundRobinPerPacket => Some(streams * (fragments + 1)),
                // Another stream is served while its service is at most the
                // waiting one's: at most the largest charge over the least
                // (bytes times weights), plus a pinned message's fragments.
                StreamSchedulerKind::FairCapacity | StreamSchedulerKind::WeightedFair => {
                    let ratio = (MAX_BYTES as u64) * u64::from(MAX_VALUE);
                    Some(streams * (ratio + 1 + fragments))
                }
                // Starving less urgent or later traffic is these two's point.
                StreamSchedulerKind::Fcfs | StreamSchedulerKind::Priority => None,
            }
        }

        fn sent(&mut self, sim: &Sim, stream: u16) {
            self.packet_used = true;
            if self.kind != StreamSchedulerKind::RoundRobinPerPacket {
                self.tick(sim);
            }
            self.waited[usize::from(stream)] = 0;
        }

        fn end_packet(&mut self, sim: &Sim) {
            if self.kind == StreamSchedulerKind::RoundRobinPerPacket && self.packet_used {
                self.tick(sim);
            }
            self.packet_used = false;
        }

        fn tick(&mut self, sim: &Sim) {
            let bound = Self::bound(self.kind, self.idata);
            for stream in 0..STREAMS {
                let waited = &mut self.waited[usize::from(stream)];
                if !sim.has_data(stream) {
                    *waited = 0;
                    continue;
                }
                *waited += 1;
                if let Some(bound) = bound {
                    assert!(
                        *waited <= bound,
                        "{}: stream {stream} waited {waited}",
                        self.kind
                    );
                }
            }
        }
    }

    /// The checks after every step: consistent state; `pick` stable, `Some`
    /// while any stream has data, and then a stream with data (the right one
    /// for FCFS and priority).
    fn check(sim: &mut Sim, waits: &Waits) {
        sim.sched.check_invariants();
        let picked = sim.sched.pick();
        assert_eq!(picked, sim.sched.pick());
        let Some(stream) = picked else {
            assert!(!sim.any_data(), "data left but nothing picked");
            return;
        };
        assert!(sim.has_data(stream), "picked idle stream {stream}");
        let mut with_data = (0..STREAMS).filter(|&s| sim.has_data(s));
        match waits.kind {
            StreamSchedulerKind::Fcfs => {
                let first = with_data.min_by_key(|&s| sim.queues[usize::from(s)][0].order);
                assert_eq!(Some(stream), first);
            }
            StreamSchedulerKind::Priority => {
                let most_urgent = with_data.map(|s| waits.priority[usize::from(s)]).min();
                assert_eq!(Some(waits.priority[usize::from(stream)]), most_urgent);
            }
            _ => assert!(with_data.any(|s| s == stream)),
        }
    }

    fn run(kind: StreamSchedulerKind, idata: bool, ops: &[Op]) {
        let mut sim = Sim::new(kind, STREAMS, idata);
        let mut waits = Waits {
            kind,
            idata,
            waited: vec![0; usize::from(STREAMS)],
            packet_used: false,
            priority: vec![DEFAULT_PRIORITY; usize::from(STREAMS)],
        };
        for op in ops {
            match op {
                Op::Enqueue(stream, fragments) => {
                    if !sim.has_data(*stream) {
                        // A newly active stream starts waiting now.
                        waits.waited[usize::from(*stream)] = 0;
                    }
                    sim.enqueue(*stream, fragments);
                }
                Op::Send => {
                    if let Some(stream) = sim.send() {
                        waits.sent(&sim, stream);
                    }
                }
                Op::EndPacket => {
                    sim.sched.end_packet();
                    waits.end_packet(&sim);
                }
                Op::Reset(stream) => sim.reset(*stream),
                Op::SetValue(stream, value) => {
                    sim.sched.set_value(*stream, *value);
                    waits.priority[usize::from(*stream)] = *value;
                }
            }
            check(&mut sim, &waits);
        }
        // Drain: every stream with data is served in the end, whatever the
        // scheduler; each send takes one fragment, so this ends.
        let mut left: usize = sim.queues.iter().flatten().map(|m| m.fragments.len()).sum();
        let mut in_packet = 0;
        while left > 0 {
            let stream = sim.send().expect("data left but nothing sent");
            waits.sent(&sim, stream);
            left -= 1;
            in_packet += 1;
            if in_packet == MAX_FRAGMENTS {
                sim.sched.end_packet();
                waits.end_packet(&sim);
                in_packet = 0;
            }
            check(&mut sim, &waits);
        }
        assert!(!sim.any_data());
        assert_eq!(sim.sched.pick(), None);
    }

    proptest! {
        #[test]
        fn every_scheduler_picks_active_streams_and_starves_none(
            kind in prop::sample::select(StreamSchedulerKind::ALL.to_vec()),
            idata in any::<bool>(),
            ops in prop::collection::vec(op(), 0..300),
        ) {
            run(kind, idata, &ops);
        }
    }
}
