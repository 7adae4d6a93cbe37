//! The gateway's origin link against a real in-process origin (the origin
//! driver with its synthetic handler) and against a scripted origin, on loopback,
//! over userspace SCTP and framed TCP.

#[path = "support/origin_link.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use gateway::origin_link::{LinkError, LinkState, OriginLink, OriginRequest, ResponseBody};
use gateway_protocol::{Capabilities, ErrorCode, GoAway, Message, RequestClass, Urgency};
use gateway_transport::BackendKind;
use http_body::Body;
use http_body_util::BodyExt;
use origin::response_scheduler::ResponsePolicyKind;
use origin::synthetic::pattern_byte;
use support::{ScriptedOrigin, TestOrigin, bounded, collect, entry, free_address, get};
use tokio::sync::watch;
use tokio::task::JoinSet;

const TEST_LIMIT: Duration = Duration::from_secs(30);
const UP_LIMIT: Duration = Duration::from_secs(5);

fn request(head: Bytes) -> OriginRequest {
    OriginRequest {
        head,
        body: Bytes::new(),
        urgency: 3,
        class: RequestClass::Demand,
        priority: None,
    }
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(pattern_byte).collect()
}

async fn link_to_origin(kind: BackendKind) -> Result<(TestOrigin, OriginLink)> {
    let origin = TestOrigin::start(kind, free_address(kind)?).await?;
    let link = OriginLink::spawn(&entry(kind, origin.addr));
    ensure!(link.wait_up(UP_LIMIT).await, "link did not come up");
    Ok((origin, link))
}

async fn fetch(link: &OriginLink, pin: &gateway::origin_link::StreamPin, size: u64) -> Result<()> {
    let response = link
        .request(pin, request(get(&format!("/bytes/{size}"))))
        .await?;
    ensure!(response.status() == 200, "status {}", response.status());
    ensure!(
        response.headers()["content-length"] == size.to_string().as_str(),
        "{:?}",
        response.headers()
    );
    let body = collect(response.into_body()).await?;
    ensure!(
        body == pattern(size),
        "/bytes/{size}: {} bytes differ",
        body.len()
    );
    Ok(())
}

async fn exact_bytes(kind: BackendKind) -> Result<()> {
    let (_origin, link) = link_to_origin(kind).await?;
    let pin = link.pin();
    for size in [0u64, 1, 16 * 1024, 16 * 1024 + 1, 300_000, 2 << 20] {
        fetch(&link, &pin, size).await?;
    }
    // Many flows at once, each on its own pin, two requests after each other.
    let mut flows = JoinSet::new();
    for flow in 0..20u64 {
        let link = link.clone();
        flows.spawn(async move {
            let pin = link.pin();
            fetch(&link, &pin, 1000 + flow * 7919).await?;
            fetch(&link, &pin, 70_000 + flow).await
        });
    }
    while let Some(done) = flows.join_next().await {
        done??;
    }
    Ok(())
}

/// Several requests share one pin (and thus one stream) at once: ids must still
/// rise on the stream in the order the origin receives them.
async fn one_stream_shared_by_concurrent_requests(kind: BackendKind) -> Result<()> {
    let (_origin, link) = link_to_origin(kind).await?;
    let pin = std::sync::Arc::new(link.pin());
    let mut requests = JoinSet::new();
    for i in 0..16u64 {
        let (link, pin) = (link.clone(), std::sync::Arc::clone(&pin));
        requests.spawn(async move { fetch(&link, &pin, 10_000 + i).await });
    }
    while let Some(done) = requests.join_next().await {
        done??;
    }
    Ok(())
}

async fn pinning(kind: BackendKind) -> Result<()> {
    let (_origin, link) = link_to_origin(kind).await?;
    let data_streams = support::STREAMS - 1;
    let mut pins: Vec<_> = (0..data_streams + 2).map(|_| link.pin()).collect();
    let streams: Vec<u16> = pins.iter().map(|p| p.stream()).collect();
    let mut want: Vec<u16> = (1..=data_streams).collect();
    want.extend([1, 2]);
    ensure!(streams == want, "pinned to {streams:?}");
    ensure!(link.pinned(1) == 2 && link.pinned(3) == 1);
    // Releasing a pin makes its stream the least loaded one.
    let third = pins.remove(2);
    ensure!(third.stream() == 3);
    drop(third);
    ensure!(link.pinned(3) == 0);
    let next = link.pin();
    ensure!(next.stream() == 3, "got {}", next.stream());
    drop(pins);
    drop(next);
    ensure!((1..=data_streams).all(|s| link.pinned(s) == 0));
    Ok(())
}

