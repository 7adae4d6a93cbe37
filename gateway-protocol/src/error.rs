//! Error codes on the wire, decode errors, and the reaction each one calls for.

use crate::kind::{MessageType, RequestId};

/// The 16-bit code carried by RESET and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Graceful close; nothing went wrong.
    NoError,
    /// The peer broke this protocol (malformed or misplaced message).
    ProtocolError,
    /// The sender failed for reasons of its own.
    InternalError,
    /// Not processed at all; safe to retry, here or elsewhere.
    Refused,
    /// The gateway no longer wants the response (browser went away).
    Cancelled,
    /// The origin's upstream (reverse-proxy mode) failed: the gateway answers 502.
    UpstreamFailed,
    /// The origin's upstream timed out: the gateway answers 504.
    UpstreamTimeout,
    /// A head, body or message exceeded a limit.
    TooLarge,
    /// No protocol version in common.
    VersionMismatch,
    /// A code this version does not know; treated like `InternalError`.
    Unknown(u16),
}

impl ErrorCode {
    /// The wire value.
    pub fn to_code(self) -> u16 {
        match self {
            ErrorCode::NoError => 0,
            ErrorCode::ProtocolError => 1,
            ErrorCode::InternalError => 2,
            ErrorCode::Refused => 3,
            ErrorCode::Cancelled => 4,
            ErrorCode::UpstreamFailed => 5,
            ErrorCode::UpstreamTimeout => 6,
            ErrorCode::TooLarge => 7,
            ErrorCode::VersionMismatch => 8,
            ErrorCode::Unknown(c) => c,
        }
    }

    /// Parses the wire value; unknown values are kept as [`ErrorCode::Unknown`].
    pub fn from_code(code: u16) -> Self {
        match code {
            0 => ErrorCode::NoError,
            1 => ErrorCode::ProtocolError,
            2 => ErrorCode::InternalError,
            3 => ErrorCode::Refused,
            4 => ErrorCode::Cancelled,
            5 => ErrorCode::UpstreamFailed,
            6 => ErrorCode::UpstreamTimeout,
            7 => ErrorCode::TooLarge,
            8 => ErrorCode::VersionMismatch,
            c => ErrorCode::Unknown(c),
        }
    }
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer than the 8 header bytes: the framing itself is broken.
    #[error("message of {len} bytes is shorter than the 8-byte header")]
    ShortHeader {
        /// Bytes received.
        len: usize,
    },
    /// A type code this version does not know.
    #[error("unknown message type {code:#04x} (request {id})")]
    UnknownType {
        /// The code.
        code: u8,
        /// The header's request id.
        id: RequestId,
    },
    /// A known type whose payload does not fit its layout.
    #[error("malformed {kind:?} (request {id}): {what}")]
    BadPayload {
        /// The type.
        kind: MessageType,
        /// The header's request id.
        id: RequestId,
        /// What is wrong.
        what: &'static str,
    },
    /// A head or chunk above its limit.
    #[error("{kind:?} (request {id}) carries {len} bytes, limit {limit}")]
    TooLarge {
        /// The type.
        kind: MessageType,
        /// The header's request id.
        id: RequestId,
        /// Payload bytes.
        len: usize,
        /// The limit that applies.
        limit: usize,
    },
}

/// What a receiver does about a message it cannot accept. The table in
/// docs/protocol.md ("Errors") is implemented by [`DecodeError::reaction`] and by
/// the [`crate::session::Session`] checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaction {
    /// Drop the message and carry on (unknown types, late messages for a request
    /// that already ended or was cancelled).
    Ignore,
    /// Send RESET for this request and forget it; the association lives on.
    Reset {
        /// The request.
        id: RequestId,
        /// Code to send.
        code: ErrorCode,
    },
    /// Send GOAWAY and close the association: the peer cannot be trusted to frame
    /// anything correctly any more.
    GoAway {
        /// Code to send.
        code: ErrorCode,
    },
}

impl DecodeError {
    /// The reaction this error calls for: damage confined to one request costs that
    /// request; damage to control messages or framing costs the association.
    pub fn reaction(&self) -> Reaction {
        match *self {
            DecodeError::ShortHeader { .. } => Reaction::GoAway {
                code: ErrorCode::ProtocolError,
            },
            DecodeError::UnknownType { .. } => Reaction::Ignore,
            DecodeError::BadPayload { kind, id, .. } => {
                if kind.is_control() || id == 0 {
                    Reaction::GoAway {
                        code: ErrorCode::ProtocolError,
                    }
                } else {
                    Reaction::Reset {
                        id,
                        code: ErrorCode::ProtocolError,
                    }
                }
            }
            DecodeError::TooLarge { id, .. } => Reaction::Reset {
                id,
                code: ErrorCode::TooLarge,
            },
        }
    }
}
