//! Taking the origins' pushes into the cache (issue 31; docs/protocol.md
//! "PUSH" for the wire, docs/cache.md "Pushes" for the cache's side).
//!
//! ```text
//!  front: a page (navigation GET) going to an origin that takes pushes
//!    └─ budget_for ─► PageBudget: max_per_page, max_bytes_per_page, and the
//!                      held entries: the page's closure (the URLs pushed for
//!                      it before) as the store holds them (validators, FRESH)
//!  link: PUSH_PROMISE ─► PushOffer ─► take (one task per push):
//!    ├─ a fetch of the URL already in flight ─► CANCEL ("in_flight")
//!    └─ Cache::serve(push's request, Asker::Push, the push as upstream)
//!         ├─ hit: held fresh ────────────────► CANCEL ("fresh")
//!         ├─ head refused (Fill::judge_push) ─► CANCEL, counted by reason
//!         └─ fill: stored while it streams; a browser request for the URL
//!            meanwhile joins the flight (and promotes the push: PRIORITY)
//!  front: a browser GET ─► on_demand (promote) ... served ─► "used" if it
//!         was a hit or a join on a pushed entry
//! ```
//!
//! Whether a push is stored is decided exactly as for the answer to a
//! browser's request with the push's request fields (the same lookup, Vary
//! and RFC 9111 storability: `cache::policy`), stricter in two ways: only a
//! 200 or a 304 that freshens the entry it validates is taken, and
//! `Set-Cookie` never (the policy's rule for every response). The session
//! has already checked the push's request: GET, the page's Host, no
//! credentials. Refusing or cancelling is dropping the push's response: the
//! link sends CANCEL by its push id (RESET CANCELLED before its head).
//!
//! What the gateway holds is learnt from the pushes themselves: each page
//! remembers the targets pushed for it ([`PushConfig::pages`] pages, least
//! recently used forgotten first; at most `max_per_page` targets each).
//! Nothing here reads the prefetch queue.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use gateway_protocol::{
    HeldEntry, MAX_HEAD, MAX_HELD_ENTRIES, MAX_HELD_TARGET, MAX_PUSH_FIELDS, RequestClass,
};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::body::{Body, BoxError};
use crate::cache::policy::EffectiveUri;
use crate::cache::{Asker, Cache, Held, ServeError};
use crate::config::PushConfig;
use crate::origin_link::{
    LinkPushCounters, LinkPushes, PUSH_URGENCY, PageBudget, PushOffer, PushPage, PushResponse,
};
use crate::sync::lock;
use crate::upstream::{Answered, Upstream, UpstreamError, UpstreamFuture, UpstreamRequest};

/// A push whose response head has not come this long after its promise is
/// given up (cancelled).
pub const PUSH_HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Pushed URLs remembered for the `used` count, oldest forgotten first.
pub const MAX_PUSHED_REMEMBERED: usize = 65_536;
/// Bytes of a held entry's fixed part in PUSH_BUDGET (flags, the two
/// lengths, reserved, the target's length), and of the budget's own.
const HELD_ENTRY_FIXED: usize = 6;
const BUDGET_FIXED: usize = 8;
/// Longest validator a held entry carries (its length is one byte).
const MAX_VALIDATOR: usize = 255;
/// Urgency of a browser's request (RFC 9218's default): what a push a
/// browser waits for is promoted to.
const DEMAND_URGENCY: u8 = 3;

/// Why a push was refused: the `reason` label of
/// `gateway_push_refused_total`, every value from the start.
pub const REFUSED_REASONS: [&str; 12] = [
    "status",
    "no_store",
    "private",
    "set_cookie",
    "vary",
    "not_storable",
    "too_large",
    "unmatched_304",
    "other_host",
    "protocol",
    "busy",
    "failed",
];
/// Why a push was cancelled as not needed: `gateway_push_cancelled_total`.
pub const CANCELLED_REASONS: [&str; 2] = ["fresh", "in_flight"];

