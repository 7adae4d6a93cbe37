//! The origin: an HTTP/1.1 server whose clients are gateways on SCTP associations,
//! and the response scheduler that decides which response chunk goes out next.
//!
//! Start reading at [`server::drive`], the driver of one association, then
//! [`response_scheduler`], the I/O-free core every response passes through.
//!
//! How a gateway's request travels (`src/main.rs` accepts associations and hands
//! each to [`server::drive`]):
//!
//! 1. [`server`] feeds the association's messages to the protocol `Session`,
//!    which validates each; a REQUEST starts a producer task through the
//!    [`server::Handler`] the binary chose.
//! 2. [`service`] is that handler: one of [`files`] (a document root, answered
//!    the way nginx's static module does) or [`proxy`] (one TCP HTTP/1.1
//!    upstream), per configuration. [`synthetic`] is the handler of tests and
//!    benchmarks (bodies of requested sizes).
//! 3. The `http-semantics` crate, which the gateway shares, parses the request
//!    head and renders the response head, and evaluates preconditions and
//!    ranges, all free of I/O.
//! 4. The producer's chunks wait in the driver; [`response_scheduler`] picks which
//!    response sends its next chunk (FCFS, RR, SCF, priority, WFQ or
//!    queue-aware, each a `ResponsePolicy` in `response_scheduler/policy.rs`), and the driver
//!    sends it on the request's stream.
//!
//! With `[push] enabled`, the driver also pushes what the handler names for a
//! page whose gateway invited pushes (`server/push.rs`, docs/protocol.md
//! "PUSH"): each push is answered by the same handler and scheduled below
//! every request.
//!
//! A TLS tunnel (TUNNEL_OPEN) takes the same path once decrypted: [`tls`]
//! decides by server name whether it is terminated here or relayed to an
//! upstream; the driver's tunnel task (`server/tunnel.rs`) runs rustls and
//! hyper's HTTP/1.1 server, or the h2 crate's server for `h2`
//! (`server/tunnel/http2.rs`, where a page may get a `103 Early Hints`),
//! and hands each request to the same handler.
//!
//! Beside the path: [`config`] (the TOML file, overrides, one `validate()`);
//! [`ebpf`] and [`egress`], the per-stream depth of kernel SCTP's send queue
//! measured by `tc_sctp` (loaded only with the kernel backend); [`metrics`],
//! the figures the driver counts into and their `/metrics` endpoint
//! (`[metrics]`).
//!
//! [`access`] wraps the handler with the access log; [`doctor`] checks the
//! host for what a configuration needs (`origin doctor`).
//!
//! [`closure`] works out what to push with a page the files serve: its
//! same-host subresources, render-blocking first, once per file version,
//! read through [`files`] with the `page-resources` extraction the gateway's
//! prefetch uses too. [`learned`] adds what only JavaScript finds: the URLs
//! gateways asked for within a few seconds after a page, kept per page with
//! a confidence and aged out (sans-I/O; fed every answered request).
//!
//! Layering (docs/architecture.md): a module imports only modules to its right
//! in `doctor` > `config` > `access` > `service` > `learned` > `closure` > {`proxy`,
//! `synthetic`, `files`} > `server` > {`tls`, `metrics` > `response_scheduler`, `ebpf` >
//! `egress`}; [`sync`] (the lock helper) is a leaf under all.

pub mod access;
pub mod closure;
pub mod config;
pub mod doctor;
pub mod ebpf;
pub mod egress;
pub mod files;
pub mod learned;
pub mod metrics;
pub mod proxy;
pub mod response_scheduler;
pub mod server;
pub mod service;
pub mod sync;
pub mod synthetic;
pub mod tls;
