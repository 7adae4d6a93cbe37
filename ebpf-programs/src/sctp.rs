//! The bounded SCTP chunk walker shared by `xdp_sctp` (ingress) and `tc_sctp`
//! (egress).
//!
//! ```text
//! Ethernet, IPv4 or IPv6 (crate::ip::locate)
//!        ├─ IP protocol 132: SCTP common header
//!        └─ UDP, source or destination port = SctpConfig::udp_port: SCTP common header
//!             │  (UDP GSO at TC egress: one SCTP packet per gso_size bytes, each
//!             │   with its own common header; only the first is walked)
//!             └─ ≤ MAX_WIRE_CHUNKS chunks at XDP, ≤ MAX_GSO_CHUNKS at TC, each at
//!                (previous offset + length rounded up to 4)
//!                  DATA (0), I-DATA (64) → STREAMS[(vtag, ports, stream, direction)]
//!                  SACK (3)              → ASSOCS[(vtag, ports, direction)]
//!                  anything else         → counted in WalkerStats::chunks only
//! ```
//!
//! Invariants the verifier relies on, and the reader can check:
//! - every read goes through [`Packet::read`]: directly through `ptr_at`, which
//!   refuses an offset above [`MAX_OFFSET`] and any read past `data_end` (XDP),
//!   or through `bpf_skb_load_bytes` (TC, GSO super-packets included), which
//!   checks the offset against the skb at run time; offsets are plain
//!   integers from the frame's first byte, never pointers kept across a helper
//!   call;
//! - every loop has a constant trip count ([`MAX_WIRE_CHUNKS`] or
//!   [`MAX_GSO_CHUNKS`], [`ip::MAX_IPV6_EXT_HEADERS`]);
//! - nothing is ever written to the packet.
//!
//! The walk ends (and the packet still passes) at the first chunk that is
//! shorter than its own header or reaches past the end of the SCTP packet:
//! chunks before it are counted, that one and the rest are not.

use aya_ebpf::{
    macros::map,
    maps::{Array, LruPerCpuHashMap, PerCpuArray},
};
use ebpf_common::{
    AssocCounters, AssocKey, SCTP_UDP_PORT_DEFAULT, SctpConfig, StreamCounters, StreamKey,
    WalkerStats, tsn_after,
};

use crate::ip::{self, Transport, be16, be32};
use crate::{Packet, ProgramError, entry, now_ns};

/// Chunks looked at per packet at XDP (directly read): a 1500-byte packet holds
/// at most 16 DATA chunks of 64 bytes or more. A packet with more (tiny
/// messages) is counted up to here and flagged in [`WalkerStats::chunk_limit`].
pub(crate) const MAX_WIRE_CHUNKS: u32 = 16;
/// Chunks looked at per packet at TC (read with `bpf_skb_load_bytes`): a GSO
/// super-packet of 64 KiB, kernel SCTP's at a 1500-byte MTU, holds about 45
/// full-sized DATA chunks. More (small messages bundled) are counted up to
/// here and flagged in [`WalkerStats::chunk_limit`]. What it costs the
/// verifier: see [`opaque`].
pub(crate) const MAX_GSO_CHUNKS: u32 = 48;
/// The largest packet offset read directly (`ptr_at`), in bytes. Bounds every
/// variable offset for the verifier (which allows at most 0xffff) and covers
/// jumbo frames; chunks beyond it are not counted. Reads through
/// `bpf_skb_load_bytes` (GSO at TC) need no such bound.
pub(crate) const MAX_OFFSET: usize = 0x3fff;

/// Streams seen, per direction. LRU: an association that went away is evicted
/// first when the map is full; userspace sees an evicted key restart from zero.
#[map]
static SCTP_STREAMS: LruPerCpuHashMap<StreamKey, StreamCounters> =
    LruPerCpuHashMap::with_max_entries(16384, 0);

/// SACKs seen, per association direction.
#[map]
static SCTP_ASSOCS: LruPerCpuHashMap<AssocKey, AssocCounters> =
    LruPerCpuHashMap::with_max_entries(4096, 0);

