//! The testbed on its own, without the gateway: the gateway namespace is a plain
//! router, so the client reaches the site's nginx and the web server by routing.
//! Checks the wiring (both families, every link, the middle WAN namespace), the
//! process and nginx guards, the Chromium driver, and that nothing is left behind.
//!
//! Needs root, iproute2, nginx and chromium; fails (never skips) without them.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use testbed::topology::{
    LAN, SITE_V4, SITE_V6, WAN_TOWARD_GATEWAY, WAN_TOWARD_ORIGIN, WEB_V4, WEB_V6,
};
use testbed::{
    Browser, Nginx, Topology, WEB_PAGE, WanLink, demo_site, exec_in, ip, run, target_dir,
};

const PREFIX: &str = "gwtb-";

fn site_nginx(topology: &Topology, dir: &Path) -> Nginx {
    Nginx::start(
        topology.origin.name(),
        &[
            SocketAddr::new(SITE_V4.into(), 80),
            SocketAddr::new(SITE_V6.into(), 80),
        ],
        &demo_site(),
        dir,
    )
    .expect("site nginx starts")
}

fn curl(ns: &str, url: &str) -> Vec<u8> {
    let mut command = Command::new("curl");
    command.args(["-sS", "--fail", "--max-time", "10", url]);
    run(&mut exec_in(ns, &command))
        .expect("curl succeeds")
        .into_bytes()
}

#[test]
fn client_reaches_site_and_web_over_both_families_by_routing() {
    testbed::cleanup_stale(PREFIX).expect("cleanup");
    let topology = Topology::create(PREFIX).expect("topology");
    let dir = tempfile::tempdir().expect("tempdir");
    let site = site_nginx(&topology, &dir.path().join("site"));
    let www = testbed::write_web_page(&dir.path().join("www")).expect("page");
    let web = Nginx::start(
        topology.web.name(),
        &[
            SocketAddr::new(WEB_V4.into(), 80),
            SocketAddr::new(WEB_V6.into(), 80),
        ],
        &www,
        &dir.path().join("web"),
    )
    .expect("web nginx starts");

    let index = std::fs::read(demo_site().join("index.html")).expect("index.html");
    let client = topology.client.name();
    assert_eq!(curl(client, "http://203.0.113.10/"), index);
    assert_eq!(curl(client, "http://[2001:db8:203::10]/"), index);
    assert_eq!(curl(client, "http://198.51.100.10/"), WEB_PAGE.as_bytes());
    assert_eq!(
        curl(client, "http://[2001:db8:198::10]/"),
        WEB_PAGE.as_bytes()
    );

    // Routed, not proxied: nginx saw the client's own address.
    let seen = site.access_log();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter()
            .all(|e| e.status == 200 && e.request == "GET / HTTP/1.1")
    );
    assert_eq!(seen[0].remote_addr, LAN.host_v4);
    assert_eq!(seen[1].remote_addr, LAN.host_v6);
    assert_eq!(seen[1].server_addr, SITE_V6);
    assert_eq!(web.access_log().len(), 2);

    let names: Vec<String> = topology
        .namespaces()
        .iter()
        .map(|s| s.to_string())
        .collect();
    drop((site, web, topology));
    for name in names {
        assert!(!testbed::exists(&name), "{name} left behind");
    }
}

#[test]
fn middle_wan_namespace_carries_the_gateway_origin_link() {
    let topology = Topology::create_with(PREFIX, WanLink::ThroughNamespace).expect("topology");
    let wan = topology.wan.as_ref().expect("wan namespace").name();
    let dir = tempfile::tempdir().expect("tempdir");
    let _site = site_nginx(&topology, dir.path());
    // Nothing forwards yet: the site is unreachable.
    let mut probe = Command::new("curl");
    probe.args(["-sS", "--max-time", "2", "http://203.0.113.10/"]);
    assert!(run(&mut exec_in(topology.client.name(), &probe)).is_err());
    // A bridge stands in for the WAN emulator.
    ip(&["-n", wan, "link", "add", "br0", "type", "bridge"]).expect("bridge");
    for dev in [WAN_TOWARD_GATEWAY, WAN_TOWARD_ORIGIN] {
        ip(&["-n", wan, "link", "set", dev, "master", "br0"]).expect("enslave");
    }
    ip(&["-n", wan, "link", "set", "br0", "up"]).expect("bridge up");
    let index = std::fs::read(demo_site().join("index.html")).expect("index.html");
    assert_eq!(
        curl(topology.client.name(), "http://[2001:db8:203::10]/"),
        index
    );
}

