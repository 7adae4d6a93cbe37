//! Associations over loopback through the public API, for the tests that
//! run on this host (`contract.rs` for every backend, `userspace_loopback.rs`
//! and `quic_loopback.rs` for what one backend alone has).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use gateway_transport::{Association, AssociationConfig, BackendKind, Listener, connect};

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
