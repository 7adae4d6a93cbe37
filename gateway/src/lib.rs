//! The gateway daemon's library half. `src/main.rs` is a thin CLI over it; tests
//! and tools reach the parts directly.
//!
//! Start reading at [`daemon::run`] (what starts, in which order, and how it
//! stops), then follow one request through [`front`]. docs/gateway.md has the
//! whole picture.
//!
//! How a browser request travels:
//!
//! 1. [`intercept`] installs the nftables table and the policy routes
//!    (`intercept::policy_routing`) that make TPROXY deliver browser TCP to port
//!    80 to the gateway.
//! 2. [`listener`] accepts it on `IP_TRANSPARENT` sockets; the accepted socket's
//!    local address is the original destination.
//! 3. [`front`] speaks HTTP/1.1 to the browser, enforces limits, checks Host
//!    against the destination and asks [`route`] where the request goes; it
//!    builds the request's [`upstream::Upstream`] (that route over this
//!    connection's stream pins and direct connection) and writes the answer.
//! 4. [`cache`] decides, in [`cache::Cache::serve`], whether a cacheable
//!    request is a hit, joins a flight, fills, revalidates or passes, and
//!    drives the upstream itself; [`prefetch`] scans HTML on its way to the
//!    browser and fetches what the page will need through that same entry
//!    point ([`prefetch::Prefetcher`]); [`push`] takes the responses an
//!    origin pushes for a page into the cache through it too.
//! 5. The upstream: mapped requests travel over the origin's association
//!    ([`origin_link`]), on the stream their browser flow is pinned to; the
//!    rest go over plain TCP to the original destination ([`direct`]). Every
//!    response body is a [`body::Body`].
//!
//! Beside the path: [`config`] (every `[section]` of the file, validated in one
//! place), [`admin`] (metrics, cache stats and purge on loopback), [`ebpf`]
//! (per-stream SCTP counters from XDP/TC programs: the `ebpf-loader` crate,
//! which the origin shares), [`accounting`] (per-stream figures), the
//! counted browser socket [`browser_socket`] (wrapped where a flow is
//! accepted, [`listener::Intercepted::into_counted`]) and [`sync`] (the lock
//! helper and the shutdown wait).
//!
//! Layering (docs/architecture.md): a module imports only modules to its right
//! in `daemon` > `doctor` > `admin` > `front` > `accounting` > `metrics` >
//! `push` > {`origin_link`, `intercept`, `route`, `listener`, `direct`} > `config` >
//! `prefetch` > `cache` > {`upstream`, `browser_socket`} > `client_bytes` >
//! {`body`, `sync`}; [`ebpf`] stands apart.
//!
//! What it never does: start anything on its own. Every socket, rule and
//! attachment is made by an explicit call and undone by dropping what it returned
//! (or by `gateway cleanup` after a crash).

pub mod accounting;
pub mod admin;
pub mod body;
pub mod browser_socket;
pub mod cache;
pub mod client_bytes;
pub mod config;
pub mod daemon;
pub mod direct;
pub mod doctor;
/// The eBPF loader, shared with the origin (`ebpf-loader`); kept under its
/// former path, which the gateway's code and tests use.
pub use ebpf_loader as ebpf;
pub mod front;
pub mod intercept;
pub mod listener;
pub mod metrics;
pub mod origin_link;
pub mod prefetch;
pub mod push;
pub mod route;
pub mod sync;
pub mod upstream;
