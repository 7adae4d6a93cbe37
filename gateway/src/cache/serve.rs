//! [`Cache::serve`]: the one place that decides how a request on a cacheable
//! route is served, and drives the upstream for it.
//!
//! ```text
//!  serve(request, asker, upstream)
//!    └─ lookup ─┬─ Hit ───────────────────────────────► the stored answer
//!               ├─ Fill ── prepare ─► upstream.send ─► Fill::respond ─┬─► the answer (stored while it streams)
//!               │                         │ failed                    └─► Refetch: send untouched ("pass")
//!               │                         └─► stale-if-error, or the error
//!               ├─ StaleWhileRevalidate ─► the stale answer now; the fill
//!               │      runs on upstream.detach() in the background
//!               └─ Pass ─► upstream.send ─► after_pass (an unsafe method invalidates)
//! ```
//!
//! The [`Asker`] changes three things: a prefetch validates in the open
//! instead of in the background, keeps only what its filter allows, and never
//! forwards what the cache would not store (a pass, a refetch): it is the
//! gateway's own guess, not a browser's request.
//!
//! # Pushes (issue 31)
//!
//! A response the origin pushes arrives with the request it answers. It
//! enters here as the third asker, [`Asker::Push`] (from `crate::push`):
//! `serve` with that request, checked as the browser's would be (the same
//! lookup, Vary judged against the push's fields) and an [`Upstream`] whose
//! `send` resolves to the pushed response once its head arrives. The lookup
//! makes the push the flight's leader ([`coalesce`](super::coalesce))
//! *before* that head is there, so a browser request for the same URL that
//! arrives while the push is on its way finds the flight and joins it as a
//! follower, as it joins a prefetch; a push for something held fresh ends at
//! the lookup (`Served::hit`), and one for something stale is a validation
//! whose 304 freshens the entry. Its head is judged before its body is read
//! ([`Fill::judge_push`]: RFC 9111 storability, a 200 or a matching 304);
//! a refused push ends with [`ServeError::Declined`] and its reason.

use std::sync::Arc;

use http::header::HeaderMap;
use http::{Response, StatusCode};
use http_body_util::BodyExt;

use super::{Cache, CacheRequest, Fill, Filled, Lookup};
use crate::body::Body;
use crate::upstream::{Answered, Upstream, UpstreamError, UpstreamRequest};

/// Who asks the cache: the answer's path differs (module docs).
#[derive(Debug, Clone, Copy)]
pub enum Asker {
    /// A browser's request: answered whatever the cache decides, stale
    /// entries revalidated in the background where `stale-while-revalidate`
    /// allows, a stale entry standing in for an unreachable upstream where
    /// `stale-if-error` does.
    Browser,
    /// The prefetch queue's request: stores only responses `keep` accepts,
    /// validates in the open, and forwards nothing the cache would pass.
    Prefetch {
        /// A further condition for storing (and sharing) the response.
        keep: fn(StatusCode, &HeaderMap) -> bool,
    },
    /// A response the origin pushed, with the request it answers (issue 31):
    /// as a prefetch, it validates in the open and forwards nothing the
    /// cache would pass; and it goes on only if [`Fill::judge_push`] accepts
    /// its head (the cache would store it, or freshen the entry with it),
    /// else it ends there ([`ServeError::Declined`] with the reason).
    Push,
}

/// How [`Cache::serve`] answered.
#[derive(Debug)]
pub struct Served {
    /// The response (`Via` still to add).
    pub response: Response<Body>,
    /// The route's access-log word: `cache` when the cache answered alone.
    pub route: &'static str,
    /// The cache's access-log word: `hit`, `coalesced`, `miss`,
    /// `revalidate`, `pass`, `stale-while-revalidate`, `stale-if-error`...
    pub cache: &'static str,
    /// Answered from the store or another request's flight: this request
    /// sent nothing upstream.
    pub hit: bool,
}

/// Why [`Cache::serve`] has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The upstream failed and nothing stored may stand in.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// [`Asker::Prefetch`] and [`Asker::Push`] only: the cache would not
    /// store the answer, so the request did not go, or the push is refused
    /// (the word says why, for the log and the push metrics' `reason`).
    #[error("not prefetched or pushed: {0}")]
    Declined(&'static str),
}

