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

use crate::config::AssociationConfig;
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};

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

/// Implements [`BackendAssociation`] for `$assoc` and [`BackendListener`]
/// for `$listener` by the inherent methods of the same names, which every
/// backend has: the required ones, then each optional one named after the
/// `;` (`buffered_each`, `idata` or `idata_or_false`, `sctp_stats`,
/// `cert_sha256`). One line per
/// backend instead of a copy of the same forwarding in each.
macro_rules! by_inherent_methods {
    ($assoc:ident, $listener:ident $(; $($optional:ident),+)?) => {
        impl $crate::contract::BackendAssociation for $assoc {
            fn streams(&self) -> $crate::StreamCounts {
                $assoc::streams(self)
            }

            fn peer_addr(&self) -> ::std::net::SocketAddr {
                $assoc::peer_addr(self)
            }

            async fn send(
                &self,
                stream: u16,
                data: ::bytes::Bytes,
            ) -> Result<(), $crate::TransportError> {
                $assoc::send(self, stream, data).await
            }

            async fn recv(&self) -> Result<$crate::Message, $crate::TransportError> {
                $assoc::recv(self).await
            }

            fn buffered(&self, stream: u16) -> Option<usize> {
                $assoc::buffered(self, stream)
            }

            async fn close(&self) -> Result<(), $crate::TransportError> {
                $assoc::close(self).await
            }

            fn abort(&self) {
                $assoc::abort(self)
            }

            $($($crate::contract::by_inherent_methods!(@association $optional $assoc);)+)?
        }

        impl $crate::contract::BackendListener for $listener {
            type Association = $assoc;

            fn local_addr(&self) -> Result<::std::net::SocketAddr, $crate::TransportError> {
                $listener::local_addr(self)
            }

            async fn accept(&self) -> Result<$assoc, $crate::TransportError> {
                $listener::accept(self).await
            }

            $($($crate::contract::by_inherent_methods!(@listener $optional $listener);)+)?
        }
    };
    (@association buffered_each $assoc:ident) => {
        fn buffered_each(
            &self,
            streams: impl IntoIterator<Item = u16>,
            out: &mut Vec<(u16, u64)>,
        ) {
            $assoc::buffered_each(self, streams, out)
        }
    };
    (@association idata $assoc:ident) => {
        fn idata(&self) -> bool {
            $assoc::idata(self)
        }
    };
    // Kernel SCTP's `idata` asks the socket and can fail: a failure reads as
    // "not negotiated".
    (@association idata_or_false $assoc:ident) => {
        fn idata(&self) -> bool {
            $assoc::idata(self).unwrap_or(false)
        }
    };
    (@association sctp_stats $assoc:ident) => {
        fn sctp_stats(&self) -> Option<sctp::Stats> {
            Some($assoc::sctp_stats(self))
        }
    };
    (@association cert_sha256 $assoc:ident) => {};
    (@listener cert_sha256 $listener:ident) => {
        fn cert_sha256(&self) -> Option<&str> {
            Some($listener::cert_sha256(self))
        }
    };
    (@listener $other:ident $listener:ident) => {};
}

pub(crate) use by_inherent_methods;
