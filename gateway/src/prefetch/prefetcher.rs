//! The prefetch queue's I/O layer: HTML responses are scanned as they pass to
//! the browser, what they need is fetched through the cache at prefetch class,
//! and browser requests join those fetches (docs/prefetch.md).
//!
//! ```text
//!  HTML body ──> browser
//!      └─copy─> page task: HtmlScanner ──> PrefetchQueue (I/O-free, in Prefetcher)
//!                                               │ Action::Start / Promote / Cancel
//!  drive task <─────────────────────────────────┘
//!      └─> one task per prefetch: Cache::serve (Asker::Prefetch) ─> Upstream (class prefetch)
//!  browser GET ─> on_demand ─> Cache::serve joins the prefetch's flight
//! ```
//!
//! It needs two things from outside: the [`Cache`] (its one entry point,
//! [`Cache::serve`], and [`Cache::is_fresh`]) and, per page, an [`Upstream`]
//! for the page's route, detached from the browser's connection. The front
//! hands both in; tests hand in a fake upstream and build no front.
//!
//! Only subresources on the page's own origin (scheme, host, port) are
//! prefetched: the gateway knows where that origin is (the page's original
//! destination); others would need a DNS answer the browser has not asked for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use gateway_protocol::RequestClass;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::{Notify, mpsc, watch};
use url::Url;

use super::queue::{ConnectionId, Scan};
use super::{
    Action, Demand, ExtractConfig, FetchId, HtmlScanner, PageId, PrefetchConfig, PrefetchQueue,
    PrefetchStats, RecentPage, Resource, extract_css, is_css, is_html, keep_prefetched,
    prefetch_request_headers,
};
use crate::body::{Body, BoxError};
use crate::cache::{Asker, Cache, CacheRequest, Purge, ServeError};
use crate::sync::stopped;
use crate::upstream::{Upstream, UpstreamError, UpstreamRequest};

/// Chunks of an HTML body waiting for the page task; beyond this the page is
/// scanned no further (the browser is never held back).
const PAGE_CHUNKS: usize = 256;

/// How a request's route reaches its site, as `[prefetch]` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// An SCTP origin (`prefetch.enabled_for_origins`).
    Origin,
    /// Plain TCP to the original destination (`prefetch.enabled_for_direct`).
    Direct,
}

/// What a prefetch needs from the page that found it.
#[derive(Debug)]
struct PageContext {
    /// The page request's end-to-end fields (User-Agent, Accept-Language...).
    headers: HeaderMap,
    document: Url,
    /// The page's route over connections of its own: prefetches get their
    /// own stream pin and upstream connection, not the browser's.
    upstream: Arc<dyn Upstream>,
}

/// What [`Prefetcher::on_demand`] learned of a browser GET, for
/// [`Prefetcher::watch`] once the answer is there.
#[derive(Debug)]
pub struct Watched {
    /// The request's URL: the page's, if the answer is one.
    document: Url,
    /// The queued prefetch the request claimed, and how to scan its body.
    claimed: Option<(FetchId, Scan)>,
}

/// A prefetch in progress.
#[derive(Debug)]
struct Running {
    task: tokio::task::AbortHandle,
    promote: watch::Sender<(u8, RequestClass)>,
}

#[derive(Debug)]
struct State {
    queue: PrefetchQueue,
    pages: HashMap<PageId, Arc<PageContext>>,
    running: HashMap<FetchId, Running>,
}

/// The queue and what the I/O layer keeps beside it.
#[derive(Debug)]
pub struct Prefetcher {
    config: PrefetchConfig,
    /// The extraction's part of `config`.
    extract: ExtractConfig,
    cache: Cache,
    state: Mutex<State>,
    /// The driver waits on this for new actions.
    wake: Notify,
    next_connection: AtomicU64,
}

