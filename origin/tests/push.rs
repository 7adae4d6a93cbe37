//! Pushes (docs/protocol.md, "PUSH") from the association driver, on a real
//! association, to a gateway side driven by the real protocol session: what
//! is negotiated, what a PUSH_BUDGET's held entries change, the budgets, the
//! order against demand, cancellation and credentials.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use gateway_protocol::{
    Capabilities, ErrorCode, GoAway, HeldEntry, Message, PushBudget, RequestClass, RequestId,
    SessionConfig, Urgency, is_push_id,
};
use gateway_transport::{AssociationConfig, BackendKind, Listener, QuicConfig, connect};
use origin::closure::ClosureConfig;
use origin::files::{FilesConfig, StaticFiles};
use origin::learned::LearnedConfig;
use origin::response_scheduler::{ResponsePolicyKind, ResponseSchedulerConfig};
use origin::server::{
    DriverConfig, Handler, IncomingRequest, PushConfig, PushTarget, Reply, drive_counted,
};

use origin::service::Service;
use origin::synthetic::{Pattern, SyntheticHandler};
use support::TestGateway;

const TIMEOUT: Duration = Duration::from_secs(30);
const HOST: &str = "www.example.org";

/// The synthetic handler (`/bytes/N`, `/endless`, `/endless?anything`), naming `targets` for
/// every page and keeping every request head it answered.
#[derive(Default)]
struct PushingHandler {
    inner: SyntheticHandler,
    targets: Vec<PushTarget>,
    heads: Mutex<Vec<String>>,
    asked: AtomicU64,
    /// When set, `pushes` answers only once the test adds a permit.
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl PushingHandler {
    fn pushing(targets: &[(&str, bool)]) -> Arc<Self> {
        let targets = targets
            .iter()
            .map(|(target, public)| PushTarget {
                target: (*target).to_owned(),
                render_blocking: false,
                public: *public,
                kind: None,
            })
            .collect();
        Arc::new(Self {
            targets,
            ..Self::default()
        })
    }

    fn head_for(&self, target: &str) -> Option<String> {
        let line = format!("GET {target} ");
        let heads = self.heads.lock().expect("not poisoned");
        heads.iter().find(|h| h.starts_with(&line)).cloned()
    }
}

impl Handler for PushingHandler {
    type Body = Pattern;

    async fn handle(&self, mut request: IncomingRequest) -> Reply<Pattern> {
        let head = String::from_utf8_lossy(&request.request.head).into_owned();
        if head.starts_with("GET /endless?") {
            // Several endless bodies under distinct targets.
            request.request.head = Bytes::from_static(b"GET /endless HTTP/1.1\r\n\r\n");
        }
        self.heads.lock().expect("not poisoned").push(head);
        self.inner.handle(request).await
    }

    async fn pushes(&self, _page: &IncomingRequest) -> Vec<PushTarget> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        if let Some(gate) = &self.gate {
            let _ = gate.acquire().await;
        }
        self.targets.clone()
    }
}

fn driver_config() -> DriverConfig {
    DriverConfig {
        response_scheduler: ResponseSchedulerConfig {
            policy: ResponsePolicyKind::Scf,
            transport_target: 32 * 1024,
            ..ResponseSchedulerConfig::default()
        },
        chunk_size: 16 * 1024,
        max_open_requests: 64,
        max_request_body: 1 << 20,
        stream_queue_limit: 64 * 1024,
        egress: None,
        tunnels: None,
    }
}

fn push_on() -> PushConfig {
    PushConfig {
        enabled: true,
        ..PushConfig::default()
    }
}

fn gateway_capabilities() -> Capabilities {
    SessionConfig::default().capabilities | Capabilities::PUSH
}

