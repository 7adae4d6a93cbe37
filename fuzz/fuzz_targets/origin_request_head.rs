//! The origin's request-head parser (`origin::http::RequestHead::parse`): any
//! bytes, up to a whole datagram's worth, never panic it, and what it accepts
//! keeps its promises:
//!
//! - the version is HTTP/1.0 or HTTP/1.1, and an HTTP/1.1 head has exactly one
//!   Host (an HTTP/1.0 head at most one);
//! - the target is at most `MAX_TARGET` bytes, and `path()`, `query()` split it
//!   at its first `?` without losing a byte;
//! - there are at most `MAX_HEADERS` field lines, and the head accepted, with
//!   its fields written back in order, parses again to the same head.
//!
//! Input: the bytes of one request head.
#![no_main]

use http::Version;
use libfuzzer_sys::fuzz_target;
use origin::http::{MAX_HEADERS, MAX_TARGET, RequestHead};

fuzz_target!(|data: &[u8]| {
    let Ok(head) = RequestHead::parse(data) else {
        return;
    };
    let hosts = head.header_count("host");
    match head.version {
        Version::HTTP_11 => assert_eq!(hosts, 1, "HTTP/1.1 head with {hosts} Host fields"),
        Version::HTTP_10 => assert!(hosts <= 1, "HTTP/1.0 head with {hosts} Host fields"),
        other => panic!("accepted version {other:?}"),
    }
    assert!(head.target.len() <= MAX_TARGET, "target of {}", head.target.len());
    let rejoined = match head.query() {
        Some(query) => format!("{}?{query}", head.path()),
        None => head.path().to_owned(),
    };
    assert_eq!(rejoined, head.target);
    assert!(head.headers.len() <= MAX_HEADERS);

    let minor = if head.version == Version::HTTP_10 { 0 } else { 1 };
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
});
