//! The endpoint driver: one task per UDP socket that owns the socket and the
//! `sctp::Endpoint`, in the manner of quinn's endpoint and connection drivers
//! folded into one.
//!
//! ```text
//!        ┌──────────────────────── one turn of Driver::run ─────────────────────────┐
//!        │ receive: recvmmsg/GRO, up to RECV_BUDGET datagrams ──► Endpoint::handle  │
//!        │     Association(h, p) ──► lock h, Association::handle, touch h           │
//!        │     NewAssociation    ──► new AssocShared, touch (offered once Connected)│
//!        │     Response          ──► outq (INIT ACK, out-of-the-blue replies)       │
//!        │ touch what handles marked dirty, and whose deadline is due (timer heap)  │
//!        │ drive each touched association once:                                     │
//!        │     close request ─► handle_timeout if due ─► poll_transmit* ─► outq     │
//!        │     poll_event* ─► ended / established ─► readable, writable, changed    │
//!        │ flush outq (runs of equal datagrams as one GSO send), reap drained ones  │
//!        └─ sleep until: socket readable | outq writable | notify | heap's first ───┘
//! ```
//!
//! Polling once per batch, not per datagram, lets one packet carry the SACK
//! for many and keeps the per-datagram cost at the core's `handle`.
//!
//! Batched UDP I/O, through `quinn-udp`, where the kernel offers it (Linux):
//!
//! ```text
//!   receive  recvmmsg ─► up to RECV_BUFFERS buffers ─► each GRO buffer holds
//!            len / stride datagrams of `stride` bytes (the last may be shorter)
//!            ─► one Bytes per datagram, of its own size ─► Endpoint::handle
//!   send     outq: (to, datagram)* in poll_transmit order
//!            ─► a run to one destination, equal sizes, the last may be shorter,
//!               at most max_gso_segments and MAX_GSO_BYTES ─► one sendmsg with
//!               UDP_SEGMENT (GSO); anything else ─► one sendmsg per datagram
//! ```
//!
//! A kernel or path that refuses GSO (EIO, EINVAL: no checksum offload, IPsec
//! on the route) makes `quinn-udp` turn it off for the socket; the driver then
//! sends the refused run again one datagram at a time. `udp_offload = false`
//! turns both off from the start. WouldBlock keeps the rest of `outq` queued
//! until the socket is writable again.
//!
//! NAT rebinding: each transmit carries the association's address as the core
//! has it now, and the core moves it to a new UDP port of the peer's IP when a
//! packet proves with the association's verification tag that it comes from
//! the peer (RFC 6951 5.4, `sctp::Endpoint`), so the driver sends wherever the
//! peer is without keeping an address of its own. No socket is connected, a
//! client's neither, so that its kernel passes on datagrams from the peer's
//! new port: either side follows the other's port changes (a gateway behind a
//! home NAT or CGNAT, an origin behind a load balancer that remaps).
//!
//! Finding due timers walks every association each turn: right for the handful
//! of associations a gateway or origin holds, not for thousands.
//!
//! Supervision: the driver runs under `catch_unwind` ([`Driver::supervise`]).
//! A panic (a broken invariant in the core or here; no peer input is meant to
//! reach one) is never silent: it is logged with its message, counted in
//! [`driver_panics`], and every association of the socket ends at once with
//! [`Ended::Failed`], so their users see the link down instead of waiting on
//! a task that is gone. A listener's driver then starts again on the same
//! socket with a fresh `sctp::Endpoint` (a new cookie secret; the old
//! associations' peers find them gone and connect again), so one bad datagram
//! cannot leave a port bound and deaf. A client socket's driver stops: its one
//! association is what failed, and the caller connects again on a new socket.
//! Why not exit the process: every association of the socket is lost either
//! way, and a restart in place keeps the listener answering without waiting
//! for systemd (or, outside systemd, for a person).
//!
//! Lock discipline: the driver holds an association's lock only around core
//! calls, fires notifications after releasing it, and never drops an
//! [`Association`] handle while holding that association's lock, since a
//! handle's `Drop` takes it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{ErrorKind, IoSliceMut};
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use sctp::{AssocHandle, AssociationError, DatagramEvent, Endpoint, Event};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use super::{AssocShared, AssocState, Association, Ended, Settings, UdpStats, sys};
use crate::sync::lock;

/// Established associations waiting for `accept`, per listener.
const ACCEPT_BACKLOG: usize = 128;
/// Datagrams read (at least, a GRO buffer is not split across turns) before
/// the associations are polled.
const RECV_BUDGET: usize = 256;
/// Receive calls per turn at most, whatever they bring (errors included).
const MAX_RECV_CALLS: usize = 16;
/// Buffers one receive call fills (`recvmmsg`): `quinn-udp`'s batch, 32 on Linux.
const RECV_BUFFERS: usize = quinn_udp::BATCH_SIZE;
/// One receive buffer, bytes: the largest UDP datagram, and the largest GRO
/// buffer (the kernel stops coalescing at 64 KiB). With RECV_BUFFERS, 2 MiB per
/// UDP socket, i.e. per listener and per connected association.
const RECV_BUFFER: usize = 64 * 1024;
/// Most datagrams one GSO send carries (`UDP_MAX_SEGMENTS` of Linux 4.18 to 6.1;
/// later kernels take 128).
const MAX_GSO_SEGMENTS: usize = 64;
/// Most bytes one GSO send carries: the largest UDP payload of one IPv4 packet
/// (65535 minus 20 bytes of IP and 8 of UDP header).
const MAX_GSO_BYTES: usize = 65_507;
/// A deadline the core left in the past is retried no sooner than this, so
/// that it cannot make the driver spin.
const MIN_TIMER_STEP: Duration = Duration::from_millis(1);

