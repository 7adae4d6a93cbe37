//! The userspace backend: our own sans-I/O SCTP core (the `sctp` crate) driven on
//! a tokio UDP socket with RFC 6951 framing, i.e. each UDP payload is one whole
//! SCTP packet, CRC32c included, so a Linux kernel peer with UDP encapsulation
//! can talk to it.
//!
//! ```text
//!   handles (any task)                    driver task (one per UDP socket)
//!   ───────────────────                   ──────────────────────────────────
//!   send ──► sctp::Association::send ─┐   read a batch of datagrams
//!   recv ◄── sctp::Association::recv  │   ──► sctp::Endpoint::handle
//!   abort ─► ABORT on the wire at once├──►──► Association::handle / timeouts
//!   close/drop ─► close_requested     │   drain poll_transmit, poll_event
//!        wake_driver (dirty + notify)─┘   notify readable / writable / changed
//!                                         sleep: socket | notify | poll_timeout
//! ```
//!
//! One driver task per UDP socket (`driver`) owns the socket and the
//! `sctp::Endpoint`; every association's `sctp::Association` sits in an
//! `AssocShared` that the driver and the [`Association`] handles both lock.
//! Handles write and read straight into and out of the core and wake the
//! driver; the driver feeds datagrams and timers in, drains transmits and
//! events, and sleeps until the socket, a handle or the next deadline needs it.
//! It never spins, never queues without bound and never parses what it carries.
//!
//! The core does the protocol (handshake with a stateless cookie, HEARTBEAT,
//! ABORT, stream negotiation, graceful close that keeps received data readable,
//! SACKs when the application reopens the window); this module adds only what
//! the API promises on top: empty messages (a one-byte placeholder with its own
//! payload protocol identifier), `send` waiting on a stream's unsent bytes,
//! the accept queue, and ICMP port unreachable failing a client's handshake.
//!
//! UDP I/O is batched where the kernel offers it (`quinn-udp`): `recvmmsg`
//! with GRO on receive, GSO on send (see `driver`); `udp_offload = false` keeps
//! one datagram per send and per received buffer.
//!
//! SCTP ports: the SCTP port inside each packet equals the UDP port of its end
//! (a kernel peer must listen on the same SCTP port as its UDP encapsulation port,
//! 9899 by default).
//!
//! Start reading at `connect`, `Listener::bind` and then `driver::Driver::run`.

mod driver;

pub use driver::{ENDPOINT_EVENTS, driver_panics, endpoint_events};
mod sys;

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;
use tokio::sync::Notify;

use crate::config::{AssociationConfig, Congestion, UserspaceConfig};
use crate::error::TransportError;
use crate::message::{Message, StreamCounts};
use crate::sync::lock;

/// Receive window above the largest message, bytes. The window must hold one
/// whole message (delivery is whole messages only) plus room for the data
/// behind it to keep flowing.
const RECV_WINDOW_HEADROOM: usize = 1024 * 1024;
/// Smallest receive window we advertise, bytes.
const MIN_RECV_WINDOW: usize = 2 * 1024 * 1024;
/// UDP socket buffers when the configuration leaves them unset, bytes. The
/// kernel caps them at `net.core.{r,w}mem_max`.
const DEFAULT_SOCKET_BUFFER: usize = 4 * 1024 * 1024;
/// Payload protocol identifier of ordinary messages (opaque to SCTP; the value
/// the sctp-proto backend used, WebRTC's "binary", so both interoperate).
const PPID_MESSAGE: u32 = 53;
/// Marks a one-byte placeholder standing for an empty message, since SCTP cannot
/// carry zero-length user data (WebRTC's "binary empty").
const PPID_EMPTY: u32 = 57;
/// The reason our ABORT carries (User-Initiated Abort cause).
const ABORT_REASON: &str = "aborted by the application";

/// Limits derived once from [`AssociationConfig`], shared by the driver and the
/// handles of one socket.
#[derive(Debug, Clone)]
struct Settings {
    streams: u16,
    max_buffered_per_stream: usize,
    max_message: usize,
    idle_timeout: Duration,
    /// Receive window we advertise, bytes.
    recv_window: usize,
    /// GSO and GRO where the kernel offers them.
    udp_offload: bool,
}