#[test]
fn stale_namespaces_of_dead_processes_are_removed() {
    // A prefix of its own: the other tests' cleanup must not race this one.
    const PREFIX: &str = "gwtbstale-";
    // A pid far above pid_max (at most 2^22) cannot be running.
    let stale = format!("{PREFIX}99999999-1-client");
    ip(&["netns", "add", &stale]).expect("netns add");
    let live = testbed::Netns::create(&format!("{PREFIX}{}-999-client", std::process::id()))
        .expect("live namespace");
    let removed = testbed::cleanup_stale(PREFIX).expect("cleanup");
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(!testbed::exists(&stale));
    assert!(
        testbed::exists(live.name()),
        "a live run's namespace was removed"
    );
}

#[test]
fn chromium_loads_the_demo_site_by_routing() {
    let topology = Topology::create(PREFIX).expect("topology");
    let dir = tempfile::tempdir().expect("tempdir");
    let site = site_nginx(&topology, dir.path());
    let mut browser = Browser::launch_in(topology.client.name()).expect("chromium starts");
    let mut page = browser.new_page().expect("new tab");
    let load = page
        .load("http://203.0.113.10/", Duration::from_secs(30))
        .expect("page loads");
    assert!(load.failures().is_empty(), "failed: {:#?}", load.failures());
    assert!(
        load.requests.len() >= 31,
        "{} requests",
        load.requests.len()
    );
    assert!(load.load_event_ms > 0.0, "{:?}", load.timing);
    assert!(load.timing.resource_count >= 30, "{:?}", load.timing);
    // The demo page has text and images: both paints are reported, the
    // largest no earlier than the first.
    let paint = load.paint;
    let (Some(fcp), Some(lcp)) = (paint.first_contentful_paint, paint.largest_contentful_paint)
    else {
        panic!("no paint timing: {paint:?}");
    };
    assert!(fcp > 0.0 && lcp >= fcp, "{paint:?}");
    let broken = page
        .evaluate("[...document.images].filter(i => !(i.naturalWidth > 0)).length")
        .expect("evaluate");
    assert_eq!(broken, 0);
    let shot = target_dir().join("e2e-artifacts/testbed-routed.png");
    page.screenshot(&shot).expect("screenshot");
    let png = std::fs::read(&shot).expect("read screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    println!("screenshot: {}", shot.display());
    assert!(site.access_log().len() >= 31);
}

#[test]
fn a_veth_pair_is_up_with_its_addresses_takes_a_rate_limit_and_goes_on_drop() {
    let tag = format!("{PREFIX}pair-{}", std::process::id());
    let pair = testbed::VethPair::create(&tag, "10.79.0.1/24", "10.79.0.2/24").expect("pair");
    let server = pair.server.name().to_owned();
    let client = pair.client.name().to_owned();
    for (ns, addr) in [(&server, "10.79.0.1/24"), (&client, "10.79.0.2/24")] {
        let shown = ip(&["-n", ns, "addr", "show", "veth0"]).expect("addresses");
        assert!(
            shown.contains(addr) && shown.contains("state UP"),
            "{shown}"
        );
    }
    pair.rate_limit("20mbit")
        .expect("token bucket on both sides");
    let qdisc = ip(&["-n", &server, "link", "show", "veth0"]).expect("link");
    assert!(qdisc.contains("qdisc tbf"), "{qdisc}");
    drop(pair);
    assert!(!testbed::exists(&server) && !testbed::exists(&client));
}
