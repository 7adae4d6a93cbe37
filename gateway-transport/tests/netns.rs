//! The association API between two network namespaces joined by a veth pair, for
//! every backend that runs on this host (userspace SCTP, and framed TCP and QUIC
//! with the `baselines` feature; the kernel backend runs the same checks in the
//! VM, see tests/kernel_sctp.rs).
//!
//! Needs root (namespaces). Every test bounds itself in time and removes its
//! namespaces on drop.

mod support;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::userspace::UdpStats;
use gateway_transport::{
    Association, AssociationConfig, BackendKind, Listener, QuicConfig, TransportError, UdpOffload,
    UserspaceConfig, connect,
};
use support::{NetnsPair, join, spawn_in};

const PORT: u16 = 9899;
/// Upper bound for one side of one test.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn config(streams: u16) -> AssociationConfig {
    AssociationConfig {
        streams,
        max_inbound_streams: streams,
        ..AssociationConfig::default()
    }
}

/// Runs `server` on an accepted association in namespace a and `client` on a
/// connected one in namespace b, both bounded by [`TEST_TIMEOUT`].
fn run_pair<S, SF, C, CF>(
    kind: BackendKind,
    v6: bool,
    server_config: AssociationConfig,
    mut client_config: AssociationConfig,
    server: S,
    client: C,
) -> Result<()>
where
    S: FnOnce(Association) -> SF + Send + 'static,
    SF: Future<Output = Result<()>>,
    C: FnOnce(Association) -> CF + Send + 'static,
    CF: Future<Output = Result<()>>,
{
    let net = NetnsPair::new()?;
    let (a, _) = net.addrs(v6);
    let addr = SocketAddr::new(a, PORT);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = spawn_in(&net.a, move || async move {
        let listener = Listener::bind(kind, addr, &server_config).await?;
        // QUIC: the client pins the certificate this listener just made.
        let _ = ready_tx.send(listener.quic_cert_sha256().map(str::to_owned));
        let work = async {
            let assoc = listener.accept().await.context("accept")?;
            server(assoc).await
        };
        tokio::time::timeout(TEST_TIMEOUT, work)
            .await
            .context("server side timed out")?
    });
    // If the server failed to bind, its error is the one worth reporting.
    match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(pin) => client_config.quic.server_cert_sha256 = pin,
        Err(_) => return join(server).and_then(|()| bail!("server never became ready")),
    }
    let client = spawn_in(&net.b, move || async move {
        let work = async {
            let assoc = connect(kind, addr, &client_config)
                .await
                .context("connect")?;
            client(assoc).await
        };
        tokio::time::timeout(TEST_TIMEOUT, work)
            .await
            .context("client side timed out")?
    });
    let client_result = join(client);
    let server_result = join(server);
    match (client_result, server_result) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(c), Ok(())) => Err(c.context("client")),
        (Ok(()), Err(s)) => Err(s.context("server")),
        (Err(c), Err(s)) => Err(c.context(format!("client (and server: {s:#})"))),
    }
}

/// A message whose bytes say which stream and sequence number it is, so the
/// receiver can check order, boundaries and content at once.
fn numbered(stream: u16, seq: u32, len: usize) -> Bytes {
    let mut data = Vec::with_capacity(len.max(10));
    data.extend_from_slice(&stream.to_be_bytes());
    data.extend_from_slice(&seq.to_be_bytes());
    data.extend_from_slice(&(len as u32).to_be_bytes());
    let mut x = u32::from(stream) * 7919 + seq;
    while data.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        data.push((x >> 16) as u8);
    }
    Bytes::from(data)
}

fn check_numbered(stream: u16, data: &Bytes) -> Result<u32> {
    ensure!(
        data.len() >= 10,
        "message of {} bytes is too short",
        data.len()
    );
    let sent_stream = u16::from_be_bytes([data[0], data[1]]);
    let seq = u32::from_be_bytes([data[2], data[3], data[4], data[5]]);
    let len = u32::from_be_bytes([data[6], data[7], data[8], data[9]]) as usize;
    ensure!(
        sent_stream == stream,
        "message for stream {sent_stream} arrived on {stream}"
    );
    ensure!(
        len == data.len(),
        "message boundary moved: {len} sent, {} received",
        data.len()
    );
    ensure!(
        data == &numbered(stream, seq, len),
        "payload of {stream}/{seq} corrupted"
    );
    Ok(seq)
}