impl Settings {
    fn new(config: &AssociationConfig) -> Self {
        Settings {
            streams: config.streams,
            max_buffered_per_stream: config.max_buffered_per_stream,
            max_message: config.max_message,
            idle_timeout: config.idle_timeout,
            recv_window: recv_window(config),
            udp_offload: config.userspace.udp_offload.enabled(),
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

/// The core's settings for `config`, validated, with errors naming our keys.
pub(crate) fn core_config(config: &AssociationConfig) -> Result<sctp::Config, TransportError> {
    let ours = &config.userspace;
    let defaults = sctp::Config::default();
    let core = sctp::Config {
        outbound_streams: config.streams,
        max_inbound_streams: config.max_inbound_streams,
        recv_window: u32::try_from(recv_window(config)).unwrap_or(u32::MAX),
        max_message: config.max_message,
        mtu: ours.mtu,
        idata: ours.idata,
        stream_scheduler: ours.stream_scheduler,
        rtt: sctp::rtt::RttConfig {
            initial: ours.rto_initial,
            min: ours.rto_min,
            max: ours.rto_max,
        },
        ack: sctp::ack::AckConfig {
            max_delay: ours.ack_delay,
            ..defaults.ack
        },
        congestion: congestion(ours)?,
        rack: ours.rack_tlp,
        tail_loss_probe: ours.rack_tlp,
        sack_immediately: ours.sack_immediately,
        pacing: ours.pacing,
        heartbeat_interval: config.heartbeat_interval,
        idle_timeout: config.idle_timeout,
        ..defaults
    };
    core.validate().map_err(|e| TransportError::Config {
        key: config_key(e.key),
        reason: e.reason,
    })?;
    Ok(core)
}

/// The checks of `[transport.userspace]` that are ours rather than the
/// core's, then the core's.
fn validate(config: &AssociationConfig) -> Result<(), TransportError> {
    let ours = &config.userspace;
    let bad = |key, reason: &str| {
        Err(TransportError::Config {
            key,
            reason: reason.to_owned(),
        })
    };
    if ours.initial_window == Some(0) {
        return bad(
            "userspace.initial_window",
            "must be above zero (or left unset)",
        );
    }
    if ours.rto_min.is_zero() {
        return bad("userspace.rto_min", "must be above zero");
    }
    if ours.rto_initial < ours.rto_min {
        return bad("userspace.rto_initial", "must be at least rto_min");
    }
    if ours.rto_max < ours.rto_min {
        return bad("userspace.rto_max", "must be at least rto_min");
    }
    core_config(config).map(drop)
}

/// The congestion controller `config` names.
fn congestion(
    config: &UserspaceConfig,
) -> Result<Arc<dyn sctp::congestion::ControllerFactory>, TransportError> {
    let initial_window = config.initial_window.map(|w| w as u64);
    if !(1..=sctp::congestion::MAX_FLOWS).contains(&config.flows) {
        return Err(TransportError::Config {
            key: "userspace.flows",
            reason: format!("must be between 1 and {}", sctp::congestion::MAX_FLOWS),
        });
    }
    Ok(match config.congestion {
        Congestion::Reno => Arc::new(sctp::congestion::RenoConfig { initial_window }),
        Congestion::Cubic => Arc::new(sctp::congestion::CubicConfig {
            initial_window,
            flows: config.flows,
        }),
        Congestion::Bbr => Arc::new(sctp::congestion::BbrConfig { initial_window }),
    })
}

/// The `AssociationConfig` key behind a key of `sctp::Config`.
fn config_key(core_key: &'static str) -> &'static str {
    match core_key {
        "outbound_streams" => "streams",
        "mtu" => "userspace.mtu",
        "rtt" => "userspace.rto_min",
        "ack.max_delay" => "userspace.ack_delay",
        other => other,
    }
}

/// 32 bytes from the operating system's generator: the core's only randomness
/// (verification tags, initial TSNs, the cookie key).
fn seed() -> [u8; 32] {
    rand::rng().random()
}

/// Binds a non-blocking UDP socket with the configured buffer sizes.
fn bind_socket(
    addr: SocketAddr,
    config: &AssociationConfig,
) -> Result<tokio::net::UdpSocket, TransportError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    crate::host::ipv6_only(&socket, addr)?;
    // Best effort: a smaller buffer than asked for only costs throughput.
    let recv = config.recv_buffer.unwrap_or(DEFAULT_SOCKET_BUFFER);
    let send = config.send_buffer.unwrap_or(DEFAULT_SOCKET_BUFFER);
    if let Err(e) = socket.set_recv_buffer_size(recv) {
        tracing::debug!(error = %e, "cannot set SO_RCVBUF");
    }
    if let Err(e) = socket.set_send_buffer_size(send) {
        tracing::debug!(error = %e, "cannot set SO_SNDBUF");
    }
    // ICMP "port unreachable" ends an association at once (driver::refused).
    if let Err(e) = sys::set_recv_errors(&socket, addr.is_ipv6()) {
        tracing::debug!(error = %e, "cannot set IP_RECVERR: a peer gone is noticed by heartbeats only");
    }
    socket.bind(&addr.into())?;
    Ok(tokio::net::UdpSocket::from_std(socket.into())?)
}

/// How an association ended, kept so that every later call can report it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ended {
    /// Graceful close by either side, or a local abort.
    Closed,
    /// The peer sent ABORT, or restarted (its state is gone all the same).
    Aborted,
    /// Nothing heard from the peer for this long.
    Unreachable(Duration),
    /// The peer's host refused the datagrams (ICMP port unreachable quoting
    /// the association's own packet).
    Refused,
    /// Anything else that ended it (a protocol violation, a failed socket).
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

/// One association's core state plus what the handles and the driver tell
/// each other. Guarded by [`AssocShared::state`].
struct AssocState {
    proto: sctp::Association,
    /// Accepted by our listener (offered to `accept` once connected).
    server: bool,
    established: bool,
    /// Negotiated counts (valid once `established`).
    counts: StreamCounts,
    ended: Option<Ended>,
    /// A handle asked for a graceful close (or the last one was dropped).
    close_requested: bool,
    /// `close` has been called on `proto`.
    close_started: bool,
    /// A handle aborted: the ABORT is already on its way.
    aborted: bool,
    /// Streams whose `send` waits for their unsent bytes to fall.
    blocked: Vec<u16>,
    /// Bytes the application read since it last woke the driver.
    read_since_wake: usize,
}

impl AssocState {
    fn new(proto: sctp::Association, server: bool) -> Self {
        AssocState {
            proto,
            server,
            established: false,
            counts: StreamCounts {
                outbound: 0,
                inbound: 0,
            },
            ended: None,
            close_requested: false,
            close_started: false,
            aborted: false,
            blocked: Vec::new(),
            read_since_wake: 0,
        }
    }

    /// Bytes accepted by `send` on `stream` and not yet sent once.
    fn unsent(&self, stream: u16) -> usize {
        self.proto.stream_stats(stream).map_or(0, |s| s.unsent)
    }
}

/// What the driver and the handles of one association share.
struct AssocShared {
    /// The core's handle on the driver's endpoint.
    key: sctp::AssocHandle,
    /// The peer's UDP address when the association began (the core's
    /// `remote` follows the peer's port changes).
    peer_addr: SocketAddr,
    settings: Arc<Settings>,
    endpoint: Arc<driver::EndpointShared>,
    state: Mutex<AssocState>,
    /// Set while the driver has this association on its to-do list.
    needs_poll: AtomicBool,
    /// A message may be readable, or the association ended.
    readable: Notify,
    /// The handshake finished, or the association ended.
    changed: Notify,
    /// Per outbound stream: its unsent bytes fell to the limit, or the
    /// association ended.
    writable: Box<[Notify]>,
}

impl AssocShared {
    fn new(
        key: sctp::AssocHandle,
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

/// What one UDP socket's batched I/O did: whether the kernel offered GSO and
/// GRO and how many datagrams used them. For tests and benchmarks.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Most datagrams one send may carry now (1: no GSO, or the kernel
    /// refused it).
    pub max_gso_segments: usize,
    /// GRO is on for the socket.
    pub gro: bool,
    /// Datagrams handed to the kernel.
    pub datagrams_sent: u64,
    /// Sends that carried two or more datagrams (GSO).
    pub gso_sends: u64,
    /// Datagrams sent in those.
    pub gso_datagrams: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Receive buffers that held two or more datagrams (GRO).
    pub gro_buffers: u64,
    /// Datagrams received in those.
    pub gro_datagrams: u64,
}

/// An established association (a handle on the driver's state for it).
pub struct Association {
    shared: Arc<AssocShared>,
}

impl fmt::Debug for Association {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("userspace::Association")
            .field("peer", &self.shared.peer_addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Association {
    /// The last handle gone means nobody reads or writes any more: close
    /// gracefully, as closing a kernel socket would.
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        if st.ended.is_none() {
            st.close_requested = true;
        }
        drop(st);
        self.shared.wake_driver();
    }
}

impl Association {
    /// Negotiated stream counts (see the facade's `Association::streams`).
    pub(crate) fn streams(&self) -> StreamCounts {
        lock(&self.shared.state).counts
    }

    /// Whether the handshake negotiated I-DATA (see the facade's `Association::idata`).
    pub(crate) fn idata(&self) -> bool {
        lock(&self.shared.state).proto.idata()
    }

    /// The peer's UDP address as it is now: a NAT between us may have given
    /// the peer a new port since the association began (RFC 6951 5.4, see
    /// `sctp::Endpoint`), and the core follows it.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        lock(&self.shared.state).proto.remote()
    }

    /// The protocol core's transmission state and counts (see
    /// the facade's `Association::sctp_stats`).
    pub(crate) fn sctp_stats(&self) -> sctp::Stats {
        lock(&self.shared.state).proto.stats()
    }

    /// Batched I/O counters of the UDP socket this association uses (shared
    /// with every association of a listener).
    #[doc(hidden)]
    pub fn udp_stats(&self) -> UdpStats {
        self.shared.endpoint.counters.snapshot()
    }

    /// Queues one message; waits while the stream's unsent bytes exceed
    /// `max_buffered_per_stream` (see the facade's `Association::send`). An empty
    /// message travels as one byte marked by its payload protocol identifier.
    pub(crate) async fn send(&self, stream: u16, data: Bytes) -> Result<(), TransportError> {
        let settings = &self.shared.settings;
        if data.len() > settings.max_message {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                limit: settings.max_message,
            });
        }
        let (payload, ppid) = if data.is_empty() {
            (Bytes::from_static(&[0]), PPID_EMPTY)
        } else {
            (data, PPID_MESSAGE)
        };
        loop {
            let notified = {
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
                if st.close_requested {
                    return Err(TransportError::Closed);
                }
                let notified = self.shared.writable[usize::from(stream)].notified();
                if st.unsent(stream) <= settings.max_buffered_per_stream {
                    st.proto
                        .send(stream, payload.clone(), ppid, false)
                        .map_err(|e| match e {
                            sctp::SendError::InvalidStream(_) => TransportError::InvalidStream {
                                stream,
                                outbound: st.counts.outbound,
                            },
                            sctp::SendError::Closed => TransportError::Closed,
                            sctp::SendError::Empty => TransportError::Protocol(e.to_string()),
                        })?;
                    None
                } else {
                    if !st.blocked.contains(&stream) {
                        st.blocked.push(stream);
                    }
                    Some(notified)
                }
            };
            match notified {
                None => {
                    self.shared.wake_driver();
                    return Ok(());
                }
                Some(notified) => {
                    let mut notified = pin!(notified);
                    // Registered before the lock was released (`notify_waiters`
                    // wakes futures created before it, enabled or not): the
                    // driver's wake-up cannot slip between the check and the wait.
                    notified.as_mut().enable();
                    notified.await;
                }
            }
        }
    }

    /// The next message, in the order the core delivers them; cancel-safe,
    /// since a message leaves the core only inside one synchronous critical
    /// section (see the facade's `Association::recv`).
    pub(crate) async fn recv(&self) -> Result<Message, TransportError> {
        loop {
            let notified = self.shared.readable.notified();
            let mut notified = pin!(notified);
            notified.as_mut().enable();
            let (message, wake) = {
                let mut st = lock(&self.shared.state);
                // An ABORT discards what was received, as kernel SCTP does.
                if st.ended == Some(Ended::Aborted) {
                    return Err(TransportError::Aborted);
                }
                match st.proto.recv() {
                    Some(m) => {
                        // The core SACKs at once when reading reopened the
                        // window; the driver must run to send it.
                        st.read_since_wake += m.data.len();
                        let wake = st.read_since_wake >= self.shared.settings.recv_window / 8
                            || !st.proto.readable();
                        if wake {
                            st.read_since_wake = 0;
                        }
                        (Some(m), wake)
                    }
                    None => match &st.ended {
                        Some(ended) => return Err(ended.to_error()),
                        None => (None, false),
                    },
                }
            };
            let Some(message) = message else {
                notified.await;
                continue;
            };
            if wake {
                self.shared.wake_driver();
            }
            let data = if message.ppid == PPID_EMPTY {
                Bytes::new()
            } else {
                message.data
            };
            return Ok(Message {
                stream: message.stream,
                data,
            });
        }
    }

    /// Bytes accepted by `send` on `stream` and not yet sent (in-flight data
    /// is not counted: it no longer waits in our queue).
    pub(crate) fn buffered(&self, stream: u16) -> Option<usize> {
        Some(lock(&self.shared.state).unsent(stream))
    }

    /// [`buffered`](Self::buffered) of each stream, under one lock.
    pub(crate) fn buffered_each(
        &self,
        streams: impl IntoIterator<Item = u16>,
        out: &mut Vec<(u16, u64)>,
    ) {
        let state = lock(&self.shared.state);
        out.extend(
            streams
                .into_iter()
                .map(|stream| (stream, state.unsent(stream) as u64)),
        );
    }

    /// Graceful close: waits until everything sent is acknowledged and the
    /// SHUTDOWN exchange is complete (see the facade's `Association::close`).
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
        let mut packets = Vec::new();
        {
            let mut st = lock(&self.shared.state);
            if st.ended.is_none() {
                let now = Instant::now();
                st.aborted = true;
                st.ended = Some(Ended::Closed);
                st.proto.abort(now, ABORT_REASON);
                while let Some(t) = st.proto.poll_transmit(now) {
                    packets.push(t);
                }
            }
        }
        // Sent here rather than by the driver, which may never run again if the
        // caller is about to exit.
        for t in packets {
            if let Err(e) = self
                .shared
                .endpoint
                .abort_socket
                .send_to(&t.contents, t.destination)
            {
                tracing::debug!(error = %e, to = %t.destination, "sending ABORT failed");
            }
        }
        self.shared.wake_all();
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
        let core = core_config(config)?;
        let socket = bind_socket(addr, config)?;
        let local_addr = socket.local_addr()?;
        let mut endpoint = sctp::Endpoint::new(
            core.clone(),
            local_addr.port(),
            true,
            seed(),
            Instant::now(),
        )
        .map_err(|e| TransportError::Config {
            key: config_key(e.key),
            reason: e.reason,
        })?;
        endpoint.set_limits(config.listener_limits);
        let shared = driver::EndpointShared::new(local_addr, true, duplicate(&socket)?);
        driver::Driver::spawn(
            socket,
            endpoint,
            Arc::clone(&shared),
            Arc::new(Settings::new(config)),
            None,
            Some(driver::Restart {
                core,
                limits: config.listener_limits,
            }),
        )?;
        tracing::debug!(%local_addr, "userspace SCTP listening");
        Ok(Listener { shared })
    }

    /// The bound UDP address.
    pub(crate) fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        Ok(self.shared.local_addr)
    }

