//! Per-stream depth of the kernel's SCTP send queue, from what the origin wrote
//! and what `tc_sctp` saw leave. I/O-free: the driver reports the bytes it
//! handed to the socket ([`EgressDepth::handle_written`]) and the counters it
//! read from the map ([`EgressDepth::handle_candidates`],
//! [`EgressDepth::handle_left`]); [`EgressDepth::per_stream`] gives the figures
//! the scheduler takes ([`crate::response_scheduler::ResponseScheduler::handle_transport_queued`]).
//!
//! ```text
//!  driver ── sendmsg(stream, n bytes) ──► kernel SCTP send queue ──► qdisc ──► wire
//!     │ written[stream] += n                                   ▲
//!     │                                           tc_sctp (TC egress) counts DATA /
//!     │                                           I-DATA user bytes per stream: left
//!     ▼
//!  depth[stream] = written − left        (bytes not yet handed to the device)
//! ```
//!
//! Why this equals the queue: a message of n bytes becomes DATA chunks whose user
//! data add up to n, on the message's stream (RFC 9260 §6.9 fragmentation, RFC
//! 8260 for I-DATA), so once every chunk of it has passed the egress hook, it has
//! left the queue. This is the figure the userspace backend's `buffered()`
//! gives too (accepted and not yet sent; in-flight bytes excluded).
//!
//! Which map keys are this association's: those leaving from the origin's port
//! to the peer's port whose last packet is not older than the association
//! (`since_ns`, on `CLOCK_MONOTONIC` like the programs' timestamps). Their
//! verification tag is the peer's; once exactly one tag is seen it is kept and
//! every later read is one lookup per stream. Two tags at once (two peers
//! using one source port toward this port) cannot be told apart from the
//! maps: the association then has no figure ([`Learned::Ambiguous`]).
//!
//! Invariants, and where the figure errs:
//! - `left` per stream only grows. A reading below the last one, or a key
//!   that vanished, is the LRU map evicting and restarting it: what it had
//!   counted is kept as a base, so the figure stays a running total (bytes
//!   that left between the last reading and the eviction are lost: the depth
//!   then reads high by them).
//! - Retransmissions pass the hook again and count as having left: the depth
//!   reads low by the bytes retransmitted on the stream. It never goes below 0.

use std::collections::BTreeMap;

use ebpf_common::{DIRECTION_EGRESS, StreamCounters, StreamKey};

/// Whether this association's map keys are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learned {
    /// No packet of it has been seen leaving yet.
    Unknown,
    /// Its packets carry this verification tag.
    Tag(u32),
    /// Several tags use its ports; the maps cannot say which is its.
    Ambiguous(Vec<u32>),
}

#[derive(Debug, Default, Clone, Copy)]
struct StreamTally {
    /// Bytes handed to the socket on the stream.
    written: u64,
    /// What evicted keys had counted before they restarted.
    left_base: u64,
    /// The last reading of the key's `data_bytes`.
    left_last: u64,
}

impl StreamTally {
    fn left(&self) -> u64 {
        self.left_base.saturating_add(self.left_last)
    }

    fn depth(&self) -> u64 {
        self.written.saturating_sub(self.left())
    }
}

/// One association's per-stream send-queue depth. See the module docs.
#[derive(Debug)]
pub struct EgressDepth {
    local_port: u16,
    peer_port: u16,
    since_ns: u64,
    learned: Learned,
    streams: BTreeMap<u16, StreamTally>,
}

impl EgressDepth {
    /// An association between the origin's `local_port` and the peer's
    /// `peer_port`, established at `since_ns` (`CLOCK_MONOTONIC`).
    pub fn new(local_port: u16, peer_port: u16, since_ns: u64) -> Self {
        Self {
            local_port,
            peer_port,
            since_ns,
            learned: Learned::Unknown,
            streams: BTreeMap::new(),
        }
    }

    /// What is known of its map keys.
    pub fn learned(&self) -> &Learned {
        &self.learned
    }