impl Served {
    fn hit(response: Response<Body>, cache: &'static str) -> Self {
        Self {
            response,
            route: "cache",
            cache,
            hit: true,
        }
    }

    fn upstream(answered: Answered, cache: &'static str) -> Self {
        Self {
            response: answered.response,
            route: answered.route,
            cache,
            hit: false,
        }
    }
}

impl Cache {
    /// Serves `request` (for `host` and `port`, as the cache keys it; a GET or
    /// HEAD, or an unsafe method whose success invalidates): from the store,
    /// by joining a flight, through a fill that stores what `upstream`
    /// answers, or passed on to `upstream`. A hit copies nothing of
    /// `request`; what goes upstream is a copy.
    pub async fn serve(
        &self,
        host: &str,
        port: u16,
        request: &UpstreamRequest,
        asker: Asker,
        upstream: &dyn Upstream,
    ) -> Result<Served, ServeError> {
        let key = CacheRequest {
            method: &request.method,
            host,
            port,
            target: &request.path,
            headers: &request.headers,
        };
        match self.lookup(&key).await {
            Lookup::Hit(response, label) => Ok(Served::hit(response, label)),
            Lookup::Fill(fill) => fill_through(*fill, request, asker, upstream).await,
            Lookup::StaleWhileRevalidate(response, fill) => match asker {
                Asker::Browser => {
                    let mut prepared = request.clone();
                    fill.prepare(&mut prepared.headers);
                    // Its own connection upstream, so that the browser's
                    // next request on this one does not wait behind it.
                    let background = upstream.detach();
                    tokio::spawn(revalidate_in_background(background, prepared, *fill));
                    Ok(Served::hit(response, "stale-while-revalidate"))
                }
                // A prefetch or a push is the background already: it
                // validates in the open and takes what the validation gives.
                Asker::Prefetch { .. } | Asker::Push => {
                    fill_through(*fill, request, asker, upstream).await
                }
            },
            Lookup::Pass => {
                match asker {
                    Asker::Prefetch { .. } => {
                        return Err(ServeError::Declined("the cache passes it"));
                    }
                    Asker::Push => return Err(ServeError::Declined("not_storable")),
                    Asker::Browser => {}
                }
                let answered = upstream.send(request.clone()).await?;
                let key = CacheRequest {
                    headers: &HeaderMap::new(),
                    ..key
                };
                self.after_pass(
                    &key,
                    answered.response.status(),
                    answered.response.headers(),
                )
                .await;
                Ok(Served::upstream(answered, "pass"))
            }
        }
    }
}

/// A miss or a validation: the prepared request goes through `upstream`, the
/// fill makes the answer.
async fn fill_through(
    mut fill: Fill,
    request: &UpstreamRequest,
    asker: Asker,
    upstream: &dyn Upstream,
) -> Result<Served, ServeError> {
    let label = if fill.is_validation() {
        "revalidate"
    } else {
        "miss"
    };
    let mut prepared = request.clone();
    fill.prepare(&mut prepared.headers);
    if let Asker::Prefetch { keep } = asker {
        fill.only_if(keep);
    }
    let answered = match upstream.send(prepared).await {
        Ok(answered) => answered,
        // Unreachable or silent: a stale entry may stand in.
        Err(error) => {
            let stale = match asker {
                Asker::Browser => fill.failed(error.status),
                // Dropping the fill fails its followers: they fetch alone.
                Asker::Prefetch { .. } | Asker::Push => None,
            };
            return match stale {
                Some(stale) => Ok(Served {
                    response: stale,
                    route: "unreachable",
                    cache: "stale-if-error",
                    hit: true,
                }),
                None => Err(error.into()),
            };
        }
    };
    if let Asker::Push = asker {
        let response = &answered.response;
        // Refused before a byte of its body is read; dropping the fill
        // sends its followers to fetch on their own.
        fill.judge_push(response.status(), response.headers())
            .map_err(ServeError::Declined)?;
    }
    let route = answered.route;
    match fill.respond(answered.response).await {
        Filled::Answer(response) => Ok(Served {
            response,
            route,
            cache: label,
            hit: false,
        }),
        Filled::Refetch => match asker {
            Asker::Browser => {
                let answered = upstream.send(request.clone()).await?;
                Ok(Served::upstream(answered, "pass"))
            }
            Asker::Prefetch { .. } => Err(ServeError::Declined("refetch")),
            Asker::Push => Err(ServeError::Declined("unmatched_304")),
        },
    }
}

