//! Runs `ebpf-programs`'s SCTP programs (`xdp_sctp`, `tc_sctp`) in the kernel on
//! hand-built frames with `BPF_PROG_TEST_RUN` and checks, exactly, what they
//! counted into their maps — and that every frame came back unchanged with the
//! pass-through verdict.
//!
//! Each test loads its own copy of the object, so its maps start empty and tests
//! can run in parallel. The frames are built byte by byte below from RFC 9260
//! (SCTP), RFC 8260 (I-DATA) and RFC 6951 (SCTP over UDP), with a correct CRC32c
//! (the programs do not check it, but a frame a real stack would accept keeps
//! the tests honest).
//!
//! The tests are `#[ignore]`d because they need root (loading BPF) and a built
//! object: `cargo xtask build-ebpf --load-test` (and `cargo xtask test`) run them
//! with `--ignored` and `GATEWAY_EBPF_OBJECT` set. Run by hand without that
//! variable or without root, they FAIL saying so; they never pass vacuously.

#[path = "support/frames.rs"]
#[allow(dead_code, reason = "ebpf_tcp.rs uses the TCP builders")]
mod frames;
#[path = "support/ebpf.rs"]
mod support;

use std::collections::BTreeMap;

use frames::*;
use support::{chain, namespace_with_loopback, object_path, require_root};

use ebpf_common::{
    AssocCounters, AssocKey, DIRECTION_EGRESS, DIRECTION_INGRESS, StreamCounters, StreamKey,
    WalkerStats,
};
use gateway::ebpf::{SctpAccounting, SctpAccountingConfig, SctpHook, SctpSnapshot, test_run};
use proptest::{
    prelude::*,
    test_runner::{Config as ProptestConfig, TestRunner},
};

const XDP_PASS: u32 = 2;
const TC_ACT_PIPE: u32 = 3;

