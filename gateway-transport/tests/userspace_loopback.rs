//! What only the userspace SCTP backend has, over loopback through the public
//! API: an unreachable peer behind a relay, a vanished peer (ICMP port
//! unreachable), a connect to a silent port, and the listener's association
//! limit. What every backend keeps is in `contract.rs`. Every test is bounded
//! in time.
//!
//! `throughput_probe` (ignored) prints bulk Mbit/s; run it with
//! `cargo test --release -p gateway-transport --test userspace_loopback -- --ignored --nocapture`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::{
    Association, AssociationConfig, BackendKind, Listener, TransportError, connect,
};
use tokio::net::UdpSocket;
use tokio::time::timeout;

mod support;

use support::loopback::{TEST_LIMIT, V4, config, numbered, pair, payload};

/// What a test can do to a [`relay`]: make it drop what passes (`silent`),
/// or close both its sockets, as a killed process's would (`gone`).
#[derive(Default)]
struct RelayControl {
    silent: AtomicBool,
    gone: tokio::sync::Notify,
}

/// A UDP relay between a client and a listener, under `control`.
async fn relay(upstream: SocketAddr, control: Arc<RelayControl>) -> Result<SocketAddr> {
    let front = UdpSocket::bind("127.0.0.1:0").await?;
    let back = UdpSocket::bind("127.0.0.1:0").await?;
    back.connect(upstream).await?;
    let addr = front.local_addr()?;
    tokio::spawn(async move {
        let mut client = None;
        let mut a = vec![0u8; 65536];
        let mut b = vec![0u8; 65536];
        loop {
            let silent = || control.silent.load(Ordering::Relaxed);
            tokio::select! {
                () = control.gone.notified() => return,
                r = front.recv_from(&mut a) => {
                    let Ok((n, from)) = r else { return };
                    client = Some(from);
                    if !silent() {
                        let _ = back.send(&a[..n]).await;
                    }
                }
                r = back.recv(&mut b) => {
                    let Ok(n) = r else { return };
                    if let (Some(to), false) = (client, silent()) {
                        let _ = front.send_to(&b[..n], to).await;
                    }
                }
            }
        }
    });
    Ok(addr)
}

