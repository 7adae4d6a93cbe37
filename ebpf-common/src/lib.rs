//! Map key and value types shared by the eBPF programs (`ebpf-programs`) and
//! userspace. `#![no_std]`, `#[repr(C)]`, every padding byte an explicit field:
//! both sides read the same bytes, and a key hashes the same whoever built it.
//! With the `user` feature the types implement `aya::Pod`.
//!
//! What it never does: allocate, or have behaviour beyond plain data and the
//! small helpers userspace needs to fold per-CPU copies (`merge`, [`tsn_after`]).
//!
//! Where to start: [`StreamKey`] → [`StreamCounters`] (DATA and I-DATA bytes per
//! SCTP stream), [`AssocKey`] → [`AssocCounters`] (SACKs per association),
//! [`SctpConfig`] (the UDP encapsulation port) and [`WalkerStats`] (what the
//! chunk walker saw). [`TcpFlowKey`] → [`TcpFlowCounters`] are the browser
//! flows the LAN-side TCP programs count. docs/ebpf.md describes the programs
//! that fill them.
//!
//! All multi-byte fields are in host byte order: the programs convert from
//! network order when they build a key or value.

#![no_std]

mod tcp;

pub use tcp::{
    TCP_CONFIG_PORTS, TCP_PORT_DEFAULT, TcpConfig, TcpFlowCounters, TcpFlowKey, TcpStats,
};

/// Per-interface packet and byte counters kept by the minimal XDP program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketCounters {
    /// Frames seen.
    pub packets: u64,
    /// Bytes seen, including link-layer headers.
    pub bytes: u64,
}

/// The UDP port of SCTP over UDP (RFC 6951, IANA `sctp-tunneling`), used when
/// [`SctpConfig::udp_port`] is 0.
pub const SCTP_UDP_PORT_DEFAULT: u16 = 9899;

/// [`AssocKey::direction`] / [`StreamKey::direction`] of packets counted by the
/// ingress hook (XDP): they arrived at this host.
pub const DIRECTION_INGRESS: u8 = 0;
/// [`AssocKey::direction`] / [`StreamKey::direction`] of packets counted by the
/// egress hook (TC): handed to the interface, ahead of its root qdisc.
pub const DIRECTION_EGRESS: u8 = 1;

/// Index of the ingress entry in the walker's statistics array.
pub const STATS_INGRESS: u32 = DIRECTION_INGRESS as u32;
/// Index of the egress entry in the walker's statistics array.
pub const STATS_EGRESS: u32 = DIRECTION_EGRESS as u32;

/// Identity of one direction of an SCTP association, as a packet carries it.
///
/// An association is the verification tag plus the SCTP source and destination
/// ports of the common header (RFC 9260 §3.1). Not the IP addresses, nor the UDP
/// ports of RFC 6951 encapsulation: a multi-homed association changes addresses
/// and a NAT changes UDP ports, while the tag and SCTP ports stay. The tag a
/// packet carries is the *receiver's* initiate tag, so the two directions of one
/// association have different tags (and swapped ports): DATA from A to B and the
/// SACKs B sends back are under different keys. Userspace pairs them (it knows
/// both tags: they are exchanged in INIT and INIT ACK).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssocKey {
    /// The common header's verification tag.
    pub vtag: u32,
    /// SCTP source port.
    pub src_port: u16,
    /// SCTP destination port.
    pub dst_port: u16,
    /// [`DIRECTION_INGRESS`] or [`DIRECTION_EGRESS`]: which hook saw it.
    pub direction: u8,
    /// Explicit padding, always zero (keys are hashed byte for byte).
    pub _pad: [u8; 3],
}

/// One stream of one direction of an association: [`AssocKey`] plus the stream
/// identifier of DATA (RFC 9260 §3.3.1) or I-DATA (RFC 8260 §2.1) chunks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// The common header's verification tag.
    pub vtag: u32,
    /// SCTP source port.
    pub src_port: u16,
    /// SCTP destination port.
    pub dst_port: u16,
    /// The stream identifier.
    pub stream_id: u16,
    /// [`DIRECTION_INGRESS`] or [`DIRECTION_EGRESS`].
    pub direction: u8,
    /// Explicit padding, always zero.
    pub _pad: u8,
}

impl StreamKey {
    /// The association this stream belongs to.
    pub const fn assoc(&self) -> AssocKey {
        AssocKey {
            vtag: self.vtag,
            src_port: self.src_port,
            dst_port: self.dst_port,
            direction: self.direction,
            _pad: [0; 3],
        }
    }
}

