//! The learned push manifest: what gateways asked for within a few seconds
//! after a page (fonts, images a script inserts, `fetch()`), kept per page
//! with a confidence and aged out, so that what only JavaScript finds is
//! pushed from the second visit on (issue 31, "What to push", learned). It
//! complements [`crate::closure`], which finds what the files name.
//!
//! Sans-I/O: the driver feeds every answered request's [`RequestFacts`] to
//! [`Manifest::handle_request`] with the time (or turns them into an
//! [`Observation`] first, outside a shared manifest's lock: that is where the
//! URLs are parsed), and asks
//! [`Manifest::learned`] what to push with a page. It never reads the clock,
//! never sends anything and never decides the push order or the budgets.
//!
//! ```text
//!  handle_request(facts, now)
//!    │ GET, 2xx, page (document or HTML) ──► a load of (origin, target):
//!    │ (or a 304 of a page already known)     loads += 1, last_load = now
//!    │ else: no Cookie/Authorization, GET, 200, shared-cacheable,
//!    │ a plain origin-form target, Sec-Fetch-Dest not a navigation or media,
//!    │ Referer on the request's own origin naming a page already loaded,
//!    │ now - last_load ≤ window
//!    ▼
//!  the page's entry for the target: one more ask in the current load
//!    (a new target takes a free place, else the place of the weakest
//!     entry not learned; learned entries are never pushed out)
//!
//!  learned(scheme, host, page, now) ──► entries with confidence ≥ threshold,
//!    at least one finished load behind them, the page loaded ≥ min_loads
//!    times, not aged out; first-seen order
//! ```
//!
//! **Confidence.** Per entry, the asks per load of the page, counted since
//! the entry was first seen and weighted down by `1 - 1/learn_memory_loads`
//! per load (an exponentially weighted count: the last `learn_memory_loads`
//! loads or so decide), at most 1. Asks are counted, not loads with an ask:
//! two browsers loading a page at once make two loads and two asks whichever
//! load each ask lands in, so concurrency does not dilute the fraction. A
//! load still within its window that has not asked yet is left out (its
//! asks may still come). A load for which the origin pushed the entry, or
//! skipped it because the gateway holds it ([`Manifest::handle_pushed`]),
//! and that did not ask for it counts neither way: the gateway had no
//! reason to ask, which says nothing about the page.
//!
//! **Pages.** A page is a GET answered 2xx with `Sec-Fetch-Dest: document`
//! (or `iframe`, `frame`), or without `Sec-Fetch-Dest` with an HTML
//! Content-Type; a 304 of a page already known is a load of it too. An HTML
//! fragment a script fetches (`Sec-Fetch-Dest: empty`) is an ask, and a
//! page's fetch of its own URL is nothing. Pages are keyed by origin and
//! target as the URL parser writes them (`/a/../b` is `/b`, the default
//! port is no port), so that a Referer naming one compares equal.
//!
//! **Attribution.** A request is the page's when its Referer is the page's
//! URL on the request's own scheme, host and port, and it comes within
//! `learn_window_ms` of the page's last load. A Referer naming a page never
//! loaded here, or another origin, is ignored; so is every request with
//! credentials, a method other than GET, a status other than 200 (a 206 is a
//! range, a 304 says nothing of its cacheability), or a response not
//! shared-cacheable ([`shared_cacheable`]). A request whose
//! `Sec-Fetch-Dest` is a navigation (`document`, `iframe`, `frame`,
//! `embed`, `object`), media (`audio`, `video`, `track`: a browser asks for
//! ranges when it plays), a manifest, a service worker or a report is not an
//! entry. Concurrent loads of one page share their asks: an ask lands in the
//! page's latest load. A page whose Referrer-Policy sends no path teaches
//! nothing.
//!
//! **Aging.** An entry goes when `learn_forget_loads` loads in a row did not
//! ask for it, or it was not asked for `learn_forget_after_ms`. A page goes
//! with the least recently used when `learn_max_pages` pages or
//! `learn_max_bytes` bytes are held.
//!
//! **Hostile gateways.** A gateway can make any URL this origin answers 200
//! and shared-cacheable look needed by a page, by loading the page and
//! asking for it; that costs pushed bytes, never correctness: the push is
//! the origin's own public answer for the page's host. The bounds hold
//! whatever it sends: `learn_max_entries` per page, targets of at most
//! [`MAX_TARGET_BYTES`], hosts of at most [`MAX_HOST_BYTES`], the page
//! count and the bytes charged (keys, entries and their targets, with the
//! map overheads, see [`ManifestStats::bytes`]). A flood of new targets for
//! one page only ever replaces entries that are not learned, weakest first:
//! an established entry stays.
//!
//! **Configuration** ([`LearnedConfig`], keys of the origin's `[push]`
//! table; durations in milliseconds):
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `learn` | `true` | learn at all (pushes still need `[push] enabled`) |
//! | `learn_window_ms` | 5000 | asks this long after a page's load are the page's |
//! | `learn_min_confidence` | 0.5 | least confidence pushed, 0 to 1 |
//! | `learn_min_loads` | 2 | loads of a page, the one being served included, before anything learned is pushed with it |
//! | `learn_max_pages` | 4096 | pages kept (least recently used goes) |
//! | `learn_max_entries` | 64 | entries per page |
//! | `learn_memory_loads` | 16 | loads that weigh in a confidence (the weighting's time constant) |
//! | `learn_forget_loads` | 32 | loads in a row without an ask before an entry goes |
//! | `learn_forget_after_ms` | 1800000 | time without an ask before an entry goes |
//! | `learn_max_bytes` | 16777216 | memory charged for all pages, bytes |
//!
//! Every call but [`Manifest::stats`] (O(pages)) costs O(entries of one
//! page) plus O(log pages) and the parsing of its URLs; share one
//! [`Manifest`] per origin behind a mutex. Call
//! [`Manifest::handle_request`] for a page when its response head is ready
//! (its subresources may be asked for while its body still streams), and
//! before [`Manifest::learned`] for it, so that the load being served counts
//! toward `learn_min_loads`.

