//! HTTPS end to end (issue 19): the real `gateway` and `origin` binaries in the
//! demo topology, with `intercept.tls_port = 443` and the origin holding a
//! certificate for the site's name. curl in the client namespace dials the
//! site's address by that name; the gateway reads the ClientHello, checks the
//! name against the address the browser dialled, and tunnels the TLS bytes on a
//! data stream of the association (userspace SCTP) to the origin, which
//! terminates TLS and serves the file; headless Chromium loads the whole page
//! that way. Beside the site's nginx on port 80, an nginx on the site's
//! addresses serves TLS on 443 (its own certificate, for its IP addresses):
//! where every fallback must land. The demo sets all this up itself
//! (`DemoOptions::https`, the testbed's `https` module), as for
//! `cargo xtask run`.
//!
//! Name resolution: the gateway checks a server name by resolving it, and the
//! test namespaces have no DNS. `ip netns exec` (how the testbed starts every
//! process) mounts `/etc/netns/<namespace>/hosts` over `/etc/hosts`, so the
//! gateway's namespace gets a hosts file of its own (`testbed::NamespaceHosts`,
//! removed on drop); the machine's `/etc/hosts` is untouched. Chromium gets
//! `--host-resolver-rules`, curl `--resolve`.
//!
//! Needs root, iproute2, nftables, nginx, curl, openssl, chromium, and the `origin`
//! binary beside the gateway's (`cargo build -p gateway -p origin`). These
//! tests fail, never skip, when something is missing. Logs stay in
//! `target/e2e-artifacts/https-<test>/`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testbed::https::DemoHttps;
use testbed::topology::{SITE_V4, SITE_V6, WAN, WEB_V4};
use testbed::{
    Binaries, Browser, BrowserConfig, Demo, DemoOptions, GatewayConfigOverrides, Nginx, exec_in,
};

/// Namespace prefix of these tests.
const PREFIX: &str = "gwtls-";
/// The name the origin holds a certificate for; resolves to the site's
/// addresses in the gateway's namespace.
const SITE_NAME: &str = testbed::https::SITE_NAME;
/// A name that resolves elsewhere (the unmapped web server): sent to the
/// site's address, it is a forgery.
const OTHER_NAME: &str = "elsewhere.test";
/// Bound of each wait on a log line.
const LOG_WAIT: Duration = Duration::from_secs(10);

fn binaries() -> Binaries {
    let gateway = PathBuf::from(env!("CARGO_BIN_EXE_gateway"));
    let origin = gateway.with_file_name("origin");
    assert!(
        origin.is_file(),
        "{} is missing: run `cargo build -p origin` first",
        origin.display()
    );
    Binaries { gateway, origin }
}

