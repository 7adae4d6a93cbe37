//! Subresources of an HTML page, found while the page streams to the
//! browser.
//!
//! [`HtmlScanner`] is fed each body chunk after it has been handed on to the
//! browser: it copies, never holds back. scraper (html5ever) builds whole
//! documents, so the scanner re-parses the prefix received so far at
//! doubling sizes ([`FIRST_SCAN_BYTES`], twice that, ...), and once at the
//! end: at most about three times the body's length in parsing, in exchange
//! for results before the body ends. A prefix parses as the document would
//! up to the cut, because tree construction never looks ahead: a tag cut in
//! the middle is dropped at end of input, so every element seen is complete.
//! Each pass yields only URLs not yielded before, in document order.
//!
//! The encoding is decided once, on the first pass (HTML's sniffing
//! algorithm): a byte order mark; else the `Content-Type` charset; else a
//! `<meta charset>` or `http-equiv` in the first [`PRESCAN_BYTES`] (found by
//! html5ever's own tree builder); else chardetng's guess (Firefox's
//! detector) over the same bytes, without UTF-8 detection, as browsers do
//! for HTTP pages. URL queries are encoded in that encoding,
//! paths always in UTF-8, as a browser's URL parser does.
//!
//! The element rules (docs/prefetch.md has the table and the reasons): `img`
//! (srcset, sizes, `<picture>` sources), `script src` (classic and module,
//! not `nomodule`), `link` stylesheet / preload (by `as`) / modulepreload /
//! first icon / first manifest, `video` poster and the media a browser would
//! pick, `audio`, same-origin `iframe`/`frame` (kind [`Kind::Document`]),
//! `<style>` text and `style` attributes (their `url()`s and `@import`s).
//! Skipped: content of `<template>` and `<noscript>`, SVG and MathML
//! elements (not the HTML inside them), `loading=lazy` images and frames,
//! `preload=none` media, stylesheets and `<style>` for another medium,
//! URLs that are not on the document's scheme. `<base href>` applies from where it appears on,
//! first one only.

use std::collections::{HashSet, VecDeque};

use ego_tree::NodeRef;
use ego_tree::iter::Edge;
use encoding_rs::Encoding;
use html5ever::tokenizer::BufferQueue;
use html5ever::{TokenizerResult, ns};
use scraper::node::Element;
use scraper::{Html, HtmlTreeSink, Node};
use url::Url;

use crate::css::{self, CssResources};
use crate::media::{Viewport, media_matches};
use crate::{ExtractConfig, Kind, Resource, content_type_charset, resolve, srcset};

/// The first parse happens when this many bytes have arrived (or at the end
/// of a shorter body); later ones each time the received length doubles.
pub const FIRST_SCAN_BYTES: usize = 4 << 10;
/// The encoding is decided on this many bytes from the start (or the whole
/// body if shorter): HTML's "prescan a byte stream to determine its
/// encoding" looks no further for `<meta charset>`, and the detector is fed
/// the same bytes, so that the decision does not depend on how the body
/// was cut into chunks.
pub const PRESCAN_BYTES: usize = 1024;

/// Most elements open at once in a page that is still parsed. html5ever's
/// tree builder walks the stack of open elements for many start tags, so a
/// page of thousands of unclosed `<div>`s costs time quadratic in its
/// nesting (seconds for 10 000); browsers cap the tree depth for the same
/// reason (Chromium at 512). A pass whose prefix nests deeper stops the
/// scan of the page: what earlier passes found stands.
pub const MAX_NESTING: usize = 512;

/// Image types current browsers decode (`<source type>`, `preload type`).
const IMAGE_TYPES: [&str; 12] = [
    "image/avif",
    "image/webp",
    "image/jpeg",
    "image/jpg",
    "image/pjpeg",
    "image/png",
    "image/apng",
    "image/gif",
    "image/svg+xml",
    "image/bmp",
    "image/x-icon",
    "image/vnd.microsoft.icon",
];

/// Media container types current desktop browsers play.
const MEDIA_TYPES: [&str; 15] = [
    "video/mp4",
    "video/webm",
    "video/ogg",
    "audio/mpeg",
    "audio/mp3",
    "audio/mp4",
    "audio/aac",
    "audio/ogg",
    "audio/webm",
    "audio/wav",
    "audio/wave",
    "audio/x-wav",
    "audio/flac",
    "audio/x-flac",
    "application/ogg",
];

/// JavaScript MIME types (HTML, "JavaScript MIME type").
const JAVASCRIPT_TYPES: [&str; 16] = [
    "application/ecmascript",
    "application/javascript",
    "application/x-ecmascript",
    "application/x-javascript",
    "text/ecmascript",
    "text/javascript",
    "text/javascript1.0",
    "text/javascript1.1",
    "text/javascript1.2",
    "text/javascript1.3",
    "text/javascript1.4",
    "text/javascript1.5",
    "text/jscript",
    "text/livescript",
    "text/x-ecmascript",
    "text/x-javascript",
];

