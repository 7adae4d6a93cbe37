//! One association's state machine (RFC 9260 sections 4-9): the handshake
//! from either side, data transfer through `send`/`recv`, timers, heartbeats,
//! the shutdown sequence and abort.
//!
//! ```text
//!   client                                  server (endpoint, no state)
//!   CookieWait ── INIT ──────────────────►  INIT ACK with a signed cookie
//!   CookieEchoed ◄─ INIT ACK ─────────────
//!                ── COOKIE ECHO + DATA ──►  Association::accept: Established
//!   Established  ◄─ COOKIE ACK + SACK ────
//!
//!   Established ─shutdown()─► ShutdownPending ─all acked─► ShutdownSent ─SHUTDOWN ACK─► Closed
//!   Established ─SHUTDOWN──► ShutdownReceived ─all acked─► ShutdownAckSent ─COMPLETE──► Closed
//! ```
//!
//! Input: `handle` (a packet the endpoint routed here) and `handle_timeout`.
//! Output: `poll_transmit` (datagrams, drained until `None`), `poll_event`,
//! `poll_timeout` (the next deadline), and `recv` for whole messages.
//!
//! Timers (RFC 9260 section 6.3 and 14): T1 (INIT or COOKIE ECHO
//! retransmission), T3-rtx (data retransmission), T2 (SHUTDOWN or SHUTDOWN
//! ACK retransmission), the delayed SACK (the ack policy's deadline), the
//! heartbeat and the idle limit. They are plain `Option<Instant>` fields; the
//! earliest is `poll_timeout`.
//!
//! Restart and collisions (RFC 9260 5.2): an INIT in any state is answered
//! with an INIT ACK whose cookie carries the tie-tags; a COOKIE ECHO reaching
//! an existing association is sorted by the table of 5.2.4 (the endpoint
//! recognises case A, a peer restart, and replaces the association; cases B
//! and D arrive here; C is discarded).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::{debug, trace};

use crate::ack::{AckPolicy, Arrival, DelayedAck};
use crate::chunk::{Chunk, DataChunk, ErrorCause, Init, Packet, cause, kind};
use crate::config::Config;
use crate::congestion::Controller;
use crate::cookie::{CookieKey, CookieState};
use crate::pacer::Pacer;
use crate::recv::{ReceivePool, Receiver, Verdict};
use crate::rtt::RttEstimator;
use crate::send::{Counters, SendError, Sender, StreamStats};
use crate::wire::{self, COMMON_HEADER_LEN};

/// Bytes of HEARTBEAT information we send: the send time (µs since the
/// association began) and a random nonce (RFC 9260 8.3).
const HEARTBEAT_INFO_LEN: usize = 16;
/// Probes of one size sent before that size counts as not fitting the path
/// (RFC 8899 MAX_PROBES).
const MAX_PROBES: u32 = 3;
/// The search stops when the largest size that fits and the smallest that
/// did not are this close, bytes.
const PMTU_SEARCH_GRANULARITY: usize = 32;
/// A path that has not reached the configured maximum is probed again after
/// this long (RFC 8899 PMTU_RAISE_TIMER).
const PMTU_RAISE_INTERVAL: Duration = Duration::from_secs(600);
/// Shortest tail-loss probe time-out (RFC 8985 7.2 uses the clock's granularity; a
/// floor keeps a sub-millisecond loopback RTT from probing every packet).
const MIN_PTO: Duration = Duration::from_millis(10);
/// Shortest wait for a probe's answer: a probe's loss is not a congestion
/// signal, so it has its own timer rather than the T3 one.
const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// The most slack a Cookie Preservative asks for beyond the staleness the
/// peer measured (RFC 9260 5.2.6: "no more than 1 second beyond the
/// measured RTT"), ms.
const MAX_PRESERVATIVE_SLACK_MS: u64 = 1000;

/// The association's state (RFC 9260 section 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// INIT sent, waiting for INIT ACK.
    CookieWait,
    /// COOKIE ECHO sent, waiting for COOKIE ACK.
    CookieEchoed,
    /// Data flows both ways.
    Established,
    /// The application asked to close; outstanding data drains first.
    ShutdownPending,
    /// SHUTDOWN sent.
    ShutdownSent,
    /// The peer sent SHUTDOWN; our outstanding data drains first.
    ShutdownReceived,
    /// SHUTDOWN ACK sent.
    ShutdownAckSent,
    /// Over: closed, aborted or lost.
    Closed,
}

/// Why an association ended other than by a graceful close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssociationError {
    /// The peer sent ABORT.
    #[error("the peer aborted the association{}", describe(.0))]
    Aborted(Vec<ErrorCause>),
    /// We aborted (the application, or a protocol violation by the peer).
    #[error("the association was aborted locally: {0}")]
    LocallyAborted(String),
    /// The peer stopped answering (retransmission limit or idle time-out).
    #[error("the peer is unreachable")]
    Unreachable,
    /// The handshake did not complete (INIT or COOKIE ECHO unanswered, or
    /// the cookie went stale).
    #[error("the handshake did not complete")]
    HandshakeFailed,
    /// The peer restarted (RFC 9260 5.2.4 case A): its streams' state is gone.
    #[error("the peer restarted")]
    PeerRestarted,
    /// The peer's host answered our packets with ICMP "port unreachable"
    /// quoting the peer's verification tag: over UDP (RFC 6951) nothing
    /// listens on that port any more.
    #[error("the peer's port is unreachable (nothing listens there any more)")]
    PortUnreachable,
}

fn describe(causes: &[ErrorCause]) -> String {
    causes
        .iter()
        .map(|c| match c.code {
            cause::USER_ABORT | cause::PROTOCOL_VIOLATION => {
                format!(" ({})", String::from_utf8_lossy(&c.info))
            }
            code => format!(" (cause {code})"),
        })
        .collect()
}

/// Something the application should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// The association closed gracefully; messages received before it stay
    /// readable.
    Closed,
    /// The association ended otherwise.
    Lost(AssociationError),
}

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub destination: SocketAddr,
    /// One whole SCTP packet.
    pub contents: Bytes,
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The stream it came on.
    pub stream: u16,
    /// Its payload protocol identifier.
    pub ppid: u32,
    /// Sent unordered.
    pub unordered: bool,
    /// The message, boundaries as sent.
    pub data: Bytes,
}

/// A snapshot of an association's transmission state, for operators and
/// benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes.
    pub ssthresh: u64,
    /// Bytes in flight.
    pub flight: u64,
    /// The peer's receive window as last computed, bytes.
    pub peer_rwnd: u64,
    /// DATA chunks sent and not cumulatively acknowledged.
    pub outstanding: usize,
    /// Of those, marked for retransmission.
    pub marked: usize,
    /// Smoothed round-trip time, once measured.
    pub srtt: Option<Duration>,
    /// Retransmission time-out, back-off included.
    pub rto: Duration,
    /// Packet size in use (the path MTU as far as known), bytes.
    pub mtu: usize,
    /// The congestion controller's name.
    pub controller: &'static str,
    /// Counts since the association began.
    pub counters: Counters,
}

/// What the endpoint hands an association: the packet, the UDP address it
/// came from, and the verified cookie of a COOKIE ECHO it carried.
#[derive(Debug)]
pub struct Incoming {
    pub(crate) packet: Packet,
    pub(crate) from: SocketAddr,
    pub(crate) cookie: Option<CookieState>,
}

/// Whether `packet` proves its sender is the peer of the association whose
/// own tag is `my_tag`, so that its UDP source port may become the
/// association's (RFC 6951 5.4: the port is stored "after finding the SCTP
/// association (which includes checking the verification tag)").
///
/// Only packets that must carry our own tag count: an INIT (tag 0), a
/// COOKIE ECHO (checked against its cookie, which is sealed with the address
/// it was issued to) and an ABORT or SHUTDOWN COMPLETE with the T bit (which
/// carry the peer's tag, learnt by anyone who saw one of our packets) are
/// verified otherwise or not at all, so none of them moves the port.
pub(crate) fn proves_peer(packet: &Packet, my_tag: u32) -> bool {
    if packet.vtag != my_tag || my_tag == 0 {
        return false;
    }
    match packet.chunks.first() {
        None | Some(Chunk::Init(_) | Chunk::CookieEcho(_)) => false,
        Some(Chunk::Abort { reflected, .. } | Chunk::ShutdownComplete { reflected }) => !reflected,
        Some(_) => true,
    }
}