/// The push figures since start (`/metrics`, `/push/stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushStats {
    /// Promises received (those the link refused itself included).
    pub offered: u64,
    /// Pushes stored whole.
    pub stored: u64,
    /// Body bytes of the pushes stored.
    pub stored_bytes: u64,
    /// 304 pushes that freshened a stored entry.
    pub revalidated: u64,
    /// Pushed entries a browser then got from the cache (a hit, or a join on
    /// the push in flight), each counted once.
    pub used: u64,
    /// Their body bytes.
    pub used_bytes: u64,
    /// Held entries sent as FRESH in PUSH_BUDGETs: pushes the origin could
    /// skip.
    pub held_fresh: u64,
    /// Held entries sent stale, with validators: pushes the origin can make
    /// a 304.
    pub held_stale: u64,
    /// PUSH_BUDGETs built for pages.
    pub budgets: u64,
    /// Refused pushes by reason ([`REFUSED_REASONS`]).
    pub refused: Vec<(String, u64)>,
    /// Pushes cancelled as not needed, by reason ([`CANCELLED_REASONS`]).
    pub cancelled: Vec<(String, u64)>,
}

impl PushStats {
    /// Pushed bytes no browser has used (yet): evicted unused, or still
    /// waiting.
    pub fn unused_bytes(&self) -> u64 {
        self.stored_bytes.saturating_sub(self.used_bytes)
    }

    /// The count for `reason` among the refused.
    pub fn refused(&self, reason: &str) -> u64 {
        self.refused
            .iter()
            .find(|(r, _)| r == reason)
            .map_or(0, |(_, n)| *n)
    }

    /// The count for `reason` among the cancelled.
    pub fn cancelled(&self, reason: &str) -> u64 {
        self.cancelled
            .iter()
            .find(|(r, _)| r == reason)
            .map_or(0, |(_, n)| *n)
    }
}

#[derive(Debug, Default)]
struct Counters {
    offered: AtomicU64,
    stored: AtomicU64,
    stored_bytes: AtomicU64,
    revalidated: AtomicU64,
    used: AtomicU64,
    used_bytes: AtomicU64,
    held_fresh: AtomicU64,
    held_stale: AtomicU64,
    budgets: AtomicU64,
    refused: [AtomicU64; REFUSED_REASONS.len()],
    cancelled: [AtomicU64; CANCELLED_REASONS.len()],
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A push on its way into the cache, by primary URI.
#[derive(Debug)]
struct OnWay {
    id: gateway_protocol::RequestId,
    promote: watch::Sender<(u8, RequestClass)>,
}

/// A pushed URL, for the `used` count.
#[derive(Debug, Default, Clone, Copy)]
struct Pushed {
    /// Its body bytes, once stored whole.
    bytes: Option<u64>,
    /// A browser got it from the cache.
    used: bool,
}

/// The page closures learnt from pushes: page primary URI → targets, least
/// recently used forgotten first.
#[derive(Debug, Default)]
struct Closures {
    pages: HashMap<String, (u64, Vec<String>)>,
    tick: u64,
}

impl Closures {
    fn touch(&mut self, page: &str) -> Vec<String> {
        self.tick += 1;
        let tick = self.tick;
        self.pages
            .get_mut(page)
            .map_or_else(Vec::new, |(used, targets)| {
                *used = tick;
                targets.clone()
            })
    }

    fn learn(&mut self, page: &str, target: &str, max_pages: usize, max_targets: usize) {
        self.tick += 1;
        let tick = self.tick;
        if !self.pages.contains_key(page) && self.pages.len() >= max_pages {
            let oldest = self
                .pages
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(page, _)| page.clone());
            if let Some(oldest) = oldest {
                self.pages.remove(&oldest);
            }
        }
        let (used, targets) = self.pages.entry(page.to_owned()).or_default();
        *used = tick;
        if targets.len() < max_targets && !targets.iter().any(|t| t == target) {
            targets.push(target.to_owned());
        }
    }
}

