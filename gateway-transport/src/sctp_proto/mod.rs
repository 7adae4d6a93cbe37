//! The former userspace backend, kept only as a benchmark baseline (feature
//! `sctp-proto-baseline`, `BackendKind::SctpProto`; the daemons never build it):
//! `sctp-proto` (sans-IO SCTP) driven on a tokio UDP socket with RFC 6951
//! framing, i.e. each UDP payload is one whole SCTP packet, CRC32c included, so a
//! Linux kernel peer with UDP encapsulation can talk to it.
//!
//! One driver task per UDP socket (`driver`) owns the socket and the
//! `sctp-proto` `Endpoint`; every association's protocol state sits in an
//! `AssocShared` that the driver and the [`Association`] handle both lock. Handles
//! write and read straight into and out of `sctp-proto` and wake the driver; the
//! driver feeds datagrams and timers in, drains events and transmits, and sleeps
//! until the socket, a handle or the next timer needs it. It never spins, never
//! queues without bound and never parses what it carries.
//!
//! SCTP ports: the SCTP port inside each packet equals the UDP port of its end
//! (a kernel peer must listen on the same SCTP port as its UDP encapsulation port,
//! 9899 by default).
//!
//! What `sctp-proto` lacks and this module adds: HEARTBEAT and idle detection,
//! ABORT, per-stream backpressure through `buffered_amount`, negotiated stream
//! counts as RFC 9260 defines them, and keeping received data across a graceful
//! close. The raw packets for those live in `wire`.
//!
//! Start reading at `connect`, `Listener::bind` and then `driver::Driver::run`.

mod driver;
mod wire;

use std::collections::VecDeque;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sctp_proto::{
    ClientConfig, Endpoint, EndpointConfig, PayloadProtocolIdentifier, ServerConfig,
    TransportConfig,
};
use tokio::sync::Notify;

use crate::sync::lock;
use crate::{AssociationConfig, Message, StreamCounts, TransportError};

/// Largest SCTP packet, i.e. UDP payload, we send, bytes: fits a 1500-byte
/// Ethernet MTU under an IPv6 (40) and UDP (8) header, and so under IPv4 too.
const MAX_PACKET: u32 = 1452;
/// `sctp-proto` checks bundling against its MTU without the next chunk's
/// 16-byte header and padding, so it may overshoot by this much, bytes.
const BUNDLING_SLACK: u32 = 20;
/// SCTP common header (12) plus DATA chunk header (16), bytes.
const DATA_OVERHEAD: u32 = 28;
/// Largest DATA fragment, bytes (a multiple of 4, so full fragments need no padding).
const MAX_FRAGMENT: u32 = MAX_PACKET - BUNDLING_SLACK - DATA_OVERHEAD;
/// Receive window above the largest message, bytes. The window must hold one
/// whole message (delivery is whole messages only; a message that cannot fit
/// aborts the association) plus room for the data behind it to keep flowing.
const RECV_WINDOW_HEADROOM: usize = 1024 * 1024;
/// Smallest receive window we advertise, bytes.
const MIN_RECV_WINDOW: usize = 2 * 1024 * 1024;
/// UDP socket buffers when the configuration leaves them unset, bytes. The
/// kernel caps them at `net.core.{r,w}mem_max`.
const DEFAULT_SOCKET_BUFFER: usize = 4 * 1024 * 1024;
/// First retransmission time-out, milliseconds (RFC 9260 says 1 s).
const RTO_INITIAL_MS: u64 = 1000;
/// Smallest retransmission time-out, milliseconds. Below RFC 9260's 1 s for
/// quicker loss recovery, but above the peer's 200 ms delayed SACK so that a
/// lone packet's late SACK does not look like a loss.
const RTO_MIN_MS: u64 = 500;
/// Largest retransmission time-out, milliseconds; liveness is judged by
/// heartbeats and `idle_timeout`, not by retransmission counts.
const RTO_MAX_MS: u64 = 10_000;
/// Payload protocol identifier of ordinary messages (opaque to SCTP).
const PPI_MESSAGE: PayloadProtocolIdentifier = PayloadProtocolIdentifier::Binary;
/// Marks a one-byte placeholder standing for an empty message, since SCTP cannot
/// carry zero-length user data.
const PPI_EMPTY: PayloadProtocolIdentifier = PayloadProtocolIdentifier::BinaryEmpty;

