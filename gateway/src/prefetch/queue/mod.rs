//! The prefetch queue: an I/O-free state machine between the pages the
//! browser loads and the prefetches the gateway sends.
//!
//! The I/O layer opens a [page](PrefetchQueue::open_page) for each HTML
//! response it scans, hands over what the scanner finds
//! ([`PrefetchQueue::handle_resource`]), tells the queue about every browser
//! request ([`PrefetchQueue::on_demand`]) and about the progress of each
//! prefetch, and carries out the [`Action`]s it drains from
//! [`PrefetchQueue::poll_action`]. Time is an argument; nothing here touches
//! a socket, the cache or the clock.
//!
//! Rules (docs/prefetch.md has the reasons):
//!
//! - **Order.** Prefetches start in the order they were found (document
//!   order per page; pages in the order they opened), each origin's queue on
//!   its own, at [`PREFETCH_URGENCY`] with class prefetch, at most
//!   [`PrefetchConfig::max_concurrent_per_origin`] in flight per origin.
//! - **Demand first.** A browser request for a URL in flight promotes the
//!   prefetch ([`Action::Promote`] to [`DEMAND_URGENCY`]) and joins it: no
//!   second fetch. A promoted prefetch no longer counts against its origin's
//!   limit. A URL still queued is taken off the queue and the browser's
//!   request goes as a demand of its own ([`Demand::Claimed`]): with the
//!   browser's own fields, and without waiting for a slot.
//! - **One fetch per URL.** A URL wanted by several pages is fetched once.
//!   A URL a browser asked for within the page lifetime is not prefetched.
//! - **Limits per page**: prefetches accepted ([`PrefetchConfig::max_per_page`])
//!   and bytes ([`PrefetchConfig::max_bytes_per_page`], by `Content-Length`
//!   when announced, by bytes received otherwise); a prefetch that passes
//!   the byte limit is cancelled unless a browser asked for it.
//! - **Depth.** Stylesheets are scanned for `url()` and `@import`; imports
//!   are followed [`PrefetchConfig::css_import_depth`] deep. Same-origin
//!   frames of the page are scanned as documents; frames of frames are not
//!   fetched.
//! - **Abandon.** When the browser abandons a page, its queued prefetches
//!   are dropped and those in flight are cancelled, unless another page or a
//!   browser request wants them. Pages leave tracking after
//!   [`PrefetchConfig::page_lifetime_secs`] the same way.
//! - **Metrics** ([`PrefetchStats`]): issued, used (a browser asked for it
//!   later), wasted bytes (received for prefetches nobody asked for by the
//!   time every page that wanted them left tracking). Each page keeps a
//!   [timeline](PrefetchQueue::timeline), logged at debug level when the page
//!   leaves tracking, and the last [`MAX_RECENT_PAGES`] pages are kept with
//!   their outcome ([`PrefetchQueue::recent_pages`], the status page's list).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use gateway_protocol::Urgency;
use url::Url;

use super::{Kind, PrefetchConfig, Resource};

#[cfg(test)]
mod tests;

/// Urgency of a prefetch (RFC 9218: 7 is for background work).
pub const PREFETCH_URGENCY: Urgency = Urgency::LOWEST;
/// Urgency of a prefetch a browser asked for: that of any browser request.
pub const DEMAND_URGENCY: Urgency = Urgency::DEFAULT;
/// Most timeline entries kept per page; later ones are counted, not kept.
pub const MAX_TIMELINE_ENTRIES: usize = 1024;
/// Most browser-requested URLs remembered (so that a URL the browser
/// already fetched is not prefetched after it).
pub const MAX_RECENT_DEMANDS: usize = 4096;

/// Most pages [`PrefetchQueue::recent_pages`] reports: the last ones opened,
/// tracked or not.
pub const MAX_RECENT_PAGES: usize = 20;

/// One page: an HTML response the gateway scans, with its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId(u64);

/// One fetch the queue knows: a prefetch, or a queued prefetch a browser
/// claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FetchId(u64);

/// The browser connection a page's HTML was requested on, numbered by the
/// caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page-{}", self.0)
    }
}

impl fmt::Display for FetchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fetch-{}", self.0)
    }
}

/// How the body of a fetch is to be scanned, with what is found reported
/// through [`PrefetchQueue::handle_discovered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A frame's document: feed it to an [`super::HtmlScanner`].
    Html,
    /// A stylesheet: [`super::extract_css`] on the whole body.
    Css,
}

