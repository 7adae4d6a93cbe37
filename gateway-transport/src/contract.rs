//! The contract a backend implements on its own types: how it opens
//! associations and checks its settings ([`Backend`]), and what its
//! associations and listeners do ([`BackendAssociation`],
//! [`BackendListener`]; [`crate::Association`]'s documentation is the
//! semantics). `backend` registers each implementation; a backend imports
//! this module, never `backend`.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;

use crate::{AssociationConfig, Message, StreamCounts, TransportError};

/// What a backend is: how it opens associations and how it checks its
/// settings. Implemented on a unit type of the backend's module.
pub(crate) trait Backend {
    /// Its established association.
    type Association: BackendAssociation;
    /// Its listening socket.
    type Listener: BackendListener<Association = Self::Association>;

    /// Rejects settings of this backend's own that it cannot honour, naming
    /// the key. Runs for every backend on every configuration (see
    /// [`AssociationConfig::validate`]), so that a daemon refuses a bad file
    /// at start whatever backend it picks.
    fn validate(config: &AssociationConfig) -> Result<(), TransportError>;

    /// What the connecting side needs beyond [`validate`](Self::validate):
    /// checked for the chosen backend only, by a daemon that connects.
    fn validate_connecting(config: &AssociationConfig) -> Result<(), TransportError> {
        let _ = config;
        Ok(())
    }

    /// Binds `addr` and starts accepting.
    fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> impl Future<Output = Result<Self::Listener, TransportError>> + Send;

    /// Opens an association to `addr`; the caller bounds it with the connect
    /// time-out.
    fn connect(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> impl Future<Output = Result<Self::Association, TransportError>> + Send;
}

/// An established association of one backend: the semantics of
/// [`crate::Association`], whose documentation is the contract.
pub(crate) trait BackendAssociation: fmt::Debug + Send + Sync + 'static {
    /// Negotiated stream counts.
    fn streams(&self) -> StreamCounts;
    /// The peer's address.
    fn peer_addr(&self) -> SocketAddr;
    /// Queues one message on `stream`.
    fn send(
        &self,
        stream: u16,
        data: Bytes,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;
    /// The next message from any stream; cancel-safe.
    fn recv(&self) -> impl Future<Output = Result<Message, TransportError>> + Send;
    /// Bytes queued and not yet handed on, where the backend can tell.
    fn buffered(&self, stream: u16) -> Option<usize>;
    /// [`buffered`](Self::buffered) of each stream; a backend with one lock
    /// over its queues overrides it to take the lock once.
    fn buffered_each(&self, streams: impl IntoIterator<Item = u16>, out: &mut Vec<(u16, u64)>) {
        out.extend(
            streams
                .into_iter()
                .filter_map(|stream| Some((stream, self.buffered(stream)? as u64))),
        );
    }
    /// Graceful close.
    fn close(&self) -> impl Future<Output = Result<(), TransportError>> + Send;
    /// Ends the association at once.
    fn abort(&self);
    /// Whether user data travels in I-DATA chunks (RFC 8260).
    fn idata(&self) -> bool {
        false
    }
    /// Our SCTP stack's transmission state, for the backend that runs it.
    fn sctp_stats(&self) -> Option<sctp::Stats> {
        None
    }
}

/// A listening socket of one backend.
pub(crate) trait BackendListener: fmt::Debug + Send + Sync + 'static {
    /// What [`accept`](Self::accept) yields.
    type Association;
    /// The bound address.
    fn local_addr(&self) -> Result<SocketAddr, TransportError>;
    /// The next established association.
    fn accept(&self) -> impl Future<Output = Result<Self::Association, TransportError>> + Send;
    /// The SHA-256 of the listener's certificate, for a backend that has one.
    fn cert_sha256(&self) -> Option<&str> {
        None
    }
}
