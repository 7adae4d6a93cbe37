//! Loss recovery on crafted loss patterns: the tail-loss probe finds a lost
//! tail in about two round trips instead of an RTO, RACK finds a lost
//! retransmission without a time-out, and reordering within the reordering
//! window is not a loss.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sctp::congestion::{ControllerFactory, CubicConfig, RenoConfig};
use sctp::{Config, Counters, Event};
use support::{CLIENT, Link, SERVER, Sim};

const SECOND: Duration = Duration::from_secs(1);

fn config(tlp: bool, rack: bool) -> Config {
    Config {
        tail_loss_probe: tlp,
        rack,
        // RFC 9260's RTO bounds: what a lost tail costs without a probe.
        ..Config::default()
    }
}

fn established(config: Config, link: Link) -> Sim {
    let mut sim = Sim::new(config.clone(), config, link, 1);
    sim.connect();
    assert!(
        sim.run_until(10 * SECOND, |s| s.saw(CLIENT, &Event::Connected)
            && s.saw(SERVER, &Event::Connected))
    );
    // A few round trips of traffic so that the RTT is measured.
    for i in 0..5u8 {
        sim.sides[CLIENT]
            .assoc()
            .send(0, Bytes::from(vec![i; 100]), 0, false)
            .expect("send");
        let want = usize::from(i) + 1;
        assert!(sim.run_until(SECOND, |s| s.sides[SERVER].received.len() == want));
    }
    sim.run_for(SECOND);
    sim
}

/// Sends `count` one-packet messages on stream 1 and runs the simulation
/// until the server has them all (within 30 s); returns how long that took.
fn deliver_messages(sim: &mut Sim, count: usize) -> Duration {
    let before = sim.sides[SERVER].received.len();
    let start = sim.now;
    for i in 0..count {
        sim.sides[CLIENT]
            .assoc()
            .send(1, Bytes::from(vec![i as u8; 1000]), 0, false)
            .expect("send");
    }
    assert!(
        sim.run_until(30 * SECOND, |s| s.sides[SERVER].received.len()
            == before + count)
    );
    sim.now - start
}

/// The time from sending `count` one-packet messages, the last `lost` of
/// whose first transmissions are dropped, until all arrive; and the sender's
/// counts of what it took.
fn tail_recovery(tlp: bool, count: usize, lost: usize) -> (Duration, Counters) {
    let link = Link {
        delay: Duration::from_millis(40),
        ..Link::default()
    };
    let mut sim = established(config(tlp, true), link);
    let first = sim
        .data_sent(CLIENT)
        .into_iter()
        .max()
        .expect("data was sent")
        + 1;
    sim.drop_tsns = (first + (count - lost) as u32..first + count as u32).collect();
    let took = deliver_messages(&mut sim, count);
    (took, sim.sides[CLIENT].assoc().stats().counters)
}

#[test]
fn a_lost_tail_is_found_by_the_probe_not_the_rto() {
    let (with, probed) = tail_recovery(true, 4, 1);
    let (without, timed_out) = tail_recovery(false, 4, 1);
    // The counters say which mechanism recovered the tail.
    assert_eq!(probed.rto_expirations, 0, "{probed:?}");
    assert!(probed.tail_probes >= 1, "{probed:?}");
    assert_eq!(timed_out.tail_probes, 0, "{timed_out:?}");
    assert!(timed_out.rto_expirations >= 1, "{timed_out:?}");
    for counters in [probed, timed_out] {
        assert!(counters.retransmitted_chunks >= 1, "{counters:?}");
        assert!(counters.packets_sent > 0 && counters.packets_received > 0);
    }
    // Without a probe: the RTO, at least RFC 9260's 1 s minimum.
    assert!(without >= SECOND, "without TLP: {without:?}");
    // With: 2 SRTT (160 ms) + a delayed-SACK allowance (200 ms), then a round trip.
    assert!(with < Duration::from_millis(700), "with TLP: {with:?}");
}

#[test]
fn a_lost_retransmission_is_found_by_rack_without_a_time_out() {
    let link = Link {
        delay: Duration::from_millis(40),
        ..Link::default()
    };
    for rack in [true, false] {
        // No tail-loss probe: this is about RACK alone.
        let mut sim = established(config(false, rack), link.clone());
        let first = sim.data_sent(CLIENT).into_iter().max().expect("data") + 1;
        // The first of 20 packets is lost, and so is its fast retransmission.
        sim.drop_tsns = vec![first, first];
        let took = deliver_messages(&mut sim, 20);
        if rack {
            assert!(took < Duration::from_millis(800), "with RACK: {took:?}");
        } else {
            assert!(
                took >= SECOND,
                "without RACK a lost retransmission waits for T3: {took:?}"
            );
        }
    }
}

