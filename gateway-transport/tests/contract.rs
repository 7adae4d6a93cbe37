//! The contract every backend keeps (docs/transport.md, the list at the top),
//! over loopback through the public API only: order and boundaries per stream
//! on IPv4 and IPv6, sizes from 0 bytes to the message limit, stream
//! negotiation, backpressure, abort, graceful close from either side,
//! heartbeats, and one listener serving many associations. Each check is one
//! function of the backend; `contract!` runs them all for each backend:
//! userspace SCTP always, framed TCP and QUIC with the `baselines` feature.
//! The kernel backend's copy runs in the VM (`kernel_sctp.rs`); what only one
//! backend has stays in its own file (`userspace_loopback.rs`,
//! `quic_loopback.rs`). Every test is bounded in time.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::{
    AssociationConfig, BackendKind, Listener, Message, TransportError, connect,
};
use tokio::time::timeout;

mod support;

use support::loopback::{TEST_LIMIT, V4, V6, config, numbered, pair, payload, pinned};

async fn parallel_streams_keep_order(kind: BackendKind, bind: &str) -> Result<()> {
    const STREAMS: u16 = 16;
    const PER_STREAM: u32 = 300;
    let cfg = config();
    let (_listener, server, client) = pair(kind, bind, &cfg, &cfg).await?;
    ensure!(client.streams().outbound >= STREAMS);

    let mut senders = Vec::new();
    for stream in 0..STREAMS {
        let client = client.clone();
        senders.push(tokio::spawn(async move {
            for seq in 0..PER_STREAM {
                client.send(stream, numbered(stream, seq)).await?;
            }
            Ok::<_, TransportError>(())
        }));
    }
    let mut next = [0u32; STREAMS as usize];
    let total = u32::from(STREAMS) * PER_STREAM;
    for _ in 0..total {
        let Message { stream, data } = server.recv().await?;
        ensure!(stream < STREAMS, "unexpected stream {stream}");
        let expected = next[usize::from(stream)];
        ensure!(
            data == numbered(stream, expected),
            "stream {stream}: message {expected} differs (len {})",
            data.len()
        );
        next[usize::from(stream)] += 1;
    }
    for s in senders {
        s.await??;
    }
    ensure!(next.iter().all(|&n| n == PER_STREAM));
    Ok(())
}

async fn sizes_arrive_byte_for_byte(kind: BackendKind, bind: &str) -> Result<()> {
    let cfg = config();
    let (_listener, server, client) = pair(kind, bind, &cfg, &cfg).await?;
    let sizes = [
        0,
        1,
        1024,
        64 * 1024,
        1024 * 1024,
        4 * 1024 * 1024,
        cfg.max_message,
    ];
    for (i, &len) in sizes.iter().enumerate() {
        let msg = payload(3, i as u32, len);
        // Both directions, so both ends fragment and reassemble.
        client.send(3, msg.clone()).await?;
        let got = server.recv().await?;
        ensure!(got.stream == 3 && got.data == msg, "client->server {len} B");
        server.send(2, msg.clone()).await?;
        let got = client.recv().await?;
        ensure!(got.stream == 2 && got.data == msg, "server->client {len} B");
    }
    match client.send(1, payload(1, 0, cfg.max_message + 1)).await {
        Err(TransportError::MessageTooLarge { len, limit }) => {
            ensure!(len == cfg.max_message + 1 && limit == cfg.max_message)
        }
        other => bail!("oversized send gave {other:?}"),
    }
    Ok(())
}

async fn peer_granting_fewer_streams_is_used_with_fewer(kind: BackendKind) -> Result<()> {
    let server_cfg = AssociationConfig {
        max_inbound_streams: 4,
        ..config()
    };
    let client_cfg = AssociationConfig {
        streams: 16,
        ..config()
    };
    let (_listener, server, client) = pair(kind, V4, &server_cfg, &client_cfg).await?;
    ensure!(client.streams().outbound == 4, "{:?}", client.streams());
    ensure!(server.streams().inbound == 4, "{:?}", server.streams());
    match client.send(10, Bytes::from_static(b"x")).await {
        Err(TransportError::InvalidStream {
            stream: 10,
            outbound: 4,
        }) => {}
        other => bail!("send on stream 10 gave {other:?}"),
    }
    client.send(3, Bytes::from_static(b"last granted")).await?;
    let got = server.recv().await?;
    ensure!(got.stream == 3 && got.data == "last granted");
    // The other direction keeps the server's own counts.
    ensure!(server.streams().outbound == client.streams().inbound);
    Ok(())
}