    /// `bytes` of one message were handed to the socket on `stream`.
    pub fn handle_written(&mut self, stream: u16, bytes: u64) {
        let tally = self.streams.entry(stream).or_default();
        tally.written = tally.written.saturating_add(bytes);
    }

    /// Every key of the streams map (a snapshot): learns this association's
    /// tag while it is unknown. Call until [`learned`](Self::learned) is no
    /// longer [`Learned::Unknown`]; later calls change nothing. Counters seen
    /// here are taken as readings too.
    pub fn handle_candidates<'a>(
        &mut self,
        keys: impl IntoIterator<Item = (&'a StreamKey, &'a StreamCounters)>,
    ) {
        if self.learned != Learned::Unknown {
            return;
        }
        let ours: Vec<(&StreamKey, &StreamCounters)> = keys
            .into_iter()
            .filter(|(key, counters)| {
                key.direction == DIRECTION_EGRESS
                    && key.src_port == self.local_port
                    && key.dst_port == self.peer_port
                    && counters.last_seen_ns >= self.since_ns
            })
            .collect();
        let mut tags: Vec<u32> = ours.iter().map(|(key, _)| key.vtag).collect();
        tags.sort_unstable();
        tags.dedup();
        match tags.as_slice() {
            [] => {}
            [tag] => {
                self.learned = Learned::Tag(*tag);
                for (key, counters) in ours {
                    self.handle_left(key.stream_id, Some(counters.data_bytes));
                }
            }
            _ => self.learned = Learned::Ambiguous(tags),
        }
    }

    /// The map key of `stream`, once the tag is known.
    pub fn key(&self, stream: u16) -> Option<StreamKey> {
        let Learned::Tag(vtag) = self.learned else {
            return None;
        };
        Some(StreamKey {
            vtag,
            src_port: self.local_port,
            dst_port: self.peer_port,
            stream_id: stream,
            direction: DIRECTION_EGRESS,
            _pad: 0,
        })
    }

    /// A reading of `stream`'s key: its `data_bytes`, or `None` if the key is
    /// absent. A reading below the previous one, or an absent key that had
    /// counted, is a restart (see the module docs).
    pub fn handle_left(&mut self, stream: u16, data_bytes: Option<u64>) {
        let tally = self.streams.entry(stream).or_default();
        let reading = data_bytes.unwrap_or(0);
        if reading < tally.left_last {
            tally.left_base = tally.left_base.saturating_add(tally.left_last);
        }
        tally.left_last = reading;
    }

    /// Streams whose depth is above 0: the only ones worth reading again.
    pub fn streams_to_read(&self) -> impl Iterator<Item = u16> + '_ {
        self.streams
            .iter()
            .filter(|(_, tally)| tally.depth() > 0)
            .map(|(stream, _)| *stream)
    }

    /// Bytes of `stream` in the send queue; `None` until the tag is known.
    pub fn depth(&self, stream: u16) -> Option<u64> {
        matches!(self.learned, Learned::Tag(_))
            .then(|| self.streams.get(&stream).map_or(0, StreamTally::depth))
    }

    /// The depth of every stream above 0, and their sum; `None` until the tag
    /// is known (then nothing is known per stream).
    pub fn per_stream(&self) -> Option<(u64, Vec<(u16, u64)>)> {
        if !matches!(self.learned, Learned::Tag(_)) {
            return None;
        }
        let per_stream: Vec<(u16, u64)> = self
            .streams
            .iter()
            .map(|(stream, tally)| (*stream, tally.depth()))
            .filter(|(_, depth)| *depth > 0)
            .collect();
        let total = per_stream.iter().map(|(_, d)| d).sum();
        Some((total, per_stream))
    }
}

#[cfg(test)]
mod tests {
    use ebpf_common::DIRECTION_INGRESS;

    use super::*;

    const ORIGIN: u16 = 9899;
    const PEER: u16 = 40000;

