//! The operator's endpoint: a small HTTP/1.1 server on loopback (`[admin]`).
//!
//! | request | answer |
//! |---|---|
//! | `GET /` | the status page: HTML that reads `/metrics` every 2 s (docs/operations.md, "Status page") |
//! | `GET /status.js`, `GET /status.css`, `GET /favicon.svg` | its script, style sheet and icon |
//! | `GET /metrics` | OpenMetrics text (Prometheus), encoded by `prometheus-client`; docs/operations.md lists the metrics |
//! | `GET /cache/stats` | [`CacheStats`](crate::cache::CacheStats) as JSON |
//! | `POST /cache/purge?url=U` (or `prefix=P`, `host=H`) | `{"removed": N}` |
//! | `GET /prefetch/stats` | [`PrefetchStats`] as JSON |
//! | `GET /pages/recent` | [`RecentPages`]: the last pages scanned for prefetch, newest first, with their outcome (issued, used, wasted) |
//!
//! `gateway cache stats|purge` are its command-line clients. It listens on
//! loopback by default: whoever can reach it can purge the cache.
//!
//! The status page is four files under `admin/status/`, built into the
//! binary as they are (no front-end build step). It only reads `/metrics`
//! and `/pages/recent`;
//! its script, not this server, computes ratios and rates. Its answers carry a
//! Content-Security-Policy that lets it load nothing but itself
//! ([`STATUS_PAGE_CSP`]), and `Cache-Control: no-store`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::cache::{Cache, CacheStats, Purge};
use crate::prefetch::{PrefetchStats, Prefetcher, RecentPage};
use crate::sync::stopped;

/// The status page's Content-Security-Policy: scripts, styles and fetches
/// from the admin endpoint itself, nothing inline, no frames, no forms.
pub const STATUS_PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The status page's files: path, content type, text.
const STATUS_PAGE: [(&str, &str, &str); 4] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("admin/status/index.html"),
    ),
    (
        "/status.js",
        "text/javascript; charset=utf-8",
        include_str!("admin/status/status.js"),
    ),
    (
        "/status.css",
        "text/css; charset=utf-8",
        include_str!("admin/status/status.css"),
    ),
    (
        "/favicon.svg",
        "image/svg+xml",
        include_str!("admin/status/favicon.svg"),
    ),
];

/// `POST /cache/purge`'s answer.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Purged {
    /// Entries removed.
    pub removed: u64,
}

/// `GET /pages/recent`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecentPages {
    /// False when `[prefetch]` is off for every route: no page is scanned,
    /// and `pages` stays empty.
    pub prefetch: bool,
    /// The last pages scanned (at most
    /// [`MAX_RECENT_PAGES`](crate::prefetch::queue::MAX_RECENT_PAGES)), newest
    /// first.
    pub pages: Vec<RecentPage>,
}

/// Serves the endpoint on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    cache: Cache,
    prefetcher: Option<Arc<Prefetcher>>,
    shutdown: watch::Receiver<bool>,
) {
    serve_with(listener, cache, prefetcher, Vec::new(), shutdown).await;
}