impl Prefetcher {
    /// A prefetcher with `config`'s limits that fetches through `cache`.
    pub fn new(config: &PrefetchConfig, cache: Cache) -> Self {
        Self {
            config: config.clone(),
            extract: config.extract_config(),
            cache,
            state: Mutex::new(State {
                queue: PrefetchQueue::new(config),
                pages: HashMap::new(),
                running: HashMap::new(),
            }),
            wake: Notify::new(),
            next_connection: AtomicU64::new(1),
        }
    }

    /// Counters since start.
    pub fn stats(&self) -> PrefetchStats {
        self.lock().queue.stats()
    }

    /// The last pages scanned, newest first, with what became of their
    /// prefetches (`GET /pages/recent`).
    pub fn recent_pages(&self) -> Vec<RecentPage> {
        self.lock().queue.recent_pages(Instant::now())
    }

    /// The cache was purged: what was fetched of the URLs `purge` removed is
    /// no longer a reason not to prefetch them.
    pub fn forget_purged(&self, purge: &Purge) -> usize {
        self.lock().queue.forget_urls(|url| purge.matches(url))
    }

    /// Whether pages reached over this route are scanned.
    fn enabled_for(&self, route: RouteKind) -> bool {
        match route {
            RouteKind::Origin => self.config.enabled_for_origins,
            RouteKind::Direct => self.config.enabled_for_direct,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Runs `f` on the queue, then wakes the driver for what it queued.
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.lock());
        self.wake.notify_one();
        r
    }

