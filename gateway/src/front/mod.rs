//! The browser-facing side: HTTP/1.1 on each intercepted connection.
//!
//! hyper parses and frames (keep-alive, pipelining with responses in request
//! order, 431 for oversized heads, the header time-out against slow clients); this
//! module adds what a transparent gateway must decide per request:
//!
//! 1. limits hyper does not know: the request target (414) and body (413, 408;
//!    413 at once for a chunk size past the limit), and the HTTP version (a
//!    higher 1.x minor is served as 1.1, another major gets 505), both seen
//!    ahead of hyper by [`framing`];
//! 2. the head's own checks, I/O-free in [`head`] (a `Via` naming this gateway
//!    is a loop, CONNECT is refused, exactly one Host), then the Host check
//!    against the original destination ([`crate::route`]);
//! 3. the route: an SCTP origin on the stream this connection is pinned to, or
//!    plain TCP to the original destination ([`crate::direct`]), made the
//!    request's [`Upstream`] (`FlowUpstream`: the route over this
//!    connection's pins and direct connection);
//! 4. for requests whose Host was verified on a cacheable route, the cache's
//!    one entry point ([`Cache::serve`]), which decides hit, join, fill,
//!    revalidate or pass and sends upstream itself; the prefetch queue
//!    ([`crate::prefetch::Prefetcher`]) watches the answer. Other requests go
//!    to the upstream untouched;
//! 5. failures: an unreachable origin fails open to direct TCP when configured,
//!    otherwise the browser gets 502; a response that breaks after its first byte
//!    closes the connection, so a truncated body never looks complete. Each
//!    answer the gateway makes itself records the [`Side`] that failed, for
//!    `gateway_request_errors_total` ([`crate::metrics`]).
//!
//! Request bodies are read whole (bounded by `http.max_body_bytes`) before they
//! are forwarded; responses stream.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;

pub mod framing;
pub mod head;
pub mod tls;

use self::framing::{Finding, FramedStream, Noted, RequestFraming};
use self::head::{Checked, end_to_end, via_value};
use crate::body::{Body, BoxError};
use crate::browser_socket::BrowserSocket;
use crate::cache::{Asker, Cache, ServeError};
use crate::config::{DEFAULT_MAX_HEADER_FIELDS, GatewayConfig, HttpConfig};
use crate::direct::{DirectError, DirectSettings, DirectUpstream};
use crate::listener::{CountedFlow, Intercepted};
use crate::metrics::{RequestMetrics, Side};
use crate::origin_link::{LinkError, OriginLink, OriginRequest, StreamPin};
use crate::prefetch::{Prefetcher, RouteKind, Watched};
use crate::push::Pushes;
use crate::route::{Decision, HostCheck, HostVerifier, RouteTable, Target};
use crate::sync::stopped;
use crate::upstream::{Answered, Upstream, UpstreamError, UpstreamFuture, UpstreamRequest};

/// The start of the gateway's `Via` pseudonym (RFC 9110, section 7.6.3); each
/// running gateway appends an id of its own, so that two gateways in a row (a
/// laptop acting as a router behind a router that runs one too) are told apart
/// and only a request that went through *this* gateway already is a loop.
const VIA_PSEUDONYM: &str = "sctp-gateway";
/// How long a Host name lookup may take before the Host counts as unverified.
const HOST_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// RFC 9218's default urgency, used for every browser request: HTTP/1.1 browsers
/// send no `Priority` header. The prefetch queue uses lower urgencies.
const DEMAND_URGENCY: u8 = 3;

/// The per-request logic shared by every browser connection.
#[derive(Debug)]
pub struct Front {
    http: HttpConfig,
    routes: RouteTable,
    verifier: HostVerifier,
    origins: Vec<Origin>,
    direct: DirectSettings,
    cache: Cache,
    /// The prefetch queue, unless `[prefetch]` turns it off for every route.
    prefetcher: Option<Arc<Prefetcher>>,
    /// The push taker, with `[push]` on and the cache on: pages invite
    /// pushes (PUSH_BUDGET), a browser request promotes a push on its way.
    pushes: Option<Arc<Pushes>>,
    /// What this gateway adds to `Via`: `1.1 sctp-gateway-<id>`.
    via: HeaderValue,
    /// The received-by part of `via`: a request whose `Via` names it is a loop.
    via_received_by: String,
    /// Request durations and errors by side, for `/metrics`.
    metrics: Arc<RequestMetrics>,
    /// The intercepted port that carries TLS (`intercept.tls_port`): its
    /// flows are tunnelled, never parsed as HTTP.
    tls_port: Option<u16>,
}

