//! What the cache and the prefetch queue need from the network: send one
//! request where its route goes, get the response head and a body stream
//! back. The front implements [`Upstream`] over the origin link (an SCTP
//! origin, on the stream the browser's connection is pinned to) and direct TCP
//! (the original destination); the cache ([`crate::cache::Cache::serve`])
//! and the prefetch queue ([`crate::prefetch`]) call it without knowing
//! which, and their tests hand them a fake.
//!
//! A leaf: it names only [`crate::body`], so that the cache below the front
//! can call the front's network without importing it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use gateway_protocol::RequestClass;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use tokio::sync::watch;

use crate::body::Body;

/// A checked request on its way upstream.
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    /// The method.
    pub method: Method,
    /// Origin-form target.
    pub path: String,
    /// The Host to send (the request's, or the absolute-form target's authority).
    pub host: HeaderValue,
    /// End-to-end headers only.
    pub headers: HeaderMap,
    /// The whole request body (read before it is forwarded).
    pub body: Bytes,
    /// RFC 9218 urgency toward an origin.
    pub urgency: u8,
    /// Browser demand or the gateway's prefetch.
    pub class: RequestClass,
    /// A prefetch's urgency and class after promotion (a browser asked for
    /// it): the origin link sends PRIORITY when it changes.
    pub promote: Option<watch::Receiver<(u8, RequestClass)>>,
}

/// The upstream's answer: the response (hop-by-hop fields removed, no `Via`
/// yet) and the route it took, for the access log.
#[derive(Debug)]
pub struct Answered {
    /// The response.
    pub response: Response<Body>,
    /// `origin`, `direct`, `fail-open`...: the route's access-log word.
    pub route: &'static str,
}

/// Which side a request failed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The browser's request cannot be served as sent: malformed, too large,
    /// too slow, a loop, a method not served on intercepted connections.
    Browser,
    /// The origin (over its association) or the original destination (direct
    /// TCP) is unreachable, silent past its time-out, reset the request or
    /// broke the protocol.
    Origin,
    /// The gateway itself could not build or send the request.
    Internal,
}

impl Side {
    /// Every side, in the order of the label values.
    pub const ALL: [Side; 3] = [Side::Browser, Side::Origin, Side::Internal];

    /// The `side` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Browser => "browser",
            Side::Origin => "origin",
            Side::Internal => "internal",
        }
    }
}

/// The request got no response: what the gateway answers instead, and whose
/// failure it is.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct UpstreamError {
    /// Whose failure it is (for `gateway_request_errors_total`).
    pub side: Side,
    /// The status the gateway's own answer carries: 502 for an upstream that
    /// cannot be reached, 504 for one that does not answer in time...
    pub status: StatusCode,
    /// What went wrong, for the answer's body and the log.
    pub message: String,
}

impl UpstreamError {
    /// A failure of `side`, answered with `status`.
    pub fn new(side: Side, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            side,
            status,
            message: message.into(),
        }
    }

    /// The origin or the original destination failed.
    pub fn origin(status: StatusCode, message: impl Into<String>) -> Self {
        Self::new(Side::Origin, status, message)
    }
}

/// What [`Upstream::send`] returns.
pub type UpstreamFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Answered, UpstreamError>> + Send + 'a>>;

/// The network toward one request's destination, as the cache and the
/// prefetch queue use it. The route (which origin, or direct TCP, and whether
/// it fails open) is the implementation's: a caller only sends.
pub trait Upstream: Send + Sync + std::fmt::Debug {
    /// Sends `request` and waits for the response head; the body streams.
    fn send(&self, request: UpstreamRequest) -> UpstreamFuture<'_>;

    /// The same route over connections of its own (its own stream pin and
    /// direct connection), for work that outlives the browser request that
    /// started it and must not queue behind that browser's next request: a
    /// background revalidation, a page's prefetches.
    fn detach(&self) -> Arc<dyn Upstream>;
}

/// Removes hop-by-hop fields (RFC 9110, section 7.6.1): `Connection` and the
/// fields it names, and the fixed list. `Expect` goes too: the body is already read.
/// A `Connection` value is read as bytes: a byte past ASCII elsewhere in it
/// (obs-text) must not keep the fields it names.
pub fn end_to_end(mut headers: HeaderMap) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| list_items(v.as_bytes()))
        .filter_map(|name| HeaderName::from_bytes(name).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::EXPECT,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    headers
}

/// The items of a comma-separated field value, without the whitespace around
/// them; empty items are left out (RFC 9110, section 5.6.1).
pub(crate) fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|item| !item.is_empty())
}
