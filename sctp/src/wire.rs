//! Encoding and decoding of [`Packet`] and [`Chunk`]: the bytes of RFC 9260
//! section 3 (common header 3.1, chunk layout 3.2, parameters 3.2.1, the chunks
//! of 3.3, error causes 3.3.10, the CRC32c of appendix A), I-DATA (RFC 8260
//! section 2.1), the I bit (RFC 7053 section 3), PAD (RFC 4820 section 3) and
//! the Supported Extensions parameter (RFC 5061 section 4.2.7).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------------------------------+-------------------------------+
//! |          source port          |        destination port       |
//! +-------------------------------+-------------------------------+
//! |                       verification tag                        |
//! +---------------------------------------------------------------+
//! |                     checksum (CRC32c)                         |
//! +---------------+---------------+-------------------------------+
//! |  chunk type   |  chunk flags  |  chunk length (no padding)    |  x N
//! |                 value ... padded with zeros to 4 bytes        |
//! +---------------------------------------------------------------+
//! ```
//!
//! Invariants:
//! - decoding never panics and never copies: payloads, cookies and parameter
//!   values are slices of the received datagram;
//! - what decodes re-encodes to a packet that decodes to the same value (bits
//!   this stack ignores, such as reserved flags and padding contents, are the
//!   only bytes that may differ); the `sctp_packet` fuzz target holds us to it;
//! - a list a peer controls (gap blocks, duplicate TSNs, error causes,
//!   parameters to report) is decoded up to a named cap, so a hostile packet
//!   cannot make us allocate much more than its own size;
//! - every length field excludes padding, as section 3.2 says, and a chunk's
//!   length excludes the padding of its last parameter or cause. On decode a
//!   missing final pad (of the last chunk or of a last parameter) is tolerated
//!   and padding contents are ignored.
//!
//! `Init::unrecognized` means, decoded from an INIT, the unknown parameters
//! whose type asks for a report (section 3.2.1), whole and in order; decoded
//! from an INIT ACK, the contents of its Unrecognized Parameter parameters.
//! Encoding mirrors that: raw after the known parameters in an INIT, each
//! wrapped in an Unrecognized Parameter in an INIT ACK.
//!
//! What is a wire error and what is not: a [`WireError`] means "drop the
//! datagram". Conditions the association must answer (a DATA chunk without
//! user data, an INIT with a zero tag or zero streams, a missing State Cookie)
//! decode fine and are the association's to judge.

use bytes::{BufMut, Bytes, BytesMut};

use crate::chunk::{Chunk, DataChunk, DataKind, ErrorCause, GapBlock, Init, Packet, Sack, kind};

/// Why a datagram is not a valid SCTP packet.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The datagram is shorter than the common header.
    #[error("datagram of {len} bytes is shorter than the SCTP common header")]
    TooShort {
        /// Datagram length, bytes.
        len: usize,
    },
    /// The CRC32c does not match the packet.
    #[error("bad checksum: packet says {found:#010x}, content gives {computed:#010x}")]
    BadChecksum {
        /// The value in the checksum field, as stored (little-endian) on the wire.
        found: u32,
        /// The value computed over the packet.
        computed: u32,
    },
    /// Fewer than 4 bytes are left after a chunk, too few for a chunk header.
    #[error("{remaining} stray bytes after the last chunk")]
    TruncatedChunkHeader {
        /// Bytes left.
        remaining: usize,
    },
    /// A chunk's length field is below the 4 bytes of its own header.
    #[error("chunk type {kind} has length {length}, below its header")]
    ChunkLengthBelowHeader {
        /// Chunk type.
        kind: u8,
        /// Its length field.
        length: u16,
    },
    /// A chunk's length field reaches past the end of the datagram.
    #[error("chunk type {kind} has length {length}, past the {remaining} bytes left")]
    ChunkPastEnd {
        /// Chunk type.
        kind: u8,
        /// Its length field.
        length: u16,
        /// Bytes left in the datagram from the chunk's start.
        remaining: usize,
    },
    /// A chunk is too short for its fixed fields.
    #[error("chunk type {kind} of length {length} is too short for its fixed fields")]
    ChunkTooShort {
        /// Chunk type.
        kind: u8,
        /// Its length field.
        length: u16,
    },
    /// A SACK's gap block and duplicate TSN counts need more bytes than the
    /// chunk has.
    #[error("SACK of length {length} cannot hold {gaps} gap blocks and {dups} duplicate TSNs")]
    SackCounts {
        /// Number of gap blocks announced.
        gaps: u16,
        /// Number of duplicate TSNs announced.
        dups: u16,
        /// The chunk's length field.
        length: u16,
    },
    /// A parameter of an INIT or INIT ACK has a length below its header or
    /// past the end of the chunk.
    #[error("a parameter of chunk type {chunk} has a bad length")]
    ParameterLength {
        /// Chunk type.
        chunk: u8,
    },
    /// A parameter this stack knows has a value of the wrong size.
    #[error("parameter type {kind:#06x} has a value of the wrong size")]
    BadParameter {
        /// Parameter type.
        kind: u16,
    },
    /// An error cause of an ABORT or ERROR has a length below its header or
    /// past the end of the chunk.
    #[error("an error cause of chunk type {chunk} has a bad length")]
    CauseLength {
        /// Chunk type.
        chunk: u8,
    },
    /// A HEARTBEAT or HEARTBEAT ACK whose value is not a Heartbeat Info
    /// parameter.
    #[error("chunk type {chunk} does not carry a Heartbeat Info parameter")]
    BadHeartbeatInfo {
        /// Chunk type.
        chunk: u8,
    },
    /// INIT, INIT ACK or SHUTDOWN COMPLETE bundled with another chunk, which
    /// RFC 9260 section 6.10 forbids.
    #[error("chunk type {kind} must be alone in its packet")]
    NotAlone {
        /// The chunk type that must be alone.
        kind: u8,
    },
}

/// Why a chunk or packet cannot be encoded. Nothing is written when it is
/// returned; the caller drops what it meant to send.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// The chunk would be longer than its 16-bit length field can say.
    #[error("chunk type {kind} would be {length} bytes, above the 65535 a length field holds")]
    ChunkTooLong {
        /// Chunk type.
        kind: u8,
        /// Its length without padding, bytes.
        length: usize,
    },
}

/// Common header: source port, destination port, verification tag, checksum.
pub const COMMON_HEADER_LEN: usize = 12;
/// Bytes a DATA chunk's header takes (16) and I-DATA's (20).
pub const DATA_HEADER_LEN: usize = 16;
/// Bytes an I-DATA chunk's header takes: DATA's with a 32-bit MID and a
/// field that is the PPID on the first fragment and the FSN on the others.
pub const IDATA_HEADER_LEN: usize = 20;

/// Gap ack blocks decoded from one SACK; further blocks are dropped (the
/// sender then merely retransmits sooner). 256 blocks describe a window far
/// larger than any receiver of ours keeps out of order.
pub const MAX_GAP_BLOCKS: usize = 256;
/// Duplicate TSNs decoded from one SACK; further ones are dropped (they only
/// inform congestion control).
pub const MAX_DUP_TSNS: usize = 256;
/// Error causes decoded from one ABORT or ERROR; further ones are dropped.
pub const MAX_ERROR_CAUSES: usize = 16;
/// Parameters decoded into `Init::unrecognized` from one INIT or INIT ACK;
/// further ones are still skipped or stop processing, but are not reported.
pub const MAX_UNRECOGNIZED_PARAMS: usize = 16;
/// Bytes of a peer's own parameters or chunk that we echo back in one report,
/// each counted as it goes out (wrapped in its 4-byte header, padded): the
/// Unrecognized Parameter parameters of an INIT ACK (decoding keeps no more
/// than this in `Init::unrecognized`) and an Unrecognized Chunk Type cause.
/// What does not fit is not reported, which RFC 9260 section 3.2.1 allows (a
/// report is advice to the peer). Without it, an INIT of 65,500 bytes would
/// ask for an INIT ACK longer than a chunk can be, and any peer could have us
/// echo a datagram-sized chunk.
pub const MAX_REPORT_LEN: usize = 1024;
/// Chunk types kept from Supported Extensions parameters (there are 256
/// chunk types; more entries can only be repeats).
pub const MAX_SUPPORTED_EXTENSIONS: usize = 256;

