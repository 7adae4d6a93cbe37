//! Reverse-proxy mode against real upstreams: an nginx started per test (the
//! Debian package `nginx-light` or `nginx`; the tests fail, not skip, without it)
//! and hand-written TCP peers that misbehave on purpose. The [`Proxy`] is driven
//! through the driver's `Handler` trait directly; no association is needed.

use std::future::Future;
use std::io::{self, Read as _};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gateway_protocol::{Request, RequestClass, Urgency};
use origin::proxy::{Proxy, ProxyBody, ProxyConfig};
use origin::server::{BodySource, Handler, IncomingRequest, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const NGINX: &str = "/usr/sbin/nginx";
/// Every test finishes within this, or fails.
const TEST_BOUND: Duration = Duration::from_secs(30);
/// The chunk size the driver would ask for.
const CHUNK: usize = 16 * 1024;

/// Runs a test body under [`TEST_BOUND`].
async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_BOUND, test)
        .await
        .expect("test exceeded its time bound");
}

/// An nginx serving `<tmp>/www` on a loopback port, killed on drop (also when the
/// test panics).
struct NginxGuard {
    child: Child,
    dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl NginxGuard {
    fn start() -> Self {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} not found: these tests need a real nginx (Debian package nginx-light)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("www")).expect("www dir");
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = dir.path().display();
        let config = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{}}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               keepalive_requests 10000;\n\
               server {{\n\
                 listen {addr};\n\
                 root {d}/www;\n\
                 location = /echo {{\n\
                   default_type text/plain;\n\
                   return 200 \"te=[$http_te] upgrade=[$http_upgrade] x-hop=[$http_x_hop] \
                   keep-alive=[$http_keep_alive] proxy-authorization=[$http_proxy_authorization] \
                   via=[$http_via] host=[$http_host] accept=[$http_accept]\";\n\
                 }}\n\
               }}\n\
             }}\n"
        );
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config).expect("write nginx.conf");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {NGINX}: {e}"));
        let mut guard = Self { child, dir, addr };
        guard.wait_until_listening();
        guard
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll nginx") {
                let mut stderr = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                let log =
                    std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
                panic!("nginx exited ({status}) before listening: {stderr}{log}");
            }
            if StdTcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not listen on {}",
                self.addr
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn www(&self, name: &str) -> PathBuf {
        self.dir.path().join("www").join(name)
    }
}

impl Drop for NginxGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// A TCP relay in front of an upstream that counts the connections it accepts,
/// stopped on drop.
struct CountingRelay {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl CountingRelay {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self {
            addr,
            accepted,
            task,
        }
    }
}

impl Drop for CountingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn proxy_to(addr: SocketAddr) -> Proxy {
    proxy_with(ProxyConfig {
        address: addr.to_string(),
        ..ProxyConfig::default()
    })
}

fn proxy_with(config: ProxyConfig) -> Proxy {
    Proxy::new(config).expect("valid proxy config")
}

fn incoming(head: &str, body: &[u8]) -> IncomingRequest {
    static NEXT_ID: AtomicU32 = AtomicU32::new(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    IncomingRequest {
        id,
        stream: 1,
        request: Request {
            id,
            urgency: Urgency::DEFAULT,
            class: RequestClass::Demand,
            end: body.is_empty(),
            head: Bytes::from(head.to_owned()),
        },
        body: Bytes::copy_from_slice(body),
        tunnelled: false,
    }
}

fn get(path: &str) -> IncomingRequest {
    incoming(
        &format!("GET {path} HTTP/1.1\r\nHost: site.test\r\nAccept: */*\r\n\r\n"),
        b"",
    )
}

/// Pulls the whole body, checking that no chunk exceeds `max`.
async fn drain(body: &mut ProxyBody, max: usize) -> io::Result<Vec<u8>> {
    let mut all = Vec::new();
    while let Some(chunk) = body.next_chunk(max).await? {
        assert!(!chunk.is_empty(), "empty chunk");
        assert!(chunk.len() <= max, "chunk of {} > max {max}", chunk.len());
        all.extend_from_slice(&chunk);
    }
    Ok(all)
}

fn head_text(reply: &Reply<ProxyBody>) -> String {
    String::from_utf8(reply.head.to_vec()).expect("head is ASCII")
}

fn status(reply: &Reply<ProxyBody>) -> u16 {
    head_text(reply)[9..12].parse().expect("status code")
}

/// The value of the (lower-case) field `name` in a rendered head.
fn field(head: &str, name: &str) -> Option<String> {
    head.split("\r\n")
        .filter_map(|line| line.split_once(": "))
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.to_owned())
}

