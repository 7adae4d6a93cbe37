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

use testbed::topology::{LAN, LAN_IF, SITE_V4, SITE_V6};
use testbed::{
    Browser, BrowserConfig, Nginx, SQUID_FORWARD_PORT, SQUID_ROUTE_TABLE, SQUID_TABLE, Squid,
    SquidAccess, TestbedError, TlsSite, Topology, demo_site, exec_in, in_netns, ip, run,
    wait_until,
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

/// A benchmark's own configuration (the static benchmark's: no master, one
/// worker, no access log) runs under the same guard as the testbed's.
#[test]
fn nginx_runs_a_configuration_of_the_callers() {
    let topology = topology();
    let dir = tempfile::tempdir().expect("tempdir");
    let nginx_dir = dir.path().join("nginx");
    let [listen, _] = site(8080);
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;\n\
         error_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; server {{ listen {listen}; root {root}; }} }}\n",
        d = nginx_dir.display(),
        root = demo_site().display()
    );
    let mut nginx = Nginx::start_with_config(topology.origin.name(), &[listen], &conf, &nginx_dir)
        .expect("nginx with the caller's configuration");
    let body = dir.path().join("body");
    let target = format!("http://{listen}/");
    let outcome = curl(topology.client.name(), &[&target], &body)
        .unwrap_or_else(|e| panic!("curl {target}: {e}"));
    assert_eq!(outcome, "200 1.1", "{target}");
    let index = std::fs::read(demo_site().join("index.html")).expect("index.html");
    assert_eq!(std::fs::read(&body).expect("body"), index);
    assert!(
        nginx.access_log().is_empty(),
        "access_log off writes nothing"
    );
    let pid = nginx.process().pid();
    drop(nginx);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the guard ends nginx on drop"
    );
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

/// The cacheable object of the Squid tests.
const OBJECT: &str = "/cacheable.bin";

/// Its size: several TCP windows' worth, so a truncated copy would show.
const OBJECT_BYTES: usize = 300_000;

/// How old the object's Last-Modified is. nginx sends no Cache-Control or
/// Expires for static files, so Squid's freshness is the heuristic (a tenth of
/// this age, capped at a day): ten days make it fresh for the test's seconds.
const OBJECT_AGE: Duration = Duration::from_secs(10 * 24 * 3600);

/// A directory Squid's unprivileged user can reach (tempdirs are 0700).
fn reachable_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    tempfile::Builder::new()
        .prefix("testbed-squid-")
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir()
        .expect("tempdir")
}

/// A site root holding [`OBJECT`]; returns its bytes.
fn cacheable_site(root: &Path) -> Vec<u8> {
    std::fs::create_dir_all(root).expect("mkdir");
    let body: Vec<u8> = (0..OBJECT_BYTES).map(|i| (i % 251) as u8).collect();
    let path = root.join(OBJECT.trim_start_matches('/'));
    std::fs::write(&path, &body).expect("write object");
    let file = std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("open object");
    let modified = std::time::SystemTime::now() - OBJECT_AGE;
    file.set_modified(modified).expect("set mtime");
    body
}

/// Squid's log lines for `url`, once there are `count` of them.
fn squid_entries(squid: &Squid, url: &str, count: usize) -> Vec<SquidAccess> {
    let mut entries = Vec::new();
    let waited = wait_until(
        &format!("{count} access log lines for {url}"),
        Duration::from_secs(5),
        || {
            entries = squid
                .access_log()
                .into_iter()
                .filter(|e| e.url == url)
                .collect();
            Ok(entries.len() >= count)
        },
    );
    waited.unwrap_or_else(|e| panic!("{e}: {:?}", squid.access_log()));
    entries
}

/// What in namespace `ns` belongs to Squid's interception: the nft table, the
/// fwmark rules and the routes of its table, per family (empty when removed).
fn interception_state(ns: &str) -> Vec<String> {
    let mut state = Vec::new();
    let mut tables = Command::new("nft");
    tables.args(["list", "tables"]);
    let tables = run(&mut exec_in(ns, &tables)).expect("nft list tables");
    state.extend(
        tables
            .lines()
            .filter(|l| l.contains(SQUID_TABLE))
            .map(str::to_owned),
    );
    let table = SQUID_ROUTE_TABLE.to_string();
    for family in ["-4", "-6"] {
        let rules = ip(&["-n", ns, family, "rule"]).expect("ip rule");
        state.extend(
            rules
                .lines()
                .filter(|l| l.contains("fwmark") || l.contains(&table))
                .map(|l| format!("{family} rule {l}")),
        );
        let routes = ip(&["-n", ns, family, "route", "show", "table", &table]).unwrap_or_default();
        state.extend(routes.lines().map(|l| format!("{family} route {l}")));
    }
    state
}

