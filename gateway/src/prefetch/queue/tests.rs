//! The queue driven through its calls, with a made-up clock: order,
//! promotion, joining, cancellation, limits, deduplication, depth, metrics.

use std::time::{Duration, Instant};

use super::*;

const ORIGIN: &str = "http://example.test";

struct Harness {
    queue: PrefetchQueue,
    t0: Instant,
    page: PageId,
}

fn config() -> PrefetchConfig {
    PrefetchConfig {
        max_concurrent_per_origin: 2,
        ..PrefetchConfig::default()
    }
}

fn url(path: &str) -> Url {
    let full = if path.starts_with("http") {
        path.to_owned()
    } else {
        format!("{ORIGIN}{path}")
    };
    Url::parse(&full).expect("test URL")
}

fn res(path: &str, kind: Kind) -> Resource {
    Resource {
        url: url(path),
        kind,
        render_blocking: false,
    }
}

impl Harness {
    fn new(config: &PrefetchConfig) -> Self {
        let t0 = Instant::now();
        let mut queue = PrefetchQueue::new(config);
        let page = queue.open_page(t0, url("/"), ConnectionId(1));
        Self { queue, t0, page }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn add(&mut self, ms: u64, path: &str, kind: Kind) {
        let now = self.at(ms);
        self.queue
            .handle_resource(now, self.page, res(path, kind), false);
    }

    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.queue.poll_action()).collect()
    }

    /// The actions as short strings: `start /a`, `promote /a`, `cancel /a`.
    fn drain(&mut self) -> Vec<String> {
        let actions = self.actions();
        actions.iter().map(|a| self.show(a)).collect()
    }

    fn show(&self, action: &Action) -> String {
        match action {
            Action::Start {
                fetch,
                resource,
                urgency,
                ..
            } => {
                assert_eq!(*urgency, PREFETCH_URGENCY);
                format!("start {} ({fetch})", resource.url.path())
            }
            Action::Promote { fetch, urgency } => {
                assert_eq!(*urgency, DEMAND_URGENCY);
                format!("promote {fetch}")
            }
            Action::Cancel { fetch } => format!("cancel {fetch}"),
        }
    }

    /// The id of the fetch of `path` the last `Start` named.
    fn started_id(actions: &[Action], path: &str) -> FetchId {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Start {
                    fetch, resource, ..
                } if resource.url.path() == path => Some(*fetch),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no start of {path} in {actions:?}"))
    }

    fn events(&self) -> Vec<TimelineEvent> {
        self.queue
            .timeline(self.page)
            .expect("page tracked")
            .iter()
            .map(|e| e.event.clone())
            .collect()
    }
}

#[test]
fn prefetches_start_in_document_order_within_the_origin_limit() {
    let mut h = Harness::new(&config());
    for path in ["/a.css", "/b.js", "/c.png", "/d.png"] {
        h.add(1, path, Kind::Image);
    }
    let first = h.actions();
    assert_eq!(
        first.iter().map(|a| h.show(a)).collect::<Vec<_>>(),
        ["start /a.css (fetch-1)", "start /b.js (fetch-2)"]
    );
    let a = Harness::started_id(&first, "/a.css");
    let b = Harness::started_id(&first, "/b.js");
    h.queue.handle_head(h.at(5), a, Some(10));
    h.queue.handle_data(h.at(6), a, 10);
    h.queue.handle_complete(h.at(7), a);
    assert_eq!(h.drain(), ["start /c.png (fetch-3)"]);
    h.queue.handle_failed(h.at(8), b);
    assert_eq!(h.drain(), ["start /d.png (fetch-4)"]);
    let stats = h.queue.stats();
    assert_eq!((stats.issued, stats.completed, stats.failed), (4, 1, 1));
}

