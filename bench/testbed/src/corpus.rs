//! A generated page corpus shaped like real pages, and the physical lower bound
//! of loading a page.
//!
//! - [`PROFILES`]: the 25th, 50th and 75th percentile page of the HTTP
//!   Archive's Web Almanac 2024 (desktop): requests and bytes per kind of
//!   object. bench/README.md ("Page corpus") gives every figure with its source
//!   and the assumptions where the source has no figure.
//! - [`generate`]: writes one page per profile under a directory, the same bytes
//!   for the same seed. The HTML links stylesheets and scripts in `<head>`,
//!   images in the body and scripts at its end; the stylesheets reference the
//!   fonts (`@font-face`) and some background images, so a page has two levels
//!   of dependency as real pages do. Every URL is a same-origin relative path,
//!   because the gateway prefetches same-origin resources only.
//! - [`lower_bound`]: the time no server, proxy or cache can beat on a given
//!   link, for a generated page or one [`describe_dir`] found in a site.
//!
//! Every file is dated [`FILE_AGE`] before it was written, as a deployed site's
//! files are: a file written seconds before a load would carry a
//! `Last-Modified` seconds old, so any cache (the gateway's, Squid's) would
//! give it a heuristic freshness of a fraction of a second (a tenth of its age,
//! RFC 9111 section 4.2.2) and revalidate what it fetched a moment ago.
//!
//! What it never does: fetch anything, or write outside the directory it is
//! given.
//!
//! Where to start: [`generate`], then [`lower_bound`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use rand::{Rng as _, RngCore as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, TestbedError, io};

/// The HTTP Archive reports kilobytes of 1,024 bytes.
const KB: u64 = 1024;

/// No generated object but the HTML is smaller than this (bytes): the smallest
/// decodable PNG with its padding chunk needs about 520, and a stylesheet's
/// rules a few hundred.
pub const MIN_OBJECT_BYTES: u64 = 1024;

/// How old every generated file is made to look (its modification time, hence
/// the origin's and nginx's `Last-Modified`): 30 days, so the heuristic
/// freshness of a cache reaches its usual one-day cap.
pub const FILE_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The spread of object sizes within a kind: each object's share is
/// log-normal with this σ (of the natural logarithm). 1.0 gives the long tail
/// of real pages: most objects small, a few several times the mean.
const SIZE_SIGMA: f64 = 1.0;

/// The deepest dependency level [`describe_dir`] follows (`@import` chains).
const MAX_SCAN_DEPTH: u8 = 4;

/// How many requests and bytes a page has of one kind of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindFigure {
    /// Objects (requests).
    pub count: u32,
    /// Bytes of all of them together (response bodies, uncompressed).
    pub bytes: u64,
}

/// One page of the corpus: per kind of object, the count and the byte total a
/// percentile of real pages has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageProfile {
    /// The page's name and directory, e.g. `p50`.
    pub name: &'static str,
    /// The percentile of the HTTP Archive's distributions it stands for.
    pub percentile: u8,
    /// The document itself: always one (the Almanac counts every HTML response
    /// of a page, frames included; the corpus has one document).
    pub html: KindFigure,
    /// Stylesheets, all linked from the HTML.
    pub css: KindFigure,
    /// Scripts, all referenced by the HTML.
    pub js: KindFigure,
    /// Images: `<img>` in the HTML and [`PageProfile::background_images`] of
    /// them as CSS backgrounds.
    pub image: KindFigure,
    /// Fonts, all referenced by stylesheets (`@font-face`).
    pub font: KindFigure,
    /// How many of the images a stylesheet references (depth 2) rather than
    /// the HTML (an assumption: the Almanac does not split them).
    pub background_images: u32,
    /// Where the figures come from.
    pub source: &'static str,
}

const SOURCE: &str = "HTTP Archive, Web Almanac 2024, chapter \"Page Weight\", desktop \
     (https://almanac.httparchive.org/en/2024/page-weight); one HTML document per page, \
     HTML bytes at p25/p75, font bytes at p25/p75 and the background-image share assumed \
     (bench/README.md, \"Page corpus\")";

const fn figure(count: u32, kilobytes: u64) -> KindFigure {
    KindFigure {
        count,
        bytes: kilobytes * KB,
    }
}

/// The corpus's pages: the 25th, 50th and 75th percentile desktop page of
/// 2024. Each kind's figures are that kind's own percentile, so a profile is
/// not one real page but a page that is typical in every kind at once.
pub const PROFILES: &[PageProfile] = &[
    PageProfile {
        name: "p25",
        percentile: 25,
        html: figure(1, 9),
        css: figure(4, 36),
        js: figure(12, 270),
        image: figure(9, 322),
        font: figure(2, 65),
        background_images: 1,
        source: SOURCE,
    },
    PageProfile {
        name: "p50",
        percentile: 50,
        html: figure(1, 18),
        css: figure(8, 80),
        js: figure(24, 620),
        image: figure(18, 1054),
        font: figure(4, 131),
        background_images: 3,
        source: SOURCE,
    },
    PageProfile {
        name: "p75",
        percentile: 75,
        html: figure(1, 35),
        css: figure(16, 152),
        js: figure(43, 1172),
        image: figure(33, 2822),
        font: figure(7, 229),
        background_images: 5,
        source: SOURCE,
    },
];