/// The gateway's push taker: one per gateway, shared by the links (which
/// hand it promises), the front (budgets, promotion, use) and the metrics.
#[derive(Debug)]
pub struct Pushes {
    config: PushConfig,
    cache: Cache,
    sink: mpsc::Sender<PushOffer>,
    link_counters: Arc<LinkPushCounters>,
    closures: Mutex<Closures>,
    on_way: Mutex<HashMap<String, OnWay>>,
    pushed: Mutex<(HashMap<String, Pushed>, VecDeque<String>)>,
    counters: Counters,
}

impl Pushes {
    /// The taker for `config` over `cache`, its task started (within a tokio
    /// runtime); `None`, with one log line saying why, when push is off or
    /// the cache is (push needs the cache: it is not announced then).
    pub fn start(config: &PushConfig, cache: &Cache) -> Option<Arc<Self>> {
        if !config.enabled {
            return None;
        }
        if !cache.is_enabled() {
            tracing::info!("push: not announced, the cache is off (push stores into the cache)");
            return None;
        }
        let in_flight = usize::try_from(config.in_flight).unwrap_or(usize::MAX);
        // Each association may have `in_flight` pushes open; room for a few.
        let (sink, offers) = mpsc::channel(in_flight.saturating_mul(4).max(1));
        let pushes = Arc::new(Self {
            config: *config,
            cache: cache.clone(),
            sink,
            link_counters: Arc::default(),
            closures: Mutex::default(),
            on_way: Mutex::default(),
            pushed: Mutex::default(),
            counters: Counters::default(),
        });
        tokio::spawn(take_offers(Arc::downgrade(&pushes), offers));
        tracing::info!(
            in_flight = config.in_flight,
            max_per_page = config.max_per_page,
            max_bytes_per_page = config.max_bytes_per_page,
            "push: announced to origins; pushes go into the cache"
        );
        Some(pushes)
    }

    /// What each origin link needs to take pushes for this taker.
    pub fn link(&self) -> LinkPushes {
        LinkPushes {
            in_flight: self.config.in_flight,
            sink: self.sink.clone(),
            counters: Arc::clone(&self.link_counters),
        }
    }

    /// The figures since start.
    pub fn stats(&self) -> PushStats {
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let link = &self.link_counters;
        let refused = REFUSED_REASONS
            .iter()
            .zip(&c.refused)
            .map(|(reason, n)| {
                let from_link = match *reason {
                    "other_host" => get(&link.other_host),
                    "protocol" => get(&link.protocol),
                    "busy" => get(&link.busy),
                    _ => 0,
                };
                ((*reason).to_owned(), get(n) + from_link)
            })
            .collect();
        let cancelled = CANCELLED_REASONS
            .iter()
            .zip(&c.cancelled)
            .map(|(reason, n)| ((*reason).to_owned(), get(n)))
            .collect();
        PushStats {
            // The link's own refusals never reached `take`.
            offered: get(&c.offered)
                + get(&link.other_host)
                + get(&link.protocol)
                + get(&link.busy),
            stored: get(&c.stored),
            stored_bytes: get(&c.stored_bytes),
            revalidated: get(&c.revalidated),
            used: get(&c.used),
            used_bytes: get(&c.used_bytes),
            held_fresh: get(&c.held_fresh),
            held_stale: get(&c.held_stale),
            budgets: get(&c.budgets),
            refused,
            cancelled,
        }
    }

    /// Pushes on their way into the cache now.
    pub fn on_way(&self) -> usize {
        lock(&self.on_way).len()
    }

