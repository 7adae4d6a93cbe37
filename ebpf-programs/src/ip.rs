//! Where a frame's transport header lies: the link and network layers both
//! walkers ([`crate::sctp`], [`crate::tcp`]) share.
//!
//! ```text
//! Ethernet [one 802.1Q / 802.1ad tag]
//!   ├─ IPv4: IHL ≥ 5 (options skipped), total length ≥ IHL; a later fragment → none
//!   └─ IPv6: payload length ≠ 0 (no jumbograms on the wire); ≤ MAX_IPV6_EXT_HEADERS of
//!            hop-by-hop, routing, destination options, AH, fragment (only a
//!            first fragment goes on); more → none
//! ```
//!
//! The transport part ends at the smaller of the frame and the IP packet, so
//! Ethernet padding of short frames is never read as transport bytes. A GSO
//! packet of more than 64 KiB (BIG TCP, where the device allows it: loopback
//! does) carries 0 as its IP length; at TC the skb's length stands in.

use crate::{Packet, ProgramError};

/// IPv6 extension headers skipped before giving up on a packet.
pub(crate) const MAX_IPV6_EXT_HEADERS: u32 = 4;

const ETH_HEADER_LEN: usize = 14;
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const VLAN_TAG_LEN: usize = 4;

const IPV4_MIN_HEADER_LEN: usize = 20;
/// Fragment offset bits of the IPv4 flags/fragment-offset field.
const IPV4_FRAG_OFFSET_MASK: u16 = 0x1fff;
/// Where the source address starts in an IPv4 header (the destination follows).
const IPV4_ADDRS_OFFSET: usize = 12;
const IPV6_HEADER_LEN: usize = 40;
/// Where the source address starts in an IPv6 header (the destination follows).
const IPV6_ADDRS_OFFSET: usize = 8;
const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_AH: u8 = 51;
const IPPROTO_DSTOPTS: u8 = 60;

/// The transport part of a frame.
pub(crate) struct Transport {
    /// The IP protocol number (IPv6: after the extension headers).
    pub protocol: u8,
    /// Offset of the transport header from the frame's first byte.
    pub start: usize,
    /// End of the IP packet within the frame (exclusive).
    pub end: usize,
    /// Offset of the network header, for [`addresses`].
    pub l3: usize,
    /// IPv6 rather than IPv4.
    pub v6: bool,
}

/// Finds the transport header, or `None` if the frame carries none we read
/// (not IP, a later fragment, too many IPv6 extension headers).
#[inline(always)]
pub(crate) fn locate<P: Packet>(pkt: &P) -> Result<Option<Transport>, ProgramError> {
    let frame_len = pkt.len();
    let eth: [u8; ETH_HEADER_LEN] = pkt.read(0)?;
    let mut ethertype = be16(eth[12], eth[13]);
    let mut l3 = ETH_HEADER_LEN;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        let tag: [u8; VLAN_TAG_LEN] = pkt.read(l3)?;
        ethertype = be16(tag[2], tag[3]);
        l3 += VLAN_TAG_LEN;
    }

    let (protocol, start, ip_end, v6) = match ethertype {
        ETH_P_IPV4 => {
            let ip: [u8; IPV4_MIN_HEADER_LEN] = pkt.read(l3)?;
            let header_len = usize::from(ip[0] & 0x0f) * 4;
            let total_len = match usize::from(be16(ip[2], ip[3])) {
                // A GSO packet over 64 KiB (BIG TCP) says 0: the skb's length counts.
                0 if pkt.gso_size() != 0 => frame_len - l3,
                len => len,
            };
            if ip[0] >> 4 != 4 || header_len < IPV4_MIN_HEADER_LEN || total_len < header_len {
                return Ok(None);
            }
            if be16(ip[6], ip[7]) & IPV4_FRAG_OFFSET_MASK != 0 {
                // A later fragment: no transport header here.
                return Ok(None);
            }
            (ip[9], l3 + header_len, l3 + total_len, false)
        }
        ETH_P_IPV6 => {
            let ip: [u8; IPV6_HEADER_LEN] = pkt.read(l3)?;
            let payload_len = match usize::from(be16(ip[4], ip[5])) {
                // A GSO packet over 64 KiB (BIG TCP) says 0: the skb's length counts.
                0 if pkt.gso_size() != 0 => frame_len - l3 - IPV6_HEADER_LEN,
                len => len,
            };
            if ip[0] >> 4 != 6 || payload_len == 0 {
                // Version mismatch, or a jumbogram (RFC 2675) on the wire: not for us.
                return Ok(None);
            }
            let Some((protocol, start)) = skip_ipv6_extensions(pkt, ip[6], l3 + IPV6_HEADER_LEN)?
            else {
                return Ok(None);
            };
            (protocol, start, l3 + IPV6_HEADER_LEN + payload_len, true)
        }
        _ => return Ok(None),
    };
    Ok(Some(Transport {
        protocol,
        start,
        end: if ip_end < frame_len { ip_end } else { frame_len },
        l3,
        v6,
    }))
}

