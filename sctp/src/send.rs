//! The data sender: per-stream queues of whole messages, fragmentation at
//! transmission time, TSN assignment, the retransmission queue and its SACK
//! processing (RFC 9260 sections 6.1, 6.2.1, 6.3.3, 6.9, 7.2.4; RFC 8260
//! section 2.2 for I-DATA).
//!
//! ```text
//!  send()                      next_fragment()                on_sack()
//!  ──────► streams[s].queue ──────────────────► outstanding ───────────► acked
//!          (unsent bytes)      TSN assigned,     (in flight,      (cum ack: gone;
//!                              fragment cut to    or marked for    gap ack: kept
//!                              the packet's room  retransmission)  until cum passes)
//! ```
//!
//! Invariants:
//! - `outstanding` holds every TSN after `cum_ack` that was sent, in TSN
//!   order with no hole: `outstanding[i].chunk.tsn == cum_ack + 1 + i`.
//! - `flight` is the sum of `size` over the outstanding chunks that are in
//!   flight (sent, neither gap-acked nor marked for retransmission).
//! - Per stream, `unsent + in_flight` is what `send` accepted and the peer
//!   has not cumulatively acknowledged; `acked` only grows.
//! - Without I-DATA, the fragments of one message get consecutive TSNs
//!   (RFC 9260 6.9): once a message is started, its stream is `continuing`
//!   and the scheduler is not asked until the message is done. With I-DATA
//!   the scheduler is asked per fragment, so a large message never holds back
//!   another stream's small one.
//!
//! Messages are cut into fragments only when they are put in a packet, so a
//! fragment fills the room the packet has left.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::chunk::{DataChunk, DataKind, GapBlock, Sack};
use crate::congestion::{Acked, Controller};
use crate::rtt::RttEstimator;
use crate::seq::{le32, lt32};
use crate::stream_scheduler::{self, StreamScheduler, StreamSchedulerKind};
use crate::wire::{DATA_HEADER_LEN, IDATA_HEADER_LEN};

/// Miss indications after which a chunk is fast-retransmitted (RFC 9260 7.2.4).
const FAST_RETRANSMIT_MISSES: u32 = 3;
/// The smallest fragment worth starting in a packet's leftover room, bytes:
/// below it the fragment waits for the next packet instead.
const MIN_FRAGMENT: usize = 128;

/// Why `send` refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The stream is not below the negotiated outbound stream count.
    #[error("stream {0} is not one of the negotiated outbound streams")]
    InvalidStream(u16),
    /// SCTP cannot carry a message of zero bytes.
    #[error("an SCTP message cannot be empty")]
    Empty,
    /// The association is shutting down or closed.
    #[error("the association is shutting down or closed")]
    Closed,
}

/// Per-stream accounting, bytes of user data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Accepted by `send`, not yet sent once.
    pub unsent: usize,
    /// Sent, not yet cumulatively acknowledged.
    pub in_flight: usize,
    /// Cumulatively acknowledged since the association began.
    pub acked: u64,
}

/// Loss recovery's counts since the association began, for operators and
/// benchmarks: what a stall or a slow transfer was made of. The packet counts
/// are the association's; the rest are the sender's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// SCTP packets handed to the network.
    pub packets_sent: u64,
    /// SCTP packets received with the right verification tag.
    pub packets_received: u64,
    /// Times a packet with our verification tag came from a new UDP port of
    /// the peer's address and the association followed it (a NAT rebinding,
    /// RFC 6951 5.4).
    pub port_changes: u64,
    /// DATA chunks sent again, whatever marked them.
    pub retransmitted_chunks: u64,
    /// Chunks declared lost from SACKs (gap reports, RACK's time rule).
    pub lost_by_sack: u64,
    /// Chunks declared lost when RACK's reordering timer fired.
    pub lost_by_reorder_timer: u64,
    /// Tail-loss probes (RFC 8985 7): the probe timer fired with data to send.
    pub tail_probes: u64,
    /// Retransmission time-outs (T3-rtx expiries with data outstanding).
    pub rto_expirations: u64,
    /// Fast recoveries undone: every chunk they retransmitted came back
    /// reported as a duplicate TSN.
    pub spurious_recoveries: u64,
}

/// What a SACK did, for the association's timers and events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SackOutcome {
    /// The cumulative ack point moved.
    pub(crate) cum_advanced: bool,
    /// Chunks are marked for fast retransmission and one packet of them may
    /// go out ignoring the congestion window (RFC 9260 7.2.4 rule 3).
    pub(crate) fast_retransmit: bool,
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} packets sent, {} received; {} chunks retransmitted; lost: {} by SACK, \
             {} by the reorder timer; {} tail-loss probes; {} RTOs; {} recoveries undone; \
             {} peer port changes",
            self.packets_sent,
            self.packets_received,
            self.retransmitted_chunks,
            self.lost_by_sack,
            self.lost_by_reorder_timer,
            self.tail_probes,
            self.rto_expirations,
            self.spurious_recoveries,
            self.port_changes
        )
    }
}

/// The most retransmitted TSNs one recovery episode remembers for its undo;
/// an episode that retransmits more is not undone.
const MAX_UNDO_TSNS: usize = 64;

/// A fast recovery that may prove spurious. SCTP's duplicate-TSN reports
/// (RFC 9260 3.3.4) play the part of TCP's DSACK in RFC 8985's undo: once
/// every chunk the episode retransmitted has been reported back as a
/// duplicate, the originals had all arrived and the congestion response is
/// undone.
#[derive(Debug, Default)]
struct UndoEpisode {
    /// Retransmitted TSNs not yet reported as duplicates.
    pending: Vec<u32>,
    /// A duplicate report matched one of them.
    reported: bool,
    /// More than [`MAX_UNDO_TSNS`] retransmissions: not undoable.
    overflowed: bool,
}

/// What one pass of RACK's time rule marked lost.
#[derive(Debug, Clone, Copy, Default)]
struct Detected {
    bytes: u64,
    chunks: u64,
    /// The newest lost chunk's send time.
    newest: Option<Instant>,
}