    /// The PUSH_BUDGET for a page request, or `None` when the request is no
    /// page: a GET navigation without a body (`Sec-Fetch-Dest: document`,
    /// or no `Sec-Fetch-Dest` and an `Accept` that prefers `text/html`).
    /// `host`, `port`, `target` as the cache keys the page; `host_field` its
    /// `Host` as sent.
    pub async fn budget_for(
        &self,
        page: &UpstreamRequest,
        host: &str,
        port: u16,
    ) -> Option<PageBudget> {
        if !is_navigation(&page.method, &page.headers, page.body.is_empty()) {
            return None;
        }
        let primary = EffectiveUri::new(host, port, &page.path);
        let targets = lock(&self.closures).touch(primary.as_str());
        let mut fields = page.headers.clone();
        for name in &crate::cache::policy::CLIENT_PRECONDITIONS {
            fields.remove(name);
        }
        let held = if targets.is_empty() {
            Vec::new()
        } else {
            self.cache.held(host, port, targets, &fields).await
        };
        let held = held_entries(held);
        let fresh = held.iter().filter(|e| e.fresh).count() as u64;
        add(&self.counters.held_fresh, fresh);
        add(&self.counters.held_stale, held.len() as u64 - fresh);
        add(&self.counters.budgets, 1);
        Some(PageBudget {
            page: PushPage {
                host: host.to_owned(),
                port,
                target: page.path.clone(),
                host_field: Bytes::copy_from_slice(page.host.as_bytes()),
            },
            max_pushes: self.config.max_per_page,
            max_bytes: self.config.max_bytes_per_page,
            held,
        })
    }

    /// A browser GET for `host:port` + `target` is about to be served: a
    /// push of it on its way is promoted (PRIORITY). Returns what
    /// [`served`](Self::served) needs when the URL was pushed.
    pub fn on_demand(&self, host: &str, port: u16, target: &str) -> Option<Demand> {
        let primary = EffectiveUri::new(host, port, target).as_str().to_owned();
        if let Some(on_way) = lock(&self.on_way).get(&primary) {
            on_way
                .promote
                .send_replace((DEMAND_URGENCY, RequestClass::Demand));
            tracing::debug!(
                uri = primary,
                id = on_way.id,
                "push promoted: a browser asks for it"
            );
        }
        let pushed = lock(&self.pushed).0.get(&primary).is_some_and(|p| !p.used);
        pushed.then_some(Demand { primary })
    }

    /// The browser request [`on_demand`](Self::on_demand) saw was served;
    /// `hit`: from the store or a flight (nothing went upstream), so the
    /// push was used.
    pub fn served(&self, demand: Demand, hit: bool) {
        if !hit {
            return;
        }
        let mut pushed = lock(&self.pushed);
        let Some(entry) = pushed.0.get_mut(&demand.primary) else {
            return;
        };
        if entry.used {
            return;
        }
        entry.used = true;
        add(&self.counters.used, 1);
        if let Some(bytes) = entry.bytes {
            add(&self.counters.used_bytes, bytes);
        }
    }

    fn refuse(&self, uri: &str, reason: &str) {
        tracing::debug!(uri, reason, "push refused");
        let at = REFUSED_REASONS.iter().position(|r| *r == reason);
        // An unlisted word (a cache change) still counts, as `not_storable`.
        let at = at.or_else(|| REFUSED_REASONS.iter().position(|r| *r == "not_storable"));
        if let Some(at) = at {
            add(&self.counters.refused[at], 1);
        }
    }

    fn cancel(&self, uri: &str, reason: &str) {
        tracing::debug!(uri, reason, "push cancelled: not needed");
        if let Some(at) = CANCELLED_REASONS.iter().position(|r| *r == reason) {
            add(&self.counters.cancelled[at], 1);
        }
    }

    /// Remembers `primary` as pushed, before its push's lookup, so that a
    /// browser that joins the push counts it as used; true if it was not
    /// remembered already (an earlier push of it).
    fn remember_pushed(&self, primary: &str) -> bool {
        let mut pushed = lock(&self.pushed);
        let (map, order) = &mut *pushed;
        if map.contains_key(primary) {
            return false;
        }
        map.insert(primary.to_owned(), Pushed::default());
        order.push_back(primary.to_owned());
        if order.len() > MAX_PUSHED_REMEMBERED
            && let Some(oldest) = order.pop_front()
        {
            map.remove(&oldest);
        }
        true
    }