/// Where the checksum sits in the common header, bytes from its start.
const CHECKSUM_AT: usize = 8;
/// Chunk header: type, flags, length.
const CHUNK_HEADER_LEN: usize = 4;
/// Parameter and error cause header: type or code, length.
const TLV_HEADER_LEN: usize = 4;
/// INIT and INIT ACK up to their parameters: header, initiate tag, a_rwnd,
/// stream counts, initial TSN.
const INIT_FIXED_LEN: usize = 20;
/// SACK up to its gap blocks: header, cumulative TSN ack, a_rwnd, two counts.
const SACK_FIXED_LEN: usize = 16;
/// SHUTDOWN: header and cumulative TSN ack.
const SHUTDOWN_LEN: usize = 8;
/// Bytes of one gap ack block or one duplicate TSN.
const SACK_ENTRY_LEN: usize = 4;

/// The I flag of DATA and I-DATA (RFC 7053): a sender that builds a packet
/// chunk by chunk sets it in the last data chunk's flags byte (the chunk's
/// second byte) once it knows nothing follows.
pub const DATA_FLAG_IMMEDIATE: u8 = flag::IMMEDIATE;

/// Chunk flags (RFC 9260 sections 3.3.1, 3.3.7, 3.3.13; RFC 7053 section 3).
mod flag {
    /// DATA, I-DATA: E, last fragment.
    pub(super) const ENDING: u8 = 0x01;
    /// DATA, I-DATA: B, first fragment.
    pub(super) const BEGINNING: u8 = 0x02;
    /// DATA, I-DATA: U, unordered.
    pub(super) const UNORDERED: u8 = 0x04;
    /// DATA, I-DATA: I, SACK immediately (RFC 7053).
    pub(super) const IMMEDIATE: u8 = 0x08;
    /// ABORT, SHUTDOWN COMPLETE: T, the tag is the receiver's own.
    pub(super) const REFLECTED: u8 = 0x01;
}

/// Parameter types (RFC 9260 sections 3.3.2.1 and 3.3.3.1, RFC 5061).
mod param {
    /// Heartbeat Info (the value of HEARTBEAT and HEARTBEAT ACK).
    pub(super) const HEARTBEAT_INFO: u16 = 1;
    /// IPv4 Address.
    pub(super) const IPV4_ADDRESS: u16 = 5;
    /// IPv6 Address.
    pub(super) const IPV6_ADDRESS: u16 = 6;
    /// State Cookie.
    pub(super) const STATE_COOKIE: u16 = 7;
    /// Unrecognized Parameter (INIT ACK).
    pub(super) const UNRECOGNIZED: u16 = 8;
    /// Cookie Preservative (value: milliseconds, u32).
    pub(super) const COOKIE_PRESERVATIVE: u16 = 9;
    /// Host Name Address (deprecated).
    pub(super) const HOST_NAME_ADDRESS: u16 = 11;
    /// Supported Address Types.
    pub(super) const SUPPORTED_ADDRESS_TYPES: u16 = 12;
    /// Reserved for ECN Capable (RFC 9260 section 3.3.2).
    pub(super) const ECN_CAPABLE: u16 = 0x8000;
    /// Supported Extensions (RFC 5061 section 4.2.7).
    pub(super) const SUPPORTED_EXTENSIONS: u16 = 0x8008;
    /// Forward-TSN-Supported (RFC 3758).
    pub(super) const FORWARD_TSN_SUPPORTED: u16 = 0xC000;
    /// Type bit of an unknown parameter: go on with the next one (section 3.2.1).
    pub(super) const SKIP_BIT: u16 = 0x8000;
    /// Type bit of an unknown parameter: report it (section 3.2.1).
    pub(super) const REPORT_BIT: u16 = 0x4000;
}

/// `n` rounded up to a multiple of 4: where the next chunk or parameter starts.
fn pad4(n: usize) -> usize {
    n.next_multiple_of(4)
}

/// Reads a big-endian u16; the caller has checked the bounds.
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32; the caller has checked the bounds.
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A length that fits a 16-bit length field: a decoded chunk's, or one inside
/// a chunk that [`Chunk::encode`] checked first (a parameter, a cause or a
/// SACK count is never longer than the chunk that holds it).
fn length_field(len: usize) -> u16 {
    debug_assert!(len <= usize::from(u16::MAX), "unchecked length {len}");
    u16::try_from(len).unwrap_or(u16::MAX)
}

/// Bytes one reported parameter or chunk of `len` bytes takes in a report:
/// its own 4-byte header and padding (see [`MAX_REPORT_LEN`]).
pub fn report_len(len: usize) -> usize {
    pad4(TLV_HEADER_LEN + len)
}

/// The CRC32c of a packet as if its checksum field were zero (RFC 9260
/// appendix A), without copying it.
fn checksum(packet: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&packet[..CHECKSUM_AT]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &packet[COMMON_HEADER_LEN..])
}

/// Appends a common header with a zero checksum (for building a packet chunk by chunk).
pub fn encode_header(out: &mut BytesMut, src_port: u16, dst_port: u16, vtag: u32) {
    out.put_u16(src_port);
    out.put_u16(dst_port);
    out.put_u32(vtag);
    out.put_u32(0);
}

/// Writes the CRC32c of `packet` (one whole packet, header first) into its checksum field.
///
/// The reflected CRC is stored least significant byte first, the order RFC
/// 9260 appendix A prescribes and Linux checks. A slice shorter than the
/// common header is left alone (there is no checksum field to fill).
pub fn seal_checksum(packet: &mut [u8]) {
    debug_assert!(
        packet.len() >= COMMON_HEADER_LEN,
        "sealing a partial header"
    );
    if packet.len() < COMMON_HEADER_LEN {
        return;
    }
    let sum = checksum(packet);
    packet[CHECKSUM_AT..COMMON_HEADER_LEN].copy_from_slice(&sum.to_le_bytes());
}

/// Reads only the common header (ports, vtag) of a datagram without checking anything else: the endpoint's demultiplexer uses it.
pub fn peek_header(datagram: &[u8]) -> Option<(u16, u16, u32)> {
    if datagram.len() < COMMON_HEADER_LEN {
        return None;
    }
    Some((be16(datagram, 0), be16(datagram, 2), be32(datagram, 4)))
}

impl Packet {
    /// Decodes one datagram (an RFC 6951 UDP payload), checking the CRC32c
    /// first. Values are slices of `datagram` (no copy), except what the
    /// association may keep for long and is short beside its datagram (DATA
    /// payloads, an INIT ACK's cookie): see [`detach`].
    pub fn decode(datagram: Bytes) -> Result<Packet, WireError> {
        let (src_port, dst_port, vtag) = peek_header(&datagram).ok_or(WireError::TooShort {
            len: datagram.len(),
        })?;
        let found = u32::from_le_bytes([
            datagram[CHECKSUM_AT],
            datagram[CHECKSUM_AT + 1],
            datagram[CHECKSUM_AT + 2],
            datagram[CHECKSUM_AT + 3],
        ]);
        let computed = checksum(&datagram);
        if found != computed {
            return Err(WireError::BadChecksum { found, computed });
        }
        let mut chunks = Vec::new();
        let mut at = COMMON_HEADER_LEN;
        while at < datagram.len() {
            let remaining = datagram.len() - at;
            if remaining < CHUNK_HEADER_LEN {
                return Err(WireError::TruncatedChunkHeader { remaining });
            }
            let kind = datagram[at];
            let flags = datagram[at + 1];
            let length = be16(&datagram, at + 2);
            let len = usize::from(length);
            if len < CHUNK_HEADER_LEN {
                return Err(WireError::ChunkLengthBelowHeader { kind, length });
            }
            if len > remaining {
                return Err(WireError::ChunkPastEnd {
                    kind,
                    length,
                    remaining,
                });
            }
            chunks.push(decode_chunk(
                kind,
                flags,
                datagram.slice(at..at + len),
                datagram.len(),
            )?);
            // Section 3.2 has the sender pad the last chunk too, but the
            // padding carries nothing, so a sender that omits it is forgiven.
            at = (at + pad4(len)).min(datagram.len());
        }
        if chunks.len() > 1
            && let Some(alone) = chunks.iter().map(chunk_kind).find(|&k| must_be_alone(k))
        {
            return Err(WireError::NotAlone { kind: alone });
        }
        Ok(Packet {
            src_port,
            dst_port,
            vtag,
            chunks,
        })
    }

    /// Appends the encoded packet, checksum included, to `out`; or, if a
    /// chunk is too long to encode, appends nothing.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        for chunk in &self.chunks {
            chunk.check_length()?;
        }
        let start = out.len();
        out.reserve(self.encoded_len());
        encode_header(out, self.src_port, self.dst_port, self.vtag);
        for chunk in &self.chunks {
            chunk.encode(out)?;
        }
        seal_checksum(&mut out[start..]);
        Ok(())
    }

    /// Bytes `encode` appends.
    pub fn encoded_len(&self) -> usize {
        COMMON_HEADER_LEN + self.chunks.iter().map(Chunk::encoded_len).sum::<usize>()
    }
}