/// What one SACK newly acknowledged, gathered over the walk of the
/// cumulative ack and the walk of the gap blocks, for the RTT estimator,
/// RACK and the congestion controller.
#[derive(Debug, Clone, Copy)]
struct SackTally {
    now: Instant,
    /// The newest send time acknowledged before this SACK: a chunk sent
    /// before it and acknowledged only now arrived late.
    newest_before: Option<Instant>,
    /// Bytes delivered for the first time.
    newly_acked: u64,
    /// Of those, the bytes sent before `newest_before`.
    late_bytes: u64,
    /// The newest send time among the chunks acknowledged.
    newest_sent: Option<Instant>,
    /// The RTT sample of the last chunk acknowledged that gives one, and
    /// that chunk's send time.
    sample: Option<(Duration, Instant)>,
    /// The newest delivered chunk by send time (RACK), and how many times it
    /// was sent.
    delivered: Option<(Instant, u32)>,
    /// Highest TSN newly acknowledged (the HTNA of RFC 9260 7.2.4).
    htna: Option<u32>,
}

impl SackTally {
    fn new(now: Instant, newest_before: Option<Instant>) -> Self {
        Self {
            now,
            newest_before,
            newly_acked: 0,
            late_bytes: 0,
            newest_sent: None,
            sample: None,
            delivered: None,
            htna: None,
        }
    }

    /// Takes in a chunk this SACK acknowledges for the first time, by the
    /// cumulative ack or in a gap block; its bytes count once even after a
    /// renege (`counted`).
    fn add(&mut self, sent: &Sent) {
        if !sent.counted {
            self.newly_acked += sent.size;
            if self
                .newest_before
                .is_some_and(|newest| sent.sent_at < newest)
            {
                self.late_bytes += sent.size;
            }
        }
        self.htna = Some(sent.chunk.tsn);
        self.newest_sent = Some(
            self.newest_sent
                .map_or(sent.sent_at, |t| t.max(sent.sent_at)),
        );
        self.delivered = newer(self.delivered, sent.sent_at, sent.transmissions);
        // Karn's rule, and no sample from a chunk already taken for
        // lost: its ack may have waited behind a hole for a long time.
        if sent.transmissions == 1 && !sent.marked {
            self.sample = Some((
                self.now.saturating_duration_since(sent.sent_at),
                sent.sent_at,
            ));
        }
    }
}

/// A SACK the sender cannot accept: the association aborts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the SACK acknowledges TSN {acked}, which was never sent")]
pub(crate) struct AckedUnsent {
    /// The TSN acknowledged.
    pub(crate) acked: u32,
}

#[derive(Debug)]
struct OutMessage {
    data: Bytes,
    /// Bytes of `data` already cut into fragments.
    offset: usize,
    ppid: u32,
    unordered: bool,
    /// SSN (DATA) or MID (I-DATA), assigned when the first fragment goes.
    mid: Option<u32>,
    /// I-DATA: the next fragment's FSN.
    fsn: u32,
    /// Enqueue order across all streams, for FCFS.
    order: u64,
}

#[derive(Debug, Default)]
struct OutStream {
    queue: VecDeque<OutMessage>,
    next_ordered: u32,
    next_unordered: u32,
    stats: StreamStats,
}

#[derive(Debug)]
struct Sent {
    chunk: DataChunk,
    /// Bytes on the wire (header and padding), as RFC 9260 counts the flight.
    size: u64,
    sent_at: Instant,
    transmissions: u32,
    gap_acked: bool,
    /// Already counted as delivered to the controller: a chunk un-acked by
    /// a renege and acked again was delivered once, not twice (a second
    /// count would make the path look faster than it is).
    counted: bool,
    marked: bool,
    misses: u32,
}

impl Sent {
    fn in_flight(&self) -> bool {
        !self.gap_acked && !self.marked
    }
}

/// The sending half of an association.
#[derive(Debug)]
pub(crate) struct Sender {
    streams: Vec<OutStream>,
    sched: Box<dyn StreamScheduler>,
    kind: DataKind,
    next_tsn: u32,
    next_order: u64,
    continuing: Option<u16>,
    outstanding: VecDeque<Sent>,
    /// The peer's cumulative TSN ack: every TSN up to it is acknowledged.
    cum_ack: u32,
    /// The send time of the newest chunk any SACK has acknowledged (what
    /// makes a newly acknowledged chunk "late", see [`Acked::late_bytes`]).
    newest_acked_sent: Option<Instant>,
    flight: u64,
    /// The peer's receive window as we last computed it (RFC 9260 6.2.1).
    peer_rwnd: u64,
    /// Chunks marked for retransmission.
    marked: usize,
    /// Outstanding chunks acknowledged by gap blocks.
    gap_acked: usize,
    /// Fast recovery: the highest TSN outstanding when it began.
    recovery: Option<u32>,
    /// One packet of marked chunks may ignore the congestion window.
    fast_rtx_pending: bool,
    /// RACK (RFC 8985 6.2): the send time of the most recently sent chunk
    /// known delivered, and the RTT it measured.
    rack: Option<(Instant, Duration)>,
    /// Time-based loss detection is on.
    rack_enabled: bool,
    /// Loss recovery's counts (the packet counts stay zero here).
    counters: Counters,
    /// The fast recovery under way or last ended, until undone or replaced.
    undo: Option<UndoEpisode>,
    /// When a chunk sent before the RACK time becomes lost if still missing.
    reorder_deadline: Option<Instant>,
    /// When the RTO last took a measurement (RFC 9260 6.3.1 C4).
    rto_measured_at: Option<Instant>,
    /// A tail-loss probe may send one packet of new data ignoring the window.
    probe_new: bool,
    /// Bytes of user data queued and not yet sent, all streams.
    unsent_total: usize,
}

