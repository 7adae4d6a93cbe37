//! Reverse-proxy mode: each request that arrives from a gateway is forwarded to
//! one TCP HTTP/1.1 upstream, and the upstream's answer is streamed back.
//!
//! [`Proxy`] implements the driver's [`Handler`]. It parses the gateway's request
//! head with httparse, strips the hop-by-hop fields, adds `Via`, and sends the
//! request through hyper-util's pooled client (keep-alive connections are reused
//! across requests and associations). The upstream's status line and fields,
//! minus the hop-by-hop ones, become [`Reply::head`]; the body is pulled frame by
//! frame through [`ProxyBody`] and never held whole.
//!
//! Failures are decided in one place, [`ProxyError`]: which side failed, the
//! status the gateway sees (400, 502, 504) and whether a retry is safe. A body
//! that ends early is an error of the [`BodySource`], which the driver turns into
//! a RESET, so a truncated body is never presented as complete.
//!
//! It never invents client information (there is no `X-Forwarded-For`: the origin
//! does not know the browser's address), never follows redirects, never caches,
//! and never speaks TLS to the upstream. See `docs/origin-proxy.md`.

use std::error::Error as _;
use std::fmt;
use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, Uri};
use http::{Method, Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::{Deserialize, Serialize};

use crate::server::{BodySource, Handler, IncomingRequest, Reply};

/// Most header fields accepted in the gateway's request head.
pub const MAX_REQUEST_HEADERS: usize = 128;
/// Most header fields accepted in the upstream's response head (hyper's limit).
pub const MAX_RESPONSE_HEADERS: usize = 128;
/// The `Via` entry this proxy adds to requests and responses (RFC 9110 §7.6.3).
pub const VIA: &str = "1.1 origin";

/// `[upstream]`: where and how requests are forwarded. Durations are in
/// milliseconds in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// The upstream, `host:port` (an IP address or a name resolved at connect
    /// time). Plain HTTP/1.1 over TCP.
    pub address: String,
    /// Give up connecting to the upstream after this long (answered 504).
    #[serde(with = "gateway_transport::duration_ms")]
    pub connect_timeout: Duration,
    /// Longest wait for the upstream's response head, counted from the moment the
    /// request is handed to the pool, so it includes connecting (answered 504).
    #[serde(with = "gateway_transport::duration_ms")]
    pub response_timeout: Duration,
    /// Longest wait for the next body bytes once the head has arrived; past it
    /// the body fails (RESET).
    #[serde(with = "gateway_transport::duration_ms")]
    pub body_timeout: Duration,
    /// Close a pooled keep-alive connection after it has been idle this long.
    #[serde(with = "gateway_transport::duration_ms")]
    pub idle_timeout: Duration,
    /// Idle keep-alive connections kept per upstream; 0 disables reuse.
    pub max_idle_per_upstream: usize,
    /// Send this `Host` instead of the one in the gateway's request.
    pub host_header: Option<String>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8080".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_idle_per_upstream: 32,
            host_header: None,
        }
    }
}

/// A [`ProxyConfig`] value that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    /// A value is out of range; `key` is relative to the `[upstream]` table.
    #[error("invalid `{key}`: {reason}")]
    Invalid {
        /// The key inside the table, e.g. `address`.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl ProxyConfig {
    /// Rejects values that cannot work, naming the key (relative to the table the
    /// config is embedded in).
    pub fn validate(&self) -> Result<(), ProxyConfigError> {
        self.authority().map(|_| ())
    }

    /// Validates and returns the upstream's authority.
    fn authority(&self) -> Result<Authority, ProxyConfigError> {
        let bad = |key, reason: &str| {
            Err(ProxyConfigError::Invalid {
                key,
                reason: reason.to_owned(),
            })
        };
        let Ok(authority) = self.address.parse::<Authority>() else {
            return bad("address", "must be host:port");
        };
        if authority.port_u16().is_none() || authority.host().is_empty() {
            return bad("address", "must be host:port, with the port");
        }
        if self.address.contains('@') {
            return bad("address", "must be host:port, without user information");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout", "must be above zero");
        }
        if self.response_timeout.is_zero() {
            return bad("response_timeout", "must be above zero");
        }
        if self.body_timeout.is_zero() {
            return bad("body_timeout", "must be above zero");
        }
        if self.idle_timeout.is_zero() {
            return bad("idle_timeout", "must be above zero");
        }
        if let Some(host) = &self.host_header
            && (host.is_empty() || HeaderValue::from_str(host).is_err())
        {
            return bad("host_header", "must be a non-empty, printable field value");
        }
        Ok(authority)
    }
}