use std::collections::{BTreeMap, HashMap};
use std::mem::size_of;
use std::time::{Duration, Instant};

use http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, COOKIE, HOST, SET_COOKIE, VARY};
use http::{HeaderMap, Method, StatusCode};
use http_semantics::RequestHead;
use page_resources::{Kind, is_html};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::closure::PageScheme;

/// Longest Host value, bytes, a page is learned for: a DNS name (253), a
/// colon and a port.
pub const MAX_HOST_BYTES: usize = crate::closure::MAX_HOST_BYTES;
/// Longest target, bytes, kept as a page or an entry; a longer one is
/// ignored.
pub const MAX_TARGET_BYTES: usize = crate::closure::MAX_TARGET_BYTES;
/// Most asks of one entry counted in one load: a script that polls a URL
/// every second makes it needed, not more than needed.
const MAX_ASKS_PER_LOAD: u16 = 4;
/// Bytes charged per page beyond its strings and entries: the map and LRU
/// index slots (each with its hash or tree overhead), rounded up.
const PAGE_OVERHEAD_BYTES: usize = 2 * size_of::<PageKey>() + size_of::<Page>() + 64;
/// Bytes charged per entry beyond its target.
const ENTRY_OVERHEAD_BYTES: usize = size_of::<Entry>();

/// The manifest's settings: keys of the origin's `[push]` table (the module
/// doc lists them with their defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LearnedConfig {
    /// Learn at all.
    pub learn: bool,
    /// Asks this long after a page's last load are the page's.
    #[serde(with = "gateway_transport::duration_ms")]
    pub learn_window_ms: Duration,
    /// Least confidence of an entry pushed, 0 to 1.
    pub learn_min_confidence: f32,
    /// Loads of a page, the one being served included, before anything
    /// learned is pushed with it.
    pub learn_min_loads: u32,
    /// Pages kept.
    pub learn_max_pages: usize,
    /// Entries kept per page.
    pub learn_max_entries: usize,
    /// Loads that weigh in a confidence: each load weighs `1 - 1/n` of the
    /// one after it.
    pub learn_memory_loads: u32,
    /// Loads in a row without an ask before an entry goes.
    pub learn_forget_loads: u32,
    /// Time without an ask before an entry goes.
    #[serde(with = "gateway_transport::duration_ms")]
    pub learn_forget_after_ms: Duration,
    /// Memory charged for all pages, bytes.
    pub learn_max_bytes: usize,
}