/// Driver tasks that panicked since the process started.
static DRIVER_PANICS: AtomicU64 = AtomicU64::new(0);

/// What every endpoint of the process counted (`sctp::EndpointStats`), added
/// up: each driver adds what its endpoint counted since its last turn.
static ENDPOINT_TOTALS: EndpointTotals = EndpointTotals::new();

/// The process-wide sum of `sctp::EndpointStats`.
struct EndpointTotals([AtomicU64; ENDPOINT_EVENTS.len()]);

/// The names of the endpoint's counts, in the order of [`endpoint_events`].
pub const ENDPOINT_EVENTS: [&str; 9] = [
    "malformed",
    "init_ack",
    "forged_cookie",
    "stale_cookie",
    "out_of_the_blue",
    "refused_at_total_limit",
    "refused_at_source_limit",
    "refused_at_init_rate",
    "port_change",
];

fn stats_array(s: &sctp::EndpointStats) -> [u64; ENDPOINT_EVENTS.len()] {
    [
        s.malformed,
        s.init_acks,
        s.forged_cookies,
        s.stale_cookies,
        s.out_of_the_blue,
        s.refused_at_total_limit,
        s.refused_at_source_limit,
        s.refused_at_init_rate,
        s.port_changes,
    ]
}

impl EndpointTotals {
    const fn new() -> Self {
        EndpointTotals([const { AtomicU64::new(0) }; ENDPOINT_EVENTS.len()])
    }

    /// Adds what `now` counted beyond `before`.
    fn add(&self, before: &sctp::EndpointStats, now: &sctp::EndpointStats) {
        for ((total, b), n) in self.0.iter().zip(stats_array(before)).zip(stats_array(now)) {
            if n > b {
                total.fetch_add(n - b, Ordering::Relaxed);
            }
        }
    }
}

