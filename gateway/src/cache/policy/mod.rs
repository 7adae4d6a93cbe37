//! The I/O-free RFC 9111 core: what a shared cache may store, when a stored
//! response may be reused, how to validate it and how a 304 freshens it.
//!
//! Everything here is a plain function of its inputs; the clock is an argument
//! (`now`, `request_time`, `response_time`), nothing touches the store or the
//! network. [`crate::cache`] drives it; `tests.rs` beside this file drives it
//! through a table of RFC cases.
//!
//! Where to start: [`decide_lookup`] (a request meets what is stored),
//! [`decide_response`] (the origin answered), [`answer_from_stored`] (the bytes
//! of a hit: `Age`, conditional requests, ranges, HEAD).
//!
//! Section numbers are RFC 9111 unless they say RFC 9110.

use std::time::{Duration, SystemTime};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_semantics::conditional::{self, EntityTag, Validators};
use http_semantics::range::{Unsatisfiable, parse_single_range};

#[cfg(test)]
mod tests;

/// Heuristic freshness (section 4.2.2): this fraction of the time since
/// `Last-Modified`, the figure the RFC gives as typical.
pub const HEURISTIC_FRACTION: f64 = 0.1;
/// Heuristic freshness never exceeds this: one day. A page untouched for ten
/// years is not thereby fresh for a year.
pub const HEURISTIC_MAX: Duration = Duration::from_secs(24 * 3600);
/// Delta-seconds larger than this are taken as this (section 1.2.2: 2^31).
pub const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// Status codes whose responses are heuristically cacheable (RFC 9110, section
/// 15.1), less 206: this cache stores complete responses only.
const HEURISTICALLY_CACHEABLE: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// Status codes whose caching semantics this cache knows (section 5.2.2.3:
/// only these are stored when `must-understand` is present). Without that
/// directive any final status code with explicit freshness may be stored
/// (section 3 asks to understand only 206 and 304, and RFC 9110, section 15,
/// treats an unknown code as the x00 of its class); 206 and 304 never are:
/// partial content is not combined, and a 304 only freshens.
const UNDERSTOOD: [u16; 16] = [
    200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 451, 500, 501,
];

/// Request fields the cache may serve and store across, though its key leaves
/// them out: each is either handled by this module or the front, or sent by
/// browsers without changing what a site answers except through `Vary`.
/// Every other field is an unkeyed input ([`unkeyed_input`]): a site could
/// reflect it into a response the cache would then hand every other browser
/// (cache poisoning), so a request carrying one is passed on and nothing of
/// its response is stored (docs/cache.md, "Unkeyed inputs"). An allowlist
/// rather than a list of dangerous fields, because the fields frameworks and
/// proxies act on (`X-Forwarded-*`, `X-Original-URI`, `Front-End-Https`, and
/// whatever the next one is called) cannot be listed; browsers' fields can.
///
/// Sorted, for the binary search; names are lowercase as [`HeaderName`] keeps
/// them. Besides these, every `Sec-CH-` field is harmless
/// ([`CLIENT_HINT_PREFIX`]).
pub const HARMLESS_REQUEST_FIELDS: [&str; 42] = [
    // Content negotiation and the browser's description of itself: a site
    // that answers by one names it in `Vary`, which keys the entry by it.
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    // Keyed (`Authorization`: section 3.5 in `storable`; `Cookie`: stored
    // responses carry no `Set-Cookie`, and a site that answers by the cookie
    // says `Vary: Cookie` or `private`, docs/cache.md).
    "authorization",
    // Directives the policy reads (section 5.2.1, 5.4).
    "cache-control",
    // Hop-by-hop: the front removes them before the origin sees them.
    "connection",
    // Read by `unkeyed_input` itself: a body of any length is unkeyed.
    "content-length",
    "cookie",
    // Client hints without the `Sec-CH-` prefix (RFC 8942, 3.2: a site that
    // answers by one sends `Vary` naming it).
    "device-memory",
    "dnt",
    "downlink",
    "dpr",
    "ect",
    // The key's authority.
    "host",
    // Preconditions and ranges, handled by the policy (section 4.3.2,
    // RFC 9110, 13 and 14).
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "keep-alive",
    // CORS: a site whose answer depends on the requesting origin says
    // `Vary: Origin` (Fetch, "CORS protocol and HTTP caches").
    "origin",
    "pragma",
    // RFC 9218 priority: how soon to send the response, not which one.
    "priority",
    "proxy-connection",
    // Speculative loads (Fetch `Sec-Purpose`, and Chromium's older `Purpose`).
    "purpose",
    "range",
    "referer",
    "rtt",
    "save-data",
    // Fetch metadata (set by browsers only: the `Sec-` prefix is forbidden
    // to scripts); a site isolating its resources by them sends `Vary`.
    "sec-fetch-dest",
    "sec-fetch-mode",
    "sec-fetch-site",
    "sec-fetch-storage-access",
    "sec-fetch-user",
    "sec-gpc",
    "sec-purpose",
    "te",
    "transfer-encoding",
    "upgrade-insecure-requests",
    "user-agent",
    // Proxies on the browser's side of the gateway: who forwarded, not what.
    "via",
];

