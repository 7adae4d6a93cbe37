//! Our userspace SCTP (our own `sctp` core over UDP) against the Linux kernel's SCTP with
//! RFC 6951 UDP encapsulation: two implementations that share nothing but the
//! wire format.
//!
//! Needs a kernel with SCTP: `#[ignore]`d on the host, run by `cargo xtask
//! vm-test` inside the VM, where `net.sctp.udp_port` is 9899. The kernel listens
//! for encapsulated packets on that UDP port; our userspace side uses the same
//! number as its SCTP port on both ends, so the kernel listener binds SCTP port
//! 9899 too.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use gateway_transport::{
    Association, AssociationConfig, BackendKind, Listener, SCTP_UDP_PORT, TransportError, connect,
};

const LIMIT: Duration = Duration::from_secs(90);

fn config() -> AssociationConfig {
    AssociationConfig {
        streams: 8,
        max_inbound_streams: 8,
        connect_timeout: Duration::from_secs(30),
        ..AssociationConfig::default()
    }
}

fn payload(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

/// The side that sends first sends every (stream, size), the other echoes each
/// message back on its stream; both check bytes.
async fn echo_both_ways(client: &Association, server: &Association) -> Result<()> {
    let sizes = [1usize, 100, 1_500, 9_000, 65_536, 300_000];
    let echo = async {
        for _ in sizes {
            let m = server.recv().await.context("server recv")?;
            server.send(m.stream, m.data).await.context("server echo")?;
        }
        Ok::<_, anyhow::Error>(())
    };
    let drive = async {
        for (i, len) in sizes.into_iter().enumerate() {
            let stream = 1 + (i as u16 % 7);
            let data = payload(i as u8 + 1, len);
            client
                .send(stream, data.clone())
                .await
                .context("client send")?;
            let back = client.recv().await.context("client recv")?;
            ensure!(
                back.stream == stream,
                "echo of {len} B came on stream {}",
                back.stream
            );
            ensure!(back.data == data, "echo of {len} B differs");
        }
        Ok(())
    };
    let (a, b) = tokio::join!(echo, drive);
    a?;
    b
}

#[tokio::test]
#[ignore = "needs kernel SCTP with UDP encapsulation: run by cargo xtask vm-test"]
async fn userspace_client_talks_to_a_kernel_listener_over_udp() -> Result<()> {
    tokio::time::timeout(LIMIT, async {
        let addr = SocketAddr::from(([127, 0, 0, 1], SCTP_UDP_PORT));
        let kernel_config = AssociationConfig {
            // Replies go back encapsulated to the port the userspace side used.
            udp_encapsulation_port: Some(SCTP_UDP_PORT),
            ..config()
        };
        let listener = Listener::bind(BackendKind::Kernel, addr, &kernel_config).await?;
        let userspace_config = config();
        let (client, server) = tokio::join!(
            connect(BackendKind::Userspace, addr, &userspace_config),
            listener.accept()
        );
        let (client, server) = (
            client.context("userspace connect")?,
            server.context("kernel accept")?,
        );
        ensure!(client.kind() == BackendKind::Userspace && server.kind() == BackendKind::Kernel);
        ensure!(
            client.streams().outbound == 8 && server.streams().inbound == 8,
            "streams: userspace {:?}, kernel {:?}",
            client.streams(),
            server.streams()
        );
        echo_both_ways(&client, &server).await?;
        client.close().await?;
        match server.recv().await {
            Err(TransportError::Closed) => Ok(()),
            other => anyhow::bail!("kernel side expected Closed, got {other:?}"),
        }
    })
    .await
    .context("no result in time")?
}

#[tokio::test]
#[ignore = "needs kernel SCTP with UDP encapsulation: run by cargo xtask vm-test"]
async fn kernel_client_talks_to_a_userspace_listener_over_udp() -> Result<()> {
    tokio::time::timeout(LIMIT, async {
        // The kernel owns UDP 9899 (net.sctp.udp_port); ours listens beside it and
        // uses its own port as its SCTP port, as it always does.
        let port = SCTP_UDP_PORT + 1;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = Listener::bind(BackendKind::Userspace, addr, &config()).await?;
        let kernel_config = AssociationConfig {
            udp_encapsulation_port: Some(port),
            ..config()
        };
        let (client, server) = tokio::join!(
            connect(BackendKind::Kernel, addr, &kernel_config),
            listener.accept()
        );
        let (client, server) = (
            client.context("kernel connect")?,
            server.context("userspace accept")?,
        );
        echo_both_ways(&client, &server).await?;
        client.close().await?;
        match server.recv().await {
            Err(TransportError::Closed) => Ok(()),
            other => anyhow::bail!("userspace side expected Closed, got {other:?}"),
        }
    })
    .await
    .context("no result in time")?
}