/// A driver with `push` over `kind`, and the gateway side announcing
/// `capabilities`.
async fn start_on<H: Handler>(
    kind: BackendKind,
    handler: Arc<H>,
    push: PushConfig,
    capabilities: Capabilities,
) -> Result<TestGateway> {
    let config = AssociationConfig {
        streams: 5,
        max_inbound_streams: 5,
        ..AssociationConfig::default()
    };
    let listener = Listener::bind(kind, SocketAddr::from(([127, 0, 0, 1], 0)), &config).await?;
    let addr = listener.local_addr()?;
    let config = AssociationConfig {
        quic: QuicConfig {
            server_cert_sha256: listener.quic_cert_sha256().map(str::to_owned),
            ..config.quic
        },
        ..config
    };
    tokio::spawn(async move {
        if let Ok(assoc) = listener.accept().await {
            let _ = drive_counted(assoc, handler, driver_config(), push, None).await;
        }
    });
    TestGateway::open_with(connect(kind, addr, &config).await?, capabilities).await
}

async fn start(
    handler: Arc<PushingHandler>,
    push: PushConfig,
    capabilities: Capabilities,
) -> Result<TestGateway> {
    start_on(BackendKind::FramedTcp, handler, push, capabilities).await
}

/// A page request on `stream` with `fields` (CRLF-terminated lines).
async fn page(gw: &mut TestGateway, stream: u16, fields: &str) -> Result<RequestId> {
    let head = format!("GET /page HTTP/1.1\r\nHost: {HOST}\r\n{fields}\r\n");
    gw.request_head(stream, head, RequestClass::Demand).await
}

fn budget(page: RequestId, max_pushes: u16, max_bytes: u32, held: Vec<HeldEntry>) -> PushBudget {
    PushBudget {
        page,
        max_pushes,
        max_bytes,
        held,
    }
}

/// The target of a promise's request head.
fn promised_target(gw: &TestGateway, index: usize) -> String {
    let head = String::from_utf8_lossy(&gw.promises[index].head).into_owned();
    head.split(' ').nth(1).unwrap_or_default().to_owned()
}

fn promised_targets(gw: &TestGateway) -> Vec<String> {
    (0..gw.promises.len())
        .map(|i| promised_target(gw, i))
        .collect()
}

/// Body bytes of the first push have arrived.
fn first_push_flows(gw: &TestGateway) -> bool {
    gw.promises
        .first()
        .is_some_and(|p| gw.seen.get(&p.id).is_some_and(|s| !s.body.is_empty()))
}

/// Receives until `count` responses and pushes have finished.
async fn finished(gw: &mut TestGateway, count: usize) -> Result<()> {
    bounded(gw.until_finished(count)).await
}

/// Waits a little for anything more and checks that nothing came: what was
/// already received is all there will be.
async fn nothing_more(gw: &mut TestGateway) -> Result<()> {
    let before = gw.promises.len();
    gw.ping(7).await?;
    match tokio::time::timeout(Duration::from_millis(300), gw.receive_one()).await {
        Err(_) => {}
        Ok(got) => anyhow::bail!("unexpected message for {:?}", got?),
    }
    ensure!(gw.promises.len() == before, "a late promise");
    Ok(())
}

async fn bounded<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(TIMEOUT, f)
        .await
        .context("timed out")?
}

#[tokio::test]
async fn push_is_negotiated_only_when_both_announce_it() -> Result<()> {
    let targets = [("/bytes/10", true)];
    // Both: negotiated, and a page gets its push.
    let mut gw = start(
        PushingHandler::pushing(&targets),
        push_on(),
        gateway_capabilities(),
    )
    .await?;
    ensure!(gw.session.pushes_negotiated(), "both announced PUSH");
    // Origin without `[push] enabled`: its HELLO lacks PUSH.
    let gw_off = start(
        PushingHandler::pushing(&targets),
        PushConfig::default(),
        gateway_capabilities(),
    )
    .await?;
    ensure!(
        !gw_off
            .session
            .peer_capabilities()
            .contains(Capabilities::PUSH)
            && !gw_off.session.pushes_negotiated(),
        "the origin announced PUSH with push off"
    );
    // Gateway without PUSH: the origin ignores what it sends anyway.
    let handler = PushingHandler::pushing(&targets);
    let mut gw_plain = start(
        Arc::clone(&handler),
        push_on(),
        SessionConfig::default().capabilities,
    )
    .await?;
    ensure!(
        gw_plain
            .session
            .peer_capabilities()
            .contains(Capabilities::PUSH)
    );
    ensure!(!gw_plain.session.pushes_negotiated());
    let id = page(&mut gw_plain, 1, "").await?;
    gw_plain
        .assoc
        .send(0, Message::MaxPushes { max: 10 }.to_bytes())
        .await?;
    let raw = Message::PushBudget(budget(id, 10, 1 << 20, Vec::new()));
    gw_plain.assoc.send(1, raw.to_bytes()).await?;
    finished(&mut gw_plain, 1).await?;
    nothing_more(&mut gw_plain).await?;
    ensure!(gw_plain.promises.is_empty());
    ensure!(
        handler.asked.load(Ordering::Relaxed) == 0,
        "asked for pushes"
    );

    gw.max_pushes(10).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 2).await?;
    ensure!(promised_targets(&gw) == ["/bytes/10"], "{:?}", gw.promises);
    Ok(())
}

