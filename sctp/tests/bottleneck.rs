//! Associations that share one bottleneck (support/dumbbell.rs): each
//! completes its transfer and gets a share of the link. No fairness figure is
//! asserted (the controllers are being reworked); the test prints each pair's
//! goodput.

mod support;

use std::time::Duration;

use bytes::Bytes;
use sctp::Config;
use support::dumbbell::{Bottleneck, Dumbbell};

/// The shared link, bits per second.
const RATE: u64 = 10_000_000;
/// Bytes each association downloads.
const BULK: usize = 4 << 20;
/// Bytes per message.
const MESSAGE: usize = 64 * 1024;

fn config() -> Config {
    Config {
        recv_window: 4 * 1024 * 1024,
        rtt: sctp::rtt::RttConfig {
            initial: Duration::from_millis(500),
            min: Duration::from_millis(200),
            max: Duration::from_secs(10),
        },
        ..Config::default()
    }
}

/// The message `index` of client `client`'s download: its bytes say whose
/// and which, so a message delivered to the wrong association shows.
fn message(client: usize, index: usize) -> Bytes {
    let mut v = vec![0u8; MESSAGE];
    v[0] = client as u8;
    v[1..9].copy_from_slice(&(index as u64).to_be_bytes());
    for (i, b) in v.iter_mut().enumerate().skip(9) {
        *b = (i as u8).wrapping_mul(7) ^ client as u8;
    }
    Bytes::from(v)
}

#[test]
fn two_associations_through_one_bottleneck_both_complete_with_a_share_each() {
    let bottleneck = Bottleneck {
        rate: RATE,
        // About a bandwidth-delay product at the longer round trip.
        queue: Duration::from_millis(60),
    };
    // Round trips of 40 and 60 ms.
    let delays = vec![Duration::from_millis(20), Duration::from_millis(30)];
    let mut net = Dumbbell::new(config(), config(), bottleneck, delays, 11);
    assert!(
        net.connect_all(Duration::from_secs(30)),
        "the handshakes did not complete"
    );
    let count = BULK / MESSAGE;
    let started = net.now;
    for client in 0..2 {
        for index in 0..count {
            net.server_assoc(client)
                .send(0, message(client, index), 0, false)
                .expect("send");
        }
    }
    let done = net.run_until(Duration::from_secs(600), |n| {
        n.clients.iter().all(|c| c.received.len() == count)
    });
    assert!(
        done,
        "not both transfers completed: {:?} of {count} messages",
        net.clients
            .iter()
            .map(|c| c.received.len())
            .collect::<Vec<_>>()
    );
    for (client, side) in net.clients.iter().enumerate() {
        for (index, got) in side.received.iter().enumerate() {
            assert!(
                got.data == message(client, index),
                "client {client} message {index} is not what its association sent"
            );
        }
    }
    let elapsed = (net.now - started).as_secs_f64();
    for (client, report) in net.reports.iter().enumerate() {
        println!(
            "client {client}: {} bytes, {:.2} Mbit/s from its first message read to its last",
            report.bytes,
            report.goodput() / 1e6
        );
    }
    let total: u64 = net.reports.iter().map(|r| r.bytes).sum();
    let aggregate = total as f64 * 8.0 / elapsed;
    println!(
        "aggregate {:.2} Mbit/s over {elapsed:.2} s through {} Mbit/s; drops toward the server {}, toward the clients {}",
        aggregate / 1e6,
        RATE / 1_000_000,
        net.dropped[0],
        net.dropped[1]
    );
    // While both were downloading, each got a share of the link: neither
    // waited for the other to finish.
    let first = net
        .reports
        .iter()
        .filter_map(|r| r.first)
        .max()
        .expect("reads");
    let last = net
        .reports
        .iter()
        .filter_map(|r| r.last)
        .min()
        .expect("reads");
    assert!(last > first, "the two downloads never overlapped");
    let window = (last - first).as_secs_f64();
    let mut together = 0;
    for (client, report) in net.reports.iter().enumerate() {
        let share = report.bytes_between(first, last);
        println!(
            "client {client}: {:.2} Mbit/s while both were downloading ({window:.2} s)",
            share as f64 * 8.0 / window / 1e6
        );
        assert!(
            share > 0,
            "client {client} got no share while both downloaded"
        );
        together += share;
    }
    // The queue is shared: together they move no more than the link
    // carries (message bytes are less than the wire's). Separate queues per
    // pair would let them move up to twice as much.
    let rate = together as f64 * 8.0 / window;
    assert!(
        rate < RATE as f64,
        "{rate:.0} bit/s together through a {RATE} bit/s bottleneck"
    );
    assert!(aggregate < RATE as f64, "{aggregate:.0} bit/s over the run");
}