/// One `u64` per CPU that the walker passes each chunk's offset through, so
/// that the verifier forgets its range between chunks (see [`opaque`]).
#[map]
static SCTP_SCRATCH: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Entry 0: [`SctpConfig`], written by userspace; all zero means the defaults.
#[map]
static SCTP_CONFIG: Array<SctpConfig> = Array::with_max_entries(1, 0);

/// Entries `STATS_INGRESS` and `STATS_EGRESS`: what the walker saw.
#[map]
static SCTP_STATS: PerCpuArray<WalkerStats> = PerCpuArray::with_max_entries(2, 0);

const IPPROTO_UDP: u8 = 17;
const IPPROTO_SCTP: u8 = 132;
const UDP_HEADER_LEN: usize = 8;

/// RFC 9260 §3.1: source port, destination port, verification tag, checksum.
const SCTP_COMMON_HEADER_LEN: usize = 12;
/// Type, flags, length.
const CHUNK_HEADER_LEN: usize = 4;
const CHUNK_DATA: u8 = 0;
const CHUNK_SACK: u8 = 3;
const CHUNK_IDATA: u8 = 64;
/// DATA chunk header: chunk header, TSN, stream id, SSN, PPID (RFC 9260 §3.3.1).
const DATA_HEADER_LEN: usize = 16;
/// I-DATA chunk header: chunk header, TSN, stream id, reserved, MID, PPID/FSN
/// (RFC 8260 §2.1).
const IDATA_HEADER_LEN: usize = 20;
/// SACK fixed part: chunk header, cumulative TSN ack, a_rwnd, number of gap ack
/// blocks, number of duplicate TSNs (RFC 9260 §3.3.4).
const SACK_HEADER_LEN: usize = 16;
/// `skb->gso_size` of kernel SCTP's GSO packets (`GSO_BY_FRAGS`): one common
/// header, then the chunks of every segment back to back (each segment's in a
/// `frag_list` skb), so the packet is walked as one.
const GSO_BY_FRAGS: usize = 0xffff;

/// Where the SCTP packet lies in the frame: `[start, end)` in bytes from the
/// frame's first byte.
struct SctpSpan {
    start: usize,
    end: usize,
    /// A UDP GSO super-packet cut to its first segment.
    segmented: bool,
}

/// How a walk over the chunks ended.
enum WalkEnd {
    /// Every chunk up to the end of the SCTP packet was looked at.
    Complete,
    /// A chunk was shorter than its header or reached past the end.
    Malformed,
    /// `P::MAX_CHUNKS` chunks were looked at and bytes are left.
    ChunkLimit,
}

/// Accounts for one packet seen at `direction` (a `ebpf_common::DIRECTION_*`).
/// Errors mean "not accounted"; the caller passes the packet either way.
#[inline(always)]
pub(crate) fn try_account<P: Packet>(pkt: &P, direction: u8) -> Result<(), ProgramError> {
    let stats = SCTP_STATS
        .get_ptr_mut(u32::from(direction))
        .ok_or(ProgramError::MapLookup)?;
    // SAFETY: a non-null pointer to this CPU's copy of an array entry, valid for
    // the map's lifetime; programs run with preemption (and migration) disabled,
    // so no other invocation touches this CPU's copy meanwhile.
    let stats = unsafe { &mut *stats };
    stats.packets += 1;

    let Some(span) = find_sctp(pkt)? else {
        return Ok(());
    };
    let assoc = common_header(pkt, span.start, direction)?;
    stats.sctp_packets += 1;
    if pkt.gso_size() != 0 {
        stats.gso_packets += 1;
    }
    if span.segmented {
        stats.gso_partial += 1;
    }
    match walk_chunks(pkt, &span, &assoc, stats) {
        WalkEnd::Complete => {}
        WalkEnd::Malformed => stats.malformed += 1,
        WalkEnd::ChunkLimit => stats.chunk_limit += 1,
    }
    Ok(())
}

/// The association key of the SCTP common header at `offset`.
#[inline(always)]
fn common_header<P: Packet>(pkt: &P, offset: usize, direction: u8) -> Result<AssocKey, ProgramError> {
    let header: [u8; SCTP_COMMON_HEADER_LEN] = pkt.read(offset)?;
    Ok(AssocKey {
        src_port: be16(header[0], header[1]),
        dst_port: be16(header[2], header[3]),
        vtag: be32([header[4], header[5], header[6], header[7]]),
        direction,
        _pad: [0; 3],
    })
}