/// Data streams each send numbered messages concurrently; the receiver checks
/// per-stream order, boundaries and bytes, and that no stream went missing.
fn parallel_streams(kind: BackendKind, v6: bool) -> Result<()> {
    const STREAMS: u16 = 8;
    const PER_STREAM: u32 = 200;
    let server = |assoc: Association| async move {
        let mut next = vec![0u32; usize::from(STREAMS) + 1];
        for _ in 0..u32::from(STREAMS) * PER_STREAM {
            let m = assoc.recv().await?;
            ensure!(
                (1..=STREAMS).contains(&m.stream),
                "unexpected stream {}",
                m.stream
            );
            let seq = check_numbered(m.stream, &m.data)?;
            let expected = &mut next[usize::from(m.stream)];
            ensure!(
                seq == *expected,
                "stream {}: got {seq}, expected {expected}",
                m.stream
            );
            *expected += 1;
        }
        assoc.send(0, Bytes::from_static(b"done")).await?;
        assoc.close().await?;
        Ok(())
    };
    let client = |assoc: Association| async move {
        let mut senders = tokio::task::JoinSet::new();
        for stream in 1..=STREAMS {
            let assoc = assoc.clone();
            senders.spawn(async move {
                for seq in 0..PER_STREAM {
                    let len = 10 + (seq as usize * 7_919 + usize::from(stream) * 131) % 30_000;
                    assoc.send(stream, numbered(stream, seq, len)).await?;
                }
                Ok::<_, TransportError>(())
            });
        }
        while let Some(sent) = senders.join_next().await {
            sent??;
        }
        let done = assoc.recv().await?;
        ensure!(
            done.stream == 0 && &done.data[..] == b"done",
            "bad final message"
        );
        // Stay until the server's close completes: leaving earlier looks like a
        // dead peer to a userspace stack, which nothing answers for.
        match assoc.recv().await {
            Err(TransportError::Closed) => Ok(()),
            other => bail!("expected Closed after done, got {other:?}"),
        }
    };
    run_pair(
        kind,
        v6,
        config(STREAMS + 1),
        config(STREAMS + 1),
        server,
        client,
    )
}

/// Every size from 1 byte to 4 MiB is echoed back byte for byte.
fn sizes(kind: BackendKind, v6: bool) -> Result<()> {
    const SIZES: [usize; 9] = [1, 2, 100, 1_199, 1_500, 9_000, 65_536, 1 << 20, 4 << 20];
    let payload = |len: usize| {
        Bytes::from(
            (0..len)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect::<Vec<u8>>(),
        )
    };
    let server = |assoc: Association| async move {
        for _ in SIZES {
            let m = assoc.recv().await?;
            assoc.send(m.stream, m.data).await?;
        }
        // Wait for the client's close so our echoes are not cut off.
        match assoc.recv().await {
            Err(TransportError::Closed) => Ok(()),
            other => bail!("expected Closed after the echoes, got {other:?}"),
        }
    };
    let client = move |assoc: Association| async move {
        for (i, len) in SIZES.into_iter().enumerate() {
            let stream = 1 + (i as u16 % 2);
            assoc.send(stream, payload(len)).await?;
            let echo = assoc.recv().await?;
            ensure!(
                echo.stream == stream,
                "echo of {len} B on stream {}",
                echo.stream
            );
            ensure!(
                echo.data.len() == len,
                "sent {len} B, echo has {}",
                echo.data.len()
            );
            ensure!(echo.data == payload(len), "echo of {len} B differs");
        }
        assoc.close().await?;
        Ok(())
    };
    run_pair(kind, v6, config(4), config(4), server, client)
}