/// Which side of the exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The request from the gateway (the browser's request) is at fault.
    Browser,
    /// The upstream could not be reached or misbehaved.
    Upstream,
    /// This proxy could not represent what it received.
    Internal,
}

/// Why a request was not forwarded, or its response head not obtained. The
/// status code and whether a retry is safe are decided here and nowhere else.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The gateway's request head cannot be forwarded.
    #[error("bad request head: {0}")]
    BadRequest(&'static str),
    /// Connecting to the upstream failed (refused, unreachable, name not found).
    #[error("cannot connect to the upstream: {}", chain(.0))]
    Connect(#[source] hyper_util::client::legacy::Error),
    /// Connecting to the upstream took longer than `connect_timeout`.
    #[error("connecting to the upstream timed out")]
    ConnectTimeout,
    /// No response head within `response_timeout`.
    #[error("no response head from the upstream within {0:?}")]
    ResponseTimeout(Duration),
    /// The upstream closed, reset or sent a malformed response before its head
    /// was complete.
    #[error("upstream exchange failed: {}", chain(.0))]
    Upstream(#[source] hyper_util::client::legacy::Error),
    /// The upstream switched protocols, which this protocol cannot carry.
    #[error("the upstream answered 101 Switching Protocols")]
    SwitchingProtocols,
    /// The rendered response head exceeds the protocol's `MAX_HEAD`.
    #[error("response head of {0} bytes exceeds the protocol's limit")]
    HeadTooLarge(usize),
}

impl ProxyError {
    /// Which side failed.
    pub fn side(&self) -> Side {
        match self {
            ProxyError::BadRequest(_) => Side::Browser,
            ProxyError::Connect(_)
            | ProxyError::ConnectTimeout
            | ProxyError::ResponseTimeout(_)
            | ProxyError::Upstream(_)
            | ProxyError::SwitchingProtocols => Side::Upstream,
            ProxyError::HeadTooLarge(_) => Side::Internal,
        }
    }

    /// The status the gateway (and so the browser) is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::ConnectTimeout | ProxyError::ResponseTimeout(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::Connect(_)
            | ProxyError::Upstream(_)
            | ProxyError::SwitchingProtocols
            | ProxyError::HeadTooLarge(_) => StatusCode::BAD_GATEWAY,
        }
    }

    /// True if the upstream cannot have acted on the request, so sending it again
    /// (here or elsewhere) is safe whatever its method.
    pub fn retry_safe(&self) -> bool {
        matches!(self, ProxyError::Connect(_) | ProxyError::ConnectTimeout)
    }

    /// The short text sent as the error response's body.
    fn body_text(&self) -> &'static str {
        match self {
            ProxyError::BadRequest(_) => "malformed request\n",
            ProxyError::Connect(_) => "the upstream server could not be reached\n",
            ProxyError::ConnectTimeout => "connecting to the upstream server timed out\n",
            ProxyError::ResponseTimeout(_) => "the upstream server did not answer in time\n",
            ProxyError::Upstream(_) | ProxyError::SwitchingProtocols => {
                "the upstream server sent an invalid response\n"
            }
            ProxyError::HeadTooLarge(_) => "the upstream response head is too large\n",
        }
    }
}

/// Why a response body stopped early. Reaches the driver inside an
/// [`io::Error`] (as its inner error), where it becomes a RESET.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The upstream closed or reset the connection, or broke the framing,
    /// before the body was complete.
    #[error("upstream body failed: {}", chain(.0))]
    Upstream(#[source] hyper::Error),
    /// No body bytes for `body_timeout`.
    #[error("no body bytes from the upstream within {0:?}")]
    Timeout(Duration),
}