/// INIT, INIT ACK and SHUTDOWN COMPLETE travel alone (RFC 9260 section 6.10).
fn must_be_alone(kind: u8) -> bool {
    matches!(kind, kind::INIT | kind::INIT_ACK | kind::SHUTDOWN_COMPLETE)
}

/// The chunk type number of a chunk value.
fn chunk_kind(chunk: &Chunk) -> u8 {
    match chunk {
        Chunk::Data(d) => match d.kind {
            DataKind::Data => kind::DATA,
            DataKind::IData => kind::I_DATA,
        },
        Chunk::Init(_) => kind::INIT,
        Chunk::InitAck(_) => kind::INIT_ACK,
        Chunk::Sack(_) => kind::SACK,
        Chunk::Heartbeat(_) => kind::HEARTBEAT,
        Chunk::HeartbeatAck(_) => kind::HEARTBEAT_ACK,
        Chunk::Abort { .. } => kind::ABORT,
        Chunk::Shutdown { .. } => kind::SHUTDOWN,
        Chunk::ShutdownAck => kind::SHUTDOWN_ACK,
        Chunk::ShutdownComplete { .. } => kind::SHUTDOWN_COMPLETE,
        Chunk::Error(_) => kind::ERROR,
        Chunk::CookieEcho(_) => kind::COOKIE_ECHO,
        Chunk::CookieAck => kind::COOKIE_ACK,
        Chunk::Pad(_) => kind::PAD,
        Chunk::Unknown { kind, .. } => *kind,
    }
}

/// Decodes one chunk; `whole` is the chunk from its header to its length
/// field's end (no padding), at least a header long.
fn decode_chunk(
    kind: u8,
    flags: u8,
    whole: Bytes,
    datagram_len: usize,
) -> Result<Chunk, WireError> {
    let length = length_field(whole.len());
    let need = |min: usize| {
        if whole.len() < min {
            Err(WireError::ChunkTooShort { kind, length })
        } else {
            Ok(())
        }
    };
    let chunk = match kind {
        kind::DATA | kind::I_DATA => {
            let idata = kind == kind::I_DATA;
            need(if idata {
                IDATA_HEADER_LEN
            } else {
                DATA_HEADER_LEN
            })?;
            Chunk::Data(decode_data(idata, flags, &whole, datagram_len))
        }
        kind::INIT | kind::INIT_ACK => {
            need(INIT_FIXED_LEN)?;
            let init = decode_init(kind, &whole, datagram_len)?;
            if kind == kind::INIT {
                Chunk::Init(init)
            } else {
                Chunk::InitAck(init)
            }
        }
        kind::SACK => {
            need(SACK_FIXED_LEN)?;
            Chunk::Sack(decode_sack(&whole)?)
        }
        kind::HEARTBEAT | kind::HEARTBEAT_ACK => {
            need(CHUNK_HEADER_LEN + TLV_HEADER_LEN)?;
            let info = decode_heartbeat_info(kind, &whole)?;
            if kind == kind::HEARTBEAT {
                Chunk::Heartbeat(info)
            } else {
                Chunk::HeartbeatAck(info)
            }
        }
        kind::ABORT => Chunk::Abort {
            reflected: flags & flag::REFLECTED != 0,
            causes: decode_causes(kind, whole.slice(CHUNK_HEADER_LEN..))?,
        },
        kind::ERROR => Chunk::Error(decode_causes(kind, whole.slice(CHUNK_HEADER_LEN..))?),
        kind::SHUTDOWN => {
            need(SHUTDOWN_LEN)?;
            Chunk::Shutdown {
                cum_tsn_ack: be32(&whole, 4),
            }
        }
        kind::SHUTDOWN_ACK => Chunk::ShutdownAck,
        kind::SHUTDOWN_COMPLETE => Chunk::ShutdownComplete {
            reflected: flags & flag::REFLECTED != 0,
        },
        kind::COOKIE_ECHO => Chunk::CookieEcho(whole.slice(CHUNK_HEADER_LEN..)),
        kind::COOKIE_ACK => Chunk::CookieAck,
        kind::PAD => Chunk::Pad(length - CHUNK_HEADER_LEN as u16),
        _ => Chunk::Unknown {
            kind,
            flags,
            value: whole.slice(CHUNK_HEADER_LEN..),
        },
    };
    Ok(chunk)
}

/// DATA (RFC 9260 section 3.3.1) or I-DATA (RFC 8260 section 2.1); the
/// caller has checked the header length. An empty payload is kept for the
/// association to answer with "No User Data".
fn decode_data(idata: bool, flags: u8, whole: &Bytes, datagram_len: usize) -> DataChunk {
    let beginning = flags & flag::BEGINNING != 0;
    let (kind, mid, fsn, ppid, header) = if idata {
        let ppid_or_fsn = be32(whole, 16);
        let (fsn, ppid) = if beginning {
            (0, ppid_or_fsn)
        } else {
            (ppid_or_fsn, 0)
        };
        (
            DataKind::IData,
            be32(whole, 12),
            fsn,
            ppid,
            IDATA_HEADER_LEN,
        )
    } else {
        let ssn = u32::from(be16(whole, 10));
        (DataKind::Data, ssn, 0, be32(whole, 12), DATA_HEADER_LEN)
    };
    DataChunk {
        kind,
        unordered: flags & flag::UNORDERED != 0,
        beginning,
        ending: flags & flag::ENDING != 0,
        immediate: flags & flag::IMMEDIATE != 0,
        tsn: be32(whole, 4),
        stream: be16(whole, 8),
        mid,
        fsn,
        ppid,
        payload: detach(whole.slice(header..), datagram_len),
    }
}

/// What the association keeps of a datagram: `value` itself, or a copy of it
/// when it is shorter than [`PIN_RATIO`] of `datagram_len`.
///
/// A slice keeps its whole datagram allocated. The receiver holds DATA
/// payloads until the application reads them, so a peer sending one-byte
/// chunks each in a 65,507-byte datagram pinned 65,507 bytes per byte of
/// window. Copying what is short means a held value never pins more than
/// 4/3 of its own length, and a full-size payload (one per datagram, the
/// common case) is still never copied; what is copied is small beside the
/// system call that brought it.
pub(crate) fn detach(value: Bytes, datagram_len: usize) -> Bytes {
    if value.len() * PIN_RATIO.1 < datagram_len * PIN_RATIO.0 {
        Bytes::copy_from_slice(&value)
    } else {
        value
    }
}

/// A kept value is at least this fraction (numerator, denominator) of the
/// datagram it shares, so the datagram is at most the inverse of it: 4/3 of
/// the value.
pub(crate) const PIN_RATIO: (usize, usize) = (3, 4);

/// INIT or INIT ACK (RFC 9260 sections 3.3.2, 3.3.3) with the parameter
/// rules of section 3.2.1; the caller has checked the fixed length.
fn decode_init(chunk: u8, whole: &Bytes, datagram_len: usize) -> Result<Init, WireError> {
    let ack = chunk == kind::INIT_ACK;
    let mut init = Init {
        initiate_tag: be32(whole, 4),
        a_rwnd: be32(whole, 8),
        outbound_streams: be16(whole, 12),
        inbound_streams: be16(whole, 14),
        initial_tsn: be32(whole, 16),
        ..Init::default()
    };
    // What is kept is what an INIT ACK will report (or, from an INIT ACK,
    // what the peer reported): at most MAX_UNRECOGNIZED_PARAMS parameters
    // and MAX_REPORT_LEN bytes as reported.
    let mut reported = 0;
    let mut report = |init: &mut Init, param: Bytes| {
        let len = report_len(param.len());
        if init.unrecognized.len() < MAX_UNRECOGNIZED_PARAMS && reported + len <= MAX_REPORT_LEN {
            reported += len;
            init.unrecognized.push(param);
        }
    };
    for tlv in Tlvs::new(whole.slice(INIT_FIXED_LEN..)) {
        let tlv = tlv.map_err(|()| WireError::ParameterLength { chunk })?;
        let value = tlv.value();
        match tlv.kind {
            param::STATE_COOKIE => init.cookie = Some(detach(value, datagram_len)),
            param::SUPPORTED_EXTENSIONS => {
                let room = MAX_SUPPORTED_EXTENSIONS.saturating_sub(init.extensions.len());
                init.extensions
                    .extend_from_slice(&value[..value.len().min(room)]);
            }
            param::COOKIE_PRESERVATIVE => {
                if value.len() != 4 {
                    return Err(WireError::BadParameter { kind: tlv.kind });
                }
                init.cookie_preservative = Some(be32(&value, 0));
            }
            // In an INIT ACK: what the peer did not recognize of our INIT
            // (the mirror of how an INIT ACK is encoded). An INIT carries
            // none that means anything.
            param::UNRECOGNIZED if ack => report(&mut init, value),
            // Known and of no use to us: we are single-homed over UDP
            // (RFC 6951), negotiate neither ECN nor PR-SCTP, and the address
            // parameters carry nothing the UDP source address does not.
            param::UNRECOGNIZED
            | param::IPV4_ADDRESS
            | param::IPV6_ADDRESS
            | param::SUPPORTED_ADDRESS_TYPES
            | param::HOST_NAME_ADDRESS
            | param::ECN_CAPABLE
            | param::FORWARD_TSN_SUPPORTED => {}
            // Section 3.2.1: the two high bits say whether to go on and
            // whether to report.
            // An INIT ACK's `unrecognized` already holds the peer's report,
            // so unknown parameters of an INIT ACK are never reported there.
            unknown => {
                let report_it = unknown & param::REPORT_BIT != 0;
                let skip = unknown & param::SKIP_BIT != 0;
                if report_it && !ack {
                    report(&mut init, tlv.whole);
                }
                if !skip {
                    break;
                }
            }
        }
    }
    Ok(init)
}

