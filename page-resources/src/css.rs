//! What a stylesheet makes a browser fetch: `@import`s (stylesheets, scanned
//! in turn up to [`ExtractConfig::css_import_depth`], which the caller
//! enforces: it fetches them) and `url()`s (fonts in `@font-face`, images
//! elsewhere).
//!
//! Tokens come from cssparser (Servo's CSS Syntax tokenizer: comments,
//! escapes, quoted and unquoted `url()`, bad URLs). On top of it, the rules
//! a browser applies:
//!
//! - `@import` counts only before any other rule but `@charset` and `@layer`
//!   statements; later ones are ignored, as browsers ignore them.
//! - `@namespace url(...)` names a namespace, it is not fetched.
//! - Of an `@font-face` `src` list (the last `src` of the block), only the
//!   first source a browser can use (no `format()`, or woff2, woff,
//!   truetype, opentype, collection) is fetched; `local()` is skipped.
//! - `@media` blocks that do not match the imagined window (print, narrow
//!   screens) are skipped: their rules never apply, so their images are
//!   never fetched. `@import`s count whatever their media.
//!
//! Over-fetching, knowingly: an image `url()` is fetched by a browser only
//! when a rule using it matches an element, and a font only when text uses
//! it (and, with `unicode-range`, only for the ranges present). The gateway
//! cannot know either; the per-page limits bound the cost, and the wasted
//! bytes metric shows it.
//!
//! [`ExtractConfig::css_import_depth`]: crate::ExtractConfig::css_import_depth

use std::borrow::Cow;
use std::collections::HashSet;

use cssparser::{Delimiter, ParseError, Parser, SourcePosition, Token};
use encoding_rs::Encoding;
use url::Url;

use crate::media::{Viewport, media_matches};
use crate::{ExtractConfig, Kind, Resource, content_type_charset, resolve};

/// `@font-face` formats every current browser supports.
const FONT_FORMATS: [&str; 6] = [
    "woff2",
    "woff",
    "truetype",
    "opentype",
    "collection",
    "font-collection",
];

/// What a stylesheet refers to, each list in stylesheet order, without
/// duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CssResources {
    /// `@import`ed stylesheets ([`Kind::Style`]).
    pub imports: Vec<Resource>,
    /// Fonts ([`Kind::Font`]) and images ([`Kind::Image`]).
    pub urls: Vec<Resource>,
}

impl CssResources {
    /// Imports first, then the other URLs: the order a browser requests them
    /// in (imports are found while the sheet is parsed, the rest only at
    /// style resolution).
    pub fn into_vec(self) -> Vec<Resource> {
        let mut all = self.imports;
        all.extend(self.urls);
        all
    }
}

/// Scans a stylesheet body fetched from `stylesheet`. `content_type` is its
/// `Content-Type` (for a charset); `referrer_encoding` is the encoding of
/// the document that linked it, if known (CSS Syntax's environment
/// encoding). URLs resolve against `stylesheet`; `@media` blocks count when
/// they match [`ExtractConfig::viewport_width`]. At most
/// [`ExtractConfig::max_css_bytes`] are read, a cut sheet up to its last
/// complete rule.
pub fn extract_css(
    stylesheet: &Url,
    content_type: Option<&str>,
    referrer_encoding: Option<&'static Encoding>,
    body: &[u8],
    config: &ExtractConfig,
) -> CssResources {
    let cap = usize::try_from(config.max_css_bytes).unwrap_or(usize::MAX);
    let body = &body[..body.len().min(cap)];
    let text = decode_css(body, content_type, referrer_encoding);
    // A cut sheet may end inside a token (`url(/img/he`): scan up to the
    // last complete rule only.
    let text = if body.len() == cap {
        text.rfind('}').map_or("", |end| &text[..=end])
    } else {
        &text
    };
    let mut out = CssResources::default();
    let viewport = Viewport::new(config.viewport_width);
    scan(text, stylesheet, stylesheet, viewport, &mut out);
    out
}

/// The text of a stylesheet (CSS Syntax, "decode"): a BOM wins, then the
/// `Content-Type` charset, then `@charset`, then the referrer's encoding,
/// then UTF-8. Malformed bytes become U+FFFD.
pub fn decode_css<'a>(
    body: &'a [u8],
    content_type: Option<&str>,
    referrer_encoding: Option<&'static Encoding>,
) -> Cow<'a, str> {
    let protocol = content_type_charset(content_type).map(|e| e.name().as_bytes());
    let encoding = cssparser::stylesheet_encoding::<EncodingRs>(body, protocol, referrer_encoding);
    encoding.decode(body).0
}

