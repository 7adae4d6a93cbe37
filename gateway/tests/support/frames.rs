//! SCTP frames built byte by byte from RFC 9260 (SCTP), RFC 8260 (I-DATA) and
//! RFC 6951 (SCTP over UDP), with a correct CRC32c and IPv4 header checksum,
//! and TCP segments (RFC 9293): what the eBPF tests (ebpf_sctp.rs,
//! ebpf_tcp.rs) and the eBPF benchmark (examples/ebpf_bench.rs) run the
//! programs on.

/// The verification tag of the frames [`sctp`] builds.
pub(crate) const VTAG: u32 = 0x1234_5678;
/// The SCTP source port of the frames [`sctp`] builds.
pub(crate) const SRC_PORT: u16 = 5000;
/// The SCTP destination port of the frames [`sctp`] builds.
pub(crate) const DST_PORT: u16 = 5001;
/// The UDP port of SCTP over UDP (RFC 6951).
pub(crate) const RFC6951_PORT: u16 = 9899;

pub(crate) const IPPROTO_SCTP: u8 = 132;
pub(crate) const IPPROTO_UDP: u8 = 17;
pub(crate) const IPPROTO_HOPOPTS: u8 = 0;
pub(crate) const IPPROTO_ROUTING: u8 = 43;
pub(crate) const IPPROTO_FRAGMENT: u8 = 44;
pub(crate) const IPPROTO_DSTOPTS: u8 = 60;

/// One chunk: type, flags, length (header + value, without padding), value,
/// zero padding to a multiple of 4 (RFC 9260 §3.2).
pub(crate) fn chunk(kind: u8, flags: u8, value: &[u8]) -> Vec<u8> {
    let length = u16::try_from(4 + value.len()).expect("chunk fits its length field");
    let mut bytes = vec![kind, flags];
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(value);
    while !bytes.len().is_multiple_of(4) {
        bytes.push(0);
    }
    bytes
}

/// A DATA chunk (RFC 9260 §3.3.1), unfragmented (B and E set).
pub(crate) fn data(tsn: u32, stream: u16, ssn: u16, payload: &[u8]) -> Vec<u8> {
    let mut value = Vec::new();
    value.extend_from_slice(&tsn.to_be_bytes());
    value.extend_from_slice(&stream.to_be_bytes());
    value.extend_from_slice(&ssn.to_be_bytes());
    value.extend_from_slice(&0x3344_5566_u32.to_be_bytes()); // PPID
    value.extend_from_slice(payload);
    chunk(0, 0x03, &value)
}

/// An I-DATA chunk (RFC 8260 §2.1), unfragmented: the last word is the PPID.
pub(crate) fn idata(tsn: u32, stream: u16, mid: u32, ppid: u32, payload: &[u8]) -> Vec<u8> {
    let mut value = Vec::new();
    value.extend_from_slice(&tsn.to_be_bytes());
    value.extend_from_slice(&stream.to_be_bytes());
    value.extend_from_slice(&[0, 0]); // reserved
    value.extend_from_slice(&mid.to_be_bytes());
    value.extend_from_slice(&ppid.to_be_bytes());
    value.extend_from_slice(payload);
    chunk(64, 0x03, &value)
}

/// A SACK chunk (RFC 9260 §3.3.4).
pub(crate) fn sack(cum_tsn_ack: u32, a_rwnd: u32, gaps: &[(u16, u16)], dups: &[u32]) -> Vec<u8> {
    let mut value = Vec::new();
    value.extend_from_slice(&cum_tsn_ack.to_be_bytes());
    value.extend_from_slice(&a_rwnd.to_be_bytes());
    value.extend_from_slice(&u16::try_from(gaps.len()).expect("few gaps").to_be_bytes());
    value.extend_from_slice(&u16::try_from(dups.len()).expect("few dups").to_be_bytes());
    for (start, end) in gaps {
        value.extend_from_slice(&start.to_be_bytes());
        value.extend_from_slice(&end.to_be_bytes());
    }
    for dup in dups {
        value.extend_from_slice(&dup.to_be_bytes());
    }
    chunk(3, 0, &value)
}

