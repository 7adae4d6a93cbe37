//! The checks and rewriting of a browser's request head, after hyper parsed
//! it: no I/O, no clock, nothing shared; fuzzed as it is (`front_head`).
//!
//! ```text
//!  hyper's request head ──► check ──► Checked { host, port, target }
//!                             │          │
//!            HeadRefusal ◄────┘          ▼   (Host verified, body read: Front)
//!  (414, 508, 405, 400)      end_to_end(headers) ──► write_request_head ──► REQUEST
//! ```
//!
//! [`check`] refuses, in this order, a target longer than `http.max_uri_bytes`
//! (414), a request that already passed through this gateway (its `Via`
//! names us: 508), `CONNECT` (405), the asterisk-form target on any method
//! but OPTIONS (400), and a missing, repeated or malformed Host (400);
//! otherwise it says which authority the request names and the target to send
//! on. [`end_to_end`]
//! drops the hop-by-hop fields; `http_semantics::write_request_head` writes
//! the HTTP/1.1 head a REQUEST message carries to an origin, the head the
//! origin parses with the same crate.
//!
//! Invariants (what `fuzz/fuzz_targets/front_head.rs` asserts on any head):
//! the origin head parses as exactly one request with one Host, the checked
//! one; no hop-by-hop field survives, nor a field the browser's `Connection`
//! named; `Content-Length` is the body's length or absent; our `Via` entry is
//! the last field.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode, Version};

use crate::route::{HostError, parse_host};
pub use crate::upstream::end_to_end;
use crate::upstream::list_items;

/// What [`check`] established about a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The Host value to forward: the request's, the absolute-form target's
    /// authority, or the original destination's address (HTTP/1.0 without
    /// Host).
    pub host_value: HeaderValue,
    /// Its host, lower-case, IPv6 without brackets: the Host verifier's, the
    /// cache key's and the prefetch queue's authority.
    pub host: String,
    /// Its port: the named one, else 80.
    pub port: u16,
    /// The target to send on: origin-form, or `*` for OPTIONS.
    pub target: String,
}

/// Why a request head is answered by the gateway itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadRefusal {
    /// The request target is longer than `http.max_uri_bytes`.
    #[error("request target too long")]
    UriTooLong,
    /// The request's `Via` names this gateway: forwarding it would bring it
    /// back here again.
    #[error("the request has already passed through this gateway")]
    Loop,
    /// `CONNECT`: an intercepted connection is not a proxy's.
    #[error("CONNECT is not served on intercepted connections")]
    Connect,
    /// `*` as the target of another method than OPTIONS (RFC 9112, section
    /// 3.2.4).
    #[error("an asterisk-form request target is only for OPTIONS")]
    AsteriskForm,
    /// The Host (or the target's authority) is missing, repeated or invalid.
    #[error(transparent)]
    Host(#[from] HostError),
}

