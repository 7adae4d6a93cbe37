//! The data receiver: which TSNs arrived (the cumulative ack and the gap
//! reports of the SACK), reassembly of fragmented messages, ordered and
//! unordered delivery, and the receive window.
//!
//! The association hands every DATA or I-DATA chunk to [`Receiver::on_data`]
//! and acts on the [`Verdict`] (abort, report an invalid stream, schedule a
//! SACK); it asks [`Receiver::build_sack`] for the SACK when its
//! acknowledgement policy says so, and drains whole messages with
//! [`Receiver::pop`].
//!
//! RFC 9260 sections 6.2 (receiving DATA, the receive window), 6.2.1, 6.5
//! (stream identifier and SSN), 6.6 (ordered and unordered delivery), 6.7
//! (gap reports), 6.9 (fragmentation and reassembly), 3.3.4 (SACK); RFC 8260
//! sections 2.1 and 2.2 (I-DATA: MID and FSN).
//!
//! # The TSN map
//!
//! ```text
//!            cum_tsn
//!               |   received: sorted disjoint ranges above cum_tsn
//!   ... ########|  [####]     [#]   [#######]        |
//!               +1                          cum_tsn + MAX_TSN_AHEAD
//!   gap blocks:    (s1,e1)    (s2,e2) (s3,e3)   offsets from cum_tsn
//! ```
//!
//! Everything up to `cum_tsn` arrived; above it, the TSNs that arrived are
//! kept as sorted, disjoint, non-adjacent ranges of absolute TSNs, which are
//! the gap ack blocks. When a range starts at `cum_tsn + 1` it is folded into
//! `cum_tsn`. Every held TSN lies in `cum_tsn + 1 ..= cum_tsn +
//! MAX_TSN_AHEAD`, a span far shorter than half the TSN space, so serial
//! comparisons order them totally and every gap offset fits the 16 bits of a
//! gap block.
//!
//! # Reassembly
//!
//! DATA fragments of one message have consecutive TSNs (B on the first, E on
//! the last), so they are kept as *runs*: chains of consecutive TSNs of one
//! message, keyed by their first TSN (and indexed by their last), merged as
//! the missing TSNs arrive, smaller into larger so a hostile arrival order
//! costs O(n log n). A run that starts with B and ends with E is a message.
//! I-DATA fragments are found by (stream, U flag, MID) and ordered by FSN; a
//! message is whole when FSN 0 (B), the fragment with E, and every FSN between
//! them are present. Maps are only ever searched by exact key, so TSN, SSN
//! and MID wrap-around cannot disorder them; FSNs are indices from 0 bounded
//! by the message size, so they are compared plainly.
//!
//! Whole ordered messages wait per stream until their SSN (DATA, 16 bits) or
//! MID (I-DATA, 32 bits) is the next expected one (starting at 0); unordered
//! ones are ready at once.
//!
//! # Invariants and the memory bound
//!
//! - `buffered` is the user data held: fragments in reassembly, whole
//!   messages waiting for order, and messages not yet popped. A chunk is
//!   accepted if it fits the window; the chunk at `cum_tsn + 1` is accepted
//!   even beyond it (it may be what unblocks delivery; without this, partial
//!   messages filling the window would deadlock the association), but never
//!   past [`OVERCOMMIT`] times the window. So `buffered <= OVERCOMMIT *
//!   window` whatever the peer sends.
//! - The chunks held (fragments plus whole messages) are counted the same way
//!   against [`held_chunk_limit`], since each costs bookkeeping beyond its
//!   payload. A payload shares its datagram only when it fills at least 3/4
//!   of it (shorter ones are copied out on decoding, `wire::detach`), so what
//!   is held never pins more than 4/3 of its bytes.
//! - Together: [`memory_bound`] is what one receiver can be made to hold,
//!   in allocated bytes, whatever the peer sends; sctp/tests/memory.rs drives
//!   the worst cases under a counting allocator against it.
//! - A message is never buffered beyond `max_message` bytes in one I-DATA
//!   partial or DATA run: the size is checked as fragments arrive.
//! - The TSN map holds at most `MAX_TSN_AHEAD / 2` ranges (TSNs further
//!   ahead are dropped), the duplicate list at most [`MAX_DUPS`] TSNs, and
//!   there is at most one ordered-stream state per inbound stream.
//!
//! Bounded memory has a price in liveness, which a sender that keeps to the
//! window pays nothing for: whole ordered messages waiting behind a partial
//! one count against the window and cannot be read. An I-DATA sender that
//! starts later messages of a stream while an earlier one is unfinished, or
//! keeps more messages half-sent than twice the window holds, can fill the
//! buffer with what cannot be delivered; the association then stalls (the
//! peer's retransmissions are dropped) instead of growing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};

use crate::chunk::{DataChunk, DataKind, GapBlock, Sack};
use crate::seq::{le32, lt16, lt32};

/// How far above the cumulative ack a TSN may be and still be accepted, in
/// TSNs. A gap block reports offsets from the cumulative ack in 16 bits, so
/// nothing further could be reported; a chunk further ahead is dropped (the
/// sender retransmits it once the window has moved). This also bounds the TSN
/// map, whatever a hostile peer sends.
pub(crate) const MAX_TSN_AHEAD: u32 = u16::MAX as u32;

/// The most gap ack blocks in one SACK (4 bytes each): with [`MAX_DUPS`] the
/// SACK stays under 1,100 bytes, inside the 1,232 bytes SCTP over UDP may
/// always send (IPv6's minimum MTU less its headers). The lowest blocks are
/// reported; the rest wait for a later SACK, and the sender learns of those
/// chunks late (`congestion::Acked::late_bytes`). With 128 a window of a
/// few megabytes at 1 % loss overflowed the report, and on the simulated
/// 80 ms / 1 % / 100 Mbit/s link BBR's goodput fell from 78 to 42 Mbit/s.
pub(crate) const MAX_GAP_BLOCKS: usize = 200;

/// The most duplicate TSNs reported in one SACK (4 bytes each); further
/// duplicates before the next SACK are counted nowhere.
pub(crate) const MAX_DUPS: usize = 64;

/// The hard bound on what may be held, as a multiple of the soft bound: the
/// window in bytes, [`held_chunk_limit`] in chunks. Only the chunk at
/// `cum_tsn + 1` may go past the soft bound.
pub(crate) const OVERCOMMIT: usize = 2;

/// The most chunks held (fragments in reassembly plus whole messages not yet
/// popped), beyond the one at `cum_tsn + 1`, with the largest windows. Each
/// costs bookkeeping beyond its payload, so this bounds memory when the peer
/// sends tiny chunks; 4096 holds a 1 MiB window of 256-byte messages.
pub(crate) const MAX_HELD_CHUNKS: usize = 4096;

/// A window holds one chunk per this many bytes ([`held_chunk_limit`]), so
/// that a small window's bookkeeping is small too.
const BYTES_PER_HELD_CHUNK: usize = 256;

/// The fewest chunks any window may hold.
const MIN_HELD_CHUNKS: usize = 64;

/// The soft bound on chunks held for a window of `window` bytes.
pub(crate) fn held_chunk_limit(window: usize) -> usize {
    (window / BYTES_PER_HELD_CHUNK).clamp(MIN_HELD_CHUNKS, MAX_HELD_CHUNKS)
}

/// Allocated bytes one held chunk may cost beyond its payload: the payload's
/// own allocation rounded up by the allocator, its place in a run or a
/// partial message, and the map entries that index it. sctp/tests/memory.rs
/// measures about 85 for DATA and 515 for the first fragment of an I-DATA
/// message (a partial message with its own fragment map).
const HELD_CHUNK_COST: usize = 640;

/// Allocated bytes per gap range in the TSN map: a `(u32, u32)` in a
/// `VecDeque` whose capacity may be twice its length.
const RANGE_COST: usize = 16;

/// Allocated bytes of ordered-delivery state per inbound stream.
const STREAM_COST: usize = 256;

/// The most one receiver with this window and stream count can be made to
/// hold, in allocated bytes, whatever the peer sends: payload bytes up to
/// [`OVERCOMMIT`] windows, each pinning at most 4/3 of itself; every held
/// chunk's bookkeeping; the TSN map; the duplicate list; per-stream state.
pub(crate) fn memory_bound(window: u32, inbound_streams: u16) -> usize {
    let (num, den) = crate::wire::PIN_RATIO;
    let window = window as usize;
    OVERCOMMIT * window * den / num
        + (OVERCOMMIT * held_chunk_limit(window) + 1) * HELD_CHUNK_COST
        + (MAX_TSN_AHEAD as usize / 2 + 1) * RANGE_COST
        + MAX_DUPS * 4
        + usize::from(inbound_streams) * STREAM_COST
}