/// What every association of one endpoint shares with it.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) key: CookieKey,
    /// The instant cookie times count from.
    pub(crate) epoch: Instant,
    pub(crate) local_port: u16,
    /// The receive memory the endpoint's associations share.
    pub(crate) pool: Arc<ReceivePool>,
}

impl Shared {
    pub(crate) fn now_ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Packetization-layer path MTU discovery in the manner of RFC 8899: packets
/// start at the size every IPv6 path carries and HEARTBEAT probes padded with
/// PAD chunks (RFC 4820) search upwards to the configured maximum. A lost
/// probe is neither congestion nor a path error. Not implemented: black-hole
/// detection (falling back when full-sized packets stop getting through),
/// since retransmissions keep the size their chunks were cut to.
#[derive(Debug)]
struct Plpmtu {
    /// Packets are built to this size, bytes.
    current: usize,
    /// The configured maximum, bytes.
    max: usize,
    /// The smallest size known not to fit, bytes (max + 1 when none).
    too_big: usize,
    /// The probe in flight: its size, nonce, deadline and how many of that
    /// size were sent.
    probe: Option<Probe>,
    /// A probe should go as soon as nothing else waits.
    due: bool,
    /// When a probe becomes due again (the raise timer).
    next: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    size: usize,
    nonce: u64,
    deadline: Instant,
    attempts: u32,
}

impl Plpmtu {
    fn new(max: usize) -> Self {
        let current = max.min(crate::config::MIN_MTU);
        Plpmtu {
            current,
            max,
            too_big: max + 1,
            probe: None,
            due: false,
            next: None,
        }
    }

    /// The next size worth probing, if the search is not over.
    fn candidate(&self) -> Option<usize> {
        if self.current >= self.max || self.too_big - self.current <= PMTU_SEARCH_GRANULARITY {
            return None;
        }
        // Most paths carry the maximum: try it first, then halve the gap.
        let size = if self.too_big > self.max {
            self.max
        } else {
            (self.current + self.too_big) / 2
        };
        Some(size & !3)
    }
}

/// Negotiated at the handshake.
#[derive(Debug, Clone, Copy)]
struct Negotiated {
    outbound: u16,
    inbound: u16,
    /// Both ends offered I-DATA (RFC 8260), so user data travels in I-DATA.
    idata: bool,
}

/// One association.
#[derive(Debug)]
pub struct Association {
    shared: Arc<Shared>,
    state: State,
    remote: SocketAddr,
    /// Our SCTP port as the peer addresses it (see `Endpoint::handle`).
    local_port: u16,
    peer_port: u16,
    my_tag: u32,
    peer_tag: u32,
    local_initial_tsn: u32,
    /// The peer's first TSN, once the handshake has told us.
    peer_initial_tsn: u32,
    /// Set once the handshake has told us what the peer grants.
    negotiated: Option<Negotiated>,
    /// Every message sent before the handshake finished (client side), in
    /// order. Kept (their bytes shared with the sender's queue) until COOKIE
    /// ACK: a Stale Cookie error restarts the handshake with a new sender,
    /// and these are queued on it again (RFC 9260 5.2.6).
    early: Vec<(u16, Bytes, u32, bool)>,
    sender: Option<Sender>,
    receiver: Option<Receiver>,
    rtt: RttEstimator,
    cc: Box<dyn Controller>,
    ack: Box<dyn AckPolicy>,
    pmtu: Plpmtu,
    rng: StdRng,
    /// Control chunks waiting for the next packet, in order.
    control: VecDeque<Chunk>,
    /// Whole packets to send before anything else (INIT, reflected chunks).
    packets: VecDeque<Bytes>,
    /// The INIT or COOKIE ECHO that T1 retransmits.
    handshake_chunk: Option<Chunk>,
    /// Transmissions of `handshake_chunk`.
    handshake_transmits: u32,
    /// INITs sent in this handshake, restarts after a Stale Cookie error
    /// included: all count against `max_init_transmits`.
    inits_sent: u32,
    /// When `handshake_chunk` was last sent.
    handshake_sent_at: Option<Instant>,
    /// The Cookie Preservative our INIT asks for (RFC 9260 5.2.6), ms.
    cookie_preservative: Option<u32>,
    t1: Option<Instant>,
    t2: Option<Instant>,
    t3: Option<Instant>,
    /// The tail-loss probe timer (RFC 8985 7.2).
    pto: Option<Instant>,
    /// A tail-loss probe was sent and no SACK has come since.
    tlp_in_flight: bool,
    /// Packets handed out by `poll_transmit`, and accepted by `handle`.
    packets_sent: u64,
    packets_received: u64,
    /// Times a verified packet moved the peer's UDP port (RFC 6951 5.4).
    port_changes: u64,
    /// The last DATA packet asked for an immediate SACK (RFC 7053).
    last_immediate: bool,
    /// Spaces DATA packets over the round trip.
    pacer: Pacer,
    /// When the pacer lets the next DATA packet go, if it is holding one back.
    pace_at: Option<Instant>,
    sack_needed: bool,
    /// The window the last SACK advertised.
    advertised: u32,
    heartbeat_due: Option<Instant>,
    /// The outstanding heartbeat's nonce and when it must be answered.
    heartbeat_wait: Option<(u64, Instant)>,
    last_heard: Instant,
    error_count: u32,
    /// When the association began (heartbeat times count from it).
    born: Instant,
    events: VecDeque<Event>,
}

impl Association {
    fn base(
        shared: Arc<Shared>,
        now: Instant,
        remote: SocketAddr,
        peer_port: u16,
        seed: u64,
    ) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = &shared.config;
        let rtt = RttEstimator::new(config.rtt);
        let cc = config
            .congestion
            .build(now, config.mtu.min(crate::config::MIN_MTU));
        let ack: Box<dyn AckPolicy> = Box::new(DelayedAck::new(config.ack));
        let my_tag = nonzero(&mut rng);
        // Drawn even when a test fixes it, so the tags stay what the seed gives.
        let local_initial_tsn = config.initial_tsn.unwrap_or(rng.random());
        let pmtu = Plpmtu::new(config.mtu);
        let local_port = shared.local_port;
        let pacer = Pacer::new(now, config.mtu);
        Association {
            shared,
            state: State::CookieWait,
            remote,
            local_port,
            peer_port,
            my_tag,
            peer_tag: 0,
            local_initial_tsn,
            peer_initial_tsn: 0,
            negotiated: None,
            early: Vec::new(),
            sender: None,
            receiver: None,
            rtt,
            cc,
            ack,
            pmtu,
            rng,
            control: VecDeque::new(),
            packets: VecDeque::new(),
            handshake_chunk: None,
            handshake_transmits: 0,
            inits_sent: 0,
            handshake_sent_at: None,
            cookie_preservative: None,
            t1: None,
            t2: None,
            t3: None,
            pto: None,
            tlp_in_flight: false,
            packets_sent: 0,
            packets_received: 0,
            port_changes: 0,
            last_immediate: false,
            pacer,
            pace_at: None,
            sack_needed: false,
            advertised: 0,
            heartbeat_due: None,
            heartbeat_wait: None,
            last_heard: now,
            error_count: 0,
            born: now,
            events: VecDeque::new(),
        }
    }

    /// A client association: INIT goes out on the first `poll_transmit`.
    pub(crate) fn connect(
        shared: Arc<Shared>,
        now: Instant,
        remote: SocketAddr,
        peer_port: u16,
        seed: u64,
    ) -> Self {
        let mut assoc = Association::base(shared, now, remote, peer_port, seed);
        let init = assoc.our_init(None);
        assoc.handshake_chunk = Some(Chunk::Init(init));
        assoc.send_handshake_chunk(now);
        assoc
    }

    /// A server association from a verified cookie (RFC 9260 5.1 D).
    pub(crate) fn accept(
        shared: Arc<Shared>,
        now: Instant,
        remote: SocketAddr,
        state: &CookieState,
        seed: u64,
    ) -> Self {
        let mut assoc = Association::base(shared, now, remote, state.peer_port, seed);
        assoc.local_port = state.local_port;
        assoc.my_tag = state.local_tag;
        assoc.local_initial_tsn = state.local_initial_tsn;
        assoc.establish_from(state);
        assoc.control.push_back(Chunk::CookieAck);
        assoc.set_state(State::Established);
        assoc.events.push_back(Event::Connected);
        assoc
    }

