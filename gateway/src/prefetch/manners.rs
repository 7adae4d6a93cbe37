//! What a prefetch may say and what of its answer may be kept.
//!
//! A prefetch is the gateway speaking for a browser that has not asked yet,
//! so it carries nothing that identifies the user: no `Cookie`, no
//! `Authorization`, no `Proxy-Authorization`, nothing the browser did not
//! send for every request anyway. The fields it does send are the ones
//! responses commonly vary on (`Accept`, `Accept-Encoding`,
//! `Accept-Language`, `User-Agent`), so that the stored response matches the
//! browser's later request. A response that depends on the user's
//! credentials (`Vary: Cookie`, `Vary: Authorization`) would be the
//! anonymous version, useless to the browser and not to be kept.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use url::Url;

use super::Resource;
use crate::cache::policy::{self, NotStorable};

/// The fields copied from the browser's request for the page: the same for
/// all of a browser's requests, and what responses vary on.
const COPIED: [header::HeaderName; 3] = [
    header::USER_AGENT,
    header::ACCEPT_LANGUAGE,
    header::ACCEPT_ENCODING,
];

/// `Accept` for documents when the page's request had none.
const ACCEPT_DOCUMENT: &str =
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

/// The request fields of a prefetch of `resource` for the page at
/// `document`, whose own request carried `browser` (the page's request
/// head). Starts from nothing and adds only what is listed here; `Host` is
/// the I/O layer's.
///
/// - `User-Agent`, `Accept-Language`, `Accept-Encoding`: copied.
/// - `Accept`: what a browser sends for that kind of resource (a frame gets
///   the page request's own `Accept`).
/// - `Referer`: the document's URL when the resource is on the document's
///   origin; nothing for other origins (a browser would send the origin
///   unless the page's policy says otherwise, which the gateway cannot
///   know: it sends less rather than more).
pub fn prefetch_request_headers(
    browser: &HeaderMap,
    document: &Url,
    resource: &Resource,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in COPIED {
        for value in browser.get_all(&name) {
            headers.append(name.clone(), value.clone());
        }
    }
    let accept = match resource.kind.browser_accept() {
        Some(accept) => HeaderValue::from_static(accept),
        None => browser
            .get(header::ACCEPT)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static(ACCEPT_DOCUMENT)),
    };
    headers.insert(header::ACCEPT, accept);
    if resource.url.origin() == document.origin() {
        let mut referrer = document.clone();
        referrer.set_fragment(None);
        let _ = referrer.set_username("");
        let _ = referrer.set_password(None);
        if let Ok(value) = HeaderValue::from_str(referrer.as_str()) {
            headers.insert(header::REFERER, value);
        }
    }
    headers
}

/// Why a prefetched response is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotKept {
    /// `Vary` names `Cookie` or `Authorization`: the anonymous answer a
    /// prefetch gets is not the one the browser would get.
    #[error("varies on the user's credentials")]
    VariesOnCredentials,
    /// The cache policy would not store it (`no-store`, `private`,
    /// `Vary: *`, `Set-Cookie`, no freshness, ...).
    #[error("not storable: {0}")]
    NotStorable(NotStorable),
}

/// Whether the response to a prefetch may be kept (stored in the cache for
/// the browser's later request). The request side is the prefetch's own:
/// a GET without credentials.
pub fn keep_prefetched(status: StatusCode, response: &HeaderMap) -> Result<(), NotKept> {
    if let Some(names) = policy::vary_names(response)
        && names.iter().any(|n| n == "cookie" || n == "authorization")
    {
        return Err(NotKept::VariesOnCredentials);
    }
    policy::storable(&Method::GET, &HeaderMap::new(), status, response)
        .map_err(NotKept::NotStorable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefetch::Kind;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_prefetch_carries_no_credentials() {
        let browser = headers(&[
            ("cookie", "session=secret"),
            ("authorization", "Basic dXNlcjpwdw=="),
            ("proxy-authorization", "Basic eDp5"),
            ("user-agent", "Mozilla/5.0 test"),
            ("accept-language", "fr-CH, fr;q=0.9"),
            ("accept-encoding", "gzip, br"),
            ("accept", "text/html"),
            ("cache-control", "no-cache"),
            ("x-requested-with", "test"),
        ]);
        let document = Url::parse("http://example.test/page.html#top").expect("URL");
        let image = Resource {
            url: Url::parse("http://example.test/a.png").expect("URL"),
            kind: Kind::Image,
            render_blocking: false,
        };
        let sent = prefetch_request_headers(&browser, &document, &image);
        let mut names: Vec<&str> = sent.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "accept",
                "accept-encoding",
                "accept-language",
                "referer",
                "user-agent"
            ]
        );
        assert_eq!(
            sent[header::ACCEPT],
            Kind::Image.browser_accept().expect("an image has one")
        );
        assert_eq!(sent[header::REFERER], "http://example.test/page.html");
        assert_eq!(sent[header::ACCEPT_LANGUAGE], "fr-CH, fr;q=0.9");

        let other_origin = Resource {
            url: Url::parse("http://cdn.test/a.css").expect("URL"),
            kind: Kind::Style,
            render_blocking: false,
        };
        let sent = prefetch_request_headers(&browser, &document, &other_origin);
        assert!(!sent.contains_key(header::REFERER));
        assert_eq!(
            sent[header::ACCEPT],
            Kind::Style.browser_accept().expect("a stylesheet has one")
        );

        let frame = Resource {
            url: Url::parse("http://example.test/frame.html").expect("URL"),
            kind: Kind::Document,
            render_blocking: false,
        };
        assert_eq!(
            prefetch_request_headers(&browser, &document, &frame)[header::ACCEPT],
            "text/html"
        );
    }

    #[test]
    fn responses_tied_to_credentials_or_not_storable_are_not_kept() {
        let ok = headers(&[("cache-control", "max-age=60"), ("vary", "Accept-Encoding")]);
        assert_eq!(keep_prefetched(StatusCode::OK, &ok), Ok(()));
        let cookie = headers(&[("cache-control", "max-age=60"), ("vary", "accept, Cookie")]);
        assert_eq!(
            keep_prefetched(StatusCode::OK, &cookie),
            Err(NotKept::VariesOnCredentials)
        );
        let auth = headers(&[
            ("cache-control", "public, max-age=60"),
            ("vary", "Authorization"),
        ]);
        assert_eq!(
            keep_prefetched(StatusCode::OK, &auth),
            Err(NotKept::VariesOnCredentials)
        );
        let star = headers(&[("cache-control", "max-age=60"), ("vary", "*")]);
        assert_eq!(
            keep_prefetched(StatusCode::OK, &star),
            Err(NotKept::NotStorable(NotStorable::VaryStar))
        );
        let no_store = headers(&[("cache-control", "no-store")]);
        assert_eq!(
            keep_prefetched(StatusCode::OK, &no_store),
            Err(NotKept::NotStorable(NotStorable::NoStore))
        );
        let private = headers(&[("cache-control", "private, max-age=60")]);
        assert_eq!(
            keep_prefetched(StatusCode::OK, &private),
            Err(NotKept::NotStorable(NotStorable::Private))
        );
        let cookie_set = headers(&[("cache-control", "max-age=60"), ("set-cookie", "a=b")]);
        assert_eq!(
            keep_prefetched(StatusCode::OK, &cookie_set),
            Err(NotKept::NotStorable(NotStorable::SetCookie))
        );
    }
}