    /// Forgets what [`remember_pushed`](Self::remember_pushed) added for a
    /// push that stored nothing.
    fn forget_pushed(&self, primary: &str) {
        lock(&self.pushed).0.remove(primary);
    }

    fn pushed_whole(&self, primary: &str, bytes: u64) {
        let mut pushed = lock(&self.pushed);
        if let Some(entry) = pushed.0.get_mut(primary) {
            // Used while it streamed: its bytes count now (once; a later
            // push of the same URL counts nothing again).
            if entry.used && entry.bytes.is_none() {
                add(&self.counters.used_bytes, bytes);
            }
            entry.bytes = Some(bytes);
        }
    }

    /// One push, from its promise to its end (module docs).
    async fn take(self: Arc<Self>, offer: PushOffer) {
        add(&self.counters.offered, 1);
        let PushOffer {
            page,
            id,
            head,
            response,
            promote,
        } = offer;
        let Some(request) = push_request(&head) else {
            // The session checked it; a head it let through that this
            // cannot read is refused all the same.
            self.refuse("-", "protocol");
            return;
        };
        let primary = EffectiveUri::new(&page.host, page.port, &request.path)
            .as_str()
            .to_owned();
        let page_primary = EffectiveUri::new(&page.host, page.port, &page.target);
        lock(&self.closures).learn(
            page_primary.as_str(),
            &request.path,
            self.config.pages,
            usize::from(self.config.max_per_page).min(MAX_HELD_ENTRIES),
        );
        if self.cache.in_flight(&page.host, page.port, &request.path) {
            self.cancel(&primary, "in_flight");
            return;
        }
        {
            let mut on_way = lock(&self.on_way);
            if on_way.contains_key(&primary) {
                drop(on_way);
                self.cancel(&primary, "in_flight");
                return;
            }
            on_way.insert(primary.clone(), OnWay { id, promote });
        }
        let remembered = self.remember_pushed(&primary);
        let upstream = PushUpstream::new(response);
        let served = self
            .cache
            .serve(&page.host, page.port, &request, Asker::Push, &upstream)
            .await;
        let status = upstream.status();
        let stored = match served {
            Ok(served) if served.hit => {
                self.cancel(&primary, "fresh");
                false
            }
            Ok(_) if status == Some(StatusCode::NOT_MODIFIED) => {
                // The entry is freshened; what `served` holds is the stored
                // body, which nobody needs now.
                add(&self.counters.revalidated, 1);
                false
            }
            Ok(served) => {
                let max = self.cache_limit();
                match drain(served.response.into_body(), max).await {
                    Ok(bytes) => {
                        add(&self.counters.stored, 1);
                        add(&self.counters.stored_bytes, bytes);
                        self.pushed_whole(&primary, bytes);
                        true
                    }
                    Err(reason) => {
                        self.refuse(&primary, reason);
                        false
                    }
                }
            }
            Err(ServeError::Declined(reason)) => {
                self.refuse(&primary, reason);
                false
            }
            Err(ServeError::Upstream(error)) => {
                tracing::debug!(uri = primary, id, error = %error.message, "push failed");
                self.refuse(&primary, "failed");
                false
            }
        };
        if remembered && !stored {
            self.forget_pushed(&primary);
        }
        let mut on_way = lock(&self.on_way);
        if on_way.get(&primary).is_some_and(|w| w.id == id) {
            on_way.remove(&primary);
        }
    }

    /// The largest body a push may bring: the cache's entry limit.
    fn cache_limit(&self) -> u64 {
        self.cache.max_object_bytes()
    }
}

/// Takes promises from the links until the taker is gone.
async fn take_offers(pushes: Weak<Pushes>, mut offers: mpsc::Receiver<PushOffer>) {
    while let Some(offer) = offers.recv().await {
        let Some(pushes) = pushes.upgrade() else {
            return;
        };
        tokio::spawn(pushes.take(offer));
    }
}