/// Finds the SCTP packet inside the frame, or `None` if the frame carries none
/// (other protocols, a later fragment, too many IPv6 extension headers).
#[inline(always)]
fn find_sctp<P: Packet>(pkt: &P) -> Result<Option<SctpSpan>, ProgramError> {
    let Some(Transport {
        protocol,
        start: l4,
        end: l4_end,
        ..
    }) = ip::locate(pkt)?
    else {
        return Ok(None);
    };
    match protocol {
        IPPROTO_SCTP => Ok(Some(SctpSpan {
            start: l4,
            end: l4_end,
            segmented: false,
        })),
        IPPROTO_UDP => {
            let udp: [u8; UDP_HEADER_LEN] = pkt.read(l4)?;
            let port = udp_port();
            if be16(udp[0], udp[1]) != port && be16(udp[2], udp[3]) != port {
                return Ok(None);
            }
            let start = l4 + UDP_HEADER_LEN;
            let udp_end = l4 + usize::from(be16(udp[4], udp[5]));
            let mut end = if udp_end < l4_end { udp_end } else { l4_end };
            // A UDP GSO super-packet (TC egress) holds one SCTP packet per
            // `gso_size` bytes of payload, each with its own common header:
            // walk the first only, rather than read the next header as a
            // chunk. Walking them all cost the verifier too much (docs/ebpf.md,
            // "What we learned"). Kernel SCTP's GSO (GSO_BY_FRAGS) has one
            // common header for all segments, also when UDP-encapsulated.
            let gso_size = pkt.gso_size();
            let segmented = gso_size != 0 && gso_size != GSO_BY_FRAGS && start + gso_size < end;
            if segmented {
                end = start + gso_size;
            }
            Ok(Some(SctpSpan {
                start,
                end,
                segmented,
            }))
        }
        _ => Ok(None),
    }
}

/// Walks at most `P::MAX_CHUNKS` chunks of the SCTP packet in `span`, counting
/// DATA, I-DATA and SACK chunks under `assoc`.
#[inline(always)]
fn walk_chunks<P: Packet>(
    pkt: &P,
    span: &SctpSpan,
    assoc: &AssocKey,
    stats: &mut WalkerStats,
) -> WalkEnd {
    let mut offset = span.start + SCTP_COMMON_HEADER_LEN;
    for _ in 0..P::MAX_CHUNKS {
        if offset + CHUNK_HEADER_LEN > span.end {
            // Exactly at the end (or in trailing bytes shorter than a chunk header).
            return WalkEnd::Complete;
        }
        let Ok(header) = pkt.read::<CHUNK_HEADER_LEN>(offset) else {
            return WalkEnd::Malformed;
        };
        let length = usize::from(be16(header[2], header[3]));
        if length < CHUNK_HEADER_LEN || offset + length > span.end {
            return WalkEnd::Malformed;
        }
        stats.chunks += 1;
        let counted = match header[0] {
            CHUNK_DATA => count_data(pkt, offset, length, DATA_HEADER_LEN, assoc, stats),
            CHUNK_IDATA => count_data(pkt, offset, length, IDATA_HEADER_LEN, assoc, stats),
            CHUNK_SACK => count_sack(pkt, offset, length, assoc, stats),
            _ => Ok(()),
        };
        if counted.is_err() {
            return WalkEnd::Malformed;
        }
        // Chunks are padded to a multiple of 4 bytes (RFC 9260 §3.2).
        offset = opaque(offset + ((length + 3) & !3));
    }
    if offset + CHUNK_HEADER_LEN > span.end {
        WalkEnd::Complete
    } else {
        WalkEnd::ChunkLimit
    }
}

