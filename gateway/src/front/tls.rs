//! HTTPS for mapped origins (docs/gateway.md, "HTTPS"): the gateway reads the
//! browser's ClientHello without consuming it, checks its server name (SNI)
//! against the original destination as it checks Host on port 80, and carries
//! the connection on a tunnel to the origin, ClientHello first. It never
//! terminates TLS: it has no keys, and nothing inside a tunnel is cached or
//! prefetched.
//!
//! Every case it cannot tunnel falls back to a plain TCP relay to the original
//! destination, with the bytes read so far sent first, never a hang: a first
//! byte that is not a TLS handshake record, a ClientHello rustls cannot parse
//! or without SNI, one that does not complete within `http.header_timeout`, a
//! name that does not match the destination (the forgery rule), a name no
//! origin takes, an origin that is down (fail-open) or that refuses the
//! tunnel before sending a byte.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::origin_link::{OriginTunnel, TunnelEvent};

/// Largest ClientHello read before giving up on it, bytes: a TLS record is
/// at most 16 KiB plus its header, and a ClientHello may span a few records
/// (post-quantum key shares); beyond this the connection is passed through.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;
/// A TLS handshake record's first byte (content type 22).
const HANDSHAKE_RECORD: u8 = 0x16;
/// Bytes read from the browser per tunnel message.
const READ_CHUNK: usize = 16 * 1024;

/// What the first bytes of a connection turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// A ClientHello naming this server (lower-case).
    ServerName(String),
    /// A ClientHello without a server name.
    NoServerName,
    /// Not TLS, or a ClientHello rustls refuses to parse.
    NotTls,
    /// The browser closed, or the ClientHello did not complete in time or
    /// within [`MAX_CLIENT_HELLO`].
    Incomplete,
}

/// Reads from `stream` until the ClientHello is whole, at most `limit` long;
/// returns what it was and every byte read (to be sent on first, wherever
/// the connection goes).
pub async fn peek_client_hello(stream: &mut TcpStream, limit: Duration) -> (Peeked, BytesMut) {
    let mut seen = BytesMut::new();
    let verdict = tokio::time::timeout(limit, read_hello(stream, &mut seen)).await;
    (verdict.unwrap_or(Peeked::Incomplete), seen)
}

async fn read_hello(stream: &mut TcpStream, seen: &mut BytesMut) -> Peeked {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut buf = vec![0; READ_CHUNK];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return Peeked::Incomplete,
            Ok(n) => n,
        };
        seen.extend_from_slice(&buf[..n]);
        if seen[0] != HANDSHAKE_RECORD {
            return Peeked::NotTls;
        }
        // The acceptor takes a copy; `seen` keeps every byte for the relay.
        let mut fresh = &buf[..n];
        while !fresh.is_empty() {
            if acceptor.read_tls(&mut fresh).is_err() {
                return Peeked::NotTls;
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return match accepted.client_hello().server_name() {
                    Some(name) => Peeked::ServerName(name.to_ascii_lowercase()),
                    None => Peeked::NoServerName,
                };
            }
            Ok(None) if seen.len() < MAX_CLIENT_HELLO => {}
            Ok(None) => return Peeked::Incomplete,
            Err(_) => return Peeked::NotTls,
        }
    }
}

/// How a tunnel ended, for the log.
#[derive(Debug)]
pub enum TunnelOutcome {
    /// Both halves closed cleanly.
    Closed,
    /// The origin refused before sending a byte: the caller may go direct.
    RefusedEarly(crate::origin_link::LinkError),
    /// The tunnel failed after bytes flowed; the browser connection was reset.
    Failed(String),
}

/// Relays `browser` over `tunnel`, `first` (the ClientHello) first, until
/// both halves are closed. On a failure after the origin's first byte the
/// browser connection is closed with a RST, never a FIN, so a truncated TLS
/// stream cannot pass for a complete one.
pub async fn relay(
    browser: &mut TcpStream,
    mut tunnel: OriginTunnel,
    first: Bytes,
) -> TunnelOutcome {
    let mut first = Some(first);
    let (mut browser_done, mut origin_done) = (false, false);
    let mut buf = vec![0; READ_CHUNK];
    while !(browser_done && origin_done) {
        if let Some(bytes) = first.take() {
            if let Err(e) = send_within_window(&mut tunnel, bytes).await {
                return TunnelOutcome::Failed(e);
            }
            continue;
        }
        let room = READ_CHUNK.min(tunnel.window());
        tokio::select! {
            read = browser.read(&mut buf[..room.max(1)]), if !browser_done && room > 0 => {
                let (data, end) = match read {
                    Ok(0) | Err(_) => (Bytes::new(), true),
                    Ok(n) => (Bytes::copy_from_slice(&buf[..n]), false),
                };
                browser_done = end;
                if let Err(e) = tunnel.send(data, end).await {
                    reset(browser);
                    return TunnelOutcome::Failed(e.to_string());
                }
            }
            event = tunnel.recv() => match event {
                Ok(TunnelEvent::Data(data)) => {
                    if browser.write_all(&data).await.is_err() {
                        return TunnelOutcome::Failed("the browser went away".into());
                    }
                }
                Ok(TunnelEvent::End) => {
                    origin_done = true;
                    let _ = browser.shutdown().await;
                }
                Err(e) if tunnel.received() == 0 && is_refusal(&e) => {
                    return TunnelOutcome::RefusedEarly(e);
                }
                Err(e) => {
                    reset(browser);
                    return TunnelOutcome::Failed(e.to_string());
                }
            },
        }
    }
    TunnelOutcome::Closed
}