/// `target/e2e-artifacts/https-<name>/`, emptied.
fn artifacts(name: &str) -> PathBuf {
    let dir = testbed::target_dir()
        .join("e2e-artifacts")
        .join(format!("https-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the artifacts directory");
    dir
}

/// The demo with HTTPS ([`DemoOptions::https`]): the origin terminating
/// [`SITE_NAME`] (unless `start_origin` is false), TLS nginx on the site's
/// addresses, and the gateway intercepting 443 for the site's networks over
/// userspace SCTP.
struct HttpsDemo {
    demo: Demo,
    /// What curl trusts for [`SITE_NAME`].
    site_cert: PathBuf,
}

impl HttpsDemo {
    /// The demo's HTTPS part.
    fn https(&self) -> &DemoHttps {
        self.demo.https.as_ref().expect("the demo runs with HTTPS")
    }

    /// nginx serving TLS on the site's addresses: the original destination.
    fn direct_tls(&self) -> &Nginx {
        self.https()
            .direct
            .as_ref()
            .expect("the demo's TLS nginx runs")
    }
}

fn start(name: &str, start_origin: bool) -> HttpsDemo {
    start_with(name, start_origin, |_| {})
}

/// [`start`], with `tweak` applied to the demo's options last (transport,
/// time-outs, document root).
fn start_with(name: &str, start_origin: bool, tweak: impl FnOnce(&mut DemoOptions)) -> HttpsDemo {
    testbed::cleanup_stale(PREFIX).expect("removing namespaces of killed runs");
    let dir = artifacts(name);
    let mut options = DemoOptions::new(PREFIX, &testbed::workspace_root(), &dir);
    options.https = true;
    options.gateway_hosts = vec![(WEB_V4.into(), OTHER_NAME.to_owned())];
    options.start_origin = start_origin;
    options.gateway = GatewayConfigOverrides {
        tls_port: Some(443),
        backend: Some("userspace".into()),
        fail_open: Some(true),
        connect_timeout_ms: Some(1000),
        ..GatewayConfigOverrides::default()
    };
    tweak(&mut options);
    let demo = Demo::start(binaries(), options)
        .unwrap_or_else(|e| panic!("demo did not start: {e}\n(logs in {})", dir.display()));
    let site_cert = demo
        .https
        .as_ref()
        .map(|h| h.tls.cert.clone())
        .expect("the demo runs with HTTPS");
    HttpsDemo { demo, site_cert }
}

/// How curl reaches the server and what it trusts.
enum Dial<'a> {
    /// `https://NAME/path` with NAME resolved to `ip`, trusting `cert` only.
    Named {
        ip: IpAddr,
        name: &'a str,
        cert: &'a Path,
    },
    /// `https://NAME/path` with NAME resolved to `ip`, no verification: the
    /// answer comes from a server without a certificate for NAME.
    NamedInsecure { ip: IpAddr, name: &'a str },
    /// `https://IP/path`: no server name in the ClientHello; no verification.
    Address(IpAddr),
}

/// curl in the client namespace: the body, or why not.
fn curl(demo: &Demo, dial: &Dial<'_>, path: &str) -> Result<Vec<u8>, String> {
    let host = |ip: &IpAddr| match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let mut command = Command::new("curl");
    command.args(["-sS", "--fail", "--max-time", "15"]);
    let url = match dial {
        Dial::Named { ip, name, cert } => {
            command
                .arg("--resolve")
                .arg(format!("{name}:443:{}", host(ip)));
            command.arg("--cacert").arg(cert);
            format!("https://{name}{path}")
        }
        Dial::NamedInsecure { ip, name } => {
            command
                .arg("--resolve")
                .arg(format!("{name}:443:{}", host(ip)));
            command.arg("--insecure");
            format!("https://{name}{path}")
        }
        Dial::Address(ip) => {
            command.arg("--insecure");
            format!("https://{}{path}", host(ip))
        }
    };
    command.arg(&url);
    let out = exec_in(demo.topology.client.name(), &command)
        .output()
        .map_err(|e| format!("cannot run curl: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "curl {url}: {} {}\n(logs in {})",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            demo.dir().display()
        ))
    }
}

fn demo_file(path: &str) -> Vec<u8> {
    std::fs::read(testbed::demo_site().join(path.trim_start_matches('/'))).expect("demo-site file")
}

/// The data streams of the origin's per-request lines for `target`.
fn origin_streams(demo: &Demo, target: &str) -> Vec<u16> {
    let log = demo.origin.as_ref().map(|o| o.log()).unwrap_or_default();
    let needle = format!(" target={target} ");
    log.lines()
        .filter(|l| l.contains("origin::service") && l.contains(&needle))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("stream="))
                .and_then(|s| s.parse().ok())
        })
        .collect()
}

/// Asserts that the origin's access line for each of `paths` says it came
/// decrypted from a TLS tunnel (`via=tls`).
fn assert_via_tls<'a>(demo: &Demo, paths: impl IntoIterator<Item = &'a &'a str>) {
    let log = demo.origin.as_ref().map(|o| o.log()).unwrap_or_default();
    for path in paths {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("origin::access") && l.contains(&format!(" target={path} ")))
            .collect();
        assert!(
            !lines.is_empty() && lines.iter().all(|l| l.ends_with(" via=tls")),
            "{path}: the origin's access lines do not say via=tls: {lines:#?}"
        );
    }
}

/// The gateway's `https` lines (one per intercepted TLS connection, written
/// when it ends) once `done` holds for them, or as they are after
/// [`LOG_WAIT`].
fn gateway_https_lines(demo: &Demo, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + LOG_WAIT;
    loop {
        let log = demo.gateway.as_ref().map(|g| g.log()).unwrap_or_default();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains(" https ") || l.ends_with(" https"))
            .map(str::to_owned)
            .collect();
        if done(&lines) || Instant::now() >= deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first gateway `https` line for `dst`, waited for.
fn https_line(demo: &Demo, dst: SocketAddr) -> String {
    let needle = format!("dst={dst} ");
    let lines = gateway_https_lines(demo, |lines| lines.iter().any(|l| l.contains(&needle)));
    lines
        .into_iter()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("the gateway logged no https line for {dst}"))
}