/// SACK (RFC 9260 section 3.3.4); the caller has checked the fixed length.
fn decode_sack(whole: &Bytes) -> Result<Sack, WireError> {
    let gaps = be16(whole, 12);
    let dups = be16(whole, 14);
    let needed = SACK_FIXED_LEN + SACK_ENTRY_LEN * (usize::from(gaps) + usize::from(dups));
    if needed > whole.len() {
        return Err(WireError::SackCounts {
            gaps,
            dups,
            length: length_field(whole.len()),
        });
    }
    let dups_at = SACK_FIXED_LEN + SACK_ENTRY_LEN * usize::from(gaps);
    Ok(Sack {
        cum_tsn_ack: be32(whole, 4),
        a_rwnd: be32(whole, 8),
        gaps: (0..usize::from(gaps).min(MAX_GAP_BLOCKS))
            .map(|i| {
                let at = SACK_FIXED_LEN + SACK_ENTRY_LEN * i;
                GapBlock {
                    start: be16(whole, at),
                    end: be16(whole, at + 2),
                }
            })
            .collect(),
        dups: (0..usize::from(dups).min(MAX_DUP_TSNS))
            .map(|i| be32(whole, dups_at + SACK_ENTRY_LEN * i))
            .collect(),
    })
}

/// The value of the Heartbeat Info parameter that HEARTBEAT and HEARTBEAT ACK
/// carry (RFC 9260 sections 3.3.5, 3.3.6); bytes after it are ignored.
fn decode_heartbeat_info(chunk: u8, whole: &Bytes) -> Result<Bytes, WireError> {
    let bad = WireError::BadHeartbeatInfo { chunk };
    let kind = be16(whole, CHUNK_HEADER_LEN);
    let len = usize::from(be16(whole, CHUNK_HEADER_LEN + 2));
    if kind != param::HEARTBEAT_INFO || len < TLV_HEADER_LEN || CHUNK_HEADER_LEN + len > whole.len()
    {
        return Err(bad);
    }
    Ok(whole.slice(CHUNK_HEADER_LEN + TLV_HEADER_LEN..CHUNK_HEADER_LEN + len))
}

/// The error causes of an ABORT or ERROR (RFC 9260 section 3.3.10).
fn decode_causes(chunk: u8, region: Bytes) -> Result<Vec<ErrorCause>, WireError> {
    let mut causes = Vec::new();
    for tlv in Tlvs::new(region) {
        let tlv = tlv.map_err(|()| WireError::CauseLength { chunk })?;
        if causes.len() < MAX_ERROR_CAUSES {
            causes.push(ErrorCause {
                code: tlv.kind,
                info: tlv.value(),
            });
        }
    }
    Ok(causes)
}

/// One parameter or error cause: both are type (or code), length, value.
#[derive(Debug)]
struct Tlv {
    /// Parameter type or cause code.
    kind: u16,
    /// Header and value, without padding.
    whole: Bytes,
}

impl Tlv {
    /// The value, without header.
    fn value(&self) -> Bytes {
        self.whole.slice(TLV_HEADER_LEN..)
    }
}

/// Walks the parameters or causes that fill `region`, each padded to 4 bytes
/// except, possibly, the last. Yields `Err` once and stops on a bad length.
#[derive(Debug)]
struct Tlvs {
    region: Bytes,
    at: usize,
}

impl Tlvs {
    fn new(region: Bytes) -> Self {
        Tlvs { region, at: 0 }
    }
}

impl Iterator for Tlvs {
    type Item = Result<Tlv, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        let remaining = self.region.len() - self.at;
        if remaining == 0 {
            return None;
        }
        let at = self.at;
        // Whatever happens, this is the last step on a bad length.
        self.at = self.region.len();
        if remaining < TLV_HEADER_LEN {
            return Some(Err(()));
        }
        let len = usize::from(be16(&self.region, at + 2));
        if len < TLV_HEADER_LEN || len > remaining {
            return Some(Err(()));
        }
        self.at = (at + pad4(len)).min(self.region.len());
        Some(Ok(Tlv {
            kind: be16(&self.region, at),
            whole: self.region.slice(at..at + len),
        }))
    }
}

/// A parameter or error cause to encode: type (or code), length, value.
#[derive(Debug, Clone, Copy)]
enum Param<'a> {
    /// Built from a type and a value.
    Tlv(u16, &'a [u8]),
    /// Built from a type and a 32-bit value.
    U32(u16, u32),
    /// A whole parameter reported back as it came (INIT only).
    Raw(&'a [u8]),
}

impl Param<'_> {
    /// Bytes without padding.
    fn len(self) -> usize {
        match self {
            Param::Tlv(_, value) => TLV_HEADER_LEN + value.len(),
            Param::U32(..) => TLV_HEADER_LEN + 4,
            Param::Raw(whole) => whole.len(),
        }
    }

    /// Appends the parameter and its padding.
    fn encode(self, out: &mut BytesMut) {
        match self {
            Param::Tlv(kind, value) => {
                out.put_u16(kind);
                out.put_u16(length_field(self.len()));
                out.put_slice(value);
            }
            Param::U32(kind, value) => {
                out.put_u16(kind);
                out.put_u16(length_field(self.len()));
                out.put_u32(value);
            }
            Param::Raw(whole) => out.put_slice(whole),
        }
        out.put_bytes(0, pad4(self.len()) - self.len());
    }
}

/// The parameters of an INIT (`ack` false) or INIT ACK. The cookie is written
/// whenever present (the association sets it on INIT ACK only); reported
/// parameters come last, so that a "stop processing" one among them is read
/// after everything we understand.
fn init_params(init: &Init, ack: bool) -> impl Iterator<Item = Param<'_>> + '_ {
    let cookie = init
        .cookie
        .as_deref()
        .map(|c| Param::Tlv(param::STATE_COOKIE, c));
    let extensions = (!init.extensions.is_empty())
        .then(|| Param::Tlv(param::SUPPORTED_EXTENSIONS, &init.extensions));
    let preservative = init
        .cookie_preservative
        .map(|ms| Param::U32(param::COOKIE_PRESERVATIVE, ms));
    let unrecognized = init.unrecognized.iter().map(move |p| {
        if ack {
            Param::Tlv(param::UNRECOGNIZED, p)
        } else {
            Param::Raw(p)
        }
    });
    cookie
        .into_iter()
        .chain(extensions)
        .chain(preservative)
        .chain(unrecognized)
}

/// The length field of a list of parameters or causes: each padded except the last.
fn tlv_list_len(lens: impl Iterator<Item = usize>) -> usize {
    let mut total = 0;
    let mut last_pad = 0;
    for len in lens {
        total += pad4(len);
        last_pad = pad4(len) - len;
    }
    total - last_pad
}

impl Chunk {
    /// Bytes this chunk takes on the wire, header and padding to 4 included.
    pub fn encoded_len(&self) -> usize {
        pad4(self.length())
    }

    /// The chunk's length field: header and value, no final padding.
    fn length(&self) -> usize {
        CHUNK_HEADER_LEN
            + match self {
                Chunk::Data(d) => {
                    let header = match d.kind {
                        DataKind::Data => DATA_HEADER_LEN,
                        DataKind::IData => IDATA_HEADER_LEN,
                    };
                    header - CHUNK_HEADER_LEN + d.payload.len()
                }
                Chunk::Init(init) => init_value_len(init, false),
                Chunk::InitAck(init) => init_value_len(init, true),
                Chunk::Sack(s) => {
                    SACK_FIXED_LEN - CHUNK_HEADER_LEN
                        + SACK_ENTRY_LEN * (s.gaps.len() + s.dups.len())
                }
                Chunk::Heartbeat(info) | Chunk::HeartbeatAck(info) => TLV_HEADER_LEN + info.len(),
                Chunk::Abort { causes, .. } | Chunk::Error(causes) => {
                    tlv_list_len(causes.iter().map(|c| TLV_HEADER_LEN + c.info.len()))
                }
                Chunk::Shutdown { .. } => SHUTDOWN_LEN - CHUNK_HEADER_LEN,
                Chunk::ShutdownAck | Chunk::ShutdownComplete { .. } | Chunk::CookieAck => 0,
                Chunk::CookieEcho(cookie) => cookie.len(),
                Chunk::Pad(n) => usize::from(*n),
                Chunk::Unknown { value, .. } => value.len(),
            }
    }