/// User-agent client hints (`Sec-CH-UA`, `Sec-CH-UA-Mobile`, and the rest of
/// the family): harmless for the reason of [`HARMLESS_REQUEST_FIELDS`]'s
/// client hints. A prefix, because the family grows with each browser release.
pub const CLIENT_HINT_PREFIX: &str = "sec-ch-";

/// An input of a request that the cache key leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnkeyedInput<'a> {
    /// A field neither keyed nor known to be harmless.
    Field(&'a HeaderName),
    /// A body: a GET or HEAD body is keyed nowhere, yet a site may answer by it.
    Body,
}

impl UnkeyedInput<'_> {
    /// What it is, for [`NotStorable::UnkeyedInput`].
    pub fn kind(&self) -> &'static str {
        match self {
            UnkeyedInput::Field(_) => "a field it neither keys on nor knows to be harmless",
            UnkeyedInput::Body => "a request body",
        }
    }
}

/// Whether the cache may serve and store across `name` although its key
/// leaves it out ([`HARMLESS_REQUEST_FIELDS`], [`CLIENT_HINT_PREFIX`]).
pub fn harmless_request_field(name: &HeaderName) -> bool {
    let name = name.as_str();
    HARMLESS_REQUEST_FIELDS.binary_search(&name).is_ok() || name.starts_with(CLIENT_HINT_PREFIX)
}

/// The first input of `request` that the cache key leaves out, if any: a field
/// that is not [`harmless_request_field`], or a body.
pub fn unkeyed_input(request: &HeaderMap) -> Option<UnkeyedInput<'_>> {
    if let Some(name) = request.keys().find(|name| !harmless_request_field(name)) {
        return Some(UnkeyedInput::Field(name));
    }
    let has_body = request.contains_key(header::TRANSFER_ENCODING)
        || request
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes().iter().any(|b| *b != b'0'));
    has_body.then_some(UnkeyedInput::Body)
}

/// Hop-by-hop fields never stored (section 3.1; RFC 9110, section 7.6.1).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A response as the cache holds it: its head and the times it was fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code (never 206 or 304).
    pub status: StatusCode,
    /// End-to-end header fields, as received (hop-by-hop fields removed).
    pub headers: HeaderMap,
    /// When the request that fetched it was sent (section 4.2.3 `request_time`).
    pub request_time: SystemTime,
    /// When its head arrived (section 4.2.3 `response_time`).
    pub response_time: SystemTime,
    /// Body length in bytes.
    pub body_len: u64,
}

