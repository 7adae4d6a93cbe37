//! Any header lines through the cache's RFC 9111 policy: Cache-Control,
//! Expires, Date, Age, Vary, validators and ranges are parsed and every
//! decision is taken without panicking, and the decisions keep their
//! invariants (a response the policy refuses to store never comes back as
//! storable; a lifetime is never negative by construction).
//!
//! Input: header lines `name: value`, separated by `\n`; a line `--` ends the
//! request's fields and starts the stored response's. The first byte picks
//! the status code and the method.
#![no_main]

use std::time::{Duration, SystemTime};

use gateway::cache::policy::{
    self, CacheControl, StoredResponse, decide_lookup, freshness_lifetime, storable,
};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use libfuzzer_sys::fuzz_target;

const STATUSES: [u16; 8] = [200, 203, 204, 206, 301, 404, 500, 599];

fn headers(text: &str) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) else {
            continue;
        };
        map.append(name, value);
    }
    map
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let (request, response) = text.split_once("\n--\n").unwrap_or((&text, ""));
    let (request, response) = (headers(request), headers(response));
    let status = StatusCode::from_u16(STATUSES[usize::from(first % 8)]).expect("valid status");
    let method = if first & 0x80 == 0 {
        Method::GET
    } else {
        Method::HEAD
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);

    let _ = CacheControl::parse(&response);
    let _ = CacheControl::parse_request(&request);
    let _ = policy::unkeyed_input(&request);
    let (lifetime, _heuristic) = freshness_lifetime(status, &response, now);
    let _ = lifetime.as_secs();
    let stored = StoredResponse {
        status,
        headers: policy::storable_headers(&response),
        request_time: now - Duration::from_secs(u64::from(first)),
        response_time: now,
        body_len: u64::from(first) * 1000,
    };
    let _ = policy::current_age(&stored, now + Duration::from_secs(10));
    let _ = decide_lookup(&method, &request, Some(&stored), now);
    let _ = decide_lookup(&method, &request, None, now);
    if let Some(names) = policy::vary_names(&response) {
        let _ = policy::secondary_key(&names, &request);
    }
    let _ = policy::conditional_headers(&stored);
    let _ = policy::not_modified_for(&request, &stored.headers);
    if let Some(range) = request.get(http::header::RANGE) {
        let _ = http_semantics::range::parse_single_range(range.as_bytes(), stored.body_len);
    }
    if storable(&method, &request, status, &response).is_ok() {
        assert_eq!(method, Method::GET, "only GET responses are stored");
        assert!(!response.contains_key(http::header::SET_COOKIE));
        assert!(policy::unkeyed_input(&request).is_none());
    }
});
