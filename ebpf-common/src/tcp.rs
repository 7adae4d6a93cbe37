//! Map types of the TCP flow programs (`tc_tcp_egress`, `tc_tcp_ingress`) on
//! the gateway's LAN side: per intercepted browser flow, what was sent toward
//! the browser and what the browser acknowledged, so that the bytes in flight
//! to each browser are known (docs/ebpf.md, "Browser flows").

use crate::tsn_after;

/// The server port counted when [`TcpConfig::ports`] is all zero: plain HTTP,
/// what the gateway intercepts by default.
pub const TCP_PORT_DEFAULT: u16 = 80;

/// Server ports [`TcpConfig`] holds.
pub const TCP_CONFIG_PORTS: usize = 4;

/// One browser's TCP connection as both hooks see it: the browser's address
/// and port, and the address and port it connected to (with TPROXY, the
/// original destination, which the gateway's socket carries as its local
/// address). Egress packets go to the browser (it is their destination),
/// ingress packets come from it (it is their source); both give this key.
///
/// Addresses are 16 bytes, network order: IPv6 as is, IPv4 as an
/// IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2), as a
/// dual-stack socket shows it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TcpFlowKey {
    /// The browser's address.
    pub browser_addr: [u8; 16],
    /// The address the browser connected to.
    pub server_addr: [u8; 16],
    /// The browser's port.
    pub browser_port: u16,
    /// The port the browser connected to.
    pub server_port: u16,
    /// Explicit padding, always zero.
    pub _pad: [u8; 4],
}

/// What the LAN hooks saw of one browser flow. Per CPU in the map: userspace
/// sums the counts and takes the latest sequence and acknowledgement numbers
/// ([`TcpFlowCounters::merge`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlowCounters {
    /// TCP payload bytes sent toward the browser (egress), retransmissions
    /// included: what crossed the hook.
    pub payload_bytes: u64,
    /// Packets sent toward the browser; a GSO super-packet counts once.
    pub segments: u64,
    /// Packets from the browser with the ACK flag (ingress).
    pub acks: u64,
    /// `bpf_ktime_get_ns()` of the last packet toward the browser.
    pub last_sent_ns: u64,
    /// `bpf_ktime_get_ns()` of the last acknowledgement from the browser.
    pub last_ack_ns: u64,
    /// The highest sequence number sent plus one: a segment's sequence number
    /// plus its payload length, plus one for SYN and one for FIN (RFC 9293
    /// §3.4). Serial number arithmetic; meaningful once `segments > 0`.
    pub snd_end: u32,
    /// The highest acknowledgement number from the browser; meaningful once
    /// `acks > 0`.
    pub ack: u32,
}

impl TcpFlowCounters {
    /// Folds another CPU's copy into this one: counts add, the later sequence
    /// end, acknowledgement and timestamps win.
    pub const fn merge(self, other: Self) -> Self {
        let snd_end = if other.segments == 0 {
            self.snd_end
        } else if self.segments == 0 || tsn_after(other.snd_end, self.snd_end) {
            other.snd_end
        } else {
            self.snd_end
        };
        let ack = if other.acks == 0 {
            self.ack
        } else if self.acks == 0 || tsn_after(other.ack, self.ack) {
            other.ack
        } else {
            self.ack
        };
        Self {
            payload_bytes: self.payload_bytes.wrapping_add(other.payload_bytes),
            segments: self.segments.wrapping_add(other.segments),
            acks: self.acks.wrapping_add(other.acks),
            last_sent_ns: crate::max(self.last_sent_ns, other.last_sent_ns),
            last_ack_ns: crate::max(self.last_ack_ns, other.last_ack_ns),
            snd_end,
            ack,
        }
    }

    /// Sequence space sent toward the browser and not yet acknowledged by it,
    /// in bytes (SYN and FIN count one each); `None` until both a segment and
    /// an acknowledgement were seen.
    pub const fn in_flight(&self) -> Option<u32> {
        if self.segments == 0 || self.acks == 0 {
            return None;
        }
        if tsn_after(self.snd_end, self.ack) {
            Some(self.snd_end.wrapping_sub(self.ack))
        } else {
            Some(0)
        }
    }
}