/// What one hook saw of one stream. Per CPU in the map: userspace sums the
/// counts and takes the [`tsn_after`]-latest TSN and the newest timestamp.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// User data bytes of DATA and I-DATA chunks: chunk length minus the chunk
    /// header (16 bytes for DATA, 20 for I-DATA), without padding. Retransmitted
    /// chunks count again: this is what crossed the hook, not what was delivered.
    pub data_bytes: u64,
    /// DATA and I-DATA chunks.
    pub chunks: u64,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the last chunk was counted.
    pub last_seen_ns: u64,
    /// Highest TSN seen, in serial number arithmetic (RFC 1982, see
    /// [`tsn_after`]); meaningful once `chunks > 0`.
    pub highest_tsn: u32,
    /// Explicit padding, always zero.
    pub _pad: u32,
}

/// What one hook saw of the SACK chunks (RFC 9260 §3.3.4) of one association
/// direction. Per CPU in the map: userspace sums the counts and takes the
/// latest cumulative TSN ack and the `a_rwnd` of the newest copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssocCounters {
    /// SACK chunks.
    pub sacks: u64,
    /// Gap ack blocks, summed over all SACKs.
    pub gap_blocks: u64,
    /// Duplicate TSNs reported, summed over all SACKs.
    pub dup_tsns: u64,
    /// `bpf_ktime_get_ns()` when the last SACK was counted.
    pub last_seen_ns: u64,
    /// Latest cumulative TSN ack, in serial number arithmetic; meaningful once
    /// `sacks > 0`.
    pub cum_tsn_ack: u32,
    /// Advertised receiver window credit of the last SACK, in bytes.
    pub a_rwnd: u32,
}

impl StreamCounters {
    /// Folds another CPU's copy into this one: counts add, the later TSN and the
    /// newer timestamp win.
    pub const fn merge(self, other: Self) -> Self {
        let highest_tsn = if other.chunks == 0 {
            self.highest_tsn
        } else if self.chunks == 0 || tsn_after(other.highest_tsn, self.highest_tsn) {
            other.highest_tsn
        } else {
            self.highest_tsn
        };
        Self {
            data_bytes: self.data_bytes.wrapping_add(other.data_bytes),
            chunks: self.chunks.wrapping_add(other.chunks),
            last_seen_ns: max(self.last_seen_ns, other.last_seen_ns),
            highest_tsn,
            _pad: 0,
        }
    }
}

impl AssocCounters {
    /// Folds another CPU's copy into this one: counts add, the later cumulative
    /// TSN ack wins, `a_rwnd` comes from the copy with the newer SACK.
    pub const fn merge(self, other: Self) -> Self {
        let cum_tsn_ack = if other.sacks == 0 {
            self.cum_tsn_ack
        } else if self.sacks == 0 || tsn_after(other.cum_tsn_ack, self.cum_tsn_ack) {
            other.cum_tsn_ack
        } else {
            self.cum_tsn_ack
        };
        let a_rwnd =
            if other.sacks != 0 && (self.sacks == 0 || other.last_seen_ns > self.last_seen_ns) {
                other.a_rwnd
            } else {
                self.a_rwnd
            };
        Self {
            sacks: self.sacks.wrapping_add(other.sacks),
            gap_blocks: self.gap_blocks.wrapping_add(other.gap_blocks),
            dup_tsns: self.dup_tsns.wrapping_add(other.dup_tsns),
            last_seen_ns: max(self.last_seen_ns, other.last_seen_ns),
            cum_tsn_ack,
            a_rwnd,
        }
    }
}

const fn max(a: u64, b: u64) -> u64 {
    if a > b { a } else { b }
}

/// Run-time settings of the SCTP programs: entry 0 of their config array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SctpConfig {
    /// UDP port that marks SCTP over UDP (RFC 6951) when it is the source or the
    /// destination port; 0 means [`SCTP_UDP_PORT_DEFAULT`].
    pub udp_port: u16,
    /// Explicit padding, always zero.
    pub _pad: [u8; 6],
}

/// What the chunk walker saw at one hook (entry [`STATS_INGRESS`] or
/// [`STATS_EGRESS`]), per CPU. For operations and tests: a packet the walker
/// gave up on is visible here, never in the traffic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkerStats {
    /// Packets the program ran on.
    pub packets: u64,
    /// Packets with an SCTP common header (native or UDP-encapsulated).
    pub sctp_packets: u64,
    /// Chunks looked at, of any type.
    pub chunks: u64,
    /// Packets whose walk stopped at a malformed or truncated chunk.
    pub malformed: u64,
    /// Packets whose walk stopped at the chunk limit with bytes left.
    pub chunk_limit: u64,
    /// Map updates that failed (map full): counts were lost.
    pub map_errors: u64,
    /// UDP GSO super-packets (TC egress) of which only the first segment's SCTP
    /// packet was walked: the other segments' chunks were not counted.
    pub gso_partial: u64,
    /// GSO super-packets (TC egress; kernel SCTP's carry one common header for
    /// all their segments and are walked whole up to the GSO chunk bound), read
    /// past the skb's linear head with `bpf_skb_load_bytes`.
    pub gso_packets: u64,
}

