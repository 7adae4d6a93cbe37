//! What a browser fetches for an HTML page or a stylesheet: the extraction
//! both daemons use. The gateway's prefetch queue scans the HTML passing
//! through it (`gateway::prefetch`); the origin works out a page's closure
//! from the files it serves, to push it (`origin::closure`). One extractor,
//! so that what the origin pushes and what the gateway would prefetch agree.
//!
//! - [`extract`]: [`HtmlScanner`] reads an HTML body as it streams (chunk
//!   by chunk, never holding it back) and yields the subresources a browser
//!   would request, in document order: images (srcset and `<picture>` chosen
//!   as a browser at [`ExtractConfig::viewport_width`] would), scripts,
//!   stylesheets, preloads, icons, manifests, media, same-origin frames, and
//!   the `url()`s of inline CSS; [`extract_html`] does a whole body. Start
//!   here.
//! - [`css`]: [`extract_css`], the `url()`s and `@import`s of a stylesheet.
//! - `media`, `srcset` (private): media queries, `sizes` and the srcset
//!   choice, for one imagined window.
//! - [`config`]: [`ExtractConfig`], the window and the byte limits.
//!
//! What it never does: fetch, touch a socket, a file or the clock. Bytes in,
//! [`Resource`]s out; a malformed or hostile body gives fewer resources,
//! never a panic (the `extract` fuzz target). docs/prefetch.md has the rules
//! taken from browsers and the decisions.
//!
//! Layering: `extract` > `css` > `srcset` > `media`; the crate root (the
//! types, URL resolution) and `config` under all.

pub mod config;
pub mod css;
pub mod extract;
mod media;
mod srcset;

use std::borrow::Cow;
use std::fmt;

pub use config::{
    DEFAULT_CSS_IMPORT_DEPTH, DEFAULT_MAX_CSS_BYTES, DEFAULT_MAX_HTML_BYTES,
    DEFAULT_VIEWPORT_WIDTH, ExtractConfig,
};
pub use css::{CssResources, decode_css, extract_css};
pub use extract::{HtmlScanner, extract_html};

/// One subresource a page will ask for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// Absolute, without fragment, same scheme as the document.
    pub url: url::Url,
    /// What the page uses it as.
    pub kind: Kind,
    /// Whether a browser holds the page's first rendering until it has it
    /// (HTML's "render-blocking", plus what the first text needs): a
    /// stylesheet, a synchronous classic script in `<head>`, anything with
    /// `blocking=render`, a `modulepreload`, a `preload as=font`, and a
    /// stylesheet's `@import`s and fonts. Not images, `async`/`defer` and
    /// module scripts, or the rest. The origin pushes these first; the
    /// gateway's queue keeps document order.
    pub render_blocking: bool,
}

/// What a page uses a subresource as. It decides the `Accept` a prefetch or
/// a push is requested with (the gateway's `prefetch_request_headers`) and
/// what is scanned further (stylesheets for `url()`, frames as documents).
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

    /// The `Accept` a browser sends when it fetches this kind, as Chromium
    /// sends it, so that a response varying on `Accept` (image CDNs choosing
    /// AVIF or WebP) matches the browser's own request; `None` for a
    /// document, whose `Accept` is the page request's own. The gateway's
    /// prefetches and the origin's pushes ask with it.
    pub fn browser_accept(self) -> Option<&'static str> {
        match self {
            Kind::Image | Kind::Icon => Some(ACCEPT_IMAGE),
            Kind::Style => Some(ACCEPT_STYLE),
            Kind::Document => None,
            Kind::Script | Kind::Font | Kind::Media | Kind::Manifest | Kind::Other => Some("*/*"),
        }
    }
}

/// `Accept` for images and icons, as Chromium sends it.
const ACCEPT_IMAGE: &str = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
/// `Accept` for stylesheets, as browsers send it.
const ACCEPT_STYLE: &str = "text/css,*/*;q=0.1";

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