/// The server grants 4 inbound streams; the client asked for 16 and must use 4.
fn fewer_streams(kind: BackendKind) -> Result<()> {
    let server_config = AssociationConfig {
        max_inbound_streams: 4,
        ..config(16)
    };
    let server = |assoc: Association| async move {
        ensure!(
            assoc.streams().inbound == 4,
            "server inbound {:?}",
            assoc.streams()
        );
        let m = assoc.recv().await?;
        ensure!(m.stream == 3 && &m.data[..] == b"last stream", "got {m:?}");
        assoc
            .send(15, Bytes::from_static(b"server may use 16"))
            .await?;
        match assoc.recv().await {
            Err(TransportError::Closed) => Ok(()),
            other => bail!("expected Closed, got {other:?}"),
        }
    };
    let client = |assoc: Association| async move {
        ensure!(
            assoc.streams().outbound == 4,
            "client outbound {:?}",
            assoc.streams()
        );
        match assoc.send(10, Bytes::from_static(b"x")).await {
            Err(TransportError::InvalidStream {
                stream: 10,
                outbound: 4,
            }) => {}
            other => bail!("send on stream 10 gave {other:?}"),
        }
        assoc
            .send(3, Bytes::from_static(b"last stream"))
            .await
            .context("send on 3")?;
        let m = assoc.recv().await.context("reply")?;
        ensure!(m.stream == 15, "server's reply came on {}", m.stream);
        assoc.close().await.context("close")?;
        Ok(())
    };
    run_pair(kind, false, server_config, config(16), server, client)
}

/// An abort reaches the peer as `Aborted`, after the data sent before it.
fn abort(kind: BackendKind) -> Result<()> {
    let server = |assoc: Association| async move {
        let m = assoc.recv().await?;
        ensure!(&m.data[..] == b"before abort", "got {m:?}");
        assoc.send(1, Bytes::from_static(b"ack")).await?;
        match assoc.recv().await {
            Err(TransportError::Aborted) => Ok(()),
            other => bail!("expected Aborted, got {other:?}"),
        }
    };
    let client = |assoc: Association| async move {
        assoc.send(1, Bytes::from_static(b"before abort")).await?;
        assoc.recv().await?;
        assoc.abort();
        // QUIC's CONNECTION_CLOSE is sent by quinn's driver task, which needs
        // the runtime this side is about to drop (docs/transport.md).
        if assoc.kind().name() == "quic" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    };
    run_pair(kind, false, config(2), config(2), server, client)
}

/// A graceful close delivers everything queued before it, then `Closed`.
fn close(kind: BackendKind, v6: bool) -> Result<()> {
    const COUNT: u32 = 500;
    let server = |assoc: Association| async move {
        for expected in 0..COUNT {
            let m = assoc.recv().await?;
            ensure!(
                check_numbered(m.stream, &m.data)? == expected,
                "out of order"
            );
        }
        match assoc.recv().await {
            Err(TransportError::Closed) => Ok(()),
            other => bail!("expected Closed, got {other:?}"),
        }
    };
    let client = |assoc: Association| async move {
        for seq in 0..COUNT {
            assoc.send(1, numbered(1, seq, 2_000)).await?;
        }
        assoc.close().await?;
        Ok(())
    };
    run_pair(kind, v6, config(2), config(2), server, client)
}

/// Nothing listens: connect fails within the connect time-out instead of hanging.
fn connect_to_nobody(kind: BackendKind) -> Result<()> {
    let net = NetnsPair::new()?;
    let addr = SocketAddr::new(net.addrs(false).0, PORT);
    let client = spawn_in(&net.b, move || async move {
        let config = AssociationConfig {
            connect_timeout: Duration::from_secs(2),
            quic: QuicConfig {
                // Any pin, so that QUIC gets as far as sending.
                server_cert_sha256: Some("00".repeat(32)),
                ..config(2).quic
            },
            ..config(2)
        };
        let started = tokio::time::Instant::now();
        let result = connect(kind, addr, &config).await;
        match result {
            Err(TransportError::Io(_) | TransportError::ConnectTimeout(_)) => {}
            other => bail!("connect to nobody gave {other:?}"),
        }
        ensure!(
            started.elapsed() < Duration::from_secs(5),
            "connect took {:?}",
            started.elapsed()
        );
        Ok(())
    });
    join(client)
}