    fn key(vtag: u32, src_port: u16, dst_port: u16, stream_id: u16, direction: u8) -> StreamKey {
        StreamKey {
            vtag,
            src_port,
            dst_port,
            stream_id,
            direction,
            _pad: 0,
        }
    }

    fn seen(data_bytes: u64, last_seen_ns: u64) -> StreamCounters {
        StreamCounters {
            data_bytes,
            chunks: 1,
            last_seen_ns,
            highest_tsn: 1,
            _pad: 0,
        }
    }

    #[test]
    fn depth_is_written_minus_left_once_the_tag_is_learned() {
        let mut depth = EgressDepth::new(ORIGIN, PEER, 1_000);
        depth.handle_written(1, 50_000);
        depth.handle_written(2, 10_000);
        assert_eq!(depth.per_stream(), None, "nothing known before the tag");
        let map = BTreeMap::from([
            // Ours: egress, our ports, after the start.
            (
                key(7, ORIGIN, PEER, 1, DIRECTION_EGRESS),
                seen(20_000, 2_000),
            ),
            // An earlier association on the same ports.
            (key(3, ORIGIN, PEER, 1, DIRECTION_EGRESS), seen(99_999, 500)),
            // The peer's DATA toward us, and another peer.
            (key(8, PEER, ORIGIN, 1, DIRECTION_INGRESS), seen(1, 2_000)),
            (
                key(9, ORIGIN, PEER + 1, 1, DIRECTION_EGRESS),
                seen(1, 2_000),
            ),
        ]);
        depth.handle_candidates(&map);
        assert_eq!(depth.learned(), &Learned::Tag(7));
        assert_eq!(
            depth.per_stream(),
            Some((40_000, vec![(1, 30_000), (2, 10_000)]))
        );
        assert_eq!(
            depth.key(2),
            Some(key(7, ORIGIN, PEER, 2, DIRECTION_EGRESS))
        );
        depth.handle_left(2, Some(10_000));
        depth.handle_left(1, Some(50_000));
        assert_eq!(depth.per_stream(), Some((0, vec![])));
        assert_eq!(depth.streams_to_read().count(), 0);
        assert_eq!(depth.depth(1), Some(0));
    }

    #[test]
    fn two_tags_on_our_ports_are_ambiguous_and_give_no_figure() {
        let mut depth = EgressDepth::new(ORIGIN, PEER, 1_000);
        depth.handle_written(1, 5);
        let map = BTreeMap::from([
            (key(7, ORIGIN, PEER, 1, DIRECTION_EGRESS), seen(1, 2_000)),
            (key(8, ORIGIN, PEER, 2, DIRECTION_EGRESS), seen(1, 2_000)),
        ]);
        depth.handle_candidates(&map);
        assert_eq!(depth.learned(), &Learned::Ambiguous(vec![7, 8]));
        assert_eq!(depth.per_stream(), None);
        assert_eq!(depth.key(1), None);
    }

    #[test]
    fn an_evicted_key_restarts_without_losing_what_it_counted() {
        let mut depth = EgressDepth::new(ORIGIN, PEER, 0);
        let map = BTreeMap::from([(key(7, ORIGIN, PEER, 1, DIRECTION_EGRESS), seen(0, 1))]);
        depth.handle_candidates(&map);
        depth.handle_written(1, 100_000);
        depth.handle_left(1, Some(60_000));
        depth.handle_left(1, None);
        assert_eq!(depth.depth(1), Some(40_000), "absent: evicted");
        depth.handle_left(1, Some(30_000));
        assert_eq!(depth.depth(1), Some(10_000));
        depth.handle_left(1, Some(5_000));
        assert_eq!(depth.depth(1), Some(5_000), "lower: restarted again");
        // Retransmissions make `left` exceed `written`: never below 0.
        depth.handle_left(1, Some(90_000));
        assert_eq!(depth.depth(1), Some(0));
    }
}