impl WalkerStats {
    /// Field-wise wrapping sum, to fold per-CPU copies.
    pub const fn add(self, other: Self) -> Self {
        Self {
            packets: self.packets.wrapping_add(other.packets),
            sctp_packets: self.sctp_packets.wrapping_add(other.sctp_packets),
            chunks: self.chunks.wrapping_add(other.chunks),
            malformed: self.malformed.wrapping_add(other.malformed),
            chunk_limit: self.chunk_limit.wrapping_add(other.chunk_limit),
            map_errors: self.map_errors.wrapping_add(other.map_errors),
            gso_partial: self.gso_partial.wrapping_add(other.gso_partial),
            gso_packets: self.gso_packets.wrapping_add(other.gso_packets),
        }
    }
}

/// Whether TSN `a` comes after TSN `b` in serial number arithmetic (RFC 1982 with
/// SERIAL_BITS = 32, as RFC 9260 §1.6 prescribes for TSNs).
pub const fn tsn_after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < (1 << 31)
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all impls below): each type is `repr(C)`, made only of integers and
    // integer arrays whose sizes add up to the type's size without implicit
    // padding (checked by the const assertions), so every bit pattern is valid.
    use super::*;

    unsafe impl aya::Pod for PacketCounters {}
    unsafe impl aya::Pod for AssocKey {}
    unsafe impl aya::Pod for StreamKey {}
    unsafe impl aya::Pod for StreamCounters {}
    unsafe impl aya::Pod for AssocCounters {}
    unsafe impl aya::Pod for SctpConfig {}
    unsafe impl aya::Pod for WalkerStats {}
}

// No implicit padding anywhere: sizes are the sums of the fields.
const _: () = assert!(core::mem::size_of::<PacketCounters>() == 16);
const _: () = assert!(core::mem::size_of::<AssocKey>() == 4 + 2 + 2 + 1 + 3);
const _: () = assert!(core::mem::size_of::<StreamKey>() == 4 + 2 + 2 + 2 + 1 + 1);
const _: () = assert!(core::mem::size_of::<StreamCounters>() == 8 * 3 + 4 + 4);
const _: () = assert!(core::mem::size_of::<AssocCounters>() == 8 * 4 + 4 + 4);
const _: () = assert!(core::mem::size_of::<SctpConfig>() == 2 + 6);
const _: () = assert!(core::mem::size_of::<WalkerStats>() == 8 * 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsn_after_wraps() {
        assert!(tsn_after(1, 0));
        assert!(!tsn_after(0, 1));
        assert!(!tsn_after(5, 5));
        assert!(tsn_after(0, u32::MAX));
        assert!(tsn_after(0x8000_0000 - 1, 0));
        assert!(!tsn_after(0x8000_0000, 0));
    }

    #[test]
    fn merge_takes_the_later_tsn_across_the_wrap() {
        let a = StreamCounters {
            data_bytes: 10,
            chunks: 1,
            last_seen_ns: 5,
            highest_tsn: u32::MAX,
            _pad: 0,
        };
        let b = StreamCounters {
            data_bytes: 7,
            chunks: 2,
            last_seen_ns: 3,
            highest_tsn: 1,
            _pad: 0,
        };
        let merged = StreamCounters::default().merge(a).merge(b);
        assert_eq!(merged.data_bytes, 17);
        assert_eq!(merged.chunks, 3);
        assert_eq!(merged.highest_tsn, 1);
        assert_eq!(merged.last_seen_ns, 5);
        // A CPU that saw nothing does not contribute its zero TSN.
        assert_eq!(merged.merge(StreamCounters::default()), merged);
    }

    #[test]
    fn assoc_merge_takes_a_rwnd_from_the_newest_sack() {
        let old = AssocCounters {
            sacks: 1,
            gap_blocks: 2,
            dup_tsns: 0,
            last_seen_ns: 100,
            cum_tsn_ack: 50,
            a_rwnd: 1000,
        };
        let new = AssocCounters {
            sacks: 1,
            gap_blocks: 1,
            dup_tsns: 3,
            last_seen_ns: 200,
            cum_tsn_ack: 40,
            a_rwnd: 500,
        };
        let merged = AssocCounters::default().merge(new).merge(old);
        assert_eq!(merged.sacks, 2);
        assert_eq!(merged.gap_blocks, 3);
        assert_eq!(merged.dup_tsns, 3);
        assert_eq!(merged.cum_tsn_ack, 50);
        assert_eq!(merged.a_rwnd, 500);
        assert_eq!(merged.last_seen_ns, 200);
    }

    #[test]
    fn stream_key_names_its_association() {
        let key = StreamKey {
            vtag: 7,
            src_port: 1,
            dst_port: 2,
            stream_id: 9,
            direction: DIRECTION_EGRESS,
            _pad: 0,
        };
        assert_eq!(
            key.assoc(),
            AssocKey {
                vtag: 7,
                src_port: 1,
                dst_port: 2,
                direction: DIRECTION_EGRESS,
                _pad: [0; 3],
            }
        );
    }
}