impl Default for LearnedConfig {
    fn default() -> Self {
        Self {
            learn: true,
            learn_window_ms: Duration::from_secs(5),
            learn_min_confidence: 0.5,
            learn_min_loads: 2,
            learn_max_pages: 4096,
            learn_max_entries: 64,
            learn_memory_loads: 16,
            learn_forget_loads: 32,
            learn_forget_after_ms: Duration::from_secs(30 * 60),
            learn_max_bytes: 16 << 20,
        }
    }
}

/// Why a [`LearnedConfig`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnedConfigError {
    /// A value is out of range; `key` is relative to the `[push]` table.
    #[error("invalid `{key}`: {reason}")]
    Invalid {
        /// The key inside the table, e.g. `learn_window_ms`.
        key: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Least `learn_max_bytes`: one page with every entry at its longest fits.
const fn min_bytes(max_entries: usize) -> usize {
    PAGE_OVERHEAD_BYTES
        + 2 * (MAX_HOST_BYTES + 8 + MAX_TARGET_BYTES)
        + max_entries * (ENTRY_OVERHEAD_BYTES + MAX_TARGET_BYTES)
}

impl LearnedConfig {
    /// Rejects values that cannot work, naming the key.
    pub fn validate(&self) -> Result<(), LearnedConfigError> {
        let bad = |key, reason| Err(LearnedConfigError::Invalid { key, reason });
        if self.learn_window_ms.is_zero() || self.learn_window_ms > Duration::from_secs(60) {
            return bad("learn_window_ms", "must be 1 to 60000");
        }
        if !(self.learn_min_confidence > 0.0 && self.learn_min_confidence <= 1.0) {
            return bad("learn_min_confidence", "must be above 0 and at most 1");
        }
        if self.learn_min_loads < 2 {
            return bad(
                "learn_min_loads",
                "must be at least 2 (one load to learn from)",
            );
        }
        if self.learn_max_pages == 0 {
            return bad("learn_max_pages", "must be at least 1");
        }
        if !(1..=1024).contains(&self.learn_max_entries) {
            return bad("learn_max_entries", "must be 1 to 1024");
        }
        if !(1..=1024).contains(&self.learn_memory_loads) {
            return bad("learn_memory_loads", "must be 1 to 1024");
        }
        if self.learn_forget_loads == 0 {
            return bad("learn_forget_loads", "must be at least 1");
        }
        if self.learn_forget_after_ms < self.learn_window_ms {
            return bad("learn_forget_after_ms", "must be at least learn_window_ms");
        }
        if self.learn_max_bytes < min_bytes(self.learn_max_entries) {
            return bad(
                "learn_max_bytes",
                "must hold one page with learn_max_entries entries of the longest target",
            );
        }
        Ok(())
    }
}

/// What the manifest needs of one answered request. [`RequestFacts::new`]
/// takes them from the request and response heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// The scheme the request came over: `http` from a gateway, `https`
    /// inside a TLS tunnel the origin terminates.
    pub scheme: PageScheme,
    /// The request's Host.
    pub host: &'a str,
    /// The request target, origin-form.
    pub target: &'a str,
    /// Whether the method is GET.
    pub get: bool,
    /// The response's status.
    pub status: StatusCode,
    /// The Referer the browser sent, as the gateway forwarded it.
    pub referer: Option<&'a str>,
    /// The browser's `Sec-Fetch-Dest`.
    pub fetch_dest: Option<&'a str>,
    /// Whether the request carried Cookie or Authorization.
    pub credentials: bool,
    /// Whether the response's Content-Type is HTML.
    pub html: bool,
    /// Whether a shared cache may store the response ([`shared_cacheable`]).
    pub shared_cacheable: bool,
}

