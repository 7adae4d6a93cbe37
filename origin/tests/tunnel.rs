//! TLS tunnels at the origin over a real association (userspace SCTP and
//! framed TCP on loopback): a rustls client at the gateway's end of a tunnel
//! gets exact bytes from the handler through the origin's TLS end; a
//! passthrough name reaches its TCP upstream byte for byte; an unknown name
//! is refused; the gateway's window is respected.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gateway_protocol::{Capabilities, ErrorCode};
use gateway_transport::BackendKind;
use origin::synthetic::{SyntheticHandler, pattern_byte};
use origin::tls::{PassthroughEntry, TlsConfig, Tunnels};
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;
use support::tunnel::{SITE, carry, site_certificate, tls_client};

const TIMEOUT: Duration = Duration::from_secs(30);
const PASS: &str = "pass.test";

async fn start(
    kind: BackendKind,
    tunnels: Tunnels,
) -> Result<(gateway_transport::Association, gateway_protocol::Session)> {
    support::tunnel::start(kind, tunnels, Arc::new(SyntheticHandler::default())).await
}

/// A TCP upstream that answers each connection with `pong:` and what it read
/// until the client's FIN.
async fn echo_upstream() -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                if tcp.read_to_end(&mut got).await.is_ok() {
                    let _ = tcp.write_all(b"pong:").await;
                    let _ = tcp.write_all(&got).await;
                }
            });
        }
    });
    Ok(addr)
}

async fn tunnels_for_test(dir: &std::path::Path) -> Result<(Tunnels, CertificateDer<'static>)> {
    let (entry, der) = site_certificate(dir)?;
    let tls = TlsConfig {
        certificates: vec![entry],
        passthrough: vec![PassthroughEntry {
            names: vec![PASS.into()],
            upstream: echo_upstream().await?,
        }],
        h2: false,
        early_hints: false,
    };
    tls.validate()
        .map_err(|(k, r)| anyhow::anyhow!("{k}: {r}"))?;
    Ok((Tunnels::load(&tls)?, der))
}

/// An HTTPS GET through a tunnel: the handler's exact bytes come back.
async fn https_get(kind: BackendKind) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels_for_test(dir.path()).await?;
    let (assoc, mut session) = start(kind, tunnels).await?;
    let (client_io, tunnel_io) = tokio::io::duplex(64 * 1024);
    const LEN: u64 = 300_000;
    let browser = tokio::spawn(async move {
        let mut tls = tls_client(der, &[b"http/1.1"], client_io).await?;
        ensure!(tls.get_ref().1.alpn_protocol() == Some(b"http/1.1".as_slice()));
        let request =
            format!("GET /bytes/{LEN} HTTP/1.1\r\nhost: {SITE}\r\nconnection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    });
    let reset = tokio::time::timeout(
        TIMEOUT,
        carry(&assoc, &mut session, (1, 2, SITE), tunnel_io),
    )
    .await
    .context("tunnel within the time-out")??;
    ensure!(reset.is_none(), "tunnel reset: {reset:?}");
    let answer = browser.await??;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("a response head")?;
    let head = String::from_utf8_lossy(&answer[..split]).to_lowercase();
    ensure!(head.starts_with("http/1.1 200"), "{head}");
    ensure!(head.contains(&format!("content-length: {LEN}")), "{head}");
    let body = &answer[split + 4..];
    ensure!(body.len() as u64 == LEN, "body of {} bytes", body.len());
    for (i, byte) in body.iter().enumerate() {
        ensure!(*byte == pattern_byte(i as u64), "byte {i} differs");
    }
    ensure!(session.open_requests() == 0, "the tunnel is forgotten");
    Ok(())
}

#[tokio::test]
async fn https_through_a_tunnel_userspace_sctp() -> Result<()> {
    https_get(BackendKind::Userspace).await
}

#[tokio::test]
async fn https_through_a_tunnel_framed_tcp() -> Result<()> {
    https_get(BackendKind::FramedTcp).await
}

/// A passthrough name is relayed to its upstream as bytes, both halves.
#[tokio::test]
async fn a_passthrough_name_reaches_its_upstream() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, _) = tunnels_for_test(dir.path()).await?;
    let (assoc, mut session) = start(BackendKind::FramedTcp, tunnels).await?;
    let (mut client_io, tunnel_io) = tokio::io::duplex(64 * 1024);
    // More than one window: the origin must grant credit to let it through.
    let sent: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let expected = [b"pong:".as_slice(), &sent].concat();
    let client = tokio::spawn(async move {
        client_io.write_all(&sent).await?;
        client_io.shutdown().await?;
        let mut got = Vec::new();
        client_io.read_to_end(&mut got).await?;
        anyhow::Ok(got)
    });
    let reset = tokio::time::timeout(
        TIMEOUT,
        carry(&assoc, &mut session, (1, 1, PASS), tunnel_io),
    )
    .await
    .context("tunnel within the time-out")??;
    ensure!(reset.is_none(), "tunnel reset: {reset:?}");
    let got = client.await??;
    ensure!(
        got == expected,
        "{} bytes back, {} expected",
        got.len(),
        expected.len()
    );
    Ok(())
}

/// A name without a certificate or passthrough is refused, and an origin
/// without `[tls]` does not announce tunnels.
#[tokio::test]
async fn an_unknown_name_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, _) = tunnels_for_test(dir.path()).await?;
    let (assoc, mut session) = start(BackendKind::FramedTcp, tunnels).await?;
    let (_client_io, tunnel_io) = tokio::io::duplex(1024);
    let reset = tokio::time::timeout(
        TIMEOUT,
        carry(&assoc, &mut session, (1, 1, "other.test"), tunnel_io),
    )
    .await
    .context("an answer within the time-out")??;
    ensure!(reset == Some(ErrorCode::Refused), "{reset:?}");
    ensure!(
        !Capabilities::default().contains(Capabilities::TUNNEL),
        "TUNNEL is opt-in"
    );
    Ok(())
}
