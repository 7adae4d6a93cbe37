//! What can go wrong with a request carried to an origin, and what the HTTP
//! front-end does about it (docs/gateway-origin-link.md, "Errors").

use std::time::Duration;

use gateway_protocol::ErrorCode;
use http::StatusCode;

/// Why a request over an origin link failed.
///
/// Where the error surfaces says whether the browser has seen anything: from
/// [`OriginLink::request`](super::OriginLink::request) no response byte exists yet
/// (answer [`gateway_status`](Self::gateway_status), or fail open when
/// [`nothing_sent`](Self::nothing_sent)); from the
/// [`ResponseBody`](super::ResponseBody) the head is already out, and the only
/// honest signal left is closing the browser connection.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LinkError {
    /// No usable association (down, reconnecting, going away, shut down), or the
    /// association died before the response head arrived. No response byte
    /// exists: fail open to direct TCP or answer 502.
    #[error("origin unavailable: {0}")]
    Unavailable(String),
    /// The origin reset the request with this code (REFUSED: not processed).
    #[error("origin reset the request ({code:?}): {reason}")]
    Reset {
        /// The RESET's code.
        code: ErrorCode,
        /// The RESET's reason text.
        reason: String,
    },
    /// The association died or closed after the response head: the body is
    /// truncated and must never be presented as complete.
    #[error("association failed mid-response: {0}")]
    Broken(String),
    /// The origin broke the protocol for this request (malformed response head,
    /// body length that disagrees with RESPONSE_END, ...). The gateway sent RESET
    /// PROTOCOL_ERROR for it.
    #[error("malformed response from the origin: {0}")]
    Malformed(String),
    /// The body's reader took no chunk for this long while the association had
    /// one for it; the request was cancelled so that the other streams move on.
    #[error("response body not read for {0:?}; request cancelled")]
    Stalled(Duration),
    /// The request cannot travel on the protocol (empty head, or a head above
    /// `MAX_HEAD`). It never left the gateway.
    #[error("request cannot be sent to the origin: {0}")]
    Unsendable(&'static str),
}

impl LinkError {
    /// True if the origin never got the request or never answered it (no response
    /// byte exists): retrying it elsewhere (fail open to direct TCP) is safe for
    /// idempotent methods. A request that was sent but never answered
    /// ([`Unavailable`](Self::Unavailable) after the association died) may have
    /// been processed, so non-idempotent methods must not be retried.
    pub fn nothing_sent(&self) -> bool {
        match self {
            LinkError::Unavailable(_) | LinkError::Unsendable(_) => true,
            LinkError::Reset { code, .. } => *code == ErrorCode::Refused,
            LinkError::Broken(_) | LinkError::Malformed(_) | LinkError::Stalled(_) => false,
        }
    }

    /// The status to answer the browser with when this error arrives before any
    /// response byte was sent to it (docs/protocol.md, error codes): 504 for the
    /// origin's upstream time-out, 502 for everything else.
    pub fn gateway_status(&self) -> StatusCode {
        match self {
            LinkError::Reset {
                code: ErrorCode::UpstreamTimeout,
                ..
            } => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unprocessed_requests_count_as_nothing_sent() {
        assert!(LinkError::Unavailable("down".into()).nothing_sent());
        assert!(LinkError::Unsendable("empty head").nothing_sent());
        let reset = |code| LinkError::Reset {
            code,
            reason: String::new(),
        };
        assert!(reset(ErrorCode::Refused).nothing_sent());
        assert!(!reset(ErrorCode::InternalError).nothing_sent());
        assert!(!LinkError::Broken("gone".into()).nothing_sent());
        assert!(!LinkError::Malformed("bad head".into()).nothing_sent());
        assert!(!LinkError::Stalled(Duration::from_secs(1)).nothing_sent());
    }

    #[test]
    fn statuses_follow_the_reset_code() {
        let reset = |code| LinkError::Reset {
            code,
            reason: String::new(),
        };
        assert_eq!(
            reset(ErrorCode::UpstreamTimeout).gateway_status(),
            StatusCode::GATEWAY_TIMEOUT
        );
        assert_eq!(
            reset(ErrorCode::UpstreamFailed).gateway_status(),
            StatusCode::BAD_GATEWAY
        );
        assert_eq!(
            LinkError::Unavailable("down".into()).gateway_status(),
            StatusCode::BAD_GATEWAY
        );
    }
}