/// Reads a stored push's answer to its end (the fill stores it as it
/// streams): its length, or why it was given up.
async fn drain(mut body: Body, max: u64) -> Result<u64, &'static str> {
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err("failed");
        };
        if let Ok(data) = frame.into_data() {
            bytes += data.len() as u64;
            if bytes > max {
                // Dropping the body cancels the push; the fill stores none.
                return Err("too_large");
            }
        }
    }
    Ok(bytes)
}

/// A browser request for a pushed URL, between [`Pushes::on_demand`] and
/// [`Pushes::served`].
#[derive(Debug)]
pub struct Demand {
    primary: String,
}

/// The cache's upstream for one push: its `send` resolves to the pushed
/// response, whatever the (prepared) request says.
#[derive(Debug)]
struct PushUpstream {
    response: Mutex<Option<PushResponse>>,
    status: Mutex<Option<StatusCode>>,
}

impl PushUpstream {
    fn new(response: PushResponse) -> Self {
        Self {
            response: Mutex::new(Some(response)),
            status: Mutex::new(None),
        }
    }

    fn status(&self) -> Option<StatusCode> {
        *lock(&self.status)
    }

    async fn head(&self) -> Result<Answered, UpstreamError> {
        let Some(response) = lock(&self.response).take() else {
            return Err(UpstreamError::new(
                crate::upstream::Side::Internal,
                StatusCode::BAD_GATEWAY,
                "a push answers one request",
            ));
        };
        let response = tokio::time::timeout(PUSH_HEAD_TIMEOUT, response.head())
            .await
            .map_err(|_| UpstreamError::origin(StatusCode::GATEWAY_TIMEOUT, "push head late"))?
            .map_err(|e| UpstreamError::origin(e.gateway_status(), e.to_string()))?;
        let (mut parts, body) = response.into_parts();
        *lock(&self.status) = Some(parts.status);
        parts.headers = crate::upstream::end_to_end(parts.headers);
        let body = body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync();
        Ok(Answered {
            response: Response::from_parts(parts, body),
            route: "push",
        })
    }
}

impl Upstream for PushUpstream {
    fn send(&self, _request: UpstreamRequest) -> UpstreamFuture<'_> {
        Box::pin(self.head())
    }

    fn detach(&self) -> Arc<dyn Upstream> {
        // A push is never revalidated in the background (Asker::Push fills
        // in the open): nothing to detach.
        Arc::new(PushUpstream {
            response: Mutex::new(None),
            status: Mutex::new(None),
        })
    }
}

/// The push's request as the cache judges it: its target and end-to-end
/// fields (Host aside), at push urgency. `None` for a head that is not a
/// GET with an origin-form target and a Host.
fn push_request(head: &[u8]) -> Option<UpstreamRequest> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_PUSH_FIELDS];
    let mut parsed = httparse::Request::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(head) else {
        return None;
    };
    let path = parsed.path.filter(|p| p.starts_with('/'))?.to_owned();
    if parsed.method != Some("GET") {
        return None;
    }
    let mut host = None;
    let mut headers = HeaderMap::new();
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(field.value).ok()?;
        if name == header::HOST {
            host = Some(value);
        } else {
            headers.append(name, value);
        }
    }
    Some(UpstreamRequest {
        method: Method::GET,
        path,
        host: host?,
        headers: crate::upstream::end_to_end(headers),
        body: Bytes::new(),
        urgency: PUSH_URGENCY,
        class: RequestClass::Prefetch,
        promote: None,
    })
}

/// Whether a request is a page load: a GET without a body whose
/// `Sec-Fetch-Dest` is `document`, or, without `Sec-Fetch-Dest` (older
/// browsers, other clients), whose `Accept` prefers `text/html`.
pub fn is_navigation(method: &Method, headers: &HeaderMap, no_body: bool) -> bool {
    if *method != Method::GET || !no_body {
        return false;
    }
    if let Some(dest) = headers.get("sec-fetch-dest") {
        return dest.as_bytes().eq_ignore_ascii_case(b"document");
    }
    accept_prefers_html(headers)
}