/// Run-time settings of the TCP flow programs: entry 0 of their config array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpConfig {
    /// Server ports whose flows are counted (the intercepted ports); 0 is an
    /// unused slot, and all zero means [`TCP_PORT_DEFAULT`].
    pub ports: [u16; TCP_CONFIG_PORTS],
}

/// What one TCP hook saw (entry [`crate::STATS_INGRESS`] or
/// [`crate::STATS_EGRESS`]), per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Packets the program ran on.
    pub packets: u64,
    /// TCP packets of a counted server port.
    pub flow_packets: u64,
    /// TCP packets whose header length field contradicts the packet.
    pub malformed: u64,
    /// Map updates that failed (map full): counts were lost.
    pub map_errors: u64,
}

impl TcpStats {
    /// Field-wise wrapping sum, to fold per-CPU copies.
    pub const fn add(self, other: Self) -> Self {
        Self {
            packets: self.packets.wrapping_add(other.packets),
            flow_packets: self.flow_packets.wrapping_add(other.flow_packets),
            malformed: self.malformed.wrapping_add(other.malformed),
            map_errors: self.map_errors.wrapping_add(other.map_errors),
        }
    }
}

const _: () = assert!(core::mem::size_of::<TcpFlowKey>() == 16 + 16 + 2 + 2 + 4);
const _: () = assert!(core::mem::size_of::<TcpFlowCounters>() == 8 * 5 + 4 + 4);
const _: () = assert!(core::mem::size_of::<TcpConfig>() == 2 * TCP_CONFIG_PORTS);
const _: () = assert!(core::mem::size_of::<TcpStats>() == 8 * 4);

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all impls below): each type is `repr(C)`, made only of integers and
    // integer arrays whose sizes add up to the type's size without implicit
    // padding (checked by the const assertions above), so every bit pattern is valid.
    use super::*;

    unsafe impl aya::Pod for TcpFlowKey {}
    unsafe impl aya::Pod for TcpFlowCounters {}
    unsafe impl aya::Pod for TcpConfig {}
    unsafe impl aya::Pod for TcpStats {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(snd_end: u32, segments: u64) -> TcpFlowCounters {
        TcpFlowCounters {
            payload_bytes: 100 * segments,
            segments,
            last_sent_ns: u64::from(snd_end),
            snd_end,
            ..TcpFlowCounters::default()
        }
    }

    fn acked(ack: u32, acks: u64) -> TcpFlowCounters {
        TcpFlowCounters {
            acks,
            last_ack_ns: u64::from(ack),
            ack,
            ..TcpFlowCounters::default()
        }
    }

    #[test]
    fn merging_takes_the_later_sequence_end_and_ack_across_the_wrap() {
        let merged = sent(u32::MAX - 10, 2)
            .merge(sent(5, 1))
            .merge(acked(u32::MAX - 20, 1))
            .merge(acked(3, 4))
            .merge(TcpFlowCounters::default());
        assert_eq!(merged.snd_end, 5);
        assert_eq!(merged.ack, 3);
        assert_eq!(merged.segments, 3);
        assert_eq!(merged.payload_bytes, 300);
        assert_eq!(merged.acks, 5);
        assert_eq!(merged.last_sent_ns, u64::from(u32::MAX - 10));
        assert_eq!(merged.in_flight(), Some(2));
    }

    #[test]
    fn in_flight_is_unknown_until_both_directions_were_seen_and_never_negative() {
        assert_eq!(sent(100, 1).in_flight(), None);
        assert_eq!(acked(100, 1).in_flight(), None);
        assert_eq!(sent(100, 1).merge(acked(100, 1)).in_flight(), Some(0));
        // An ACK beyond what the hook saw sent (it attached mid-flow): 0.
        assert_eq!(sent(100, 1).merge(acked(150, 1)).in_flight(), Some(0));
        assert_eq!(sent(1100, 1).merge(acked(100, 1)).in_flight(), Some(1000));
    }
}