/// cssparser's encoding hooks, answered by encoding_rs.
struct EncodingRs;

impl cssparser::EncodingSupport for EncodingRs {
    type Encoding = &'static Encoding;

    fn from_label(ascii_label: &[u8]) -> Option<Self::Encoding> {
        Encoding::for_label(ascii_label)
    }

    fn utf8() -> Self::Encoding {
        encoding_rs::UTF_8
    }

    fn is_utf16_be_or_le(encoding: &Self::Encoding) -> bool {
        *encoding == encoding_rs::UTF_16BE || *encoding == encoding_rs::UTF_16LE
    }
}

/// Scans CSS text (a stylesheet, a `<style>` element's text or a `style`
/// attribute's declarations) into `out`. URLs resolve against `base`;
/// `document` is the resource the CSS is in (its scheme is the only one
/// fetched, and a reference to it is not a fetch).
pub(crate) fn scan(
    text: &str,
    base: &Url,
    document: &Url,
    viewport: Viewport,
    out: &mut CssResources,
) {
    let mut parser = Parser::new(text);
    let mut seen: HashSet<Url> = out
        .imports
        .iter()
        .chain(&out.urls)
        .map(|r| r.url.clone())
        .collect();
    let mut walker = Walker {
        viewport,
        base,
        document,
        out,
        seen: &mut seen,
        imports_allowed: true,
    };
    walker.rules(&mut parser, true);
}

/// Scans the declarations of a `style` attribute into `out` (no at-rules:
/// an `@import` there means nothing).
pub(crate) fn scan_declarations(
    text: &str,
    base: &Url,
    document: &Url,
    viewport: Viewport,
    out: &mut CssResources,
) {
    let mut parser = Parser::new(text);
    let mut seen: HashSet<Url> = out.urls.iter().map(|r| r.url.clone()).collect();
    let mut walker = Walker {
        viewport,
        base,
        document,
        out,
        seen: &mut seen,
        imports_allowed: false,
    };
    walker.rules(&mut parser, false);
}

/// The at-rule whose prelude is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Import {
        done: bool,
    },
    FontFace,
    Namespace,
    /// `@media`, its prelude starting here.
    Media(SourcePosition),
    /// `@charset` and `@layer` statements: allowed before `@import`.
    Preamble,
    Other,
}

struct Walker<'a> {
    viewport: Viewport,
    base: &'a Url,
    document: &'a Url,
    out: &'a mut CssResources,
    seen: &'a mut HashSet<Url>,
    /// No rule but `@charset`, `@layer` statements and `@import` yet.
    imports_allowed: bool,
}

type Never = ParseError<()>;