    /// A number for a new browser connection (the queue keeps a page's
    /// connection, to abandon its pages when it closes).
    pub fn connection_id(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// Browser connection `connection` closed.
    pub fn connection_closed(&self, connection: u64) {
        self.with(|s| {
            s.queue
                .connection_closed(Instant::now(), ConnectionId(connection));
        });
    }

    /// A browser GET on a cacheable route for `host`, `port` and `path`:
    /// tells the queue, so that a prefetch in flight is promoted (the request
    /// then joins it through the cache) and a queued one is claimed. Returns
    /// what [`Prefetcher::watch`] needs once the answer is there; `None` where
    /// pages over `route` are not scanned.
    pub fn on_demand(
        &self,
        host: &str,
        port: u16,
        path: &str,
        route: RouteKind,
    ) -> Option<Watched> {
        if !self.enabled_for(route) {
            return None;
        }
        let document = document_url(host, port, path)?;
        let claimed = match self.with(|s| s.queue.on_demand(Instant::now(), &document)) {
            Demand::Claimed {
                fetch,
                scan: Some(scan),
            } => Some((fetch, scan)),
            Demand::Claimed { .. } | Demand::Alone | Demand::Join(_) | Demand::Prefetched(_) => {
                None
            }
        };
        Some(Watched { document, claimed })
    }

    /// The browser's response to a GET [`Prefetcher::on_demand`] watched: an
    /// HTML page opens a page whose body is scanned as it passes (its
    /// prefetches go through `upstream.detach()`, with `request_headers`'
    /// end-to-end fields); a claimed stylesheet or frame is scanned for the
    /// page that wanted it. Everything else passes untouched.
    pub fn watch(
        self: &Arc<Self>,
        watched: Watched,
        connection: u64,
        request_headers: &HeaderMap,
        upstream: &dyn Upstream,
        response: Response<Body>,
    ) -> Response<Body> {
        let Watched { document, claimed } = watched;
        if !response.status().is_success() {
            if let Some((fetch, _)) = claimed {
                self.with(|s| s.queue.handle_failed(Instant::now(), fetch));
            }
            return response;
        }
        let content_type = content_type(response.headers());
        if let Some((fetch, scan)) = claimed {
            let (tx, rx) = mpsc::channel(PAGE_CHUNKS);
            tokio::spawn(scan_fetch(
                Arc::clone(self),
                fetch,
                scan,
                document,
                content_type,
                rx,
            ));
            return tee(response, tx, None);
        }
        if response.status() != http::StatusCode::OK || !is_html(content_type.as_deref()) {
            return response;
        }
        let context = Arc::new(PageContext {
            headers: request_headers.clone(),
            document: document.clone(),
            upstream: upstream.detach(),
        });
        let page = self.with(|s| {
            let page =
                s.queue
                    .open_page(Instant::now(), document.clone(), ConnectionId(connection));
            s.pages.insert(page, context);
            page
        });
        let scanner = HtmlScanner::new(document, content_type.as_deref(), &self.extract);
        let (tx, rx) = mpsc::channel(PAGE_CHUNKS);
        tokio::spawn(scan_page(Arc::clone(self), page, scanner, rx));
        tee(response, tx, Some((Arc::clone(self), page)))
    }

    /// Runs the queue's actions until `shutdown`: starts, promotes and
    /// cancels prefetches, and expires pages.
    pub async fn drive(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let (actions, deadline) = {
                let mut state = self.lock();
                let now = Instant::now();
                if state.queue.poll_timeout().is_some_and(|t| t <= now) {
                    state.queue.handle_timeout(now);
                }
                let mut actions = Vec::new();
                while let Some(action) = state.queue.poll_action() {
                    actions.push(action);
                }
                let live: Vec<PageId> = state.pages.keys().copied().collect();
                for page in live {
                    if state.queue.timeline(page).is_none() {
                        state.pages.remove(&page);
                    }
                }
                (actions, state.queue.poll_timeout())
            };
            for action in actions {
                self.run_action(action);
            }
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.wake.notified() => {}
                () = sleep => {}
                () = stopped(&mut shutdown) => return,
            }
        }
    }

    fn run_action(self: &Arc<Self>, action: Action) {
        match action {
            Action::Start {
                fetch,
                page,
                resource,
                urgency,
                scan,
            } => {
                let context = self.lock().pages.get(&page).cloned();
                let Some(context) = context else {
                    self.with(|s| s.queue.handle_failed(Instant::now(), fetch));
                    return;
                };
                let (promote, promoted) = watch::channel((urgency.level(), RequestClass::Prefetch));
                let task = tokio::spawn(
                    Arc::clone(self).prefetch(fetch, context, resource, promoted, scan),
                );
                self.lock().running.insert(
                    fetch,
                    Running {
                        task: task.abort_handle(),
                        promote,
                    },
                );
            }
            Action::Promote { fetch, urgency } => {
                if let Some(running) = self.lock().running.get(&fetch) {
                    running
                        .promote
                        .send_replace((urgency.level(), RequestClass::Demand));
                }
                tracing::debug!(%fetch, urgency = urgency.level(), "prefetch promoted");
            }
            Action::Cancel { fetch } => {
                if let Some(running) = self.lock().running.remove(&fetch) {
                    running.task.abort();
                }
            }
        }
    }

    /// One prefetch: through the cache (a fresh entry ends it; a miss fills
    /// it at prefetch class), reporting progress to the queue.
    async fn prefetch(
        self: Arc<Self>,
        fetch: FetchId,
        page: Arc<PageContext>,
        resource: Resource,
        promoted: watch::Receiver<(u8, RequestClass)>,
        scan: Option<Scan>,
    ) {
        let outcome = self
            .prefetch_inner(fetch, &page, &resource, promoted, scan)
            .await;
        self.with(|s| {
            s.running.remove(&fetch);
            let now = Instant::now();
            match outcome {
                Outcome::Fresh => s.queue.handle_fresh(now, fetch),
                Outcome::Complete => s.queue.handle_complete(now, fetch),
                Outcome::Failed(why) => {
                    tracing::debug!(%fetch, url = %resource.url, why, "prefetch failed");
                    s.queue.handle_failed(now, fetch);
                }
            }
        });
    }

    async fn prefetch_inner(
        self: &Arc<Self>,
        fetch: FetchId,
        page: &PageContext,
        resource: &Resource,
        promoted: watch::Receiver<(u8, RequestClass)>,
        scan: Option<Scan>,
    ) -> Outcome {
        let url = &resource.url;
        let response = match self
            .prefetch_response(page, resource, promoted, scan.is_some())
            .await
        {
            Ok(response) => response,
            Err(outcome) => return outcome,
        };
        let content_type = content_type(response.headers());
        let length = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        self.with(|s| s.queue.handle_head(Instant::now(), fetch, length));
        let mut body = response.into_body();
        let mut kept = Vec::new();
        let keep = scan.is_some();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Outcome::Failed("body");
            };
            if let Ok(data) = frame.into_data() {
                self.with(|s| {
                    s.queue
                        .handle_data(Instant::now(), fetch, data.len() as u64)
                });
                if keep {
                    kept.push(data);
                }
            }
        }
        if let Some(scan) = scan {
            let body: Vec<u8> = kept.concat();
            let found = scan_body(scan, url, content_type.as_deref(), &body, &self.extract);
            report_discovered(self, fetch, url, found).await;
        }
        Outcome::Complete
    }

    /// The response a prefetch of `resource` reads: the cache's copy, or the
    /// origin's through a cache fill. `Err` is how the prefetch ends without
    /// one, `Fresh` when the cache holds it and no scan wants its body.
    async fn prefetch_response(
        &self,
        page: &PageContext,
        resource: &Resource,
        promoted: watch::Receiver<(u8, RequestClass)>,
        wants_body: bool,
    ) -> Result<Response<Body>, Outcome> {
        let url = &resource.url;
        let Some((host, port, path)) = cache_target(url) else {
            return Err(Outcome::Failed("no host"));
        };
        // The extractor drops URLs with credentials: the authority is host[:port].
        let Ok(host_value) = HeaderValue::from_str(url.authority()) else {
            return Err(Outcome::Failed("host"));
        };
        let (urgency, class) = *promoted.borrow();
        let request = UpstreamRequest {
            method: Method::GET,
            path: path.to_owned(),
            host: host_value,
            headers: prefetch_request_headers(&page.headers, &page.document, resource),
            body: Bytes::new(),
            urgency,
            class,
            promote: Some(promoted),
        };
        let asker = Asker::Prefetch {
            keep: |status, headers| keep_prefetched(status, headers).is_ok(),
        };
        match self
            .cache
            .serve(&host, port, &request, asker, page.upstream.as_ref())
            .await
        {
            Ok(served) if served.hit && !wants_body => Err(Outcome::Fresh),
            Ok(served) => Ok(served.response),
            Err(ServeError::Declined(why)) => Err(Outcome::Failed(why)),
            Err(ServeError::Upstream(error)) => Err(Outcome::Failed(upstream_reason(&error))),
        }
    }
}

