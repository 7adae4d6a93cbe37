//! The facade every caller uses: [`Association`], [`Listener`] and
//! [`connect`], each dispatching to the backend chosen at bind or connect
//! time through `backend`'s enums, and the validation that runs every
//! backend's checks on a configuration.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::backend::{self, AnyAssociation, AnyListener, BackendKind};
use crate::config::AssociationConfig;
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};
use crate::{kernel, userspace};

/// An established association. Cheap to clone; all clones share it.
///
/// Any number of tasks may [`send`](Self::send) at once; messages on one stream
/// keep the order in which their `send` calls completed. [`recv`](Self::recv) is
/// meant for one task (the driver); concurrent callers each get distinct messages.
#[derive(Debug, Clone)]
pub struct Association {
    inner: Arc<AnyAssociation>,
}

impl Association {
    /// Which backend carries it.
    pub fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    /// The kernel backend's association, for what only kernel SCTP offers (its
    /// stream schedulers); `None` for the other backends.
    pub fn kernel(&self) -> Option<&kernel::Association> {
        match &*self.inner {
            AnyAssociation::Kernel(a) => Some(a),
            _ => None,
        }
    }

    /// The userspace backend's association, for its batched I/O counters
    /// (tests and benchmarks); `None` for the other backends.
    #[doc(hidden)]
    pub fn userspace(&self) -> Option<&userspace::Association> {
        match &*self.inner {
            AnyAssociation::Userspace(a) => Some(a),
            _ => None,
        }
    }

    /// Negotiated stream counts.
    pub fn streams(&self) -> StreamCounts {
        self.inner.streams()
    }

    /// The peer's address (for the userspace backend, its UDP address).
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer_addr()
    }

    /// Whether the association carries user data in I-DATA chunks (RFC 8260),
    /// so that a large message on one stream does not hold back the others'
    /// (see [`UserspaceConfig::idata`](crate::UserspaceConfig::idata)). Kernel: the kernel's
    /// `SCTP_INTERLEAVING_SUPPORTED` for the association (false if it cannot
    /// say); userspace: what the handshake negotiated; framed TCP and QUIC:
    /// false.
    pub fn idata(&self) -> bool {
        self.inner.idata()
    }

    /// Our userspace stack's transmission state and loss-recovery counts
    /// (retransmissions, tail-loss probes, RTOs): what a slow transfer was
    /// made of. `None` for the other backends, whose stacks do not say.
    pub fn sctp_stats(&self) -> Option<sctp::Stats> {
        self.inner.sctp_stats()
    }

    /// Queues `data` as one message on `stream`. Waits while the stream's send
    /// queue holds more than [`AssociationConfig::max_buffered_per_stream`] bytes.
    pub async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        self.inner.send(stream, data).await
    }

    /// The next message from any stream. Cancel-safe: a message is never lost
    /// because the future was dropped. `Err(Closed)` after a graceful close by
    /// either side, `Err(Aborted)` if the peer aborted.
    pub async fn recv(&self) -> Result<Message, TransportError> {
        self.inner.recv().await
    }

    /// Bytes accepted by [`send`](Self::send) on `stream` and still waiting in the
    /// transport's queue: userspace, not yet sent once (data in flight no longer
    /// counts); framed TCP, not yet written to the socket; QUIC, not yet accepted
    /// by quinn's send stream. `None` where the backend cannot tell per stream
    /// (kernel).
    pub fn buffered(&self, stream: u16) -> Option<usize> {
        self.inner.buffered(stream)
    }

    /// [`buffered`](Self::buffered) of each of `streams`, appended to `out` as
    /// `(stream, bytes)`; a stream the backend cannot tell is left out. One
    /// lock for all of them where the backend has one (a scheduler reads every
    /// busy stream before each decision).
    pub fn buffered_each(&self, streams: impl IntoIterator<Item = u16>, out: &mut Vec<(u16, u64)>) {
        self.inner.buffered_each(streams, out)
    }

    /// Graceful close: what was sent is delivered, then the association ends. The
    /// peer's `recv` returns `Err(Closed)` after its last message.
    pub async fn close(&self) -> Result<(), TransportError> {
        self.inner.close().await
    }

    /// Ends the association at once; queued data is dropped and the peer's `recv`
    /// returns `Err(Aborted)`.
    pub fn abort(&self) {
        self.inner.abort()
    }
}

/// Accepts associations on one local address.
#[derive(Debug)]
pub struct Listener {
    inner: AnyListener,
}

impl Listener {
    /// Binds `addr` with the given backend (resolve [`BackendChoice`](crate::BackendChoice) first).
    pub async fn bind(
        kind: BackendKind,
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        config.validate()?;
        Ok(Listener {
            inner: AnyListener::bind(kind, addr, config).await?,
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.inner.local_addr()
    }

    /// QUIC only: the SHA-256 of the listener's certificate (lowercase hex), the
    /// value the connecting side needs as `[transport.quic] server_cert_sha256`. `None` for
    /// the other backends.
    pub fn quic_cert_sha256(&self) -> Option<&str> {
        self.inner.cert_sha256()
    }

    /// The next established association.
    pub async fn accept(&self) -> Result<Association, TransportError> {
        Ok(Association {
            inner: Arc::new(self.inner.accept().await?),
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
    let inner = tokio::time::timeout(
        config.connect_timeout,
        AnyAssociation::connect(kind, addr, config),
    )
    .await
    .map_err(|_| TransportError::ConnectTimeout(config.connect_timeout))??;
    Ok(Association {
        inner: Arc::new(inner),
    })
}

impl AssociationConfig {
    /// Rejects values no backend can honour, naming the setting: the settings
    /// every backend shares, then each backend's own (all of them, whichever
    /// is chosen, so that a bad file is refused at start).
    pub fn validate(&self) -> Result<(), TransportError> {
        self.validate_common()?;
        backend::validate_each(self)
    }

    /// What the connecting side of `kind` needs beyond [`validate`](Self::validate)
    /// (QUIC: the listener's certificate pin), for a daemon to refuse at start
    /// what `connect` would refuse on every attempt.
    pub fn validate_connecting(&self, kind: BackendKind) -> Result<(), TransportError> {
        backend::validate_connecting(kind, self)
    }
}
