//! Full-size seeds for the `sctp_packet` fuzz target, written at the start
//! of every fuzz run (`cargo xtask test`, or `cargo xtask fuzz-seeds` by
//! hand) instead of being committed as binary files.
//!
//! A peer can send an SCTP packet as large as a UDP datagram over IPv4
//! carries, 65,507 bytes, and the worst faults hide there (an INIT whose
//! reports overflowed a chunk length once stopped a listener). The committed
//! corpus (fuzz/corpus/sctp_packet) holds small packets only; these seeds put
//! the fuzzer next to the limits from its first input:
//!
//! - `full-init-params`: an INIT of 65,504 bytes with 8,182 small
//!   parameters of every handling kind (skip, skip and report, an address);
//! - `full-data-bundle`, `full-idata-bundle`: DATA and I-DATA chunks
//!   bundled into exactly 65,507 bytes (the last chunk without its final pad,
//!   which the decoder forgives);
//! - `full-sack`: a SACK of 65,504 bytes with 8,192 gap blocks and 8,177
//!   duplicate TSNs (the decoder reads 256 of each and skips the rest).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use bytes::{Bytes, BytesMut};
use sctp::chunk::{Chunk, DataChunk, DataKind, GapBlock, Init, Packet, Sack, kind};
use sctp::wire::seal_checksum;

/// Bytes of the largest SCTP packet one UDP datagram over IPv4 carries:
/// 65,535 less 20 bytes of IP and 8 of UDP header.
pub(crate) const MAX_UDP_PAYLOAD: usize = 65_507;

/// The largest packet of whole padded chunks that fits: a multiple of 4.
const MAX_PADDED: usize = MAX_UDP_PAYLOAD & !3;

/// Where `cargo xtask` writes the seeds of fuzz target `target`: under the
/// fuzz crate's (ignored) target directory, passed to libFuzzer as a second
/// corpus directory so its findings still go to fuzz/corpus/TARGET.
pub(crate) fn dir(root: &Path, target: &str) -> PathBuf {
    root.join("fuzz/target/seeds").join(target)
}

/// Writes the seeds of every target that has some; returns each target's
/// seed directory.
pub(crate) fn write(root: &Path) -> Result<Vec<(&'static str, PathBuf)>> {
    let mut written = Vec::new();
    for (target, seeds) in [("sctp_packet", sctp_packet_seeds())] {
        let dir = dir(root, target);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, bytes) in seeds {
            let path = dir.join(name);
            std::fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
        }
        written.push((target, dir));
    }
    Ok(written)
}

/// `cargo xtask fuzz-seeds`: writes the seeds and says how to use them.
pub(crate) fn run() -> Result<()> {
    let root = crate::cmd::workspace_root();
    for (target, dir) in write(&root)? {
        println!(
            "{target}: seeds in {}; by hand: cargo +nightly fuzz run {target} corpus/{target} {} -- -max_len={MAX_UDP_PAYLOAD} (in fuzz/)",
            dir.display(),
            dir.strip_prefix(root.join("fuzz"))
                .unwrap_or(&dir)
                .display()
        );
    }
    Ok(())
}

/// The seeds, by file name.
pub(crate) fn sctp_packet_seeds() -> Vec<(&'static str, Bytes)> {
    vec![
        ("full-init-params", init_with_many_params()),
        ("full-data-bundle", data_bundle(DataKind::Data)),
        ("full-idata-bundle", data_bundle(DataKind::IData)),
        ("full-sack", sack_with_many_reports()),
    ]
}

fn packet(vtag: u32, chunks: Vec<Chunk>) -> Packet {
    Packet {
        src_port: 9899,
        dst_port: 9899,
        vtag,
        chunks,
    }
}

fn encode(packet: &Packet) -> BytesMut {
    let mut out = BytesMut::with_capacity(packet.encoded_len());
    // Built here from sizes chosen to fit: failing is a bug of this file.
    packet
        .encode(&mut out)
        .expect("a seed fits its length fields");
    out
}

