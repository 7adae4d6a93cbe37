//! Early Hints (RFC 8297) for pages served over HTTP/2 inside a terminated
//! TLS tunnel: which requests get a `103`, and the `Link` field values it
//! carries. No I/O: `http2.rs` asks [`is_page`], the handler's
//! [`Handler::pushes`](crate::server::Handler::pushes), then
//! [`link_values`], and sends the 103 before the final response.
//!
//! What a browser does with them (Chromium, which acts on a 103 only over
//! HTTP/2 and only for a top-level navigation, and honours only `preload`
//! and `preconnect` in it): each `Link: <target>; rel=preload; as=...` is
//! fetched at once, as the page's `<link rel=preload>` would be, so the
//! levels the HTML and its CSS name (stylesheets, their fonts and images)
//! are asked for together instead of one level per round trip.
//!
//! - **Which requests.** A GET for a document: `Sec-Fetch-Dest: document`,
//!   or, from a client without Fetch Metadata, an `Accept` that names
//!   `text/html` at the highest weight it gives. An image, a script, an
//!   iframe (`Sec-Fetch-Dest: iframe`) or a `*/*` get none.
//! - **What is named.** The handler's push targets in its order
//!   (render-blocking first), each once, on the page's own host (origin-form
//!   `/path?query`, never `//host/...`), in URI characters only, whose kind
//!   is known and maps to a preload destination. Media, frames and manifests
//!   are not preloaded (their kinds have no `as` here); a target without a
//!   kind is left out, since a preload with the wrong `as` is fetched twice.
//! - **`as` and CORS.** `as` by the entry's kind: style, script, font,
//!   image (images and icons), fetch (`preload as=fetch`). Fonts are always
//!   fetched in CORS mode and `fetch()` defaults to it, so theirs carry
//!   `crossorigin`: a preload whose mode differs from the later request is
//!   not reused. A module script (CORS) named by kind `script` is preloaded
//!   without `crossorigin` and so fetched twice: the kind does not tell a
//!   module from a classic script.
//! - **Bounded.** At most [`MAX_HINTS`] Link fields and [`MAX_HINT_BYTES`]
//!   of them counted as HTTP/2 counts a header list; the rest of the
//!   targets are left to the page.

use std::collections::HashSet;

use http::{HeaderMap, HeaderValue, Method};
use page_resources::Kind;

use crate::server::PushTarget;

/// Most `Link` fields in one 103. The push driver's default
/// `[push] max_per_page` too: a median page asks for about 70
/// subresources, and the first ones (render-blocking first) matter most.
pub(super) const MAX_HINTS: usize = 64;

/// Most bytes of a 103's `Link` fields, counted as RFC 9113 section 6.5.2
/// counts a header list (name, value and 32 per field). Half of the 16 KiB
/// header list that h2 servers (hyper's, ours) accept by default, so a
/// client with such a limit takes it too; 8 KiB is 6.6 ms at 10 Mbit/s
/// before the page's own head.
pub(super) const MAX_HINT_BYTES: usize = 8 * 1024;

/// RFC 9113 section 6.5.2: each field's overhead in a header list's size.
const FIELD_OVERHEAD: usize = 32;

/// Whether `method` and `headers` ask for a page a browser would act on a
/// 103 for (a top-level navigation).
pub(super) fn is_page(method: &Method, headers: &HeaderMap) -> bool {
    if method != Method::GET {
        return false;
    }
    if let Some(dest) = headers.get("sec-fetch-dest") {
        return dest.as_bytes().eq_ignore_ascii_case(b"document");
    }
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .any(|accept| accept_prefers_html(accept.as_bytes()))
}