#[derive(Debug)]
struct Origin {
    link: OriginLink,
    fail_open: bool,
    response_timeout: std::time::Duration,
}

/// One browser connection: its ends, its stream pins and its direct upstream.
#[derive(Debug)]
struct Flow {
    /// Numbers the connection for the prefetch queue (0 when unused).
    id: u64,
    client: SocketAddr,
    dst: SocketAddr,
    /// Per origin index: the stream this connection is pinned to on that origin.
    pins: Mutex<HashMap<usize, Arc<StreamPin>>>,
    /// hyper serves one request at a time per connection, so this lock is never
    /// contended; it exists because the service future must be `Send`.
    direct: tokio::sync::Mutex<DirectUpstream>,
    /// The browser socket, whose send queue counts toward the backlog of the
    /// streams this connection is pinned to (FEEDBACK).
    socket: Option<Arc<BrowserSocket>>,
    /// Requests handed to the front so far: the next one's number, from 0.
    requests: AtomicU64,
    /// What the framing watch found ahead of hyper ([`framing`]).
    findings: watch::Receiver<Option<Noted>>,
}

/// A request the gateway answers itself.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
    /// Close the connection after answering (the request body was not read).
    close: bool,
    /// Whose failure it is.
    side: Side,
}

impl Flow {
    fn new(
        client: SocketAddr,
        dst: SocketAddr,
        direct: DirectSettings,
        id: u64,
        findings: watch::Receiver<Option<Noted>>,
    ) -> Self {
        Self {
            id,
            client,
            dst,
            pins: Mutex::new(HashMap::new()),
            direct: tokio::sync::Mutex::new(DirectUpstream::new(dst, direct)),
            socket: None,
            requests: AtomicU64::new(0),
            findings,
        }
    }

    /// A flow to the same ends with connections of its own (its own stream
    /// pins and direct connection), reading no browser bytes.
    fn detached(&self, direct: DirectSettings) -> Self {
        Self::new(self.client, self.dst, direct, 0, watch::channel(None).1)
    }

    /// What the framing watch found about request `request`, if anything.
    fn finding(&self, request: u64) -> Option<Finding> {
        self.findings
            .borrow()
            .filter(|noted| noted.request == request)
            .map(|noted| noted.finding)
    }

    /// Resolves when the framing watch finds request `request`'s body too
    /// large; never otherwise.
    async fn body_too_large(&self, request: u64) {
        let mut findings = self.findings.clone();
        let found = findings
            .wait_for(|noted| {
                noted.is_some_and(|n| {
                    n.request == request && matches!(n.finding, Finding::BodyTooLarge { .. })
                })
            })
            .await
            .is_ok();
        if !found {
            std::future::pending::<()>().await;
        }
    }
}

impl Refusal {
    fn new(side: Side, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            close: false,
            side,
        }
    }

    /// The browser's request cannot be served as sent; its body may be unread,
    /// so the connection closes after the answer.
    fn browser(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            close: true,
            ..Self::new(Side::Browser, status, message)
        }
    }
}

impl Front {
    /// The front for `config`, with one link per `config.origins` entry, in
    /// order, and the cache (opened by the caller; [`Cache::disabled`] for none).
    pub fn new(config: &GatewayConfig, links: Vec<OriginLink>, cache: Cache) -> Self {
        Self::with_pushes(config, links, cache, None)
    }

    /// As [`new`](Self::new), with the push taker whose [`Pushes::link`]
    /// the links were spawned with (`None`: no page invites pushes).
    pub fn with_pushes(
        config: &GatewayConfig,
        links: Vec<OriginLink>,
        cache: Cache,
        pushes: Option<Arc<Pushes>>,
    ) -> Self {
        let origins = config
            .origins
            .iter()
            .zip(links)
            .map(|(entry, link)| Origin {
                link,
                fail_open: entry.fail_open,
                response_timeout: entry.response_timeout,
            })
            .collect();
        let via_received_by = format!("{VIA_PSEUDONYM}-{:08x}", rand::random::<u32>());
        Self {
            http: config.http.clone(),
            routes: RouteTable::new(config),
            verifier: HostVerifier::new(HOST_LOOKUP_TIMEOUT),
            origins,
            direct: DirectSettings {
                mark: config.intercept.upstream_mark,
                connect_timeout: config.direct.connect_timeout,
                response_timeout: config.direct.response_timeout,
            },
            prefetcher: (config.prefetch.enabled_for_origins || config.prefetch.enabled_for_direct)
                .then(|| Arc::new(Prefetcher::new(&config.prefetch, cache.clone()))),
            cache,
            pushes,
            via: via_value(&via_received_by),
            via_received_by,
            metrics: Arc::new(RequestMetrics::default()),
            tls_port: config.intercept.tls_port,
        }
    }