/// nginx's TLS access log, waited for until it has `n` entries.
fn direct_tls_log(https: &HttpsDemo, n: usize) -> Vec<testbed::AccessEntry> {
    let deadline = Instant::now() + LOG_WAIT;
    loop {
        let seen = https.direct_tls().access_log();
        if seen.len() >= n || Instant::now() >= deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fetches `paths` over HTTPS by the site's name at `ip` through the gateway:
/// each body must be the file's, byte for byte, and the gateway's last line
/// for that destination a tunnel that ended cleanly.
fn fetch_by_name_through_a_tunnel(https: &HttpsDemo, ip: IpAddr, paths: &[&str]) {
    let demo = &https.demo;
    let dial = Dial::Named {
        ip,
        name: SITE_NAME,
        cert: &https.site_cert,
    };
    for path in paths {
        let body = curl(demo, &dial, path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            body == demo_file(path),
            "https://{SITE_NAME}{path} via {ip}: {} bytes that are not the file's",
            body.len()
        );
    }
    let line = https_line(demo, SocketAddr::new(ip, 443));
    assert!(
        line.contains(&format!("peeked=ServerName(\"{SITE_NAME}\")"))
            && line.contains("outcome=Some(Closed)"),
        "not a tunnel that ended cleanly: {line}"
    );
}

#[test]
fn https_by_name_is_tunnelled_to_the_origin_on_both_families() {
    let https = start("tunnel", true);
    let demo = &https.demo;
    let cases: [(IpAddr, [&str; 2]); 2] = [
        (SITE_V4.into(), ["/index.html", "/assets/site.css"]),
        (SITE_V6.into(), ["/assets/app.js", "/assets/tile-02.svg"]),
    ];
    for (ip, paths) in cases {
        fetch_by_name_through_a_tunnel(&https, ip, &paths);
    }
    for path in cases.iter().flat_map(|(_, p)| p) {
        let streams = origin_streams(demo, path);
        assert!(
            !streams.is_empty() && streams.iter().all(|&s| s > 0),
            "{path}: the origin's request lines name streams {streams:?} (none, or the control stream)"
        );
    }
    assert_via_tls(demo, cases.iter().flat_map(|(_, p)| p));
    assert!(
        https.direct_tls().access_log().is_empty() && demo.site.access_log().is_empty(),
        "nginx served what the origin should have"
    );
}

#[test]
fn https_without_a_matching_name_goes_to_the_original_destination() {
    let https = start("fallback", true);
    let demo = &https.demo;
    // No server name (curl sends none for an address), both families.
    for ip in [IpAddr::from(SITE_V4), IpAddr::from(SITE_V6)] {
        let body = curl(demo, &Dial::Address(ip), "/index.html").unwrap_or_else(|e| panic!("{e}"));
        assert!(body == demo_file("/index.html"), "no SNI via {ip}");
        let line = https_line(demo, SocketAddr::new(ip, 443));
        assert!(
            line.contains("peeked=NoServerName") && line.contains("outcome=None"),
            "no SNI via {ip} was not passed through: {line}"
        );
    }
    // A name that resolves elsewhere, sent to the site's address: a forgery,
    // so the gateway sends it only where the browser dialled.
    let forged = Dial::NamedInsecure {
        ip: SITE_V4.into(),
        name: OTHER_NAME,
    };
    let body = curl(demo, &forged, "/assets/site.css").unwrap_or_else(|e| panic!("{e}"));
    assert!(body == demo_file("/assets/site.css"), "SNI mismatch");
    let forged_line =
        gateway_https_lines(demo, |lines| lines.iter().any(|l| l.contains(OTHER_NAME)))
            .into_iter()
            .find(|l| l.contains(OTHER_NAME))
            .unwrap_or_else(|| panic!("the gateway logged no https line for {OTHER_NAME}"));
    assert!(
        forged_line.contains("route=\"host-mismatch\"") && forged_line.contains("outcome=None"),
        "the forged name was not refused: {forged_line}"
    );

    let seen = direct_tls_log(&https, 3);
    let requests: Vec<&str> = seen.iter().map(|e| e.request.as_str()).collect();
    assert_eq!(seen.len(), 3, "nginx's TLS requests: {requests:?}");
    for (entry, path) in seen
        .iter()
        .zip(["/index.html", "/index.html", "/assets/site.css"])
    {
        assert!(entry.request.contains(path), "{requests:?}");
    }
    assert_eq!(
        seen[0].remote_addr,
        IpAddr::from(WAN.gateway_v4),
        "nginx was not reached by the gateway's own connection"
    );
    for path in ["/index.html", "/assets/site.css"] {
        assert!(
            origin_streams(demo, path).is_empty(),
            "the origin served {path}, which was not for it"
        );
    }
}

#[test]
fn https_fails_open_to_the_original_destination_when_the_origin_is_down() {
    let https = start("fail-open", false);
    let demo = &https.demo;
    let dial = Dial::NamedInsecure {
        ip: SITE_V4.into(),
        name: SITE_NAME,
    };
    let started = Instant::now();
    let body = curl(demo, &dial, "/index.html").unwrap_or_else(|e| panic!("{e}"));
    assert!(body == demo_file("/index.html"), "fail-open");
    let line = https_line(demo, SocketAddr::new(SITE_V4.into(), 443));
    assert!(line.contains("outcome=None"), "not passed through: {line}");
    let seen = direct_tls_log(&https, 1);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].request.contains("/index.html"), "{seen:?}");
    println!("failed open in {:?}", started.elapsed());
}

