//! The few Linux SCTP definitions the kernel backend needs, and the only place it
//! talks to the SCTP socket API through raw pointers.
//!
//! Everything here mirrors `include/uapi/linux/sctp.h` (Linux 6.1, the kernel the VM
//! tests boot); each struct names the header's struct and fields it matches, and a
//! compile-time assertion pins its size and the offsets that padding could move.
//! `libc` 0.2 exposes part of this (recent releases carry `sctp_initmsg`,
//! `sctp_sndinfo`, `sctp_rcvinfo` and the option numbers below 40) but not
//! `sctp_status`, `sctp_paddrparams`, the stream scheduler or UDP encapsulation
//! options, so the whole set is declared here, in one place, from one header.
//!
//! It never keeps state and never blocks: every socket is non-blocking and the
//! callers (in `super`) turn `EAGAIN` into waiting on tokio's reactor.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use libc::{c_int, c_void, socklen_t};

/// `SOL_SCTP`: the socket option level of SCTP, equal to `IPPROTO_SCTP`.
pub(super) const SOL_SCTP: c_int = libc::IPPROTO_SCTP;

// Socket option names (`#define SCTP_*` in linux/sctp.h).
/// `SCTP_INITMSG`: stream counts offered in INIT.
pub(super) const SCTP_INITMSG: c_int = 2;
/// `SCTP_NODELAY`: turn off Nagle-like bundling delays.
pub(super) const SCTP_NODELAY: c_int = 3;
/// `SCTP_PEER_ADDR_PARAMS`: heartbeat interval and path parameters.
pub(super) const SCTP_PEER_ADDR_PARAMS: c_int = 9;
/// `SCTP_STATUS`: association state and negotiated stream counts.
pub(super) const SCTP_STATUS: c_int = 14;
/// `SCTP_FRAGMENT_INTERLEAVE`: whether pieces of different messages may
/// interleave in `recvmsg` during partial delivery (Linux keeps it as a flag:
/// any non-zero level is on). A precondition of `SCTP_INTERLEAVING_SUPPORTED`.
pub(super) const SCTP_FRAGMENT_INTERLEAVE: c_int = 18;
/// `SCTP_RECVRCVINFO`: attach an `SCTP_RCVINFO` cmsg to every `recvmsg`.
pub(super) const SCTP_RECVRCVINFO: c_int = 32;
/// `SCTP_STREAM_SCHEDULER`: choose the association's stream scheduler.
pub(super) const SCTP_STREAM_SCHEDULER: c_int = 123;
/// `SCTP_STREAM_SCHEDULER_VALUE`: a per-stream scheduler parameter.
pub(super) const SCTP_STREAM_SCHEDULER_VALUE: c_int = 124;
/// `SCTP_INTERLEAVING_SUPPORTED`: offer I-DATA (RFC 8260) in INIT/INIT ACK;
/// read back on an association, whether the peer offered it too.
pub(super) const SCTP_INTERLEAVING_SUPPORTED: c_int = 125;
/// `SCTP_EVENT`: subscribe to one notification type (RFC 6458 6.2.2).
pub(super) const SCTP_EVENT: c_int = 127;
/// `SCTP_REMOTE_UDP_ENCAPS_PORT`: RFC 6951 remote UDP port (Linux >= 5.11).
pub(super) const SCTP_REMOTE_UDP_ENCAPS_PORT: c_int = 132;

// Notification types (`enum sctp_sn_type`, from `SCTP_SN_TYPE_BASE` = 1 << 15).
/// `SCTP_ASSOC_CHANGE`: `struct sctp_assoc_change`.
pub(super) const SCTP_ASSOC_CHANGE: u16 = 0x8001;
/// `SCTP_SHUTDOWN_EVENT`: `struct sctp_shutdown_event`, the peer sent SHUTDOWN.
pub(super) const SCTP_SHUTDOWN_EVENT: u16 = 0x8005;

// `enum sctp_sac_state` (the values of `sac_state`).
/// `SCTP_COMM_LOST`: aborted or unreachable.
const SCTP_COMM_LOST: u16 = 1;
/// `SCTP_SHUTDOWN_COMP`: the SHUTDOWN exchange finished.
const SCTP_SHUTDOWN_COMP: u16 = 3;

// Ancillary data types (`enum sctp_cmsg_type`).
/// `SCTP_SNDINFO`: `struct sctp_sndinfo` on `sendmsg`.
const SCTP_SNDINFO: c_int = 2;
/// `SCTP_RCVINFO`: `struct sctp_rcvinfo` on `recvmsg`.
const SCTP_RCVINFO: c_int = 3;