/// Where a scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// Taking chunks.
    Open,
    /// The body reached the byte cap; the rest is not looked at.
    Capped,
    /// The body ended.
    Ended,
}

/// Finds a page's subresources while its body streams to the browser.
///
/// Feed it with [`HtmlScanner::handle_chunk`] after each chunk went on to
/// the browser and [`HtmlScanner::handle_end`] at the end; drain
/// [`HtmlScanner::poll_resource`] after each call.
#[derive(Debug)]
pub struct HtmlScanner {
    document: Url,
    transport_encoding: Option<&'static Encoding>,
    encoding: Option<&'static Encoding>,
    viewport: Viewport,
    max_bytes: usize,
    body: Vec<u8>,
    next_scan: usize,
    input: Input,
    emitted: HashSet<Url>,
    ready: VecDeque<Resource>,
    passes: u32,
}

impl HtmlScanner {
    /// A scanner for the HTML document at `document`, whose response had
    /// this `Content-Type`.
    pub fn new(document: Url, content_type: Option<&str>, config: &ExtractConfig) -> Self {
        Self {
            document,
            transport_encoding: content_type_charset(content_type),
            encoding: None,
            viewport: Viewport::new(config.viewport_width),
            max_bytes: usize::try_from(config.max_html_bytes).unwrap_or(usize::MAX),
            body: Vec::new(),
            next_scan: FIRST_SCAN_BYTES,
            input: Input::Open,
            emitted: HashSet::new(),
            ready: VecDeque::new(),
            passes: 0,
        }
    }

    /// Parses first when `bytes` have arrived instead of
    /// [`FIRST_SCAN_BYTES`] (then each time the length doubles), but never
    /// before [`PRESCAN_BYTES`]: the encoding is decided on them. Smaller
    /// values find subresources sooner for more parsing; tests use the
    /// smallest to cut pages at every kind of place.
    pub fn first_scan_at(mut self, bytes: usize) -> Self {
        self.next_scan = bytes.max(PRESCAN_BYTES);
        self
    }

    /// The next bytes of the body (already on their way to the browser).
    pub fn handle_chunk(&mut self, chunk: &[u8]) {
        if self.input != Input::Open {
            return;
        }
        let room = self.max_bytes - self.body.len();
        self.body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if self.body.len() == self.max_bytes {
            self.input = Input::Capped;
            self.scan();
            self.body = Vec::new();
        } else if self.body.len() >= self.next_scan {
            self.scan();
            self.next_scan = self.body.len().saturating_mul(2);
        }
    }

    /// The body ended (complete, or cut by the origin: either way nothing
    /// more comes).
    pub fn handle_end(&mut self) {
        if self.input == Input::Open {
            self.input = Input::Ended;
            self.scan();
        }
        self.body = Vec::new();
    }

    /// The next subresource found, in document order.
    pub fn poll_resource(&mut self) -> Option<Resource> {
        self.ready.pop_front()
    }

    /// The document's encoding, once the first pass decided it (it is the
    /// environment encoding of the stylesheets the page links).
    pub fn encoding(&self) -> Option<&'static Encoding> {
        self.encoding
    }

    /// True once no more input is wanted (ended, or the cap was reached):
    /// the caller may stop copying chunks.
    pub fn is_finished(&self) -> bool {
        self.input != Input::Open
    }

    /// Parses done so far (for tests and debug logs).
    pub fn passes(&self) -> u32 {
        self.passes
    }

    fn scan(&mut self) {
        let encoding = *self.encoding.get_or_insert_with(|| {
            let sniffed = &self.body[..self.body.len().min(PRESCAN_BYTES)];
            let whole = self.input == Input::Ended && self.body.len() <= PRESCAN_BYTES;
            sniff_encoding(sniffed, self.transport_encoding, &self.document, whole)
        });
        let text = encoding.decode_with_bom_removal(&self.body).0;
        let nesting = nesting(&text);
        if nesting > MAX_NESTING {
            tracing::debug!(
                document = %self.document,
                nesting,
                "prefetch: page nests too deep to parse, scan stopped"
            );
            self.input = Input::Capped;
            self.body = Vec::new();
            return;
        }
        self.passes += 1;
        let html = Html::parse_document(&text);
        let mut pass = Pass {
            document: &self.document,
            encoding,
            viewport: self.viewport,
            base: None,
            base_seen: false,
            icon_seen: false,
            manifest_seen: false,
            found: Vec::new(),
        };
        pass.walk(&html, self.input == Input::Ended);
        for resource in pass.found {
            if self.emitted.insert(resource.url.clone()) {
                self.ready.push_back(resource);
            }
        }
    }
}