/// Reverse proxy to one upstream, with a pool of keep-alive connections shared
/// by every association. Cheap to share behind an `Arc`.
pub struct Proxy {
    client: Client<HttpConnector, Full<Bytes>>,
    config: ProxyConfig,
    authority: Authority,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Validates `config` and builds the pooled client. Nothing connects until the
    /// first request; call from within a tokio runtime's context.
    pub fn new(config: ProxyConfig) -> Result<Self, ProxyConfigError> {
        let authority = config.authority()?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.idle_timeout)
            .pool_max_idle_per_host(config.max_idle_per_upstream)
            .http1_max_headers(MAX_RESPONSE_HEADERS)
            // A request that never reached a reused connection (it closed while
            // idle) is sent again on another.
            .retry_canceled_requests(true)
            // The Host field is always set by `build_request`.
            .set_host(false)
            .build(connector);
        Ok(Self {
            client,
            config,
            authority,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// Forwards one request and waits for the response head.
    pub async fn forward(&self, head: &[u8], body: Bytes) -> Result<Reply<ProxyBody>, ProxyError> {
        let request = build_request(
            head,
            body,
            &self.authority,
            self.config.host_header.as_deref(),
        )?;
        let head_only = request.method() == Method::HEAD;
        let timeout = self.config.response_timeout;
        let response = match tokio::time::timeout(timeout, self.client.request(request)).await {
            Err(_) => return Err(ProxyError::ResponseTimeout(timeout)),
            Ok(Err(e)) if e.is_connect() && is_timeout(&e) => {
                return Err(ProxyError::ConnectTimeout);
            }
            Ok(Err(e)) if e.is_connect() => return Err(ProxyError::Connect(e)),
            Ok(Err(e)) => return Err(ProxyError::Upstream(e)),
            Ok(Ok(response)) => response,
        };
        let (parts, incoming) = response.into_parts();
        if parts.status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(ProxyError::SwitchingProtocols);
        }
        let head = render_response_head(&parts)?;
        let bodyless = head_only
            || parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let body_len = if bodyless {
            Some(0)
        } else {
            content_length(&parts.headers)
        };
        Ok(Reply {
            head,
            body_len,
            body: ProxyBody {
                state: if bodyless {
                    BodyState::Done
                } else {
                    BodyState::Upstream(incoming)
                },
                pending: Bytes::new(),
                timeout: self.config.body_timeout,
                expected: body_len,
                received: 0,
            },
        })
    }
}

impl Handler for Proxy {
    type Body = ProxyBody;

