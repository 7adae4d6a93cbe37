//! The endpoint driver: one task per UDP socket that owns the socket and the
//! `sctp-proto` `Endpoint`, in the manner of quinn's endpoint and connection
//! drivers folded into one.
//!
//! Each turn of [`Driver::run`] reads a batch of datagrams and feeds them in,
//! collects the associations that handles woke or whose timers fell due, drives
//! each of those once (requests, liveness, timers, events, transmits), sends
//! what came out, and then sleeps until the socket, a handle or the next timer
//! needs it. Polling once per batch, not per datagram, matters: several
//! `sctp-proto` polls walk the whole in-flight queue.
//!
//! Finding due timers walks every association each turn: right for the handful
//! of associations a gateway or origin holds, not for thousands.
//!
//! It never blocks on a handle (locks are held only around `sctp-proto` calls)
//! and never drops an [`Association`] handle while holding that association's
//! lock, since a handle's `Drop` takes it.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use sctp_proto::{
    AssociationError, AssociationHandle, DatagramEvent, Endpoint, EndpointEvent, Event, Payload,
    StreamEvent,
};
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use super::wire::{self, ChunkSummary, InitStreams, PeerHeader};
use super::{AssocShared, AssocState, Association, Ended, Settings};
use crate::StreamCounts;
use crate::sync::lock;

/// Established associations waiting for `accept`, per listener.
const ACCEPT_BACKLOG: usize = 128;
/// Incoming associations still in their handshake, per listener. `sctp-proto`
/// keeps state from the first INIT on, so this bounds what a flood of INITs costs.
const MAX_HANDSHAKING: usize = 256;
/// Datagrams read before the associations are polled.
const RECV_BATCH: usize = 64;
/// Received datagrams are carved out of blocks this large, bytes, so that a
/// datagram costs no allocation of its own.
const RX_BLOCK: usize = 1024 * 1024;
/// Room left for each datagram, bytes: the largest a UDP datagram can be.
const MAX_DATAGRAM: usize = 64 * 1024;

/// What the driver of one socket shares with its listener and handles.
#[derive(Debug)]
pub(super) struct EndpointShared {
    /// The socket's bound address.
    pub(super) local_addr: SocketAddr,
    /// Wakes the driver.
    pub(super) notify: Notify,
    /// Associations that handles want polled.
    pub(super) dirty: Mutex<Vec<usize>>,
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
    /// When it next needs polling without input (timers, heartbeat, idle).
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

/// The task that owns one UDP socket and its `sctp-proto` endpoint.
pub(super) struct Driver {
    socket: UdpSocket,
    endpoint: Endpoint,
    shared: Arc<EndpointShared>,
    settings: Arc<Settings>,
    assocs: HashMap<usize, Entry>,
    touched: Vec<usize>,
    finished: Vec<usize>,
    outq: VecDeque<(SocketAddr, Bytes)>,
    rx: BytesMut,
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
            rx: BytesMut::new(),
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

