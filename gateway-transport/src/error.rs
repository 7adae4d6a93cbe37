use std::time::Duration;

/// Why an association operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The operating system refused or failed an I/O call.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// No association came up within the connect time-out.
    #[error("no association within {0:?}")]
    ConnectTimeout(Duration),
    /// The peer aborted the association (SCTP ABORT, TCP reset).
    #[error("the peer aborted the association")]
    Aborted,
    /// The association was closed gracefully; no more messages will arrive.
    #[error("the association is closed")]
    Closed,
    /// The peer stopped answering heartbeats (or fell silent past the idle
    /// time-out).
    #[error("the peer stopped answering for {0:?}")]
    PeerUnreachable(Duration),
    /// `send` on a stream the negotiation did not grant.
    #[error("stream {stream} is not open (outbound streams: {outbound})")]
    InvalidStream {
        /// The stream asked for.
        stream: u16,
        /// Streams granted (0..outbound).
        outbound: u16,
    },
    /// A message above [`crate::AssociationConfig::max_message`], sent or received.
    #[error("message of {len} bytes exceeds the limit of {limit}")]
    MessageTooLarge {
        /// Message length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The listener stopped for good (its socket failed, or its driver
    /// panicked and could not start again): no association will be accepted.
    #[error("the listener stopped: {0}")]
    ListenerStopped(String),
    /// The peer broke the transport's own framing or handshake.
    #[error("transport protocol violation: {0}")]
    Protocol(String),
    /// The backend cannot run on this host (for example, no SCTP in the kernel).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// A configuration value is out of range.
    #[error("invalid association setting `{key}`: {reason}")]
    Config {
        /// The setting's name, as in the config file.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}
