//! The endpoint driver: one task per UDP socket that owns the socket and the
//! `sctp::Endpoint`, in the manner of quinn's endpoint and connection drivers
//! folded into one.
//!
//! ```text
//!        ┌──────────────────────── one turn of Driver::run ─────────────────────────┐
//!        │ receive: up to RECV_BATCH datagrams ──► Endpoint::handle                 │
//!        │     Association(h, p) ──► lock h, Association::handle, touch h           │
//!        │     NewAssociation    ──► new AssocShared, touch (offered once Connected)│
//!        │     Response          ──► outq (INIT ACK, out-of-the-blue replies)       │
//!        │ touch what handles marked dirty and whose deadline is due                │
//!        │ drive each touched association once:                                     │
//!        │     close request ─► handle_timeout if due ─► poll_transmit* ─► outq     │
//!        │     poll_event* ─► ended / established ─► readable, writable, changed    │
//!        │ flush outq, reap drained associations (Endpoint::forget)                 │
//!        └─ sleep until: socket readable | outq writable | notify | min deadline ───┘
//! ```
//!
//! Polling once per batch, not per datagram, lets one packet carry the SACK
//! for many and keeps the per-datagram cost at the core's `handle`.
//!
//! Finding due timers walks every association each turn: right for the handful
//! of associations a gateway or origin holds, not for thousands.
//!
//! Lock discipline: the driver holds an association's lock only around core
//! calls, fires notifications after releasing it, and never drops an
//! [`Association`] handle while holding that association's lock, since a
//! handle's `Drop` takes it.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sctp::{AssocHandle, AssociationError, DatagramEvent, Endpoint, Event};
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use super::{AssocShared, AssocState, Association, Ended, Settings, lock};

/// Established associations waiting for `accept`, per listener.
const ACCEPT_BACKLOG: usize = 128;
/// Datagrams read before the associations are polled.
const RECV_BATCH: usize = 64;
/// The receive buffer, bytes: the largest a UDP datagram can be.
const MAX_DATAGRAM: usize = 64 * 1024;
/// A deadline the core left in the past is retried no sooner than this, so
/// that it cannot make the driver spin.
const MIN_TIMER_STEP: Duration = Duration::from_millis(1);

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
    endpoint: Endpoint,
    shared: Arc<EndpointShared>,
    settings: Arc<Settings>,
    assocs: HashMap<AssocHandle, Entry>,
    touched: Vec<AssocHandle>,
    finished: Vec<AssocHandle>,
    outq: VecDeque<(SocketAddr, Bytes)>,
    /// One datagram's receive buffer, reused.
    rx: Vec<u8>,
    /// The endpoint was told to stop answering INITs.
    rejecting: bool,
}

impl Driver {
    /// Starts the driver task; `client` is the association a `connect` opened.
    pub(super) fn spawn(
        socket: UdpSocket,
        endpoint: Endpoint,
        shared: Arc<EndpointShared>,
        settings: Arc<Settings>,
        client: Option<Arc<AssocShared>>,
    ) {
        let mut driver = Driver {
            socket,
            endpoint,
            shared,
            settings,
            assocs: HashMap::new(),
            touched: Vec::new(),
            finished: Vec::new(),
            outq: VecDeque::new(),
            rx: vec![0; MAX_DATAGRAM],
            rejecting: false,
        };
        if let Some(assoc) = client {
            driver.insert(assoc);
        }
        tokio::spawn(driver.run());
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

    async fn run(mut self) {
        loop {
            let now = Instant::now();
            self.receive(now);
            let dirty = std::mem::take(&mut *lock(&self.shared.dirty));
            for key in dirty {
                self.touch(key);
            }
            let due: Vec<AssocHandle> = self
                .assocs
                .iter()
                .filter(|(_, e)| e.deadline.is_some_and(|d| d <= now))
                .map(|(k, _)| *k)
                .collect();
            for key in due {
                self.touch(key);
            }
            let mut touched = std::mem::take(&mut self.touched);
            for key in touched.drain(..) {
                self.drive(key, now);
            }
            self.touched = touched;
            self.flush();
            self.reap();
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

    /// Sleeps until the socket, a handle or a deadline needs the driver.
    async fn wait(&self) -> std::io::Result<()> {
        let deadline = self.assocs.values().filter_map(|e| e.deadline).min();
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
        for entry in self.assocs.values() {
            let mut st = lock(&entry.assoc.state);
            if st.ended.is_none() {
                st.ended = Some(Ended::Failed(why.clone()));
            }
            drop(st);
            entry.assoc.wake_all();
        }
        lock(&self.shared.accept).failed = Some(why);
        self.shared.accept_ready.notify_waiters();
    }

    fn receive(&mut self, now: Instant) {
        for _ in 0..RECV_BATCH {
            match self.socket.try_recv_from(&mut self.rx) {
                Ok((n, from)) => {
                    // Each datagram gets an allocation of its own size: the
                    // core keeps received payloads as slices of it until the
                    // application reads them, and a slice of a large shared
                    // block would pin the whole block (a peer holding one
                    // chunk per block back would pin megabytes per chunk).
                    let datagram = Bytes::copy_from_slice(&self.rx[..n]);
                    self.handle_datagram(now, from, datagram);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => self.refused(),
                Err(e) => tracing::debug!(error = %e, "UDP receive error"),
            }
        }
    }

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: Bytes) {
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
        if let Some(entry) = self.assocs.get_mut(&key) {
            entry.deadline = deadline;
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
                    st.counts = crate::StreamCounts { outbound, inbound };
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
            tracing::warn!(peer = %assoc.peer_addr, "accept backlog full: aborting association");
            handle.abort();
        }
    }

    fn flush(&mut self) {
        while let Some((to, packet)) = self.outq.front() {
            match self.socket.try_send_to(packet, *to) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => self.refused(),
                // SCTP retransmits what a transient error lost.
                Err(e) => tracing::debug!(error = %e, %to, "UDP send error"),
            }
            self.outq.pop_front();
        }
    }

    /// ICMP port unreachable on the connected client socket: a handshake in
    /// progress fails at once. Established associations ignore it, as SCTP
    /// would; heartbeats judge their liveness.
    fn refused(&mut self) {
        for (key, entry) in &self.assocs {
            let mut st = lock(&entry.assoc.state);
            if !st.established && st.ended.is_none() {
                st.ended = Some(Ended::Refused);
                drop(st);
                entry.assoc.wake_all();
                self.finished.push(*key);
            }
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