/// The subresources of a whole HTML body, as [`HtmlScanner`] yields them.
pub fn extract_html(
    document: &Url,
    content_type: Option<&str>,
    body: &[u8],
    config: &ExtractConfig,
) -> Vec<Resource> {
    let mut scanner = HtmlScanner::new(document.clone(), content_type, config);
    scanner.handle_chunk(body);
    scanner.handle_end();
    std::iter::from_fn(|| scanner.poll_resource()).collect()
}

/// An upper bound of how deeply `text` nests elements, from html5ever's
/// tokenizer alone (linear time): start tags open, end tags close, except
/// void elements, elements whose end the parser implies (`p`, `li`, `td`,
/// ...), and self-closing tags inside SVG and MathML. Raw text (`script`,
/// `style`, `textarea`, ...) is tokenized as the tree builder would have it.
fn nesting(text: &str) -> usize {
    let sink = NestingSink::default();
    let tokenizer = html5ever::tokenizer::Tokenizer::new(sink, Default::default());
    let input = BufferQueue::default();
    input.push_back(html5ever::tendril::StrTendril::from_slice(text));
    while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
    tokenizer.end();
    tokenizer.sink.deepest.get()
}

/// Elements that never have content.
const VOID: [&str; 14] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr", "param",
];
/// Elements the parser closes by itself when a sibling starts.
const IMPLIED_END: [&str; 20] = [
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "rb", "rt", "rtc", "rp",
    "tbody", "thead", "tfoot", "colgroup", "caption", "head", "body",
];

#[derive(Debug, Default)]
struct NestingSink {
    depth: std::cell::Cell<usize>,
    deepest: std::cell::Cell<usize>,
    /// The depth at which an `<svg>` or `<math>` opened, while inside one.
    foreign_from: std::cell::Cell<Option<usize>>,
}

impl html5ever::tokenizer::TokenSink for NestingSink {
    type Handle = ();

    fn process_token(
        &self,
        token: html5ever::tokenizer::Token,
        _line: u64,
    ) -> html5ever::tokenizer::TokenSinkResult<()> {
        use html5ever::tokenizer::states::RawKind;
        use html5ever::tokenizer::{TagKind, Token, TokenSinkResult};
        let Token::TagToken(tag) = token else {
            return TokenSinkResult::Continue;
        };
        let name: &str = &tag.name;
        let depth = self.depth.get();
        if tag.kind == TagKind::EndTag {
            let depth = depth.saturating_sub(1);
            self.depth.set(depth);
            if self.foreign_from.get().is_some_and(|from| depth <= from) {
                self.foreign_from.set(None);
            }
            return TokenSinkResult::Continue;
        }
        let foreign = self.foreign_from.get().is_some();
        if VOID.contains(&name) || IMPLIED_END.contains(&name) || (foreign && tag.self_closing) {
            return TokenSinkResult::Continue;
        }
        if !foreign && matches!(name, "svg" | "math") {
            self.foreign_from.set(Some(depth));
        }
        self.depth.set(depth + 1);
        self.deepest.set(self.deepest.get().max(depth + 1));
        if foreign {
            return TokenSinkResult::Continue;
        }
        match name {
            "title" | "textarea" => TokenSinkResult::RawData(RawKind::Rcdata),
            "style" | "xmp" | "iframe" | "noembed" | "noframes" | "noscript" => {
                TokenSinkResult::RawData(RawKind::Rawtext)
            }
            "script" => TokenSinkResult::RawData(RawKind::ScriptData),
            "plaintext" => TokenSinkResult::Plaintext,
            _ => TokenSinkResult::Continue,
        }
    }
}

/// HTML's encoding sniffing, less what needs a user or a reload.
fn sniff_encoding(
    prefix: &[u8],
    transport: Option<&'static Encoding>,
    document: &Url,
    whole: bool,
) -> &'static Encoding {
    if let Some((bom, _)) = Encoding::for_bom(prefix) {
        return bom;
    }
    if let Some(transport) = transport {
        return transport;
    }
    if let Some(meta) = meta_charset(&prefix[..prefix.len().min(PRESCAN_BYTES)]) {
        return meta;
    }
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    detector.feed(prefix, whole);
    detector.guess(top_level_domain(document), chardetng::Utf8Detection::Deny)
}

