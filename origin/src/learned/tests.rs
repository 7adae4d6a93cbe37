use std::time::{Duration, Instant};

use http::header::{CACHE_CONTROL, CONTENT_TYPE, SET_COOKIE, VARY};
use http::{HeaderMap, HeaderValue, StatusCode};
use http_semantics::RequestHead;
use page_resources::Kind;

use super::*;

const HOST: &str = "example.com";
const PAGE: &str = "/index.html";
const PAGE_URL: &str = "http://example.com/index.html";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A page's load: GET answered 200 text/html, navigated to.
fn load<'a>(host: &'a str, target: &'a str) -> RequestFacts<'a> {
    RequestFacts {
        scheme: PageScheme::Http,
        host,
        target,
        get: true,
        status: StatusCode::OK,
        referer: None,
        fetch_dest: Some("document"),
        credentials: false,
        html: true,
        shared_cacheable: true,
    }
}

/// A subresource asked for with `referer`, answered 200 and shared-cacheable.
fn asked<'a>(target: &'a str, referer: &'a str, dest: &'a str) -> RequestFacts<'a> {
    RequestFacts {
        scheme: PageScheme::Http,
        host: HOST,
        target,
        get: true,
        status: StatusCode::OK,
        referer: Some(referer),
        fetch_dest: Some(dest),
        credentials: false,
        html: false,
        shared_cacheable: true,
    }
}

fn targets(entries: &[LearnedEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.target.as_str()).collect()
}

fn learned(m: &Manifest, now: Instant) -> Vec<LearnedEntry> {
    m.learned(PageScheme::Http, HOST, PAGE, now)
}

/// One visit at `at`: the page, then each of `subs` 100 ms apart.
fn visit(m: &mut Manifest, at: Instant, subs: &[&str]) {
    m.handle_request(&load(HOST, PAGE), at);
    for (i, sub) in subs.iter().enumerate() {
        let when = at + ms(100 * (i as u64 + 1));
        m.handle_request(&asked(sub, PAGE_URL, "image"), when);
    }
}

/// The bytes the manifest should have charged, worked out afresh.
fn recount(m: &Manifest) -> usize {
    m.pages
        .iter()
        .map(|(key, page)| page_bytes(key, page))
        .sum()
}

#[test]
fn what_scripts_asked_for_is_pushed_from_the_second_visit() {
    let mut m = Manifest::new(LearnedConfig::default());
    let t0 = Instant::now();
    m.handle_request(&load(HOST, PAGE), t0);
    m.handle_request(&asked("/fonts/a.woff2", PAGE_URL, "font"), t0 + ms(300));
    m.handle_request(&asked("/api/items?page=1", PAGE_URL, "empty"), t0 + ms(400));
    m.handle_request(&asked("/img/hero.jpg", PAGE_URL, "image"), t0 + ms(900));
    assert!(
        learned(&m, t0 + ms(1000)).is_empty(),
        "one load is not enough"
    );

    let t1 = t0 + Duration::from_secs(60);
    m.handle_request(&load(HOST, PAGE), t1);
    let got = learned(&m, t1);
    assert_eq!(
        targets(&got),
        ["/fonts/a.woff2", "/api/items?page=1", "/img/hero.jpg"],
        "first-seen order"
    );
    assert!(got.iter().all(|e| e.confidence == 1.0));
    let kinds: Vec<_> = got.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [Some(Kind::Font), Some(Kind::Other), Some(Kind::Image)]
    );
}

#[test]
fn an_ask_after_the_window_is_not_the_pages() {
    let mut m = Manifest::new(LearnedConfig::default());
    let t0 = Instant::now();
    m.handle_request(&load(HOST, PAGE), t0);
    m.handle_request(&asked("/in.js", PAGE_URL, "script"), t0 + ms(5000));
    m.handle_request(&asked("/late.js", PAGE_URL, "script"), t0 + ms(5001));
    m.handle_request(&load(HOST, PAGE), t0 + ms(60_000));
    assert_eq!(targets(&learned(&m, t0 + ms(60_000))), ["/in.js"]);
}

