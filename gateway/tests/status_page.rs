//! The admin endpoint's status page, on loopback: its files are served
//! with their types and the headers that keep the page to itself, the page
//! loads nothing from elsewhere and nothing inline (which its CSP would
//! block), and every series it shows by name is one `/metrics` carries.
//! (`gateway/tests/e2e.rs` loads it in Chromium and compares the numbers.)

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use gateway::admin::{RecentPages, STATUS_PAGE_CSP};
use gateway::cache::Cache;
use gateway::config::{CacheConfig, PrefetchConfig, PushConfig};
use gateway::metrics::{PushCollector, RequestMetrics};
use gateway::prefetch::Prefetcher;
use gateway::push::Pushes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A response read to the end: status, headers (names lowercase), body.
struct Raw {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

async fn request(admin: SocketAddr, method: &str, path: &str) -> Result<Raw> {
    let mut stream = TcpStream::connect(admin).await?;
    stream
        .write_all(
            format!("{method} {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut raw),
    )
    .await
    .context("the admin endpoint did not finish its answer")??;
    let text = String::from_utf8(raw)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no end of head")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().context("no status line")?;
    let status = status_line
        .split(' ')
        .nth(1)
        .context("no status code")?
        .parse()?;
    let mut headers = BTreeMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').context("header without a colon")?;
        headers.insert(name.to_ascii_lowercase(), value.trim().to_owned());
    }
    Ok(Raw {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// An admin endpoint with an empty cache, a prefetcher, a push taker and the
/// request figures: what a gateway without origins serves.
async fn admin() -> Result<(SocketAddr, (watch::Sender<bool>, tempfile::TempDir))> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let metrics = Arc::new(RequestMetrics::default());
    let dir = tempfile::tempdir()?;
    let cache = Cache::open(&CacheConfig {
        path: dir.path().join("cache.redb"),
        ..CacheConfig::default()
    })
    .await?;
    let push = PushConfig {
        enabled: true,
        ..PushConfig::default()
    };
    let pushes = Pushes::start(&push, &cache).context("push on with the cache on")?;
    tokio::spawn(gateway::admin::serve_with(
        listener,
        Cache::disabled(),
        Some(Arc::new(Prefetcher::new(
            &PrefetchConfig::default(),
            Cache::disabled(),
        ))),
        vec![metrics.collector(), Box::new(PushCollector(pushes))],
        stop_rx,
    ));
    Ok((addr, (stop_tx, dir)))
}

/// Every value of `attribute="..."` or `attribute='...'` in `html`.
fn attribute_values(html: &str, attribute: &str) -> Vec<String> {
    let mut values = Vec::new();
    for quote in ['"', '\''] {
        let opening = format!(" {attribute}={quote}");
        for (at, _) in html.match_indices(&opening) {
            let rest = &html[at + opening.len()..];
            if let Some(end) = rest.find(quote) {
                values.push(rest[..end].to_owned());
            }
        }
    }
    values
}

#[tokio::test]
async fn the_page_its_script_and_its_style_are_served_with_their_types_and_headers() -> Result<()> {
    let (admin, _stop) = admin().await?;
    for (path, content_type, starts) in [
        ("/", "text/html; charset=utf-8", "<!DOCTYPE html>"),
        (
            "/status.js",
            "text/javascript; charset=utf-8",
            "// The gateway's status page",
        ),
        ("/status.css", "text/css; charset=utf-8", ":root"),
        ("/favicon.svg", "image/svg+xml", "<svg "),
    ] {
        let answer = request(admin, "GET", path).await?;
        assert_eq!(answer.status, 200, "{path}");
        let header = |name: &str| answer.headers.get(name).map(String::as_str);
        assert_eq!(header("content-type"), Some(content_type), "{path}");
        assert_eq!(header("cache-control"), Some("no-store"), "{path}");
        assert_eq!(
            header("content-security-policy"),
            Some(STATUS_PAGE_CSP),
            "{path}"
        );
        assert_eq!(header("x-content-type-options"), Some("nosniff"), "{path}");
        assert!(
            answer.body.starts_with(starts),
            "{path}: {:.80}",
            answer.body
        );
        assert_eq!(
            header("content-length"),
            Some(answer.body.len().to_string().as_str()),
            "{path}"
        );

        let head = request(admin, "HEAD", path).await?;
        assert_eq!((head.status, head.body.as_str()), (200, ""), "HEAD {path}");
        let post = request(admin, "POST", path).await?;
        assert_eq!(post.status, 405, "POST {path}");
    }
    let csp: BTreeMap<&str, &str> = STATUS_PAGE_CSP
        .split(';')
        .filter_map(|d| d.trim().split_once(' '))
        .collect();
    for (directive, value) in [
        ("default-src", "'self'"),
        ("script-src", "'self'"),
        ("style-src", "'self'"),
        ("connect-src", "'self'"),
        ("frame-ancestors", "'none'"),
    ] {
        assert_eq!(csp.get(directive), Some(&value), "{STATUS_PAGE_CSP}");
    }

    let missing = request(admin, "GET", "/nowhere").await?;
    assert_eq!(missing.status, 404);
    assert!(
        missing
            .body
            .starts_with("GET / (status page), GET /metrics,"),
        "{}",
        missing.body
    );
    Ok(())
}

#[tokio::test]
async fn the_page_loads_only_its_own_files_and_nothing_inline() -> Result<()> {
    let (admin, _stop) = admin().await?;
    let html = request(admin, "GET", "/").await?.body;
    let script = request(admin, "GET", "/status.js").await?.body;
    let style = request(admin, "GET", "/status.css").await?.body;

    let mut references: BTreeSet<String> = attribute_values(&html, "src").into_iter().collect();
    references.extend(attribute_values(&html, "href"));
    let expected: BTreeSet<String> = [
        "/status.js",
        "/status.css",
        "/favicon.svg",
        "/metrics",
        "/pages/recent",
    ]
    .map(String::from)
    .into();
    assert_eq!(references, expected, "what the page links to");
    for reference in &references {
        let answer = request(admin, "GET", reference).await?;
        assert_eq!(answer.status, 200, "{reference}");
    }
    // The script fetches /metrics and /pages/recent, nothing else.
    let mut fetched: Vec<&str> = script
        .match_indices("fetch(")
        .map(|(at, _)| {
            let rest = &script[at..];
            &rest[..rest.find(',').unwrap_or(rest.len())]
        })
        .collect();
    fetched.sort_unstable();
    assert_eq!(
        fetched,
        ["fetch(\"/metrics\"", "fetch(\"/pages/recent\""],
        "the script's fetches"
    );

    for (file, text) in [
        ("index.html", &html),
        ("status.js", &script),
        ("status.css", &style),
    ] {
        for elsewhere in [
            "http:",
            "https:",
            "//cdn",
            "url(",
            "@import",
            "data:",
            "eval(",
            "new Function",
        ] {
            assert!(!text.contains(elsewhere), "{file} contains `{elsewhere}`");
        }
    }
    // The CSP allows no inline script, style or handler: none is written.
    assert_eq!(html.matches("<script").count(), 1, "one script element");
    assert!(html.contains("<script src=\"/status.js\" defer></script>"));
    for inline in ["<style", " style=", " onload=", " onclick=", "javascript:"] {
        assert!(!html.contains(inline), "index.html has `{inline}`");
    }
    assert!(
        !script.contains("setAttribute(\"style\""),
        "status.js sets a style attribute"
    );
    Ok(())
}

/// `name{labels}` of every sample line in `text`.
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.rsplit_once(' ').map(|(key, _)| key.to_owned()))
        .collect()
}

#[tokio::test]
async fn every_series_the_page_names_is_on_metrics() -> Result<()> {
    let (admin, _stop) = admin().await?;
    let html = request(admin, "GET", "/").await?.body;
    let metrics = request(admin, "GET", "/metrics").await?;
    assert_eq!(metrics.status, 200);
    let on_metrics = series(&metrics.body);
    // Named series (`data-metric` without `data-derived`); the derived ones
    // say how they are computed instead.
    let mut named = Vec::new();
    for element in html.split('<').filter(|e| e.contains("data-metric=")) {
        if element.contains("data-derived") {
            continue;
        }
        let values = attribute_values(element, "data-metric");
        let [metric] = values.as_slice() else {
            bail!("one data-metric per element: {element}");
        };
        named.push(metric.clone());
    }
    assert!(
        named.len() >= 26,
        "the cache, prefetch, push and error figures: {named:?}"
    );
    for metric in &named {
        assert!(
            on_metrics.contains(metric),
            "the page shows {metric}, which /metrics does not carry:\n{}",
            metrics.body
        );
    }
    Ok(())
}

/// `GET /pages/recent`: JSON, not stored, an empty list before any page;
/// without a prefetcher it says prefetch is off. (The list filled by a real
/// page: the Chromium test in `gateway/tests/e2e.rs`; its contents: the
/// queue's `recent_pages_carry_their_outcome_and_keep_only_the_last`.)
#[tokio::test]
async fn recent_pages_are_json_and_say_when_prefetch_is_off() -> Result<()> {
    let (admin, _stop) = admin().await?;
    let answer = request(admin, "GET", "/pages/recent").await?;
    assert_eq!(answer.status, 200);
    let header = |name: &str| answer.headers.get(name).map(String::as_str);
    assert_eq!(header("content-type"), Some("application/json"));
    assert_eq!(header("cache-control"), Some("no-store"));
    let pages: RecentPages = serde_json::from_str(&answer.body)?;
    assert_eq!(
        pages,
        RecentPages {
            prefetch: true,
            pages: Vec::new()
        }
    );
    assert_eq!(request(admin, "POST", "/pages/recent").await?.status, 405);

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let off = listener.local_addr()?;
    let (_stop_off, stop_rx) = watch::channel(false);
    tokio::spawn(gateway::admin::serve(
        listener,
        Cache::disabled(),
        None,
        stop_rx,
    ));
    let answer = request(off, "GET", "/pages/recent").await?;
    assert_eq!(answer.status, 200);
    let pages: RecentPages = serde_json::from_str(&answer.body)?;
    assert!(!pages.prefetch && pages.pages.is_empty(), "{}", answer.body);
    Ok(())
}
