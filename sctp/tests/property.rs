//! The property the product rests on: whatever the network does (up to 30 %
//! loss, bursts, reordering, duplication), every message is delivered exactly
//! once, intact, in order per stream; the association neither deadlocks nor
//! grows without bound.

mod support;

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
        let mut sim = Sim::new(config(idata), config(idata), link, seed);
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
            s.sides[SERVER].received.len() >= count
        });
        prop_assert!(done, "deadlock: {} of {count} delivered", sim.sides[SERVER].received.len());
        let mut got: BTreeMap<u16, Vec<Bytes>> = BTreeMap::new();
        for m in &sim.sides[SERVER].received {
            got.entry(m.stream).or_default().push(m.data.clone());
        }
        prop_assert_eq!(got, sent);
        // Afterwards everything is acknowledged and the sender is empty.
        let drained = sim.run_until(Duration::from_secs(600), |s| {
            s.sides[CLIENT].assoc().flight() == 0
        });
        prop_assert!(drained, "data still in flight after delivery");
    }
}