impl<'a> RequestFacts<'a> {
    /// The facts of `request` answered with `status` and `response`'s
    /// fields. `None` without a Host that is visible ASCII.
    pub fn new(
        scheme: PageScheme,
        request: &'a RequestHead,
        status: StatusCode,
        response: &HeaderMap,
    ) -> Option<Self> {
        let text = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
        Some(Self {
            scheme,
            host: text(HOST.as_str())?,
            target: &request.target,
            get: request.method == Method::GET,
            status,
            referer: text(http::header::REFERER.as_str()),
            fetch_dest: text("sec-fetch-dest"),
            credentials: request.headers.contains_key(COOKIE)
                || request.headers.contains_key(AUTHORIZATION),
            html: is_html(response.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())),
            shared_cacheable: shared_cacheable(response),
        })
    }
}

/// Whether a shared cache may keep a response with these fields for anyone
/// (RFC 9111 §3, §5.2.2): no `no-store` or `private` directive, no
/// Set-Cookie, no `Vary` on `*`, Cookie or Authorization. The directives are
/// read leniently toward "no": a comma inside a quoted argument may make a
/// directive name appear that is not there, never hide one that is.
pub fn shared_cacheable(response: &HeaderMap) -> bool {
    if response.contains_key(SET_COOKIE) {
        return false;
    }
    let names = |field| {
        response
            .get_all(field)
            .into_iter()
            .flat_map(|value| value.as_bytes().split(|&b| b == b','))
            .map(|item| {
                let name = item.split(|&b| b == b'=').next().unwrap_or_default();
                name.trim_ascii().to_ascii_lowercase()
            })
            .collect::<Vec<_>>()
    };
    let refused = |names: &[Vec<u8>], bad: &[&[u8]]| names.iter().any(|n| bad.contains(&&n[..]));
    let unreadable = |field| {
        response
            .get_all(field)
            .into_iter()
            .any(|v| v.to_str().is_err())
    };
    !(unreadable(CACHE_CONTROL)
        || unreadable(VARY)
        || refused(&names(CACHE_CONTROL), &[b"no-store", b"private"])
        || refused(&names(VARY), &[b"*", b"cookie", b"authorization"]))
}

/// One entry [`Manifest::learned`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedEntry {
    /// Origin-form: `/path?query`, on the page's host, as the browser asked.
    pub target: String,
    /// Asks per recent load of the page, 0 to 1.
    pub confidence: f32,
    /// What the browser asked it as (its `Sec-Fetch-Dest`), when it said:
    /// the `Accept` of a push.
    pub kind: Option<Kind>,
}

/// What the manifest holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManifestStats {
    /// Pages kept.
    pub pages: usize,
    /// Entries of all pages.
    pub entries: usize,
    /// Bytes charged: the pages' keys (twice: the map and the LRU index),
    /// their targets, entry structs and map slots. The allocator's own
    /// rounding is not in it.
    pub bytes: usize,
}

/// The learned manifests of every page of one origin.
#[derive(Debug)]
pub struct Manifest {
    config: LearnedConfig,
    /// `1 - 1/learn_memory_loads`: the weight of a load against the next.
    decay: f32,
    pages: HashMap<PageKey, Page>,
    /// Least recently used first: `Page::used` → its key.
    lru: BTreeMap<u64, PageKey>,
    /// Counts page touches; a page's `used` is the count at its last touch.
    clock: u64,
    /// Bytes charged, as [`ManifestStats::bytes`].
    bytes: usize,
}

/// A page: its origin (`scheme://host[:port]`, the port only when not the
/// scheme's default, lower-case) and its target as the URL parser writes it
/// (dot segments resolved, percent-encoding normalised), so that a Referer
/// naming it compares equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PageKey {
    origin: Box<str>,
    target: Box<str>,
}

impl PageKey {
    fn charged(&self) -> usize {
        self.origin.len() + self.target.len()
    }
}

