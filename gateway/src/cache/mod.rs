//! The persistent HTTP cache (RFC 9111), shared by SCTP-mapped and direct
//! traffic. docs/cache.md has the design, the decisions and the state of work.
//!
//! - [`Cache`]: what the front and the prefetch queue call:
//!   [`Cache::serve`] (in `serve`) takes a request, who asks ([`Asker`]) and
//!   the [`Upstream`](crate::upstream::Upstream) of its route, and decides in
//!   one place: answer from the store ([`Lookup::Hit`]), join a flight, fill
//!   ([`Fill`]), revalidate (in the background under
//!   `stale-while-revalidate`), or pass (then [`Cache::after_pass`]). It is
//!   also where pushed responses will enter (`serve`'s module docs).
//!   [`Cache::lookup`] is the decision alone, without the upstream.
//! - [`policy`]: the I/O-free RFC 9111 core (storable? fresh? validate? 304
//!   merge, invalidation, Vary keys, answers with Age/304/206/HEAD). Start here.
//! - [`store`]: the redb database: chunked bodies, the commit protocol that
//!   makes an entry visible only when complete and verified, SIEVE eviction,
//!   purge, stats, read-only open. Blocking: called from `spawn_blocking`.
//! - [`coalesce`]: one upstream fetch per key, streamed to every waiter.
//! - [`fill`]: a miss in progress: the producer and writer tasks.
//! - `memory`: small hot entries with their bodies in front of redb, so that
//!   a hit on them needs no blocking call.
//! - [`config`]: the `[cache]` section.
//!
//! What it never does: touch sockets, or block an async executor thread.

mod body;
pub mod coalesce;
pub mod config;
pub mod fill;
mod memory;
pub mod policy;
mod serve;
pub mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use serde::{Deserialize, Serialize};

use self::coalesce::{Coalescer, FillGuard, Join, Subscriber};
use self::config::CacheConfig;
use self::fill::FillTicket;
pub use self::fill::{Fill, Filled, FlightHead};
use self::memory::{Hot, Memory};
use self::policy::{EffectiveUri, LookupDecision, StoredAnswer};
pub use self::serve::{Asker, ServeError, Served};
pub use self::store::Purge;
use self::store::{EntryMeta, Store, StoreError, StoreLimits, StoreStats, full_key};
use crate::body::Body;
use crate::sync::lock;

/// A flight takes joiners while it holds at most this many body bytes (or
/// the maximum object size, if smaller).
const JOIN_LIMIT: u64 = 8 << 20;

/// The cache as the front sees it. Cloning is cheap; a disabled cache passes
/// everything.
#[derive(Debug, Clone)]
pub struct Cache {
    shared: Option<Arc<Shared>>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    store: Store,
    memory: Memory,
    /// Bumped by every removal or change of entries (invalidation, purge,
    /// discard, freshening): a lookup that promotes an entry into memory
    /// undoes it if this moved meanwhile.
    changes: AtomicU64,
    /// Bumped when an entry becomes visible: a lookup that read the store
    /// before a commit and found no flight after it (the flight ended in
    /// between) looks again instead of fetching a second time.
    commits: AtomicU64,
    flights: Coalescer<FlightHead>,
    /// Per primary key with fills in progress: (fills, invalidation epoch).
    fills: Mutex<HashMap<String, (u32, u64)>>,
    counters: Counters,
}

/// Lookup outcomes since start.
#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    memory_hits: AtomicU64,
    coalesced: AtomicU64,
    misses: AtomicU64,
    validations: AtomicU64,
    revalidated: AtomicU64,
    passes: AtomicU64,
    stored: AtomicU64,
    invalidations: AtomicU64,
}