/// `MSG_NOTIFICATION` (`SCTP_NOTIFICATION`): the data is an event, not a message.
const MSG_NOTIFICATION: c_int = 0x8000;

// `enum sctp_spp_flags`.
/// `SPP_HB_ENABLE`: enable heartbeats (with `spp_hbinterval`).
pub(super) const SPP_HB_ENABLE: u32 = 1 << 0;

// `enum sctp_sstat_state` (the values of `sstat_state`).
/// `SCTP_CLOSED`.
pub(super) const SCTP_STATE_CLOSED: i32 = 1;
/// `SCTP_ESTABLISHED`.
pub(super) const SCTP_STATE_ESTABLISHED: i32 = 4;

/// `struct sctp_initmsg` (RFC 6458 8.1.3).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SctpInitmsg {
    /// `sinit_num_ostreams`: outbound streams asked for.
    pub(super) sinit_num_ostreams: u16,
    /// `sinit_max_instreams`: most inbound streams granted.
    pub(super) sinit_max_instreams: u16,
    /// `sinit_max_attempts`: INIT retransmissions, 0 = default.
    pub(super) sinit_max_attempts: u16,
    /// `sinit_max_init_timeo`: INIT RTO cap in ms, 0 = default.
    pub(super) sinit_max_init_timeo: u16,
}

/// `struct sctp_sndinfo` (RFC 6458 5.3.4).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct SctpSndinfo {
    /// `snd_sid`: stream to send on.
    snd_sid: u16,
    /// `snd_flags`: `SCTP_UNORDERED` and friends; 0 = ordered.
    snd_flags: u16,
    /// `snd_ppid`: payload protocol identifier, opaque to SCTP.
    snd_ppid: u32,
    /// `snd_context`: returned in send-failure events.
    snd_context: u32,
    /// `snd_assoc_id`: ignored on one-to-one sockets.
    snd_assoc_id: i32,
}

/// `struct sctp_rcvinfo` (RFC 6458 5.3.5).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct SctpRcvinfo {
    /// `rcv_sid`: stream the message arrived on.
    rcv_sid: u16,
    /// `rcv_ssn`: stream sequence number.
    rcv_ssn: u16,
    /// `rcv_flags`: `SCTP_UNORDERED` if sent unordered.
    rcv_flags: u16,
    /// `rcv_ppid`.
    rcv_ppid: u32,
    /// `rcv_tsn`.
    rcv_tsn: u32,
    /// `rcv_cumtsn`.
    rcv_cumtsn: u32,
    /// `rcv_context`.
    rcv_context: u32,
    /// `rcv_assoc_id`.
    rcv_assoc_id: i32,
}

/// `struct sctp_paddrinfo`, declared `__attribute__((packed, aligned(4)))`: the
/// `sockaddr_storage` starts at offset 4.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub(super) struct SctpPaddrinfo {
    /// `spinfo_assoc_id`.
    pub(super) spinfo_assoc_id: i32,
    /// `spinfo_address`.
    pub(super) spinfo_address: libc::sockaddr_storage,
    /// `spinfo_state`.
    pub(super) spinfo_state: i32,
    /// `spinfo_cwnd`, bytes.
    pub(super) spinfo_cwnd: u32,
    /// `spinfo_srtt`, ms.
    pub(super) spinfo_srtt: u32,
    /// `spinfo_rto`, ms.
    pub(super) spinfo_rto: u32,
    /// `spinfo_mtu`, bytes.
    pub(super) spinfo_mtu: u32,
}

/// `struct sctp_status` (RFC 6458 8.2.1).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct SctpStatus {
    /// `sstat_assoc_id`.
    pub(super) sstat_assoc_id: i32,
    /// `sstat_state`: `enum sctp_sstat_state`.
    pub(super) sstat_state: i32,
    /// `sstat_rwnd`: the peer's receive window, bytes.
    pub(super) sstat_rwnd: u32,
    /// `sstat_unackdata`: DATA chunks not yet acknowledged.
    pub(super) sstat_unackdata: u16,
    /// `sstat_penddata`: DATA chunks waiting to be read.
    pub(super) sstat_penddata: u16,
    /// `sstat_instrms`: negotiated inbound streams.
    pub(super) sstat_instrms: u16,
    /// `sstat_outstrms`: negotiated outbound streams.
    pub(super) sstat_outstrms: u16,
    /// `sstat_fragmentation_point`: largest DATA chunk payload, bytes.
    pub(super) sstat_fragmentation_point: u32,
    /// `sstat_primary`: the primary path.
    pub(super) sstat_primary: SctpPaddrinfo,
}

