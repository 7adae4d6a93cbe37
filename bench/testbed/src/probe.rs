//! Measuring probes for links between namespaces: a UDP echo with per-probe
//! round-trip times, a paced UDP sender with sequence numbers and a sink that
//! timestamps every datagram, a TCP bulk sender and a sink that timestamps every
//! read.
//!
//! Round trips are timed the way TWAMP times them, so that what is measured is
//! the path and not how promptly two threads were scheduled: the probe is
//! stamped just before it is sent, its answer by the kernel when it arrived
//! (`SO_TIMESTAMPNS`), and the echo writes into the answer how long it held the
//! probe (kernel arrival to send), which is subtracted. Each socket is opened inside its namespace ([`in_netns`]) and then
//! used from an ordinary thread; every loop is bounded in count and time, and
//! every background thread stops when its guard is dropped.
//!
//! The pure parts ([`RttReport`], [`steady_rate`], [`loss_runs`]) turn what was
//! recorded into figures.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Result, TestbedError, io};
use crate::netns::in_netns;

/// How often background loops look at their stop flag.
const POLL: Duration = Duration::from_millis(20);

/// Socket buffers asked for (SO_RCVBUFFORCE / SO_SNDBUFFORCE, root may exceed
/// the sysctl limits): enough that a sink never drops for want of room.
const SOCKET_BUFFER_BYTES: libc::c_int = 16 << 20;

/// Bytes at the start of every probe datagram: sequence number (u64, big endian).
const SEQ_BYTES: usize = 8;

/// Bytes of a round-trip probe: the sequence number, then the nanoseconds the
/// echo held it (u64, big endian, filled in by the echo).
const RTT_PROBE_HEADER: usize = SEQ_BYTES + 8;