/// The encoding a `<meta>` in the head declares, as html5ever's tree builder
/// reports it ("change the encoding"), with HTML's corrections (a UTF-16
/// declaration in a byte stream that is evidently ASCII-compatible means
/// UTF-8; x-user-defined means windows-1252).
fn meta_charset(prefix: &[u8]) -> Option<&'static Encoding> {
    // Labels and markup are ASCII: any ASCII-compatible decoding finds them.
    let text = encoding_rs::WINDOWS_1252
        .decode_without_bom_handling(prefix)
        .0;
    let parser = html5ever::parse_document(
        HtmlTreeSink::new(Html::new_document()),
        html5ever::ParseOpts::default(),
    );
    let input = BufferQueue::default();
    input.push_back(html5ever::tendril::StrTendril::from_slice(&text));
    loop {
        match parser.tokenizer.feed(&input) {
            TokenizerResult::Done => return None,
            TokenizerResult::Script(_) => {}
            TokenizerResult::EncodingIndicator(label) => {
                if let Some(encoding) = Encoding::for_label(label.as_bytes()) {
                    return Some(
                        if encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE {
                            encoding_rs::UTF_8
                        } else if encoding == encoding_rs::X_USER_DEFINED {
                            encoding_rs::WINDOWS_1252
                        } else {
                            encoding
                        },
                    );
                }
            }
        }
    }
}

/// The rightmost DNS label, the way chardetng takes it (lower-case ASCII,
/// no dot); `None` for IP addresses and anything it would refuse.
fn top_level_domain(document: &Url) -> Option<&[u8]> {
    let Some(url::Host::Domain(domain)) = document.host() else {
        return None;
    };
    let label = domain.trim_end_matches('.').rsplit('.').next()?;
    let acceptable = !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    acceptable.then_some(label.as_bytes())
}

/// One parse of the prefix received so far.
struct Pass<'a> {
    document: &'a Url,
    encoding: &'static Encoding,
    viewport: Viewport,
    /// The first `<base href>` met so far, resolved.
    base: Option<Url>,
    base_seen: bool,
    icon_seen: bool,
    manifest_seen: bool,
    found: Vec<Resource>,
}

