//! The gateway's end of TLS tunnels for tests: a certificate for [`SITE`],
//! an origin driving one association, and [`carry`], which moves one
//! tunnel's bytes within the window as the gateway does.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Result, bail, ensure};
use bytes::Bytes;
use gateway_protocol::{
    ErrorCode, Message, RequestId, Session, SessionConfig, TUNNEL_WINDOW, TunnelOpen,
};
use gateway_transport::hello::open_gateway_session;
use gateway_transport::{Association, AssociationConfig, BackendKind, Listener, connect};
use origin::response_scheduler::ResponseSchedulerConfig;
use origin::server::{DriverConfig, Handler, drive};
use origin::tls::{CertificateEntry, Tunnels};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// The server name the test certificate is for.
pub(crate) const SITE: &str = "site.test";

/// A certificate for [`SITE`], written as PEM files in `dir`.
pub(crate) fn site_certificate(
    dir: &std::path::Path,
) -> Result<(CertificateEntry, CertificateDer<'static>)> {
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

pub(crate) async fn start<H: Handler>(
    kind: BackendKind,
    tunnels: Tunnels,
    handler: Arc<H>,
) -> Result<(Association, Session)> {
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
            let _ = drive(assoc, handler, driver).await;
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
pub(crate) async fn carry(
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

/// A rustls client for [`SITE`] trusting `der`, offering `alpn`, connected
/// over `io` (the browser's end of a tunnel).
pub(crate) async fn tls_client(
    der: CertificateDer<'static>,
    alpn: &[&[u8]],
    io: DuplexStream,
) -> Result<tokio_rustls::client::TlsStream<DuplexStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    Ok(connector.connect(ServerName::try_from(SITE)?, io).await?)
}
