//! The browser-facing HTTP/1.1 front on loopback, without TPROXY: the test
//! accepts browser connections itself and hands them to [`Front::serve`] with an
//! "original destination" of its choosing (a small upstream server), which is
//! exactly what the transparent listener would report.
//!
//! Raw bytes on the browser side, so that malformed and pipelined input is what
//! the gateway really sees.

#[path = "support/origin_link.rs"]
#[allow(
    dead_code,
    reason = "shared with the origin_link tests; this file uses a part"
)]
mod origin_support;

#[path = "support/http.rs"]
mod http_support;

#[path = "support/netns.rs"]
mod netns;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway::cache::Cache;
use gateway::config::{GatewayConfig, OriginEntry};
use gateway::front::Front;
use gateway::listener::Intercepted;
use gateway::origin_link::OriginLink;
use http_body_util::{BodyExt, Full};
use http_support::{Answer, EXCHANGE_TIMEOUT, exchange};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// An upstream HTTP/1.1 server standing in for the original destination.
/// `/echo` answers with what it received; `/bytes/N` with N bytes.
struct Upstream {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
}

async fn upstream() -> Result<Upstream> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        let path = parts.uri.path().to_owned();
                        let answer = if let Some(n) = path.strip_prefix("/bytes/") {
                            Bytes::from(vec![b'x'; n.parse().unwrap_or(0)])
                        } else {
                            let header = |name: &str| {
                                parts
                                    .headers
                                    .get_all(name)
                                    .iter()
                                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                                    .collect::<Vec<_>>()
                                    .join(",")
                            };
                            Bytes::from(format!(
                                "{} {} host={} via={} connection={} body={}",
                                parts.method,
                                parts.uri,
                                header("host"),
                                header("via"),
                                header("connection"),
                                String::from_utf8_lossy(&body),
                            ))
                        };
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(answer)))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(Upstream { addr, requests })
}

/// A front whose browser connections all claim `dst` as their original destination.
async fn front(config: GatewayConfig, dst: SocketAddr) -> Result<SocketAddr> {
    Ok(front_with_links(config, dst).await?.0)
}

/// [`front`], also returning the origin links.
async fn front_with_links(
    config: GatewayConfig,
    dst: SocketAddr,
) -> Result<(SocketAddr, Vec<OriginLink>)> {
    let links: Vec<OriginLink> = config.origins.iter().map(OriginLink::spawn).collect();
    let front = Arc::new(Front::new(&config, links.clone(), Cache::disabled()));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        // Kept alive by the accept loop; the test's runtime ends it.
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
    Ok((addr, links))
}

fn get(path: &str, host: &str, close: bool) -> String {
    let connection = if close { "connection: close\r\n" } else { "" };
    format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{connection}\r\n")
}

#[tokio::test]
async fn direct_requests_reach_the_destination_with_via() -> Result<()> {
    let up = upstream().await?;
    let gw = front(GatewayConfig::default(), up.addr).await?;
    let host = up.addr.to_string();
    let raw = format!(
        "POST /echo?q=1 HTTP/1.1\r\nhost: {host}\r\ncontent-length: 5\r\nconnection: close, x-hop\r\nx-hop: secret\r\n\r\nhello"
    );
    let answers = exchange(gw, raw.as_bytes()).await?;
    assert_eq!(answers.len(), 1);
    let a = &answers[0];
    assert_eq!(a.status, 200, "{}", a.text());
    let via = our_via(a)?;
    assert_eq!(
        a.text(),
        format!("POST /echo?q=1 host={host} via={via} connection= body=hello")
    );
    Ok(())
}

/// The gateway's `Via` entry on `answer`: `1.1 sctp-gateway-` and an id of
/// eight hex digits.
fn our_via(answer: &http_support::Answer) -> Result<&str> {
    let via = answer.header("via").context("no Via")?;
    let id = via
        .strip_prefix("1.1 sctp-gateway-")
        .with_context(|| format!("not the gateway's Via: {via}"))?;
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("not the gateway's Via: {via}");
    }
    Ok(via)
}

