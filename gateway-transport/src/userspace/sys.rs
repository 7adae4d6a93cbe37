//! What the userspace backend asks of its UDP socket beyond `socket2` and
//! `quinn-udp`:
//!
//! - turning UDP GRO off again after `quinn-udp` turned it on, for
//!   `udp_offload = false` (the only `unsafe` of this backend);
//! - the ICMP error queue (`IP_RECVERR`), through `nix`: which destination
//!   answered with "port unreachable", and the verification tag of the SCTP
//!   packet it answered, so that the driver can end exactly that association.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};

use nix::errno::Errno;
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};

/// Reports read from the error queue per call, at most: a burst beyond this
/// waits for the next receive pass.
const MAX_ERROR_REPORTS: usize = 64;
/// Control-message space per error report read.
const CONTROL_BYTES: usize = 512;

/// Turns `UDP_GRO` (Linux >= 5.0) on or off on `socket`: while on, the kernel
/// may hand several datagrams of one flow to one `recvmsg`, with their size in
/// a `UDP_GRO` control message.
pub(super) fn set_udp_gro(socket: &impl AsFd, on: bool) -> io::Result<()> {
    let value = libc::c_int::from(on);
    let fd = socket.as_fd();
    // SAFETY: `value` is an initialised c_int that outlives the call, and the
    // length passed is its size; `fd` is a socket descriptor borrowed for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to queue ICMP errors for this socket's datagrams
/// (`IP_RECVERR`, and `IPV6_RECVERR` on an IPv6 socket, which may also carry
/// IPv4-mapped traffic), each with the destination and the start of the
/// datagram it answers. Without it an unconnected socket hears none, and a
/// connected one only an errno.
pub(super) fn set_recv_errors(socket: &impl AsFd, v6: bool) -> io::Result<()> {
    setsockopt(socket, sockopt::Ipv4RecvErr, &true)?;
    if v6 {
        setsockopt(socket, sockopt::Ipv6RecvErr, &true)?;
    }
    Ok(())
}

/// Bytes of our SCTP packet an ICMP report is read for: the common header,
/// and the first chunk's header and first word (an INIT's Initiate Tag), all
/// that RFC 9260 Appendix C looks at.
const QUOTE_LEN: usize = 20;

/// An ICMP "port unreachable" the kernel queued for one of our datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PortUnreachable {
    /// Where the datagram was going.
    pub(super) to: SocketAddr,
    /// The start of the SCTP packet it carried, as far as the ICMP message
    /// quoted it (up to [`QUOTE_LEN`] bytes): see [`Self::quoted`].
    quote: [u8; QUOTE_LEN],
    quote_len: usize,
}

impl PortUnreachable {
    /// What the ICMP message quoted of our SCTP packet, from its common
    /// header on; for `sctp::Association::handle_port_unreachable`.
    pub(super) fn quoted(&self) -> &[u8] {
        &self.quote[..self.quote_len]
    }
}

/// Drains the socket's error queue (`MSG_ERRQUEUE`), up to
/// [`MAX_ERROR_REPORTS`] reports, and returns the "port unreachable" ones
/// (`ECONNREFUSED` from ICMP or ICMPv6); other errors (a smaller path MTU, a
/// host unreachable) are logged and left to SCTP's own timers.
pub(super) fn port_unreachable_reports(socket: &impl AsRawFd) -> Vec<PortUnreachable> {
    let mut reports = Vec::new();
    let mut quote = [0u8; QUOTE_LEN];
    // Room for the error and its offender's address, and for the other
    // control messages quinn-udp's options add to every datagram (packet
    // info, TOS, GRO size): a buffer too small truncates them all.
    let mut control = vec![0u8; CONTROL_BYTES];
    for _ in 0..MAX_ERROR_REPORTS {
        let mut iov = [IoSliceMut::new(&mut quote)];
        let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
        let message = match recvmsg::<SockaddrStorage>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut control),
            flags,
        ) {
            Ok(message) => message,
            Err(Errno::EAGAIN) => break,
            Err(e) => {
                tracing::debug!(error = %e, "reading the UDP error queue");
                break;
            }
        };
        let errno = message.cmsgs().ok().and_then(|mut cmsgs| {
            cmsgs.find_map(|cmsg| match cmsg {
                ControlMessageOwned::Ipv4RecvErr(err, _)
                | ControlMessageOwned::Ipv6RecvErr(err, _) => Some(err.ee_errno),
                _ => None,
            })
        });
        let to = message.address.as_ref().and_then(socket_addr);
        let len = message.bytes;
        match (errno, to) {
            (Some(errno), Some(to)) if errno == libc::ECONNREFUSED as u32 => {
                reports.push(PortUnreachable {
                    to,
                    quote,
                    quote_len: len.min(QUOTE_LEN),
                });
            }
            (errno, to) => {
                let error = errno.map(|e| io::Error::from_raw_os_error(e as i32));
                tracing::debug!(
                    ?error,
                    ?to,
                    "ICMP error for a datagram, left to SCTP's timers"
                );
            }
        }
    }
    reports
}

fn socket_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    addr.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}