impl Counters {
    fn inc(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The cache's figures: lookups by outcome since start, and the store's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Answered from a fresh stored entry...
    pub hits: u64,
    /// ...of which from the memory tier (no database read).
    pub memory_hits: u64,
    /// Joined another request's fetch in flight.
    pub coalesced: u64,
    /// Fetched from upstream (nothing usable stored).
    pub misses: u64,
    /// Stale entries validated upstream...
    pub validations: u64,
    /// ...of which the origin answered 304 (the stored body was sent).
    pub revalidated: u64,
    /// Cacheable-route GET/HEAD requests the cache did not handle (HEAD or
    /// Range on a miss, `no-store` requests, `Vary` mismatches).
    pub passes: u64,
    /// Entries written.
    pub stored: u64,
    /// Invalidations by unsafe methods (RFC 9111, section 4.4).
    pub invalidations: u64,
    /// `(hits + coalesced + revalidated) / lookups`, 0 before any lookup.
    pub hit_ratio: f64,
    /// Visible entries.
    pub entries: u64,
    /// Bytes accounted to them.
    pub bytes: u64,
    /// Entries evicted since start.
    pub evictions: u64,
    /// The database file's size.
    pub file_bytes: u64,
    /// Writes switched off after an error (a full disk), or no cache at all.
    pub disabled: bool,
    /// Entries in the memory tier.
    pub memory_entries: u64,
    /// Bytes they take.
    pub memory_bytes: u64,
}

/// A request as the cache keys and judges it.
#[derive(Debug, Clone, Copy)]
pub struct CacheRequest<'a> {
    /// The method.
    pub method: &'a Method,
    /// The verified host, lower-case, IPv6 without brackets.
    pub host: &'a str,
    /// The port.
    pub port: u16,
    /// The origin-form target (path and query).
    pub target: &'a str,
    /// The end-to-end request fields as the browser sent them.
    pub headers: &'a HeaderMap,
}

/// One target the store holds ([`Cache::held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The target (origin-form).
    pub target: String,
    /// Fresh now for the request it was judged for.
    pub fresh: bool,
    /// The stored `ETag` field value, verbatim.
    pub etag: Option<HeaderValue>,
    /// The stored `Last-Modified` field value, verbatim.
    pub last_modified: Option<HeaderValue>,
}

/// What [`Cache::lookup`] decided.
#[derive(Debug)]
pub enum Lookup {
    /// Answer with this (`Via` still to add). The label is for the access log.
    Hit(Response<Body>, &'static str),
    /// Forward through the fill (see [`Fill`]).
    Fill(Box<Fill>),
    /// Answer with this stale response at once (`Via` still to add), and
    /// forward the fill in the background, draining what it answers: it
    /// validates the entry (RFC 5861, `stale-while-revalidate`).
    StaleWhileRevalidate(Response<Body>, Box<Fill>),
    /// Forward untouched; then call [`Cache::after_pass`].
    Pass,
}

/// What the blocking part of a lookup found.
struct Found {
    key: Vec<u8>,
    vary: Vec<String>,
    entry: Option<EntryMeta>,
    decision: LookupDecision,
    /// A fresh answer and, for small bodies, the bytes already read.
    answer: Option<(StoredAnswer, Option<Vec<Bytes>>)>,
}

impl Cache {
    /// A cache that stores nothing.
    pub fn disabled() -> Self {
        Self { shared: None }
    }

