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

use std::io;
use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};

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

/// Accepts the next intercepted flow from `listener`.
pub async fn accept(listener: &TcpListener) -> io::Result<Intercepted> {
    let (stream, client) = listener.accept().await?;
    let original_dst = normalize(stream.local_addr()?);
    stream.set_nodelay(true)?;
    Ok(Intercepted {
        stream,
        client: normalize(client),
        original_dst,
    })
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

    /// A transparent socket on loopback accepts ordinary connections too. Needs
    /// CAP_NET_ADMIN, like the rest of the gateway's tests.
    #[tokio::test]
    async fn binds_and_accepts() {
        let config = ListenConfig {
            port: 0,
            addresses: vec![IpAddr::from([127, 0, 0, 1])],
        };
        let listener = TransparentListener::bind(&config)
            .unwrap_or_else(|e| panic!("bind (the test needs CAP_NET_ADMIN): {e}"));
        let addr = listener.local_addrs()[0];
        let sockets = listener.into_sockets();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await });
        let flow = accept(&sockets[0]).await.expect("accept");
        assert_eq!(flow.original_dst, addr);
        client.await.expect("join").expect("connect");
    }
}
