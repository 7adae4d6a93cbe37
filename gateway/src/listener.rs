//! The transparent listener: TCP sockets with `IP_TRANSPARENT` / `IPV6_TRANSPARENT`
//! that accept the flows TPROXY steers to `listen.port`.
//!
//! TPROXY does not rewrite the packet: the browser's SYN still carries the original
//! destination, and a transparent socket may accept it although that address is
//! not local. So the accepted socket's *local* address is the address the browser
//! dialled (`getsockname`), with no conntrack lookup and no `SO_ORIGINAL_DST`.
//!
//! The option needs `CAP_NET_ADMIN` (or `CAP_NET_RAW`); without it binding fails
//! with a message that says so.
//!
//! The socket also accepts plain connections to the listening port itself, from
//! any side, and serving one would forward it to that same address: the gateway
//! would call itself. [`accept`] therefore serves only flows that interception
//! delivered. TPROXY keeps the port the browser dialled (an intercepted port,
//! which `validate()` keeps apart from `listen.port`), so a flow whose local
//! port *is* the listening port reached the socket without TPROXY and is reset
//! at once. The nftables table drops such connections before they get here
//! (docs/interception.md, "Loops"); this check holds without that table too
//! (`intercept.manage = false`).

use std::io;
use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};

use std::sync::Arc;

use crate::browser_socket::{BrowserSocket, CountedStream};
use crate::client_bytes::ClientTally;
use crate::config::ListenConfig;

/// Pending connections the kernel queues per listening socket.
const BACKLOG: i32 = 1024;

/// Why the listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Setting `IP_TRANSPARENT` needs `CAP_NET_ADMIN`.
    #[error(
        "cannot make the {addr} listener transparent ({source}): the gateway needs CAP_NET_ADMIN"
    )]
    Transparent {
        /// The listening address.
        addr: SocketAddr,
        /// The setsockopt error.
        source: io::Error,
    },
    /// Creating, binding or listening failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The listening address.
        addr: SocketAddr,
        /// The error.
        source: io::Error,
    },
}

/// One transparent listening socket per configured address.
#[derive(Debug)]
pub struct TransparentListener {
    sockets: Vec<TcpListener>,
}

/// A flow TPROXY delivered: the browser's connection and both its ends.
#[derive(Debug)]
pub struct Intercepted {
    /// The connection to the browser.
    pub stream: TcpStream,
    /// The browser's address.
    pub client: SocketAddr,
    /// The address the browser dialled (the accepted socket's local address).
    pub original_dst: SocketAddr,
}

/// An intercepted flow whose writes are counted: into the client's bytes on
/// `/metrics` and into the [`BrowserSocket`] that the origin link's backlog
/// (FEEDBACK) reads for the streams this connection is pinned to.
#[derive(Debug)]
pub struct CountedFlow {
    /// The connection to the browser, counting what is written to it.
    pub stream: CountedStream<TcpStream>,
    /// Its send queue, measured.
    pub socket: Arc<BrowserSocket>,
    /// The browser's address.
    pub client: SocketAddr,
    /// The address the browser dialled.
    pub original_dst: SocketAddr,
}

impl Intercepted {
    /// Wraps the accepted connection for counting: every byte written to it
    /// counts into `tally` and toward the returned socket's backlog.
    pub fn into_counted(self, tally: ClientTally) -> CountedFlow {
        let (stream, socket) = CountedStream::measured(self.stream);
        CountedFlow {
            stream: stream.with_client(tally),
            socket,
            client: self.client,
            original_dst: self.original_dst,
        }
    }
}

impl TransparentListener {
    /// Binds `config.port` on every address in `config.addresses`. IPv6 sockets are
    /// IPv6-only, so `0.0.0.0` and `::` can both be bound.
    pub fn bind(config: &ListenConfig) -> Result<Self, ListenError> {
        let sockets = config
            .addresses
            .iter()
            .map(|&ip| bind_one(SocketAddr::new(ip, config.port)))
            .collect::<Result<_, _>>()?;
        Ok(Self { sockets })
    }

    /// The bound addresses.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }

    /// Splits into the per-address listeners, one accept loop each.
    pub fn into_sockets(self) -> Vec<TcpListener> {
        self.sockets
    }
}