#[tokio::test]
async fn no_push_without_max_pushes_then_the_grant_releases_it() -> Result<()> {
    let handler = PushingHandler::pushing(&[("/bytes/10", true)]);
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 1).await?;
    nothing_more(&mut gw).await?;
    ensure!(gw.promises.is_empty(), "pushed without a grant");
    gw.max_pushes(1).await?;
    finished(&mut gw, 2).await?;
    ensure!(promised_targets(&gw) == ["/bytes/10"], "{:?}", gw.promises);
    let push = gw.promises[0].id;
    ensure!(is_push_id(push) && gw.promises[0].page == id);
    ensure!(gw.seen[&push].end == Some(10), "{:?}", gw.seen[&push]);
    Ok(())
}

#[tokio::test]
async fn no_push_without_a_push_budget() -> Result<()> {
    let handler = PushingHandler::pushing(&[("/bytes/10", true)]);
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    gw.max_pushes(10).await?;
    page(&mut gw, 1, "").await?;
    finished(&mut gw, 1).await?;
    nothing_more(&mut gw).await?;
    ensure!(gw.promises.is_empty());
    ensure!(
        handler.asked.load(Ordering::Relaxed) == 0,
        "asked for pushes"
    );
    Ok(())
}

/// A target held fresh is skipped; one held stale is pushed as a
/// conditional GET carrying its validators; the heads carry the page's Host
/// and Accept-Encoding, never its Cookie.
#[tokio::test]
async fn held_fresh_is_skipped_and_held_stale_is_revalidated() -> Result<()> {
    let handler = PushingHandler::pushing(&[
        ("/bytes/100", true),
        ("/bytes/200", true),
        ("/bytes/300", true),
    ]);
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    gw.max_pushes(10).await?;
    let id = page(&mut gw, 2, "Accept-Encoding: gzip\r\nCookie: s=1\r\n").await?;
    let held = vec![
        HeldEntry {
            fresh: true,
            target: Bytes::from_static(b"/bytes/100"),
            etag: Bytes::from_static(b"\"a\""),
            last_modified: Bytes::new(),
        },
        HeldEntry {
            fresh: false,
            target: Bytes::from_static(b"/bytes/200"),
            etag: Bytes::from_static(b"\"b\""),
            last_modified: Bytes::new(),
        },
    ];
    gw.push_budget(2, HOST, budget(id, 10, 1 << 20, held))
        .await?;
    finished(&mut gw, 3).await?;
    ensure!(
        promised_targets(&gw) == ["/bytes/200", "/bytes/300"],
        "{:?}",
        gw.promises
    );
    let conditional = handler.head_for("/bytes/200").context("no /bytes/200")?;
    ensure!(
        conditional.contains("\r\nIf-None-Match: \"b\"\r\n"),
        "{conditional}"
    );
    let plain = handler.head_for("/bytes/300").context("no /bytes/300")?;
    ensure!(!plain.contains("If-None-Match"), "{plain}");
    ensure!(
        handler.head_for("/bytes/100").is_none(),
        "fresh was fetched"
    );
    for promise in &gw.promises {
        let head = String::from_utf8_lossy(&promise.head).to_ascii_lowercase();
        ensure!(head.contains(&format!("\r\nhost: {HOST}\r\n")), "{head}");
        ensure!(head.contains("\r\naccept-encoding: gzip\r\n"), "{head}");
        ensure!(!head.contains("cookie"), "{head}");
    }
    Ok(())
}