impl HeadRefusal {
    /// The status the browser gets.
    pub fn status(self) -> StatusCode {
        match self {
            Self::UriTooLong => StatusCode::URI_TOO_LONG,
            Self::Loop => StatusCode::LOOP_DETECTED,
            Self::Connect => StatusCode::METHOD_NOT_ALLOWED,
            Self::AsteriskForm | Self::Host(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Checks a parsed request head that reached the gateway on a connection to
/// `dst`, whose gateway's `Via` received-by is `via_received_by` (see the
/// module docs for the order of the checks).
pub fn check(
    parts: &http::request::Parts,
    dst: SocketAddr,
    max_uri_bytes: usize,
    via_received_by: &str,
) -> Result<Checked, HeadRefusal> {
    if target_len(&parts.uri) > max_uri_bytes {
        return Err(HeadRefusal::UriTooLong);
    }
    if names_received_by(&parts.headers, via_received_by) {
        return Err(HeadRefusal::Loop);
    }
    if parts.method == Method::CONNECT {
        return Err(HeadRefusal::Connect);
    }
    let target = origin_form(&parts.uri);
    if target == "*" && parts.method != Method::OPTIONS {
        return Err(HeadRefusal::AsteriskForm);
    }
    let (host_value, host, port) = request_host(parts, dst)?;
    Ok(Checked {
        host_value,
        host,
        port,
        target,
    })
}

/// The target as the origin gets it: an absolute-form target's path and
/// query, with the `/` an empty path stands for (RFC 9112, section 3.2.1:
/// `http://h?q` is `/?q` there, never `?q`).
fn origin_form(uri: &http::Uri) -> String {
    match uri.path_and_query().map(|p| p.as_str()) {
        Some(query) if query.starts_with('?') => format!("/{query}"),
        Some(target) => target.to_owned(),
        None => "/".to_owned(),
    }
}

/// The Host header value to forward, and the parsed host and port.
///
/// An absolute-form target's authority overrides the Host header (RFC 9112,
/// section 3.2.2). An HTTP/1.0 request without Host is taken as addressed to the
/// original destination.
fn request_host(
    parts: &http::request::Parts,
    dst: SocketAddr,
) -> Result<(HeaderValue, String, u16), HostError> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let value = if let Some(authority) = parts.uri.authority() {
        // RFC 9112, section 3.2: more than one Host field is a 400 whatever
        // the target's form; an absolute-form target's authority replaces
        // the one Host field there may be (section 3.2.2).
        if parts.uri.scheme().is_none() {
            return Err(HostError::AuthorityForm);
        }
        if hosts.nth(1).is_some() {
            return Err(HostError::Repeated);
        }
        HeaderValue::from_str(authority.as_str()).map_err(|_| HostError::Invalid)?
    } else {
        match (hosts.next(), hosts.next()) {
            (Some(host), None) => host.clone(),
            (Some(_), Some(_)) => return Err(HostError::Repeated),
            (None, _) if parts.version == Version::HTTP_10 => {
                let literal = match dst {
                    SocketAddr::V4(v4) => v4.ip().to_string(),
                    SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
                };
                HeaderValue::from_str(&literal).map_err(|_| HostError::Invalid)?
            }
            (None, _) => return Err(HostError::Missing),
        }
    };
    let (host, port) = parse_host(value.as_bytes())?;
    Ok((value, host, port))
}

/// The request target's length as the browser sent it.
fn target_len(uri: &http::Uri) -> usize {
    let path = uri.path_and_query().map_or(0, |p| p.as_str().len());
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    let scheme = uri.scheme_str().map_or(0, |s| s.len() + 3);
    scheme + authority + path
}

/// The `Via` entry for a gateway received-by `received_by`.
pub fn via_value(received_by: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("1.1 {received_by}"))
        .expect("the pseudonym and a hex id are visible ASCII")
}

/// Whether any `Via` entry in `headers` was received by `received_by` (RFC 9110,
/// section 7.6.3: `received-protocol RWS received-by [RWS comment]`, in a
/// comma-separated list). Comments may hold commas; they cannot make an entry's
/// second word equal our pseudonym, which contains none. Values are read as
/// bytes: obs-text in another entry of the same field must not hide a loop.
fn names_received_by(headers: &HeaderMap, received_by: &str) -> bool {
    headers
        .get_all(header::VIA)
        .iter()
        .flat_map(|v| list_items(v.as_bytes()))
        .any(|entry| {
            entry
                .split(u8::is_ascii_whitespace)
                .filter(|word| !word.is_empty())
                .nth(1)
                .is_some_and(|by| by.eq_ignore_ascii_case(received_by.as_bytes()))
        })
}

#[cfg(test)]
mod tests {
    use http::Request;

    use super::*;

    #[test]
    fn hop_by_hop_fields_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        let h = end_to_end(h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key(header::ACCEPT));
    }

    #[test]
    fn only_this_gateways_via_entry_is_a_loop() {
        let ours = "sctp-gateway-0123abcd";
        let via = |values: &[&'static str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::VIA, HeaderValue::from_static(v));
            }
            h
        };
        assert!(!names_received_by(&via(&[]), ours));
        assert!(!names_received_by(
            &via(&["1.1 sctp-gateway-99999999"]),
            ours
        ));
        assert!(!names_received_by(
            &via(&["1.0 fred, 1.1 p.example (sctp-gateway-0123abcd)"]),
            ours
        ));
        assert!(names_received_by(
            &via(&["1.1 sctp-gateway-0123abcd"]),
            ours
        ));
        assert!(names_received_by(
            &via(&["1.0 fred, 1.1 SCTP-Gateway-0123ABCD (x, y)"]),
            ours
        ));
        assert!(names_received_by(
            &via(&["1.0 fred", "HTTP/1.1  sctp-gateway-0123abcd"]),
            ours
        ));
    }