/// What a receiver holding `buffered` payload bytes in `held_chunks` chunks
/// is charged: the payload with the most of its datagrams it can pin, and
/// the bookkeeping of its chunks.
fn charge(buffered: usize, held_chunks: usize) -> usize {
    let (num, den) = crate::wire::PIN_RATIO;
    buffered * den / num + held_chunks * HELD_CHUNK_COST
}

/// The receive memory all the associations of one endpoint share
/// (`Limits::receive_memory`), as their receivers charge it ([`charge`]).
///
/// While the pool has room, each receiver keeps to its own bounds. When a
/// chunk would take the pool past its budget, a receiver takes it only if
/// it is the chunk at `cum_tsn + 1` (the one that may unblock delivery) and
/// the receiver stays within its share, the budget divided among the
/// receivers. What is held then is at most twice the budget: what
/// receivers above their share took while there was room (at most the
/// budget), and what the others hold (at most their shares, the budget).
/// A receiver above its share waits, dropping what the peer will send again,
/// until the application reads or other associations end.
#[derive(Debug)]
pub(crate) struct ReceivePool {
    budget: AtomicUsize,
    used: AtomicUsize,
    receivers: AtomicUsize,
}

impl ReceivePool {
    pub(crate) fn new(budget: usize) -> Self {
        ReceivePool {
            budget: AtomicUsize::new(budget),
            used: AtomicUsize::new(0),
            receivers: AtomicUsize::new(0),
        }
    }

    pub(crate) fn set_budget(&self, budget: usize) {
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// Bytes charged by every receiver.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether `add` more bytes keep the pool within its budget.
    fn fits(&self, add: usize) -> bool {
        self.used().saturating_add(add) <= self.budget.load(Ordering::Relaxed)
    }

    /// One receiver's share of the budget.
    fn share(&self) -> usize {
        self.budget.load(Ordering::Relaxed) / self.receivers.load(Ordering::Relaxed).max(1)
    }
}

/// A whole received message, ready for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Received {
    /// Stream identifier.
    pub(crate) stream: u16,
    /// Payload protocol identifier (of the first fragment).
    pub(crate) ppid: u32,
    /// Sent unordered (U flag).
    pub(crate) unordered: bool,
    /// The user data.
    pub(crate) data: Bytes,
}

/// What became of one DATA/I-DATA chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// New data, accepted.
    New,
    /// Its TSN had been received already (reported in the next SACK's
    /// duplicates).
    Duplicate,
    /// No room in the receive window: dropped, not acknowledged (RFC 9260
    /// 6.2: the sender will retransmit).
    Dropped,
    /// The stream id is >= the negotiated inbound streams: the TSN counts as
    /// received (acknowledged) but the data is discarded; the association
    /// sends an ERROR with Invalid Stream Identifier (RFC 9260 6.5).
    InvalidStream,
    /// Empty user data: the association aborts with No User Data (RFC 9260
    /// 6.2).
    NoUserData,
    /// DATA when I-DATA was negotiated, or I-DATA when it was not, or
    /// inconsistent fragments (e.g. an I-DATA fragment with FSN 0 but no B
    /// bit, a message larger than `max_message`): the association aborts
    /// with Protocol Violation. The reason is for the cause's information.
    Violation(&'static str),
}

impl Verdict {}

/// A chain of DATA fragments of one message with consecutive TSNs, from the
/// TSN it is keyed by to `end`.
#[derive(Debug)]
struct Run {
    /// TSN of the last fragment.
    end: u32,
    /// Stream identifier.
    stream: u16,
    /// U flag.
    unordered: bool,
    /// Stream sequence number (meaningless when unordered).
    ssn: u16,
    /// The first fragment has B; its PPID.
    first: Option<u32>,
    /// The last fragment has E.
    ending: bool,
    /// Payload bytes in `frags`.
    bytes: usize,
    /// The payloads, in TSN order.
    frags: VecDeque<Bytes>,
}

impl Run {
    /// `chunk` (with 16-bit `ssn`) belongs to the same message as this run,
    /// as far as the header says.
    fn same_message(&self, chunk: &DataChunk, ssn: u16) -> bool {
        self.stream == chunk.stream
            && self.unordered == chunk.unordered
            // RFC 9260 3.3.1: the SSN has no significance when U is set.
            && (chunk.unordered || self.ssn == ssn)
    }

    /// `left` followed by `right` (which starts at `left.end + 1`). The
    /// smaller list moves into the larger, so building a message costs
    /// O(n log n) moves in any arrival order.
    fn join(mut left: Run, mut right: Run) -> Run {
        let frags = if left.frags.len() >= right.frags.len() {
            left.frags.append(&mut right.frags);
            left.frags
        } else {
            while let Some(frag) = left.frags.pop_back() {
                right.frags.push_front(frag);
            }
            right.frags
        };
        Run {
            end: right.end,
            ending: right.ending,
            bytes: left.bytes + right.bytes,
            frags,
            ..left
        }
    }
}

/// The fragments of one I-DATA message received so far.
#[derive(Debug, Default)]
struct Partial {
    /// The PPID, once the first fragment (FSN 0, B) arrived.
    ppid: Option<u32>,
    /// The FSN of the fragment with E, once it arrived.
    last_fsn: Option<u32>,
    /// Payload bytes in `frags`.
    bytes: usize,
    /// Payloads by FSN.
    frags: BTreeMap<u32, Bytes>,
}

/// An I-DATA message's identity (RFC 8260 2.1): stream, U flag, MID.
type MessageKey = (u16, bool, u32);

/// Ordered delivery state of one inbound stream.
#[derive(Debug, Default)]
struct OrderedStream {
    /// The SSN (DATA, kept below 2^16) or MID (I-DATA) to deliver next.
    next: u32,
    /// Whole messages waiting for earlier ones, by SSN or MID.
    waiting: BTreeMap<u32, Received>,
}

/// Where a checked DATA fragment goes: the runs it joins.
#[derive(Debug, Clone, Copy)]
struct DataPlan {
    /// The 16-bit SSN.
    ssn: u16,
    /// First TSN of the run ending just before this fragment that it extends.
    left: Option<u32>,
    /// It extends the run starting just after it.
    right: bool,
}

/// The receiving half of an association's data transfer.
#[derive(Debug)]
pub(crate) struct Receiver {
    /// I-DATA was negotiated (DATA is then a protocol violation, and the other
    /// way round).
    idata: bool,
    /// The receive buffer, bytes.
    window: usize,
    /// The largest message accepted, bytes.
    max_message: usize,
    /// Stream ids below this are valid.
    inbound_streams: u16,
    /// Every TSN up to this one arrived.
    cum_tsn: u32,
    /// TSNs above `cum_tsn` that arrived: sorted, disjoint, non-adjacent
    /// inclusive ranges, all within `MAX_TSN_AHEAD` of `cum_tsn`.
    received: VecDeque<(u32, u32)>,
    /// Duplicate TSNs since the last SACK, at most `MAX_DUPS`.
    dups: Vec<u32>,
    /// Payload bytes held (reassembly, waiting for order, ready).
    buffered: usize,
    /// Chunks held: fragments in reassembly plus whole messages.
    held_chunks: usize,
    /// The soft bound on `held_chunks` for this window.
    max_held: usize,
    /// The first SSN or MID of every stream: 0, but for tests
    /// (`Config::initial_mid`).
    first_mid: u32,
    /// The endpoint's pool, and what this receiver has charged to it.
    pool: Arc<ReceivePool>,
    charged: usize,
    /// DATA runs by first TSN.
    runs: BTreeMap<u32, Run>,
    /// First TSN of each DATA run, by its last TSN.
    run_ends: BTreeMap<u32, u32>,
    /// I-DATA messages being reassembled.
    partials: BTreeMap<MessageKey, Partial>,
    /// Ordered delivery state per stream that has seen ordered data.
    ordered: BTreeMap<u16, OrderedStream>,
    /// Whole messages for the application, in delivery order.
    ready: VecDeque<Received>,
}

impl Receiver {
    /// `peer_initial_tsn` from the peer's INIT/INIT ACK; `window`: the receive
    /// buffer, bytes; `max_message`: the largest message we accept, bytes (<
    /// window); `idata`: I-DATA was negotiated; `pool`: the endpoint's.
    pub(crate) fn new(
        peer_initial_tsn: u32,
        window: u32,
        max_message: usize,
        inbound_streams: u16,
        idata: bool,
        pool: Arc<ReceivePool>,
    ) -> Self {
        pool.receivers.fetch_add(1, Ordering::Relaxed);
        Receiver {
            idata,
            window: window as usize,
            max_message,
            inbound_streams,
            cum_tsn: peer_initial_tsn.wrapping_sub(1),
            received: VecDeque::new(),
            dups: Vec::new(),
            buffered: 0,
            held_chunks: 0,
            max_held: held_chunk_limit(window as usize),
            first_mid: 0,
            pool,
            charged: 0,
            runs: BTreeMap::new(),
            run_ends: BTreeMap::new(),
            partials: BTreeMap::new(),
            ordered: BTreeMap::new(),
            ready: VecDeque::new(),
        }
    }