/// The page's `max_pushes`, the association's grant and the page's
/// `max_bytes` each stop pushes; a push whose length does not fit what is
/// left is never promised, and a later one that fits still is.
#[tokio::test]
async fn max_pushes_and_max_bytes_are_respected() -> Result<()> {
    let five: Vec<(&str, bool)> = ["/bytes/1", "/bytes/2", "/bytes/3", "/bytes/4", "/bytes/5"]
        .into_iter()
        .map(|t| (t, true))
        .collect();
    // The page's count.
    let mut gw = start(
        PushingHandler::pushing(&five),
        push_on(),
        gateway_capabilities(),
    )
    .await?;
    gw.max_pushes(100).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 2, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 3).await?;
    nothing_more(&mut gw).await?;
    ensure!(
        promised_targets(&gw) == ["/bytes/1", "/bytes/2"],
        "{:?}",
        gw.promises
    );

    // The association's grant.
    let mut gw = start(
        PushingHandler::pushing(&five),
        push_on(),
        gateway_capabilities(),
    )
    .await?;
    gw.max_pushes(3).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 100, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 4).await?;
    nothing_more(&mut gw).await?;
    ensure!(gw.promises.len() == 3, "{:?}", promised_targets(&gw));

    // The page's bytes: 600 fits 1000, the next 600 does not, 300 does.
    let handler = PushingHandler::pushing(&[
        ("/bytes/600", true),
        ("/bytes/601", true),
        ("/bytes/300", true),
    ]);
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    gw.max_pushes(100).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 100, 1000, Vec::new()))
        .await?;
    finished(&mut gw, 3).await?;
    nothing_more(&mut gw).await?;
    ensure!(
        promised_targets(&gw) == ["/bytes/600", "/bytes/300"],
        "{:?}",
        promised_targets(&gw)
    );
    let pushed: u64 = gw.promises.iter().filter_map(|p| gw.seen[&p.id].end).sum();
    ensure!(pushed == 900, "{pushed} push body bytes");
    Ok(())
}

/// A demand request issued while large pushes run is answered before the
/// pushes' remaining bytes: its RESPONSE_END comes before every push's.
/// Over userspace SCTP, whose buffers the driver sees; over framed TCP on
/// loopback the kernel's socket buffers take megabytes of a push before the
/// demand request arrives, which says nothing about the order the driver
/// chose.
async fn demand_goes_before_pushes(kind: BackendKind) -> Result<()> {
    // Pushes smaller than the demand response: SCF alone would send them
    // first; the tiers put the demand ahead.
    let targets: Vec<String> = (0..6).map(|i| format!("/bytes/{}", 300_000 + i)).collect();
    let targets: Vec<(&str, bool)> = targets.iter().map(|t| (t.as_str(), true)).collect();
    let handler = PushingHandler::pushing(&targets);
    let mut gw = start_on(kind, handler, push_on(), gateway_capabilities()).await?;
    gw.max_pushes(10).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, u32::MAX, Vec::new()))
        .await?;
    // Until push bytes flow.
    bounded(async {
        loop {
            if first_push_flows(&gw) {
                return Ok(());
            }
            gw.receive_one().await?;
        }
    })
    .await?;
    let ends_before = gw.finished.len();
    let demand = gw
        .request(2, "/bytes/1000000", RequestClass::Demand)
        .await?;
    finished(&mut gw, 8).await?;
    let after: Vec<RequestId> = gw.finished[ends_before..].to_vec();
    ensure!(
        after.first() == Some(&demand),
        "the demand request ended after a push: {after:x?}"
    );
    ensure!(gw.seen[&demand].end == Some(1_000_000));
    ensure!(gw.promises.len() == 6, "{:?}", promised_targets(&gw));
    for p in &gw.promises {
        let seen = &gw.seen[&p.id];
        ensure!(seen.end == Some(seen.body.len() as u64), "{seen:?}");
    }
    Ok(())
}

#[tokio::test]
async fn demand_goes_before_pushes_userspace_sctp() -> Result<()> {
    demand_goes_before_pushes(BackendKind::Userspace).await
}

