//! Browser flows on the gateway's LAN side: `tc_tcp_egress` counts what the
//! gateway sent toward each browser, `tc_tcp_ingress` the browser's
//! acknowledgements, under one [`TcpFlowKey`] per connection.
//!
//! ```text
//! Ethernet, IPv4 or IPv6 (crate::ip::locate)
//!   └─ TCP, server port in TcpConfig::ports (source port at egress,
//!      destination port at ingress); data offset ≥ 5 and inside the packet
//!        egress:  payload bytes, segments, snd_end = seq + payload (+1 SYN, +1 FIN)
//!        ingress: with ACK: the acknowledgement number (the highest seen)
//! ```
//!
//! A GSO super-packet at egress has one TCP header for all its segments and
//! an IP length covering them all: its payload and sequence end count whole.
//! At ingress GRO may merge the browser's data segments; their ACK field is
//! the last one's, which is what matters here. Nothing is written to the
//! packet and nothing changes its verdict.

use aya_ebpf::{
    macros::map,
    maps::{Array, LruPerCpuHashMap, PerCpuArray},
};
use ebpf_common::{
    DIRECTION_EGRESS, TCP_CONFIG_PORTS, TCP_PORT_DEFAULT, TcpConfig, TcpFlowCounters, TcpFlowKey,
    TcpStats, tsn_after,
};

use crate::ip::{self, be16, be32};
use crate::{Packet, ProgramError, entry, now_ns};

/// Browser flows. LRU: a closed connection is evicted first when the map is
/// full; userspace looks up the flows it serves.
#[map]
static TCP_FLOWS: LruPerCpuHashMap<TcpFlowKey, TcpFlowCounters> =
    LruPerCpuHashMap::with_max_entries(16384, 0);

/// Entry 0: [`TcpConfig`], written by userspace; all zero means port 80.
#[map]
static TCP_CONFIG: Array<TcpConfig> = Array::with_max_entries(1, 0);

/// Entries `STATS_INGRESS` and `STATS_EGRESS`: what the programs saw.
#[map]
static TCP_STATS: PerCpuArray<TcpStats> = PerCpuArray::with_max_entries(2, 0);

const IPPROTO_TCP: u8 = 6;
/// The fixed TCP header (RFC 9293 §3.1), without options.
const TCP_HEADER_LEN: usize = 20;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// Accounts for one packet seen at `direction`. Errors mean "not
/// accounted"; the caller passes the packet either way.
#[inline(always)]
pub(crate) fn try_account<P: Packet>(pkt: &P, direction: u8) -> Result<(), ProgramError> {
    let stats = TCP_STATS
        .get_ptr_mut(u32::from(direction))
        .ok_or(ProgramError::MapLookup)?;
    // SAFETY: a non-null pointer to this CPU's copy of an array entry, valid for
    // the map's lifetime; programs run with preemption (and migration) disabled,
    // so no other invocation touches this CPU's copy meanwhile.
    let stats = unsafe { &mut *stats };
    stats.packets += 1;

    let Some(transport) = ip::locate(pkt)? else {
        return Ok(());
    };
    if transport.protocol != IPPROTO_TCP {
        return Ok(());
    }
    let tcp: [u8; TCP_HEADER_LEN] = pkt.read(transport.start)?;
    let (src_port, dst_port) = (be16(tcp[0], tcp[1]), be16(tcp[2], tcp[3]));
    let egress = direction == DIRECTION_EGRESS;
    let (browser_port, server_port) = if egress {
        (dst_port, src_port)
    } else {
        (src_port, dst_port)
    };
    if !counted_port(server_port) {
        return Ok(());
    }
    stats.flow_packets += 1;
    let header_len = usize::from(tcp[12] >> 4) * 4;
    if header_len < TCP_HEADER_LEN || transport.start + header_len > transport.end {
        stats.malformed += 1;
        return Ok(());
    }
    let flags = tcp[13];
    if !egress && flags & TCP_ACK == 0 {
        // A browser's SYN: nothing acknowledged yet.
        return Ok(());
    }
    let (src, dst) = ip::addresses(pkt, &transport)?;
    let (browser_addr, server_addr) = if egress { (dst, src) } else { (src, dst) };
    let key = TcpFlowKey {
        browser_addr,
        server_addr,
        browser_port,
        server_port,
        _pad: [0; 4],
    };
    let Some(counters) = entry(&TCP_FLOWS, &key) else {
        stats.map_errors += 1;
        return Ok(());
    };
    // SAFETY: a non-null pointer to this CPU's copy of the value, valid until the
    // program returns (an LRU eviction frees it only after an RCU grace period);
    // preemption is disabled, so the access is exclusive.
    let counters = unsafe { &mut *counters };
    if egress {
        let payload = transport.end - transport.start - header_len;
        let seq = be32([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let end = seq
            .wrapping_add(payload as u32)
            .wrapping_add(u32::from(flags & TCP_SYN != 0))
            .wrapping_add(u32::from(flags & TCP_FIN != 0));
        if counters.segments == 0 || tsn_after(end, counters.snd_end) {
            counters.snd_end = end;
        }
        counters.payload_bytes += payload as u64;
        counters.segments += 1;
        counters.last_sent_ns = now_ns();
    } else {
        let ack = be32([tcp[8], tcp[9], tcp[10], tcp[11]]);
        if counters.acks == 0 || tsn_after(ack, counters.ack) {
            counters.ack = ack;
        }
        counters.acks += 1;
        counters.last_ack_ns = now_ns();
    }
    Ok(())
}

/// Whether flows of server port `port` are counted ([`TcpConfig::ports`]).
#[inline(always)]
fn counted_port(port: u16) -> bool {
    let Some(config) = TCP_CONFIG.get(0) else {
        return port == TCP_PORT_DEFAULT;
    };
    let mut any = false;
    for i in 0..TCP_CONFIG_PORTS {
        let configured = config.ports[i];
        if configured != 0 {
            any = true;
            if configured == port {
                return true;
            }
        }
    }
    !any && port == TCP_PORT_DEFAULT
}
