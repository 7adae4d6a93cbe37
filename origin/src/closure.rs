//! The page closure: for a page the origin serves from its files, the
//! same-host subresources a browser will fetch for it, in the order to push
//! them (issue 31, "What to push", from the files). The push driver asks for
//! it when a page is requested; this module never sends anything.
//!
//! ```text
//!  closure(target, host)
//!    │ HEAD target through StaticFiles ── not 200, not HTML ──► []
//!    ▼
//!  kept for (scheme, host, path) with this ETag, and every stylesheet read
//!  for it still has its ETag (a HEAD each) ──► the kept closure
//!    │ else
//!    ▼
//!  GET the page (≤ max_html_bytes) ─► extract_html ─► same-host candidates
//!    │  stylesheets, breadth first (≤ max_stylesheets, imports followed
//!    │  css_import_depth deep): GET (≤ max_css_bytes) ─► extract_css
//!    ▼
//!  order: render-blocking first, then the rest; each class the page's
//!  own in document order, then what its stylesheets name
//!    ▼
//!  keep the candidates the files handler answers 200 (≤ max_entries) ─► kept
//! ```
//!
//! - **One extraction.** What a browser fetches is `page_resources`'s answer,
//!   the gateway prefetch's too: [`extract_html`] and [`extract_css`] on the
//!   whole bodies, with their byte limits ([`ExtractConfig`]).
//!   Render-blocking is the extraction's [`Resource::render_blocking`]:
//!   stylesheets and their `@import`s, synchronous classic scripts in
//!   `<head>`, fonts of those stylesheets, `modulepreload`, `preload
//!   as=font`, anything with `blocking=render`.
//! - **Same host only.** An entry is on the page's scheme, host and port (a
//!   push is for the page's host only: `//cdn...` and other hosts are out),
//!   as an origin-form target (`/path?query`). Left out as well: media (a
//!   browser asks for ranges, when it plays), frames (a document of their
//!   own) and manifests (fetched when the browser decides to).
//! - **The files handler's rules.** Every file is read through
//!   [`StaticFiles`], as a request for it would be: its path checks, index
//!   file, symlink policy and root. Nothing outside the root is read, and an
//!   entry the handler would not answer 200 (refused, missing, a directory)
//!   is not in the closure.
//! - **Once per file version.** A closure is kept per (scheme, Host, page
//!   path; the query is the files handler's to ignore) with the page's ETag
//!   and the ETag of each stylesheet read for it. A request whose page or
//!   any of those stylesheets has another ETag now gets a new closure. The
//!   images and scripts named are checked when the closure is made, not
//!   after: one added later joins with the page's next version. At most
//!   `max_pages` closures are kept; the least recently used goes first.
//!
//! Costs: a kept closure costs a HEAD of the page and of each stylesheet
//! read for it (answered from the files handler's small-file memory when
//! on); a new one a GET of the page and of its stylesheets, their parse on
//! the blocking pool, and a HEAD per candidate until `max_entries` are
//! found or four times that many were looked at. Two requests for a page
//! that is not kept may both work it out; the later result is kept. The
//! Host is the key's, so a site whose gateways send many Host values (a
//! wildcard in an origin's `hosts`) works out a closure for each, up to
//! `max_pages` at a time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use http::header::{CONTENT_TYPE, ETAG, HOST};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Version};
use http_semantics::RequestHead;
use page_resources::{ExtractConfig, Kind, Resource, extract_css, extract_html, is_css, is_html};
use url::Url;

use crate::files::StaticFiles;
use crate::sync::lock;

/// Default most closures kept (pages, per scheme and Host).
pub const DEFAULT_MAX_PAGES: usize = 1024;
/// Default most entries in one closure. A median page asks for about 70
/// subresources; the push driver applies its own `max_per_page` below it.
pub const DEFAULT_MAX_ENTRIES: usize = 256;
/// Default most stylesheets read for one page, imports included.
pub const DEFAULT_MAX_STYLESHEETS: usize = 32;
/// Longest Host value, bytes, a closure is worked out for: a DNS name (253),
/// a colon and a port.
pub const MAX_HOST_BYTES: usize = 259;
/// Longest entry target kept, bytes; a longer URL is left to the browser.
pub const MAX_TARGET_BYTES: usize = 2048;
/// Bytes asked of the files handler per read while a page or a stylesheet
/// is read.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Candidates looked at (a HEAD each) per entry a closure may hold.
const CHECKS_PER_ENTRY: usize = 4;

