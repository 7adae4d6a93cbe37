//! A browser's request head through the front's own checks and rewriting
//! (`gateway::front::head`): any bytes that parse as a request head, turned
//! into `http::request::Parts` as hyper does, never panic, and what is
//! forwarded keeps its promises:
//!
//! - CONNECT is always refused, and so is a request whose `Via` names this
//!   gateway (508), unless its target is already too long (414);
//! - the Host forwarded is the absolute-form target's authority, else the one
//!   Host field, else (HTTP/1.0 only) the original destination's address;
//! - the head sent to the origin parses completely as one HTTP/1.1 request
//!   with the same method, an origin-form target equal to the request's path
//!   and query (or `*` for OPTIONS), exactly one Host (the checked one), no
//!   hop-by-hop field and no field the browser's `Connection` named,
//!   `Content-Length` only as the body's length, and this gateway's `Via`
//!   entry as the last field; the origin's own parser
//!   (`http_semantics::RequestHead::parse`) accepts it with the same method
//!   and target.
//!
//! Input: the bytes of a request head (what follows it is ignored). Each head
//! is checked as arriving at an IPv4 and at an IPv6 original destination.
#![no_main]

use std::net::SocketAddr;

use bytes::Bytes;
use gateway::front::head::{self, Checked, HeadRefusal};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri, Version};
use libfuzzer_sys::fuzz_target;

/// Small, so that the fuzzer reaches both sides of it.
const MAX_URI_BYTES: usize = 512;
/// hyper's own limit on a request target (`proto::h1::role::MAX_URI_LEN`).
const HYPER_MAX_URI_LEN: usize = u16::MAX as usize - 1;
/// Header fields parsed at most (hyper's default is 100).
const MAX_FIELDS: usize = 64;
/// This gateway's `Via` received-by, as `Front::new` makes it.
const RECEIVED_BY: &str = "sctp-gateway-0123abcd";
/// The fields that never reach an origin (RFC 9110, section 7.6.1, and
/// `Expect`, answered by the gateway).
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// A request head as hyper hands it to the front, and the length of the body
/// the front would read for it.
struct Head {
    parts: http::request::Parts,
    body_len: usize,
}

fuzz_target!(|data: &[u8]| {
    let Some(Head { parts, body_len }) = parse_as_hyper_does(data) else {
        return;
    };
    let dsts: [SocketAddr; 2] = [
        "203.0.113.10:80".parse().expect("literal"),
        "[2001:db8::10]:8080".parse().expect("literal"),
    ];
    for dst in dsts {
        match head::check(&parts, dst, MAX_URI_BYTES, RECEIVED_BY) {
            Ok(checked) => forwarded(&parts, dst, &checked, body_len),
            Err(refusal) => refused(&parts, refusal),
        }
    }
});

/// What hyper 1.x does with a head (`proto::h1::role::Server::parse`): httparse,
/// then the method, the target as a `Uri`, the version and the fields, and
/// its framing checks (a head it refuses never reaches the front).
fn parse_as_hyper_does(data: &[u8]) -> Option<Head> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut request = httparse::Request::new(&mut fields);
    let httparse::Status::Complete(_) = request.parse(data).ok()? else {
        return None;
    };
    let target = request.path?;
    if target.len() > HYPER_MAX_URI_LEN {
        return None;
    }
    let method = Method::from_bytes(request.method?.as_bytes()).ok()?;
    let version = match request.version? {
        1 => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    let uri = Uri::from_maybe_shared(Bytes::copy_from_slice(target.as_bytes())).ok()?;
    let mut headers = HeaderMap::new();
    let (mut chunked, mut te, mut length) = (false, false, None);
    for field in request.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(field.value).ok()?;
        if name == header::TRANSFER_ENCODING {
            if version == Version::HTTP_10 {
                return None;
            }
            te = true;
            length = None;
            headers.remove(header::CONTENT_LENGTH);
            chunked = last_coding_is_chunked(field.value);
        } else if name == header::CONTENT_LENGTH {
            if te {
                continue;
            }
            let len = digits(field.value)?;
            match length {
                Some(previous) if previous != len => return None,
                Some(_) => continue,
                None => length = Some(len),
            }
        }
        headers.append(name, value);
    }
    if te && !chunked {
        return None;
    }
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    // A chunked body has whatever length its chunks give: any will do.
    let body_len = match length {
        _ if chunked => data.len() % 7,
        Some(len) => usize::try_from(len).ok()?,
        None => 0,
    };
    Some(Head { parts, body_len })
}

