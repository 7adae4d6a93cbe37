//! The association layer: whole messages on numbered streams between one gateway
//! and one origin, over one of four backends.
//!
//! - [`BackendKind::Kernel`]: Linux SCTP, one-to-one sockets (`kernel` module).
//! - [`BackendKind::Userspace`]: our own sans-I/O SCTP core (the `sctp` crate) on a
//!   UDP socket, RFC 6951 framing, for hosts without the SCTP module (`userspace`
//!   module).
//! - [`BackendKind::FramedTcp`]: the same API multiplexed on one TCP connection; the
//!   head-of-line-blocking baseline (`framed_tcp` module).
//! - [`BackendKind::Quic`]: one QUIC connection (quinn), one QUIC stream per stream
//!   number; the multistream transport our SCTP is measured against (`quic`
//!   module).
//!
//! Every backend keeps message boundaries and per-stream order, imposes no order
//! across streams, negotiates stream counts (a peer that grants fewer is used with
//! fewer) and reports abort, close and time-out as [`TransportError`]s.
//!
//! It never parses what it carries: the protocol lives in `gateway-protocol`.
//! The one exception is [`hello`], the gateway's HELLO exchange that opens a
//! protocol session on a fresh association, kept here so that the gateway and
//! the origin's tools share it.
//! Start reading at [`connect`], [`Listener`] and [`Association`].

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

mod config;
pub mod doctor;
mod error;
pub mod framed_tcp;
pub mod hello;
pub mod kernel;
pub mod log_limit;
pub mod quic;
mod sync;
pub mod userspace;

pub use config::{
    AssociationConfig, BackendChoice, BackendKind, SCTP_UDP_PORT, UdpOffload, duration_ms,
};
pub use error::TransportError;
/// What [`Association::sctp_stats`] returns, nameable without depending on
/// the `sctp` crate.
pub use sctp::{
    Counters as SctpCounters, DEFAULT_INIT_ACKS_PER_SECOND, Limits as SctpLimits,
    Stats as SctpStats,
};

/// One received message and the stream it arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stream number, below [`StreamCounts::inbound`].
    pub stream: u16,
    /// The message, boundaries as sent.
    pub data: Bytes,
}

/// Streams usable after negotiation, counting stream 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCounts {
    /// Streams this side may send on: 0..outbound.
    pub outbound: u16,
    /// Streams the peer may send on: 0..inbound.
    pub inbound: u16,
}

#[derive(Debug)]
enum Inner {
    Kernel(kernel::Association),
    Userspace(userspace::Association),
    FramedTcp(framed_tcp::Association),
    Quic(quic::Association),
}

/// Calls the same method on whichever backend is inside.
macro_rules! dispatch {
    ($self:expr, $assoc:ident => $body:expr) => {
        match &*$self.inner {
            Inner::Kernel($assoc) => $body,
            Inner::Userspace($assoc) => $body,
            Inner::FramedTcp($assoc) => $body,
            Inner::Quic($assoc) => $body,
        }
    };
}

/// An established association. Cheap to clone; all clones share it.
///
/// Any number of tasks may [`send`](Self::send) at once; messages on one stream
/// keep the order in which their `send` calls completed. [`recv`](Self::recv) is
/// meant for one task (the driver); concurrent callers each get distinct messages.
#[derive(Debug, Clone)]
pub struct Association {
    inner: Arc<Inner>,
}

impl Association {
    /// Which backend carries it.
    pub fn kind(&self) -> BackendKind {
        match &*self.inner {
            Inner::Kernel(_) => BackendKind::Kernel,
            Inner::Userspace(_) => BackendKind::Userspace,
            Inner::FramedTcp(_) => BackendKind::FramedTcp,
            Inner::Quic(_) => BackendKind::Quic,
        }
    }

    /// The kernel backend's association, for what only kernel SCTP offers (its
    /// stream schedulers); `None` for the other backends.
    pub fn kernel(&self) -> Option<&kernel::Association> {
        match &*self.inner {
            Inner::Kernel(a) => Some(a),
            _ => None,
        }
    }