impl PageProfile {
    /// The profile called `name` (`p50`, ...).
    pub fn by_name(name: &str) -> Option<&'static PageProfile> {
        PROFILES.iter().find(|p| p.name == name)
    }

    /// The figures for one kind.
    pub fn figure(&self, kind: ObjectKind) -> KindFigure {
        match kind {
            ObjectKind::Html => self.html,
            ObjectKind::Css => self.css,
            ObjectKind::Js => self.js,
            ObjectKind::Image => self.image,
            ObjectKind::Font => self.font,
        }
    }

    /// Objects of every kind.
    pub fn total_count(&self) -> u32 {
        ObjectKind::ALL.iter().map(|k| self.figure(*k).count).sum()
    }

    /// Bytes of every kind.
    pub fn total_bytes(&self) -> u64 {
        ObjectKind::ALL.iter().map(|k| self.figure(*k).bytes).sum()
    }
}

/// What an object is to the browser; the file extension says it to the
/// servers (Content-Type) and to [`describe_dir`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// The document (`.html`).
    Html,
    /// A stylesheet (`.css`).
    Css,
    /// A script (`.js`).
    Js,
    /// An image (`.png` when generated; `.svg`, `.jpg`, `.gif`, `.webp`,
    /// `.ico` found by [`describe_dir`]).
    Image,
    /// A font (`.woff2` when generated; `.woff`, `.ttf`, `.otf` found).
    Font,
}

impl ObjectKind {
    /// Every kind, in the order pages list them.
    pub const ALL: [ObjectKind; 5] = [
        ObjectKind::Html,
        ObjectKind::Css,
        ObjectKind::Js,
        ObjectKind::Image,
        ObjectKind::Font,
    ];

    /// The kind a file extension (without the dot, any case) stands for.
    pub fn from_extension(extension: &str) -> Option<ObjectKind> {
        Some(match extension.to_ascii_lowercase().as_str() {
            "html" | "htm" => ObjectKind::Html,
            "css" => ObjectKind::Css,
            "js" | "mjs" => ObjectKind::Js,
            "png" | "jpg" | "jpeg" | "gif" | "svg" | "webp" | "avif" | "ico" => ObjectKind::Image,
            "woff2" | "woff" | "ttf" | "otf" => ObjectKind::Font,
            _ => return None,
        })
    }

    /// The lower-case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Html => "html",
            ObjectKind::Css => "css",
            ObjectKind::Js => "js",
            ObjectKind::Image => "image",
            ObjectKind::Font => "font",
        }
    }
}

/// One object of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSpec {
    /// Its URL path, e.g. `/p50/css/0.css` (the document's is the page's
    /// [`GeneratedPage::url_path`]).
    pub path: String,
    /// What it is.
    pub kind: ObjectKind,
    /// Its size in bytes (the response body, uncompressed).
    pub bytes: u64,
    /// 0 the HTML, 1 referenced by the HTML, 2 referenced by a stylesheet the
    /// HTML references (3 and more: `@import` chains, from [`describe_dir`]).
    pub depth: u8,
}

/// A page: its document and everything the document pulls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedPage {
    /// The profile's name, or the page path [`describe_dir`] was given.
    pub name: String,
    /// The URL path a browser loads, e.g. `/p50/`.
    pub url_path: String,
    /// The HTML first, then what it references, then their references.
    pub objects: Vec<ObjectSpec>,
}

impl GeneratedPage {
    /// Bytes of every object.
    pub fn total_bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.bytes).sum()
    }

    /// The deepest dependency level (0 for a page that is only HTML).
    pub fn max_depth(&self) -> u8 {
        self.objects.iter().map(|o| o.depth).max().unwrap_or(0)
    }

    /// The objects of one kind.
    pub fn of_kind(&self, kind: ObjectKind) -> impl Iterator<Item = &ObjectSpec> {
        self.objects.iter().filter(move |o| o.kind == kind)
    }

    /// The objects at one depth.
    pub fn at_depth(&self, depth: u8) -> impl Iterator<Item = &ObjectSpec> {
        self.objects.iter().filter(move |o| o.depth == depth)
    }
}

/// Writes every profile's page under `root` (`root/p50/index.html`,
/// `root/p50/css/0.css`, ...; directories created, files overwritten) and
/// returns their descriptions in [`PROFILES`] order.
///
/// The same seed gives the same bytes (on the same platform: the size spread
/// goes through `f64` logarithms). Each profile draws from its own ChaCha
/// stream, so one profile's page does not change when another's figures do.
pub fn generate(root: &Path, seed: u64) -> Result<Vec<GeneratedPage>> {
    PROFILES
        .iter()
        .enumerate()
        .map(|(index, profile)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(index as u64);
            generate_page(root, profile, &mut rng)
        })
        .collect()
}

/// The link a page is loaded over, for [`lower_bound`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The round-trip time between browser and server.
    pub rtt: Duration,
    /// The bottleneck rate, bits per second.
    pub rate_bits_per_second: u64,
}

/// The floor of loading `page` over `link` when all its bytes cross the link:
///
/// ```text
/// floor = rtt + total_bytes × 8 / rate
/// ```
///
/// The first request must go out and its first byte come back (one round
/// trip), and every byte of every object must pass the bottleneck once. No
/// protocol, prefetch or push that fetches the page across the link can do
/// better, whatever it overlaps; only a cache on this side of the link can
/// (it does not cross it). Request bytes, headers and slow start only add. A
/// rate of zero gives [`Duration::MAX`].
pub fn floor(page: &GeneratedPage, link: &Link) -> Duration {
    link.rtt.saturating_add(transfer_time(page, link))
}

