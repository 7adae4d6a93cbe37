//! The `http-semantics` crate, both daemons' HTTP rules: any bytes, up to a
//! whole datagram's worth, never panic it, and what it accepts keeps its
//! promises. Every input is read three ways.
//!
//! As a request head (`RequestHead::parse`, the origin's REQUEST parser):
//!
//! - the version is HTTP/1.0 or HTTP/1.1, and an HTTP/1.1 head has exactly one
//!   Host (an HTTP/1.0 head at most one);
//! - the target is at most `MAX_TARGET` bytes, and `path()`, `query()` split it
//!   at its first `?` without losing a byte;
//! - there are at most `MAX_HEADERS` field lines, and the head written back
//!   in order parses again to the same head;
//! - written again by `write_request_head` (the gateway's writer), it parses
//!   to the same method, target and fields, with the Host and Content-Length
//!   given and `Via` last.
//!
//! As a response head (`parse_response_head`, the gateway's RESPONSE_HEAD
//! parser):
//!
//! - the status is a final one (200 to 999), never interim, and there are at
//!   most `MAX_RESPONSE_HEADERS` fields;
//! - rendered again by `ResponseHead::render` (the origin's writer), it parses
//!   to the same status, version and fields.
//!
//! As a conditional request, when it parses as a request head, against the
//! validators its own `ETag` and `Last-Modified` fields name (so that the
//! fuzzer can make them match):
//!
//! - `not_modified` (the cache's 304) is what `evaluate_preconditions` (the
//!   origin's) says for a GET without If-Match and If-Unmodified-Since, and
//!   that evaluation never fails;
//! - a parsed entity-tag list holds quoted tags that parse alone again;
//! - If-Range holds only when it is absent or names the validators exactly;
//! - a single range resolves inside the representation, for any length.
//!
//! Input: the bytes of one head. The corpora of the targets it replaced
//! (`origin_request_head`, `origin_response_head`) are valid inputs.
#![no_main]

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Version};
use http_semantics::conditional::{
    self, EntityTag, EtagList, Precondition, Validators, parse_etag_list,
};
use http_semantics::range::{self, RangeRequest};
use http_semantics::{
    MAX_HEADERS, MAX_RESPONSE_HEADERS, MAX_TARGET, RequestHead, ResponseHead, parse_response_head,
    write_request_head,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(head) = RequestHead::parse(data) {
        request_head(&head);
        written_again(&head);
        conditions(&head.headers);
    }
    response_head(data);
});

fn request_head(head: &RequestHead) {
    let hosts = head.header_count("host");
    match head.version {
        Version::HTTP_11 => assert_eq!(hosts, 1, "HTTP/1.1 head with {hosts} Host fields"),
        Version::HTTP_10 => assert!(hosts <= 1, "HTTP/1.0 head with {hosts} Host fields"),
        other => panic!("accepted version {other:?}"),
    }
    assert!(
        head.target.len() <= MAX_TARGET,
        "target of {}",
        head.target.len()
    );
    let rejoined = match head.query() {
        Some(query) => format!("{}?{query}", head.path()),
        None => head.path().to_owned(),
    };
    assert_eq!(rejoined, head.target);
    assert!(head.headers.len() <= MAX_HEADERS);

    let minor = if head.version == Version::HTTP_10 {
        0
    } else {
        1
    };
    let mut again = format!("{} {} HTTP/1.{minor}\r\n", head.method, head.target).into_bytes();
    for (name, value) in &head.headers {
        again.extend_from_slice(name.as_str().as_bytes());
        again.extend_from_slice(b": ");
        again.extend_from_slice(value.as_bytes());
        again.extend_from_slice(b"\r\n");
    }
    again.extend_from_slice(b"\r\n");
    let reparsed = RequestHead::parse(&again).expect("a head written back from an accepted one");
    assert_eq!(reparsed.method, head.method);
    assert_eq!(reparsed.target, head.target);
    assert_eq!(reparsed.version, head.version);
    assert_eq!(reparsed.headers, head.headers);
}