/// Limits derived once from [`AssociationConfig`], shared by the driver and the
/// handles of one socket.
#[derive(Debug, Clone)]
struct Settings {
    streams: u16,
    max_inbound_streams: u16,
    max_buffered_per_stream: usize,
    max_message: usize,
    heartbeat_interval: Duration,
    idle_timeout: Duration,
    /// Receive window we advertise, bytes.
    recv_window: usize,
    /// A half-open incoming association is dropped after this long.
    handshake_timeout: Duration,
}

impl Settings {
    fn new(config: &AssociationConfig) -> Self {
        Settings {
            streams: config.streams,
            max_inbound_streams: config.max_inbound_streams,
            max_buffered_per_stream: config.max_buffered_per_stream,
            max_message: config.max_message,
            heartbeat_interval: config.heartbeat_interval,
            idle_timeout: config.idle_timeout,
            recv_window: recv_window(config),
            handshake_timeout: config.connect_timeout,
        }
    }
}

/// The receive window for `config`, bytes.
fn recv_window(config: &AssociationConfig) -> usize {
    config
        .max_message
        .saturating_add(RECV_WINDOW_HEADROOM)
        .clamp(MIN_RECV_WINDOW, u32::MAX as usize)
}

/// `sctp-proto`'s per-association settings for `config`.
fn transport_config(config: &AssociationConfig) -> TransportConfig {
    let max_message = u32::try_from(config.max_message).unwrap_or(u32::MAX);
    let window = recv_window(config);
    TransportConfig::default()
        .with_max_num_outbound_streams(config.streams)
        .with_max_num_inbound_streams(config.max_inbound_streams)
        .with_max_send_message_size(max_message)
        .with_max_receive_message_size(max_message)
        .with_max_receive_buffer_size(u32::try_from(window).unwrap_or(u32::MAX))
        .with_rto_initial_ms(RTO_INITIAL_MS)
        .with_rto_min_ms(RTO_MIN_MS)
        .with_rto_max_ms(RTO_MAX_MS)
}

fn endpoint_config() -> Arc<EndpointConfig> {
    let mut config = EndpointConfig::new();
    config.max_payload_size(MAX_FRAGMENT);
    Arc::new(config)
}

/// Binds a non-blocking UDP socket with the configured buffer sizes.
fn bind_socket(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<tokio::net::UdpSocket, TransportError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    crate::ipv6_only(&socket, addr)?;
    // Best effort: a smaller buffer than asked for only costs throughput.
    let recv = config.recv_buffer.unwrap_or(DEFAULT_SOCKET_BUFFER);
    let send = config.send_buffer.unwrap_or(DEFAULT_SOCKET_BUFFER);
    if let Err(e) = socket.set_recv_buffer_size(recv) {
        tracing::debug!(error = %e, "cannot set SO_RCVBUF");
    }
    if let Err(e) = socket.set_send_buffer_size(send) {
        tracing::debug!(error = %e, "cannot set SO_SNDBUF");
    }
    socket.bind(&addr.into())?;
    Ok(tokio::net::UdpSocket::from_std(socket.into())?)
}

/// How an association ended, kept so that every later call can report it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ended {
    /// Graceful close by either side, or a local abort.
    Closed,
    /// The peer sent ABORT.
    Aborted,
    /// Nothing heard from the peer for this long.
    Unreachable(Duration),
    /// The peer's host refused the datagrams (ICMP port unreachable) during
    /// the handshake.
    Refused,
    /// Anything else that made `sctp-proto` give up.
    Failed(String),
}

impl Ended {
    fn to_error(&self) -> TransportError {
        match self {
            Ended::Closed => TransportError::Closed,
            Ended::Aborted => TransportError::Aborted,
            Ended::Unreachable(d) => TransportError::PeerUnreachable(*d),
            Ended::Refused => TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the peer's host refused the SCTP packets (nothing listens on that UDP port)",
            )),
            Ended::Failed(why) => TransportError::Protocol(why.clone()),
        }
    }
}