/// What the I/O layer must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a prefetch: `GET resource.url`, class prefetch, at `urgency`,
    /// with the fields of [`super::prefetch_request_headers`] for `page`.
    /// Then report [`PrefetchQueue::handle_head`], `handle_data`, and one of
    /// `handle_complete`, `handle_failed`, `handle_fresh`.
    Start {
        /// The prefetch.
        fetch: FetchId,
        /// The page it is for (the first that wanted it).
        page: PageId,
        /// What to fetch.
        resource: Resource,
        /// RFC 9218 urgency.
        urgency: Urgency,
        /// Scan the body, and how.
        scan: Option<Scan>,
    },
    /// A browser asked for this prefetch: raise its urgency.
    Promote {
        /// The prefetch.
        fetch: FetchId,
        /// The new urgency.
        urgency: Urgency,
    },
    /// Stop this prefetch. Nothing more is to be reported about it.
    Cancel {
        /// The prefetch.
        fetch: FetchId,
    },
}

/// What to do with a browser's request, from [`PrefetchQueue::on_demand`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// Not prefetched: go on your own.
    Alone,
    /// A prefetch of it is in flight, now promoted: join it (through the
    /// cache's coalescing of the same key), do not fetch again.
    Join(FetchId),
    /// It was prefetched completely: the cache holds it if it was kept.
    Prefetched(FetchId),
    /// It was queued, not started: it is off the queue, and the browser's
    /// request goes on its own as a demand. If `scan` says so, scan its body
    /// as a prefetch's and report with this id (`handle_discovered`, then
    /// `handle_complete` or `handle_failed`); its bytes count against no page.
    Claimed {
        /// The id to report under.
        fetch: FetchId,
        /// Scan the body, and how.
        scan: Option<Scan>,
    },
}

/// Counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefetchStats {
    /// Prefetches started ([`Action::Start`]).
    pub issued: u64,
    /// Of those, the cache already had fresh when they started.
    pub found_fresh: u64,
    /// Prefetches a browser asked for later (joined in flight, or after
    /// completion). Each prefetch counts once.
    pub used: u64,
    /// Queued prefetches a browser asked for before they started.
    pub claimed: u64,
    /// Prefetches that completed.
    pub completed: u64,
    /// Prefetches that failed.
    pub failed: u64,
    /// Prefetches cancelled (page abandoned or expired, byte limit).
    pub cancelled: u64,
    /// Queued prefetches dropped before they started.
    pub dropped: u64,
    /// Subresources not queued: fresh in the cache when found.
    pub skipped_fresh: u64,
    /// Subresources not queued: a browser had asked for them already.
    pub skipped_demanded: u64,
    /// Subresources not queued or dropped: a page limit (count, bytes) or
    /// the depth rule.
    pub skipped_limit: u64,
    /// Bytes received by prefetches.
    pub bytes: u64,
    /// Bytes received by prefetches that no browser asked for while any page
    /// wanting them was tracked.
    pub wasted_bytes: u64,
}

/// What became of one page's prefetches. A prefetch counts toward the page
/// that owned it when it happened (the first page that found it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageOutcome {
    /// Prefetches started for it.
    pub issued: u32,
    /// Of those, ones a browser asked for (joined in flight or after
    /// completion).
    pub used: u32,
    /// Queued prefetches a browser asked for before they started (they went
    /// as the browser's own request).
    pub claimed: u32,
    /// Prefetches no browser asked for: cancelled, or completed with bytes
    /// and unused when the last page wanting them left tracking.
    pub wasted: u32,
    /// Prefetches that failed.
    pub failed: u32,
}

/// Where a recent page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageState {
    /// Its HTML is still on its way to the browser.
    Loading,
    /// The HTML arrived whole; its prefetches are still tracked.
    Loaded,
    /// The browser left before the HTML was whole.
    Abandoned,
    /// Its tracking time ran out (the usual end of a loaded page).
    Expired,
}

/// One of the last pages, for the status page (`GET /pages/recent`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecentPage {
    /// The document's URL.
    pub url: String,
    /// Milliseconds since its HTML response started.
    pub age_ms: u64,
    /// Where it is.
    pub state: PageState,
    /// What became of its prefetches (so far, while it is tracked).
    #[serde(flatten)]
    pub outcome: PageOutcome,
}

/// A recent page as the queue keeps it.
#[derive(Debug)]
struct RecentEntry {
    id: PageId,
    url: String,
    opened: Instant,
    /// Once it left tracking: how, and its final outcome.
    ended: Option<(PageEnd, PageOutcome)>,
}

/// Which limit kept a subresource from being prefetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`PrefetchConfig::max_per_page`].
    Count,
    /// [`PrefetchConfig::max_bytes_per_page`].
    Bytes,
    /// The `@import` depth, or a frame within a frame.
    Depth,
}

