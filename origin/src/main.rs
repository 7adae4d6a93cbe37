//! The SCTP origin server and its stream schedulers.
//!
//! Today it is a skeleton: the foundation (protocol and association layer) lives
//! in `gateway-protocol` and `gateway-transport`; static files, reverse proxy and
//! schedulers arrive with the origin issue.

fn main() {
    eprintln!("origin: not implemented yet; see the README for what works today");
    std::process::exit(2);
}