/// What a closure reads and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosureConfig {
    /// The extraction's window and byte limits (`max_html_bytes` of a page,
    /// `max_css_bytes` of a stylesheet) and how deep `@import`s are followed.
    pub extract: ExtractConfig,
    /// Most entries in one closure.
    pub max_entries: usize,
    /// Most stylesheets read for one page, imports included.
    pub max_stylesheets: usize,
    /// Most closures kept at once.
    pub max_pages: usize,
}

impl Default for ClosureConfig {
    fn default() -> Self {
        Self {
            extract: ExtractConfig::default(),
            max_entries: DEFAULT_MAX_ENTRIES,
            max_stylesheets: DEFAULT_MAX_STYLESHEETS,
            max_pages: DEFAULT_MAX_PAGES,
        }
    }
}

/// The scheme a page was requested over: `http` from a gateway, `https`
/// inside a TLS tunnel the origin terminates. References on the other
/// scheme are not the page's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageScheme {
    /// `http:`.
    Http,
    /// `https:`.
    Https,
}

impl PageScheme {
    fn as_str(self) -> &'static str {
        match self {
            PageScheme::Http => "http",
            PageScheme::Https => "https",
        }
    }
}

/// One subresource of a page's closure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosureEntry {
    /// Origin-form: `/path?query`, on the page's host.
    pub target: String,
    /// Whether the page's first rendering waits for it
    /// ([`Resource::render_blocking`]); these come first.
    pub render_blocking: bool,
    /// What the page uses it as (the `Accept` a browser would send).
    pub kind: Kind,
}

/// The closures of the pages of one document root, each worked out once per
/// file version. Share one per server.
#[derive(Debug)]
pub struct Closures {
    files: StaticFiles,
    config: ClosureConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    pages: HashMap<PageKey, Kept>,
    /// Counts lookups; a kept closure's `used` is the count at its last use.
    clock: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PageKey {
    scheme: PageScheme,
    /// Lower-case.
    host: String,
    /// The page's target without its query, as requested.
    path: String,
}

#[derive(Debug)]
struct Kept {
    /// What it was worked out from.
    versions: Versions,
    closure: Arc<[ClosureEntry]>,
    used: u64,
}

/// The stylesheets read for a closure: each one's target and ETag.
type Stylesheets = Vec<(String, HeaderValue)>;

/// The ETags a closure was worked out from.
#[derive(Debug, Clone)]
struct Versions {
    page: HeaderValue,
    stylesheets: Stylesheets,
}

/// A file as the files handler answered a request for it.
struct Read {
    etag: HeaderValue,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl Closures {
    /// Closures of the pages `files` serves.
    pub fn new(files: StaticFiles, config: ClosureConfig) -> Self {
        Self {
            files,
            config,
            state: Mutex::new(State::default()),
        }
    }

    /// The closure of the page at `target` (origin-form) on `host` (the
    /// request's Host), requested over `http:`. Empty when the target is not
    /// an HTML file the files handler answers 200, or `host` is not a plain
    /// authority.
    pub async fn closure(&self, target: &str, host: &str) -> Arc<[ClosureEntry]> {
        self.closure_for(PageScheme::Http, target, host).await
    }

    /// [`Closures::closure`] for a page requested over `scheme`.
    pub async fn closure_for(
        &self,
        scheme: PageScheme,
        target: &str,
        host: &str,
    ) -> Arc<[ClosureEntry]> {
        let Some(page) = page_url(scheme, host, target) else {
            return empty();
        };
        let Some((version, content_type)) = self.head(target, host).await else {
            return empty();
        };
        if !is_html(content_type.as_deref()) {
            return empty();
        }
        let key = PageKey {
            scheme,
            host: host.to_ascii_lowercase(),
            path: target.split('?').next().unwrap_or_default().to_owned(),
        };
        if let Some((closure, stylesheets)) = self.kept(&key, &version)
            && self.still_current(&stylesheets, host).await
        {
            return closure;
        }
        let Some((versions, closure)) = self.work_out(&page, target, host).await else {
            return empty();
        };
        self.keep(key, versions, Arc::clone(&closure));
        closure
    }

    /// How many closures are kept.
    pub fn kept_pages(&self) -> usize {
        lock(&self.state).pages.len()
    }

    /// The kept closure of `key` if it was worked out from `version` of the
    /// page, and the stylesheets to check.
    fn kept(
        &self,
        key: &PageKey,
        version: &HeaderValue,
    ) -> Option<(Arc<[ClosureEntry]>, Stylesheets)> {
        let mut state = lock(&self.state);
        state.clock += 1;
        let now = state.clock;
        let kept = state.pages.get_mut(key)?;
        if kept.versions.page != version {
            return None;
        }
        kept.used = now;
        Some((Arc::clone(&kept.closure), kept.versions.stylesheets.clone()))
    }

    /// Whether every stylesheet still has the ETag it was read with.
    async fn still_current(&self, stylesheets: &[(String, HeaderValue)], host: &str) -> bool {
        for (target, etag) in stylesheets {
            match self.head(target, host).await {
                Some((now, _)) if now == etag => {}
                _ => return false,
            }
        }
        true
    }

    fn keep(&self, key: PageKey, versions: Versions, closure: Arc<[ClosureEntry]>) {
        if self.config.max_pages == 0 {
            return;
        }
        let mut state = lock(&self.state);
        state.clock += 1;
        let used = state.clock;
        if !state.pages.contains_key(&key) && state.pages.len() >= self.config.max_pages {
            // Least recently used out: a scan, once per closure worked out,
            // which costs far more than it.
            let oldest = state
                .pages
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                state.pages.remove(&oldest);
            }
        }
        state.pages.insert(
            key,
            Kept {
                versions,
                closure,
                used,
            },
        );
    }

