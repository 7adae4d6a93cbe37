//! AF_PACKET raw sockets bound to one interface: one to receive every frame that
//! arrives on it (never the ones sent from this host), one to send frames out of
//! it unchanged. Thin `libc` calls, each wrapped with the interface's name in
//! its error.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::time::Duration;

use crate::error::WanemError;

/// Receive buffer asked for (SO_RCVBUFFORCE, which root may set past
/// `rmem_max`): about 2 s of 100 Mbit/s, so bursts wait in the kernel instead of
/// being dropped there while the forwarding thread is busy.
const RECEIVE_BUFFER_BYTES: libc::c_int = 32 << 20;

/// Send buffer asked for (SO_SNDBUFFORCE).
const SEND_BUFFER_BYTES: libc::c_int = 4 << 20;

/// What [`PacketSocket::recv`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The frame's full length; more than the buffer if it was truncated.
    pub len: usize,
    /// The frame was sent from this host (`PACKET_OUTGOING`): not to forward.
    pub outgoing: bool,
    /// The frame's transport checksum is not filled in (`TP_STATUS_CSUMNOTREADY`):
    /// its sender has checksum offload on, and the receiver behind us will drop
    /// it.
    pub checksum_not_ready: bool,
}

/// A packet socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    interface: String,
    ifindex: i32,
}