    /// The userspace backend's association, for its batched I/O counters
    /// (tests and benchmarks); `None` for the other backends.
    #[doc(hidden)]
    pub fn userspace(&self) -> Option<&userspace::Association> {
        match &*self.inner {
            Inner::Userspace(a) => Some(a),
            _ => None,
        }
    }

    /// Negotiated stream counts.
    pub fn streams(&self) -> StreamCounts {
        dispatch!(self, a => a.streams())
    }

    /// The peer's address (for the userspace backend, its UDP address).
    pub fn peer_addr(&self) -> SocketAddr {
        dispatch!(self, a => a.peer_addr())
    }

    /// Whether the association carries user data in I-DATA chunks (RFC 8260),
    /// so that a large message on one stream does not hold back the others'
    /// (see [`AssociationConfig::idata`]). Kernel: the kernel's
    /// `SCTP_INTERLEAVING_SUPPORTED` for the association (false if it cannot
    /// say); userspace: what the handshake negotiated; framed TCP and QUIC:
    /// false.
    pub fn idata(&self) -> bool {
        match &*self.inner {
            Inner::Kernel(a) => a.idata().unwrap_or(false),
            Inner::Userspace(a) => a.idata(),
            _ => false,
        }
    }

    /// Our userspace stack's transmission state and loss-recovery counts
    /// (retransmissions, tail-loss probes, RTOs): what a slow transfer was
    /// made of. `None` for the other backends, whose stacks do not say.
    pub fn sctp_stats(&self) -> Option<sctp::Stats> {
        match &*self.inner {
            Inner::Userspace(a) => Some(a.sctp_stats()),
            _ => None,
        }
    }

    /// Queues `data` as one message on `stream`. Waits while the stream's send
    /// queue holds more than [`AssociationConfig::max_buffered_per_stream`] bytes.
    pub async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        dispatch!(self, a => a.send(stream, data).await)
    }

    /// The next message from any stream. Cancel-safe: a message is never lost
    /// because the future was dropped. `Err(Closed)` after a graceful close by
    /// either side, `Err(Aborted)` if the peer aborted.
    pub async fn recv(&self) -> Result<Message, TransportError> {
        dispatch!(self, a => a.recv().await)
    }

    /// Bytes accepted by [`send`](Self::send) on `stream` and still waiting in the
    /// transport's queue: userspace, not yet sent once (data in flight no longer
    /// counts); framed TCP, not yet written to the socket; QUIC, not yet accepted
    /// by quinn's send stream. `None` where the backend cannot tell per stream
    /// (kernel).
    pub fn buffered(&self, stream: u16) -> Option<usize> {
        dispatch!(self, a => a.buffered(stream))
    }

    /// [`buffered`](Self::buffered) of each of `streams`, appended to `out` as
    /// `(stream, bytes)`; a stream the backend cannot tell is left out. One
    /// lock for all of them where the backend has one (a scheduler reads every
    /// busy stream before each decision).
    pub fn buffered_each(&self, streams: impl IntoIterator<Item = u16>, out: &mut Vec<(u16, u64)>) {
        match &*self.inner {
            Inner::Userspace(a) => a.buffered_each(streams, out),
            Inner::FramedTcp(a) => a.buffered_each(streams, out),
            _ => out.extend(
                streams
                    .into_iter()
                    .filter_map(|stream| Some((stream, self.buffered(stream)? as u64))),
            ),
        }
    }

    /// Graceful close: what was sent is delivered, then the association ends. The
    /// peer's `recv` returns `Err(Closed)` after its last message.
    pub async fn close(&self) -> Result<(), TransportError> {
        dispatch!(self, a => a.close().await)
    }

    /// Ends the association at once; queued data is dropped and the peer's `recv`
    /// returns `Err(Aborted)`.
    pub fn abort(&self) {
        dispatch!(self, a => a.abort())
    }
}