/// A set of stream numbers, one bit each.
#[derive(Debug)]
struct StreamSet(Box<[u64]>);

impl StreamSet {
    fn new() -> Self {
        StreamSet(vec![0; 1024].into_boxed_slice())
    }
    /// Adds `s`; false if it was already there.
    fn insert(&mut self, s: u16) -> bool {
        let (word, bit) = (usize::from(s / 64), 1u64 << (s % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }
    fn remove(&mut self, s: u16) {
        self.0[usize::from(s / 64)] &= !(1u64 << (s % 64));
    }
    fn contains(&self, s: u16) -> bool {
        self.0[usize::from(s / 64)] & (1u64 << (s % 64)) != 0
    }
}

/// Protocol state of one association plus what the handles and the driver tell
/// each other. Guarded by [`AssocShared::state`].
struct AssocState {
    proto: sctp_proto::Association,
    established: bool,
    /// Negotiated counts (valid once `established`).
    counts: StreamCounts,
    /// Stream counts from the peer's INIT (server side) or INIT ACK (client).
    peer_init: Option<wire::InitStreams>,
    /// Initial TSN from the peer's INIT or INIT ACK.
    peer_initial_tsn: Option<u32>,
    /// Streams that may have a complete message, in round-robin order.
    ready: VecDeque<u16>,
    ready_set: StreamSet,
    /// Outbound streams opened in `sctp-proto` with our low-water mark.
    opened: StreamSet,
    /// Messages moved out of `sctp-proto` before it discards its stream state
    /// at the end of a graceful close; delivered before anything else.
    tail: VecDeque<Message>,
    ended: Option<Ended>,
    /// A handle asked for a graceful close (or was dropped).
    close_requested: bool,
    /// `shutdown()` has been called on `proto`.
    shutdown_started: bool,
    /// A handle asked for an abort.
    abort_requested: bool,
    /// An ABORT arrived from the peer.
    abort_seen: bool,
    /// A SHUTDOWN-family chunk was seen in either direction.
    shutdown_seen: bool,
    /// Learnt from our outgoing packets; needed for our own ABORT and HEARTBEAT.
    peer_header: Option<wire::PeerHeader>,
    /// The first 8 bytes (ports, our tag) of the peer's packets; needed to
    /// hand `sctp-proto` a packet of our own making.
    inbound_header: Option<[u8; 8]>,
    /// Cumulative TSN ack and window of the last SACK we sent.
    last_sack: Option<(u32, u32)>,
    /// Bytes the application read since that SACK.
    read_since_sack: usize,
    /// The application opened a window the peer does not know about.
    window_update_wanted: bool,
    created: Instant,
    last_heard: Instant,
    last_heartbeat: Option<Instant>,
    heartbeats_sent: u64,
}

impl AssocState {
    fn new(proto: sctp_proto::Association, now: Instant) -> Self {
        AssocState {
            proto,
            established: false,
            counts: StreamCounts {
                outbound: 0,
                inbound: 0,
            },
            peer_init: None,
            peer_initial_tsn: None,
            ready: VecDeque::new(),
            ready_set: StreamSet::new(),
            opened: StreamSet::new(),
            tail: VecDeque::new(),
            ended: None,
            close_requested: false,
            shutdown_started: false,
            abort_requested: false,
            abort_seen: false,
            shutdown_seen: false,
            peer_header: None,
            inbound_header: None,
            last_sack: None,
            read_since_sack: 0,
            window_update_wanted: false,
            created: now,
            last_heard: now,
            last_heartbeat: None,
            heartbeats_sent: 0,
        }
    }

    /// Marks `stream` as possibly readable.
    fn push_ready(&mut self, stream: u16) {
        if self.ready_set.insert(stream) {
            self.ready.push_back(stream);
        }
    }

    /// The next complete message from a ready stream, taken out of `sctp-proto`
    /// (still fragmented; [`message_from`] joins it outside the lock).
    fn take_message(&mut self) -> Option<(u16, sctp_proto::Chunks)> {
        while let Some(stream) = self.ready.pop_front() {
            let read = match self.proto.stream(stream) {
                Ok(mut s) => s.read_sctp(),
                Err(e) => Err(e),
            };
            match read {
                Ok(Some(chunks)) => {
                    // Round robin: a stream with a backlog does not starve others.
                    self.ready.push_back(stream);
                    return Some((stream, chunks));
                }
                Ok(None) | Err(_) => self.ready_set.remove(stream),
            }
        }
        None
    }

    /// The last of the peer's TSNs we acknowledged: that of our last SACK, or
    /// the one before the peer's first before we sent any.
    fn peer_cumulative_tsn(&self) -> Option<u32> {
        self.last_sack
            .map(|(cumulative, _)| cumulative)
            .or_else(|| self.peer_initial_tsn.map(|t| t.wrapping_sub(1)))
    }

    /// Counts `len` bytes read by the application. True when the peer should
    /// hear of the window this opened: our last SACK offered less than half
    /// the window, and a quarter has been read since. `sctp-proto` only SACKs
    /// on arriving DATA, so without this a sender facing a closed window waits
    /// for its probe's delayed SACK (200 ms) every time the window fills.
    fn note_read(&mut self, len: usize, window: usize) -> bool {
        self.read_since_sack += len;
        let Some((_, advertised)) = self.last_sack else {
            return false;
        };
        let wanted = !self.window_update_wanted
            && (advertised as usize) < window / 2
            && self.read_since_sack >= window / 4;
        self.window_update_wanted |= wanted;
        wanted
    }

    /// Whether everything written has been acknowledged. `sctp-proto`'s
    /// `shutdown()` must wait for that: it sends SHUTDOWN at once (its in-flight
    /// counter is never updated) and transmits no queued DATA afterwards.
    fn outbound_drained(&mut self) -> bool {
        self.proto.stream_ids().into_iter().all(|id| {
            !self.opened.contains(id)
                || self
                    .proto
                    .stream(id)
                    .and_then(|s| s.buffered_amount())
                    .map_or(true, |b| b == 0)
        })
    }

    /// Moves every complete message out of `sctp-proto` into `tail`, before a
    /// graceful close makes it drop its streams.
    fn drain_into_tail(&mut self) {
        for stream in self.proto.stream_ids() {
            self.push_ready(stream);
        }
        while let Some((stream, chunks)) = self.take_message() {
            self.tail.push_back(message_from(stream, chunks));
        }
    }
}

/// Joins the fragments of a received message.
fn message_from(stream: u16, mut chunks: sctp_proto::Chunks) -> Message {
    let data = if chunks.ppi == PPI_EMPTY {
        Bytes::new()
    } else {
        let len = chunks.len();
        chunks.next(len).map(|c| c.bytes).unwrap_or_default()
    };
    Message { stream, data }
}

/// What the driver and the handles of one association share.
struct AssocShared {
    /// `sctp-proto`'s handle number on the driver's endpoint.
    key: usize,
    peer_addr: SocketAddr,
    settings: Arc<Settings>,
    endpoint: Arc<driver::EndpointShared>,
    state: Mutex<AssocState>,
    /// Set while the driver has this association on its to-do list.
    needs_poll: AtomicBool,
    /// A stream may have become readable, or the association ended.
    readable: Notify,
    /// The handshake finished, or the association ended.
    changed: Notify,
    /// Per outbound stream: its buffered amount fell to the limit, or the
    /// association ended.
    writable: Box<[Notify]>,
}

impl AssocShared {
    fn new(
        key: usize,
        peer_addr: SocketAddr,
        settings: Arc<Settings>,
        endpoint: Arc<driver::EndpointShared>,
        state: AssocState,
    ) -> Arc<Self> {
        let writable = (0..settings.streams).map(|_| Notify::new()).collect();
        Arc::new(AssocShared {
            key,
            peer_addr,
            settings,
            endpoint,
            state: Mutex::new(state),
            needs_poll: AtomicBool::new(false),
            readable: Notify::new(),
            changed: Notify::new(),
            writable,
        })
    }

    /// Asks the driver to poll this association soon.
    fn wake_driver(&self) {
        if !self.needs_poll.swap(true, Ordering::AcqRel) {
            lock(&self.endpoint.dirty).push(self.key);
        }
        self.endpoint.notify.notify_one();
    }

    /// Wakes every waiter: the association ended.
    fn wake_all(&self) {
        self.readable.notify_waiters();
        self.changed.notify_waiters();
        for n in self.writable.iter() {
            n.notify_waiters();
        }
    }
}

/// An established association (a handle on the driver's state for it).
pub struct Association {
    shared: Arc<AssocShared>,
}

impl fmt::Debug for Association {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("sctp_proto::Association")
            .field("peer", &self.shared.peer_addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Association {
    /// The last handle gone means nobody reads or writes any more: close
    /// gracefully, as closing a kernel socket would.
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        if st.ended.is_none() && !st.abort_requested {
            st.close_requested = true;
        }
        drop(st);
        self.shared.wake_driver();
    }
}

impl Association {
    /// Negotiated stream counts (see [`crate::Association::streams`]).
    pub(crate) fn streams(&self) -> StreamCounts {
        lock(&self.shared.state).counts
    }

    /// The peer's UDP address.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.shared.peer_addr
    }

    /// Queues one message; waits while the stream's buffered amount exceeds
    /// `max_buffered_per_stream` (see [`crate::Association::send`]). An empty
    /// message travels as one byte marked by its payload protocol identifier.
    pub(crate) async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        let settings = &self.shared.settings;
        if data.len() > settings.max_message {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                limit: settings.max_message,
            });
        }
        let (payload, ppi) = if data.is_empty() {
            (Bytes::from_static(&[0]), PPI_EMPTY)
        } else {
            (data, PPI_MESSAGE)
        };
        loop {
            let mut wait = None;
            {
                let mut st = lock(&self.shared.state);
                if let Some(ended) = &st.ended {
                    return Err(ended.to_error());
                }
                if stream >= st.counts.outbound {
                    return Err(TransportError::InvalidStream {
                        stream,
                        outbound: st.counts.outbound,
                    });
                }
                if st.close_requested || st.abort_requested {
                    return Err(TransportError::Closed);
                }
                let notify = &self.shared.writable[usize::from(stream)];
                let notified = notify.notified();
                let buffered = self.open_stream(&mut st, stream)?;
                if buffered <= settings.max_buffered_per_stream {
                    let mut s = st
                        .proto
                        .stream(stream)
                        .map_err(|e| TransportError::Protocol(e.to_string()))?;
                    s.write_sctp(&payload, ppi)
                        .map_err(|e| TransportError::Protocol(e.to_string()))?;
                } else {
                    wait = Some(notified);
                }
            }
            match wait {
                None => {
                    self.shared.wake_driver();
                    return Ok(());
                }
                Some(notified) => {
                    let mut notified = pin!(notified);
                    // Registered before the lock was released: the low-water
                    // event cannot slip between the check and the wait.
                    notified.as_mut().enable();
                    notified.await;
                }
            }
        }
    }

    /// Opens `stream` for sending on first use and returns its buffered amount.
    fn open_stream(&self, st: &mut AssocState, stream: u16) -> Result<usize, TransportError> {
        let protocol = |e: sctp_proto::Error| TransportError::Protocol(e.to_string());
        if !st.opened.contains(stream) {
            // The peer's data may have created the stream already.
            if st.proto.stream(stream).is_err() {
                st.proto
                    .open_stream(stream, PPI_MESSAGE)
                    .map_err(protocol)?;
            }
            let mut s = st.proto.stream(stream).map_err(protocol)?;
            s.set_buffered_amount_low_threshold(self.shared.settings.max_buffered_per_stream)
                .map_err(protocol)?;
            st.opened.insert(stream);
        }
        st.proto
            .stream(stream)
            .and_then(|s| s.buffered_amount())
            .map_err(protocol)
    }

    /// The next message, streams served round robin; cancel-safe, since a
    /// message leaves `sctp-proto` only inside one synchronous critical section
    /// (see [`crate::Association::recv`]).
    pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
        loop {
            let notified = self.shared.readable.notified();
            let mut notified = pin!(notified);
            notified.as_mut().enable();
            let mut wake = false;
            let taken = {
                let mut st = lock(&self.shared.state);
                if let Some(m) = st.tail.pop_front() {
                    return Ok(m);
                }
                match st.take_message() {
                    Some((stream, chunks)) => {
                        wake = st.note_read(chunks.len(), self.shared.settings.recv_window);
                        Some((stream, chunks, st.counts.inbound))
                    }
                    None => {
                        if let Some(ended) = &st.ended {
                            return Err(ended.to_error());
                        }
                        None
                    }
                }
            };
            if wake {
                self.shared.wake_driver();
            }
            match taken {
                Some((stream, chunks, inbound)) => {
                    if stream >= inbound {
                        tracing::warn!(
                            stream,
                            inbound,
                            "dropping a message on a stream never granted"
                        );
                        continue;
                    }
                    return Ok(message_from(stream, chunks));
                }
                None => notified.await,
            }
        }
    }

    /// Bytes written on `stream` and not yet acknowledged by the peer.
    pub(crate) fn buffered(&self, stream: u16) -> Option<usize> {
        let mut st = lock(&self.shared.state);
        Some(
            st.proto
                .stream(stream)
                .and_then(|s| s.buffered_amount())
                .unwrap_or(0),
        )
    }

    /// Graceful close: waits until everything sent is acknowledged and the
    /// SHUTDOWN exchange is complete (see [`crate::Association::close`]).
    pub(crate) async fn close(&self) -> Result<(), TransportError> {
        {
            let mut st = lock(&self.shared.state);
            if st.ended.is_none() {
                st.close_requested = true;
            }
        }
        self.shared.wake_driver();
        loop {
            let notified = self.shared.changed.notified();
            let mut notified = pin!(notified);
            notified.as_mut().enable();
            match &lock(&self.shared.state).ended {
                Some(Ended::Closed) => return Ok(()),
                Some(other) => return Err(other.to_error()),
                None => {}
            }
            notified.await;
        }
    }

    /// Sends ABORT and ends the association; our own calls then see `Closed`,
    /// the peer's `Aborted`.
    pub(crate) fn abort(&self) {
        let abort_packet = {
            let mut st = lock(&self.shared.state);
            if st.ended.is_none() {
                st.abort_requested = true;
                st.peer_header
                    .map(|header| (st.proto.remote_addr(), wire::abort(&header)))
            } else {
                None
            }
        };
        // Sent here rather than by the driver, which may never run again if the
        // caller is about to exit; the driver sends another, which is harmless.
        if let Some((to, packet)) = abort_packet
            && let Err(e) = self.shared.endpoint.abort_socket.send_to(&packet, to)
        {
            tracing::debug!(error = %e, %to, "sending ABORT directly failed; the driver retries");
        }
        self.shared.wake_driver();
    }

    /// Waits for the handshake of a client association.
    async fn established(self) -> Result<Self, TransportError> {
        loop {
            let notified = self.shared.changed.notified();
            let mut notified = pin!(notified);
            notified.as_mut().enable();
            {
                let st = lock(&self.shared.state);
                if let Some(ended) = &st.ended {
                    return Err(ended.to_error());
                }
                if st.established {
                    break;
                }
            }
            notified.await;
        }
        Ok(self)
    }
}