/// `Accept` (every line of it) gives `text/html` a quality above 0 and no
/// other media range a higher one.
fn accept_prefers_html(headers: &HeaderMap) -> bool {
    let mut html = None::<u32>;
    let mut best = 0u32;
    for line in headers.get_all(header::ACCEPT) {
        let Ok(line) = line.to_str() else {
            continue;
        };
        for item in line.split(',') {
            let mut parts = item.split(';');
            let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let quality = parts
                .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
                .find_map(quality_per_mille)
                .unwrap_or(1000);
            if range == "text/html" {
                html = Some(html.map_or(quality, |q| q.max(quality)));
            }
            best = best.max(quality);
        }
    }
    html.is_some_and(|q| q > 0 && q >= best)
}

/// An RFC 9110 `qvalue` in thousandths; `None` if malformed.
fn quality_per_mille(text: &str) -> Option<u32> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u32 = match whole {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    let fraction: u32 = format!("{fraction:0<3}").parse().ok()?;
    (whole + fraction <= 1000).then_some(whole + fraction)
}

/// Held entries as PUSH_BUDGET carries them: validators within their
/// limits, a stale entry only with one, at most `MAX_HELD_ENTRIES` and
/// `MAX_HEAD` bytes of payload (the first ones kept).
fn held_entries(held: Vec<Held>) -> Vec<HeldEntry> {
    let mut out = Vec::new();
    let mut len = BUDGET_FIXED;
    for h in held {
        let etag = validator(h.etag.as_ref(), |b| b.is_ascii_graphic());
        let date = validator(h.last_modified.as_ref(), |b| {
            b.is_ascii_graphic() || b == b' '
        });
        if !h.fresh && etag.is_empty() && date.is_empty() {
            continue;
        }
        // 1 to MAX_HELD_TARGET visible ASCII bytes starting with `/`: a
        // target read from a push's head may hold other bytes (httparse
        // takes obs-text), which the origin would refuse the page for.
        let target_fits = h.target.starts_with('/')
            && h.target.len() <= MAX_HELD_TARGET
            && h.target.bytes().all(|b| b.is_ascii_graphic());
        if !target_fits {
            continue;
        }
        let entry_len = HELD_ENTRY_FIXED + h.target.len() + etag.len() + date.len();
        if out.len() == MAX_HELD_ENTRIES || len + entry_len > MAX_HEAD {
            break;
        }
        len += entry_len;
        out.push(HeldEntry {
            fresh: h.fresh,
            target: Bytes::from(h.target),
            etag,
            last_modified: date,
        });
    }
    out
}