/// The packet's (source, destination) addresses as 16 bytes each: IPv6 as
/// is, IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`).
#[inline(always)]
pub(crate) fn addresses<P: Packet>(
    pkt: &P,
    transport: &Transport,
) -> Result<([u8; 16], [u8; 16]), ProgramError> {
    if transport.v6 {
        let both: [u8; 32] = pkt.read(transport.l3 + IPV6_ADDRS_OFFSET)?;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&both[..16]);
        dst.copy_from_slice(&both[16..]);
        return Ok((src, dst));
    }
    let both: [u8; 8] = pkt.read(transport.l3 + IPV4_ADDRS_OFFSET)?;
    let mapped = |a: u8, b: u8, c: u8, d: u8| {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d]
    };
    Ok((
        mapped(both[0], both[1], both[2], both[3]),
        mapped(both[4], both[5], both[6], both[7]),
    ))
}

/// Skips IPv6 extension headers from `offset`, where a header of type `next`
/// starts. Returns the upper-layer protocol and its offset, or `None` for a
/// non-first fragment or more than [`MAX_IPV6_EXT_HEADERS`] extension headers.
#[inline(always)]
fn skip_ipv6_extensions<P: Packet>(
    pkt: &P,
    mut next: u8,
    mut offset: usize,
) -> Result<Option<(u8, usize)>, ProgramError> {
    for _ in 0..MAX_IPV6_EXT_HEADERS {
        match next {
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                let header: [u8; 2] = pkt.read(offset)?;
                next = header[0];
                // Length in 8-octet units, not counting the first 8 (RFC 8200 §4.3).
                offset += (usize::from(header[1]) + 1) * 8;
            }
            IPPROTO_AH => {
                let header: [u8; 2] = pkt.read(offset)?;
                next = header[0];
                // Length in 4-octet units, minus 2 (RFC 4302 §2.2).
                offset += (usize::from(header[1]) + 2) * 4;
            }
            IPPROTO_FRAGMENT => {
                let header: [u8; 8] = pkt.read(offset)?;
                if be16(header[2], header[3]) >> 3 != 0 {
                    // Not the first fragment: no upper-layer header here.
                    return Ok(None);
                }
                next = header[0];
                offset += 8;
            }
            _ => return Ok(Some((next, offset))),
        }
    }
    match next {
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_AH | IPPROTO_FRAGMENT => {
            Ok(None)
        }
        _ => Ok(Some((next, offset))),
    }
}

#[inline(always)]
pub(crate) fn be16(high: u8, low: u8) -> u16 {
    u16::from_be_bytes([high, low])
}

#[inline(always)]
pub(crate) fn be32(bytes: [u8; 4]) -> u32 {
    u32::from_be_bytes(bytes)
}
