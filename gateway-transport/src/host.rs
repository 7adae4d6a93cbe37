//! What this host's kernel offers, read without changing anything. A leaf:
//! the configuration (`UdpOffload::Auto`) and the doctor both ask it.

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