    /// Sets up both data halves from what the handshake negotiated.
    fn establish_from(&mut self, state: &CookieState) {
        self.peer_tag = state.peer_tag;
        self.peer_initial_tsn = state.peer_initial_tsn;
        self.negotiated = Some(Negotiated {
            outbound: state.outbound_streams,
            inbound: state.inbound_streams,
            idata: state.idata,
        });
        let config = &self.shared.config;
        let mut sender = Sender::new(
            self.local_initial_tsn,
            state.peer_a_rwnd,
            state.outbound_streams,
            state.idata,
            config.stream_scheduler,
        );
        sender.set_rack(config.rack);
        if let Some(mid) = config.initial_mid {
            sender.set_first_mid(mid);
        }
        for (stream, data, ppid, unordered) in self.early.iter().cloned() {
            if sender.enqueue(stream, data, ppid, unordered).is_err() {
                debug!(
                    stream,
                    "message sent before the handshake dropped: the peer granted fewer streams"
                );
            }
        }
        self.sender = Some(sender);
        let mut receiver = Receiver::new(
            state.peer_initial_tsn,
            config.recv_window,
            config.max_message,
            state.inbound_streams,
            state.idata,
            Arc::clone(&self.shared.pool),
        );
        if let Some(mid) = config.initial_mid {
            receiver.set_first_mid(mid);
        }
        self.receiver = Some(receiver);
        self.advertised = config.recv_window;
    }

    fn our_init(&self, cookie: Option<Bytes>) -> Init {
        let config = &self.shared.config;
        Init {
            initiate_tag: self.my_tag,
            a_rwnd: config.recv_window,
            outbound_streams: config.outbound_streams,
            inbound_streams: config.max_inbound_streams,
            initial_tsn: self.local_initial_tsn,
            cookie,
            extensions: if config.idata {
                vec![kind::I_DATA]
            } else {
                Vec::new()
            },
            cookie_preservative: self.cookie_preservative,
            unrecognized: Vec::new(),
        }
    }

    fn set_state(&mut self, state: State) {
        if self.state != state {
            trace!(from = ?self.state, to = ?state, "association state");
            self.state = state;
            if state == State::Established {
                // Nothing can restart the handshake now.
                self.early = Vec::new();
                self.pmtu.due = true;
                self.heartbeat_due = Some(self.last_heard + self.shared.config.heartbeat_interval);
            }
        }
    }

    /// The packet size in use, bytes (the path MTU as far as it is known).
    pub fn mtu(&self) -> usize {
        self.pmtu.current
    }

    /// A probe packet of the next candidate size, if one is due.
    fn poll_probe(&mut self, now: Instant) -> Option<Bytes> {
        if self.state != State::Established || self.pmtu.probe.is_some() || !self.pmtu.due {
            return None;
        }
        self.pmtu.due = false;
        let Some(size) = self.pmtu.candidate() else {
            self.pmtu.next = (self.pmtu.current < self.pmtu.max).then(|| now + PMTU_RAISE_INTERVAL);
            return None;
        };
        let nonce: u64 = self.rng.random();
        let attempts = 1;
        self.pmtu.probe = Some(Probe {
            size,
            nonce,
            deadline: now + self.rtt.rto().max(MIN_PROBE_TIMEOUT),
            attempts,
        });
        self.probe_packet(now, size, nonce)
    }

    /// A HEARTBEAT padded to `size` bytes; none if `size` cannot be encoded.
    fn probe_packet(&self, now: Instant, size: usize, nonce: u64) -> Option<Bytes> {
        let heartbeat = Chunk::Heartbeat(self.heartbeat_info(now, nonce));
        let used = COMMON_HEADER_LEN + heartbeat.encoded_len() + 4;
        let pad = u16::try_from(size.saturating_sub(used)).unwrap_or(u16::MAX);
        let packet = Packet {
            src_port: self.local_port,
            dst_port: self.peer_port,
            vtag: self.peer_tag,
            chunks: vec![heartbeat, Chunk::Pad(pad)],
        };
        let mut buf = BytesMut::with_capacity(size);
        packet.encode(&mut buf).ok()?;
        debug_assert_eq!(buf.len(), size);
        Some(buf.freeze())
    }

    /// The probe's answer did not come.
    fn on_probe_timeout(&mut self, now: Instant) {
        let Some(probe) = self.pmtu.probe.take() else {
            return;
        };
        if probe.attempts < MAX_PROBES {
            let nonce: u64 = self.rng.random();
            self.pmtu.probe = Some(Probe {
                nonce,
                deadline: now + self.rtt.rto().max(MIN_PROBE_TIMEOUT),
                attempts: probe.attempts + 1,
                ..probe
            });
            if let Some(packet) = self.probe_packet(now, probe.size, nonce) {
                self.packets.push_back(packet);
            }
        } else {
            debug!(remote = %self.remote, size = probe.size, "PMTU probe size does not fit the path");
            self.pmtu.too_big = probe.size;
            self.pmtu.due = true;
        }
    }

    fn heartbeat_info(&self, now: Instant, nonce: u64) -> Bytes {
        let micros =
            u64::try_from(now.saturating_duration_since(self.born).as_micros()).unwrap_or(u64::MAX);
        let mut info = BytesMut::with_capacity(HEARTBEAT_INFO_LEN);
        info.extend_from_slice(&micros.to_be_bytes());
        info.extend_from_slice(&nonce.to_be_bytes());
        info.freeze()
    }

    /// The association's state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The peer's UDP address.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Our verification tag (what the peer puts in every packet to us).
    pub fn local_tag(&self) -> u32 {
        self.my_tag
    }

    /// Negotiated stream counts (outbound, inbound), once known.
    pub fn streams(&self) -> Option<(u16, u16)> {
        self.negotiated.map(|n| (n.outbound, n.inbound))
    }

    /// Whether the handshake negotiated I-DATA (RFC 8260): both ends offered
    /// it, so messages are fragmented into I-DATA and may interleave across
    /// streams. False before the handshake has finished.
    pub fn idata(&self) -> bool {
        self.negotiated.is_some_and(|n| n.idata)
    }

    /// The current retransmission time-out.
    pub fn rto(&self) -> Duration {
        self.rtt.rto()
    }

    /// The smoothed round-trip time, once measured.
    pub fn smoothed_rtt(&self) -> Option<Duration> {
        self.rtt.smoothed()
    }

    /// The congestion window, bytes.
    pub fn cwnd(&self) -> u64 {
        self.cc.window()
    }

    /// The transmission state as it is now.
    pub fn stats(&self) -> Stats {
        let (outstanding, marked) = self
            .sender
            .as_ref()
            .map_or((0, 0), Sender::outstanding_counts);
        Stats {
            cwnd: self.cc.window(),
            ssthresh: self.cc.ssthresh(),
            flight: self.flight(),
            peer_rwnd: self.sender.as_ref().map_or(0, Sender::peer_rwnd),
            outstanding,
            marked,
            srtt: self.rtt.smoothed(),
            rto: self.rtt.rto(),
            mtu: self.pmtu.current,
            controller: self.cc.name(),
            counters: Counters {
                packets_sent: self.packets_sent,
                packets_received: self.packets_received,
                port_changes: self.port_changes,
                ..self
                    .sender
                    .as_ref()
                    .map_or_else(Counters::default, Sender::counters)
            },
        }
    }

    /// Bytes in flight.
    pub fn flight(&self) -> u64 {
        self.sender.as_ref().map_or(0, Sender::flight)
    }

    /// Queues one message on `stream`. Before the handshake completes the
    /// message waits and goes out with COOKIE ECHO (RFC 9260 5.1 C), on a
    /// stream the peer then grants.
    pub fn send(
        &mut self,
        stream: u16,
        data: Bytes,
        ppid: u32,
        unordered: bool,
    ) -> Result<(), SendError> {
        match self.state {
            State::CookieWait => {
                if data.is_empty() {
                    return Err(SendError::Empty);
                }
                if stream >= self.shared.config.outbound_streams {
                    return Err(SendError::InvalidStream(stream));
                }
                self.early.push((stream, data, ppid, unordered));
                Ok(())
            }
            State::CookieEchoed => match self.sender.as_mut() {
                Some(sender) => {
                    sender.enqueue(stream, data.clone(), ppid, unordered)?;
                    self.early.push((stream, data, ppid, unordered));
                    Ok(())
                }
                None => Err(SendError::Closed),
            },
            State::Established => match self.sender.as_mut() {
                Some(sender) => sender.enqueue(stream, data, ppid, unordered),
                None => Err(SendError::Closed),
            },
            _ => Err(SendError::Closed),
        }
    }

    /// A stream's accounting; `None` before the handshake or for a stream
    /// outside the grant.
    pub fn stream_stats(&self, stream: u16) -> Option<StreamStats> {
        self.sender.as_ref()?.stats(stream)
    }

