//! The gateway takes pushes (issue 31, the gateway's side): a real front,
//! cache and origin link on loopback over userspace SCTP, against a scripted
//! origin (an origin-role `Session` whose every message the test writes), and
//! browsers that speak raw HTTP/1.1 to the front.
//!
//! What each test shows: PUSH announced only with `[push]` on and the cache
//! on; MAX_PUSHES granted and topped up as pushes end; PUSH_BUDGET sent for
//! a navigation and not for an image; a good push stored and then a cache
//! hit (the origin sees no request for it); the second visit's held entries
//! (fresh flagged, stale with its validator); pushes with `Set-Cookie`,
//! `private` or `no-store` refused (CANCEL) and not stored; a browser request
//! arriving while a push streams joins it and promotes it (PRIORITY), with no
//! second request at the origin; a push for another host refused by the
//! session (RESET) and counted; a 304 push freshening a held entry, and
//! pushes refused or cancelled as needless (an unmatched 304, too large, a
//! URL already being fetched); a page abandoned ending its pushes.

#[path = "support/http.rs"]
#[allow(
    dead_code,
    reason = "shared with the front tests; this file uses a part"
)]
mod http_support;
#[path = "support/origin_link.rs"]
#[allow(
    dead_code,
    reason = "shared with the origin_link tests; this file uses a part"
)]
mod origin_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway::cache::Cache;
use gateway::config::{CacheConfig, GatewayConfig, PushConfig};
use gateway::front::Front;
use gateway::listener::Intercepted;
use gateway::origin_link::{OriginLink, OriginRequest, PageBudget, PushPage};
use gateway::push::Pushes;
use gateway_protocol::{
    Capabilities, HeldEntry, Message, PUSH_ID_BIT, PushBudget, PushPromise, RequestClass,
    RequestId, Role, Session, SessionConfig,
};
use gateway_transport::{Association, BackendKind, Listener};
use http_support::{Answer, exchange};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Every wait of these tests ends within this long, or the test fails.
const LIMIT: Duration = Duration::from_secs(10);
/// Pushes the gateway keeps open at once in these tests.
const IN_FLIGHT: u32 = 4;

/// The scripted origin's end of the association.
struct Origin {
    assoc: Association,
    session: Session,
    /// The gateway's HELLO capabilities.
    gateway_capabilities: Capabilities,
    /// Every message received so far, in order, FEEDBACK left out.
    log: Vec<(u16, Message)>,
    next_push: RequestId,
}

impl Origin {
    /// The next message from the gateway (checked by the origin's session).
    async fn recv(&mut self) -> Result<(u16, Message)> {
        loop {
            let m = tokio::time::timeout(LIMIT, self.assoc.recv())
                .await
                .context("no message from the gateway in time")??;
            let message = match self.session.handle_message(m.stream, &m.data) {
                Ok(Message::Feedback(_)) => continue,
                Ok(message) => message,
                // For something that has ended here (a CANCEL crossing the
                // push's end): still what the gateway said.
                Err(gateway_protocol::Reaction::Ignore) => Message::decode(&m.data)?,
                Err(reaction) => bail!("the origin's session refused a message: {reaction:?}"),
            };
            self.log.push((m.stream, message.clone()));
            return Ok((m.stream, message));
        }
    }

    /// Receives until `wanted` picks a message; what came before stays in
    /// the log.
    async fn until<T>(&mut self, mut wanted: impl FnMut(u16, &Message) -> Option<T>) -> Result<T> {
        let deadline = Instant::now() + LIMIT;
        loop {
            ensure!(Instant::now() < deadline, "the message never came");
            let (stream, message) = self.recv().await?;
            if let Some(found) = wanted(stream, &message) {
                return Ok(found);
            }
        }
    }

    /// The next REQUEST: its stream, id and head.
    async fn request(&mut self) -> Result<(u16, RequestId, String)> {
        self.until(|stream, m| match m {
            Message::Request(r) => Some((stream, r.id, String::from_utf8_lossy(&r.head).into())),
            _ => None,
        })
        .await
    }

    async fn send(&self, stream: u16, message: Message) -> Result<()> {
        Ok(self.assoc.send(stream, message.to_bytes()).await?)
    }