/// Bytes that are not a repetition of a short pattern, so that a misplaced chunk
/// shows.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn small_and_large_files_arrive_byte_for_byte() {
    bounded(async {
        let nginx = NginxGuard::start();
        let small = b"<h1>hello from nginx</h1>\n".to_vec();
        let large = pattern(3 * 1024 * 1024);
        std::fs::write(nginx.www("small.html"), &small).expect("write small");
        std::fs::write(nginx.www("large.bin"), &large).expect("write large");
        let proxy = proxy_to(nginx.addr);

        for (path, expected) in [("/small.html", &small), ("/large.bin", &large)] {
            let mut reply = proxy.handle(get(path)).await;
            let head = head_text(&reply);
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            assert!(head.ends_with("\r\n\r\n"), "{head}");
            assert_eq!(reply.body_len, Some(expected.len() as u64), "{head}");
            assert_eq!(
                field(&head, "content-length"),
                Some(expected.len().to_string())
            );
            assert_eq!(field(&head, "via").as_deref(), Some("1.1 origin"));
            assert!(field(&head, "connection").is_none(), "{head}");
            assert!(field(&head, "etag").is_some(), "{head}");
            let body = drain(&mut reply.body, CHUNK).await.expect("complete body");
            assert_eq!(body.len(), expected.len(), "{path}");
            assert!(body == *expected, "{path}: body differs");
        }
    })
    .await;
}

#[tokio::test]
async fn not_found_passes_through() {
    bounded(async {
        let nginx = NginxGuard::start();
        let proxy = proxy_to(nginx.addr);
        let mut reply = proxy.handle(get("/missing.html")).await;
        let head = head_text(&reply);
        assert!(head.starts_with("HTTP/1.1 404 Not Found\r\n"), "{head}");
        let body = drain(&mut reply.body, CHUNK).await.expect("complete body");
        assert_eq!(reply.body_len, Some(body.len() as u64));
        assert!(String::from_utf8_lossy(&body).contains("404 Not Found"));
    })
    .await;
}

#[tokio::test]
async fn head_has_the_fields_but_no_body() {
    bounded(async {
        let nginx = NginxGuard::start();
        std::fs::write(nginx.www("f.txt"), pattern(12345)).expect("write");
        let proxy = proxy_to(nginx.addr);
        let mut reply = proxy
            .handle(incoming(
                "HEAD /f.txt HTTP/1.1\r\nHost: site.test\r\n\r\n",
                b"",
            ))
            .await;
        let head = head_text(&reply);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert_eq!(field(&head, "content-length").as_deref(), Some("12345"));
        assert_eq!(reply.body_len, Some(0));
        assert!(drain(&mut reply.body, CHUNK).await.expect("end").is_empty());

        // The connection is still usable afterwards (HEAD framing was honoured).
        let mut reply = proxy.handle(get("/f.txt")).await;
        assert_eq!(status(&reply), 200);
        let body = drain(&mut reply.body, CHUNK).await.expect("body");
        assert!(body == pattern(12345));
    })
    .await;
}

#[tokio::test]
async fn conditional_request_gets_304_without_body() {
    bounded(async {
        let nginx = NginxGuard::start();
        std::fs::write(nginx.www("c.css"), b"body { color: red }\n").expect("write");
        let proxy = proxy_to(nginx.addr);
        let mut first = proxy.handle(get("/c.css")).await;
        let etag = field(&head_text(&first), "etag").expect("nginx sends an ETag");
        drain(&mut first.body, CHUNK).await.expect("body");

        let mut reply = proxy
            .handle(incoming(
                &format!("GET /c.css HTTP/1.1\r\nHost: site.test\r\nIf-None-Match: {etag}\r\n\r\n"),
                b"",
            ))
            .await;
        let head = head_text(&reply);
        assert!(head.starts_with("HTTP/1.1 304 Not Modified\r\n"), "{head}");
        assert_eq!(field(&head, "etag"), Some(etag));
        assert_eq!(reply.body_len, Some(0));
        assert!(drain(&mut reply.body, CHUNK).await.expect("end").is_empty());

        let mut reply = proxy
            .handle(incoming(
                "GET /c.css HTTP/1.1\r\nHost: site.test\r\nIf-None-Match: \"other\"\r\n\r\n",
                b"",
            ))
            .await;
        assert_eq!(status(&reply), 200);
        drain(&mut reply.body, CHUNK).await.expect("body");
    })
    .await;
}