    /// One intercepted TLS connection: a tunnel to the origin its verified
    /// server name maps to, else the TCP fallback (`tls` module docs).
    async fn serve_https(&self, flow: Intercepted) {
        let Intercepted {
            mut stream,
            client,
            original_dst: dst,
        } = flow;
        let (peeked, first) = tls::peek_client_hello(&mut stream, self.http.header_timeout).await;
        let first = first.freeze();
        let target = match &peeked {
            tls::Peeked::ServerName(name) => {
                let check = self.verifier.check(name, dst.port(), dst).await;
                self.routes.decide(dst.ip(), &check)
            }
            _ => crate::route::Decision {
                target: Target::Direct,
                cacheable: false,
                reason: "no-server-name",
            },
        };
        let outcome = match (target.target, &peeked) {
            (Target::Origin(i), tls::Peeked::ServerName(name)) => {
                let origin = &self.origins[i];
                let pin = origin.link.pin();
                match origin.link.open_tunnel(&pin, dst, name).await {
                    Ok(tunnel) => Some(tls::relay(&mut stream, tunnel, first.clone()).await),
                    Err(e) if origin.fail_open => {
                        tracing::info!(%client, %dst, sni = %name, "origin unavailable ({e}); passing through");
                        None
                    }
                    Err(e) => {
                        tracing::info!(%client, %dst, sni = %name, "origin unavailable ({e}); closing");
                        tls::reset(&stream);
                        return;
                    }
                }
            }
            _ => None,
        };
        tracing::info!(%client, %dst, ?peeked, route = target.reason, ?outcome, "https");
        if matches!(outcome, None | Some(tls::TunnelOutcome::RefusedEarly(_)))
            && let Err(e) = tls::pass_through(&mut stream, dst, &first, self.direct).await
        {
            tracing::debug!(%client, %dst, "https pass-through ended: {e}");
        }
    }

    /// Request durations and errors by side (for
    /// [`admin::serve_with`](crate::admin::serve_with), through
    /// [`RequestMetrics::collector`]).
    pub fn metrics(&self) -> &Arc<RequestMetrics> {
        &self.metrics
    }

    /// The prefetch queue, if on.
    pub fn prefetcher(&self) -> Option<&Arc<Prefetcher>> {
        self.prefetcher.as_ref()
    }

    /// The push taker, if push is on.
    pub fn pushes(&self) -> Option<&Arc<Pushes>> {
        self.pushes.as_ref()
    }

    /// The cache this front uses.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Serves one intercepted connection until the browser closes it, a time-out
    /// ends it, or `shutdown` turns true (then the request in progress finishes
    /// and the connection closes).
    pub async fn serve(self: Arc<Self>, flow: Intercepted, mut shutdown: watch::Receiver<bool>) {
        if self.tls_port == Some(flow.original_dst.port()) {
            tokio::select! {
                () = self.serve_https(flow) => {}
                () = stopped(&mut shutdown) => {}
            }
            return;
        }
        let tally = self.metrics.client_tally(flow.client.ip());
        let CountedFlow {
            stream,
            socket,
            client,
            original_dst,
        } = flow.into_counted(tally);
        let id = self.prefetcher.as_ref().map_or(0, |p| p.connection_id());
        let framing = RequestFraming::new(
            self.http.max_header_bytes,
            self.http.max_header_fields,
            self.http.max_body_bytes,
        );
        let (stream, findings) = FramedStream::new(stream, framing);
        let mut state = Flow::new(client, original_dst, self.direct, id, findings);
        state.socket = Some(socket);
        let state = Arc::new(state);
        let front = Arc::clone(&self);
        let service = service_fn(move |request| {
            let front = Arc::clone(&front);
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(front.handle(&state, request).await) }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.http.header_timeout)
            .max_header_size(self.http.max_header_bytes)
            .keep_alive(true);
        if self.http.max_header_fields != DEFAULT_MAX_HEADER_FIELDS {
            // Moves hyper's header buffer to the heap: only when asked.
            builder.max_headers(self.http.max_header_fields);
        }
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = stopped(&mut shutdown) => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(e) = result {
            if e.is_parse() {
                // hyper answered a malformed or oversized head itself (400, 431).
                self.metrics.error(Side::Browser);
            }
            tracing::debug!(%client, dst = %original_dst, error = %e, "browser connection ended");
        }
        if let Some(prefetcher) = &self.prefetcher {
            prefetcher.connection_closed(id);
        }
    }