    fn touch(&mut self, key: usize) {
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
            let due: Vec<usize> = self
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
                    self.endpoint.reject_new_associations();
                }
                if self.assocs.is_empty() {
                    break;
                }
            }
            if let Err(e) = self.wait().await {
                self.fail(&e);
                break;
            }
        }
        tracing::debug!(local = %self.shared.local_addr, "sctp-proto baseline driver done");
    }

    /// Sleeps until the socket, a handle or a timer needs the driver.
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
            if self.rx.capacity() < MAX_DATAGRAM {
                self.rx = BytesMut::with_capacity(RX_BLOCK);
            }
            match self.socket.try_recv_buf_from(&mut self.rx) {
                Ok((n, from)) => {
                    let packet = self.rx.split_to(n).freeze();
                    self.handle_datagram(now, from, packet);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => self.refused(),
                Err(e) => tracing::debug!(error = %e, "UDP receive error"),
            }
        }
    }

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, packet: Bytes) {
        let summary = wire::scan(&packet);
        if summary.abort {
            tracing::debug!(
                peer = %from,
                causes = wire::abort_causes(&packet).unwrap_or_default(),
                "SCTP ABORT received"
            );
        }
        // `sctp-proto` cannot parse HEARTBEAT ACK (it would drop the whole
        // packet), so answers to our heartbeats are taken out first; a packet of
        // nothing else is still routed, to learn that the peer is alive.
        let (packet, deliver) = if summary.heartbeat_acks == 0 {
            (packet, true)
        } else {
            match wire::without_heartbeat_acks(&packet) {
                Some(rest) => (rest, true),
                None => (packet, false),
            }
        };
        let stray = summary.first_is_shutdown_ack.then(|| packet.clone());
        let header = packet_header(&packet);
        match self.endpoint.handle(now, from, None, None, packet) {
            None => {
                if let Some(reply) = stray.as_deref().and_then(wire::shutdown_complete_for) {
                    self.outq.push_back((from, reply));
                }
            }
            Some((handle, DatagramEvent::NewAssociation(proto))) => {
                self.accept_new(now, handle, from, proto, &summary);
            }
            Some((handle, DatagramEvent::AssociationEvent(event))) => {
                let Some(entry) = self.assocs.get(&handle.0) else {
                    return;
                };
                let mut st = lock(&entry.assoc.state);
                if st.ended.is_some() {
                    return;
                }
                st.last_heard = now;
                if st.inbound_header.is_none() && st.established {
                    st.inbound_header = header;
                }
                st.abort_seen |= summary.abort;
                st.shutdown_seen |= summary.shutdown;
                if let Some((true, init)) = summary.init
                    && !st.established
                {
                    st.peer_init = Some(init);
                    st.peer_initial_tsn = summary.initial_tsn;
                }
                if summary.shutdown_complete {
                    // The last step of a close the peer started: `sctp-proto`
                    // drops its streams on it, complete messages included.
                    st.drain_into_tail();
                }
                if deliver {
                    st.proto.handle_event(event);
                }
                drop(st);
                self.touch(handle.0);
            }
        }
    }

    fn accept_new(
        &mut self,
        now: Instant,
        handle: AssociationHandle,
        from: SocketAddr,
        proto: sctp_proto::Association,
        summary: &ChunkSummary,
    ) {
        let handshaking = self
            .assocs
            .values()
            .filter(|e| !lock(&e.assoc.state).established)
            .count();
        if !self.shared.listening.load(Ordering::Acquire) || handshaking >= MAX_HANDSHAKING {
            tracing::debug!(%from, handshaking, "refusing an incoming association");
            drop(proto);
            self.endpoint.handle_event(handle, EndpointEvent::drained());
            return;
        }
        let mut state = AssocState::new(proto, now);
        if let Some((false, init)) = summary.init {
            state.peer_init = Some(init);
            state.peer_initial_tsn = summary.initial_tsn;
        }
        let assoc = AssocShared::new(
            handle.0,
            from,
            Arc::clone(&self.settings),
            Arc::clone(&self.shared),
            state,
        );
        self.insert(assoc);
    }

    /// Polls one association: requests from its handles, liveness, timers,
    /// events and transmits.
    fn drive(&mut self, key: usize, now: Instant) {
        let Some(entry) = self.assocs.get_mut(&key) else {
            return;
        };
        entry.touched = false;
        let assoc = Arc::clone(&entry.assoc);
        // Cleared before looking, so a request made meanwhile wakes us again.
        assoc.needs_poll.store(false, Ordering::Release);
        let mut wake = Wakeups::default();
        let (deadline, ended) = {
            let mut guard = lock(&assoc.state);
            let st = &mut *guard;
            if st.ended.is_none() {
                self.handle_requests(st, now);
            }
            if st.ended.is_none() {
                self.check_liveness(st, now);
            }
            if st.ended.is_none() && st.proto.poll_timeout().is_some_and(|t| t <= now) {
                st.proto.handle_timeout(now);
            }
            self.poll_association(st, now, &mut wake);
            (self.next_deadline(st, now), st.ended.is_some())
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
        if ended {
            self.finished.push(key);
        } else if wake.offer {
            self.offer(assoc);
        }
    }

    fn handle_requests(&mut self, st: &mut AssocState, now: Instant) {
        if std::mem::take(&mut st.window_update_wanted) {
            self.request_sack(st, now);
        }
        if st.abort_requested {
            self.abort(st, Ended::Closed);
        } else if st.close_requested && !st.shutdown_started {
            if !st.established {
                // Half open: nothing was promised to the peer.
                st.shutdown_started = true;
                st.ended = Some(Ended::Closed);
                let _ = st.proto.close();
            } else if st.outbound_drained() {
                st.shutdown_started = true;
                // Acknowledge everything received first: a delayed SACK still
                // pending now goes out just before the SHUTDOWN, whose
                // Cumulative TSN Ack `poll_association` sets from it.
                self.request_sack(st, now);
                if let Err(e) = st.proto.shutdown() {
                    // Already shutting down because the peer asked first.
                    tracing::debug!(error = %e, "SCTP shutdown not started");
                }
            }
        }
    }

    /// Makes `sctp-proto` send a SACK now, to announce a window the application
    /// opened (see `AssocState::note_read`) or to acknowledge everything
    /// received before a SHUTDOWN. Does nothing before a packet from the peer
    /// after the handshake gave us `inbound_header`.
    fn request_sack(&mut self, st: &mut AssocState, now: Instant) {
        let (Some(header), Some(cumulative_tsn)) = (st.inbound_header, st.peer_cumulative_tsn())
        else {
            return;
        };
        let remote = st.proto.remote_addr();
        let packet = wire::sack_request(&header, cumulative_tsn);
        if let Some((_, DatagramEvent::AssociationEvent(event))) =
            self.endpoint.handle(now, remote, None, None, packet)
        {
            st.proto.handle_event(event);
        }
    }

    /// Sends ABORT (if we know the peer's tag yet) and ends the association.
    fn abort(&mut self, st: &mut AssocState, why: Ended) {
        if let Some(header) = st.peer_header {
            self.outq
                .push_back((st.proto.remote_addr(), wire::abort(&header)));
        }
        st.ended = Some(why);
        let _ = st.proto.close();
    }

    /// Heartbeats an idle peer; gives up on a silent one.
    fn check_liveness(&mut self, st: &mut AssocState, now: Instant) {
        let settings = &self.settings;
        if !st.established {
            if now.saturating_duration_since(st.created) >= settings.handshake_timeout {
                st.ended = Some(Ended::Unreachable(settings.handshake_timeout));
                let _ = st.proto.close();
            }
            return;
        }
        let silent = now.saturating_duration_since(st.last_heard);
        if silent >= settings.idle_timeout {
            tracing::warn!(peer = %st.proto.remote_addr(), ?silent, "SCTP peer unreachable");
            self.abort(st, Ended::Unreachable(settings.idle_timeout));
            return;
        }
        let since_heartbeat = st
            .last_heartbeat
            .map_or(silent, |t| now.saturating_duration_since(t));
        if silent >= settings.heartbeat_interval
            && since_heartbeat >= settings.heartbeat_interval
            && let Some(header) = st.peer_header
        {
            st.heartbeats_sent += 1;
            st.last_heartbeat = Some(now);
            self.outq.push_back((
                st.proto.remote_addr(),
                wire::heartbeat(&header, st.heartbeats_sent),
            ));
        }
    }

    fn next_deadline(&self, st: &AssocState, now: Instant) -> Option<Instant> {
        if st.ended.is_some() {
            return None;
        }
        let settings = &self.settings;
        let own = if st.established {
            let quiet_since = st
                .last_heartbeat
                .map_or(st.last_heard, |t| t.max(st.last_heard));
            (quiet_since + settings.heartbeat_interval).min(st.last_heard + settings.idle_timeout)
        } else {
            st.created + settings.handshake_timeout
        };
        let next = st.proto.poll_timeout().map_or(own, |t| t.min(own));
        // A timer `sctp-proto` left in the past must not make the driver spin.
        Some(next.max(now + std::time::Duration::from_millis(1)))
    }

    fn poll_association(&mut self, st: &mut AssocState, now: Instant, wake: &mut Wakeups) {
        loop {
            while let Some(event) = st.proto.poll() {
                self.on_event(st, event, now, wake);
            }
            let mut sent_shutdown_complete = false;
            while let Some(transmit) = st.proto.poll_transmit(now) {
                let Payload::RawEncode(packets) = transmit.payload else {
                    continue;
                };
                for mut packet in packets {
                    if let Some(cumulative_tsn) = st.peer_cumulative_tsn()
                        && let Some(fixed) =
                            wire::with_shutdown_cumulative_tsn_ack(&packet, cumulative_tsn)
                    {
                        // `sctp-proto` puts our own ack point there; a Linux
                        // peer aborts or ignores such a SHUTDOWN (see `wire`).
                        // Packets come in order, so a SACK sent with this
                        // SHUTDOWN has already updated `last_sack`.
                        packet = fixed;
                    }
                    if st.peer_header.is_none() {
                        st.peer_header = PeerHeader::from_outgoing(&packet);
                    }
                    sent_shutdown_complete |= wire::is_shutdown_complete(&packet);
                    if let Some(sack) = wire::sack_of(&packet) {
                        st.last_sack = Some(sack);
                        st.read_since_sack = 0;
                    }
                    self.outq.push_back((transmit.remote, packet));
                }
            }
            // The endpoint forgets an association when we reap it, not when
            // `sctp-proto` says so at the start of a shutdown (it would stop
            // routing the peer's SHUTDOWN ACK to it).
            while st.proto.poll_endpoint_event().is_some() {}
            if sent_shutdown_complete && st.ended.is_none() {
                // `sctp-proto` stays in SHUTDOWN-ACK-SENT after its last chunk of
                // a close we started; the close is complete, so finish it.
                st.shutdown_seen = true;
                st.drain_into_tail();
                let _ = st.proto.close();
                continue;
            }
            break;
        }
    }

    fn on_event(&mut self, st: &mut AssocState, event: Event, now: Instant, wake: &mut Wakeups) {
        match event {
            Event::Connected => {
                let server = st.proto.side().is_server();
                st.established = true;
                st.last_heard = now;
                st.counts = negotiate(&self.settings, server, st.peer_init);
                tracing::debug!(peer = %st.proto.remote_addr(), counts = ?st.counts, "SCTP association up");
                wake.changed = true;
                wake.offer = server;
            }
            Event::HandshakeFailed { reason } => {
                if st.ended.is_none() {
                    st.ended = Some(Ended::Failed(format!("SCTP handshake failed: {reason}")));
                }
                wake.ended = true;
            }
            Event::AssociationLost { reason } => {
                if st.ended.is_none() {
                    st.ended = Some(classify_loss(st, &reason, &self.settings));
                }
                tracing::debug!(peer = %st.proto.remote_addr(), %reason, ended = ?st.ended, "SCTP association lost");
                wake.ended = true;
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                st.push_ready(id);
                wake.readable = true;
            }
            Event::Stream(StreamEvent::BufferedAmountLow { id }) => wake.writable.push(id),
            Event::Stream(StreamEvent::Opened { .. }) => {
                // Streams the peer opens are read through `ready`; empty the
                // accept queue `sctp-proto` keeps for them.
                while st.proto.accept_stream().is_some() {}
            }
            _ => {}
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
            lock(&assoc.state).abort_requested = true;
            // Its `Drop` wakes us to carry out the abort.
            drop(handle);
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
                let _ = st.proto.close();
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
                self.endpoint
                    .handle_event(AssociationHandle(key), EndpointEvent::drained());
            }
        }
    }
}