#[test]
fn lying_referers_are_ignored() {
    let mut m = Manifest::new(LearnedConfig::default());
    let t0 = Instant::now();
    m.handle_request(&load(HOST, PAGE), t0);
    m.handle_request(&load("other.example", PAGE), t0);
    let lies = [
        "http://example.com/never-served.html", // a page never loaded here
        "http://other.example/index.html",      // another host's page
        "https://example.com/index.html",       // the other scheme
        "http://example.com:8080/index.html",   // another port
        "http://user@example.com/index.html",   // credentials in the URL
        "/index.html",                          // not a URL
        "http://example.com/index.html?x=1",    // another page (query)
    ];
    for (i, lie) in lies.iter().enumerate() {
        m.handle_request(&asked("/x.js", lie, "script"), t0 + ms(i as u64 + 1));
    }
    // Another host asks with this page as its Referer: never across hosts.
    let mut across = asked("/y.js", PAGE_URL, "script");
    across.host = "other.example";
    m.handle_request(&across, t0 + ms(50));
    assert_eq!(m.stats().entries, 0);
    // The default port written out is the same origin.
    m.handle_request(
        &asked("/z.js", "http://EXAMPLE.com:80/index.html", "script"),
        t0,
    );
    assert_eq!(m.stats().entries, 1);
}

#[test]
fn referers_and_pages_compare_as_urls() {
    let mut m = Manifest::new(LearnedConfig::default());
    let t0 = Instant::now();
    m.handle_request(&load("Example.COM:80", "/a/../index.html"), t0);
    m.handle_request(&asked("/x.js", PAGE_URL, "script"), t0 + ms(10));
    m.handle_request(&load(HOST, PAGE), t0 + ms(60_000));
    assert_eq!(targets(&learned(&m, t0 + ms(60_000))), ["/x.js"]);
    assert_eq!(
        targets(&m.learned(PageScheme::Http, "example.com:80", "/./index.html", t0)),
        ["/x.js"]
    );
}