    async fn handle(
        self: &Arc<Self>,
        flow: &Arc<Flow>,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let started = Instant::now();
        let method = request.method().clone();
        let target = request.uri().clone();
        let (response, route, cache) = match self.forward(flow, request).await {
            Ok(answer) => answer,
            Err(refusal) => {
                self.metrics.error(refusal.side);
                (refusal_response(&refusal), "refused", "-")
            }
        };
        let elapsed = started.elapsed();
        self.metrics.observe(route, cache, elapsed);
        tracing::info!(
            target: "gateway::access",
            client = %flow.client,
            dst = %flow.dst,
            %method,
            %target,
            status = response.status().as_u16(),
            route,
            cache,
            ms = elapsed.as_millis() as u64,
        );
        response
    }

    /// Checks, routes and forwards one request (through the cache where
    /// allowed). Returns the response, the route taken and the cache's part,
    /// for the access log.
    async fn forward(
        self: &Arc<Self>,
        flow: &Arc<Flow>,
        request: Request<Incoming>,
    ) -> Result<(Response<Body>, &'static str, &'static str), Refusal> {
        let number = flow.requests.fetch_add(1, Ordering::Relaxed);
        let (parts, body) = request.into_parts();
        if let Some(Finding::UnsupportedVersion { major }) = flow.finding(number) {
            // RFC 9112, section 2.3 and RFC 9110, section 15.6.6.
            return Err(Refusal::browser(
                StatusCode::HTTP_VERSION_NOT_SUPPORTED,
                format!("HTTP/{major} is not served here; HTTP/1.1 is"),
            ));
        }
        let Checked {
            host_value,
            host,
            port,
            target,
        } = head::check(
            &parts,
            flow.dst,
            self.http.max_uri_bytes,
            &self.via_received_by,
        )
        .map_err(|e| Refusal::browser(e.status(), e.to_string()))?;
        let check = self.verifier.check(&host, port, flow.dst).await;
        let decision = self.routes.decide(flow.dst.ip(), &check);
        if check == HostCheck::Mismatch {
            tracing::debug!(client = %flow.client, dst = %flow.dst, host, "Host does not match the destination: direct, uncached");
        }
        let body = self.read_body(flow, number, &parts.headers, body).await?;
        let mut headers = end_to_end(parts.headers);
        if !body.is_empty() {
            // Read whole, a chunked body included: its length is what travels
            // on, and what tells the cache there is a body it does not key.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let forwarded = UpstreamRequest {
            method: parts.method,
            path: target,
            host: host_value,
            headers,
            body,
            urgency: DEMAND_URGENCY,
            class: gateway_protocol::RequestClass::Demand,
            promote: None,
        };
        let upstream = FlowUpstream {
            front: Arc::clone(self),
            flow: Arc::clone(flow),
            decision,
        };
        let (mut response, route, cache) = if decision.cacheable && self.cache.is_enabled() {
            let watched = self.prefetch_demand(decision, &host, port, &forwarded);
            let pushed = match &self.pushes {
                Some(pushes) if forwarded.method == Method::GET => {
                    pushes.on_demand(&host, port, &forwarded.path)
                }
                _ => None,
            };
            let served = self
                .cache
                .serve(&host, port, &forwarded, Asker::Browser, &upstream)
                .await?;
            if let (Some(pushes), Some(pushed)) = (&self.pushes, pushed) {
                pushes.served(pushed, served.hit);
            }
            let response = match (watched, &self.prefetcher) {
                (Some(watched), Some(prefetcher)) => prefetcher.watch(
                    watched,
                    flow.id,
                    &forwarded.headers,
                    &upstream,
                    served.response,
                ),
                _ => served.response,
            };
            (response, served.route, served.cache)
        } else {
            let answered = upstream.send(forwarded).await?;
            (answered.response, answered.route, "-")
        };
        response.headers_mut().append(header::VIA, self.via.clone());
        Ok((response, route, cache))
    }

