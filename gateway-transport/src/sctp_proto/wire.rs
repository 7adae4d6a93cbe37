//! The few raw SCTP packet operations that `sctp-proto` does not offer: a glance at
//! the chunk types of a packet, the handful of control packets the driver
//! builds itself (ABORT, HEARTBEAT, SHUTDOWN COMPLETE for a stray SHUTDOWN ACK),
//! the correction of `sctp-proto`'s SHUTDOWN, and a readable account of the
//! error causes in a peer's ABORT.
//!
//! It never parses payload and never holds state; every function is a pure
//! transformation of bytes, tested below. Layouts are RFC 9260 section 3.

use bytes::{BufMut, Bytes, BytesMut};

/// Common header: source port, destination port, verification tag, checksum.
pub(super) const COMMON_HEADER_LEN: usize = 12;
const CHUNK_HEADER_LEN: usize = 4;

const CT_DATA: u8 = 0;
const CT_INIT: u8 = 1;
const CT_INIT_ACK: u8 = 2;
const CT_SACK: u8 = 3;
const CT_HEARTBEAT: u8 = 4;
const CT_HEARTBEAT_ACK: u8 = 5;
const CT_ABORT: u8 = 6;
const CT_SHUTDOWN: u8 = 7;
const CT_SHUTDOWN_ACK: u8 = 8;
const CT_SHUTDOWN_COMPLETE: u8 = 14;

/// ABORT / SHUTDOWN COMPLETE flag: the verification tag is the receiver's own
/// ("reflected"), used when we do not know the peer's tag.
const FLAG_T: u8 = 1;
/// DATA flags: I (SACK immediately), B (first fragment), E (last fragment).
const DATA_FLAGS_IMMEDIATE_WHOLE: u8 = 0b1011;
/// Error cause "User-Initiated Abort" (RFC 9260 section 3.3.10.12).
const CAUSE_USER_INITIATED_ABORT: u16 = 12;
/// Error cause "Protocol Violation" (RFC 9260 section 3.3.10.13).
const CAUSE_PROTOCOL_VIOLATION: u16 = 13;
/// Length of a SHUTDOWN chunk: header and Cumulative TSN Ack.
const SHUTDOWN_LEN: usize = CHUNK_HEADER_LEN + 4;
/// Heartbeat Info parameter type (RFC 9260 section 3.3.5).
const PARAM_HEARTBEAT_INFO: u16 = 1;

/// CRC32c as SCTP uses it (RFC 9260 appendix A). Only small control packets are
/// checksummed here; `sctp-proto` checksums its own packets.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// Stream counts an INIT or INIT ACK announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct InitStreams {
    /// Number of Outbound Streams (OS) its sender intends to use.
    pub(super) outbound: u16,
    /// Maximum Inbound Streams (MIS) its sender accepts.
    pub(super) max_inbound: u16,
}

/// What the driver needs to know about a packet before `sctp-proto` sees it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ChunkSummary {
    /// Well-formed chunks walked.
    pub(super) chunks: usize,
    /// An ABORT is present.
    pub(super) abort: bool,
    /// A SHUTDOWN, SHUTDOWN ACK or SHUTDOWN COMPLETE is present.
    pub(super) shutdown: bool,
    /// A SHUTDOWN COMPLETE is present.
    pub(super) shutdown_complete: bool,
    /// The first chunk is a SHUTDOWN ACK.
    pub(super) first_is_shutdown_ack: bool,
    /// HEARTBEAT ACK chunks present (answers to our own heartbeats; `sctp-proto`
    /// cannot parse them).
    pub(super) heartbeat_acks: usize,
    /// Stream counts of an INIT (false) or INIT ACK (true).
    pub(super) init: Option<(bool, InitStreams)>,
    /// Initial TSN of that INIT or INIT ACK: the peer's first DATA carries it.
    pub(super) initial_tsn: Option<u32>,
}