    /// Sets a stream's priority or weight for the scheduler.
    pub fn set_stream_value(&mut self, stream: u16, value: u16) {
        if let Some(sender) = self.sender.as_mut() {
            sender.set_stream_value(stream, value);
        }
    }

    /// The next whole received message.
    pub fn recv(&mut self) -> Option<Message> {
        let receiver = self.receiver.as_mut()?;
        let msg = receiver.pop()?;
        // A window that reopens is announced at once: a sender blocked on a
        // closed window learns of the room only from a SACK, and waiting for
        // the delayed one halts the association for that long.
        let window = self.shared.config.recv_window;
        let now_open = receiver.a_rwnd();
        if self.advertised < window / 2 && now_open >= self.advertised.saturating_add(window / 4) {
            self.sack_needed = true;
        }
        Some(Message {
            stream: msg.stream,
            ppid: msg.ppid,
            unordered: msg.unordered,
            data: msg.data,
        })
    }

    /// Whole messages wait for `recv`.
    pub fn readable(&self) -> bool {
        self.receiver.as_ref().is_some_and(Receiver::readable)
    }

    /// Graceful close (RFC 9260 9.2): what was sent is delivered, then the
    /// association ends with `Event::Closed`.
    pub fn close(&mut self, now: Instant) {
        match self.state {
            State::CookieWait | State::CookieEchoed => {
                self.abort(now, "closed during the handshake");
            }
            State::Established => {
                self.set_state(State::ShutdownPending);
                self.maybe_shutdown(now);
            }
            _ => {}
        }
    }

    /// Ends the association at once: queued data is dropped, an ABORT with a
    /// User-Initiated Abort cause goes out, the peer sees it as aborted.
    pub fn abort(&mut self, now: Instant, reason: &str) {
        if self.state == State::Closed {
            return;
        }
        let _ = now;
        self.send_abort(vec![ErrorCause::new(
            cause::USER_ABORT,
            Bytes::copy_from_slice(reason.as_bytes()),
        )]);
        self.end(Event::Lost(AssociationError::LocallyAborted(
            reason.to_owned(),
        )));
    }