    async fn handle(&self, request: IncomingRequest) -> Reply<ProxyBody> {
        let head = request.request.head;
        match self.forward(&head, request.body).await {
            Ok(reply) => reply,
            Err(e) => {
                gateway_transport::warn_limited!(
                    id = request.id,
                    side = ?e.side(),
                    status = e.status().as_u16(),
                    retry_safe = e.retry_safe(),
                    error = %e,
                    "proxying failed"
                );
                error_reply(&e, is_head_request(&head))
            }
        }
    }
}

/// A response body: the upstream's, streamed, or a short error text.
#[derive(Debug)]
pub struct ProxyBody {
    state: BodyState,
    /// Bytes of the last frame not yet handed out (frames can exceed `max`).
    pending: Bytes,
    timeout: Duration,
    /// The length the upstream announced, if it did.
    expected: Option<u64>,
    /// Bytes received from the upstream so far.
    received: u64,
}

#[derive(Debug)]
enum BodyState {
    Upstream(Incoming),
    Done,
    /// Failed once; every later call fails too, so that no caller can mistake
    /// the stop for a clean end.
    Failed,
}

impl ProxyBody {
    fn fixed(bytes: Bytes) -> Self {
        Self {
            state: BodyState::Done,
            pending: bytes,
            timeout: Duration::ZERO,
            expected: None,
            received: 0,
        }
    }
}

impl BodySource for ProxyBody {
    async fn next_chunk(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        let max = max.max(1);
        loop {
            if !self.pending.is_empty() {
                let n = max.min(self.pending.len());
                return Ok(Some(self.pending.split_to(n)));
            }
            let incoming = match &mut self.state {
                BodyState::Done => return Ok(None),
                BodyState::Failed => {
                    return Err(io::Error::other("upstream body already failed"));
                }
                BodyState::Upstream(incoming) => incoming,
            };
            let failure = match tokio::time::timeout(self.timeout, incoming.frame()).await {
                Ok(None) => {
                    self.state = BodyState::Done;
                    return Ok(None);
                }
                Ok(Some(Ok(frame))) => {
                    // Trailers have no place on this protocol; they are dropped.
                    if let Ok(data) = frame.into_data() {
                        self.received += data.len() as u64;
                        self.pending = data;
                    }
                    continue;
                }
                Ok(Some(Err(e))) => BodyError::Upstream(e),
                Err(_) => BodyError::Timeout(self.timeout),
            };
            self.state = BodyState::Failed;
            let kind = match failure {
                BodyError::Timeout(_) => io::ErrorKind::TimedOut,
                BodyError::Upstream(ref e)
                    if e.is_incomplete_message()
                        || self.expected.is_some_and(|n| self.received < n) =>
                {
                    io::ErrorKind::UnexpectedEof
                }
                BodyError::Upstream(ref e) => io_kind(e).unwrap_or(io::ErrorKind::Other),
            };
            return Err(io::Error::new(kind, failure));
        }
    }
}

/// True for fields that describe one connection and are never forwarded
/// (RFC 9110 §7.6.1): the fixed list, every `Proxy-*` field, and those named by
/// `Connection`.
fn is_hop_by_hop(name: &HeaderName, named_by_connection: &[HeaderName]) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade"
    ) || name.as_str().starts_with("proxy-")
        || named_by_connection.contains(name)
}

/// The field names listed in every `Connection` field of `headers`.
fn connection_tokens<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<HeaderName> {
    values
        .flat_map(|v| v.split(|&b| b == b','))
        .filter_map(|token| HeaderName::from_bytes(token.trim_ascii()).ok())
        .collect()
}

/// Parses the gateway's request head and builds the upstream request:
/// origin-form target, hop-by-hop fields removed, `Via` added, body framed by
/// `Content-Length`.
fn build_request(
    head: &[u8],
    body: Bytes,
    upstream: &Authority,
    host_override: Option<&str>,
) -> Result<Request<Full<Bytes>>, ProxyError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(ProxyError::BadRequest("incomplete request head"));
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(ProxyError::BadRequest("too many header fields"));
        }
        Err(_) => return Err(ProxyError::BadRequest("unparsable request head")),
    }
    let (Some(method), Some(target)) = (parsed.method, parsed.path) else {
        return Err(ProxyError::BadRequest("incomplete request line"));
    };
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|_| ProxyError::BadRequest("bad method"))?;
    if method == Method::CONNECT {
        return Err(ProxyError::BadRequest("CONNECT is not proxied"));
    }
    let (path, target_host) = split_target(target)?;
    let uri = Uri::builder()
        .scheme("http")
        .authority(upstream.clone())
        .path_and_query(path)
        .build()
        .map_err(|_| ProxyError::BadRequest("bad request target"))?;

    let EndToEnd {
        mut headers,
        host,
        had_framing,
    } = end_to_end_fields(parsed.headers)?;
    let host = match (host_override, target_host.as_deref(), host) {
        (Some(h), _, _) | (None, Some(h), _) => {
            HeaderValue::from_str(h).map_err(|_| ProxyError::BadRequest("bad request target"))?
        }
        (None, None, Some(h)) => h,
        // HTTP/1.0 without Host: name the upstream itself.
        (None, None, None) => HeaderValue::from_str(upstream.as_str())
            .map_err(|_| ProxyError::BadRequest("bad upstream authority"))?,
    };
    headers.insert(header::HOST, host);
    if had_framing || !body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    append_via(&mut headers);

    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Ok(request)
}