/// A request that already passed through this gateway would come back to it
/// forever: 508 at once, nothing sent upstream, and other requests still served.
/// Another gateway's entry (a gateway behind a gateway) is no loop.
#[tokio::test]
async fn a_request_carrying_this_gateways_via_is_a_loop() -> Result<()> {
    let up = upstream().await?;
    let gw = front(GatewayConfig::default(), up.addr).await?;
    let host = up.addr.to_string();
    let first = exchange(gw, get("/echo", &host, true).as_bytes()).await?;
    let via = our_via(&first[0])?.to_owned();
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);

    let looped = format!(
        "POST /loop HTTP/1.1\r\nhost: {host}\r\nvia: 1.0 fred, {via}\r\ncontent-length: 0\r\n\r\n"
    );
    let answers = exchange(gw, looped.as_bytes()).await?;
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].status, 508, "{}", answers[0].text());
    assert_eq!(
        answers[0].text(),
        "508 Loop Detected: the request has already passed through this gateway\n"
    );
    assert_eq!(answers[0].header("connection"), Some("close"));
    assert_eq!(
        up.requests.load(Ordering::SeqCst),
        1,
        "nothing went upstream"
    );

    let chained = format!(
        "GET /echo HTTP/1.1\r\nhost: {host}\r\nvia: 1.1 sctp-gateway-00000000\r\nconnection: close\r\n\r\n"
    );
    let answers = exchange(gw, chained.as_bytes()).await?;
    assert_eq!(answers[0].status, 200, "{}", answers[0].text());
    assert_eq!(
        answers[0].text(),
        format!("GET /echo host={host} via=1.1 sctp-gateway-00000000,{via} connection= body=")
    );
    Ok(())
}

/// What the `front_head` fuzz target found, with the exact bytes: obs-text in
/// another entry of a `Via` field hid a loop, and in a `Connection` field kept
/// the fields it named; `GET *` went upstream as it was and `http://h?q` as
/// `GET ?q` (there: a 400 of the gateway's own making).
#[tokio::test]
async fn obs_text_and_target_forms_found_by_fuzzing() -> Result<()> {
    let up = upstream().await?;
    let gw = front(GatewayConfig::default(), up.addr).await?;
    let host = up.addr.to_string();
    let first = exchange(gw, get("/echo", &host, true).as_bytes()).await?;
    let via = our_via(&first[0])?.to_owned();

    let looped = [
        format!("GET /loop HTTP/1.1\r\nhost: {host}\r\nvia: 1.0 caf").as_bytes(),
        b"\xe9",
        format!(", {via}\r\nconnection: close\r\n\r\n").as_bytes(),
    ]
    .concat();
    let answers = exchange(gw, &looped).await?;
    assert_eq!(answers[0].status, 508, "{}", answers[0].text());

    let star = format!("GET * HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    let answers = exchange(gw, star.as_bytes()).await?;
    assert_eq!(
        answers[0].text(),
        "400 Bad Request: an asterisk-form request target is only for OPTIONS\n"
    );
    assert_eq!(
        up.requests.load(Ordering::SeqCst),
        1,
        "nothing more went upstream"
    );

    let named = [
        format!("GET /echo HTTP/1.1\r\nhost: {host}\r\nvia: 1.0 browser-side\r\nconnection: close\r\nconnection: via, caf").as_bytes(),
        b"\xe9\r\n\r\n",
    ]
    .concat();
    let answers = exchange(gw, &named).await?;
    assert_eq!(
        answers[0].text(),
        format!("GET /echo host={host} via={via} connection= body=")
    );

    let query = format!("GET http://{host}?q=1 HTTP/1.1\r\nconnection: close\r\n\r\n");
    let answers = exchange(gw, query.as_bytes()).await?;
    assert_eq!(
        answers[0].text(),
        format!("GET /?q=1 host={host} via={via} connection= body=")
    );
    Ok(())
}

/// A destination that is one of this host's own addresses (not loopback) is
/// never connected to: the request could only loop back into the gateway. In a
/// namespace of its own, with addresses of both families on its loopback
/// interface.
#[test]
fn the_gateway_never_connects_to_its_own_addresses() -> Result<()> {
    let ns = netns::NetNsGuard::new("gwf")?;
    ns.exec("ip", &["link", "set", "lo", "up"])?;
    netns::add_address(&ns, "lo", "10.77.0.1/32")?;
    netns::add_address(&ns, "lo", "fd77::1/128")?;
    ns.run(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            for own in ["10.77.0.1:8080", "[fd77::1]:8080"] {
                let own: SocketAddr = own.parse()?;
                let listener = TcpListener::bind(own).await?;
                let gw = front(GatewayConfig::default(), own).await?;
                let answers = exchange(gw, get("/", &own.to_string(), true).as_bytes()).await?;
                assert_eq!(answers.len(), 1);
                assert_eq!(answers[0].status, 508, "{}", answers[0].text());
                assert_eq!(
                    answers[0].text(),
                    format!(
                        "508 Loop Detected: {own} is this host's own address: not connecting to itself\n"
                    )
                );
                let accepted =
                    tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
                assert!(accepted.is_err(), "the gateway connected to {own}");
            }
            Ok(())
        })
    })
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() -> Result<()> {
    let up = upstream().await?;
    let gw = front(GatewayConfig::default(), up.addr).await?;
    let host = up.addr.to_string();
    let raw = [
        get("/bytes/70000", &host, false),
        get("/echo?second", &host, false),
        get("/bytes/3", &host, true),
    ]
    .concat();
    let answers = exchange(gw, raw.as_bytes()).await?;
    let lengths: Vec<usize> = answers.iter().map(|a| a.body.len()).collect();
    assert_eq!(answers.len(), 3, "{lengths:?}");
    assert_eq!(answers[0].body.len(), 70000);
    assert!(
        answers[1].text().starts_with("GET /echo?second "),
        "{}",
        answers[1].text()
    );
    assert_eq!(answers[2].body, b"xxx");
    // One upstream connection served all three (the flow keeps its shape).
    assert_eq!(up.requests.load(Ordering::SeqCst), 3);
    Ok(())
}