/// Why a page left tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageEnd {
    /// The browser abandoned it.
    Abandoned,
    /// Its lifetime ran out.
    Expired,
}

/// Why a prefetch was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Every page that wanted it left tracking.
    Unwanted,
    /// It would pass its page's byte limit.
    Bytes,
}

/// Something that happened to a page, for its debug timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimelineEvent {
    /// The page's HTML response started.
    Opened(Url),
    /// The HTML body ended.
    HtmlEnded,
    /// A subresource was queued.
    Queued(FetchId, Resource),
    /// A subresource is already fetched or queued for another page.
    Shared(FetchId, Url),
    /// Not queued: fresh in the cache.
    SkippedFresh(Url),
    /// Not queued: a browser asked for it already.
    SkippedDemanded(Url),
    /// Not queued, or dropped from the queue: a limit.
    SkippedLimit(Url, Limit),
    /// A prefetch started.
    Started(FetchId),
    /// The cache had it fresh when it started.
    FoundFresh(FetchId),
    /// A browser asked for it in flight.
    Promoted(FetchId),
    /// A browser asked for it while queued.
    Claimed(FetchId),
    /// A browser asked for it after it completed.
    Used(FetchId),
    /// It completed, with this many body bytes.
    Completed(FetchId, u64),
    /// It failed.
    Failed(FetchId),
    /// It was cancelled.
    Cancelled(FetchId, CancelReason),
    /// The page left tracking.
    Ended(PageEnd),
}

/// One timeline entry: when, from the page's opening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineEntry {
    /// Time since the page opened.
    pub at: Duration,
    /// What happened.
    pub event: TimelineEvent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    InFlight,
    Done,
    /// Off the queue, fetched by the browser's own request.
    Claimed,
}

#[derive(Debug)]
struct Fetch {
    resource: Resource,
    origin: String,
    /// The page whose budget it is charged to.
    owner: PageId,
    /// Every page that found it, owner first.
    wanted_by: Vec<PageId>,
    state: State,
    /// A browser asked for it.
    demanded: bool,
    /// Holds one of its origin's concurrency slots.
    holds_slot: bool,
    /// 0 for the page itself, 1 inside one of its frames.
    frame_level: u32,
    /// 0 for a page's own stylesheets, n for the nth `@import` level.
    import_level: u32,
    /// `Content-Length`, when announced.
    announced: Option<u64>,
    /// Body bytes received.
    received: u64,
    /// Bytes charged to the owner's budget.
    charged: u64,
}