/// The `Cache-Control` directives this cache acts on (section 5.2), request and
/// response alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (with or without field names: this cache never reuses a
    /// response with some fields stripped, so a qualified `no-cache` counts whole).
    pub no_cache: bool,
    /// `private` (qualified or not: the same reasoning).
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`.
    pub must_revalidate: bool,
    /// `proxy-revalidate`.
    pub proxy_revalidate: bool,
    /// `must-understand`.
    pub must_understand: bool,
    /// `only-if-cached` (request).
    pub only_if_cached: bool,
    /// `max-age`; an invalid value counts as 0 (section 4.2.1: treat as stale).
    pub max_age: Option<u64>,
    /// `s-maxage`; an invalid value counts as 0.
    pub s_maxage: Option<u64>,
    /// `max-stale` (request): `Some(None)` without a value, any staleness.
    pub max_stale: Option<Option<u64>>,
    /// `min-fresh` (request).
    pub min_fresh: Option<u64>,
    /// `stale-if-error` (RFC 5861, section 4; request or response): how many
    /// seconds past its freshness a stored response may stand in for an
    /// origin's 500, 502, 503 or 504, or an origin that cannot be reached.
    pub stale_if_error: Option<u64>,
    /// `stale-while-revalidate` (RFC 5861, section 3; response): how many
    /// seconds past its freshness a stored response may be answered at once
    /// while it is validated in the background.
    pub stale_while_revalidate: Option<u64>,
}

impl CacheControl {
    /// Parses every `Cache-Control` line of `headers`. Unknown directives are
    /// ignored (section 5.2.3); a repeated directive keeps its first value
    /// (section 4.2.1); quoted values are accepted (section 5.2).
    pub fn parse(headers: &HeaderMap) -> Self {
        let mut cc = Self::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            let Ok(value) = value.to_str() else { continue };
            for directive in split_list(value) {
                let (name, arg) = match directive.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                    None => (directive, None),
                };
                let seconds = || arg.map(|a| parse_delta(a).unwrap_or(0));
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => cc.no_store = true,
                    "no-cache" => cc.no_cache = true,
                    "private" => cc.private = true,
                    "public" => cc.public = true,
                    "must-revalidate" => cc.must_revalidate = true,
                    "proxy-revalidate" => cc.proxy_revalidate = true,
                    "must-understand" => cc.must_understand = true,
                    "only-if-cached" => cc.only_if_cached = true,
                    "max-age" if cc.max_age.is_none() => cc.max_age = Some(seconds().unwrap_or(0)),
                    "s-maxage" if cc.s_maxage.is_none() => {
                        cc.s_maxage = Some(seconds().unwrap_or(0));
                    }
                    "max-stale" if cc.max_stale.is_none() => cc.max_stale = Some(seconds()),
                    "min-fresh" if cc.min_fresh.is_none() => cc.min_fresh = seconds(),
                    "stale-if-error" if cc.stale_if_error.is_none() => {
                        cc.stale_if_error = seconds();
                    }
                    "stale-while-revalidate" if cc.stale_while_revalidate.is_none() => {
                        cc.stale_while_revalidate = seconds();
                    }
                    _ => {}
                }
            }
        }
        cc
    }

    /// Request directives, with `Pragma: no-cache` standing in for `no-cache`
    /// when there is no `Cache-Control` at all (section 5.4).
    pub fn parse_request(headers: &HeaderMap) -> Self {
        let mut cc = Self::parse(headers);
        if !headers.contains_key(header::CACHE_CONTROL) {
            cc.no_cache = headers
                .get_all(header::PRAGMA)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(split_list)
                .any(|d| d.eq_ignore_ascii_case("no-cache"));
        }
        cc
    }
}

/// Why a response is not stored. Shown in debug logs and asserted by tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotStorable {
    /// Only GET responses are stored (HEAD is answered from them).
    #[error("method is not GET")]
    Method,
    /// The status code is interim (1xx), 206 or 304 (section 3).
    #[error("status code not storable")]
    Status,
    /// `no-store` in the request or the response (sections 5.2.1.5, 5.2.2.5).
    #[error("no-store")]
    NoStore,
    /// `private` in a shared cache (section 5.2.2.7).
    #[error("private")]
    Private,
    /// The request carried `Authorization` and the response did not allow a
    /// shared cache to store it (section 3.5).
    #[error("authorized request")]
    Authorization,
    /// `must-understand` on a status code this cache does not understand
    /// (section 5.2.2.3).
    #[error("must-understand on an unknown status code")]
    MustUnderstand,
    /// No explicit freshness, not heuristically cacheable, not `public`
    /// (section 3, last bullet).
    #[error("no freshness information")]
    NoFreshness,
    /// `Vary: *` never matches a later request (section 4.1).
    #[error("Vary: *")]
    VaryStar,
    /// `Set-Cookie`, whatever `Cache-Control` says: a transparent cache is
    /// shared without the site knowing it, so one browser's cookie must never
    /// reach another (stricter than section 7.3, as nginx and Varnish are by
    /// default; docs/cache.md).
    #[error("Set-Cookie")]
    SetCookie,
    /// Would be stale at once and cannot be validated: storing it is useless.
    #[error("stale on arrival without validators")]
    Useless,
    /// The request carried an input the cache key leaves out
    /// ([`unkeyed_input`]).
    #[error("the request carried {0}, which the cache key leaves out")]
    UnkeyedInput(&'static str),
}

/// Whether the response to a request may be stored (section 3).
pub fn storable(
    method: &Method,
    request: &HeaderMap,
    status: StatusCode,
    response: &HeaderMap,
) -> Result<(), NotStorable> {
    if method != Method::GET {
        return Err(NotStorable::Method);
    }
    if let Some(input) = unkeyed_input(request) {
        return Err(NotStorable::UnkeyedInput(input.kind()));
    }
    let req_cc = CacheControl::parse(request);
    let res_cc = CacheControl::parse(response);
    if !status_storable(status) {
        return Err(NotStorable::Status);
    }
    if res_cc.must_understand && !UNDERSTOOD.contains(&status.as_u16()) {
        return Err(NotStorable::MustUnderstand);
    }
    // Section 5.2.2.3: with must-understand on an understood status code,
    // no-store in the response may be ignored; in the request it still binds.
    if req_cc.no_store || (res_cc.no_store && !res_cc.must_understand) {
        return Err(NotStorable::NoStore);
    }
    if res_cc.private {
        return Err(NotStorable::Private);
    }
    if request.contains_key(header::AUTHORIZATION)
        && !(res_cc.must_revalidate || res_cc.public || res_cc.s_maxage.is_some())
    {
        return Err(NotStorable::Authorization);
    }
    if vary_names(response).is_none() {
        return Err(NotStorable::VaryStar);
    }
    if response.contains_key(header::SET_COOKIE) {
        return Err(NotStorable::SetCookie);
    }
    let explicit = res_cc.s_maxage.is_some()
        || res_cc.max_age.is_some()
        || response.contains_key(header::EXPIRES);
    let heuristic = HEURISTICALLY_CACHEABLE.contains(&status.as_u16()) || res_cc.public;
    if !explicit && !heuristic {
        return Err(NotStorable::NoFreshness);
    }
    let validators =
        response.contains_key(header::ETAG) || response.contains_key(header::LAST_MODIFIED);
    if !validators && !explicit {
        // Heuristic freshness needs Last-Modified; without it the entry is
        // stale on arrival and, without validators, can only be refetched.
        return Err(NotStorable::Useless);
    }
    Ok(())
}

/// Whether a response with `status` can become an entry at all (section 3):
/// a final status code, not 206 (this cache stores complete responses only)
/// and not 304 (which freshens an entry, never is one). Whether it is then
/// stored depends on its freshness: explicit for any such code, heuristic only
/// for [`HEURISTICALLY_CACHEABLE`] ones.
fn status_storable(status: StatusCode) -> bool {
    !status.is_informational()
        && status != StatusCode::PARTIAL_CONTENT
        && status != StatusCode::NOT_MODIFIED
}

/// The freshness lifetime of a response (section 4.2.1, shared cache), and
/// whether it came from the heuristic (section 4.2.2).
pub fn freshness_lifetime(
    status: StatusCode,
    headers: &HeaderMap,
    response_time: SystemTime,
) -> (Duration, bool) {
    let cc = CacheControl::parse(headers);
    if let Some(s) = cc.s_maxage {
        return (Duration::from_secs(s), false);
    }
    if let Some(s) = cc.max_age {
        return (Duration::from_secs(s), false);
    }
    let date = date_value(headers).unwrap_or(response_time);
    let mut all_expires = headers.get_all(header::EXPIRES).iter();
    if let Some(expires) = all_expires.next() {
        // Section 5.3: an invalid Expires (such as "0") is in the past, and
        // so is a repeated one (a singleton field sent twice is invalid,
        // RFC 9110 section 5.5: which line the sender meant is unknowable).
        let lifetime = Some(expires)
            .filter(|_| all_expires.next().is_none())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|e| e.duration_since(date).ok())
            .unwrap_or(Duration::ZERO);
        return (lifetime, false);
    }
    if !(HEURISTICALLY_CACHEABLE.contains(&status.as_u16()) || cc.public) {
        return (Duration::ZERO, false);
    }
    let heuristic = http_date(headers, &header::LAST_MODIFIED)
        .and_then(|lm| date.duration_since(lm).ok())
        .map_or(Duration::ZERO, |since| {
            since.mul_f64(HEURISTIC_FRACTION).min(HEURISTIC_MAX)
        });
    (Duration::from_secs(heuristic.as_secs()), true)
}

/// The current age of a stored response at `now` (section 4.2.3), whole seconds.
pub fn current_age(stored: &StoredResponse, now: SystemTime) -> Duration {
    age_at(stored, corrected_initial_age(stored), now)
}

/// The age of `stored` at `now`, given its `corrected_initial_age`
/// (section 4.2.3), whole seconds.
fn age_at(stored: &StoredResponse, corrected_initial_age: Duration, now: SystemTime) -> Duration {
    let resident_time = now
        .duration_since(stored.response_time)
        .unwrap_or(Duration::ZERO);
    Duration::from_secs((corrected_initial_age + resident_time).as_secs())
}

/// Section 4.2.3's `corrected_initial_age`: what `stored` says of its age
/// when it arrived, from its own fields and the times it was fetched.
fn corrected_initial_age(stored: &StoredResponse) -> Duration {
    let date = date_value(&stored.headers).unwrap_or(stored.response_time);
    let age_value = age_value(&stored.headers).map_or(Duration::ZERO, Duration::from_secs);
    let apparent_age = stored
        .response_time
        .duration_since(date)
        .unwrap_or(Duration::ZERO);
    let response_delay = stored
        .response_time
        .duration_since(stored.request_time)
        .unwrap_or(Duration::ZERO);
    let corrected_age_value = age_value + response_delay;
    apparent_age.max(corrected_age_value)
}

/// What [`decide_lookup`] reads of a stored response's own fields, worked out
/// once: its freshness lifetime, its initial age and its `Cache-Control`.
/// The memory tier keeps one beside each entry, so that a hit on it parses
/// none of the stored fields again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freshness {
    lifetime: Duration,
    corrected_initial_age: Duration,
    cache_control: CacheControl,
}

impl Freshness {
    /// `stored`'s figures.
    pub fn of(stored: &StoredResponse) -> Self {
        Self {
            lifetime: freshness_lifetime(stored.status, &stored.headers, stored.response_time).0,
            corrected_initial_age: corrected_initial_age(stored),
            cache_control: CacheControl::parse(&stored.headers),
        }
    }
}

/// The `Age` a response arrived with (section 5.1): the first member of the
/// field's value, the lines of a repeated field taken as one list ("a cache
/// encountering a message with a list-based Age field value SHOULD use the
/// first member ... discarding subsequent ones"); `None`, so ignored, when
/// that member is not delta-seconds (a sign, a fraction, a date, letters).
pub fn age_value(headers: &HeaderMap) -> Option<u64> {
    let first_line = headers.get(header::AGE)?.to_str().ok()?;
    let first_member = first_line.split(',').next()?;
    parse_delta(first_member)
}

/// What to do with a request, given what is stored under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupDecision {
    /// Answer from the stored response; its age is `age`
    /// ([`answer_from_stored`] builds the answer).
    Fresh {
        /// The current age, sent as `Age`.
        age: Duration,
    },
    /// Ask the origin whether the stored response is still good: send the
    /// request (without the client's own conditionals and Range) plus these
    /// fields (section 4.3.1), then [`decide_response`].
    Validate {
        /// `If-None-Match` and/or `If-Modified-Since`.
        conditional: HeaderMap,
    },
    /// Answer from the stale stored response at once, as for `Fresh`, and
    /// validate it in the background as for `Validate` (RFC 5861, section 3:
    /// `stale-while-revalidate`). `conditional` may be empty (no validators):
    /// the background request is then a plain fetch.
    StaleWhileRevalidate {
        /// The current age, sent as `Age`.
        age: Duration,
        /// `If-None-Match` and/or `If-Modified-Since`.
        conditional: HeaderMap,
    },
    /// Fetch the response (without the client's conditionals and Range) and
    /// store it if allowed.
    Fetch,
    /// Forward the request as it is and store nothing from it.
    Pass,
    /// `only-if-cached` and nothing usable is stored: answer 504 (section 5.2.1.7).
    GatewayTimeout,
}

/// Decides how to serve a request (section 4). `stored` is the entry under the
/// request's key, Vary already matched (section 4.1).
pub fn decide_lookup(
    method: &Method,
    request: &HeaderMap,
    stored: Option<&StoredResponse>,
    now: SystemTime,
) -> LookupDecision {
    let freshness = stored.map(Freshness::of);
    decide_lookup_with(method, request, stored.zip(freshness.as_ref()), now)
}

/// [`decide_lookup`] with the stored response's [`Freshness`] worked out
/// already.
pub fn decide_lookup_with(
    method: &Method,
    request: &HeaderMap,
    stored: Option<(&StoredResponse, &Freshness)>,
    now: SystemTime,
) -> LookupDecision {
    if method != Method::GET && method != Method::HEAD {
        return LookupDecision::Pass;
    }
    // Neither answered from the cache (the input may be what the client wants
    // answered) nor stored (it may be what poisons the entry).
    if unkeyed_input(request).is_some() {
        return LookupDecision::Pass;
    }
    let req_cc = CacheControl::parse_request(request);
    // Requests the cache would not fill with a whole GET response: HEAD, Range,
    // no-store (section 5.2.1.5: nothing of their response may be stored).
    let partial = method == Method::HEAD || request.contains_key(header::RANGE);
    let Some(stored) = stored else {
        if req_cc.only_if_cached {
            return LookupDecision::GatewayTimeout;
        }
        if partial || req_cc.no_store {
            return LookupDecision::Pass;
        }
        return LookupDecision::Fetch;
    };
    let (stored, freshness) = stored;
    let age = age_at(stored, freshness.corrected_initial_age, now);
    let (lifetime, res_cc) = (freshness.lifetime, &freshness.cache_control);
    let reusable = !req_cc.no_cache
        && !res_cc.no_cache
        && if lifetime > age {
            // Fresh; the client may still ask for younger (section 5.2.1.1) or
            // fresher-for-longer (section 5.2.1.3).
            req_cc.max_age.is_none_or(|max| age.as_secs() <= max)
                && req_cc
                    .min_fresh
                    .is_none_or(|min| (lifetime - age).as_secs() >= min)
        } else {
            // Stale: only if the client accepts it (section 5.2.1.2) and the
            // response does not forbid it (sections 5.2.2.2, 5.2.2.8, 5.2.2.10).
            let forbidden =
                res_cc.must_revalidate || res_cc.proxy_revalidate || res_cc.s_maxage.is_some();
            !forbidden
                && req_cc
                    .max_stale
                    .is_some_and(|limit| limit.is_none_or(|max| (age - lifetime).as_secs() <= max))
                && req_cc.max_age.is_none_or(|max| age.as_secs() <= max)
        };
    if reusable {
        return LookupDecision::Fresh { age };
    }
    if req_cc.only_if_cached {
        return LookupDecision::GatewayTimeout;
    }
    if partial || req_cc.no_store {
        return LookupDecision::Pass;
    }
    let conditional = conditional_headers(stored);
    if stale_while_revalidate_allows(&req_cc, res_cc, age, lifetime) {
        return LookupDecision::StaleWhileRevalidate { age, conditional };
    }
    if conditional.is_empty() {
        LookupDecision::Fetch
    } else {
        LookupDecision::Validate { conditional }
    }
}

/// Whether a stale response with these directives may be answered at once
/// while it is validated in the background (RFC 5861, section 3): within its
/// `stale-while-revalidate` window, never past `must-revalidate`,
/// `proxy-revalidate` or `s-maxage` (RFC 9111, sections 5.2.2.2, 5.2.2.8,
/// 5.2.2.10), nor for a client that asked for `no-cache`, a younger `max-age`
/// or `min-fresh` (a stale response satisfies neither).
fn stale_while_revalidate_allows(
    req_cc: &CacheControl,
    res_cc: &CacheControl,
    age: Duration,
    lifetime: Duration,
) -> bool {
    let Some(window) = res_cc.stale_while_revalidate else {
        return false;
    };
    age >= lifetime
        && (age - lifetime).as_secs() <= window
        && !(res_cc.no_cache
            || res_cc.must_revalidate
            || res_cc.proxy_revalidate
            || res_cc.s_maxage.is_some())
        && !req_cc.no_cache
        && req_cc.min_fresh.is_none()
        && req_cc.max_age.is_none_or(|max| age.as_secs() <= max)
}

/// The validators for a conditional request about `stored` (section 4.3.1).
pub fn conditional_headers(stored: &StoredResponse) -> HeaderMap {
    let mut conditional = HeaderMap::new();
    if let Some(etag) = stored.headers.get(header::ETAG) {
        conditional.insert(header::IF_NONE_MATCH, etag.clone());
    }
    if let Some(lm) = stored.headers.get(header::LAST_MODIFIED) {
        conditional.insert(header::IF_MODIFIED_SINCE, lm.clone());
    }
    conditional
}

/// The request fields a cache strips before it fills or validates: the
/// client's own conditionals and Range (the cache asks for the whole response,
/// then answers them itself).
pub const CLIENT_PRECONDITIONS: [HeaderName; 5] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
];

/// What the origin's response means for the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseDecision {
    /// Store this (replacing any entry under the key) and pass the response on.
    Store(StoredResponse),
    /// A 304 freshened the stored response: replace its head with this one and
    /// answer from the stored body (section 4.3.3).
    Freshen(StoredResponse),
    /// The origin answered a validation with an error that `stale-if-error`
    /// lets the stale stored response stand in for (RFC 5861, section 4):
    /// answer from the entry as it is, keep it, and pass the error nowhere.
    ServeStale,
    /// Pass the response on; store nothing. `invalidate` lists the effective
    /// URIs whose entries must go (section 4.4), and `discard` whether the entry
    /// under this request's key must go too (a 200 replaced an entry but could
    /// not be stored, or a 304 did not match it).
    Pass {
        /// Why it is not stored, for the debug log.
        reason: Option<NotStorable>,
        /// Drop the entry under this request's key.
        discard: bool,
    },
}

/// Decides what a response to a cache-driven request (`Fetch` or `Validate`)
/// does to the cache. `stored` is what was stored when the request went out.
pub fn decide_response(
    method: &Method,
    request: &HeaderMap,
    stored: Option<&StoredResponse>,
    status: StatusCode,
    response: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
) -> ResponseDecision {
    if status == StatusCode::NOT_MODIFIED {
        return match stored {
            Some(stored) => match freshen(stored, response, request_time, response_time) {
                Some(fresh) => ResponseDecision::Freshen(fresh),
                None => ResponseDecision::Pass {
                    reason: None,
                    discard: true,
                },
            },
            None => ResponseDecision::Pass {
                reason: Some(NotStorable::Status),
                discard: false,
            },
        };
    }
    if let Some(stored) = stored
        && stale_if_error_allows(request, stored, status, response_time)
    {
        return ResponseDecision::ServeStale;
    }
    match storable(method, request, status, response) {
        Ok(()) => ResponseDecision::Store(StoredResponse {
            status,
            headers: storable_headers(response),
            request_time,
            response_time,
            body_len: 0,
        }),
        // A 5xx in answer to a validation leaves the stored response alone: it
        // may serve a later request once the origin recovers. Anything else
        // that arrived in its place supersedes it.
        Err(reason) => ResponseDecision::Pass {
            reason: Some(reason),
            discard: stored.is_some() && !status.is_server_error(),
        },
    }
}

/// Whether `status` is an error RFC 5861 lets a stale response stand in for,
/// and the request's or the stored response's `stale-if-error` covers how
/// stale `stored` is at `now`. The request's directive wins where both say
/// (the client knows what it can use); `must-revalidate`, `proxy-revalidate`
/// and `s-maxage` forbid it (RFC 9111, sections 5.2.2.2, 5.2.2.8, 5.2.2.10:
/// a shared cache must not serve such a response stale, error or not).
pub fn stale_if_error_allows(
    request: &HeaderMap,
    stored: &StoredResponse,
    status: StatusCode,
    now: SystemTime,
) -> bool {
    if !matches!(status.as_u16(), 500 | 502 | 503 | 504) {
        return false;
    }
    let res_cc = CacheControl::parse(&stored.headers);
    if res_cc.must_revalidate || res_cc.proxy_revalidate || res_cc.s_maxage.is_some() {
        return false;
    }
    let Some(limit) = CacheControl::parse_request(request)
        .stale_if_error
        .or(res_cc.stale_if_error)
    else {
        return false;
    };
    let age = current_age(stored, now);
    let (lifetime, _) = freshness_lifetime(stored.status, &stored.headers, stored.response_time);
    age.saturating_sub(lifetime).as_secs() <= limit
}

/// The stored response updated by a 304 (sections 3.2, 4.3.4), or `None` when
/// the 304 describes a different representation.
pub fn freshen(
    stored: &StoredResponse,
    not_modified: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Option<StoredResponse> {
    match (
        not_modified.get(header::ETAG),
        stored.headers.get(header::ETAG),
    ) {
        (Some(new), Some(old)) if !same_etag(new, old) => return None,
        (Some(_), None) => return None,
        _ => {}
    }
    if not_modified.get(header::ETAG).is_none()
        && let (Some(new), Some(old)) = (
            not_modified.get(header::LAST_MODIFIED),
            stored.headers.get(header::LAST_MODIFIED),
        )
        && new != old
    {
        return None;
    }
    let mut headers = stored.headers.clone();
    let names: Vec<&HeaderName> = not_modified.keys().collect();
    for name in names {
        if *name == header::CONTENT_LENGTH || is_hop_by_hop(name) || is_per_client(name) {
            continue;
        }
        headers.remove(name);
        for value in not_modified.get_all(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    Some(StoredResponse {
        headers,
        request_time,
        response_time,
        ..stored.clone()
    })
}

/// Whether two ETag field values name the same entity tag by weak comparison
/// (RFC 9110, section 8.8.3.2). Values that are not an entity tag compare as
/// bytes: an origin whose tags are malformed still freshens its own entries.
fn same_etag(a: &HeaderValue, b: &HeaderValue) -> bool {
    match (
        EntityTag::parse(a.as_bytes()),
        EntityTag::parse(b.as_bytes()),
    ) {
        (Some(a), Some(b)) => a.weak_eq(&b),
        _ => a.as_bytes().trim_ascii() == b.as_bytes().trim_ascii(),
    }
}

/// The header fields worth storing: all but hop-by-hop ones (section 3.1).
pub fn storable_headers(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(split_list)
        .map(str::to_ascii_lowercase)
        .collect();
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if is_hop_by_hop(name) || named.iter().any(|n| n == name.as_str()) {
            continue;
        }
        kept.append(name.clone(), value.clone());
    }
    kept
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

/// Fields meant for the one browser whose request fetched the response: never
/// stored, so never served to another (see [`NotStorable::SetCookie`]). A 304
/// that freshens an entry passes them to its own browser only.
pub fn is_per_client(name: &HeaderName) -> bool {
    *name == header::SET_COOKIE
}

/// Which part of the stored body an answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodySlice {
    /// No body (HEAD, 304, 416).
    Empty,
    /// All of it.
    Whole,
    /// Bytes `start..end` (end exclusive).
    Range {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
}

/// The answer to a request from a stored response: status, header fields and
/// which bytes of the stored body follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    /// 200 (or the stored status), 206, 304 or 416.
    pub status: StatusCode,
    /// The header fields to send, `Age` and `Content-Length` included.
    pub headers: HeaderMap,
    /// The body bytes to send.
    pub body: BodySlice,
}

/// Builds the answer to `request` from `stored`, whose current age is `age`:
/// `Age` (section 5.1), the client's conditionals (section 4.3.2), Range
/// (RFC 9110, section 14) and HEAD (section 4.3.5 for the reverse direction;
/// RFC 9110, section 9.3.2).
pub fn answer_from_stored(
    method: &Method,
    request: &HeaderMap,
    stored: &StoredResponse,
    age: Duration,
) -> StoredAnswer {
    let mut headers = stored.headers.clone();
    // Entries stored before Set-Cookie made a response unstorable may hold one.
    headers.remove(header::SET_COOKIE);
    headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    if not_modified_for(request, &stored.headers) {
        return StoredAnswer {
            status: StatusCode::NOT_MODIFIED,
            headers: not_modified_headers(&headers),
            body: BodySlice::Empty,
        };
    }
    let len = stored.body_len;
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let head_only = method == Method::HEAD;
    let whole = |headers| StoredAnswer {
        status: stored.status,
        headers,
        body: if head_only {
            BodySlice::Empty
        } else {
            BodySlice::Whole
        },
    };
    let range = request.get(header::RANGE);
    if stored.status != StatusCode::OK || range.is_none() || !if_range_holds(request, stored) {
        return whole(headers);
    }
    match range.and_then(|r| parse_single_range(r.as_bytes(), len)) {
        Some(Ok((start, end))) => {
            headers.insert(
                header::CONTENT_RANGE,
                content_range(&format!("bytes {start}-{}/{len}", end - 1)),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
            StoredAnswer {
                status: StatusCode::PARTIAL_CONTENT,
                headers,
                body: if head_only {
                    BodySlice::Empty
                } else {
                    BodySlice::Range { start, end }
                },
            }
        }
        Some(Err(Unsatisfiable)) => {
            headers.insert(
                header::CONTENT_RANGE,
                content_range(&format!("bytes */{len}")),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            StoredAnswer {
                status: StatusCode::RANGE_NOT_SATISFIABLE,
                headers,
                body: BodySlice::Empty,
            }
        }
        // A Range the cache does not serve (several ranges, another unit, bad
        // syntax) is ignored: the whole response is a correct answer.
        None => whole(headers),
    }
}

fn content_range(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("bytes */0"))
}

/// `If-Range` (RFC 9110, section 13.1.5): the range applies only if the
/// validator still matches the stored response's, strongly.
fn if_range_holds(request: &HeaderMap, stored: &StoredResponse) -> bool {
    let validators = Validators {
        etag: stored_etag(&stored.headers),
        last_modified: stored
            .headers
            .get(header::LAST_MODIFIED)
            .and_then(conditional::http_date_secs),
    };
    conditional::if_range_holds(request, &validators)
}

/// The stored response's entity tag, if it has a valid one.
fn stored_etag(stored: &HeaderMap) -> Option<EntityTag<'_>> {
    stored
        .get(header::ETAG)
        .and_then(|etag| EntityTag::parse(etag.as_bytes()))
}

/// The fields a 304 carries from the full response's `headers` (RFC 9110,
/// section 15.4.5).
pub fn not_modified_headers(headers: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for name in [
        header::CACHE_CONTROL,
        header::CONTENT_LOCATION,
        header::DATE,
        header::ETAG,
        header::EXPIRES,
        header::VARY,
        header::AGE,
    ] {
        for value in headers.get_all(&name) {
            kept.append(name.clone(), value.clone());
        }
    }
    kept
}

/// Whether the client's own conditional request is answered with 304 (section
/// 4.3.2): `If-None-Match` by weak comparison, else `If-Modified-Since` against
/// `Last-Modified` (or `Date`). A malformed `If-None-Match` matches nothing
/// (the `http-semantics` crate's docs say why).
pub fn not_modified_for(request: &HeaderMap, stored: &HeaderMap) -> bool {
    let validators = Validators {
        etag: stored_etag(stored),
        last_modified: stored
            .get(header::LAST_MODIFIED)
            .and_then(conditional::http_date_secs)
            .or_else(|| {
                stored
                    .get(header::DATE)
                    .and_then(conditional::http_date_secs)
            }),
    };
    conditional::not_modified(request, &validators)
}

/// The field names a response's `Vary` lists, lower-case, in order, without
/// repeats; `None` for `Vary: *` (section 4.1).
pub fn vary_names(headers: &HeaderMap) -> Option<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for value in headers.get_all(header::VARY) {
        let value = value.to_str().ok()?;
        for name in split_list(value) {
            if name == "*" {
                return None;
            }
            let name = name.to_ascii_lowercase();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Some(names)
}

/// The secondary cache key: the request's values of the fields named by
/// `Vary` (section 4.1), normalised (lines combined, whitespace around commas
/// dropped). An absent field differs from an empty one.
pub fn secondary_key(names: &[String], request: &HeaderMap) -> Vec<u8> {
    let mut key = Vec::new();
    for name in names {
        key.extend_from_slice(name.as_bytes());
        let mut values = request.get_all(name.as_str()).iter().peekable();
        if values.peek().is_some() {
            key.push(b'=');
            let mut first = true;
            for value in values {
                for part in value.as_bytes().split(|&b| b == b',') {
                    if !first {
                        key.push(b',');
                    }
                    first = false;
                    key.extend_from_slice(part.trim_ascii());
                }
            }
        }
        key.push(b'\n');
    }
    key
}

/// The effective request URI (RFC 9110, section 7.1) as the cache keys it:
/// `http://host[:port]/path?query`, host lower-case, default port omitted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectiveUri(String);

