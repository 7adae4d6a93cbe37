//! The prefetch queue's I/O-free core: what a page will ask for, and when the
//! gateway should ask first. docs/prefetch.md has the design, the rules taken
//! from browsers and the decisions.
//!
//! - [`extract`]: [`HtmlScanner`] copies an HTML body as it streams to the
//!   browser (never holding it back) and yields the subresources a browser
//!   would request, in document order: images (srcset and `<picture>` chosen
//!   as a browser at [`PrefetchConfig::viewport_width`] would), scripts,
//!   stylesheets, preloads, icons, manifests, media, same-origin frames, and
//!   the `url()`s of inline CSS. Start here.
//! - [`css`]: `url()` and `@import` of a stylesheet.
//! - [`queue`]: [`PrefetchQueue`], the state machine that orders prefetches
//!   per page, enforces the limits, promotes a prefetch a browser asks for,
//!   cancels what an abandoned page no longer needs, and counts what was used
//!   and wasted. Input through `handle_*` calls, output through
//!   [`PrefetchQueue::poll_action`]; time is an argument.
//! - [`manners`]: the request fields a prefetch may carry and whether its
//!   response may be kept.
//! - [`config`]: the `[prefetch]` section.
//! - [`prefetcher`]: the I/O layer around the queue ([`Prefetcher`]): it
//!   scans the HTML a browser receives, runs the queue's actions, and fetches
//!   through the cache's one entry point ([`Cache::serve`]) over an
//!   [`Upstream`] the front hands it per page.
//!
//! What the core (everything but `prefetcher`) never does: touch sockets, the
//! cache or the clock. `prefetcher` carries out its actions, through the cache
//! and the [`Upstream`] trait, never through the front (it names neither the
//! front nor the route table).
//!
//! [`Cache::serve`]: crate::cache::Cache::serve
//! [`Upstream`]: crate::upstream::Upstream

pub mod config;
pub mod css;
pub mod extract;
pub mod manners;
mod media;
pub mod prefetcher;
pub mod queue;
mod srcset;

use std::borrow::Cow;
use std::fmt;

pub use config::PrefetchConfig;
pub use css::{CssResources, extract_css};
pub use extract::{HtmlScanner, extract_html};
pub use manners::{NotKept, keep_prefetched, prefetch_request_headers};
pub use prefetcher::{Prefetcher, RouteKind, Watched};
pub use queue::{
    Action, Demand, FetchId, PageId, PageOutcome, PageState, PrefetchQueue, PrefetchStats,
    RecentPage,
};

/// One subresource a page will ask for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// Absolute, without fragment, same scheme as the document.
    pub url: url::Url,
    /// What the page uses it as.
    pub kind: Kind,
}

/// What a page uses a subresource as. It decides the `Accept` a prefetch
/// sends ([`prefetch_request_headers`]) and what is scanned further
/// (stylesheets for `url()`, frames as documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `<img>`, `<picture>`, poster, CSS images, `preload as=image`.
    Image,
    /// `<script src>` (classic and module), `modulepreload`, `preload as=script`.
    Script,
    /// Stylesheets and CSS `@import`.
    Style,
    /// `@font-face` sources, `preload as=font`.
    Font,
    /// `<video>` and `<audio>` sources, `preload as=audio|video|track`.
    Media,
    /// A same-origin `<iframe>` or `<frame>`: scanned one level deep.
    Document,
    /// `<link rel=manifest>`.
    Manifest,
    /// `<link rel=icon>`.
    Icon,
    /// `preload as=fetch`.
    Other,
}

impl Kind {
    /// The lower-case name used in logs and in the extraction corpus.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Script => "script",
            Kind::Style => "style",
            Kind::Font => "font",
            Kind::Media => "media",
            Kind::Document => "document",
            Kind::Manifest => "manifest",
            Kind::Icon => "icon",
            Kind::Other => "other",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.url)
    }
}

/// The charset parameter of a `Content-Type` value, as an encoding, if it
/// names one the Encoding Standard knows.
fn content_type_charset(content_type: Option<&str>) -> Option<&'static encoding_rs::Encoding> {
    let mime: mime::Mime = content_type?.trim().parse().ok()?;
    let label = mime.get_param(mime::CHARSET)?;
    encoding_rs::Encoding::for_label(label.as_str().as_bytes())
}

/// Whether a `Content-Type` value is HTML, the only kind of body
/// [`HtmlScanner`] should be fed.
pub fn is_html(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.trim().parse::<mime::Mime>().ok())
        .is_some_and(|m| m.essence_str() == "text/html")
}

/// Whether a `Content-Type` value is CSS.
pub fn is_css(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.trim().parse::<mime::Mime>().ok())
        .is_some_and(|m| m.essence_str() == "text/css")
}

