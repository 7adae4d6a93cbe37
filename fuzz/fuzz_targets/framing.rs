//! The framing watch ahead of hyper (`gateway::front::framing`): any bytes,
//! split into any pieces as a socket would deliver them, never panic the core,
//! and what it lets through keeps its promises:
//!
//! - it settles at most what it was given, and what it holds back stays
//!   bounded (a head up to the head limit, a chunk-size line up to its own);
//! - once it stops watching, nothing is held back;
//! - every byte it lets through is the byte it was given, except a request
//!   line's version digits, which it may rewrite to other digits;
//! - a "body too large" finding names more than the body limit.
//!
//! Input: the first byte seeds the piece sizes, the rest is the connection's
//! byte stream.
#![no_main]

use gateway::front::framing::{Finding, MAX_CHUNK_LINE_BYTES, RequestFraming};
use libfuzzer_sys::fuzz_target;

/// Small limits, so that the fuzzer reaches both sides of each.
const MAX_HEAD_BYTES: usize = 1024;
const MAX_HEAD_FIELDS: usize = 16;
const MAX_BODY_BYTES: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let mut core = RequestFraming::new(MAX_HEAD_BYTES, MAX_HEAD_FIELDS, MAX_BODY_BYTES);
    let mut held: Vec<u8> = Vec::new();
    let mut passed: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut size = usize::from(seed % 64) + 1;
    while fed < stream.len() {
        let end = (fed + size).min(stream.len());
        held.extend_from_slice(&stream[fed..end]);
        fed = end;
        size = size * 7 % 67 + 1;

        let settled = core.handle_input(&mut held);
        assert!(settled <= held.len(), "settled {settled} of {}", held.len());
        passed.extend(held.drain(..settled));
        assert!(
            held.len() <= MAX_HEAD_BYTES.max(MAX_CHUNK_LINE_BYTES) + 2,
            "{} bytes held back",
            held.len()
        );
        if core.is_off() {
            assert!(held.is_empty(), "off, yet {} bytes held back", held.len());
        }
    }
    assert_eq!(passed.len() + held.len(), stream.len());
    for (i, (&out, &given)) in passed.iter().zip(stream).enumerate() {
        assert!(
            out == given || (out.is_ascii_digit() && given.is_ascii_digit()),
            "byte {i} changed from {given:#04x} to {out:#04x}"
        );
    }
    if let Some(noted) = core.finding()
        && let Finding::BodyTooLarge { declared } = noted.finding
    {
        assert!(declared > MAX_BODY_BYTES, "413 for {declared} bytes");
    }
});