    /// An ICMP "port unreachable" answered one of our packets; `quoted` is
    /// what the ICMP message quoted of that packet, from its SCTP common
    /// header on (often only the header, sometimes nothing). Over UDP
    /// encapsulation that is SCTP's "protocol unreachable": nothing listens
    /// on the peer's port, which RFC 9260 Appendix C (ICMP7) says to process
    /// as an ABORT once the quote shows the packet was ours (ICMP6), so that
    /// an off-path sender who does not know our tags cannot end the
    /// association: the quoted verification tag is the peer's or, in
    /// COOKIE-WAIT where the peer has none yet, it is 0 and the quoted chunk
    /// is our INIT with our Initiate Tag. Returns whether it ended it.
    pub fn handle_port_unreachable(&mut self, quoted: &[u8]) -> bool {
        /// The INIT's Initiate Tag, bytes from the common header's start.
        const INITIATE_TAG_AT: usize = COMMON_HEADER_LEN + 4;
        let word = |at: usize| {
            quoted
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let ours = match word(4) {
            _ if self.state == State::Closed => false,
            Some(0) => {
                self.state == State::CookieWait
                    && quoted.get(COMMON_HEADER_LEN) == Some(&kind::INIT)
                    && word(INITIATE_TAG_AT) == Some(self.my_tag)
            }
            Some(vtag) => self.peer_tag != 0 && vtag == self.peer_tag,
            None => false,
        };
        if ours {
            self.packets.clear();
            self.end(Event::Lost(AssociationError::PortUnreachable));
        }
        ours
    }

    /// The peer restarted (the endpoint saw a COOKIE ECHO of case A).
    pub fn peer_restarted(&mut self) {
        self.end(Event::Lost(AssociationError::PeerRestarted));
    }

    fn send_abort(&mut self, causes: Vec<ErrorCause>) {
        if self.peer_tag == 0 {
            // Still in COOKIE-WAIT: the peer has no association to abort.
            return;
        }
        let abort = Chunk::Abort {
            reflected: false,
            causes,
        };
        let tag = self.peer_tag;
        self.send_alone(tag, abort);
    }

    fn violation(&mut self, what: &str) {
        debug!(remote = %self.remote, what, "protocol violation: aborting");
        self.send_abort(vec![ErrorCause::new(
            cause::PROTOCOL_VIOLATION,
            Bytes::copy_from_slice(what.as_bytes()),
        )]);
        self.end(Event::Lost(AssociationError::LocallyAborted(format!(
            "protocol violation by the peer: {what}"
        ))));
    }

    fn end(&mut self, event: Event) {
        if self.state == State::Closed {
            return;
        }
        self.set_state(State::Closed);
        if let Some(sender) = self.sender.as_mut() {
            sender.clear();
        }
        self.control.clear();
        self.t1 = None;
        self.t2 = None;
        self.t3 = None;
        self.heartbeat_due = None;
        self.heartbeat_wait = None;
        self.sack_needed = false;
        self.events.push_back(event);
    }

    /// The association is over and has nothing left to send.
    pub fn is_drained(&self) -> bool {
        self.state == State::Closed && self.packets.is_empty()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest timer, if any runs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state == State::Closed {
            return None;
        }
        let idle = Some(self.last_heard + self.shared.config.idle_timeout);
        [
            self.t1,
            self.t2,
            self.t3,
            self.pto,
            self.pace_at,
            self.sender.as_ref().and_then(Sender::reorder_deadline),
            // Once it has fired, the SACK waits for the next poll_transmit,
            // not for a deadline already past.
            self.ack.deadline().filter(|_| !self.sack_needed),
            self.heartbeat_due,
            self.heartbeat_wait.map(|(_, at)| at),
            self.pmtu.probe.map(|p| p.deadline),
            self.pmtu.next.filter(|_| self.state == State::Established),
            idle,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        if now >= self.last_heard + self.shared.config.idle_timeout {
            debug!(remote = %self.remote, "nothing heard for the idle time-out");
            self.end(Event::Lost(AssociationError::Unreachable));
            return;
        }
        if self.t1.is_some_and(|t| t <= now) {
            self.on_t1(now);
        }
        if self.t2.is_some_and(|t| t <= now) {
            self.on_t2(now);
        }
        if self.t3.is_some_and(|t| t <= now) {
            self.on_t3(now);
        }
        if self.pace_at.is_some_and(|t| t <= now) {
            // The next poll_transmit sends what the pacer held back.
            self.pace_at = None;
        }
        if self.pto.is_some_and(|t| t <= now) {
            self.pto = None;
            if let Some(sender) = self.sender.as_mut()
                && sender.tail_probe()
            {
                trace!(remote = %self.remote, "tail-loss probe");
                self.tlp_in_flight = true;
            }
        }
        if let Some(sender) = self.sender.as_mut()
            && sender.reorder_deadline().is_some_and(|t| t <= now)
        {
            sender.on_reorder_timeout(now, &self.rtt, self.cc.as_mut());
        }
        if self.ack.deadline().is_some_and(|t| t <= now) {
            self.sack_needed = true;
        }
        if self.heartbeat_wait.is_some_and(|(_, at)| at <= now) {
            self.heartbeat_wait = None;
            self.on_heartbeat_timeout();
        }
        if self.heartbeat_due.is_some_and(|t| t <= now) {
            self.send_heartbeat(now);
        }
        if self.pmtu.probe.is_some_and(|p| p.deadline <= now) {
            self.on_probe_timeout(now);
        }
        if self.pmtu.next.is_some_and(|t| t <= now) {
            // The raise timer: search again from what fits now.
            self.pmtu.next = None;
            self.pmtu.too_big = self.pmtu.max + 1;
            self.pmtu.due = true;
        }
    }

    /// A HEARTBEAT went unanswered for an RTO (RFC 9260 section 8.3): one more
    /// error, and the RTO backs off. The next HEARTBEAT stays where
    /// `send_heartbeat` put it, `heartbeat_interval` + RTO after this one, so a
    /// silent path is probed once per interval with a growing RTO (not at once
    /// with the same RTO, which gave up on an idle association after about
    /// `heartbeat_interval` + 11 RTOs: 10.5 s with the defaults, a shorter
    /// outage than `idle_timeout` says it tolerates).
    fn on_heartbeat_timeout(&mut self) {
        self.rtt.back_off();
        self.error_count += 1;
        if self.error_count > self.shared.config.max_retransmits {
            debug!(remote = %self.remote, "retransmission limit reached");
            self.end(Event::Lost(AssociationError::Unreachable));
        }
    }

    fn send_heartbeat(&mut self, now: Instant) {
        if !matches!(
            self.state,
            State::Established
                | State::ShutdownPending
                | State::ShutdownReceived
                | State::ShutdownSent
        ) {
            self.heartbeat_due = None;
            return;
        }
        let nonce: u64 = self.rng.random();
        let micros =
            u64::try_from(now.saturating_duration_since(self.born).as_micros()).unwrap_or(u64::MAX);
        let mut info = BytesMut::with_capacity(HEARTBEAT_INFO_LEN);
        info.extend_from_slice(&micros.to_be_bytes());
        info.extend_from_slice(&nonce.to_be_bytes());
        self.control.push_back(Chunk::Heartbeat(info.freeze()));
        self.heartbeat_wait = Some((nonce, now + self.rtt.rto()));
        self.heartbeat_due = Some(now + self.shared.config.heartbeat_interval + self.rtt.rto());
    }

    fn send_handshake_chunk(&mut self, now: Instant) {
        let Some(chunk) = self.handshake_chunk.clone() else {
            return;
        };
        self.handshake_transmits += 1;
        self.handshake_sent_at = Some(now);
        match chunk {
            Chunk::Init(_) => {
                self.inits_sent += 1;
                // INIT travels alone with a zero tag (RFC 9260 8.5.1 A).
                self.send_alone(0, chunk);
            }
            chunk => self.control.push_front(chunk),
        }
        self.t1 = Some(now + self.rtt.rto());
    }

    fn on_t1(&mut self, now: Instant) {
        self.t1 = None;
        if self.handshake_transmits >= self.shared.config.max_init_transmits {
            self.end(Event::Lost(AssociationError::HandshakeFailed));
            return;
        }
        self.rtt.back_off();
        self.send_handshake_chunk(now);
    }

    fn on_t2(&mut self, now: Instant) {
        self.t2 = None;
        self.error_count += 1;
        if self.error_count > self.shared.config.max_retransmits {
            self.end(Event::Lost(AssociationError::Unreachable));
            return;
        }
        self.rtt.back_off();
        match self.state {
            State::ShutdownSent => self.queue_shutdown(now),
            State::ShutdownAckSent => {
                self.control.push_back(Chunk::ShutdownAck);
                self.t2 = Some(now + self.rtt.rto());
            }
            _ => {}
        }
    }

    fn on_t3(&mut self, now: Instant) {
        self.t3 = None;
        let Some(sender) = self.sender.as_mut() else {
            return;
        };
        if !sender.has_outstanding() {
            return;
        }
        sender.on_t3_expiry(now, self.cc.as_mut());
        self.pto = None;
        self.tlp_in_flight = false;
        self.rtt.back_off();
        self.error_count += 1;
        if self.error_count > self.shared.config.max_retransmits {
            debug!(remote = %self.remote, "T3-rtx limit reached");
            self.end(Event::Lost(AssociationError::Unreachable));
        }
    }

    // ----- input -----

    /// A packet the endpoint routed to this association.
    pub fn handle(&mut self, now: Instant, incoming: Incoming) {
        let Incoming {
            packet,
            from,
            cookie,
        } = incoming;
        if self.state == State::Closed {
            return;
        }
        let vtag = packet.vtag;
        if !self.tag_ok(&packet, cookie.as_ref()) {
            trace!(
                vtag = packet.vtag,
                "packet with a wrong verification tag dropped"
            );
            return;
        }
        if from != self.remote && proves_peer(&packet, self.my_tag) {
            self.rebind(from);
        }
        self.last_heard = now;
        self.packets_received += 1;
        // `heartbeat_interval` counts from the last packet heard (its doc): a
        // peer that talks needs no HEARTBEAT, and an idle limit shorter than
        // interval + RTO must not fire between two answered heartbeats.
        if self.heartbeat_due.is_some() && self.heartbeat_wait.is_none() {
            self.heartbeat_due = Some(now + self.shared.config.heartbeat_interval);
        }
        let mut arrival = Arrival::default();
        let mut had_data = false;
        // Unknown chunks to report, in one ERROR for the whole packet
        // (RFC 9260 3.2), and their bytes as reported.
        let mut unrecognized: Vec<ErrorCause> = Vec::new();
        let mut reported = 0;
        for chunk in packet.chunks {
            if self.state == State::Closed {
                return;
            }
            match chunk {
                Chunk::Data(data) => {
                    had_data = true;
                    if !self.on_data(data, &mut arrival) {
                        return;
                    }
                }
                Chunk::Init(init) => self.on_init(now, init),
                Chunk::InitAck(init) => self.on_init_ack(now, init),
                Chunk::CookieEcho(_) => {
                    if let Some(state) = cookie.as_ref() {
                        self.on_cookie_echo(now, state);
                    }
                }
                Chunk::CookieAck => {
                    if self.state == State::CookieEchoed {
                        self.t1 = None;
                        self.handshake_chunk = None;
                        self.set_state(State::Established);
                        self.events.push_back(Event::Connected);
                    }
                }
                Chunk::Sack(sack) => self.on_sack(now, &sack),
                Chunk::Heartbeat(info) => self.control.push_back(Chunk::HeartbeatAck(info)),
                Chunk::HeartbeatAck(info) => self.on_heartbeat_ack(now, &info),
                Chunk::Abort { causes, .. } => {
                    self.packets.clear();
                    self.end(Event::Lost(AssociationError::Aborted(causes)));
                    return;
                }
                Chunk::Shutdown { cum_tsn_ack } => self.on_shutdown(now, cum_tsn_ack),
                Chunk::ShutdownAck => self.on_shutdown_ack(vtag),
                Chunk::ShutdownComplete { .. } => {
                    if self.state == State::ShutdownAckSent {
                        self.end(Event::Closed);
                        return;
                    }
                }
                Chunk::Error(causes) => self.on_error(now, &causes),
                Chunk::Pad(_) => {}
                Chunk::Unknown { kind, flags, value } => {
                    // RFC 9260 3.2: the two high bits say what to do.
                    let action = kind >> 6;
                    let unknown = Chunk::Unknown { kind, flags, value };
                    let len = wire::report_len(unknown.encoded_len());
                    if action & 1 == 1 && reported + len <= wire::MAX_REPORT_LEN {
                        // One packet's reports fit MAX_REPORT_LEN: a peer
                        // cannot have us echo more than that, nor make a
                        // packet of tiny chunks ask for an ERROR apiece.
                        let mut chunk = BytesMut::new();
                        if unknown.encode(&mut chunk).is_ok() {
                            reported += len;
                            unrecognized
                                .push(ErrorCause::new(cause::UNRECOGNIZED_CHUNK, chunk.freeze()));
                        }
                    }
                    if action & 2 == 0 {
                        break;
                    }
                }
            }
        }
        if !unrecognized.is_empty() {
            self.control.push_back(Chunk::Error(unrecognized));
        }
        if had_data && self.receiver.is_some() {
            if self.ack.on_data(now, arrival) {
                self.sack_needed = true;
            }
            if self.state == State::ShutdownSent {
                // RFC 9260 9.2: data received in SHUTDOWN-SENT is acknowledged
                // at once, with a SHUTDOWN carrying the new cumulative ack.
                self.queue_shutdown(now);
                self.sack_needed = true;
            }
        }
    }

    /// A verified packet came from `from`: a NAT on the way gave the peer a
    /// new UDP port, and everything goes there from now on (RFC 6951 5.4).
    /// Single-homed: only the port may change; the endpoint routes by tag
    /// only packets from the peer's own IP address.
    fn rebind(&mut self, from: SocketAddr) {
        if from.ip() != self.remote.ip() {
            return;
        }
        debug!(old = %self.remote, new = %from, "the peer's UDP port changed: following it");
        self.remote = from;
        self.port_changes += 1;
    }

    /// Checks the verification tag (RFC 9260 8.5, 8.5.1).
    fn tag_ok(&self, packet: &Packet, cookie: Option<&CookieState>) -> bool {
        match packet.chunks.first() {
            Some(Chunk::Init(_)) => packet.vtag == 0 && packet.chunks.len() == 1,
            // RFC 9260 8.5.1 B and C: our tag, or with the T bit the peer's.
            // In COOKIE-WAIT the peer's tag is not known (0 here is "none",
            // the value only an INIT's packet carries, 8.5.1 A), so the T
            // bit matches nothing.
            Some(Chunk::Abort { reflected, .. } | Chunk::ShutdownComplete { reflected }) => {
                if *reflected {
                    self.peer_tag != 0 && packet.vtag == self.peer_tag
                } else {
                    packet.vtag == self.my_tag
                }
            }
            Some(Chunk::CookieEcho(_)) => cookie.is_some(),
            Some(Chunk::ShutdownAck) => {
                packet.vtag == self.my_tag
                    || (matches!(self.state, State::CookieWait | State::CookieEchoed))
            }
            Some(_) => packet.vtag == self.my_tag,
            None => false,
        }
    }

    /// Returns false when the association ended.
    fn on_data(&mut self, data: DataChunk, arrival: &mut Arrival) -> bool {
        if !matches!(
            self.state,
            State::Established | State::ShutdownPending | State::ShutdownSent
        ) {
            return true;
        }
        let Some(receiver) = self.receiver.as_mut() else {
            return true;
        };
        let tsn = data.tsn;
        let stream = data.stream;
        let cum_before = receiver.cum_tsn();
        let immediate = data.immediate;
        let verdict = receiver.on_data(data);
        arrival.immediate |= immediate;
        match verdict {
            Verdict::New => {
                if tsn != cum_before.wrapping_add(1) || receiver.has_gaps() {
                    arrival.out_of_order = true;
                }
            }
            Verdict::Duplicate => arrival.duplicate = true,
            Verdict::Dropped => {}
            Verdict::InvalidStream => {
                let mut info = BytesMut::with_capacity(4);
                info.extend_from_slice(&stream.to_be_bytes());
                info.extend_from_slice(&[0, 0]);
                self.control.push_back(Chunk::Error(vec![ErrorCause::new(
                    cause::INVALID_STREAM,
                    info.freeze(),
                )]));
            }
            Verdict::NoUserData => {
                self.send_abort(vec![ErrorCause::new(
                    cause::NO_USER_DATA,
                    Bytes::copy_from_slice(&tsn.to_be_bytes()),
                )]);
                self.end(Event::Lost(AssociationError::LocallyAborted(
                    "the peer sent a DATA chunk without user data".into(),
                )));
                return false;
            }
            Verdict::Violation(what) => {
                self.violation(what);
                return false;
            }
        }
        arrival.gaps_remain = self.receiver.as_ref().is_some_and(Receiver::has_gaps);
        true
    }

    /// INIT for an association that exists: collision or restart (RFC 9260
    /// 5.2.1, 5.2.2). Answered with an INIT ACK whose cookie carries the
    /// tie-tags; no state changes here.
    fn on_init(&mut self, now: Instant, init: Init) {
        if init.initiate_tag == 0 || init.inbound_streams == 0 || init.outbound_streams == 0 {
            return;
        }
        let (local_tag, tie) = match self.state {
            // 5.2.1: our own INIT crossed theirs; answer with our tag.
            State::CookieWait => (self.my_tag, (0, 0)),
            State::CookieEchoed => (self.my_tag, (self.my_tag, self.peer_tag)),
            // 5.2.2: a new tag, and the current ones as tie-tags.
            State::ShutdownAckSent => {
                // RFC 9260 9.2: resend SHUTDOWN ACK instead.
                self.control.push_back(Chunk::ShutdownAck);
                return;
            }
            _ => (nonzero(&mut self.rng), (self.my_tag, self.peer_tag)),
        };
        let config = &self.shared.config;
        let idata = config.idata && init.supports_idata();
        let state = CookieState {
            issued_ms: self.shared.now_ms(now),
            lifetime_ms: config.cookie_life_ms(init.cookie_preservative),
            local_tag,
            local_initial_tsn: self.local_initial_tsn,
            peer_tag: init.initiate_tag,
            peer_initial_tsn: init.initial_tsn,
            peer_a_rwnd: init.a_rwnd,
            outbound_streams: config.outbound_streams.min(init.inbound_streams),
            inbound_streams: config.max_inbound_streams.min(init.outbound_streams),
            idata,
            local_port: self.local_port,
            peer_port: self.peer_port,
            local_tie_tag: tie.0,
            peer_tie_tag: tie.1,
        };
        let cookie = state.seal(&self.shared.key, &self.remote);
        let mut ack = self.our_init(Some(cookie));
        ack.initiate_tag = local_tag;
        ack.unrecognized = init.unrecognized;
        if !idata {
            ack.extensions.clear();
        }
        // INIT ACK goes to the INIT's initiate tag (RFC 9260 5.2.1, 5.2.2).
        self.send_alone(init.initiate_tag, Chunk::InitAck(ack));
    }

    fn on_init_ack(&mut self, now: Instant, ack: Init) {
        if self.state != State::CookieWait {
            // RFC 9260 5.2.3: discarded in any other state.
            return;
        }
        let Some(cookie) = ack.cookie.clone() else {
            self.violation("INIT ACK without a state cookie");
            return;
        };
        if ack.initiate_tag == 0 || ack.outbound_streams == 0 || ack.inbound_streams == 0 {
            self.violation("INIT ACK with a zero tag or zero streams");
            return;
        }
        let config = &self.shared.config;
        let idata = config.idata && ack.supports_idata();
        let negotiated = CookieState {
            issued_ms: 0,
            lifetime_ms: 0,
            local_tag: self.my_tag,
            local_initial_tsn: self.local_initial_tsn,
            peer_tag: ack.initiate_tag,
            peer_initial_tsn: ack.initial_tsn,
            peer_a_rwnd: ack.a_rwnd,
            outbound_streams: config.outbound_streams.min(ack.inbound_streams),
            inbound_streams: config.max_inbound_streams.min(ack.outbound_streams),
            idata,
            local_port: self.local_port,
            peer_port: self.peer_port,
            local_tie_tag: 0,
            peer_tie_tag: 0,
        };
        self.establish_from(&negotiated);
        // The INIT's RTT is a valid sample if it was sent once.
        if self.handshake_transmits == 1
            && let Some(sent) = self.handshake_sent_at
        {
            self.rtt.on_sample(now.saturating_duration_since(sent));
        }
        self.handshake_chunk = Some(Chunk::CookieEcho(cookie));
        self.handshake_transmits = 0;
        self.set_state(State::CookieEchoed);
        self.send_handshake_chunk(now);
    }

    /// COOKIE ECHO for this association (RFC 9260 5.2.4 cases B and D; the
    /// endpoint handled A and discarded C).
    fn on_cookie_echo(&mut self, now: Instant, state: &CookieState) {
        let _ = now;
        if state.local_tag != self.my_tag {
            return;
        }
        if state.peer_tag != self.peer_tag {
            // Case B: our tag, another peer tag. The peer's INIT crossed
            // ours and it may have picked a new tag since: stay in or enter
            // ESTABLISHED under the cookie's peer tag, and COOKIE ACK.
            match self.state {
                State::CookieWait | State::CookieEchoed => self.establish_from(state),
                State::Established => self.adopt_peer_tag(state),
                // Shutting down: the association is not started again.
                _ => return,
            }
        }
        // Case D (and B): answer COOKIE ACK; establish if not yet.
        if matches!(self.state, State::CookieWait | State::CookieEchoed) {
            if self.sender.is_none() {
                self.establish_from(state);
            }
            self.t1 = None;
            self.handshake_chunk = None;
            self.set_state(State::Established);
            self.events.push_back(Event::Connected);
        }
        self.control.push_back(Chunk::CookieAck);
    }

    /// Case B of RFC 9260 5.2.4 in ESTABLISHED: the peer's tag is the
    /// cookie's from now on. If the peer has sent no DATA yet, its TSNs also
    /// start where the cookie says (the INIT that cookie answered is the
    /// association the peer goes on with); once DATA has come, the
    /// numbering in use stays.
    fn adopt_peer_tag(&mut self, state: &CookieState) {
        debug!(remote = %self.remote, "COOKIE ECHO case B: the peer's tag changes");
        self.peer_tag = state.peer_tag;
        let untouched = self.receiver.as_ref().is_some_and(|r| {
            r.cum_tsn() == self.peer_initial_tsn.wrapping_sub(1) && !r.has_gaps() && !r.readable()
        });
        if untouched && state.peer_initial_tsn != self.peer_initial_tsn {
            let config = &self.shared.config;
            let inbound = self.negotiated.map_or(state.inbound_streams, |n| n.inbound);
            let idata = self.negotiated.is_some_and(|n| n.idata);
            let mut receiver = Receiver::new(
                state.peer_initial_tsn,
                config.recv_window,
                config.max_message,
                inbound,
                idata,
                Arc::clone(&self.shared.pool),
            );
            if let Some(mid) = config.initial_mid {
                receiver.set_first_mid(mid);
            }
            self.receiver = Some(receiver);
            self.peer_initial_tsn = state.peer_initial_tsn;
        }
    }

    fn on_sack(&mut self, now: Instant, sack: &crate::chunk::Sack) {
        if !matches!(
            self.state,
            State::Established
                | State::ShutdownPending
                | State::ShutdownReceived
                | State::ShutdownSent
                | State::CookieEchoed
        ) {
            return;
        }
        let Some(sender) = self.sender.as_mut() else {
            return;
        };
        match sender.on_sack(now, sack, &mut self.rtt, self.cc.as_mut()) {
            Ok(outcome) => {
                let outstanding = sender.has_outstanding();
                if outcome.cum_advanced {
                    self.error_count = 0;
                    // R3: restart T3 with the current RTO while data is outstanding.
                    self.t3 = outstanding.then(|| now + self.rtt.rto());
                } else if !outstanding {
                    self.t3 = None;
                }
                self.tlp_in_flight = false;
                self.pto = if outstanding {
                    self.pto_deadline(now)
                } else {
                    None
                };
                self.maybe_shutdown(now);
            }
            Err(e) => self.violation(&e.to_string()),
        }
    }

    fn on_heartbeat_ack(&mut self, now: Instant, info: &[u8]) {
        if info.len() != HEARTBEAT_INFO_LEN {
            return;
        }
        let (time, rest) = info.split_at(8);
        let sent = u64::from_be_bytes(time.try_into().unwrap_or([0; 8]));
        let echoed = u64::from_be_bytes(rest.try_into().unwrap_or([0; 8]));
        if let Some(probe) = self.pmtu.probe
            && probe.nonce == echoed
        {
            debug!(remote = %self.remote, size = probe.size, "path MTU raised");
            self.pmtu.probe = None;
            self.pmtu.current = probe.size;
            self.pmtu.due = true;
            self.cc.on_mtu(probe.size);
            return;
        }
        let Some((nonce, _)) = self.heartbeat_wait else {
            return;
        };
        if echoed != nonce {
            return;
        }
        self.heartbeat_wait = None;
        self.error_count = 0;
        if self.heartbeat_due.is_some() {
            self.heartbeat_due = Some(now + self.shared.config.heartbeat_interval);
        }
        let sent = self.born + Duration::from_micros(sent);
        self.rtt.on_sample(now.saturating_duration_since(sent));
    }

    fn on_shutdown(&mut self, now: Instant, cum_tsn_ack: u32) {
        match self.state {
            State::Established | State::ShutdownPending | State::ShutdownReceived => {
                // The SHUTDOWN's cumulative ack acts as a SACK's (RFC 9260 9.2).
                self.ack_to(now, cum_tsn_ack);
                if self.state == State::Closed {
                    // The cumulative ack was a protocol violation: aborted.
                    return;
                }
                self.set_state(State::ShutdownReceived);
                self.maybe_shutdown(now);
            }
            State::ShutdownSent => {
                // Both sides closed at once: answer with SHUTDOWN ACK.
                self.ack_to(now, cum_tsn_ack);
                if self.state == State::Closed {
                    return;
                }
                self.t2 = None;
                self.set_state(State::ShutdownAckSent);
                self.control.push_back(Chunk::ShutdownAck);
                self.t2 = Some(now + self.rtt.rto());
            }
            _ => {}
        }
    }

    fn ack_to(&mut self, now: Instant, cum_tsn_ack: u32) {
        if let Some(sender) = self.sender.as_ref() {
            let sack = crate::chunk::Sack {
                cum_tsn_ack,
                a_rwnd: u32::try_from(sender.peer_rwnd() + sender.flight()).unwrap_or(u32::MAX),
                gaps: Vec::new(),
                dups: Vec::new(),
            };
            if crate::seq::lt32(sender.cum_ack(), cum_tsn_ack) || cum_tsn_ack == sender.cum_ack() {
                self.on_sack(now, &sack);
            }
        }
    }

    /// SHUTDOWN ACK in a packet whose verification tag was `vtag`.
    fn on_shutdown_ack(&mut self, vtag: u32) {
        match self.state {
            State::ShutdownSent | State::ShutdownAckSent => {
                let complete = Chunk::ShutdownComplete { reflected: false };
                let tag = self.peer_tag;
                self.send_alone(tag, complete);
                self.end(Event::Closed);
            }
            State::CookieWait | State::CookieEchoed => {
                // RFC 9260 8.5.1 E: out of the blue for a handshake, so 8.4
                // rule 5 answers: SHUTDOWN COMPLETE with the T bit, under the
                // tag the packet came with (not ours for the peer, which in
                // COOKIE-WAIT is not even known).
                let complete = Chunk::ShutdownComplete { reflected: true };
                self.send_alone(vtag, complete);
            }
            _ => {}
        }
    }

    fn on_error(&mut self, now: Instant, causes: &[ErrorCause]) {
        for c in causes {
            if c.code == cause::STALE_COOKIE && self.state == State::CookieEchoed {
                self.on_stale_cookie(now, &c.info);
                return;
            }
            debug!(remote = %self.remote, code = c.code, "ERROR from the peer");
        }
    }

    /// The peer found our cookie stale (RFC 9260 5.2.6): the handshake
    /// starts over with a new INIT that carries a Cookie Preservative asking
    /// for the staleness the peer measured (`info`, µs) plus the round trip
    /// of the COOKIE ECHO and this ERROR (at most 1 s of it), since the next
    /// cookie spends about that long on the way again. The INIT counts as
    /// one more against `max_init_transmits`, so a peer that keeps
    /// answering with Stale Cookie errors fails the handshake instead of
    /// looping it. Messages sent so far are queued again on the new
    /// handshake's sender.
    fn on_stale_cookie(&mut self, now: Instant, info: &[u8]) {
        if self.inits_sent >= self.shared.config.max_init_transmits {
            debug!(remote = %self.remote, "cookie stale again: handshake abandoned");
            self.end(Event::Lost(AssociationError::HandshakeFailed));
            return;
        }
        let staleness_us = info
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_be_bytes);
        let exchange = self
            .handshake_sent_at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        let slack_ms = u64::try_from(exchange.as_millis())
            .map_or(MAX_PRESERVATIVE_SLACK_MS, |ms| {
                ms.min(MAX_PRESERVATIVE_SLACK_MS)
            });
        let extension_ms = u64::from(staleness_us).div_ceil(1000) + slack_ms;
        self.cookie_preservative = Some(u32::try_from(extension_ms).unwrap_or(u32::MAX));
        debug!(
            remote = %self.remote,
            staleness_us,
            extension_ms,
            "stale cookie: INIT again with a Cookie Preservative"
        );
        // Back to COOKIE-WAIT: what the INIT ACK told us is void.
        self.peer_tag = 0;
        self.negotiated = None;
        self.sender = None;
        self.receiver = None;
        self.control
            .retain(|c| !matches!(c, Chunk::CookieEcho(_) | Chunk::Sack(_)));
        self.sack_needed = false;
        self.t3 = None;
        self.pto = None;
        self.set_state(State::CookieWait);
        self.handshake_chunk = Some(Chunk::Init(self.our_init(None)));
        self.handshake_transmits = self.inits_sent;
        self.send_handshake_chunk(now);
    }

    /// Sends SHUTDOWN or SHUTDOWN ACK once nothing is outstanding.
    fn maybe_shutdown(&mut self, now: Instant) {
        let drained = self.sender.as_ref().is_none_or(Sender::is_idle);
        if !drained {
            return;
        }
        match self.state {
            State::ShutdownPending => {
                self.set_state(State::ShutdownSent);
                self.queue_shutdown(now);
            }
            State::ShutdownReceived => {
                self.set_state(State::ShutdownAckSent);
                self.control.push_back(Chunk::ShutdownAck);
                self.t2 = Some(now + self.rtt.rto());
            }
            _ => {}
        }
    }

    fn queue_shutdown(&mut self, now: Instant) {
        let cum_tsn_ack = self.receiver.as_ref().map_or(0, Receiver::cum_tsn);
        self.control
            .retain(|c| !matches!(c, Chunk::Shutdown { .. }));
        self.control.push_back(Chunk::Shutdown { cum_tsn_ack });
        self.t2 = Some(now + self.rtt.rto());
    }

    /// When a tail-loss probe should go if nothing is heard (RFC 8985 7.2):
    /// two smoothed RTTs, plus the peer's possible delayed SACK when only one
    /// packet is in flight; never after the T3-rtx timer, which then acts.
    fn pto_deadline(&self, now: Instant) -> Option<Instant> {
        if !self.shared.config.tail_loss_probe {
            return None;
        }
        let srtt = self.rtt.smoothed()?;
        let mut pto = (srtt * 2).max(MIN_PTO);
        if self.flight() <= self.pmtu.current as u64 && !self.last_immediate {
            pto += self.shared.config.ack.max_delay;
        }
        let at = now + pto;
        self.t3.is_none_or(|t3| at < t3).then_some(at)
    }

    // ----- output -----

    /// Queues a packet of one chunk, unless it cannot be encoded (a chunk
    /// longer than a length field holds: never one this core builds, since
    /// what it echoes of a peer is capped by `wire::MAX_REPORT_LEN`).
    fn send_alone(&mut self, vtag: u32, chunk: Chunk) {
        let packet = Packet {
            src_port: self.local_port,
            dst_port: self.peer_port,
            vtag,
            chunks: vec![chunk],
        };
        let mut buf = BytesMut::with_capacity(packet.encoded_len());
        match packet.encode(&mut buf) {
            Ok(()) => self.packets.push_back(buf.freeze()),
            Err(e) => debug!(remote = %self.remote, error = %e, "packet not sent"),
        }
    }

    /// The next datagram to send, if any. A packet is built in this order:
    /// control chunks (COOKIE ECHO first), the SACK, then DATA
    /// (retransmissions before new data) as the windows and the pacer allow;
    /// a path MTU probe goes only when nothing else waits.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let transmit = self.next_transmit(now);
        self.packets_sent += u64::from(transmit.is_some());
        transmit
    }