/// [`serve`], with more figures on `/metrics` (the origin links' per-stream
/// backlog, say).
pub async fn serve_with(
    listener: TcpListener,
    cache: Cache,
    prefetcher: Option<Arc<Prefetcher>>,
    collectors: Vec<Box<dyn Collector>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut registry = Registry::default();
    for collector in collectors {
        registry.register_collector(collector);
    }
    registry.register_collector(Box::new(CacheCollector(cache.clone())));
    if let Some(prefetcher) = &prefetcher {
        registry.register_collector(Box::new(PrefetchCollector(Arc::clone(prefetcher))));
    }
    let registry = Arc::new(registry);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut shutdown) => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let (cache, registry, prefetcher) =
            (cache.clone(), Arc::clone(&registry), prefetcher.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let (cache, registry, prefetcher) =
                    (cache.clone(), Arc::clone(&registry), prefetcher.clone());
                async move {
                    Ok::<_, Infallible>(
                        handle(&cache, prefetcher.as_deref(), &registry, request).await,
                    )
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    cache: &Cache,
    prefetcher: Option<&Prefetcher>,
    registry: &Registry,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let query = request.uri().query().unwrap_or("");
    if let Some((_, content_type, text)) = STATUS_PAGE.iter().find(|(p, _, _)| *p == path) {
        return match *request.method() {
            Method::GET | Method::HEAD => status_page_file(content_type, text),
            _ => plain(StatusCode::METHOD_NOT_ALLOWED, "wrong method"),
        };
    }
    match (request.method(), path) {
        (&Method::GET, "/metrics") => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ),
                Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        (&Method::GET, "/cache/stats") => json(&cache.stats()),
        (&Method::GET, "/prefetch/stats") => match prefetcher {
            Some(p) => json(&p.stats()),
            None => plain(StatusCode::NOT_FOUND, "prefetch is off"),
        },
        (&Method::GET, "/pages/recent") => status_page_json(&RecentPages {
            prefetch: prefetcher.is_some(),
            pages: prefetcher.map(Prefetcher::recent_pages).unwrap_or_default(),
        }),
        (&Method::POST, "/cache/purge") => {
            let purge = match purge_from_query(query) {
                Ok(purge) => purge,
                Err(e) => return plain(StatusCode::BAD_REQUEST, &e.to_string()),
            };
            let forget = prefetcher.map(|p| (p, purge.clone()));
            match cache.purge(purge).await {
                Ok(removed) => {
                    if let Some((prefetcher, purge)) = forget {
                        prefetcher.forget_purged(&purge);
                    }
                    json(&Purged { removed })
                }
                Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        (_, "/metrics" | "/cache/stats" | "/cache/purge" | "/prefetch/stats" | "/pages/recent") => {
            plain(StatusCode::METHOD_NOT_ALLOWED, "wrong method")
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            "GET / (status page), GET /metrics, GET /cache/stats, POST /cache/purge?url=|prefix=|host=, GET /prefetch/stats, GET /pages/recent",
        ),
    }
}

/// `url=U`, `prefix=P` or `host=H`: exactly one.
fn purge_from_query(query: &str) -> Result<Purge> {
    let mut found = Vec::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let purge = match &*key {
            "url" => Purge::Url(value.into_owned()),
            "prefix" => Purge::Prefix(value.into_owned()),
            "host" => Purge::Host(value.into_owned()),
            other => bail!("unknown parameter `{other}`: url, prefix or host"),
        };
        found.push(purge);
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        _ => bail!("give exactly one of url=, prefix=, host="),
    }
}

/// One of the status page's files, with the headers that keep it to itself.
fn status_page_file(content_type: &'static str, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-store"),
        (header::CONTENT_SECURITY_POLICY, STATUS_PAGE_CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        response
            .headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    response
}

/// JSON the status page reads: not stored by anything on the way.
fn status_page_json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    let mut response = json(value);
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

fn json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_string_pretty(value) {
        Ok(text) => reply(StatusCode::OK, "application/json", text + "\n"),
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", format!("{message}\n"))
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// The cache's figures, read at each scrape.
#[derive(Debug)]
struct CacheCollector(Cache);

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = self.0.stats();
        let lookups = encoder.encode_descriptor(
            "gateway_cache_lookups",
            "Cacheable requests by outcome: hit, coalesced (joined a fetch in flight), miss, validation, pass",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        let mut lookups = lookups;
        for (outcome, value) in [
            ("hit", s.hits),
            ("coalesced", s.coalesced),
            ("miss", s.misses),
            ("validation", s.validations),
            ("pass", s.passes),
        ] {
            ConstCounter::new(value).encode(lookups.encode_family(&[("outcome", outcome)])?)?;
        }
        for (name, help, value) in [
            (
                "gateway_cache_revalidated",
                "Validations answered 304 (the stored body was sent)",
                s.revalidated,
            ),
            ("gateway_cache_stored", "Entries written", s.stored),
            (
                "gateway_cache_invalidations",
                "Invalidations by unsafe methods",
                s.invalidations,
            ),
            ("gateway_cache_evictions", "Entries evicted", s.evictions),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        for (name, help, value) in [
            ("gateway_cache_entries", "Visible entries", s.entries as i64),
            (
                "gateway_cache_bytes",
                "Bytes accounted to entries",
                s.bytes as i64,
            ),
            (
                "gateway_cache_file_bytes",
                "Size of the database file",
                s.file_bytes as i64,
            ),
            (
                "gateway_cache_disabled",
                "1 when writes are off (after an error, or no cache)",
                i64::from(s.disabled),
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

/// The prefetch queue's counters, read at each scrape.
#[derive(Debug)]
struct PrefetchCollector(Arc<Prefetcher>);

impl Collector for PrefetchCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = self.0.stats();
        for (name, help, value) in [
            ("gateway_prefetch_issued", "Prefetches started", s.issued),
            (
                "gateway_prefetch_used",
                "Prefetches a browser asked for later (joined in flight or after completion)",
                s.used,
            ),
            (
                "gateway_prefetch_claimed",
                "Queued prefetches a browser asked for before they started",
                s.claimed,
            ),
            (
                "gateway_prefetch_completed",
                "Prefetches completed",
                s.completed,
            ),
            ("gateway_prefetch_failed", "Prefetches failed", s.failed),
            (
                "gateway_prefetch_cancelled",
                "Prefetches cancelled",
                s.cancelled,
            ),
            (
                "gateway_prefetch_skipped_fresh",
                "Subresources not prefetched: fresh in the cache",
                s.skipped_fresh,
            ),
            (
                "gateway_prefetch_bytes",
                "Bytes received by prefetches",
                s.bytes,
            ),
            (
                "gateway_prefetch_wasted_bytes",
                "Bytes of prefetches no browser asked for",
                s.wasted_bytes,
            ),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// `gateway prefetch stats`: asks the running gateway at `admin`.
pub async fn fetch_prefetch_stats(admin: SocketAddr) -> Result<PrefetchStats> {
    let body = call(admin, Method::GET, "/prefetch/stats").await?;
    serde_json::from_slice(&body).context("the admin endpoint's answer is not prefetch stats")
}

/// `gateway cache stats`: asks the running gateway at `admin`.
pub async fn fetch_stats(admin: SocketAddr) -> Result<CacheStats> {
    let body = call(admin, Method::GET, "/cache/stats").await?;
    serde_json::from_slice(&body).context("the admin endpoint's answer is not cache stats")
}

/// `gateway cache purge`: asks the running gateway at `admin`.
pub async fn request_purge(admin: SocketAddr, purge: &Purge) -> Result<u64> {
    let (key, value) = match purge {
        Purge::Url(v) => ("url", v),
        Purge::Prefix(v) => ("prefix", v),
        Purge::Host(v) => ("host", v),
    };
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair(key, value)
        .finish();
    let body = call(admin, Method::POST, &format!("/cache/purge?{query}")).await?;
    let purged: Purged = serde_json::from_slice(&body)
        .context("the admin endpoint's answer is not a purge result")?;
    Ok(purged.removed)
}

async fn call(admin: SocketAddr, method: Method, target: &str) -> Result<Bytes> {
    let stream = TcpStream::connect(admin).await.with_context(|| {
        format!("cannot reach the gateway's admin endpoint at {admin}: is the gateway running (in this network namespace), with [admin] enabled?")
    })?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = Request::builder()
        .method(method)
        .uri(target)
        .header(header::HOST, admin.to_string())
        .body(Full::new(Bytes::new()))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("{status}: {}", String::from_utf8_lossy(&body).trim());
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_takes_exactly_one_known_parameter() {
        assert_eq!(
            purge_from_query("url=http%3A%2F%2Fa%2Fb").expect("url"),
            Purge::Url("http://a/b".into())
        );
        assert_eq!(
            purge_from_query("host=Example.ORG").expect("host"),
            Purge::Host("Example.ORG".into())
        );
        assert!(purge_from_query("").is_err());
        assert!(purge_from_query("url=a&prefix=b").is_err());
        assert!(purge_from_query("path=/").is_err());
    }
}