    /// Fails if the chunk's length does not fit its length field. Every
    /// length inside a chunk (parameters, causes, SACK counts) is shorter
    /// than the chunk's, so this is the one check encoding needs.
    fn check_length(&self) -> Result<usize, EncodeError> {
        let length = self.length();
        if length > usize::from(u16::MAX) {
            return Err(EncodeError::ChunkTooLong {
                kind: chunk_kind(self),
                length,
            });
        }
        Ok(length)
    }

    /// Appends the chunk with its padding; or, if it is too long to encode,
    /// appends nothing.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let length = self.check_length()?;
        let start = out.len();
        out.put_u8(chunk_kind(self));
        out.put_u8(self.flags());
        out.put_u16(length_field(length));
        match self {
            Chunk::Data(d) => encode_data(d, out),
            Chunk::Init(init) | Chunk::InitAck(init) => {
                let ack = matches!(self, Chunk::InitAck(_));
                out.put_u32(init.initiate_tag);
                out.put_u32(init.a_rwnd);
                out.put_u16(init.outbound_streams);
                out.put_u16(init.inbound_streams);
                out.put_u32(init.initial_tsn);
                for p in init_params(init, ack) {
                    p.encode(out);
                }
            }
            Chunk::Sack(s) => {
                out.put_u32(s.cum_tsn_ack);
                out.put_u32(s.a_rwnd);
                out.put_u16(length_field(s.gaps.len()));
                out.put_u16(length_field(s.dups.len()));
                for g in &s.gaps {
                    out.put_u16(g.start);
                    out.put_u16(g.end);
                }
                for &d in &s.dups {
                    out.put_u32(d);
                }
            }
            Chunk::Heartbeat(info) | Chunk::HeartbeatAck(info) => {
                Param::Tlv(param::HEARTBEAT_INFO, info).encode(out);
            }
            Chunk::Abort { causes, .. } | Chunk::Error(causes) => {
                for c in causes {
                    Param::Tlv(c.code, &c.info).encode(out);
                }
            }
            Chunk::Shutdown { cum_tsn_ack } => out.put_u32(*cum_tsn_ack),
            Chunk::ShutdownAck | Chunk::ShutdownComplete { .. } | Chunk::CookieAck => {}
            Chunk::CookieEcho(cookie) => out.put_slice(cookie),
            Chunk::Pad(n) => out.put_bytes(0, usize::from(*n)),
            Chunk::Unknown { value, .. } => out.put_slice(value),
        }
        // Parameters and causes were padded each; what is left is the
        // chunk's own padding (section 3.2: the sender pads with zeros).
        let end = start + pad4(length);
        debug_assert!(out.len() <= end, "a chunk wrote past its length");
        out.put_bytes(0, end - out.len());
        Ok(())
    }

    /// The flags byte for this chunk.
    fn flags(&self) -> u8 {
        let bit = |set: bool, bit: u8| if set { bit } else { 0 };
        match self {
            Chunk::Data(d) => {
                bit(d.ending, flag::ENDING)
                    | bit(d.beginning, flag::BEGINNING)
                    | bit(d.unordered, flag::UNORDERED)
                    | bit(d.immediate, flag::IMMEDIATE)
            }
            Chunk::Abort { reflected, .. } | Chunk::ShutdownComplete { reflected } => {
                bit(*reflected, flag::REFLECTED)
            }
            Chunk::Unknown { flags, .. } => *flags,
            _ => 0,
        }
    }
}

/// The value length of an INIT or INIT ACK: fixed fields and parameters.
fn init_value_len(init: &Init, ack: bool) -> usize {
    INIT_FIXED_LEN - CHUNK_HEADER_LEN + tlv_list_len(init_params(init, ack).map(Param::len))
}