async fn origin_dies_mid_response(kind: BackendKind) -> Result<()> {
    let (origin, link) = link_to_origin(kind).await?;
    let pin = link.pin();
    let response = link.request(&pin, request(get("/endless"))).await?;
    let mut body = response.into_body();
    let mut received = 0;
    while received < 100_000 {
        let frame = body.frame().await.context("ended early")??;
        received += frame.into_data().map_or(0, |d| d.len());
    }
    origin.kill();
    let outcome = bounded(TEST_LIMIT, async {
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Ok(e),
                None => anyhow::bail!("a killed response ended cleanly"),
            }
        }
    })
    .await?;
    ensure!(matches!(outcome, LinkError::Broken(_)), "{outcome:?}");
    ensure!(!outcome.nothing_sent());
    ensure!(!body.is_end_stream());
    // The link notices and says so; new requests fail at once.
    bounded(UP_LIMIT, async {
        while link.is_up() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    })
    .await?;
    let err = link
        .request(&pin, request(get("/bytes/1")))
        .await
        .expect_err("origin is dead");
    ensure!(matches!(err, LinkError::Unavailable(_)), "{err:?}");
    Ok(())
}

async fn absent_origin(kind: BackendKind) -> Result<()> {
    let link = OriginLink::spawn(&entry(kind, free_address(kind)?));
    ensure!(!link.wait_up(Duration::from_millis(300)).await);
    let pin = link.pin();
    let started = Instant::now();
    let err = link
        .request(&pin, request(get("/bytes/1")))
        .await
        .expect_err("nobody listens");
    ensure!(
        started.elapsed() < Duration::from_millis(100),
        "took {:?}",
        started.elapsed()
    );
    ensure!(matches!(err, LinkError::Unavailable(_)), "{err:?}");
    ensure!(err.nothing_sent());
    ensure!(!link.is_up());
    ensure!(matches!(
        link.state(),
        LinkState::Down | LinkState::Connecting
    ));
    Ok(())
}

async fn origin_started_later(kind: BackendKind) -> Result<()> {
    let addr = free_address(kind)?;
    let link = OriginLink::spawn(&entry(kind, addr));
    // Let a few attempts fail, so the backoff has grown to its maximum.
    tokio::time::sleep(Duration::from_millis(800)).await;
    ensure!(!link.is_up());
    let _origin = TestOrigin::start(kind, addr).await?;
    // reconnect_max (400 ms) + jitter + one connect, with room to spare.
    ensure!(
        link.wait_up(Duration::from_secs(3)).await,
        "no reconnection"
    );
    let pin = link.pin();
    fetch(&link, &pin, 12_345).await
}