/// A SACK's gap blocks, asked in order of rising offset from its
/// cumulative ack: each question costs the blocks passed since the last.
struct InBlocks<'a> {
    blocks: std::iter::Peekable<std::slice::Iter<'a, GapBlock>>,
}

impl<'a> InBlocks<'a> {
    fn new(sack: &'a Sack) -> Self {
        InBlocks {
            blocks: sack.gaps.iter().peekable(),
        }
    }

    /// Whether `offset` (not below the previous one asked) is in a block.
    fn contains(&mut self, offset: u32) -> bool {
        while self
            .blocks
            .peek()
            .is_some_and(|b| u32::from(b.end) < offset)
        {
            self.blocks.next();
        }
        self.blocks
            .peek()
            .is_some_and(|b| u32::from(b.start) <= offset && offset <= u32::from(b.end))
    }
}

impl Sender {
    /// Tests only (`Config::initial_mid`): every stream's first MID, ordered
    /// and unordered, for I-DATA.
    pub(crate) fn set_first_mid(&mut self, mid: u32) {
        if self.kind == DataKind::IData {
            for out in &mut self.streams {
                out.next_ordered = mid;
                out.next_unordered = mid;
            }
        }
    }

    /// A sender whose first TSN is `initial_tsn`.
    pub(crate) fn new(
        initial_tsn: u32,
        peer_rwnd: u32,
        outbound_streams: u16,
        idata: bool,
        scheduler: StreamSchedulerKind,
    ) -> Self {
        Sender {
            streams: (0..outbound_streams)
                .map(|_| OutStream::default())
                .collect(),
            sched: stream_scheduler::build(scheduler, outbound_streams),
            kind: if idata {
                DataKind::IData
            } else {
                DataKind::Data
            },
            next_tsn: initial_tsn,
            next_order: 0,
            continuing: None,
            outstanding: VecDeque::new(),
            cum_ack: initial_tsn.wrapping_sub(1),
            newest_acked_sent: None,
            flight: 0,
            peer_rwnd: u64::from(peer_rwnd),
            marked: 0,
            gap_acked: 0,
            recovery: None,
            fast_rtx_pending: false,
            rack: None,
            rack_enabled: true,
            counters: Counters::default(),
            undo: None,
            reorder_deadline: None,
            rto_measured_at: None,
            probe_new: false,
            unsent_total: 0,
        }
    }

    /// Queues one message.
    pub(crate) fn enqueue(
        &mut self,
        stream: u16,
        data: Bytes,
        ppid: u32,
        unordered: bool,
    ) -> Result<(), SendError> {
        if data.is_empty() {
            return Err(SendError::Empty);
        }
        let out = self
            .streams
            .get_mut(usize::from(stream))
            .ok_or(SendError::InvalidStream(stream))?;
        let order = self.next_order;
        self.next_order += 1;
        let was_empty = out.queue.is_empty();
        out.stats.unsent += data.len();
        self.unsent_total += data.len();
        out.queue.push_back(OutMessage {
            data,
            offset: 0,
            ppid,
            unordered,
            mid: None,
            fsn: 0,
            order,
        });
        if was_empty {
            self.sched.activate(stream, order);
        }
        Ok(())
    }

    /// The stream's accounting; `None` for a stream outside the grant.
    pub(crate) fn stats(&self, stream: u16) -> Option<StreamStats> {
        self.streams.get(usize::from(stream)).map(|s| s.stats)
    }

    /// Sets the scheduler's value (priority or weight) of `stream`.
    pub(crate) fn set_stream_value(&mut self, stream: u16, value: u16) {
        self.sched.set_value(stream, value);
    }

    /// User data waits to be sent for the first time.
    pub(crate) fn has_unsent(&self) -> bool {
        self.unsent_total > 0
    }

    /// Chunks wait for retransmission.
    pub(crate) fn has_marked(&self) -> bool {
        self.marked > 0
    }

    /// Nothing is queued, in flight or waiting for an ack.
    pub(crate) fn is_idle(&self) -> bool {
        self.unsent_total == 0 && self.outstanding.is_empty()
    }

    /// Sent data is not yet cumulatively acknowledged (the T3-rtx timer runs).
    pub(crate) fn has_outstanding(&self) -> bool {
        !self.outstanding.is_empty()
    }

    /// Bytes in flight.
    pub(crate) fn flight(&self) -> u64 {
        self.flight
    }

    /// The peer's receive window as last computed, bytes.
    pub(crate) fn peer_rwnd(&self) -> u64 {
        self.peer_rwnd
    }

    /// Chunks sent and not cumulatively acknowledged, and how many of them
    /// are marked for retransmission.
    pub(crate) fn outstanding_counts(&self) -> (usize, usize) {
        (self.outstanding.len(), self.marked)
    }

    /// The peer's cumulative ack.
    pub(crate) fn cum_ack(&self) -> u32 {
        self.cum_ack
    }

    /// Whether new data may be sent now: the congestion window has room
    /// (RFC 9260 6.1 rule B: data may go while the flight is below cwnd) and
    /// so has the peer's window, or nothing is in flight (a zero-window probe,
    /// RFC 9260 6.1 rule A).
    pub(crate) fn may_send_new(&self, cwnd: u64) -> bool {
        if self.flight >= cwnd && !self.probe_new {
            return false;
        }
        self.peer_rwnd > 0 || self.flight == 0
    }

    /// Loss recovery's counts so far.
    pub(crate) fn counters(&self) -> Counters {
        self.counters
    }

    /// Whether marked chunks may be retransmitted now.
    pub(crate) fn may_retransmit(&self, cwnd: u64) -> bool {
        self.marked > 0 && (self.fast_rtx_pending || self.flight < cwnd)
    }

    /// The packet that used the fast-retransmit allowance has been built.
    pub(crate) fn fast_retransmit_sent(&mut self) {
        self.fast_rtx_pending = false;
    }

    fn header_len(&self) -> usize {
        match self.kind {
            DataKind::Data => DATA_HEADER_LEN,
            DataKind::IData => IDATA_HEADER_LEN,
        }
    }