    /// Opens the database of `config` (creating its directory), or a
    /// disabled cache when `config.enabled` is off.
    pub async fn open(config: &CacheConfig) -> Result<Self, StoreError> {
        if !config.enabled {
            return Ok(Self::disabled());
        }
        let path = config.path.clone();
        let limits = StoreLimits {
            max_bytes: config.max_bytes,
            max_object_bytes: config.max_object_bytes,
        };
        let store = tokio::task::spawn_blocking(move || {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| StoreError::Db(redb::Error::Io(e)))?;
            }
            Store::open(&path, limits)
        })
        .await
        .map_err(|_| StoreError::Corrupt("open task failed"))??;
        Ok(Self::from_store(store, config.memory_bytes))
    }

    /// A cache over an open store, with a memory tier of `memory_bytes`.
    pub fn from_store(store: Store, memory_bytes: u64) -> Self {
        let join_limit = JOIN_LIMIT.min(store.max_object_bytes());
        Self {
            shared: Some(Arc::new(Shared {
                store,
                memory: Memory::new(memory_bytes),
                changes: AtomicU64::new(0),
                commits: AtomicU64::new(0),
                flights: Coalescer::new(join_limit),
                fills: Mutex::new(HashMap::new()),
                counters: Counters::default(),
            })),
        }
    }

    /// The largest body an entry may have, bytes (0 with the cache off).
    pub fn max_object_bytes(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |shared| shared.store.max_object_bytes())
    }

    /// Whether anything is cached at all.
    pub fn is_enabled(&self) -> bool {
        self.shared.is_some()
    }

    /// Decides how to serve `request`: from the store, by joining a fetch in
    /// flight, by a fill, or by passing it on.
    pub async fn lookup(&self, request: &CacheRequest<'_>) -> Lookup {
        let Some(shared) = &self.shared else {
            return Lookup::Pass;
        };
        if request.method != Method::GET && request.method != Method::HEAD {
            return Lookup::Pass;
        }
        let primary = EffectiveUri::new(request.host, request.port, request.target)
            .as_str()
            .to_owned();
        if let Some(hit) = shared.memory_hit(&primary, request) {
            return hit;
        }
        // A follower that finds the entry refreshed looks again, and so does a
        // leader that finds an entry committed while it looked.
        for attempt in 0..3 {
            let changes = shared.changes.load(Ordering::SeqCst);
            let commits = shared.commits.load(Ordering::SeqCst);
            let found = match shared.find(&primary, request).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(uri = primary, error = %e, "cache: lookup failed; passing");
                    shared.counters.inc(&shared.counters.passes);
                    return Lookup::Pass;
                }
            };
            match found.decision {
                LookupDecision::Fresh { .. } => return shared.fresh_hit(&primary, found, changes),
                LookupDecision::GatewayTimeout => {
                    return Lookup::Hit(only_if_cached(), "only-if-cached");
                }
                LookupDecision::Pass => {
                    shared.counters.inc(&shared.counters.passes);
                    return Lookup::Pass;
                }
                LookupDecision::StaleWhileRevalidate { .. } => {
                    let join = shared.flights.join(&found.key);
                    return shared.stale_while_revalidate(join, primary, found, request);
                }
                LookupDecision::Fetch | LookupDecision::Validate { .. } => {}
            }
            match shared.flights.join(&found.key) {
                Join::Leader(guard) => {
                    if attempt < 2
                        && shared.commits.load(Ordering::SeqCst) != commits
                        && guard.readers() == 0
                    {
                        // Nobody joined yet: give the flight up and look again.
                        drop(guard);
                        continue;
                    }
                    return Lookup::Fill(shared.lead(guard, primary, found, request));
                }
                Join::Follower(subscriber) => {
                    if let Some(lookup) = shared.follow(subscriber, request).await {
                        return lookup;
                    }
                }
            }
        }
        shared.counters.inc(&shared.counters.passes);
        Lookup::Pass
    }

    /// Whether a GET with `request`'s fields would be answered fresh from the
    /// cache now (the prefetch queue skips what is).
    pub async fn is_fresh(&self, request: &CacheRequest<'_>) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let primary = EffectiveUri::new(request.host, request.port, request.target)
            .as_str()
            .to_owned();
        if shared.memory_fresh(&primary, request).is_some() {
            return true;
        }
        shared
            .find(&primary, request)
            .await
            .is_ok_and(|found| matches!(found.decision, LookupDecision::Fresh { .. }))
    }

    /// Whether a fetch of any representation of `host:port` + `target` is in
    /// flight now (a push for it adds nothing: it is cancelled).
    pub fn in_flight(&self, host: &str, port: u16, target: &str) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let primary = EffectiveUri::new(host, port, target);
        let primary = primary.as_str().as_bytes();
        // Full keys are the primary key, a 0 byte, the secondary key.
        shared.flights.any(|key| {
            key.strip_prefix(primary)
                .is_some_and(|rest| rest.first() == Some(&0))
        })
    }

    /// What the store holds of `targets` on `host:port`, for a PUSH_BUDGET's
    /// held entries (docs/protocol.md, "PUSH"): for each target with an
    /// entry that a GET with `headers` would select (its Vary judged against
    /// them), whether it is fresh now and its validators, verbatim. One
    /// blocking call for all of them; targets without an entry are left out,
    /// and so is every target after a read error.
    pub async fn held(
        &self,
        host: &str,
        port: u16,
        targets: Vec<String>,
        headers: &HeaderMap,
    ) -> Vec<Held> {
        let Some(shared) = &self.shared else {
            return Vec::new();
        };
        let store = shared.store.clone();
        let (host, headers) = (host.to_owned(), headers.clone());
        let read = tokio::task::spawn_blocking(move || {
            let now = SystemTime::now();
            let mut held = Vec::new();
            for target in targets {
                let primary = EffectiveUri::new(&host, port, &target);
                let primary = primary.as_str();
                let Ok(vary) = store.vary_names(primary) else {
                    break;
                };
                let secondary = policy::secondary_key(&vary.unwrap_or_default(), &headers);
                let Ok(Some(entry)) = store.get(&full_key(primary, &secondary)) else {
                    continue;
                };
                let decision =
                    policy::decide_lookup(&Method::GET, &headers, Some(&entry.response), now);
                let stored = &entry.response.headers;
                held.push(Held {
                    target,
                    fresh: matches!(decision, LookupDecision::Fresh { .. }),
                    etag: stored.get(header::ETAG).cloned(),
                    last_modified: stored.get(header::LAST_MODIFIED).cloned(),
                });
            }
            held
        });
        read.await.unwrap_or_default()
    }

    /// After a request went upstream without the cache: an unsafe method's
    /// successful response invalidates its target and the same-origin
    /// `Location` and `Content-Location` (RFC 9111, section 4.4). Returns when
    /// the entries are gone, so the browser's next request cannot see them.
    pub async fn after_pass(
        &self,
        request: &CacheRequest<'_>,
        status: StatusCode,
        response: &HeaderMap,
    ) {
        let Some(shared) = &self.shared else {
            return;
        };
        let target = EffectiveUri::new(request.host, request.port, request.target);
        let targets = policy::invalidation_targets(request.method, &target, status, response);
        if targets.is_empty() {
            return;
        }
        let primaries: Vec<String> = targets.iter().map(|t| t.as_str().to_owned()).collect();
        shared.bump(|primary| primaries.iter().any(|p| p == primary));
        shared.memory.remove_primaries(&primaries);
        shared.counters.inc(&shared.counters.invalidations);
        let store = shared.store.clone();
        let removed = tokio::task::spawn_blocking(move || {
            let mut present = Vec::new();
            for primary in primaries {
                if store.vary_names(&primary)?.is_some() {
                    present.push(primary);
                }
            }
            store.remove_primaries(&present)
        })
        .await;
        match removed {
            Ok(Ok(0)) | Err(_) => {}
            Ok(Ok(n)) => tracing::debug!(uri = %target, entries = n, "cache: invalidated"),
            Ok(Err(e)) => tracing::debug!(uri = %target, error = %e, "cache: invalidation failed"),
        }
    }

    /// Removes entries by URL, prefix or host; returns how many went.
    pub async fn purge(&self, what: Purge) -> Result<u64, StoreError> {
        let Some(shared) = &self.shared else {
            return Ok(0);
        };
        shared.bump(|primary| memory::purge_matches(&what, primary));
        shared.memory.purge(&what);
        let store = shared.store.clone();
        tokio::task::spawn_blocking(move || store.purge(&what))
            .await
            .map_err(|_| StoreError::Corrupt("purge task failed"))?
    }

    /// Counters since start and the store's figures.
    pub fn stats(&self) -> CacheStats {
        let Some(shared) = &self.shared else {
            return CacheStats {
                disabled: true,
                ..CacheStats::default()
            };
        };
        let c = &shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let StoreStats {
            entries,
            bytes,
            evictions,
            file_bytes,
            disabled,
        } = shared.store.stats();
        let (hits, coalesced, misses, validations, revalidated, passes) = (
            get(&c.hits),
            get(&c.coalesced),
            get(&c.misses),
            get(&c.validations),
            get(&c.revalidated),
            get(&c.passes),
        );
        let lookups = hits + coalesced + misses + validations + passes;
        let (memory_entries, memory_bytes) = shared.memory.size();
        CacheStats {
            hits,
            memory_hits: get(&c.memory_hits),
            memory_entries,
            memory_bytes,
            coalesced,
            misses,
            validations,
            revalidated,
            passes,
            stored: get(&c.stored),
            invalidations: get(&c.invalidations),
            hit_ratio: if lookups == 0 {
                0.0
            } else {
                (hits + coalesced + revalidated) as f64 / lookups as f64
            },
            entries,
            bytes,
            evictions,
            file_bytes,
            disabled,
        }
    }
}