/// The resources a prefetched stylesheet or page names, from its whole body.
fn scan_body(
    scan: Scan,
    url: &Url,
    content_type: Option<&str>,
    body: &[u8],
    config: &ExtractConfig,
) -> Vec<Resource> {
    match scan {
        Scan::Css => extract_css(url, content_type, None, body, config).into_vec(),
        Scan::Html => {
            let mut scanner = HtmlScanner::new(url.clone(), content_type, config);
            scanner.handle_chunk(body);
            scanner.handle_end();
            std::iter::from_fn(|| scanner.poll_resource()).collect()
        }
    }
}

/// How a prefetch ended.
enum Outcome {
    Fresh,
    Complete,
    Failed(&'static str),
}

fn upstream_reason(error: &UpstreamError) -> &'static str {
    if error.status.is_server_error() {
        "upstream error"
    } else {
        "refused"
    }
}

/// `http://host[:port]/path` of a request, as the scanner resolves against.
fn document_url(host: &str, port: u16, path: &str) -> Option<Url> {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Url::parse(&format!("http://{host}:{port}{path}")).ok()
}

/// Whether `resource` is on `document`'s origin.
fn same_origin(document: &Url, resource: &Url) -> bool {
    document.scheme() == resource.scheme()
        && document.host_str() == resource.host_str()
        && document.port_or_known_default() == resource.port_or_known_default()
}

/// A URL as the cache keys it: host (lower-case, IPv6 without brackets),
/// port, origin-form target.
fn cache_target(url: &Url) -> Option<(String, u16, &str)> {
    let host = url
        .host_str()?
        .trim_matches(['[', ']'])
        .to_ascii_lowercase();
    let port = url.port_or_known_default()?;
    Some((
        host,
        port,
        &url[url::Position::BeforePath..url::Position::AfterQuery],
    ))
}