// ---------------------------------------------------------------- the tests

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn one_data_chunk_counts_its_user_bytes() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let frame = ipv4(IPPROTO_SCTP, &sctp(&[data(1000, 3, 0, &[0xab; 100])]));
        let (before, after) = t.run_timed(&frame);
        let snapshot = t.snapshot();
        let key = t.stream_key(3);
        let counters = snapshot.streams.get(&key).copied().unwrap_or_default();
        assert!(
            (before..=after).contains(&counters.last_seen_ns),
            "{hook:?}: last_seen_ns {} outside [{before}, {after}]",
            counters.last_seen_ns
        );
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(key, stream(100, 1, 1000))]),
            "{hook:?}"
        );
        assert!(
            snapshot.assocs.is_empty(),
            "{hook:?}: {:?}",
            snapshot.assocs
        );
        assert_eq!(t.stats(&snapshot), walker(1, 1, 1), "{hook:?}");
        // The other hook's entry saw nothing.
        assert_eq!(t.other_stats(&snapshot), WalkerStats::default(), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn several_streams_bundled_in_one_packet() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        // Odd payload lengths exercise the 4-byte padding between chunks.
        let frame = ipv4(
            IPPROTO_SCTP,
            &sctp(&[
                data(10, 1, 0, &[1; 5]),
                data(11, 2, 0, &[2; 7]),
                data(12, 1, 1, &[3; 33]),
                data(13, 7, 0, &[4; 1]),
            ]),
        );
        t.run(&frame);
        // A second packet on stream 2, TSNs going on.
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[data(14, 2, 1, &[5; 200])])));
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([
                (t.stream_key(1), stream(5 + 33, 2, 12)),
                (t.stream_key(2), stream(7 + 200, 2, 14)),
                (t.stream_key(7), stream(1, 1, 13)),
            ]),
            "{hook:?}"
        );
        assert_eq!(t.stats(&snapshot), walker(2, 2, 5), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn idata_counts_user_bytes_after_its_20_byte_header() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let frame = ipv4(
            IPPROTO_SCTP,
            &sctp(&[
                idata(500, 4, 0, 0x0000_0033, &[9; 61]),
                data(501, 4, 0, &[8; 3]),
                idata(502, 5, 1, 0, &[7; 1000]),
            ]),
        );
        t.run(&frame);
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([
                (t.stream_key(4), stream(61 + 3, 2, 501)),
                (t.stream_key(5), stream(1000, 1, 502)),
            ]),
            "{hook:?}"
        );
        assert_eq!(t.stats(&snapshot), walker(1, 1, 3), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn sack_with_gap_blocks_counts_per_association() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let frame = ipv4(
            IPPROTO_SCTP,
            &sctp(&[sack(7000, 65_536, &[(2, 3), (5, 9), (12, 12)], &[6999])]),
        );
        t.run(&frame);
        // A later SACK with a cumulative ack across the TSN wrap, then an old one
        // arriving late: the later cumulative ack and the newest a_rwnd win.
        let mut t2 = Harness::load(hook);
        t2.run(&ipv4(
            IPPROTO_SCTP,
            &sctp(&[sack(u32::MAX - 1, 1000, &[], &[])]),
        ));
        t2.run(&ipv4(IPPROTO_SCTP, &sctp(&[sack(3, 2000, &[(2, 2)], &[])])));
        t2.run(&ipv4(
            IPPROTO_SCTP,
            &sctp(&[sack(u32::MAX, 3000, &[], &[1, 2])]),
        ));

        let key = t.assoc_key();
        let snapshot = t.snapshot();
        assert!(snapshot.streams.is_empty(), "{hook:?}");
        assert_eq!(
            strip_times(&snapshot.assocs),
            BTreeMap::from([(
                key,
                AssocCounters {
                    sacks: 1,
                    gap_blocks: 3,
                    dup_tsns: 1,
                    last_seen_ns: 0,
                    cum_tsn_ack: 7000,
                    a_rwnd: 65_536,
                }
            )]),
            "{hook:?}"
        );
        assert_eq!(t.stats(&snapshot), walker(1, 1, 1), "{hook:?}");

        let snapshot = t2.snapshot();
        assert_eq!(
            strip_times(&snapshot.assocs),
            BTreeMap::from([(
                key,
                AssocCounters {
                    sacks: 3,
                    gap_blocks: 1,
                    dup_tsns: 2,
                    last_seen_ns: 0,
                    cum_tsn_ack: 3,
                    a_rwnd: 3000,
                }
            )]),
            "{hook:?}"
        );
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn sack_whose_blocks_overrun_its_length_is_not_counted() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let mut chunk = sack(10, 1000, &[(1, 1)], &[]);
        // Claim 2 gap blocks while carrying 1.
        chunk[12..14].copy_from_slice(&2_u16.to_be_bytes());
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[chunk])));
        let snapshot = t.snapshot();
        assert!(
            snapshot.assocs.is_empty(),
            "{hook:?}: {:?}",
            snapshot.assocs
        );
        assert_eq!(t.stats(&snapshot), malformed(walker(1, 1, 1)), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn init_and_other_control_chunks_count_nothing() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let init = chunk(1, 0, &init_value(0xdead_beef));
        let init_ack = chunk(2, 0, &init_value(0xfeed_f00d));
        let cookie_echo = chunk(10, 0, &[0x42; 32]);
        let cookie_ack = chunk(11, 0, &[]);
        let heartbeat = chunk(4, 0, &[0, 1, 0, 8, 1, 2, 3, 4]);
        let shutdown = chunk(7, 0, &7_u32.to_be_bytes());
        let forward_tsn = chunk(192, 0, &9_u32.to_be_bytes());
        // INIT travels alone with verification tag 0.
        t.run(&ipv4(
            IPPROTO_SCTP,
            &sctp_packet(SRC_PORT, DST_PORT, 0, &[init]),
        ));
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[init_ack])));
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[cookie_echo, cookie_ack])));
        t.run(&ipv4(
            IPPROTO_SCTP,
            &sctp(&[heartbeat, shutdown, forward_tsn]),
        ));
        let snapshot = t.snapshot();
        assert!(
            snapshot.streams.is_empty(),
            "{hook:?}: {:?}",
            snapshot.streams
        );
        assert!(
            snapshot.assocs.is_empty(),
            "{hook:?}: {:?}",
            snapshot.assocs
        );
        assert_eq!(t.stats(&snapshot), walker(4, 4, 7), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn truncated_packets_count_nothing_past_the_cut() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let full = ipv4(
            IPPROTO_SCTP,
            &sctp(&[data(1, 1, 0, &[1; 40]), data(2, 2, 0, &[2; 40])]),
        );
        // Cut inside the second chunk: the IP header still claims the full length.
        let second_chunk_start = 14 + 20 + 12 + 56;
        t.run(&full[..second_chunk_start + 30]);
        // Cut inside the SCTP common header, and inside the IP header. The kernel
        // refuses to build an skb whose IPv4 header is cut (no such skb reaches
        // TC), so that one runs at XDP only.
        t.run(&full[..14 + 20 + 6]);
        let cut_ip = &full[..14 + 10];
        let packets = if hook == SctpHook::Ingress {
            t.run(cut_ip);
            3
        } else {
            assert_kernel_refuses(&t, cut_ip);
            2
        };
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(t.stream_key(1), stream(40, 1, 1))]),
            "{hook:?}"
        );
        assert_eq!(
            t.stats(&snapshot),
            WalkerStats {
                packets,
                sctp_packets: 1,
                chunks: 1,
                malformed: 1,
                chunk_limit: 0,
                map_errors: 0,
                gso_partial: 0,
                gso_packets: 0,
            },
            "{hook:?}"
        );
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn chunk_length_zero_or_past_the_end_stops_the_walk() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        // DATA, then a chunk of length 0, then DATA that must not be reached.
        let zero = vec![0_u8, 0, 0, 0];
        t.run(&ipv4(
            IPPROTO_SCTP,
            &sctp(&[data(1, 1, 0, &[1; 8]), zero, data(2, 2, 0, &[2; 8])]),
        ));
        // A DATA chunk whose length reaches 4 bytes past the packet.
        let mut long = data(3, 3, 0, &[3; 8]);
        long[2..4].copy_from_slice(&(16_u16 + 8 + 4).to_be_bytes());
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[long])));
        // A DATA chunk with no user data (length 16) is malformed.
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[data(4, 4, 0, &[])])));
        // Length 3: shorter than a chunk header.
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&[vec![0, 3, 0, 3]])));
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(t.stream_key(1), stream(8, 1, 1))]),
            "{hook:?}"
        );
        assert_eq!(
            t.stats(&snapshot),
            WalkerStats {
                packets: 4,
                sctp_packets: 4,
                // The first DATA and the empty DATA were looked at.
                chunks: 2,
                malformed: 4,
                chunk_limit: 0,
                map_errors: 0,
                gso_partial: 0,
                gso_packets: 0,
            },
            "{hook:?}"
        );
    }
}