    /// Takes one DATA or I-DATA chunk (RFC 9260 6.2, RFC 8260 2.2). Nothing
    /// changes unless the verdict is `New`, `Duplicate` (recorded for the
    /// SACK) or `InvalidStream` (the TSN is acknowledged).
    pub(crate) fn on_data(&mut self, chunk: DataChunk) -> Verdict {
        let idata = chunk.kind == DataKind::IData;
        if idata != self.idata {
            return Verdict::Violation(if idata {
                "I-DATA on an association without I-DATA"
            } else {
                "DATA on an association that negotiated I-DATA"
            });
        }
        if chunk.payload.is_empty() {
            return Verdict::NoUserData;
        }
        let tsn = chunk.tsn;
        if le32(tsn, self.cum_tsn) || self.holds(tsn) {
            if self.dups.len() < MAX_DUPS {
                self.dups.push(tsn);
            }
            return Verdict::Duplicate;
        }
        if tsn.wrapping_sub(self.cum_tsn) > MAX_TSN_AHEAD {
            return Verdict::Dropped;
        }
        if chunk.stream >= self.inbound_streams {
            // RFC 9260 6.5: acknowledge the TSN, discard the data.
            self.mark_received(tsn);
            return Verdict::InvalidStream;
        }
        // Every check before any change, so a violation leaves no trace.
        let plan = if idata {
            self.check_idata(&chunk).map(|()| None)
        } else {
            self.check_data(&chunk).map(Some)
        };
        let plan = match plan {
            Ok(plan) => plan,
            Err(reason) => return Verdict::Violation(reason),
        };
        if !self.has_room(tsn, chunk.payload.len()) {
            return Verdict::Dropped;
        }
        self.mark_received(tsn);
        self.buffered += chunk.payload.len();
        self.held_chunks += 1;
        match plan {
            Some(plan) => self.add_data(chunk, plan),
            None => self.add_idata(chunk),
        }
        self.settle();
        Verdict::New
    }

    /// Tests only (`Config::initial_mid`): the first MID of every stream,
    /// for I-DATA.
    pub(crate) fn set_first_mid(&mut self, mid: u32) {
        if self.idata {
            self.first_mid = mid;
        }
    }

    /// Brings the pool up to date with what is held now.
    fn settle(&mut self) {
        let now = charge(self.buffered, self.held_chunks);
        if now >= self.charged {
            self.pool
                .used
                .fetch_add(now - self.charged, Ordering::Relaxed);
        } else {
            self.pool
                .used
                .fetch_sub(self.charged - now, Ordering::Relaxed);
        }
        self.charged = now;
    }

    /// Every TSN up to this one has arrived.
    pub(crate) fn cum_tsn(&self) -> u32 {
        self.cum_tsn
    }

    /// TSNs above cum_tsn have arrived (the SACK has gap blocks).
    pub(crate) fn has_gaps(&self) -> bool {
        !self.received.is_empty()
    }

    /// The SACK to send now: the cumulative ack, the window, the lowest
    /// [`MAX_GAP_BLOCKS`] gap blocks and the duplicates since the last SACK
    /// (drained).
    pub(crate) fn build_sack(&mut self) -> Sack {
        let cum = self.cum_tsn;
        let gaps = self
            .received
            .iter()
            .take(MAX_GAP_BLOCKS)
            // Offsets fit 16 bits by MAX_TSN_AHEAD; should that ever break,
            // report the blocks below it rather than wrong offsets.
            .map_while(|&(start, end)| {
                Some(GapBlock {
                    start: u16::try_from(start.wrapping_sub(cum)).ok()?,
                    end: u16::try_from(end.wrapping_sub(cum)).ok()?,
                })
            })
            .collect();
        Sack {
            cum_tsn_ack: cum,
            a_rwnd: self.a_rwnd(),
            gaps,
            dups: std::mem::take(&mut self.dups),
        }
    }

    /// The window we would advertise now, bytes: window minus what is
    /// buffered (reassembly + undelivered).
    pub(crate) fn a_rwnd(&self) -> u32 {
        u32::try_from(self.window.saturating_sub(self.buffered)).unwrap_or(u32::MAX)
    }

    /// The next whole message for the application, if any; frees its bytes
    /// from the window.
    pub(crate) fn pop(&mut self) -> Option<Received> {
        let message = self.ready.pop_front()?;
        self.buffered -= message.data.len();
        self.held_chunks -= 1;
        self.settle();
        Some(message)
    }

    /// Messages waiting for the application.
    pub(crate) fn readable(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Payload bytes held: reassembly, messages waiting for order, messages
    /// not yet popped.
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.buffered
    }

    /// `tsn` (above `cum_tsn`) is in the TSN map.
    fn holds(&self, tsn: u32) -> bool {
        let i = self.received.partition_point(|&(_, end)| lt32(end, tsn));
        self.received
            .get(i)
            .is_some_and(|&(start, _)| le32(start, tsn))
    }

    /// Adds `tsn` (above `cum_tsn`, not held, within `MAX_TSN_AHEAD`) to the
    /// TSN map and advances the cumulative ack over what is now contiguous.
    fn mark_received(&mut self, tsn: u32) {
        let i = self.received.partition_point(|&(_, end)| lt32(end, tsn));
        let joins_left = i > 0 && self.received[i - 1].1.wrapping_add(1) == tsn;
        let joins_right = self
            .received
            .get(i)
            .is_some_and(|&(start, _)| start == tsn.wrapping_add(1));
        match (joins_left, joins_right) {
            (true, true) => {
                self.received[i - 1].1 = self.received[i].1;
                self.received.remove(i);
            }
            (true, false) => self.received[i - 1].1 = tsn,
            (false, true) => self.received[i].0 = tsn,
            (false, false) => self.received.insert(i, (tsn, tsn)),
        }
        // Ranges are non-adjacent, so at most the first one folds in.
        if let Some(&(start, end)) = self.received.front()
            && start == self.cum_tsn.wrapping_add(1)
        {
            self.cum_tsn = end;
            self.received.pop_front();
        }
    }

    /// A new chunk of `len` bytes at `tsn` fits what we may hold.
    fn has_room(&self, tsn: u32, len: usize) -> bool {
        let bytes = self.buffered + len;
        let chunks = self.held_chunks + 1;
        let next = tsn == self.cum_tsn.wrapping_add(1);
        let own = (bytes <= self.window && chunks <= self.max_held)
            || (next && bytes <= OVERCOMMIT * self.window && chunks <= OVERCOMMIT * self.max_held);
        if !own {
            return false;
        }
        let after = charge(bytes, chunks);
        self.pool.fits(after - self.charged) || (next && after <= self.pool.share())
    }

    /// The SSN or MID to deliver next on `stream`.
    fn next_ordered(&self, stream: u16) -> u32 {
        self.ordered.get(&stream).map_or(self.first_mid, |s| s.next)
    }

    /// An ordered message `seq` on `stream` was delivered or is whole and
    /// waiting already, so no new fragment may belong to it.
    fn ordered_done(&self, stream: u16, seq: u32) -> bool {
        let next = self.next_ordered(stream);
        let behind = if self.idata {
            lt32(seq, next)
        } else {
            lt16(low16(seq), low16(next))
        };
        behind
            || self
                .ordered
                .get(&stream)
                .is_some_and(|s| s.waiting.contains_key(&seq))
    }