/// A listener, a client connected to it through a [`relay`], the accepted
/// server side, and a first message that crossed; the listener must be kept.
async fn relayed_pair(
    cfg: &AssociationConfig,
) -> Result<(Listener, Arc<RelayControl>, Association, Association)> {
    let listener = Listener::bind(BackendKind::Userspace, V4.parse()?, cfg).await?;
    let control = Arc::new(RelayControl::default());
    let via = relay(listener.local_addr()?, Arc::clone(&control)).await?;
    let (client, server) =
        tokio::join!(connect(BackendKind::Userspace, via, cfg), listener.accept());
    let (client, server) = (client?, server?);
    client.send(0, Bytes::from_static(b"hello")).await?;
    ensure!(server.recv().await?.data == "hello");
    Ok((listener, control, client, server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peer_is_reported_unreachable() -> Result<()> {
    timeout(TEST_LIMIT, async {
        let cfg = AssociationConfig {
            heartbeat_interval: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(600),
            ..config()
        };
        let (_listener, control, client, server) = relayed_pair(&cfg).await?;
        control.silent.store(true, Ordering::Relaxed);
        let started = Instant::now();
        for side in [&client, &server] {
            match side.recv().await {
                Err(TransportError::PeerUnreachable(d)) => ensure!(d == cfg.idle_timeout),
                other => bail!("recv on a silent association gave {other:?}"),
            }
        }
        ensure!(started.elapsed() < Duration::from_secs(5));
        Ok(())
    })
    .await?
}

/// A peer whose process is gone: its host answers our packets with ICMP
/// "port unreachable", and each side ends its association at its next
/// packet (the client's socket is connected, the listener's is not),
/// long before the idle time-out would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_peer_is_noticed_at_the_next_packet_by_icmp() -> Result<()> {
    timeout(TEST_LIMIT, async {
        let cfg = AssociationConfig {
            // Neither heartbeats nor the idle time-out can end it within the test.
            heartbeat_interval: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(600),
            ..config()
        };
        let (_listener, control, client, server) = relayed_pair(&cfg).await?;
        server.send(0, Bytes::from_static(b"hi")).await?;
        ensure!(client.recv().await?.data == "hi");
        control.gone.notify_one();
        // The relay's sockets close as its task ends; a send after that is
        // refused by the host. Sends go on until the refusal ends the
        // association (the first may still reach the relay before it closes).
        for side in [&client, &server] {
            let ended = timeout(Duration::from_secs(20), async {
                loop {
                    if let Err(e) = side.send(1, Bytes::from_static(b"anyone?")).await {
                        return e;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .context("ICMP port unreachable did not end the association")?;
            match ended {
                TransportError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                other => bail!("a vanished peer gave {other:?}"),
            }
        }
        Ok(())
    })
    .await?
}

/// A connect to a port nothing listens on ends on the host's ICMP port
/// unreachable, which quotes our INIT (RFC 9260 Appendix C: in COOKIE-WAIT
/// the INIT's own Initiate Tag is the proof), not at the connect time-out.
/// The client's socket is not connected, so this comes from its error queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_silent_port_is_refused() -> Result<()> {
    timeout(TEST_LIMIT, async {
        // A port nothing listens on: bound, noted, released.
        let port = std::net::UdpSocket::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let cfg = AssociationConfig {
            // Far longer than the refusal takes, even if the host's ICMP rate
            // limit swallows the first answers (each INIT retransmission
            // draws another).
            connect_timeout: Duration::from_secs(30),
            ..config()
        };
        let r = connect(BackendKind::Userspace, ([127, 0, 0, 1], port).into(), &cfg).await;
        match r {
            Err(TransportError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                Ok(())
            }
            other => bail!("connect to a silent port gave {other:?}"),
        }
    })
    .await?
}

/// User plus system CPU time of this process, from `/proc/self/stat` (in clock
/// ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Bulk transfer over loopback: prints Mbit/s per message size, and Mbit per
/// CPU second, which shared machines disturb less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check; run with --release --ignored --nocapture"]
async fn throughput_probe() -> Result<()> {
    let streams: u16 = std::env::var("PROBE_STREAMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let secs: u64 = std::env::var("PROBE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let buffered: usize = std::env::var("PROBE_BUFFERED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64 * 1024);
    for size in [16 * 1024, 64 * 1024] {
        let max_message: usize = std::env::var("PROBE_MAX_MESSAGE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(AssociationConfig::default().max_message);
        let cfg = AssociationConfig {
            max_buffered_per_stream: buffered,
            max_message,
            ..config()
        };
        let (_listener, server, client) = pair(BackendKind::Userspace, V4, &cfg, &cfg).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let reader = {
            let received = Arc::clone(&received);
            tokio::spawn(async move {
                while let Ok(m) = server.recv().await {
                    received.fetch_add(m.data.len() as u64, Ordering::Relaxed);
                }
            })
        };
        let msg = payload(0, 0, size);
        let mut writers = Vec::new();
        for stream in 0..streams {
            let (client, msg, stop) = (client.clone(), msg.clone(), Arc::clone(&stop));
            writers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if client.send(stream, msg.clone()).await.is_err() {
                        break;
                    }
                }
            }));
        }
        // Skip slow start, then measure.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (t0, c0, b0) = (
            Instant::now(),
            cpu_seconds(),
            received.load(Ordering::Relaxed),
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (t1, c1, b1) = (
            Instant::now(),
            cpu_seconds(),
            received.load(Ordering::Relaxed),
        );
        stop.store(true, Ordering::Relaxed);
        let mbits = (b1 - b0) as f64 * 8.0 / 1e6;
        println!(
            "userspace loopback: {streams} streams x {} KiB messages, {} KiB queue per stream: \
             {:.0} Mbit/s, {:.0} Mbit per CPU second ({:.2} CPUs busy)",
            size / 1024,
            buffered / 1024,
            mbits / (t1 - t0).as_secs_f64(),
            mbits / (c1 - c0),
            (c1 - c0) / (t1 - t0).as_secs_f64(),
        );
        for w in writers {
            w.await?;
        }
        client.abort();
        reader.await?;
    }
    Ok(())
}

/// A listener at its association limit refuses the next INIT with an ABORT:
/// the client learns it at once instead of waiting out its connect time-out,
/// and may connect once an association has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_at_its_limit_refuses_at_once_and_admits_after_a_close() -> Result<()> {
    timeout(TEST_LIMIT, async {
        let server_cfg = AssociationConfig {
            listener_limits: gateway_transport::SctpLimits {
                max_associations: 1,
                ..gateway_transport::SctpLimits::default()
            },
            ..config()
        };
        let cfg = AssociationConfig {
            connect_timeout: Duration::from_secs(10),
            ..config()
        };
        let (listener, server, client) =
            pair(BackendKind::Userspace, V4, &server_cfg, &cfg).await?;
        let target = listener.local_addr()?;
        let refusals = || {
            gateway_transport::userspace::endpoint_events()
                .into_iter()
                .find(|(event, _)| *event == "refused_at_total_limit")
                .map_or(0, |(_, n)| n)
        };
        let refused_before = refusals();
        // An ABORT ends the connect, not its 10 s time-out.
        match connect(BackendKind::Userspace, target, &cfg).await {
            Err(TransportError::Aborted) => {}
            other => bail!("a connect past the limit of one gave {other:?}, not an ABORT"),
        }
        // Counted for the metrics (added at the end of the driver's turn).
        while refusals() <= refused_before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        client.close().await?;
        drop(server);
        // The listener forgets the closed association when its driver next
        // runs: try until it has, within the test's limit.
        loop {
            if let Ok(again) = connect(BackendKind::Userspace, target, &cfg).await {
                again.send(1, numbered(1, 0)).await?;
                let accepted = listener.accept().await?;
                ensure!(accepted.recv().await?.data == numbered(1, 0));
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await?
}