/// The walker's chunk bound at XDP (`MAX_WIRE_CHUNKS` in
/// ebpf-programs/src/sctp.rs).
const MAX_WIRE_CHUNKS: u32 = 16;
/// Its bound at TC, where GSO super-packets pass (`MAX_GSO_CHUNKS`).
const MAX_GSO_CHUNKS: u32 = 48;

/// The chunk bound of `hook`'s program.
fn chunk_bound(hook: SctpHook) -> u32 {
    match hook {
        SctpHook::Ingress => MAX_WIRE_CHUNKS,
        SctpHook::Egress => MAX_GSO_CHUNKS,
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn the_chunk_limit_bounds_the_walk() {
    for hook in HOOKS {
        let max_chunks = chunk_bound(hook);
        let mut t = Harness::load(hook);
        let chunks: Vec<Vec<u8>> = (0..max_chunks + 6)
            .map(|i| data(100 + i, 1, 0, &[0; 4]))
            .collect();
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&chunks)));
        // Exactly the limit: complete, not flagged.
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&chunks[..max_chunks as usize])));
        let snapshot = t.snapshot();
        let counted = u64::from(2 * max_chunks);
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(
                t.stream_key(1),
                stream(counted * 4, counted, 100 + max_chunks - 1)
            )]),
            "{hook:?}"
        );
        let mut expected = walker(2, 2, counted);
        expected.chunk_limit = 1;
        assert_eq!(t.stats(&snapshot), expected, "{hook:?}");
    }
}

/// Per stream id: user bytes, chunks, highest TSN.
type Expected = BTreeMap<u16, (u64, u64, u32)>;

/// 45 DATA chunks on five streams, as a 64 KiB kernel-SCTP GSO packet carries
/// 45 full-sized ones, with `payload` to `payload + 3` bytes each, TSNs from 1:
/// the chunks, and what each stream counts when the walk looks at the first
/// `walked` of them.
fn forty_five_chunks(payload: usize, walked: u32) -> (Vec<Vec<u8>>, Expected) {
    let mut chunks = Vec::new();
    let mut expected = Expected::new();
    for i in 0..45_u32 {
        let stream_id = (i % 5) as u16 + 1;
        // Lengths differ from chunk to chunk so the padding varies.
        let len = payload + (i % 4) as usize;
        chunks.push(data(i + 1, stream_id, (i / 5) as u16, &vec![i as u8; len]));
        if i < walked {
            let entry = expected.entry(stream_id).or_default();
            entry.0 += len as u64;
            entry.1 += 1;
            entry.2 = i + 1;
        }
    }
    (chunks, expected)
}

/// `expected` of [`forty_five_chunks`] counted `times` times, under `t`'s keys.
fn counted(t: &Harness, expected: &Expected, times: u64) -> BTreeMap<StreamKey, StreamCounters> {
    expected
        .iter()
        .map(|(id, (bytes, n, tsn))| (t.stream_key(*id), stream(times * bytes, times * n, *tsn)))
        .collect()
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn a_packet_of_45_chunks_is_walked_whole_at_tc_and_up_to_16_at_xdp() {
    // No wire packet of full-sized chunks holds 45, tiny ones can; a GSO
    // super-packet, which passes TC only, does (next test). Natively and over
    // UDP: TC counts every chunk; XDP the first 16, and flags the packet.
    for hook in HOOKS {
        let walked = 45.min(chunk_bound(hook));
        let (chunks, expected) = forty_five_chunks(33, walked);
        let mut t = Harness::load(hook);
        t.run(&ipv4(IPPROTO_SCTP, &sctp(&chunks)));
        t.run(&ipv4(
            IPPROTO_UDP,
            &udp(40_000, RFC6951_PORT, &sctp(&chunks)),
        ));
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            counted(&t, &expected, 2),
            "{hook:?}"
        );
        assert_eq!(
            t.stats(&snapshot),
            WalkerStats {
                chunk_limit: if walked < 45 { 2 } else { 0 },
                ..walker(2, 2, 2 * u64::from(walked))
            },
            "{hook:?}"
        );
    }
}