/// The fixed part of INIT / INIT ACK (RFC 9260 §3.3.2).
pub(crate) fn init_value(initiate_tag: u32) -> Vec<u8> {
    let mut value = Vec::new();
    value.extend_from_slice(&initiate_tag.to_be_bytes());
    value.extend_from_slice(&65_536_u32.to_be_bytes()); // a_rwnd
    value.extend_from_slice(&16_u16.to_be_bytes()); // outbound streams
    value.extend_from_slice(&16_u16.to_be_bytes()); // inbound streams
    value.extend_from_slice(&1_u32.to_be_bytes()); // initial TSN
    value
}

/// An SCTP packet from `SRC_PORT` to `DST_PORT` with tag `VTAG`.
pub(crate) fn sctp(chunks: &[Vec<u8>]) -> Vec<u8> {
    sctp_packet(SRC_PORT, DST_PORT, VTAG, chunks)
}

/// An SCTP packet: common header with a correct CRC32c (RFC 9260 Appendix A:
/// computed with the checksum field zero, stored in little-endian byte order),
/// then the chunks.
pub(crate) fn sctp_packet(src_port: u16, dst_port: u16, vtag: u32, chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&src_port.to_be_bytes());
    bytes.extend_from_slice(&dst_port.to_be_bytes());
    bytes.extend_from_slice(&vtag.to_be_bytes());
    bytes.extend_from_slice(&[0; 4]);
    for chunk in chunks {
        bytes.extend_from_slice(chunk);
    }
    let crc = crc32c::crc32c(&bytes);
    bytes[8..12].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// A UDP datagram (checksum 0: "none" for IPv4; the programs do not check it).
pub(crate) fn udp(src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
    let length = u16::try_from(8 + payload.len()).expect("datagram fits");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&src_port.to_be_bytes());
    bytes.extend_from_slice(&dst_port.to_be_bytes());
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(&[0, 0]);
    bytes.extend_from_slice(payload);
    bytes
}

pub(crate) fn ethernet(ethertype: u16) -> Vec<u8> {
    let mut bytes = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    bytes.extend_from_slice(&ethertype.to_be_bytes());
    bytes
}

/// An Ethernet frame holding an IPv4 packet 192.0.2.1 → 192.0.2.2 (RFC 5737).
pub(crate) fn ipv4(protocol: u8, payload: &[u8]) -> Vec<u8> {
    ipv4_with_options(protocol, &[], payload)
}

/// [`ipv4`] the other way: 192.0.2.2 → 192.0.2.1.
pub(crate) fn ipv4_reply(protocol: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = ipv4(protocol, payload);
    swap_addresses(&mut frame, 14 + 12, 4);
    frame
}

/// [`ipv6`] the other way: 2001:db8::2 → 2001:db8::1.
pub(crate) fn ipv6_reply(extensions: &[(u8, Vec<u8>)], protocol: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = ipv6(extensions, protocol, payload);
    swap_addresses(&mut frame, 14 + 8, 16);
    frame
}

/// Swaps the source and destination addresses (`len` bytes each, the
/// destination right after the source at `at`), keeping an IPv4 header's
/// checksum right (a swap leaves the one's-complement sum unchanged).
fn swap_addresses(frame: &mut [u8], at: usize, len: usize) {
    let (src, dst) = frame[at..at + 2 * len].split_at_mut(len);
    src.swap_with_slice(dst);
}