impl Pass<'_> {
    /// Walks the tree in document order. `complete`: the whole body is in,
    /// so the text of a `<style>` at the very end is whole too.
    fn walk(&mut self, html: &Html, complete: bool) {
        let mut skipping: Option<ego_tree::NodeId> = None;
        // A `<style>` whose text is not yet known to be whole: the prefix may
        // end inside it (the parser closes it at end of input). It is read
        // once something real follows it.
        let mut pending_style: Option<String> = None;
        let mut style: Option<String> = None;
        for edge in html.tree.root().traverse() {
            match edge {
                Edge::Open(node) => {
                    if skipping.is_some() {
                        continue;
                    }
                    if pending_style.is_some() && is_real(node) {
                        let text = pending_style.take().unwrap_or_default();
                        self.style_text(&text);
                    }
                    let Node::Element(element) = node.value() else {
                        continue;
                    };
                    if element.name.ns != ns!(html) {
                        // SVG and MathML elements load nothing here, but HTML
                        // inside them (foreignObject, mi) does.
                        continue;
                    }
                    if matches!(element.name(), "template" | "noscript") {
                        skipping = Some(node.id());
                        continue;
                    }
                    if element.name() == "style" {
                        // Its text is read at its end (below), not before.
                        skipping = Some(node.id());
                        style = (is_css_type(element.attr("type"))
                            && media_matches(
                                element.attr("media").unwrap_or_default(),
                                self.viewport,
                            ))
                        .then(|| text_of(node));
                    } else {
                        self.element(node, element);
                    }
                    if let Some(style) = element.attr("style") {
                        self.style_attribute(style);
                    }
                }
                Edge::Close(node) => {
                    if skipping == Some(node.id()) {
                        skipping = None;
                        pending_style = style.take();
                    }
                }
            }
        }
        if complete && let Some(text) = pending_style {
            self.style_text(&text);
        }
    }

    fn element(&mut self, node: NodeRef<'_, Node>, element: &Element) {
        match element.name() {
            "base" => {
                if !self.base_seen
                    && let Some(href) = element.attr("href")
                {
                    self.base_seen = true;
                    self.base = Url::options()
                        .base_url(Some(self.document))
                        .parse(href.trim())
                        .ok()
                        .filter(|u| !matches!(u.scheme(), "data" | "javascript"));
                }
            }
            "img" => {
                if is_lazy(element) {
                    return;
                }
                if let Some(url) = self.image_choice(node, element) {
                    self.push(&url, Kind::Image);
                }
            }
            "link" => self.link(element),
            "script" => {
                if let Some(src) = element.attr("src")
                    && element.attr("nomodule").is_none()
                    && is_script_type(element.attr("type"), element.attr("language"))
                {
                    let blocking = blocks_rendering(element)
                        || (is_classic_script(element)
                            && element.attr("async").is_none()
                            && element.attr("defer").is_none()
                            && in_head(node));
                    self.push_as(src, Kind::Script, blocking);
                }
            }
            "video" | "audio" => {
                if let Some(poster) = element.attr("poster").filter(|_| element.name() == "video") {
                    self.push(poster, Kind::Image);
                }
                let no_preload = element
                    .attr("preload")
                    .is_some_and(|p| p.trim().eq_ignore_ascii_case("none"));
                if no_preload && element.attr("autoplay").is_none() {
                    return;
                }
                if let Some(src) = media_source(node, element) {
                    self.push(&src, Kind::Media);
                }
            }
            "iframe" | "frame" => {
                if is_lazy(element) || element.attr("srcdoc").is_some() {
                    return;
                }
                if let Some(src) = element.attr("src")
                    && let Some(url) = self.resolve(src)
                    && url.origin() == self.document.origin()
                {
                    self.push_url(url, Kind::Document);
                }
            }
            _ => {}
        }
    }

    fn link(&mut self, element: &Element) {
        // An image preload may have only `imagesrcset`; everything else
        // needs an `href`.
        let href = element.attr("href").unwrap_or_default();
        let rel = element.attr("rel").unwrap_or_default().to_ascii_lowercase();
        let rel: Vec<&str> = rel.split_ascii_whitespace().collect();
        let has = |token: &str| rel.contains(&token);
        if has("stylesheet") {
            // Alternative style sheets are not applied, disabled ones
            // neither; a sheet for another medium or window is fetched by
            // browsers only at idle priority, and none of its url()s.
            if !has("alternate")
                && element.attr("disabled").is_none()
                && is_css_type(element.attr("type"))
                && media_matches(element.attr("media").unwrap_or_default(), self.viewport)
            {
                self.push_as(href, Kind::Style, true);
            }
        } else if has("preload") {
            if !media_matches(element.attr("media").unwrap_or_default(), self.viewport) {
                return;
            }
            let destination = element
                .attr("as")
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            let kind = match destination.as_str() {
                "script" => Kind::Script,
                "style" => Kind::Style,
                "font" => Kind::Font,
                "image" => Kind::Image,
                "audio" | "video" | "track" => Kind::Media,
                "fetch" => Kind::Other,
                // Without a valid `as`, a browser does not preload.
                _ => return,
            };
            if kind == Kind::Image {
                if !is_image_type(element.attr("type")) {
                    return;
                }
                let chosen = srcset::choose(
                    element.attr("imagesrcset"),
                    element.attr("imagesizes"),
                    element.attr("href"),
                    self.viewport,
                );
                if let Some(url) = chosen {
                    self.push(&url, Kind::Image);
                }
            } else {
                // A font is preloaded for the first text painted; a style
                // preload is the pattern that loads a sheet without
                // blocking, a script preload waits for its script element.
                self.push_as(href, kind, kind == Kind::Font);
            }
        } else if has("modulepreload") {
            self.push_as(href, Kind::Script, true);
        } else if has("icon") {
            if !self.icon_seen && self.resolve(href).is_some() {
                self.icon_seen = true;
                self.push(href, Kind::Icon);
            }
        } else if has("manifest") && !self.manifest_seen && self.resolve(href).is_some() {
            self.manifest_seen = true;
            self.push(href, Kind::Manifest);
        }
    }

    /// The URL an `<img>` loads: from the first matching `<source>` of its
    /// `<picture>`, else its own srcset/src.
    fn image_choice(&self, node: NodeRef<'_, Node>, img: &Element) -> Option<String> {
        let in_picture = node
            .parent()
            .and_then(|p| p.value().as_element().map(|e| e.name() == "picture"))
            .unwrap_or(false);
        if in_picture {
            for sibling in node.prev_siblings().collect::<Vec<_>>().into_iter().rev() {
                let Some(source) = sibling.value().as_element() else {
                    continue;
                };
                if source.name() != "source" {
                    continue;
                }
                let Some(set) = source.attr("srcset") else {
                    continue;
                };
                if !media_matches(source.attr("media").unwrap_or_default(), self.viewport)
                    || !is_image_type(source.attr("type"))
                {
                    continue;
                }
                if let Some(url) =
                    srcset::choose(Some(set), source.attr("sizes"), None, self.viewport)
                {
                    return Some(url.into_owned());
                }
            }
        }
        srcset::choose(
            img.attr("srcset"),
            img.attr("sizes"),
            img.attr("src"),
            self.viewport,
        )
        .map(|u| u.into_owned())
    }

    fn style_text(&mut self, text: &str) {
        let mut found = CssResources::default();
        css::scan(
            text,
            &self.base().clone(),
            self.document,
            self.viewport,
            &mut found,
        );
        self.found.extend(found.into_vec());
    }

    fn style_attribute(&mut self, declarations: &str) {
        let mut found = CssResources::default();
        let base = self.base().clone();
        css::scan_declarations(
            declarations,
            &base,
            self.document,
            self.viewport,
            &mut found,
        );
        self.found.extend(found.into_vec());
    }

    fn base(&self) -> &Url {
        self.base.as_ref().unwrap_or(self.document)
    }

    fn resolve(&self, reference: &str) -> Option<Url> {
        resolve(self.base(), self.document, reference, Some(self.encoding))
    }

    fn push(&mut self, reference: &str, kind: Kind) {
        self.push_as(reference, kind, false);
    }

    fn push_as(&mut self, reference: &str, kind: Kind, render_blocking: bool) {
        if let Some(url) = self.resolve(reference) {
            self.found.push(Resource {
                url,
                kind,
                render_blocking,
            });
        }
    }

    fn push_url(&mut self, url: Url, kind: Kind) {
        self.found.push(Resource {
            url,
            kind,
            render_blocking: false,
        });
    }
}