    /// Reads the page and its stylesheets and works out the closure.
    async fn work_out(
        &self,
        page: &Url,
        target: &str,
        host: &str,
    ) -> Option<(Versions, Arc<[ClosureEntry]>)> {
        let extract = self.config.extract;
        let Read {
            etag: version,
            content_type,
            body,
        } = self.read(target, host, extract.max_html_bytes).await?;
        if !is_html(content_type.as_deref()) {
            return None;
        }
        let document = page.clone();
        let found = tokio::task::spawn_blocking(move || {
            extract_html(&document, content_type.as_deref(), &body, &extract)
        })
        .await
        .ok()?;
        let mut sheets: VecDeque<(Url, u32)> = VecDeque::new();
        let mut from_page = Vec::new();
        for resource in found.into_iter().filter(|r| is_candidate(r, page)) {
            if resource.kind == Kind::Style {
                sheets.push_back((resource.url.clone(), 0));
            }
            from_page.push(resource);
        }

        let mut read_sheets: Stylesheets = Vec::new();
        let mut looked_at: HashSet<Url> = HashSet::new();
        let mut from_sheets = Vec::new();
        while let Some((sheet, level)) = sheets.pop_front() {
            if looked_at.len() >= self.config.max_stylesheets {
                break;
            }
            if !looked_at.insert(sheet.clone()) {
                continue;
            }
            let sheet_target = origin_form(&sheet);
            let Some(css) = self.read(sheet_target, host, extract.max_css_bytes).await else {
                continue;
            };
            read_sheets.push((sheet_target.to_owned(), css.etag.clone()));
            if !(css.content_type.is_none() || is_css(css.content_type.as_deref())) {
                continue;
            }
            let url = sheet.clone();
            let Ok(found) = tokio::task::spawn_blocking(move || {
                extract_css(&url, css.content_type.as_deref(), None, &css.body, &extract).into_vec()
            })
            .await
            else {
                continue;
            };
            for resource in found.into_iter().filter(|r| is_candidate(r, page)) {
                if resource.kind == Kind::Style && level < extract.css_import_depth {
                    sheets.push_back((resource.url.clone(), level + 1));
                }
                from_sheets.push(resource);
            }
        }

        let readable: HashSet<&str> = read_sheets.iter().map(|(t, _)| t.as_str()).collect();
        let mut entries = Vec::new();
        let most_checks = self.config.max_entries.saturating_mul(CHECKS_PER_ENTRY);
        for (checks, entry) in ordered(&from_page, &from_sheets).into_iter().enumerate() {
            if entries.len() >= self.config.max_entries || checks >= most_checks {
                break;
            }
            if readable.contains(entry.target.as_str())
                || self.head(&entry.target, host).await.is_some()
            {
                entries.push(entry);
            }
        }
        let versions = Versions {
            page: version,
            stylesheets: read_sheets,
        };
        Some((versions, entries.into()))
    }