/// Validates a stale entry answered under `stale-while-revalidate`: the fill
/// stores or freshens what comes back; the answer itself is read to its end
/// (so that a streamed body reaches the store) and dropped.
async fn revalidate_in_background(
    upstream: Arc<dyn Upstream>,
    request: UpstreamRequest,
    fill: Fill,
) {
    let response = match upstream.send(request).await {
        Ok(answered) => fill.respond(answered.response).await,
        Err(error) => {
            tracing::debug!(
                status = error.status.as_u16(),
                "cache: a background validation failed"
            );
            return;
        }
    };
    if let Filled::Answer(response) = response {
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    use bytes::Bytes;
    use gateway_protocol::RequestClass;
    use http::Method;
    use http::header::{self, HeaderValue};
    use http_body_util::Full;

    use super::*;
    use crate::cache::store::{Store, StoreLimits};
    use crate::upstream::UpstreamFuture;

    /// An origin that answers every request with a cacheable body and counts
    /// what it was sent.
    #[derive(Debug, Default)]
    struct Counting {
        sent: AtomicU32,
        methods: Mutex<Vec<Method>>,
    }

    impl Upstream for Arc<Counting> {
        fn send(&self, request: UpstreamRequest) -> UpstreamFuture<'_> {
            Box::pin(async move {
                self.sent.fetch_add(1, Ordering::SeqCst);
                crate::sync::lock(&self.methods).push(request.method);
                let mut response = Response::new(
                    Full::new(Bytes::from_static(b"body"))
                        .map_err(|never| match never {})
                        .boxed_unsync(),
                );
                let headers = response.headers_mut();
                headers.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("max-age=600"),
                );
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(4));
                Ok(Answered {
                    response,
                    route: "origin",
                })
            })
        }

        fn detach(&self) -> Arc<dyn Upstream> {
            Arc::new(Arc::clone(self))
        }
    }

    fn cache(dir: &tempfile::TempDir) -> Cache {
        let limits = StoreLimits {
            max_bytes: 64 << 20,
            max_object_bytes: 8 << 20,
        };
        Cache::from_store(
            Store::open(&dir.path().join("cache.redb"), limits).expect("a store"),
            1 << 20,
        )
    }

    fn request(method: Method) -> UpstreamRequest {
        UpstreamRequest {
            method,
            path: "/x".to_owned(),
            host: HeaderValue::from_static("example.test"),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            urgency: 3,
            class: RequestClass::Demand,
            promote: None,
        }
    }

    async fn body(served: Served) -> Bytes {
        served
            .response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes()
    }

    #[tokio::test]
    async fn a_miss_goes_upstream_once_and_the_next_request_hits() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = cache(&dir);
        let origin = Arc::new(Counting::default());
        let get = request(Method::GET);

        let first = cache
            .serve("example.test", 80, &get, Asker::Browser, &origin)
            .await
            .expect("served");
        assert_eq!(
            (first.route, first.cache, first.hit),
            ("origin", "miss", false)
        );
        assert_eq!(body(first).await, Bytes::from_static(b"body"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while cache.stats().stored == 0 {
            assert!(std::time::Instant::now() < deadline, "never stored");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }

        let second = cache
            .serve("example.test", 80, &get, Asker::Browser, &origin)
            .await
            .expect("served");
        assert_eq!(
            (second.route, second.cache, second.hit),
            ("cache", "hit", true)
        );
        assert_eq!(body(second).await, Bytes::from_static(b"body"));
        assert_eq!(origin.sent.load(Ordering::SeqCst), 1);
    }

    /// An upstream that answers with a fixed status and fields.
    #[derive(Debug)]
    struct Fixed {
        status: StatusCode,
        fields: &'static [(&'static str, &'static str)],
    }

    impl Upstream for Fixed {
        fn send(&self, _request: UpstreamRequest) -> UpstreamFuture<'_> {
            Box::pin(async move {
                let mut response = Response::new(
                    Full::new(Bytes::from_static(b"body"))
                        .map_err(|never| match never {})
                        .boxed_unsync(),
                );
                *response.status_mut() = self.status;
                for (name, value) in self.fields {
                    response.headers_mut().append(
                        header::HeaderName::from_static(name),
                        HeaderValue::from_static(value),
                    );
                }
                Ok(Answered {
                    response,
                    route: "push",
                })
            })
        }

        fn detach(&self) -> Arc<dyn Upstream> {
            Arc::new(Fixed {
                status: self.status,
                fields: self.fields,
            })
        }
    }

    #[tokio::test]
    async fn a_push_is_judged_on_its_head_and_stored_only_if_the_cache_would() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = cache(&dir);
        let get = request(Method::GET);
        for (status, fields, reason) in [
            (
                StatusCode::OK,
                &[("cache-control", "max-age=600"), ("set-cookie", "a=1")][..],
                "set_cookie",
            ),
            (
                StatusCode::OK,
                &[("cache-control", "private, max-age=600")][..],
                "private",
            ),
            (
                StatusCode::OK,
                &[("cache-control", "no-store")][..],
                "no_store",
            ),
            (
                StatusCode::OK,
                &[("vary", "*"), ("cache-control", "max-age=600")][..],
                "vary",
            ),
            (
                StatusCode::NOT_FOUND,
                &[("cache-control", "max-age=600")][..],
                "status",
            ),
            (
                StatusCode::NOT_MODIFIED,
                &[("etag", "\"x\"")][..],
                "unmatched_304",
            ),
            (
                StatusCode::OK,
                &[
                    ("cache-control", "max-age=600"),
                    ("content-length", "9999999999"),
                ][..],
                "too_large",
            ),
        ] {
            let origin = Fixed { status, fields };
            let refused = cache
                .serve("example.test", 80, &get, Asker::Push, &origin)
                .await;
            assert!(
                matches!(refused, Err(ServeError::Declined(r)) if r == reason),
                "{reason}: {refused:?}"
            );
        }
        assert_eq!(cache.stats().stored, 0, "nothing refused is stored");

        let origin = Arc::new(Counting::default());
        let pushed = cache
            .serve("example.test", 80, &get, Asker::Push, &origin)
            .await
            .expect("taken");
        assert!(!pushed.hit);
        assert_eq!(body(pushed).await, Bytes::from_static(b"body"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while cache.stats().stored == 0 {
            assert!(std::time::Instant::now() < deadline, "never stored");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let again = cache
            .serve("example.test", 80, &get, Asker::Push, &origin)
            .await
            .expect("served");
        assert!(again.hit, "held fresh: the push is not needed");
        let browser = cache
            .serve("example.test", 80, &get, Asker::Browser, &origin)
            .await
            .expect("served");
        assert_eq!((browser.route, browser.hit), ("cache", true));
        assert_eq!(origin.sent.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_pass_is_sent_for_a_browser_and_declined_for_a_prefetch() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = cache(&dir);
        let origin = Arc::new(Counting::default());
        // HEAD on a miss: the cache passes it.
        let head = request(Method::HEAD);

        let prefetch = Asker::Prefetch { keep: |_, _| true };
        let declined = cache
            .serve("example.test", 80, &head, prefetch, &origin)
            .await;
        assert!(
            matches!(declined, Err(ServeError::Declined(_))),
            "{declined:?}"
        );
        assert_eq!(origin.sent.load(Ordering::SeqCst), 0);

        let passed = cache
            .serve("example.test", 80, &head, Asker::Browser, &origin)
            .await
            .expect("served");
        assert_eq!(
            (passed.route, passed.cache, passed.hit),
            ("origin", "pass", false)
        );
        assert_eq!(*crate::sync::lock(&origin.methods), vec![Method::HEAD]);
    }
}