macro_rules! backend_tests {
    ($module:ident, $kind:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn parallel_streams_keep_order_and_boundaries_v4() -> Result<()> {
                parallel_streams($kind, false)
            }

            #[test]
            fn parallel_streams_keep_order_and_boundaries_v6() -> Result<()> {
                parallel_streams($kind, true)
            }

            #[test]
            fn sizes_from_one_byte_to_four_mib_v4() -> Result<()> {
                sizes($kind, false)
            }

            #[test]
            fn sizes_from_one_byte_to_four_mib_v6() -> Result<()> {
                sizes($kind, true)
            }

            #[test]
            fn peer_granting_fewer_streams_is_used_with_fewer() -> Result<()> {
                fewer_streams($kind)
            }

            #[test]
            fn peer_abort_is_reported() -> Result<()> {
                abort($kind)
            }

            #[test]
            fn graceful_close_delivers_everything_first() -> Result<()> {
                close($kind, true)
            }

            #[test]
            fn connect_to_nobody_fails_in_time() -> Result<()> {
                connect_to_nobody($kind)
            }
        }
    };
}

#[cfg(feature = "baselines")]
backend_tests!(framed_tcp, BackendKind::FramedTcp);
backend_tests!(userspace, BackendKind::Userspace);

/// Bytes each side of the batched-I/O tests sends.
const BULK_BYTES: usize = 16 << 20;
/// Message sizes of the batched-I/O tests, in turn: below, at and above one
/// packet, and messages of many packets (GSO runs with a shorter last one).
const BULK_SIZES: [usize; 8] = [1, 100, 1_199, 1_500, 9_000, 16_384, 65_536, 300_000];
/// Data streams of the batched-I/O tests.
const BULK_STREAMS: u16 = 4;

/// Sends numbered messages of [`BULK_SIZES`] on every data stream until
/// [`BULK_BYTES`] are out, one task per stream; returns how many per stream.
async fn send_bulk(assoc: &Association) -> Result<Vec<u32>> {
    let mut senders = tokio::task::JoinSet::new();
    for stream in 1..=BULK_STREAMS {
        let assoc = assoc.clone();
        senders.spawn(async move {
            let (mut seq, mut sent) = (0u32, 0);
            while sent < BULK_BYTES / usize::from(BULK_STREAMS) {
                let len = BULK_SIZES[(seq as usize + usize::from(stream)) % BULK_SIZES.len()];
                assoc
                    .send(stream, numbered(stream, seq, len.max(10)))
                    .await?;
                sent += len.max(10);
                seq += 1;
            }
            Ok::<_, TransportError>((stream, seq))
        });
    }
    let mut counts = vec![0; usize::from(BULK_STREAMS) + 1];
    while let Some(sent) = senders.join_next().await {
        let (stream, n) = sent??;
        counts[usize::from(stream)] = n;
    }
    Ok(counts)
}

/// Receives numbered messages, checking order, boundaries and bytes per
/// stream, until the peer's count message (stream 0) has been matched.
async fn recv_bulk(assoc: &Association) -> Result<()> {
    let mut next = vec![0u32; usize::from(BULK_STREAMS) + 1];
    let mut expected: Option<Vec<u32>> = None;
    while expected.as_ref() != Some(&next) {
        let m = assoc.recv().await?;
        if m.stream == 0 {
            let counts = m
                .data
                .chunks(4)
                .map(|c| c.try_into().map(u32::from_be_bytes))
                .collect::<Result<Vec<u32>, _>>()?;
            ensure!(counts.len() == next.len(), "bad count message");
            expected = Some(counts);
            continue;
        }
        let seq = check_numbered(m.stream, &m.data)?;
        let slot = next
            .get_mut(usize::from(m.stream))
            .context("unexpected stream")?;
        ensure!(
            seq == *slot,
            "stream {}: got {seq}, expected {slot}",
            m.stream
        );
        *slot += 1;
    }
    Ok(())
}