/// An INIT of [`MAX_PADDED`] bytes: the fixed part, Supported Extensions and
/// a Cookie Preservative, then 8-byte parameters of rotating kinds until the
/// packet is full.
fn init_with_many_params() -> Bytes {
    /// The common header, the INIT chunk's header and fixed fields.
    const FIXED: usize = 12 + 20;
    /// Supported Extensions with one type (padded) and the Cookie Preservative.
    const KNOWN: usize = 8 + 8;
    const PARAM: usize = 8;
    let count = (MAX_PADDED - FIXED - KNOWN) / PARAM;
    let params = (0..count)
        .map(|i| {
            let low = u16::try_from(i % 0x3fff).unwrap_or(0);
            let kind = match i % 4 {
                // IPv4 Address (RFC 9260 3.3.2.1), ignored: one UDP path.
                0 => 5,
                // Unknown types: skip silently (high bits 10), then skip
                // and report (11). None that stops (00, 01): the INIT
                // would end at it.
                1 => 0x8000 | low,
                _ => 0xc000 | low,
            };
            let mut p = Vec::with_capacity(PARAM);
            p.extend_from_slice(&u16::to_be_bytes(kind));
            p.extend_from_slice(&u16::to_be_bytes(PARAM as u16));
            p.extend_from_slice(&u32::to_be_bytes(0xc000_0201 + i as u32));
            Bytes::from(p)
        })
        .collect();
    let init = Init {
        initiate_tag: 0x1234_5678,
        a_rwnd: 1 << 20,
        outbound_streams: u16::MAX,
        inbound_streams: u16::MAX,
        initial_tsn: u32::MAX - 3,
        extensions: vec![kind::I_DATA],
        cookie_preservative: Some(u32::MAX),
        unrecognized: params,
        ..Init::default()
    };
    encode(&packet(0, vec![Chunk::Init(init)])).freeze()
}

/// DATA or I-DATA chunks of 1,200 bytes, then one sized so the packet is
/// [`MAX_UDP_PAYLOAD`] bytes once its final pad byte is cut; TSNs across the
/// wrap, several streams, fragments and whole messages.
fn data_bundle(data_kind: DataKind) -> Bytes {
    const PAYLOAD: usize = 1200;
    let header = match data_kind {
        DataKind::Data => sctp::wire::DATA_HEADER_LEN,
        DataKind::IData => sctp::wire::DATA_HEADER_LEN + 4,
    };
    let chunk = |i: usize, len: usize| {
        let i32 = u32::try_from(i).unwrap_or(0);
        Chunk::Data(DataChunk {
            kind: data_kind,
            unordered: i % 5 == 4,
            beginning: i.is_multiple_of(3),
            ending: i % 3 == 2,
            immediate: false,
            tsn: (u32::MAX - 20).wrapping_add(i32),
            stream: u16::try_from(i % 7).unwrap_or(0),
            mid: match data_kind {
                DataKind::Data => i32 / 3,
                DataKind::IData => (u32::MAX - 5).wrapping_add(i32 / 3),
            },
            fsn: match data_kind {
                DataKind::IData if !i.is_multiple_of(3) => i32 % 3,
                _ => 0,
            },
            ppid: match data_kind {
                DataKind::IData if !i.is_multiple_of(3) => 0,
                _ => 51,
            },
            payload: Bytes::from(vec![u8::try_from(i % 251).unwrap_or(0); len]),
        })
    };
    let mut chunks = Vec::new();
    let mut len = 12;
    while len + 2 * (header + PAYLOAD) <= MAX_UDP_PAYLOAD {
        chunks.push(chunk(chunks.len(), PAYLOAD));
        len += header + PAYLOAD;
    }
    // The last chunk: its padded length takes the packet to 65,508, one pad
    // byte past the limit; that byte is cut.
    let last = MAX_UDP_PAYLOAD + 1 - len - header - 1;
    chunks.push(chunk(chunks.len(), last));
    let mut out = encode(&packet(0xfeed_f00d, chunks));
    debug_assert_eq!(out.len(), MAX_UDP_PAYLOAD + 1);
    out.truncate(MAX_UDP_PAYLOAD);
    seal_checksum(&mut out);
    out.freeze()
}

