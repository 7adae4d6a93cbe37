//! NAT rebinding on loopback (RFC 6951 5.4): a UDP relay between a client and
//! a listener, standing for a NAT, starts sending the client's datagrams from
//! a new socket (a new source port) mid-download and forgets the old one, as
//! a NAT whose mapping expired does. The download completes on the same
//! association, and the listener's side now sends to the new port.

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

/// A one-client NAT on loopback: what arrives at `front` goes to `server`
/// from the current back socket, and what a back socket receives goes to the
/// client through `front`. Once `rebound` is set, the second back socket is
/// used and the first one's traffic is dropped (its mapping is gone).
struct Relay {
    front: SocketAddr,
    backs: [SocketAddr; 2],
    rebound: Arc<AtomicBool>,
}

async fn relay(server: SocketAddr) -> Result<Relay> {
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
    let backs = [
        Arc::new(UdpSocket::bind("127.0.0.1:0").await?),
        Arc::new(UdpSocket::bind("127.0.0.1:0").await?),
    ];
    let rebound = Arc::new(AtomicBool::new(false));
    let client: Arc<std::sync::Mutex<Option<SocketAddr>>> = Arc::default();
    let addrs = Relay {
        front: front.local_addr()?,
        backs: [backs[0].local_addr()?, backs[1].local_addr()?],
        rebound: Arc::clone(&rebound),
    };
    {
        let (front, backs, rebound, client) = (
            Arc::clone(&front),
            backs.clone(),
            Arc::clone(&rebound),
            Arc::clone(&client),
        );
        tokio::spawn(async move {
            let mut buf = vec![0; 65_536];
            while let Ok((n, from)) = front.recv_from(&mut buf).await {
                *client.lock().expect("lock") = Some(from);
                let back = &backs[usize::from(rebound.load(Ordering::Acquire))];
                let _ = back.send_to(&buf[..n], server).await;
            }
        });
    }
    for (i, back) in backs.into_iter().enumerate() {
        let (front, rebound, client) = (
            Arc::clone(&front),
            Arc::clone(&rebound),
            Arc::clone(&client),
        );
        tokio::spawn(async move {
            let mut buf = vec![0; 65_536];
            while let Ok((n, _)) = back.recv_from(&mut buf).await {
                if usize::from(rebound.load(Ordering::Acquire)) != i {
                    continue;
                }
                let to = *client.lock().expect("lock");
                if let Some(to) = to {
                    let _ = front.send_to(&buf[..n], to).await;
                }
            }
        });
    }
    Ok(addrs)
}

async fn download_across_a_port_change() -> Result<()> {
    let config = AssociationConfig {
        connect_timeout: Duration::from_secs(3),
        ..AssociationConfig::default()
    };
    let listener = Listener::bind(BackendKind::Userspace, "127.0.0.1:0".parse()?, &config).await?;
    let relay = relay(listener.local_addr()?).await?;
    let (client, server) = tokio::join!(
        connect(BackendKind::Userspace, relay.front, &config),
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
    let stats = server.sctp_stats().context("userspace stats")?;
    ensure!(
        stats.counters.port_changes == 1,
        "the server followed one port change: {:?}",
        stats.counters
    );
    ensure!(
        server.peer_addr() == relay.backs[1],
        "the server sends to the new port: {} (ports {:?})",
        server.peer_addr(),
        relay.backs
    );
    // The same association still carries traffic both ways.
    client.send(0, Bytes::from_static(b"still here")).await?;
    let echo = server.recv().await?;
    ensure!(echo.data == Bytes::from_static(b"still here"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_survives_a_change_of_the_clients_port() -> Result<()> {
    timeout(TEST_LIMIT, download_across_a_port_change())
        .await
        .context("test time limit")?
}
