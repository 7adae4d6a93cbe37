//! What a hostile gateway can make the learned push manifest hold, counted
//! by a global allocator that tracks this thread's live bytes: 100,000
//! distinct URLs as asks, a new page on a new host every 40, the pages and
//! one ask in ten at the longest the manifest keeps. The heap it holds stays within `learn_max_bytes`, and the
//! bytes it charges itself (`ManifestStats::bytes`) are not below what it
//! holds by more than the allocator's rounding.

use std::time::{Duration, Instant};

use http::StatusCode;
use origin::closure::PageScheme;
use origin::learned::{LearnedConfig, MAX_HOST_BYTES, MAX_TARGET_BYTES, Manifest, RequestFacts};

#[path = "../../sctp/tests/support/counting.rs"]
mod counting;

use counting::{Counting, live, peak, reset_peak};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn facts<'a>(host: &'a str, target: &'a str, referer: Option<&'a str>) -> RequestFacts<'a> {
    RequestFacts {
        scheme: PageScheme::Http,
        host,
        target,
        get: true,
        status: StatusCode::OK,
        referer,
        fetch_dest: Some(if referer.is_some() {
            "empty"
        } else {
            "document"
        }),
        credentials: false,
        html: referer.is_none(),
        shared_cacheable: true,
    }
}

#[test]
fn hostile_urls_stay_within_the_byte_budget() {
    let config = LearnedConfig {
        learn_max_pages: 256,
        learn_max_bytes: 1 << 20,
        ..LearnedConfig::default()
    };
    assert_eq!(config.validate(), Ok(()));
    let long = "x".repeat(MAX_TARGET_BYTES);
    let t0 = Instant::now();
    let before = reset_peak();
    let mut manifest = Manifest::new(config.clone());
    let (mut host, mut page) = (String::new(), String::new());
    for i in 0..100_000u64 {
        let now = t0 + Duration::from_millis(i);
        if i % 40 == 0 {
            host = format!("h{i}.{}", &long[..MAX_HOST_BYTES - 16]);
            page = format!("/{i}/{}", &long[..200]);
            manifest.handle_request(&facts(&host, &page, None), now);
        }
        let referer = format!("http://{host}{page}");
        // One in ten at the longest kept, the rest 200 bytes (URL parsing
        // is slow in a debug build).
        let len = if i % 10 == 0 {
            MAX_TARGET_BYTES - 16
        } else {
            200
        };
        let target = format!("/{i}/{}", &long[..len]);
        manifest.handle_request(&facts(&host, &target, Some(&referer)), now);
    }
    let held = live() - before;
    let most = peak() - before;
    let stats = manifest.stats();
    drop((manifest, host, page));
    // Before anything is printed: the harness keeps a test's output on the heap.
    let left = live() - before;
    let charged = isize::try_from(stats.bytes).expect("fits");
    let budget = isize::try_from(config.learn_max_bytes).expect("fits");
    eprintln!("held {held} B, charged {charged} B, peak {most} B, {stats:?}");
    assert!(stats.pages > 1 && stats.entries > 100, "{stats:?}");
    assert!(held <= budget, "held {held} of a budget of {budget}");
    assert!(
        held <= charged + charged / 8,
        "held {held}, charged {charged}"
    );
    assert!(left <= 0, "all of it freed: {left} B left");
}