impl Shared {
    /// The blocking part of a lookup: Vary names, the entry, the decision,
    /// and a small fresh body's bytes, in one `spawn_blocking`.
    async fn find(
        self: &Arc<Self>,
        primary: &str,
        request: &CacheRequest<'_>,
    ) -> Result<Found, StoreError> {
        let store = self.store.clone();
        let primary = primary.to_owned();
        let method = request.method.clone();
        let headers = request.headers.clone();
        tokio::task::spawn_blocking(move || {
            let vary = store.vary_names(&primary)?.unwrap_or_default();
            let secondary = policy::secondary_key(&vary, &headers);
            let key = full_key(&primary, &secondary);
            let entry = store.get(&key)?;
            let decision = policy::decide_lookup(
                &method,
                &headers,
                entry.as_ref().map(|e| &e.response),
                SystemTime::now(),
            );
            let answer = match (&decision, &entry) {
                (
                    LookupDecision::Fresh { age }
                    | LookupDecision::StaleWhileRevalidate { age, .. },
                    Some(entry),
                ) => {
                    let answer =
                        policy::answer_from_stored(&method, &headers, &entry.response, *age);
                    let inline = match body::chunk_span(answer.body, entry.response.body_len) {
                        Some((first, count, skip, len)) if len <= body::INLINE_BYTES => {
                            let rows = store.read_chunks(entry.id, first, count);
                            match rows.and_then(|rows| {
                                if rows.len() == count as usize {
                                    body::cut(rows, skip, len)
                                } else {
                                    Err(StoreError::Corrupt("missing chunks"))
                                }
                            }) {
                                Ok(parts) => Some(parts),
                                Err(e) => {
                                    tracing::warn!(uri = primary, error = %e, "cache: dropping an unreadable entry");
                                    store.remove_keys(std::slice::from_ref(&key))?;
                                    return Ok(Found {
                                        key,
                                        vary,
                                        entry: None,
                                        decision: LookupDecision::Pass,
                                        answer: None,
                                    });
                                }
                            }
                        }
                        Some(_) => None,
                        None => Some(Vec::new()),
                    };
                    Some((answer, inline))
                }
                _ => None,
            };
            Ok(Found {
                key,
                vary,
                entry,
                decision,
                answer,
            })
        })
        .await
        .map_err(|_| StoreError::Corrupt("lookup task failed"))?
    }