    /// Sends the request where `decision` says, failing open where allowed.
    async fn dispatch(
        &self,
        flow: &Flow,
        decision: Decision,
        request: UpstreamRequest,
    ) -> Result<Answered, UpstreamError> {
        let Target::Origin(index) = decision.target else {
            return self.direct(flow, request).await.map(|response| Answered {
                response,
                route: decision.reason,
            });
        };
        let origin = &self.origins[index];
        if !origin.link.is_up() {
            if origin.fail_open {
                return self.direct(flow, request).await.map(fail_open);
            }
            return Err(UpstreamError::origin(
                StatusCode::BAD_GATEWAY,
                format!("origin {} is unreachable", origin.link.name()),
            ));
        }
        let pin = flow.pin(index, &origin.link);
        let budget = match &self.pushes {
            Some(pushes)
                if request.class == gateway_protocol::RequestClass::Demand
                    && origin.link.takes_pushes() =>
            {
                match crate::route::parse_host(request.host.as_bytes()) {
                    Ok((host, port)) => pushes.budget_for(&request, &host, port).await,
                    Err(_) => None,
                }
            }
            _ => None,
        };
        let origin_request = OriginRequest {
            head: http_semantics::write_request_head(
                &request.method,
                &request.path,
                &request.host,
                &request.headers,
                request.body.len(),
                &self.via,
            ),
            body: request.body.clone(),
            urgency: request.urgency,
            class: request.class,
            priority: request.promote.clone(),
        };
        // Dropping the request future on time-out abandons the request cleanly
        // (RESET CANCELLED on its stream).
        let answer = tokio::time::timeout(
            origin.response_timeout,
            origin.link.request_page(&pin, origin_request, budget),
        )
        .await
        .map_err(|_| {
            UpstreamError::origin(
                StatusCode::GATEWAY_TIMEOUT,
                format!("origin {} did not answer in time", origin.link.name()),
            )
        })?;
        match answer {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                parts.headers = end_to_end(parts.headers);
                let body = body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync();
                Ok(Answered {
                    response: Response::from_parts(parts, body),
                    route: decision.reason,
                })
            }
            Err(e) if e.nothing_sent() && origin.fail_open && is_idempotent(&request.method) => {
                tracing::debug!(origin = origin.link.name(), error = %e, "origin request failed before sending: direct");
                self.direct(flow, request).await.map(fail_open)
            }
            Err(e) => {
                // A request the protocol cannot carry never left the gateway.
                let side = match e {
                    LinkError::Unsendable(_) => Side::Internal,
                    _ => Side::Origin,
                };
                Err(UpstreamError::new(
                    side,
                    e.gateway_status(),
                    format!("origin {}: {e}", origin.link.name()),
                ))
            }
        }
    }

    /// Forwards over plain TCP to the original destination.
    async fn direct(
        &self,
        flow: &Flow,
        request: UpstreamRequest,
    ) -> Result<Response<Body>, UpstreamError> {
        let mut builder = Request::builder()
            .method(request.method)
            .uri(request.path)
            .version(Version::HTTP_11);
        if let Some(headers) = builder.headers_mut() {
            *headers = request.headers;
            headers.insert(header::HOST, request.host);
            headers.append(header::VIA, self.via.clone());
            if !request.body.is_empty() {
                headers.insert(
                    header::CONTENT_LENGTH,
                    HeaderValue::from(request.body.len()),
                );
            }
        }
        let upstream_request = builder.body(Full::new(request.body)).map_err(|e| {
            UpstreamError::new(Side::Internal, StatusCode::BAD_REQUEST, e.to_string())
        })?;
        let response = flow
            .direct
            .lock()
            .await
            .send(upstream_request)
            .await
            .map_err(|e| match e {
                DirectError::ResponseTimeout { .. } => {
                    UpstreamError::origin(StatusCode::GATEWAY_TIMEOUT, e.to_string())
                }
                // The browser addressed this host itself.
                DirectError::OwnAddress { .. } => {
                    UpstreamError::new(Side::Browser, StatusCode::LOOP_DETECTED, e.to_string())
                }
                _ => UpstreamError::origin(StatusCode::BAD_GATEWAY, e.to_string()),
            })?;
        let (mut parts, body) = response.into_parts();
        parts.headers = end_to_end(parts.headers);
        let body = body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync();
        Ok(Response::from_parts(parts, body))
    }

    /// A browser GET on a cacheable route, for the prefetch queue: what it
    /// claims before the request goes (the request itself is kept by the
    /// caller for a page the answer turns out to open).
    fn prefetch_demand(
        &self,
        decision: Decision,
        host: &str,
        port: u16,
        request: &UpstreamRequest,
    ) -> Option<Watched> {
        let prefetcher = self.prefetcher.as_ref()?;
        if request.method != Method::GET {
            return None;
        }
        let route = match decision.target {
            Target::Origin(_) => RouteKind::Origin,
            Target::Direct => RouteKind::Direct,
        };
        prefetcher.on_demand(host, port, &request.path, route)
    }

    /// Reads request `number`'s whole body, bounded in size (413, also as soon
    /// as a chunk-size line declares too much) and time (408).
    async fn read_body(
        &self,
        flow: &Flow,
        number: u64,
        headers: &HeaderMap,
        body: Incoming,
    ) -> Result<Bytes, Refusal> {
        let max = self.http.max_body_bytes;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > max) {
            return Err(Refusal::browser(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            ));
        }
        if hyper::body::Body::is_end_stream(&body) {
            // No Content-Length and no Transfer-Encoding: no body, no timer.
            return Ok(Bytes::new());
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        let collect = Limited::new(body, limit).collect();
        let declared_too_large = flow.body_too_large(number);
        let collected = tokio::select! {
            collected = tokio::time::timeout(self.http.body_timeout, collect) => collected,
            () = declared_too_large => {
                return Err(Refusal::browser(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large (declared by its chunk sizes)",
                ));
            }
        };
        match collected {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) if e.is::<LengthLimitError>() => Err(Refusal::browser(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            )),
            Ok(Err(e)) => Err(Refusal::browser(
                StatusCode::BAD_REQUEST,
                format!("request body: {e}"),
            )),
            Err(_) => Err(Refusal::browser(
                StatusCode::REQUEST_TIMEOUT,
                "request body too slow",
            )),
        }
    }
}