#[test]
fn reordering_within_the_window_is_not_a_loss() {
    // 40 ms delay with up to 8 ms of jitter: packets overtake each other, but
    // by less than a quarter of the minimum RTT (80 ms / 4 = 20 ms).
    let link = Link {
        delay: Duration::from_millis(40),
        jitter: Duration::from_millis(8),
        rate: Some(50_000_000),
        ..Link::default()
    };
    let mut sim = established(config(true, true), link);
    let before = sim.sides[SERVER].received.len();
    for i in 0..300u32 {
        sim.sides[CLIENT]
            .assoc()
            .send((i % 4) as u16, Bytes::from(vec![i as u8; 1200]), 0, false)
            .expect("send");
    }
    assert!(
        sim.run_until(30 * SECOND, |s| s.sides[SERVER].received.len()
            == before + 300)
    );
    let sent = sim.data_sent(CLIENT);
    let mut unique = sent.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(sim.dropped, 0, "the link lost nothing");
    assert_eq!(sent.len(), unique.len(), "spurious retransmissions");
}

/// The most DATA packets side `i` sent at one instant.
fn largest_burst(sim: &Sim, i: usize) -> usize {
    let mut bursts = std::collections::BTreeMap::new();
    for (data, at) in sim.sent[i].iter().zip(&sim.sent_at[i]) {
        let has_data = sctp::chunk::Packet::decode(data.clone()).is_ok_and(|p| {
            p.chunks
                .iter()
                .any(|c| matches!(c, sctp::chunk::Chunk::Data(_)))
        });
        if has_data {
            *bursts.entry(*at).or_insert(0usize) += 1;
        }
    }
    bursts.into_values().max().unwrap_or(0)
}

#[test]
fn pacing_spreads_a_window_over_the_round_trip() {
    let link = Link {
        delay: Duration::from_millis(40),
        ..Link::default()
    };
    for pacing in [true, false] {
        let mut sim = established(
            Config {
                pacing,
                ..config(true, true)
            },
            link.clone(),
        );
        let before = sim.sides[SERVER].received.len();
        let from = sim.sent[CLIENT].len();
        for i in 0..200u8 {
            sim.sides[CLIENT]
                .assoc()
                .send(0, Bytes::from(vec![i; 1200]), 0, false)
                .expect("send");
        }
        assert!(
            sim.run_until(30 * SECOND, |s| s.sides[SERVER].received.len()
                == before + 200)
        );
        sim.sent[CLIENT].drain(..from);
        sim.sent_at[CLIENT].drain(..from);
        let burst = largest_burst(&sim, CLIENT);
        if pacing {
            assert!(burst <= 10, "paced, yet {burst} packets at once");
        } else {
            assert!(burst > 10, "unpaced, the window goes at once: {burst}");
        }
    }
}

/// Sends 20 one-packet messages of which one's first transmission is held
/// back (`lost == false`) or dropped (`lost == true`), with the controller
/// `congestion`; returns the sender's counts and its ssthresh after all
/// arrived.
fn reordered_or_lost(congestion: Arc<dyn ControllerFactory>, lost: bool) -> (Counters, u64) {
    let link = Link {
        delay: Duration::from_millis(40),
        ..Link::default()
    };
    let config = Config {
        congestion,
        ..config(false, true)
    };
    let mut sim = established(config, link);
    let first = sim.data_sent(CLIENT).into_iter().max().expect("data") + 1;
    if lost {
        sim.drop_tsns = vec![first + 2];
    } else {
        // Far past RACK's reordering window (a quarter of the 80 ms RTT):
        // the chunk is taken for lost and sent again, then the original
        // arrives and the peer reports the retransmission as a duplicate.
        sim.hold_tsns = vec![(first + 2, Duration::from_millis(150))];
    }
    deliver_messages(&mut sim, 20);
    // The duplicate report rides on the SACK after the late original.
    sim.run_for(SECOND);
    let stats = sim.sides[CLIENT].assoc().stats();
    (stats.counters, stats.ssthresh)
}

#[test]
fn a_recovery_proved_spurious_by_duplicate_reports_is_undone() {
    let controllers: [Arc<dyn ControllerFactory>; 2] = [
        Arc::new(RenoConfig::default()),
        Arc::new(CubicConfig::default()),
    ];
    for congestion in controllers {
        let name = format!("{congestion:?}");
        let (reordered, kept) = reordered_or_lost(Arc::clone(&congestion), false);
        let (dropped, cut) = reordered_or_lost(congestion, true);
        assert!(
            reordered.lost_by_sack + reordered.lost_by_reorder_timer >= 1,
            "{name}: {reordered:?}"
        );
        assert_eq!(reordered.spurious_recoveries, 1, "{name}: {reordered:?}");
        assert_eq!(dropped.spurious_recoveries, 0, "{name}: {dropped:?}");
        assert!(
            kept > cut,
            "{name}: ssthresh after an undone recovery {kept}, after a real loss {cut}"
        );
    }
}