impl Walker<'_> {
    /// A list of rules or declarations (the structure does not matter for
    /// finding URLs, except at-rule preludes and `@font-face` blocks).
    fn rules(&mut self, p: &mut Parser<'_>, top: bool) {
        let mut at: Option<At> = None;
        loop {
            let token = match p.next() {
                Ok(t) => t.clone(),
                Err(_) => return,
            };
            match token {
                Token::AtKeyword(name) => {
                    let kind = match name.to_ascii_lowercase().as_str() {
                        "import" => At::Import { done: false },
                        "font-face" => At::FontFace,
                        "namespace" => At::Namespace,
                        "media" => At::Media(p.position()),
                        "charset" | "layer" => At::Preamble,
                        _ => At::Other,
                    };
                    if top && !matches!(kind, At::Import { .. } | At::Preamble) {
                        self.imports_allowed = false;
                    }
                    at = Some(kind);
                }
                Token::Semicolon => at = None,
                Token::UnquotedUrl(url) => self.reference(&url, top, &mut at),
                Token::QuotedString(s) if matches!(at, Some(At::Import { done: false })) => {
                    self.reference(&s, top, &mut at);
                }
                Token::Function(name) if is_url_function(&name) => {
                    let url = p
                        .parse_nested_block(|p| Ok::<_, Never>(p.expect_string_cloned().ok()))
                        .ok()
                        .flatten();
                    if let Some(url) = url {
                        self.reference(&url, top, &mut at);
                    }
                }
                Token::CurlyBracketBlock => {
                    if top {
                        self.imports_allowed = false;
                    }
                    if at == Some(At::FontFace) {
                        let _ = p.parse_nested_block(|p| {
                            self.font_face(p);
                            Ok::<_, Never>(())
                        });
                    } else if let Some(At::Media(start)) = at
                        && !media_matches(
                            p.slice_from(start).trim_end().trim_end_matches('{'),
                            self.viewport,
                        )
                    {
                        // Rules for another medium or window: a browser
                        // applies none of them, so fetches none of theirs.
                    } else {
                        let _ = p.parse_nested_block(|p| {
                            self.rules(p, false);
                            Ok::<_, Never>(())
                        });
                    }
                    at = None;
                }
                Token::Function(_) | Token::ParenthesisBlock | Token::SquareBracketBlock => {
                    let _ = p.parse_nested_block(|p| {
                        self.rules(p, false);
                        Ok::<_, Never>(())
                    });
                }
                _ => {}
            }
        }
    }

    /// A URL met outside `@font-face`.
    fn reference(&mut self, url: &str, top: bool, at: &mut Option<At>) {
        match at {
            Some(At::Import { done }) => {
                if top && self.imports_allowed && !*done {
                    self.push(url, Kind::Style);
                }
                *done = true;
            }
            Some(At::Namespace) => {}
            _ => self.push(url, Kind::Image),
        }
    }

    /// An `@font-face` block: the first usable source of its (last) `src`.
    fn font_face(&mut self, p: &mut Parser<'_>) {
        let mut source = None;
        loop {
            let is_src = match p.next() {
                Ok(Token::Ident(name)) => name.eq_ignore_ascii_case("src"),
                Ok(_) => false,
                Err(_) => break,
            };
            if !is_src || p.try_parse(|p| p.expect_colon()).is_err() {
                continue;
            }
            let chosen = p
                .parse_until_after(Delimiter::Semicolon, |p| {
                    Ok::<_, Never>(
                        p.parse_comma_separated_ignoring_errors(font_source)
                            .into_iter()
                            .flatten()
                            .next(),
                    )
                })
                .ok()
                .flatten();
            // A later valid `src` replaces an earlier one, as any repeated
            // declaration does.
            if chosen.is_some() {
                source = chosen;
            }
        }
        if let Some(url) = source {
            self.push(&url, Kind::Font);
        }
    }

    fn push(&mut self, reference: &str, kind: Kind) {
        let Some(url) = resolve(self.base, self.document, reference, None) else {
            return;
        };
        if !self.seen.insert(url.clone()) {
            return;
        }
        // A sheet's imports and fonts hold the first rendering; its images
        // do not.
        let resource = Resource {
            url,
            kind,
            render_blocking: matches!(kind, Kind::Style | Kind::Font),
        };
        if kind == Kind::Style {
            self.out.imports.push(resource);
        } else {
            self.out.urls.push(resource);
        }
    }
}

fn is_url_function(name: &str) -> bool {
    name.eq_ignore_ascii_case("url") || name.eq_ignore_ascii_case("src")
}