/// The first 8 bytes of a packet (ports and verification tag), if it has them.
fn packet_header(packet: &[u8]) -> Option<[u8; 8]> {
    packet.get(..8).and_then(|h| h.try_into().ok())
}

/// Stream counts both ends agree on, computed from the peer's INIT or INIT ACK
/// as RFC 9260 section 5.1.1 defines them: we send on at most as many streams as
/// the peer accepts, and accept at most as many as it announced.
///
/// On the server side `sctp-proto` announces in its INIT ACK the minimum of our
/// and the client's counts (OS with OS, MIS with MIS), so we stay within what
/// the client derives from that announcement as well.
fn negotiate(settings: &Settings, server: bool, peer: Option<InitStreams>) -> StreamCounts {
    let Some(peer) = peer else {
        tracing::warn!("no INIT stream counts seen; assuming the configured ones");
        return StreamCounts {
            outbound: settings.streams,
            inbound: settings.max_inbound_streams,
        };
    };
    if server {
        let both = peer.outbound.min(peer.max_inbound);
        StreamCounts {
            outbound: settings.streams.min(both),
            inbound: settings.max_inbound_streams.min(both),
        }
    } else {
        StreamCounts {
            outbound: settings.streams.min(peer.max_inbound),
            inbound: settings.max_inbound_streams.min(peer.outbound),
        }
    }
}