/// The fields of DATA or I-DATA after the chunk header.
fn encode_data(d: &DataChunk, out: &mut BytesMut) {
    out.put_u32(d.tsn);
    out.put_u16(d.stream);
    match d.kind {
        DataKind::Data => {
            // The SSN is 16 bits on the wire; `mid` holds it widened.
            out.put_u16(d.mid as u16);
            out.put_u32(d.ppid);
        }
        DataKind::IData => {
            out.put_u16(0);
            out.put_u32(d.mid);
            out.put_u32(if d.beginning { d.ppid } else { d.fsn });
        }
    }
    out.put_slice(&d.payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::cause;
    use proptest::prelude::*;

    /// A sealed datagram: a common header (ports 5000, tag 0x01020304) and `chunks`.
    fn datagram(chunks: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        encode_header(&mut out, 5000, 5000, 0x0102_0304);
        out.put_slice(chunks);
        seal_checksum(&mut out);
        out.freeze()
    }

    /// Encodes one chunk alone.
    fn chunk_bytes(chunk: &Chunk) -> Vec<u8> {
        let mut out = BytesMut::new();
        chunk.encode(&mut out).expect("encodes");
        assert_eq!(out.len(), chunk.encoded_len(), "encoded_len of {chunk:?}");
        out.to_vec()
    }

    /// Decodes a datagram of one chunk.
    fn decode_one(chunk: &[u8]) -> Result<Chunk, WireError> {
        let mut packet = Packet::decode(datagram(chunk))?;
        assert_eq!(packet.chunks.len(), 1);
        Ok(packet.chunks.remove(0))
    }

    /// Encodes `chunk`, compares with `wire`, and decodes `wire` back to `chunk`.
    fn assert_wire(chunk: Chunk, wire: &[u8]) {
        assert_eq!(chunk_bytes(&chunk), wire);
        assert_eq!(decode_one(wire), Ok(chunk));
    }

    fn data(kind: DataKind) -> DataChunk {
        DataChunk {
            kind,
            unordered: false,
            beginning: false,
            ending: false,
            immediate: false,
            tsn: 0,
            stream: 0,
            mid: 0,
            fsn: 0,
            ppid: 0,
            payload: Bytes::new(),
        }
    }

    #[test]
    fn crc32c_is_the_castagnoli_crc() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn checksum_of_a_known_packet() {
        // COOKIE ACK from 5000 to 5000, tag 0x01020304; the checksum was
        // computed by an independent bitwise CRC32c and is stored LSB first.
        let p = datagram(&[11, 0, 0, 4]);
        assert_eq!(
            &p[..],
            &[
                0x13, 0x88, 0x13, 0x88, 1, 2, 3, 4, 0xee, 0x5a, 0x51, 0xa5, 11, 0, 0, 4
            ]
        );
        let packet = Packet {
            src_port: 5000,
            dst_port: 5000,
            vtag: 0x0102_0304,
            chunks: vec![Chunk::CookieAck],
        };
        let mut out = BytesMut::new();
        packet.encode(&mut out).expect("encodes");
        assert_eq!(&out[..], &p[..]);
        assert_eq!(packet.encoded_len(), p.len());
        assert_eq!(Packet::decode(p), Ok(packet));
    }

    #[test]
    fn peek_reads_ports_and_tag_only() {
        assert_eq!(
            peek_header(&[0, 1, 0, 2, 0, 0, 0, 3, 9, 9, 9, 9]),
            Some((1, 2, 3))
        );
        assert_eq!(peek_header(&[0; 11]), None);
    }

    #[test]
    fn data_chunk_bytes() {
        let d = DataChunk {
            beginning: true,
            ending: true,
            immediate: true,
            tsn: 0x0102_0304,
            stream: 5,
            mid: 6,
            ppid: 51,
            payload: Bytes::from_static(b"abcde"),
            ..data(DataKind::Data)
        };
        #[rustfmt::skip]
        let wire = [
            0, 0x0b, 0, 21,
            1, 2, 3, 4,
            0, 5, 0, 6,
            0, 0, 0, 51,
            b'a', b'b', b'c', b'd', b'e', 0, 0, 0,
        ];
        assert_wire(Chunk::Data(d), &wire);
    }

    #[test]
    fn idata_first_fragment_carries_the_ppid() {
        let d = DataChunk {
            beginning: true,
            tsn: 7,
            stream: 1,
            mid: 0x0a0b_0c0d,
            ppid: 53,
            payload: Bytes::from_static(b"xyz"),
            ..data(DataKind::IData)
        };
        #[rustfmt::skip]
        let wire = [
            64, 0x02, 0, 23,
            0, 0, 0, 7,
            0, 1, 0, 0,
            0x0a, 0x0b, 0x0c, 0x0d,
            0, 0, 0, 53,
            b'x', b'y', b'z', 0,
        ];
        assert_wire(Chunk::Data(d), &wire);
    }

    #[test]
    fn idata_later_fragment_carries_the_fsn() {
        let d = DataChunk {
            ending: true,
            unordered: true,
            tsn: 8,
            stream: 1,
            mid: 0x0a0b_0c0d,
            fsn: 2,
            payload: Bytes::from_static(b"wxyz"),
            ..data(DataKind::IData)
        };
        #[rustfmt::skip]
        let wire = [
            64, 0x05, 0, 24,
            0, 0, 0, 8,
            0, 1, 0, 0,
            0x0a, 0x0b, 0x0c, 0x0d,
            0, 0, 0, 2,
            b'w', b'x', b'y', b'z',
        ];
        assert_wire(Chunk::Data(d), &wire);
    }

    #[test]
    fn data_without_user_data_decodes_empty() {
        let wire = [0, 0x03, 0, 16, 0, 0, 0, 9, 0, 1, 0, 2, 0, 0, 0, 0];
        let Ok(Chunk::Data(d)) = decode_one(&wire) else {
            panic!("DATA without user data must decode");
        };
        assert!(d.payload.is_empty());
        assert_eq!(d.tsn, 9);
    }

    #[test]
    fn init_with_parameters() {
        let init = Init {
            initiate_tag: 0xdead_beef,
            a_rwnd: 0x0002_0000,
            outbound_streams: 10,
            inbound_streams: 0xffff,
            initial_tsn: 1,
            extensions: vec![kind::I_DATA, 0xc0],
            cookie_preservative: Some(1000),
            ..Init::default()
        };
        #[rustfmt::skip]
        let wire = [
            1, 0, 0, 36,
            0xde, 0xad, 0xbe, 0xef,
            0, 2, 0, 0,
            0, 10, 0xff, 0xff,
            0, 0, 0, 1,
            0x80, 0x08, 0, 6, 64, 0xc0, 0, 0,
            0, 9, 0, 8, 0, 0, 0x03, 0xe8,
        ];
        assert!(init.supports_idata());
        assert_wire(Chunk::Init(init), &wire);
    }

    #[test]
    fn a_chunk_longer_than_its_length_field_is_refused_and_writes_nothing() {
        let long = Chunk::CookieEcho(Bytes::from(vec![0; 65_532]));
        let packet = Packet {
            src_port: 1,
            dst_port: 2,
            vtag: 3,
            chunks: vec![Chunk::CookieAck, long.clone()],
        };
        let mut out = BytesMut::from(&b"kept"[..]);
        assert_eq!(
            packet.encode(&mut out),
            Err(EncodeError::ChunkTooLong {
                kind: kind::COOKIE_ECHO,
                length: 65_536
            })
        );
        assert_eq!(long.encode(&mut out), packet.encode(&mut out));
        assert_eq!(&out[..], b"kept");
        // One byte less fits.
        let fits = Chunk::CookieEcho(Bytes::from(vec![0; 65_531]));
        fits.encode(&mut out).expect("65,535 bytes fit");
        assert_eq!(out.len(), 4 + fits.encoded_len());
    }

    #[test]
    fn decoding_keeps_only_the_reports_that_fit() {
        // 16 reportable parameters of 100 bytes: 104 each as reported, so
        // MAX_REPORT_LEN / 104 of them are kept.
        let params: Vec<Bytes> = (0..16u16)
            .map(|i| {
                let mut p = BytesMut::new();
                Param::Tlv(0xc100 | i, &[0; 96]).encode(&mut p);
                p.freeze()
            })
            .collect();
        let init = Init {
            initiate_tag: 1,
            outbound_streams: 1,
            inbound_streams: 1,
            unrecognized: params.clone(),
            ..Init::default()
        };
        let mut out = BytesMut::new();
        Chunk::Init(init).encode(&mut out).expect("encodes");
        let decoded = decode_one(&out).expect("decodes");
        let Chunk::Init(decoded) = decoded else {
            panic!("not an INIT: {decoded:?}");
        };
        assert_eq!(decoded.unrecognized, params[..MAX_REPORT_LEN / 104]);
    }

    #[test]
    fn init_ack_length_excludes_the_last_parameters_padding() {
        let ack = Init {
            initiate_tag: 1,
            a_rwnd: 2,
            outbound_streams: 3,
            inbound_streams: 4,
            initial_tsn: 5,
            cookie: Some(Bytes::from_static(&[0xc1, 0xc2, 0xc3, 0xc4, 0xc5])),
            extensions: vec![64],
            unrecognized: vec![Bytes::from_static(&[0xc1, 0x23, 0, 5, 0xaa])],
            ..Init::default()
        };
        #[rustfmt::skip]
        let wire = [
            2, 0, 0, 49,
            0, 0, 0, 1,
            0, 0, 0, 2,
            0, 3, 0, 4,
            0, 0, 0, 5,
            0, 7, 0, 9, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0, 0, 0,
            0x80, 0x08, 0, 5, 64, 0, 0, 0,
            0, 8, 0, 9, 0xc1, 0x23, 0, 5, 0xaa, 0, 0, 0,
        ];
        assert_wire(Chunk::InitAck(ack), &wire);
    }

    #[test]
    fn init_unknown_parameters_follow_their_high_bits() {
        #[rustfmt::skip]
        let params = [
            0, 5, 0, 8, 10, 0, 0, 1,             // IPv4: skipped silently
            0xc1, 0x23, 0, 5, 0xaa, 0, 0, 0,     // 11: skip and report
            0x81, 0x24, 0, 4,                    // 10: skip
            0x80, 0x00, 0, 4,                    // ECN: skipped silently
            0x41, 0x25, 0, 6, 0xbb, 0xcc, 0, 0,  // 01: stop and report
            0, 9, 0, 8, 0, 0, 0x03, 0xe8,        // never read
        ];
        let mut wire = vec![1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 3, 0, 4, 0, 0, 0, 5];
        wire.extend_from_slice(&params);
        wire[3] = wire.len() as u8;
        let Ok(Chunk::Init(init)) = decode_one(&wire) else {
            panic!("INIT must decode");
        };
        assert_eq!(
            init.unrecognized,
            vec![
                Bytes::from_static(&[0xc1, 0x23, 0, 5, 0xaa]),
                Bytes::from_static(&[0x41, 0x25, 0, 6, 0xbb, 0xcc]),
            ]
        );
        assert_eq!(init.cookie_preservative, None);

        // 00: stop without reporting.
        let mut wire = vec![1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 3, 0, 4, 0, 0, 0, 5];
        wire.extend_from_slice(&[0x01, 0x26, 0, 4, 0x80, 0x08, 0, 5, 64, 0, 0, 0]);
        wire[3] = wire.len() as u8;
        let Ok(Chunk::Init(init)) = decode_one(&wire) else {
            panic!("INIT must decode");
        };
        assert!(init.unrecognized.is_empty());
        assert!(init.extensions.is_empty());
    }

    #[test]
    fn sack_with_gaps_and_dups() {
        let sack = Sack {
            cum_tsn_ack: 100,
            a_rwnd: 0x1000,
            gaps: vec![GapBlock { start: 2, end: 3 }, GapBlock { start: 5, end: 5 }],
            dups: vec![99, 0x0102_0304],
        };
        #[rustfmt::skip]
        let wire = [
            3, 0, 0, 32,
            0, 0, 0, 100,
            0, 0, 0x10, 0,
            0, 2, 0, 2,
            0, 2, 0, 3,
            0, 5, 0, 5,
            0, 0, 0, 99,
            1, 2, 3, 4,
        ];
        assert_wire(Chunk::Sack(sack), &wire);
    }

    #[test]
    fn sack_lists_are_capped() {
        let gaps = u16::try_from(MAX_GAP_BLOCKS + 1).expect("small");
        let mut wire = vec![3, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2];
        wire.extend_from_slice(&gaps.to_be_bytes());
        wire.extend_from_slice(&[0, 1]);
        for i in 0..=MAX_GAP_BLOCKS {
            let i = u16::try_from(i).expect("small");
            wire.extend_from_slice(&(2 * i + 1).to_be_bytes());
            wire.extend_from_slice(&(2 * i + 1).to_be_bytes());
        }
        wire.extend_from_slice(&[0, 0, 0, 42]);
        let len = u16::try_from(wire.len()).expect("small");
        wire[2..4].copy_from_slice(&len.to_be_bytes());
        let Ok(Chunk::Sack(sack)) = decode_one(&wire) else {
            panic!("SACK must decode");
        };
        assert_eq!(sack.gaps.len(), MAX_GAP_BLOCKS);
        assert_eq!(sack.dups, vec![42], "dups are found after every gap block");
    }

    #[test]
    fn abort_with_causes() {
        let abort = Chunk::Abort {
            reflected: true,
            causes: vec![
                ErrorCause::new(cause::USER_ABORT, &b"bye"[..]),
                ErrorCause::new(cause::NO_USER_DATA, 7u32.to_be_bytes().to_vec()),
            ],
        };
        #[rustfmt::skip]
        let wire = [
            6, 1, 0, 20,
            0, 12, 0, 7, b'b', b'y', b'e', 0,
            0, 9, 0, 8, 0, 0, 0, 7,
        ];
        assert_wire(abort, &wire);

        // The last cause's padding is outside the chunk length.
        let error = Chunk::Error(vec![
            ErrorCause::new(cause::NO_USER_DATA, 7u32.to_be_bytes().to_vec()),
            ErrorCause::new(cause::USER_ABORT, &b"bye"[..]),
        ]);
        #[rustfmt::skip]
        let wire = [
            9, 0, 0, 19,
            0, 9, 0, 8, 0, 0, 0, 7,
            0, 12, 0, 7, b'b', b'y', b'e', 0,
        ];
        assert_wire(error, &wire);
    }

    #[test]
    fn small_chunks() {
        assert_wire(
            Chunk::Heartbeat(Bytes::from_static(&[1, 2, 3, 4, 5])),
            &[4, 0, 0, 13, 0, 1, 0, 9, 1, 2, 3, 4, 5, 0, 0, 0],
        );
        assert_wire(
            Chunk::HeartbeatAck(Bytes::from_static(&[1, 2, 3, 4])),
            &[5, 0, 0, 12, 0, 1, 0, 8, 1, 2, 3, 4],
        );
        assert_wire(
            Chunk::Shutdown {
                cum_tsn_ack: 0x0a0b_0c0d,
            },
            &[7, 0, 0, 8, 0x0a, 0x0b, 0x0c, 0x0d],
        );
        assert_wire(Chunk::ShutdownAck, &[8, 0, 0, 4]);
        assert_wire(Chunk::ShutdownComplete { reflected: true }, &[14, 1, 0, 4]);
        assert_wire(Chunk::ShutdownComplete { reflected: false }, &[14, 0, 0, 4]);
        assert_wire(
            Chunk::CookieEcho(Bytes::from_static(&[9, 8, 7])),
            &[10, 0, 0, 7, 9, 8, 7, 0],
        );
        assert_wire(Chunk::CookieAck, &[11, 0, 0, 4]);
        assert_wire(Chunk::Pad(3), &[132, 0, 0, 7, 0, 0, 0, 0]);
        assert_wire(
            Chunk::Unknown {
                kind: 192,
                flags: 0xa5,
                value: Bytes::from_static(&[1, 2, 3, 4, 5, 6]),
            },
            &[192, 0xa5, 0, 10, 1, 2, 3, 4, 5, 6, 0, 0],
        );
    }

    #[test]
    fn a_missing_final_pad_is_tolerated() {
        let wire = [10, 0, 0, 7, 9, 8, 7];
        assert_eq!(
            decode_one(&wire),
            Ok(Chunk::CookieEcho(Bytes::from_static(&[9, 8, 7])))
        );
        let mut two = vec![11, 0, 0, 4];
        two.extend_from_slice(&[10, 0, 0, 5, 9, 0]);
        let packet = Packet::decode(datagram(&two)).expect("valid");
        assert_eq!(packet.chunks.len(), 2);
    }

    #[test]
    fn malformed_packets_give_their_error() {
        use WireError::*;
        let dec = |chunks: &[u8]| Packet::decode(datagram(chunks)).map(|_| ());
        assert_eq!(
            Packet::decode(Bytes::from_static(&[0; 11])),
            Err(TooShort { len: 11 })
        );
        let mut corrupt = datagram(&[11, 0, 0, 4]).to_vec();
        corrupt[13] = 1;
        assert!(matches!(
            Packet::decode(corrupt.into()),
            Err(BadChecksum {
                found: 0xa551_5aee,
                ..
            })
        ));
        assert_eq!(
            dec(&[11, 0, 0, 4, 0, 0]),
            Err(TruncatedChunkHeader { remaining: 2 })
        );
        assert_eq!(
            dec(&[11, 0, 0, 3]),
            Err(ChunkLengthBelowHeader {
                kind: 11,
                length: 3
            })
        );
        assert_eq!(
            dec(&[10, 0, 0, 9, 1, 2, 3, 4]),
            Err(ChunkPastEnd {
                kind: 10,
                length: 9,
                remaining: 8
            })
        );
        let short = |kind: u8, length: u8| {
            let mut c = vec![kind, 0, 0, length];
            c.resize(usize::from(length), 0);
            dec(&c)
        };
        for (kind, min) in [
            (0, 16),
            (64, 20),
            (1, 20),
            (2, 20),
            (3, 16),
            (7, 8),
            (4, 8),
            (5, 8),
        ] {
            assert_eq!(
                short(kind, min - 1),
                Err(ChunkTooShort {
                    kind,
                    length: u16::from(min - 1)
                }),
                "chunk type {kind}"
            );
        }
        assert_eq!(
            dec(&[3, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1]),
            Err(SackCounts {
                gaps: 1,
                dups: 1,
                length: 20
            })
        );
        let init = |params: &[u8]| {
            let mut c = vec![1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 3, 0, 4, 0, 0, 0, 5];
            c.extend_from_slice(params);
            c[3] = c.len() as u8;
            dec(&c)
        };
        assert_eq!(init(&[0x80, 0x08, 0, 3]), Err(ParameterLength { chunk: 1 }));
        assert_eq!(
            init(&[0x80, 0x08, 0, 9, 1, 2, 3, 4]),
            Err(ParameterLength { chunk: 1 })
        );
        assert_eq!(init(&[0x80, 0x08]), Err(ParameterLength { chunk: 1 }));
        assert_eq!(
            init(&[0, 9, 0, 6, 0, 0, 0, 0]),
            Err(BadParameter { kind: 9 })
        );
        assert_eq!(
            dec(&[6, 0, 0, 8, 0, 1, 0, 2]),
            Err(CauseLength { chunk: 6 })
        );
        assert_eq!(
            dec(&[9, 0, 0, 8, 0, 1, 0, 5]),
            Err(CauseLength { chunk: 9 })
        );
        assert_eq!(
            dec(&[4, 0, 0, 8, 0, 2, 0, 4]),
            Err(BadHeartbeatInfo { chunk: 4 })
        );
        assert_eq!(
            dec(&[5, 0, 0, 8, 0, 1, 0, 5]),
            Err(BadHeartbeatInfo { chunk: 5 })
        );
        let mut init_and_more = vec![1, 0, 0, 20];
        init_and_more.resize(20, 0);
        init_and_more.extend_from_slice(&[11, 0, 0, 4]);
        assert_eq!(dec(&init_and_more), Err(NotAlone { kind: 1 }));
        assert_eq!(dec(&[11, 0, 0, 4, 14, 0, 0, 4]), Err(NotAlone { kind: 14 }));
    }

    fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    fn data_chunk() -> impl Strategy<Value = Chunk> {
        (
            any::<bool>(),
            any::<[bool; 4]>(),
            any::<(u32, u16, u32, u32, u32)>(),
            bytes(24),
        )
            .prop_map(
                |(idata, [u, b, e, i], (tsn, stream, mid, fsn, ppid), payload)| {
                    // Fields the wire does not carry for this kind are zero.
                    let (kind, mid, fsn, ppid) = match (idata, b) {
                        (false, _) => (DataKind::Data, mid & 0xffff, 0, ppid),
                        (true, true) => (DataKind::IData, mid, 0, ppid),
                        (true, false) => (DataKind::IData, mid, fsn, 0),
                    };
                    Chunk::Data(DataChunk {
                        kind,
                        unordered: u,
                        beginning: b,
                        ending: e,
                        immediate: i,
                        tsn,
                        stream,
                        mid,
                        fsn,
                        ppid,
                        payload,
                    })
                },
            )
    }

    /// A whole parameter of unknown type `high | low`.
    fn unknown_param(high: u16) -> impl Strategy<Value = Bytes> {
        (1u16..0x3fff, bytes(9)).prop_map(move |(low, value)| {
            let mut p = BytesMut::new();
            Param::Tlv(high | low, &value).encode(&mut p);
            p.truncate(TLV_HEADER_LEN + value.len());
            p.freeze()
        })
    }

    fn init(ack: bool) -> impl Strategy<Value = Init> {
        let unrecognized = if ack {
            proptest::collection::vec(bytes(12), 0..3).boxed()
        } else {
            // What decoding an INIT reports: skip-and-report parameters, then
            // at most one stop-and-report parameter.
            (
                proptest::collection::vec(unknown_param(0xc000), 0..3),
                proptest::option::of(unknown_param(0x4000)),
            )
                .prop_map(|(mut v, stop)| {
                    v.extend(stop);
                    v
                })
                .boxed()
        };
        (
            any::<(u32, u32, u16, u16, u32)>(),
            proptest::option::of(bytes(40)),
            proptest::collection::vec(any::<u8>(), 0..5),
            proptest::option::of(any::<u32>()),
            unrecognized,
        )
            .prop_map(
                |((tag, a_rwnd, os, mis, tsn), cookie, extensions, pres, unrecognized)| Init {
                    initiate_tag: tag,
                    a_rwnd,
                    outbound_streams: os,
                    inbound_streams: mis,
                    initial_tsn: tsn,
                    cookie,
                    extensions,
                    cookie_preservative: pres,
                    unrecognized,
                },
            )
    }

    fn causes() -> impl Strategy<Value = Vec<ErrorCause>> {
        proptest::collection::vec(
            (any::<u16>(), bytes(12)).prop_map(|(code, info)| ErrorCause { code, info }),
            0..4,
        )
    }

    const KNOWN: [u8; 15] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 64, 132];

    /// Chunks that may share a packet.
    fn bundleable_chunk() -> impl Strategy<Value = Chunk> {
        prop_oneof![
            data_chunk(),
            (
                any::<(u32, u32)>(),
                proptest::collection::vec(any::<(u16, u16)>(), 0..4),
                proptest::collection::vec(any::<u32>(), 0..4)
            )
                .prop_map(|((cum, a_rwnd), gaps, dups)| Chunk::Sack(Sack {
                    cum_tsn_ack: cum,
                    a_rwnd,
                    gaps: gaps
                        .into_iter()
                        .map(|(start, end)| GapBlock { start, end })
                        .collect(),
                    dups,
                })),
            bytes(20).prop_map(Chunk::Heartbeat),
            bytes(20).prop_map(Chunk::HeartbeatAck),
            (any::<bool>(), causes())
                .prop_map(|(reflected, causes)| Chunk::Abort { reflected, causes }),
            any::<u32>().prop_map(|cum_tsn_ack| Chunk::Shutdown { cum_tsn_ack }),
            Just(Chunk::ShutdownAck),
            causes().prop_map(Chunk::Error),
            bytes(40).prop_map(Chunk::CookieEcho),
            Just(Chunk::CookieAck),
            (0u16..64).prop_map(Chunk::Pad),
            (
                any::<u8>().prop_filter("unknown type", |k| !KNOWN.contains(k)),
                any::<u8>(),
                bytes(20)
            )
                .prop_map(|(kind, flags, value)| Chunk::Unknown { kind, flags, value }),
        ]
    }

    fn packet() -> impl Strategy<Value = Packet> {
        let chunks = prop_oneof![
            init(false).prop_map(|i| vec![Chunk::Init(i)]),
            init(true).prop_map(|i| vec![Chunk::InitAck(i)]),
            any::<bool>().prop_map(|reflected| vec![Chunk::ShutdownComplete { reflected }]),
            proptest::collection::vec(bundleable_chunk(), 0..6),
        ];
        (any::<(u16, u16, u32)>(), chunks).prop_map(|((src_port, dst_port, vtag), chunks)| Packet {
            src_port,
            dst_port,
            vtag,
            chunks,
        })
    }

    proptest! {
        #[test]
        fn packets_round_trip(packet in packet()) {
            let mut out = BytesMut::from(&b"prefix"[..]);
            packet.encode(&mut out).expect("encodes");
            prop_assert_eq!(out.len(), 6 + packet.encoded_len());
            prop_assert_eq!(out.len() % 4, 6 % 4);
            let wire = out.freeze().slice(6..);
            prop_assert_eq!(Packet::decode(wire), Ok(packet));
        }

        /// Short datagrams, and ones near the largest UDP payload over IPv4
        /// (65,507 bytes): a peer's can be that large, and length fields
        /// overflow only there.
        #[test]
        fn arbitrary_bytes_never_panic(mut raw in prop_oneof![
            3 => proptest::collection::vec(any::<u8>(), 0..200),
            1 => proptest::collection::vec(any::<u8>(), 60_000..=65_507),
        ]) {
            if raw.len() >= COMMON_HEADER_LEN {
                seal_checksum(&mut raw);
            }
            if let Ok(packet) = Packet::decode(raw.into()) {
                let mut out = BytesMut::new();
                packet.encode(&mut out).expect("encodes");
                prop_assert_eq!(Packet::decode(out.freeze()), Ok(packet));
            }
        }
    }

    /// Seed packets for the `sctp_packet` fuzz target.
    fn fuzz_seeds() -> Vec<(&'static str, Packet)> {
        let p = |chunks| Packet {
            src_port: 5000,
            dst_port: 5000,
            vtag: 0x0102_0304,
            chunks,
        };
        let init = Init {
            initiate_tag: 0xdead_beef,
            a_rwnd: 1 << 17,
            outbound_streams: 10,
            inbound_streams: 10,
            initial_tsn: 1,
            extensions: vec![kind::I_DATA],
            cookie_preservative: Some(1000),
            unrecognized: vec![Bytes::from_static(&[0xc1, 0x23, 0, 5, 0xaa])],
            ..Init::default()
        };
        let ack = Init {
            cookie: Some(Bytes::from_static(&[7; 40])),
            ..init.clone()
        };
        let payload = Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n");
        vec![
            ("init", p(vec![Chunk::Init(init)])),
            ("init_ack", p(vec![Chunk::InitAck(ack)])),
            (
                "cookie_echo_data",
                p(vec![
                    Chunk::CookieEcho(Bytes::from_static(&[7; 40])),
                    Chunk::Data(DataChunk {
                        beginning: true,
                        ending: true,
                        tsn: 1,
                        ppid: 51,
                        payload: payload.clone(),
                        ..data(DataKind::Data)
                    }),
                ]),
            ),
            (
                "idata_fragments",
                p(vec![
                    Chunk::Data(DataChunk {
                        beginning: true,
                        tsn: 2,
                        stream: 3,
                        mid: 4,
                        ppid: 53,
                        payload: payload.clone(),
                        ..data(DataKind::IData)
                    }),
                    Chunk::Data(DataChunk {
                        ending: true,
                        immediate: true,
                        tsn: 3,
                        stream: 3,
                        mid: 4,
                        fsn: 1,
                        payload,
                        ..data(DataKind::IData)
                    }),
                ]),
            ),
            (
                "sack",
                p(vec![Chunk::Sack(Sack {
                    cum_tsn_ack: 100,
                    a_rwnd: 4096,
                    gaps: vec![GapBlock { start: 2, end: 3 }],
                    dups: vec![99],
                })]),
            ),
            (
                "heartbeat_pad",
                p(vec![
                    Chunk::Heartbeat(Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8])),
                    Chunk::Pad(100),
                ]),
            ),
            (
                "abort",
                p(vec![Chunk::Abort {
                    reflected: true,
                    causes: vec![ErrorCause::new(cause::PROTOCOL_VIOLATION, &b"why"[..])],
                }]),
            ),
            (
                "shutdown",
                p(vec![
                    Chunk::Shutdown { cum_tsn_ack: 7 },
                    Chunk::ShutdownAck,
                    Chunk::Unknown {
                        kind: 192,
                        flags: 0,
                        value: Bytes::from_static(&[0, 0, 0, 9]),
                    },
                ]),
            ),
        ]
    }

    #[test]
    fn fuzz_seeds_round_trip() {
        for (name, packet) in fuzz_seeds() {
            let mut out = BytesMut::new();
            packet.encode(&mut out).expect("encodes");
            assert_eq!(Packet::decode(out.freeze()), Ok(packet), "{name}");
        }
    }

    /// Rewrites the fuzz corpus seeds: `cargo test -p sctp --lib
    /// write_fuzz_seeds -- --ignored`.
    #[test]
    #[ignore = "writes files into the fuzz crate"]
    fn write_fuzz_seeds() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/sctp_packet");
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        for (name, packet) in fuzz_seeds() {
            let mut out = BytesMut::new();
            packet.encode(&mut out).expect("encodes");
            std::fs::write(dir.join(name), &out).expect("write a seed");
        }
    }
}