/// Waits until the handler's produced bytes stop growing.
async fn producer_stops(handler: &PushingHandler) -> Result<()> {
    bounded(async {
        loop {
            let before = handler.inner.produced.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            if handler.inner.produced.load(Ordering::Relaxed) == before {
                return Ok(());
            }
        }
    })
    .await
}

/// CANCEL of a push stops it (RESET CANCELLED, the producer stops); CANCEL
/// of its page stops the page's other pushes without a RESET.
#[tokio::test]
async fn cancel_of_a_push_or_of_its_page_stops_it() -> Result<()> {
    let handler = PushingHandler::pushing(&[("/endless?1", true), ("/endless?2", true)]);
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    gw.max_pushes(10).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, u32::MAX, Vec::new()))
        .await?;
    // Both are promised at once; the first runs (equal unknown sizes: SCF
    // keeps the earlier).
    let flowing = |gw: &TestGateway, n: usize| {
        gw.promises
            .get(n)
            .is_some_and(|p| gw.seen.get(&p.id).is_some_and(|s| s.body.len() >= 50_000))
    };
    bounded(async {
        while gw.promises.len() < 2 || !flowing(&gw, 0) {
            gw.receive_one().await?;
        }
        Ok(())
    })
    .await?;
    let (first, second) = (gw.promises[0].id, gw.promises[1].id);
    gw.assoc
        .send(0, Message::Cancel { id: first }.to_bytes())
        .await?;
    bounded(async {
        while gw.seen[&first].reset.is_none() {
            gw.receive_one().await?;
        }
        Ok(())
    })
    .await?;
    ensure!(gw.seen[&first].reset == Some(ErrorCode::Cancelled));
    // The other one runs on.
    bounded(async {
        while !flowing(&gw, 1) {
            gw.receive_one().await?;
        }
        Ok(())
    })
    .await?;
    ensure!(gw.seen[&second].reset.is_none() && gw.seen[&second].end.is_none());
    // The page has ended; its CANCEL still ends its pushes.
    gw.assoc.send(0, Message::Cancel { id }.to_bytes()).await?;
    gw.session.handle_request_finished(id);
    producer_stops(&handler).await?;
    nothing_more_for(&mut gw, second).await?;
    Ok(())
}

/// Drains what is in flight until nothing comes for a while, checking that
/// none of it is a RESET of `push` (stopped without one).
async fn nothing_more_for(gw: &mut TestGateway, push: RequestId) -> Result<()> {
    // What was sent before the CANCEL still arrives (ignored by the
    // session); after a while nothing more does.
    let drained = async {
        loop {
            match tokio::time::timeout(Duration::from_millis(300), gw.assoc.recv()).await {
                Err(_) => return Ok::<_, anyhow::Error>(()),
                Ok(m) => {
                    let m = m?;
                    if let Ok(Message::Reset { id, .. }) = Message::decode(&m.data) {
                        ensure!(id != push, "a RESET for a push the page's CANCEL ended");
                    }
                }
            }
        }
    };
    bounded(drained).await
}

/// A page requested with Cookie gets no push from a target its handler says
/// is not public; a public one is pushed.
#[tokio::test]
async fn a_page_with_a_cookie_gets_only_public_pushes() -> Result<()> {
    let handler = PushingHandler::pushing(&[("/bytes/10", false), ("/bytes/20", true)]);
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    gw.max_pushes(10).await?;
    let id = page(&mut gw, 1, "Cookie: session=secret\r\n").await?;
    gw.push_budget(1, HOST, budget(id, 10, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 2).await?;
    nothing_more(&mut gw).await?;
    ensure!(promised_targets(&gw) == ["/bytes/20"], "{:?}", gw.promises);
    ensure!(handler.head_for("/bytes/10").is_none());
    let head = handler.head_for("/bytes/20").context("no push request")?;
    ensure!(!head.to_ascii_lowercase().contains("cookie"), "{head}");
    // The same page without the Cookie gets both.
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 5).await?;
    ensure!(
        promised_targets(&gw) == ["/bytes/20", "/bytes/10", "/bytes/20"],
        "{:?}",
        promised_targets(&gw)
    );
    Ok(())
}

