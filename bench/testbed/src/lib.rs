//! The demo topology in network namespaces, and what runs in it: shared by
//! `cargo xtask run`, the gateway's end-to-end tests and the benchmarks.
//!
//! - [`Topology`]: client, gateway (a router with `lan0`, `wan0`, `web0`), origin
//!   host and an unmapped web server, IPv4 and IPv6, deleted on drop;
//!   [`cleanup_stale`] removes what killed runs left. The addresses are constants
//!   of [`topology`].
//! - [`VethPair`]: two namespaces on one veth pair, for the benchmarks that
//!   want nothing else on the path (`cargo xtask bench transport|scheduler|static`).
//! - [`NsProcess`]: a program inside a namespace with its output in a log file,
//!   killed on drop; bounded waits for ports, log lines and conditions.
//! - [`Nginx`]: the plain-HTTP servers (the site's addresses, the web server),
//!   and the site over TLS with HTTP/2 ([`Nginx::start_tls`], [`TlsSite`]).
//! - [`Squid`]: Squid as a transparent TPROXY cache in the router namespace,
//!   the page-load benchmark's caching-proxy alternative.
//! - [`Demo`]: all of the above with the `origin` and `gateway` binaries running,
//!   the gateway's config generated from `config/gateway.toml`.
//! - [`https`]: the demo's site over HTTPS (a certificate for
//!   [`https::SITE_NAME`] at the origin, the gateway's tunnel), and how curl
//!   and Chromium trust it.
//! - [`Browser`]: headless Chromium in a namespace over the DevTools pipe: page
//!   loads with every request's outcome and navigation timing, JavaScript
//!   evaluation, screenshots.
//! - [`WanEmulator`]: the `wanem` WAN emulator (bench/wanem) on the gateway–origin
//!   link of a topology with a middle `wan` namespace: delay, jitter, loss, rate.
//! - [`corpus`]: generated pages shaped like the HTTP Archive's 25th, 50th and
//!   75th percentile pages, and the lower bound of a page load over a link.
//! - [`probe`]: UDP echo and round-trip times, paced UDP and TCP bulk senders and
//!   timestamping sinks, for measuring links between namespaces.
//!
//! What it never does: touch the host's own network namespace beyond creating and
//! deleting namespaces and veth pairs, or leave a process running after its guard
//! is dropped. It needs root (namespaces), `ip` (iproute2), and for the servers,
//! the browser and the WAN emulator Debian's `nginx-light`, `chromium` and
//! `ethtool`; for the benchmark's alternatives `openssl`, `squid` and `nftables`.
//!
//! Where to start: [`Topology::create`], then [`NsProcess::spawn`].

mod browser;
pub mod corpus;
mod demo;
mod error;
pub mod https;
mod netns;
mod nginx;
pub mod probe;
mod process;
mod squid;
pub mod topology;
mod wan;

pub use browser::{
    Browser, BrowserConfig, CHROMIUM, CHROMIUM_FLAGS, NavigationTiming, Page, PageLoad,
    PaintTiming, RequestRecord, ResourceTiming,
};
pub use corpus::{
    GeneratedPage, Link, ObjectKind, ObjectSpec, PROFILES, PageProfile, describe_dir,
    discovery_bound, floor, generate, lower_bound,
};
pub use demo::{
    Binaries, DAEMON_LOG_FILTER, DAEMON_LOG_VARIABLE, Demo, DemoOptions, DemoWan, GatewayConfig,
    GatewayConfigOverrides, READY_TIMEOUT, daemon_log_filter, tcp_listening,
};
pub use error::{Result, TestbedError};
pub use netns::{
    NETNS_ETC, NamespaceHosts, Netns, VethPair, cleanup_stale, display, exec_in, exists, in_netns,
    ip, run, sysctl, veth,
};
pub use nginx::{AccessEntry, NGINX, Nginx, OPENSSL, TlsSite, WEB_PAGE, write_web_page};
pub use process::{NsProcess, Signal, tcp_accepts, wait_for_tcp, wait_until};
/// The JSON type [`Page::evaluate`] returns.
pub use serde_json;
pub use squid::{
    CACHE_DIR_MB, CACHE_MEM_MB, MAX_OBJECT_IN_MEMORY_KB, MAX_OBJECT_MB, SQUID, SQUID_FORWARD_PORT,
    SQUID_MARK, SQUID_ROUTE_TABLE, SQUID_RULE_PRIORITY, SQUID_TABLE, SQUID_TPROXY_PORT, SQUID_USER,
    Squid, SquidAccess,
};
pub use topology::{Topology, WanLink};
pub use wan::{
    DirectionCounters, LinkParams, Loss, OFFLOADS_OFF, WANEM_READY, WanEmulator, WanParams,
    WanStats, disable_offloads,
};

use std::path::PathBuf;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().nth(2).unwrap_or(manifest).to_owned()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` if set, else `target/` in the
/// workspace.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The demo site the origin serves (`config/demo-site`).
pub fn demo_site() -> PathBuf {
    workspace_root().join("config/demo-site")
}