    /// The lowest marked chunk that fits in `room` bytes, sent again.
    pub(crate) fn next_retransmit(
        &mut self,
        now: Instant,
        room: usize,
        cc: &mut dyn Controller,
    ) -> Option<DataChunk> {
        let sent = self
            .outstanding
            .iter_mut()
            .find(|s| s.marked && usize::try_from(s.size).is_ok_and(|size| size <= room))?;
        sent.marked = false;
        sent.misses = 0;
        sent.transmissions += 1;
        self.counters.retransmitted_chunks += 1;
        if let Some(undo) = self.undo.as_mut() {
            if undo.pending.len() < MAX_UNDO_TSNS {
                undo.pending.push(sent.chunk.tsn);
            } else {
                undo.overflowed = true;
            }
        }
        sent.sent_at = now;
        self.marked -= 1;
        self.flight += sent.size;
        self.peer_rwnd = self.peer_rwnd.saturating_sub(sent.size);
        cc.on_sent(now, sent.size);
        Some(sent.chunk.clone())
    }

    /// Cuts the next fragment of new data, at most `room` bytes on the wire,
    /// assigns its TSN and records it as in flight.
    pub(crate) fn next_fragment(
        &mut self,
        now: Instant,
        room: usize,
        cc: &mut dyn Controller,
    ) -> Option<DataChunk> {
        let header = self.header_len();
        let space = room.checked_sub(header)? & !3;
        let stream = match self.continuing {
            Some(stream) => stream,
            None => self.sched.pick()?,
        };
        let kind = self.kind;
        let out = self.streams.get_mut(usize::from(stream))?;
        let msg = out.queue.front_mut()?;
        let left = msg.data.len() - msg.offset;
        if space < left && space < MIN_FRAGMENT {
            return None;
        }
        let take = left.min(space);
        let beginning = msg.offset == 0;
        let mid = match msg.mid {
            Some(mid) => mid,
            None => {
                let next = if msg.unordered {
                    &mut out.next_unordered
                } else {
                    &mut out.next_ordered
                };
                let mid = *next;
                *next = match kind {
                    DataKind::Data => u32::from(u16::try_from(mid).unwrap_or(0).wrapping_add(1)),
                    DataKind::IData => mid.wrapping_add(1),
                };
                msg.mid = Some(mid);
                mid
            }
        };
        let payload = msg.data.slice(msg.offset..msg.offset + take);
        msg.offset += take;
        let ending = msg.offset == msg.data.len();
        let chunk = DataChunk {
            kind,
            unordered: msg.unordered,
            beginning,
            ending,
            immediate: false,
            tsn: self.next_tsn,
            stream,
            mid,
            fsn: if kind == DataKind::IData { msg.fsn } else { 0 },
            ppid: if beginning || kind == DataKind::Data {
                msg.ppid
            } else {
                0
            },
            payload,
        };
        msg.fsn = msg.fsn.wrapping_add(1);
        out.stats.unsent -= take;
        out.stats.in_flight += take;
        self.unsent_total -= take;
        if ending {
            out.queue.pop_front();
        }
        let next = out.queue.front().map(|m| m.order);
        self.continuing = (kind == DataKind::Data && !ending).then_some(stream);
        self.sched.consumed(stream, take, ending, next);
        self.next_tsn = self.next_tsn.wrapping_add(1);
        let size = ((header + take + 3) & !3) as u64;
        self.flight += size;
        self.peer_rwnd = self.peer_rwnd.saturating_sub(size);
        cc.on_sent(now, size);
        self.outstanding.push_back(Sent {
            chunk: chunk.clone(),
            size,
            sent_at: now,
            transmissions: 1,
            gap_acked: false,
            counted: false,
            marked: false,
            misses: 0,
        });
        Some(chunk)
    }

    /// The packet being built is finished (for round robin per packet).
    pub(crate) fn end_packet(&mut self) {
        self.probe_new = false;
        self.sched.end_packet();
    }

    /// Processes a SACK (RFC 9260 6.2.1 and 7.2.4): drops what the cumulative
    /// ack covers, marks gap-acked chunks, counts miss indications and marks
    /// chunks for fast retransmission, and feeds the RTT estimator and the
    /// congestion controller.
    pub(crate) fn on_sack(
        &mut self,
        now: Instant,
        sack: &Sack,
        rtt: &mut RttEstimator,
        cc: &mut dyn Controller,
    ) -> Result<SackOutcome, AckedUnsent> {
        let mut outcome = SackOutcome::default();
        if lt32(sack.cum_tsn_ack, self.cum_ack) {
            // An old SACK, overtaken by a newer one (RFC 9260 6.2.1 D i).
            return Ok(outcome);
        }
        let highest_sent = self.next_tsn.wrapping_sub(1);
        if lt32(highest_sent, sack.cum_tsn_ack) {
            return Err(AckedUnsent {
                acked: sack.cum_tsn_ack,
            });
        }
        if sack.cum_tsn_ack == self.cum_ack && self.overtaken(sack) {
            // Generated before a SACK already taken in, arriving after it:
            // its missing blocks are not a renege, its window is older.
            return Ok(outcome);
        }
        if self.spurious_by(&sack.dups) {
            cc.on_spurious_congestion(now);
            self.counters.spurious_recoveries += 1;
            self.recovery = None;
        }
        let flight_before = self.flight;
        let mut tally = SackTally::new(now, self.newest_acked_sent);
        outcome.cum_advanced = self.ack_cumulative(sack.cum_tsn_ack, &mut tally);
        self.cum_ack = sack.cum_tsn_ack;
        self.ack_gap_blocks(sack, &mut tally);

        if let Some((sample, sent_at)) = tally.sample {
            // RFC 9260 6.3.1 C4: the RTO takes at most one measurement per
            // round trip, from a chunk sent after the previous measurement
            // was taken (so its ack comes a round trip later). Every sample
            // still feeds the minimum RTT (RACK's reordering window and its
            // plausibility check), and the controller below gets each one.
            if self.rto_measured_at.is_none_or(|at| sent_at >= at) {
                rtt.on_sample(sample);
                self.rto_measured_at = Some(now);
            } else {
                rtt.observe(sample);
            }
        }
        if self
            .recovery
            .is_some_and(|exit| le32(exit, sack.cum_tsn_ack))
        {
            self.recovery = None;
        }
        let lost = self.detect_losses(now, rtt, &tally);

        if tally.newest_sent > self.newest_acked_sent {
            self.newest_acked_sent = tally.newest_sent;
        }
        if tally.newly_acked > 0
            && let Some(sent) = tally.newest_sent
        {
            cc.on_ack(
                now,
                &Acked {
                    bytes: tally.newly_acked,
                    sent,
                    flight_before,
                    cum_advanced: outcome.cum_advanced,
                    smoothed_rtt: rtt.smoothed(),
                    rtt_sample: tally.sample.map(|(sample, _)| sample),
                    late_bytes: tally.late_bytes,
                },
            );
        }
        if let Some(sent) = lost.newest {
            cc.on_lost(now, lost.bytes);
            if self.recovery.is_none() {
                self.recovery = Some(highest_sent);
                self.undo = Some(UndoEpisode::default());
                cc.on_congestion_event(now, sent, false, lost.bytes);
            }
            self.fast_rtx_pending = true;
            outcome.fast_retransmit = true;
        }
        // RFC 9260 6.2.1 D iv: the peer's window less what is still in flight.
        self.peer_rwnd = u64::from(sack.a_rwnd).saturating_sub(self.flight);
        Ok(outcome)
    }