#[derive(Debug)]
struct Page {
    /// Loads seen; the current load's number.
    loads: u64,
    last_load: Instant,
    used: u64,
    /// In first-seen order.
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    target: Box<str>,
    kind: Option<Kind>,
    /// Weighted asks in the loads before `load`.
    asks: f32,
    /// Weighted loads before `load` that count for this entry.
    loads: f32,
    /// The load `asked` and `pushed` are of.
    load: u64,
    /// Asks in load `load`.
    asked: u16,
    /// The origin pushed it for load `load`.
    pushed: bool,
    /// Finished loads in a row that counted and did not ask.
    misses: u32,
    last_asked: Instant,
}

/// An entry's figures as of a page's current load.
#[derive(Debug, Clone, Copy)]
struct Figures {
    asks: f32,
    loads: f32,
    asked: u16,
    pushed: bool,
    misses: u32,
}

impl Entry {
    /// The figures once every load of the page up to `current` is taken in.
    fn figures(&self, current: u64, decay: f32) -> Figures {
        let mut f = Figures {
            asks: self.asks,
            loads: self.loads,
            asked: self.asked,
            pushed: self.pushed,
            misses: self.misses,
        };
        if current <= self.load {
            return f;
        }
        if f.asked > 0 || !f.pushed {
            f.asks = f.asks * decay + f32::from(f.asked.min(MAX_ASKS_PER_LOAD));
            f.loads = f.loads * decay + 1.0;
            f.misses = if f.asked > 0 {
                0
            } else {
                f.misses.saturating_add(1)
            };
        }
        // Loads in between heard nothing of it: misses.
        let silent = current - self.load - 1;
        if silent > 0 {
            let weight = decay.powi(i32::try_from(silent).unwrap_or(i32::MAX));
            f.asks *= weight;
            // Each silent load adds 1, weighted: Σ decay^i for i < silent.
            f.loads = f.loads * weight
                + if decay < 1.0 {
                    (1.0 - weight) / (1.0 - decay)
                } else {
                    silent as f32
                };
            f.misses = f
                .misses
                .saturating_add(u32::try_from(silent).unwrap_or(u32::MAX));
        }
        f.asked = 0;
        f.pushed = false;
        f
    }

    fn catch_up(&mut self, current: u64, decay: f32) {
        let f = self.figures(current, decay);
        self.asks = f.asks;
        self.loads = f.loads;
        self.asked = f.asked;
        self.pushed = f.pushed;
        self.misses = f.misses;
        self.load = self.load.max(current);
    }
}

impl Figures {
    /// Asks per load; the current load counts once it asked, or once its
    /// window is over and it was not pushed.
    fn confidence(&self, window_open: bool, decay: f32) -> f32 {
        let (asks, loads) = if self.asked > 0 || !(window_open || self.pushed) {
            (
                self.asks * decay + f32::from(self.asked.min(MAX_ASKS_PER_LOAD)),
                self.loads * decay + 1.0,
            )
        } else {
            (self.asks, self.loads)
        };
        if loads <= 0.0 {
            0.0
        } else {
            (asks / loads).min(1.0)
        }
    }
}

/// What one request is to the manifest, worked out from its
/// [`RequestFacts`] alone: the Host and the Referer parsed, the rules on
/// method, status, credentials and cacheability applied. Make it before
/// taking a shared manifest's lock, and hand it to
/// [`Manifest::handle_observation`] under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation(Role);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    /// A page's load.
    Page(PageKey),
    /// A 304: a load if the target is a page already known.
    Reload(PageKey),
    /// An ask of `target` after a load of `page`, if `page` was loaded.
    Ask {
        page: PageKey,
        target: Box<str>,
        kind: Option<Kind>,
    },
}

impl Observation {
    /// What `facts` is: a page's load, an ask for a page, or nothing to
    /// learn from (`None`).
    pub fn new(facts: &RequestFacts<'_>) -> Option<Self> {
        role(facts).map(Observation)
    }
}

