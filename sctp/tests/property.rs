//! The property the product rests on: whatever the network does (up to 30 %
//! loss, bursts, reordering, duplication), every message is delivered exactly
//! once, intact, in order per stream; the association neither deadlocks nor
//! grows without bound. It holds across the wrap of every sequence number:
//! some cases start the TSN just below 2^32, one test sends enough ordered
//! messages on one stream that the 16-bit SSN wraps too, and one starts the
//! 32-bit I-DATA MID just below 2^32.
//!
//! Memory, counted by a global allocator: the receiver's charge to its
//! endpoint's pool stays within the configured bound at every step and is
//! back to zero once everything is read, and a whole case (both endpoints,
//! their associations, the link) gives back every byte it allocated.

#[path = "support/counting.rs"]
mod counting;
mod support;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// What a case may leave allocated (measured: none; a forgotten simulation
/// of the smallest case leaves 66 KB).
const LEAK_SLACK: isize = 4 * 1024;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use sctp::{Config, Event};
use support::{CLIENT, Link, SERVER, Sim};

/// Bytes queued plus in flight that the sender may hold at most: what the
/// test queued. Checked at every step.
fn config(idata: bool) -> Config {
    Config {
        idata,
        rtt: sctp::rtt::RttConfig {
            initial: Duration::from_millis(200),
            min: Duration::from_millis(50),
            max: Duration::from_secs(2),
        },
        // A lossy link may silence the peer for a while; the test is about
        // delivery, not about declaring it dead.
        max_retransmits: 1000,
        max_init_transmits: 1000,
        idle_timeout: Duration::from_secs(3600),
        ..Config::default()
    }
}

/// The initial TSN of a case that starts `below` TSNs under 2^32.
fn near_wrap(below: u32) -> u32 {
    u32::MAX - below
}

/// The TSNs of the DATA chunks `side` put on the link, with their SSN (MID
/// for I-DATA) when the chunk begins a message.
fn data_sent(sim: &Sim, side: usize) -> Vec<(u32, Option<u32>)> {
    sim.sent[side]
        .iter()
        .filter_map(|d| sctp::chunk::Packet::decode(d.clone()).ok())
        .flat_map(|p| p.chunks)
        .filter_map(|c| match c {
            sctp::chunk::Chunk::Data(d) => Some((d.tsn, d.beginning.then_some(d.mid))),
            _ => None,
        })
        .collect()
}

/// Whether the TSNs sent crossed from just below 2^32 to just above 0.
fn tsn_wrapped(sent: &[(u32, Option<u32>)]) -> bool {
    sent.iter().any(|(tsn, _)| *tsn >= near_wrap(1 << 20))
        && sent.iter().any(|(tsn, _)| *tsn < 1 << 20)
}