    /// Drops every chunk the cumulative ack covers, adding to `tally` those
    /// not gap-acked before; true if it dropped any.
    fn ack_cumulative(&mut self, cum_tsn_ack: u32, tally: &mut SackTally) -> bool {
        let mut advanced = false;
        while let Some(first) = self.outstanding.front() {
            if !le32(first.chunk.tsn, cum_tsn_ack) {
                break;
            }
            let Some(sent) = self.outstanding.pop_front() else {
                break;
            };
            if sent.marked {
                self.marked -= 1;
            }
            if sent.in_flight() {
                self.flight -= sent.size;
            }
            if sent.gap_acked {
                self.gap_acked -= 1;
            } else {
                tally.add(&sent);
            }
            if let Some(out) = self.streams.get_mut(usize::from(sent.chunk.stream)) {
                let len = sent.chunk.payload.len();
                out.stats.in_flight -= len;
                out.stats.acked += len as u64;
            }
            advanced = true;
        }
        advanced
    }

    /// Whether a SACK with the current cumulative ack is older than what an
    /// earlier one told us: it leaves out a TSN a gap block acknowledged
    /// before and acknowledges nothing new. Without a renege a receiver's
    /// reports at one cumulative ack only grow, so a report that only
    /// shrinks is one that was overtaken on the way (RFC 9260 6.2.1 D i
    /// drops such a SACK when its cumulative ack is lower; at an equal one
    /// it takes this test). A true renege that drops blocks at an unchanged
    /// cumulative ack is then seen at the next SACK that moves it: the
    /// hole at cum + 1 is never gap-acked, so it is retransmitted and
    /// filled whatever the peer dropped above it.
    fn overtaken(&self, sack: &Sack) -> bool {
        if self.gap_acked == 0 {
            return false;
        }
        let base = sack.cum_tsn_ack;
        // Silent above its last block, as in `ack_gap_blocks`.
        let reported = sack.gaps.last().map_or(u32::MAX, |b| u32::from(b.end));
        let mut blocks = InBlocks::new(sack);
        let mut leaves_out = false;
        for sent in &self.outstanding {
            let offset = sent.chunk.tsn.wrapping_sub(base);
            let in_block = blocks.contains(offset);
            if in_block && !sent.gap_acked {
                return false;
            }
            leaves_out |= !in_block && sent.gap_acked && offset <= reported;
        }
        leaves_out
    }

    /// Gap blocks: offsets from the cumulative ack. Anything outstanding not
    /// inside a block is not (or no longer) acknowledged: marks the chunks
    /// newly inside a block as gap-acked, adding them to `tally`, and takes
    /// back those the peer reneged on.
    fn ack_gap_blocks(&mut self, sack: &Sack, tally: &mut SackTally) {
        let mut blocks = InBlocks::new(sack);
        let base = sack.cum_tsn_ack;
        // Without gap blocks and with nothing gap-acked before, there is
        // nothing to mark or un-mark: the common case costs no walk.
        let walk = if sack.gaps.is_empty() && self.gap_acked == 0 {
            0
        } else {
            self.outstanding.len()
        };
        // A SACK says nothing of TSNs above its last gap block: a receiver
        // reports a bounded number of blocks (ours [`MAX_GAP_BLOCKS`], others
        // what fits in a packet), so a block it left out is not a renege.
        // Without blocks, everything above the cumulative ack is reported
        // missing, as RFC 9260 6.2.1 D iv reads.
        //
        // [`MAX_GAP_BLOCKS`]: crate::recv::MAX_GAP_BLOCKS
        let reported = sack.gaps.last().map_or(u32::MAX, |b| u32::from(b.end));
        for sent in self.outstanding.iter_mut().take(walk) {
            let offset = sent.chunk.tsn.wrapping_sub(base);
            let in_block = blocks.contains(offset);
            if in_block && !sent.gap_acked {
                if sent.in_flight() {
                    self.flight -= sent.size;
                }
                if sent.marked {
                    sent.marked = false;
                    self.marked -= 1;
                }
                sent.gap_acked = true;
                self.gap_acked += 1;
                tally.add(sent);
                sent.counted = true;
            } else if !in_block && sent.gap_acked && offset <= reported {
                // Renege (RFC 9260 6.2.1 D iv): the peer dropped it after all.
                sent.gap_acked = false;
                self.gap_acked -= 1;
                sent.misses = 0;
                self.flight += sent.size;
            }
        }
    }