/// What the userspace SCTP endpoints of this process counted since it
/// started, named by [`ENDPOINT_EVENTS`]: datagrams dropped as malformed,
/// INIT ACKs sent, forged and stale cookies, out-of-the-blue packets, INITs
/// and cookies refused at a limit, and peers' port changes followed.
pub fn endpoint_events() -> [(&'static str, u64); ENDPOINT_EVENTS.len()] {
    std::array::from_fn(|i| {
        (
            ENDPOINT_EVENTS[i],
            ENDPOINT_TOTALS.0[i].load(Ordering::Relaxed),
        )
    })
}

/// How many times a userspace SCTP driver task panicked in this process
/// (each time, every association of its socket ended and a listener's driver
/// started again). Nonzero means a bug to report.
pub fn driver_panics() -> u64 {
    DRIVER_PANICS.load(Ordering::Relaxed)
}

/// What the driver of one socket shares with its listener and handles.
#[derive(Debug)]
pub(super) struct EndpointShared {
    /// The socket's bound address.
    pub(super) local_addr: SocketAddr,
    /// Wakes the driver.
    pub(super) notify: Notify,
    /// Associations that handles want polled.
    pub(super) dirty: Mutex<Vec<AssocHandle>>,
    /// False once the listener is gone (always false for a client socket).
    pub(super) listening: AtomicBool,
    /// Established, not yet accepted associations.
    pub(super) accept: Mutex<AcceptQueue>,
    /// Something arrived in `accept`.
    pub(super) accept_ready: Notify,
    /// A second descriptor of the driver's socket, so that `abort` can put the
    /// ABORT chunk on the wire from the caller at once: a process that aborts and
    /// exits must not leave its peer waiting for the idle time-out.
    pub(super) abort_socket: std::net::UdpSocket,
    /// What batched I/O did, for tests and benchmarks.
    pub(super) counters: UdpCounters,
}

/// Counters behind [`UdpStats`], written by the driver only.
#[derive(Debug, Default)]
pub(super) struct UdpCounters {
    max_gso_segments: AtomicUsize,
    gro: AtomicBool,
    datagrams_sent: AtomicU64,
    gso_sends: AtomicU64,
    gso_datagrams: AtomicU64,
    datagrams_received: AtomicU64,
    gro_buffers: AtomicU64,
    gro_datagrams: AtomicU64,
}

impl UdpCounters {
    /// A snapshot (each counter on its own: they may be mid-update).
    pub(super) fn snapshot(&self) -> UdpStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        UdpStats {
            max_gso_segments: self.max_gso_segments.load(Ordering::Relaxed),
            gro: self.gro.load(Ordering::Relaxed),
            datagrams_sent: get(&self.datagrams_sent),
            gso_sends: get(&self.gso_sends),
            gso_datagrams: get(&self.gso_datagrams),
            datagrams_received: get(&self.datagrams_received),
            gro_buffers: get(&self.gro_buffers),
            gro_datagrams: get(&self.gro_datagrams),
        }
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

/// Established, not yet accepted associations of a listener.
#[derive(Debug, Default)]
pub(super) struct AcceptQueue {
    /// Ready for `accept`, oldest first.
    pub(super) ready: VecDeque<Association>,
    /// Why the driver stopped, if it did.
    pub(super) failed: Option<String>,
}

impl EndpointShared {
    /// Shared state for a socket bound to `local_addr`.
    pub(super) fn new(
        local_addr: SocketAddr,
        listening: bool,
        abort_socket: std::net::UdpSocket,
    ) -> Arc<Self> {
        Arc::new(EndpointShared {
            abort_socket,
            local_addr,
            notify: Notify::new(),
            dirty: Mutex::new(Vec::new()),
            listening: AtomicBool::new(listening),
            accept: Mutex::new(AcceptQueue::default()),
            accept_ready: Notify::new(),
            counters: UdpCounters::default(),
        })
    }
}

/// The driver's bookkeeping for one association.
struct Entry {
    assoc: Arc<AssocShared>,
    /// The core's next deadline (timers, heartbeat, idle limit).
    deadline: Option<Instant>,
    /// Already on this turn's to-do list.
    touched: bool,
}

/// Notifications to fire once the association's lock is released.
#[derive(Default)]
struct Wakeups {
    readable: bool,
    changed: bool,
    ended: bool,
    offer: bool,
    writable: Vec<u16>,
}

/// The task that owns one UDP socket and its `sctp::Endpoint`.
pub(super) struct Driver {
    socket: UdpSocket,
    /// `quinn-udp`'s view of the socket: its GSO limit, turned down to 1 when
    /// the kernel refuses a GSO send.
    udp: UdpSocketState,
    endpoint: Endpoint,
    shared: Arc<EndpointShared>,
    settings: Arc<Settings>,
    assocs: HashMap<AssocHandle, Entry>,
    /// Every association's deadline, soonest first, so that a turn costs
    /// what is due rather than a walk over all associations (an origin holds
    /// thousands). Entries are not removed when a deadline moves: one whose
    /// instant is no longer its association's deadline is skipped.
    timers: BinaryHeap<Reverse<(Instant, AssocHandle)>>,
    touched: Vec<AssocHandle>,
    finished: Vec<AssocHandle>,
    outq: VecDeque<(SocketAddr, Bytes)>,
    /// Receive buffers, reused.
    rx: RxBatch,
    /// One GSO send's datagrams, back to back, reused.
    tx: Vec<u8>,
    /// Whether GSO failure was logged already.
    gso_refusal_logged: bool,
    /// The endpoint was told to stop answering INITs.
    rejecting: bool,
    /// For a listener, what a fresh endpoint is made of after a panic.
    restart: Option<Restart>,
    /// The endpoint's counts as last added to [`ENDPOINT_TOTALS`].
    reported: sctp::EndpointStats,
}

/// What a listener's driver needs to start again on its socket.
pub(super) struct Restart {
    pub(super) core: sctp::Config,
    pub(super) limits: sctp::Limits,
}

/// What one receive call fills: RECV_BUFFERS buffers of RECV_BUFFER bytes.
#[derive(Default)]
struct RxBatch {
    buf: Vec<u8>,
    meta: Vec<RecvMeta>,
}

impl RxBatch {
    fn new() -> Self {
        RxBatch {
            buf: vec![0; RECV_BUFFERS * RECV_BUFFER],
            meta: vec![RecvMeta::default(); RECV_BUFFERS],
        }
    }
}

impl Driver {
    /// Starts the driver task; `client` is the association a `connect` opened.
    /// Fails if the socket cannot be set up for batched I/O.
    /// A listener's driver keeps `restart` to make a fresh endpoint from
    /// after a panic (see the module doc).
    pub(super) fn spawn(
        socket: UdpSocket,
        endpoint: Endpoint,
        shared: Arc<EndpointShared>,
        settings: Arc<Settings>,
        client: Option<Arc<AssocShared>>,
        restart: Option<Restart>,
    ) -> std::io::Result<()> {
        // Also turns on GRO where the kernel has it, and sets the don't-fragment
        // policy to IP_PMTUDISC_PROBE: a datagram above the interface MTU fails
        // (EMSGSIZE) instead of leaving in IP fragments, which is what the core's
        // path MTU probing (RFC 8899) wants to learn.
        let udp = UdpSocketState::new((&socket).into())?;
        let gro = settings.udp_offload && udp.gro_segments() > 1;
        if !gro {
            // quinn-udp asks for GRO unconditionally; a kernel without it
            // refuses the option, which is fine.
            if let Err(e) = super::sys::set_udp_gro(&socket, false) {
                tracing::debug!(error = %e, "cannot turn UDP_GRO off");
            }
        }
        let counters = &shared.counters;
        counters.gro.store(gro, Ordering::Relaxed);
        counters
            .max_gso_segments
            .store(gso_limit(&udp, &settings), Ordering::Relaxed);
        let mut driver = Driver {
            socket,
            udp,
            endpoint,
            shared,
            settings,
            assocs: HashMap::new(),
            timers: BinaryHeap::new(),
            touched: Vec::new(),
            finished: Vec::new(),
            outq: VecDeque::new(),
            rx: RxBatch::new(),
            tx: Vec::with_capacity(MAX_GSO_BYTES),
            gso_refusal_logged: false,
            rejecting: false,
            restart,
            reported: sctp::EndpointStats::default(),
        };
        if let Some(assoc) = client {
            driver.insert(assoc);
        }
        tokio::spawn(driver.supervise());
        Ok(())
    }

    /// Runs the driver; after a panic, ends every association of the socket
    /// and, for a listener, runs again with a fresh endpoint.
    async fn supervise(mut self) {
        loop {
            let Err(panic) = AssertUnwindSafe(self.run()).catch_unwind().await else {
                return;
            };
            DRIVER_PANICS.fetch_add(1, Ordering::Relaxed);
            let what = panic_message(panic.as_ref());
            let local = self.shared.local_addr;
            let restarting =
                self.restart.is_some() && self.shared.listening.load(Ordering::Acquire);
            tracing::error!(
                %local,
                panic = %what,
                associations = self.assocs.len(),
                restarting,
                "userspace SCTP driver panicked: its associations are lost"
            );
            let why = format!("the SCTP driver panicked: {what}");
            self.end_all(&why);
            if !restarting {
                lock(&self.shared.accept).failed = Some(why);
                self.shared.accept_ready.notify_waiters();
                return;
            }
            if let Err(e) = self.start_again() {
                tracing::error!(%local, error = %e, "cannot start the SCTP listener's driver again");
                lock(&self.shared.accept).failed = Some(format!("{why}; restart failed: {e}"));
                self.shared.accept_ready.notify_waiters();
                return;
            }
        }
    }

    /// A fresh endpoint and empty queues on the same socket, after a panic
    /// left the old ones in an unknown state.
    fn start_again(&mut self) -> Result<(), sctp::ConfigError> {
        let Some(restart) = &self.restart else {
            return Ok(());
        };
        let now = Instant::now();
        self.endpoint = Endpoint::new(
            restart.core.clone(),
            self.shared.local_addr.port(),
            true,
            super::seed(),
            now,
        )?;
        self.endpoint.set_limits(restart.limits);
        self.reported = sctp::EndpointStats::default();
        self.assocs.clear();
        self.timers.clear();
        self.touched.clear();
        self.finished.clear();
        self.outq.clear();
        self.rx = RxBatch::new();
        self.tx.clear();
        self.rejecting = false;
        Ok(())
    }

    fn insert(&mut self, assoc: Arc<AssocShared>) {
        let key = assoc.key;
        self.assocs.insert(
            key,
            Entry {
                assoc,
                deadline: None,
                touched: false,
            },
        );
        self.touch(key);
    }

    fn touch(&mut self, key: AssocHandle) {
        if let Some(entry) = self.assocs.get_mut(&key)
            && !entry.touched
        {
            entry.touched = true;
            self.touched.push(key);
        }
    }

    async fn run(&mut self) {
        loop {
            let now = Instant::now();
            self.receive(now);
            let dirty = std::mem::take(&mut *lock(&self.shared.dirty));
            for key in dirty {
                self.touch(key);
            }
            while let Some(key) = self.pop_due(now) {
                self.touch(key);
            }
            let mut touched = std::mem::take(&mut self.touched);
            for key in touched.drain(..) {
                self.drive(key, now);
            }
            self.touched = touched;
            self.flush();
            self.reap();
            self.report_stats();
            if !self.shared.listening.load(Ordering::Acquire) {
                if !self.rejecting {
                    self.rejecting = true;
                    self.endpoint.set_listening(false);
                }
                if self.assocs.is_empty() && self.outq.is_empty() {
                    break;
                }
            }
            if let Err(e) = self.wait().await {
                self.fail(&e);
                break;
            }
        }
        tracing::debug!(local = %self.shared.local_addr, "userspace SCTP driver done");
    }

    /// Adds what the endpoint counted since the last turn to the process's
    /// totals.
    fn report_stats(&mut self) {
        let now = self.endpoint.stats();
        if now != self.reported {
            ENDPOINT_TOTALS.add(&self.reported, &now);
            self.reported = now;
        }
    }

    /// The next association whose deadline is at or before `now`.
    fn pop_due(&mut self, now: Instant) -> Option<AssocHandle> {
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if at > now {
                return None;
            }
            self.timers.pop();
            // Stale entries (the deadline moved, or the association is
            // gone) are dropped here.
            if self
                .assocs
                .get(&key)
                .is_some_and(|e| e.deadline == Some(at))
            {
                return Some(key);
            }
        }
        None
    }

    /// Rebuilds the timer heap from the live deadlines once stale entries
    /// outnumber them: a busy association moves its deadline on every SACK,
    /// and stale entries would otherwise wait until their instant passes.
    /// Amortized, each push pays for one entry of the rebuild.
    fn compact_timers(&mut self) {
        if self.timers.len() <= 2 * self.assocs.len() + 64 {
            return;
        }
        self.timers = self
            .assocs
            .iter()
            .filter_map(|(key, e)| e.deadline.map(|at| Reverse((at, *key))))
            .collect();
    }

    /// The soonest live deadline, dropping stale entries on the way.
    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if self
                .assocs
                .get(&key)
                .is_some_and(|e| e.deadline == Some(at))
            {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// Sleeps until the socket, a handle or a deadline needs the driver.
    async fn wait(&mut self) -> std::io::Result<()> {
        let deadline = self.next_deadline();
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let writable = async {
            if self.outq.is_empty() {
                std::future::pending().await
            } else {
                self.socket.writable().await
            }
        };
        tokio::select! {
            r = self.socket.readable() => r,
            r = writable => r,
            () = self.shared.notify.notified() => Ok(()),
            () = timer => Ok(()),
        }
    }

    /// The socket failed for good: every association and the listener learn why.
    fn fail(&mut self, e: &std::io::Error) {
        tracing::error!(error = %e, local = %self.shared.local_addr, "UDP socket failed");
        let why = format!("UDP socket failed: {e}");
        self.end_all(&why);
        lock(&self.shared.accept).failed = Some(why);
        self.shared.accept_ready.notify_waiters();
    }

    /// Ends every association of the socket with `why` and wakes everything
    /// that waits on one; not yet accepted ones leave the accept queue.
    fn end_all(&mut self, why: &str) {
        for entry in self.assocs.values() {
            let mut st = lock(&entry.assoc.state);
            if st.ended.is_none() {
                st.ended = Some(Ended::Failed(why.to_owned()));
            }
            drop(st);
            entry.assoc.wake_all();
        }
        // Dropped outside the lock: a handle's `Drop` takes it.
        let pending = std::mem::take(&mut lock(&self.shared.accept).ready);
        drop(pending);
    }

    /// Reads what the socket holds, up to RECV_BUDGET datagrams, and feeds
    /// each datagram to the endpoint.
    fn receive(&mut self, now: Instant) {
        // Taken out of `self` so that the datagrams can be handled (`&mut
        // self`) while they are still read from it.
        let mut rx = std::mem::take(&mut self.rx);
        let mut handled = 0;
        for _ in 0..MAX_RECV_CALLS {
            if handled >= RECV_BUDGET {
                break;
            }
            let result = {
                let mut bufs: Vec<IoSliceMut<'_>> = rx
                    .buf
                    .chunks_mut(RECV_BUFFER)
                    .map(IoSliceMut::new)
                    .collect();
                let (socket, udp) = (&self.socket, &self.udp);
                socket.try_io(Interest::READABLE, || {
                    udp.recv(socket.into(), &mut bufs, &mut rx.meta)
                })
            };
            let filled = match result {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!(error = %e, "UDP receive error");
                    self.socket_error();
                    continue;
                }
            };
            for (meta, buf) in rx.meta[..filled].iter().zip(rx.buf.chunks(RECV_BUFFER)) {
                let data = &buf[..meta.len.min(buf.len())];
                // Without GRO, stride == len: one datagram. An empty datagram
                // (stride 0) carries no SCTP packet and is skipped.
                let mut count = 0;
                for datagram in data.chunks(meta.stride.max(1)) {
                    count += 1;
                    // Each datagram gets an allocation of its own size: the
                    // core keeps received payloads as slices of it until the
                    // application reads them, and a slice of a large shared
                    // block would pin the whole block (a peer holding one
                    // chunk per block back would pin megabytes per chunk).
                    let datagram = Bytes::copy_from_slice(datagram);
                    self.handle_datagram(now, meta.addr, datagram);
                }
                let counters = &self.shared.counters;
                add(&counters.datagrams_received, count);
                if count > 1 {
                    add(&counters.gro_buffers, 1);
                    add(&counters.gro_datagrams, count);
                }
                handled += count;
            }
        }
        self.rx = rx;
    }

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: Bytes) {
        #[cfg(test)]
        tests::panic_if_asked(self.shared.local_addr.port());
        match self.endpoint.handle(now, from, datagram) {
            None => {}
            Some(DatagramEvent::Association(handle, incoming)) => {
                let Some(entry) = self.assocs.get(&handle) else {
                    return;
                };
                lock(&entry.assoc.state).proto.handle(now, incoming);
                self.touch(handle);
            }
            Some(DatagramEvent::NewAssociation {
                handle,
                association,
                replaces,
            }) => {
                if let Some(old) = replaces
                    && let Some(entry) = self.assocs.get(&old)
                {
                    lock(&entry.assoc.state).proto.peer_restarted();
                    self.touch(old);
                }
                if !self.shared.listening.load(Ordering::Acquire) {
                    // The listener went away between the endpoint's check and
                    // this one: nobody will accept it.
                    let mut association = association;
                    association.abort(now, "not accepting associations");
                    while let Some(t) = association.poll_transmit(now) {
                        self.outq.push_back((t.destination, t.contents));
                    }
                    self.endpoint.forget(handle);
                    return;
                }
                tracing::debug!(peer = %from, "incoming SCTP association");
                let assoc = AssocShared::new(
                    handle,
                    from,
                    Arc::clone(&self.settings),
                    Arc::clone(&self.shared),
                    AssocState::new(*association, true),
                );
                self.insert(assoc);
            }
            Some(DatagramEvent::Response(t)) => self.outq.push_back((t.destination, t.contents)),
        }
    }

    /// Polls one association: requests from its handles, timers, transmits
    /// and events.
    fn drive(&mut self, key: AssocHandle, now: Instant) {
        let Some(entry) = self.assocs.get_mut(&key) else {
            return;
        };
        entry.touched = false;
        let assoc = Arc::clone(&entry.assoc);
        // Cleared before looking, so a request made meanwhile wakes us again.
        assoc.needs_poll.store(false, Ordering::Release);
        let mut wake = Wakeups::default();
        let (deadline, drained) = {
            let mut guard = lock(&assoc.state);
            let st = &mut *guard;
            if st.close_requested && !st.close_started {
                st.close_started = true;
                st.proto.close(now);
            }
            if st.proto.poll_timeout().is_some_and(|t| t <= now) {
                st.proto.handle_timeout(now);
            }
            while let Some(t) = st.proto.poll_transmit(now) {
                self.outq.push_back((t.destination, t.contents));
            }
            while let Some(event) = st.proto.poll_event() {
                self.on_event(st, event, &mut wake);
            }
            if st.ended.is_some() {
                wake.ended = true;
            } else {
                wake.readable = st.proto.readable();
                let limit = self.settings.max_buffered_per_stream;
                let mut i = 0;
                while i < st.blocked.len() {
                    let stream = st.blocked[i];
                    if st.unsent(stream) <= limit {
                        wake.writable.push(stream);
                        st.blocked.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
            }
            let deadline = st.proto.poll_timeout().map(|t| t.max(now + MIN_TIMER_STEP));
            (deadline, st.proto.is_drained())
        };
        if let Some(entry) = self.assocs.get_mut(&key)
            && entry.deadline != deadline
        {
            entry.deadline = deadline;
            if let Some(at) = deadline {
                self.timers.push(Reverse((at, key)));
                self.compact_timers();
            }
        }
        if wake.ended {
            assoc.wake_all();
        } else {
            if wake.readable {
                assoc.readable.notify_waiters();
            }
            if wake.changed {
                assoc.changed.notify_waiters();
            }
            for stream in wake.writable {
                if let Some(n) = assoc.writable.get(usize::from(stream)) {
                    n.notify_waiters();
                }
            }
        }
        if drained {
            self.finished.push(key);
        } else if wake.offer {
            self.offer(assoc);
        }
    }

    fn on_event(&self, st: &mut AssocState, event: Event, wake: &mut Wakeups) {
        match event {
            Event::Connected => {
                st.established = true;
                if let Some((outbound, inbound)) = st.proto.streams() {
                    st.counts = crate::message::StreamCounts { outbound, inbound };
                }
                tracing::debug!(peer = %st.proto.remote(), counts = ?st.counts, "SCTP association up");
                wake.changed = true;
                wake.offer = st.server;
            }
            Event::Closed => {
                st.ended.get_or_insert(Ended::Closed);
                tracing::debug!(peer = %st.proto.remote(), "SCTP association closed");
            }
            Event::Lost(reason) => {
                let ended = match &reason {
                    AssociationError::Aborted(_) | AssociationError::PeerRestarted => {
                        Ended::Aborted
                    }
                    AssociationError::Unreachable => Ended::Unreachable(self.settings.idle_timeout),
                    AssociationError::LocallyAborted(_) if st.aborted => Ended::Closed,
                    AssociationError::LocallyAborted(why) => Ended::Failed(why.clone()),
                    AssociationError::HandshakeFailed => Ended::Failed(reason.to_string()),
                    AssociationError::PortUnreachable => Ended::Refused,
                };
                tracing::debug!(peer = %st.proto.remote(), %reason, "SCTP association lost");
                st.ended.get_or_insert(ended);
            }
        }
    }

    /// Hands a newly established incoming association to `accept`, or aborts
    /// it when nobody will take it.
    fn offer(&mut self, assoc: Arc<AssocShared>) {
        let handle = Association {
            shared: Arc::clone(&assoc),
        };
        let mut queue = lock(&self.shared.accept);
        if self.shared.listening.load(Ordering::Acquire) && queue.ready.len() < ACCEPT_BACKLOG {
            queue.ready.push_back(handle);
            drop(queue);
            self.shared.accept_ready.notify_waiters();
        } else {
            drop(queue);
            crate::warn_limited!(peer = %assoc.peer_addr, "accept backlog full: aborting association");
            handle.abort();
        }
    }

    /// Sends what `outq` holds: each run of datagrams that one GSO send can
    /// carry as one send, the rest one by one, until the socket would block.
    fn flush(&mut self) {
        while !self.outq.is_empty() {
            let limit = gso_limit(&self.udp, &self.settings);
            let (count, segment) = gso_run(self.outq.iter().map(|(to, d)| (*to, d.len())), limit);
            let Some((to, first)) = self.outq.front() else {
                return;
            };
            let to = *to;
            let contents: &[u8] = if count == 1 {
                first
            } else {
                self.tx.clear();
                for (_, datagram) in self.outq.range(..count) {
                    self.tx.extend_from_slice(datagram);
                }
                &self.tx
            };
            let transmit = Transmit {
                destination: to,
                ecn: None,
                contents,
                segment_size: (count > 1).then_some(segment),
                src_ip: None,
            };
            let (socket, udp) = (&self.socket, &self.udp);
            match socket.try_io(Interest::WRITABLE, || {
                udp.try_send(socket.into(), &transmit)
            }) {
                Ok(()) => {
                    let counters = &self.shared.counters;
                    add(&counters.datagrams_sent, count);
                    if count > 1 {
                        add(&counters.gso_sends, 1);
                        add(&counters.gso_datagrams, count);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if count > 1 && gso_limit(&self.udp, &self.settings) < count => {
                    // quinn-udp turned GSO off for this socket (EIO or EINVAL
                    // from a GSO send): nothing of the run left, so send it
                    // again under the new limit.
                    if !self.gso_refusal_logged {
                        self.gso_refusal_logged = true;
                        tracing::debug!(
                            error = %e, %to, local = %self.shared.local_addr,
                            "the kernel refused a GSO send: one datagram per send from now on"
                        );
                    }
                    self.shared
                        .counters
                        .max_gso_segments
                        .store(gso_limit(&self.udp, &self.settings), Ordering::Relaxed);
                    continue;
                }
                // SCTP retransmits what a transient error lost.
                Err(e) => {
                    tracing::debug!(error = %e, %to, count, "UDP send error");
                    self.socket_error();
                }
            }
            self.outq.drain(..count);
        }
    }

    /// A send or receive failed: the socket's error queue (`IP_RECVERR`) holds
    /// a report for each ICMP error and local failure, drained here, whatever
    /// the error was, so that it never fills. Each "port unreachable" report
    /// names the destination and quotes the start of the packet it answers:
    /// the association with that peer ends at once when the quote shows the
    /// packet was its own ([`sctp::Association::handle_port_unreachable`]:
    /// the peer's tag, or in COOKIE-WAIT our INIT), where heartbeats would
    /// take `idle_timeout` to notice.
    fn socket_error(&mut self) {
        let reports = sys::port_unreachable_reports(&self.socket);
        let mut lost = Vec::new();
        for (key, entry) in &self.assocs {
            let mut st = lock(&entry.assoc.state);
            if st.ended.is_some() {
                continue;
            }
            let remote = canonical(st.proto.remote());
            // Once one report ends it, the others find it closed.
            let ours = reports
                .iter()
                .filter(|r| canonical(r.to) == remote)
                .any(|r| st.proto.handle_port_unreachable(r.quoted()));
            if ours {
                // Ended in the core: the next drive reports it as Refused.
                lost.push(*key);
            }
        }
        if !lost.is_empty() {
            tracing::debug!(
                associations = lost.len(),
                "ICMP port unreachable with the peer's tag: associations end"
            );
            for key in lost {
                self.touch(key);
            }
            // Called from `flush` too, after this pass drove its associations:
            // the next pass must come at once, not at the next packet.
            self.shared.notify.notify_one();
        }
    }

    /// Forgets ended associations; their handles keep what is left to read.
    fn reap(&mut self) {
        for key in self.finished.drain(..) {
            if self.assocs.remove(&key).is_some() {
                self.endpoint.forget(key);
            }
        }
    }
}

/// The text a panic was raised with (`panic!` with a literal or a format).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

/// `addr` with an IPv4-mapped address as plain IPv4, so that a report from
/// an IPv6 socket matches an association however its peer was written.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// Most datagrams one send may carry on `udp` under `settings` (1: no GSO).
fn gso_limit(udp: &UdpSocketState, settings: &Settings) -> usize {
    if settings.udp_offload {
        udp.max_gso_segments().clamp(1, MAX_GSO_SEGMENTS)
    } else {
        1
    }
}

/// How many datagrams from the head of a queue of (destination, size) one GSO
/// send can carry, and their segment size: a run to one destination of equal
/// sizes, of which only the last may be shorter, at most `limit` datagrams and
/// MAX_GSO_BYTES. `(1, size)` means a send of its own; `(0, 0)`, an empty queue.
fn gso_run(mut queue: impl Iterator<Item = (SocketAddr, usize)>, limit: usize) -> (usize, usize) {
    let Some((to, segment)) = queue.next() else {
        return (0, 0);
    };
    let (mut count, mut total) = (1, segment);
    for (next_to, size) in queue {
        if count >= limit || next_to != to || size > segment || total + size > MAX_GSO_BYTES {
            break;
        }
        count += 1;
        total += size;
        if size < segment {
            break;
        }
    }
    (count, segment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::config::AssociationConfig;
    use crate::userspace::{Listener, connect};

    /// The ports whose drivers panic at their next datagram. By port, so
    /// that the drivers of the other tests, in the same process and running
    /// at the same time, go on.
    static PANIC_AT: Mutex<Vec<u16>> = Mutex::new(Vec::new());

    fn panic_at(port: u16) {
        lock(&PANIC_AT).push(port);
    }

    pub(super) fn panic_if_asked(port: u16) {
        let mut ports = lock(&PANIC_AT);
        if let Some(i) = ports.iter().position(|&p| p == port) {
            ports.swap_remove(i);
            drop(ports);
            panic!("injected by a test");
        }
    }

    /// `future`'s output, or a panic saying what did not happen in 10 s.
    async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
        match tokio::time::timeout(Duration::from_secs(10), future).await {
            Ok(output) => output,
            Err(_) => panic!("not {what} within 10 s"),
        }
    }

    /// A listener on loopback, an association to it, and its accepted end.
    async fn connected(config: &AssociationConfig) -> (Listener, Association, Association) {
        let listener = Listener::bind(([127, 0, 0, 1], 0).into(), config)
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let client = within("connected", connect(addr, config))
            .await
            .expect("connect");
        let served = within("accepted", listener.accept()).await.expect("accept");
        (listener, client, served)
    }

    /// `received` is the error an association ended by the injected panic gives.
    fn ended_by_the_injected_panic(
        received: Result<crate::message::Message, crate::error::TransportError>,
    ) {
        match received {
            Err(crate::error::TransportError::Protocol(why)) => {
                assert!(why.contains("panicked: injected by a test"), "{why}");
            }
            other => panic!("expected the association to fail, got {other:?}"),
        }
    }

    /// A listener's driver that panics is not silent: the association it
    /// served ends at once (its user sees an error, not a hang), the panic is
    /// counted, and the listener answers the next association.
    #[tokio::test]
    async fn a_listener_driver_that_panics_ends_its_associations_and_starts_again() {
        let config = AssociationConfig::default();
        let (listener, client, served) = connected(&config).await;
        let addr = listener.local_addr().expect("address");
        let panics = driver_panics();

        panic_at(addr.port());
        client
            .send(1, Bytes::from_static(b"the datagram that panics"))
            .await
            .expect("send");
        ended_by_the_injected_panic(within("the served association ended", served.recv()).await);
        assert!(driver_panics() > panics);

        // The listener's socket is answered by a fresh endpoint.
        let again = within("connected again", connect(addr, &config))
            .await
            .expect("connect again");
        let served = within("accepted again", listener.accept())
            .await
            .expect("accept again");
        again
            .send(1, Bytes::from_static(b"after the restart"))
            .await
            .expect("send");
        let message = within("a message after the restart", served.recv())
            .await
            .expect("recv");
        assert_eq!(&message.data[..], b"after the restart");
    }

    fn run(queue: &[(u16, usize)], limit: usize) -> (usize, usize) {
        let addr = |port| SocketAddr::from(([10, 0, 0, 1], port));
        gso_run(queue.iter().map(|&(p, n)| (addr(p), n)), limit)
    }

    /// A client socket's driver that panics ends its one association at
    /// once, so that its user (a gateway's origin link) sees the link down
    /// and connects again, instead of waiting on a task that is gone.
    #[tokio::test]
    async fn a_client_driver_that_panics_ends_its_association() {
        let (_listener, client, served) = connected(&AssociationConfig::default()).await;

        panic_at(served.peer_addr().port());
        served
            .send(1, Bytes::from_static(b"the datagram that panics"))
            .await
            .expect("send");
        ended_by_the_injected_panic(within("the client's association ended", client.recv()).await);
        assert!(
            client.send(1, Bytes::from_static(b"late")).await.is_err(),
            "nothing is sent on an association whose driver is gone"
        );
    }

    #[test]
    fn runs_of_equal_datagrams_to_one_peer_go_together() {
        assert_eq!(run(&[], 64), (0, 0));
        assert_eq!(run(&[(1, 1200)], 64), (1, 1200));
        assert_eq!(run(&[(1, 1200), (1, 1200), (1, 1200)], 64), (3, 1200));
        // The last of a run may be shorter; it ends the run.
        assert_eq!(
            run(&[(1, 1200), (1, 1200), (1, 300), (1, 300)], 64),
            (3, 1200)
        );
        // A longer one, or another destination, starts a new run.
        assert_eq!(run(&[(1, 1200), (1, 1201)], 64), (1, 1200));
        assert_eq!(run(&[(1, 1200), (1, 1200), (2, 1200)], 64), (2, 1200));
        // A short first datagram (a SACK) goes alone when larger ones follow.
        assert_eq!(run(&[(1, 60), (1, 1200), (1, 1200)], 64), (1, 60));
    }

    #[test]
    fn runs_stop_at_the_segment_and_byte_limits() {
        let many = [(1, 1200); 100];
        assert_eq!(run(&many, 64), (54, 1200));
        assert_eq!(run(&many, 10), (10, 1200));
        assert_eq!(run(&many, 1), (1, 1200));
        let (count, segment) = run(&[(1, 9000); 10], 64);
        assert!(count * segment <= MAX_GSO_BYTES);
        assert_eq!(count, 7);
    }
}