/// Sequential requests through the proxy; returns the connections the upstream
/// accepted.
async fn connections_for_sequential_requests(max_idle: usize, requests: usize) -> usize {
    let nginx = NginxGuard::start();
    std::fs::write(nginx.www("p.txt"), pattern(50_000)).expect("write");
    let relay = CountingRelay::start(nginx.addr).await;
    let proxy = proxy_with(ProxyConfig {
        address: relay.addr.to_string(),
        max_idle_per_upstream: max_idle,
        ..ProxyConfig::default()
    });
    for _ in 0..requests {
        let mut reply = proxy.handle(get("/p.txt")).await;
        assert_eq!(status(&reply), 200);
        let body = drain(&mut reply.body, CHUNK).await.expect("body");
        assert_eq!(body.len(), 50_000);
        // hyper's connection task puts the connection back in the pool; on a
        // loaded machine a request sent at the same instant could race it to a
        // new connection (it passes without this pause when the machine is idle).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    relay.accepted.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_pooled_connection() {
    bounded(async {
        assert_eq!(connections_for_sequential_requests(8, 6).await, 1);
    })
    .await;
}

#[tokio::test]
async fn without_pooling_every_request_connects() {
    // The counterpart of the test above: shows that the count can fail.
    bounded(async {
        assert_eq!(connections_for_sequential_requests(0, 4).await, 4);
    })
    .await;
}

#[tokio::test]
async fn hop_by_hop_fields_do_not_reach_nginx() {
    bounded(async {
        let nginx = NginxGuard::start();
        let proxy = proxy_to(nginx.addr);
        let head = "GET /echo HTTP/1.1\r\nHost: site.test\r\nAccept: text/x\r\n\
                    Connection: close, X-Hop\r\nX-Hop: secret\r\nTE: trailers\r\n\
                    Upgrade: websocket\r\nKeep-Alive: timeout=9\r\n\
                    Proxy-Authorization: Basic dTpw\r\n\r\n";
        for _ in 0..2 {
            let mut reply = proxy.handle(incoming(head, b"")).await;
            assert_eq!(status(&reply), 200, "{}", head_text(&reply));
            let body = drain(&mut reply.body, CHUNK).await.expect("body");
            assert_eq!(
                String::from_utf8(body).expect("text"),
                "te=[] upgrade=[] x-hop=[] keep-alive=[] proxy-authorization=[] \
                 via=[1.1 origin] host=[site.test] accept=[text/x]"
            );
        }

        let proxy = proxy_with(ProxyConfig {
            address: nginx.addr.to_string(),
            host_header: Some("internal.test".into()),
            ..ProxyConfig::default()
        });
        let mut reply = proxy.handle(incoming(head, b"")).await;
        let body = drain(&mut reply.body, CHUNK).await.expect("body");
        let text = String::from_utf8(body).expect("text");
        assert!(text.contains("host=[internal.test]"), "{text}");
    })
    .await;
}

/// Reads one request head (and `body_len` body bytes) from `socket`.
async fn read_request(socket: &mut TcpStream, body_len: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n")
            && buf.len() >= end + 4 + body_len
        {
            return buf;
        }
        let n = socket.read(&mut chunk).await.expect("read request");
        assert!(n > 0, "peer closed mid-request: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn raw_upstream_sees_a_clean_request_and_chunked_body_is_unframed() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let upstream = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let request = read_request(&mut socket, 5).await;
            socket
                .write_all(
                    b"HTTP/1.1 201 Made It\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\
                      Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\
                      X-End: yes\r\n\r\n\
                      5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n",
                )
                .await
                .expect("write response");
            request
        });
        let proxy = proxy_to(addr);
        let mut reply = proxy
            .handle(incoming(
                "POST /form?x=1 HTTP/1.1\r\nHost: site.test\r\nTransfer-Encoding: chunked\r\n\
                 Connection: upgrade\r\nUpgrade: h2c\r\nContent-Type: text/plain\r\n\r\n",
                b"hello",
            ))
            .await;
        assert_eq!(
            &reply.head[..],
            b"HTTP/1.1 201 Made It\r\nx-end: yes\r\nvia: 1.1 origin\r\n\r\n"
        );
        assert_eq!(reply.body_len, None);
        assert_eq!(
            drain(&mut reply.body, 3).await.expect("body"),
            b"hello, world"
        );
        let request = upstream.await.expect("upstream task");
        assert_eq!(
            String::from_utf8(request).expect("ascii"),
            "POST /form?x=1 HTTP/1.1\r\ncontent-type: text/plain\r\nhost: site.test\r\n\
             content-length: 5\r\nvia: 1.1 origin\r\n\r\nhello"
        );
    })
    .await;
}