/// Why `sctp-proto` lost an association we did not end ourselves.
fn classify_loss(st: &AssocState, reason: &AssociationError, settings: &Settings) -> Ended {
    if st.abort_seen {
        return Ended::Aborted;
    }
    match reason {
        AssociationError::TimedOut => Ended::Unreachable(settings.idle_timeout),
        AssociationError::ReceiveBufferExhausted => {
            Ended::Failed("receive buffer exhausted during reassembly".into())
        }
        _ if st.shutdown_seen => Ended::Closed,
        other => Ended::Failed(format!("SCTP association lost: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn settings(streams: u16, max_inbound_streams: u16) -> Settings {
        Settings {
            streams,
            max_inbound_streams,
            max_buffered_per_stream: 1,
            max_message: 1,
            heartbeat_interval: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(2),
            recv_window: 1,
            handshake_timeout: Duration::from_secs(1),
        }
    }

    fn init(outbound: u16, max_inbound: u16) -> Option<InitStreams> {
        Some(InitStreams {
            outbound,
            max_inbound,
        })
    }

    #[test]
    fn client_uses_fewer_streams_when_the_server_grants_fewer() {
        // Client asks 16 out, accepts 32; the server's INIT ACK grants 4 inbound.
        let c = negotiate(&settings(16, 32), false, init(16, 4));
        assert_eq!(
            c,
            StreamCounts {
                outbound: 4,
                inbound: 16
            }
        );
    }

    #[test]
    fn server_stays_within_what_the_client_derives() {
        // Server: 32 out, 4 in. Client INIT: OS 16, MIS 32.
        let s = negotiate(&settings(32, 4), true, init(16, 32));
        assert_eq!(
            s,
            StreamCounts {
                outbound: 16,
                inbound: 4
            }
        );
        // What the client derives from sctp-proto's INIT ACK (OS = min(16, 32),
        // MIS = min(32, 4)) must cover the server's choice.
        let c = negotiate(&settings(16, 32), false, init(16, 4));
        assert!(s.outbound <= c.inbound && c.outbound <= s.inbound);
    }
}
