//! Associations over loopback through the public API, for the tests that
//! run on this host (`contract.rs` for every backend, `userspace_loopback.rs`
//! and `quic_loopback.rs` for what one backend alone has).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use gateway_transport::{Association, AssociationConfig, BackendKind, Listener, connect};
use tokio::net::UdpSocket;

pub(crate) const V4: &str = "127.0.0.1:0";
pub(crate) const V6: &str = "[::1]:0";

/// Upper bound for any one test.
pub(crate) const TEST_LIMIT: Duration = Duration::from_secs(60);

pub(crate) fn config() -> AssociationConfig {
    AssociationConfig {
        connect_timeout: Duration::from_secs(3),
        ..AssociationConfig::default()
    }
}

/// `config` as a client of `listener` needs it: with the listener's
/// certificate pinned where it has one (QUIC).
pub(crate) fn pinned(listener: &Listener, config: &AssociationConfig) -> AssociationConfig {
    let mut config = config.clone();
    if let Some(pin) = listener.quic_cert_sha256() {
        config.quic.server_cert_sha256 = Some(pin.to_owned());
    }
    config
}

/// A `kind` listener on `bind`, a client connected to it, and the accepted
/// server side.
pub(crate) async fn pair(
    kind: BackendKind,
    bind: &str,
    server_config: &AssociationConfig,
    client_config: &AssociationConfig,
) -> Result<(Listener, Association, Association)> {
    let addr: SocketAddr = bind.parse()?;
    let listener = Listener::bind(kind, addr, server_config).await?;
    let target = listener.local_addr()?;
    let client_config = pinned(&listener, client_config);
    let (client, server) = tokio::join!(connect(kind, target, &client_config), listener.accept());
    let (client, server) = (client.context("connect")?, server.context("accept")?);
    ensure!(client.kind() == kind && server.kind() == kind);
    ensure!(
        client.peer_addr() == target,
        "client's peer is the listener"
    );
    ensure!(
        server.peer_addr().ip() == target.ip(),
        "server's peer is the client"
    );
    Ok((listener, server, client))
}

/// Deterministic message content: every byte depends on stream, number and index.
pub(crate) fn payload(stream: u16, seq: u32, len: usize) -> Bytes {
    let seed = u32::from(stream).wrapping_mul(0x9e37_79b9) ^ seq.wrapping_mul(0x85eb_ca6b);
    (0..len)
        .map(|i| (seed.wrapping_add(i as u32).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Numbered messages with a header (seq) so boundaries and order are checkable.
pub(crate) fn numbered(stream: u16, seq: u32) -> Bytes {
    let len = 1 + (seq as usize * 7919) % 3000;
    let mut v = seq.to_be_bytes().to_vec();
    v.extend_from_slice(&payload(stream, seq, len));
    v.into()
}

/// What a test can do to a [`relay`]: make it drop what passes (`silent`),
/// or close both its sockets, as a killed process's would (`gone`).
#[derive(Default)]
pub(crate) struct RelayControl {
    pub(crate) silent: AtomicBool,
    pub(crate) gone: tokio::sync::Notify,
}

/// A UDP relay between a client and a listener, under `control`.
pub(crate) async fn relay(upstream: SocketAddr, control: Arc<RelayControl>) -> Result<SocketAddr> {
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

/// User plus system CPU time of this process, from `/proc/self/stat` (in clock
/// ticks of 10 ms).
pub(crate) fn cpu_seconds() -> f64 {
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
/// `PROBE_STREAMS`, `PROBE_SECS`, `PROBE_BUFFERED` and `PROBE_MAX_MESSAGE`
/// change the defaults (16 streams, 3 s, 64 KiB queued per stream, the
/// default largest message).
pub(crate) async fn throughput_probe(kind: BackendKind) -> Result<()> {
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
        let (_listener, server, client) = pair(kind, V4, &cfg, &cfg).await?;
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
            "{} loopback: {streams} streams x {} KiB messages, {} KiB queue per stream: \
             {:.0} Mbit/s, {:.0} Mbit per CPU second ({:.2} CPUs busy)",
            kind.name(),
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
