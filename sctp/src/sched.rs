//! Stream schedulers (RFC 8260 section 3): which outbound stream the next DATA
//! or I-DATA fragment comes from.
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
//! ([`Scheduler::consumed`]), which without I-DATA is the same as moving on
//! after each message (the sender pins the stream until the message is done),
//! and with I-DATA lets a large message share the association with small ones
//! instead of holding them back (the head-of-line blocking RFC 8260 section 1
//! introduces I-DATA to remove).
//!
//! The schedulers ([`SchedulerKind`]):
//! - **FCFS** (3.1): the active stream whose head message was queued first;
//!   messages leave in the order the application gave them.
//! - **Round robin** (3.2): active streams in turn, in cyclic stream-id order
//!   after the stream served last, one fragment per turn (one message per turn
//!   without I-DATA, see above).
//! - **Round robin per packet** (3.3): one stream fills a whole packet; the next
//!   packet goes to the next active stream. It is work-conserving: if the
//!   packet's stream runs dry, the rest of the packet goes to the next active
//!   stream rather than leaving room unused.
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
pub enum SchedulerKind {
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

impl SchedulerKind {
    /// Every scheduler, in the order of RFC 8260 section 3.
    pub const ALL: [SchedulerKind; 6] = [
        SchedulerKind::Fcfs,
        SchedulerKind::RoundRobin,
        SchedulerKind::RoundRobinPerPacket,
        SchedulerKind::Priority,
        SchedulerKind::FairCapacity,
        SchedulerKind::WeightedFair,
    ];

    /// The name `FromStr` accepts and `Display` prints.
    fn name(self) -> &'static str {
        match self {
            SchedulerKind::Fcfs => "fcfs",
            SchedulerKind::RoundRobin => "rr",
            SchedulerKind::RoundRobinPerPacket => "rr-packet",
            SchedulerKind::Priority => "priority",
            SchedulerKind::FairCapacity => "fc",
            SchedulerKind::WeightedFair => "wfq",
        }
    }
}

impl FromStr for SchedulerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchedulerKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown stream scheduler `{s}` (expected fcfs, rr, rr-packet, priority, fc or wfq)"
                )
            })
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A stream scheduler: picks the stream the next DATA fragment comes from.
pub trait Scheduler: Send + fmt::Debug {
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
    /// stream is active afterwards either way. `message_done`: that fragment
    /// ended its message.
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
pub fn build(kind: SchedulerKind, streams: u16) -> Box<dyn Scheduler> {
    match kind {
        SchedulerKind::Fcfs => Box::new(Fcfs::new(streams)),
        SchedulerKind::RoundRobin => Box::new(RoundRobin::new(streams, false)),
        SchedulerKind::RoundRobinPerPacket => Box::new(RoundRobin::new(streams, true)),
        SchedulerKind::Priority => Box::new(Priority::new(streams)),
        SchedulerKind::FairCapacity => Box::new(Fair::new(streams, false)),
        SchedulerKind::WeightedFair => Box::new(Fair::new(streams, true)),
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

impl Scheduler for Fcfs {
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

impl Scheduler for RoundRobin {
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
        self.last = Some(stream);
        if self.per_packet {
            // Also when the sender continues a half-sent DATA message into a
            // new packet: that packet then belongs to the message's stream.
            self.packet = Some(stream);
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

impl Scheduler for Priority {
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

impl Scheduler for Fair {
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
mod tests {}