/// The header fields our own packets to one peer carry, learnt from the
/// packets `sctp-proto` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PeerHeader {
    /// Our SCTP port.
    pub(super) source_port: u16,
    /// The peer's SCTP port.
    pub(super) destination_port: u16,
    /// The peer's verification tag.
    pub(super) verification_tag: u32,
}

impl PeerHeader {
    /// Reads the header of an outgoing packet; `None` for packets with a zero tag
    /// (an INIT), which say nothing about the peer's tag.
    pub(super) fn from_outgoing(packet: &[u8]) -> Option<Self> {
        if packet.len() < COMMON_HEADER_LEN {
            return None;
        }
        let verification_tag = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        (verification_tag != 0).then(|| PeerHeader {
            source_port: u16::from_be_bytes([packet[0], packet[1]]),
            destination_port: u16::from_be_bytes([packet[2], packet[3]]),
            verification_tag,
        })
    }

    fn put(&self, buf: &mut BytesMut) {
        buf.put_u16(self.source_port);
        buf.put_u16(self.destination_port);
        buf.put_u32(self.verification_tag);
        buf.put_u32(0);
    }
}

/// The type of the first chunk of a packet, if it has one.
pub(super) fn first_chunk_type(packet: &[u8]) -> Option<u8> {
    packet.get(COMMON_HEADER_LEN).copied()
}

/// Whether `packet` begins with a SHUTDOWN COMPLETE (how `sctp-proto` sends it:
/// alone).
pub(super) fn is_shutdown_complete(packet: &[u8]) -> bool {
    first_chunk_type(packet) == Some(CT_SHUTDOWN_COMPLETE)
}

/// Cumulative TSN ack and advertised window of a packet that begins with a
/// SACK (`sctp-proto` sends its SACKs alone).
pub(super) fn sack_of(packet: &[u8]) -> Option<(u32, u32)> {
    if first_chunk_type(packet) != Some(CT_SACK) {
        return None;
    }
    let at = COMMON_HEADER_LEN + CHUNK_HEADER_LEN;
    let b = packet.get(at..at + 8)?;
    Some((
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    ))
}

/// A one-byte DATA chunk with the I bit, carrying an already acknowledged
/// `tsn`, as if the peer had sent it (`inbound_header`: the first 8 bytes of a
/// packet from the peer). Fed to our own `sctp-proto`, which discards it as a
/// duplicate but answers with a SACK at once: the only way to make it announce
/// a window the application just opened by reading.
pub(super) fn sack_request(inbound_header: &[u8; 8], tsn: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(COMMON_HEADER_LEN + 20);
    buf.extend_from_slice(inbound_header);
    buf.put_u32(0);
    buf.put_u8(CT_DATA);
    buf.put_u8(DATA_FLAGS_IMMEDIATE_WHOLE);
    buf.put_u16(17);
    buf.put_u32(tsn);
    buf.put_u16(0); // stream
    buf.put_u16(0); // stream sequence number
    buf.put_u32(0); // payload protocol identifier
    buf.extend_from_slice(&[0, 0, 0, 0]); // one byte of data, padded
    seal(buf)
}

/// Walks the chunk headers of `packet`, stopping at the first malformed one.
pub(super) fn scan(packet: &[u8]) -> ChunkSummary {
    let mut summary = ChunkSummary::default();
    for (offset, typ, len) in chunks(packet) {
        if summary.chunks == 0 && typ == CT_SHUTDOWN_ACK {
            summary.first_is_shutdown_ack = true;
        }
        summary.chunks += 1;
        match typ {
            CT_ABORT => summary.abort = true,
            CT_SHUTDOWN | CT_SHUTDOWN_ACK => summary.shutdown = true,
            CT_SHUTDOWN_COMPLETE => {
                summary.shutdown = true;
                summary.shutdown_complete = true;
            }
            CT_HEARTBEAT_ACK => summary.heartbeat_acks += 1,
            CT_INIT | CT_INIT_ACK if len >= 20 => {
                let be16 = |at: usize| u16::from_be_bytes([packet[at], packet[at + 1]]);
                summary.initial_tsn = Some(be32(&packet[offset + 16..]));
                summary.init = Some((
                    typ == CT_INIT_ACK,
                    InitStreams {
                        outbound: be16(offset + 12),
                        max_inbound: be16(offset + 14),
                    },
                ));
            }
            _ => {}
        }
    }
    summary
}