#[test]
fn https_is_tunnelled_to_an_origin_on_framed_tcp() {
    let https = start_with("framed-tcp", true, |options| {
        options.origin_transport = Some("framed-tcp".into());
        options.gateway.backend = Some("framed-tcp".into());
    });
    let demo = &https.demo;
    let origin_log = demo.origin.as_ref().map(|o| o.log()).unwrap_or_default();
    assert!(
        origin_log.contains("transport: framed-tcp"),
        "the origin is not on framed TCP:\n{origin_log}"
    );
    let cases: [(IpAddr, &str); 2] = [
        (SITE_V4.into(), "/index.html"),
        (SITE_V6.into(), "/assets/app.js"),
    ];
    for (ip, path) in cases {
        fetch_by_name_through_a_tunnel(&https, ip, &[path]);
        let streams = origin_streams(demo, path);
        assert!(
            !streams.is_empty() && streams.iter().all(|&s| s > 0),
            "{path}: the origin's request lines name streams {streams:?}"
        );
        assert_via_tls(demo, &[path]);
    }
    assert!(
        https.direct_tls().access_log().is_empty() && demo.site.access_log().is_empty(),
        "nginx served what the origin should have"
    );
}

/// Bound of a raw exchange's reads: what the peer sends back, or its close,
/// must come within this.
const RAW_WAIT: Duration = Duration::from_secs(10);

/// A plain TCP connection from the client namespace to `dst`: writes each of
/// `chunks` after its delay, then reads until the peer closes, `enough`
/// holds for what came, or [`RAW_WAIT`] passes. `Ok((reply, closed))`, or
/// why it could not connect or write.
fn raw_exchange(
    demo: &Demo,
    dst: SocketAddr,
    chunks: &[(Duration, &[u8])],
    enough: impl Fn(&[u8]) -> bool + Sync,
) -> Result<(Vec<u8>, bool), String> {
    use std::io::{Read, Write};
    testbed::in_netns(demo.topology.client.name(), || {
        let mut stream = std::net::TcpStream::connect_timeout(&dst, Duration::from_secs(5))
            .map_err(|e| format!("connecting to {dst}: {e}"))?;
        for (delay, bytes) in chunks {
            std::thread::sleep(*delay);
            stream
                .write_all(bytes)
                .map_err(|e| format!("writing to {dst}: {e}"))?;
        }
        let deadline = Instant::now() + RAW_WAIT;
        let mut reply = Vec::new();
        let mut buf = [0; 4096];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| format!("{e}"))?;
            match stream.read(&mut buf) {
                Ok(0) => return Ok((reply, true)),
                Ok(n) => {
                    reply.extend_from_slice(&buf[..n]);
                    if enough(&reply) {
                        return Ok((reply, false));
                    }
                }
                // A reset after the reply is a close too.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Ok((reply, true));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
                Err(e) => return Err(format!("reading from {dst}: {e}")),
            }
        }
        Ok((reply, false))
    })
    .map_err(|e| format!("{e}"))?
}