impl EffectiveUri {
    /// From the verified host (lower-case, IPv6 without brackets), port and
    /// origin-form target.
    pub fn new(host: &str, port: u16, path_and_query: &str) -> Self {
        let host = host.to_ascii_lowercase();
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let path = if path_and_query.starts_with('/') {
            path_and_query.to_owned()
        } else {
            format!("/{path_and_query}")
        };
        if port == 80 {
            Self(format!("http://{host}{path}"))
        } else {
            Self(format!("http://{host}:{port}{path}"))
        }
    }

    /// The URI text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `http://host[:port]`: everything before the path.
    pub fn origin(&self) -> &str {
        let after_scheme = "http://".len();
        let end = self.0[after_scheme..]
            .find('/')
            .map_or(self.0.len(), |i| i + after_scheme);
        &self.0[..end]
    }

    /// A `Location` or `Content-Location` value resolved against this URI
    /// (RFC 3986, section 5, for the forms origins send: absolute, absolute
    /// path, relative path). `None` when it is on another origin or unusable.
    pub fn resolve_same_origin(&self, reference: &str) -> Option<EffectiveUri> {
        let reference = reference.trim();
        if reference.is_empty() || reference.starts_with("//") {
            return None;
        }
        if let Some(rest) = reference.strip_prefix("http://") {
            let uri: http::Uri = format!("http://{rest}").parse().ok()?;
            let authority = uri.authority()?;
            let resolved = EffectiveUri::new(
                authority.host().trim_matches(['[', ']']),
                authority.port_u16().unwrap_or(80),
                uri.path_and_query().map_or("/", |p| p.as_str()),
            );
            return (resolved.origin() == self.origin()).then_some(resolved);
        }
        if reference.contains("://") {
            return None;
        }
        if reference.starts_with('/') {
            return Some(Self(format!("{}{reference}", self.origin())));
        }
        let path_end = self.0.find('?').unwrap_or(self.0.len());
        let dir_end = self.0[..path_end].rfind('/').map_or(path_end, |i| i + 1);
        Some(Self(format!("{}{reference}", &self.0[..dir_end])))
    }
}