/// `Content-Type`, if present and readable as a string.
fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Whether the cache holds `url` fresh for a request with `headers`.
async fn fresh_in_cache(cache: &Cache, url: &Url, headers: &HeaderMap) -> bool {
    let Some((host, port, path)) = cache_target(url) else {
        return false;
    };
    cache
        .is_fresh(&CacheRequest {
            method: &Method::GET,
            host: &host,
            port,
            target: path,
            headers,
        })
        .await
}

/// Scans an HTML page's body as copies of its chunks arrive, feeding the
/// queue. A body the browser did not receive whole abandons the page.
async fn scan_page(
    prefetcher: Arc<Prefetcher>,
    page: PageId,
    mut scanner: HtmlScanner,
    mut chunks: mpsc::Receiver<Chunk>,
) {
    let document = prefetcher
        .lock()
        .pages
        .get(&page)
        .map(|p| (p.document.clone(), p.headers.clone()));
    let Some((document, headers)) = document else {
        return;
    };
    let complete = loop {
        match chunks.recv().await {
            Some(Chunk::Data(data)) => scanner.handle_chunk(&data),
            Some(Chunk::End) => {
                scanner.handle_end();
                break true;
            }
            None => break false,
        }
        feed(&prefetcher, page, &document, &headers, &mut scanner).await;
    };
    feed(&prefetcher, page, &document, &headers, &mut scanner).await;
    prefetcher.with(|s| {
        let now = Instant::now();
        if complete {
            s.queue.handle_html_end(now, page);
        } else {
            s.queue.page_abandoned(now, page);
        }
    });
}

/// Hands what the scanner found so far to the queue.
async fn feed(
    prefetcher: &Arc<Prefetcher>,
    page: PageId,
    document: &Url,
    headers: &HeaderMap,
    scanner: &mut HtmlScanner,
) {
    while let Some(resource) = scanner.poll_resource() {
        if !same_origin(document, &resource.url) {
            continue;
        }
        let fresh = fresh_in_cache(&prefetcher.cache, &resource.url, headers).await;
        prefetcher.with(|s| {
            s.queue
                .handle_resource(Instant::now(), page, resource, fresh)
        });
    }
}

/// Scans a claimed stylesheet or frame the browser fetched itself.
async fn scan_fetch(
    prefetcher: Arc<Prefetcher>,
    fetch: FetchId,
    scan: Scan,
    url: Url,
    content_type: Option<String>,
    mut chunks: mpsc::Receiver<Chunk>,
) {
    let mut body = Vec::new();
    let complete = loop {
        match chunks.recv().await {
            Some(Chunk::Data(data)) => body.extend_from_slice(&data),
            Some(Chunk::End) => break true,
            None => break false,
        }
    };
    if !complete {
        prefetcher.with(|s| s.queue.handle_failed(Instant::now(), fetch));
        return;
    }
    let found: Vec<Resource> = match scan {
        Scan::Css if is_css(content_type.as_deref()) || content_type.is_none() => extract_css(
            &url,
            content_type.as_deref(),
            None,
            &body,
            &prefetcher.extract,
        )
        .into_vec(),
        Scan::Css => Vec::new(),
        Scan::Html => {
            let mut scanner =
                HtmlScanner::new(url.clone(), content_type.as_deref(), &prefetcher.extract);
            scanner.handle_chunk(&body);
            scanner.handle_end();
            std::iter::from_fn(|| scanner.poll_resource()).collect()
        }
    };
    report_discovered(&prefetcher, fetch, &url, found).await;
    prefetcher.with(|s| s.queue.handle_complete(Instant::now(), fetch));
}