    /// Loss detection after a SACK has been taken in: RACK's time rule when
    /// it is enabled, otherwise miss indications below the highest newly
    /// acked TSN. Marks what is lost for fast retransmission and returns it.
    fn detect_losses(&mut self, now: Instant, rtt: &RttEstimator, tally: &SackTally) -> Detected {
        let mut lost = Detected::default();
        let mut retransmission_delivered = false;
        if let Some((sent_at, transmissions)) = tally.delivered {
            let measured = now.saturating_duration_since(sent_at);
            // RFC 8985 6.2 step 2: an ack of a retransmission arriving sooner
            // than the minimum RTT is for the original; it says nothing new.
            let plausible = transmissions == 1 || rtt.min().is_none_or(|min| measured >= min);
            if plausible && self.rack.is_none_or(|(t, _)| sent_at >= t) {
                self.rack = Some((sent_at, measured));
            }
            retransmission_delivered = transmissions > 1;
        }
        self.probe_new = false;
        if self.rack_enabled && (self.gap_acked > 0 || retransmission_delivered) {
            let detected = self.rack_detect(now, rtt);
            self.counters.lost_by_sack += detected.chunks;
            lost.chunks += detected.chunks;
            lost.bytes += detected.bytes;
            lost.newest = detected.newest.max(lost.newest);
        }
        // With RACK on, time replaces the count of miss indications (RFC 8985
        // 6.2): a fixed three-report threshold reads any reordering deeper
        // than three packets as loss.
        if let Some(htna) = tally.htna.filter(|_| !self.rack_enabled) {
            for sent in self.outstanding.iter_mut() {
                if !lt32(sent.chunk.tsn, htna) {
                    break;
                }
                if sent.gap_acked || sent.marked {
                    continue;
                }
                sent.misses += 1;
                if sent.misses >= FAST_RETRANSMIT_MISSES {
                    sent.marked = true;
                    self.marked += 1;
                    self.counters.lost_by_sack += 1;
                    self.flight -= sent.size;
                    lost.chunks += 1;
                    lost.bytes += sent.size;
                    lost.newest = Some(lost.newest.map_or(sent.sent_at, |t| t.max(sent.sent_at)));
                }
            }
        }
        lost
    }

    /// Takes a SACK's duplicate-TSN reports against the recovery episode;
    /// true once every chunk it retransmitted has been reported (and none
    /// waits to go again): the recovery was spurious and is over.
    fn spurious_by(&mut self, dups: &[u32]) -> bool {
        let Some(undo) = self.undo.as_mut() else {
            return false;
        };
        for dup in dups {
            if let Some(i) = undo.pending.iter().position(|t| t == dup) {
                undo.pending.swap_remove(i);
                undo.reported = true;
            }
        }
        if undo.reported && undo.pending.is_empty() && !undo.overflowed && self.marked == 0 {
            self.undo = None;
            return true;
        }
        false
    }

    /// RACK's reordering window: a quarter of the minimum RTT (RFC 8985
    /// 6.2 step 4), never more than the smoothed RTT.
    fn reo_wnd(rtt: &RttEstimator) -> Duration {
        let quarter = rtt.min().map_or(Duration::ZERO, |min| min / 4);
        rtt.smoothed().map_or(quarter, |srtt| quarter.min(srtt))
    }

    /// Time-based loss detection (RFC 8985 6.2 step 5, with TSNs for
    /// sequence numbers): a chunk sent before the newest delivered one is
    /// lost once it has been missing for that chunk's RTT plus the
    /// reordering window; the earliest chunk not yet due sets the reorder
    /// deadline.
    fn rack_detect(&mut self, now: Instant, rtt: &RttEstimator) -> Detected {
        self.reorder_deadline = None;
        let mut detected = Detected::default();
        let Some((rack_sent, rack_rtt)) = self.rack else {
            return detected;
        };
        let wait = rack_rtt + Self::reo_wnd(rtt);
        for sent in self.outstanding.iter_mut() {
            if sent.gap_acked || sent.marked || sent.sent_at >= rack_sent {
                continue;
            }
            let due = sent.sent_at + wait;
            if due <= now {
                sent.marked = true;
                self.marked += 1;
                self.flight -= sent.size;
                detected.bytes += sent.size;
                detected.chunks += 1;
                detected.newest = detected.newest.max(Some(sent.sent_at));
            } else {
                self.reorder_deadline = Some(self.reorder_deadline.map_or(due, |d| d.min(due)));
            }
        }
        detected
    }

    /// When RACK's reorder timer fires, if it runs.
    pub(crate) fn reorder_deadline(&self) -> Option<Instant> {
        self.reorder_deadline
    }

    /// RACK's reorder timer fired: chunks whose wait is over are lost.
    /// Returns whether any was marked (a fast retransmission is then due).
    pub(crate) fn on_reorder_timeout(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        cc: &mut dyn Controller,
    ) -> bool {
        let Detected {
            bytes: lost,
            newest,
            chunks,
        } = self.rack_detect(now, rtt);
        self.counters.lost_by_reorder_timer += chunks;
        let Some(sent) = newest else {
            return false;
        };
        cc.on_lost(now, lost);
        if self.recovery.is_none() {
            self.recovery = Some(self.next_tsn.wrapping_sub(1));
            self.undo = Some(UndoEpisode::default());
            cc.on_congestion_event(now, sent, false, lost);
        }
        self.fast_rtx_pending = true;
        true
    }

    /// Turns RACK on or off (RFC 9260's miss indications work either way).
    pub(crate) fn set_rack(&mut self, enabled: bool) {
        self.rack_enabled = enabled;
    }