impl PacketSocket {
    /// A socket that receives every frame arriving on `interface` (promiscuous,
    /// so frames for other MAC addresses too), with auxiliary data for the
    /// checksum status; frames sent by this host are not queued to it where the
    /// kernel supports `PACKET_IGNORE_OUTGOING` (4.20) and are flagged otherwise.
    pub fn receiver(interface: &str) -> Result<Self, WanemError> {
        // Protocol 0 first: the socket sees nothing until bound to the interface
        // with ETH_P_ALL, so no frame of another interface slips in between.
        let socket = Self::open(interface)?;
        // Best effort: older kernels lack it, and recv flags outgoing frames anyway.
        let _ = socket.set_int(libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        socket.set_int(libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)?;
        if socket
            .set_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RECEIVE_BUFFER_BYTES)
            .is_err()
        {
            socket.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, RECEIVE_BUFFER_BYTES)?;
        }
        socket.bind(libc::ETH_P_ALL as u16)?;
        // SAFETY: an all-zero packet_mreq is valid; the fields are set below.
        let mut membership: libc::packet_mreq = unsafe { zeroed() };
        membership.mr_ifindex = socket.ifindex;
        membership.mr_type = libc::PACKET_MR_PROMISC as u16;
        socket.set_option(libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &membership)?;
        // Counters start now; what arrived before does not count as a drop.
        socket.take_kernel_drops()?;
        Ok(socket)
    }

    /// A socket that only sends out of `interface` (bound with protocol 0, so
    /// the kernel queues nothing to it).
    pub fn sender(interface: &str) -> Result<Self, WanemError> {
        let socket = Self::open(interface)?;
        if socket
            .set_int(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SEND_BUFFER_BYTES)
            .is_err()
        {
            socket.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, SEND_BUFFER_BYTES)?;
        }
        socket.bind(0)?;
        Ok(socket)
    }

    fn open(interface: &str) -> Result<Self, WanemError> {
        let name = std::ffi::CString::new(interface)
            .map_err(|_| WanemError::NoSuchInterface(interface.to_owned()))?;
        // SAFETY: if_nametoindex reads a NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(WanemError::NoSuchInterface(interface.to_owned()));
        }
        // SAFETY: socket(2) has no memory-safety preconditions.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(WanemError::Socket {
                context: format!("opening a packet socket for {interface} (needs CAP_NET_RAW)"),
                source: io::Error::last_os_error(),
            });
        }
        Ok(Self {
            // SAFETY: `fd` is a fresh descriptor owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            interface: interface.to_owned(),
            ifindex: ifindex as i32,
        })
    }

    fn error(&self, what: &str) -> WanemError {
        WanemError::Socket {
            context: format!("{what} on {}", self.interface),
            source: io::Error::last_os_error(),
        }
    }

    fn bind(&self, protocol: u16) -> Result<(), WanemError> {
        // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol.to_be();
        address.sll_ifindex = self.ifindex;
        // SAFETY: `address` is a valid sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&raw const address).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(self.error("binding a packet socket"));
        }
        Ok(())
    }

    fn set_option<T>(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: &T,
    ) -> Result<(), WanemError> {
        // SAFETY: `value` points to a live T of the size given.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (value as *const T).cast(),
                size_of::<T>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(self.error(&format!("setsockopt({level}, {name})")));
        }
        Ok(())
    }

    fn set_int(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
    ) -> Result<(), WanemError> {
        self.set_option(level, name, &value)
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The interface's MTU (the largest frame is this plus the 14-byte Ethernet
    /// header, plus 4 with a VLAN tag).
    pub fn mtu(&self) -> Result<u32, WanemError> {
        // SAFETY: an all-zero ifreq is valid; the name is copied in below.
        let mut request: libc::ifreq = unsafe { zeroed() };
        for (slot, byte) in request
            .ifr_name
            .iter_mut()
            .zip(self.interface.bytes().take(libc::IFNAMSIZ - 1))
        {
            *slot = byte as libc::c_char;
        }
        // SAFETY: SIOCGIFMTU reads the name from and writes the MTU into `request`.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFMTU, &mut request) };
        if rc != 0 {
            return Err(self.error("reading the MTU"));
        }
        // SAFETY: SIOCGIFMTU filled in the ifru_mtu member of the union.
        Ok(unsafe { request.ifr_ifru.ifru_mtu } as u32)
    }

    /// Waits up to `timeout` for a frame to read; whether one is there. A signal
    /// ends the wait early (returns false).
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
        let rc = unsafe { libc::ppoll(&mut poll, 1, &timeout, std::ptr::null()) };
        if rc < 0 {
            let error = io::Error::last_os_error();
            return if error.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(error)
            };
        }
        Ok(rc > 0 && poll.revents & libc::POLLIN != 0)
    }

    /// Reads one frame into `buffer` without waiting: `None` if there is none.
    pub fn recv(&self, buffer: &mut [u8]) -> io::Result<Option<Received>> {
        // SAFETY: all-zero sockaddr_ll and msghdr are valid; pointers set below.
        let mut address: libc::sockaddr_ll = unsafe { zeroed() };
        let mut control = [0u64; 8]; // aligned room for one tpacket_auxdata cmsg
        let mut iov = libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: buffer.len(),
        };
        // SAFETY: as above.
        let mut message: libc::msghdr = unsafe { zeroed() };
        message.msg_name = (&raw mut address).cast();
        message.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = size_of_val(&control);
        // SAFETY: every pointer in `message` refers to live buffers of the sizes
        // given. MSG_TRUNC makes packet sockets return the full frame length.
        let n = unsafe {
            libc::recvmsg(
                self.fd.as_raw_fd(),
                &mut message,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(error),
            };
        }
        let mut checksum_not_ready = false;
        // SAFETY: the kernel filled `message` and `control`; the CMSG macros walk
        // within msg_controllen.
        unsafe {
            let mut header = libc::CMSG_FIRSTHDR(&message);
            while !header.is_null() {
                if (*header).cmsg_level == libc::SOL_PACKET
                    && (*header).cmsg_type == libc::PACKET_AUXDATA
                {
                    let aux: libc::tpacket_auxdata =
                        std::ptr::read_unaligned(libc::CMSG_DATA(header).cast());
                    checksum_not_ready = aux.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0;
                }
                header = libc::CMSG_NXTHDR(&message, header);
            }
        }
        Ok(Some(Received {
            len: n as usize,
            outgoing: address.sll_pkttype == libc::PACKET_OUTGOING,
            checksum_not_ready,
        }))
    }

    /// Sends `frame` (a whole Ethernet frame) out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is a live buffer of the length given.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Frames the kernel dropped because this socket's receive buffer was full,
    /// since the last call (PACKET_STATISTICS resets on read).
    pub fn take_kernel_drops(&self) -> Result<u64, WanemError> {
        // SAFETY: an all-zero tpacket_stats is valid.
        let mut stats: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `stats` is writable for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut stats).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(self.error("reading PACKET_STATISTICS"));
        }
        Ok(u64::from(stats.tp_drops))
    }
}
