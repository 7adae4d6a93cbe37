//! Plain TCP to the original destination: for unmapped destinations, bypassed or
//! unverified Hosts, and origins that failed open.
//!
//! Each browser connection gets at most one upstream connection, opened on its
//! first direct request and reused while both stay open: the flow keeps the shape
//! the browser gave it, as a transparent proxy should. The socket carries
//! `SO_MARK = intercept.upstream_mark`, which the nftables rules let pass, so the
//! gateway never intercepts itself.
//!
//! Nor does it ever connect to one of this host's own addresses: interception
//! never delivers a flow addressed to the host itself (the table's `fib daddr
//! type local return`), so such a destination means a request that came some
//! other way and would loop back into the gateway. Loopback addresses are the
//! exception: the kernel drops them as martians when they arrive from the wire,
//! so only a program that drives this library directly (the tests, a tool) can
//! ask for one, and the listener resets direct connections to its own port.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream};

/// Why a direct request failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    /// The destination is one of this host's own addresses: connecting would
    /// loop back into the gateway.
    #[error("{dst} is this host's own address: not connecting to itself")]
    OwnAddress {
        /// The original destination.
        dst: SocketAddr,
    },
    /// The TCP connection could not be opened.
    #[error("cannot connect to {dst}: {source}")]
    Connect {
        /// The original destination.
        dst: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Connecting took longer than `direct.connect_timeout`.
    #[error("connecting to {dst} timed out")]
    ConnectTimeout {
        /// The original destination.
        dst: SocketAddr,
    },
    /// The response head did not arrive within `direct.response_timeout`.
    #[error("{dst} did not answer in time")]
    ResponseTimeout {
        /// The original destination.
        dst: SocketAddr,
    },
    /// HTTP failed on the upstream connection.
    #[error("{dst}: {source}")]
    Http {
        /// The original destination.
        dst: SocketAddr,
        /// hyper's error.
        source: hyper::Error,
    },
}

/// The settings every direct connection shares.
#[derive(Debug, Clone, Copy)]
pub struct DirectSettings {
    /// `SO_MARK` for upstream sockets; 0 leaves them unmarked.
    pub mark: u32,
    /// See [`crate::config::DirectConfig`].
    pub connect_timeout: Duration,
    /// See [`crate::config::DirectConfig`].
    pub response_timeout: Duration,
}

/// One browser connection's upstream connection to its original destination.
#[derive(Debug)]
pub struct DirectUpstream {
    dst: SocketAddr,
    settings: DirectSettings,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl DirectUpstream {
    /// An upstream for `dst`, not connected until the first request.
    pub fn new(dst: SocketAddr, settings: DirectSettings) -> Self {
        Self {
            dst,
            settings,
            sender: None,
        }
    }

    /// Sends `request` and returns the response once its head arrived; the body
    /// streams. Reconnects if the previous connection was closed. A request is
    /// sent at most once: it is never replayed after it may have reached the
    /// destination.
    pub async fn send(
        &mut self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, DirectError> {
        let dst = self.dst;
        let reusable = match &mut self.sender {
            Some(s) => !s.is_closed() && s.ready().await.is_ok(),
            None => false,
        };
        let sender = match &mut self.sender {
            Some(s) if reusable => s,
            _ => self.sender.insert(self.connect().await?),
        };
        let response =
            tokio::time::timeout(self.settings.response_timeout, sender.send_request(request))
                .await
                .map_err(|_| DirectError::ResponseTimeout { dst })?
                .map_err(|source| DirectError::Http { dst, source });
        if response.is_err() {
            self.sender = None;
        }
        response
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, DirectError> {
        let dst = self.dst;
        if is_own_address(dst.ip()).map_err(|source| DirectError::Connect { dst, source })? {
            return Err(DirectError::OwnAddress { dst });
        }
        let stream = tokio::time::timeout(
            self.settings.connect_timeout,
            connect_marked(dst, self.settings.mark),
        )
        .await
        .map_err(|_| DirectError::ConnectTimeout { dst })?
        .map_err(|source| DirectError::Connect { dst, source })?;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|source| DirectError::Http { dst, source })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%dst, error = %e, "direct upstream connection ended");
            }
        });
        Ok(sender)
    }
}

/// Whether `ip` is assigned to one of this host's interfaces (in the calling
/// thread's network namespace), loopback addresses aside (see the module doc).
/// Asked anew on every connect, so that an address added at run time counts at
/// once; the list is a netlink dump, small beside the connect it guards.
pub(crate) fn is_own_address(ip: IpAddr) -> io::Result<bool> {
    if ip.is_loopback() {
        return Ok(false);
    }
    let addresses = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
    Ok(addresses.filter_map(|a| a.address).any(|address| match ip {
        IpAddr::V4(v4) => address.as_sockaddr_in().is_some_and(|a| a.ip() == v4),
        IpAddr::V6(v6) => address.as_sockaddr_in6().is_some_and(|a| a.ip() == v6),
    }))
}

/// Opens a TCP connection to `dst` whose packets carry `mark`.
pub(crate) async fn connect_marked(dst: SocketAddr, mark: u32) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))?;
    if mark != 0 {
        socket.set_mark(mark)?;
    }
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    let socket = TcpSocket::from_std_stream(socket.into());
    socket.connect(dst).await
}