/// Whether a node proves that what precedes it was read whole: anything
/// but the empty `html`, `head` and `body` the parser makes up at the end of
/// input.
fn is_real(node: NodeRef<'_, Node>) -> bool {
    match node.value() {
        Node::Element(e) => {
            !(matches!(e.name(), "html" | "head" | "body") && e.attrs().next().is_none())
        }
        Node::Text(_) | Node::Comment(_) | Node::ProcessingInstruction(_) => true,
        Node::Document | Node::Fragment | Node::Doctype(_) => false,
    }
}

fn text_of(node: NodeRef<'_, Node>) -> String {
    node.children()
        .filter_map(|c| c.value().as_text().map(|t| t.to_string()))
        .collect()
}

/// Whether `node` is inside the document's `<head>`.
fn in_head(node: NodeRef<'_, Node>) -> bool {
    node.ancestors()
        .any(|a| a.value().as_element().is_some_and(|e| e.name() == "head"))
}

/// HTML's `blocking` attribute: a `render` token makes a script or a
/// stylesheet render-blocking whatever else it is.
fn blocks_rendering(element: &Element) -> bool {
    element.attr("blocking").is_some_and(|b| {
        b.split_ascii_whitespace()
            .any(|t| t.eq_ignore_ascii_case("render"))
    })
}

/// A classic script, not a module (which is deferred unless `async`).
fn is_classic_script(element: &Element) -> bool {
    !element
        .attr("type")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("module"))
}

fn is_lazy(element: &Element) -> bool {
    element
        .attr("loading")
        .is_some_and(|l| l.trim().eq_ignore_ascii_case("lazy"))
}

