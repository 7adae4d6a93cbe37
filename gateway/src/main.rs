//! The gateway daemon: transparent interception of browser HTTP, flows carried to
//! SCTP origins over one association with many streams, a persistent cache and an
//! HTML-driven prefetch queue.
//!
//! Today it is a skeleton: the foundation (protocol and association layer) lives
//! in `gateway-protocol` and `gateway-transport`; interception, cache and prefetch
//! arrive with their own issues.

fn main() {
    eprintln!("gateway: not implemented yet; see the README for what works today");
    std::process::exit(2);
}