/// The count of header fields is a limit of its own (`http.max_header_fields`),
/// not hidden behind the head's byte limit: 80 small fields pass at the
/// default of 100 and get 431 from the gateway itself (the upstream sees
/// nothing) when the count is lowered to 50.
#[tokio::test]
async fn the_header_field_count_is_a_configurable_limit() -> Result<()> {
    let up = upstream().await?;
    let host = up.addr.to_string();
    let fields: String = (0..80).map(|i| format!("x-f{i}: {i}\r\n")).collect();
    let request = format!("GET / HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n{fields}\r\n");
    let status = |answers: Vec<Answer>| answers.first().map(|a| a.status);

    let gw = front(GatewayConfig::default(), up.addr).await?;
    assert_eq!(status(exchange(gw, request.as_bytes()).await?), Some(200));
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);

    let mut config = GatewayConfig::default();
    config.http.max_header_fields = 50;
    let gw = front(config, up.addr).await?;
    assert_eq!(status(exchange(gw, request.as_bytes()).await?), Some(431));
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);
    Ok(())
}

/// RFC 9112, section 3.2: a host-only target on GET is 400 (it was forwarded
/// as `GET /`), and two Host fields are 400 beside an absolute-form target
/// too; neither reaches the upstream, and the next client is served.
#[tokio::test]
async fn target_forms_and_host_fields_follow_rfc_9112() -> Result<()> {
    let up = upstream().await?;
    let host = up.addr.to_string();
    let gw = front(GatewayConfig::default(), up.addr).await?;
    let status = |answers: Vec<Answer>| answers.first().map(|a| a.status);

    let authority_form = format!("GET foo HTTP/1.1\r\nhost: {host}\r\n\r\n");
    assert_eq!(
        status(exchange(gw, authority_form.as_bytes()).await?),
        Some(400)
    );
    let two_hosts =
        format!("GET http://{host}/ HTTP/1.1\r\nhost: {host}\r\nhost: other.example\r\n\r\n");
    assert_eq!(status(exchange(gw, two_hosts.as_bytes()).await?), Some(400));
    assert_eq!(up.requests.load(Ordering::SeqCst), 0);

    let absolute =
        format!("GET http://{host}/ok HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    assert_eq!(status(exchange(gw, absolute.as_bytes()).await?), Some(200));
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);
    Ok(())
}