async fn dropping_the_body_cancels(kind: BackendKind) -> Result<()> {
    let (origin, link) = link_to_origin(kind).await?;
    let pin = link.pin();
    let response = link.request(&pin, request(get("/endless"))).await?;
    let mut body = response.into_body();
    let mut received = 0;
    while received < 200_000 {
        received += body
            .frame()
            .await
            .context("ended early")??
            .into_data()
            .map_or(0, |d| d.len());
    }
    drop(body);
    // The origin stops producing soon after the CANCEL.
    let produced = bounded(TEST_LIMIT, async {
        loop {
            let before = origin.handler.produced.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = origin.handler.produced.load(Ordering::Relaxed);
            if after == before {
                return Ok(after);
            }
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(origin.handler.produced.load(Ordering::Relaxed) == produced);
    // The stream and the association carry on.
    fetch(&link, &pin, 5000).await
}

/// The body yields its bytes as they come but ends only at RESPONSE_END.
async fn body_ends_only_after_end(kind: BackendKind) -> Result<()> {
    let origin = ScriptedOrigin::bind(kind).await?;
    let link = OriginLink::spawn(&entry(kind, origin.addr));
    let mut script = bounded(UP_LIMIT, origin.accept()).await?;
    ensure!(link.wait_up(UP_LIMIT).await);
    let pin = link.pin();
    let requesting = tokio::spawn({
        let link = link.clone();
        async move {
            let pin = link.pin();
            link.request(&pin, request(get("/x"))).await
        }
    });
    let (stream, message) = script.recv().await?;
    let Message::Request(req) = message else {
        anyhow::bail!("expected REQUEST, got {message:?}");
    };
    ensure!(req.end && req.head == get("/x"));
    let id = req.id;
    let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n");
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    let response = requesting.await??;
    let mut body = response.into_body();
    script
        .send(
            stream,
            Message::ResponseBody {
                id,
                data: Bytes::from_static(b"hello"),
            },
        )
        .await?;
    let frame = body.frame().await.context("no frame")??;
    ensure!(frame.into_data().ok() == Some(Bytes::from_static(b"hello")));
    // All the bytes are there, but no END yet: the body must not end.
    let early = tokio::time::timeout(Duration::from_millis(300), body.frame()).await;
    ensure!(early.is_err(), "body ended before RESPONSE_END: {early:?}");
    ensure!(!body.is_end_stream());
    script
        .send(stream, Message::ResponseEnd { id, body_len: 5 })
        .await?;
    ensure!(body.frame().await.is_none());
    ensure!(body.is_end_stream());
    drop(body);
    drop(pin);
    Ok(())
}

/// Sends one GET through `link` and returns the scripted side's view of it.
async fn scripted_request(
    link: &OriginLink,
    script: &mut support::Scripted,
) -> Result<(
    tokio::task::JoinHandle<Result<http::Response<ResponseBody>, LinkError>>,
    u16,
    u32,
)> {
    let requesting = tokio::spawn({
        let link = link.clone();
        async move {
            let pin = link.pin();
            link.request(&pin, request(get("/x"))).await
        }
    });
    let (stream, message) = script.recv().await?;
    let Message::Request(req) = message else {
        anyhow::bail!("expected REQUEST, got {message:?}");
    };
    Ok((requesting, stream, req.id))
}

/// Truncation, malformed heads, RESET and GOAWAY from the origin.
async fn origin_misbehaviour(kind: BackendKind) -> Result<()> {
    let origin = ScriptedOrigin::bind(kind).await?;
    let link = OriginLink::spawn(&entry(kind, origin.addr));
    let mut script = bounded(UP_LIMIT, origin.accept()).await?;
    ensure!(link.wait_up(UP_LIMIT).await);

    // RESPONSE_END that counts more bytes than arrived: an error, and RESET.
    let (requesting, stream, id) = scripted_request(&link, &mut script).await?;
    let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n");
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    let data = Bytes::from_static(b"abc");
    script
        .send(stream, Message::ResponseBody { id, data })
        .await?;
    script
        .send(stream, Message::ResponseEnd { id, body_len: 4 })
        .await?;
    let result = collect(requesting.await??.into_body()).await;
    ensure!(matches!(result, Err(LinkError::Malformed(_))), "{result:?}");
    let (_, answer) = script.recv().await?;
    ensure!(
        matches!(answer, Message::Reset { id: i, code: ErrorCode::ProtocolError, .. } if i == id),
        "{answer:?}"
    );

    // A head that is no HTTP/1.1 status line: an error before any byte, RESET.
    let (requesting, stream, id) = scripted_request(&link, &mut script).await?;
    let head = Bytes::from_static(b"HTTP/1.1 banana\r\n\r\n");
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    let err = requesting.await?.expect_err("malformed head");
    ensure!(matches!(err, LinkError::Malformed(_)), "{err:?}");
    ensure!(!err.nothing_sent());
    let (_, answer) = script.recv().await?;
    ensure!(
        matches!(answer, Message::Reset { id: i, code: ErrorCode::ProtocolError, .. } if i == id),
        "{answer:?}"
    );

    // The origin's RESET carries its code to the caller.
    let (requesting, stream, id) = scripted_request(&link, &mut script).await?;
    let reset = Message::Reset {
        id,
        code: ErrorCode::UpstreamTimeout,
        reason: "slow upstream".into(),
    };
    script.send(stream, reset).await?;
    let err = requesting.await?.expect_err("reset");
    ensure!(
        matches!(
            err,
            LinkError::Reset {
                code: ErrorCode::UpstreamTimeout,
                ..
            }
        ),
        "{err:?}"
    );
    ensure!(err.gateway_status() == 504);

    // A caller that gives up before the head: RESET CANCELLED on its stream.
    let (requesting, stream, id) = scripted_request(&link, &mut script).await?;
    requesting.abort();
    let (reset_stream, answer) = script.recv().await?;
    ensure!(
        reset_stream == stream
            && matches!(answer, Message::Reset { id: i, code: ErrorCode::Cancelled, .. } if i == id),
        "{answer:?} on {reset_stream}"
    );

    // GOAWAY: requests above last_request fail as unprocessed, the one below
    // finishes, and the link reconnects by itself.
    let (first, stream1, id1) = scripted_request(&link, &mut script).await?;
    let (second, _, id2) = scripted_request(&link, &mut script).await?;
    ensure!(id2 > id1);
    let goaway = Message::GoAway(GoAway {
        last_request: id1,
        code: ErrorCode::NoError,
        reason: "restarting".into(),
    });
    script.send(0, goaway).await?;
    let err = second.await?.expect_err("not processed");
    ensure!(
        matches!(err, LinkError::Unavailable(_)) && err.nothing_sent(),
        "{err:?}"
    );
    let head = Bytes::from_static(b"HTTP/1.1 204 No Content\r\n\r\n");
    script
        .send(stream1, Message::ResponseHead { id: id1, head })
        .await?;
    script
        .send(
            stream1,
            Message::ResponseEnd {
                id: id1,
                body_len: 0,
            },
        )
        .await?;
    let response = first.await??;
    ensure!(response.status() == 204);
    ensure!(collect(response.into_body()).await?.is_empty());
    let mut next = bounded(UP_LIMIT, origin.accept()).await?;
    ensure!(
        link.wait_up(UP_LIMIT).await,
        "no new association after GOAWAY"
    );
    // The drained association is closed by the gateway.
    let ended = bounded(UP_LIMIT, async {
        loop {
            if let Err(e) = script.recv().await {
                return Ok(e);
            }
        }
    })
    .await?;
    ensure!(ended.to_string().contains("closed"), "{ended}");

    // Shutdown: GOAWAY NO_ERROR, then a graceful close; no more requests.
    let stopping = tokio::spawn({
        let link = link.clone();
        async move { link.shutdown().await }
    });
    let (_, goaway) = next.recv().await?;
    ensure!(
        matches!(
            goaway,
            Message::GoAway(GoAway {
                code: ErrorCode::NoError,
                ..
            })
        ),
        "{goaway:?}"
    );
    ensure!(next.recv().await.is_err(), "association not closed");
    bounded(UP_LIMIT, async { Ok(stopping.await?) }).await?;
    ensure!(link.state() == LinkState::ShutDown);
    let pin = link.pin();
    let err = link
        .request(&pin, request(get("/x")))
        .await
        .expect_err("shut down");
    ensure!(matches!(err, LinkError::Unavailable(_)), "{err:?}");
    Ok(())
}

/// A request body travels as REQUEST (no END) and REQUEST_BODY chunks within the
/// origin's max_chunk, the last one with END.
async fn request_body_in_chunks(kind: BackendKind) -> Result<()> {
    let origin = ScriptedOrigin::bind(kind).await?;
    let link = OriginLink::spawn(&entry(kind, origin.addr));
    let mut script = bounded(UP_LIMIT, origin.accept()).await?;
    ensure!(link.wait_up(UP_LIMIT).await);
    let body: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8).collect();
    let sending = tokio::spawn({
        let (link, body) = (link.clone(), Bytes::from(body.clone()));
        async move {
            let pin = link.pin();
            let head = Bytes::from_static(b"POST /up HTTP/1.1\r\ncontent-length: 150000\r\n\r\n");
            let req = OriginRequest {
                head,
                body,
                urgency: 9,
                class: RequestClass::Prefetch,
                priority: None,
            };
            link.request(&pin, req).await
        }
    });
    let (stream, message) = script.recv().await?;
    let Message::Request(req) = message else {
        anyhow::bail!("expected REQUEST, got {message:?}");
    };
    ensure!(!req.end && req.class == RequestClass::Prefetch && req.urgency.level() == 7);
    let mut received = Vec::new();
    loop {
        let (s, message) = script.recv().await?;
        let Message::RequestBody { id, end, data } = message else {
            anyhow::bail!("expected REQUEST_BODY, got {message:?}");
        };
        ensure!(s == stream && id == req.id && data.len() <= gateway_protocol::MAX_CHUNK);
        received.extend_from_slice(&data);
        if end {
            break;
        }
    }
    ensure!(received == body, "body of {} bytes differs", received.len());
    let head = Bytes::from_static(b"HTTP/1.1 201 Created\r\n\r\n");
    let id = req.id;
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    script
        .send(stream, Message::ResponseEnd { id, body_len: 0 })
        .await?;
    let response = sending.await??;
    ensure!(response.status() == 201);
    ensure!(collect(response.into_body()).await?.is_empty());
    Ok(())
}

/// A prefetch of `path` at urgency 7 whose priority follows `watched`.
fn prefetch(path: &str, watched: Option<watch::Receiver<(u8, RequestClass)>>) -> OriginRequest {
    OriginRequest {
        head: get(path),
        body: Bytes::new(),
        urgency: 7,
        class: RequestClass::Prefetch,
        priority: watched,
    }
}

/// Waits until the origin's handler has been handed `count` requests, that is,
/// until the origin's scheduler holds all of them.
async fn origin_has_seen(origin: &TestOrigin, count: u64) -> Result<()> {
    bounded(UP_LIMIT, async {
        while origin.handler.requests.load(Ordering::Relaxed) < count {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    })
    .await
}

/// The origin's priority scheduler serves equal prefetches in arrival order. A
/// prefetch promoted to demand once all of them are queued at the origin (so
/// only PRIORITY can reach it) overtakes the prefetches that arrived before it:
/// it finishes before all of them except, possibly, the first, which was
/// already running.
///
/// A scheduler orders only what it still holds. Framed TCP's socket buffers,
/// autotuned to megabytes on loopback, would take every response here on its
/// way before the PRIORITY arrives; small buffers keep the depth below the
/// scheduler shallow, as SCTP's receive window does for the userspace backend.
async fn a_promoted_prefetch_overtakes_earlier_ones(kind: BackendKind) -> Result<()> {
    let mut transport = support::transport();
    if kind == BackendKind::FramedTcp {
        transport.send_buffer = Some(64 * 1024);
        transport.recv_buffer = Some(64 * 1024);
    }
    let origin = TestOrigin::start_with(
        kind,
        free_address(kind)?,
        ResponsePolicyKind::Priority,
        &transport,
    )
    .await?;
    let mut entry = entry(kind, origin.addr);
    entry.transport = transport;
    let link = OriginLink::spawn(&entry);
    ensure!(link.wait_up(UP_LIMIT).await, "link did not come up");
    let (promote, watched) = watch::channel((7, RequestClass::Prefetch));
    let mut watched = Some(watched);
    let sizes = [2_000_000u64, 600_000, 600_000, 600_000, 600_000];
    let promoted = sizes.len() - 1;
    let mut fetches = JoinSet::new();
    for (i, size) in sizes.into_iter().enumerate() {
        let req = prefetch(
            &format!("/bytes/{size}"),
            if i == promoted { watched.take() } else { None },
        );
        let link = link.clone();
        fetches.spawn(async move {
            let pin = link.pin();
            let response = link.request(&pin, req).await?;
            let body = collect(response.into_body()).await?;
            ensure!(
                body == pattern(size),
                "request {i}: {} bytes differ from /bytes/{size}",
                body.len()
            );
            Ok((Instant::now(), i))
        });
        // One at a time, so that the origin's arrival order is this order.
        origin_has_seen(&origin, i as u64 + 1).await?;
    }
    promote.send_replace((1, RequestClass::Demand));
    let mut finished = Vec::new();
    while let Some(done) = fetches.join_next().await {
        finished.push(done??);
    }
    finished.sort();
    let order: Vec<usize> = finished.into_iter().map(|(_, i)| i).collect();
    let ahead = order
        .iter()
        .position(|i| *i == promoted)
        .context("the promoted request is missing")?;
    ensure!(
        order[..ahead].iter().all(|i| *i == 0),
        "finished in order {order:?}: the promoted request {promoted} did not overtake"
    );
    Ok(())
}

fn priority(id: u32, urgency: u8, class: RequestClass) -> Result<Message> {
    let urgency = Urgency::new(urgency).context("urgency above 7")?;
    Ok(Message::Priority { id, urgency, class })
}

/// What the link sends for a promotion: one PRIORITY per change on the
/// request's stream while it is open (before and after the head; an unchanged
/// value is not sent, urgency above 7 counts as 7), nothing once the response
/// has ended; a change made before the REQUEST goes out rides in the REQUEST.
async fn promotions_on_the_wire(kind: BackendKind) -> Result<()> {
    let origin = ScriptedOrigin::bind(kind).await?;
    let link = OriginLink::spawn(&entry(kind, origin.addr));
    let mut script = bounded(UP_LIMIT, origin.accept()).await?;
    ensure!(link.wait_up(UP_LIMIT).await);
    let spawn_request = |req: OriginRequest| {
        let link = link.clone();
        tokio::spawn(async move {
            let pin = link.pin();
            link.request(&pin, req).await
        })
    };

    let (promote, watched) = watch::channel((7, RequestClass::Prefetch));
    let requesting = spawn_request(prefetch("/x", Some(watched)));
    let (stream, message) = script.recv().await?;
    let Message::Request(req) = message else {
        anyhow::bail!("expected REQUEST, got {message:?}");
    };
    ensure!(req.class == RequestClass::Prefetch && req.urgency.level() == 7);
    let id = req.id;
    // Before the response head.
    promote.send_replace((1, RequestClass::Demand));
    let got = bounded(UP_LIMIT, script.recv()).await?;
    ensure!(
        got == (stream, priority(id, 1, RequestClass::Demand)?),
        "{got:?}"
    );
    let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n");
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    let response = requesting.await??;
    // After it: an unchanged value is skipped, urgency 9 counts as 7.
    promote.send_replace((1, RequestClass::Demand));
    promote.send_replace((9, RequestClass::Demand));
    let got = bounded(UP_LIMIT, script.recv()).await?;
    ensure!(
        got == (stream, priority(id, 7, RequestClass::Demand)?),
        "{got:?}"
    );
    script
        .send(stream, Message::ResponseEnd { id, body_len: 0 })
        .await?;
    ensure!(collect(response.into_body()).await?.is_empty());
    // The response has ended: changes are no longer sent.
    promote.send_replace((0, RequestClass::Demand));

    // Promoted before it was sent: the REQUEST itself carries the new value.
    let (promote_early, watched) = watch::channel((7, RequestClass::Prefetch));
    promote_early.send_replace((2, RequestClass::Demand));
    let requesting = spawn_request(prefetch("/y", Some(watched)));
    let (stream, message) = script.recv().await?;
    let Message::Request(req) = message else {
        anyhow::bail!("expected REQUEST, got {message:?}");
    };
    ensure!(
        req.class == RequestClass::Demand && req.urgency.level() == 2,
        "{req:?}"
    );
    let id = req.id;
    let head = Bytes::from_static(b"HTTP/1.1 204 No Content\r\n\r\n");
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    script
        .send(stream, Message::ResponseEnd { id, body_len: 0 })
        .await?;
    ensure!(requesting.await??.status() == 204);
    // Nothing came in between: the next message is the next REQUEST.
    tokio::time::sleep(Duration::from_millis(100)).await;
    scripted_request(&link, &mut script).await?;
    Ok(())
}

/// An origin that did not announce PRIORITY never receives one: the request
/// is served at the priority it was sent with.
async fn no_priority_to_an_older_origin(kind: BackendKind) -> Result<()> {
    let origin = ScriptedOrigin::bind(kind).await?;
    let link = OriginLink::spawn(&entry(kind, origin.addr));
    let older = Capabilities::FEEDBACK | Capabilities::PREFETCH_CLASS;
    let mut script = bounded(UP_LIMIT, origin.accept_offering(older)).await?;
    ensure!(link.wait_up(UP_LIMIT).await);
    let (promote, watched) = watch::channel((7, RequestClass::Prefetch));
    let requesting = tokio::spawn({
        let link = link.clone();
        async move {
            let pin = link.pin();
            link.request(&pin, prefetch("/x", Some(watched))).await
        }
    });
    let (stream, message) = script.recv().await?;
    let Message::Request(req) = message else {
        anyhow::bail!("expected REQUEST, got {message:?}");
    };
    let id = req.id;
    promote.send_replace((0, RequestClass::Demand));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The scripted origin's session, like an older origin, refuses to pass a
    // PRIORITY on, so a PRIORITY here fails the test.
    scripted_request(&link, &mut script).await?;
    let head = Bytes::from_static(b"HTTP/1.1 204 No Content\r\n\r\n");
    script
        .send(stream, Message::ResponseHead { id, head })
        .await?;
    script
        .send(stream, Message::ResponseEnd { id, body_len: 0 })
        .await?;
    ensure!(requesting.await??.status() == 204);
    Ok(())
}

macro_rules! backend_tests {
    ($module:ident, $kind:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn responses_arrive_byte_for_byte_on_many_pins() -> Result<()> {
                bounded(TEST_LIMIT, exact_bytes($kind)).await
            }

            #[tokio::test]
            async fn concurrent_requests_share_one_stream() -> Result<()> {
                bounded(TEST_LIMIT, one_stream_shared_by_concurrent_requests($kind)).await
            }

            #[tokio::test]
            async fn flows_pin_to_the_least_loaded_stream() -> Result<()> {
                bounded(TEST_LIMIT, pinning($kind)).await
            }

            #[tokio::test]
            async fn a_killed_origin_breaks_the_body() -> Result<()> {
                bounded(TEST_LIMIT, origin_dies_mid_response($kind)).await
            }

            #[tokio::test]
            async fn an_absent_origin_is_unavailable_at_once() -> Result<()> {
                bounded(TEST_LIMIT, absent_origin($kind)).await
            }

            #[tokio::test]
            async fn a_late_origin_is_found_by_the_backoff() -> Result<()> {
                bounded(TEST_LIMIT, origin_started_later($kind)).await
            }

            #[tokio::test]
            async fn dropping_the_body_cancels_the_response() -> Result<()> {
                bounded(TEST_LIMIT, dropping_the_body_cancels($kind)).await
            }

            #[tokio::test]
            async fn the_body_ends_only_after_response_end() -> Result<()> {
                bounded(TEST_LIMIT, body_ends_only_after_end($kind)).await
            }

            #[tokio::test]
            async fn a_request_body_travels_in_chunks() -> Result<()> {
                bounded(TEST_LIMIT, request_body_in_chunks($kind)).await
            }

            #[tokio::test]
            async fn origin_errors_map_to_link_errors() -> Result<()> {
                bounded(TEST_LIMIT, origin_misbehaviour($kind)).await
            }

            #[tokio::test]
            async fn a_promoted_prefetch_overtakes_earlier_prefetches() -> Result<()> {
                bounded(
                    TEST_LIMIT,
                    a_promoted_prefetch_overtakes_earlier_ones($kind),
                )
                .await
            }

            #[tokio::test]
            async fn promotions_travel_as_priority_messages() -> Result<()> {
                bounded(TEST_LIMIT, promotions_on_the_wire($kind)).await
            }

            #[tokio::test]
            async fn an_older_origin_gets_no_priority() -> Result<()> {
                bounded(TEST_LIMIT, no_priority_to_an_older_origin($kind)).await
            }
        }
    };
}

/// `/metrics`' transport figures of `link`, as the admin endpoint encodes them.
fn transport_metrics(link: &OriginLink) -> Result<String> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(gateway::metrics::TransportCollector::new(vec![
        link.clone(),
    ])));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// The value of `name{origin="test"}` in `text`, if the series is there.
fn series(text: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{origin=\"test\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.parse().ok())
}

/// Scrapes until `ready` holds for the encoded text, or fails at `limit`
/// with the last scrape.
async fn scrape_until(
    link: &OriginLink,
    limit: Duration,
    ready: impl Fn(&str) -> bool,
) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        let text = transport_metrics(link)?;
        if ready(&text) {
            return Ok(text);
        }
        ensure!(
            Instant::now() < deadline,
            "not there within {limit:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Over a real userspace SCTP association: after traffic the link's transport
/// figures are on the metrics (RTT measured, packets counted); after the
/// association dies the per-association gauges go and `up` turns 0, and the
/// counters carry on from where they were across the reconnection.
#[tokio::test]
async fn userspace_sctp_figures_reach_the_metrics_and_counters_survive_a_reconnection() -> Result<()>
{
    bounded(TEST_LIMIT, async {
        let kind = BackendKind::Userspace;
        let (origin, link) = link_to_origin(kind).await?;
        let pin = link.pin();
        fetch(&link, &pin, 300_000).await?;
        let text = scrape_until(&link, UP_LIMIT, |text| {
            series(text, "gateway_origin_srtt_seconds").is_some_and(|v| v > 0.0)
                && series(text, "gateway_origin_packets_sent_total").is_some_and(|v| v > 0.0)
        })
        .await?;
        for name in [
            "gateway_origin_up",
            "gateway_origin_rto_seconds",
            "gateway_origin_cwnd_bytes",
            "gateway_origin_in_flight_bytes",
            "gateway_origin_packets_received_total",
            "gateway_origin_retransmitted_chunks_total",
            "gateway_origin_chunks_lost_by_sack_total",
            "gateway_origin_chunks_lost_by_reorder_timer_total",
            "gateway_origin_tail_loss_probes_total",
            "gateway_origin_rto_expirations_total",
            "gateway_origin_spurious_recoveries_total",
        ] {
            ensure!(series(&text, name).is_some(), "no {name} in:\n{text}");
        }
        ensure!(series(&text, "gateway_origin_up") == Some(1.0), "{text}");
        ensure!(
            series(&text, "gateway_origin_cwnd_bytes").is_some_and(|v| v > 0.0),
            "{text}"
        );
        ensure!(
            series(&text, "gateway_origin_packets_received_total").is_some_and(|v| v > 0.0),
            "{text}"
        );
        let sent = series(&text, "gateway_origin_packets_sent_total").unwrap_or_default();

        let addr = origin.addr;
        origin.kill();
        drop(origin);
        let down = scrape_until(&link, UP_LIMIT, |text| {
            series(text, "gateway_origin_up") == Some(0.0)
        })
        .await?;
        ensure!(
            series(&down, "gateway_origin_srtt_seconds").is_none(),
            "an RTT without an association:\n{down}"
        );
        let sent_down = series(&down, "gateway_origin_packets_sent_total").unwrap_or_default();
        ensure!(
            sent_down >= sent,
            "packets sent went back: {sent} then {sent_down}"
        );

        let _origin = TestOrigin::start(kind, addr).await?;
        ensure!(
            link.wait_up(Duration::from_secs(3)).await,
            "no reconnection"
        );
        fetch(&link, &pin, 1_000).await?;
        let again = scrape_until(&link, UP_LIMIT, |text| {
            series(text, "gateway_origin_up") == Some(1.0)
                && series(text, "gateway_origin_packets_sent_total").is_some_and(|v| v > sent_down)
        })
        .await?;
        ensure!(
            series(&again, "gateway_origin_srtt_seconds").is_some(),
            "{again}"
        );
        Ok(())
    })
    .await
}

/// Framed TCP has no figures of ours: `up` only, no RTT, no counters.
#[tokio::test]
async fn other_backends_report_only_whether_they_are_up() -> Result<()> {
    bounded(TEST_LIMIT, async {
        let (_origin, link) = link_to_origin(BackendKind::FramedTcp).await?;
        let pin = link.pin();
        fetch(&link, &pin, 10_000).await?;
        let text = transport_metrics(&link)?;
        ensure!(series(&text, "gateway_origin_up") == Some(1.0), "{text}");
        for name in [
            "gateway_origin_srtt_seconds",
            "gateway_origin_cwnd_bytes",
            "gateway_origin_packets_sent_total",
        ] {
            ensure!(
                series(&text, name).is_none(),
                "{name} on framed TCP:\n{text}"
            );
        }
        Ok(())
    })
    .await
}

backend_tests!(userspace, BackendKind::Userspace);
backend_tests!(framed_tcp, BackendKind::FramedTcp);
backend_tests!(quic, BackendKind::Quic);
