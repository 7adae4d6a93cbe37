//! An IPv4 and an IPv6 wildcard listener on the same port, as the shipped
//! origin.toml lists them (`0.0.0.0:9899` and `[::]:9899`): every backend binds
//! both, and each takes its own family's associations. Before IPv6 sockets
//! were made IPv6-only, the second bind failed with "Address already in use"
//! on a host whose `net.ipv6.bindv6only` is 0 (the Linux default).
//!
//! Ports are ephemeral: the IPv4 listener takes one, the IPv6 one the same.
//! Skipped, with the reason printed, on a host without IPv6 loopback.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gateway_transport::{AssociationConfig, BackendKind, Listener, connect};
use tokio::time::timeout;

/// Upper bound for any one test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

fn config() -> AssociationConfig {
    AssociationConfig {
        connect_timeout: Duration::from_secs(3),
        ..AssociationConfig::default()
    }
}

/// Why this host cannot run the test, if it cannot.
fn no_ipv6_loopback() -> Option<String> {
    std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0))
        .err()
        .map(|e| format!("no IPv6 loopback on this host ({e})"))
}

/// Binds `0.0.0.0:P` then `[::]:P` with `kind`, and connects to each over its
/// own family's loopback; the accepted association's peer is of that family.
async fn both_wildcards(kind: BackendKind) -> Result<()> {
    if let Some(why) = no_ipv6_loopback() {
        println!("SKIPPED: {why}");
        return Ok(());
    }
    let config = config();
    let v4 = Listener::bind(kind, (Ipv4Addr::UNSPECIFIED, 0).into(), &config)
        .await
        .context("bind 0.0.0.0:0")?;
    let port = v4.local_addr()?.port();
    let v6 = Listener::bind(kind, (Ipv6Addr::UNSPECIFIED, port).into(), &config)
        .await
        .with_context(|| format!("bind [::]:{port} beside 0.0.0.0:{port}"))?;
    ensure!(v6.local_addr()?.port() == port);

    for (listener, loopback) in [
        (&v4, SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        (&v6, SocketAddr::from((Ipv6Addr::LOCALHOST, port))),
    ] {
        let mut client_config = config.clone();
        if let Some(pin) = listener.quic_cert_sha256() {
            client_config.quic.server_cert_sha256 = Some(pin.to_owned());
        }
        let (client, server) =
            tokio::join!(connect(kind, loopback, &client_config), listener.accept());
        let (_client, server) = (
            client.with_context(|| format!("connect to {loopback}"))?,
            server.with_context(|| format!("accept from {loopback}"))?,
        );
        ensure!(
            server.peer_addr().is_ipv6() == loopback.is_ipv6(),
            "{loopback} was accepted from {}",
            server.peer_addr()
        );
    }
    Ok(())
}

#[tokio::test]
async fn userspace_binds_both_wildcards_on_one_port() -> Result<()> {
    timeout(TEST_LIMIT, both_wildcards(BackendKind::Userspace)).await?
}

#[cfg(feature = "baselines")]
#[tokio::test]
async fn framed_tcp_binds_both_wildcards_on_one_port() -> Result<()> {
    timeout(TEST_LIMIT, both_wildcards(BackendKind::FramedTcp)).await?
}

#[cfg(feature = "baselines")]
#[tokio::test]
async fn quic_binds_both_wildcards_on_one_port() -> Result<()> {
    timeout(TEST_LIMIT, both_wildcards(BackendKind::Quic)).await?
}