/// Sends `bytes` in pieces that fit the window and a chunk, waiting for
/// credit as needed (the ClientHello is far below one window).
async fn send_within_window(tunnel: &mut OriginTunnel, mut bytes: Bytes) -> Result<(), String> {
    while !bytes.is_empty() {
        let n = bytes.len().min(READ_CHUNK).min(tunnel.window());
        if n == 0 {
            return Err("no window for the ClientHello".into());
        }
        tunnel
            .send(bytes.split_to(n), false)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn is_refusal(error: &crate::origin_link::LinkError) -> bool {
    matches!(
        error,
        crate::origin_link::LinkError::Reset {
            code: gateway_protocol::ErrorCode::Refused,
            ..
        }
    )
}

/// Passes the connection to `dst` as TCP, `first` first (the fallback).
pub async fn pass_through(
    browser: &mut TcpStream,
    dst: SocketAddr,
    first: &[u8],
    settings: crate::direct::DirectSettings,
) -> std::io::Result<()> {
    if crate::direct::is_own_address(dst.ip())? {
        return Err(std::io::Error::other(
            "the destination is this host's own address",
        ));
    }
    let connect = crate::direct::connect_marked(dst, settings.mark);
    let mut upstream = tokio::time::timeout(settings.connect_timeout, connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    upstream.write_all(first).await?;
    tokio::io::copy_bidirectional(browser, &mut upstream).await?;
    Ok(())
}

/// Closes `stream` with a RST once it is dropped.
pub fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A loopback connection: the test writes on the first, peeks on the second.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (client, server)
    }

    /// The bytes of a real rustls ClientHello for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("a name");
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let mut out = Vec::new();
        conn.write_tls(&mut out).expect("ClientHello");
        out
    }

    async fn peek_after(bytes: &[u8], close: bool) -> (Peeked, BytesMut) {
        let (mut client, mut server) = pair().await;
        client.write_all(bytes).await.expect("write");
        if close {
            client.shutdown().await.expect("shutdown");
        }
        let peeked = peek_client_hello(&mut server, Duration::from_millis(500)).await;
        drop(client);
        peeked
    }

    #[tokio::test]
    async fn the_server_name_is_read_and_every_byte_kept() {
        let hello = client_hello("WWW.Site.test");
        // Split in two writes: the acceptor must wait for the rest.
        let (mut client, mut server) = pair().await;
        let (a, b) = hello.split_at(hello.len() / 2);
        client.write_all(a).await.expect("write");
        let (b, hello2) = (b.to_vec(), hello.clone());
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            client.write_all(&b).await.expect("write");
            client
        });
        let (peeked, seen) = peek_client_hello(&mut server, Duration::from_secs(10)).await;
        assert_eq!(peeked, Peeked::ServerName("www.site.test".into()));
        assert_eq!(&seen[..], &hello2[..], "the ClientHello is kept whole");
        drop(writer.await);
    }

    #[tokio::test]
    async fn an_ip_literal_hello_has_no_server_name() {
        // rustls sends no SNI for an IP address.
        let (peeked, _) = peek_after(&client_hello("192.0.2.1"), false).await;
        assert_eq!(peeked, Peeked::NoServerName);
    }

    #[tokio::test]
    async fn garbage_is_not_tls_and_is_kept() {
        let (peeked, seen) = peek_after(b"GET / HTTP/1.1\r\n\r\n", false).await;
        assert_eq!(peeked, Peeked::NotTls);
        assert_eq!(&seen[..], b"GET / HTTP/1.1\r\n\r\n");
        let mut bad = client_hello("a.test");
        bad[5] = 0x02; // a ServerHello where the ClientHello belongs
        let (peeked, _) = peek_after(&bad, false).await;
        assert_eq!(peeked, Peeked::NotTls);
    }

    #[tokio::test]
    async fn a_hello_that_never_completes_times_out_and_a_closed_one_ends() {
        let hello = client_hello("slow.test");
        let (peeked, seen) = peek_after(&hello[..20], false).await;
        assert_eq!(peeked, Peeked::Incomplete, "time-out");
        assert_eq!(&seen[..], &hello[..20]);
        let (peeked, _) = peek_after(&hello[..20], true).await;
        assert_eq!(peeked, Peeked::Incomplete, "browser closed");
    }
}
