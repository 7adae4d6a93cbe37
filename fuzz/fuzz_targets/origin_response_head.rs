//! The gateway's parser of the origin's response heads
//! (`gateway::origin_link::parse_response_head`): any bytes, up to a whole
//! RESPONSE_HEAD message, never panic it, and what it accepts keeps its
//! promises:
//!
//! - the status is a final one (200 to 999), never interim;
//! - there are at most `MAX_RESPONSE_HEADERS` fields;
//! - the head accepted, written back as HTTP/1.x with its fields in order,
//!   parses again to the same status, version and fields.
//!
//! Input: the bytes of one response head.
#![no_main]

use gateway::origin_link::{MAX_RESPONSE_HEADERS, parse_response_head};
use http::Version;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(parts) = parse_response_head(data) else {
        return;
    };
    assert!(!parts.status.is_informational(), "interim {}", parts.status);
    assert!(parts.status.as_u16() >= 200, "status {}", parts.status);
    assert!(parts.headers.len() <= MAX_RESPONSE_HEADERS);

    let minor = if parts.version == Version::HTTP_10 { 0 } else { 1 };
    let mut again = format!("HTTP/1.{minor} {} x\r\n", parts.status.as_str()).into_bytes();
    for (name, value) in &parts.headers {
        again.extend_from_slice(name.as_str().as_bytes());
        again.extend_from_slice(b": ");
        again.extend_from_slice(value.as_bytes());
        again.extend_from_slice(b"\r\n");
    }
    again.extend_from_slice(b"\r\n");
    let reparsed = parse_response_head(&again).expect("a head written back from an accepted one");
    assert_eq!(reparsed.status, parts.status);
    assert_eq!(reparsed.version, parts.version);
    assert_eq!(reparsed.headers, parts.headers);
});