    fn next_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(contents) = self.packets.pop_front() {
            return Some(Transmit {
                destination: self.remote,
                contents,
            });
        }
        if self.state == State::Closed {
            return None;
        }
        let mtu = self.pmtu.current;
        let mut buf = BytesMut::with_capacity(mtu);
        wire::encode_header(&mut buf, self.local_port, self.peer_port, self.peer_tag);
        let (mut chunks, bundled_cookie) = self.write_control(&mut buf, mtu);
        chunks += self.write_sack(now, &mut buf, mtu);
        let data_allowed = match self.state {
            State::Established | State::ShutdownPending | State::ShutdownReceived => true,
            // Data rides with COOKIE ECHO, not alone before COOKIE ACK.
            State::CookieEchoed => bundled_cookie,
            _ => false,
        };
        let data = if data_allowed && !self.paced(now, mtu) {
            self.write_data(now, &mut buf, mtu)
        } else {
            0
        };
        chunks += data;
        if chunks == 0 {
            // Probes go when nothing else waits.
            return self.poll_probe(now).map(|contents| Transmit {
                destination: self.remote,
                contents,
            });
        }
        if data > 0 {
            self.pacer.spend(buf.len());
            if self.t3.is_none() {
                self.t3 = Some(now + self.rtt.rto());
            }
            if !self.tlp_in_flight {
                self.pto = self.pto_deadline(now);
            }
        }
        debug_assert!(buf.len() >= COMMON_HEADER_LEN);
        wire::seal_checksum(&mut buf);
        Some(Transmit {
            destination: self.remote,
            contents: buf.freeze(),
        })
    }

    /// Queued control chunks that fit (the first always goes). Returns the
    /// count and whether a COOKIE ECHO was among them.
    fn write_control(&mut self, buf: &mut BytesMut, mtu: usize) -> (usize, bool) {
        let mut chunks = 0;
        let mut cookie = false;
        while let Some(chunk) = self.control.front() {
            if buf.len() + chunk.encoded_len() > mtu && chunks > 0 {
                break;
            }
            let Some(chunk) = self.control.pop_front() else {
                break;
            };
            // A chunk too long to encode writes nothing and is dropped.
            if chunk.encode(buf).is_ok() {
                cookie |= matches!(chunk, Chunk::CookieEcho(_));
                chunks += 1;
            }
        }
        (chunks, cookie)
    }

    /// The SACK, if one is due and fits; returns the chunks written (0 or 1).
    fn write_sack(&mut self, now: Instant, buf: &mut BytesMut, mtu: usize) -> usize {
        if !self.sack_needed {
            return 0;
        }
        let Some(receiver) = self.receiver.as_mut() else {
            return 0;
        };
        let sack = receiver.build_sack();
        let a_rwnd = sack.a_rwnd;
        let sack = Chunk::Sack(sack);
        if buf.len() + sack.encoded_len() > mtu || sack.encode(buf).is_err() {
            return 0;
        }
        self.advertised = a_rwnd;
        self.sack_needed = false;
        self.ack.on_sack_sent(now);
        1
    }

    /// Whether the pacer holds DATA back now (its deadline then in `pace_at`).
    fn paced(&mut self, now: Instant, mtu: usize) -> bool {
        let waiting = self
            .sender
            .as_ref()
            .is_some_and(|s| s.has_unsent() || s.has_marked());
        if !waiting {
            return false;
        }
        let rate = if self.shared.config.pacing {
            Pacer::rate(
                self.cc.window(),
                self.cc.ssthresh(),
                self.rtt.smoothed(),
                self.cc.pacing_rate(),
            )
        } else {
            None
        };
        self.pace_at = self.pacer.delay(now, mtu, mtu, rate);
        self.pace_at.is_some()
    }

    /// DATA chunks as the windows allow: marked retransmissions first (one
    /// packet of them past the window after a fast retransmit), then new
    /// fragments. Returns the chunks written.
    fn write_data(&mut self, now: Instant, buf: &mut BytesMut, mtu: usize) -> usize {
        let Some(sender) = self.sender.as_mut() else {
            return 0;
        };
        if sender.flight() == 0 {
            // RFC 9260 7.2.1: a window unused for an RTO decays.
            self.cc.on_idle(now, self.rtt.rto());
        }
        let cwnd = self.cc.window();
        let mut chunks = 0;
        let mut used_fast = false;
        let mut last_data_at = None;
        while sender.may_retransmit(cwnd) || (used_fast && sender.has_marked()) {
            let room = mtu.saturating_sub(buf.len());
            let Some(chunk) = sender.next_retransmit(now, room, self.cc.as_mut()) else {
                break;
            };
            used_fast = true;
            if let Some(at) = put_data(buf, chunk) {
                last_data_at = Some(at);
                chunks += 1;
            }
        }
        if used_fast {
            sender.fast_retransmit_sent();
        }
        while !sender.has_marked() && sender.may_send_new(self.cc.window()) {
            let room = mtu.saturating_sub(buf.len());
            let Some(chunk) = sender.next_fragment(now, room, self.cc.as_mut()) else {
                break;
            };
            if let Some(at) = put_data(buf, chunk) {
                last_data_at = Some(at);
                chunks += 1;
            }
        }
        if !sender.has_unsent() && !sender.has_marked() && sender.flight() < self.cc.window() {
            // Run dry with room in the window: the rate samples of what
            // is in flight measure the application, not the path.
            self.cc.on_app_limited(sender.flight());
        }
        if let Some(at) = last_data_at {
            // RFC 7053: when nothing follows this packet for now (the burst
            // is over or the window is full), ask for the SACK at once;
            // waiting for the peer's delayed SACK would cost up to its delay
            // for nothing.
            let cwnd = self.cc.window();
            let more = (sender.has_marked() && sender.may_retransmit(cwnd))
                || (sender.has_unsent() && sender.may_send_new(cwnd));
            self.last_immediate = self.shared.config.sack_immediately && !more;
            if self.last_immediate
                && let Some(flags) = buf.get_mut(at + 1)
            {
                *flags |= wire::DATA_FLAG_IMMEDIATE;
            }
            sender.end_packet();
        }
        chunks
    }
}

/// Appends a DATA chunk that the sender sized to the room left in the packet
/// and returns where it starts. The packet is at most the MTU, which
/// `Config::validate` holds to 65535 bytes, so encoding cannot fail; if it
/// ever did, nothing is written and the chunk waits for its retransmission.
fn put_data(buf: &mut BytesMut, chunk: DataChunk) -> Option<usize> {
    let at = buf.len();
    Chunk::Data(chunk).encode(buf).ok().map(|()| at)
}

/// A random non-zero verification tag (RFC 9260 5.3.1: zero is reserved).
pub(crate) fn nonzero(rng: &mut StdRng) -> u32 {
    loop {
        let tag: u32 = rng.random();
        if tag != 0 {
            return tag;
        }
    }
}