/// The gateway's writer on what the origin's parser accepted: the origin
/// accepts it back.
fn written_again(head: &RequestHead) {
    // Room for the Host, Content-Length and Via the writer adds.
    if head.headers.len() + 3 > MAX_HEADERS {
        return;
    }
    let host = HeaderValue::from_static("h.example");
    let via = HeaderValue::from_static("1.1 sctp-gateway-0123abcd");
    for body_len in [0, 7] {
        let bytes = write_request_head(
            &head.method,
            &head.target,
            &host,
            &head.headers,
            body_len,
            &via,
        );
        let sent = RequestHead::parse(&bytes).expect("the origin parses what the gateway writes");
        assert_eq!(sent.method, head.method);
        assert_eq!(sent.target, head.target);
        assert_eq!(sent.version, Version::HTTP_11);
        assert_eq!(sent.headers.get(header::HOST), Some(&host));
        assert_eq!(sent.header_count("host"), 1);
        let length = sent.headers.get(header::CONTENT_LENGTH);
        if body_len > 0 {
            assert_eq!(length, Some(&HeaderValue::from(body_len)));
        } else {
            assert_eq!(length, None);
        }
        assert_eq!(sent.headers.get_all(header::VIA).iter().last(), Some(&via));
        for (name, value) in &head.headers {
            if name == header::HOST || name == header::CONTENT_LENGTH || name == header::VIA {
                continue;
            }
            assert!(
                sent.headers.get_all(name).iter().any(|v| v == value),
                "{name} lost"
            );
        }
    }
}

fn response_head(data: &[u8]) {
    let Ok(parsed) = parse_response_head(data) else {
        return;
    };
    let parts = parsed.parts;
    assert!(!parts.status.is_informational(), "interim {}", parts.status);
    assert!(parts.status.as_u16() >= 200, "status {}", parts.status);
    assert!(parts.headers.len() <= MAX_RESPONSE_HEADERS);
    if let Some(reason) = &parsed.reason {
        assert!(!reason.is_empty());
        assert_ne!(Some(reason.as_str()), parts.status.canonical_reason());
    }

    let mut head = ResponseHead::new(parts.status);
    for (name, value) in &parts.headers {
        head.push(name.clone(), value.clone());
    }
    let rendered = head.render();
    let again = parse_response_head(&rendered).expect("a head rendered from an accepted one");
    assert_eq!(again.parts.status, parts.status);
    assert_eq!(again.parts.version, Version::HTTP_11);
    assert_eq!(again.parts.headers, parts.headers);
    assert_eq!(
        again.reason, None,
        "a rendered head has the canonical reason"
    );
}

fn conditions(request: &HeaderMap) {
    let validators = Validators {
        etag: request
            .get(header::ETAG)
            .and_then(|v| EntityTag::parse(v.as_bytes())),
        last_modified: request
            .get(header::LAST_MODIFIED)
            .and_then(conditional::http_date_secs),
    };
    for value in request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .chain(request.get_all(header::IF_MATCH))
    {
        if let Some(EtagList::Tags(tags)) = parse_etag_list(value.as_bytes()) {
            for tag in tags {
                let opaque = tag.opaque();
                assert!(opaque.len() >= 2 && opaque.starts_with(b"\"") && opaque.ends_with(b"\""));
                let alone = EntityTag::parse(opaque).expect("a listed tag parses alone");
                assert!(alone.weak_eq(&tag));
                assert_eq!(alone.strong_eq(&tag), !tag.is_weak());
            }
        }
    }

    let mut unconditional = request.clone();
    unconditional.remove(header::IF_MATCH);
    unconditional.remove(header::IF_UNMODIFIED_SINCE);
    let origin = conditional::evaluate_preconditions(&Method::GET, &unconditional, &validators);
    assert_ne!(
        origin,
        Precondition::Failed,
        "only If-Match and If-Unmodified-Since fail a GET"
    );
    assert_eq!(
        conditional::not_modified(request, &validators),
        origin == Precondition::NotModified,
        "the cache's 304 and the origin's disagree"
    );
    let _ = conditional::evaluate_preconditions(&Method::PUT, request, &validators);

    if conditional::if_range_holds(request, &validators)
        && let Some(value) = request.get(header::IF_RANGE)
    {
        let by_tag = EntityTag::parse(value.as_bytes())
            .zip(validators.etag)
            .is_some_and(|(theirs, ours)| theirs.strong_eq(&ours));
        let by_date = conditional::http_date_secs(value).is_some()
            && conditional::http_date_secs(value) == validators.last_modified;
        assert!(by_tag || by_date, "If-Range held on {value:?}");
    }

    for value in request.get_all(header::RANGE) {
        let value = value.as_bytes();
        let parsed = range::parse_range(value);
        for len in [0u64, 1, 13, u64::MAX] {
            let single = range::parse_single_range(value, len);
            match (parsed, single) {
                (Some(RangeRequest::Single(spec)), Some(Ok((start, end)))) => {
                    assert!(
                        start < end && end <= len,
                        "{spec:?} in {len}: {start}..{end}"
                    );
                }
                (Some(RangeRequest::Single(_)), Some(Err(range::Unsatisfiable))) => {}
                (Some(RangeRequest::Multiple(n)), None) => assert!(n >= 2),
                (None, None) => {}
                other => panic!("parse_range and parse_single_range disagree: {other:?}"),
            }
        }
    }
}