/// The big-endian `u32` at the start of `b` (which holds at least 4 bytes).
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A copy of `packet` whose SHUTDOWN chunks carry `cumulative_tsn_ack`,
/// checksummed anew; `None` if it has no SHUTDOWN.
///
/// `sctp-proto` 0.10 fills that field with the wrong counter: the last of *our*
/// TSNs the peer acknowledged, instead of the last of the *peer's* TSNs we
/// received (RFC 9260 section 3.3.8). A Linux peer takes it as a SACK in its
/// own TSN space: it silently drops the SHUTDOWN when the value lies behind its
/// acknowledged TSNs, and answers with ABORT ("Protocol Violation: the
/// cumulative tsn ack beyond the max tsn currently sent") when it lies ahead of
/// what it has sent; which one happens depends on the random initial TSNs.
pub(super) fn with_shutdown_cumulative_tsn_ack(
    packet: &[u8],
    cumulative_tsn_ack: u32,
) -> Option<Bytes> {
    let mut out: Option<BytesMut> = None;
    for (offset, typ, len) in chunks(packet) {
        if typ == CT_SHUTDOWN && len >= SHUTDOWN_LEN {
            let buf = out.get_or_insert_with(|| {
                let mut b = BytesMut::from(packet);
                b[8..12].fill(0);
                b
            });
            let at = offset + CHUNK_HEADER_LEN;
            buf[at..at + 4].copy_from_slice(&cumulative_tsn_ack.to_be_bytes());
        }
    }
    out.map(seal)
}

/// The error causes of the first ABORT chunk in `packet`, readably (for the
/// log); `None` without an ABORT.
pub(super) fn abort_causes(packet: &[u8]) -> Option<String> {
    let (offset, _, len) = chunks(packet).find(|&(_, typ, _)| typ == CT_ABORT)?;
    let mut causes = Vec::new();
    let body = &packet[offset + CHUNK_HEADER_LEN..offset + len];
    let mut at = 0;
    while let Some(header) = body.get(at..at + 4) {
        let code = u16::from_be_bytes([header[0], header[1]]);
        let cause_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let Some(info) = body.get(at + 4..at + cause_len.max(4)) else {
            causes.push(format!("malformed cause {code} of length {cause_len}"));
            break;
        };
        causes.push(describe_cause(code, info));
        at += cause_len.max(4).next_multiple_of(4);
    }
    Some(if causes.is_empty() {
        "no error cause".to_owned()
    } else {
        causes.join("; ")
    })
}

/// One error cause (RFC 9260 section 3.3.10): its name and its information,
/// as text up to the first NUL when that much is printable (Linux puts a
/// sentence there, then the header of the offending chunk), the rest in hex.
fn describe_cause(code: u16, info: &[u8]) -> String {
    let name = match code {
        1 => "Invalid Stream Identifier",
        2 => "Missing Mandatory Parameter",
        3 => "Stale Cookie Error",
        4 => "Out of Resource",
        5 => "Unresolvable Address",
        6 => "Unrecognized Chunk Type",
        7 => "Invalid Mandatory Parameter",
        8 => "Unrecognized Parameters",
        9 => "No User Data",
        10 => "Cookie Received While Shutting Down",
        11 => "Restart of an Association with New Addresses",
        CAUSE_USER_INITIATED_ABORT => "User-Initiated Abort",
        CAUSE_PROTOCOL_VIOLATION => "Protocol Violation",
        _ => "unknown cause",
    };
    let hex = |b: &[u8]| -> String { b.iter().map(|b| format!("{b:02x}")).collect() };
    let text_len = info.iter().position(|&b| b == 0).unwrap_or(info.len());
    let (text, rest) = info.split_at(text_len);
    let mut out = format!("{name} ({code})");
    if !text.is_empty() && text.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        out.push_str(&format!(": {:?}", String::from_utf8_lossy(text)));
        if rest.iter().any(|&b| b != 0) {
            out.push_str(&format!(", then 0x{}", hex(rest)));
        }
    } else if !info.is_empty() {
        out.push_str(&format!(": 0x{}", hex(info)));
    }
    out
}

