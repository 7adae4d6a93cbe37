//! The page-load benchmark's alternatives to the gateway, as real parts in the
//! testbed's namespaces with the gateway namespace a plain router:
//!
//! - the site over TLS with HTTP/2 (nginx, a fresh self-signed certificate),
//!   reached by curl and Chromium over IPv4 and IPv6;
//! - Squid in the router as a transparent TPROXY cache in front of the site's
//!   plain-HTTP nginx.
//!
//! Needs root, iproute2, nftables, nginx, openssl, curl, squid and chromium;
//! fails (never skips) without them, naming what is missing.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testbed::topology::{SITE_V4, SITE_V6};
use testbed::{
    Browser, BrowserConfig, Nginx, TestbedError, TlsSite, Topology, demo_site, exec_in, run,
};

const PREFIX: &str = "gwalt-";

/// Bound of one page load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests need root: they create network namespaces, nftables rules and routes"
    );
}

fn topology() -> Topology {
    require_root();
    testbed::cleanup_stale(PREFIX).expect("removing namespaces of killed runs");
    Topology::create(PREFIX).expect("topology")
}

/// The site's two addresses on `port`.
fn site(port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::new(SITE_V4.into(), port),
        SocketAddr::new(SITE_V6.into(), port),
    ]
}

/// `http(s)://ADDR/path` with IPv6 addresses bracketed.
fn url(scheme: &str, ip: IpAddr, path: &str) -> String {
    match ip {
        IpAddr::V4(ip) => format!("{scheme}://{ip}{path}"),
        IpAddr::V6(ip) => format!("{scheme}://[{ip}]{path}"),
    }
}

/// Runs curl in `ns` with `args`, the body going to `body`; returns what
/// `-w '%{http_code} %{http_version}'` printed.
fn curl(ns: &str, args: &[&str], body: &Path) -> Result<String, TestbedError> {
    let mut command = Command::new("curl");
    command
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "%{http_code} %{http_version}",
        ])
        .arg("-o")
        .arg(body)
        .args(args);
    run(&mut exec_in(ns, &command))
}

fn tls_site(topology: &Topology, dir: &Path) -> (Nginx, TlsSite) {
    Nginx::start_tls(topology.origin.name(), &site(443), &demo_site(), dir)
        .unwrap_or_else(|e| panic!("TLS nginx did not start: {e}"))
}

#[test]
fn tls_nginx_serves_the_site_over_http2_to_curl_on_both_families() {
    let topology = topology();
    let dir = tempfile::tempdir().expect("tempdir");
    let (nginx, tls) = tls_site(&topology, &dir.path().join("nginx"));
    let index = std::fs::read(demo_site().join("index.html")).expect("index.html");
    let client = topology.client.name();
    let cacert = tls.cert.to_str().expect("UTF-8 path");
    let body = dir.path().join("body");

    for ip in [IpAddr::from(SITE_V4), IpAddr::from(SITE_V6)] {
        let target = url("https", ip, "/");
        let _ = std::fs::remove_file(&body);
        let outcome = curl(client, &["--http2", "--cacert", cacert, &target], &body)
            .unwrap_or_else(|e| panic!("curl {target}: {e}"));
        assert_eq!(outcome, "200 2", "{target}");
        assert_eq!(std::fs::read(&body).expect("body"), index, "{target}");
        // Trust is the pinned certificate, not "anything goes": without it the
        // handshake fails verification.
        let untrusted = curl(client, &["--http2", &target], &body);
        assert!(
            matches!(untrusted, Err(TestbedError::Command { ref stderr, .. }) if stderr.contains("certificate")),
            "{untrusted:?}"
        );
    }
    let seen = nginx.access_log();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter()
            .all(|e| e.status == 200 && e.request == "GET / HTTP/2.0"),
        "{seen:?}"
    );
    assert_eq!(seen[1].server_addr, SITE_V6);
}

#[test]
fn chromium_loads_the_tls_site_over_h2_trusting_only_its_certificate() {
    let topology = topology();
    let dir = tempfile::tempdir().expect("tempdir");
    let (nginx, tls) = tls_site(&topology, &dir.path().join("nginx"));
    let client = topology.client.name();

    // A pin of another key: Chromium must refuse the site.
    let other = TlsSite::generate(&[SITE_V4.into()], &make_dir(dir.path().join("other")))
        .expect("second certificate");
    assert_ne!(other.spki_sha256_base64, tls.spki_sha256_base64);
    {
        let mut browser = launch(client, &other, dir.path(), "wrong-pin");
        let mut page = browser.new_page().expect("new tab");
        let refused = page.load("https://203.0.113.10/", LOAD_TIMEOUT);
        assert!(
            matches!(refused, Err(TestbedError::Navigation { ref reason, .. }) if reason.contains("CERT")),
            "{refused:?}"
        );
    }

    let mut browser = launch(client, &tls, dir.path(), "pinned");
    for ip in [IpAddr::from(SITE_V4), IpAddr::from(SITE_V6)] {
        // A tab each: the first page's late favicon request would otherwise be
        // counted (and fail, the site has none) in the second load.
        let mut page = browser.new_page().expect("new tab");
        let target = url("https", ip, "/");
        let load = page
            .load(&target, LOAD_TIMEOUT)
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        // The site has no favicon; Chromium asks for one, sometimes before the
        // load event.
        let failures: Vec<_> = load
            .failures()
            .into_iter()
            .filter(|r| !r.url.ends_with("/favicon.ico"))
            .collect();
        assert!(failures.is_empty(), "{target} failed: {failures:#?}");
        assert!(
            load.requests.len() >= 31,
            "{} requests",
            load.requests.len()
        );
        assert!(load.load_event_ms > 0.0, "{:?}", load.timing);
        let protocols = page
            .evaluate(
                "[...performance.getEntriesByType('navigation'), \
                 ...performance.getEntriesByType('resource')]\
                 .map(e => e.nextHopProtocol)",
            )
            .expect("evaluate");
        let protocols = protocols.as_array().expect("an array");
        assert!(protocols.len() >= 31, "{protocols:?}");
        assert!(
            protocols.iter().all(|p| p == "h2"),
            "{target}: {protocols:?}"
        );
    }
    let seen = nginx.access_log();
    assert!(seen.len() >= 62, "{} requests", seen.len());
    assert!(
        seen.iter().all(|e| e.request.ends_with(" HTTP/2.0")),
        "{seen:?}"
    );
}

fn make_dir(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn launch(ns: &str, tls: &TlsSite, dir: &Path, name: &str) -> Browser {
    let config = BrowserConfig {
        extra_args: tls.chromium_args(),
        log: Some(dir.join(format!("chromium-{name}.log"))),
        ..BrowserConfig::default()
    };
    Browser::launch(ns, &config).unwrap_or_else(|e| panic!("chromium did not start: {e}"))
}