#[test]
fn each_origin_has_its_own_limit_and_fifo() {
    let mut h = Harness::new(&PrefetchConfig {
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    h.add(1, "/a.png", Kind::Image);
    h.add(1, "http://cdn.test/x.js", Kind::Script);
    h.add(1, "/b.png", Kind::Image);
    h.add(1, "http://cdn.test/y.js", Kind::Script);
    h.add(1, "http://example.test:8080/z.png", Kind::Image);
    assert_eq!(
        h.drain(),
        [
            "start /a.png (fetch-1)",
            "start /x.js (fetch-2)",
            "start /z.png (fetch-5)"
        ]
    );
    h.queue.handle_complete(h.at(2), FetchId(2));
    assert_eq!(h.drain(), ["start /y.js (fetch-4)"]);
}

#[test]
fn a_browser_request_promotes_and_joins_a_prefetch_in_flight() {
    let mut h = Harness::new(&PrefetchConfig {
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    h.add(1, "/a.css", Kind::Style);
    h.add(1, "/b.png", Kind::Image);
    let started = h.actions();
    let a = Harness::started_id(&started, "/a.css");
    assert!(matches!(
        started[0],
        Action::Start {
            scan: Some(Scan::Css),
            ..
        }
    ));
    assert_eq!(
        h.queue.on_demand(h.at(3), &url("/a.css#x")),
        Demand::Join(a)
    );
    // Promoted, and no longer holding the origin's only slot: b starts.
    assert_eq!(h.drain(), ["promote fetch-1", "start /b.png (fetch-2)"]);
    // A second browser request joins too, without a second promotion.
    assert_eq!(h.queue.on_demand(h.at(4), &url("/a.css")), Demand::Join(a));
    assert_eq!(h.drain(), Vec::<String>::new());
    h.queue.handle_data(h.at(5), a, 300);
    h.queue.handle_complete(h.at(6), a);
    h.queue.page_abandoned(h.at(7), h.page);
    let stats = h.queue.stats();
    assert_eq!((stats.used, stats.wasted_bytes, stats.bytes), (1, 0, 300));
    assert!(h.drain().contains(&"cancel fetch-2".to_owned()));
}

#[test]
fn a_queued_prefetch_a_browser_asks_for_is_claimed_not_fetched_twice() {
    let mut h = Harness::new(&PrefetchConfig {
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    h.add(1, "/a.png", Kind::Image);
    h.add(1, "/b.css", Kind::Style);
    h.add(1, "/c.png", Kind::Image);
    assert_eq!(h.drain(), ["start /a.png (fetch-1)"]);
    assert_eq!(
        h.queue.on_demand(h.at(2), &url("/b.css")),
        Demand::Claimed {
            fetch: FetchId(2),
            scan: Some(Scan::Css)
        }
    );
    // The claimed one never starts; the next in order does.
    h.queue.handle_complete(h.at(3), FetchId(1));
    assert_eq!(h.drain(), ["start /c.png (fetch-3)"]);
    // Another request for it goes alone (the cache coalesces it).
    assert_eq!(h.queue.on_demand(h.at(4), &url("/b.css")), Demand::Alone);
    // What the browser's own fetch of it contains is followed as for a
    // prefetch, and counts against the page as usual.
    h.queue
        .handle_discovered(h.at(5), FetchId(2), res("/font.woff2", Kind::Font), false);
    h.queue.handle_complete(h.at(6), FetchId(3));
    assert_eq!(h.drain(), ["start /font.woff2 (fetch-4)"]);
    assert_eq!(h.queue.stats().claimed, 1);
    assert_eq!(h.queue.stats().issued, 3);
}

#[test]
fn a_completed_prefetch_requested_later_counts_as_used_and_the_rest_as_wasted() {
    let mut h = Harness::new(&config());
    h.add(1, "/a.png", Kind::Image);
    h.add(1, "/b.png", Kind::Image);
    for (fetch, bytes) in [(FetchId(1), 1000), (FetchId(2), 234)] {
        h.queue.handle_head(h.at(2), fetch, Some(bytes));
        h.queue.handle_data(h.at(3), fetch, bytes);
        h.queue.handle_complete(h.at(4), fetch);
    }
    assert_eq!(
        h.queue.on_demand(h.at(5), &url("/a.png")),
        Demand::Prefetched(FetchId(1))
    );
    assert_eq!(
        h.queue.on_demand(h.at(6), &url("/a.png")),
        Demand::Prefetched(FetchId(1))
    );
    assert_eq!(h.queue.on_demand(h.at(6), &url("/z.png")), Demand::Alone);
    h.queue.page_abandoned(h.at(9), h.page);
    let stats = h.queue.stats();
    assert_eq!(
        (stats.used, stats.bytes, stats.wasted_bytes),
        (1, 1234, 234)
    );
    assert_eq!(h.queue.fetches(), 0, "forgotten with the page");
    assert_eq!(h.queue.pages(), 0);
}

#[test]
fn abandoning_a_page_cancels_its_prefetches_and_drops_its_queue() {
    let mut h = Harness::new(&config());
    for path in ["/a.png", "/b.png", "/c.png", "/d.png"] {
        h.add(1, path, Kind::Image);
    }
    let first = h.drain();
    assert_eq!(first.len(), 2);
    h.queue.handle_data(h.at(2), FetchId(1), 100);
    h.queue.handle_data(h.at(2), FetchId(2), 50);
    h.queue.handle_complete(h.at(3), FetchId(2));
    assert_eq!(h.drain(), ["start /c.png (fetch-3)"]);
    h.queue.page_abandoned(h.at(4), h.page);
    // Cancelled in flight: a and c. Dropped: d. Nothing starts instead.
    assert_eq!(h.drain(), ["cancel fetch-1", "cancel fetch-3"]);
    let stats = h.queue.stats();
    assert_eq!((stats.cancelled, stats.dropped), (2, 1));
    assert_eq!(stats.wasted_bytes, 150);
    assert!(h.queue.waiting.is_empty(), "no stale queue entries");
    // Reports about cancelled fetches are ignored.
    h.queue.handle_data(h.at(5), FetchId(1), 100);
    h.queue.handle_complete(h.at(5), FetchId(1));
    assert_eq!(h.queue.stats().completed, 1);
    assert_eq!(h.queue.fetches(), 0);
}

#[test]
fn abandoning_keeps_what_another_page_or_a_browser_wants() {
    let mut h = Harness::new(&config());
    let other = h
        .queue
        .open_page(h.at(0), url("/other.html"), ConnectionId(2));
    h.add(1, "/shared.png", Kind::Image);
    h.add(1, "/wanted.png", Kind::Image);
    h.add(1, "/queued-shared.png", Kind::Image);
    assert_eq!(h.drain().len(), 2);
    for path in ["/shared.png", "/queued-shared.png"] {
        h.queue
            .handle_resource(h.at(2), other, res(path, Kind::Image), false);
    }
    assert_eq!(h.drain(), Vec::<String>::new(), "no second fetch");
    assert_eq!(
        h.queue.on_demand(h.at(3), &url("/wanted.png")),
        Demand::Join(FetchId(2))
    );
    assert_eq!(
        h.drain(),
        ["promote fetch-2", "start /queued-shared.png (fetch-3)"]
    );
    h.queue.page_abandoned(h.at(4), h.page);
    assert_eq!(
        h.drain(),
        Vec::<String>::new(),
        "everything is still wanted"
    );
    h.queue.handle_data(h.at(5), FetchId(2), 70);
    h.queue.handle_complete(h.at(5), FetchId(2));
    // The other page now owns the shared fetches; abandoning it cancels them.
    h.queue.page_abandoned(h.at(6), other);
    assert_eq!(h.drain(), ["cancel fetch-1", "cancel fetch-3"]);
    let stats = h.queue.stats();
    assert_eq!((stats.used, stats.wasted_bytes), (1, 0));
    assert_eq!(h.queue.fetches(), 0);
}

#[test]
fn closing_the_connection_abandons_only_pages_whose_html_was_cut() {
    let mut h = Harness::new(&config());
    let whole = h
        .queue
        .open_page(h.at(0), url("/whole.html"), ConnectionId(1));
    let elsewhere = h
        .queue
        .open_page(h.at(0), url("/else.html"), ConnectionId(9));
    h.queue.handle_html_end(h.at(1), whole);
    h.add(1, "/a.png", Kind::Image);
    h.queue.connection_closed(h.at(2), ConnectionId(1));
    assert!(h.queue.timeline(h.page).is_none(), "cut page abandoned");
    assert!(h.queue.timeline(whole).is_some());
    assert!(h.queue.timeline(elsewhere).is_some());
    assert_eq!(h.drain(), ["start /a.png (fetch-1)", "cancel fetch-1"]);
}

#[test]
fn the_count_limit_per_page() {
    let mut h = Harness::new(&PrefetchConfig {
        max_per_page: 3,
        ..config()
    });
    for path in ["/1.png", "/2.png", "/3.png", "/4.png", "/5.png"] {
        h.add(1, path, Kind::Image);
    }
    for fetch in [1, 2, 3] {
        h.queue.handle_complete(h.at(2), FetchId(fetch));
    }
    assert_eq!(h.drain().len(), 3);
    assert_eq!(h.queue.stats().skipped_limit, 2);
    assert!(
        h.events()
            .contains(&TimelineEvent::SkippedLimit(url("/5.png"), Limit::Count))
    );
}

#[test]
fn the_byte_limit_by_content_length_cancels_what_would_pass_it() {
    let mut h = Harness::new(&PrefetchConfig {
        max_bytes_per_page: 100_000,
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    for path in ["/a.jpg", "/b.jpg", "/c.jpg", "/d.jpg"] {
        h.add(1, path, Kind::Image);
    }
    assert_eq!(h.drain(), ["start /a.jpg (fetch-1)"]);
    h.queue.handle_head(h.at(2), FetchId(1), Some(80_000));
    h.queue.handle_data(h.at(3), FetchId(1), 80_000);
    h.queue.handle_complete(h.at(3), FetchId(1));
    assert_eq!(h.drain(), ["start /b.jpg (fetch-2)"]);
    h.queue.handle_head(h.at(4), FetchId(2), Some(50_000));
    // b would pass the limit: cancelled; c may still fit.
    assert_eq!(h.drain(), ["cancel fetch-2", "start /c.jpg (fetch-3)"]);
    h.queue.handle_head(h.at(5), FetchId(3), Some(20_000));
    h.queue.handle_data(h.at(5), FetchId(3), 20_000);
    h.queue.handle_complete(h.at(5), FetchId(3));
    // 100 000 bytes charged: d is dropped, and later finds are refused.
    assert_eq!(h.drain(), Vec::<String>::new());
    h.add(6, "/e.jpg", Kind::Image);
    assert_eq!(h.drain(), Vec::<String>::new());
    let events = h.events();
    assert!(events.contains(&TimelineEvent::Cancelled(FetchId(2), CancelReason::Bytes)));
    assert!(events.contains(&TimelineEvent::SkippedLimit(url("/d.jpg"), Limit::Bytes)));
    assert!(events.contains(&TimelineEvent::SkippedLimit(url("/e.jpg"), Limit::Bytes)));
    let stats = h.queue.stats();
    assert_eq!(
        (stats.cancelled, stats.dropped, stats.skipped_limit),
        (1, 1, 2)
    );
}

#[test]
fn the_byte_limit_without_content_length_counts_arriving_bytes() {
    let mut h = Harness::new(&PrefetchConfig {
        max_bytes_per_page: 100_000,
        ..PrefetchConfig::default()
    });
    h.add(1, "/stream.mp4", Kind::Media);
    h.add(1, "/wanted.mp4", Kind::Media);
    assert_eq!(h.drain().len(), 2);
    h.queue.handle_head(h.at(2), FetchId(1), None);
    h.queue.handle_head(h.at(2), FetchId(2), None);
    assert_eq!(
        h.queue.on_demand(h.at(2), &url("/wanted.mp4")),
        Demand::Join(FetchId(2))
    );
    assert_eq!(h.drain(), ["promote fetch-2"]);
    for _ in 0..4 {
        h.queue.handle_data(h.at(3), FetchId(1), 20_000);
        h.queue.handle_data(h.at(3), FetchId(2), 20_000);
    }
    // The requested one passed the limit at 120 000 bytes and carries on;
    // the unrequested one is cancelled at its next bytes.
    assert_eq!(h.drain(), ["cancel fetch-1"]);
    h.queue.handle_data(h.at(4), FetchId(2), 50_000);
    assert_eq!(h.drain(), Vec::<String>::new());
    assert_eq!(h.queue.stats().wasted_bytes, 80_000);
}

#[test]
fn what_the_cache_holds_fresh_is_not_fetched() {
    let mut h = Harness::new(&PrefetchConfig {
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    h.queue
        .handle_resource(h.at(1), h.page, res("/cached.png", Kind::Image), true);
    h.add(1, "/a.png", Kind::Image);
    h.add(1, "/b.png", Kind::Image);
    assert_eq!(h.drain(), ["start /a.png (fetch-1)"]);
    // Found fresh when it started: no bytes, and the slot is free again.
    h.queue.handle_fresh(h.at(2), FetchId(1));
    assert_eq!(h.drain(), ["start /b.png (fetch-2)"]);
    let stats = h.queue.stats();
    assert_eq!((stats.skipped_fresh, stats.found_fresh), (1, 1));
    assert_eq!(
        h.events()[1],
        TimelineEvent::SkippedFresh(url("/cached.png"))
    );
}

#[test]
fn one_fetch_per_url_across_duplicates_and_pages() {
    let mut h = Harness::new(&config());
    h.add(1, "/a.png", Kind::Image);
    h.add(1, "/a.png#again", Kind::Image);
    let other = h.queue.open_page(h.at(1), url("/o.html"), ConnectionId(2));
    h.queue
        .handle_resource(h.at(2), other, res("/a.png", Kind::Image), false);
    assert_eq!(h.drain(), ["start /a.png (fetch-1)"]);
    let shared = h.queue.timeline(other).expect("tracked");
    assert_eq!(
        shared[1].event,
        TimelineEvent::Shared(FetchId(1), url("/a.png"))
    );
    assert_eq!(shared[1].at, Duration::from_millis(1));
}

#[test]
fn a_purge_forgets_what_the_browser_asked_for_so_it_is_prefetched_again() {
    let mut h = Harness::new(&config());
    assert_eq!(h.queue.on_demand(h.at(1), &url("/a.css")), Demand::Alone);
    assert_eq!(h.queue.on_demand(h.at(1), &url("/b.css")), Demand::Alone);
    let purged = url("/a.css");
    assert_eq!(h.queue.forget_urls(|u| u == purged.as_str()), 1);
    h.add(2, "/a.css", Kind::Style);
    h.add(2, "/b.css", Kind::Style);
    assert_eq!(h.drain(), ["start /a.css (fetch-1)"]);
    assert_eq!(h.queue.stats().skipped_demanded, 1, "b.css was not purged");
    // Expiry still works with the forgotten entry left in the deque.
    let later = h.at(31_000);
    h.queue.handle_timeout(later);
    assert_eq!(h.queue.forget_urls(|_| true), 0);
}

#[test]
fn a_purge_forgets_done_prefetches_so_the_next_page_fetches_them_again() {
    let mut h = Harness::new(&config());
    h.add(1, "/done.png", Kind::Image);
    h.add(1, "/flying.png", Kind::Image);
    assert_eq!(
        h.drain(),
        ["start /done.png (fetch-1)", "start /flying.png (fetch-2)"]
    );
    h.queue.handle_complete(h.at(2), FetchId(1));
    assert_eq!(h.queue.forget_urls(|_| true), 1, "only the done one");
    let page = h
        .queue
        .open_page(h.at(20_000), url("/again.html"), ConnectionId(2));
    for path in ["/done.png", "/flying.png"] {
        h.queue
            .handle_resource(h.at(20_001), page, res(path, Kind::Image), false);
    }
    assert_eq!(h.drain(), ["start /done.png (fetch-3)"]);
    // The first page's fetch ends with it, without unlinking the new one.
    h.queue.handle_timeout(h.at(31_000));
    assert_eq!(
        h.queue.on_demand(h.at(31_001), &url("/done.png")),
        Demand::Join(FetchId(3))
    );
}

#[test]
fn what_a_browser_already_asked_for_is_not_prefetched_after_it() {
    let mut h = Harness::new(&config());
    assert_eq!(
        h.queue.on_demand(h.at(1), &url("/early.css")),
        Demand::Alone
    );
    h.add(2, "/early.css", Kind::Style);
    assert_eq!(h.drain(), Vec::<String>::new());
    assert_eq!(h.queue.stats().skipped_demanded, 1);
    // After the page lifetime, the memory of it is gone.
    let later = h.at(31_000);
    h.queue.handle_timeout(later);
    let page = h.queue.open_page(later, url("/"), ConnectionId(1));
    h.queue
        .handle_resource(later, page, res("/early.css", Kind::Style), false);
    assert_eq!(h.drain(), ["start /early.css (fetch-1)"]);
}

#[test]
fn imports_are_followed_to_the_configured_depth() {
    let mut h = Harness::new(&PrefetchConfig {
        css_import_depth: 2,
        ..config()
    });
    h.add(1, "/site.css", Kind::Style);
    let site = Harness::started_id(&h.actions(), "/site.css");
    let mut chain = site;
    for (level, path) in ["/i1.css", "/i2.css"].into_iter().enumerate() {
        h.queue
            .handle_discovered(h.at(2), chain, res(path, Kind::Style), false);
        let started = h.actions();
        chain = Harness::started_id(&started, path);
        assert!(
            matches!(
                started[0],
                Action::Start {
                    scan: Some(Scan::Css),
                    ..
                }
            ),
            "level {level}"
        );
        h.queue.handle_complete(h.at(3), chain);
    }
    h.queue
        .handle_discovered(h.at(4), chain, res("/i3.css", Kind::Style), false);
    h.queue
        .handle_discovered(h.at(4), chain, res("/deep.png", Kind::Image), false);
    assert_eq!(h.drain(), ["start /deep.png (fetch-4)"]);
    assert!(
        h.events()
            .contains(&TimelineEvent::SkippedLimit(url("/i3.css"), Limit::Depth))
    );
    // Finds in a body the queue did not ask to scan are ignored.
    h.queue
        .handle_discovered(h.at(5), FetchId(4), res("/x.png", Kind::Image), false);
    assert_eq!(h.drain(), Vec::<String>::new());
}

#[test]
fn frames_are_scanned_one_level_deep() {
    let mut h = Harness::new(&config());
    h.add(1, "/frame.html", Kind::Document);
    let started = h.actions();
    let frame = Harness::started_id(&started, "/frame.html");
    assert!(matches!(
        started[0],
        Action::Start {
            scan: Some(Scan::Html),
            ..
        }
    ));
    h.queue
        .handle_discovered(h.at(2), frame, res("/in-frame.png", Kind::Image), false);
    h.queue
        .handle_discovered(h.at(2), frame, res("/inner.html", Kind::Document), false);
    h.queue
        .handle_discovered(h.at(2), frame, res("/frame.css", Kind::Style), false);
    let started = h.actions();
    assert_eq!(
        started.iter().map(|a| h.show(a)).collect::<Vec<_>>(),
        ["start /in-frame.png (fetch-2)"]
    );
    h.queue.handle_complete(h.at(3), frame);
    let started = h.actions();
    // A frame's stylesheet is still scanned for its own url()s.
    assert!(matches!(
        &started[..],
        [Action::Start {
            scan: Some(Scan::Css),
            ..
        }]
    ));
    assert!(h.events().contains(&TimelineEvent::SkippedLimit(
        url("/inner.html"),
        Limit::Depth
    )));
}

#[test]
fn pages_expire_after_their_lifetime() {
    let mut h = Harness::new(&PrefetchConfig {
        page_lifetime_secs: 10,
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    h.add(1, "/a.png", Kind::Image);
    h.add(1, "/b.png", Kind::Image);
    assert_eq!(h.queue.poll_timeout(), Some(h.at(10_000)));
    h.queue.handle_timeout(h.at(9_999));
    assert_eq!(h.queue.pages(), 1);
    h.queue.handle_data(h.at(5_000), FetchId(1), 42);
    h.queue.handle_timeout(h.at(10_000));
    assert_eq!(h.queue.pages(), 0);
    assert_eq!(h.queue.poll_timeout(), None);
    assert_eq!(h.drain(), ["start /a.png (fetch-1)", "cancel fetch-1"]);
    let stats = h.queue.stats();
    assert_eq!(
        (stats.cancelled, stats.dropped, stats.wasted_bytes),
        (1, 1, 42)
    );
}

#[test]
fn the_timeline_tells_the_page_story_in_order() {
    let mut h = Harness::new(&PrefetchConfig {
        max_concurrent_per_origin: 1,
        ..PrefetchConfig::default()
    });
    h.add(10, "/a.png", Kind::Image);
    h.add(12, "/b.png", Kind::Image);
    h.queue.handle_html_end(h.at(15), h.page);
    h.queue.on_demand(h.at(20), &url("/a.png"));
    h.queue.handle_data(h.at(25), FetchId(1), 5);
    h.queue.handle_complete(h.at(30), FetchId(1));
    let timeline = h.queue.timeline(h.page).expect("tracked").to_vec();
    let shown: Vec<(u128, TimelineEvent)> = timeline
        .into_iter()
        .map(|e| (e.at.as_millis(), e.event))
        .collect();
    assert_eq!(
        shown,
        [
            (0, TimelineEvent::Opened(url("/"))),
            (
                10,
                TimelineEvent::Queued(FetchId(1), res("/a.png", Kind::Image))
            ),
            (10, TimelineEvent::Started(FetchId(1))),
            (
                12,
                TimelineEvent::Queued(FetchId(2), res("/b.png", Kind::Image))
            ),
            (15, TimelineEvent::HtmlEnded),
            (20, TimelineEvent::Promoted(FetchId(1))),
            (20, TimelineEvent::Started(FetchId(2))),
            (30, TimelineEvent::Completed(FetchId(1), 5)),
        ]
    );
}

#[test]
fn unknown_ids_and_pages_are_ignored() {
    let mut h = Harness::new(&config());
    let gone = PageId(99);
    h.queue
        .handle_resource(h.at(1), gone, res("/a.png", Kind::Image), false);
    h.queue.handle_head(h.at(1), FetchId(42), Some(1));
    h.queue.handle_data(h.at(1), FetchId(42), 1);
    h.queue.handle_complete(h.at(1), FetchId(42));
    h.queue.handle_failed(h.at(1), FetchId(42));
    h.queue.handle_fresh(h.at(1), FetchId(42));
    h.queue
        .handle_discovered(h.at(1), FetchId(42), res("/b.png", Kind::Image), false);
    h.queue.page_abandoned(h.at(1), gone);
    h.queue.handle_html_end(h.at(1), gone);
    assert_eq!(h.drain(), Vec::<String>::new());
    assert_eq!(h.queue.stats(), PrefetchStats::default());
}

#[test]
fn recent_pages_carry_their_outcome_and_keep_only_the_last() {
    let mut h = Harness::new(&config());
    for path in ["/a.png", "/b.png", "/c.png", "/d.png"] {
        h.add(1, path, Kind::Image);
    }
    // a and b start (the origin limit is 2); b is asked for in flight, which
    // frees its slot for c; d, still queued, is claimed; a completes.
    assert_eq!(h.drain().len(), 2);
    assert_eq!(
        h.queue.on_demand(h.at(2), &url("/b.png")),
        Demand::Join(FetchId(2))
    );
    assert!(matches!(
        h.queue.on_demand(h.at(2), &url("/d.png")),
        Demand::Claimed { .. }
    ));
    h.queue.handle_data(h.at(3), FetchId(1), 100);
    h.queue.handle_complete(h.at(3), FetchId(1));
    h.queue.handle_data(h.at(3), FetchId(3), 10);
    let loading = h.queue.recent_pages(h.at(5));
    assert_eq!(loading.len(), 1);
    assert_eq!(
        (loading[0].url.as_str(), loading[0].age_ms, loading[0].state),
        ("http://example.test/", 5, PageState::Loading)
    );
    h.queue.handle_html_end(h.at(6), h.page);
    let loaded = &h.queue.recent_pages(h.at(7))[0];
    assert_eq!(loaded.state, PageState::Loaded);
    assert_eq!(
        loaded.outcome,
        PageOutcome {
            issued: 3,
            used: 1,
            claimed: 1,
            wasted: 0,
            failed: 0,
        }
    );
    // Its lifetime ends: c (in flight, unused) is cancelled and a (completed,
    // 100 bytes, unused) is forgotten: two wasted; b is read by the browser.
    h.queue.handle_timeout(h.at(31_000));
    let ended = &h.queue.recent_pages(h.at(31_000))[0];
    assert_eq!(ended.state, PageState::Expired);
    assert_eq!(
        (
            ended.outcome.issued,
            ended.outcome.used,
            ended.outcome.wasted
        ),
        (3, 1, 2)
    );
    // Only the last MAX_RECENT_PAGES, newest first; an abandoned one says so.
    for n in 0..MAX_RECENT_PAGES + 4 {
        let page = h
            .queue
            .open_page(h.at(32_000), url(&format!("/p{n}")), ConnectionId(9));
        if n == MAX_RECENT_PAGES + 3 {
            h.queue.page_abandoned(h.at(32_001), page);
        }
    }
    let recent = h.queue.recent_pages(h.at(32_002));
    assert_eq!(recent.len(), MAX_RECENT_PAGES);
    assert_eq!(recent[0].url, format!("{ORIGIN}/p{}", MAX_RECENT_PAGES + 3));
    assert_eq!(recent[0].state, PageState::Abandoned);
    assert_eq!(recent[1].state, PageState::Loading);
    assert_eq!(recent[MAX_RECENT_PAGES - 1].url, format!("{ORIGIN}/p4"));
}