impl Fetch {
    fn scan(&self) -> Option<Scan> {
        match self.resource.kind {
            Kind::Style => Some(Scan::Css),
            Kind::Document if self.frame_level == 0 => Some(Scan::Html),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Page {
    connection: ConnectionId,
    opened: Instant,
    html_ended: bool,
    /// Prefetches accepted (queued or started).
    accepted: u32,
    /// Bytes charged.
    bytes: u64,
    /// Every fetch the page wants, in the order found.
    fetches: Vec<FetchId>,
    timeline: Vec<TimelineEntry>,
    timeline_overflow: u64,
    outcome: PageOutcome,
}

/// The prefetch queue. See the module documentation.
#[derive(Debug)]
pub struct PrefetchQueue {
    max_per_page: u32,
    max_bytes_per_page: u64,
    max_concurrent_per_origin: u32,
    css_import_depth: u32,
    page_lifetime: Duration,
    next_page: u64,
    next_fetch: u64,
    pages: HashMap<PageId, Page>,
    fetches: HashMap<FetchId, Fetch>,
    /// Queued, in flight or completed fetches by URL (no fragment).
    by_url: HashMap<Url, FetchId>,
    /// Each origin's queued prefetches in order; entries no longer queued
    /// are skipped when met.
    waiting: HashMap<String, VecDeque<FetchId>>,
    /// Prefetches in flight per origin that hold a slot.
    in_flight: HashMap<String, u32>,
    /// URLs browsers asked for that the queue did not know, oldest first.
    recent_demands: VecDeque<(Instant, Url)>,
    recent_demand_set: HashMap<Url, Instant>,
    actions: VecDeque<Action>,
    stats: PrefetchStats,
    /// The last pages opened, oldest first.
    recent: VecDeque<RecentEntry>,
}

impl PrefetchQueue {
    /// An empty queue with the limits of `config`.
    pub fn new(config: &PrefetchConfig) -> Self {
        Self {
            max_per_page: config.max_per_page,
            max_bytes_per_page: config.max_bytes_per_page,
            max_concurrent_per_origin: config.max_concurrent_per_origin,
            css_import_depth: config.css_import_depth,
            page_lifetime: Duration::from_secs(config.page_lifetime_secs),
            next_page: 0,
            next_fetch: 0,
            pages: HashMap::new(),
            fetches: HashMap::new(),
            by_url: HashMap::new(),
            waiting: HashMap::new(),
            in_flight: HashMap::new(),
            recent_demands: VecDeque::new(),
            recent_demand_set: HashMap::new(),
            actions: VecDeque::new(),
            stats: PrefetchStats::default(),
            recent: VecDeque::new(),
        }
    }

    /// An HTML response for `document` started toward the browser on
    /// `connection`: its subresources will be reported under the new page.
    pub fn open_page(&mut self, now: Instant, document: Url, connection: ConnectionId) -> PageId {
        self.next_page += 1;
        let id = PageId(self.next_page);
        self.pages.insert(
            id,
            Page {
                connection,
                opened: now,
                html_ended: false,
                accepted: 0,
                bytes: 0,
                fetches: Vec::new(),
                timeline: Vec::new(),
                timeline_overflow: 0,
                outcome: PageOutcome::default(),
            },
        );
        if self.recent.len() >= MAX_RECENT_PAGES {
            self.recent.pop_front();
        }
        self.recent.push_back(RecentEntry {
            id,
            url: document.to_string(),
            opened: now,
            ended: None,
        });
        self.note(id, now, TimelineEvent::Opened(document));
        id
    }

    /// The page's HTML body reached the browser whole: closing its
    /// connection no longer abandons it.
    /// Idempotent: the body's end and the scanner's both report it.
    pub fn handle_html_end(&mut self, now: Instant, page: PageId) {
        if let Some(p) = self.pages.get_mut(&page)
            && !p.html_ended
        {
            p.html_ended = true;
            self.note(page, now, TimelineEvent::HtmlEnded);
        }
    }

    /// A subresource the page's HTML scan found, in document order.
    /// `fresh_in_cache`: the cache holds a fresh response for it (then
    /// nothing is fetched).
    pub fn handle_resource(
        &mut self,
        now: Instant,
        page: PageId,
        resource: Resource,
        fresh_in_cache: bool,
    ) {
        self.enqueue(now, page, resource, fresh_in_cache, 0, 0);
    }

    /// A subresource found in the body of `source` (a stylesheet or frame the
    /// queue asked to scan, [`Scan`]), in the order found. It goes to every
    /// page that wants `source`, within the depth rules.
    pub fn handle_discovered(
        &mut self,
        now: Instant,
        source: FetchId,
        resource: Resource,
        fresh_in_cache: bool,
    ) {
        let Some(src) = self.fetches.get(&source) else {
            return;
        };
        let (frame_level, import_level) = match src.scan() {
            Some(Scan::Html) => (src.frame_level + 1, 0),
            Some(Scan::Css) if resource.kind == Kind::Style => {
                (src.frame_level, src.import_level + 1)
            }
            Some(Scan::Css) => (src.frame_level, src.import_level),
            None => return,
        };
        let pages = src.wanted_by.clone();
        let too_deep = import_level > self.css_import_depth
            || (resource.kind == Kind::Document && frame_level > 0);
        for page in pages {
            if too_deep {
                self.stats.skipped_limit += 1;
                let event = TimelineEvent::SkippedLimit(resource.url.clone(), Limit::Depth);
                self.note(page, now, event);
            } else {
                self.enqueue(
                    now,
                    page,
                    resource.clone(),
                    fresh_in_cache,
                    frame_level,
                    import_level,
                );
            }
        }
    }

    /// A browser asks for `url`: whether it joins a prefetch. Call it for
    /// every browser GET that may be a page's subresource, before the cache
    /// lookup.
    pub fn on_demand(&mut self, now: Instant, url: &Url) -> Demand {
        let mut key = url.clone();
        key.set_fragment(None);
        let Some(&id) = self.by_url.get(&key) else {
            self.remember_demand(now, key);
            return Demand::Alone;
        };
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return Demand::Alone;
        };
        let owner = fetch.owner;
        match fetch.state {
            State::Queued => {
                fetch.state = State::Claimed;
                fetch.demanded = true;
                let scan = fetch.scan();
                self.stats.claimed += 1;
                self.note(owner, now, TimelineEvent::Claimed(id));
                Demand::Claimed { fetch: id, scan }
            }
            State::InFlight => {
                if !fetch.demanded {
                    fetch.demanded = true;
                    self.stats.used += 1;
                    self.actions.push_back(Action::Promote {
                        fetch: id,
                        urgency: DEMAND_URGENCY,
                    });
                    self.note(owner, now, TimelineEvent::Promoted(id));
                    self.release_slot(now, id);
                }
                Demand::Join(id)
            }
            State::Done => {
                if !fetch.demanded {
                    fetch.demanded = true;
                    self.stats.used += 1;
                    self.note(owner, now, TimelineEvent::Used(id));
                }
                Demand::Prefetched(id)
            }
            State::Claimed => Demand::Alone,
        }
    }

    /// The response head of a prefetch arrived; `content_length` as
    /// announced. A prefetch that would pass its page's byte limit is
    /// cancelled (unless a browser asked for it).
    pub fn handle_head(&mut self, now: Instant, fetch: FetchId, content_length: Option<u64>) {
        if let Some(f) = self.fetches.get_mut(&fetch)
            && f.state == State::InFlight
        {
            f.announced = content_length;
            self.charge(now, fetch);
        }
    }

    /// `bytes` more body bytes of a prefetch arrived.
    pub fn handle_data(&mut self, now: Instant, fetch: FetchId, bytes: u64) {
        if let Some(f) = self.fetches.get_mut(&fetch)
            && matches!(f.state, State::InFlight | State::Claimed)
        {
            f.received += bytes;
            if f.state == State::InFlight {
                self.stats.bytes += bytes;
                self.charge(now, fetch);
            }
        }
    }

    /// A prefetch (or a claimed fetch) completed.
    pub fn handle_complete(&mut self, now: Instant, fetch: FetchId) {
        let Some(f) = self.fetches.get_mut(&fetch) else {
            return;
        };
        match f.state {
            State::InFlight => {
                f.state = State::Done;
                let (owner, received) = (f.owner, f.received);
                self.stats.completed += 1;
                self.note(owner, now, TimelineEvent::Completed(fetch, received));
                self.release_slot(now, fetch);
                self.forget_if_unwanted(fetch);
            }
            State::Claimed => {
                // Its scan results are in; it stays known (as claimed) so a
                // later page does not prefetch it again.
            }
            State::Queued | State::Done => {}
        }
    }

    /// A prefetch (or a claimed fetch) failed: no response, or a body cut
    /// short. Its URL may be tried again for a later page.
    pub fn handle_failed(&mut self, now: Instant, fetch: FetchId) {
        let Some(f) = self.fetches.get(&fetch) else {
            return;
        };
        if f.state == State::InFlight {
            let owner = f.owner;
            self.stats.failed += 1;
            if !f.demanded {
                self.stats.wasted_bytes += f.received;
            }
            self.note(owner, now, TimelineEvent::Failed(fetch));
            self.release_slot(now, fetch);
        }
        self.remove_fetch(fetch);
    }

    /// A prefetch found the cache already fresh when it started: nothing
    /// went upstream.
    pub fn handle_fresh(&mut self, now: Instant, fetch: FetchId) {
        if let Some(f) = self.fetches.get_mut(&fetch)
            && f.state == State::InFlight
        {
            f.state = State::Done;
            let owner = f.owner;
            self.stats.found_fresh += 1;
            self.note(owner, now, TimelineEvent::FoundFresh(fetch));
            self.release_slot(now, fetch);
            self.forget_if_unwanted(fetch);
        }
    }

    /// The browser abandoned the page (it closed the connection before the
    /// HTML was whole, or navigated away): its prefetches that nothing else
    /// wants are dropped or cancelled.
    pub fn page_abandoned(&mut self, now: Instant, page: PageId) {
        self.end_page(now, page, PageEnd::Abandoned);
    }

    /// The browser closed `connection`: pages whose HTML it had not received
    /// whole are abandoned.
    pub fn connection_closed(&mut self, now: Instant, connection: ConnectionId) {
        let mut abandoned: Vec<PageId> = self
            .pages
            .iter()
            .filter(|(_, p)| p.connection == connection && !p.html_ended)
            .map(|(id, _)| *id)
            .collect();
        abandoned.sort_unstable();
        for page in abandoned {
            self.end_page(now, page, PageEnd::Abandoned);
        }
    }

    /// Time passed: pages past their lifetime leave tracking.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut expired: Vec<PageId> = self
            .pages
            .iter()
            .filter(|(_, p)| p.opened + self.page_lifetime <= now)
            .map(|(id, _)| *id)
            .collect();
        expired.sort_unstable();
        for page in expired {
            self.end_page(now, page, PageEnd::Expired);
        }
        while let Some((at, _)) = self.recent_demands.front()
            && *at + self.page_lifetime <= now
        {
            if let Some((at, url)) = self.recent_demands.pop_front()
                && self.recent_demand_set.get(&url) == Some(&at)
            {
                self.recent_demand_set.remove(&url);
            }
        }
    }

    /// Forgets what the queue knows was fetched of every URL `purged` says
    /// (browser requests, and prefetches that are done or that a browser
    /// claimed), so that the next page that names them prefetches them again:
    /// called when the cache was purged of them, which is what made a past
    /// fetch a reason not to fetch. Queued and in-flight prefetches stay (what
    /// they bring is stored after the purge). Returns how many URLs were
    /// forgotten.
    pub fn forget_urls(&mut self, purged: impl Fn(&str) -> bool) -> usize {
        let before = self.recent_demand_set.len() + self.by_url.len();
        self.recent_demand_set
            .retain(|url, _| !purged(url.as_str()));
        // Their entries in `recent_demands` no longer match the set, which
        // is how expiry tells a stale entry from a live one.
        let fetches = &self.fetches;
        self.by_url.retain(|url, id| {
            let fetched = fetches
                .get(id)
                .is_none_or(|f| matches!(f.state, State::Done | State::Claimed));
            !(fetched && purged(url.as_str()))
        });
        // A fetch left out of `by_url` stays with its pages until they end;
        // `remove_fetch` only unlinks a URL that still points at it.
        before - self.recent_demand_set.len() - self.by_url.len()
    }

    /// When [`PrefetchQueue::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pages
            .values()
            .map(|p| p.opened + self.page_lifetime)
            .min()
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Counters since start.
    pub fn stats(&self) -> PrefetchStats {
        self.stats
    }

    /// A tracked page's timeline so far.
    /// The last [`MAX_RECENT_PAGES`] pages opened, newest first, with what
    /// became of their prefetches.
    pub fn recent_pages(&self, now: Instant) -> Vec<RecentPage> {
        self.recent
            .iter()
            .rev()
            .map(|entry| {
                let (state, outcome) = match (entry.ended, self.pages.get(&entry.id)) {
                    (Some((PageEnd::Abandoned, outcome)), _) => (PageState::Abandoned, outcome),
                    (Some((PageEnd::Expired, outcome)), _) => (PageState::Expired, outcome),
                    (None, Some(page)) if page.html_ended => (PageState::Loaded, page.outcome),
                    (None, Some(page)) => (PageState::Loading, page.outcome),
                    // Not reachable: a page leaves tracking through end_page.
                    (None, None) => (PageState::Expired, PageOutcome::default()),
                };
                RecentPage {
                    url: entry.url.clone(),
                    age_ms: u64::try_from(now.saturating_duration_since(entry.opened).as_millis())
                        .unwrap_or(u64::MAX),
                    state,
                    outcome,
                }
            })
            .collect()
    }

    /// The timeline of `page` while it is tracked.
    pub fn timeline(&self, page: PageId) -> Option<&[TimelineEntry]> {
        self.pages.get(&page).map(|p| p.timeline.as_slice())
    }

    /// Pages tracked.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Fetches known (queued, in flight, completed or claimed, for tracked
    /// pages).
    pub fn fetches(&self) -> usize {
        self.fetches.len()
    }

    fn enqueue(
        &mut self,
        now: Instant,
        page: PageId,
        mut resource: Resource,
        fresh_in_cache: bool,
        frame_level: u32,
        import_level: u32,
    ) {
        let Some(p) = self.pages.get(&page) else {
            return;
        };
        resource.url.set_fragment(None);
        if let Some(&id) = self.by_url.get(&resource.url)
            && let Some(fetch) = self.fetches.get_mut(&id)
        {
            if !fetch.wanted_by.contains(&page) {
                fetch.wanted_by.push(page);
                if let Some(p) = self.pages.get_mut(&page) {
                    p.fetches.push(id);
                }
                self.note(page, now, TimelineEvent::Shared(id, resource.url));
            }
            return;
        }
        let url = resource.url.clone();
        if fresh_in_cache {
            self.stats.skipped_fresh += 1;
            self.note(page, now, TimelineEvent::SkippedFresh(url));
            return;
        }
        if self.recent_demand_set.contains_key(&url) {
            self.stats.skipped_demanded += 1;
            self.note(page, now, TimelineEvent::SkippedDemanded(url));
            return;
        }
        let limit = if p.accepted >= self.max_per_page {
            Some(Limit::Count)
        } else if p.bytes >= self.max_bytes_per_page {
            Some(Limit::Bytes)
        } else {
            None
        };
        if let Some(limit) = limit {
            self.stats.skipped_limit += 1;
            self.note(page, now, TimelineEvent::SkippedLimit(url, limit));
            return;
        }
        self.next_fetch += 1;
        let id = FetchId(self.next_fetch);
        let origin = resource.url.origin().ascii_serialization();
        self.fetches.insert(
            id,
            Fetch {
                resource: resource.clone(),
                origin: origin.clone(),
                owner: page,
                wanted_by: vec![page],
                state: State::Queued,
                demanded: false,
                holds_slot: false,
                frame_level,
                import_level,
                announced: None,
                received: 0,
                charged: 0,
            },
        );
        self.by_url.insert(url, id);
        if let Some(p) = self.pages.get_mut(&page) {
            p.accepted += 1;
            p.fetches.push(id);
        }
        self.note(page, now, TimelineEvent::Queued(id, resource));
        self.waiting
            .entry(origin.clone())
            .or_default()
            .push_back(id);
        self.pump(now, &origin);
    }

    /// Starts what the origin's limit allows, in order.
    fn pump(&mut self, now: Instant, origin: &str) {
        loop {
            let busy = self.in_flight.get(origin).copied().unwrap_or(0);
            if busy >= self.max_concurrent_per_origin {
                return;
            }
            let Some(queue) = self.waiting.get_mut(origin) else {
                return;
            };
            let Some(id) = queue.pop_front() else {
                self.waiting.remove(origin);
                return;
            };
            let Some(fetch) = self.fetches.get(&id) else {
                continue;
            };
            if fetch.state != State::Queued {
                continue;
            }
            let owner = fetch.owner;
            let over_budget = match self.pages.get(&owner) {
                Some(page) => page.bytes >= self.max_bytes_per_page,
                None => {
                    // Unreachable: a page's queued fetches leave with it.
                    self.stats.dropped += 1;
                    self.remove_fetch(id);
                    continue;
                }
            };
            if over_budget {
                let url = fetch.resource.url.clone();
                self.stats.dropped += 1;
                self.stats.skipped_limit += 1;
                self.note(owner, now, TimelineEvent::SkippedLimit(url, Limit::Bytes));
                self.remove_fetch(id);
                continue;
            }
            let Some(fetch) = self.fetches.get_mut(&id) else {
                continue;
            };
            fetch.state = State::InFlight;
            fetch.holds_slot = true;
            *self.in_flight.entry(origin.to_owned()).or_default() += 1;
            self.stats.issued += 1;
            let action = Action::Start {
                fetch: id,
                page: owner,
                resource: fetch.resource.clone(),
                urgency: PREFETCH_URGENCY,
                scan: fetch.scan(),
            };
            self.actions.push_back(action);
            self.note(owner, now, TimelineEvent::Started(id));
        }
    }

    /// Charges what a prefetch in flight is known to cost to its owner, and
    /// cancels it if that passes the owner's limit.
    fn charge(&mut self, now: Instant, id: FetchId) {
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return;
        };
        let cost = fetch.announced.unwrap_or(0).max(fetch.received);
        let delta = cost.saturating_sub(fetch.charged);
        fetch.charged = fetch.charged.max(cost);
        let (owner, demanded) = (fetch.owner, fetch.demanded);
        let Some(page) = self.pages.get_mut(&owner) else {
            return;
        };
        page.bytes += delta;
        if page.bytes > self.max_bytes_per_page && !demanded {
            self.stats.cancelled += 1;
            self.note(
                owner,
                now,
                TimelineEvent::Cancelled(id, CancelReason::Bytes),
            );
            self.cancel(now, id);
        }
    }