    /// The response for a fresh stored entry.
    fn answer(
        &self,
        key: Vec<u8>,
        entry: &EntryMeta,
        answer: StoredAnswer,
        inline: Option<Vec<Bytes>>,
    ) -> Response<Body> {
        let body = match inline {
            Some(parts) => body::full(parts),
            None => body::stored(
                self.store.clone(),
                key,
                entry.id,
                answer.body,
                entry.response.body_len,
            ),
        };
        let mut response = Response::new(body);
        *response.status_mut() = answer.status;
        *response.headers_mut() = answer.headers;
        response
    }

    /// The memory tier's entry for `request` if it may be used as it is, with
    /// its key and current age.
    fn memory_fresh(
        &self,
        primary: &str,
        request: &CacheRequest<'_>,
    ) -> Option<(Vec<u8>, Arc<Hot>, Duration)> {
        let (key, hot) = self.memory.get(primary, request.headers)?;
        let decision = policy::decide_lookup_with(
            request.method,
            request.headers,
            Some((&hot.entry.response, &hot.freshness)),
            SystemTime::now(),
        );
        let LookupDecision::Fresh { age } = decision else {
            return None;
        };
        Some((key, hot, age))
    }

    /// A fresh entry from the memory tier, answered without a blocking call.
    fn memory_hit(&self, primary: &str, request: &CacheRequest<'_>) -> Option<Lookup> {
        let (key, hot, age) = self.memory_fresh(primary, request)?;
        let answer =
            policy::answer_from_stored(request.method, request.headers, &hot.entry.response, age);
        let parts = match answer.body {
            policy::BodySlice::Empty => Vec::new(),
            policy::BodySlice::Whole => vec![hot.body.clone()],
            policy::BodySlice::Range { start, end } => {
                let (start, end) = (usize::try_from(start).ok()?, usize::try_from(end).ok()?);
                vec![
                    hot.body
                        .get(start..end)
                        .map(|_| hot.body.slice(start..end))?,
                ]
            }
        };
        self.counters.inc(&self.counters.hits);
        self.counters.inc(&self.counters.memory_hits);
        Some(Lookup::Hit(
            self.answer(key, &hot.entry, answer, Some(parts)),
            "hit",
        ))
    }

