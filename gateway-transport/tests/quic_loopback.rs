//! What only the QUIC backend has, over loopback through the public API:
//! cancel-safe receive under quinn, its per-stream `buffered`, an unreachable
//! peer, a connect to a silent port, certificate pinning, and quinn's
//! congestion controllers. What every backend keeps is in `contract.rs`.
//! Every test is bounded in time.
//!
//! `throughput_probe` (ignored) prints bulk Mbit/s; run it with
//! `cargo test --release -p gateway-transport --test quic_loopback -- --ignored --nocapture`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::{
    AssociationConfig, BackendKind, Congestion, Listener, QuicConfig, TransportError, connect,
};
use tokio::time::timeout;

mod support;

use support::loopback::{
    RelayControl, TEST_LIMIT, V4, config, numbered, pair, payload, pinned, relay,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peer_is_reported_unreachable() -> Result<()> {
    timeout(TEST_LIMIT, async {
        let cfg = AssociationConfig {
            heartbeat_interval: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(600),
            ..config()
        };
        let listener = Listener::bind(BackendKind::Quic, V4.parse()?, &cfg).await?;
        let control = Arc::new(RelayControl::default());
        let via = relay(listener.local_addr()?, Arc::clone(&control)).await?;
        let client_cfg = pinned(&listener, &cfg);
        let (client, server) = tokio::join!(
            connect(BackendKind::Quic, via, &client_cfg),
            listener.accept()
        );
        let (client, server) = (client?, server?);
        client.send(0, Bytes::from_static(b"hello")).await?;
        ensure!(server.recv().await?.data == "hello");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_silent_port_fails_in_time() -> Result<()> {
    timeout(TEST_LIMIT, async {
        // A port nothing listens on: bound, noted, released.
        let port = std::net::UdpSocket::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let cfg = AssociationConfig {
            connect_timeout: Duration::from_secs(2),
            quic: QuicConfig {
                server_cert_sha256: Some("00".repeat(32)),
                ..config().quic
            },
            ..config()
        };
        let started = Instant::now();
        let r = connect(BackendKind::Quic, ([127, 0, 0, 1], port).into(), &cfg).await;
        ensure!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        match r {
            Err(TransportError::Io(_) | TransportError::ConnectTimeout(_)) => Ok(()),
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
    support::loopback::throughput_probe(BackendKind::Quic).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_pinned_certificate_is_accepted() -> Result<()> {
    timeout(TEST_LIMIT, async {
        let cfg = config();
        let listener = Arc::new(Listener::bind(BackendKind::Quic, V4.parse()?, &cfg).await?);
        let target = listener.local_addr()?;
        let good = listener
            .quic_cert_sha256()
            .context("fingerprint")?
            .to_owned();
        // The listener keeps accepting (and dropping failed handshakes) meanwhile.
        let accepting = {
            let listener = Arc::clone(&listener);
            tokio::spawn(async move { listener.accept().await })
        };
        // One digit off: the TLS handshake must fail, and fast (not by time-out).
        let mut wrong = good.clone().into_bytes();
        wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
        let wrong_cfg = AssociationConfig {
            quic: QuicConfig {
                server_cert_sha256: Some(String::from_utf8(wrong)?),
                ..cfg.quic.clone()
            },
            ..cfg.clone()
        };
        let started = Instant::now();
        match connect(BackendKind::Quic, target, &wrong_cfg).await {
            Err(TransportError::Protocol(why)) => {
                ensure!(why.contains("handshake"), "refused for {why}")
            }
            other => bail!("connect with a wrong pin gave {other:?}"),
        }
        ensure!(
            started.elapsed() < cfg.connect_timeout,
            "refusal took the time-out"
        );
        // No pin at all is a configuration error naming the key.
        match connect(BackendKind::Quic, target, &cfg).await {
            Err(TransportError::Config { key, .. }) => ensure!(key == "quic.server_cert_sha256"),
            other => bail!("connect without a pin gave {other:?}"),
        }
        // A malformed pin is refused by validate(), before any packet.
        let malformed = AssociationConfig {
            quic: QuicConfig {
                server_cert_sha256: Some("not a hash".into()),
                ..cfg.quic.clone()
            },
            ..cfg.clone()
        };
        ensure!(malformed.validate().is_err(), "malformed pin accepted");
        // The listener still serves a correctly pinned client, in either spelling.
        let colons = good
            .as_bytes()
            .chunks(2)
            .map(|p| String::from_utf8_lossy(p).to_uppercase())
            .collect::<Vec<_>>()
            .join(":");
        let good_cfg = AssociationConfig {
            quic: QuicConfig {
                server_cert_sha256: Some(colons),
                ..cfg.quic.clone()
            },
            ..cfg.clone()
        };
        let client = connect(BackendKind::Quic, target, &good_cfg).await?;
        let server = accepting.await??;
        client.send(0, Bytes::from_static(b"pinned")).await?;
        ensure!(server.recv().await?.data == "pinned");
        Ok(())
    })
    .await?
}

/// `recv` futures dropped before completion lose nothing: every message still
/// arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_recv_futures_lose_no_message() -> Result<()> {
    timeout(TEST_LIMIT, async {
        const N: u32 = 3_000;
        let cfg = config();
        let (_listener, server, client) = pair(BackendKind::Quic, V4, &cfg, &cfg).await?;
        let sender = tokio::spawn(async move {
            for seq in 0..N {
                client.send((seq % 4) as u16, numbered(0, seq)).await?;
                if seq % 64 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            Ok::<_, TransportError>(client)
        });
        let (mut got, mut cancelled) = (0u32, 0u32);
        let mut next = [0u32; 4];
        while got < N {
            // Most of these time out while a message may be on its way.
            match timeout(Duration::from_micros(200), server.recv()).await {
                Err(_) => cancelled += 1,
                Ok(m) => {
                    let m = m?;
                    let s = usize::from(m.stream);
                    let seq = next[s] * 4 + u32::from(m.stream);
                    ensure!(
                        m.data == numbered(0, seq),
                        "message {seq} lost or reordered"
                    );
                    next[s] += 1;
                    got += 1;
                }
            }
        }
        ensure!(
            cancelled > 0,
            "no recv was cancelled; the test proved nothing"
        );
        let _client = sender.await??;
        Ok(())
    })
    .await?
}

/// `buffered` counts what `send` accepted and quinn has not taken yet, and
/// drops to zero once the peer reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_counts_queued_bytes_per_stream() -> Result<()> {
    timeout(TEST_LIMIT, async {
        let cfg = config();
        let (_listener, server, client) = pair(BackendKind::Quic, V4, &cfg, &cfg).await?;
        ensure!(
            client.buffered(0) == Some(0),
            "fresh stream has nothing queued"
        );
        ensure!(client.buffered(cfg.streams).is_none(), "beyond the grant");
        // Fill stream 1 until send waits (the peer does not read).
        let chunk = payload(1, 0, 256 * 1024);
        let mut sent = 0;
        while timeout(Duration::from_millis(500), client.send(1, chunk.clone()))
            .await
            .is_ok()
        {
            sent += 1;
            ensure!(sent < 200, "send never waited");
        }
        ensure!(
            client.buffered(1).unwrap_or(0) > 0,
            "a full stream reports 0"
        );
        ensure!(client.buffered(2) == Some(0), "another stream is charged");
        // Stream 2 is not held back by stream 1's full queue.
        client.send(2, Bytes::from_static(b"overtakes")).await?;
        let mut seen_overtaker = false;
        for _ in 0..=sent {
            let m = server.recv().await?;
            if m.stream == 2 {
                ensure!(m.data == "overtakes");
                seen_overtaker = true;
                break;
            }
        }
        ensure!(seen_overtaker, "stream 2 waited behind stream 1");
        while client.buffered(1) != Some(0) {
            let _ = timeout(Duration::from_millis(100), server.recv()).await;
        }
        Ok(())
    })
    .await?
}

/// `[transport.quic] congestion` picks quinn's controller: each of the three
/// carries a large message both ways, and an unknown name is refused, naming
/// the key, when the configuration is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_congestion_controller_carries_data_and_an_unknown_one_is_refused() -> Result<()> {
    for name in [Congestion::Reno, Congestion::Cubic, Congestion::Bbr] {
        let cfg = AssociationConfig {
            quic: QuicConfig {
                congestion: name,
                ..config().quic
            },
            ..config()
        };
        let (_listener, server, client) = pair(BackendKind::Quic, V4, &cfg, &cfg).await?;
        let msg = payload(1, 0, 2 * 1024 * 1024);
        client.send(1, msg.clone()).await?;
        let got = timeout(TEST_LIMIT, server.recv()).await??;
        ensure!(got.data == msg, "{name}: client->server");
        server.send(1, msg.clone()).await?;
        let got = timeout(TEST_LIMIT, client.recv()).await??;
        ensure!(got.data == msg, "{name}: server->client");
    }
    let unknown = toml::from_str::<AssociationConfig>("[quic]\ncongestion = \"vegas\"\n")
        .expect_err("vegas is no controller")
        .to_string();
    ensure!(
        unknown.contains("congestion") && unknown.contains("vegas"),
        "{unknown}"
    );
    Ok(())
}