/// What a browser that discovers each dependency level itself can do at
/// best over `link`, having to pay `handshakes` round trips of connection
/// set-up across it first:
///
/// ```text
/// discovery_bound = rtt × (handshakes + 1 + max_depth) + total_bytes × 8 / rate
/// ```
///
/// After the handshakes, one round trip per dependency level: the HTML
/// (depth 0), the objects it references (depth 1), what those reference
/// (depth 2), ..., because the URLs of a level are known only once the level
/// above has arrived; then every byte through the bottleneck once. It is not
/// a bound on loads that do not discover level by level (a proxy that
/// fetches ahead, an origin that pushes), and even a browser can overlap a
/// level's round trip with the bytes of the level above, so it is a
/// reference, not a floor: [`floor`] is the floor. A rate of zero gives
/// [`Duration::MAX`].
pub fn discovery_bound(page: &GeneratedPage, link: &Link, handshakes: u32) -> Duration {
    let round_trips = handshakes + 1 + u32::from(page.max_depth());
    link.rtt
        .saturating_mul(round_trips)
        .saturating_add(transfer_time(page, link))
}

/// [`discovery_bound`] with one handshake (TCP's, no TLS): what earlier
/// reports called the lower bound.
pub fn lower_bound(page: &GeneratedPage, link: &Link) -> Duration {
    discovery_bound(page, link, 1)
}