    /// A fresh entry found in the store: answered from it, and copied into
    /// memory when it is small and whole.
    fn fresh_hit(&self, primary: &str, found: Found, changes: u64) -> Lookup {
        let (Some(entry), Some((answer, inline))) = (found.entry, found.answer) else {
            return Lookup::Pass;
        };
        self.counters.inc(&self.counters.hits);
        if answer.body == policy::BodySlice::Whole
            && let Some(parts) = &inline
        {
            self.promote(primary, &found.vary, &found.key, &entry, parts, changes);
        }
        Lookup::Hit(self.answer(found.key, &entry, answer, inline), "hit")
    }

    /// A stale entry within its `stale-while-revalidate` window: answered at
    /// once; validated in the background by this request if it leads the
    /// flight for its key, else by the fetch already in flight.
    fn stale_while_revalidate(
        self: &Arc<Self>,
        join: Join<FlightHead>,
        primary: String,
        mut found: Found,
        request: &CacheRequest<'_>,
    ) -> Lookup {
        let (Some(entry), Some((answer, inline))) = (found.entry.clone(), found.answer.take())
        else {
            return Lookup::Pass;
        };
        self.counters.inc(&self.counters.hits);
        let response = self.answer(found.key.clone(), &entry, answer, inline);
        match join {
            Join::Leader(guard) => {
                let fill = self.lead(guard, primary, found, request);
                Lookup::StaleWhileRevalidate(response, fill)
            }
            Join::Follower(_) => Lookup::Hit(response, "stale"),
        }
    }

    /// This request leads the flight for its key: it fetches (or validates the
    /// stored entry) through a fill that others may join.
    fn lead(
        self: &Arc<Self>,
        guard: FillGuard<FlightHead>,
        primary: String,
        found: Found,
        request: &CacheRequest<'_>,
    ) -> Box<Fill> {
        let conditional = match found.decision {
            LookupDecision::Validate { conditional }
            | LookupDecision::StaleWhileRevalidate { conditional, .. } => conditional,
            _ => HeaderMap::new(),
        };
        let validation = found.entry.is_some() && !conditional.is_empty();
        self.counters.inc(if validation {
            &self.counters.validations
        } else {
            &self.counters.misses
        });
        let (stored, fallback) = if validation {
            (found.entry, None)
        } else {
            (None, found.entry)
        };
        Box::new(Fill {
            shared: Arc::clone(self),
            guard,
            ticket: FillTicket::new(self, &primary),
            primary,
            key: found.key,
            method: request.method.clone(),
            request: request.headers.clone(),
            stored,
            fallback,
            conditional,
            request_time: SystemTime::now(),
            keep: None,
        })
    }