/// The gateway's `https` line that contains `needle`, waited for.
fn https_line_with(demo: &Demo, needle: &str) -> String {
    gateway_https_lines(demo, |lines| lines.iter().any(|l| l.contains(needle)))
        .into_iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("the gateway logged no https line with {needle}"))
}

#[test]
fn https_garbage_instead_of_a_client_hello_goes_to_the_original_destination() {
    let https = start("garbage", true);
    let demo = &https.demo;
    let dst = SocketAddr::new(SITE_V4.into(), 443);
    // Plain HTTP on the TLS port: not a handshake record at all.
    let plain = b"GET /index.html HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
    let (reply, closed) = raw_exchange(demo, dst, &[(Duration::ZERO, plain)], |_| false)
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&reply);
    assert!(
        closed
            && text.starts_with("HTTP/1.1 400")
            && text.contains("The plain HTTP request was sent to HTTPS port"),
        "not nginx's answer to plain HTTP on its TLS port (closed: {closed}): {text:?}"
    );
    let line = https_line_with(demo, "peeked=NotTls");
    assert!(line.contains("outcome=None"), "not passed through: {line}");
    let seen = direct_tls_log(&https, 1);
    assert!(
        seen.len() == 1
            && seen[0].status == 400
            && seen[0].request == "GET /index.html HTTP/1.1"
            && seen[0].remote_addr == IpAddr::from(WAN.gateway_v4),
        "nginx did not get the bytes from the gateway: {seen:?}"
    );

    // A handshake record header followed by bytes that are no ClientHello
    // (a fixed pseudo-random run): rustls refuses it, nginx gets it and
    // answers with an alert or a close.
    let mut junk = vec![0x16, 0x03, 0x01, 0x00, 0x40];
    let mut x: u32 = 0x2545_f491;
    junk.extend((0..0x40).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u8
    }));
    let (reply, closed) = raw_exchange(demo, dst, &[(Duration::ZERO, &junk)], |_| false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        closed && (reply.is_empty() || reply.starts_with(&[0x15, 0x03])),
        "junk ClientHello: not closed with at most an alert (closed: {closed}): {reply:02x?}"
    );
    let lines = gateway_https_lines(demo, |l| {
        l.iter().filter(|l| l.contains("NotTls")).count() == 2
    });
    let not_tls: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("peeked=NotTls"))
        .collect();
    assert!(
        not_tls.len() == 2 && not_tls.iter().all(|l| l.contains("outcome=None")),
        "the junk ClientHello was not passed through: {lines:#?}"
    );
    assert!(
        origin_streams(demo, "/index.html").is_empty(),
        "the origin served what was not for it"
    );
}

/// A real ClientHello for `name`, as rustls's client sends it first.
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("rustls's default TLS versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("a DNS name");
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).expect("a TLS client");
    let mut hello = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut hello).expect("writing to a Vec");
    }
    hello
}

#[test]
fn https_slow_client_hello_goes_to_the_original_destination_after_the_header_timeout() {
    let header_timeout = Duration::from_millis(1000);
    let https = start_with("slow-hello", true, |options| {
        options.gateway.header_timeout_ms = Some(header_timeout.as_millis() as u64);
    });
    let demo = &https.demo;
    let hello = client_hello(SITE_NAME);
    // The first 20 bytes one by one, 150 ms apart: 3 s, three time-outs'
    // worth, before the rest of the ClientHello.
    let step = Duration::from_millis(150);
    let trickle = 20;
    let mut chunks: Vec<(Duration, &[u8])> = (0..trickle)
        .map(|i| (if i == 0 { Duration::ZERO } else { step }, &hello[i..=i]))
        .collect();
    chunks.push((step, &hello[trickle..]));
    let started = Instant::now();
    let (reply, _) = raw_exchange(demo, SocketAddr::new(SITE_V4.into(), 443), &chunks, |r| {
        r.len() >= 5
    })
    .unwrap_or_else(|e| panic!("{e}"));
    println!("answered {:?} after the first byte", started.elapsed());
    // A ClientHello that did not complete within the time-out can only be
    // `Incomplete` if the gateway gave up on it before the trickle ended;
    // the rest of it then reached nginx, which answers with a handshake
    // record of its own.
    let line = https_line_with(demo, "peeked=Incomplete");
    assert!(
        line.contains("outcome=None"),
        "the slow ClientHello was not passed through: {line}"
    );
    assert!(
        reply.starts_with(&[0x16, 0x03]),
        "nginx's ServerHello did not come back: {reply:02x?}"
    );
    assert!(
        origin_streams(demo, "/").is_empty()
            && demo
                .gateway
                .as_ref()
                .is_some_and(|g| !g.log().contains("ServerName(")),
        "the slow ClientHello was tunnelled"
    );
}