    /// Checks a DATA fragment against what is held (RFC 9260 6.9): which runs
    /// it extends, and that its neighbours agree with it.
    fn check_data(&self, chunk: &DataChunk) -> Result<DataPlan, &'static str> {
        let ssn = u16::try_from(chunk.mid).map_err(|_| "DATA with an SSN above 16 bits")?;
        if !chunk.unordered && self.ordered_done(chunk.stream, u32::from(ssn)) {
            return Err("DATA for an ordered message already received");
        }
        let tsn = chunk.tsn;
        let mut total = chunk.payload.len();
        let mut left = None;
        if let Some(&start) = self.run_ends.get(&tsn.wrapping_sub(1))
            && let Some(run) = self.runs.get(&start)
        {
            if run.ending {
                if !chunk.beginning {
                    return Err("DATA fragment without B after a message's last fragment");
                }
            } else if chunk.beginning || !run.same_message(chunk, ssn) {
                return Err("DATA fragment does not continue the message before it");
            } else {
                total += run.bytes;
                left = Some(start);
            }
        }
        let mut right = false;
        if let Some(run) = self.runs.get(&tsn.wrapping_add(1)) {
            if chunk.ending {
                if run.first.is_none() {
                    return Err("DATA fragment without B after a message's last fragment");
                }
            } else if run.first.is_some() || !run.same_message(chunk, ssn) {
                return Err("DATA fragment does not continue the message before it");
            } else {
                total += run.bytes;
                right = true;
            }
        }
        if total > self.max_message {
            return Err("message larger than the maximum");
        }
        Ok(DataPlan { ssn, left, right })
    }

    /// Checks an I-DATA fragment against its message's fragments so far (RFC
    /// 8260 2.1, 2.2).
    fn check_idata(&self, chunk: &DataChunk) -> Result<(), &'static str> {
        if chunk.beginning != (chunk.fsn == 0) {
            return Err(if chunk.beginning {
                "I-DATA first fragment with a nonzero FSN"
            } else {
                "I-DATA fragment with FSN 0 but no B bit"
            });
        }
        if !chunk.unordered && self.ordered_done(chunk.stream, chunk.mid) {
            return Err("I-DATA for an ordered message already received");
        }
        let len = chunk.payload.len();
        let Some(partial) = self
            .partials
            .get(&(chunk.stream, chunk.unordered, chunk.mid))
        else {
            return if len > self.max_message {
                Err("message larger than the maximum")
            } else {
                Ok(())
            };
        };
        if partial.frags.contains_key(&chunk.fsn) {
            return Err("I-DATA fragment repeated under a new TSN");
        }
        let beyond_end = if chunk.ending {
            partial.last_fsn.is_some()
                || partial
                    .frags
                    .last_key_value()
                    .is_some_and(|(&fsn, _)| fsn > chunk.fsn)
        } else {
            partial.last_fsn.is_some_and(|last| chunk.fsn > last)
        };
        if beyond_end {
            return Err("I-DATA fragment beyond its message's last fragment");
        }
        if partial.bytes + len > self.max_message {
            return Err("message larger than the maximum");
        }
        Ok(())
    }

    /// Adds a checked DATA fragment (already counted as held): joins it to
    /// its neighbouring runs and delivers the message if that makes it whole.
    fn add_data(&mut self, chunk: DataChunk, plan: DataPlan) {
        let tsn = chunk.tsn;
        if chunk.beginning && chunk.ending {
            // Unfragmented: the payload goes through without a copy.
            self.deliver(
                Received {
                    stream: chunk.stream,
                    ppid: chunk.ppid,
                    unordered: chunk.unordered,
                    data: chunk.payload,
                },
                u32::from(plan.ssn),
            );
            return;
        }
        let mut start = tsn;
        let mut run = Run {
            end: tsn,
            stream: chunk.stream,
            unordered: chunk.unordered,
            ssn: plan.ssn,
            first: chunk.beginning.then_some(chunk.ppid),
            ending: chunk.ending,
            bytes: chunk.payload.len(),
            frags: VecDeque::from([chunk.payload]),
        };
        if let Some(left_start) = plan.left
            && let Some(left) = self.runs.remove(&left_start)
        {
            self.run_ends.remove(&left.end);
            start = left_start;
            run = Run::join(left, run);
        }
        if plan.right
            && let Some(right) = self.runs.remove(&tsn.wrapping_add(1))
        {
            self.run_ends.remove(&right.end);
            run = Run::join(run, right);
        }
        match run.first {
            Some(ppid) if run.ending => {
                let data = self.assemble(run.bytes, run.frags);
                self.deliver(
                    Received {
                        stream: run.stream,
                        ppid,
                        unordered: run.unordered,
                        data,
                    },
                    u32::from(run.ssn),
                );
            }
            _ => {
                self.run_ends.insert(run.end, start);
                self.runs.insert(start, run);
            }
        }
    }

    /// Adds a checked I-DATA fragment (already counted as held) and delivers
    /// its message if that makes it whole.
    fn add_idata(&mut self, chunk: DataChunk) {
        let key = (chunk.stream, chunk.unordered, chunk.mid);
        if chunk.beginning && chunk.ending {
            // Unfragmented (the checks ruled out a partial under this key):
            // the payload goes through without a copy.
            self.deliver(
                Received {
                    stream: chunk.stream,
                    ppid: chunk.ppid,
                    unordered: chunk.unordered,
                    data: chunk.payload,
                },
                chunk.mid,
            );
            return;
        }
        let partial = self.partials.entry(key).or_default();
        partial.bytes += chunk.payload.len();
        partial.frags.insert(chunk.fsn, chunk.payload);
        if chunk.beginning {
            partial.ppid = Some(chunk.ppid);
        }
        if chunk.ending {
            partial.last_fsn = Some(chunk.fsn);
        }
        // FSNs are distinct and none is above the last, so FSN 0 (the PPID),
        // the last and a count of last + 1 mean every fragment is here.
        if let (Some(ppid), Some(last)) = (partial.ppid, partial.last_fsn)
            && u64::try_from(partial.frags.len()).ok() == Some(u64::from(last) + 1)
            && let Some(partial) = self.partials.remove(&key)
        {
            let data = self.assemble(partial.bytes, partial.frags.into_values());
            self.deliver(
                Received {
                    stream: chunk.stream,
                    ppid,
                    unordered: chunk.unordered,
                    data,
                },
                chunk.mid,
            );
        }
    }

    /// Copies a message's fragments (`bytes` in all, in order) into one
    /// buffer; they then count as one held chunk.
    fn assemble(&mut self, bytes: usize, frags: impl IntoIterator<Item = Bytes>) -> Bytes {
        let mut data = BytesMut::with_capacity(bytes);
        for frag in frags {
            self.held_chunks -= 1;
            data.extend_from_slice(&frag);
        }
        self.held_chunks += 1;
        data.freeze()
    }

    /// Hands a whole message on: unordered ones at once (RFC 9260 6.6),
    /// ordered ones when `seq` (SSN or MID) is the stream's next, after which
    /// the messages waiting behind it follow.
    fn deliver(&mut self, message: Received, seq: u32) {
        if message.unordered {
            self.ready.push_back(message);
            return;
        }
        let idata = self.idata;
        let first = self.first_mid;
        let stream = self
            .ordered
            .entry(message.stream)
            .or_insert_with(|| OrderedStream {
                next: first,
                waiting: BTreeMap::new(),
            });
        if seq != stream.next {
            stream.waiting.insert(seq, message);
            return;
        }
        self.ready.push_back(message);
        stream.next = next_seq(stream.next, idata);
        while let Some(message) = stream.waiting.remove(&stream.next) {
            self.ready.push_back(message);
            stream.next = next_seq(stream.next, idata);
        }
    }
}

/// The low 16 bits: a DATA SSN kept in a `u32`.
impl Drop for Receiver {
    fn drop(&mut self) {
        self.pool.used.fetch_sub(self.charged, Ordering::Relaxed);
        self.pool.receivers.fetch_sub(1, Ordering::Relaxed);
    }
}

fn low16(seq: u32) -> u16 {
    (seq & 0xffff) as u16
}