    /// This request joined a flight in progress: it is answered from the
    /// leader's stream once the head is known, or passed. `None`: the leader
    /// refreshed the stored entry instead, so look again.
    async fn follow(
        &self,
        mut subscriber: Subscriber<FlightHead>,
        request: &CacheRequest<'_>,
    ) -> Option<Lookup> {
        let Ok(head) = subscriber.head().await else {
            // The leader's fetch failed before its head: fetch alone.
            self.counters.inc(&self.counters.passes);
            return Some(Lookup::Pass);
        };
        match &*head {
            FlightHead::Refreshed => None,
            FlightHead::Uncacheable => {
                self.counters.inc(&self.counters.passes);
                Some(Lookup::Pass)
            }
            FlightHead::Stream {
                status,
                headers,
                vary,
                leader_secondary,
                stored,
            } => {
                if policy::secondary_key(vary, request.headers) != *leader_secondary {
                    self.counters.inc(&self.counters.passes);
                    return Some(Lookup::Pass);
                }
                // A flight is a response on its way into the store, and a
                // follower takes it only where it could take the stored entry
                // now (RFC 9111, section 4): not a response stale on arrival
                // (an `Expires` equal to its `Date`, an `Age` past its
                // lifetime, an `Expires` that is no date), nor one the
                // follower's own `Cache-Control` refuses. That matters most
                // for a flight finished and still held for the store's
                // writer, which a request sent after the leader's answer
                // joins. Such a follower fetches alone.
                let (response, freshness) = &**stored;
                let decision = policy::decide_lookup_with(
                    request.method,
                    request.headers,
                    Some((response, freshness)),
                    SystemTime::now(),
                );
                let LookupDecision::Fresh { age } = decision else {
                    self.counters.inc(&self.counters.passes);
                    return Some(Lookup::Pass);
                };
                self.counters.inc(&self.counters.coalesced);
                Some(Lookup::Hit(
                    follower_answer(request, *status, headers, age, subscriber),
                    "coalesced",
                ))
            }
        }
    }

    /// Copies an entry read from the store into memory, unless the cache
    /// changed since `changes` was read (the entry may be invalidated).
    fn promote(
        &self,
        primary: &str,
        vary: &[String],
        key: &[u8],
        entry: &EntryMeta,
        parts: &[Bytes],
        changes: u64,
    ) {
        if entry.response.body_len > memory::MAX_OBJECT_BYTES {
            return;
        }
        let body = match parts {
            [one] => one.clone(),
            _ => Bytes::from(parts.concat()),
        };
        self.remember(primary, vary, key, entry, body, changes);
    }

    /// Puts an entry into memory; takes it out again if the cache changed
    /// since `changes` was read (an invalidation may have missed it).
    fn remember(
        &self,
        primary: &str,
        vary: &[String],
        key: &[u8],
        entry: &EntryMeta,
        body: Bytes,
        changes: u64,
    ) {
        self.memory
            .insert(primary, vary, key.to_vec(), Hot::new(entry.clone(), body));
        if self.changes.load(Ordering::SeqCst) != changes {
            self.memory.remove(key);
        }
    }

    /// Marks the primary keys `matches` selects as invalidated for the fills
    /// in progress on them.
    fn bump(&self, matches: impl Fn(&str) -> bool) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.flights.forget(|key| {
            let primary = key.split(|&b| b == 0).next().unwrap_or(key);
            std::str::from_utf8(primary).is_ok_and(&matches)
        });
        for (primary, slot) in lock(&self.fills).iter_mut() {
            if matches(primary) {
                slot.1 += 1;
            }
        }
    }

    /// Removes one entry (off the executor).
    async fn remove_key(&self, key: Vec<u8>) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.memory.remove(&key);
        let store = self.store.clone();
        let _ = tokio::task::spawn_blocking(move || store.remove_keys(&[key])).await;
    }
}

/// A follower's answer: its own conditionals answered from the head, else the
/// flight's body from byte 0; its `Age` is the response's `age` now, as for a
/// stored entry (RFC 9111, section 5.1).
fn follower_answer(
    request: &CacheRequest<'_>,
    status: StatusCode,
    headers: &HeaderMap,
    age: Duration,
    subscriber: coalesce::Subscriber<FlightHead>,
) -> Response<Body> {
    let (status, headers, body) = if policy::not_modified_for(request.headers, headers) {
        (
            StatusCode::NOT_MODIFIED,
            policy::not_modified_headers(headers),
            body::empty(),
        )
    } else if request.method == Method::HEAD {
        (status, headers.clone(), body::empty())
    } else {
        (status, headers.clone(), body::subscriber(subscriber))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
        .headers_mut()
        .insert(header::AGE, HeaderValue::from(age.as_secs()));
    response
}

/// `only-if-cached` with nothing usable stored (RFC 9111, section 5.2.1.7).
fn only_if_cached() -> Response<Body> {
    let mut response = Response::new(body::full(vec![Bytes::from_static(
        b"504 Gateway Timeout: not in cache (only-if-cached)\n",
    )]));
    *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