/// A document root in `dir` with `big.bin`, `len` pseudo-random bytes, and
/// the demo site's index.html: `(root, big.bin's content)`.
fn big_site(dir: &Path, len: usize) -> (PathBuf, Vec<u8>) {
    let root = dir.join("big-root");
    std::fs::create_dir_all(&root).expect("creating the big file's root");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let content: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(root.join("big.bin"), &content).expect("writing big.bin");
    // What the TLS nginx at the original destination (which serves this root
    // too) answers once the origin is gone.
    std::fs::write(root.join("index.html"), demo_file("/index.html")).expect("writing index.html");
    (root, content)
}

/// curl in the client namespace fetching `https://SITE_NAME/big.bin` through
/// the site's IPv4 address into `out`, at most `rate` bytes a second.
fn spawn_download(https: &HttpsDemo, out: &Path, rate: &str) -> Child {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--fail", "--max-time", "60", "--limit-rate", rate])
        .arg("--resolve")
        .arg(format!("{SITE_NAME}:443:{SITE_V4}"))
        .arg("--cacert")
        .arg(&https.site_cert)
        .arg("-o")
        .arg(out)
        .arg(format!("https://{SITE_NAME}/big.bin"));
    // `exec_in` builds a new command: the pipes are set on it.
    exec_in(https.demo.topology.client.name(), &command)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting curl")
}

/// Waits until `check` holds, at most `limit`; whether it did.
fn wait_for(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check()
}

/// The association's idle time-out in the origin-killed test.
const IDLE_TIMEOUT: Duration = Duration::from_secs(4);

#[test]
fn https_origin_killed_mid_tunnel_fails_the_download_and_the_gateway_stays_up() {
    let mut content = Vec::new();
    let mut https = start_with("origin-killed", true, |options| {
        let (root, file) = big_site(&options.dir, 32 << 20);
        options.origin_root = Some(root);
        content = file;
        // A killed origin sends no ABORT: the gateway learns of it when the
        // association's idle time-out runs out (30 s as shipped).
        options.gateway.heartbeat_interval_ms = Some(1000);
        options.gateway.idle_timeout_ms = Some(IDLE_TIMEOUT.as_millis() as u64);
    });
    let dir = https.demo.dir().to_owned();
    let out = https.demo.dir().join("big.bin.part");
    let mut curl_child = spawn_download(&https, &out, "2M");
    let started = wait_for(Duration::from_secs(15), || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() > 512 * 1024)
    });
    if !started {
        let _ = curl_child.kill();
        panic!(
            "curl received no 512 KiB in 15 s (logs in {})",
            dir.display()
        );
    }
    let origin = https.demo.origin.as_mut().expect("the origin runs");
    origin.kill().expect("killing the origin");
    let killed = Instant::now();
    let ended = wait_for(IDLE_TIMEOUT + Duration::from_secs(10), || {
        curl_child.try_wait().ok().flatten().is_some()
    });
    if !ended {
        let _ = curl_child.kill();
    }
    let output = curl_child.wait_with_output().expect("curl's output");
    let received = std::fs::read(&out).unwrap_or_default();
    println!(
        "curl ended {:?} after the kill: {} {}",
        killed.elapsed(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    assert!(
        ended,
        "curl did not end within {:?} of the origin's death",
        IDLE_TIMEOUT + Duration::from_secs(10)
    );
    assert!(
        !output.status.success() && output.status.code() != Some(28),
        "curl did not report the broken transfer: {} after {} of {} bytes",
        output.status,
        received.len(),
        content.len()
    );
    assert!(
        received.len() < content.len() && content.starts_with(&received),
        "{} bytes received, not a prefix of the file",
        received.len()
    );
    let gateway = https.demo.gateway.as_mut().expect("the gateway runs");
    gateway
        .ensure_running("after the origin's death")
        .unwrap_or_else(|e| panic!("{e}"));
    let line = https_line(&https.demo, SocketAddr::new(SITE_V4.into(), 443));
    assert!(
        line.contains("outcome=Some(Failed("),
        "the broken tunnel was not logged as failed: {line}"
    );
    // HTTPS through the gateway still works (no name: passed through).
    let body = curl(&https.demo, &Dial::Address(SITE_V4.into()), "/index.html")
        .unwrap_or_else(|e| panic!("after the origin's death: {e}"));
    assert!(body == demo_file("/index.html"), "after the origin's death");
}

/// One Chromium at a time: two at once on a small machine miss their
/// deadlines.
fn one_browser_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    gateway::sync::lock(&BROWSER)
}