fn body(stream: u16, index: u32, len: usize) -> Bytes {
    let mut v: Vec<u8> = Vec::with_capacity(len);
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(&index.to_be_bytes());
    while v.len() < len {
        v.push((v.len() as u32).wrapping_mul(31).wrapping_add(index) as u8);
    }
    v.truncate(len.max(6));
    Bytes::from(v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn exactly_once_in_order_per_stream(
        seed in any::<u64>(),
        loss in 0.0f64..0.3,
        duplicate in 0.0f64..0.1,
        jitter_ms in 0u64..40,
        burst in proptest::option::of((0.0f64..0.05, 0.0f64..0.6)),
        idata in any::<bool>(),
        sizes in proptest::collection::vec((0u16..4, 1usize..20_000), 1..40),
        start_below_wrap in proptest::option::of(0u32..64),
    ) {
        let link = Link {
            loss,
            duplicate,
            jitter: Duration::from_millis(jitter_ms),
            burst,
            rate: Some(20_000_000),
            delay: Duration::from_millis(15),
            queue: Duration::from_millis(200),
            max_datagram: None,
        };
        let config = Config {
            initial_tsn: start_below_wrap.map(near_wrap),
            ..config(idata)
        };
        let bound = config.receive_memory_bound();
        let base = counting::live();
        let mut sim = Sim::new(config.clone(), config, link, seed);
        sim.connect();
        let connected = sim.run_until(Duration::from_secs(600), |s| s.saw(CLIENT, &Event::Connected));
        prop_assert!(connected, "no handshake");
        let mut sent: BTreeMap<u16, Vec<Bytes>> = BTreeMap::new();
        let mut total = 0usize;
        for (stream, len) in &sizes {
            let per = sent.entry(*stream).or_default();
            let data = body(*stream, per.len() as u32, *len);
            total += data.len();
            per.push(data.clone());
            sim.sides[CLIENT].assoc().send(*stream, data, 0, false).expect("send");
        }
        let count = sizes.len();
        let done = sim.run_until(Duration::from_secs(3600), |s| {
            let a = s.sides[CLIENT].assoc();
            // Nothing grows without bound: the sender never holds more than it was given.
            let held: usize = (0..4).filter_map(|st| a.stream_stats(st)).map(|st| st.unsent + st.in_flight).sum();
            assert!(held <= total);
            let charged = s.sides[SERVER].endpoint.receive_memory();
            assert!(charged <= bound, "the receiver charged {charged} bytes, bound {bound}");
            s.sides[SERVER].received.len() >= count
        });
        prop_assert!(done, "deadlock: {} of {count} delivered", sim.sides[SERVER].received.len());
        let mut got: BTreeMap<u16, Vec<Bytes>> = BTreeMap::new();
        for m in &sim.sides[SERVER].received {
            got.entry(m.stream).or_default().push(m.data.clone());
        }
        prop_assert_eq!(&got, &sent);
        // Afterwards everything is acknowledged and the sender is empty.
        let drained = sim.run_until(Duration::from_secs(600), |s| {
            s.sides[CLIENT].assoc().flight() == 0
        });
        prop_assert!(drained, "data still in flight after delivery");
        prop_assert_eq!(sim.sides[SERVER].endpoint.receive_memory(), 0, "read, yet charged");
        if let Some(below) = start_below_wrap {
            // The case saw the wrap whenever it sent more TSNs than were left.
            let data = data_sent(&sim, CLIENT);
            let tsns: std::collections::BTreeSet<u32> = data.iter().map(|(tsn, _)| *tsn).collect();
            prop_assert!(
                tsns.len() <= below as usize + 1 || tsn_wrapped(&data),
                "{} TSNs from {} never wrapped", tsns.len(), near_wrap(below)
            );
        }
        drop((sim, sent, got));
        let left = counting::live() - base;
        prop_assert!(left <= LEAK_SLACK, "the case left {left} bytes allocated");
    }
}

/// Ordered messages on one stream: more than the 16-bit SSN counts.
const PAST_SSN_WRAP: u32 = 70_000;

proptest! {
    // Each case moves 70,000 messages; a few cases cover the seeds.
    #![proptest_config(ProptestConfig { cases: 4, .. ProptestConfig::default() })]

    /// TSN and SSN both wrap in one transfer over a lossy, reordering link:
    /// DATA (not I-DATA, whose 32-bit MID starts at 0 and cannot wrap in a
    /// test) starting a few TSNs below 2^32, 70,000 small ordered messages on
    /// one stream. All arrive once, in order, and the sender drains.
    #[test]
    fn tsn_and_ssn_wrap_end_to_end(
        seed in any::<u64>(),
        loss in 0.0f64..0.1,
        duplicate in 0.0f64..0.05,
        jitter_ms in 1u64..20,
        start_below_wrap in 0u32..64,
    ) {
        let link = Link {
            loss,
            duplicate,
            jitter: Duration::from_millis(jitter_ms),
            rate: Some(20_000_000),
            delay: Duration::from_millis(15),
            queue: Duration::from_millis(200),
            ..Link::default()
        };
        let config = Config {
            initial_tsn: Some(near_wrap(start_below_wrap)),
            ..config(false)
        };
        let mut sim = Sim::new(config.clone(), config, link, seed);
        sim.connect();
        let connected = sim.run_until(Duration::from_secs(600), |s| s.saw(CLIENT, &Event::Connected));
        prop_assert!(connected, "no handshake");
        let mut sent = Vec::with_capacity(PAST_SSN_WRAP as usize);
        for index in 0..PAST_SSN_WRAP {
            let data = body(0, index, 6 + (index % 11) as usize);
            sent.push(data.clone());
            sim.sides[CLIENT].assoc().send(0, data, 0, false).expect("send");
        }
        let count = sent.len();
        let done = sim.run_until(Duration::from_secs(3600), |s| s.sides[SERVER].received.len() >= count);
        prop_assert!(done, "deadlock: {} of {count} delivered", sim.sides[SERVER].received.len());
        let got: Vec<Bytes> = sim.sides[SERVER].received.iter().map(|m| m.data.clone()).collect();
        prop_assert!(got == sent, "not every message arrived once and in order");
        let drained = sim.run_until(Duration::from_secs(600), |s| s.sides[CLIENT].assoc().flight() == 0);
        prop_assert!(drained, "data still in flight after delivery");
        // The wire shows both wraps: TSNs on both sides of 2^32, and SSN 0
        // beginning two different messages.
        let data = data_sent(&sim, CLIENT);
        prop_assert!(tsn_wrapped(&data), "the TSN did not wrap");
        let ssn_zero: std::collections::BTreeSet<u32> = data
            .iter()
            .filter(|(_, ssn)| *ssn == Some(0))
            .map(|(tsn, _)| *tsn)
            .collect();
        prop_assert!(ssn_zero.len() >= 2, "the SSN did not wrap");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, .. ProptestConfig::default() })]

    /// The 32-bit I-DATA MID wraps too: both ends start every stream's MID
    /// a few below 2^32 (`Config::initial_mid`, a test-only setting: RFC
    /// 8260 starts at 0), and ordered and unordered messages, fragmented or
    /// not, on two streams over a lossy, reordering link all arrive once, in
    /// order per stream, with the TSN wrapping as well.
    #[test]
    fn mid_wraps_end_to_end(
        seed in any::<u64>(),
        loss in 0.0f64..0.15,
        jitter_ms in 1u64..20,
        start_below_wrap in 0u32..8,
        sizes in proptest::collection::vec((0u16..2, 1usize..4_000, any::<bool>()), 20..60),
    ) {
        let link = Link {
            loss,
            jitter: Duration::from_millis(jitter_ms),
            rate: Some(20_000_000),
            delay: Duration::from_millis(15),
            queue: Duration::from_millis(200),
            ..Link::default()
        };
        let config = Config {
            initial_tsn: Some(near_wrap(start_below_wrap)),
            initial_mid: Some(near_wrap(start_below_wrap)),
            ..config(true)
        };
        let mut sim = Sim::new(config.clone(), config, link, seed);
        sim.connect();
        let connected = sim.run_until(Duration::from_secs(600), |s| s.saw(CLIENT, &Event::Connected));
        prop_assert!(connected, "no handshake");
        let mut ordered: BTreeMap<u16, Vec<Bytes>> = BTreeMap::new();
        let mut unordered: Vec<Bytes> = Vec::new();
        for (index, (stream, len, in_order)) in sizes.iter().enumerate() {
            let data = body(*stream, index as u32, *len);
            if *in_order {
                ordered.entry(*stream).or_default().push(data.clone());
            } else {
                unordered.push(data.clone());
            }
            sim.sides[CLIENT].assoc().send(*stream, data, 0, !*in_order).expect("send");
        }
        let count = sizes.len();
        let done = sim.run_until(Duration::from_secs(3600), |s| s.sides[SERVER].received.len() >= count);
        prop_assert!(done, "deadlock: {} of {count} delivered", sim.sides[SERVER].received.len());
        let mut got_ordered: BTreeMap<u16, Vec<Bytes>> = BTreeMap::new();
        let mut got_unordered: Vec<Bytes> = Vec::new();
        for m in &sim.sides[SERVER].received {
            if unordered.contains(&m.data) {
                got_unordered.push(m.data.clone());
            } else {
                got_ordered.entry(m.stream).or_default().push(m.data.clone());
            }
        }
        prop_assert_eq!(&got_ordered, &ordered);
        got_unordered.sort();
        unordered.sort();
        prop_assert_eq!(&got_unordered, &unordered);
        // The wire shows MIDs on both sides of 2^32 whenever a stream's
        // ordered messages outnumber what was left below it.
        let mids: Vec<u32> = data_sent(&sim, CLIENT).iter().filter_map(|(_, mid)| *mid).collect();
        let most = ordered.values().map(Vec::len).max().unwrap_or(0);
        if most > start_below_wrap as usize + 1 {
            prop_assert!(
                mids.iter().any(|m| *m >= near_wrap(start_below_wrap)) && mids.iter().any(|m| *m < 64),
                "the MID did not wrap: {mids:?}"
            );
        }
    }
}