/// Response fields, in order.
type Fields = Vec<(http::HeaderName, &'static str)>;

/// Builds facts from real heads, as the driver will.
fn from_heads(
    request: &str,
    status: StatusCode,
    response: &[(http::HeaderName, &'static str)],
) -> (RequestHead, StatusCode, HeaderMap) {
    let head = RequestHead::parse(request.as_bytes()).expect("a valid head");
    let mut fields = HeaderMap::new();
    for (name, value) in response {
        fields.append(name.clone(), HeaderValue::from_static(value));
    }
    (head, status, fields)
}

#[test]
fn only_credential_free_get_200_shared_cacheable_asks_count() {
    let js = [(CONTENT_TYPE, "text/javascript")];
    let ok = "GET /a.js HTTP/1.1\r\nHost: example.com\r\nReferer: http://example.com/index.html\r\nSec-Fetch-Dest: script\r\n\r\n";
    let refused: Vec<(String, StatusCode, Fields)> = vec![
        (ok.replace("GET", "POST"), StatusCode::OK, js.to_vec()),
        (
            ok.replace("\r\n\r\n", "\r\nCookie: s=1\r\n\r\n"),
            StatusCode::OK,
            js.to_vec(),
        ),
        (
            ok.replace("\r\n\r\n", "\r\nAuthorization: Basic eA==\r\n\r\n"),
            StatusCode::OK,
            js.to_vec(),
        ),
        (ok.to_owned(), StatusCode::NOT_FOUND, js.to_vec()),
        (ok.to_owned(), StatusCode::PARTIAL_CONTENT, js.to_vec()),
        (ok.to_owned(), StatusCode::NOT_MODIFIED, js.to_vec()),
        (
            ok.to_owned(),
            StatusCode::OK,
            vec![(CACHE_CONTROL, "max-age=60, no-store")],
        ),
        (
            ok.to_owned(),
            StatusCode::OK,
            vec![(CACHE_CONTROL, "Private")],
        ),
        (
            ok.to_owned(),
            StatusCode::OK,
            vec![(CACHE_CONTROL, "private=\"x\"")],
        ),
        (ok.to_owned(), StatusCode::OK, vec![(SET_COOKIE, "a=1")]),
        (
            ok.to_owned(),
            StatusCode::OK,
            vec![(VARY, "Accept-Encoding, Cookie")],
        ),
        (ok.to_owned(), StatusCode::OK, vec![(VARY, "*")]),
        (ok.replace("script", "video"), StatusCode::OK, js.to_vec()),
        (
            ok.replace("script", "manifest"),
            StatusCode::OK,
            js.to_vec(),
        ),
        (
            ok.replace("script", "serviceworker"),
            StatusCode::OK,
            js.to_vec(),
        ),
        (
            ok.replace("/a.js", "//evil.example/a.js"),
            StatusCode::OK,
            js.to_vec(),
        ),
    ];
    let t0 = Instant::now();
    for (i, (request, status, response)) in refused.iter().enumerate() {
        let mut m = Manifest::new(LearnedConfig::default());
        m.handle_request(&load(HOST, PAGE), t0);
        let (head, status, fields) = from_heads(request, *status, response);
        if let Some(facts) = RequestFacts::new(PageScheme::Http, &head, status, &fields) {
            m.handle_request(&facts, t0 + ms(10));
        }
        assert_eq!(m.stats().entries, 0, "case {i}: {request:?} {response:?}");
    }
    let mut m = Manifest::new(LearnedConfig::default());
    m.handle_request(&load(HOST, PAGE), t0);
    let (head, status, fields) = from_heads(
        ok,
        StatusCode::OK,
        &[
            (CACHE_CONTROL, "public, max-age=600, no-cache"),
            (VARY, "Accept-Encoding"),
        ],
    );
    let facts = RequestFacts::new(PageScheme::Http, &head, status, &fields).expect("facts");
    assert_eq!(facts.referer, Some(PAGE_URL));
    assert!(facts.shared_cacheable && facts.get && !facts.credentials && !facts.html);
    m.handle_request(&facts, t0 + ms(10));
    assert_eq!(m.stats().entries, 1);
}

#[test]
fn a_page_is_a_navigation_or_html_without_a_destination() {
    let t0 = Instant::now();
    let mut m = Manifest::new(LearnedConfig::default());
    // An HTML answer without Sec-Fetch-Dest (an older browser) is a page.
    let head =
        RequestHead::parse(b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nCookie: s=1\r\n\r\n")
            .expect("head");
    let mut fields = HeaderMap::new();
    fields.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    fields.insert(CACHE_CONTROL, HeaderValue::from_static("private"));
    let facts = RequestFacts::new(PageScheme::Http, &head, StatusCode::OK, &fields).expect("facts");
    m.handle_request(&facts, t0);
    assert_eq!(
        m.stats().pages,
        1,
        "a page requested with a cookie is still a load"
    );
    // An HTML fragment a script fetched is an ask, not a page.
    let mut fragment = asked("/part.html", PAGE_URL, "empty");
    fragment.html = true;
    m.handle_request(&fragment, t0 + ms(10));
    // A link followed within the window is another page's load, not an ask.
    let mut next = load(HOST, "/next.html");
    next.referer = Some(PAGE_URL);
    m.handle_request(&next, t0 + ms(20));
    assert_eq!(m.stats().pages, 2);
    m.handle_request(&load(HOST, PAGE), t0 + ms(60_000));
    assert_eq!(targets(&learned(&m, t0 + ms(60_000))), ["/part.html"]);
}

#[test]
fn a_revalidated_page_is_a_load() {
    let t0 = Instant::now();
    let mut m = Manifest::new(LearnedConfig::default());
    visit(&mut m, t0, &["/a.png"]);
    let mut reload = load(HOST, PAGE);
    reload.status = StatusCode::NOT_MODIFIED;
    reload.html = false;
    let t1 = t0 + ms(60_000);
    m.handle_request(&reload, t1);
    assert_eq!(targets(&learned(&m, t1)), ["/a.png"]);
    // A 304 of a target never loaded as a page makes no page.
    let mut image = asked("/b.png", PAGE_URL, "image");
    image.status = StatusCode::NOT_MODIFIED;
    image.fetch_dest = None;
    m.handle_request(&image, t1);
    assert_eq!(m.stats().pages, 1);
}

#[test]
fn confidence_is_asks_per_recent_load() {
    let mut m = Manifest::new(LearnedConfig::default());
    let mut t = Instant::now();
    // /every.png in every load, /half.png in every other, /once.png in the first.
    for i in 0..8 {
        let mut subs = vec!["/every.png"];
        if i % 2 == 1 {
            subs.push("/half.png");
        }
        if i == 0 {
            subs.push("/once.png");
        }
        visit(&mut m, t, &subs);
        t += ms(60_000);
    }
    m.handle_request(&load(HOST, PAGE), t);
    let got = learned(&m, t);
    assert_eq!(targets(&got), ["/every.png", "/half.png"]);
    assert_eq!(got[0].confidence, 1.0);
    // Asked in loads 1, 3, 5, 7: 4 of the 7 loads since it was first seen,
    // the recent ones weighing more (4/7 is 0.571).
    assert!(
        (0.56..0.58).contains(&got[1].confidence),
        "{}",
        got[1].confidence
    );
    // The load being served has not asked yet: it does not count until its
    // window is over, when it counts as a miss.
    let later = learned(&m, t + ms(5001));
    assert!(
        (0.85..0.87).contains(&later[0].confidence),
        "{}",
        later[0].confidence
    );
}

#[test]
fn concurrent_loads_share_their_asks() {
    let mut m = Manifest::new(LearnedConfig::default());
    let t0 = Instant::now();
    for round in 0..3u64 {
        let t = t0 + ms(60_000 * round);
        // Two browsers load the page 10 ms apart; both ask after both loads.
        m.handle_request(&load(HOST, PAGE), t);
        m.handle_request(&load(HOST, PAGE), t + ms(10));
        m.handle_request(&asked("/a.woff2", PAGE_URL, "font"), t + ms(200));
        m.handle_request(&asked("/a.woff2", PAGE_URL, "font"), t + ms(250));
    }
    m.handle_request(&load(HOST, PAGE), t0 + ms(200_000));
    let got = learned(&m, t0 + ms(200_000));
    assert_eq!(targets(&got), ["/a.woff2"]);
    assert!(got[0].confidence > 0.95, "{}", got[0].confidence);
}

#[test]
fn entries_age_out_after_loads_without_an_ask() {
    let config = LearnedConfig {
        learn_forget_loads: 3,
        ..LearnedConfig::default()
    };
    let mut m = Manifest::new(config);
    let mut t = Instant::now();
    for _ in 0..10 {
        visit(&mut m, t, &["/old.png"]);
        t += ms(1000 * 60);
    }
    for i in 0..4 {
        m.handle_request(&load(HOST, PAGE), t);
        let want: &[&str] = if i < 3 { &["/old.png"] } else { &[] };
        assert_eq!(
            targets(&learned(&m, t)),
            want,
            "after {i} finished loads without it"
        );
        t += ms(60_000);
    }
    // Its place is taken back when a new target comes.
    let before = m.stats().bytes;
    m.handle_request(
        &asked("/new.png", PAGE_URL, "image"),
        t - ms(60_000) + ms(10),
    );
    assert_eq!(m.stats().entries, 1);
    assert!(
        m.stats().bytes <= before + 16,
        "only the new target's length differs"
    );
    assert_eq!(m.stats().bytes, recount(&m));
}

#[test]
fn entries_age_out_after_time_without_an_ask() {
    let config = LearnedConfig {
        learn_forget_after_ms: ms(600_000),
        ..LearnedConfig::default()
    };
    let mut m = Manifest::new(config);
    let t0 = Instant::now();
    visit(&mut m, t0, &["/a.png"]);
    m.handle_request(&load(HOST, PAGE), t0 + ms(590_000));
    assert_eq!(targets(&learned(&m, t0 + ms(590_000))), ["/a.png"]);
    assert!(learned(&m, t0 + ms(600_101)).is_empty());
}

#[test]
fn a_flood_of_targets_replaces_only_entries_not_learned() {
    let config = LearnedConfig {
        learn_max_entries: 8,
        ..LearnedConfig::default()
    };
    let mut m = Manifest::new(config);
    let mut t = Instant::now();
    let established = ["/a.css", "/b.woff2", "/c.js"];
    for _ in 0..3 {
        visit(&mut m, t, &established);
        t += ms(60_000);
    }
    // One load, then 100,000 distinct targets asked within its window.
    m.handle_request(&load(HOST, PAGE), t);
    for i in 0..100_000u64 {
        let target = format!("/flood/{i}");
        m.handle_request(&asked(&target, PAGE_URL, "empty"), t + ms(i % 5000));
    }
    assert_eq!(m.stats().entries, 8);
    m.handle_request(&load(HOST, PAGE), t + ms(60_000));
    let got = learned(&m, t + ms(60_000));
    assert_eq!(
        &targets(&got)[..3],
        established,
        "established entries stay, first"
    );
    // The flood's last entries are there (one load of evidence each), but only
    // until the loads that do not ask for them say otherwise.
    for _ in 0..2 {
        t += ms(60_000);
        visit(&mut m, t, &established);
    }
    m.handle_request(&load(HOST, PAGE), t + ms(60_000));
    assert_eq!(targets(&learned(&m, t + ms(60_000))), established);
}

#[test]
fn a_push_not_asked_for_counts_neither_way() {
    let mut m = Manifest::new(LearnedConfig::default());
    let mut t = Instant::now();
    for _ in 0..2 {
        visit(&mut m, t, &["/font.woff2"]);
        t += ms(60_000);
    }
    // From now on the origin pushes it and the gateway never asks.
    for _ in 0..40 {
        m.handle_request(&load(HOST, PAGE), t);
        let got = learned(&m, t);
        assert_eq!(targets(&got), ["/font.woff2"]);
        m.handle_pushed(PageScheme::Http, HOST, PAGE, "/font.woff2");
        t += ms(10_000);
    }
    // Pushed but still asked for (not taken from the push): an ask.
    m.handle_request(&load(HOST, PAGE), t);
    m.handle_pushed(PageScheme::Http, HOST, PAGE, "/font.woff2");
    m.handle_request(&asked("/font.woff2", PAGE_URL, "font"), t + ms(100));
    assert_eq!(learned(&m, t + ms(6000))[0].confidence, 1.0);
    // Not pushed and not asked for: once the window is over, a miss.
    t += ms(10_000);
    m.handle_request(&load(HOST, PAGE), t);
    assert_eq!(learned(&m, t)[0].confidence, 1.0, "its window is open");
    let after = learned(&m, t + ms(6000))[0].confidence;
    // 3 asks in the 4 loads that count (the pushed ones do not), the miss
    // weighing most: 0.725.
    assert!((0.72..0.73).contains(&after), "{after}");
}

#[test]
fn pages_are_kept_least_recently_used_first() {
    let config = LearnedConfig {
        learn_max_pages: 2,
        ..LearnedConfig::default()
    };
    let mut m = Manifest::new(config);
    let t0 = Instant::now();
    m.handle_request(&load(HOST, "/a.html"), t0);
    m.handle_request(&load(HOST, "/b.html"), t0);
    // An ask for /a.html is a use of it.
    m.handle_request(
        &asked("/x.png", "http://example.com/a.html", "image"),
        t0 + ms(1),
    );
    m.handle_request(&load(HOST, "/c.html"), t0 + ms(2));
    assert_eq!(m.stats().pages, 2);
    for (page, kept) in [("/a.html", true), ("/b.html", false), ("/c.html", true)] {
        let key = page_key(PageScheme::Http, HOST, page).expect("key");
        assert_eq!(m.pages.contains_key(&key), kept, "{page}");
    }
    assert_eq!(m.lru.len(), 2);
    assert_eq!(m.stats().bytes, recount(&m));
}

/// 30,000 distinct hostile URLs as asks, a new page (on a new host) every
/// 20 of them, in the second half one target in ten at the longest kept: the
/// pages, entries and bytes stay within bounds (the page count binds in the
/// first half, the bytes in the second), and the bytes charged are what the
/// structure holds. (`tests/learned_memory.rs` feeds 100,000 and counts the
/// heap.)
#[test]
fn memory_is_bounded_whatever_is_asked() {
    let config = LearnedConfig {
        learn_max_pages: 64,
        learn_max_bytes: 512 << 10,
        ..LearnedConfig::default()
    };
    assert_eq!(config.validate(), Ok(()));
    let mut m = Manifest::new(config.clone());
    let t0 = Instant::now();
    let long = "x".repeat(MAX_TARGET_BYTES);
    let (mut host, mut page) = (String::new(), String::new());
    let mut most_pages = 0;
    for i in 0..30_000u64 {
        let now = t0 + ms(i);
        if i % 20 == 0 {
            host = format!("h{i}.{}", &long[..MAX_HOST_BYTES - 16]);
            page = format!("/{i}/{}", &long[..200]);
            m.handle_request(&load(&host, &page), now);
        }
        let referer = format!("http://{host}{page}");
        let target = format!("/{i}/{long}");
        let len = if i >= 15_000 && i % 10 == 0 {
            MAX_TARGET_BYTES
        } else {
            200
        };
        let mut ask = asked(&target[..len], &referer, "empty");
        ask.host = &host;
        m.handle_request(&ask, now);
        let stats = m.stats();
        assert!(stats.bytes <= config.learn_max_bytes, "{stats:?}");
        assert!(stats.pages <= config.learn_max_pages);
        if i < 15_000 {
            most_pages = most_pages.max(stats.pages);
        }
        if i % 1000 == 0 {
            assert_eq!(stats.bytes, recount(&m));
            assert_eq!(m.lru.len(), stats.pages);
        }
    }
    let stats = m.stats();
    assert_eq!(most_pages, config.learn_max_pages, "the page count bound");
    assert!(
        stats.pages < config.learn_max_pages,
        "the bytes bound: {stats:?}"
    );
    assert!(stats.bytes > config.learn_max_bytes / 2, "{stats:?}");
    assert!(
        m.pages
            .values()
            .all(|p| p.entries.len() <= config.learn_max_entries)
    );
    assert_eq!(stats.bytes, recount(&m));
    // Longer than the limits: ignored.
    let mut m = Manifest::new(LearnedConfig::default());
    let too_long = format!("/{}", "y".repeat(MAX_TARGET_BYTES));
    m.handle_request(&load(HOST, &too_long), t0);
    let too_long_host = "h".repeat(MAX_HOST_BYTES + 1);
    m.handle_request(&load(&too_long_host, PAGE), t0);
    assert_eq!(m.stats().pages, 0);
    m.handle_request(&load(HOST, PAGE), t0);
    m.handle_request(&asked(&too_long, PAGE_URL, "image"), t0);
    assert_eq!(m.stats().entries, 0);
}

#[test]
fn learning_off_learns_nothing() {
    let mut m = Manifest::new(LearnedConfig {
        learn: false,
        ..LearnedConfig::default()
    });
    let t0 = Instant::now();
    visit(&mut m, t0, &["/a.png"]);
    visit(&mut m, t0 + ms(60_000), &["/a.png"]);
    assert_eq!(m.stats(), ManifestStats::default());
    assert!(learned(&m, t0 + ms(60_000)).is_empty());
}

#[test]
fn config_reads_from_toml_with_defaults_and_validates() {
    let config: LearnedConfig =
        toml::from_str("learn_window_ms = 3000\nlearn_min_confidence = 0.75\n").expect("parses");
    assert_eq!(config.learn_window_ms, ms(3000));
    assert_eq!(config.learn_min_confidence, 0.75);
    assert_eq!(config.learn_max_pages, 4096);
    assert!(config.learn);
    assert_eq!(config.validate(), Ok(()));
    assert_eq!(LearnedConfig::default().validate(), Ok(()));
    assert!(toml::from_str::<LearnedConfig>("learn_windw_ms = 1").is_err());
    let bad = [
        ("learn_window_ms", "learn_window_ms = 0"),
        ("learn_min_confidence", "learn_min_confidence = 0.0"),
        ("learn_min_confidence", "learn_min_confidence = 1.5"),
        ("learn_min_confidence", "learn_min_confidence = nan"),
        ("learn_min_loads", "learn_min_loads = 1"),
        ("learn_max_pages", "learn_max_pages = 0"),
        ("learn_max_entries", "learn_max_entries = 0"),
        ("learn_memory_loads", "learn_memory_loads = 0"),
        ("learn_forget_loads", "learn_forget_loads = 0"),
        ("learn_forget_after_ms", "learn_forget_after_ms = 1000"),
        ("learn_max_bytes", "learn_max_bytes = 1000"),
    ];
    for (key, text) in bad {
        let config: LearnedConfig = toml::from_str(text).expect("parses");
        match config.validate() {
            Err(LearnedConfigError::Invalid { key: named, .. }) => assert_eq!(named, key, "{text}"),
            Ok(()) => panic!("{text} accepted"),
        }
    }
}

#[test]
fn an_observation_made_beforehand_is_the_same_request() {
    let t0 = Instant::now();
    let mut m = Manifest::new(LearnedConfig::default());
    let page = Observation::new(&load(HOST, PAGE)).expect("a page");
    let ask = Observation::new(&asked("/a.js", PAGE_URL, "script")).expect("an ask");
    assert_eq!(Observation::new(&asked("/a.js", PAGE_URL, "video")), None);
    m.handle_observation(page.clone(), t0);
    m.handle_observation(ask, t0 + ms(10));
    m.handle_observation(page, t0 + ms(60_000));
    assert_eq!(targets(&learned(&m, t0 + ms(60_000))), ["/a.js"]);
}

#[test]
fn a_page_asking_for_itself_is_not_an_entry() {
    let t0 = Instant::now();
    let mut m = Manifest::new(LearnedConfig::default());
    m.handle_request(&load(HOST, PAGE), t0);
    m.handle_request(&asked(PAGE, PAGE_URL, "empty"), t0 + ms(10));
    assert_eq!(m.stats().entries, 0);
}

/// Random sequences of loads, asks (well-formed and not), pushes and
/// lookups at random times, on a small manifest: after every step the
/// bounds hold, the bytes charged are the recount, and what `learned`
/// returns is well-formed.
#[test]
fn random_input_keeps_every_invariant() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let config = LearnedConfig {
        learn_max_pages: 4,
        learn_max_entries: 4,
        learn_memory_loads: 4,
        learn_forget_loads: 3,
        learn_forget_after_ms: ms(20_000),
        learn_max_bytes: min_bytes(4) * 2,
        ..LearnedConfig::default()
    };
    assert_eq!(config.validate(), Ok(()));
    let hosts = [
        "example.com",
        "EXAMPLE.com:80",
        "other.example",
        "a/b",
        "",
        "[::1]:8",
        "h@x",
    ];
    let pages = [
        "/",
        "/index.html",
        "/a/../index.html",
        "/p?q=1",
        "//x",
        "/%41",
        "index",
    ];
    let dests = [
        None,
        Some("image"),
        Some("empty"),
        Some("document"),
        Some("video"),
        Some("?"),
    ];
    let statuses = [200, 204, 206, 304, 404];
    let mut rng = StdRng::seed_from_u64(31);
    // Mostly one of the first `usual` (well-formed, related), else any.
    let pick = |rng: &mut StdRng, len: usize, usual: usize| {
        if rng.random_bool(0.8) {
            rng.random_range(0..usual)
        } else {
            rng.random_range(0..len)
        }
    };
    let (mut returned, mut most_pages, mut fullest) = (0, 0, 0);
    for round in 0..20 {
        let mut m = Manifest::new(config.clone());
        let mut now = Instant::now();
        for step in 0..2000 {
            let most = if rng.random_bool(0.05) { 60_000 } else { 800 };
            now += ms(rng.random_range(0..most));
            let host = hosts[pick(&mut rng, hosts.len(), 2)];
            let page = pages[pick(&mut rng, pages.len(), 4)];
            let target = format!("/t{}", rng.random_range(0..12));
            let referer = format!(
                "{}://{}{}",
                if rng.random_bool(0.9) {
                    "http"
                } else {
                    "https"
                },
                if rng.random_bool(0.8) {
                    host
                } else {
                    hosts[rng.random_range(0..hosts.len())]
                },
                pages[pick(&mut rng, pages.len(), 4)],
            );
            let status = StatusCode::from_u16(statuses[pick(&mut rng, statuses.len(), 1)])
                .expect("a status");
            let dest = dests[pick(&mut rng, dests.len(), 3)];
            match rng.random_range(0..10) {
                0 | 1 => {
                    let mut facts = load(host, page);
                    facts.fetch_dest = if rng.random_bool(0.5) {
                        Some("document")
                    } else {
                        dest
                    };
                    facts.html = rng.random_bool(0.8);
                    facts.status = status;
                    m.handle_request(&facts, now);
                }
                2..=7 => {
                    let mut facts = asked(&target, &referer, "image");
                    facts.host = host;
                    facts.fetch_dest = dest;
                    facts.credentials = rng.random_bool(0.05);
                    facts.shared_cacheable = rng.random_bool(0.95);
                    facts.get = rng.random_bool(0.95);
                    facts.status = status;
                    m.handle_request(&facts, now);
                }
                8 => m.handle_pushed(PageScheme::Http, host, page, &target),
                _ => {
                    let got = m.learned(PageScheme::Http, host, page, now);
                    assert!(got.len() <= config.learn_max_entries);
                    returned += got.len();
                    for entry in got {
                        assert!((0.5..=1.0).contains(&entry.confidence), "{entry:?}");
                        assert!(plain_target(&entry.target), "{entry:?}");
                    }
                }
            }
            let stats = m.stats();
            assert!(
                stats.pages <= config.learn_max_pages,
                "round {round} step {step}"
            );
            assert!(
                stats.bytes <= config.learn_max_bytes,
                "round {round} step {step}"
            );
            assert_eq!(stats.bytes, recount(&m), "round {round} step {step}");
            assert_eq!(m.lru.len(), stats.pages);
            assert!(
                m.pages
                    .values()
                    .all(|p| p.entries.len() <= config.learn_max_entries)
            );
            most_pages = most_pages.max(stats.pages);
            fullest = m
                .pages
                .values()
                .map(|p| p.entries.len())
                .fold(fullest, usize::max);
        }
    }
    // The input reaches every bound, and entries are learned.
    assert_eq!(most_pages, config.learn_max_pages);
    assert_eq!(fullest, config.learn_max_entries);
    assert!(returned > 100, "{returned}");
}