/// Accepts associations on one local address.
#[derive(Debug)]
pub enum Listener {
    /// Kernel SCTP one-to-one listening socket.
    Kernel(kernel::Listener),
    /// UDP socket driving our SCTP core.
    Userspace(userspace::Listener),
    /// TCP listening socket.
    FramedTcp(framed_tcp::Listener),
    /// QUIC endpoint with its self-signed certificate.
    Quic(quic::Listener),
}

impl Listener {
    /// Binds `addr` with the given backend (resolve [`BackendChoice`] first).
    pub async fn bind(
        kind: BackendKind,
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        config.validate()?;
        Ok(match kind {
            BackendKind::Kernel => Listener::Kernel(kernel::Listener::bind(addr, config)?),
            BackendKind::Userspace => {
                Listener::Userspace(userspace::Listener::bind(addr, config).await?)
            }
            BackendKind::FramedTcp => {
                Listener::FramedTcp(framed_tcp::Listener::bind(addr, config).await?)
            }
            BackendKind::Quic => Listener::Quic(quic::Listener::bind(addr, config).await?),
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        match self {
            Listener::Kernel(l) => l.local_addr(),
            Listener::Userspace(l) => l.local_addr(),
            Listener::FramedTcp(l) => l.local_addr(),
            Listener::Quic(l) => l.local_addr(),
        }
    }

    /// QUIC only: the SHA-256 of the listener's certificate (lowercase hex), the
    /// value the connecting side needs as `quic_server_cert_sha256`. `None` for
    /// the other backends.
    pub fn quic_cert_sha256(&self) -> Option<&str> {
        match self {
            Listener::Quic(l) => Some(l.cert_sha256()),
            _ => None,
        }
    }

    /// The next established association.
    pub async fn accept(&self) -> Result<Association, TransportError> {
        let inner = match self {
            Listener::Kernel(l) => Inner::Kernel(l.accept().await?),
            Listener::Userspace(l) => Inner::Userspace(l.accept().await?),
            Listener::FramedTcp(l) => Inner::FramedTcp(l.accept().await?),
            Listener::Quic(l) => Inner::Quic(l.accept().await?),
        };
        Ok(Association {
            inner: Arc::new(inner),
        })
    }
}

/// Opens an association to `addr`, giving up after
/// [`AssociationConfig::connect_timeout`].
pub async fn connect(
    kind: BackendKind,
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<Association, TransportError> {
    config.validate()?;
    let connecting = async {
        Ok::<_, TransportError>(match kind {
            BackendKind::Kernel => Inner::Kernel(kernel::connect(addr, config).await?),
            BackendKind::Userspace => Inner::Userspace(userspace::connect(addr, config).await?),
            BackendKind::FramedTcp => Inner::FramedTcp(framed_tcp::connect(addr, config).await?),
            BackendKind::Quic => Inner::Quic(quic::connect(addr, config).await?),
        })
    };
    let inner = tokio::time::timeout(config.connect_timeout, connecting)
        .await
        .map_err(|_| TransportError::ConnectTimeout(config.connect_timeout))??;
    Ok(Association {
        inner: Arc::new(inner),
    })
}

/// Makes an IPv6 socket IPv6-only (`IPV6_V6ONLY`) before it is bound; an IPv4
/// one is left alone.
///
/// Every backend's IPv6 sockets are, whatever the host's
/// `net.ipv6.bindv6only`: a listener on `[::]:P` then takes IPv6 only, and
/// one on `0.0.0.0:P` beside it takes IPv4, as the shipped origin.toml asks.
/// A dual-stack `[::]:P` would hold the IPv4 port too, so the second bind
/// would fail with "Address already in use" and whichever came second would
/// be missing. A single `[::]:P` that should take IPv4 as well is written as
/// two addresses (docs/transport.md, "Listen addresses"); this is what nginx
/// does with `listen [::]:80`.
pub(crate) fn ipv6_only(socket: &socket2::Socket, addr: SocketAddr) -> std::io::Result<()> {
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(())
}