/// What a scanned stylesheet or frame references, to the pages that want it.
async fn report_discovered(
    prefetcher: &Arc<Prefetcher>,
    fetch: FetchId,
    source: &Url,
    found: Vec<Resource>,
) {
    let headers = HeaderMap::new();
    for resource in found {
        if !same_origin(source, &resource.url) {
            continue;
        }
        let fresh = fresh_in_cache(&prefetcher.cache, &resource.url, &headers).await;
        prefetcher.with(|s| {
            s.queue
                .handle_discovered(Instant::now(), fetch, resource, fresh)
        });
    }
}

/// A copy of a body on its way to a scanner.
enum Chunk {
    Data(Bytes),
    End,
}

/// Passes `response`'s body through unchanged, sending a copy of each chunk
/// (never waiting: a full channel ends the copies) and `End` when the body
/// ended cleanly: its end seen, or its `Content-Length` reached (hyper stops
/// polling a body once it has written that many bytes). Dropping the body
/// before either drops the sender: the scanner sees an abandoned page.
///
/// With `page`, the queue hears of the HTML's end right there, not once the
/// scanner has caught up: a client that closes its connection as soon as it
/// has the page (curl, a crawler) would otherwise abandon it first, and
/// nothing it needs would be prefetched.
fn tee(
    response: Response<Body>,
    tx: mpsc::Sender<Chunk>,
    page: Option<(Arc<Prefetcher>, PageId)>,
) -> Response<Body> {
    let (parts, body) = response.into_parts();
    let left = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = Tee {
        inner: body,
        tx: Some(tx),
        left,
        page,
    };
    Response::from_parts(parts, body.boxed_unsync())
}

struct Tee {
    inner: Body,
    tx: Option<mpsc::Sender<Chunk>>,
    /// Body bytes still to come, when announced.
    left: Option<u64>,
    /// The page whose HTML this is, told of its end once (see [`tee`]).
    page: Option<(Arc<Prefetcher>, PageId)>,
}

impl Tee {
    /// The body ended cleanly: the scanner gets `End`, the queue hears that
    /// the page's HTML has passed whole.
    fn ended(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Chunk::End);
        }
        if let Some((prefetcher, page)) = self.page.take() {
            prefetcher.with(|s| s.queue.handle_html_end(Instant::now(), page));
        }
    }
}