impl Manifest {
    /// An empty manifest. `config` should have passed
    /// [`LearnedConfig::validate`]; out-of-range values are clamped.
    pub fn new(config: LearnedConfig) -> Self {
        let memory = config.learn_memory_loads.max(1);
        Self {
            decay: 1.0 - 1.0 / memory as f32,
            config,
            pages: HashMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
            bytes: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LearnedConfig {
        &self.config
    }

    /// What is held.
    pub fn stats(&self) -> ManifestStats {
        ManifestStats {
            pages: self.pages.len(),
            entries: self.pages.values().map(|p| p.entries.len()).sum(),
            bytes: self.bytes,
        }
    }

    /// Takes in one answered request at `now`: a page's load, an ask of a
    /// page loaded within the window, or nothing.
    pub fn handle_request(&mut self, facts: &RequestFacts<'_>, now: Instant) {
        if let Some(observation) = self.config.learn.then(|| Observation::new(facts)).flatten() {
            self.handle_observation(observation, now);
        }
    }

    /// [`Manifest::handle_request`] with the request's [`Observation`]
    /// made beforehand.
    pub fn handle_observation(&mut self, observation: Observation, now: Instant) {
        if !self.config.learn {
            return;
        }
        match observation.0 {
            Role::Page(key) => self.handle_load(key, now),
            Role::Reload(key) => self.handle_reload(key, now),
            Role::Ask { page, target, kind } => self.handle_ask(&page, &target, kind, now),
        }
    }

    /// The origin pushed `target` with the current load of `page` (on
    /// `scheme` and `host`), or skipped it because the gateway holds it
    /// fresh: unless that load asks for it anyway, the load counts neither
    /// for nor against it (the gateway had no reason to ask).
    pub fn handle_pushed(&mut self, scheme: PageScheme, host: &str, page: &str, target: &str) {
        let Some(key) = page_key(scheme, host, page) else {
            return;
        };
        let decay = self.decay;
        let Some(page) = self.pages.get_mut(&key) else {
            return;
        };
        let current = page.loads;
        if let Some(entry) = page.entries.iter_mut().find(|e| &*e.target == target) {
            entry.catch_up(current, decay);
            entry.pushed = true;
        }
    }

    /// What to push with `page` (origin-form, as requested) on `scheme` and
    /// `host` at `now`: the entries whose confidence is at least
    /// `learn_min_confidence`, with at least one finished load behind them,
    /// not aged out, once the page was loaded `learn_min_loads` times; in
    /// the order they were first asked for.
    pub fn learned(
        &self,
        scheme: PageScheme,
        host: &str,
        page: &str,
        now: Instant,
    ) -> Vec<LearnedEntry> {
        if !self.config.learn {
            return Vec::new();
        }
        let Some(page) = page_key(scheme, host, page).and_then(|key| self.pages.get(&key)) else {
            return Vec::new();
        };
        if page.loads < u64::from(self.config.learn_min_loads) {
            return Vec::new();
        }
        let open = self.window_open(page, now);
        page.entries
            .iter()
            .filter_map(|entry| {
                let f = entry.figures(page.loads, self.decay);
                let confidence = f.confidence(open, self.decay);
                (self.is_learned(entry, &f, confidence, now)).then(|| LearnedEntry {
                    target: entry.target.to_string(),
                    confidence,
                    kind: entry.kind,
                })
            })
            .collect()
    }

    fn window_open(&self, page: &Page, now: Instant) -> bool {
        now.saturating_duration_since(page.last_load) <= self.config.learn_window_ms
    }

    fn is_learned(&self, entry: &Entry, f: &Figures, confidence: f32, now: Instant) -> bool {
        f.loads > 0.0 && confidence >= self.config.learn_min_confidence && !self.aged(entry, f, now)
    }

    fn aged(&self, entry: &Entry, f: &Figures, now: Instant) -> bool {
        f.misses >= self.config.learn_forget_loads
            || now.saturating_duration_since(entry.last_asked) > self.config.learn_forget_after_ms
    }

    fn handle_load(&mut self, key: PageKey, now: Instant) {
        self.clock += 1;
        let used = self.clock;
        if let Some(page) = self.pages.get_mut(&key) {
            self.lru.remove(&page.used);
            page.used = used;
            page.loads += 1;
            page.last_load = now;
            self.lru.insert(used, key);
            return;
        }
        let page = Page {
            loads: 1,
            last_load: now,
            used,
            entries: Vec::new(),
        };
        self.bytes += page_bytes(&key, &page);
        self.lru.insert(used, key.clone());
        self.pages.insert(key, page);
        self.make_room(used);
    }

    fn handle_reload(&mut self, key: PageKey, now: Instant) {
        if self.pages.contains_key(&key) {
            self.handle_load(key, now);
        }
    }

    fn handle_ask(&mut self, key: &PageKey, target: &str, kind: Option<Kind>, now: Instant) {
        let Some(page) = self.pages.get_mut(key) else {
            return;
        };
        let window = self.config.learn_window_ms;
        if now < page.last_load || now.saturating_duration_since(page.last_load) > window {
            return;
        }
        self.clock += 1;
        let used = self.clock;
        if let Some(key) = self.lru.remove(&page.used) {
            self.lru.insert(used, key);
        }
        page.used = used;
        let before = page_bytes(key, page);
        ask(&self.config, self.decay, page, target, kind, now);
        self.bytes = self.bytes - before + page_bytes(key, page);
        self.make_room(used);
    }

    /// Forgets the least recently used pages, never the one used at
    /// `keep`, until the page count and the bytes are within bounds.
    fn make_room(&mut self, keep: u64) {
        while self.pages.len() > self.config.learn_max_pages
            || self.bytes > self.config.learn_max_bytes
        {
            let Some((&used, _)) = self.lru.first_key_value() else {
                return;
            };
            if used == keep {
                return;
            }
            let Some(key) = self.lru.remove(&used) else {
                return;
            };
            if let Some(page) = self.pages.remove(&key) {
                self.bytes -= page_bytes(&key, &page);
            }
        }
    }
}

/// Bytes charged for a page: its key twice (the map's and the LRU
/// index's), its slots, its entries' places (whether used or not) and their
/// targets.
fn page_bytes(key: &PageKey, page: &Page) -> usize {
    PAGE_OVERHEAD_BYTES
        + 2 * key.charged()
        + page.entries.capacity() * ENTRY_OVERHEAD_BYTES
        + page.entries.iter().map(|e| e.target.len()).sum::<usize>()
}

/// Counts one ask of `target` in `page`'s current load: the entry's, or a
/// new entry in a free place or in the place of the weakest entry not
/// learned. Aged entries go first.
fn ask(
    config: &LearnedConfig,
    decay: f32,
    page: &mut Page,
    target: &str,
    kind: Option<Kind>,
    now: Instant,
) {
    let current = page.loads;
    for entry in &mut page.entries {
        entry.catch_up(current, decay);
    }
    if let Some(entry) = page.entries.iter_mut().find(|e| &*e.target == target) {
        entry.asked = entry.asked.saturating_add(1);
        entry.misses = 0;
        entry.last_asked = now;
        if entry.kind.is_none() {
            entry.kind = kind;
        }
        return;
    }
    page.entries.retain(|e| {
        e.misses < config.learn_forget_loads
            && now.saturating_duration_since(e.last_asked) <= config.learn_forget_after_ms
    });
    if page.entries.len() >= config.learn_max_entries {
        let open = now.saturating_duration_since(page.last_load) <= config.learn_window_ms;
        // Weakest: least confidence weighted by evidence (an entry without
        // a finished load has none), then the least recently asked.
        let victim = page
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let f = e.figures(current, decay);
                let confidence = f.confidence(open, decay);
                let learned = f.loads > 0.0 && confidence >= config.learn_min_confidence;
                (!learned).then_some((i, confidence * f.loads.min(1.0), e.last_asked))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.2.cmp(&b.2)))
            .map(|(i, _, _)| i);
        let Some(victim) = victim else {
            return;
        };
        page.entries.remove(victim);
    }
    if page.entries.len() == page.entries.capacity() {
        // Grows by doubling up to the bound, never past it.
        let want = (page.entries.capacity() * 2).clamp(4, config.learn_max_entries.max(1));
        page.entries.reserve_exact(want - page.entries.len());
    }
    page.entries.push(Entry {
        target: target.into(),
        kind,
        asks: 0.0,
        loads: 0.0,
        load: current,
        asked: 1,
        pushed: false,
        misses: 0,
        last_asked: now,
    });
}