/// `text/html` is listed with a weight above 0 and no other media range
/// weighs more. A range whose `q` does not parse is ignored.
fn accept_prefers_html(accept: &[u8]) -> bool {
    let Ok(accept) = std::str::from_utf8(accept) else {
        return false;
    };
    let mut html: Option<f32> = None;
    let mut best = 0.0_f32;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim();
        let mut q = Some(1.0_f32);
        for param in parts {
            if let Some((name, value)) = param.split_once('=')
                && name.trim().eq_ignore_ascii_case("q")
            {
                q = value
                    .trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|q| (0.0..=1.0).contains(q));
            }
        }
        let Some(q) = q else { continue };
        best = best.max(q);
        if media.eq_ignore_ascii_case("text/html") {
            html = Some(html.map_or(q, |h| h.max(q)));
        }
    }
    html.is_some_and(|h| h > 0.0 && h >= best)
}

/// The preload destination (`as`) for `kind`, and whether the later
/// request is a CORS one (then `crossorigin`).
fn destination(kind: Kind) -> Option<(&'static str, bool)> {
    match kind {
        Kind::Style => Some(("style", false)),
        Kind::Script => Some(("script", false)),
        Kind::Font => Some(("font", true)),
        Kind::Image | Kind::Icon => Some(("image", false)),
        Kind::Other => Some(("fetch", true)),
        Kind::Media | Kind::Document | Kind::Manifest => None,
    }
}

/// An origin-form target (`/path?query`, not `//authority`) of URI
/// characters only (RFC 3986 unreserved, reserved and `%`), so that it
/// stands between `<` and `>` unchanged.
fn valid_target(target: &str) -> bool {
    let bytes = target.as_bytes();
    bytes.first() == Some(&b'/')
        && bytes.get(1) != Some(&b'/')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b))
}