impl std::fmt::Display for EffectiveUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The URIs whose stored responses an unsafe request invalidates (section 4.4):
/// its target, and the same-origin `Location` and `Content-Location`, when the
/// response is not an error. Empty for safe methods.
pub fn invalidation_targets(
    method: &Method,
    target: &EffectiveUri,
    status: StatusCode,
    response: &HeaderMap,
) -> Vec<EffectiveUri> {
    let safe = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    if safe || !(status.is_success() || status.is_redirection()) {
        return Vec::new();
    }
    let mut targets = vec![target.clone()];
    for name in [header::LOCATION, header::CONTENT_LOCATION] {
        if let Some(uri) = response
            .get(&name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| target.resolve_same_origin(v))
            && !targets.contains(&uri)
        {
            targets.push(uri);
        }
    }
    targets
}

/// `Date` (RFC 9110, section 6.6.1), if present and valid.
fn date_value(headers: &HeaderMap) -> Option<SystemTime> {
    http_date(headers, &header::DATE)
}

fn http_date(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v.trim()).ok())
}

/// Delta-seconds (section 1.2.2): digits only, capped at 2^31.
fn parse_delta(value: &str) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        value
            .parse::<u64>()
            .unwrap_or(u64::MAX)
            .min(DELTA_SECONDS_MAX),
    )
}

/// The elements of a comma-separated list (RFC 9110, section 5.6.1), trimmed,
/// empty ones dropped. Commas inside quoted strings are not split.
fn split_list(value: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    for (i, c) in value.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts.into_iter().map(str::trim).filter(|p| !p.is_empty())
}
