//! What one association gets from a long, lossy link with each congestion
//! controller, on the simulated network: Reno and CUBIC read random loss as
//! congestion, the BBR-family controller does not. Deterministic (seeded);
//! the figures are the simulation's, the product's are in bench/results.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sctp::Config;
use sctp::congestion::{BbrConfig, ControllerFactory, CubicConfig, RenoConfig};
use support::{CLIENT, Link, SERVER, Sim};

/// Mbit/s of goodput moving `bytes` over 80 ms RTT, `loss`, 100 Mbit/s.
fn goodput(congestion: Arc<dyn ControllerFactory>, loss: f64, bytes: usize) -> f64 {
    let link = Link {
        delay: Duration::from_millis(40),
        loss,
        rate: Some(100_000_000),
        // One bandwidth-delay product of queue, as the wanem links have.
        queue: Duration::from_millis(80),
        ..Link::default()
    };
    let config = Config {
        congestion,
        recv_window: 16 * 1024 * 1024,
        rtt: sctp::rtt::RttConfig {
            initial: Duration::from_secs(1),
            // The product's default (config/*.toml): a queue's worth of
            // delay must not look like a time-out.
            min: Duration::from_millis(500),
            max: Duration::from_secs(10),
        },
        ..Config::default()
    };
    let mut sim = Sim::new(config.clone(), config, link, 7);
    sim.connect();
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.saw(CLIENT, &sctp::Event::Connected)
    }));
    let message = 64 * 1024;
    let count = bytes / message;
    for i in 0..count {
        sim.sides[CLIENT]
            .assoc()
            .send(
                (i % 8) as u16,
                Bytes::from(vec![i as u8; message]),
                0,
                false,
            )
            .expect("send");
    }
    let start = sim.now;
    let mut next = start;
    let done = sim.run_until(Duration::from_secs(600), |s| {
        if std::env::var("GOODPUT_DEBUG").is_ok() && s.now >= next {
            next = s.now + Duration::from_millis(500);
            let got = s.sides[SERVER].received.len();
            let a = s.sides[CLIENT].assoc();
            eprintln!(
                "t={:?} got={} {:?} pace={:?}",
                s.now - start,
                got,
                a.stats(),
                a.poll_timeout().map(|t| t.saturating_duration_since(s.now)),
            );
        }
        s.sides[SERVER].received.len() == count
    });
    assert!(done);
    let secs = (sim.now - start).as_secs_f64();
    (count * message) as f64 * 8.0 / secs / 1e6
}

#[test]
fn on_a_lossy_long_link_the_model_based_controller_is_not_held_back_by_random_loss() {
    let bytes = 48 << 20;
    let reno = goodput(Arc::new(RenoConfig::default()), 0.01, bytes);
    let cubic = goodput(
        Arc::new(CubicConfig {
            initial_window: None,
            flows: 6,
        }),
        0.01,
        bytes,
    );
    let bbr = goodput(Arc::new(BbrConfig::default()), 0.01, bytes);
    println!(
        "80 ms, 1 % loss, 100 Mbit/s: reno {reno:.1}, cubic x6 {cubic:.1}, bbr {bbr:.1} Mbit/s"
    );
    assert!(bbr > 2.0 * reno, "bbr {bbr:.1} vs reno {reno:.1}");
    assert!(bbr > 50.0, "bbr {bbr:.1} Mbit/s");
}