fn set_buffer(socket: &impl std::os::fd::AsRawFd, option: libc::c_int) {
    let value = SOCKET_BUFFER_BYTES;
    // SAFETY: setsockopt reads one c_int from a live variable. Best effort: the
    // default buffer works too, only less well under bursts.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A UDP socket bound to `addr` inside `ns`, with large buffers and a short
/// read timeout (so loops can look at their stop flags).
pub fn udp_socket(ns: &str, addr: SocketAddr) -> Result<UdpSocket> {
    let socket = in_netns(ns, move || UdpSocket::bind(addr))?
        .map_err(io(format!("binding UDP {addr} in {ns}")))?;
    set_buffer(&socket, libc::SO_RCVBUFFORCE);
    set_buffer(&socket, libc::SO_SNDBUFFORCE);
    socket
        .set_read_timeout(Some(POLL))
        .map_err(io("setting a read timeout"))?;
    Ok(socket)
}

/// SCHED_FIFO priority of the threads that time round trips: below the WAN
/// emulator's default (50), above every normally scheduled process.
const TIMING_RT_PRIORITY: libc::c_int = 40;

/// Puts the calling thread under SCHED_FIFO, best effort: a thread that only
/// wakes to timestamp a datagram then does so promptly on a busy machine,
/// instead of up to a scheduler slice late. Without the privilege nothing
/// changes.
fn prefer_realtime() {
    let param = libc::sched_param {
        sched_priority: TIMING_RT_PRIORITY,
    };
    // SAFETY: pthread_setschedparam on this thread with a valid sched_param.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
}

/// Asks the kernel to stamp every datagram `socket` receives with the time it
/// arrived (CLOCK_REALTIME, nanoseconds).
fn stamp_arrivals(socket: &UdpSocket) -> Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from a live variable.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io("enabling SO_TIMESTAMPNS")(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Reads one datagram (waiting up to the socket's read timeout): its length,
/// sender and arrival time, the kernel's if [`stamp_arrivals`] is on, now
/// otherwise.
fn recv_stamped(
    socket: &UdpSocket,
    buffer: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, SystemTime)> {
    // SAFETY: all-zero sockaddr_storage and msghdr are valid; pointers set below.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: as above.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_name = (&raw mut from).cast();
    message.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = size_of_val(&control);
    // SAFETY: every pointer in `message` refers to a live buffer of the size
    // given.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut arrived = None;
    // SAFETY: the kernel filled `message` and `control`; the CMSG macros walk
    // within msg_controllen.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET
                && (*header).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let stamp: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(header).cast());
                arrived = Some(
                    SystemTime::UNIX_EPOCH
                        + Duration::new(stamp.tv_sec as u64, stamp.tv_nsec as u32),
                );
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    let from = socket_addr(&from).ok_or_else(|| std::io::Error::other("no sender address"))?;
    Ok((n as usize, from, arrived.unwrap_or_else(SystemTime::now)))
}

fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let v4: &libc::sockaddr_in = unsafe { &*(&raw const *storage).cast() };
            Some(SocketAddr::from((
                u32::from_be(v4.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let v6: &libc::sockaddr_in6 = unsafe { &*(&raw const *storage).cast() };
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                v6.sin6_addr.s6_addr.into(),
                u16::from_be(v6.sin6_port),
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn unspecified(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    }
}

/// A background thread with a stop flag; stopped and joined on drop.
#[derive(Debug)]
struct Worker<T> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Worker<T> {
    fn spawn(name: &str, body: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || body(&flag))
            .map_err(io(format!("starting thread {name}")))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Waits up to `timeout` for the thread to end by itself, then stops it.
    fn wait(self, timeout: Duration) -> Result<T> {
        let deadline = Instant::now() + timeout;
        while self.thread.as_ref().is_some_and(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        self.finish()
    }

    fn finish(mut self) -> Result<T> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().ok_or_else(|| TestbedError::Io {
            context: "joining a probe thread".into(),
            source: std::io::Error::other("already joined"),
        })?;
        thread.join().map_err(|_| TestbedError::Io {
            context: "joining a probe thread".into(),
            source: std::io::Error::other("it panicked"),
        })
    }
}

impl<T> Drop for Worker<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A UDP echo server: sends every datagram back to where it came from. In a
/// datagram of at least 16 bytes it writes, as bytes 8 to 15 (u64, big endian),
/// the nanoseconds from the kernel's arrival stamp to just before the answer is
/// sent, so that [`measure_rtt`] can leave out the echo's own delay.
#[derive(Debug)]
pub struct UdpEcho {
    worker: Worker<u64>,
}

impl UdpEcho {
    /// Starts echoing on `addr` inside `ns`.
    pub fn start(ns: &str, addr: SocketAddr) -> Result<Self> {
        let socket = udp_socket(ns, addr)?;
        stamp_arrivals(&socket)?;
        let worker = Worker::spawn("udp-echo", move |stop| {
            prefer_realtime();
            let mut buffer = [0u8; 65_536];
            let mut echoed = 0;
            while !stop.load(Ordering::Relaxed) {
                let Ok((n, from, arrived)) = recv_stamped(&socket, &mut buffer) else {
                    continue;
                };
                if n >= RTT_PROBE_HEADER {
                    let held = SystemTime::now()
                        .duration_since(arrived)
                        .unwrap_or_default()
                        .as_nanos() as u64;
                    buffer[SEQ_BYTES..RTT_PROBE_HEADER].copy_from_slice(&held.to_be_bytes());
                }
                if socket.send_to(&buffer[..n], from).is_ok() {
                    echoed += 1;
                }
            }
            echoed
        })?;
        Ok(Self { worker })
    }

    /// Stops; how many datagrams were echoed.
    pub fn stop(self) -> Result<u64> {
        self.worker.finish()
    }
}

/// Round-trip times of numbered probes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RttReport {
    /// Probes sent.
    pub sent: u64,
    /// The round-trip time of each answered probe, sorted ascending.
    pub rtts: Vec<Duration>,
}

impl RttReport {
    /// Probes with no answer (or a late one).
    pub fn lost(&self) -> u64 {
        self.sent - self.rtts.len() as u64
    }

    /// The `q` quantile (0 to 1) by nearest rank; `None` without answers.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.rtts.is_empty() {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.rtts.len() as f64).ceil() as usize;
        Some(self.rtts[rank.saturating_sub(1).min(self.rtts.len() - 1)])
    }

    /// The median.
    pub fn median(&self) -> Option<Duration> {
        self.quantile(0.5)
    }

    /// The smallest.
    pub fn min(&self) -> Option<Duration> {
        self.rtts.first().copied()
    }

    /// The largest.
    pub fn max(&self) -> Option<Duration> {
        self.rtts.last().copied()
    }
}

/// How long [`measure_rtt`]'s warm-up probe may take (neighbour resolution
/// across a long-delay link included).
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(3);

/// Sends `count` numbered probes of `size` bytes (at least 16) from `ns` to the
/// [`UdpEcho`] at `peer`, one every `interval`, and times each round trip (see
/// the module docs); answers later than `timeout` after the last probe count as
/// lost. One warm-up probe is sent and answered first, so neighbour resolution
/// (ARP, NDP) is not measured.
pub fn measure_rtt(
    ns: &str,
    peer: SocketAddr,
    count: u64,
    size: usize,
    interval: Duration,
    timeout: Duration,
) -> Result<RttReport> {
    let socket = udp_socket(ns, unspecified(peer))?;
    socket
        .connect(peer)
        .map_err(io(format!("connecting UDP to {peer}")))?;
    warm_up(&socket, peer)?;
    stamp_arrivals(&socket)?;
    let receiver = socket.try_clone().map_err(io("cloning a UDP socket"))?;
    let sent_at: Arc<Vec<std::sync::OnceLock<SystemTime>>> =
        Arc::new((0..count).map(|_| std::sync::OnceLock::new()).collect());
    let stamps = Arc::clone(&sent_at);
    let collector = Worker::spawn("rtt-collector", move |stop| {
        prefer_realtime();
        let mut rtts = Vec::new();
        let mut seen = vec![false; stamps.len()];
        let mut buffer = [0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, _, arrived)) = recv_stamped(&receiver, &mut buffer) else {
                continue;
            };
            if n < RTT_PROBE_HEADER {
                continue;
            }
            let field = |range: std::ops::Range<usize>| {
                u64::from_be_bytes(buffer[range].try_into().unwrap_or_default())
            };
            let (seq, held) = (field(0..SEQ_BYTES), field(SEQ_BYTES..RTT_PROBE_HEADER));
            let Some(sent) = stamps.get(seq as usize).and_then(|s| s.get()) else {
                continue;
            };
            if !std::mem::replace(&mut seen[seq as usize], true) {
                let round_trip = arrived.duration_since(*sent).unwrap_or_default();
                rtts.push(round_trip.saturating_sub(Duration::from_nanos(held)));
            }
        }
        rtts
    })?;
    // The sender gets a thread of its own, so that its real-time policy does
    // not stay with the caller.
    let sender = Worker::spawn("rtt-sender", move |stop| -> std::io::Result<()> {
        prefer_realtime();
        let mut probe = vec![0u8; size.max(RTT_PROBE_HEADER)];
        let start = Instant::now();
        for seq in 0..count {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            sleep_until(start + interval * seq as u32);
            probe[..SEQ_BYTES].copy_from_slice(&seq.to_be_bytes());
            let _ = sent_at[seq as usize].set(SystemTime::now());
            socket.send(&probe)?;
        }
        Ok(())
    })?;
    let sending = interval * count as u32 + Duration::from_secs(5);
    sender
        .wait(sending)?
        .map_err(io(format!("sending a probe to {peer}")))?;
    std::thread::sleep(timeout);
    let mut rtts = collector.finish()?;
    rtts.sort();
    Ok(RttReport { sent: count, rtts })
}

/// Sends an unnumbered probe (sequence `u64::MAX`) every 100 ms until one is
/// answered.
fn warm_up(socket: &UdpSocket, peer: SocketAddr) -> Result<()> {
    let mut probe = [0u8; RTT_PROBE_HEADER];
    probe[..SEQ_BYTES].copy_from_slice(&u64::MAX.to_be_bytes());
    let deadline = Instant::now() + WARM_UP_TIMEOUT;
    let mut buffer = [0u8; 64];
    let mut next_send = Instant::now();
    while Instant::now() < deadline {
        if Instant::now() >= next_send {
            socket
                .send(&probe)
                .map_err(io(format!("sending a warm-up probe to {peer}")))?;
            next_send += Duration::from_millis(100);
        }
        if let Ok(n) = socket.recv(&mut buffer)
            && n >= SEQ_BYTES
            && buffer[..SEQ_BYTES] == probe[..SEQ_BYTES]
        {
            return Ok(());
        }
    }
    Err(TestbedError::Timeout {
        what: format!("an answer from the echo at {peer}"),
        after: WARM_UP_TIMEOUT,
    })
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// One datagram as the sink saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When it was read.
    pub at: Instant,
    /// Its sequence number.
    pub seq: u64,
    /// Its UDP payload length.
    pub len: usize,
}

/// Records every datagram arriving on a UDP socket.
#[derive(Debug)]
pub struct UdpSink {
    worker: Worker<Vec<Arrival>>,
    /// Datagrams read so far (kept or not).
    read: Arc<AtomicUsize>,
}

impl UdpSink {
    /// Starts recording on `addr` inside `ns`; at most `limit` arrivals are kept.
    pub fn start(ns: &str, addr: SocketAddr, limit: usize) -> Result<Self> {
        let socket = udp_socket(ns, addr)?;
        let read = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&read);
        let worker = Worker::spawn("udp-sink", move |stop| {
            let mut arrivals = Vec::with_capacity(limit.min(1 << 20));
            let mut buffer = [0u8; 65_536];
            while !stop.load(Ordering::Relaxed) {
                let Ok(n) = socket.recv(&mut buffer) else {
                    continue;
                };
                counter.fetch_add(1, Ordering::Relaxed);
                if n >= SEQ_BYTES && arrivals.len() < limit {
                    arrivals.push(Arrival {
                        at: Instant::now(),
                        seq: u64::from_be_bytes(buffer[..SEQ_BYTES].try_into().unwrap_or_default()),
                        len: n,
                    });
                }
            }
            arrivals
        })?;
        Ok(Self { worker, read })
    }

    /// Waits until at least `count` datagrams were read, or `deadline`
    /// passed; returns how many were read. A test asserts what arrived by
    /// waiting for it, never by reading the count at an instant it chose.
    pub fn wait_for(&self, count: usize, deadline: Duration) -> usize {
        let until = Instant::now() + deadline;
        loop {
            let read = self.read.load(Ordering::Relaxed);
            if read >= count || Instant::now() >= until {
                return read;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops; what arrived, in order.
    pub fn stop(self) -> Result<Vec<Arrival>> {
        self.worker.finish()
    }
}

/// Sends `count` numbered datagrams of `size` bytes (at least 8) from `ns` to
/// `peer`, paced at `per_second`, giving up after `max_time`; returns how many
/// were sent.
pub fn send_udp(
    ns: &str,
    peer: SocketAddr,
    count: u64,
    size: usize,
    per_second: f64,
    max_time: Duration,
) -> Result<u64> {
    let socket = udp_socket(ns, unspecified(peer))?;
    socket
        .connect(peer)
        .map_err(io(format!("connecting UDP to {peer}")))?;
    let mut datagram = vec![0u8; size.max(SEQ_BYTES)];
    let start = Instant::now();
    let mut sent = 0;
    while sent < count {
        let elapsed = start.elapsed();
        if elapsed > max_time {
            break;
        }
        // Send what the schedule owes by now, then nap briefly.
        let owed = ((elapsed.as_secs_f64() * per_second) as u64 + 1).min(count);
        while sent < owed {
            datagram[..SEQ_BYTES].copy_from_slice(&sent.to_be_bytes());
            match socket.send(&datagram) {
                Ok(_) => sent += 1,
                // The local queue is full: the schedule catches up next round.
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => break,
                Err(e) => return Err(io(format!("sending UDP to {peer}"))(e)),
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(sent)
}

/// One read of the TCP sink: when, and the bytes received so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// When the read returned.
    pub at: Instant,
    /// Bytes received up to and including it.
    pub bytes: u64,
}

/// Accepts one TCP connection and records every read until it closes.
#[derive(Debug)]
pub struct TcpSink {
    worker: Worker<std::io::Result<Vec<Progress>>>,
}

impl TcpSink {
    /// Listens on `addr` inside `ns`.
    pub fn start(ns: &str, addr: SocketAddr) -> Result<Self> {
        let listener = in_netns(ns, move || TcpListener::bind(addr))?
            .map_err(io(format!("listening on TCP {addr} in {ns}")))?;
        listener
            .set_nonblocking(true)
            .map_err(io("making a listener non-blocking"))?;
        let worker = Worker::spawn("tcp-sink", move |stop| {
            let mut stream = loop {
                if stop.load(Ordering::Relaxed) {
                    return Ok(Vec::new());
                }
                match listener.accept() {
                    Ok((stream, _)) => break stream,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                    Err(e) => return Err(e),
                }
            };
            stream.set_nonblocking(false)?;
            stream.set_read_timeout(Some(POLL))?;
            let mut progress = Vec::new();
            let mut total = 0u64;
            let mut buffer = vec![0u8; 256 * 1024];
            while !stop.load(Ordering::Relaxed) {
                match stream.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => {
                        total += n as u64;
                        progress.push(Progress {
                            at: Instant::now(),
                            bytes: total,
                        });
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(progress)
        })?;
        Ok(Self { worker })
    }

    /// Stops at once; every read's progress.
    pub fn stop(self) -> Result<Vec<Progress>> {
        self.worker.finish()?.map_err(io("receiving TCP"))
    }

    /// Waits up to `timeout` for the sender to close, then stops; every read's
    /// progress.
    pub fn wait(self, timeout: Duration) -> Result<Vec<Progress>> {
        self.worker.wait(timeout)?.map_err(io("receiving TCP"))
    }
}

/// What [`send_tcp`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSent {
    /// Bytes written.
    pub bytes: u64,
    /// The connection's maximum segment size (payload bytes per frame).
    pub mss: u32,
}

/// Connects from `ns` to `peer` and writes for `duration` (then closes);
/// returns what it wrote. The send buffer is the kernel's autotuned one, so up
/// to a few MiB written may still be on their way when this returns.
pub fn send_tcp(ns: &str, peer: SocketAddr, duration: Duration) -> Result<TcpSent> {
    let mut stream = in_netns(ns, move || {
        TcpStream::connect_timeout(&peer, Duration::from_secs(5))
    })?
    .map_err(io(format!("connecting TCP to {peer}")))?;
    stream
        .set_write_timeout(Some(POLL))
        .map_err(io("setting a write timeout"))?;
    let chunk = vec![0x5au8; 64 * 1024];
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < duration {
        match stream.write(&chunk) {
            Ok(n) => bytes += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io(format!("sending TCP to {peer}"))(e)),
        }
    }
    let mss = tcp_mss(&stream);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(TcpSent { bytes, mss })
}

fn tcp_mss(stream: &TcpStream) -> u32 {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one c_int into a live variable.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if rc == 0 { value.max(0) as u32 } else { 0 }
}

/// The rate in bits per second of what arrived after `skip` from the first
/// arrival: `(n - 1)` units over the time from the first to the last arrival in
/// that window, where `bits(i)` is the size of arrival `i` (for example its
/// Ethernet frame). The first unit of the window is not counted, because its
/// serialization ended before the window began. `None` with fewer than two
/// arrivals in the window.
pub fn steady_rate(times: &[Instant], bits: impl Fn(usize) -> f64, skip: Duration) -> Option<f64> {
    let first = *times.first()?;
    let start = times.iter().position(|&t| t >= first + skip)?;
    let end = times.len() - 1;
    if end <= start {
        return None;
    }
    let span = (times[end] - times[start]).as_secs_f64();
    let total: f64 = (start + 1..=end).map(&bits).sum();
    (span > 0.0).then(|| total / span)
}

/// Losses in a numbered stream of `sent` datagrams of which `received` (any
/// order, duplicates allowed) arrived: (lost, number of loss runs). A run is a
/// maximal stretch of consecutive lost sequence numbers.
pub fn loss_runs(sent: u64, received: impl IntoIterator<Item = u64>) -> (u64, u64) {
    let mut seen = vec![false; sent as usize];
    for seq in received {
        if let Some(slot) = seen.get_mut(seq as usize) {
            *slot = true;
        }
    }
    let lost = seen.iter().filter(|s| !**s).count() as u64;
    let runs = seen
        .iter()
        .enumerate()
        .filter(|&(i, s)| !*s && (i == 0 || seen[i - 1]))
        .count() as u64;
    (lost, runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let report = RttReport {
            sent: 12,
            rtts: (1..=10).map(Duration::from_millis).collect(),
        };
        assert_eq!(report.lost(), 2);
        assert_eq!(report.median(), Some(Duration::from_millis(5)));
        assert_eq!(report.quantile(0.99), Some(Duration::from_millis(10)));
        assert_eq!(report.quantile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(RttReport::default().median(), None);
    }

    #[test]
    fn steady_rate_counts_units_after_the_first_in_the_window() {
        let t0 = Instant::now();
        // A 1000-bit unit every millisecond: 1 Mbit/s; the first 10 ms skipped.
        let times: Vec<Instant> = (0..100).map(|i| t0 + Duration::from_millis(i)).collect();
        let rate = steady_rate(&times, |_| 1000.0, Duration::from_millis(10)).expect("rate");
        assert!((rate - 1e6).abs() < 1.0, "{rate}");
        assert_eq!(steady_rate(&times[..1], |_| 1.0, Duration::ZERO), None);
    }

    #[test]
    fn loss_runs_count_gaps() {
        // 0..10 sent; 2, 3 and 7 lost, 5 arrived twice.
        let received = [0, 1, 4, 5, 5, 6, 8, 9];
        assert_eq!(loss_runs(10, received), (3, 2));
        assert_eq!(loss_runs(3, []), (3, 1));
        assert_eq!(loss_runs(3, [0, 1, 2]), (0, 0));
    }
}
