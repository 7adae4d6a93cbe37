//! The cache through the browser-facing front, on loopback: raw HTTP from the
//! "browser", a programmable upstream as the original destination (plain TCP,
//! Host verified, so cacheable), a real redb file per test.
//!
//! Each case counts what reached the upstream: a hit is a request that did not.

#[path = "support/http.rs"]
mod http_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use gateway::admin::RecentPages;
use gateway::cache::Cache;
use gateway::config::{CacheConfig, GatewayConfig};
use gateway::front::Front;
use gateway::listener::Intercepted;
use gateway::metrics::{RequestMetrics, Side};
use gateway::prefetch::PageState;
use gateway::prefetch::Prefetcher;
use gateway::sync::lock;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use http_support::{Answer, EXCHANGE_TIMEOUT, exchange};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// What the upstream answers for one path.
#[derive(Clone, Default)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// Send the first half, then wait for this before the second.
    pause: Option<Arc<Notify>>,
}

impl Reply {
    fn ok(body: &str, headers: &[(&'static str, &str)]) -> Self {
        Self {
            status: 200,
            headers: headers.iter().map(|(n, v)| (*n, (*v).to_owned())).collect(),
            body: body.as_bytes().to_vec(),
            pause: None,
        }
    }
}

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// The original destination: answers with `handler`, records every request.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    accept: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Upstream {
    async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Result<Self> {
        let handler: Handler = Arc::new(handler);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (handler, log) = (Arc::clone(&handler), Arc::clone(&log));
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (handler, log) = (Arc::clone(&handler), Arc::clone(&log));
                        async move { Ok::<_, hyper::Error>(answer(&handler, &log, req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            seen,
            accept: Mutex::new(Some(accept)),
        })
    }

    /// Closes the listening socket: new connections are refused from now on.
    async fn stop(&self) {
        let accept = lock(&self.accept).take();
        if let Some(accept) = accept {
            accept.abort();
            // Resolves once the task, and with it the listener, is gone.
            let _ = accept.await;
        }
    }

    /// Requests for `path` so far.
    fn count(&self, path: &str) -> usize {
        lock(&self.seen).iter().filter(|s| s.path == path).count()
    }

    fn last(&self, path: &str) -> Option<Seen> {
        lock(&self.seen)
            .iter()
            .rev()
            .find(|s| s.path == path)
            .cloned()
    }
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

fn answer(
    handler: &Handler,
    log: &Mutex<Vec<Seen>>,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<UpBody> {
    let seen = Seen {
        method: req.method().to_string(),
        path: req
            .uri()
            .path_and_query()
            .map_or("/".into(), |p| p.to_string()),
        headers: req
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    };
    let reply = handler(&seen);
    lock(log).push(seen);
    let mut builder = hyper::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(*name, value);
    }
    builder = builder.header("content-length", reply.body.len());
    let body: UpBody = match reply.pause {
        None => http_body_util::Full::new(Bytes::from(reply.body)).boxed(),
        Some(pause) => {
            let half = reply.body.len() / 2;
            let first = Bytes::copy_from_slice(&reply.body[..half]);
            let second = Bytes::copy_from_slice(&reply.body[half..]);
            let stream = futures_util::stream::unfold(0u8, move |step| {
                let (first, second, pause) = (first.clone(), second.clone(), Arc::clone(&pause));
                async move {
                    match step {
                        0 => Some((Ok(Frame::data(first)), 1)),
                        1 => {
                            pause.notified().await;
                            Some((Ok(Frame::data(second)), 2))
                        }
                        _ => None,
                    }
                }
            });
            StreamBody::new(stream).boxed()
        }
    };
    builder.body(body).expect("response")
}

/// A running front: its address and cache; dropping it stops accepting (and
/// so releases the database once its connections are done).
struct TestFront {
    addr: SocketAddr,
    cache: Cache,
    metrics: Arc<RequestMetrics>,
    prefetcher: Option<Arc<Prefetcher>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for TestFront {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A front with a cache at `path`, every connection claiming `dst`.
async fn front(dst: SocketAddr, path: &Path) -> Result<TestFront> {
    front_with(dst, path, |_| {}).await
}

/// [`front`], with `tweak` applied to its configuration; runs the prefetch
/// queue's driver when prefetch is on.
async fn front_with(
    dst: SocketAddr,
    path: &Path,
    tweak: impl FnOnce(&mut GatewayConfig),
) -> Result<TestFront> {
    let mut config = GatewayConfig {
        cache: CacheConfig {
            path: path.to_owned(),
            max_bytes: 64 << 20,
            max_object_bytes: 1 << 20,
            ..CacheConfig::default()
        },
        ..GatewayConfig::default()
    };
    tweak(&mut config);
    let cache = Cache::open(&config.cache).await?;
    let front = Arc::new(Front::new(&config, Vec::new(), cache.clone()));
    let metrics = Arc::clone(front.metrics());
    let prefetcher = front.prefetcher().cloned();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    if let Some(prefetcher) = &prefetcher {
        tokio::spawn(Arc::clone(prefetcher).drive(stop_rx.clone()));
    }
    let accept = tokio::spawn(async move {
        let _stop_tx = stop_tx;
        while let Ok((stream, client)) = listener.accept().await {
            let flow = Intercepted {
                stream,
                client,
                original_dst: dst,
            };
            tokio::spawn(Arc::clone(&front).serve(flow, stop_rx.clone()));
        }
    });
    Ok(TestFront {
        addr,
        cache,
        metrics,
        prefetcher,
        accept,
    })
}

/// One request with `extra` header lines; the connection closes after it.
async fn request(
    gw: SocketAddr,
    method: &str,
    path: &str,
    host: SocketAddr,
    extra: &str,
) -> Result<Answer> {
    let raw =
        format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n");
    exchange(gw, raw.as_bytes())
        .await?
        .into_iter()
        .next()
        .context("no response")
}

async fn get(gw: SocketAddr, path: &str, host: SocketAddr) -> Result<Answer> {
    request(gw, "GET", path, host, "").await
}

#[tokio::test]
async fn a_fresh_response_is_served_from_the_cache_with_age_and_via() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up =
        Upstream::start(|_| Reply::ok("hello cache", &[("cache-control", "max-age=60")])).await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    let first = get(gw, "/a", up.addr).await?;
    assert_eq!((first.status, first.text().as_str()), (200, "hello cache"));
    // The fill commits after the browser has its bytes; give it a moment.
    wait_for(|| cache.stats().stored == 1).await?;
    let second = get(gw, "/a", up.addr).await?;
    assert_eq!(
        (second.status, second.text().as_str()),
        (200, "hello cache")
    );
    assert_eq!(up.count("/a"), 1, "the second request was a hit");
    assert!(second.header("age").is_some(), "{:?}", second.headers);
    let via = second.header("via").context("no Via")?;
    assert!(via.starts_with("1.1 sctp-gateway-"), "{via}");
    assert_eq!(second.header("cache-control"), Some("max-age=60"));
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
    assert_eq!(
        (stats.memory_hits, stats.memory_entries),
        (1, 1),
        "a small entry just stored is hit in memory"
    );
    Ok(())
}

#[tokio::test]
async fn uncacheable_responses_and_requests_go_upstream_every_time() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| match seen.path.as_str() {
        "/no-store" => Reply::ok("x", &[("cache-control", "no-store, max-age=60")]),
        "/private" => Reply::ok("x", &[("cache-control", "private, max-age=60")]),
        "/cookie" => Reply::ok(
            "x",
            &[("cache-control", "max-age=60"), ("set-cookie", "a=b")],
        ),
        _ => Reply::ok("x", &[("cache-control", "max-age=60")]),
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    for path in ["/no-store", "/private", "/cookie"] {
        get(gw, path, up.addr).await?;
        get(gw, path, up.addr).await?;
        assert_eq!(up.count(path), 2, "{path} must not be stored");
    }
    // A request with credentials is not answered from, nor stored into, a
    // shared cache (RFC 9111, section 3.5).
    for _ in 0..2 {
        request(gw, "GET", "/auth", up.addr, "authorization: Basic dTpw\r\n").await?;
    }
    assert_eq!(up.count("/auth"), 2);
    // A no-cache request goes upstream even when a fresh entry exists
    // (section 5.2.1.4); a no-store one may be answered from it (section
    // 5.2.1.5 forbids storing, not reusing).
    get(gw, "/plain", up.addr).await?;
    wait_for(|| cache.stats().stored == 1).await?;
    request(gw, "GET", "/plain", up.addr, "cache-control: no-cache\r\n").await?;
    assert_eq!(up.count("/plain"), 2);
    request(gw, "GET", "/plain", up.addr, "cache-control: no-store\r\n").await?;
    assert_eq!(up.count("/plain"), 2);
    assert_eq!(cache.stats().entries, 1);
    Ok(())
}

/// The Set-Cookie values of `answer`, in order.
fn cookies(answer: &Answer) -> Vec<&str> {
    answer
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// A session cookie on a response the site marks `public` (the hostile-input
/// review's finding): each browser gets the cookie the upstream made for it,
/// never another's, on a full response and on a 304 that freshens an entry.
#[tokio::test]
async fn a_set_cookie_never_reaches_another_client() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&sessions);
    let up = Upstream::start(move |seen| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let cookie = format!("session=client-{n}; HttpOnly");
        match seen.path.as_str() {
            "/login" => Reply::ok(
                "welcome",
                &[
                    ("cache-control", "public, max-age=60"),
                    ("set-cookie", &cookie),
                ],
            ),
            // Stored without a cookie; every validation's 304 sets one.
            _ if seen.headers.contains_key("if-none-match") => Reply {
                status: 304,
                headers: vec![("etag", "\"v1\"".into()), ("set-cookie", cookie)],
                ..Reply::default()
            },
            _ => Reply::ok("page", &[("cache-control", "no-cache"), ("etag", "\"v1\"")]),
        }
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);

    let first = get(gw, "/login", up.addr).await?;
    assert_eq!((first.status, first.text().as_str()), (200, "welcome"));
    assert_eq!(cookies(&first), ["session=client-1; HttpOnly"]);
    let second = get(gw, "/login", up.addr).await?;
    assert_eq!((second.status, second.text().as_str()), (200, "welcome"));
    assert_eq!(cookies(&second), ["session=client-2; HttpOnly"]);
    assert_eq!(
        up.count("/login"),
        2,
        "a response with Set-Cookie is not stored"
    );

    let page = get(gw, "/page", up.addr).await?;
    assert_eq!((page.status, cookies(&page).len()), (200, 0));
    wait_for(|| cache.stats().stored == 1).await?;
    for n in [4, 5] {
        let revalidated = get(gw, "/page", up.addr).await?;
        assert_eq!(
            (revalidated.status, revalidated.text().as_str()),
            (200, "page")
        );
        let mine = format!("session=client-{n}; HttpOnly");
        assert_eq!(
            cookies(&revalidated),
            [mine.as_str()],
            "only its own 304's cookie"
        );
    }
    assert_eq!(up.count("/page"), 3);
    assert_eq!(cache.stats().stored, 1, "nothing else was stored");
    Ok(())
}

/// A site that reflects X-Forwarded-Host into a cacheable page: one client's
/// forged field must never reach another browser through the cache, nor may
/// a GET body (chunked here) that the site answers by.
#[tokio::test]
async fn unkeyed_inputs_never_poison_the_cache() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| {
        let host = seen
            .headers
            .get("x-forwarded-host")
            .map_or("clean", String::as_str);
        let body = if seen.headers.contains_key("content-length") {
            "answered by the body".to_owned()
        } else {
            format!("<script src=\"http://{host}/app.js\">")
        };
        Reply::ok(&body, &[("cache-control", "public, max-age=60")])
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);

    let forged = request(
        gw,
        "GET",
        "/p",
        up.addr,
        "x-forwarded-host: evil.example\r\n",
    )
    .await?;
    assert_eq!(forged.text(), "<script src=\"http://evil.example/app.js\">");
    let raw = format!(
        "GET /p HTTP/1.1\r\nhost: {}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
        up.addr
    );
    let with_body = exchange(gw, raw.as_bytes())
        .await?
        .into_iter()
        .next()
        .context("no response")?;
    assert_eq!(with_body.text(), "answered by the body");
    assert_eq!(cache.stats().stored, 0, "neither response was stored");

    let clean = get(gw, "/p", up.addr).await?;
    assert_eq!(clean.text(), "<script src=\"http://clean/app.js\">");
    wait_for(|| cache.stats().stored == 1).await?;
    // The clean entry is not handed to a request that carries the field.
    let forged = request(
        gw,
        "GET",
        "/p",
        up.addr,
        "x-forwarded-host: evil.example\r\n",
    )
    .await?;
    assert_eq!(forged.text(), "<script src=\"http://evil.example/app.js\">");
    let hit = get(gw, "/p", up.addr).await?;
    assert_eq!(hit.text(), "<script src=\"http://clean/app.js\">");
    assert_eq!(up.count("/p"), 4, "the last request was a hit");
    Ok(())
}

#[tokio::test]
async fn a_stale_entry_is_validated_and_a_304_freshens_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| {
        if seen.headers.get("if-none-match").map(String::as_str) == Some("\"v1\"") {
            return Reply {
                status: 304,
                headers: vec![("etag", "\"v1\"".into()), ("x-fresh", "yes".into())],
                ..Reply::default()
            };
        }
        Reply::ok(
            "stored body",
            &[("cache-control", "no-cache"), ("etag", "\"v1\"")],
        )
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    get(gw, "/v", up.addr).await?;
    wait_for(|| cache.stats().stored == 1).await?;
    let second = get(gw, "/v", up.addr).await?;
    assert_eq!(
        (second.status, second.text().as_str()),
        (200, "stored body")
    );
    let validation = up.last("/v").context("validation")?;
    assert_eq!(
        validation.headers.get("if-none-match").map(String::as_str),
        Some("\"v1\"")
    );
    assert_eq!(
        second.header("x-fresh"),
        Some("yes"),
        "the 304's fields were merged"
    );
    let stats = cache.stats();
    assert_eq!((stats.validations, stats.revalidated), (1, 1));
    // The browser's own conditional is answered by the cache after validation.
    let third = request(gw, "GET", "/v", up.addr, "if-none-match: \"v1\"\r\n").await?;
    assert_eq!(third.status, 304);
    assert!(third.body.is_empty());
    Ok(())
}

/// RFC 5861: an origin that fails a validation with 503 is stood in for by
/// the stale entry its `stale-if-error` allows; the entry stays.
#[tokio::test]
async fn stale_if_error_answers_from_the_entry_when_the_origin_fails() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| {
        if seen.headers.contains_key("if-none-match") {
            return Reply {
                status: 503,
                body: b"origin down".to_vec(),
                ..Reply::default()
            };
        }
        Reply::ok(
            "stored body",
            &[
                ("cache-control", "max-age=0, stale-if-error=600"),
                ("etag", "\"v1\""),
            ],
        )
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    get(gw, "/s", up.addr).await?;
    wait_for(|| cache.stats().stored == 1).await?;
    for _ in 0..2 {
        let answer = get(gw, "/s", up.addr).await?;
        assert_eq!(
            (answer.status, answer.text().as_str()),
            (200, "stored body")
        );
    }
    assert_eq!(up.count("/s"), 3, "each stale request was validated");
    assert_eq!(cache.stats().entries, 1);
    Ok(())
}

/// RFC 5861, section 4, extended to an origin that cannot be reached at all
/// (issue 14): the stale entry its `stale-if-error` allows answers instead of
/// the gateway's 502, with validators or without (an entry the client would
/// have refetched); the entry stays. Past must-revalidate, the 502 stands.
#[tokio::test]
async fn stale_if_error_answers_when_the_destination_is_unreachable() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| match seen.path.as_str() {
        "/v" => Reply::ok(
            "validated body",
            &[
                ("cache-control", "max-age=0, stale-if-error=600"),
                ("etag", "\"v1\""),
            ],
        ),
        "/n" => Reply::ok(
            "plain body",
            &[("cache-control", "max-age=600, stale-if-error=600")],
        ),
        _ => Reply::ok(
            "strict body",
            &[
                (
                    "cache-control",
                    "max-age=0, must-revalidate, stale-if-error=600",
                ),
                ("etag", "\"m1\""),
            ],
        ),
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    for path in ["/v", "/n", "/m"] {
        get(gw, path, up.addr).await?;
    }
    wait_for(|| cache.stats().stored == 3).await?;
    up.stop().await;

    let answer = get(gw, "/v", up.addr).await?;
    assert_eq!(
        (answer.status, answer.text().as_str()),
        (200, "validated body")
    );
    // Fresh, but the client asks for max-age=0: refetched, not validated.
    let answer = request(gw, "GET", "/n", up.addr, "cache-control: max-age=0\r\n").await?;
    assert_eq!((answer.status, answer.text().as_str()), (200, "plain body"));
    let answer = get(gw, "/m", up.addr).await?;
    assert_eq!(answer.status, 502, "{}", answer.text());
    assert_eq!(cache.stats().entries, 3, "every entry stays");
    Ok(())
}

/// RFC 5861, section 3: within `stale-while-revalidate`, a stale entry is
/// answered at once while its validation runs behind; the next request gets
/// what the validation stored. The validation's answer is held half-sent
/// until the stale answer has arrived, so a foreground validation (as before)
/// would not finish in time.
#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_validates_behind() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let release = Arc::new(Notify::new());
    let held = Arc::clone(&release);
    let up = Upstream::start(move |seen| {
        let fields: &[(&'static str, &str)] = &[
            ("cache-control", "max-age=0, stale-while-revalidate=600"),
            (
                "etag",
                if seen.headers.contains_key("if-none-match") {
                    "\"v2\""
                } else {
                    "\"v1\""
                },
            ),
        ];
        if seen.headers.contains_key("if-none-match") {
            Reply {
                pause: Some(Arc::clone(&held)),
                ..Reply::ok("second version", fields)
            }
        } else {
            Reply::ok("first version", fields)
        }
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    get(gw, "/s", up.addr).await?;
    wait_for(|| cache.stats().stored == 1).await?;

    let stale = get(gw, "/s", up.addr).await?;
    assert_eq!(
        (stale.status, stale.text().as_str()),
        (200, "first version")
    );
    wait_for(|| up.count("/s") == 2).await?;
    assert_eq!(
        up.last("/s")
            .and_then(|s| s.headers.get("if-none-match").cloned()),
        Some("\"v1\"".to_owned())
    );
    release.notify_one();
    wait_for(|| cache.stats().stored == 2).await?;
    let next = get(gw, "/s", up.addr).await?;
    assert_eq!(next.text(), "second version");
    Ok(())
}

/// Issue 14, faults: a browser that goes away mid-response leaves neither a
/// corrupt nor a partial entry, and holds nothing up: the fill it led goes on
/// for the store, commits the whole body once the upstream sends the rest,
/// and the next browser gets it byte for byte from the cache.
#[tokio::test]
async fn a_browser_leaving_mid_response_leaves_a_whole_entry() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let release = Arc::new(Notify::new());
    let held = Arc::clone(&release);
    let expected: Vec<u8> = (0..512 * 1024).map(|i| (i % 251) as u8).collect();
    let body = expected.clone();
    let up = Upstream::start(move |_| Reply {
        status: 200,
        headers: vec![("cache-control", "max-age=600".to_owned())],
        body: body.clone(),
        pause: Some(Arc::clone(&held)),
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);

    let mut browser = TcpStream::connect(gw).await?;
    let raw = format!("GET /big HTTP/1.1\r\nhost: {}\r\n\r\n", up.addr);
    browser.write_all(raw.as_bytes()).await?;
    let mut received = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(EXCHANGE_TIMEOUT, async {
        // The head and a good part of the first half, then leave.
        while received.len() < 64 * 1024 {
            let n = browser.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "closed before the first half");
            received.extend_from_slice(&buf[..n]);
        }
        Ok(())
    })
    .await
    .context("the first half never came")??;
    drop(browser);
    assert_eq!(cache.stats().stored, 0, "nothing stored before the end");

    release.notify_one();
    wait_for(|| cache.stats().stored == 1).await?;
    let answer = get(gw, "/big", up.addr).await?;
    assert_eq!(answer.status, 200);
    assert!(
        answer.body == expected,
        "the stored body is the upstream's, whole"
    );
    assert_eq!(up.count("/big"), 1, "answered from the cache");
    assert_eq!(cache.stats().entries, 1);
    Ok(())
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop (also
/// when the test fails).
struct TmpfsGuard {
    dir: tempfile::TempDir,
}

impl TmpfsGuard {
    fn mount(size: &str) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()?;
        anyhow::ensure!(status.success(), "mount tmpfs (needs root): {status}");
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        // Lazy: a file the test still holds open must not keep it mounted.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Issue 14, faults: the cache's disk fills up for real (a 6 MiB tmpfs under
/// a 64 MiB budget). Every answer keeps coming whole, from upstream once
/// writes are off; the log says so once; the database reopens with only whole
/// entries, each read back byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tmpfs_turns_caching_off_and_answers_keep_flowing() -> Result<()> {
    let disk = TmpfsGuard::mount("6m")?;
    let payload =
        |i: usize| -> Vec<u8> { (0..900 * 1024).map(|j| ((i * 7 + j) % 253) as u8).collect() };
    let up = Upstream::start(move |seen| {
        let i: usize = seen.path.trim_start_matches("/o").parse().unwrap_or(0);
        Reply {
            status: 200,
            headers: vec![("cache-control", "max-age=600".to_owned())],
            body: payload(i),
            pause: None,
        }
    })
    .await?;
    let path = disk.path().join("c.redb");
    let f = front(up.addr, &path).await?;
    let (gw, cache) = (f.addr, f.cache.clone());
    let mut i = 0;
    while !cache.stats().disabled {
        anyhow::ensure!(i < 40, "the disk never filled: {:?}", cache.stats());
        let answer = get(gw, &format!("/o{i}"), up.addr).await?;
        assert_eq!(answer.status, 200);
        assert!(answer.body == payload(i), "/o{i} whole");
        // Each fill's write finishes after its answer: wait for it to end one
        // way or the other before the next, so the disk fills in order.
        let stored = i as u64 + 1;
        wait_for(|| cache.stats().stored >= stored || cache.stats().disabled).await?;
        i += 1;
    }
    // Caching is off: more answers, whole, each from upstream.
    for j in i..i + 3 {
        let answer = get(gw, &format!("/o{j}"), up.addr).await?;
        assert_eq!(answer.status, 200);
        assert!(answer.body == payload(j), "/o{j} whole");
        assert_eq!(up.count(&format!("/o{j}")), 1);
    }
    let kept = cache.stats().entries;
    assert!(kept >= 1, "something was stored before the disk filled");
    drop(f);
    drop(cache);

    // Reopened (as after a restart, the disk still full): whatever is listed
    // is whole.
    let f = reopen(up.addr, &path).await?;
    let mut hits = 0;
    for j in 0..i {
        let before = up.count(&format!("/o{j}"));
        let answer = get(f.addr, &format!("/o{j}"), up.addr).await?;
        assert_eq!(answer.status, 200);
        assert!(answer.body == payload(j), "/o{j} whole after the reopen");
        if up.count(&format!("/o{j}")) == before {
            hits += 1;
        }
    }
    assert_eq!(hits, kept, "every entry kept answers from the cache");
    Ok(())
}

#[tokio::test]
async fn head_range_and_conditionals_are_answered_from_a_stored_get() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let body: String = (0..1000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let stored = body.clone();
    let up = Upstream::start(move |_| {
        Reply::ok(
            &stored,
            &[("cache-control", "max-age=600"), ("etag", "\"r1\"")],
        )
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    get(gw, "/r", up.addr).await?;
    wait_for(|| cache.stats().stored == 1).await?;

    let head = request(gw, "HEAD", "/r", up.addr, "").await;
    // A HEAD answer carries the GET's Content-Length and no body; the raw
    // parser would wait for the body, so read it by hand.
    drop(head);
    let mut stream = TcpStream::connect(gw).await?;
    stream
        .write_all(
            format!(
                "HEAD /r HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
                up.addr
            )
            .as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("content-length: 1000"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "no body after a HEAD: {text}");

    let range = request(gw, "GET", "/r", up.addr, "range: bytes=10-19\r\n").await?;
    assert_eq!(range.status, 206);
    assert_eq!(range.text(), &body[10..20]);
    assert_eq!(range.header("content-range"), Some("bytes 10-19/1000"));
    let beyond = request(gw, "GET", "/r", up.addr, "range: bytes=5000-\r\n").await?;
    assert_eq!(beyond.status, 416);
    let not_modified = request(gw, "GET", "/r", up.addr, "if-none-match: W/\"r1\"\r\n").await?;
    assert_eq!(not_modified.status, 304);
    assert_eq!(up.count("/r"), 1, "all of it from the stored GET");
    Ok(())
}

#[tokio::test]
async fn an_unsafe_request_invalidates_its_target_and_location() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| {
        if seen.method == "POST" {
            return Reply::ok("posted", &[("location", "/other")]);
        }
        Reply::ok(
            &format!("version {}", seen.path),
            &[("cache-control", "max-age=600")],
        )
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    get(gw, "/p", up.addr).await?;
    get(gw, "/other", up.addr).await?;
    wait_for(|| cache.stats().stored == 2).await?;
    get(gw, "/p", up.addr).await?;
    assert_eq!(up.count("/p"), 1);
    let post = request(gw, "POST", "/p", up.addr, "content-length: 0\r\n").await?;
    assert_eq!(post.status, 200);
    get(gw, "/p", up.addr).await?;
    get(gw, "/other", up.addr).await?;
    assert_eq!(up.count("/p"), 3, "GET, POST, GET after invalidation");
    assert_eq!(up.count("/other"), 2, "Location was invalidated too");
    assert_eq!(cache.stats().invalidations, 1);
    Ok(())
}

#[tokio::test]
async fn vary_keeps_one_entry_per_variant() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| {
        let lang = seen
            .headers
            .get("accept-language")
            .cloned()
            .unwrap_or_default();
        Reply::ok(
            &format!("text in {lang}"),
            &[
                ("cache-control", "max-age=600"),
                ("vary", "Accept-Language"),
            ],
        )
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    for (lang, stored) in [("de", 1), ("fr", 2)] {
        let a = request(
            gw,
            "GET",
            "/t",
            up.addr,
            &format!("accept-language: {lang}\r\n"),
        )
        .await?;
        assert_eq!(a.text(), format!("text in {lang}"));
        wait_for(|| cache.stats().stored == stored).await?;
    }
    for lang in ["de", "fr"] {
        let a = request(
            gw,
            "GET",
            "/t",
            up.addr,
            &format!("accept-language: {lang}\r\n"),
        )
        .await?;
        assert_eq!(a.text(), format!("text in {lang}"));
    }
    assert_eq!(up.count("/t"), 2, "each variant fetched once");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_share_one_fetch_and_stream_before_it_completes() -> Result<()> {
    const N: usize = 16;
    let dir = tempfile::tempdir()?;
    let pause = Arc::new(Notify::new());
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (reply_pause, reply_body) = (Arc::clone(&pause), body.clone());
    let up = Upstream::start(move |_| Reply {
        status: 200,
        headers: vec![("cache-control", "max-age=600".into())],
        body: reply_body.clone(),
        pause: Some(Arc::clone(&reply_pause)),
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    // N browsers ask at once; each reads its head and the first half, which
    // the upstream sends before it pauses.
    let mut readers = Vec::new();
    for _ in 0..N {
        let mut stream = TcpStream::connect(gw).await?;
        stream
            .write_all(
                format!(
                    "GET /big HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
                    up.addr
                )
                .as_bytes(),
            )
            .await?;
        readers.push(stream);
    }
    let half = body.len() / 2;
    let mut received = Vec::new();
    for stream in &mut readers {
        let mut got = Vec::new();
        let mut buf = vec![0; 65536];
        // Every reader sees at least the first half while the upstream is
        // still paused: followers stream, they do not wait for the end.
        while body_bytes(&got) < half {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
                .await
                .context("no first half while the upstream is paused")??;
            anyhow::ensure!(n > 0, "closed early");
            got.extend_from_slice(&buf[..n]);
        }
        received.push(got);
    }
    assert_eq!(up.count("/big"), 1, "one upstream fetch for {N} browsers");
    pause.notify_one();
    for (stream, got) in readers.iter_mut().zip(&mut received) {
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(got)).await??;
        let answers = http_support::parse_responses(got)?;
        assert_eq!(answers[0].status, 200);
        assert!(answers[0].body == body, "identical bodies");
    }
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.coalesced), (1, N as u64 - 1));
    wait_for(|| cache.stats().stored == 1).await?;
    Ok(())
}

/// Sends a GET for `path` and reads until the head and `at_least` body bytes
/// have arrived (within 10 s).
async fn get_until(
    gw: SocketAddr,
    path: &str,
    host: SocketAddr,
    at_least: usize,
) -> Result<(TcpStream, Vec<u8>)> {
    let mut stream = TcpStream::connect(gw).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut got = Vec::new();
    let mut buf = vec![0; 65536];
    while body_bytes(&got) < at_least {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .with_context(|| format!("{path}: not {at_least} body bytes in time"))??;
        anyhow::ensure!(n > 0, "{path}: closed early");
        got.extend_from_slice(&buf[..n]);
    }
    Ok((stream, got))
}

/// A request that joins a fetch in flight takes the leader's response only
/// where it could take the stored entry (RFC 9111, section 4). The exact
/// cases an independent conformance run (http-tests/cache-tests: Expires
/// freshness and parsing) found reused: `Expires` equal to `Date`
/// (freshness-expires-present), an `Age` past `Expires` minus a `Date` that
/// is behind (freshness-expires-age-slow-date), and `Expires` values that are
/// not HTTP dates (freshness-expires-invalid-time-periods,
/// -invalid-1-digit-hour). The policy judged each right on its own; the
/// second request of such a test, sent as the first answer ends, joined the
/// flight that was still held for the store's writer and was answered from
/// it. Here the leader's upstream pauses mid-body so that the second request
/// surely arrives while the flight is in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_joins_a_fetch_whose_response_is_stale_on_arrival() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pause = Arc::new(Notify::new());
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (reply_pause, reply_body) = (Arc::clone(&pause), body.clone());
    let asked: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let up = Upstream::start(move |seen| {
        let now = std::time::SystemTime::now();
        let date = |offset: i64| {
            let at = if offset < 0 {
                now - Duration::from_secs(offset.unsigned_abs())
            } else {
                now + Duration::from_secs(offset as u64)
            };
            httpdate::fmt_http_date(at)
        };
        let headers: Vec<(&'static str, String)> = match seen.path.as_str() {
            "/expires-is-date" => vec![("date", date(0)), ("expires", date(0))],
            "/age-past-a-slow-date" => vec![
                ("date", date(-10)),
                ("expires", date(10)),
                ("age", "25".into()),
            ],
            "/expires-dotted" => vec![
                ("date", date(0)),
                ("expires", "Thu, 18 Aug 2050 02.01.18 GMT".into()),
            ],
            "/expires-one-digit-hour" => vec![
                ("date", date(0)),
                ("expires", "Thu, 18 Aug 2050 2:01:18 GMT".into()),
            ],
            // The control: fresh for an hour, so the second request joins.
            _ => vec![("date", date(0)), ("expires", date(3600))],
        };
        // Only the first request for a path pauses mid-body.
        let first = {
            let mut asked = lock(&asked);
            let n = asked.entry(seen.path.clone()).or_default();
            *n += 1;
            *n == 1
        };
        Reply {
            status: 200,
            headers,
            body: reply_body.clone(),
            pause: first.then(|| Arc::clone(&reply_pause)),
        }
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    let half = body.len() / 2;
    for path in [
        "/expires-is-date",
        "/age-past-a-slow-date",
        "/expires-dotted",
        "/expires-one-digit-hour",
        "/fresh",
    ] {
        let coalesced_before = cache.stats().coalesced;
        let (mut leader, mut got) = get_until(gw, path, up.addr, half).await?;
        let mut others = Vec::new();
        if path == "/fresh" {
            // Joins: the first half arrives while the upstream still pauses.
            let (follower, follower_got) = get_until(gw, path, up.addr, half).await?;
            assert_eq!(up.count(path), 1, "{path}: one upstream fetch");
            assert_eq!(cache.stats().coalesced, coalesced_before + 1);
            others.push((follower, follower_got));
        } else {
            // Fetches alone: the whole answer, while the leader's is paused.
            let (follower, follower_got) = get_until(gw, path, up.addr, body.len()).await?;
            assert_eq!(
                up.count(path),
                2,
                "{path}: the second request went upstream"
            );
            assert_eq!(cache.stats().coalesced, coalesced_before, "{path}");
            others.push((follower, follower_got));
        }
        pause.notify_one();
        tokio::time::timeout(Duration::from_secs(10), leader.read_to_end(&mut got)).await??;
        let answers = http_support::parse_responses(&got)?;
        assert!(
            answers[0].status == 200 && answers[0].body == body,
            "{path}: leader"
        );
        for (mut stream, mut got) in others {
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await??;
            let answers = http_support::parse_responses(&got)?;
            assert!(
                answers[0].status == 200 && answers[0].body == body,
                "{path}: follower"
            );
        }
    }
    Ok(())
}

/// Body bytes in a raw response received so far.
fn body_bytes(raw: &[u8]) -> usize {
    raw.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |end| raw.len() - end - 4)
}

#[tokio::test]
async fn entries_survive_a_restart_and_purge_removes_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("c.redb");
    let up = Upstream::start(|_| Reply::ok("kept", &[("cache-control", "max-age=600")])).await?;
    {
        let f = front(up.addr, &path).await?;
        get(f.addr, "/k", up.addr).await?;
        get(f.addr, "/k2", up.addr).await?;
        wait_for(|| f.cache.stats().stored == 2).await?;
    }
    // Dropping the front stopped its accept loop; the database closes once
    // the last task holding the store is gone.
    let f = reopen(up.addr, &path).await?;
    let (gw, cache) = (f.addr, &f.cache);
    let again = get(gw, "/k", up.addr).await?;
    assert_eq!(again.text(), "kept");
    assert_eq!(up.count("/k"), 1, "served from the reopened file");
    assert_eq!(
        (cache.stats().hits, cache.stats().memory_hits),
        (1, 0),
        "the first hit after a restart reads the file"
    );
    get(gw, "/k", up.addr).await?;
    assert_eq!(
        cache.stats().memory_hits,
        1,
        "and promotes the entry into memory"
    );
    let removed = cache
        .purge(gateway::cache::Purge::Url(format!("http://{}/k", up.addr)))
        .await?;
    assert_eq!(removed, 1);
    get(gw, "/k", up.addr).await?;
    assert_eq!(up.count("/k"), 2);
    get(gw, "/k2", up.addr).await?;
    assert_eq!(up.count("/k2"), 1, "purge took only its URL");
    Ok(())
}

/// A second front on the same file: the first one's store must be gone.
async fn reopen(dst: SocketAddr, path: &Path) -> Result<TestFront> {
    for _ in 0..50 {
        match front(dst, path).await {
            Ok(pair) => return Ok(pair),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    front(dst, path).await
}

/// Polls `condition` for up to five seconds.
async fn wait_for(condition: impl Fn() -> bool) -> Result<()> {
    for _ in 0..500 {
        if condition() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("condition not met within 5 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_races_an_invalidation_is_not_stored() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pause = Arc::new(Notify::new());
    let reply_pause = Arc::clone(&pause);
    let up = Upstream::start(move |seen| {
        if seen.method == "POST" {
            return Reply::ok("changed", &[]);
        }
        Reply {
            status: 200,
            headers: vec![("cache-control", "max-age=600".into())],
            body: vec![b'o'; 10_000],
            pause: Some(Arc::clone(&reply_pause)),
        }
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    // The GET's response is half-way through when the POST changes the resource.
    let host = up.addr;
    let slow_get = tokio::spawn(async move { get(gw, "/race", host).await });
    wait_for(|| up.count("/race") == 1).await?;
    let post = request(gw, "POST", "/race", up.addr, "content-length: 0\r\n").await?;
    assert_eq!(post.status, 200);
    pause.notify_one();
    let old = slow_get.await??;
    assert_eq!(
        old.body.len(),
        10_000,
        "the browser still gets the old body"
    );
    // The old response must not have become visible after the invalidation.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cache.stats().entries, 0);
    pause.notify_one();
    let again = get(gw, "/race", up.addr).await?;
    assert_eq!(again.body.len(), 10_000);
    assert_eq!(up.count("/race"), 3, "GET, POST, GET again upstream");
    Ok(())
}

#[tokio::test]
async fn the_admin_endpoint_reports_metrics_and_stats_and_purges() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|_| Reply::ok("m", &[("cache-control", "max-age=600")])).await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    get(gw, "/m1", up.addr).await?;
    get(gw, "/m2", up.addr).await?;
    wait_for(|| cache.stats().stored == 2).await?;
    get(gw, "/m1", up.addr).await?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let admin = listener.local_addr()?;
    let (_stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(gateway::admin::serve(
        listener,
        cache.clone(),
        None,
        stop_rx,
    ));

    let stats = gateway::admin::fetch_stats(admin).await?;
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 2, 2));
    assert!((stats.hit_ratio - 1.0 / 3.0).abs() < 1e-9, "{stats:?}");

    let mut stream = TcpStream::connect(admin).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    for line in [
        "gateway_cache_lookups_total{outcome=\"hit\"} 1",
        "gateway_cache_lookups_total{outcome=\"miss\"} 2",
        "gateway_cache_entries 2",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }

    let removed =
        gateway::admin::request_purge(admin, &gateway::cache::Purge::Host("127.0.0.1".into()))
            .await?;
    assert_eq!(removed, 2);
    assert_eq!(cache.stats().entries, 0);
    Ok(())
}

/// `GET /metrics` from the admin endpoint at `admin`.
async fn scrape(admin: SocketAddr) -> Result<String> {
    let mut stream = TcpStream::connect(admin).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// Whether `text` has a line `{name}{labels...}{rest}` whose labels contain
/// `with`.
fn has_series(text: &str, name: &str, with: &str, rest: &str) -> bool {
    text.lines().any(|line| {
        line.strip_prefix(name)
            .and_then(|line| line.strip_prefix('{'))
            .is_some_and(|line| line.contains(with) && line.ends_with(rest))
    })
}

/// Every byte the browser reads, heads included, is counted under its
/// address in `gateway_client_sent_bytes_total`, a miss and a hit alike.
#[tokio::test]
async fn the_metrics_count_the_bytes_sent_to_each_client() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let body = "x".repeat(10_000);
    let reply_body = body.clone();
    let up = Upstream::start(move |_| Reply::ok(&reply_body, &[("cache-control", "max-age=600")]))
        .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let mut received = 0u64;
    for _ in 0..2 {
        let mut stream = TcpStream::connect(f.addr).await?;
        let raw = format!(
            "GET /b HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            up.addr
        );
        stream.write_all(raw.as_bytes()).await?;
        let mut answer = Vec::new();
        tokio::time::timeout(EXCHANGE_TIMEOUT, stream.read_to_end(&mut answer)).await??;
        assert!(answer.ends_with(body.as_bytes()), "{}", answer.len());
        received += answer.len() as u64;
        wait_for(|| f.cache.stats().stored == 1).await?;
    }
    assert_eq!(up.count("/b"), 1, "the second was a hit");
    let counted = || {
        f.metrics
            .clients()
            .snapshot()
            .0
            .iter()
            .find(|(ip, _)| ip.to_string() == "127.0.0.1")
            .map_or(0, |(_, bytes)| *bytes)
    };
    wait_for(|| counted() == received).await?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let admin = listener.local_addr()?;
    let (_stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(gateway::admin::serve_with(
        listener,
        f.cache.clone(),
        None,
        vec![f.metrics.collector()],
        stop_rx,
    ));
    let text = scrape(admin).await?;
    for line in [
        "# TYPE gateway_client_sent_bytes counter".to_owned(),
        format!("gateway_client_sent_bytes_total{{client=\"127.0.0.1\"}} {received}"),
        "gateway_client_sent_bytes_total{client=\"other\"} 0".to_owned(),
    ] {
        assert!(text.contains(&line), "{line} missing from:\n{text}");
    }
    Ok(())
}

/// An HTML page through the front (prefetch on for direct routes) is listed
/// by `GET /pages/recent` with its prefetches: two images issued, one of them
/// asked for by the browser afterwards (used), although the page's connection
/// closed right after it.
#[tokio::test]
async fn recent_pages_list_a_page_with_its_prefetches() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|seen| match seen.path.as_str() {
        "/" => Reply::ok(
            "<!DOCTYPE html><html><body><img src=\"/a.png\"><img src=\"/b.png\"></body></html>",
            &[("content-type", "text/html"), ("cache-control", "no-cache")],
        ),
        _ => Reply::ok(
            "png",
            &[
                ("content-type", "image/png"),
                ("cache-control", "max-age=600"),
            ],
        ),
    })
    .await?;
    let f = front_with(up.addr, &dir.path().join("c.redb"), |c| {
        c.prefetch.enabled_for_direct = true;
    })
    .await?;
    let prefetcher = f.prefetcher.clone().context("prefetch is on")?;
    // Like curl, the client closes its connection as soon as it has the
    // page: the page must count as loaded, not abandoned, or nothing would
    // be prefetched for it.
    let page = get(f.addr, "/", up.addr).await?;
    assert_eq!(page.status, 200);
    wait_for(|| prefetcher.stats().completed == 2)
        .await
        .with_context(|| format!("{:?}", prefetcher.stats()))?;
    assert_eq!(get(f.addr, "/a.png", up.addr).await?.status, 200);
    wait_for(|| prefetcher.stats().used == 1)
        .await
        .with_context(|| format!("{:?}", prefetcher.stats()))?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let admin = listener.local_addr()?;
    let (_stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(gateway::admin::serve(
        listener,
        f.cache.clone(),
        Some(Arc::clone(&prefetcher)),
        stop_rx,
    ));
    let mut stream = TcpStream::connect(admin).await?;
    stream
        .write_all(b"GET /pages/recent HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(EXCHANGE_TIMEOUT, stream.read_to_end(&mut raw)).await??;
    let text = String::from_utf8(raw)?;
    let (_, body) = text.split_once("\r\n\r\n").context("no end of head")?;
    let recent: RecentPages = serde_json::from_str(body)?;
    assert!(recent.prefetch);
    let [listed] = recent.pages.as_slice() else {
        anyhow::bail!("one page expected: {body}");
    };
    assert_eq!(listed.url, format!("http://{}/", up.addr));
    assert_eq!(listed.state, PageState::Loaded, "{body}");
    assert_eq!(
        (
            listed.outcome.issued,
            listed.outcome.used,
            listed.outcome.wasted,
            listed.outcome.failed
        ),
        (2, 1, 0, 0),
        "{body}"
    );
    Ok(())
}

/// After a miss, a hit, a refused CONNECT and a malformed head, `/metrics`
/// has the request durations per route and cache outcome and the errors by
/// side; a destination that refuses connections counts on the origin side.
#[tokio::test]
async fn the_metrics_have_request_durations_and_errors_by_side() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let up = Upstream::start(|_| Reply::ok("d", &[("cache-control", "max-age=600")])).await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let gw = f.addr;
    get(gw, "/d", up.addr).await?;
    wait_for(|| f.cache.stats().stored == 1).await?;
    get(gw, "/d", up.addr).await?;
    let connect = request(gw, "CONNECT", &up.addr.to_string(), up.addr, "").await?;
    assert_eq!(connect.status, 405);
    let mut malformed = TcpStream::connect(gw).await?;
    malformed
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n")
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(EXCHANGE_TIMEOUT, malformed.read_to_end(&mut raw)).await??;
    assert!(
        raw.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    // hyper's error reaches the front when the connection ends, after the 400.
    wait_for(|| f.metrics.errors(Side::Browser) == 2).await?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let admin = listener.local_addr()?;
    let (_stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(gateway::admin::serve_with(
        listener,
        f.cache.clone(),
        None,
        vec![f.metrics.collector()],
        stop_rx,
    ));
    let text = scrape(admin).await?;
    for line in [
        "# TYPE gateway_request_duration_seconds histogram",
        "gateway_request_errors_total{side=\"browser\"} 2",
        "gateway_request_errors_total{side=\"origin\"} 0",
        "gateway_request_errors_total{side=\"internal\"} 0",
        "gateway_request_duration_seconds_count{route=\"cache\",cache=\"hit\"} 1",
        "gateway_request_duration_seconds_count{route=\"refused\",cache=\"-\"} 1",
        "gateway_request_duration_seconds_bucket{le=\"30.0\",route=\"cache\",cache=\"hit\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(
        has_series(
            &text,
            "gateway_request_duration_seconds_count",
            "cache=\"miss\"",
            "} 1"
        ),
        "no miss counted in:\n{text}"
    );

    // Nobody listens at the destination: 502, the origin side's failure.
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let dead = front(closed, &dir.path().join("dead.redb")).await?;
    let refused = get(dead.addr, "/x", closed).await?;
    assert_eq!(refused.status, 502);
    assert_eq!(dead.metrics.errors(Side::Origin), 1);
    assert_eq!(dead.metrics.errors(Side::Browser), 0);
    Ok(())
}

/// The Age a hit carries, as a number.
fn age_of(answer: &Answer) -> Result<u64> {
    Ok(answer.header("age").context("no Age")?.parse()?)
}

#[tokio::test]
async fn rfc9111_field_edge_cases_through_the_front() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let far = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3600));
    let up = Upstream::start(move |seen| {
        let etag = ("etag", "\"v\"");
        match seen.path.as_str() {
            "/age-list" => Reply::ok(
                "x",
                &[("cache-control", "max-age=600"), ("age", "100, 300")],
            ),
            "/age-bad" => Reply::ok("x", &[("cache-control", "max-age=600"), ("age", "-100")]),
            "/expires-twice" => Reply::ok("x", &[("expires", &far), ("expires", &far)]),
            "/expires-zero" => Reply::ok("x", &[("expires", "0")]),
            "/upper" => Reply::ok("x", &[("cache-control", "MAX-AGE=60")]),
            "/quoted" => Reply::ok("x", &[("cache-control", "max-age=\"60\"")]),
            "/cdn" => Reply::ok(
                "x",
                &[
                    ("cache-control", "no-store"),
                    ("cdn-cache-control", "max-age=600"),
                ],
            ),
            "/no-cache-fields" => Reply::ok(
                "x",
                &[
                    ("cache-control", "no-cache=\"set-cookie\", max-age=60"),
                    etag,
                ],
            ),
            "/599" | "/403" => Reply {
                status: seen.path[1..].parse().unwrap_or(500),
                ..Reply::ok("status", &[("cache-control", "max-age=60")])
            },
            _ => Reply::ok("x", &[]),
        }
    })
    .await?;
    let f = front(up.addr, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    let paths = [
        "/age-list",
        "/age-bad",
        "/expires-twice",
        "/expires-zero",
        "/upper",
        "/quoted",
        "/cdn",
        "/no-cache-fields",
        "/599",
        "/403",
    ];
    for path in paths {
        get(gw, path, up.addr).await?;
    }
    // Everything but /cdn (no-store) is stored, fresh or not.
    wait_for(|| cache.stats().stored == paths.len() as u64 - 1).await?;
    let mut second = HashMap::new();
    for path in paths {
        second.insert(path, get(gw, path, up.addr).await?);
    }
    let hits = ["/age-list", "/age-bad", "/upper", "/quoted", "/599", "/403"];
    for path in hits {
        assert_eq!(up.count(path), 1, "{path} must be a hit");
    }
    // RFC 9111, section 5.1: the first member of a list-based Age counts; an
    // invalid Age is ignored.
    let listed = age_of(&second["/age-list"])?;
    assert!((100..300).contains(&listed), "Age {listed}");
    assert!(age_of(&second["/age-bad"])? < 100);
    assert_eq!((second["/599"].status, second["/403"].status), (599, 403));
    // Section 5.3: a repeated or invalid Expires is already expired; RFC 9213:
    // CDN-Cache-Control does not override Cache-Control here.
    for path in ["/expires-twice", "/expires-zero", "/cdn"] {
        assert_eq!(up.count(path), 2, "{path} must go upstream again");
    }
    // Section 5.2.2.4: a qualified no-cache validates every time.
    assert_eq!(up.count("/no-cache-fields"), 2);
    let validation = up.last("/no-cache-fields").context("no validation")?;
    assert_eq!(
        validation.headers.get("if-none-match").map(String::as_str),
        Some("\"v\"")
    );
    Ok(())
}

/// An upstream written by hand, since hyper cannot send an interim response:
/// each request is answered with `103 Early Hints`, then `200` with `max-age`.
async fn early_hints_upstream() -> Result<(SocketAddr, Arc<std::sync::atomic::AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n\
                          HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\n\
                          content-length: 5\r\nconnection: close\r\n\r\nhello",
                    )
                    .await;
            });
        }
    });
    Ok((addr, requests))
}

#[tokio::test]
async fn an_interim_response_is_never_stored_and_100_continue_reaches_the_browser() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (origin, requests) = early_hints_upstream().await?;
    let f = front(origin, &dir.path().join("c.redb")).await?;
    let (gw, cache) = (f.addr, &f.cache);
    // The final response is what the browser gets and what is stored; the
    // 103's fields are not folded into it.
    let first = get(gw, "/page", origin).await?;
    assert_eq!((first.status, first.text().as_str()), (200, "hello"));
    assert_eq!(first.header("link"), None);
    wait_for(|| cache.stats().stored == 1).await?;
    let second = get(gw, "/page", origin).await?;
    assert_eq!((second.status, second.text().as_str()), (200, "hello"));
    assert_eq!(second.header("link"), None);
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(cache.stats().entries, 1);

    // A browser that waits for 100 Continue before its body gets it, then the
    // final answer (RFC 9110, section 10.1.1).
    let up = Upstream::start(|_| Reply::ok("posted", &[])).await?;
    let f = front(up.addr, &dir.path().join("d.redb")).await?;
    let mut browser = TcpStream::connect(f.addr).await?;
    let head = format!(
        "POST /form HTTP/1.1\r\nhost: {}\r\nexpect: 100-continue\r\n\
         content-length: 5\r\nconnection: close\r\n\r\n",
        up.addr
    );
    browser.write_all(head.as_bytes()).await?;
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut got = vec![0u8; interim.len()];
    tokio::time::timeout(EXCHANGE_TIMEOUT, browser.read_exact(&mut got))
        .await
        .context("no 100 Continue before the body")??;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(interim)
    );
    browser.write_all(b"a=b&c").await?;
    let mut rest = Vec::new();
    tokio::time::timeout(EXCHANGE_TIMEOUT, browser.read_to_end(&mut rest))
        .await
        .context("no final answer")??;
    let answers = http_support::parse_responses(&rest)?;
    assert_eq!(answers.len(), 1);
    assert_eq!(
        (answers[0].status, answers[0].text().as_str()),
        (200, "posted")
    );
    assert_eq!(up.count("/form"), 1);
    Ok(())
}