/// Both sides send [`BULK_BYTES`] to each other at once and check every byte
/// they receive; returns the (server, client) UDP socket counters.
fn bulk_both_ways(v6: bool, config: AssociationConfig) -> Result<(UdpStats, UdpStats)> {
    let (stats_tx, stats_rx) = std::sync::mpsc::channel();
    let side = move |server: bool, stats: std::sync::mpsc::Sender<(bool, UdpStats)>| {
        move |assoc: Association| async move {
            let send = async {
                let counts = send_bulk(&assoc).await?;
                let counts: Vec<u8> = counts.iter().flat_map(|n| n.to_be_bytes()).collect();
                assoc.send(0, Bytes::from(counts)).await?;
                Ok(())
            };
            tokio::try_join!(send, recv_bulk(&assoc))?;
            let udp = assoc.userspace().context("not the userspace backend")?;
            let _ = stats.send((server, udp.udp_stats()));
            if server {
                match assoc.recv().await {
                    Err(TransportError::Closed) => Ok(()),
                    other => bail!("expected Closed, got {other:?}"),
                }
            } else {
                assoc.close().await?;
                Ok(())
            }
        }
    };
    run_pair(
        BackendKind::Userspace,
        v6,
        config.clone(),
        config,
        side(true, stats_tx.clone()),
        side(false, stats_tx),
    )?;
    let (mut server, mut client) = (None, None);
    for (is_server, stats) in stats_rx.try_iter() {
        *(if is_server { &mut server } else { &mut client }) = Some(stats);
    }
    Ok((
        server.context("no server counters")?,
        client.context("no client counters")?,
    ))
}

/// GSO and GRO carry the bulk where the kernel offers them (Linux >= 4.18 and
/// >= 5.0; a veth hands a GSO batch to a GRO socket whole), every byte checked.
fn offload_carries_the_bulk(v6: bool) -> Result<()> {
    let offload = AssociationConfig {
        userspace: UserspaceConfig {
            udp_offload: UdpOffload::On,
            ..config(BULK_STREAMS + 1).userspace
        },
        ..config(BULK_STREAMS + 1)
    };
    let (server, client) = bulk_both_ways(v6, offload)?;
    for (side, stats) in [("server", server), ("client", client)] {
        eprintln!("{side}: {stats:?}");
        ensure!(
            stats.datagrams_sent > 0 && stats.datagrams_received > 0,
            "{side}: {stats:?}"
        );
        if stats.max_gso_segments > 1 {
            // Most of a side's bulk leaves in full-sized runs.
            ensure!(
                stats.gso_datagrams * 2 > stats.datagrams_sent,
                "{side}: GSO offered but little used: {stats:?}"
            );
        } else {
            eprintln!("{side}: the kernel offers no GSO; not checked");
        }
        if stats.gro {
            ensure!(
                stats.gro_datagrams * 2 > stats.datagrams_received,
                "{side}: GRO on but little used: {stats:?}"
            );
        } else {
            eprintln!("{side}: the kernel offers no GRO; not checked");
        }
    }
    Ok(())
}

/// `udp_offload = false`, as on a kernel without GSO and GRO: one datagram per
/// send and per buffer, the same bytes checked.
fn without_offload(v6: bool) -> Result<()> {
    let config = AssociationConfig {
        userspace: UserspaceConfig {
            udp_offload: UdpOffload::Off,
            ..config(BULK_STREAMS + 1).userspace
        },
        ..config(BULK_STREAMS + 1)
    };
    let (server, client) = bulk_both_ways(v6, config)?;
    for (side, stats) in [("server", server), ("client", client)] {
        ensure!(
            stats.max_gso_segments == 1 && !stats.gro,
            "{side}: offload still on: {stats:?}"
        );
        ensure!(
            stats.gso_sends == 0 && stats.gro_buffers == 0,
            "{side}: batched anyway: {stats:?}"
        );
        ensure!(
            stats.datagrams_sent > 0 && stats.datagrams_received > 0,
            "{side}: {stats:?}"
        );
    }
    Ok(())
}

mod userspace_offload {
    use super::*;

    #[test]
    fn gso_and_gro_carry_many_megabytes_v4() -> Result<()> {
        offload_carries_the_bulk(false)
    }

    #[test]
    fn gso_and_gro_carry_many_megabytes_v6() -> Result<()> {
        offload_carries_the_bulk(true)
    }

    #[test]
    fn one_datagram_per_syscall_without_offload() -> Result<()> {
        without_offload(false)
    }
}
#[cfg(feature = "baselines")]
backend_tests!(quic, BackendKind::Quic);