    /// Cancels a prefetch in flight: its bytes so far are wasted, and only
    /// they stay charged to its page.
    fn cancel(&mut self, now: Instant, id: FetchId) {
        if let Some(fetch) = self.fetches.get(&id) {
            self.stats.wasted_bytes += fetch.received;
            let refund = fetch.charged.saturating_sub(fetch.received);
            if let Some(page) = self.pages.get_mut(&fetch.owner) {
                page.bytes = page.bytes.saturating_sub(refund);
            }
        }
        self.actions.push_back(Action::Cancel { fetch: id });
        self.release_slot(now, id);
        self.remove_fetch(id);
    }

    /// Gives back the origin slot a prefetch holds, and starts what waits.
    fn release_slot(&mut self, now: Instant, id: FetchId) {
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return;
        };
        if !fetch.holds_slot {
            return;
        }
        fetch.holds_slot = false;
        let origin = fetch.origin.clone();
        if let Some(n) = self.in_flight.get_mut(&origin) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.in_flight.remove(&origin);
            }
        }
        self.pump(now, &origin);
    }

    /// Forgets a finished fetch once no page wants it.
    fn forget_if_unwanted(&mut self, id: FetchId) {
        let Some(fetch) = self.fetches.get(&id) else {
            return;
        };
        if fetch.wanted_by.is_empty() {
            if !fetch.demanded {
                self.stats.wasted_bytes += fetch.received;
            }
            self.remove_fetch(id);
        }
    }

    fn remove_fetch(&mut self, id: FetchId) {
        if let Some(fetch) = self.fetches.remove(&id)
            && self.by_url.get(&fetch.resource.url) == Some(&id)
        {
            self.by_url.remove(&fetch.resource.url);
        }
    }

    fn end_page(&mut self, now: Instant, id: PageId, why: PageEnd) {
        if !self.pages.contains_key(&id) {
            return;
        }
        self.note(id, now, TimelineEvent::Ended(why));
        let Some(page) = self.pages.remove(&id) else {
            return;
        };
        let mut unwanted_in_flight = Vec::new();
        let mut outcome = page.outcome;
        for &fetch_id in &page.fetches {
            let Some(fetch) = self.fetches.get_mut(&fetch_id) else {
                continue;
            };
            fetch.wanted_by.retain(|p| *p != id);
            if let Some(&next) = fetch.wanted_by.first() {
                fetch.owner = next;
                continue;
            }
            let wasted = match fetch.state {
                State::InFlight => !fetch.demanded,
                State::Done => !fetch.demanded && fetch.received > 0,
                State::Queued | State::Claimed => false,
            };
            outcome.wasted += u32::from(wasted);
            match (fetch.state, fetch.demanded) {
                (State::Queued, _) => {
                    self.stats.dropped += 1;
                    self.remove_fetch(fetch_id);
                }
                (State::InFlight, false) => unwanted_in_flight.push(fetch_id),
                // A browser is reading it: let it finish, then forget it.
                (State::InFlight, true) => {}
                (State::Done, _) => self.forget_if_unwanted(fetch_id),
                (State::Claimed, _) => self.remove_fetch(fetch_id),
            }
        }
        // Cancelled after the queued ones are gone, so that the slots they
        // free start other pages' prefetches, not this page's.
        for fetch_id in unwanted_in_flight {
            self.stats.cancelled += 1;
            self.cancel(now, fetch_id);
        }
        // Origins whose queue is not pumped again would keep the ids of the
        // dropped and claimed entries.
        let fetches = &self.fetches;
        self.waiting.retain(|_, queue| {
            queue.retain(|id| fetches.get(id).is_some_and(|f| f.state == State::Queued));
            !queue.is_empty()
        });
        if let Some(entry) = self.recent.iter_mut().find(|e| e.id == id) {
            entry.ended = Some((why, outcome));
        }
        log_timeline(id, &page);
    }

    fn remember_demand(&mut self, now: Instant, url: Url) {
        if self.recent_demands.len() >= MAX_RECENT_DEMANDS
            && let Some((at, old)) = self.recent_demands.pop_front()
            && self.recent_demand_set.get(&old) == Some(&at)
        {
            self.recent_demand_set.remove(&old);
        }
        self.recent_demand_set.insert(url.clone(), now);
        self.recent_demands.push_back((now, url));
    }

    fn note(&mut self, page: PageId, now: Instant, event: TimelineEvent) {
        let Some(p) = self.pages.get_mut(&page) else {
            return;
        };
        match event {
            TimelineEvent::Started(_) => p.outcome.issued += 1,
            TimelineEvent::Promoted(_) | TimelineEvent::Used(_) => p.outcome.used += 1,
            TimelineEvent::Claimed(_) => p.outcome.claimed += 1,
            TimelineEvent::Failed(_) => p.outcome.failed += 1,
            TimelineEvent::Cancelled(..) => p.outcome.wasted += 1,
            _ => {}
        }
        if p.timeline.len() >= MAX_TIMELINE_ENTRIES {
            p.timeline_overflow += 1;
            return;
        }
        p.timeline.push(TimelineEntry {
            at: now.saturating_duration_since(p.opened),
            event,
        });
    }
}

/// The page's timeline as one debug log record.
fn log_timeline(id: PageId, page: &Page) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let mut text = String::new();
    for entry in &page.timeline {
        use std::fmt::Write as _;
        let _ = writeln!(text, "  +{:>6} ms {:?}", entry.at.as_millis(), entry.event);
    }
    tracing::debug!(
        page = %id,
        entries = page.timeline.len(),
        not_kept = page.timeline_overflow,
        bytes = page.bytes,
        "prefetch timeline\n{text}"
    );
}