/// The SSN (16 bits, DATA) or MID (32 bits, I-DATA) after `seq`.
fn next_seq(seq: u32, idata: bool) -> u32 {
    if idata {
        seq.wrapping_add(1)
    } else {
        u32::from(low16(seq).wrapping_add(1))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    const WINDOW: u32 = 1 << 16;
    const MAX_MESSAGE: usize = 1 << 12;

    /// A chunk: `flags` holds 'B', 'E', 'U' for those bits.
    fn chunk(
        kind: DataKind,
        tsn: u32,
        stream: u16,
        seq: u32,
        fsn: u32,
        flags: &str,
        payload: &[u8],
    ) -> DataChunk {
        DataChunk {
            kind,
            unordered: flags.contains('U'),
            beginning: flags.contains('B'),
            ending: flags.contains('E'),
            immediate: false,
            tsn,
            stream,
            mid: seq,
            fsn,
            ppid: if flags.contains('B') || kind == DataKind::Data {
                7
            } else {
                0
            },
            payload: Bytes::copy_from_slice(payload),
        }
    }

    fn data(tsn: u32, stream: u16, ssn: u16, flags: &str, payload: &[u8]) -> DataChunk {
        chunk(
            DataKind::Data,
            tsn,
            stream,
            u32::from(ssn),
            0,
            flags,
            payload,
        )
    }

    fn idata(tsn: u32, stream: u16, mid: u32, fsn: u32, flags: &str, payload: &[u8]) -> DataChunk {
        chunk(DataKind::IData, tsn, stream, mid, fsn, flags, payload)
    }

    fn receiver(initial_tsn: u32) -> Receiver {
        Receiver::new(
            initial_tsn,
            WINDOW,
            MAX_MESSAGE,
            4,
            false,
            Arc::new(ReceivePool::new(usize::MAX)),
        )
    }

    fn idata_receiver(initial_tsn: u32) -> Receiver {
        Receiver::new(
            initial_tsn,
            WINDOW,
            MAX_MESSAGE,
            4,
            true,
            Arc::new(ReceivePool::new(usize::MAX)),
        )
    }

    fn gaps(blocks: &[(u16, u16)]) -> Vec<GapBlock> {
        blocks
            .iter()
            .map(|&(start, end)| GapBlock { start, end })
            .collect()
    }

    fn drain(r: &mut Receiver) -> Vec<(u16, Vec<u8>)> {
        std::iter::from_fn(|| r.pop())
            .map(|m| (m.stream, m.data.to_vec()))
            .collect()
    }

    #[test]
    fn starts_just_below_the_initial_tsn() {
        let mut r = receiver(0);
        assert_eq!(r.cum_tsn(), u32::MAX);
        assert!(!r.has_gaps() && !r.readable());
        assert_eq!(
            r.build_sack(),
            Sack {
                cum_tsn_ack: u32::MAX,
                a_rwnd: WINDOW,
                gaps: vec![],
                dups: vec![]
            }
        );
    }

    #[test]
    fn an_unfragmented_message_is_delivered_without_a_copy() {
        let mut r = receiver(100);
        let c = data(100, 2, 0, "BE", b"hello");
        let ptr = c.payload.as_ptr();
        assert_eq!(r.on_data(c), Verdict::New);
        assert_eq!(r.cum_tsn(), 100);
        assert_eq!(r.a_rwnd(), WINDOW - 5);
        assert!(r.readable());
        let m = r.pop().expect("a message");
        assert_eq!(
            m,
            Received {
                stream: 2,
                ppid: 7,
                unordered: false,
                data: Bytes::from_static(b"hello")
            }
        );
        assert_eq!(m.data.as_ptr(), ptr);
        assert_eq!(r.a_rwnd(), WINDOW);
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn gaps_are_offsets_from_the_cumulative_ack() {
        let mut r = receiver(10);
        for tsn in [10, 12, 13, 15] {
            assert_eq!(r.on_data(data(tsn, 0, 0, "BEU", b"x")), Verdict::New);
        }
        assert!(r.has_gaps());
        let sack = r.build_sack();
        assert_eq!(sack.cum_tsn_ack, 10);
        assert_eq!(sack.gaps, gaps(&[(2, 3), (5, 5)]));
        assert_eq!(r.on_data(data(11, 0, 0, "BEU", b"x")), Verdict::New);
        assert_eq!(r.cum_tsn(), 13);
        assert_eq!(r.build_sack().gaps, gaps(&[(2, 2)]));
        assert_eq!(r.on_data(data(14, 0, 0, "BEU", b"x")), Verdict::New);
        assert_eq!(r.cum_tsn(), 15);
        assert!(!r.has_gaps());
    }

    #[test]
    fn tsns_wrap() {
        let mut r = receiver(u32::MAX - 1);
        for tsn in [1, u32::MAX, u32::MAX - 1, 0] {
            assert_eq!(r.on_data(data(tsn, 0, 0, "BEU", b"x")), Verdict::New);
        }
        assert_eq!(r.cum_tsn(), 1);
        assert!(!r.has_gaps());
        assert_eq!(
            r.on_data(data(u32::MAX, 0, 0, "BEU", b"x")),
            Verdict::Duplicate
        );
    }

    #[test]
    fn duplicates_are_reported_once_then_drained() {
        let mut r = receiver(1);
        assert_eq!(r.on_data(data(1, 0, 0, "BEU", b"a")), Verdict::New);
        assert_eq!(r.on_data(data(3, 0, 0, "BEU", b"b")), Verdict::New);
        assert_eq!(r.on_data(data(1, 0, 0, "BEU", b"a")), Verdict::Duplicate);
        assert_eq!(r.on_data(data(3, 0, 0, "BEU", b"b")), Verdict::Duplicate);
        // Far behind (serially) is a duplicate too.
        assert_eq!(
            r.on_data(data(1u32.wrapping_sub(1 << 30), 0, 0, "BEU", b"c")),
            Verdict::Duplicate
        );
        let sack = r.build_sack();
        assert_eq!(sack.dups, vec![1, 3, 1u32.wrapping_sub(1 << 30)]);
        assert_eq!(sack.gaps, gaps(&[(2, 2)]));
        assert_eq!(r.build_sack().dups, Vec::<u32>::new());
        // Duplicates hold nothing: two messages, two bytes.
        assert_eq!(r.a_rwnd(), WINDOW - 2);
    }

    #[test]
    fn duplicates_and_gap_blocks_are_bounded() {
        let mut r = receiver(0);
        for i in 0..=MAX_GAP_BLOCKS as u32 {
            assert_eq!(r.on_data(data(2 * i + 1, 0, 0, "BEU", b"x")), Verdict::New);
        }
        for _ in 0..MAX_DUPS + 5 {
            assert_eq!(r.on_data(data(1, 0, 0, "BEU", b"x")), Verdict::Duplicate);
        }
        let sack = r.build_sack();
        assert_eq!(sack.dups, vec![1; MAX_DUPS]);
        assert_eq!(sack.gaps.len(), MAX_GAP_BLOCKS);
        assert_eq!(sack.gaps[0], GapBlock { start: 2, end: 2 });
        assert_eq!(
            sack.gaps[MAX_GAP_BLOCKS - 1],
            GapBlock {
                start: 2 * MAX_GAP_BLOCKS as u16,
                end: 2 * MAX_GAP_BLOCKS as u16
            }
        );
    }

    #[test]
    fn a_tsn_beyond_what_a_gap_block_can_report_is_dropped() {
        let mut r = receiver(5);
        let last = 4 + MAX_TSN_AHEAD;
        assert_eq!(
            r.on_data(data(last + 1, 0, 0, "BEU", b"x")),
            Verdict::Dropped
        );
        assert_eq!(r.on_data(data(last, 0, 0, "BEU", b"x")), Verdict::New);
        assert_eq!(r.build_sack().gaps, gaps(&[(u16::MAX, u16::MAX)]));
        assert_eq!(r.cum_tsn(), 4);
    }

    #[test]
    fn an_invalid_stream_is_acknowledged_and_discarded() {
        let mut r = receiver(1);
        assert_eq!(r.on_data(data(1, 4, 0, "BE", b"x")), Verdict::InvalidStream);
        assert_eq!(r.cum_tsn(), 1);
        assert!(!r.readable());
        assert_eq!(r.a_rwnd(), WINDOW);
        assert_eq!(r.on_data(data(1, 4, 0, "BE", b"x")), Verdict::Duplicate);
    }

    #[test]
    fn empty_data_and_the_wrong_kind_change_nothing() {
        let mut r = receiver(1);
        assert_eq!(r.on_data(data(1, 0, 0, "BE", b"")), Verdict::NoUserData);
        assert!(matches!(
            r.on_data(idata(1, 0, 0, 0, "BE", b"x")),
            Verdict::Violation(_)
        ));
        let mut ri = idata_receiver(1);
        assert!(matches!(
            ri.on_data(data(1, 0, 0, "BE", b"x")),
            Verdict::Violation(_)
        ));
        assert_eq!(
            ri.on_data(idata(1, 0, 0, 0, "BE", b"")),
            Verdict::NoUserData
        );
        for r in [&r, &ri] {
            assert_eq!(r.cum_tsn(), 0);
            assert!(!r.has_gaps());
        }
    }

    #[test]
    fn data_fragments_reassemble_in_any_order() {
        let mut r = receiver(1);
        assert_eq!(r.on_data(data(4, 1, 0, "E", b"ghi")), Verdict::New);
        assert_eq!(r.on_data(data(2, 1, 0, "B", b"abc")), Verdict::New);
        assert!(!r.readable());
        assert_eq!(r.a_rwnd(), WINDOW - 6);
        assert_eq!(r.on_data(data(3, 1, 0, "", b"def")), Verdict::New);
        // TSN 1 is missing, but the message is whole.
        assert_eq!(r.cum_tsn(), 0);
        assert_eq!(drain(&mut r), vec![(1, b"abcdefghi".to_vec())]);
        assert_eq!(r.a_rwnd(), WINDOW);
    }

    #[test]
    fn ordered_messages_wait_for_earlier_ones_and_unordered_do_not() {
        let mut r = receiver(1);
        assert_eq!(r.on_data(data(2, 0, 1, "BE", b"second")), Verdict::New);
        assert_eq!(
            r.on_data(data(3, 1, 0, "BE", b"other stream")),
            Verdict::New
        );
        assert_eq!(r.on_data(data(4, 0, 9, "BEU", b"unordered")), Verdict::New);
        assert_eq!(
            drain(&mut r),
            vec![(1, b"other stream".to_vec()), (0, b"unordered".to_vec())]
        );
        assert_eq!(r.a_rwnd(), WINDOW - 6);
        assert_eq!(r.on_data(data(1, 0, 0, "BE", b"first")), Verdict::New);
        assert_eq!(
            drain(&mut r),
            vec![(0, b"first".to_vec()), (0, b"second".to_vec())]
        );
    }

    #[test]
    fn ssns_wrap_and_a_delivered_ssn_is_a_violation() {
        let mut r = receiver(0);
        for tsn in 0..=u32::from(u16::MAX) + 2 {
            let ssn = (tsn & 0xffff) as u16;
            assert_eq!(r.on_data(data(tsn, 3, ssn, "BE", b"x")), Verdict::New);
            assert_eq!(r.pop().map(|m| m.stream), Some(3));
        }
        // SSN 1 again (next is 2) under a new TSN.
        let tsn = u32::from(u16::MAX) + 3;
        assert_eq!(
            r.on_data(data(tsn, 3, 1, "BE", b"x")),
            Verdict::Violation("DATA for an ordered message already received")
        );
        assert_eq!(r.cum_tsn(), tsn - 1);
        assert_eq!(r.on_data(data(tsn, 3, 2, "BE", b"x")), Verdict::New);
    }

    #[test]
    fn a_complete_ordered_message_cannot_get_more_fragments() {
        let mut r = receiver(0);
        assert_eq!(r.on_data(data(5, 0, 1, "BE", b"x")), Verdict::New);
        assert_eq!(
            r.on_data(data(7, 0, 1, "B", b"x")),
            Verdict::Violation("DATA for an ordered message already received")
        );
    }

    #[test]
    fn inconsistent_data_fragments_are_violations() {
        let mut r = receiver(0);
        assert_eq!(r.on_data(data(10, 0, 5, "B", b"ab")), Verdict::New);
        let broken = Verdict::Violation("DATA fragment does not continue the message before it");
        // TSN 11 must continue the message of TSN 10: same stream, SSN, U.
        assert_eq!(r.on_data(data(11, 1, 5, "E", b"c")), broken);
        assert_eq!(r.on_data(data(11, 0, 6, "E", b"c")), broken);
        assert_eq!(r.on_data(data(11, 0, 5, "EU", b"c")), broken);
        assert_eq!(r.on_data(data(11, 0, 5, "BE", b"c")), broken);
        // The same from the other side: TSN 9 is followed by a first fragment.
        assert_eq!(r.on_data(data(9, 0, 4, "B", b"c")), broken);
        assert_eq!(r.on_data(data(20, 0, 7, "E", b"ab")), Verdict::New);
        assert_eq!(
            r.on_data(data(21, 0, 8, "E", b"c")),
            Verdict::Violation("DATA fragment without B after a message's last fragment")
        );
        assert_eq!(
            r.on_data(data(19, 0, 6, "E", b"c")),
            Verdict::Violation("DATA fragment without B after a message's last fragment")
        );
        assert!(!r.holds(11) && !r.holds(9) && !r.holds(21) && !r.holds(19));
        // SSNs travel in 16 bits.
        let mut c = data(30, 0, 0, "BE", b"x");
        c.mid = 1 << 16;
        assert_eq!(
            r.on_data(c),
            Verdict::Violation("DATA with an SSN above 16 bits")
        );
        assert_eq!(r.on_data(data(11, 0, 5, "E", b"c")), Verdict::New);
        assert_eq!(r.on_data(data(19, 0, 7, "B", b"c")), Verdict::New);
        assert!(!r.readable());
    }

    #[test]
    fn a_data_message_above_the_maximum_is_a_violation() {
        let mut r = Receiver::new(0, 100, 10, 1, false, Arc::new(ReceivePool::new(usize::MAX)));
        assert_eq!(r.on_data(data(0, 0, 0, "B", b"123456")), Verdict::New);
        assert_eq!(r.on_data(data(2, 0, 0, "E", b"1")), Verdict::New);
        let too_big = Verdict::Violation("message larger than the maximum");
        assert_eq!(r.on_data(data(1, 0, 0, "", b"1234")), too_big);
        assert_eq!(r.on_data(data(5, 0, 1, "BE", b"12345678901")), too_big);
        assert_eq!(r.cum_tsn(), 0);
        assert_eq!(r.on_data(data(1, 0, 0, "", b"123")), Verdict::New);
        assert_eq!(drain(&mut r), vec![(0, b"1234561231".to_vec())]);
    }

    #[test]
    fn idata_messages_interleave() {
        let mut r = idata_receiver(1);
        assert_eq!(r.on_data(idata(1, 0, 0, 0, "B", b"a0")), Verdict::New);
        assert_eq!(r.on_data(idata(2, 1, 0, 0, "B", b"b0")), Verdict::New);
        assert_eq!(r.on_data(idata(5, 0, 0, 2, "E", b"a2")), Verdict::New);
        assert_eq!(r.on_data(idata(4, 1, 0, 1, "E", b"b1")), Verdict::New);
        assert_eq!(drain(&mut r), vec![(1, b"b0b1".to_vec())]);
        assert_eq!(r.on_data(idata(3, 0, 0, 1, "", b"a1")), Verdict::New);
        let m = r.pop().expect("a message");
        assert_eq!((m.stream, m.ppid, &m.data[..]), (0, 7, &b"a0a1a2"[..]));
        assert_eq!(r.cum_tsn(), 5);
        assert_eq!(r.a_rwnd(), WINDOW);
    }

    #[test]
    fn idata_ordered_and_unordered_mids_are_separate_sequences() {
        let mut r = idata_receiver(1);
        assert_eq!(r.on_data(idata(1, 0, 1, 0, "BE", b"o1")), Verdict::New);
        assert_eq!(r.on_data(idata(2, 0, 1, 0, "BEU", b"u1")), Verdict::New);
        assert_eq!(r.on_data(idata(3, 0, 0, 0, "BU", b"u0")), Verdict::New);
        assert_eq!(r.on_data(idata(4, 0, 0, 1, "EU", b"u0")), Verdict::New);
        assert_eq!(
            drain(&mut r),
            vec![(0, b"u1".to_vec()), (0, b"u0u0".to_vec())]
        );
        assert_eq!(r.on_data(idata(5, 0, 0, 0, "BE", b"o0")), Verdict::New);
        assert_eq!(
            drain(&mut r),
            vec![(0, b"o0".to_vec()), (0, b"o1".to_vec())]
        );
        assert_eq!(
            r.on_data(idata(6, 0, 1, 0, "BE", b"o1")),
            Verdict::Violation("I-DATA for an ordered message already received")
        );
    }

    #[test]
    fn inconsistent_idata_fragments_are_violations() {
        let mut r = Receiver::new(1, 1000, 10, 2, true, Arc::new(ReceivePool::new(usize::MAX)));
        assert_eq!(
            r.on_data(idata(1, 0, 0, 0, "", b"x")),
            Verdict::Violation("I-DATA fragment with FSN 0 but no B bit")
        );
        assert_eq!(
            r.on_data(idata(1, 0, 0, 3, "B", b"x")),
            Verdict::Violation("I-DATA first fragment with a nonzero FSN")
        );
        assert_eq!(r.on_data(idata(1, 0, 0, 0, "B", b"12345")), Verdict::New);
        assert_eq!(r.on_data(idata(2, 0, 0, 2, "", b"1")), Verdict::New);
        assert_eq!(
            r.on_data(idata(3, 0, 0, 2, "", b"1")),
            Verdict::Violation("I-DATA fragment repeated under a new TSN")
        );
        let beyond = Verdict::Violation("I-DATA fragment beyond its message's last fragment");
        assert_eq!(r.on_data(idata(3, 0, 0, 1, "E", b"1")), beyond);
        assert_eq!(
            r.on_data(idata(3, 0, 0, 0, "BE", b"1")),
            Verdict::Violation("I-DATA fragment repeated under a new TSN")
        );
        assert_eq!(r.on_data(idata(3, 0, 0, 1, "E", b"1")), beyond);
        assert_eq!(r.on_data(idata(3, 0, 0, 4, "E", b"1")), Verdict::New);
        assert_eq!(r.on_data(idata(4, 0, 0, 5, "", b"1")), beyond);
        assert_eq!(r.on_data(idata(4, 0, 0, 3, "E", b"1")), beyond);
        assert_eq!(
            r.on_data(idata(4, 0, 0, 3, "", b"1234")),
            Verdict::Violation("message larger than the maximum")
        );
        assert_eq!(
            r.on_data(idata(4, 1, 0, 0, "B", b"12345678901")),
            Verdict::Violation("message larger than the maximum")
        );
        assert_eq!(r.cum_tsn(), 3);
        assert_eq!(r.on_data(idata(4, 0, 0, 3, "", b"12")), Verdict::New);
        assert!(!r.readable());
        assert_eq!(r.on_data(idata(5, 0, 0, 1, "", b"1")), Verdict::New);
        assert_eq!(drain(&mut r), vec![(0, b"1234511121".to_vec())]);
    }

    #[test]
    fn the_window_drops_all_but_the_next_tsn_and_that_up_to_twice_the_window() {
        let mut r = Receiver::new(1, 10, 8, 8, false, Arc::new(ReceivePool::new(usize::MAX)));
        // Partial messages on several streams fill the window.
        for (tsn, stream) in [(2, 1), (5, 2), (8, 3)] {
            assert_eq!(r.on_data(data(tsn, stream, 0, "B", b"xxx")), Verdict::New);
        }
        assert_eq!(r.a_rwnd(), 1);
        assert_eq!(r.on_data(data(11, 4, 0, "B", b"xx")), Verdict::Dropped);
        assert_eq!(r.build_sack().gaps, gaps(&[(2, 2), (5, 5), (8, 8)]));
        // TSN 1 is cum + 1: taken although the window is full.
        assert_eq!(r.on_data(data(1, 0, 0, "BE", b"yyyy")), Verdict::New);
        assert_eq!((r.a_rwnd(), r.cum_tsn()), (0, 2));
        assert_eq!(r.on_data(data(3, 1, 0, "E", b"zzzzz")), Verdict::New);
        assert_eq!(r.buffered(), 18);
        // Past twice the window even cum + 1 is dropped.
        assert_eq!(r.on_data(data(4, 5, 0, "BE", b"www")), Verdict::Dropped);
        assert_eq!(r.cum_tsn(), 3);
        assert_eq!(
            drain(&mut r),
            vec![(0, b"yyyy".to_vec()), (1, b"xxxzzzzz".to_vec())]
        );
        assert_eq!(r.buffered(), 6);
        assert_eq!(r.on_data(data(4, 5, 0, "BE", b"www")), Verdict::New);
        assert_eq!(drain(&mut r), vec![(5, b"www".to_vec())]);
        assert_eq!(r.a_rwnd(), 4);
    }

    #[test]
    fn held_chunks_are_bounded() {
        let mut r = Receiver::new(
            0,
            u32::MAX,
            1 << 20,
            1,
            true,
            Arc::new(ReceivePool::new(usize::MAX)),
        );
        for fsn in 1..=MAX_HELD_CHUNKS as u32 {
            assert_eq!(r.on_data(idata(fsn, 0, 0, fsn, "", b"x")), Verdict::New);
        }
        let next = MAX_HELD_CHUNKS as u32 + 1;
        assert_eq!(
            r.on_data(idata(next, 0, 0, next, "E", b"x")),
            Verdict::Dropped
        );
        // The first fragment completes the message at cum + 1.
        assert_eq!(r.on_data(idata(0, 0, 0, 0, "B", b"x")), Verdict::New);
        assert_eq!(r.on_data(idata(next, 0, 0, next, "E", b"x")), Verdict::New);
        let m = r.pop().expect("a message");
        assert_eq!(m.data.len(), MAX_HELD_CHUNKS + 2);
        assert_eq!((r.held_chunks, r.buffered()), (0, 0));
    }

    /// A message for the property tests to send.
    #[derive(Debug, Clone)]
    struct Message {
        stream: u16,
        unordered: bool,
        len: usize,
        /// Fragment size, bytes.
        frag: usize,
    }

    /// Streams the property tests use (all valid).
    const STREAMS: u16 = 3;

    fn message() -> impl Strategy<Value = Message> {
        (0..STREAMS, any::<bool>(), 1..=40usize, 1..=16usize).prop_map(
            |(stream, unordered, len, frag)| Message {
                stream,
                unordered,
                len,
                frag,
            },
        )
    }

    /// Message `i`'s bytes: distinct enough that a misplaced fragment shows.
    fn content(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i * 31 + j * 7 + j / 8) as u8).collect()
    }

    /// The chunks a sender makes of `messages` (the PPID is the message's
    /// index), TSNs from `initial_tsn`. DATA: one message after another.
    /// I-DATA: fragments of up to `open` messages interleave, as `picks`
    /// choose; of one stream's messages only one is open unless `open` is
    /// unbounded.
    fn send(
        messages: &[Message],
        initial_tsn: u32,
        idata: bool,
        open: usize,
        picks: &[usize],
    ) -> Vec<DataChunk> {
        let mut ordered_seq = [0u32; STREAMS as usize];
        let mut unordered_seq = [0u32; STREAMS as usize];
        let mut queues: Vec<VecDeque<DataChunk>> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let counter = if m.unordered {
                    &mut unordered_seq
                } else {
                    &mut ordered_seq
                };
                let seq = counter[usize::from(m.stream)];
                counter[usize::from(m.stream)] += 1;
                let bytes = content(i, m.len);
                let pieces: Vec<&[u8]> = bytes.chunks(m.frag).collect();
                let last = pieces.len() - 1;
                pieces
                    .iter()
                    .enumerate()
                    .map(|(k, piece)| DataChunk {
                        kind: if idata {
                            DataKind::IData
                        } else {
                            DataKind::Data
                        },
                        unordered: m.unordered,
                        beginning: k == 0,
                        ending: k == last,
                        immediate: false,
                        tsn: 0,
                        stream: m.stream,
                        mid: if !idata && m.unordered { 0 } else { seq },
                        fsn: if idata { k as u32 } else { 0 },
                        ppid: if k == 0 || !idata { i as u32 } else { 0 },
                        payload: Bytes::copy_from_slice(piece),
                    })
                    .collect()
            })
            .collect();
        let mut out = Vec::new();
        let mut picks = picks.iter().cycle();
        loop {
            let mut streams = Vec::new();
            let active: Vec<usize> = (0..queues.len())
                .filter(|&i| !queues[i].is_empty())
                // A bounded sender finishes a stream's message before the
                // next on that stream (different streams interleave).
                .filter(|&i| {
                    let first = !streams.contains(&messages[i].stream);
                    streams.push(messages[i].stream);
                    open == usize::MAX || first
                })
                .take(if idata { open } else { 1 })
                .collect();
            if active.is_empty() {
                break;
            }
            let i = active[picks.next().unwrap_or(&0) % active.len()];
            out.extend(queues[i].pop_front());
        }
        for (k, c) in out.iter_mut().enumerate() {
            c.tsn = initial_tsn.wrapping_add(k as u32);
        }
        out
    }

    /// An initial TSN, a list of messages and the sender's chunks of them in
    /// any order, some more than once.
    fn scenario(
        idata: bool,
        open: usize,
    ) -> impl Strategy<Value = (u32, Vec<Message>, Vec<DataChunk>)> {
        let initial = prop_oneof![any::<u32>(), (u32::MAX - 64)..=u32::MAX];
        (
            initial,
            prop::collection::vec(message(), 1..12),
            prop::collection::vec(any::<usize>(), 1..64),
        )
            .prop_flat_map(move |(initial, messages, picks)| {
                let chunks = send(&messages, initial, idata, open, &picks);
                let n = chunks.len();
                (
                    Just(initial),
                    Just(messages),
                    Just(chunks),
                    prop::collection::vec(any::<prop::sample::Index>(), 0..=n),
                )
            })
            .prop_flat_map(|(initial, messages, chunks, dups)| {
                let mut arrivals = chunks.clone();
                arrivals.extend(dups.iter().map(|d| chunks[d.index(chunks.len())].clone()));
                (Just(initial), Just(messages), Just(arrivals).prop_shuffle())
            })
    }

    /// The SACK is exact: everything up to its cumulative ack arrived and the
    /// TSN after it did not; every TSN in a block arrived, every TSN between
    /// blocks did not, and above the last block nothing did unless the block
    /// limit was hit. `got` holds TSNs as offsets from `initial`.
    fn check_sack(sack: &Sack, initial: u32, got: &BTreeSet<u32>) -> Result<(), TestCaseError> {
        let cum = i64::from(sack.cum_tsn_ack.wrapping_sub(initial).wrapping_add(1)) - 1;
        let arrived = |offset: i64| u32::try_from(offset).is_ok_and(|o| got.contains(&o));
        prop_assert!((0..=cum).all(arrived));
        let mut missing_from = cum + 1;
        for block in &sack.gaps {
            let (start, end) = (cum + i64::from(block.start), cum + i64::from(block.end));
            prop_assert!(start > missing_from && start <= end, "{:?}", sack.gaps);
            prop_assert!((missing_from..start).all(|o| !arrived(o)));
            prop_assert!((start..=end).all(arrived));
            missing_from = end + 1;
        }
        prop_assert!(!arrived(missing_from));
        if sack.gaps.len() < MAX_GAP_BLOCKS {
            let above = u32::try_from(missing_from).unwrap_or(u32::MAX);
            prop_assert_eq!(got.range(above..).next(), None);
        }
        Ok(())
    }

    /// Every message arrived once, intact, ordered ones in order per stream.
    fn check_messages(messages: &[Message], delivered: &[Received]) -> Result<(), TestCaseError> {
        prop_assert_eq!(delivered.len(), messages.len());
        let mut seen = vec![false; messages.len()];
        let mut last_ordered: [Option<usize>; STREAMS as usize] = [None; STREAMS as usize];
        for m in delivered {
            let i = m.ppid as usize;
            prop_assert!(i < messages.len() && !seen[i], "message {} twice", i);
            seen[i] = true;
            let sent = &messages[i];
            prop_assert_eq!((m.stream, m.unordered), (sent.stream, sent.unordered));
            prop_assert_eq!(&m.data[..], &content(i, sent.len)[..]);
            if !m.unordered {
                let last = &mut last_ordered[usize::from(m.stream)];
                prop_assert!(last.is_none_or(|l| l < i), "message {} after {:?}", i, last);
                *last = Some(i);
            }
        }
        Ok(())
    }

    /// Feeds one chunk and checks the verdict against `got` (the TSNs
    /// received, as offsets from `initial`; updated) and the SACK that would
    /// follow.
    fn feed(
        r: &mut Receiver,
        chunk: DataChunk,
        initial: u32,
        got: &mut BTreeSet<u32>,
    ) -> Result<Verdict, TestCaseError> {
        let (tsn, offset) = (chunk.tsn, chunk.tsn.wrapping_sub(initial));
        let verdict = r.on_data(chunk);
        if got.contains(&offset) {
            prop_assert_eq!(verdict, Verdict::Duplicate);
        } else if verdict != Verdict::Dropped {
            prop_assert_eq!(verdict, Verdict::New);
            got.insert(offset);
        }
        prop_assert!(r.buffered() <= OVERCOMMIT * r.window);
        prop_assert!(r.held_chunks <= OVERCOMMIT * r.max_held);
        let sack = r.build_sack();
        let dups = if verdict == Verdict::Duplicate {
            vec![tsn]
        } else {
            vec![]
        };
        prop_assert_eq!(&sack.dups, &dups);
        prop_assert_eq!(sack.a_rwnd, r.a_rwnd());
        check_sack(&sack, initial, got)?;
        Ok(verdict)
    }

    /// After the last chunk: everything acknowledged, nothing held, every
    /// message delivered.
    fn check_end(
        r: &Receiver,
        initial: u32,
        messages: &[Message],
        delivered: &[Received],
    ) -> Result<(), TestCaseError> {
        let tsns: u32 = messages.iter().map(|m| m.len.div_ceil(m.frag) as u32).sum();
        prop_assert_eq!(r.cum_tsn(), initial.wrapping_add(tsns - 1));
        prop_assert!(!r.has_gaps() && !r.readable());
        prop_assert_eq!((r.buffered(), r.held_chunks), (0, 0));
        prop_assert_eq!(r.a_rwnd() as usize, r.window);
        check_messages(messages, delivered)
    }

    /// Feeds `arrivals` to a receiver with room for all of them, the
    /// application reading after every third chunk.
    fn deliver_all(
        initial: u32,
        messages: &[Message],
        arrivals: Vec<DataChunk>,
        idata: bool,
    ) -> Result<(), TestCaseError> {
        let mut r = Receiver::new(
            initial,
            WINDOW,
            40,
            STREAMS,
            idata,
            Arc::new(ReceivePool::new(usize::MAX)),
        );
        let mut got = BTreeSet::new();
        let mut delivered = Vec::new();
        for (step, chunk) in arrivals.into_iter().enumerate() {
            prop_assert_ne!(feed(&mut r, chunk, initial, &mut got)?, Verdict::Dropped);
            if step % 3 == 0 {
                delivered.extend(std::iter::from_fn(|| r.pop()));
            }
        }
        delivered.extend(std::iter::from_fn(|| r.pop()));
        check_end(&r, initial, messages, &delivered)
    }

    /// How far past the advertised window the sender of
    /// `deliver_through_window` may go, bytes.
    const STALE_RWND_SLACK: usize = 48;

    /// A sender that keeps to the advertised window, mostly (RFC 9260 6.1:
    /// new data only while what is outstanding fits a_rwnd, one chunk as a
    /// probe when nothing is outstanding) and retransmits everything unacknowledged each
    /// round, through a network that reorders and duplicates as `seeds` say,
    /// to a receiver with a 64-byte window whose application reads once a
    /// round.
    fn deliver_through_window(
        initial: u32,
        messages: &[Message],
        mut chunks: Vec<DataChunk>,
        idata: bool,
        seeds: &[usize],
    ) -> Result<(), TestCaseError> {
        chunks.sort_by_key(|c| c.tsn.wrapping_sub(initial));
        chunks.dedup_by_key(|c| c.tsn);
        let mut r = Receiver::new(
            initial,
            64,
            40,
            STREAMS,
            idata,
            Arc::new(ReceivePool::new(usize::MAX)),
        );
        let mut got = BTreeSet::new();
        let mut delivered = Vec::new();
        let mut seeds = seeds.iter().copied().cycle();
        let mut sent = 0;
        for _round in 0..1000 {
            let unacked: Vec<&DataChunk> = chunks[..sent]
                .iter()
                .filter(|c| !got.contains(&c.tsn.wrapping_sub(initial)))
                .collect();
            let mut outstanding: usize = unacked.iter().map(|c| c.payload.len()).sum();
            let mut batch: Vec<DataChunk> = unacked.into_iter().cloned().collect();
            // Every other round the sender goes by a stale, larger a_rwnd (a
            // SACK lost or late), so the receiver has to drop.
            let slack = if seeds.next().unwrap_or(0) % 2 == 0 {
                STALE_RWND_SLACK
            } else {
                0
            };
            while let Some(next) = chunks.get(sent)
                && (outstanding + next.payload.len() <= r.a_rwnd() as usize + slack
                    || outstanding == 0)
            {
                outstanding += next.payload.len();
                batch.push(next.clone());
                sent += 1;
            }
            if batch.is_empty() {
                break;
            }
            for k in 0..batch.len() {
                if seeds.next().unwrap_or(0) % 4 == 0 {
                    batch.push(batch[k].clone());
                }
            }
            for i in (1..batch.len()).rev() {
                batch.swap(i, seeds.next().unwrap_or(0) % (i + 1));
            }
            for chunk in batch {
                feed(&mut r, chunk, initial, &mut got)?;
            }
            delivered.extend(std::iter::from_fn(|| r.pop()));
        }
        check_end(&r, initial, messages, &delivered)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn data_any_order_delivers_every_message_once((initial, messages, arrivals) in scenario(false, 1)) {
            deliver_all(initial, &messages, arrivals, false)?;
        }

        #[test]
        fn idata_interleaved_any_order_delivers_every_message_once((initial, messages, arrivals) in scenario(true, usize::MAX)) {
            deliver_all(initial, &messages, arrivals, true)?;
        }

        #[test]
        fn data_through_a_small_window_delivers_every_message_once(
            (initial, messages, chunks) in scenario(false, 1),
            seeds in prop::collection::vec(any::<usize>(), 1..64),
        ) {
            deliver_through_window(initial, &messages, chunks, false, &seeds)?;
        }

        #[test]
        fn idata_through_a_small_window_delivers_every_message_once(
            (initial, messages, chunks) in scenario(true, 2),
            seeds in prop::collection::vec(any::<usize>(), 1..64),
        ) {
            deliver_through_window(initial, &messages, chunks, true, &seeds)?;
        }
    }
}