/// `GSO_BY_FRAGS`: the `gso_size` of kernel SCTP's GSO packets.
const GSO_BY_FRAGS: u32 = 0xffff;

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn a_kernel_sctp_gso_packet_is_read_past_the_head_and_walked_whole() {
    // Kernel SCTP's GSO packet: one common header, then the chunks of every
    // segment. A GSO skb is read with bpf_skb_load_bytes (the test run's skb
    // is linear, but the GSO context selects that path just the same), native
    // and UDP-encapsulated (whose gso_size is GSO_BY_FRAGS too: one common
    // header, no per-segment split).
    let (chunks, expected) = forty_five_chunks(40, 45);
    let mut t = Harness::load(SctpHook::Egress);
    let native = ipv4(IPPROTO_SCTP, &sctp(&chunks));
    let encapsulated = ipv4(IPPROTO_UDP, &udp(40_000, RFC6951_PORT, &sctp(&chunks)));
    for frame in [&native, &encapsulated] {
        t.run_with_context(frame, &sk_buff_with_gso(45, GSO_BY_FRAGS));
    }
    let snapshot = t.snapshot();
    assert_eq!(strip_times(&snapshot.streams), counted(&t, &expected, 2));
    assert_eq!(
        snapshot.egress,
        WalkerStats {
            gso_packets: 2,
            ..walker(2, 2, 90)
        }
    );

    // More chunks than the GSO bound: counted up to it, and flagged.
    let mut t = Harness::load(SctpHook::Egress);
    let many: Vec<Vec<u8>> = (0..MAX_GSO_CHUNKS + 6)
        .map(|i| data(100 + i, 1, 0, &[0; 4]))
        .collect();
    t.run_with_context(
        &ipv4(IPPROTO_SCTP, &sctp(&many)),
        &sk_buff_with_gso(2, GSO_BY_FRAGS),
    );
    let snapshot = t.snapshot();
    let limit = u64::from(MAX_GSO_CHUNKS);
    assert_eq!(
        strip_times(&snapshot.streams),
        BTreeMap::from([(
            t.stream_key(1),
            stream(4 * limit, limit, 100 + MAX_GSO_CHUNKS - 1)
        )]),
    );
    assert_eq!(
        snapshot.egress,
        WalkerStats {
            gso_packets: 1,
            chunk_limit: 1,
            ..walker(1, 1, limit)
        }
    );
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn ethernet_padding_and_ipv4_options_are_handled() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        // A COOKIE ACK frame (14 + 20 + 12 + 4 = 50 bytes) padded to the 60-byte
        // Ethernet minimum: the zero padding must not be walked as chunks.
        let mut padded = ipv4(IPPROTO_SCTP, &sctp(&[chunk(11, 0, &[])]));
        assert_eq!(padded.len(), 50);
        padded.resize(60, 0);
        t.run(&padded);
        // IPv4 with 8 bytes of options (IHL 7).
        t.run(&ipv4_with_options(
            IPPROTO_SCTP,
            &[1, 1, 1, 1, 1, 1, 1, 0],
            &sctp(&[data(1, 6, 0, &[6; 12])]),
        ));
        // A VLAN-tagged frame.
        let mut tagged = ipv4(IPPROTO_SCTP, &sctp(&[data(2, 6, 1, &[6; 10])]));
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x2a]);
        t.run(&tagged);
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(t.stream_key(6), stream(22, 2, 2))]),
            "{hook:?}"
        );
        assert_eq!(t.stats(&snapshot), walker(3, 3, 3), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn ipv4_fragments_after_the_first_are_skipped() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let mut later = ipv4(IPPROTO_SCTP, &sctp(&[data(1, 1, 0, &[1; 8])]));
        // Fragment offset 185 (× 8 bytes).
        later[14 + 6..14 + 8].copy_from_slice(&185_u16.to_be_bytes());
        t.run(&later);
        let snapshot = t.snapshot();
        assert!(snapshot.streams.is_empty(), "{hook:?}");
        assert_eq!(t.stats(&snapshot), walker(1, 0, 0), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn ipv6_with_extension_headers() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let payload = sctp(&[data(42, 9, 0, &[9; 50])]);
        // Plain IPv6.
        t.run(&ipv6(&[], IPPROTO_SCTP, &payload));
        // Hop-by-hop (8 bytes), destination options (16), routing (24), first
        // fragment (offset 0, M set): four extension headers, the limit.
        let extensions = [
            (IPPROTO_HOPOPTS, ext_header(8)),
            (IPPROTO_DSTOPTS, ext_header(16)),
            (IPPROTO_ROUTING, ext_header(24)),
            (IPPROTO_FRAGMENT, fragment_header(0, true)),
        ];
        t.run(&ipv6(&extensions, IPPROTO_SCTP, &payload));
        // A later fragment: skipped.
        t.run(&ipv6(
            &[(IPPROTO_FRAGMENT, fragment_header(100, false))],
            IPPROTO_SCTP,
            &payload,
        ));
        // Five extension headers: over the limit, skipped.
        let five = [
            (IPPROTO_HOPOPTS, ext_header(8)),
            (IPPROTO_DSTOPTS, ext_header(8)),
            (IPPROTO_ROUTING, ext_header(8)),
            (IPPROTO_DSTOPTS, ext_header(8)),
            (IPPROTO_DSTOPTS, ext_header(8)),
        ];
        t.run(&ipv6(&five, IPPROTO_SCTP, &payload));
        // UDP-encapsulated over IPv6 behind one extension header.
        t.run(&ipv6(
            &[(IPPROTO_DSTOPTS, ext_header(8))],
            IPPROTO_UDP,
            &udp(40_000, RFC6951_PORT, &payload),
        ));
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(t.stream_key(9), stream(150, 3, 42))]),
            "{hook:?}"
        );
        assert_eq!(t.stats(&snapshot), walker(5, 3, 3), "{hook:?}");
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn udp_encapsulated_sctp_on_the_configured_port() {
    for hook in HOOKS {
        let mut t = Harness::load(hook);
        let payload = sctp(&[data(7, 2, 0, &[2; 30])]);
        // RFC 6951 port as destination, then as source (the reply direction).
        t.run(&ipv4(IPPROTO_UDP, &udp(33_000, RFC6951_PORT, &payload)));
        t.run(&ipv4(IPPROTO_UDP, &udp(RFC6951_PORT, 33_000, &payload)));
        // Another UDP port: not SCTP.
        t.run(&ipv4(IPPROTO_UDP, &udp(33_000, 9900, &payload)));
        // A UDP length shorter than the datagram bounds the SCTP packet: the DATA
        // chunk then reaches past its end.
        let mut short = udp(33_000, RFC6951_PORT, &payload);
        short[4..6].copy_from_slice(&(8_u16 + 12 + 20).to_be_bytes());
        t.run(&ipv4(IPPROTO_UDP, &short));
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(t.stream_key(2), stream(60, 2, 7))]),
            "{hook:?}"
        );
        assert_eq!(
            t.stats(&snapshot),
            WalkerStats {
                packets: 4,
                sctp_packets: 3,
                chunks: 2,
                malformed: 1,
                chunk_limit: 0,
                map_errors: 0,
                gso_partial: 0,
                gso_packets: 0,
            },
            "{hook:?}"
        );

        // Reconfigured to port 5555: 9899 is no longer SCTP, 5555 is.
        t.accounting
            .configure(SctpAccountingConfig { udp_port: 5555 })
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        t.run(&ipv4(IPPROTO_UDP, &udp(33_000, RFC6951_PORT, &payload)));
        t.run(&ipv4(IPPROTO_UDP, &udp(33_000, 5555, &payload)));
        let snapshot = t.snapshot();
        assert_eq!(
            strip_times(&snapshot.streams),
            BTreeMap::from([(t.stream_key(2), stream(90, 3, 7))]),
            "{hook:?}"
        );
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn udp_gso_super_packets_count_their_first_segment_only() {
    let mut t = Harness::load(SctpHook::Egress);
    // Three SCTP packets glued under one UDP header, as a UDP GSO send with
    // gso_size 120 leaves them at TC egress (every segment but the last
    // exactly gso_size bytes). The second segment's common header must not be
    // read as a chunk; walking every segment cost the verifier too much
    // (docs/ebpf.md), so only the first counts, and the packet is flagged.
    let segments = [
        sctp(&[data(1, 1, 0, &[1; 90])]),
        sctp(&[data(2, 2, 0, &[2; 40]), data(3, 1, 1, &[3; 36])]),
        sctp(&[data(4, 3, 0, &[4; 20])]),
    ];
    assert_eq!((segments[0].len(), segments[1].len()), (120, 120));
    let frame = ipv4(IPPROTO_UDP, &udp(40_000, RFC6951_PORT, &segments.concat()));
    t.run_with_context(&frame, &sk_buff_with_gso(3, 120));
    let snapshot = t.snapshot();
    assert_eq!(
        strip_times(&snapshot.streams),
        BTreeMap::from([(t.stream_key(1), stream(90, 1, 1))]),
    );
    assert_eq!(
        snapshot.egress,
        WalkerStats {
            gso_partial: 1,
            gso_packets: 1,
            ..walker(1, 1, 1)
        }
    );

    // Without GSO the same bytes are one (odd) SCTP packet: after the first
    // DATA chunk the walker reads the second common header as a chunk (type
    // 0x13, length 5001 from the destination port), which reaches past the
    // end, and stops there: again only the first chunk counts.
    let mut t = Harness::load(SctpHook::Egress);
    t.run(&frame);
    let snapshot = t.snapshot();
    assert_eq!(
        strip_times(&snapshot.streams),
        BTreeMap::from([(t.stream_key(1), stream(90, 1, 1))]),
    );
    assert_eq!(snapshot.egress, malformed(walker(1, 1, 1)));
}