    /// Found while writing the `front_head` fuzz target, whose checks read
    /// these fields as bytes: a byte past ASCII anywhere in a `Connection` or
    /// `Via` field made the whole value unreadable, so the fields it named
    /// were forwarded and a loop went unseen.
    #[test]
    fn obs_text_hides_neither_connection_names_nor_a_via_loop() {
        let value = |bytes: &[u8]| HeaderValue::from_bytes(bytes).expect("obs-text is a value");
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, value(b"x-secret, caf\xe9"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        let h = end_to_end(h);
        assert_eq!(h.keys().collect::<Vec<_>>(), [header::ACCEPT]);

        let mut h = HeaderMap::new();
        h.insert(
            header::VIA,
            value(b"1.0 caf\xe9, 1.1 sctp-gateway-0123abcd"),
        );
        assert!(names_received_by(&h, "sctp-gateway-0123abcd"));
    }

    /// `request` parsed as hyper does: httparse, then the `http` types.
    fn parts(request: &[u8]) -> http::request::Parts {
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut parsed = httparse::Request::new(&mut fields);
        assert!(parsed.parse(request).expect("a head").is_complete());
        let mut builder = Request::builder()
            .method(parsed.method.expect("method"))
            .uri(parsed.path.expect("target"));
        for field in parsed.headers.iter() {
            builder = builder.header(field.name, field.value);
        }
        builder.body(()).expect("request").into_parts().0
    }

    /// Found by the `front_head` fuzz target (on its seeds): `http://h?q`
    /// went to the origin as `GET ?q`, and `GET *` as it was.
    #[test]
    fn targets_sent_on_are_origin_form_or_asterisk_for_options() {
        let dst: SocketAddr = "203.0.113.10:80".parse().expect("literal");
        let check = |head: &[u8]| check(&parts(head), dst, 1024, "sctp-gateway-0123abcd");
        let target = |head: &[u8]| check(head).expect("served").target;
        assert_eq!(
            target(b"GET http://h.example?q=1 HTTP/1.1\r\n\r\n"),
            "/?q=1"
        );
        assert_eq!(target(b"GET http://h.example HTTP/1.1\r\n\r\n"), "/");
        assert_eq!(target(b"GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n"), "/a?b");
        assert_eq!(target(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), "*");
        let refusal = check(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n").expect_err("refused");
        assert_eq!(refusal, HeadRefusal::AsteriskForm);
        assert_eq!(refusal.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn absolute_form_authority_overrides_host() {
        let request = Request::builder()
            .uri("http://203.0.113.10:8080/x")
            .header(header::HOST, "elsewhere.example")
            .body(())
            .expect("request");
        let (parts, ()) = request.into_parts();
        let dst = "203.0.113.10:8080".parse().expect("literal");
        let (value, host, port) = request_host(&parts, dst).expect("host");
        assert_eq!(
            (value.as_bytes(), host.as_str(), port),
            (&b"203.0.113.10:8080"[..], "203.0.113.10", 8080)
        );
    }

    #[test]
    fn missing_and_repeated_hosts_are_refused() {
        let dst: SocketAddr = "[2001:db8::10]:80".parse().expect("literal");
        let (parts, ()) = Request::builder()
            .uri("/")
            .body(())
            .expect("request")
            .into_parts();
        assert_eq!(
            request_host(&parts, dst).expect_err("must fail"),
            HostError::Missing
        );

        let (parts, ()) = Request::builder()
            .uri("/")
            .version(Version::HTTP_10)
            .body(())
            .expect("request")
            .into_parts();
        let (_, host, port) = request_host(&parts, dst).expect("HTTP/1.0 without Host");
        assert_eq!((host.as_str(), port), ("2001:db8::10", 80));

        let (parts, ()) = Request::builder()
            .uri("/")
            .header(header::HOST, "a")
            .header(header::HOST, "b")
            .body(())
            .expect("request")
            .into_parts();
        assert_eq!(
            request_host(&parts, dst).expect_err("must fail"),
            HostError::Repeated
        );
    }
}