/// hyper's `headers::is_chunked_`: the last coding listed is `chunked`.
fn last_coding_is_chunked(value: &[u8]) -> bool {
    value
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// hyper's Content-Length: decimal digits only.
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The request target's length as hyper's `Uri` keeps it (a fragment, which
/// browsers never send, is dropped).
fn target_len(uri: &Uri) -> usize {
    let scheme = uri.scheme_str().map_or(0, |s| s.len() + "://".len());
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    scheme + authority + uri.path_and_query().map_or(0, |p| p.as_str().len())
}

/// Whether a `Via` entry's received-by is this gateway's, read from the raw
/// bytes: any field value, any comma-separated entry, its second word.
fn via_names_us(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::VIA)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .any(|entry| {
            entry
                .split(|b| b.is_ascii_whitespace())
                .filter(|word| !word.is_empty())
                .nth(1)
                .is_some_and(|by| by.eq_ignore_ascii_case(RECEIVED_BY.as_bytes()))
        })
}

/// The names the browser's `Connection` fields list, read from the raw bytes.
fn connection_names(headers: &HeaderMap) -> Vec<Vec<u8>> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(|name| name.trim_ascii().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// A refused head: refused for a reason it has.
fn refused(parts: &http::request::Parts, refusal: HeadRefusal) {
    let long = target_len(&parts.uri) > MAX_URI_BYTES;
    match refusal {
        HeadRefusal::UriTooLong => assert!(long, "414 for {}", parts.uri),
        HeadRefusal::Loop => assert!(!long && via_names_us(&parts.headers), "508 without a loop"),
        HeadRefusal::Connect => assert_eq!(parts.method, Method::CONNECT),
        HeadRefusal::AsteriskForm => {
            assert_ne!(parts.method, Method::OPTIONS);
            assert_eq!(parts.uri, "*");
        }
        HeadRefusal::Host(_) => assert_ne!(parts.method, Method::CONNECT),
    }
    assert!(refusal.status().is_client_error() || refusal.status().is_server_error());
}

/// A head the checks let through: what the origin would get.
fn forwarded(parts: &http::request::Parts, dst: SocketAddr, checked: &Checked, body_len: usize) {
    assert_ne!(parts.method, Method::CONNECT, "CONNECT let through");
    assert!(!via_names_us(&parts.headers), "a Via loop let through");
    assert!(target_len(&parts.uri) <= MAX_URI_BYTES);
    assert_eq!(checked.host_value, expected_host(parts, dst), "Host");

    let mut headers = head::end_to_end(parts.headers.clone());
    if body_len > 0 {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    }
    let via = head::via_value(RECEIVED_BY);
    let bytes = http_semantics::write_request_head(
        &parts.method,
        &checked.target,
        &checked.host_value,
        &headers,
        body_len,
        &via,
    );

    let mut fields = vec![httparse::EMPTY_HEADER; parts.headers.len() + 3];
    let mut sent = httparse::Request::new(&mut fields);
    let status = sent.parse(&bytes);
    assert_eq!(
        status,
        Ok(httparse::Status::Complete(bytes.len())),
        "origin head {:?}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(sent.method, Some(parts.method.as_str()));
    let origin =
        http_semantics::RequestHead::parse(&bytes).expect("the origin's parser accepts it");
    assert_eq!(origin.method, parts.method);
    assert_eq!(origin.target, checked.target);
    assert_eq!(sent.version, Some(1));
    assert_target(parts, sent.path.unwrap_or_default());
    assert_fields(parts, checked, body_len, sent.headers, &via);
}

/// The Host the request names: the absolute-form target's authority, else its
/// one Host field, else (HTTP/1.0) the original destination's address.
fn expected_host(parts: &http::request::Parts, dst: SocketAddr) -> HeaderValue {
    if let Some(authority) = parts.uri.authority() {
        assert!(parts.uri.scheme().is_some(), "authority-form let through");
        assert!(parts.headers.get_all(header::HOST).iter().count() <= 1);
        return HeaderValue::from_str(authority.as_str()).expect("an authority is a value");
    }
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(host), None) => host.clone(),
        (None, _) => {
            assert_eq!(parts.version, Version::HTTP_10, "no Host let through");
            let literal = match dst {
                SocketAddr::V4(v4) => v4.ip().to_string(),
                SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
            };
            HeaderValue::from_str(&literal).expect("an address is a value")
        }
        (Some(_), Some(_)) => panic!("two Host fields let through"),
    }
}

/// The origin's target is origin-form (`*` only for OPTIONS) and names what
/// the browser's did.
fn assert_target(parts: &http::request::Parts, target: &str) {
    if target == "*" {
        assert_eq!(
            parts.method,
            Method::OPTIONS,
            "asterisk-form on {}",
            parts.method
        );
    } else {
        assert!(
            target.starts_with('/'),
            "target {target:?} is not origin-form"
        );
    }
    let asked = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let expected = match asked.strip_prefix('?') {
        Some(_) => format!("/{asked}"),
        None if asked.is_empty() => "/".to_owned(),
        None => asked.to_owned(),
    };
    assert_eq!(target, expected, "target of {}", parts.uri);
}

/// The origin head's fields: one Host, the checked one; no hop-by-hop field
/// nor one `Connection` named; the body's length; our `Via` last.
fn assert_fields(
    parts: &http::request::Parts,
    checked: &Checked,
    body_len: usize,
    sent: &[httparse::Header<'_>],
    via: &HeaderValue,
) {
    let named = connection_names(&parts.headers);
    let hosts = values(sent, "host");
    assert_eq!(hosts, [checked.host_value.as_bytes()], "Host fields");
    let lengths = values(sent, "content-length");
    if body_len > 0 {
        assert_eq!(lengths, [body_len.to_string().as_bytes()], "Content-Length");
    } else {
        assert!(lengths.is_empty(), "Content-Length without a body");
    }
    for field in sent {
        let name = field.name.to_ascii_lowercase();
        assert!(
            !HOP_BY_HOP.contains(&name.as_str()),
            "hop-by-hop field {} forwarded",
            field.name
        );
        // The gateway writes these three itself.
        if !matches!(field.name, "host" | "content-length" | "via") {
            assert!(
                !named.contains(&name.into_bytes()),
                "{} forwarded, yet Connection named it",
                field.name
            );
        }
    }
    let last = sent.last().expect("at least Host and Via");
    assert_eq!(
        (last.name, last.value),
        ("via", via.as_bytes()),
        "last field"
    );
}

/// The values of the fields named `name`, in order.
fn values<'a>(fields: &[httparse::Header<'a>], name: &str) -> Vec<&'a [u8]> {
    fields
        .iter()
        .filter(|field| field.name.eq_ignore_ascii_case(name))
        .map(|field| field.value)
        .collect()
}