#[tokio::test]
async fn limits_answer_with_the_right_status() -> Result<()> {
    let up = upstream().await?;
    let mut config = GatewayConfig::default();
    config.http.max_header_bytes = 8192;
    config.http.max_uri_bytes = 100;
    config.http.max_body_bytes = 10;
    let gw = front(config, up.addr).await?;
    let host = up.addr.to_string();

    let big_header = format!(
        "GET / HTTP/1.1\r\nhost: {host}\r\nx-big: {}\r\n\r\n",
        "a".repeat(9000)
    );
    let status = |answers: Vec<Answer>| answers.first().map(|a| a.status);
    assert_eq!(
        status(exchange(gw, big_header.as_bytes()).await?),
        Some(431)
    );

    let long_uri = get(&format!("/{}", "u".repeat(200)), &host, false);
    assert_eq!(status(exchange(gw, long_uri.as_bytes()).await?), Some(414));

    let declared = format!("POST / HTTP/1.1\r\nhost: {host}\r\ncontent-length: 11\r\n\r\n");
    assert_eq!(status(exchange(gw, declared.as_bytes()).await?), Some(413));

    let chunked = format!(
        "POST / HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"
    );
    assert_eq!(status(exchange(gw, chunked.as_bytes()).await?), Some(413));

    let no_host = "GET / HTTP/1.1\r\n\r\n";
    assert_eq!(status(exchange(gw, no_host.as_bytes()).await?), Some(400));

    let two_hosts = format!("GET / HTTP/1.1\r\nhost: {host}\r\nhost: {host}\r\n\r\n");
    assert_eq!(status(exchange(gw, two_hosts.as_bytes()).await?), Some(400));

    let garbage = "GET / HTTP/1.1\r\nno colon here\r\n\r\n";
    assert_eq!(status(exchange(gw, garbage.as_bytes()).await?), Some(400));

    assert_eq!(
        up.requests.load(Ordering::SeqCst),
        0,
        "nothing reached the destination"
    );
    Ok(())
}

/// Issue 14: a chunk size of `ffffffffffffffff` is a 413 at once (it held the
/// connection for the body time-out, then 408), and the next client is served.
/// The body time-out is longer than the exchange's deadline, so the old
/// answer fails this test.
#[tokio::test]
async fn a_chunk_size_past_the_body_limit_is_413_at_once() -> Result<()> {
    let up = upstream().await?;
    let mut config = GatewayConfig::default();
    config.http.body_timeout = EXCHANGE_TIMEOUT * 3;
    config.http.max_body_bytes = 10;
    let gw = front(config, up.addr).await?;
    let host = up.addr.to_string();
    let status = |answers: Vec<Answer>| answers.first().map(|a| a.status);

    let huge = format!(
        "POST / HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n"
    );
    assert_eq!(status(exchange(gw, huge.as_bytes()).await?), Some(413));
    // Behind a first request on the same connection, and in two chunks that
    // pass the limit only together.
    let second = format!(
        "GET /a HTTP/1.1\r\nhost: {host}\r\n\r\n\
         POST / HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n\
         5\r\nabcde\r\n6\r\n"
    );
    let answers = exchange(gw, second.as_bytes()).await?;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 413]);
    assert_eq!(up.requests.load(Ordering::SeqCst), 1, "only GET /a went on");

    let ok = format!(
        "POST /echo HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    );
    let answers = exchange(gw, ok.as_bytes()).await?;
    assert_eq!(answers.first().map(|a| a.status), Some(200));
    assert!(
        answers[0].text().ends_with("body=abc"),
        "{}",
        answers[0].text()
    );
    Ok(())
}