    /// A whole response to request (or push) `id`.
    async fn respond(&mut self, stream: u16, id: RequestId, head: &str, body: &[u8]) -> Result<()> {
        self.send(
            stream,
            Message::ResponseHead {
                id,
                head: Bytes::from(head.replace('\n', "\r\n")),
            },
        )
        .await?;
        self.body(stream, id, body).await?;
        self.end(stream, id, body.len() as u64).await
    }

    async fn body(&mut self, stream: u16, id: RequestId, body: &[u8]) -> Result<()> {
        for chunk in body.chunks(16 * 1024) {
            if id & PUSH_ID_BIT != 0 {
                self.session
                    .handle_push_body_sent(id, chunk.len())
                    .map_err(|e| anyhow::anyhow!("push body beyond the budget: {e:?}"))?;
            }
            self.send(
                stream,
                Message::ResponseBody {
                    id,
                    data: Bytes::copy_from_slice(chunk),
                },
            )
            .await?;
        }
        Ok(())
    }

    async fn end(&mut self, stream: u16, id: RequestId, body_len: u64) -> Result<()> {
        self.send(stream, Message::ResponseEnd { id, body_len })
            .await?;
        self.session.handle_request_finished(id);
        Ok(())
    }

    /// Promises a push of `target` (Host `host`) for `page` on `stream`:
    /// its push id.
    async fn promise(
        &mut self,
        stream: u16,
        page: RequestId,
        target: &str,
        host: &str,
    ) -> Result<RequestId> {
        self.promise_with(stream, page, target, host, "").await
    }

    /// As [`promise`](Self::promise), with more request fields (CRLF-ended
    /// lines).
    async fn promise_with(
        &mut self,
        stream: u16,
        page: RequestId,
        target: &str,
        host: &str,
        fields: &str,
    ) -> Result<RequestId> {
        self.next_push += 1;
        let id = PUSH_ID_BIT | self.next_push;
        self.session
            .handle_push_sent(id, page, stream)
            .map_err(|e| anyhow::anyhow!("the origin may not push: {e:?}"))?;
        let head = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n{fields}\r\n");
        self.send(
            stream,
            Message::PushPromise(PushPromise {
                id,
                page,
                head: Bytes::from(head),
            }),
        )
        .await?;
        Ok(id)
    }

    /// A whole push of `target` for `page`: promise, then `head` and `body`.
    async fn push(
        &mut self,
        stream: u16,
        page: RequestId,
        target: &str,
        host: &str,
        head: &str,
        body: &[u8],
    ) -> Result<RequestId> {
        let id = self.promise(stream, page, target, host).await?;
        self.respond(stream, id, head, body).await?;
        Ok(id)
    }

    /// Waits for the gateway to end push `id` (CANCEL, or RESET before its
    /// head).
    async fn ended_by_gateway(&mut self, id: RequestId) -> Result<()> {
        self.until(|_, m| match m {
            Message::Cancel { id: c } | Message::Reset { id: c, .. } if *c == id => Some(()),
            _ => None,
        })
        .await?;
        self.session.handle_request_finished(id);
        Ok(())
    }

    /// Whether the log holds a REQUEST for `target`.
    fn requested(&self, target: &str) -> bool {
        let line = format!("GET {target} ");
        self.log
            .iter()
            .any(|(_, m)| matches!(m, Message::Request(r) if r.head.starts_with(line.as_bytes())))
    }
}