/// Whether `facts` is a page's load, an ask for a page, or neither.
fn role(facts: &RequestFacts<'_>) -> Option<Role> {
    if !facts.get {
        return None;
    }
    let dest = facts.fetch_dest.map(str::to_ascii_lowercase);
    let navigation = matches!(dest.as_deref(), Some("document" | "iframe" | "frame"));
    if facts.status == StatusCode::NOT_MODIFIED && (navigation || dest.is_none()) {
        return page_key(facts.scheme, facts.host, facts.target).map(Role::Reload);
    }
    if !facts.status.is_success() {
        return None;
    }
    if navigation || (dest.is_none() && facts.html) {
        return page_key(facts.scheme, facts.host, facts.target).map(Role::Page);
    }
    if facts.credentials || facts.status != StatusCode::OK || !facts.shared_cacheable {
        return None;
    }
    let kind = match dest.as_deref() {
        None => None,
        Some(dest) => kind_of(dest)?,
    };
    if !plain_target(facts.target) {
        return None;
    }
    let origin = origin_of(facts.scheme, facts.host)?;
    let referer = Url::parse(facts.referer?).ok()?;
    if referer.origin() != origin.origin()
        || !referer.username().is_empty()
        || referer.password().is_some()
    {
        return None;
    }
    let page = key_of(&origin, &referer)?;
    if *page.target == *facts.target {
        // The page itself, fetched by its own script: nothing to push.
        return None;
    }
    Some(Role::Ask {
        page,
        target: facts.target.into(),
        kind,
    })
}

