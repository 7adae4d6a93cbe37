//! NAT rebinding on loopback (RFC 6951 5.4): a UDP relay between a client and
//! a listener, standing for a NAT, starts carrying one side's datagrams from
//! a new socket (a new source port) mid-download and forgets the old one, as
//! a NAT whose mapping expired does. Either side can be the one that moves:
//! the client (a gateway behind a home NAT) or the listener (an origin behind
//! a NAT that remaps). The download completes on the same association, and
//! the other side now sends to the new port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use gateway_transport::{AssociationConfig, BackendKind, Listener, connect};
use tokio::net::UdpSocket;
use tokio::time::timeout;

/// Upper bound for the whole test.
const TEST_LIMIT: Duration = Duration::from_secs(60);
/// The download: messages and their size, bytes.
const MESSAGES: u32 = 2_000;
const MESSAGE_LEN: usize = 4_000;

fn message(i: u32) -> Bytes {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(MESSAGE_LEN, i as u8);
    Bytes::from(v)
}

/// Which side's port the relay changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moves {
    /// The client's datagrams reach the listener from a new port.
    Client,
    /// The listener's datagrams reach the client from a new port.
    Listener,
}

/// A one-client NAT on loopback: the client sends to `fronts[0]`, and what
/// a front socket receives goes to `server` from a back socket; what a back
/// socket receives goes to the client from a front socket. Once `rebound` is
/// set, the moving side's second socket is used (`backs[1]` for the client's
/// datagrams, `fronts[1]` for the listener's), and the first one's traffic
/// is dropped (its mapping is gone).
struct Relay {
    fronts: [SocketAddr; 2],
    backs: [SocketAddr; 2],
    rebound: Arc<AtomicBool>,
}

async fn relay(server: SocketAddr, moves: Moves) -> Result<Relay> {
    async fn pair() -> Result<[Arc<UdpSocket>; 2]> {
        Ok([
            Arc::new(UdpSocket::bind("127.0.0.1:0").await?),
            Arc::new(UdpSocket::bind("127.0.0.1:0").await?),
        ])
    }
    let (fronts, backs) = (pair().await?, pair().await?);
    let rebound = Arc::new(AtomicBool::new(false));
    let client: Arc<std::sync::Mutex<Option<SocketAddr>>> = Arc::default();
    let addrs = Relay {
        fronts: [fronts[0].local_addr()?, fronts[1].local_addr()?],
        backs: [backs[0].local_addr()?, backs[1].local_addr()?],
        rebound: Arc::clone(&rebound),
    };
    // The socket of a pair in use: the moving side's follows `rebound`.
    let current = move |rebound: &AtomicBool, side: Moves| {
        if side == moves {
            usize::from(rebound.load(Ordering::Acquire))
        } else {
            0
        }
    };
    for (i, front) in fronts.iter().enumerate() {
        let (front, backs, rebound, client) = (
            Arc::clone(front),
            backs.clone(),
            Arc::clone(&rebound),
            Arc::clone(&client),
        );
        tokio::spawn(async move {
            let mut buf = vec![0; 65_536];
            while let Ok((n, from)) = front.recv_from(&mut buf).await {
                if current(&rebound, Moves::Listener) != i {
                    continue;
                }
                *client.lock().expect("lock") = Some(from);
                let back = &backs[current(&rebound, Moves::Client)];
                let _ = back.send_to(&buf[..n], server).await;
            }
        });
    }
    for (i, back) in backs.iter().enumerate() {
        let (fronts, back, rebound, client) = (
            fronts.clone(),
            Arc::clone(back),
            Arc::clone(&rebound),
            Arc::clone(&client),
        );
        tokio::spawn(async move {
            let mut buf = vec![0; 65_536];
            while let Ok((n, _)) = back.recv_from(&mut buf).await {
                if current(&rebound, Moves::Client) != i {
                    continue;
                }
                let to = *client.lock().expect("lock");
                if let Some(to) = to {
                    let front = &fronts[current(&rebound, Moves::Listener)];
                    let _ = front.send_to(&buf[..n], to).await;
                }
            }
        });
    }
    Ok(addrs)
}

/// Downloads from the listener to the client while the relay moves one
/// side's port, then checks that the other side followed it once.
async fn download_across_a_port_change(moves: Moves) -> Result<()> {
    let config = AssociationConfig {
        connect_timeout: Duration::from_secs(3),
        ..AssociationConfig::default()
    };
    let listener = Listener::bind(BackendKind::Userspace, "127.0.0.1:0".parse()?, &config).await?;
    let relay = relay(listener.local_addr()?, moves).await?;
    let (client, server) = tokio::join!(
        connect(BackendKind::Userspace, relay.fronts[0], &config),
        listener.accept()
    );
    let (client, server) = (client.context("connect")?, server.context("accept")?);
    ensure!(
        server.peer_addr() == relay.backs[0],
        "the server sees the first port"
    );

    let sender = tokio::spawn(async move {
        for i in 0..MESSAGES {
            server.send(0, message(i)).await?;
        }
        anyhow::Ok(server)
    });
    for i in 0..MESSAGES {
        if i == MESSAGES / 4 {
            relay.rebound.store(true, Ordering::Release);
        }
        let msg = client
            .recv()
            .await
            .with_context(|| format!("message {i}"))?;
        ensure!(msg.data == message(i), "message {i} intact and in order");
    }
    let server = sender.await??;
    // The side that stayed put followed the one that moved.
    let (follower, expected) = match moves {
        Moves::Client => (&server, relay.backs[1]),
        Moves::Listener => (&client, relay.fronts[1]),
    };
    let stats = follower.sctp_stats().context("userspace stats")?;
    ensure!(
        stats.counters.port_changes == 1,
        "the {:?}'s peer was followed across one port change: {:?}",
        moves,
        stats.counters
    );
    ensure!(
        follower.peer_addr() == expected,
        "datagrams go to the new port: {} (relay fronts {:?}, backs {:?})",
        follower.peer_addr(),
        relay.fronts,
        relay.backs
    );
    // The same association still carries traffic both ways.
    client.send(0, Bytes::from_static(b"still here")).await?;
    let echo = server.recv().await?;
    ensure!(echo.data == Bytes::from_static(b"still here"));
    server.send(0, Bytes::from_static(b"and back")).await?;
    let echo = client.recv().await?;
    ensure!(echo.data == Bytes::from_static(b"and back"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_survives_a_change_of_the_clients_port() -> Result<()> {
    timeout(TEST_LIMIT, download_across_a_port_change(Moves::Client))
        .await
        .context("test time limit")?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_survives_a_change_of_the_listeners_port() -> Result<()> {
    timeout(TEST_LIMIT, download_across_a_port_change(Moves::Listener))
        .await
        .context("test time limit")?
}