/// A gateway (front, cache, link, push taker) and the scripted origin.
struct Rig {
    gateway: SocketAddr,
    /// The original destination (nothing listens there) and the Host.
    dst: SocketAddr,
    link: OriginLink,
    pushes: Option<Arc<Pushes>>,
    cache: Cache,
    origin: Origin,
    _dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Rig {
    async fn start(push: bool, cache: bool) -> Result<Self> {
        let kind = BackendKind::Userspace;
        let transport = origin_support::transport();
        let listener =
            Listener::bind(kind, origin_support::free_address(kind)?, &transport).await?;
        let dir = tempfile::tempdir()?;
        let mut entry = origin_support::entry(kind, listener.local_addr()?);
        entry.destinations = vec!["127.0.0.0/8".parse()?];
        entry.hosts.clear();
        entry.fail_open = false;
        entry.feedback.enabled = false;
        let mut config = GatewayConfig {
            origins: vec![entry],
            cache: CacheConfig {
                enabled: cache,
                path: dir.path().join("cache.redb"),
                max_bytes: 64 << 20,
                max_object_bytes: 1 << 20,
                ..CacheConfig::default()
            },
            push: PushConfig {
                enabled: push,
                in_flight: IN_FLIGHT,
                ..PushConfig::default()
            },
            ..GatewayConfig::default()
        };
        config.prefetch.enabled_for_origins = false;
        config.validate()?;
        let cache = Cache::open(&config.cache).await?;
        let pushes = Pushes::start(&config.push, &cache);
        let link =
            OriginLink::spawn_with_pushes(&config.origins[0], pushes.as_ref().map(|p| p.link()));
        let origin = accept(&listener).await?;
        ensure!(link.wait_up(LIMIT).await, "the origin link came up");
        let front = Arc::new(Front::with_pushes(
            &config,
            vec![link.clone()],
            cache.clone(),
            pushes.clone(),
        ));
        let browsers = TcpListener::bind("127.0.0.1:0").await?;
        let gateway = browsers.local_addr()?;
        let dst = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((stream, client)) = browsers.accept().await {
                let flow = Intercepted {
                    stream,
                    client,
                    original_dst: dst,
                };
                tokio::spawn(Arc::clone(&front).serve(flow, stopped.clone()));
            }
        });
        Ok(Self {
            gateway,
            dst,
            link,
            pushes,
            cache,
            origin,
            _dir: dir,
            _stop: stop,
            accept,
        })
    }

    fn pushes(&self) -> &Pushes {
        self.pushes.as_deref().expect("push is on in this rig")
    }

    /// A browser's GET of `target` with `fields` (CRLF-terminated lines),
    /// one request per connection; answered in the background.
    fn browse(&self, target: &str, fields: &str) -> JoinHandle<Result<Answer>> {
        let raw = format!(
            "GET {target} HTTP/1.1\r\nHost: {}\r\n{fields}Connection: close\r\n\r\n",
            self.dst
        );
        let gateway = self.gateway;
        tokio::spawn(async move {
            let mut answers = exchange(gateway, raw.as_bytes()).await?;
            ensure!(answers.len() == 1, "one answer, got {}", answers.len());
            Ok(answers.remove(0))
        })
    }

    fn navigate(&self, target: &str) -> JoinHandle<Result<Answer>> {
        self.browse(
            target,
            "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\nSec-Fetch-Dest: document\r\n",
        )
    }

    /// Navigates to `target`: the origin takes the REQUEST and its
    /// PUSH_BUDGET, and answers with an uncacheable page. Returns the
    /// page's stream, id and budget; the browser's answer is awaited by the
    /// caller.
    async fn page(&mut self, target: &str) -> Result<(u16, RequestId, PushBudget, Browsing)> {
        let browsing = self.navigate(target);
        let (stream, id, head) = self.origin.request().await?;
        ensure!(head.starts_with(&format!("GET {target} ")), "{head}");
        // The next message on the page's stream (stream 0 may interleave).
        let message = self
            .origin
            .until(|on, m| (on == stream).then(|| m.clone()))
            .await?;
        let Message::PushBudget(budget) = message else {
            bail!("a PUSH_BUDGET right after the page's REQUEST, got {message:?}");
        };
        ensure!(budget.page == id, "the budget names its page");
        self.origin
            .respond(
                stream,
                id,
                "HTTP/1.1 200 OK\nContent-Type: text/html\nCache-Control: no-store\nContent-Length: 6\n\n",
                b"<html>",
            )
            .await?;
        Ok((stream, id, budget, browsing))
    }

    fn host(&self) -> String {
        self.dst.to_string()
    }
}

type Browsing = JoinHandle<Result<Answer>>;

async fn answered(browsing: Browsing) -> Result<Answer> {
    tokio::time::timeout(LIMIT, browsing)
        .await
        .context("the browser got no answer in time")??
}