/// A request target as the upstream takes it: the origin-form path, and for
/// an absolute-form target the authority, which stands for Host
/// (RFC 9112 §3.2.2).
fn split_target(target: &str) -> Result<(String, Option<String>), ProxyError> {
    if target.starts_with('/') {
        return Ok((target.to_owned(), None));
    }
    let uri: Uri = target
        .parse()
        .map_err(|_| ProxyError::BadRequest("bad request target"))?;
    let (Some(authority), Some(path)) = (uri.authority(), uri.path_and_query()) else {
        return Err(ProxyError::BadRequest("request target is not origin-form"));
    };
    Ok((
        path.as_str().to_owned(),
        Some(authority.as_str().to_owned()),
    ))
}

/// The fields of a request head that go upstream, and the two the proxy sets
/// itself.
struct EndToEnd {
    /// Every field but Host, the framing, the hop-by-hop ones and `Expect`.
    headers: HeaderMap,
    /// The head's one Host field, if it had one.
    host: Option<HeaderValue>,
    /// The head had `Content-Length` or `Transfer-Encoding`.
    had_framing: bool,
}

/// Sorts a parsed head's fields into what [`EndToEnd`] holds.
fn end_to_end_fields(fields: &[httparse::Header<'_>]) -> Result<EndToEnd, ProxyError> {
    let named = connection_tokens(
        fields
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("connection"))
            .map(|h| h.value),
    );
    let mut headers = HeaderMap::with_capacity(fields.len() + 2);
    let mut had_framing = false;
    let mut host = None;
    for field in fields {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ProxyError::BadRequest("bad field name"))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| ProxyError::BadRequest("bad field value"))?;
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            // The body arrived whole; build_request frames it again.
            had_framing = true;
            continue;
        }
        if name == header::HOST {
            if host.replace(value).is_some() {
                return Err(ProxyError::BadRequest("more than one Host field"));
            }
            continue;
        }
        // The body is already complete: the gateway dealt with any
        // `Expect: 100-continue`, and an interim response would only add a
        // round trip upstream.
        if is_hop_by_hop(&name, &named) || name == header::EXPECT {
            continue;
        }
        headers.append(name, value);
    }
    Ok(EndToEnd {
        headers,
        host,
        had_framing,
    })
}

/// Adds this proxy to `Via`, after any entries already there.
fn append_via(headers: &mut HeaderMap) {
    headers.append(header::VIA, HeaderValue::from_static(VIA));
}

/// Renders the upstream's status line and end-to-end fields as an HTTP/1.1
/// head. Field names come out lower-case (hyper does not keep their case).
fn render_response_head(parts: &http::response::Parts) -> Result<Bytes, ProxyError> {
    let named = connection_tokens(
        parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .map(HeaderValue::as_bytes),
    );
    let reason = match parts.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(reason) => reason.as_bytes(),
        None => parts.status.canonical_reason().unwrap_or("").as_bytes(),
    };
    let mut head = BytesMut::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.extend_from_slice(b" ");
    head.extend_from_slice(reason);
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if is_hop_by_hop(name, &named) {
            continue;
        }
        push_field(&mut head, name.as_str().as_bytes(), value.as_bytes());
    }
    push_field(&mut head, b"via", VIA.as_bytes());
    head.extend_from_slice(b"\r\n");
    if head.len() > gateway_protocol::MAX_HEAD {
        return Err(ProxyError::HeadTooLarge(head.len()));
    }
    Ok(head.freeze())
}

fn push_field(head: &mut BytesMut, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// The body length announced by `Content-Length`, if there is exactly one
/// well-formed value.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()?.trim().parse().ok()
}