/// Resolves a reference found in a page or stylesheet: `None` for what a
/// prefetch must not fetch (unparseable, another scheme than the document's,
/// so no `data:`, `javascript:`, `blob:` or `about:`; credentials in the URL;
/// the document itself). The fragment is dropped: it never reaches the wire.
fn resolve(
    base: &url::Url,
    document: &url::Url,
    reference: &str,
    encoding: Option<&'static encoding_rs::Encoding>,
) -> Option<url::Url> {
    if reference.trim().is_empty() {
        // An empty src is not a request for the document (HTML: "update the
        // image data" and friends stop on an empty value).
        return None;
    }
    let encode = encoding
        .filter(|e| *e != encoding_rs::UTF_8)
        .map(query_encoder);
    let mut url = url::Url::options()
        .base_url(Some(base))
        .encoding_override(encode.as_ref().map(|e| e as &dyn Fn(&str) -> Cow<'_, [u8]>))
        .parse(reference)
        .ok()?;
    if url.scheme() != document.scheme() || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    url.set_fragment(None);
    let mut bare_document = document.clone();
    bare_document.set_fragment(None);
    (url != bare_document).then_some(url)
}

/// The URL parser's query encoder for a document in `encoding` (URL
/// Standard, "percent-encode after encoding": the query of a URL in an HTML
/// document is encoded in the document's encoding). A character the
/// encoding cannot represent becomes `%26%23N%3B` (`&#N;` percent-encoded),
/// which the URL parser then leaves as it is.
fn query_encoder(encoding: &'static encoding_rs::Encoding) -> impl Fn(&str) -> Cow<'_, [u8]> {
    move |text| {
        let mut encoder = encoding.new_encoder();
        let mut out = Vec::with_capacity(text.len() + 16);
        let mut rest = text;
        loop {
            let (result, read) =
                encoder.encode_from_utf8_to_vec_without_replacement(rest, &mut out, true);
            rest = &rest[read..];
            match result {
                encoding_rs::EncoderResult::InputEmpty => return Cow::Owned(out),
                encoding_rs::EncoderResult::OutputFull => out.reserve(rest.len() + 16),
                encoding_rs::EncoderResult::Unmappable(c) => {
                    out.extend_from_slice(format!("%26%23{}%3B", u32::from(c)).as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).expect("test URL")
    }

    #[test]
    fn resolution_skips_other_schemes_credentials_and_the_document() {
        let doc = url("http://example.test/dir/page.html#top");
        let r = |s: &str| resolve(&doc, &doc, s, None).map(|u| u.to_string());
        assert_eq!(r("a.png").as_deref(), Some("http://example.test/dir/a.png"));
        assert_eq!(
            r("//cdn.test/x.js").as_deref(),
            Some("http://cdn.test/x.js")
        );
        assert_eq!(
            r("/b.css#frag").as_deref(),
            Some("http://example.test/b.css")
        );
        assert_eq!(r("https://example.test/a.png"), None);
        assert_eq!(r("data:image/png;base64,AAAA"), None);
        assert_eq!(r("javascript:void(0)"), None);
        assert_eq!(r("blob:http://example.test/uuid"), None);
        assert_eq!(r("about:blank"), None);
        assert_eq!(r("http://user:pw@example.test/a.png"), None);
        assert_eq!(r("#"), None);
        assert_eq!(r(""), None);
        assert_eq!(r("  \t"), None);
        assert_eq!(r("http://[::1"), None);
    }

    #[test]
    fn query_uses_the_document_encoding_and_path_utf8() {
        let doc = url("http://example.test/");
        let sjis = encoding_rs::SHIFT_JIS;
        let resolved = resolve(&doc, &doc, "/画像.png?q=画像", Some(sjis)).expect("resolves");
        assert_eq!(
            resolved.as_str(),
            "http://example.test/%E7%94%BB%E5%83%8F.png?q=%89%E6%91%9C"
        );
        let emoji = resolve(&doc, &doc, "/a?e=😀&b", Some(sjis)).expect("resolves");
        assert_eq!(emoji.as_str(), "http://example.test/a?e=%26%23128512%3B&b");
    }

    #[test]
    fn content_types() {
        assert!(is_html(Some("text/html; charset=utf-8")));
        assert!(is_html(Some("TEXT/HTML")));
        assert!(!is_html(Some("application/xhtml+xml")));
        assert!(!is_html(None));
        assert!(is_css(Some("text/css")));
        assert_eq!(
            content_type_charset(Some("text/html; charset=\"Shift_JIS\"")),
            Some(encoding_rs::SHIFT_JIS)
        );
        assert_eq!(content_type_charset(Some("text/html; charset=bogus")), None);
        assert_eq!(content_type_charset(Some("text/html")), None);
    }
}