/// Counts a DATA or I-DATA chunk of `length` bytes at `offset` whose header is
/// `header_len` bytes. Both carry the TSN at byte 4 and the stream id at byte 8.
/// A chunk with no user data is malformed (RFC 9260 §3.3.1, RFC 8260 §2.1).
#[inline(always)]
fn count_data<P: Packet>(
    pkt: &P,
    offset: usize,
    length: usize,
    header_len: usize,
    assoc: &AssocKey,
    stats: &mut WalkerStats,
) -> Result<(), ProgramError> {
    if length <= header_len {
        return Err(ProgramError::Malformed);
    }
    let fields: [u8; 12] = pkt.read(offset)?;
    let tsn = be32([fields[4], fields[5], fields[6], fields[7]]);
    let key = StreamKey {
        vtag: assoc.vtag,
        src_port: assoc.src_port,
        dst_port: assoc.dst_port,
        stream_id: be16(fields[8], fields[9]),
        direction: assoc.direction,
        _pad: 0,
    };
    let Some(counters) = entry(&SCTP_STREAMS, &key) else {
        stats.map_errors += 1;
        return Ok(());
    };
    // SAFETY: a non-null pointer to this CPU's copy of the value, valid until the
    // program returns (an LRU eviction frees it only after an RCU grace period);
    // preemption is disabled, so the access is exclusive.
    let counters = unsafe { &mut *counters };
    if counters.chunks == 0 || tsn_after(tsn, counters.highest_tsn) {
        counters.highest_tsn = tsn;
    }
    counters.data_bytes += (length - header_len) as u64;
    counters.chunks += 1;
    counters.last_seen_ns = now_ns();
    Ok(())
}

/// Counts a SACK chunk of `length` bytes at `offset`. Its gap ack blocks and
/// duplicate TSNs must fit in its length.
#[inline(always)]
fn count_sack<P: Packet>(
    pkt: &P,
    offset: usize,
    length: usize,
    assoc: &AssocKey,
    stats: &mut WalkerStats,
) -> Result<(), ProgramError> {
    if length < SACK_HEADER_LEN {
        return Err(ProgramError::Malformed);
    }
    let fields: [u8; SACK_HEADER_LEN] = pkt.read(offset)?;
    let gap_blocks = be16(fields[12], fields[13]);
    let dup_tsns = be16(fields[14], fields[15]);
    if SACK_HEADER_LEN + 4 * (usize::from(gap_blocks) + usize::from(dup_tsns)) > length {
        return Err(ProgramError::Malformed);
    }
    let cum_tsn_ack = be32([fields[4], fields[5], fields[6], fields[7]]);
    let a_rwnd = be32([fields[8], fields[9], fields[10], fields[11]]);
    let Some(counters) = entry(&SCTP_ASSOCS, assoc) else {
        stats.map_errors += 1;
        return Ok(());
    };
    // SAFETY: as in `count_data`.
    let counters = unsafe { &mut *counters };
    if counters.sacks == 0 || tsn_after(cum_tsn_ack, counters.cum_tsn_ack) {
        counters.cum_tsn_ack = cum_tsn_ack;
    }
    counters.a_rwnd = a_rwnd;
    counters.sacks += 1;
    counters.gap_blocks += u64::from(gap_blocks);
    counters.dup_tsns += u64::from(dup_tsns);
    counters.last_seen_ns = now_ns();
    Ok(())
}

/// `value`, unknown to the verifier: written to and read back from a map
/// value, whose contents it does not track.
///
/// Without it the verifier carries each chunk's offset with its exact range
/// into the next chunk, so the walk's states differ by the path taken through
/// every earlier chunk and are pruned less: `tc_sctp` cost the 6.18 verifier
/// 208,286 instructions with 16 chunks, 588,598 with 32, and over its limit of
/// 1,000,000 with 48; with it, 303,236 with 48 (488,479 with 64). Every read
/// re-bounds the offset it uses (`ptr_at`'s cap, or the helper's own check),
/// so nothing needs the range.
#[inline(always)]
fn opaque(value: usize) -> usize {
    match SCTP_SCRATCH.get_ptr_mut(0) {
        // SAFETY: a non-null pointer to this CPU's copy of entry 0, valid for
        // the map's lifetime; preemption is disabled, so the access is
        // exclusive. Volatile, so the store and load stay in the program.
        Some(slot) => unsafe {
            core::ptr::write_volatile(slot, value as u64);
            core::ptr::read_volatile(slot) as usize
        },
        None => value,
    }
}

/// The configured UDP encapsulation port.
#[inline(always)]
fn udp_port() -> u16 {
    match SCTP_CONFIG.get(0) {
        Some(config) if config.udp_port != 0 => config.udp_port,
        _ => SCTP_UDP_PORT_DEFAULT,
    }
}
