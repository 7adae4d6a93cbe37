//! The one socket option the userspace backend sets that neither `socket2` nor
//! `quinn-udp` can: turning UDP GRO off again after `quinn-udp` turned it on,
//! for `udp_offload = false`. The only `unsafe` of this backend.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

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