#[tokio::test]
async fn upstream_down_is_502() {
    bounded(async {
        let addr = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr")
        };
        let proxy = proxy_to(addr);
        let mut reply = proxy.handle(get("/")).await;
        let head = head_text(&reply);
        assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
        let body = drain(&mut reply.body, CHUNK).await.expect("body");
        assert_eq!(reply.body_len, Some(body.len() as u64));
        assert_eq!(field(&head, "content-length"), Some(body.len().to_string()));
        assert!(!body.is_empty());
    })
    .await;
}

#[tokio::test]
async fn silent_upstream_is_504_within_the_response_timeout() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let silent = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            read_request(&mut socket, 0).await;
            // Hold the connection open and say nothing.
            let mut sink = [0u8; 64];
            while socket.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        let timeout = Duration::from_millis(300);
        let proxy = proxy_with(ProxyConfig {
            address: addr.to_string(),
            response_timeout: timeout,
            ..ProxyConfig::default()
        });
        let started = Instant::now();
        let mut reply = proxy.handle(get("/slow")).await;
        let elapsed = started.elapsed();
        let head = head_text(&reply);
        assert!(
            head.starts_with("HTTP/1.1 504 Gateway Timeout\r\n"),
            "{head}"
        );
        assert!(elapsed >= timeout, "answered after {elapsed:?}");
        assert!(elapsed < timeout + Duration::from_secs(2), "{elapsed:?}");
        drain(&mut reply.body, CHUNK).await.expect("error text");
        silent.abort();
    })
    .await;
}

#[tokio::test]
async fn upstream_dying_mid_body_is_an_error_not_an_end() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            read_request(&mut socket, 0).await;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                .await
                .expect("write head");
            socket.write_all(&[b'x'; 1000]).await.expect("write body");
            // Dropping the socket closes it 999000 bytes early.
        });
        let proxy = proxy_to(addr);
        let mut reply = proxy.handle(get("/big")).await;
        assert_eq!(status(&reply), 200);
        assert_eq!(reply.body_len, Some(1_000_000));
        let mut received = 0;
        let error = loop {
            match reply.body.next_chunk(CHUNK).await {
                Ok(Some(chunk)) => received += chunk.len(),
                Ok(None) => panic!("clean end after {received} of 1000000 bytes"),
                Err(e) => break e,
            }
        };
        assert_eq!(received, 1000);
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
        // Asking again does not turn the failure into an end.
        assert!(reply.body.next_chunk(CHUNK).await.is_err());
    })
    .await;
}

#[tokio::test]
async fn stalled_body_fails_after_the_body_timeout() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stalled = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            read_request(&mut socket, 0).await;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                .await
                .expect("write");
            let mut sink = [0u8; 64];
            while socket.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        let proxy = proxy_with(ProxyConfig {
            address: addr.to_string(),
            body_timeout: Duration::from_millis(200),
            ..ProxyConfig::default()
        });
        let mut reply = proxy.handle(get("/stall")).await;
        assert_eq!(
            reply.body.next_chunk(CHUNK).await.expect("first bytes"),
            Some(Bytes::from_static(b"abc"))
        );
        let error = reply.body.next_chunk(CHUNK).await.expect_err("stall");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        stalled.abort();
    })
    .await;
}

#[tokio::test]
async fn malformed_head_from_the_gateway_is_400() {
    bounded(async {
        // Nothing listens: a 400 must be decided before any connection.
        let proxy = proxy_to(SocketAddr::from(([127, 0, 0, 1], 9)));
        for head in [
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "\x00\r\n\r\n",
        ] {
            let mut reply = proxy.handle(incoming(head, b"")).await;
            assert_eq!(status(&reply), 400, "{head:?}");
            drain(&mut reply.body, CHUNK).await.expect("text");
        }
    })
    .await;
}