/// Iterates `(offset, type, length)` over the well-formed chunks of `packet`.
fn chunks(packet: &[u8]) -> impl Iterator<Item = (usize, u8, usize)> + '_ {
    let mut offset = COMMON_HEADER_LEN;
    std::iter::from_fn(move || {
        let header = packet.get(offset..offset + CHUNK_HEADER_LEN)?;
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        if len < CHUNK_HEADER_LEN || offset + len > packet.len() {
            return None;
        }
        let item = (offset, header[0], len);
        offset += len.next_multiple_of(4);
        Some(item)
    })
}

/// A copy of `packet` without its HEARTBEAT ACK chunks, checksummed anew; `None`
/// if nothing else is left.
pub(super) fn without_heartbeat_acks(packet: &[u8]) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(packet.len());
    out.extend_from_slice(packet.get(..COMMON_HEADER_LEN)?);
    let mut kept = 0;
    for (offset, typ, len) in chunks(packet) {
        if typ == CT_HEARTBEAT_ACK {
            continue;
        }
        let padded = len.next_multiple_of(4).min(packet.len() - offset);
        out.extend_from_slice(&packet[offset..offset + padded]);
        out.resize(out.len().next_multiple_of(4), 0);
        kept += 1;
    }
    (kept > 0).then(|| seal(out))
}

/// An ABORT with a User-Initiated Abort cause, as the peer expects it from us.
pub(super) fn abort(header: &PeerHeader) -> Bytes {
    let mut buf = BytesMut::with_capacity(COMMON_HEADER_LEN + 8);
    header.put(&mut buf);
    buf.put_u8(CT_ABORT);
    buf.put_u8(0);
    buf.put_u16(8);
    buf.put_u16(CAUSE_USER_INITIATED_ABORT);
    buf.put_u16(4);
    seal(buf)
}

/// A HEARTBEAT carrying `nonce` as its Heartbeat Info; the peer echoes it in a
/// HEARTBEAT ACK.
pub(super) fn heartbeat(header: &PeerHeader, nonce: u64) -> Bytes {
    let mut buf = BytesMut::with_capacity(COMMON_HEADER_LEN + 16);
    header.put(&mut buf);
    buf.put_u8(CT_HEARTBEAT);
    buf.put_u8(0);
    buf.put_u16(16);
    buf.put_u16(PARAM_HEARTBEAT_INFO);
    buf.put_u16(12);
    buf.put_u64(nonce);
    seal(buf)
}

/// The SHUTDOWN COMPLETE (T bit set) that answers a SHUTDOWN ACK for an
/// association we already forgot (RFC 9260 section 8.4, item 5), so that a peer
/// whose last SHUTDOWN COMPLETE was lost can finish too.
pub(super) fn shutdown_complete_for(stray_shutdown_ack: &[u8]) -> Option<Bytes> {
    let h = stray_shutdown_ack.get(..8)?;
    let mut buf = BytesMut::with_capacity(COMMON_HEADER_LEN + CHUNK_HEADER_LEN);
    // Ports swapped; the tag is copied from the SHUTDOWN ACK (the one the peer
    // expects from us), and the T bit tells it so.
    buf.extend_from_slice(&h[2..4]);
    buf.extend_from_slice(&h[0..2]);
    buf.extend_from_slice(&h[4..8]);
    buf.put_u32(0);
    buf.put_u8(CT_SHUTDOWN_COMPLETE);
    buf.put_u8(FLAG_T);
    buf.put_u16(4);
    Some(seal(buf))
}