/// The origin's end of a new association: HELLO answered with every
/// capability, PUSH included.
async fn accept(listener: &Listener) -> Result<Origin> {
    let assoc = tokio::time::timeout(LIMIT, listener.accept())
        .await
        .context("the gateway did not connect")??;
    let streams = assoc.streams();
    let mut session = Session::new(
        Role::Origin,
        SessionConfig {
            data_streams: streams.outbound.min(streams.inbound) - 1,
            capabilities: SessionConfig::default().capabilities | Capabilities::PUSH,
            ..SessionConfig::default()
        },
    );
    let hello = assoc.recv().await?;
    let Ok(Message::Hello(hello_message)) = session.handle_message(hello.stream, &hello.data)
    else {
        bail!("the gateway's HELLO was refused");
    };
    assoc.send(0, session.hello().to_bytes()).await?;
    Ok(Origin {
        assoc,
        session,
        gateway_capabilities: hello_message.capabilities,
        log: Vec::new(),
        next_push: 0,
    })
}

/// Waits until `done` holds, at most [`LIMIT`].
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        ensure!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

const STYLE: &[u8] = b"body { color: black }";
const STYLE_HEAD: &str = "HTTP/1.1 200 OK\nContent-Type: text/css\nCache-Control: max-age=600\nETag: \"s1\"\nContent-Length: 21\n\n";

#[tokio::test]
async fn push_is_announced_only_when_enabled_and_the_cache_is_on() -> Result<()> {
    let mut on = Rig::start(true, true).await?;
    ensure!(
        on.origin.gateway_capabilities.contains(Capabilities::PUSH),
        "announced"
    );
    ensure!(on.link.takes_pushes(), "negotiated");
    let grant = on
        .origin
        .until(|_, m| match m {
            Message::MaxPushes { max } => Some(*max),
            _ => None,
        })
        .await?;
    ensure!(grant == IN_FLIGHT, "the first grant is in_flight: {grant}");

    for (push, cache) in [(true, false), (false, true)] {
        let rig = Rig::start(push, cache).await?;
        ensure!(
            !rig.origin.gateway_capabilities.contains(Capabilities::PUSH),
            "not announced with push {push}, cache {cache}"
        );
        ensure!(!rig.link.takes_pushes() && rig.pushes.is_none());
    }
    Ok(())
}

#[tokio::test]
async fn a_navigation_gets_a_budget_and_an_image_none() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let (_, _, budget, browsing) = rig.page("/index.html").await?;
    let defaults = PushConfig::default();
    ensure!(
        (budget.max_pushes, budget.max_bytes)
            == (defaults.max_per_page, defaults.max_bytes_per_page),
        "{budget:?}"
    );
    ensure!(budget.held.is_empty(), "nothing held yet: {budget:?}");
    ensure!(answered(browsing).await?.status == 200);

    let image = rig.browse(
        "/logo.png",
        "Accept: image/avif,image/webp,*/*;q=0.8\r\nSec-Fetch-Dest: image\r\n",
    );
    let (stream, id, head) = rig.origin.request().await?;
    ensure!(head.starts_with("GET /logo.png "), "{head}");
    rig.origin
        .respond(
            stream,
            id,
            "HTTP/1.1 200 OK\nCache-Control: no-store\nContent-Length: 3\n\n",
            b"png",
        )
        .await?;
    ensure!(answered(image).await?.status == 200);
    // Anything the gateway sent for the image came before its next request.
    let (_, _, _, browsing) = rig.page("/next.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    let budgets: Vec<RequestId> = rig
        .origin
        .log
        .iter()
        .filter_map(|(_, m)| match m {
            Message::PushBudget(b) => Some(b.page),
            _ => None,
        })
        .collect();
    ensure!(budgets.len() == 2 && !budgets.contains(&id), "{budgets:?}");
    Ok(())
}