/// Every byte of the page through the bottleneck once (what [`floor`] adds
/// to its round trip). A rate of zero gives [`Duration::MAX`].
pub fn transfer_time(page: &GeneratedPage, link: &Link) -> Duration {
    if link.rate_bits_per_second == 0 {
        return Duration::MAX;
    }
    let bits = u128::from(page.total_bytes()) * 8;
    let nanos = bits * 1_000_000_000 / u128::from(link.rate_bits_per_second);
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

/// Describes a page of a hand-made site (the demo site, say) by scanning its
/// HTML and stylesheets for references, so it gets a [`lower_bound`] too.
///
/// `page` is the URL path a browser would load, relative to `root` as the
/// site's root (`/`, `/index.html`, `/p50/`); a path ending in `/` means its
/// `index.html`.
///
/// The scan is simple, and enough for our own sites, not for the web:
/// `<img src>`, `<script src>`, `<link href>` with `rel` stylesheet, icon,
/// preload or modulepreload, `<source src>` and `<video poster>` in the HTML
/// (comments, and the contents of `<script>` and `<style>`, skipped; no
/// `srcset`, no inline styles), `url()` and `@import` in stylesheets
/// (followed to [`MAX_SCAN_DEPTH`]). References with a scheme (`data:`,
/// `http:`) or starting with `//` are left out: they are inline or not
/// same-origin. Each file counts once, at the shallowest depth it is
/// referenced from. A referenced file that is missing, or whose extension
/// names no [`ObjectKind`], is an error.
pub fn describe_dir(root: &Path, page: &str) -> Result<GeneratedPage> {
    if !page.starts_with('/') {
        return Err(corpus_error(
            root,
            format!("page path {page:?} does not start with /"),
        ));
    }
    let document_path = if page.ends_with('/') {
        format!("{page}index.html")
    } else {
        page.to_owned()
    };
    let html_file = file_of(root, &document_path);
    let html = std::fs::read(&html_file).map_err(io(format!("reading {}", html_file.display())))?;
    let mut objects = vec![ObjectSpec {
        path: page.to_owned(),
        kind: ObjectKind::Html,
        bytes: html.len() as u64,
        depth: 0,
    }];
    let mut seen = BTreeSet::from([document_path.clone()]);
    let mut level: Vec<String> = html_references(&String::from_utf8_lossy(&html))
        .iter()
        .filter_map(|reference| resolve(&document_path, reference))
        .collect();
    let mut depth = 1;
    while !level.is_empty() && depth <= MAX_SCAN_DEPTH {
        let mut next = Vec::new();
        for path in level {
            if !seen.insert(path.clone()) {
                continue;
            }
            let file = file_of(root, &path);
            let kind = Path::new(&path)
                .extension()
                .and_then(|e| e.to_str())
                .and_then(ObjectKind::from_extension)
                .ok_or_else(|| {
                    corpus_error(&file, "referenced, but its extension names no object kind")
                })?;
            let bytes = std::fs::metadata(&file)
                .map_err(io(format!(
                    "{path} is referenced; reading {}",
                    file.display()
                )))?
                .len();
            if kind == ObjectKind::Css {
                let text =
                    std::fs::read(&file).map_err(io(format!("reading {}", file.display())))?;
                next.extend(
                    css_references(&String::from_utf8_lossy(&text))
                        .iter()
                        .filter_map(|reference| resolve(&path, reference)),
                );
            }
            objects.push(ObjectSpec {
                path,
                kind,
                bytes,
                depth,
            });
        }
        level = next;
        depth += 1;
    }
    Ok(GeneratedPage {
        name: page.to_owned(),
        url_path: page.to_owned(),
        objects,
    })
}

fn corpus_error(path: &Path, what: impl Into<String>) -> TestbedError {
    TestbedError::Corpus {
        path: path.to_owned(),
        what: what.into(),
    }
}

/// The file under `root` for an absolute URL path.
fn file_of(root: &Path, url_path: &str) -> PathBuf {
    root.join(url_path.trim_start_matches('/'))
}

/// `reference` resolved against the URL path of the document it appears in,
/// without query or fragment and with `.` and `..` segments removed; `None`
/// for what is not a same-origin path (a scheme, `//host`, empty, `#frag`).
fn resolve(document: &str, reference: &str) -> Option<String> {
    let reference = reference.trim();
    let reference = reference
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .trim();
    if reference.is_empty() || reference.starts_with("//") {
        return None;
    }
    let scheme_end = reference.find(':');
    let first_separator = reference.find('/');
    if let Some(colon) = scheme_end
        && first_separator.is_none_or(|slash| colon < slash)
    {
        return None;
    }
    let joined = if reference.starts_with('/') {
        reference.to_owned()
    } else {
        let base = &document[..document.rfind('/').map_or(0, |i| i + 1)];
        format!("{base}{reference}")
    };
    let mut segments: Vec<&str> = Vec::new();
    for segment in joined.split('/').skip(1) {
        match segment {
            "." | "" => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    Some(format!("/{}", segments.join("/")))
}

/// The subresource URLs of an HTML document, in document order (see
/// [`describe_dir`] for what counts).
fn html_references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(offset) = lower[at..].find('<') {
        let start = at + offset;
        if lower[start..].starts_with("<!--") {
            at = lower[start..]
                .find("-->")
                .map_or(lower.len(), |end| start + end + 3);
            continue;
        }
        let Some(end) = lower[start..].find('>').map(|e| start + e) else {
            break;
        };
        let (name, attributes) = parse_tag(&html[start + 1..end]);
        let attribute = |key: &str| {
            attributes
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        match name.as_str() {
            "img" | "script" | "source" => found.extend(attribute("src")),
            "video" => found.extend(attribute("poster")),
            "link" => {
                let rel = attribute("rel").unwrap_or_default().to_ascii_lowercase();
                if rel
                    .split_ascii_whitespace()
                    .any(|r| matches!(r, "stylesheet" | "icon" | "preload" | "modulepreload"))
                {
                    found.extend(attribute("href"));
                }
            }
            _ => {}
        }
        at = end + 1;
        if matches!(name.as_str(), "script" | "style") {
            let close = format!("</{name}");
            at = lower[at..].find(&close).map_or(lower.len(), |c| at + c);
        }
    }
    found
}

/// A start tag's lower-case name and its attributes (names lower-case, values
/// unquoted; entities are not decoded, which our sites do not need).
fn parse_tag(tag: &str) -> (String, Vec<(String, String)>) {
    let bytes = tag.as_bytes();
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
        i += 1;
    }
    let name = tag[..i].to_ascii_lowercase();
    let mut attributes = Vec::new();
    loop {
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b'/') {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let key_start = i;
        while i < bytes.len() && !matches!(bytes[i], b'=' | b'/') && !bytes[i].is_ascii_whitespace()
        {
            i += 1;
        }
        let key = tag[key_start..i].to_ascii_lowercase();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < bytes.len() && bytes[i] == b'=' {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < bytes.len() && matches!(bytes[i], b'"' | b'\'') {
                let quote = bytes[i];
                let value_start = i + 1;
                i = value_start;
                while i < bytes.len() && bytes[i] != quote {
                    i += 1;
                }
                value = tag[value_start..i].to_owned();
                i += 1;
            } else {
                let value_start = i;
                while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                value = tag[value_start..i].to_owned();
            }
        }
        if key.is_empty() {
            i += 1;
        } else {
            attributes.push((key, value));
        }
    }
    (name, attributes)
}

/// The `url()` and `@import` targets of a stylesheet, in order, comments
/// skipped.
fn css_references(css: &str) -> Vec<String> {
    let mut text = String::with_capacity(css.len());
    let mut rest = css;
    while let Some(open) = rest.find("/*") {
        text.push_str(&rest[..open]);
        rest = rest[open + 2..]
            .find("*/")
            .map_or("", |close| &rest[open + 2 + close + 2..]);
    }
    text.push_str(rest);
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut at = 0;
    loop {
        let url = lower[at..].find("url(").map(|i| (at + i, false));
        let import = lower[at..].find("@import").map(|i| (at + i, true));
        let next = match (url, import) {
            (Some(u), Some(m)) => Some(if u.0 < m.0 { u } else { m }),
            (u, m) => u.or(m),
        };
        let Some((start, is_import)) = next else {
            break;
        };
        if is_import {
            let after = text[start + "@import".len()..].trim_start();
            if let Some(quote @ ('"' | '\'')) = after.chars().next()
                && let Some(close) = after[1..].find(quote)
            {
                found.push(after[1..1 + close].to_owned());
            }
            // `@import url(...)` is picked up as a url() next.
            at = start + "@import".len();
        } else {
            let inner_start = start + "url(".len();
            let Some(close) = text[inner_start..].find(')') else {
                break;
            };
            let inner = text[inner_start..inner_start + close].trim();
            found.push(inner.trim_matches(['"', '\'']).to_owned());
            at = inner_start + close + 1;
        }
    }
    found
}

// ---------------------------------------------------------------------------
// Generation

/// The `<img>` size in CSS pixels: every generated image is 16:9.
const IMG_WIDTH: u32 = 240;
const IMG_HEIGHT: u32 = 135;

/// Intrinsic image sizes, largest first; the largest whose pixels take at most
/// half the file is used, the rest of the file is padding.
const IMAGE_LADDER: &[(u32, u32)] = &[(320, 180), (160, 90), (80, 45), (32, 18), (16, 9)];

/// Words for the visible text, so the page reads like a page in a screenshot.
const WORDS: &[&str] = &[
    "network", "gateway", "origin", "stream", "latency", "prefetch", "cache", "browser", "page",
    "round", "trip", "bytes", "queue", "packet", "link", "rate", "loss", "window", "object",
    "style", "script", "image", "font", "layout",
];

/// One generated page being put together: its sizes and layout.
struct Plan<'a> {
    profile: &'a PageProfile,
    css: Vec<u64>,
    js: Vec<u64>,
    images: Vec<u64>,
    fonts: Vec<u64>,
    /// Images from this index on are CSS backgrounds.
    first_background: usize,
    /// Scripts before this index go in `<head>`.
    head_scripts: usize,
}

impl Plan<'_> {
    /// The stylesheet that references font `font`: spread round-robin.
    fn css_of_font(&self, font: usize) -> usize {
        font % self.css.len().max(1)
    }

    /// The stylesheet that references background image `image`.
    fn css_of_background(&self, image: usize) -> usize {
        (self.fonts.len() + image - self.first_background) % self.css.len().max(1)
    }
}