impl http_body::Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    let sent = self
                        .tx
                        .as_ref()
                        .is_some_and(|tx| tx.try_send(Chunk::Data(data.clone())).is_ok());
                    self.left = self.left.map(|n| n.saturating_sub(data.len() as u64));
                    if self.left == Some(0) {
                        self.ended();
                    } else if !sent && let Some(tx) = self.tx.take() {
                        // The scanner is behind: it keeps what it has.
                        let _ = tx.try_send(Chunk::End);
                    }
                }
            }
            std::task::Poll::Ready(None) => self.ended(),
            std::task::Poll::Ready(Some(Err(_))) => {
                self.tx = None;
                self.page = None;
            }
            std::task::Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    //! The I/O layer without a front: a real cache over a temporary store,
    //! and a fake upstream that records what it was asked.

    use std::time::Duration;

    use http::StatusCode;
    use http_body_util::Full;

    use super::*;
    use crate::cache::store::{Store, StoreLimits};
    use crate::upstream::{Answered, UpstreamFuture};

    /// What the fake origin was asked: path, class, Host.
    type Asked = (String, RequestClass, String);

    #[derive(Debug, Clone)]
    struct FakeUpstream {
        asked: Arc<Mutex<Vec<Asked>>>,
        /// Answer 502 instead of the image.
        down: bool,
    }

    impl FakeUpstream {
        fn new(down: bool) -> Self {
            Self {
                asked: Arc::default(),
                down,
            }
        }

        fn asked(&self) -> Vec<Asked> {
            crate::sync::lock(&self.asked).clone()
        }
    }

    impl Upstream for FakeUpstream {
        fn send(&self, request: UpstreamRequest) -> UpstreamFuture<'_> {
            Box::pin(async move {
                crate::sync::lock(&self.asked).push((
                    request.path.clone(),
                    request.class,
                    request.host.to_str().unwrap_or("").to_owned(),
                ));
                if self.down {
                    return Err(UpstreamError::origin(StatusCode::BAD_GATEWAY, "down"));
                }
                let mut response = full(b"\x89PNG image bytes", "image/png");
                response.headers_mut().insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("max-age=600"),
                );
                Ok(Answered {
                    response,
                    route: "origin",
                })
            })
        }

        fn detach(&self) -> Arc<dyn Upstream> {
            Arc::new(self.clone())
        }
    }

    fn full(body: &'static [u8], content_type: &'static str) -> Response<Body> {
        let mut response = Response::new(
            Full::new(Bytes::from_static(body))
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        response
    }

    fn cache(dir: &tempfile::TempDir) -> Cache {
        let limits = StoreLimits {
            max_bytes: 64 << 20,
            max_object_bytes: 8 << 20,
        };
        let store = Store::open(&dir.path().join("cache.redb"), limits).expect("a store");
        Cache::from_store(store, 1 << 20)
    }

    /// Waits up to five seconds for `done`.
    async fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A browser's page passes through `prefetcher`; returns once its body
    /// has been read whole.
    async fn browse_page(prefetcher: &Arc<Prefetcher>, upstream: &FakeUpstream) {
        let watched = prefetcher
            .on_demand("example.test", 80, "/", RouteKind::Origin)
            .expect("pages over origins are scanned by default");
        let page = full(
            b"<!doctype html><html><body><img src=\"/a.png\"></body></html>",
            "text/html; charset=utf-8",
        );
        let connection = prefetcher.connection_id();
        let passed = prefetcher.watch(watched, connection, &HeaderMap::new(), upstream, page);
        let body = passed.into_body().collect().await.expect("the page's body");
        assert!(body.to_bytes().starts_with(b"<!doctype html>"));
    }

    #[tokio::test]
    async fn a_page_prefetches_its_image_through_the_cache_and_the_browser_then_hits() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = cache(&dir);
        let prefetcher = Arc::new(Prefetcher::new(&PrefetchConfig::default(), cache.clone()));
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(Arc::clone(&prefetcher).drive(stopped));
        let upstream = FakeUpstream::new(false);

        browse_page(&prefetcher, &upstream).await;
        wait_for("the prefetch to complete", || {
            prefetcher.stats().completed == 1
        })
        .await;
        wait_for("the image to be stored", || cache.stats().stored == 1).await;
        assert_eq!(
            upstream.asked(),
            vec![(
                "/a.png".to_owned(),
                RequestClass::Prefetch,
                "example.test".to_owned()
            )]
        );

        // The browser's own request for the image: answered from the cache,
        // nothing more upstream.
        let request = UpstreamRequest {
            method: Method::GET,
            path: "/a.png".to_owned(),
            host: HeaderValue::from_static("example.test"),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            urgency: 3,
            class: RequestClass::Demand,
            promote: None,
        };
        let served = cache
            .serve("example.test", 80, &request, Asker::Browser, &upstream)
            .await
            .expect("served");
        assert!(served.hit, "{} / {}", served.route, served.cache);
        let body = served.response.into_body().collect().await.expect("a body");
        assert_eq!(body.to_bytes(), Bytes::from_static(b"\x89PNG image bytes"));
        assert_eq!(upstream.asked().len(), 1);
        let _ = stop.send(true);
    }

    #[tokio::test]
    async fn an_upstream_failure_fails_the_prefetch_and_stores_nothing() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = cache(&dir);
        let prefetcher = Arc::new(Prefetcher::new(&PrefetchConfig::default(), cache.clone()));
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(Arc::clone(&prefetcher).drive(stopped));
        let upstream = FakeUpstream::new(true);

        browse_page(&prefetcher, &upstream).await;
        wait_for("the prefetch to fail", || prefetcher.stats().failed == 1).await;
        assert_eq!(prefetcher.stats().completed, 0);
        assert_eq!(upstream.asked().len(), 1);
        assert_eq!(cache.stats().stored, 0);
        let _ = stop.send(true);
    }
}