#[test]
fn squid_intercepts_and_caches_with_the_clients_address_on_both_families() {
    let topology = topology();
    let dir = reachable_tempdir();
    let root = dir.path().join("site");
    let object = cacheable_site(&root);
    let site = Nginx::start(
        topology.origin.name(),
        &site(80),
        &root,
        &dir.path().join("nginx"),
    )
    .unwrap_or_else(|e| panic!("site nginx did not start: {e}"));
    let router = topology.gateway.name();
    let squid = Squid::start(router, LAN_IF, &dir.path().join("squid"))
        .unwrap_or_else(|e| panic!("squid did not start: {e}"));
    assert_eq!(
        interception_state(router).len(),
        5,
        "{:?}",
        interception_state(router)
    );

    let client = topology.client.name();
    let body = dir.path().join("body");
    for (ip, client_addr) in [
        (IpAddr::from(SITE_V4), IpAddr::from(LAN.host_v4)),
        (IpAddr::from(SITE_V6), IpAddr::from(LAN.host_v6)),
    ] {
        let target = url("http", ip, OBJECT);
        for round in 0..2 {
            let _ = std::fs::remove_file(&body);
            // No proxy option: the interception is transparent.
            let outcome = curl(client, &["--fail", &target], &body)
                .unwrap_or_else(|e| panic!("curl {target}: {e}"));
            assert_eq!(outcome, "200 1.1", "{target}, round {round}");
            assert!(
                std::fs::read(&body).expect("body") == object,
                "{target}, round {round}: the body differs"
            );
        }
        let entries = squid_entries(&squid, &target, 2);
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[0].result, "TCP_MISS", "{entries:?}");
        assert!(entries[1].is_hit(), "{entries:?}");
        assert!(
            entries
                .iter()
                .all(|e| e.status == 200 && e.client == client_addr),
            "{entries:?}"
        );
        // The origin saw one request, from the client's own address: Squid
        // spoofs it toward the server, and the reply found its way back.
        let seen: Vec<_> = site
            .access_log()
            .into_iter()
            .filter(|e| e.server_addr == ip && e.request.contains(OBJECT))
            .collect();
        assert_eq!(seen.len(), 1, "{target}: {seen:?}");
        assert_eq!(seen[0].remote_addr, client_addr, "{seen:?}");
        assert_eq!(seen[0].status, 200);
    }

    let pid = squid.process_id();
    let shm_prefix = format!("{}-", squid.service_name());
    drop(squid);
    let shm_left: Vec<_> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&shm_prefix))
        .collect();
    assert!(shm_left.is_empty(), "{shm_left:?}");
    assert!(
        interception_state(router).is_empty(),
        "left behind: {:?}",
        interception_state(router)
    );
    assert!(
        !Path::new("/proc").join(pid.to_string()).exists(),
        "squid still runs"
    );
    // Without interception the router forwards again: the site answers itself.
    let outcome = curl(
        client,
        &["--fail", &url("http", SITE_V4.into(), OBJECT)],
        &body,
    )
    .expect("curl after squid");
    assert_eq!(outcome, "200 1.1");
    assert_eq!(site.access_log().len(), 3);
}

#[test]
fn squid_that_fails_to_start_leaves_nothing_installed() {
    let topology = topology();
    let router = topology.gateway.name();
    // Squid cannot bind its forward port if something else holds it.
    let squatter = in_netns(router, || {
        std::net::TcpListener::bind(("127.0.0.1", SQUID_FORWARD_PORT))
    })
    .expect("setns")
    .expect("bind the forward port");
    let dir = reachable_tempdir();
    let failed = Squid::start(router, LAN_IF, &dir.path().join("squid"));
    let error = failed.expect_err("squid cannot listen");
    assert!(
        matches!(error, TestbedError::Failed { ref line, .. } if line.contains("Cannot bind")),
        "{error}"
    );
    assert!(
        interception_state(router).is_empty(),
        "left behind: {:?}",
        interception_state(router)
    );
    drop(squatter);
}