/// The verifier's budget per program load (`BPF_COMPLEXITY_LIMIT_INSNS`).
const VERIFIER_LIMIT: u32 = 1_000_000;

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn both_programs_verify_with_room_to_spare() {
    // Loading is the verdict; the figure is what a bigger bound would cost.
    // Older verifiers prune less, so half the limit here is the margin that
    // kept Debian's 6.1 accepting what this kernel accepts.
    let t = Harness::load(SctpHook::Egress);
    for hook in HOOKS {
        let verified = t
            .accounting
            .verified_instructions(hook)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        println!("{hook:?}: the verifier processed {verified:?} instructions");
        if let Some(verified) = verified {
            assert!(
                verified < VERIFIER_LIMIT / 2,
                "{hook:?}: {verified} instructions verified, more than half the limit"
            );
        }
    }
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn random_packets_never_change_the_verdict_or_the_bytes() {
    let object = object_path();
    require_root();
    for hook in HOOKS {
        let accounting = SctpAccounting::load_file(&object, SctpAccountingConfig::default())
            .unwrap_or_else(|e| panic!("loading {}: {}", object.display(), chain(&e)));
        let fd = accounting
            .program_fd(hook)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        let expected = pass_verdict(hook);
        let mut runner = TestRunner::new(ProptestConfig {
            cases: 768,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let valid = ipv4(
            IPPROTO_SCTP,
            &sctp(&[
                data(1, 1, 0, &[1; 30]),
                sack(5, 100, &[(1, 2)], &[]),
                idata(2, 2, 0, 0, &[2; 9]),
            ]),
        );
        let valid_udp6 = ipv6(
            &[(IPPROTO_HOPOPTS, ext_header(8))],
            IPPROTO_UDP,
            &udp(1, RFC6951_PORT, &sctp(&[data(1, 1, 0, &[1; 30])])),
        );
        let sctp_prefix = ipv4(IPPROTO_SCTP, &sctp(&[]));
        let strategy = prop_oneof![
            // Any bytes at all (the kernel refuses frames under 14 bytes).
            proptest::collection::vec(any::<u8>(), 14..1500),
            // A valid frame with bytes overwritten at random places.
            mutations(valid),
            mutations(valid_udp6),
            // Valid headers, then random chunk bytes (the IP length field says 32).
            proptest::collection::vec(any::<u8>(), 0..1400).prop_map(move |tail| {
                let mut frame = sctp_prefix.clone();
                frame.extend_from_slice(&tail);
                frame
            }),
        ];
        let total_len = std::cell::Cell::new(0_u64);
        runner
            .run(&strategy, |frame| {
                total_len.set(total_len.get() + frame.len() as u64);
                let out = match test_run::run(fd, &frame, 1) {
                    Ok(out) => out,
                    Err(e) if hook == SctpHook::Egress && ip_header_cut(&frame) => {
                        // No such skb exists: the kernel refuses to build it.
                        prop_assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
                        return Ok(());
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("test run: {e}"))),
                };
                prop_assert_eq!(out.retval, expected);
                prop_assert_eq!(&out.data_out, &frame);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{hook:?}: {e}"));
        // Whatever it counted, it never counted more user bytes than it was given.
        let snapshot = accounting
            .snapshot()
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        let counted: u64 = snapshot.streams.values().map(|s| s.data_bytes).sum();
        let total_len = total_len.get();
        assert!(counted <= total_len, "{hook:?}: {counted} > {total_len}");
        let stats = if hook == SctpHook::Ingress {
            snapshot.ingress
        } else {
            snapshot.egress
        };
        assert_eq!(stats.packets, 768, "{hook:?}");
        assert_eq!(stats.map_errors, 0, "{hook:?}");
    }
}

/// Whether `frame` says IPv4 or IPv6 but is too short for the fixed header
/// (which the kernel's skb test run refuses with `EINVAL`).
fn ip_header_cut(frame: &[u8]) -> bool {
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => frame.len() < 14 + 20,
        0x86dd => frame.len() < 14 + 40,
        _ => false,
    }
}

/// Fails unless the kernel refuses to run the egress program on `frame`.
fn assert_kernel_refuses(t: &Harness, frame: &[u8]) {
    let fd = t
        .accounting
        .program_fd(t.hook)
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    let result = test_run::run(fd, frame, 1);
    assert_eq!(
        result.as_ref().map_err(std::io::Error::raw_os_error),
        Err(Some(libc::EINVAL)),
        "{:?}: the kernel ran a frame with a cut IP header",
        t.hook
    );
}

/// A frame with 1 to 8 bytes replaced at random offsets.
fn mutations(frame: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = frame.len();
    proptest::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |edits| {
        let mut frame = frame.clone();
        for (at, byte) in edits {
            frame[at] = byte;
        }
        frame
    })
}

// ------------------------------------------------------------- the harness

const HOOKS: [SctpHook; 2] = [SctpHook::Ingress, SctpHook::Egress];

/// One freshly loaded copy of the programs, and the hook under test.
struct Harness {
    accounting: SctpAccounting,
    hook: SctpHook,
}

impl Harness {
    fn load(hook: SctpHook) -> Self {
        let object = object_path();
        require_root();
        let accounting = SctpAccounting::load_file(&object, SctpAccountingConfig::default())
            .unwrap_or_else(|e| panic!("loading {}: {}", object.display(), chain(&e)));
        Self { accounting, hook }
    }

    fn direction(&self) -> u8 {
        match self.hook {
            SctpHook::Ingress => DIRECTION_INGRESS,
            SctpHook::Egress => DIRECTION_EGRESS,
        }
    }

    /// Runs the hook's program on `frame`; fails unless it passed the frame on
    /// unchanged.
    fn run(&mut self, frame: &[u8]) {
        let fd = self
            .accounting
            .program_fd(self.hook)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        let out = test_run::run(fd, frame, 1)
            .unwrap_or_else(|e| panic!("{:?}: BPF_PROG_TEST_RUN: {e}", self.hook));
        assert_eq!(
            out.retval,
            pass_verdict(self.hook),
            "{:?}: wrong verdict",
            self.hook
        );
        assert_eq!(out.data_out, frame, "{:?}: the frame changed", self.hook);
    }

    /// [`Harness::run`] with a `struct __sk_buff` context (TC only).
    fn run_with_context(&mut self, frame: &[u8], context: &[u8]) {
        let fd = self
            .accounting
            .program_fd(self.hook)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        let out = test_run::run_with_context(fd, frame, context, 1)
            .unwrap_or_else(|e| panic!("{:?}: BPF_PROG_TEST_RUN with a context: {e}", self.hook));
        assert_eq!(
            out.retval,
            pass_verdict(self.hook),
            "{:?}: wrong verdict",
            self.hook
        );
        assert_eq!(out.data_out, frame, "{:?}: the frame changed", self.hook);
    }

    /// [`Harness::run`], returning CLOCK_MONOTONIC before and after.
    fn run_timed(&mut self, frame: &[u8]) -> (u64, u64) {
        let before = monotonic_ns();
        self.run(frame);
        (before, monotonic_ns())
    }

    fn snapshot(&self) -> SctpSnapshot {
        self.accounting
            .snapshot()
            .unwrap_or_else(|e| panic!("{}", chain(&e)))
    }

    fn stats(&self, snapshot: &SctpSnapshot) -> WalkerStats {
        match self.hook {
            SctpHook::Ingress => snapshot.ingress,
            SctpHook::Egress => snapshot.egress,
        }
    }

    fn other_stats(&self, snapshot: &SctpSnapshot) -> WalkerStats {
        match self.hook {
            SctpHook::Ingress => snapshot.egress,
            SctpHook::Egress => snapshot.ingress,
        }
    }

    fn stream_key(&self, stream_id: u16) -> StreamKey {
        StreamKey {
            vtag: VTAG,
            src_port: SRC_PORT,
            dst_port: DST_PORT,
            stream_id,
            direction: self.direction(),
            _pad: 0,
        }
    }

    fn assoc_key(&self) -> AssocKey {
        self.stream_key(0).assoc()
    }
}

fn pass_verdict(hook: SctpHook) -> u32 {
    match hook {
        SctpHook::Ingress => XDP_PASS,
        SctpHook::Egress => TC_ACT_PIPE,
    }
}

fn stream(data_bytes: u64, chunks: u64, highest_tsn: u32) -> StreamCounters {
    StreamCounters {
        data_bytes,
        chunks,
        last_seen_ns: 0,
        highest_tsn,
        _pad: 0,
    }
}

fn walker(packets: u64, sctp_packets: u64, chunks: u64) -> WalkerStats {
    WalkerStats {
        packets,
        sctp_packets,
        chunks,
        ..WalkerStats::default()
    }
}

fn malformed(stats: WalkerStats) -> WalkerStats {
    WalkerStats {
        malformed: stats.malformed + 1,
        ..stats
    }
}

/// The counters with timestamps zeroed (after checking each is set).
fn strip_times<K: Ord + Copy + std::fmt::Debug, V: Timestamped>(
    map: &BTreeMap<K, V>,
) -> BTreeMap<K, V> {
    map.iter()
        .map(|(key, value)| {
            assert_ne!(value.time(), 0, "{key:?}: no timestamp");
            (*key, value.without_time())
        })
        .collect()
}

trait Timestamped: Copy {
    fn time(&self) -> u64;
    fn without_time(self) -> Self;
}

impl Timestamped for StreamCounters {
    fn time(&self) -> u64 {
        self.last_seen_ns
    }
    fn without_time(self) -> Self {
        Self {
            last_seen_ns: 0,
            ..self
        }
    }
}

impl Timestamped for AssocCounters {
    fn time(&self) -> u64 {
        self.last_seen_ns
    }
    fn without_time(self) -> Self {
        Self {
            last_seen_ns: 0,
            ..self
        }
    }
}

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    assert_eq!(result, 0, "clock_gettime");
    u64::try_from(now.tv_sec).expect("monotonic seconds are positive") * 1_000_000_000
        + u64::try_from(now.tv_nsec).expect("nanoseconds are positive")
}

// ------------------------------------------------------------ environment

/// Attaches both programs to a veth end in a fresh namespace (deleted on drop,
/// also on panic, taking the veth pair and any attachment with it), checks the
/// kernel shows them, then that detaching removes them.
#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn attaches_to_an_interface_and_detaches() {
    let object = object_path();
    require_root();
    let name = format!("gw-ebpf-sctp-{}", std::process::id());
    let netns = testbed::Netns::create(&name).unwrap_or_else(|e| panic!("creating {name}: {e}"));
    let ns = netns.name().to_owned();
    for args in [
        vec![
            "-n", &ns, "link", "add", "gsa0", "type", "veth", "peer", "name", "gsb0",
        ],
        vec!["-n", &ns, "link", "set", "gsa0", "up"],
        vec!["-n", &ns, "link", "set", "gsb0", "up"],
    ] {
        testbed::ip(&args).unwrap_or_else(|e| panic!("{e}"));
    }
    let programs_on = |ns: &str| {
        testbed::ip(&["-n", ns, "-d", "link", "show", "gsa0"]).unwrap_or_else(|e| panic!("{e}"))
    };
    let ns_inner = ns.clone();
    testbed::in_netns(&ns, move || {
        let mut accounting = SctpAccounting::load_file(&object, SctpAccountingConfig::default())
            .unwrap_or_else(|e| panic!("loading {}: {}", object.display(), chain(&e)));
        accounting
            .attach_ingress("gsa0", gateway::ebpf::XdpMode::Generic)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        accounting
            .attach_egress("gsa0")
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        assert_eq!(
            accounting.attached_interfaces(),
            (Some("gsa0"), Some("gsa0"))
        );
        let shown = programs_on(&ns_inner);
        assert!(
            shown.contains("xdpgeneric"),
            "no XDP program on gsa0: {shown}"
        );
        accounting
            .detach()
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        assert_eq!(accounting.attached_interfaces(), (None, None));
        let shown = programs_on(&ns_inner);
        assert!(
            !shown.contains("xdp"),
            "XDP still attached after detach: {shown}"
        );
    })
    .unwrap_or_else(|e| panic!("entering {ns}: {e}"));
    drop(netns);
}