/// How long Chromium gets for the page (the document and 36 subresources).
const PAGE_WAIT: Duration = Duration::from_secs(60);

/// The demo site's file behind a request target (`/` is the index).
fn demo_file_at(target: &str) -> Vec<u8> {
    demo_file(if target == "/" { "/index.html" } else { target })
}

/// JavaScript that fetches each of the page's targets again (no cache) and
/// returns their bytes as arrays of numbers, in order; a status other than
/// 200 rejects.
fn refetch_js(targets: &[String]) -> String {
    let list = testbed::serde_json::to_string(targets).expect("JSON");
    format!(
        "Promise.all({list}.map(t => fetch(t, {{ cache: 'no-store' }}).then(r => \
         r.status === 200 ? r.arrayBuffer() : Promise.reject(new Error(t + ': ' + r.status)))\
         .then(b => Array.from(new Uint8Array(b)))))"
    )
}

/// Headless Chromium in the client namespace loads `https://site.test/`, the
/// name mapped to `ip` (the client has no DNS) and the origin's certificate
/// trusted by its key. Every request must succeed over HTTP/1.1 (the origin's
/// ALPN: a tunnel never carries h2), and every resource, fetched again by the
/// page, must be the file's bytes. Returns the request targets.
fn chromium_loads_the_site_over_https(https: &HttpsDemo, ip: IpAddr) -> Vec<String> {
    let demo = &https.demo;
    let family = if ip.is_ipv4() { "v4" } else { "v6" };
    let config = BrowserConfig {
        extra_args: https.https().chromium_args(ip),
        log: Some(demo.dir().join(format!("chromium-{family}.log"))),
        ..BrowserConfig::default()
    };
    let mut browser =
        Browser::launch(demo.topology.client.name(), &config).expect("chromium starts");
    let mut page = browser.new_page().expect("new tab");
    page.set_cache_disabled(true).expect("cache off");
    let url = https.https().url("/");
    let load = page
        .load(&url, PAGE_WAIT)
        .unwrap_or_else(|e| panic!("{url} via {ip}: {e}\n(logs in {})", demo.dir().display()));
    assert!(
        load.failures().is_empty(),
        "{url} via {ip}: failed requests {:#?}",
        load.failures()
    );
    let origin = format!("https://{SITE_NAME}");
    let targets: Vec<String> = load
        .requests
        .iter()
        .map(|r| {
            r.url
                .strip_prefix(&origin)
                .unwrap_or_else(|| panic!("a request elsewhere than {origin}: {}", r.url))
                .to_owned()
        })
        .collect();
    assert!(
        targets.len() >= 37 && targets[0] == "/",
        "the page and its 36 subresources, got {targets:?}"
    );
    assert_eq!(
        load.timing.next_hop_protocol, "http/1.1",
        "the document's protocol"
    );
    let fetched = page.evaluate(&refetch_js(&targets)).expect("refetching");
    for (target, bytes) in targets.iter().zip(fetched.as_array().expect("an array")) {
        let bytes: Vec<u8> = bytes
            .as_array()
            .expect("an array of bytes")
            .iter()
            .map(|b| {
                b.as_u64()
                    .and_then(|b| u8::try_from(b).ok())
                    .expect("a byte")
            })
            .collect();
        assert!(
            bytes == demo_file_at(target),
            "{target} via {ip}: {} bytes that are not the file's",
            bytes.len()
        );
    }
    println!(
        "{url} via {ip}: {} requests, load event at {:.0} ms, {}",
        targets.len(),
        load.load_event_ms,
        load.timing.next_hop_protocol
    );
    targets
}