/// Accepts the next intercepted flow from `listener`, resetting every connection
/// that was made to the listening port directly (see the module doc).
pub async fn accept(listener: &TcpListener) -> io::Result<Intercepted> {
    let listening_port = listener.local_addr()?.port();
    loop {
        let (stream, client) = listener.accept().await?;
        let original_dst = normalize(stream.local_addr()?);
        let client = normalize(client);
        if !delivered_by_interception(original_dst, listening_port) {
            tracing::debug!(%client, dst = %original_dst, "reset a direct connection to the transparent listener");
            reset(&stream);
            continue;
        }
        stream.set_nodelay(true)?;
        return Ok(Intercepted {
            stream,
            client,
            original_dst,
        });
    }
}

/// Whether a flow accepted on `listening_port` with local address `original_dst`
/// came through TPROXY: only then is its local port another one.
fn delivered_by_interception(original_dst: SocketAddr, listening_port: u16) -> bool {
    original_dst.port() != listening_port
}

/// Closes `stream` with a RST rather than a FIN: nothing was read, nothing is
/// owed, and the peer learns at once (`SO_LINGER` of zero). Dropping the stream
/// closes it either way, so a failing setsockopt changes only how.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(std::time::Duration::ZERO));
}

/// IPv4-mapped IPv6 addresses as plain IPv4, so routing and Host checks see one form.
fn normalize(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

fn bind_one(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    let bind_err = |source| ListenError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    let transparent = match addr {
        SocketAddr::V4(_) => socket.set_ip_transparent_v4(true),
        SocketAddr::V6(_) => {
            socket.set_only_v6(true).map_err(bind_err)?;
            socket.set_ip_transparent_v6(true)
        }
    };
    transparent.map_err(|source| ListenError::Transparent { addr, source })?;
    socket.set_nonblocking(true).map_err(bind_err)?;
    socket.bind(&addr.into()).map_err(bind_err)?;
    socket.listen(BACKLOG).map_err(bind_err)?;
    TcpListener::from_std(socket.into()).map_err(bind_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_become_ipv4() {
        let mapped: SocketAddr = "[::ffff:203.0.113.10]:80".parse().expect("literal");
        assert_eq!(
            normalize(mapped),
            "203.0.113.10:80".parse().expect("literal")
        );
        let v6: SocketAddr = "[2001:db8::1]:80".parse().expect("literal");
        assert_eq!(normalize(v6), v6);
    }

    #[test]
    fn only_other_ports_than_the_listening_one_were_intercepted() {
        let foreign: SocketAddr = "203.0.113.10:80".parse().expect("literal");
        assert!(delivered_by_interception(foreign, 3129));
        let own: SocketAddr = "192.0.2.1:3129".parse().expect("literal");
        assert!(!delivered_by_interception(own, 3129));
    }

    /// A transparent socket on loopback also accepts ordinary connections to
    /// its port; `accept` resets them instead of serving them. Needs
    /// CAP_NET_ADMIN, like the rest of the gateway's tests (the namespace tests
    /// in tests/intercept.rs show an intercepted flow being served).
    #[tokio::test]
    async fn resets_direct_connections_to_the_listening_port() {
        use tokio::io::AsyncReadExt as _;

        let config = ListenConfig {
            port: 0,
            addresses: vec![IpAddr::from([127, 0, 0, 1])],
        };
        let listener = TransparentListener::bind(&config)
            .unwrap_or_else(|e| panic!("bind (the test needs CAP_NET_ADMIN): {e}"));
        let addr = listener.local_addrs()[0];
        let sockets = listener.into_sockets();
        let accepting = tokio::spawn(async move { accept(&sockets[0]).await.map(|_| ()) });
        let mut direct = TcpStream::connect(addr).await.expect("connect");
        let mut byte = [0; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), direct.read(&mut byte))
            .await
            .expect("the listener answers a direct connection within 10 s");
        assert_eq!(
            read.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset),
            "a direct connection is reset"
        );
        assert!(
            !accepting.is_finished(),
            "accept returned a direct connection"
        );
        accepting.abort();
    }
}