/// A TCP segment (RFC 9293 §3.1) with a 20-byte header and `options_len`
/// bytes of NOP options; checksum 0 (the programs do not check it).
pub(crate) fn tcp(
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    options_len: usize,
    payload: &[u8],
) -> Vec<u8> {
    assert!(
        options_len.is_multiple_of(4) && options_len <= 40,
        "options are whole words"
    );
    let data_offset = u8::try_from((20 + options_len) / 4).expect("fits");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&ports.0.to_be_bytes());
    bytes.extend_from_slice(&ports.1.to_be_bytes());
    bytes.extend_from_slice(&seq.to_be_bytes());
    bytes.extend_from_slice(&ack.to_be_bytes());
    bytes.extend_from_slice(&[data_offset << 4, flags]);
    bytes.extend_from_slice(&65535_u16.to_be_bytes()); // window
    bytes.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    bytes.resize(bytes.len() + options_len, 1); // NOP
    bytes.extend_from_slice(payload);
    bytes
}

pub(crate) fn ipv4_with_options(protocol: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    assert!(options.len().is_multiple_of(4), "options are whole words");
    let header_len = 20 + options.len();
    let total = u16::try_from(header_len + payload.len()).expect("packet fits");
    let ihl = u8::try_from(header_len / 4).expect("IHL fits");
    let mut ip = vec![0x40 | ihl, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0]); // id 1, DF
    ip.extend_from_slice(&[64, protocol, 0, 0]);
    ip.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
    ip.extend_from_slice(options);
    let checksum = internet_checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = ethernet(0x0800);
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(payload);
    frame
}

pub(crate) fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).expect("folded")
}

/// An Ethernet frame holding an IPv6 packet 2001:db8::1 → 2001:db8::2 (RFC 3849)
/// with the given extension headers (type, body without the next-header byte
/// filled in) in order, then `protocol`.
pub(crate) fn ipv6(extensions: &[(u8, Vec<u8>)], protocol: u8, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (index, (_, header)) in extensions.iter().enumerate() {
        let next = extensions
            .get(index + 1)
            .map_or(protocol, |(kind, _)| *kind);
        let mut header = header.clone();
        header[0] = next;
        body.extend_from_slice(&header);
    }
    body.extend_from_slice(payload);
    let first = extensions.first().map_or(protocol, |(kind, _)| *kind);
    let mut frame = ethernet(0x86dd);
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&u16::try_from(body.len()).expect("fits").to_be_bytes());
    frame.extend_from_slice(&[first, 64]);
    let mut address = [0_u8; 16];
    address[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    address[15] = 1;
    frame.extend_from_slice(&address);
    address[15] = 2;
    frame.extend_from_slice(&address);
    frame.extend_from_slice(&body);
    frame
}

/// A hop-by-hop, routing or destination options header of `len` bytes (a
/// multiple of 8): next header (filled in later), length in 8-byte units minus
/// one, then PadN-like filler.
pub(crate) fn ext_header(len: usize) -> Vec<u8> {
    assert!(
        len >= 8 && len.is_multiple_of(8),
        "extension headers are 8-byte units"
    );
    let mut header = vec![0_u8; len];
    header[1] = u8::try_from(len / 8 - 1).expect("fits");
    header[2] = 1; // PadN
    header[3] = u8::try_from(len - 4).expect("fits");
    header
}

/// A fragment header (RFC 8200 §4.5): offset in 8-byte units, M flag.
pub(crate) fn fragment_header(offset: u16, more: bool) -> Vec<u8> {
    let field = (offset << 3) | u16::from(more);
    let mut header = vec![0, 0];
    header.extend_from_slice(&field.to_be_bytes());
    header.extend_from_slice(&0x0bad_cafe_u32.to_be_bytes());
    header
}

/// The bytes of a `struct __sk_buff` (192 bytes on 64-bit) with only `gso_segs`
/// (offset 164) and `gso_size` (offset 176) set.
pub(crate) fn sk_buff_with_gso(segments: u32, size: u32) -> Vec<u8> {
    let mut context = vec![0_u8; 192];
    context[164..168].copy_from_slice(&segments.to_ne_bytes());
    context[176..180].copy_from_slice(&size.to_ne_bytes());
    context
}