/// The `Link` field values of the 103 for a page at `page_target`, one per
/// usable target in `targets`' order, within [`MAX_HINTS`] and
/// [`MAX_HINT_BYTES`].
pub(super) fn link_values(targets: &[PushTarget], page_target: &str) -> Vec<HeaderValue> {
    let mut values = Vec::new();
    let mut seen = HashSet::new();
    let mut bytes = 0;
    for target in targets {
        if values.len() == MAX_HINTS {
            break;
        }
        let Some((dest, cors)) = target.kind.and_then(destination) else {
            continue;
        };
        let t = target.target.as_str();
        if !valid_target(t) || t == page_target || !seen.insert(t) {
            continue;
        }
        let cors = if cors { "; crossorigin" } else { "" };
        let value = format!("<{t}>; rel=preload; as={dest}{cors}");
        let size = "link".len() + value.len() + FIELD_OVERHEAD;
        if bytes + size > MAX_HINT_BYTES {
            break;
        }
        // Every byte was checked above; a failure here would only drop it.
        if let Ok(value) = HeaderValue::from_str(&value) {
            bytes += size;
            values.push(value);
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn target(t: &str, kind: Option<Kind>) -> PushTarget {
        PushTarget {
            target: t.to_owned(),
            render_blocking: false,
            public: true,
            kind,
        }
    }

    const CHROME_NAVIGATION: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,\
        image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7";
    const CHROME_IMAGE: &str = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";

    #[test]
    fn a_navigation_is_a_page() {
        let nav = headers(&[
            ("sec-fetch-dest", "document"),
            ("accept", CHROME_NAVIGATION),
        ]);
        assert!(is_page(&Method::GET, &nav));
        assert!(is_page(
            &Method::GET,
            &headers(&[("accept", CHROME_NAVIGATION)])
        ));
        assert!(is_page(
            &Method::GET,
            &headers(&[("sec-fetch-dest", "Document")])
        ));
    }

    #[test]
    fn other_requests_are_not_pages() {
        let nav = headers(&[
            ("sec-fetch-dest", "document"),
            ("accept", CHROME_NAVIGATION),
        ]);
        assert!(!is_page(&Method::POST, &nav));
        assert!(!is_page(&Method::HEAD, &nav));
        for fields in [
            &[("sec-fetch-dest", "image"), ("accept", CHROME_IMAGE)][..],
            &[("accept", CHROME_IMAGE)],
            // An iframe asks for HTML, but Chromium acts on hints for the
            // top-level page only.
            &[("sec-fetch-dest", "iframe"), ("accept", CHROME_NAVIGATION)],
            &[("accept", "*/*")],
            &[],
            &[("accept", "application/json, text/html;q=0.5")],
            &[("accept", "text/html;q=0")],
            &[("accept", "text/html;q=x")],
        ] {
            assert!(!is_page(&Method::GET, &headers(fields)), "{fields:?}");
        }
        assert!(is_page(
            &Method::GET,
            &headers(&[("accept", "application/json;q=0.5, text/html;q=0.9")])
        ));
    }

    #[test]
    fn link_values_by_kind_in_order() {
        let targets = [
            target("/style.css", Some(Kind::Style)),
            target("/app.js?v=2", Some(Kind::Script)),
            target("/f.woff2", Some(Kind::Font)),
            target("/hero.jpg", Some(Kind::Image)),
            target("/favicon.ico", Some(Kind::Icon)),
            target("/data.json", Some(Kind::Other)),
        ];
        let values: Vec<_> = link_values(&targets, "/")
            .into_iter()
            .map(|v| v.to_str().map(str::to_owned))
            .collect::<Result<_, _>>()
            .expect("visible ASCII");
        assert_eq!(
            values,
            [
                "</style.css>; rel=preload; as=style",
                "</app.js?v=2>; rel=preload; as=script",
                "</f.woff2>; rel=preload; as=font; crossorigin",
                "</hero.jpg>; rel=preload; as=image",
                "</favicon.ico>; rel=preload; as=image",
                "</data.json>; rel=preload; as=fetch; crossorigin",
            ]
        );
    }

    #[test]
    fn unusable_targets_are_left_out() {
        let targets = [
            target("/no-kind.css", None),
            target("/movie.mp4", Some(Kind::Media)),
            target("/frame.html", Some(Kind::Document)),
            target("/app.webmanifest", Some(Kind::Manifest)),
            target("//cdn.example/x.css", Some(Kind::Style)),
            target("https://cdn.example/x.css", Some(Kind::Style)),
            target("/a b.css", Some(Kind::Style)),
            target("/a>.css", Some(Kind::Style)),
            target("/a\"b.css", Some(Kind::Style)),
            target("", Some(Kind::Style)),
            target("/index.html", Some(Kind::Style)),
            target("/ok.css", Some(Kind::Style)),
            target("/ok.css", Some(Kind::Style)),
        ];
        let values = link_values(&targets, "/index.html");
        assert_eq!(values, ["</ok.css>; rel=preload; as=style"]);
    }

    #[test]
    fn at_most_max_hints_fields() {
        let targets: Vec<_> = (0..MAX_HINTS + 10)
            .map(|i| target(&format!("/{i}.png"), Some(Kind::Image)))
            .collect();
        let values = link_values(&targets, "/");
        assert_eq!(values.len(), MAX_HINTS);
        assert_eq!(values[MAX_HINTS - 1], "</63.png>; rel=preload; as=image");
    }

    #[test]
    fn at_most_max_hint_bytes() {
        let long = "x".repeat(1000);
        let targets: Vec<_> = (0..20)
            .map(|i| target(&format!("/{long}{i:02}.png"), Some(Kind::Image)))
            .collect();
        let values = link_values(&targets, "/");
        let size = |v: &HeaderValue| "link".len() + v.len() + FIELD_OVERHEAD;
        let total: usize = values.iter().map(size).sum();
        assert!(total <= MAX_HINT_BYTES, "{total}");
        // Each field is 1,068 bytes counted: seven fit in 8 KiB, not eight.
        assert_eq!(values.len(), 7);
        assert_eq!(size(&values[0]), 1068);
    }
}