async fn abort_is_seen_as_aborted(kind: BackendKind) -> Result<()> {
    let cfg = config();
    let (_listener, server, client) = pair(kind, V6, &cfg, &cfg).await?;
    client.send(0, Bytes::from_static(b"before")).await?;
    ensure!(server.recv().await?.data == "before");
    client.abort();
    match server.recv().await {
        Err(TransportError::Aborted) => {}
        other => bail!("server recv after abort gave {other:?}"),
    }
    match server.send(0, Bytes::from_static(b"late")).await {
        Err(TransportError::Aborted) => {}
        other => bail!("server send after abort gave {other:?}"),
    }
    Ok(())
}

async fn close_after_data(kind: BackendKind, closer_is_client: bool) -> Result<()> {
    const N: u32 = 500;
    let cfg = config();
    let (_listener, server, client) = pair(kind, V4, &cfg, &cfg).await?;
    let (closer, peer) = if closer_is_client {
        (client, server)
    } else {
        (server, client)
    };
    for seq in 0..N {
        closer.send((seq % 8) as u16, numbered(0, seq)).await?;
    }
    // The peer is not reading yet: everything must still arrive after the close.
    closer.close().await?;
    let mut next = [0u32; 8];
    let mut count = 0;
    loop {
        match peer.recv().await {
            Ok(m) => {
                let s = usize::from(m.stream);
                let seq = next[s] * 8 + u32::from(m.stream);
                ensure!(m.data == numbered(0, seq), "message {seq} differs");
                next[s] += 1;
                count += 1;
            }
            Err(TransportError::Closed) => break,
            Err(e) => bail!("peer recv gave {e} after {count} messages"),
        }
    }
    ensure!(count == N, "{count} of {N} messages before Closed");
    match closer.recv().await {
        Err(TransportError::Closed) => {}
        other => bail!("closer recv after close gave {other:?}"),
    }
    match peer.send(0, Bytes::from_static(b"late")).await {
        Err(TransportError::Closed) => {}
        other => bail!("send after close gave {other:?}"),
    }
    Ok(())
}

async fn send_waits_while_the_stream_queue_is_full(kind: BackendKind) -> Result<()> {
    let cfg = AssociationConfig {
        max_buffered_per_stream: 64 * 1024,
        ..config()
    };
    let (_listener, server, client) = pair(kind, V4, &cfg, &cfg).await?;
    let chunk = payload(5, 0, 256 * 1024);
    // What the peer holds unread absorbs some sends (SCTP and QUIC: a
    // receive window of a few MiB; framed TCP: its reader's queue of 256
    // messages and the sockets' buffers); then nothing more is taken, and the
    // queue stays full.
    const MOST_SENDS_BEFORE_WAITING: usize = 400;
    let mut sent = 0usize;
    let blocked = loop {
        match timeout(Duration::from_millis(500), client.send(5, chunk.clone())).await {
            Ok(r) => {
                r?;
                sent += 1;
                ensure!(sent < MOST_SENDS_BEFORE_WAITING, "send never waited");
            }
            Err(_) => break true,
        }
    };
    ensure!(blocked);
    let queued = client
        .buffered(5)
        .with_context(|| format!("{kind} reports per stream"))?;
    ensure!(
        queued > cfg.max_buffered_per_stream,
        "send waited with only {queued} bytes queued"
    );
    // Reading drains the queue and lets sends through again.
    let reader = tokio::spawn(async move {
        let mut n = 0usize;
        while let Ok(m) = server.recv().await {
            if m.data.len() != 256 * 1024 {
                return Err(anyhow::anyhow!("message of {} bytes", m.data.len()));
            }
            n += 1;
        }
        Ok(n)
    });
    client.send(5, chunk.clone()).await?;
    sent += 1;
    client.close().await?;
    ensure!(reader.await?? == sent, "all {sent} messages read");
    Ok(())
}