/// `struct sctp_paddrparams` (RFC 6458 8.1.12), declared
/// `__attribute__((packed, aligned(4)))`: fully packed (155 bytes) then padded to
/// 156. Rust cannot combine `packed` and `align`, so the tail byte is explicit.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub(super) struct SctpPaddrparams {
    /// `spp_assoc_id`.
    pub(super) spp_assoc_id: i32,
    /// `spp_address`: all zero = every path of the association.
    pub(super) spp_address: [u8; mem::size_of::<libc::sockaddr_storage>()],
    /// `spp_hbinterval`, ms; 0 = unchanged.
    pub(super) spp_hbinterval: u32,
    /// `spp_pathmaxrxt`; 0 = unchanged.
    pub(super) spp_pathmaxrxt: u16,
    /// `spp_pathmtu`; 0 = unchanged.
    pub(super) spp_pathmtu: u32,
    /// `spp_sackdelay`, ms; 0 = unchanged.
    pub(super) spp_sackdelay: u32,
    /// `spp_flags`: `SPP_*`.
    pub(super) spp_flags: u32,
    /// `spp_ipv6_flowlabel`.
    pub(super) spp_ipv6_flowlabel: u32,
    /// `spp_dscp`.
    pub(super) spp_dscp: u8,
    /// The padding `aligned(4)` adds.
    pub(super) tail_padding: u8,
}

/// `struct sctp_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SctpEvent {
    /// `se_assoc_id`.
    pub(super) se_assoc_id: i32,
    /// `se_type`: an `enum sctp_sn_type` value.
    pub(super) se_type: u16,
    /// `se_on`: 1 = deliver, 0 = do not.
    pub(super) se_on: u8,
}

/// `struct sctp_assoc_value`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SctpAssocValue {
    /// `assoc_id`: ignored on one-to-one sockets.
    pub(super) assoc_id: i32,
    /// `assoc_value`.
    pub(super) assoc_value: u32,
}

/// `struct sctp_stream_value`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SctpStreamValue {
    /// `assoc_id`.
    pub(super) assoc_id: i32,
    /// `stream_id`.
    pub(super) stream_id: u16,
    /// `stream_value`: the scheduler's parameter (priority, weight).
    pub(super) stream_value: u16,
}

/// `struct sctp_udpencaps` (RFC 6951 6.1 `SCTP_REMOTE_UDP_ENCAPS_PORT`); the
/// `sockaddr_storage` is 8-aligned, so it starts at offset 8.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct SctpUdpencaps {
    /// `sue_assoc_id`.
    pub(super) sue_assoc_id: i32,
    /// `sue_address`: all zero = the whole association (or socket).
    pub(super) sue_address: libc::sockaddr_storage,
    /// `sue_port`: the remote UDP port, **network byte order** (the kernel stores
    /// it as a `__be16` and copies it into the UDP header).
    pub(super) sue_port: u16,
}

// The layouts must match the C header byte for byte.
const _: () = {
    use mem::{offset_of, size_of};
    assert!(size_of::<SctpInitmsg>() == 8);
    assert!(size_of::<SctpSndinfo>() == 16);
    assert!(size_of::<SctpRcvinfo>() == 28);
    assert!(offset_of!(SctpRcvinfo, rcv_ppid) == 8);
    assert!(size_of::<SctpPaddrinfo>() == 152);
    assert!(offset_of!(SctpPaddrinfo, spinfo_state) == 132);
    assert!(size_of::<SctpStatus>() == 176);
    assert!(offset_of!(SctpStatus, sstat_primary) == 24);
    assert!(size_of::<SctpPaddrparams>() == 156);
    assert!(offset_of!(SctpPaddrparams, spp_pathmtu) == 138);
    assert!(offset_of!(SctpPaddrparams, spp_flags) == 146);
    assert!(size_of::<SctpEvent>() == 8);
    assert!(size_of::<SctpAssocValue>() == 8);
    assert!(size_of::<SctpStreamValue>() == 8);
    assert!(size_of::<SctpUdpencaps>() == 144);
    assert!(offset_of!(SctpUdpencaps, sue_port) == 136);
};