/// The answer to a request that could not be proxied: the status and a short
/// text. A HEAD request gets the head alone.
fn error_reply(error: &ProxyError, head_only: bool) -> Reply<ProxyBody> {
    let status = error.status();
    let text = error.body_text();
    let mut head = BytesMut::with_capacity(160);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.extend_from_slice(b" ");
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    push_field(&mut head, b"content-type", b"text/plain; charset=utf-8");
    push_field(
        &mut head,
        b"content-length",
        text.len().to_string().as_bytes(),
    );
    push_field(&mut head, b"cache-control", b"no-store");
    push_field(&mut head, b"via", VIA.as_bytes());
    head.extend_from_slice(b"\r\n");
    let body = if head_only {
        Bytes::new()
    } else {
        Bytes::from_static(text.as_bytes())
    };
    Reply {
        head: head.freeze(),
        body_len: Some(body.len() as u64),
        body: ProxyBody::fixed(body),
    }
}

fn is_head_request(head: &[u8]) -> bool {
    head.starts_with(b"HEAD ")
}

/// The kind of the first I/O error among `error`'s sources.
fn io_kind(error: &dyn std::error::Error) -> Option<io::ErrorKind> {
    let mut source = error.source();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        source = e.source();
    }
    None
}

/// True if an I/O timeout is somewhere in `error`'s sources.
fn is_timeout(error: &hyper_util::client::legacy::Error) -> bool {
    let mut source = error.source();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::TimedOut
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// `error` and its sources, joined by ": " (hyper's own messages are terse).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream() -> Authority {
        Authority::from_static("127.0.0.1:8080")
    }

    fn build(head: &str, body: &'static [u8]) -> Result<Request<Full<Bytes>>, ProxyError> {
        build_request(head.as_bytes(), Bytes::from_static(body), &upstream(), None)
    }

    #[test]
    fn request_loses_hop_by_hop_fields_and_gains_via() {
        let request = build(
            "GET /a?b=c HTTP/1.1\r\nHost: example.test\r\nConnection: keep-alive, X-Hop\r\n\
             X-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X-T\r\n\
             Upgrade: h2c\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: close\r\n\
             Accept: */*\r\nVia: 1.0 gw\r\n\r\n",
            b"",
        )
        .expect("valid head");
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri(), "http://127.0.0.1:8080/a?b=c");
        let names: Vec<&str> = request.headers().keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept", "via", "host"]);
        let via: Vec<&[u8]> = request
            .headers()
            .get_all(header::VIA)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        assert_eq!(via, [&b"1.0 gw"[..], VIA.as_bytes()]);
        assert_eq!(request.headers()[header::HOST], "example.test");
    }

    #[test]
    fn body_is_framed_by_content_length_whatever_the_head_said() {
        let request = build(
            "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
            b"hello",
        )
        .expect("valid head");
        assert_eq!(request.headers()[header::CONTENT_LENGTH], "5");
        assert!(request.headers().get(header::TRANSFER_ENCODING).is_none());
        assert!(request.headers().get(header::EXPECT).is_none());
        let request = build(
            "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
            b"",
        )
        .expect("valid head");
        assert_eq!(request.headers()[header::CONTENT_LENGTH], "0");
        let request = build("GET / HTTP/1.1\r\nHost: h\r\n\r\n", b"").expect("valid head");
        assert!(request.headers().get(header::CONTENT_LENGTH).is_none());
    }

    #[test]
    fn host_comes_from_override_then_absolute_target_then_field_then_upstream() {
        let head = b"GET http://abs.test/x HTTP/1.1\r\nHost: field.test\r\n\r\n";
        let r = build_request(head, Bytes::new(), &upstream(), Some("over.test")).expect("ok");
        assert_eq!(r.headers()[header::HOST], "over.test");
        let r = build_request(head, Bytes::new(), &upstream(), None).expect("ok");
        assert_eq!(r.headers()[header::HOST], "abs.test");
        assert_eq!(r.uri(), "http://127.0.0.1:8080/x");
        let r = build("GET / HTTP/1.0\r\n\r\n", b"").expect("ok");
        assert_eq!(r.headers()[header::HOST], "127.0.0.1:8080");
    }

    #[test]
    fn malformed_heads_are_bad_requests() {
        for head in [
            "",
            "GET / HTTP/1.1\r\nHost: h\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "CONNECT h:443 HTTP/1.1\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET /\x01 HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "G\u{e9}T / HTTP/1.1\r\n\r\n",
        ] {
            match build(head, b"") {
                Err(e @ ProxyError::BadRequest(_)) => {
                    assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{head:?}");
                }
                other => panic!("{head:?}: {other:?}"),
            }
        }
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(200));
        assert!(matches!(build(&many, b""), Err(ProxyError::BadRequest(_))));
    }

    #[test]
    fn no_prefix_or_byte_flip_of_a_head_panics() {
        let head =
            b"POST /x?y HTTP/1.1\r\nHost: h\r\nConnection: a, b\r\nContent-Length: 3\r\n\r\n";
        for cut in 0..=head.len() {
            let _ = build_request(&head[..cut], Bytes::new(), &upstream(), None);
        }
        for i in 0..head.len() {
            for byte in [0u8, b' ', b',', b':', b'\n', 0x7f, 0xff] {
                let mut mutated = head.to_vec();
                mutated[i] = byte;
                let _ = build_request(&mutated, Bytes::new(), &upstream(), None);
            }
        }
    }

    #[test]
    fn response_head_keeps_end_to_end_fields_only() {
        let response = http::Response::builder()
            .status(200)
            .header("connection", "keep-alive, x-hop")
            .header("x-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("transfer-encoding", "chunked")
            .header("proxy-authenticate", "Basic")
            .header("content-type", "text/plain")
            .header("content-length", "12")
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .body(())
            .expect("response");
        let (parts, ()) = response.into_parts();
        let head = render_response_head(&parts).expect("fits");
        assert_eq!(
            &head[..],
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 12\r\n\
              set-cookie: a=1\r\nset-cookie: b=2\r\nvia: 1.1 origin\r\n\r\n"
        );
        assert_eq!(content_length(&parts.headers), Some(12));
    }

    #[test]
    fn error_replies_are_complete_responses() {
        let reply = error_reply(&ProxyError::ConnectTimeout, false);
        let text = String::from_utf8(reply.head.to_vec()).expect("ascii");
        assert!(
            text.starts_with("HTTP/1.1 504 Gateway Timeout\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\n"));
        let len = ProxyError::ConnectTimeout.body_text().len();
        assert!(
            text.contains(&format!("content-length: {len}\r\n")),
            "{text}"
        );
        assert_eq!(reply.body_len, Some(len as u64));
        let reply = error_reply(&ProxyError::BadRequest("x"), true);
        assert_eq!(reply.body_len, Some(0));
        assert!(reply.head.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
    }

    #[test]
    fn config_validation_names_the_key() {
        ProxyConfig::default()
            .validate()
            .expect("defaults are valid");
        type Breaker = fn(&mut ProxyConfig);
        let cases: [(&str, Breaker); 6] = [
            ("address", |c| c.address = "localhost".into()),
            ("address", |c| c.address = "u@h:80".into()),
            ("connect_timeout", |c| c.connect_timeout = Duration::ZERO),
            ("response_timeout", |c| c.response_timeout = Duration::ZERO),
            ("idle_timeout", |c| c.idle_timeout = Duration::ZERO),
            ("host_header", |c| c.host_header = Some("a\nb".into())),
        ];
        for (key, break_it) in cases {
            let mut config = ProxyConfig::default();
            break_it(&mut config);
            let message = config.validate().expect_err(key).to_string();
            assert!(message.contains(&format!("`{key}`")), "{key}: {message}");
        }
    }

    #[test]
    fn config_reads_milliseconds_and_rejects_unknown_keys() {
        let config: ProxyConfig =
            toml::from_str("address = \"[::1]:81\"\nconnect_timeout = 250\n").expect("parses");
        assert_eq!(config.connect_timeout, Duration::from_millis(250));
        config.validate().expect("valid");
        let err = toml::from_str::<ProxyConfig>("adress = \"h:1\"\n").expect_err("unknown key");
        assert!(err.to_string().contains("adress"), "{err}");
    }
}