/// A stored validator, verbatim, if it fits a held entry; else empty.
fn validator(value: Option<&HeaderValue>, allowed: fn(u8) -> bool) -> Bytes {
    value
        .map(HeaderValue::as_bytes)
        .filter(|v| v.len() <= MAX_VALIDATOR && v.iter().copied().all(allowed))
        .map_or_else(Bytes::new, Bytes::copy_from_slice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                HeaderValue::from_str(value).expect("a value"),
            );
        }
        map
    }

    #[test]
    fn a_navigation_is_a_document_or_prefers_html() {
        let get = Method::GET;
        let chrome = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8";
        assert!(is_navigation(
            &get,
            &headers(&[("sec-fetch-dest", "document")]),
            true
        ));
        assert!(is_navigation(&get, &headers(&[("accept", chrome)]), true));
        assert!(!is_navigation(
            &get,
            &headers(&[("sec-fetch-dest", "image"), ("accept", chrome)]),
            true
        ));
        assert!(!is_navigation(
            &get,
            &headers(&[("sec-fetch-dest", "document")]),
            false
        ));
        assert!(!is_navigation(
            &Method::POST,
            &headers(&[("sec-fetch-dest", "document")]),
            true
        ));
        assert!(!is_navigation(
            &get,
            &headers(&[("accept", "image/avif,image/*,*/*;q=0.8")]),
            true
        ));
        assert!(!is_navigation(&get, &headers(&[("accept", "*/*")]), true));
        assert!(!is_navigation(&get, &headers(&[]), true));
        assert!(!is_navigation(
            &get,
            &headers(&[("accept", "text/html;q=0")]),
            true
        ));
        assert!(!is_navigation(
            &get,
            &headers(&[("accept", "application/json, text/html;q=0.5")]),
            true
        ));
        assert!(is_navigation(
            &get,
            &headers(&[("accept", "text/html;q=0.5, */*;q=0.1")]),
            true
        ));
    }

    #[test]
    fn held_entries_keep_the_wire_limits() {
        let held = |target: &str, fresh: bool, etag: Option<&str>| Held {
            target: target.to_owned(),
            fresh,
            etag: etag.map(|e| HeaderValue::from_str(e).expect("a value")),
            last_modified: None,
        };
        let long_etag = format!("\"{}\"", "x".repeat(300));
        let entries = held_entries(vec![
            held("/fresh.css", true, None),
            held("/stale.js", false, Some("\"v1\"")),
            held("/stale-without-validator.js", false, None),
            held("/long-etag.png", false, Some(&long_etag)),
            held("/long-etag-fresh.png", true, Some(&long_etag)),
            held("/caf\u{e9}.png", true, None),
            held("no-slash.png", true, None),
        ]);
        let got: Vec<(&[u8], bool, &[u8])> = entries
            .iter()
            .map(|e| (&e.target[..], e.fresh, &e.etag[..]))
            .collect();
        assert_eq!(
            got,
            vec![
                (&b"/fresh.css"[..], true, &b""[..]),
                (b"/stale.js", false, b"\"v1\""),
                (b"/long-etag-fresh.png", true, b""),
            ]
        );
        let many: Vec<Held> = (0..MAX_HELD_ENTRIES + 10)
            .map(|n| held(&format!("/{n}"), true, None))
            .collect();
        assert_eq!(held_entries(many).len(), MAX_HELD_ENTRIES);
        let big: Vec<Held> = (0..20)
            .map(|n| held(&format!("/{n}/{}", "p".repeat(8000)), true, None))
            .collect();
        let kept = held_entries(big);
        let len: usize = BUDGET_FIXED
            + kept
                .iter()
                .map(|e| HELD_ENTRY_FIXED + e.target.len())
                .sum::<usize>();
        assert!(
            len <= MAX_HEAD && kept.len() == 8,
            "{} entries, {len} bytes",
            kept.len()
        );
    }

    #[test]
    fn closures_are_bounded_and_forget_the_least_recently_used_page() {
        let mut closures = Closures::default();
        closures.learn("a", "/1", 2, 2);
        closures.learn("a", "/2", 2, 2);
        closures.learn("a", "/3", 2, 2);
        closures.learn("a", "/1", 2, 2);
        assert_eq!(closures.touch("a"), ["/1", "/2"], "at most 2, no repeats");
        closures.learn("b", "/b", 2, 2);
        assert_eq!(closures.touch("a"), ["/1", "/2"]);
        closures.learn("c", "/c", 2, 2);
        assert!(
            closures.touch("b").is_empty(),
            "b was the least recently used"
        );
        assert_eq!(closures.touch("a"), ["/1", "/2"]);
        assert_eq!(closures.touch("c"), ["/c"]);
    }

    #[test]
    fn a_push_request_keeps_its_fields_but_host() {
        let request = push_request(
            b"GET /a.css?v=1 HTTP/1.1\r\nHost: site.test\r\nAccept: text/css\r\nAccept-Encoding: gzip\r\n\r\n",
        )
        .expect("a push request");
        assert_eq!(request.path, "/a.css?v=1");
        assert_eq!(request.host, "site.test");
        assert_eq!(request.headers.len(), 2);
        assert_eq!(request.headers["accept"], "text/css");
        assert!(push_request(b"POST / HTTP/1.1\r\nHost: a\r\n\r\n").is_none());
        assert!(push_request(b"GET / HTTP/1.1\r\n\r\n").is_none(), "no Host");
        assert!(push_request(b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n").is_none());
    }
}