/// Writes `bytes` to `file` and dates it [`FILE_AGE`] ago.
fn write_dated(file: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(file, bytes).map_err(io(format!("writing {}", file.display())))?;
    let modified = std::time::SystemTime::now()
        .checked_sub(FILE_AGE)
        .unwrap_or(std::time::UNIX_EPOCH);
    std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|handle| handle.set_modified(modified))
        .map_err(io(format!("dating {}", file.display())))
}

fn generate_page(
    root: &Path,
    profile: &PageProfile,
    rng: &mut ChaCha8Rng,
) -> Result<GeneratedPage> {
    let dir = root.join(profile.name);
    for sub in ["css", "js", "img", "font"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
    }
    let background = profile.background_images.min(profile.image.count) as usize;
    let plan = Plan {
        profile,
        css: split(rng, profile.css, &dir)?,
        js: split(rng, profile.js, &dir)?,
        images: split(rng, profile.image, &dir)?,
        fonts: split(rng, profile.font, &dir)?,
        first_background: profile.image.count as usize - background,
        head_scripts: (profile.js.count as usize).div_ceil(3),
    };
    if plan.css.is_empty() && (!plan.fonts.is_empty() || background > 0) {
        return Err(corpus_error(
            &dir,
            "fonts and background images need a stylesheet to reference them",
        ));
    }
    let base = format!("/{}/", profile.name);
    let mut depth1 = Vec::new();
    let mut depth2 = Vec::new();
    let mut write = |relative: String, bytes: Vec<u8>, kind, depth| -> Result<()> {
        let file = dir.join(&relative);
        write_dated(&file, &bytes)?;
        let spec = ObjectSpec {
            path: format!("{base}{relative}"),
            kind,
            bytes: bytes.len() as u64,
            depth,
        };
        if depth == 1 {
            depth1.push(spec);
        } else {
            depth2.push(spec);
        }
        Ok(())
    };
    for (i, size) in plan.css.iter().enumerate() {
        let text = stylesheet(&plan, i, *size, rng, &dir)?;
        write(
            format!("css/{i}.css"),
            text.into_bytes(),
            ObjectKind::Css,
            1,
        )?;
    }
    for (i, size) in plan.js.iter().enumerate() {
        let text = script(i, *size, rng, &dir)?;
        write(format!("js/{i}.js"), text.into_bytes(), ObjectKind::Js, 1)?;
    }
    for (i, size) in plan.images.iter().enumerate() {
        let depth = if i < plan.first_background { 1 } else { 2 };
        let png = png(*size, rng, &dir)?;
        write(format!("img/{i}.png"), png, ObjectKind::Image, depth)?;
    }
    for (i, size) in plan.fonts.iter().enumerate() {
        write(
            format!("font/{i}.woff2"),
            font(*size, rng),
            ObjectKind::Font,
            2,
        )?;
    }
    let html = document(&plan, rng, &dir)?;
    let file = dir.join("index.html");
    write_dated(&file, &html)?;
    let mut objects = vec![ObjectSpec {
        path: base.clone(),
        kind: ObjectKind::Html,
        bytes: html.len() as u64,
        depth: 0,
    }];
    objects.extend(depth1);
    objects.extend(depth2);
    Ok(GeneratedPage {
        name: profile.name.to_owned(),
        url_path: base,
        objects,
    })
}