    /// A tail-loss probe (RFC 8985 7.3): new data if any waits (one packet
    /// may go past the congestion window), else the highest outstanding
    /// chunk again. Not a loss: the window is untouched. Returns whether
    /// there was anything to probe with.
    pub(crate) fn tail_probe(&mut self) -> bool {
        if self.unsent_total > 0 {
            self.probe_new = true;
            self.counters.tail_probes += 1;
            return true;
        }
        let Some(last) = self
            .outstanding
            .iter_mut()
            .rev()
            .find(|s| !s.gap_acked && !s.marked)
        else {
            return false;
        };
        last.marked = true;
        self.marked += 1;
        self.flight -= last.size;
        self.fast_rtx_pending = true;
        self.counters.tail_probes += 1;
        true
    }

    /// The T3-rtx timer expired (RFC 9260 6.3.3): every outstanding chunk
    /// not gap-acked is marked for retransmission.
    pub(crate) fn on_t3_expiry(&mut self, now: Instant, cc: &mut dyn Controller) {
        self.counters.rto_expirations += 1;
        let mut newest: Option<Instant> = None;
        let mut lost = 0;
        for sent in self.outstanding.iter_mut() {
            if sent.gap_acked || sent.marked {
                continue;
            }
            sent.marked = true;
            self.marked += 1;
            self.flight -= sent.size;
            lost += sent.size;
            newest = Some(newest.map_or(sent.sent_at, |t| t.max(sent.sent_at)));
        }
        self.recovery = None;
        // A time-out is not undone (its cause cannot be told from here).
        self.undo = None;
        self.fast_rtx_pending = false;
        self.reorder_deadline = None;
        self.probe_new = false;
        cc.on_lost(now, lost);
        cc.on_congestion_event(now, newest.unwrap_or(now), true, lost);
    }

    /// Drops everything queued and outstanding (abort).
    pub(crate) fn clear(&mut self) {
        for out in &mut self.streams {
            out.queue.clear();
            out.stats.unsent = 0;
            out.stats.in_flight = 0;
        }
        self.outstanding.clear();
        self.gap_acked = 0;
        self.unsent_total = 0;
        self.flight = 0;
        self.marked = 0;
    }
}