async fn heartbeats_keep_an_idle_association_alive(kind: BackendKind) -> Result<()> {
    let cfg = AssociationConfig {
        heartbeat_interval: Duration::from_millis(100),
        idle_timeout: Duration::from_millis(500),
        ..config()
    };
    let (_listener, server, client) = pair(kind, V4, &cfg, &cfg).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    client.send(1, Bytes::from_static(b"still here")).await?;
    ensure!(server.recv().await?.data == "still here");
    server.send(1, Bytes::from_static(b"me too")).await?;
    ensure!(client.recv().await?.data == "me too");
    Ok(())
}

async fn one_listener_serves_many_associations(kind: BackendKind) -> Result<()> {
    let cfg = config();
    let listener = Listener::bind(kind, V4.parse()?, &cfg).await?;
    let target = listener.local_addr()?;
    let cfg = pinned(&listener, &cfg);
    let mut clients = Vec::new();
    for i in 0..8u32 {
        let cfg = cfg.clone();
        clients.push(tokio::spawn(async move {
            let a = connect(kind, target, &cfg).await?;
            a.send(1, numbered(1, i)).await?;
            let echo = a.recv().await?;
            ensure!(echo.data == numbered(1, i), "echo {i}");
            a.close().await?;
            Ok::<_, anyhow::Error>(())
        }));
    }
    for _ in 0..8 {
        let server = listener.accept().await?;
        tokio::spawn(async move {
            while let Ok(m) = server.recv().await {
                if server.send(m.stream, m.data).await.is_err() {
                    break;
                }
            }
        });
    }
    for c in clients {
        c.await??;
    }
    Ok(())
}

/// Every check of this file for one backend, as `<backend>::<check>`.
macro_rules! contract {
    ($backend:ident, $kind:expr) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn parallel_streams_keep_order_v4() -> Result<()> {
                timeout(TEST_LIMIT, parallel_streams_keep_order($kind, V4)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn parallel_streams_keep_order_v6() -> Result<()> {
                timeout(TEST_LIMIT, parallel_streams_keep_order($kind, V6)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sizes_arrive_byte_for_byte_v4() -> Result<()> {
                timeout(TEST_LIMIT, sizes_arrive_byte_for_byte($kind, V4)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sizes_arrive_byte_for_byte_v6() -> Result<()> {
                timeout(TEST_LIMIT, sizes_arrive_byte_for_byte($kind, V6)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn peer_granting_fewer_streams_is_used_with_fewer() -> Result<()> {
                timeout(
                    TEST_LIMIT,
                    super::peer_granting_fewer_streams_is_used_with_fewer($kind),
                )
                .await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn abort_is_seen_as_aborted() -> Result<()> {
                timeout(TEST_LIMIT, super::abort_is_seen_as_aborted($kind)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn client_close_is_seen_as_closed_after_all_data() -> Result<()> {
                timeout(TEST_LIMIT, close_after_data($kind, true)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn server_close_is_seen_as_closed_after_all_data() -> Result<()> {
                timeout(TEST_LIMIT, close_after_data($kind, false)).await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn send_waits_while_the_stream_queue_is_full() -> Result<()> {
                timeout(
                    TEST_LIMIT,
                    super::send_waits_while_the_stream_queue_is_full($kind),
                )
                .await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn heartbeats_keep_an_idle_association_alive() -> Result<()> {
                timeout(
                    TEST_LIMIT,
                    super::heartbeats_keep_an_idle_association_alive($kind),
                )
                .await?
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn one_listener_serves_many_associations() -> Result<()> {
                timeout(
                    TEST_LIMIT,
                    super::one_listener_serves_many_associations($kind),
                )
                .await?
            }
        }
    };
}

contract!(userspace, BackendKind::Userspace);
#[cfg(feature = "baselines")]
contract!(framed_tcp, BackendKind::FramedTcp);
#[cfg(feature = "baselines")]
contract!(quic, BackendKind::Quic);