/// The kind hint for a `Sec-Fetch-Dest`, `None` for one that is never an
/// entry.
fn kind_of(dest: &str) -> Option<Option<Kind>> {
    Some(match dest {
        "image" => Some(Kind::Image),
        "script" | "worker" | "sharedworker" | "audioworklet" | "paintworklet" => {
            Some(Kind::Script)
        }
        "style" => Some(Kind::Style),
        "font" => Some(Kind::Font),
        "empty" | "xslt" => Some(Kind::Other),
        "document" | "iframe" | "frame" | "embed" | "object" | "audio" | "video" | "track"
        | "manifest" | "serviceworker" | "report" => return None,
        _ => None,
    })
}

/// An origin-form target a push can carry: `/`, not `//`, visible ASCII,
/// at most [`MAX_TARGET_BYTES`].
fn plain_target(target: &str) -> bool {
    target.starts_with('/')
        && !target.starts_with("//")
        && target.len() <= MAX_TARGET_BYTES
        && target.bytes().all(|b| b.is_ascii_graphic())
}

/// `scheme://host/` when `host` is a plain authority.
fn origin_of(scheme: PageScheme, host: &str) -> Option<Url> {
    if host.is_empty() || host.len() > MAX_HOST_BYTES || !host.bytes().all(|b| b.is_ascii_graphic())
    {
        return None;
    }
    let scheme = match scheme {
        PageScheme::Http => "http",
        PageScheme::Https => "https",
    };
    let origin = Url::parse(&format!("{scheme}://{host}/")).ok()?;
    let plain = origin.host().is_some()
        && origin.username().is_empty()
        && origin.password().is_none()
        && origin.path() == "/"
        && origin.query().is_none()
        && origin.fragment().is_none();
    plain.then_some(origin)
}

/// The key of the page at `url` on `origin`.
fn key_of(origin: &Url, url: &Url) -> Option<PageKey> {
    let path = url.path();
    let target = match url.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    (target.len() <= MAX_TARGET_BYTES).then(|| PageKey {
        origin: origin.origin().ascii_serialization().into(),
        target: target.into(),
    })
}

/// The key of the page at `target` on `scheme` and `host`.
fn page_key(scheme: PageScheme, host: &str, target: &str) -> Option<PageKey> {
    if !plain_target(target) {
        return None;
    }
    let origin = origin_of(scheme, host)?;
    let url = origin.join(target).ok()?;
    if url.origin() != origin.origin() {
        return None;
    }
    key_of(&origin, &url)
}

#[cfg(test)]
mod tests;
