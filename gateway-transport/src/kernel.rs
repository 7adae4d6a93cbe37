//! Placeholder: the kernel backend is being written.

use std::net::SocketAddr;

use bytes::Bytes;

use crate::{AssociationConfig, Message, StreamCounts, TransportError};

fn unimplemented() -> TransportError {
    TransportError::Unavailable("the kernel backend is not written yet".into())
}

/// True if this host can open a kernel SCTP socket.
pub fn available() -> bool {
    false
}

/// An established association.
#[derive(Debug)]
pub struct Association {
    _private: (),
}

impl Association {
    pub(crate) fn streams(&self) -> StreamCounts {
        StreamCounts {
            outbound: 0,
            inbound: 0,
        }
    }
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], 0))
    }
    pub(crate) async fn send(&self, _stream: u16, _data: Bytes) -> Result<(), TransportError> {
        Err(unimplemented())
    }
    pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
        Err(unimplemented())
    }
    pub(crate) fn buffered(&self, _stream: u16) -> Option<usize> {
        None
    }
    pub(crate) async fn close(&self) -> Result<(), TransportError> {
        Err(unimplemented())
    }
    pub(crate) fn abort(&self) {}
}

/// A listening endpoint.
#[derive(Debug)]
pub struct Listener {
    _private: (),
}

impl Listener {
    pub(crate) fn bind(
        _addr: SocketAddr,
        _config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        Err(unimplemented())
    }
    pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        Err(unimplemented())
    }
    pub(crate) async fn accept(&self) -> Result<Association, TransportError> {
        Err(unimplemented())
    }
}

pub(crate) async fn connect(
    _addr: SocketAddr,
    _config: &AssociationConfig,
) -> Result<Association, TransportError> {
    Err(unimplemented())
}