    /// The ETag and Content-Type of `target` if the files handler answers
    /// it 200.
    async fn head(&self, target: &str, host: &str) -> Option<(HeaderValue, Option<String>)> {
        let response = self
            .files
            .respond(&request(Method::HEAD, target, host)?)
            .await;
        if response.head.status != StatusCode::OK {
            return None;
        }
        let etag = response.head.get(ETAG.as_str())?.clone();
        Some((etag, content_type(&response.head)))
    }

    /// The first `max_bytes` of `target` if the files handler answers it
    /// 200. A file that fails mid-read gives what was read.
    async fn read(&self, target: &str, host: &str, max_bytes: u64) -> Option<Read> {
        let response = self
            .files
            .respond(&request(Method::GET, target, host)?)
            .await;
        if response.head.status != StatusCode::OK {
            return None;
        }
        let etag = response.head.get(ETAG.as_str())?.clone();
        let content_type = content_type(&response.head);
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let mut source = response.body;
        let mut body = Vec::new();
        while body.len() < cap {
            match source
                .read_chunk(READ_CHUNK_BYTES.min(cap - body.len()))
                .await
            {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        Some(Read {
            etag,
            content_type,
            body,
        })
    }
}

fn empty() -> Arc<[ClosureEntry]> {
    Arc::from(Vec::new())
}

/// The page's URL, if `host` is a plain authority (no user, path, query or
/// fragment smuggled in) and `target` origin-form.
fn page_url(scheme: PageScheme, host: &str, target: &str) -> Option<Url> {
    if host.is_empty()
        || host.len() > MAX_HOST_BYTES
        || !target.starts_with('/')
        || target.starts_with("//")
    {
        return None;
    }
    let origin = Url::parse(&format!("{}://{host}/", scheme.as_str())).ok()?;
    let plain = origin.host().is_some()
        && origin.username().is_empty()
        && origin.password().is_none()
        && origin.path() == "/"
        && origin.query().is_none()
        && origin.fragment().is_none();
    if !plain {
        return None;
    }
    let page = origin.join(target).ok()?;
    (page.origin() == origin.origin()).then_some(page)
}

/// A request for `target` as the files handler takes it.
fn request(method: Method, target: &str, host: &str) -> Option<RequestHead> {
    let mut headers = HeaderMap::new();
    headers.insert(HOST, HeaderValue::from_str(host).ok()?);
    Some(RequestHead {
        method,
        target: target.to_owned(),
        version: Version::HTTP_11,
        headers,
    })
}

fn content_type(head: &http_semantics::ResponseHead) -> Option<String> {
    head.get(CONTENT_TYPE.as_str())
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `/path?query` of `url`.
fn origin_form(url: &Url) -> &str {
    &url[url::Position::BeforePath..url::Position::AfterQuery]
}

/// Whether a found resource may be in the closure: on the page's origin, a
/// kind that is pushed, a target of sane length.
fn is_candidate(resource: &Resource, page: &Url) -> bool {
    let pushed = match resource.kind {
        Kind::Image | Kind::Script | Kind::Style | Kind::Font | Kind::Icon | Kind::Other => true,
        Kind::Media | Kind::Document | Kind::Manifest => false,
    };
    pushed
        && resource.url.origin() == page.origin()
        && origin_form(&resource.url).len() <= MAX_TARGET_BYTES
}

/// The push order: render-blocking entries first, then the rest; in each,
/// the page's own in document order, then its stylesheets' in the order
/// they were read. A target found several times is listed once, at its
/// first place in its class, and is render-blocking if any finding is.
fn ordered(from_page: &[Resource], from_sheets: &[Resource]) -> Vec<ClosureEntry> {
    let all = || from_page.iter().chain(from_sheets);
    let blocking: HashSet<&str> = all()
        .filter(|r| r.render_blocking)
        .map(|r| origin_form(&r.url))
        .collect();
    let mut listed: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for first_class in [true, false] {
        for resource in all() {
            let target = origin_form(&resource.url);
            if blocking.contains(target) != first_class || !listed.insert(target) {
                continue;
            }
            out.push(ClosureEntry {
                target: target.to_owned(),
                render_blocking: first_class,
                kind: resource.kind,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