/// The gateway's cross-check (`gateway::accounting`): started on a
/// namespace's loopback, it says it runs with eBPF, and its per-stream arrival
/// figures equal, byte for byte, what a real userspace SCTP association carried
/// on each stream over that interface (no loss on loopback, so nothing is
/// retransmitted). The namespace (and the attachment with it) goes on drop,
/// also on panic.
#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn the_cross_check_counts_what_an_association_carried_per_stream() {
    use gateway::accounting::{Accounting, EbpfConfig, XdpModeChoice};
    use gateway_transport::{
        AssociationConfig, BackendKind, Listener, UdpOffload, UserspaceConfig, connect,
    };

    let object = object_path();
    require_root();
    let netns = namespace_with_loopback("gw-ebpf-xcheck");
    let ns = netns.name().to_owned();
    testbed::in_netns(&ns, move || {
        let accounting = Accounting::start(
            &EbpfConfig {
                object: Some(object),
                interface: Some("lo".into()),
                xdp_mode: XdpModeChoice::Generic,
            },
            &gateway::accounting::LanSide::default(),
        );
        assert!(accounting.with_ebpf(), "{}", accounting.describe());
        assert_eq!(
            accounting.describe(),
            "userspace, cross-checked by eBPF (xdp_sctp on lo, generic (skb) mode); \
             browser flows: not counted (no LAN interface)"
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Stream 3 carries 20 messages of 3000 bytes, stream 5 one of 100000
        // (fragmented into many DATA or I-DATA chunks), stream 1 none.
        let sent: BTreeMap<u16, u64> = [(3, 60_000), (5, 100_000)].into();
        runtime.block_on(async {
            let config = AssociationConfig {
                streams: 8,
                max_inbound_streams: 8,
                userspace: UserspaceConfig {
                    // One SCTP packet per datagram: over loopback (and a veth) a
                    // UDP GSO super-packet reaches XDP whole, and the walker
                    // cannot split it (XDP has no gso_size); on a NIC's
                    // ingress every frame is one datagram.
                    udp_offload: UdpOffload::Off,
                    ..UserspaceConfig::default()
                },
                ..AssociationConfig::default()
            };
            // RFC 6951's port, which xdp_sctp watches by default (the
            // namespace is fresh: nothing else has it).
            let at = std::net::SocketAddr::from(([127, 0, 0, 1], 9899));
            let listener = Listener::bind(BackendKind::Userspace, at, &config)
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("address");
            let client = connect(BackendKind::Userspace, addr, &config)
                .await
                .expect("connect");
            let server = listener.accept().await.expect("accept");
            for _ in 0..20 {
                server
                    .send(3, bytes::Bytes::from(vec![3u8; 3000]))
                    .await
                    .expect("send");
            }
            server
                .send(5, bytes::Bytes::from(vec![5u8; 100_000]))
                .await
                .expect("send");
            let mut received: BTreeMap<u16, u64> = BTreeMap::new();
            while received.values().sum::<u64>() < 160_000 {
                let message = client.recv().await.expect("recv");
                *received.entry(message.stream).or_default() += message.data.len() as u64;
            }
            assert_eq!(received, sent);
            // Poll with a deadline: every SACK and DATA has long crossed lo by
            // the time the bytes were read, but the maps are read separately.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let arrived = accounting.arrived_per_stream().expect("maps readable");
                if arrived == sent {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "xdp_sctp counted {arrived:?}, the association carried {sent:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            client.abort();
            server.abort();
        });
    })
    .unwrap_or_else(|e| panic!("entering {ns}: {e}"));
    drop(netns);
}

/// Without CAP_BPF and CAP_SYS_ADMIN (dropped from the bounding set by
/// `setpriv`, so not even root gets them back), the real gateway binary with
/// `[ebpf]` configured starts, says once that per-stream accounting runs in
/// userspace only and why (the kernel's refusal included), and serves its
/// admin endpoint (`/metrics`: accounting 0; the browser side needs the
/// interception, which e2e.rs covers). In a fresh namespace, removed on drop
/// (the process is killed first), also on panic.
#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn without_cap_bpf_the_gateway_says_userspace_only_once_and_serves() {
    use std::io::{Read as _, Write as _};

    let object = object_path();
    require_root();
    let name = format!("gw-nobpf-{}", std::process::id());
    let netns = testbed::Netns::create(&name).unwrap_or_else(|e| panic!("creating {name}: {e}"));
    let ns = netns.name().to_owned();
    testbed::ip(&["-n", &ns, "link", "set", "lo", "up"]).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let config = dir.join("gateway.toml");
    let text = format!(
        "[listen]\nport = 3129\naddresses = [\"127.0.0.1\"]\n\
         [intercept]\nmanage = false\n\
         [cache]\nenabled = false\n\
         [admin]\nlisten = \"127.0.0.1:3130\"\n\
         [ebpf]\nobject = \"{}\"\ninterface = \"lo\"\n\
         [[origin]]\nname = \"absent\"\naddress = \"127.0.0.1:9\"\n\
         destinations = [\"203.0.113.0/24\"]\n",
        object.display()
    );
    std::fs::write(&config, text).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    let mut command = std::process::Command::new("setpriv");
    command
        .args(["--bounding-set", "-bpf,-sys_admin,-perfmon"])
        .arg(env!("CARGO_BIN_EXE_gateway"))
        .arg("--config")
        .arg(&config);
    let mut gateway = testbed::NsProcess::spawn(&ns, "gateway", &command, &dir.join("gateway.log"))
        .unwrap_or_else(|e| panic!("{e}"));
    gateway
        .wait_for_log("gateway ready", std::time::Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let log = gateway.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("per-stream accounting:"))
        .collect();
    assert_eq!(said.len(), 1, "said {said:?}\n{log}");
    assert!(
        said[0].contains("userspace only (loading")
            && said[0].contains("Operation not permitted")
            && said[0].contains("CAP_BPF"),
        "{}",
        said[0]
    );
    let get = |port: u16, request: &'static str| -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connecting to port {port}: {e}"));
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    };
    let metrics = testbed::in_netns(&ns, move || {
        get(
            3130,
            "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
    })
    .unwrap_or_else(|e| panic!("entering {ns}: {e}"));
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("\ngateway_stream_accounting_ebpf 0\n"),
        "{metrics}"
    );
    drop(gateway);
    drop(netns);
    let _ = std::fs::remove_dir_all(&dir);
}