#[tokio::test]
async fn a_good_push_is_stored_served_as_a_hit_and_held_on_the_next_visit() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let host = rig.host();
    let (stream, page, _, browsing) = rig.page("/index.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    rig.origin
        .push(stream, page, "/style.css", &host, STYLE_HEAD, STYLE)
        .await?;
    // Stored, but stale at once: held with its validator, not fresh.
    rig.origin
        .push(
            stream,
            page,
            "/app.js",
            &host,
            "HTTP/1.1 200 OK\nCache-Control: max-age=0\nETag: \"j1\"\nContent-Length: 2\n\n",
            b"js",
        )
        .await?;
    wait_for("both pushes read whole", || {
        rig.pushes().stats().stored == 2
    })
    .await?;
    // And committed (the store's writer finishes after the body's end).
    wait_for("both pushes stored", || rig.cache.stats().stored == 2).await?;
    // One more push granted as each ends: 4, then 5 and 6.
    let topped = rig
        .origin
        .until(|_, m| match m {
            Message::MaxPushes { max } if *max == IN_FLIGHT + 2 => Some(*max),
            _ => None,
        })
        .await?;
    ensure!(topped == IN_FLIGHT + 2);

    let style = rig.browse(
        "/style.css",
        "Accept: text/css,*/*;q=0.1\r\nSec-Fetch-Dest: style\r\n",
    );
    let answer = answered(style).await?;
    ensure!(answer.status == 200 && answer.body == STYLE, "{answer:?}");
    ensure!(
        answer.header("age").is_some(),
        "a hit carries Age: {answer:?}"
    );
    wait_for("the push counted as used", || {
        rig.pushes().stats().used == 1
    })
    .await?;

    // The second visit: its budget says what is held. The origin saw no
    // request for the stylesheet in between.
    let (stream, page, budget, browsing) = rig.page("/index.html").await?;
    ensure!(!rig.origin.requested("/style.css"), "the push was a hit");
    let held = |target: &str| {
        budget
            .held
            .iter()
            .find(|e| &e.target[..] == target.as_bytes())
    };
    ensure!(
        held("/style.css")
            == Some(&HeldEntry {
                fresh: true,
                target: Bytes::from_static(b"/style.css"),
                etag: Bytes::from_static(b"\"s1\""),
                last_modified: Bytes::new(),
            }),
        "{budget:?}"
    );
    ensure!(
        held("/app.js").is_some_and(|e| !e.fresh && &e.etag[..] == b"\"j1\""),
        "{budget:?}"
    );
    ensure!(answered(browsing).await?.status == 200);
    let stats = rig.pushes().stats();
    ensure!((stats.held_fresh, stats.held_stale) == (1, 1), "{stats:?}");

    // A push of what is held fresh is cancelled by its id (RESET CANCELLED
    // on its stream before its head, CANCEL after).
    let again = rig
        .origin
        .promise(stream, page, "/style.css", &host)
        .await?;
    let cancelled = rig
        .origin
        .until(|_, m| match m {
            Message::Cancel { id } | Message::Reset { id, .. } if *id == again => Some(*id),
            _ => None,
        })
        .await?;
    ensure!(cancelled == again);
    wait_for("counted as held", || {
        rig.pushes().stats().cancelled("fresh") == 1
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn pushes_the_cache_would_not_store_are_refused() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let host = rig.host();
    let (stream, page, _, browsing) = rig.page("/index.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    for (target, head) in [
        (
            "/cookie.css",
            "HTTP/1.1 200 OK\nCache-Control: max-age=600\nSet-Cookie: id=1\nContent-Length: 4\n\n",
        ),
        (
            "/private.css",
            "HTTP/1.1 200 OK\nCache-Control: private, max-age=600\nContent-Length: 4\n\n",
        ),
        (
            "/no-store.css",
            "HTTP/1.1 200 OK\nCache-Control: no-store\nContent-Length: 4\n\n",
        ),
    ] {
        let id = rig.origin.promise(stream, page, target, &host).await?;
        rig.origin
            .send(
                stream,
                Message::ResponseHead {
                    id,
                    head: Bytes::from(head.replace('\n', "\r\n")),
                },
            )
            .await?;
        // The gateway refuses it on its head, before any body.
        rig.origin.ended_by_gateway(id).await?;
    }
    wait_for("three refusals counted", || {
        let s = rig.pushes().stats();
        (
            s.refused("set_cookie"),
            s.refused("private"),
            s.refused("no_store"),
        ) == (1, 1, 1)
    })
    .await?;
    ensure!(rig.pushes().stats().stored == 0 && rig.cache.stats().stored == 0);
    // Not stored: a browser's request for it goes to the origin.
    let browsing = rig.browse("/cookie.css", "Accept: text/css\r\n");
    let (stream, id, head) = rig.origin.request().await?;
    ensure!(head.starts_with("GET /cookie.css "), "{head}");
    rig.origin
        .respond(stream, id, "HTTP/1.1 200 OK\nContent-Length: 2\n\n", b"ok")
        .await?;
    ensure!(answered(browsing).await?.status == 200);
    Ok(())
}

#[tokio::test]
async fn a_browser_request_joins_a_push_in_flight_and_promotes_it() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let host = rig.host();
    let port = rig.dst.port();
    let (stream, page, _, browsing) = rig.page("/index.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    let body: Vec<u8> = (0..200_000u32).map(|n| (n % 251) as u8).collect();
    let id = rig.origin.promise(stream, page, "/big.bin", &host).await?;
    rig.origin
        .send(
            stream,
            Message::ResponseHead {
                id,
                head: Bytes::from_static(
                    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 200000\r\n\r\n",
                ),
            },
        )
        .await?;
    rig.origin.body(stream, id, &body[..100_000]).await?;
    wait_for("the push leads a flight", || {
        rig.cache.in_flight("127.0.0.1", port, "/big.bin")
    })
    .await?;

    let browsing = rig.browse("/big.bin", "Accept: */*\r\n");
    // The browser's request reached the gateway: the push is promoted.
    rig.origin
        .until(|pushed_on, m| match m {
            Message::Priority {
                id: p,
                class: RequestClass::Demand,
                ..
            } if *p == id && pushed_on == stream => Some(()),
            _ => None,
        })
        .await?;
    rig.origin.body(stream, id, &body[100_000..]).await?;
    rig.origin.end(stream, id, body.len() as u64).await?;
    let answer = answered(browsing).await?;
    ensure!(
        answer.status == 200 && answer.body == body,
        "status {}",
        answer.status
    );
    wait_for("stored and used", || {
        let s = rig.pushes().stats();
        s.stored == 1 && s.used == 1 && s.used_bytes == 200_000
    })
    .await?;
    // The next thing the origin is asked for is the next page, never the
    // pushed file.
    let (_, _, _, browsing) = rig.page("/next.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    ensure!(
        !rig.origin.requested("/big.bin"),
        "the browser joined the push"
    );
    Ok(())
}

#[tokio::test]
async fn a_push_for_another_host_is_refused_and_counted() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let (stream, page, _, browsing) = rig.page("/index.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    let id = rig
        .origin
        .push(
            stream,
            page,
            "/x.css",
            "elsewhere.example",
            STYLE_HEAD,
            STYLE,
        )
        .await?;
    rig.origin
        .until(|_, m| match m {
            Message::Reset { id: r, .. } if *r == id => Some(()),
            _ => None,
        })
        .await?;
    wait_for("counted", || {
        rig.pushes().stats().refused("other_host") == 1
    })
    .await?;
    let stats = rig.pushes().stats();
    ensure!(stats.offered == 1 && stats.stored == 0, "{stats:?}");
    ensure!(rig.cache.stats().stored == 0, "nothing stored");
    // The grant still counts it: the next MAX_PUSHES covers it.
    rig.origin
        .until(|_, m| match m {
            Message::MaxPushes { max } if *max == IN_FLIGHT + 1 => Some(()),
            _ => None,
        })
        .await?;
    Ok(())
}

#[tokio::test]
async fn abandoning_a_page_ends_its_pushes_at_once() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let host = rig.host();
    let pin = rig.link.pin();
    let request = OriginRequest {
        head: Bytes::from(format!("GET /page.html HTTP/1.1\r\nhost: {host}\r\n\r\n")),
        body: Bytes::new(),
        urgency: 3,
        class: RequestClass::Demand,
        priority: None,
    };
    let budget = PageBudget {
        page: PushPage {
            host: "127.0.0.1".into(),
            port: rig.dst.port(),
            target: "/page.html".into(),
            host_field: Bytes::from(host.clone()),
        },
        max_pushes: 8,
        max_bytes: 1 << 20,
        held: Vec::new(),
    };
    let link = rig.link.clone();
    let page = tokio::spawn(async move { link.request_page(&pin, request, Some(budget)).await });
    let (stream, id, _) = rig.origin.request().await?;
    rig.origin
        .until(|_, m| matches!(m, Message::PushBudget(b) if b.page == id).then_some(()))
        .await?;
    rig.origin.promise(stream, id, "/a.css", &host).await?;
    wait_for("the push is on its way", || rig.pushes().on_way() == 1).await?;
    // The page's reader goes away before its answer: RESET for the page...
    page.abort();
    rig.origin
        .until(|_, m| matches!(m, Message::Reset { id: r, .. } if *r == id).then_some(()))
        .await?;
    // ... and the push ends with it, long before its head would time out.
    wait_for("the push ended with its page", || {
        rig.pushes().on_way() == 0 && rig.pushes().stats().refused("failed") == 1
    })
    .await?;
    ensure!(rig.pushes().stats().stored == 0);
    Ok(())
}

#[tokio::test]
async fn a_304_push_freshens_what_is_held_and_needless_pushes_end() -> Result<()> {
    let mut rig = Rig::start(true, true).await?;
    let host = rig.host();
    let (stream, page, _, browsing) = rig.page("/index.html").await?;
    ensure!(answered(browsing).await?.status == 200);
    rig.origin
        .push(
            stream,
            page,
            "/app.js",
            &host,
            "HTTP/1.1 200 OK\nCache-Control: max-age=0\nETag: \"j1\"\nContent-Length: 2\n\n",
            b"js",
        )
        .await?;
    wait_for("stored", || rig.cache.stats().stored == 1).await?;

    // The next visit holds it stale; the origin revalidates it in the same
    // round trip: a conditional push answered 304.
    let (stream, page, budget, browsing) = rig.page("/index.html").await?;
    ensure!(
        budget.held.len() == 1 && !budget.held[0].fresh && &budget.held[0].etag[..] == b"\"j1\"",
        "{budget:?}"
    );
    ensure!(answered(browsing).await?.status == 200);
    let id = rig
        .origin
        .promise_with(stream, page, "/app.js", &host, "If-None-Match: \"j1\"\r\n")
        .await?;
    rig.origin
        .respond(
            stream,
            id,
            "HTTP/1.1 304 Not Modified\nCache-Control: max-age=600\nETag: \"j1\"\n\n",
            b"",
        )
        .await?;
    wait_for("revalidated", || rig.pushes().stats().revalidated == 1).await?;
    let script = rig.browse("/app.js", "Accept: */*\r\nSec-Fetch-Dest: script\r\n");
    let answer = answered(script).await?;
    ensure!(answer.status == 200 && answer.body == b"js", "{answer:?}");
    ensure!(answer.header("age").is_some(), "from the cache: {answer:?}");
    ensure!(!rig.origin.requested("/app.js"), "the 304 made it fresh");

    // A 304 for something not held freshens nothing: refused.
    let id = rig
        .origin
        .promise_with(stream, page, "/never.js", &host, "If-None-Match: \"x\"\r\n")
        .await?;
    rig.origin
        .send(
            stream,
            Message::ResponseHead {
                id,
                head: Bytes::from_static(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"),
            },
        )
        .await?;
    rig.origin.ended_by_gateway(id).await?;
    // Larger than an entry may be (1 MiB here): refused on its head.
    let id = rig.origin.promise(stream, page, "/huge.bin", &host).await?;
    rig.origin
        .send(
            stream,
            Message::ResponseHead {
                id,
                head: Bytes::from_static(
                    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 2000000\r\n\r\n",
                ),
            },
        )
        .await?;
    rig.origin.ended_by_gateway(id).await?;
    wait_for("both refusals counted", || {
        let s = rig.pushes().stats();
        (s.refused("unmatched_304"), s.refused("too_large")) == (1, 1)
    })
    .await?;

    // A URL a browser is already fetching: the push adds nothing.
    let browsing = rig.browse("/slow.css", "Accept: text/css\r\n");
    let (request_stream, request, head) = rig.origin.request().await?;
    ensure!(head.starts_with("GET /slow.css "), "{head}");
    let id = rig.origin.promise(stream, page, "/slow.css", &host).await?;
    rig.origin.ended_by_gateway(id).await?;
    wait_for("counted", || {
        rig.pushes().stats().cancelled("in_flight") == 1
    })
    .await?;
    rig.origin
        .respond(
            request_stream,
            request,
            "HTTP/1.1 200 OK\nCache-Control: max-age=600\nContent-Length: 2\n\n",
            b"ok",
        )
        .await?;
    ensure!(answered(browsing).await?.status == 200);
    ensure!(rig.pushes().stats().stored == 1, "only the first push");
    Ok(())
}