impl Flow {
    /// This connection's stream on origin `index`, pinned on first use.
    fn pin(&self, index: usize, link: &OriginLink) -> Arc<StreamPin> {
        let mut pins = crate::sync::lock(&self.pins);
        Arc::clone(pins.entry(index).or_insert_with(|| {
            let pin = link.pin();
            if let Some(socket) = &self.socket {
                pin.watch_socket(socket);
            }
            Arc::new(pin)
        }))
    }
}

/// A direct answer in place of an origin's (`origin.fail_open`).
fn fail_open(response: Response<Body>) -> Answered {
    Answered {
        response,
        route: "fail-open",
    }
}

/// The front's network for one request: the route `decision` picked, over
/// `flow`'s stream pins and direct connection.
#[derive(Debug)]
struct FlowUpstream {
    front: Arc<Front>,
    flow: Arc<Flow>,
    decision: Decision,
}

impl Upstream for FlowUpstream {
    fn send(&self, request: UpstreamRequest) -> UpstreamFuture<'_> {
        Box::pin(self.front.dispatch(&self.flow, self.decision, request))
    }

    fn detach(&self) -> Arc<dyn Upstream> {
        Arc::new(FlowUpstream {
            front: Arc::clone(&self.front),
            flow: Arc::new(self.flow.detached(self.front.direct)),
            decision: self.decision,
        })
    }
}

impl From<UpstreamError> for Refusal {
    fn from(error: UpstreamError) -> Self {
        Self::new(error.side, error.status, error.message)
    }
}

impl From<ServeError> for Refusal {
    fn from(error: ServeError) -> Self {
        match error {
            ServeError::Upstream(error) => error.into(),
            // Only a prefetch is declined.
            ServeError::Declined(why) => {
                Self::new(Side::Internal, StatusCode::INTERNAL_SERVER_ERROR, why)
            }
        }
    }
}

/// RFC 9110, section 9.2.2: safe to send twice.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// The gateway's own answer: a short plain-text body.
fn refusal_response(refusal: &Refusal) -> Response<Body> {
    let text = format!(
        "{} {}: {}\n",
        refusal.status.as_u16(),
        refusal.status.canonical_reason().unwrap_or(""),
        refusal.message
    );
    let mut response = Response::new(
        Full::new(Bytes::from(text))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = refusal.status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if refusal.close {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