/// A UDP socket accepting associations.
#[derive(Debug)]
pub struct Listener {
    shared: Arc<driver::EndpointShared>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shared.listening.store(false, Ordering::Release);
        // Not yet accepted associations close; drop them outside the lock,
        // since their `Drop` wakes the driver.
        let pending = std::mem::take(&mut lock(&self.shared.accept).ready);
        drop(pending);
        self.shared.notify.notify_one();
    }
}

impl Listener {
    /// Binds the UDP socket and starts its driver.
    pub(crate) async fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Self, TransportError> {
        let socket = bind_socket(addr, config)?;
        let local_addr = socket.local_addr()?;
        let mut server = ServerConfig::new();
        server.transport = Arc::new(transport_config(config));
        let endpoint = Endpoint::new(endpoint_config(), Some(Arc::new(server)));
        let shared = driver::EndpointShared::new(local_addr, true, duplicate(&socket)?);
        driver::Driver::spawn(
            socket,
            endpoint,
            Arc::clone(&shared),
            Arc::new(Settings::new(config)),
            None,
        );
        tracing::debug!(%local_addr, "sctp-proto baseline listening");
        Ok(Listener { shared })
    }

    /// The bound UDP address.
    pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        Ok(self.shared.local_addr)
    }

    /// The next established association, oldest first.
    pub(crate) async fn accept(&self) -> Result<Association, TransportError> {
        loop {
            let notified = self.shared.accept_ready.notified();
            let mut notified = pin!(notified);
            notified.as_mut().enable();
            {
                let mut accept = lock(&self.shared.accept);
                if let Some(a) = accept.ready.pop_front() {
                    return Ok(a);
                }
                if let Some(why) = &accept.failed {
                    return Err(TransportError::Io(std::io::Error::other(why.clone())));
                }
            }
            notified.await;
        }
    }
}