    /// Batched I/O counters of the listening socket.
    #[doc(hidden)]
    pub fn udp_stats(&self) -> UdpStats {
        self.shared.counters.snapshot()
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
                    return Err(TransportError::ListenerStopped(why.clone()));
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
    let core = core_config(config)?;
    let local: SocketAddr = if addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    // Not connected: a connected socket would drop the peer's datagrams from
    // a new port (the driver's notes on NAT rebinding). Its error queue still
    // reports an ICMP port unreachable quoting our INIT, so a connect to a
    // silent port fails at once instead of at the time-out.
    let socket = bind_socket(local, config)?;
    let local_addr = socket.local_addr()?;
    let now = Instant::now();
    let mut endpoint =
        sctp::Endpoint::new(core, local_addr.port(), false, seed(), now).map_err(|e| {
            TransportError::Config {
                key: config_key(e.key),
                reason: e.reason,
            }
        })?;
    let (handle, proto) = endpoint.connect(now, addr, addr.port());
    let shared = driver::EndpointShared::new(local_addr, false, duplicate(&socket)?);
    let settings = Arc::new(Settings::new(config));
    let assoc = AssocShared::new(
        handle,
        addr,
        Arc::clone(&settings),
        Arc::clone(&shared),
        AssocState::new(proto, false),
    );
    driver::Driver::spawn(
        socket,
        endpoint,
        shared,
        settings,
        Some(Arc::clone(&assoc)),
        None,
    )?;
    // Dropped by the caller's time-out, this handle closes the half-open
    // association (the core aborts a handshake it is asked to close), and so
    // ends the driver.
    Association { shared: assoc }.established().await
}

/// Our SCTP core over UDP, registered in `crate::backend`.
#[derive(Debug)]
pub(crate) struct UserspaceBackend;

impl crate::contract::Backend for UserspaceBackend {
    type Association = Association;
    type Listener = Listener;

