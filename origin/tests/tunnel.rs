//! TLS tunnels at the origin over a real association (userspace SCTP and
//! framed TCP on loopback): a rustls client at the gateway's end of a tunnel
//! gets exact bytes from the handler through the origin's TLS end; a
//! passthrough name reaches its TCP upstream byte for byte; an unknown name
//! is refused; the gateway's window is respected.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_protocol::{
    Capabilities, ErrorCode, Message, RequestId, Session, SessionConfig, TUNNEL_WINDOW, TunnelOpen,
};
use gateway_transport::hello::open_gateway_session;
use gateway_transport::{Association, AssociationConfig, BackendKind, Listener, connect};
use origin::response_scheduler::ResponseSchedulerConfig;
use origin::server::{DriverConfig, drive};
use origin::synthetic::{SyntheticHandler, pattern_byte};
use origin::tls::{CertificateEntry, PassthroughEntry, TlsConfig, Tunnels};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

const TIMEOUT: Duration = Duration::from_secs(30);
const SITE: &str = "site.test";
const PASS: &str = "pass.test";

/// A certificate for [`SITE`], written as PEM files in `dir`.
fn site_certificate(dir: &std::path::Path) -> Result<(CertificateEntry, CertificateDer<'static>)> {
    let made = rcgen::generate_simple_self_signed(vec![SITE.to_owned()])?;
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, made.cert.pem())?;
    std::fs::write(&key, made.key_pair.serialize_pem())?;
    let entry = CertificateEntry {
        names: vec![SITE.into()],
        cert,
        key,
    };
    Ok((entry, made.cert.der().clone()))
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

async fn start(kind: BackendKind, tunnels: Tunnels) -> Result<(Association, Session)> {
    let config = AssociationConfig {
        streams: 5,
        max_inbound_streams: 5,
        ..AssociationConfig::default()
    };
    let listener = Listener::bind(kind, SocketAddr::from(([127, 0, 0, 1], 0)), &config).await?;
    let addr = listener.local_addr()?;
    let driver = DriverConfig {
        response_scheduler: ResponseSchedulerConfig::default(),
        chunk_size: 16 * 1024,
        max_open_requests: 64,
        max_request_body: 1 << 20,
        stream_queue_limit: 64 * 1024,
        egress: None,
        tunnels: Some(tunnels),
    };
    tokio::spawn(async move {
        if let Ok(assoc) = listener.accept().await {
            let _ = drive(assoc, Arc::new(SyntheticHandler::default()), driver).await;
        }
    });
    let assoc = connect(kind, addr, &config).await?;
    let session = open_gateway_session(&assoc, SessionConfig::default().capabilities).await?;
    ensure!(session.may_open_tunnel(), "the origin announces TUNNEL");
    Ok((assoc, session))
}

/// The gateway's end of one tunnel: opens it, then moves bytes between `io`
/// and the association, within the window, until both halves are closed.
/// Returns the RESET code if the origin reset it.
async fn carry(
    assoc: &Association,
    session: &mut Session,
    (id, stream, name): (RequestId, u16, &str),
    mut io: DuplexStream,
) -> Result<Option<ErrorCode>> {
    session
        .handle_tunnel_sent(id, stream)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let open = Message::TunnelOpen(TunnelOpen {
        id,
        destination: "192.0.2.1:443".parse()?,
        server_name: name.into(),
    });
    assoc.send(stream, open.to_bytes()).await?;
    let mut window = u64::from(TUNNEL_WINDOW);
    let (mut sent_end, mut received_end) = (false, false);
    let mut buf = vec![0; 16 * 1024];
    while !(sent_end && received_end) {
        let room = buf.len().min(window as usize);
        tokio::select! {
            read = io.read(&mut buf[..room]), if !sent_end && room > 0 => {
                let n = read?;
                let data = Bytes::copy_from_slice(&buf[..n]);
                window -= n as u64;
                sent_end = n == 0;
                let message = Message::TunnelData { id, end: sent_end, data };
                assoc.send(stream, message.to_bytes()).await?;
                if sent_end {
                    session.handle_tunnel_end_sent(id);
                }
            }
            received = assoc.recv() => {
                let received = received?;
                match session.handle_message(received.stream, &received.data) {
                    Ok(Message::TunnelData { data, end, .. }) => {
                        // The client may have closed its reading side already.
                        let _ = io.write_all(&data).await;
                        if end {
                            received_end = true;
                            let _ = io.shutdown().await;
                        }
                    }
                    Ok(Message::TunnelCredit { bytes, .. }) => window += u64::from(bytes),
                    Ok(Message::Reset { code, .. }) => return Ok(Some(code)),
                    other => bail!("unexpected on the tunnel: {other:?}"),
                }
            }
        }
    }
    Ok(None)
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
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    const LEN: u64 = 300_000;
    let browser = tokio::spawn(async move {
        let mut tls = connector
            .connect(ServerName::try_from(SITE)?, client_io)
            .await?;
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
