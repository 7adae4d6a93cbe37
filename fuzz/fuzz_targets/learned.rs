//! Any sequence of requests through the origin's learned push manifest:
//! page loads, asks with any Host, target, Referer and `Sec-Fetch-Dest`,
//! pushes and lookups, at any times. It never panics, its bounds hold after
//! every step (pages, entries per page, bytes charged), and what it returns
//! is well-formed (a plain origin-form target within the length limit, a
//! confidence between the threshold and 1).
//!
//! Input: lines `<op><flags> <host> <target> <referer> <dest>` (missing
//! fields are empty). `op`: `L` a load, `A` an ask, `P` a push, anything
//! else a lookup; `flags` (one byte) advances the clock by its value times
//! 50 ms and picks the status, credentials, cacheability and method.
#![no_main]

use std::time::{Duration, Instant};

use http::StatusCode;
use libfuzzer_sys::fuzz_target;
use origin::closure::PageScheme;
use origin::learned::{LearnedConfig, MAX_TARGET_BYTES, Manifest, RequestFacts};

const STATUSES: [u16; 8] = [200, 200, 200, 200, 204, 206, 304, 404];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = LearnedConfig {
        learn_max_pages: 4,
        learn_max_entries: 4,
        learn_memory_loads: 4,
        learn_forget_loads: 3,
        learn_forget_after_ms: Duration::from_secs(20),
        learn_max_bytes: 64 << 10,
        ..LearnedConfig::default()
    };
    assert_eq!(config.validate(), Ok(()));
    let mut manifest = Manifest::new(config.clone());
    let mut now = Instant::now();
    for line in text.lines() {
        let mut chars = line.chars();
        let (Some(op), Some(flags)) = (chars.next(), chars.next()) else {
            continue;
        };
        let flags = u32::from(flags) & 0xff;
        now += Duration::from_millis(u64::from(flags) * 50);
        let mut fields = chars.as_str().split(' ').skip(1);
        let mut field = || fields.next().unwrap_or_default();
        let (host, target, referer, dest) = (field(), field(), field(), field());
        let scheme = if flags & 1 == 0 {
            PageScheme::Http
        } else {
            PageScheme::Https
        };
        let facts = RequestFacts {
            scheme,
            host,
            target,
            get: flags & 2 == 0,
            status: StatusCode::from_u16(STATUSES[(flags >> 2) as usize & 7]).expect("a status"),
            referer: (!referer.is_empty()).then_some(referer),
            fetch_dest: (!dest.is_empty()).then_some(dest),
            credentials: flags & 0x20 != 0,
            html: op == 'L',
            shared_cacheable: flags & 0x40 == 0,
        };
        match op {
            'L' | 'A' => manifest.handle_request(&facts, now),
            'P' => manifest.handle_pushed(scheme, host, target, referer),
            _ => {
                let got = manifest.learned(scheme, host, target, now);
                assert!(got.len() <= config.learn_max_entries);
                for entry in got {
                    assert!(entry.target.starts_with('/') && !entry.target.starts_with("//"));
                    assert!(entry.target.len() <= MAX_TARGET_BYTES);
                    assert!(entry.target.bytes().all(|b| b.is_ascii_graphic()));
                    assert!(
                        entry.confidence >= config.learn_min_confidence && entry.confidence <= 1.0,
                        "{entry:?}"
                    );
                }
            }
        }
        let stats = manifest.stats();
        assert!(stats.pages <= config.learn_max_pages, "{stats:?}");
        assert!(stats.bytes <= config.learn_max_bytes, "{stats:?}");
        assert!(
            stats.entries <= stats.pages * config.learn_max_entries,
            "{stats:?}"
        );
    }
});