    fn validate(config: &AssociationConfig) -> Result<(), TransportError> {
        validate(config)
    }

    async fn bind(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Listener, TransportError> {
        Listener::bind(addr, config).await
    }

    async fn connect(
        addr: SocketAddr,
        config: &AssociationConfig,
    ) -> Result<Association, TransportError> {
        connect(addr, config).await
    }
}

crate::contract::by_inherent_methods!(Association, Listener; buffered_each, idata, sctp_stats);

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn defaults_make_a_valid_core_config() {
        let core = core_config(&AssociationConfig::default()).expect("valid");
        assert_eq!(
            core.stream_scheduler,
            sctp::stream_scheduler::StreamSchedulerKind::Fcfs
        );
        assert_eq!(core.rtt.min, Duration::from_millis(500));
        assert_eq!(core.ack.max_delay, Duration::from_millis(200));
        assert!(core.max_message < core.recv_window as usize);
    }

    #[test]
    fn core_errors_name_our_keys() {
        let bad = |change: fn(&mut UserspaceConfig)| {
            let mut config = AssociationConfig::default();
            change(&mut config.userspace);
            match validate(&config) {
                Err(TransportError::Config { key, .. }) => key,
                other => panic!("expected a config error, got {other:?}"),
            }
        };
        assert_eq!(bad(|c| c.mtu = 500), "userspace.mtu");
        assert_eq!(
            bad(|c| c.ack_delay = Duration::from_millis(600)),
            "userspace.ack_delay"
        );
        assert_eq!(
            bad(|c| c.rto_min = Duration::from_secs(20)),
            "userspace.rto_initial"
        );
        // The core's own check of the same, under our key.
        let mut config = AssociationConfig::default();
        config.userspace.rto_min = Duration::from_secs(20);
        match core_config(&config) {
            Err(TransportError::Config { key, .. }) => assert_eq!(key, "userspace.rto_min"),
            other => panic!("expected a config error, got {other:?}"),
        }
        assert_eq!(bad(|c| c.flows = 0), "userspace.flows");
        assert_eq!(
            bad(|c| c.initial_window = Some(0)),
            "userspace.initial_window"
        );
    }
}