/// The MIME type essence of a `type` attribute, lower-case.
fn essence(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn is_image_type(value: Option<&str>) -> bool {
    value
        .filter(|v| !v.trim().is_empty())
        .is_none_or(|v| IMAGE_TYPES.contains(&essence(v).as_str()))
}

fn is_css_type(value: Option<&str>) -> bool {
    value
        .filter(|v| !v.trim().is_empty())
        .is_none_or(|v| essence(v) == "text/css")
}

/// HTML, "prepare the script element", step 8: the script block's type.
fn is_script_type(value: Option<&str>, language: Option<&str>) -> bool {
    let Some(value) = value else {
        return language.filter(|l| !l.is_empty()).is_none_or(|l| {
            JAVASCRIPT_TYPES.contains(&format!("text/{}", l.to_ascii_lowercase()).as_str())
        });
    };
    let value = value.trim().to_ascii_lowercase();
    value.is_empty() || value == "module" || JAVASCRIPT_TYPES.contains(&essence(&value).as_str())
}

/// What a `<video>`/`<audio>` loads: its `src`, else the first `<source>`
/// child with a `src` of a playable type (HTML, "resource selection").
fn media_source(node: NodeRef<'_, Node>, element: &Element) -> Option<String> {
    if let Some(src) = element.attr("src") {
        return Some(src.to_owned());
    }
    node.children()
        .filter_map(|c| c.value().as_element())
        .filter(|e| e.name() == "source")
        .find(|e| {
            e.attr("src").is_some_and(|s| !s.trim().is_empty())
                && e.attr("type")
                    .filter(|t| !t.trim().is_empty())
                    .is_none_or(|t| MEDIA_TYPES.contains(&essence(t).as_str()))
        })
        .and_then(|e| e.attr("src"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> Url {
        Url::parse("http://example.test/dir/page.html").expect("URL")
    }

    fn scan_all(body: &[u8], content_type: Option<&str>) -> Vec<String> {
        extract_html(&document(), content_type, body, &ExtractConfig::default())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn encoding_order_bom_then_header_then_meta_then_guess() {
        let doc = document();
        let meta = b"<meta charset=shift_jis><img src=a.png>";
        assert_eq!(
            sniff_encoding(meta, None, &doc, true),
            encoding_rs::SHIFT_JIS
        );
        assert_eq!(
            sniff_encoding(meta, Some(encoding_rs::EUC_JP), &doc, true),
            encoding_rs::EUC_JP
        );
        let bom = b"\xEF\xBB\xBF<meta charset=shift_jis>";
        assert_eq!(
            sniff_encoding(bom, Some(encoding_rs::EUC_JP), &doc, true),
            encoding_rs::UTF_8
        );
        let equiv = b"<meta http-equiv=Content-Type content='text/html; charset=windows-1251'>";
        assert_eq!(
            sniff_encoding(equiv, None, &doc, true),
            encoding_rs::WINDOWS_1251
        );
        let utf16 = b"<meta charset=utf-16>";
        assert_eq!(sniff_encoding(utf16, None, &doc, true), encoding_rs::UTF_8);
        // Beyond the prescan window, a meta does not count.
        let mut late = vec![b' '; PRESCAN_BYTES];
        late.extend_from_slice(b"<meta charset=shift_jis>");
        assert_eq!(
            sniff_encoding(&late, None, &doc, true),
            encoding_rs::WINDOWS_1252
        );
        // Plain ASCII with nothing declared: the detector's default.
        assert_eq!(
            sniff_encoding(b"<p>hi", None, &doc, true),
            encoding_rs::WINDOWS_1252
        );
    }

    #[test]
    fn nesting_is_bounded_above_without_counting_what_closes_itself() {
        assert_eq!(nesting("<p>a<p>b<ul><li>x<li>y</ul><img><br>"), 1);
        assert_eq!(nesting("<div><div><span></span></div></div>"), 3);
        assert_eq!(
            nesting("<div/><div/>"),
            2,
            "self-closing means nothing in HTML"
        );
        assert_eq!(nesting("<svg><path/><path/><g><path/></g></svg><p>"), 2);
        assert_eq!(
            nesting("<script>for (;;) '<div><div><div>'</script><style><div></style>"),
            1
        );
        assert_eq!(
            nesting("<title><b><b><b></title><textarea><i><i></textarea>"),
            1
        );
        assert_eq!(nesting("</div></div><div>"), 1);
    }

    #[test]
    fn top_level_domains_chardetng_accepts() {
        let tld = |s: &str| top_level_domain(&Url::parse(s).expect("URL")).map(<[u8]>::to_vec);
        assert_eq!(tld("http://example.jp/"), Some(b"jp".to_vec()));
        assert_eq!(tld("http://example.jp./"), Some(b"jp".to_vec()));
        assert_eq!(tld("http://10.0.0.1/"), None);
        assert_eq!(tld("http://[::1]/"), None);
        assert_eq!(tld("http://xn--p1ai/"), Some(b"xn--p1ai".to_vec()));
    }

    #[test]
    fn a_style_cut_at_the_end_of_a_prefix_waits_for_its_end() {
        let mut scanner =
            HtmlScanner::new(document(), Some("text/html"), &ExtractConfig::default());
        let style = b"<style>.a{background:url(/one.png)} .b{background:url(/img/long-na";
        let mut first = b"<!--".to_vec();
        first.resize(FIRST_SCAN_BYTES - 3 - style.len(), b'-');
        first.extend_from_slice(b"-->");
        first.extend_from_slice(style);
        assert_eq!(first.len(), FIRST_SCAN_BYTES);
        scanner.handle_chunk(&first);
        assert_eq!(scanner.passes(), 1);
        assert_eq!(
            scanner.poll_resource(),
            None,
            "the cut style is not read yet"
        );
        scanner.handle_chunk(b"me.png)}</style><img src=/two.png>");
        scanner.handle_end();
        let found: Vec<String> = std::iter::from_fn(|| scanner.poll_resource())
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            found,
            [
                "image http://example.test/one.png",
                "image http://example.test/img/long-name.png",
                "image http://example.test/two.png",
            ]
        );
    }

    #[test]
    fn hostile_input_neither_panics_nor_recurses_away() {
        let config = ExtractConfig::default();
        let doc = document();
        // Quadratic for the tree builder: the scan stops, after what the
        // shallower prefix gave.
        let mut deep = "<img src=first.png>".to_owned();
        deep.push_str(&"<div>".repeat(100_000));
        deep.push_str("<img src=deep.png>");
        let mut scanner = HtmlScanner::new(doc.clone(), None, &config);
        scanner.handle_chunk(&deep.as_bytes()[..2048]);
        scanner.handle_chunk(&deep.as_bytes()[2048..]);
        scanner.handle_end();
        assert!(scanner.is_finished());
        let found: Vec<String> = std::iter::from_fn(|| scanner.poll_resource())
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            found,
            Vec::<String>::new(),
            "first pass at 4 KiB is already too deep"
        );
        let mut shallow = "<div>".repeat(MAX_NESTING - 1);
        shallow.push_str("<img src=deep.png>");
        assert_eq!(
            scan_all(shallow.as_bytes(), None),
            ["image http://example.test/dir/deep.png"]
        );
        let nested_css = format!(
            "<style>{}</style><div style=\"{}\">",
            "a{".repeat(50_000),
            "x:(".repeat(50_000)
        );
        let _ = scan_all(nested_css.as_bytes(), None);
        let media = format!(
            "<picture><source srcset=a.png media=\"{}\"></picture>",
            "(".repeat(10_000)
        );
        let _ = scan_all(media.as_bytes(), None);
        let _ = css::extract_css(
            &doc,
            None,
            None,
            "@media (".repeat(20_000).as_bytes(),
            &config,
        );
        // Pseudo-random bytes, salted with markup, in pseudo-random chunks.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces: [&[u8]; 8] = [
            b"<img src=",
            b"<picture><source srcset=\"a 1x, b 2x\" media=(",
            b"<style>@import url(",
            b"<base href=",
            b"\xEF\xBB\xBF",
            b"<meta charset=shift_jis>",
            b"url(",
            b"\"'>",
        ];
        for _ in 0..200 {
            let mut body = Vec::new();
            for _ in 0..(next() % 64) {
                if next() % 3 == 0 {
                    body.extend_from_slice(pieces[(next() % 8) as usize]);
                } else {
                    body.extend((0..next() % 16).map(|_| (next() % 256) as u8));
                }
            }
            let mut scanner = HtmlScanner::new(doc.clone(), None, &config).first_scan_at(1);
            for chunk in body.chunks(1 + (next() % 50) as usize) {
                scanner.handle_chunk(chunk);
            }
            scanner.handle_end();
            while scanner.poll_resource().is_some() {}
            let _ = css::extract_css(&doc, None, None, &body, &config);
        }
    }

    #[test]
    fn the_cap_stops_copying_and_scans_what_it_has() {
        let config = ExtractConfig {
            max_html_bytes: 64 << 10,
            ..ExtractConfig::default()
        };
        let mut scanner = HtmlScanner::new(document(), None, &config);
        let mut body = b"<img src=/first.png>".to_vec();
        body.resize(64 << 10, b' ');
        body.extend_from_slice(b"<img src=/beyond.png>");
        scanner.handle_chunk(&body);
        assert!(scanner.is_finished());
        scanner.handle_chunk(b"<img src=/later.png>");
        scanner.handle_end();
        let found: Vec<String> = std::iter::from_fn(|| scanner.poll_resource())
            .map(|r| r.to_string())
            .collect();
        assert_eq!(found, ["image http://example.test/first.png"]);
    }

    #[test]
    fn render_blocking_is_what_holds_the_first_rendering() {
        let page = br#"<!doctype html><html><head>
            <link rel=stylesheet href=/site.css>
            <script src=/sync.js></script>
            <script src=/async.js async></script>
            <script src=/defer.js defer></script>
            <script type=module src=/module.js></script>
            <link rel=modulepreload href=/dep.js>
            <link rel=preload as=font href=/f.woff2 crossorigin>
            <link rel=preload as=style href=/later.css>
            <link rel=icon href=/favicon.ico>
            <style>@import "/inline-import.css"; @font-face { src: url(/inline.woff2) } .a { background: url(/bg.png) }</style>
            </head><body>
            <img src=/hero.jpg>
            <script src=/body.js></script>
            <script src=/late.js blocking=render async></script>
            <link rel=stylesheet href=/body.css>
            </body></html>"#;
        let found: Vec<(String, bool)> =
            extract_html(&document(), None, page, &ExtractConfig::default())
                .into_iter()
                .map(|r| (r.url.path().to_owned(), r.render_blocking))
                .collect();
        let expected = [
            ("/site.css", true),
            ("/sync.js", true),
            ("/async.js", false),
            ("/defer.js", false),
            ("/module.js", false),
            ("/dep.js", true),
            ("/f.woff2", true),
            ("/later.css", false),
            ("/favicon.ico", false),
            ("/inline-import.css", true),
            ("/inline.woff2", true),
            ("/bg.png", false),
            ("/hero.jpg", false),
            ("/body.js", false),
            ("/late.js", true),
            ("/body.css", true),
        ];
        let expected: Vec<(String, bool)> = expected
            .iter()
            .map(|(p, b)| ((*p).to_owned(), *b))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn parses_stay_logarithmic_in_the_body_length() {
        let mut scanner = HtmlScanner::new(document(), None, &ExtractConfig::default());
        let chunk = [b'x'; 1000];
        for _ in 0..1000 {
            scanner.handle_chunk(&chunk);
        }
        scanner.handle_end();
        // 4, 8, 16, ..., 1024 KiB milestones hit at most once each, plus the end.
        assert!(scanner.passes() <= 10, "{} passes", scanner.passes());
        assert_eq!(
            scan_all(b"<img src=a.png>", None),
            ["image http://example.test/dir/a.png"]
        );
    }
}