/// One entry of an `@font-face` `src` list: `Some(url)` if a browser can
/// use it, `None` for `local()` or an unsupported format.
fn font_source<'i>(p: &mut Parser<'i>) -> Result<Option<String>, Never> {
    let url = match p.next()?.clone() {
        Token::UnquotedUrl(url) => Some(url.to_string()),
        Token::Function(name) if is_url_function(&name) => Some(
            p.parse_nested_block(|p| Ok::<_, Never>(p.expect_string_cloned()?))?
                .to_string(),
        ),
        Token::Function(name) if name.eq_ignore_ascii_case("local") => {
            p.parse_nested_block(|p| {
                while p.next().is_ok() {}
                Ok::<_, Never>(())
            })?;
            None
        }
        _ => return Err(p.new_error_for_next_token()),
    };
    let mut usable = true;
    while let Ok(token) = p.next() {
        if let Token::Function(name) = token
            && name.eq_ignore_ascii_case("format")
        {
            usable = p.parse_nested_block(|p| {
                let mut any = false;
                while let Ok(token) = p.next() {
                    if let Token::Ident(f) | Token::QuotedString(f) = token {
                        any |= FONT_FORMATS.iter().any(|s| f.eq_ignore_ascii_case(s));
                    }
                }
                Ok::<_, Never>(any)
            })?;
        }
    }
    Ok(url.filter(|_| usable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_str(css: &str) -> (Vec<String>, Vec<String>) {
        let base = Url::parse("http://example.test/css/site.css").expect("URL");
        let found = extract_css(
            &base,
            Some("text/css"),
            None,
            css.as_bytes(),
            &ExtractConfig::default(),
        );
        let show = |v: Vec<Resource>| v.iter().map(ToString::to_string).collect();
        (show(found.imports), show(found.urls))
    }

    #[test]
    fn imports_and_urls() {
        let (imports, urls) = scan_str(
            r#"@charset "utf-8";
            @layer base;
            @import "a.css";
            @import url(b.css) screen;
            @import url("c.css") layer(x) supports(display: grid);
            @namespace svg url(http://www.w3.org/2000/svg);
            @import "late.css";
            body { background: url(../img/bg.png) no-repeat; }
            /* url(commented.png) */
            .a { background-image: url( "q.png" ), url('s.png'); }
            .b { cursor: url(c\).cur), auto; }
            .c { background: url(data:image/png;base64,AAAA); }
            @media (min-width: 10px) { .d { background: url(/m.png) } }
            .e { background: URL(bg.png) }
            .f { background: url(https://example.test/other-scheme.png) }
            .g { filter: url(#blur) }"#,
        );
        assert_eq!(
            imports,
            [
                "style http://example.test/css/a.css",
                "style http://example.test/css/b.css",
                "style http://example.test/css/c.css",
            ]
        );
        assert_eq!(
            urls,
            [
                "image http://example.test/img/bg.png",
                "image http://example.test/css/q.png",
                "image http://example.test/css/s.png",
                "image http://example.test/css/c).cur",
                "image http://example.test/m.png",
                "image http://example.test/css/bg.png",
            ]
        );
    }

    #[test]
    fn font_face_takes_the_first_usable_source() {
        let (_, urls) = scan_str(
            r#"@font-face { font-family: A; src: local("A"), url(a.eot?#iefix) format("embedded-opentype"), url(a.woff2) format("woff2"), url(a.woff) format("woff"); }
            @font-face { font-family: B; src: url(b.ttf); font-display: swap }
            @font-face { font-family: C; src: url(c.svg#c) format("svg") }
            @media screen { @font-face { font-family: D; src: url("d.woff2") format(woff2) tech(variations) } }"#,
        );
        assert_eq!(
            urls,
            [
                "font http://example.test/css/a.woff2",
                "font http://example.test/css/b.ttf",
                "font http://example.test/css/d.woff2",
            ]
        );
    }

    #[test]
    fn encodings_and_truncation() {
        let base = Url::parse("http://example.test/s.css").expect("URL");
        // windows-1252 by @charset: "é" is 0xE9, path percent-encoded as UTF-8.
        let body = b"@charset \"windows-1252\";\n.a { background: url(caf\xE9.png) }";
        let found = extract_css(&base, None, None, body, &ExtractConfig::default());
        assert_eq!(
            found.urls[0].url.as_str(),
            "http://example.test/caf%C3%A9.png"
        );
        // The Content-Type charset wins over @charset.
        let found = extract_css(
            &base,
            Some("text/css; charset=utf-8"),
            None,
            body,
            &ExtractConfig::default(),
        );
        assert_eq!(
            found.urls[0].url.as_str(),
            "http://example.test/caf%EF%BF%BD.png"
        );
        // A referrer's encoding applies when nothing else says.
        let body = b".a { background: url(caf\xE9.png) }";
        let found = extract_css(
            &base,
            None,
            Some(encoding_rs::WINDOWS_1252),
            body,
            &ExtractConfig::default(),
        );
        assert_eq!(
            found.urls[0].url.as_str(),
            "http://example.test/caf%C3%A9.png"
        );
        // Beyond the cap, only complete rules count.
        let mut big = ".a { background: url(first.png) }".to_owned();
        let cap = usize::try_from(crate::DEFAULT_MAX_CSS_BYTES).expect("fits");
        big.push_str(&" ".repeat(cap - big.len() - 20));
        big.push_str(".b { background: url(/img/cut-here-and-beyond.png) }");
        let found = extract_css(&base, None, None, big.as_bytes(), &ExtractConfig::default());
        assert_eq!(found.urls.len(), 1);
        assert_eq!(found.urls[0].url.as_str(), "http://example.test/first.png");
    }

    #[test]
    fn malformed_css_does_not_stop_the_scan() {
        let (_, urls) = scan_str(
            ".a { background: url(a b.png) } .b { background: url(ok.png) } .c { x: \"unclosed",
        );
        assert_eq!(urls, ["image http://example.test/css/ok.png"]);
    }
}