/// Plain C data: every bit pattern (including all zero) is a valid value and there
/// are no pointers inside, so the kernel may read and write it freely.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers and byte arrays.
pub(super) unsafe trait Pod: Copy {
    /// The all-zero value, which the SCTP API reads as "default" or "unset".
    fn zeroed() -> Self {
        // SAFETY: `Pod` types accept every bit pattern, zero included.
        unsafe { mem::zeroed() }
    }
}
// SAFETY: each is `#[repr(C)]` over integers and byte arrays (sockaddr_storage is
// integers too).
unsafe impl Pod for c_int {}
// SAFETY: as above.
unsafe impl Pod for SctpInitmsg {}
// SAFETY: as above.
unsafe impl Pod for SctpStatus {}
// SAFETY: as above.
unsafe impl Pod for SctpPaddrparams {}
// SAFETY: as above.
unsafe impl Pod for SctpEvent {}
// SAFETY: as above.
unsafe impl Pod for SctpAssocValue {}
// SAFETY: as above.
unsafe impl Pod for SctpStreamValue {}
// SAFETY: as above.
unsafe impl Pod for SctpUdpencaps {}

/// `setsockopt(fd, level, name, value)`.
pub(super) fn set_opt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: c_int,
    name: c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` initialised bytes that live for the
    // call; the kernel only reads them.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<c_void>(),
            mem::size_of::<T>() as socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(fd, SOL_SCTP, name, value)`: `value` goes in (SCTP uses it to name
/// the association or stream) and comes back filled.
pub(super) fn get_sctp_opt<T: Pod>(
    fd: BorrowedFd<'_>,
    name: c_int,
    value: &mut T,
) -> io::Result<()> {
    let mut len = mem::size_of::<T>() as socklen_t;
    // SAFETY: `value` is valid for reads and writes of `len` bytes, and any bytes
    // the kernel writes form a valid `T` (`Pod`).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_SCTP,
            name,
            (value as *mut T).cast::<c_void>(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Room for one cmsg carrying `T`, 8-byte aligned as `struct cmsghdr` needs.
#[repr(C, align(8))]
struct CmsgBuf<const N: usize>([u8; N]);

/// `CMSG_SPACE(sizeof(struct sctp_sndinfo))` on 64-bit Linux: 16 + 16.
const SNDINFO_SPACE: usize = 32;
/// Enough for `CMSG_SPACE(sizeof(struct sctp_rcvinfo))` (16 + 32) and slack.
const RCV_CMSG_SPACE: usize = 64;

/// Sends `data` as one whole SCTP message on `stream` (`sendmsg` with an
/// `SCTP_SNDINFO` cmsg, `MSG_DONTWAIT | MSG_NOSIGNAL`). SCTP accepts or refuses a
/// message whole, so the result is `data.len()` or an error.
pub(super) fn send_message(fd: BorrowedFd<'_>, stream: u16, data: &[u8]) -> io::Result<usize> {
    let info = SctpSndinfo {
        snd_sid: stream,
        ..SctpSndinfo::default()
    };
    let mut cmsg = CmsgBuf([0u8; SNDINFO_SPACE]);
    // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
    let (space, len) = unsafe {
        (
            libc::CMSG_SPACE(mem::size_of::<SctpSndinfo>() as u32) as usize,
            libc::CMSG_LEN(mem::size_of::<SctpSndinfo>() as u32) as usize,
        )
    };
    debug_assert!(space <= SNDINFO_SPACE);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no iov, no control).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast::<c_void>();
    msg.msg_controllen = space as _;
    // SAFETY: `msg_control` points to `space` zeroed, 8-aligned bytes, so
    // CMSG_FIRSTHDR returns a pointer inside it with room for the header and
    // CMSG_DATA for `SctpSndinfo`; write_unaligned needs no alignment. The iovec
    // points into `data`, which the kernel only reads (the `*mut` is the C API's).
    let sent = unsafe {
        let hdr = libc::CMSG_FIRSTHDR(&msg);
        (*hdr).cmsg_level = SOL_SCTP;
        (*hdr).cmsg_type = SCTP_SNDINFO;
        (*hdr).cmsg_len = len as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(hdr).cast::<SctpSndinfo>(), info);
        libc::sendmsg(
            fd.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(sent as usize)
    }
}

/// What one `recvmsg` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Piece {
    /// Bytes written into the buffer; 0 (and not a notification) means end of file.
    pub(super) len: usize,
    /// `MSG_EOR`: this piece ends a message.
    pub(super) end_of_record: bool,
    /// `MSG_NOTIFICATION`: the bytes are an SCTP event, not user data.
    pub(super) notification: bool,
    /// The stream from the `SCTP_RCVINFO` cmsg, if the kernel attached one.
    pub(super) stream: Option<u16>,
}

/// One non-blocking `recvmsg` into `buf`, reading the `SCTP_RCVINFO` cmsg (enabled
/// by `SCTP_RECVRCVINFO`). A message longer than `buf` arrives in several pieces,
/// the last with `end_of_record`.
pub(super) fn recv_piece(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Piece> {
    let mut cmsg = CmsgBuf([0u8; RCV_CMSG_SPACE]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast::<c_void>(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast::<c_void>();
    msg.msg_controllen = RCV_CMSG_SPACE as _;
    // SAFETY: the iovec covers `buf` and msg_control covers `cmsg`, both writable
    // and alive for the call; the kernel writes at most their lengths.
    let got = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stream = None;
    // SAFETY: the kernel set msg_controllen to the bytes it wrote into `cmsg`;
    // CMSG_FIRSTHDR/NXTHDR stay within it and return null at its end. The payload
    // is read with read_unaligned after checking its length.
    unsafe {
        let mut hdr = libc::CMSG_FIRSTHDR(&msg);
        while !hdr.is_null() {
            let data_len = ((*hdr).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            if (*hdr).cmsg_level == SOL_SCTP
                && (*hdr).cmsg_type == SCTP_RCVINFO
                && data_len >= mem::size_of::<SctpRcvinfo>()
            {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(hdr).cast::<SctpRcvinfo>());
                stream = Some(info.rcv_sid);
            }
            hdr = libc::CMSG_NXTHDR(&msg, hdr);
        }
    }
    Ok(Piece {
        len: got as usize,
        end_of_record: msg.msg_flags & libc::MSG_EOR != 0,
        notification: msg.msg_flags & MSG_NOTIFICATION != 0,
        stream,
    })
}

/// The notifications the backend acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Notification {
    /// `SCTP_SHUTDOWN_EVENT`: the peer will send nothing more.
    PeerShutdown,
    /// `SCTP_ASSOC_CHANGE` with `SCTP_SHUTDOWN_COMP`: closed gracefully.
    ShutdownComplete,
    /// `SCTP_ASSOC_CHANGE` with `SCTP_COMM_LOST`: aborted or unreachable.
    CommunicationLost,
    /// Anything else (ignored).
    Other,
}

/// Reads a notification's type from its header (`struct sctp_tlv`: `sn_type`,
/// `sn_flags`, `sn_length`) and, for `struct sctp_assoc_change`, `sac_state` at
/// byte 8. Short or unknown input is `Other`.
pub(super) fn parse_notification(bytes: &[u8]) -> Notification {
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
    };
    match (u16_at(0), u16_at(8)) {
        (Some(SCTP_SHUTDOWN_EVENT), _) => Notification::PeerShutdown,
        (Some(SCTP_ASSOC_CHANGE), Some(SCTP_SHUTDOWN_COMP)) => Notification::ShutdownComplete,
        (Some(SCTP_ASSOC_CHANGE), Some(SCTP_COMM_LOST)) => Notification::CommunicationLost,
        _ => Notification::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_are_recognised_by_type_and_state() {
        let mut assoc_change = [0u8; 20];
        assoc_change[..2].copy_from_slice(&SCTP_ASSOC_CHANGE.to_ne_bytes());
        assoc_change[8..10].copy_from_slice(&SCTP_SHUTDOWN_COMP.to_ne_bytes());
        assert_eq!(
            parse_notification(&assoc_change),
            Notification::ShutdownComplete
        );
        assoc_change[8..10].copy_from_slice(&SCTP_COMM_LOST.to_ne_bytes());
        assert_eq!(
            parse_notification(&assoc_change),
            Notification::CommunicationLost
        );
        let mut shutdown = [0u8; 12];
        shutdown[..2].copy_from_slice(&SCTP_SHUTDOWN_EVENT.to_ne_bytes());
        assert_eq!(parse_notification(&shutdown), Notification::PeerShutdown);
        assert_eq!(parse_notification(&assoc_change[..9]), Notification::Other);
        assert_eq!(parse_notification(&[]), Notification::Other);
    }
}