/// Writes the CRC32c of a packet whose checksum field is still zero. The
/// little-endian placement matches `sctp-proto`, which in turn matches the wire
/// order RFC 9260 appendix A prescribes for this CRC's reflected output.
fn seal(mut buf: BytesMut) -> Bytes {
    let sum = CRC32C.checksum(&buf);
    buf[8..12].copy_from_slice(&sum.to_le_bytes());
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: PeerHeader = PeerHeader {
        source_port: 9899,
        destination_port: 5000,
        verification_tag: 0xdead_beef,
    };

    fn checksum_ok(packet: &[u8]) -> bool {
        let mut zeroed = packet.to_vec();
        zeroed[8..12].fill(0);
        CRC32C.checksum(&zeroed).to_le_bytes() == packet[8..12]
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(CRC32C.checksum(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn abort_is_well_formed() {
        let p = abort(&HEADER);
        assert_eq!(
            &p[..8],
            &[0x26, 0xab, 0x13, 0x88, 0xde, 0xad, 0xbe, 0xef],
            "ports and tag"
        );
        assert_eq!(&p[12..], &[6, 0, 0, 8, 0, 12, 0, 4]);
        assert!(checksum_ok(&p));
        let s = scan(&p);
        assert!(s.abort && !s.shutdown && s.chunks == 1);
    }

    #[test]
    fn heartbeat_carries_its_nonce() {
        let p = heartbeat(&HEADER, 0x0102_0304_0506_0708);
        assert_eq!(
            &p[12..],
            &[4, 0, 0, 16, 0, 1, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert!(checksum_ok(&p));
    }

    #[test]
    fn heartbeat_acks_are_stripped_and_the_rest_kept() {
        let mut p = BytesMut::new();
        HEADER.put(&mut p);
        // HEARTBEAT ACK with 5 bytes of info: length 9, padded to 12.
        p.extend_from_slice(&[5, 0, 0, 9, 1, 2, 3, 4, 5, 0, 0, 0]);
        // SACK-like chunk of type 3, length 16.
        p.extend_from_slice(&[3, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
        let s = scan(&p);
        assert_eq!((s.chunks, s.heartbeat_acks), (2, 1));
        let out = without_heartbeat_acks(&p).expect("a chunk is left");
        assert_eq!(
            &out[12..],
            &[3, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]
        );
        assert!(checksum_ok(&out));

        let mut only = BytesMut::new();
        HEADER.put(&mut only);
        only.extend_from_slice(&[5, 0, 0, 8, 1, 2, 3, 4]);
        assert_eq!(without_heartbeat_acks(&only), None);
    }

    #[test]
    fn sack_fields_are_read_and_sack_request_is_well_formed() {
        let mut sack = BytesMut::new();
        HEADER.put(&mut sack);
        sack.extend_from_slice(&[3, 0, 0, 16, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(sack_of(&sack), Some((256, 0x20000)));
        assert_eq!(sack_of(&abort(&HEADER)), None);

        let header = [0x13, 0x88, 0x26, 0xab, 0, 0, 0, 7];
        let p = sack_request(&header, 0x0102_0304);
        assert_eq!(&p[..8], &header);
        assert_eq!(
            &p[12..],
            &[
                0, 0b1011, 0, 17, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        assert!(checksum_ok(&p));
    }

    #[test]
    fn shutdown_gets_the_cumulative_tsn_ack_it_is_given() {
        let mut p = BytesMut::new();
        HEADER.put(&mut p);
        p.extend_from_slice(&[7, 0, 0, 8, 0xaa, 0xbb, 0xcc, 0xdd]);
        let p = seal(p);
        let fixed = with_shutdown_cumulative_tsn_ack(&p, 0x0102_0304).expect("a SHUTDOWN");
        assert_eq!(&fixed[..8], &p[..8]);
        assert_eq!(&fixed[12..], &[7, 0, 0, 8, 1, 2, 3, 4]);
        assert!(checksum_ok(&fixed));
        assert_eq!(with_shutdown_cumulative_tsn_ack(&abort(&HEADER), 1), None);
    }

    #[test]
    fn abort_causes_are_described() {
        assert_eq!(
            abort_causes(&abort(&HEADER)).as_deref(),
            Some("User-Initiated Abort (12)")
        );
        let mut p = BytesMut::new();
        HEADER.put(&mut p);
        // ABORT as Linux 6.1 sends it for a SHUTDOWN acknowledging TSNs it never
        // sent (bytes as captured): a Protocol Violation with a sentence, a NUL
        // and more; then a cause with binary information.
        let sentence = b"The cumulative tsn ack beyond the max tsn currently sent:";
        p.extend_from_slice(&[6, 0, 0, 78, 0, 13, 0, 66]);
        p.extend_from_slice(sentence);
        p.extend_from_slice(&[0, 0, 7, 0, 8, 0, 0]);
        p.extend_from_slice(&[0, 1, 0, 6, 0, 7, 0, 0]);
        assert_eq!(
            abort_causes(&p).as_deref(),
            Some(
                "Protocol Violation (13): \"The cumulative tsn ack beyond the max tsn \
                 currently sent:\", then 0x0000070008; \
                 Invalid Stream Identifier (1): 0x0007"
            )
        );
        assert_eq!(abort_causes(&heartbeat(&HEADER, 1)), None);
    }

    #[test]
    fn init_stream_counts_are_read() {
        let mut p = BytesMut::new();
        p.extend_from_slice(&[0; 12]);
        // INIT ACK: tag, a_rwnd, OS=16, MIS=4, initial TSN.
        p.extend_from_slice(&[2, 0, 0, 20, 0, 0, 0, 1, 0, 1, 0, 0, 0, 16, 0, 4, 0, 0, 0, 9]);
        let s = scan(&p);
        assert_eq!(
            s.init,
            Some((
                true,
                InitStreams {
                    outbound: 16,
                    max_inbound: 4
                }
            ))
        );
        assert_eq!(s.initial_tsn, Some(9));
    }

    #[test]
    fn truncated_and_garbage_packets_do_not_panic() {
        for len in 0..40 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let _ = scan(&junk);
            let _ = without_heartbeat_acks(&junk);
            let _ = shutdown_complete_for(&junk);
            let _ = with_shutdown_cumulative_tsn_ack(&junk, 1);
            let _ = abort_causes(&junk);
            let _ = PeerHeader::from_outgoing(&junk);
        }
        // A chunk claiming to be longer than the packet ends the walk.
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&[6, 0, 0, 200]);
        assert_eq!(scan(&p).chunks, 0);
    }

    #[test]
    fn stray_shutdown_ack_gets_a_reflected_shutdown_complete() {
        let mut ack = BytesMut::new();
        HEADER.put(&mut ack);
        ack.extend_from_slice(&[8, 0, 0, 4]);
        assert!(scan(&ack).first_is_shutdown_ack);
        let reply = shutdown_complete_for(&ack).expect("header present");
        assert_eq!(
            &reply[..8],
            &[0x13, 0x88, 0x26, 0xab, 0xde, 0xad, 0xbe, 0xef]
        );
        assert_eq!(&reply[12..], &[14, 1, 0, 4]);
        assert!(is_shutdown_complete(&reply));
        assert!(checksum_ok(&reply));
    }
}