/// A second descriptor of `socket` (same socket, same non-blocking mode).
fn duplicate(socket: &tokio::net::UdpSocket) -> Result<std::net::UdpSocket, TransportError> {
    Ok(socket2::SockRef::from(socket).try_clone()?.into())
}

/// Opens an association from an ephemeral UDP port to `addr`; the caller
/// bounds it with the connect time-out.
pub(crate) async fn connect(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<Association, TransportError> {
    let local: SocketAddr = if addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = bind_socket(local, config)?;
    // A connected socket hears ICMP port unreachable as ECONNREFUSED, so a
    // connect to a silent port fails at once instead of at the time-out.
    socket.connect(addr).await?;
    let local_addr = socket.local_addr()?;
    let mut client = ClientConfig::new();
    client.transport = Arc::new(
        transport_config(config)
            .with_local_port(local_addr.port())
            .with_remote_port(addr.port()),
    );
    let mut endpoint = Endpoint::new(endpoint_config(), None);
    let (handle, proto) = endpoint.connect(client, addr).map_err(|e| {
        TransportError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    })?;
    let shared = driver::EndpointShared::new(local_addr, false, duplicate(&socket)?);
    let settings = Arc::new(Settings::new(config));
    let assoc = AssocShared::new(
        handle.0,
        addr,
        Arc::clone(&settings),
        Arc::clone(&shared),
        AssocState::new(proto, Instant::now()),
    );
    driver::Driver::spawn(socket, endpoint, shared, settings, Some(Arc::clone(&assoc)));
    // Dropped by the caller's time-out, this handle closes the half-open
    // association and so ends the driver.
    Association { shared: assoc }.established().await
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: usize = 8 * 1024 * 1024;

    fn state() -> AssocState {
        AssocState::new(sctp_proto::Association::default(), Instant::now())
    }

    #[test]
    fn window_update_is_asked_for_only_after_a_low_window_was_announced() {
        let mut st = state();
        assert!(!st.note_read(WINDOW, WINDOW), "no SACK sent yet");

        st.last_sack = Some((7, WINDOW as u32));
        st.read_since_sack = 0;
        assert!(
            !st.note_read(WINDOW, WINDOW),
            "the peer already knows the window is open"
        );

        st.last_sack = Some((8, (WINDOW / 8) as u32));
        st.read_since_sack = 0;
        assert!(
            !st.note_read(WINDOW / 8, WINDOW),
            "an eighth read is not worth a SACK"
        );
        assert!(st.note_read(WINDOW / 8, WINDOW), "a quarter read is");
        assert!(st.window_update_wanted);
        assert!(
            !st.note_read(WINDOW, WINDOW),
            "asked once until the driver acts"
        );
    }

    #[test]
    fn stream_set_tracks_membership() {
        let mut set = StreamSet::new();
        assert!(set.insert(0) && set.insert(65535) && !set.insert(0));
        assert!(set.contains(65535) && !set.contains(64));
        set.remove(65535);
        assert!(!set.contains(65535) && set.contains(0));
    }

    #[test]
    fn receive_window_holds_the_largest_message() {
        let config = AssociationConfig::default();
        assert!(recv_window(&config) >= config.max_message + RECV_WINDOW_HEADROOM);
        let small = AssociationConfig {
            max_message: 1,
            ..AssociationConfig::default()
        };
        assert_eq!(recv_window(&small), MIN_RECV_WINDOW);
    }
}