/// The newer of a delivered chunk and the newest so far, by send time.
fn newer(
    current: Option<(Instant, u32)>,
    sent_at: Instant,
    transmissions: u32,
) -> Option<(Instant, u32)> {
    match current {
        Some((t, _)) if t >= sent_at => current,
        _ => Some((sent_at, transmissions)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::GapBlock;
    use crate::congestion::{Acked, Controller};
    use crate::rtt::RttConfig;

    /// Records what the sender reports to the controller.
    #[derive(Debug, Clone, Default)]
    struct Recorder {
        acked: u64,
        late: u64,
        /// The RTT sample of each `on_ack`.
        samples: Vec<Option<Duration>>,
    }

    impl Controller for Recorder {
        fn on_sent(&mut self, _now: Instant, _bytes: u64) {}
        fn on_ack(&mut self, _now: Instant, acked: &Acked) {
            self.acked += acked.bytes;
            self.late += acked.late_bytes;
            self.samples.push(acked.rtt_sample);
        }
        fn on_congestion_event(&mut self, _: Instant, _: Instant, _: bool, _: u64) {}
        fn on_mtu(&mut self, _mtu: usize) {}
        fn window(&self) -> u64 {
            u64::MAX
        }
        fn ssthresh(&self) -> u64 {
            u64::MAX
        }
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn clone_box(&self) -> Box<dyn Controller> {
            Box::new(self.clone())
        }
    }

    const TSN0: u32 = 1000;

    /// A sender with `count` one-chunk messages of 100 bytes sent, one
    /// millisecond apart, TSNs `TSN0..TSN0 + count`.
    fn sent(count: u32, cc: &mut Recorder, start: Instant) -> (Sender, u64) {
        let mut s = Sender::new(TSN0, 1 << 20, 1, false, StreamSchedulerKind::Fcfs);
        for i in 0..count {
            s.enqueue(0, Bytes::from(vec![0; 100]), 0, false)
                .expect("enqueue");
            let now = start + Duration::from_millis(u64::from(i));
            s.next_fragment(now, 1200, cc).expect("a chunk");
        }
        let size = s.flight() / u64::from(count);
        (s, size)
    }

    fn sack(cum: u32, gaps: &[(u16, u16)]) -> Sack {
        Sack {
            cum_tsn_ack: cum,
            a_rwnd: 1 << 20,
            gaps: gaps
                .iter()
                .map(|&(start, end)| GapBlock { start, end })
                .collect(),
            dups: Vec::new(),
        }
    }

    #[test]
    fn a_sack_is_silent_above_its_last_gap_block() {
        let start = Instant::now();
        let mut cc = Recorder::default();
        let (mut s, size) = sent(10, &mut cc, start);
        let mut rtt = RttEstimator::new(RttConfig::default());
        let now = start + Duration::from_millis(50);
        // Holes at offsets 1, 3 and 6; TSN0 + 7 (offset 8) is acked in a block.
        s.on_sack(
            now,
            &sack(TSN0 - 1, &[(2, 2), (4, 5), (7, 10)]),
            &mut rtt,
            &mut cc,
        )
        .expect("valid");
        let flight = s.flight();
        assert_eq!(flight, 3 * size);
        // A report cut after its first two blocks (a peer's block limit):
        // nothing above offset 5 is reneged, nothing is counted again.
        s.on_sack(now, &sack(TSN0 - 1, &[(2, 2), (4, 5)]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(s.flight(), flight);
        assert_eq!(cc.acked, 7 * size);
        // A block the peer really dropped below its last block is a renege
        // (RFC 9260 6.2.1 D iv): back in flight, but counted delivered once.
        // At the same cumulative ack such a report cannot be told from one
        // overtaken on the way (`overtaken`), so the renege shows once the
        // cumulative ack moves: TSN0 arrives, TSN0 + 3 and + 4 are gone.
        s.on_sack(now, &sack(TSN0, &[(1, 1), (6, 9)]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(s.flight(), flight - size + 2 * size);
        s.on_sack(now, &sack(TSN0 + 9, &[]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(s.flight(), 0);
        assert_eq!(cc.acked, 10 * size, "every chunk counted once");
    }

    #[test]
    fn chunks_first_reported_after_a_newer_one_are_late() {
        let start = Instant::now();
        let mut cc = Recorder::default();
        let (mut s, size) = sent(6, &mut cc, start);
        let mut rtt = RttEstimator::new(RttConfig::default());
        let now = start + Duration::from_millis(50);
        // The newest chunk (offset 6) is acked first, alone.
        s.on_sack(now, &sack(TSN0 - 1, &[(6, 6)]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!((cc.acked, cc.late), (size, 0));
        // The five sent before it are reported only now: late.
        s.on_sack(now, &sack(TSN0 + 5, &[]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!((cc.acked, cc.late), (6 * size, 5 * size));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// RFC 9260 6.3.1 rule C4: "RTT measurements SHOULD be made no more
    /// than once per round trip for a given destination transport address."
    /// Chunks sent in one burst and acknowledged by several SACKs give the
    /// RTO one measurement; a chunk sent after that measurement gives the
    /// next. The congestion controller (BBR's own min-RTT filter) still gets
    /// every SACK's sample, and the minimum RTT (RACK) sees every sample.
    #[test]
    fn rfc9260_6_3_1_c4_the_rto_measures_once_per_round_trip() {
        let start = Instant::now();
        let mut cc = Recorder::default();
        let (mut s, _) = sent(4, &mut cc, start);
        let open = RttConfig {
            initial: ms(1000),
            min: ms(1),
            max: ms(60_000),
        };
        let mut rtt = RttEstimator::new(open);
        // TSN0 (sent at 0 ms) acked at 100 ms: the first measurement.
        s.on_sack(start + ms(100), &sack(TSN0, &[]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(rtt.smoothed(), Some(ms(100)));
        let rto = rtt.rto();
        // TSN0 + 1 (sent at 1 ms) acked at 301 ms, TSN0 + 2 (at 2 ms) at
        // 52 ms... later: same round trip, sent before the measurement.
        s.on_sack(start + ms(301), &sack(TSN0 + 1, &[]), &mut rtt, &mut cc)
            .expect("valid");
        s.on_sack(start + ms(302), &sack(TSN0 + 2, &[]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(
            rtt.smoothed(),
            Some(ms(100)),
            "one measurement per round trip"
        );
        assert_eq!(rtt.rto(), rto);
        assert_eq!(rtt.latest(), Some(ms(300)), "the samples are still seen");
        // A chunk sent after the measurement was taken: the next round trip.
        s.enqueue(0, Bytes::from(vec![0; 100]), 0, false)
            .expect("enqueue");
        s.next_fragment(start + ms(310), 1200, &mut cc)
            .expect("a chunk");
        s.on_sack(start + ms(390), &sack(TSN0 + 4, &[]), &mut rtt, &mut cc)
            .expect("valid");
        // SRTT = 7/8 * 100 + 1/8 * 80.
        assert_eq!(rtt.smoothed(), Some(ms(97) + Duration::from_micros(500)));
        assert_eq!(rtt.min(), Some(ms(80)));
        // Every SACK's sample went to the controller, the C4-skipped ones too
        // (TSN0 + 3's ack, by the last SACK, is older than TSN0 + 4's).
        assert_eq!(
            cc.samples,
            vec![Some(ms(100)), Some(ms(300)), Some(ms(300)), Some(ms(80))]
        );
    }

    /// RFC 9260 6.2.1: SACKs may arrive out of order. One whose cumulative
    /// ack is below the current one is dropped (D i); one with the same
    /// cumulative ack that was generated before a SACK already taken in
    /// reports fewer gap blocks, and those missing blocks are not a renege:
    /// it is dropped too, window included (docs/sctp.md says why).
    #[test]
    fn rfc9260_6_2_1_a_reordered_sack_with_the_same_cum_ack_is_not_a_renege() {
        let start = Instant::now();
        let mut cc = Recorder::default();
        let (mut s, size) = sent(10, &mut cc, start);
        let mut rtt = RttEstimator::new(RttConfig::default());
        let now = start + ms(50);
        let mut newer = sack(TSN0 - 1, &[(2, 5)]);
        newer.a_rwnd = 50_000;
        // Generated before TSN0 + 2 and + 3 arrived.
        let mut older = sack(TSN0 - 1, &[(2, 2), (5, 5)]);
        older.a_rwnd = 90_000;
        // The newer SACK arrives first.
        s.on_sack(now, &newer, &mut rtt, &mut cc).expect("valid");
        let flight = s.flight();
        assert_eq!(flight, 6 * size);
        let rwnd = s.peer_rwnd();
        assert_eq!(rwnd, 50_000 - flight);
        // Then the older one.
        s.on_sack(now + ms(1), &older, &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(s.flight(), flight, "TSN0 + 2 and + 3 are not reneged");
        assert_eq!(s.peer_rwnd(), rwnd, "the older window is not taken");
        assert_eq!(cc.acked, 4 * size);
        // A SACK at the same cumulative ack that reports more is taken.
        s.on_sack(
            now + ms(2),
            &sack(TSN0 - 1, &[(2, 5), (7, 7)]),
            &mut rtt,
            &mut cc,
        )
        .expect("valid");
        assert_eq!(s.flight(), flight - size);
        // One with the same report and a new window (a window update) too.
        let mut update = sack(TSN0 - 1, &[(2, 5), (7, 7)]);
        update.a_rwnd = 80_000;
        s.on_sack(now + ms(3), &update, &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(s.peer_rwnd(), 80_000 - (flight - size));
        // A lower cumulative ack is dropped whatever it says (D i).
        s.on_sack(now + ms(4), &sack(TSN0 + 1, &[]), &mut rtt, &mut cc)
            .expect("valid");
        s.on_sack(now + ms(5), &sack(TSN0 - 1, &[]), &mut rtt, &mut cc)
            .expect("valid");
        assert_eq!(s.cum_ack(), TSN0 + 1);
    }
}