/// The script-driven variant of a generated `page`, named `js` plus its
/// percentile (`js50` of `p50`): the same stylesheets, fonts, scripts and
/// images, but only its stylesheets (and what they reference) are in its
/// HTML. Everything else is found by running script, as on pages a browser
/// really meets: one `app.js` in the HTML imports the page's scripts with
/// `import()` and `fetch()`es a JSON list of its images, which it inserts
/// once the load event has fired. A proxy that reads HTML finds none of
/// them; only what the browser asks for tells.
///
/// ```text
/// depth 0  /js50/               (p50's HTML without its <img> and <script>, based at /p50/)
/// depth 1  /p50/css/*.css, /js50/app.js
/// depth 2  fonts and background images (from the CSS), /p50/js/*.js (import()),
///          /js50/images.json (fetch())
/// depth 3  /p50/img/*.png       (inserted after the load event)
/// ```
///
/// The files are written under `root/js<percentile>/`; the page's own
/// files must be under `root` already ([`generate`]).
pub fn script_driven(root: &Path, page: &GeneratedPage) -> Result<GeneratedPage> {
    let name = page
        .name
        .strip_prefix('p')
        .map(|percentile| format!("js{percentile}"))
        .ok_or_else(|| corpus_error(root, format!("{}: not a generated page", page.name)))?;
    let dir = root.join(&name);
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let source = file_of(root, &format!("{}index.html", page.url_path));
    let html =
        std::fs::read_to_string(&source).map_err(io(format!("reading {}", source.display())))?;
    let base = format!("/{name}/");
    let scripts: Vec<&ObjectSpec> = page
        .objects
        .iter()
        .filter(|o| o.kind == ObjectKind::Js)
        .collect();
    // The <img> images: depth 1 in the page (background images are depth 2,
    // from its stylesheets, and stay so).
    let images: Vec<&ObjectSpec> = page
        .objects
        .iter()
        .filter(|o| o.kind == ObjectKind::Image && o.depth == 1)
        .collect();
    let quoted = |objects: &[&ObjectSpec]| {
        objects
            .iter()
            .map(|o| format!("\"{}\"", o.path))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let app = format!(
        "// {name}: what the page needs beyond its stylesheets is found by running this.\n\
         \"use strict\";\n\
         const scripts = [{}];\n\
         for (const src of scripts) import(src);\n\
         fetch(\"{base}images.json\").then(r => r.json()).then(list => {{\n\
         \x20 const add = () => {{\n\
         \x20   const grid = document.querySelector(\"main\");\n\
         \x20   for (const src of list.images) {{\n\
         \x20     const img = new Image({IMG_WIDTH}, {IMG_HEIGHT});\n\
         \x20     img.src = src;\n\
         \x20     img.alt = src;\n\
         \x20     grid.appendChild(img);\n\
         \x20   }}\n\
         \x20 }};\n\
         \x20 if (document.readyState === \"complete\") add(); else addEventListener(\"load\", add);\n\
         }});\n",
        quoted(&scripts)
    );
    let list = format!("{{\"images\": [{}]}}\n", quoted(&images));
    let document = strip_elements(
        &strip_elements(&html, "<img ", ">"),
        "<script ",
        "</script>",
    )
    .replacen(
        "<head>\n",
        // No icon to fetch: the browser would ask for /favicon.ico while
        // the images inserted after load are still coming.
        &format!(
            "<head>\n<base href=\"{}\">\n<link rel=\"icon\" href=\"data:,\">\n",
            page.url_path
        ),
        1,
    )
    .replacen(
        "</body>",
        &format!("<script src=\"{base}app.js\"></script>\n</body>"),
        1,
    );
    for (file, bytes) in [
        ("index.html", document.as_bytes()),
        ("app.js", app.as_bytes()),
        ("images.json", list.as_bytes()),
    ] {
        write_dated(&dir.join(file), bytes)?;
    }
    let mut objects = vec![
        ObjectSpec {
            path: base.clone(),
            kind: ObjectKind::Html,
            bytes: document.len() as u64,
            depth: 0,
        },
        ObjectSpec {
            path: format!("{base}app.js"),
            kind: ObjectKind::Js,
            bytes: app.len() as u64,
            depth: 1,
        },
        // Data for the script, counted with the scripts.
        ObjectSpec {
            path: format!("{base}images.json"),
            kind: ObjectKind::Js,
            bytes: list.len() as u64,
            depth: 2,
        },
    ];
    for o in &page.objects {
        let depth = match o.kind {
            ObjectKind::Html => continue,
            ObjectKind::Js => 2,
            ObjectKind::Image if o.depth == 1 => 3,
            _ => o.depth,
        };
        objects.push(ObjectSpec { depth, ..o.clone() });
    }
    objects.sort_by_key(|o| o.depth);
    Ok(GeneratedPage {
        name,
        url_path: base,
        objects,
    })
}

/// `html` without every element that starts with `open` and ends at the
/// next `close` (no nesting: `<img ...>`, `<script ...></script>`).
fn strip_elements(html: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(start) = rest.find(open) {
        out.push_str(&rest[..start]);
        match rest[start..].find(close) {
            Some(end) => rest = &rest[start + end + close.len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Splits a kind's byte total over its count: log-normal shares on top of
/// [`MIN_OBJECT_BYTES`] each, summing to the total exactly.
fn split(rng: &mut ChaCha8Rng, figure: KindFigure, dir: &Path) -> Result<Vec<u64>> {
    let count = u64::from(figure.count);
    if count == 0 {
        return Ok(Vec::new());
    }
    let floor = MIN_OBJECT_BYTES;
    let Some(spare) = figure.bytes.checked_sub(floor * count) else {
        return Err(corpus_error(
            dir,
            format!(
                "{} bytes cannot make {count} objects of at least {floor} bytes",
                figure.bytes
            ),
        ));
    };
    let weights: Vec<f64> = (0..count)
        .map(|_| (SIZE_SIGMA * standard_normal(rng)).exp())
        .collect();
    let sum: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|w| floor + (spare as f64 * w / sum) as u64)
        .collect();
    let assigned: u64 = sizes.iter().sum();
    // Rounding down leaves a few bytes; the largest object takes them.
    let largest = (0..sizes.len()).max_by_key(|i| sizes[*i]).unwrap_or(0);
    sizes[largest] += figure.bytes.saturating_sub(assigned);
    Ok(sizes)
}

/// A standard normal draw (Box–Muller).
fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln is finite
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Exactly `n` bytes of padding for a text file: a comment of random base64
/// (so compression gains at most the quarter that base64 wastes) between
/// `open` and `close`, or newlines where `n` is too small for a comment.
/// Base64 never contains `*`, `-` or `>`, so it cannot end the comment early.
fn padding(n: usize, open: &str, close: &str, rng: &mut ChaCha8Rng) -> String {
    let overhead = open.len() + close.len();
    if n <= overhead {
        return "\n".repeat(n);
    }
    let body = n - overhead;
    let mut random = vec![0u8; body * 3 / 4 + 3];
    rng.fill_bytes(&mut random);
    let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&random);
    let mut chars = encoded.chars();
    let mut out = String::with_capacity(n);
    out.push_str(open);
    for i in 0..body {
        if i % 77 == 76 {
            out.push('\n');
        } else {
            out.push(chars.next().unwrap_or('A'));
        }
    }
    out.push_str(close);
    out
}

/// Pads `text` to exactly `target` bytes with a comment at its end.
fn pad_to(
    mut text: String,
    target: u64,
    open: &str,
    close: &str,
    rng: &mut ChaCha8Rng,
    what: &str,
    dir: &Path,
) -> Result<String> {
    let target = usize::try_from(target).unwrap_or(usize::MAX);
    let Some(missing) = target.checked_sub(text.len()) else {
        return Err(corpus_error(
            dir,
            format!(
                "{what}: its content alone is {} bytes, more than the {target} it may have",
                text.len()
            ),
        ));
    };
    text.push_str(&padding(missing, open, close, rng));
    Ok(text)
}

fn words(rng: &mut ChaCha8Rng, count: usize) -> String {
    let mut text = String::new();
    for i in 0..count {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    text
}

fn stylesheet(
    plan: &Plan<'_>,
    index: usize,
    size: u64,
    rng: &mut ChaCha8Rng,
    dir: &Path,
) -> Result<String> {
    let mut css = format!(
        "/* corpus page {}, stylesheet {index} */\n",
        plan.profile.name
    );
    if index == 0 {
        css.push_str(
            "body { margin: 0 auto; max-width: 1040px; font-family: sans-serif; \
             color: #222; background: #f4f4f0; }\n\
             header { padding: 16px; background: #234; color: #fff; }\n\
             .grid { display: flex; flex-wrap: wrap; gap: 8px; padding: 8px; }\n\
             figure { margin: 0; }\n\
             .bg { display: inline-block; margin: 8px; background-size: cover; }\n",
        );
    }
    let hue = rng.random_range(0..360);
    let _ = writeln!(
        css,
        ".c{index} {{ border-left: 4px solid hsl({hue} 60% 45%); padding-left: 8px; }}"
    );
    for font in (0..plan.fonts.len()).filter(|f| plan.css_of_font(*f) == index) {
        let _ = writeln!(
            css,
            "@font-face {{ font-family: \"corpus-font-{font}\"; \
             src: url(../font/{font}.woff2) format(\"woff2\"); font-display: swap; }}\n\
             .font-{font} {{ font-family: \"corpus-font-{font}\", serif; }}"
        );
    }
    for image in
        (plan.first_background..plan.images.len()).filter(|i| plan.css_of_background(*i) == index)
    {
        let _ = writeln!(
            css,
            ".bg-{image} {{ background-image: url(../img/{image}.png); \
             width: {IMG_WIDTH}px; height: {IMG_HEIGHT}px; }}"
        );
    }
    pad_to(
        css,
        size,
        "/*\n",
        "\n*/\n",
        rng,
        &format!("css/{index}.css"),
        dir,
    )
}

fn script(index: usize, size: u64, rng: &mut ChaCha8Rng, dir: &Path) -> Result<String> {
    let rounds = rng.random_range(500..5000);
    let multiplier = rng.random_range(3..97);
    let text = format!(
        "// corpus script {index}: a little harmless work, then a mark on the document.\n\
         (function () {{\n\
         \x20 \"use strict\";\n\
         \x20 var n = {index};\n\
         \x20 for (var i = 0; i < {rounds}; i++) {{ n = (n * {multiplier} + i) % 1000003; }}\n\
         \x20 window.corpusScripts = (window.corpusScripts || 0) + 1;\n\
         \x20 document.documentElement.setAttribute(\"data-script-{index}\", String(n));\n\
         }})();\n"
    );
    pad_to(
        text,
        size,
        "/*\n",
        "\n*/\n",
        rng,
        &format!("js/{index}.js"),
        dir,
    )
}

/// The document: head with stylesheets and the first scripts, a grid of
/// images, text in each font, the background boxes, the last scripts. Its
/// padding is spread over the body (after each image), so references occur
/// throughout the document as on real pages, not all in its first kilobyte.
fn document(plan: &Plan<'_>, rng: &mut ChaCha8Rng, dir: &Path) -> Result<Vec<u8>> {
    let name = plan.profile.name;
    let mut head = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Corpus page {name}</title>\n"
    );
    for i in 0..plan.css.len() {
        let _ = writeln!(head, "<link rel=\"stylesheet\" href=\"css/{i}.css\">");
    }
    for i in 0..plan.head_scripts {
        let mode = if i % 2 == 0 { "defer" } else { "async" };
        let _ = writeln!(head, "<script src=\"js/{i}.js\" {mode}></script>");
    }
    let _ = write!(
        head,
        "</head>\n<body>\n<header><h1>Corpus page {name}</h1><p>The {}th percentile desktop \
         page of the HTTP Archive's Web Almanac 2024, generated.</p></header>\n\
         <main class=\"grid\">\n",
        plan.profile.percentile
    );
    // Pieces between which padding goes.
    let mut pieces = vec![head];
    for i in 0..plan.first_background {
        pieces.push(format!(
            "<figure class=\"c{}\"><img src=\"img/{i}.png\" width=\"{IMG_WIDTH}\" \
             height=\"{IMG_HEIGHT}\" alt=\"image {i}\"><figcaption>{}</figcaption></figure>\n",
            i % plan.css.len().max(1),
            words(rng, 3)
        ));
    }
    let mut tail = String::from("</main>\n<section>\n");
    for font in 0..plan.fonts.len() {
        let _ = writeln!(tail, "<p class=\"font-{font}\">{}.</p>", words(rng, 24));
    }
    tail.push_str("</section>\n<section>\n");
    for image in plan.first_background..plan.images.len() {
        let _ = writeln!(tail, "<div class=\"bg bg-{image}\"></div>");
    }
    let _ = writeln!(
        tail,
        "</section>\n<footer><p>{} objects, {} bytes.</p></footer>",
        plan.profile.total_count(),
        plan.profile.total_bytes()
    );
    for i in plan.head_scripts..plan.js.len() {
        let _ = writeln!(tail, "<script src=\"js/{i}.js\"></script>");
    }
    tail.push_str("</body>\n</html>\n");
    pieces.push(tail);

    let fixed: usize = pieces.iter().map(String::len).sum();
    let target = usize::try_from(plan.profile.html.bytes).unwrap_or(usize::MAX);
    let Some(total_padding) = target.checked_sub(fixed) else {
        return Err(corpus_error(
            dir,
            format!(
                "index.html: its markup alone is {fixed} bytes, more than the {target} it may have"
            ),
        ));
    };
    let slots = pieces.len() - 1;
    let mut html = String::with_capacity(target);
    for (i, piece) in pieces.iter().enumerate() {
        html.push_str(piece);
        if i < slots {
            let share = total_padding / slots
                + if i == slots - 1 {
                    total_padding % slots
                } else {
                    0
                };
            html.push_str(&padding(share, "<!--\n", "\n-->\n", rng));
        }
    }
    Ok(html.into_bytes())
}

/// A font-sized blob with the WOFF2 signature. It is not a valid font:
/// Chromium fetches it (what the benchmark measures), its sanitiser rejects
/// it, and the text falls back to the next family.
fn font(size: u64, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
    rng.fill_bytes(&mut bytes);
    let signature = b"wOF2";
    let n = signature.len().min(bytes.len());
    bytes[..n].copy_from_slice(&signature[..n]);
    bytes
}

/// The PNG signature.
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The padding chunk's type: ancillary (decoders skip it), private, safe to
/// copy.
pub const PNG_PADDING_CHUNK: [u8; 4] = *b"paDd";

/// Bytes a stored (uncompressed) deflate block carries at most.
const STORED_BLOCK: usize = 65_535;

/// Length of a PNG of `width`×`height` RGB pixels without padding.
fn png_base_len(width: u32, height: u32) -> u64 {
    let raw = u64::from(height) * (1 + 3 * u64::from(width));
    let blocks = raw.div_ceil(STORED_BLOCK as u64).max(1);
    let zlib = 2 + raw + 5 * blocks + 4;
    8 + (12 + 13) + (12 + zlib) + 12
}

/// A decodable PNG of exactly `size` bytes: an RGB gradient (stored
/// uncompressed, so its size is known in advance) and a padding chunk of
/// random bytes after the pixel data.
fn png(size: u64, rng: &mut ChaCha8Rng, dir: &Path) -> Result<Vec<u8>> {
    let fits = |&&(w, h): &&(u32, u32)| png_base_len(w, h) + 12 <= size / 2;
    let &(width, height) = IMAGE_LADDER
        .iter()
        .find(fits)
        .or(IMAGE_LADDER.last())
        .unwrap_or(&(16, 9));
    let base = png_base_len(width, height);
    let Some(padding) = size.checked_sub(base + 12) else {
        return Err(corpus_error(
            dir,
            format!("a PNG of {size} bytes is too small for {width}x{height} pixels"),
        ));
    };
    let from: [u8; 3] = rng.random();
    let to: [u8; 3] = rng.random();
    let mut raw = Vec::with_capacity((height * (1 + 3 * width)) as usize);
    for y in 0..height {
        raw.push(0); // filter: none
        for x in 0..width {
            let t = (x + y) as f32 / (width + height) as f32;
            let stripe = (x / 8 + y / 8) % 2 == 0;
            for c in 0..3 {
                let value = f32::from(from[c]) * (1.0 - t) + f32::from(to[c]) * t;
                let value = if stripe { value * 0.85 } else { value };
                raw.push(value as u8);
            }
        }
    }
    let mut zlib = vec![0x78, 0x01];
    let mut blocks = raw.chunks(STORED_BLOCK).peekable();
    while let Some(block) = blocks.next() {
        let len = block.len() as u16;
        zlib.push(u8::from(blocks.peek().is_none()));
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    zlib.extend_from_slice(&adler32(&raw).to_be_bytes());

    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no interlace
    let mut pad = vec![0u8; usize::try_from(padding).unwrap_or(usize::MAX)];
    rng.fill_bytes(&mut pad);

    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    out.extend_from_slice(&PNG_SIGNATURE);
    png_chunk(&mut out, *b"IHDR", &ihdr);
    png_chunk(&mut out, *b"IDAT", &zlib);
    png_chunk(&mut out, PNG_PADDING_CHUNK, &pad);
    png_chunk(&mut out, *b"IEND", &[]);
    debug_assert_eq!(out.len() as u64, size);
    Ok(out)
}

fn png_chunk(out: &mut Vec<u8>, kind: [u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&kind);
    crc.update(data);
    out.extend_from_slice(&kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
}

/// zlib's checksum (RFC 1950).
fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for byte in chunk {
            a += u32::from(*byte);
            b += a;
        }
        a %= 65_521;
        b %= 65_521;
    }
    (b << 16) | a
}

/// Every file under `root` with its bytes, keyed by path relative to `root`:
/// what the tests compare, and what a driver can checksum.
pub fn read_tree(root: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(io(format!("listing {}", dir.display())))?;
        for entry in entries {
            let path = entry
                .map_err(io(format!("listing {}", dir.display())))?
                .path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes =
                    std::fs::read(&path).map_err(io(format!("reading {}", path.display())))?;
                let relative = path.strip_prefix(root).unwrap_or(&path).to_owned();
                files.insert(relative, bytes);
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests;
