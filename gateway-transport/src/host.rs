//! What this host's kernel offers, read without changing anything, and the
//! one socket option every backend sets the same way. A leaf: the
//! configuration (`UdpOffload::Auto`), the doctor and the backends ask it.

use std::net::SocketAddr;

/// Where a kernel with SCTP says which UDP port it encapsulates on (0: none).
const SCTP_UDP_PORT_SYSCTL: &str = "/proc/sys/net/sctp/udp_port";

/// The UDP port this network namespace's kernel SCTP receives encapsulated
/// packets on (`net.sctp.udp_port`); `None` when it is 0 or the kernel has no
/// SCTP.
pub fn kernel_sctp_udp_port() -> Option<u16> {
    std::fs::read_to_string(SCTP_UDP_PORT_SYSCTL)
        .ok()
        .and_then(|port| port.trim().parse::<u16>().ok())
        .filter(|port| *port != 0)
}

/// Makes an IPv6 socket IPv6-only (`IPV6_V6ONLY`) before it is bound; an IPv4
/// one is left alone.
///
/// Every backend's IPv6 sockets are, whatever the host's
/// `net.ipv6.bindv6only`: a listener on `[::]:P` then takes IPv6 only, and
/// one on `0.0.0.0:P` beside it takes IPv4, as the shipped origin.toml asks.
/// A dual-stack `[::]:P` would hold the IPv4 port too, so the second bind
/// would fail with "Address already in use" and whichever came second would
/// be missing. A single `[::]:P` that should take IPv4 as well is written as
/// two addresses (docs/transport.md, "Listen addresses"); this is what nginx
/// does with `listen [::]:80`.
pub(crate) fn ipv6_only(socket: &socket2::Socket, addr: SocketAddr) -> std::io::Result<()> {
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(())
}
