//! What only the userspace SCTP backend has, over loopback through the public
//! API: an unreachable peer behind a relay, a vanished peer (ICMP port
//! unreachable), a connect to a silent port, and the listener's association
//! limit. What every backend keeps is in `contract.rs`. Every test is bounded
//! in time.
//!
//! `throughput_probe` (ignored) prints bulk Mbit/s; run it with
//! `cargo test --release -p gateway-transport --test userspace_loopback -- --ignored --nocapture`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::{
    Association, AssociationConfig, BackendKind, Listener, TransportError, connect,
};
use tokio::time::timeout;

mod support;

use support::loopback::{RelayControl, TEST_LIMIT, V4, config, numbered, pair, relay};

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

/// Bulk transfer over loopback: prints Mbit/s per message size, and Mbit per
/// CPU second, which shared machines disturb less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check; run with --release --ignored --nocapture"]
async fn throughput_probe() -> Result<()> {
    support::loopback::throughput_probe(BackendKind::Userspace).await
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