/// Asserts what the gateway and the origin logged for Chromium's page over
/// `ip` (once Chromium has gone and its connections ended): every TLS
/// connection to `ip` was a tunnel for [`SITE_NAME`], never a pass-through,
/// and every one of `targets` reached the origin decrypted from a tunnel on a
/// data stream.
fn assert_tunnelled(demo: &Demo, ip: IpAddr, targets: &[String]) {
    let needle = format!("dst={} ", SocketAddr::new(ip, 443));
    let lines: Vec<String> = gateway_https_lines(demo, |l| l.iter().any(|l| l.contains(&needle)))
        .into_iter()
        .filter(|l| l.contains(&needle))
        .collect();
    assert!(
        !lines.is_empty()
            && lines.iter().all(|l| {
                l.contains(&format!("peeked=ServerName(\"{SITE_NAME}\")"))
                    && !l.contains("outcome=None")
            }),
        "Chromium's connections to {ip} were not all tunnelled: {lines:#?}"
    );
    for target in targets {
        let streams = origin_streams(demo, target);
        assert!(
            !streams.is_empty() && streams.iter().all(|&s| s > 0),
            "{target}: the origin's request lines name streams {streams:?}"
        );
    }
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    assert_via_tls(demo, &targets);
}

#[test]
fn chromium_loads_the_site_over_https_through_a_tunnel_on_both_families() {
    let _one_browser = one_browser_at_a_time();
    let https = start("chromium", true);
    for ip in [IpAddr::from(SITE_V4), IpAddr::from(SITE_V6)] {
        let targets = chromium_loads_the_site_over_https(&https, ip);
        assert_tunnelled(&https.demo, ip, &targets);
    }
    assert!(
        https.direct_tls().access_log().is_empty() && https.demo.site.access_log().is_empty(),
        "nginx served what the origin should have"
    );
}

#[test]
fn chromium_loads_the_site_over_https_through_a_tunnel_on_framed_tcp() {
    let _one_browser = one_browser_at_a_time();
    let https = start_with("chromium-framed-tcp", true, |options| {
        options.origin_transport = Some("framed-tcp".into());
        options.gateway.backend = Some("framed-tcp".into());
    });
    let ip = IpAddr::from(SITE_V4);
    let targets = chromium_loads_the_site_over_https(&https, ip);
    assert_tunnelled(&https.demo, ip, &targets);
    assert!(
        https.direct_tls().access_log().is_empty() && https.demo.site.access_log().is_empty(),
        "nginx served what the origin should have"
    );
}

/// `tls.h2` at the origin: curl offers h2 and gets it, two requests share one
/// tunnel (one connection, one https line at the gateway, one data stream at
/// the origin), and the bytes are the files'.
#[test]
fn with_tls_h2_the_origin_speaks_http2_inside_one_tunnel() {
    let https = start_with("h2", true, |options| options.https_h2 = true);
    let demo = &https.demo;
    let paths = ["/index.html", "/assets/site.css"];
    let out = demo.dir().join("h2-bodies");
    std::fs::create_dir_all(&out).expect("bodies directory");
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--fail", "--max-time", "15", "--http2"])
        .args(["-w", "%{http_version}\\n", "--resolve"])
        .arg(format!("{SITE_NAME}:443:{}", IpAddr::from(SITE_V4)))
        .arg("--cacert")
        .arg(&https.site_cert);
    for (n, path) in paths.iter().enumerate() {
        command
            .arg("-o")
            .arg(out.join(n.to_string()))
            .arg(format!("https://{SITE_NAME}{path}"));
    }
    let result = exec_in(demo.topology.client.name(), &command)
        .output()
        .expect("running curl");
    assert!(
        result.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&result.stdout),
        "2\n2\n",
        "HTTP versions"
    );
    for (n, path) in paths.iter().enumerate() {
        let body = std::fs::read(out.join(n.to_string())).expect("body");
        assert!(body == demo_file(path), "{path}: not the file's bytes");
    }
    let dst = SocketAddr::new(SITE_V4.into(), 443);
    let lines = gateway_https_lines(demo, |lines| {
        lines.iter().any(|l| l.contains(&format!("dst={dst} ")))
    });
    let tunnels = lines
        .iter()
        .filter(|l| l.contains(&format!("dst={dst} ")))
        .count();
    assert_eq!(tunnels, 1, "one connection, one tunnel: {lines:#?}");
    let streams: Vec<u16> = paths.iter().flat_map(|p| origin_streams(demo, p)).collect();
    assert!(
        streams.len() == 2 && streams[0] > 0 && streams[0] == streams[1],
        "both requests on the one tunnel's data stream: {streams:?}"
    );
    assert_via_tls(demo, paths.iter());
}