/// RFC 9112, section 2.3 (issue 14): `HTTP/1.2` is served as 1.1 (it got
/// 400), `HTTP/2.0` and `HTTP/3.0` on a request line get 505 (they got 400),
/// versions that are not `HTTP/D.D` stay 400; the next client is served.
#[tokio::test]
async fn request_line_versions_follow_rfc_9112() -> Result<()> {
    let up = upstream().await?;
    let gw = front(GatewayConfig::default(), up.addr).await?;
    let host = up.addr.to_string();
    let request = |version: &str| {
        format!("GET /v HTTP/{version}\r\nhost: {host}\r\nconnection: close\r\n\r\n")
    };
    let status = |answers: Vec<Answer>| answers.first().map(|a| a.status);

    let answers = exchange(gw, request("1.2").as_bytes()).await?;
    assert_eq!(answers.first().map(|a| a.status), Some(200));
    assert!(
        answers[0].text().starts_with("GET /v "),
        "{}",
        answers[0].text()
    );
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);

    for version in ["2.0", "3.0", "0.9"] {
        let answers = exchange(gw, request(version).as_bytes()).await?;
        assert_eq!(
            answers.first().map(|a| a.status),
            Some(505),
            "HTTP/{version}"
        );
        assert_eq!(answers[0].header("connection"), Some("close"));
    }
    for version in ["1.10", "2", "x.y"] {
        assert_eq!(
            status(exchange(gw, request(version).as_bytes()).await?),
            Some(400),
            "HTTP/{version}"
        );
    }
    assert_eq!(
        up.requests.load(Ordering::SeqCst),
        1,
        "none of those went on"
    );

    assert_eq!(
        status(exchange(gw, request("1.1").as_bytes()).await?),
        Some(200)
    );
    Ok(())
}

#[tokio::test]
async fn a_slow_client_is_disconnected() -> Result<()> {
    let up = upstream().await?;
    let mut config = GatewayConfig::default();
    config.http.header_timeout = Duration::from_millis(300);
    let gw = front(config, up.addr).await?;
    let mut stream = TcpStream::connect(gw).await?;
    stream.write_all(b"GET / HTTP/1.1\r\nhost: x").await?;
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received))
        .await
        .context("a client that never finishes its head must be cut off")??;
    assert_eq!(up.requests.load(Ordering::SeqCst), 0);
    Ok(())
}

/// An origin that never answers: nothing listens at its address.
fn dead_origin(fail_open: bool) -> OriginEntry {
    OriginEntry {
        name: "dead".to_owned(),
        address: "127.0.0.1:9".parse().expect("literal"),
        destinations: vec!["127.0.0.0/8".parse().expect("cidr")],
        hosts: Vec::new(),
        backend: gateway_transport::BackendKind::FramedTcp.into(),
        fail_open,
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_secs(1),

        response_timeout: Duration::from_secs(10),
        feedback: Default::default(),
        transport: Default::default(),
    }
}

#[tokio::test]
async fn an_unreachable_origin_fails_open_or_answers_502() -> Result<()> {
    let up = upstream().await?;
    let host = up.addr.to_string();

    let config = GatewayConfig {
        origins: vec![dead_origin(true)],
        ..GatewayConfig::default()
    };
    let gw = front(config, up.addr).await?;
    let answers = exchange(gw, get("/echo", &host, true).as_bytes()).await?;
    assert_eq!(answers[0].status, 200, "fail-open goes to the destination");

    let config = GatewayConfig {
        origins: vec![dead_origin(false)],
        ..GatewayConfig::default()
    };
    let gw = front(config, up.addr).await?;
    let answers = exchange(gw, get("/echo", &host, true).as_bytes()).await?;
    assert_eq!(answers[0].status, 502, "{}", answers[0].text());
    assert!(
        answers[0].text().contains("origin dead"),
        "{}",
        answers[0].text()
    );
    assert_eq!(
        up.requests.load(Ordering::SeqCst),
        1,
        "only the fail-open request went direct"
    );
    Ok(())
}

#[tokio::test]
async fn a_host_that_does_not_match_the_destination_goes_direct() -> Result<()> {
    // The origin would refuse (down, no fail-open); a forged Host must not be
    // routed by name, and goes to the original destination instead.
    let up = upstream().await?;
    let config = GatewayConfig {
        origins: vec![dead_origin(false)],
        ..GatewayConfig::default()
    };
    let gw = front(config, up.addr).await?;
    let answers = exchange(gw, get("/echo", "bank.example", true).as_bytes()).await?;
    assert_eq!(answers[0].status, 200, "{}", answers[0].text());
    assert!(
        answers[0].text().contains("host=bank.example"),
        "{}",
        answers[0].text()
    );
    Ok(())
}