/// A push the gateway promotes with PRIORITY under its push id is served as
/// demand from then on: it overtakes a larger demand response that, unpromoted,
/// would finish first.
#[tokio::test]
async fn priority_promotes_a_push_to_demand() -> Result<()> {
    let handler = PushingHandler::pushing(&[("/bytes/1000000", true)]);
    let mut gw = start_on(
        BackendKind::Userspace,
        handler,
        push_on(),
        gateway_capabilities(),
    )
    .await?;
    gw.max_pushes(10).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, u32::MAX, Vec::new()))
        .await?;
    bounded(async {
        while !first_push_flows(&gw) {
            gw.receive_one().await?;
        }
        Ok(())
    })
    .await?;
    let push = gw.promises[0].id;
    let demand = gw
        .request(2, "/bytes/3000000", RequestClass::Demand)
        .await?;
    // Until the demand response flows (the push waits below it), then promote.
    bounded(async {
        while gw.seen[&demand].body.len() < 100_000 {
            gw.receive_one().await?;
        }
        Ok(())
    })
    .await?;
    ensure!(
        gw.session.may_send_priority(push),
        "the gateway may not promote the push"
    );
    let stream = push_stream(&gw, push).context("the push's stream")?;
    let priority = Message::Priority {
        id: push,
        urgency: Urgency::DEFAULT,
        class: RequestClass::Demand,
    };
    gw.assoc.send(stream, priority.to_bytes()).await?;
    let before = gw.finished.len();
    finished(&mut gw, 3).await?;
    ensure!(
        gw.finished[before..] == [push, demand],
        "promoted push did not overtake: {:x?}",
        &gw.finished[before..]
    );
    Ok(())
}

/// The stream a push's messages came on, as the test gateway saw it: the
/// origin's choice, kept in the promise order per stream.
fn push_stream(gw: &TestGateway, push: RequestId) -> Option<u16> {
    gw.streams.get(&push).copied()
}