/// A SACK of [`MAX_PADDED`] bytes: 8,192 gap blocks, the rest duplicate TSNs.
fn sack_with_many_reports() -> Bytes {
    /// Common header, SACK chunk header and fixed fields.
    const FIXED: usize = 12 + 16;
    const GAPS: usize = 8192;
    let dups = (MAX_PADDED - FIXED) / 4 - GAPS;
    let cum = u32::MAX - 100;
    let sack = Sack {
        cum_tsn_ack: cum,
        a_rwnd: 0,
        gaps: (0..GAPS)
            .map(|i| {
                let start = u16::try_from(2 + 2 * i).unwrap_or(u16::MAX);
                GapBlock { start, end: start }
            })
            .collect(),
        dups: (0..dups)
            .map(|i| cum.wrapping_sub(u32::try_from(i).unwrap_or(0)))
            .collect(),
    };
    encode(&packet(0xfeed_f00d, vec![Chunk::Sack(sack)])).freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &Bytes) -> Packet {
        Packet::decode(bytes.clone()).expect("a seed decodes")
    }

    #[test]
    fn the_seeds_are_full_size_and_decode_to_what_was_built() {
        let seeds = sctp_packet_seeds();
        let sizes: Vec<(&str, usize)> = seeds.iter().map(|(n, b)| (*n, b.len())).collect();
        assert_eq!(
            sizes,
            [
                ("full-init-params", 65_504),
                ("full-data-bundle", 65_507),
                ("full-idata-bundle", 65_507),
                ("full-sack", 65_504),
            ]
        );
        for (name, bytes) in &seeds {
            let packet = decode(bytes);
            // What decodes re-encodes and decodes the same (the fuzz
            // target's own check), and the packet is not cut short.
            let again = decode(&encode(&packet).freeze());
            assert_eq!(again, packet, "{name}");
            match (name, packet.chunks.as_slice()) {
                (&"full-init-params", [Chunk::Init(init)]) => {
                    // Of its 4,091 skip-and-report parameters, the decoder
                    // keeps as many as it reports.
                    assert_eq!(
                        init.unrecognized.len(),
                        sctp::wire::MAX_UNRECOGNIZED_PARAMS,
                        "{name}"
                    );
                    assert!(init.supports_idata());
                    assert_eq!(init.cookie_preservative, Some(u32::MAX));
                }
                (&"full-sack", [Chunk::Sack(sack)]) => {
                    // Read up to the decoder's bounds, the rest skipped.
                    assert_eq!(
                        (sack.gaps.len(), sack.dups.len()),
                        (sctp::wire::MAX_GAP_BLOCKS, sctp::wire::MAX_DUP_TSNS)
                    );
                }
                (_, chunks) => {
                    assert!(chunks.len() > 40, "{name}: {} chunks", chunks.len());
                    let kinds: Vec<DataKind> = chunks
                        .iter()
                        .filter_map(|c| match c {
                            Chunk::Data(d) => Some(d.kind),
                            _ => None,
                        })
                        .collect();
                    assert_eq!(kinds.len(), chunks.len(), "{name}: DATA only");
                }
            }
        }
    }

    #[test]
    fn the_seeds_are_written_where_the_fuzz_run_reads_them() {
        let root = tempfile::tempdir().expect("a temporary directory");
        let written = write(root.path()).expect("write");
        assert_eq!(written.len(), 1);
        for (target, dir) in written {
            assert_eq!(dir, self::dir(root.path(), target));
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .expect("the directory")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(
                names,
                [
                    "full-data-bundle",
                    "full-idata-bundle",
                    "full-init-params",
                    "full-sack"
                ]
            );
        }
    }
}