#[tokio::test]
async fn an_unreachable_destination_gets_502() -> Result<()> {
    // Bind and drop to find a port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let gw = front(GatewayConfig::default(), closed).await?;
    let answers = exchange(gw, get("/", &closed.to_string(), true).as_bytes()).await?;
    assert_eq!(answers[0].status, 502, "{}", answers[0].text());
    Ok(())
}

/// A gateway whose destination 127.0.0.0/8 maps to a real in-process origin
/// over userspace SCTP, without fail-open: every answer comes from the origin or
/// from the gateway itself, never from `dst` (where nothing listens).
async fn origin_front() -> Result<(
    origin_support::TestOrigin,
    SocketAddr,
    SocketAddr,
    OriginLink,
)> {
    let kind = gateway_transport::BackendKind::Userspace;
    let origin =
        origin_support::TestOrigin::start(kind, origin_support::free_address(kind)?).await?;
    let mut entry = origin_support::entry(kind, origin.addr);
    entry.destinations = vec!["127.0.0.0/8".parse()?];
    entry.hosts.clear();
    entry.fail_open = false;
    let config = GatewayConfig {
        origins: vec![entry],
        ..GatewayConfig::default()
    };
    let dst = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let (gw, links) = front_with_links(config, dst).await?;
    let link = links.into_iter().next().context("one link")?;
    anyhow::ensure!(
        link.wait_up(Duration::from_secs(5)).await,
        "the origin link came up"
    );
    Ok((origin, gw, dst, link))
}

#[tokio::test]
async fn mapped_requests_travel_over_sctp_with_exact_bytes() -> Result<()> {
    let (origin, gw, dst, link) = origin_front().await?;
    let answers = exchange(gw, get("/bytes/200000", &dst.to_string(), true).as_bytes()).await?;
    assert_eq!(answers[0].status, 200, "{}", answers[0].text());
    let expected: Vec<u8> = (0..200_000).map(origin::synthetic::pattern_byte).collect();
    assert!(
        answers[0].body == expected,
        "body differs from the origin's pattern"
    );
    our_via(&answers[0])?;
    assert_eq!(origin.handler.produced.load(Ordering::Relaxed), 200_000);
    // The connection is gone, so its pin is released.
    let pinned: u32 = (1..origin_support::STREAMS).map(|s| link.pinned(s)).sum();
    assert_eq!(pinned, 0);
    Ok(())
}

#[tokio::test]
async fn an_origin_dying_mid_body_closes_the_browser_connection_then_recovers() -> Result<()> {
    let (origin, gw, dst, _link) = origin_front().await?;
    let host = dst.to_string();
    let mut stream = TcpStream::connect(gw).await?;
    stream
        .write_all(get("/endless", &host, false).as_bytes())
        .await?;
    let mut received = vec![0; 64 * 1024];
    let mut filled = 0;
    while filled < 32 * 1024 {
        let n = tokio::time::timeout(EXCHANGE_TIMEOUT, stream.read(&mut received[filled..]))
            .await
            .context("the endless body started")??;
        anyhow::ensure!(n > 0, "closed before the origin died");
        filled += n;
    }
    origin.kill();
    let mut rest = Vec::new();
    tokio::time::timeout(EXCHANGE_TIMEOUT, stream.read_to_end(&mut rest))
        .await
        .context("the browser connection must be closed when the origin dies")??;
    received.truncate(filled);
    received.extend_from_slice(&rest);
    let head = String::from_utf8_lossy(&received[..200]).to_lowercase();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(
        !received.ends_with(b"\r\n0\r\n\r\n"),
        "a truncated body must not end with the last chunk"
    );

    // The origin comes back at the same address; the gateway finds it by itself.
    let kind = gateway_transport::BackendKind::Userspace;
    let addr = origin.addr;
    drop(origin);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let _revived = loop {
        match origin_support::TestOrigin::start(kind, addr).await {
            Ok(o) => break o,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("origin not restartable yet: {e:#}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.context("restarting the origin")),
        }
    };
    loop {
        let answers = exchange(gw, get("/bytes/10", &host, true).as_bytes()).await?;
        match answers[0].status {
            200 => break,
            502 if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            status => bail!("after the origin came back: {status} {}", answers[0].text()),
        }
    }
    Ok(())
}