/// After the gateway's GOAWAY the origin promises nothing more, even for a
/// page whose budget came before it.
#[tokio::test]
async fn no_promise_after_the_gateways_goaway() -> Result<()> {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = Arc::new(PushingHandler {
        targets: vec![PushTarget {
            target: "/bytes/10".to_owned(),
            render_blocking: true,
            public: true,
            kind: None,
        }],
        gate: Some(Arc::clone(&gate)),
        ..PushingHandler::default()
    });
    let mut gw = start(Arc::clone(&handler), push_on(), gateway_capabilities()).await?;
    gw.max_pushes(10).await?;
    let id = page(&mut gw, 1, "").await?;
    gw.push_budget(1, HOST, budget(id, 10, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 1).await?;
    // The handler is being asked; the GOAWAY comes before its answer.
    bounded(async {
        while handler.asked.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    })
    .await?;
    let goaway = Message::GoAway(GoAway {
        last_request: id,
        code: ErrorCode::NoError,
        reason: "test".into(),
    });
    gw.assoc.send(0, goaway.to_bytes()).await?;
    gw.ping(1).await?;
    gate.add_permits(1);
    nothing_more(&mut gw).await?;
    ensure!(gw.promises.is_empty(), "promised after GOAWAY");
    Ok(())
}

/// The origin binary's own handler: a page served from the document root is
/// followed by its closure, render-blocking first, each push carrying the
/// file's bytes; another host's image and the page itself are not pushed.
#[tokio::test]
async fn the_files_service_pushes_a_pages_closure_from_the_root() -> Result<()> {
    let root = tempfile::tempdir()?;
    let write = |name: &str, body: &[u8]| std::fs::write(root.path().join(name), body);
    write(
        "index.html",
        b"<!doctype html><html><head><link rel=stylesheet href=/style.css>\
          <script src=/app.js></script></head><body><img src=/photo.png>\
          <img src=http://elsewhere.example/x.png></body></html>",
    )?;
    write(
        "style.css",
        b"@font-face { font-family: f; src: url(/font.woff2) }",
    )?;
    write("app.js", b"console.log(1)")?;
    write("photo.png", b"\x89PNG not really")?;
    write("font.woff2", b"wOF2 not really")?;
    let files = StaticFiles::new(&FilesConfig::new(root.path()))?;
    let service = Arc::new(Service::files(files, Some(ClosureConfig::default()), None));
    let mut gw = start_on(
        BackendKind::FramedTcp,
        service,
        push_on(),
        gateway_capabilities(),
    )
    .await?;
    gw.max_pushes(16).await?;
    let head = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/html\r\n\r\n");
    let id = gw.request_head(1, head, RequestClass::Demand).await?;
    gw.push_budget(1, HOST, budget(id, 16, 1 << 20, Vec::new()))
        .await?;
    finished(&mut gw, 5).await?;
    nothing_more(&mut gw).await?;
    let targets = promised_targets(&gw);
    ensure!(
        targets.len() == 4
            && targets[..3]
                .iter()
                .all(|t| ["/style.css", "/app.js", "/font.woff2"].contains(&t.as_str()))
            && targets[3] == "/photo.png",
        "render-blocking first, then the image, nothing else: {targets:?}"
    );
    for promise in &gw.promises {
        let target = String::from_utf8_lossy(&promise.head)
            .split(' ')
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let on_disk = std::fs::read(root.path().join(target.trim_start_matches('/')))?;
        ensure!(
            gw.seen[&promise.id].body == on_disk,
            "the push of {target} carries the file"
        );
    }
    Ok(())
}

/// What only a script finds is learnt: after one visit on which the page's
/// script fetched `/data.json` (the gateway's request carries the page as
/// its Referer), the next visit's pushes carry it, after the closure.
#[tokio::test]
async fn what_a_script_fetched_after_a_page_is_pushed_on_the_next_visit() -> Result<()> {
    let root = tempfile::tempdir()?;
    std::fs::write(
        root.path().join("index.html"),
        b"<!doctype html><link rel=stylesheet href=/style.css><script>fetch('/data.json')</script>",
    )?;
    std::fs::write(root.path().join("style.css"), b"body { color: red }")?;
    std::fs::write(root.path().join("data.json"), b"{\"news\": []}")?;
    let files = StaticFiles::new(&FilesConfig::new(root.path()))?;
    let learned = LearnedConfig {
        learn_window_ms: Duration::from_millis(300),
        ..LearnedConfig::default()
    };
    let service = Arc::new(Service::files(
        files,
        Some(ClosureConfig::default()),
        Some(learned),
    ));
    let mut gw = start_on(
        BackendKind::FramedTcp,
        service,
        push_on(),
        gateway_capabilities(),
    )
    .await?;
    gw.max_pushes(64).await?;
    // First visit: the closure (the stylesheet) only; then the script's fetch.
    navigate_to_root(&mut gw).await?;
    finished(&mut gw, 2).await?;
    ensure!(
        promised_targets(&gw) == ["/style.css"],
        "{:?}",
        promised_targets(&gw)
    );
    let fetch = format!(
        "GET /data.json HTTP/1.1\r\nHost: {HOST}\r\nReferer: http://{HOST}/\r\nSec-Fetch-Dest: empty\r\n\r\n"
    );
    gw.request_head(2, fetch, RequestClass::Demand).await?;
    finished(&mut gw, 3).await?;
    // The first visit's window closes; the second visit pushes what it taught.
    tokio::time::sleep(Duration::from_millis(400)).await;
    navigate_to_root(&mut gw).await?;
    finished(&mut gw, 6).await?;
    nothing_more(&mut gw).await?;
    ensure!(
        promised_targets(&gw) == ["/style.css", "/style.css", "/data.json"],
        "the second visit pushes the closure, then what was learnt: {:?}",
        promised_targets(&gw)
    );
    Ok(())
}

/// A browser's navigation to `/` on stream 1, with a PUSH_BUDGET.
async fn navigate_to_root(gw: &mut TestGateway) -> Result<RequestId> {
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {HOST}\r\nSec-Fetch-Dest: document\r\nAccept: text/html\r\n\r\n"
    );
    let id = gw.request_head(1, head, RequestClass::Demand).await?;
    gw.push_budget(1, HOST, budget(id, 64, 1 << 20, Vec::new()))
        .await?;
    Ok(id)
}
