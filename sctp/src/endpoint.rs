//! The endpoint: one local port's demultiplexer and its stateless half of
//! the handshake (RFC 9260 5.1, 5.1.3, 5.1.5, 8.4, 8.5.1).
//!
//! A datagram is decoded (its CRC32c checked) and routed by the peer's UDP
//! address to the association that peer has. A NAT on the way may give the
//! peer a new UDP port at any time (a rebinding): a packet from an address
//! with no association, from the IP address of an association's peer and
//! carrying that association's own verification tag, is routed to it, and
//! the association takes the new port (RFC 6951 5.4; see `rebound`). An INIT for no association is
//! answered with an INIT ACK whose state cookie carries everything the
//! association will need, signed with the endpoint's key: nothing is kept
//! until a COOKIE ECHO proves the peer can receive at its address, so an
//! INIT flood costs no memory. Everything else for no association is
//! out of the blue and answered as section 8.4 says.
//!
//! A listening endpoint admits at most [`Limits`] associations, in all and
//! per source: an INIT past a limit is refused with an ABORT carrying "Out
//! of Resource" (RFC 9260 3.3.10.4), and so is a COOKIE ECHO of a cookie
//! issued before the limit was reached. Refusing keeps no state either.
//! Each limit's first refusal is logged, then at most one line a minute
//! with the count since.
//!
//! The endpoint never owns an association: `connect` and `handle` give them
//! to the caller (the driver), which hands packets back through
//! `Association::handle` and calls `forget` when one is over.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::{debug, trace, warn};

use crate::association::{Association, Incoming, Shared, Transmit, nonzero, proves_peer};
use crate::chunk::{Chunk, ErrorCause, Init, Packet, cause, kind};
use crate::config::{Config, ConfigError};
use crate::cookie::{CookieKey, CookieState};
use crate::recv::ReceivePool;

/// Identifies an association among an endpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssocHandle(pub usize);

/// What a datagram meant.
#[derive(Debug)]
pub enum DatagramEvent {
    /// A packet for an existing association: pass it to `Association::handle`.
    Association(AssocHandle, Incoming),
    /// A valid COOKIE ECHO opened a new association (already established,
    /// with anything bundled behind the cookie processed). `replaces` is
    /// the association of a peer that restarted (RFC 9260 5.2.4 case A):
    /// tell it with `Association::peer_restarted` and drop it.
    NewAssociation {
        /// Its handle.
        handle: AssocHandle,
        /// The association.
        association: Box<Association>,
        /// The association it replaces, if the peer restarted.
        replaces: Option<AssocHandle>,
    },
    /// A stateless answer: INIT ACK, or the reply to an out-of-the-blue packet.
    Response(Transmit),
}

/// Counts of what the endpoint dropped, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams that were not valid SCTP packets (checksum, lengths).
    pub malformed: u64,
    /// INIT ACKs sent without keeping state.
    pub init_acks: u64,
    /// COOKIE ECHOs whose cookie did not verify.
    pub forged_cookies: u64,
    /// COOKIE ECHOs whose cookie had expired.
    pub stale_cookies: u64,
    /// Out-of-the-blue packets.
    pub out_of_the_blue: u64,
    /// INITs and COOKIE ECHOs refused at `Limits::max_associations`.
    pub refused_at_total_limit: u64,
    /// INITs and COOKIE ECHOs refused at `Limits::max_per_source`.
    pub refused_at_source_limit: u64,
    /// Packets from a new UDP port of a peer that proved, by the
    /// association's verification tag, to be that peer: the association
    /// moved to the new port (RFC 6951 5.4).
    pub port_changes: u64,
    /// INITs from new peers left unanswered beyond
    /// `Limits::init_acks_per_second`.
    pub refused_at_init_rate: u64,
}

/// How many associations peers may open on a listening endpoint, and the
/// receive memory they share. What one association can hold is bounded by
/// its `Config` (`Config::receive_memory_bound`), and all together by twice
/// `receive_memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Associations in all.
    pub max_associations: usize,
    /// Associations from one source: one IPv4 address, or one IPv6 /64
    /// (the least a subscriber is given, RFC 6177; counting IPv6 addresses
    /// one by one would limit nothing). Many households behind one carrier
    /// NAT share an IPv4 address, so this is not small.
    pub max_per_source: usize,
    /// The receive memory all associations share, bytes: payload held
    /// (counted with what of its datagram it pins) and the bookkeeping of
    /// held chunks. Past it, a receiver takes only the chunk that may
    /// unblock delivery, and only within its share (this divided among the
    /// associations); what is held stays below twice this.
    pub receive_memory: usize,
    /// INIT ACKs a second for INITs from new peers, with a burst of as
    /// many: a token bucket. Beyond it such INITs are dropped unanswered
    /// (the peer sends its INIT again after its RTO), so that a flood of
    /// INITs from spoofed sources costs the endpoint the decoding of each,
    /// not a cookie's HMAC and a datagram sent, and reflects at most this
    /// many INIT ACKs a second. INITs of known peers (restarts, collisions)
    /// are not counted.
    pub init_acks_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_associations: 10_000,
            max_per_source: 256,
            receive_memory: 1 << 30,
            init_acks_per_second: DEFAULT_INIT_ACKS_PER_SECOND,
        }
    }
}

/// `Limits::init_acks_per_second` by default: ten thousand gateways
/// reconnecting at once after an origin restart are all answered within a
/// second, and under a flood the answers cost a few percent of a core
/// (bench/results/init-flood.md).
pub const DEFAULT_INIT_ACKS_PER_SECOND: u32 = 10_000;

/// A token bucket of `rate` tokens a second holding at most `rate`.
#[derive(Debug, Default)]
struct TokenBucket {
    tokens: f64,
    /// When `tokens` was last brought up to date; `None`: full.
    at: Option<Instant>,
}

impl TokenBucket {
    /// Takes a token if there is one at `now`.
    fn take(&mut self, now: Instant, rate: u32) -> bool {
        let rate = f64::from(rate);
        self.tokens = match self.at {
            None => rate,
            Some(at) => {
                (self.tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(rate)
            }
        };
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Which limit refused an association.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Total,
    PerSource,
    InitRate,
}

/// The least time between two log lines about one limit.
const LIMIT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What is counted per source: the IPv4 address, or the IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(u32),
    V6(u64),
}

fn source_of(remote: &SocketAddr) -> Source {
    match remote.ip().to_canonical() {
        IpAddr::V4(v4) => Source::V4(u32::from(v4)),
        IpAddr::V6(v6) => Source::V6((u128::from(v6) >> 64) as u64),
    }
}

/// The log lines of one limit: the first refusal, then one a minute.
#[derive(Debug, Default)]
struct LimitLog {
    last: Option<Instant>,
    /// Refusals since the last line.
    since: u64,
}

/// One local SCTP port.
#[derive(Debug)]
pub struct Endpoint {
    shared: Arc<Shared>,
    rng: StdRng,
    /// The association each peer address has, and its tag.
    by_remote: HashMap<SocketAddr, (AssocHandle, u32)>,
    /// Associations per source (`source_of`), for `Limits::max_per_source`.
    per_source: HashMap<Source, usize>,
    limits: Limits,
    limit_logs: [LimitLog; 3],
    /// INIT ACKs to new peers (`Limits::init_acks_per_second`).
    init_acks: TokenBucket,
    /// Each association by its peer's IP address and its own verification
    /// tag (the tag the peer puts on its packets), with the address it has
    /// in `by_remote`: how a peer whose UDP port changed is found.
    /// Associations enter and leave it with `by_remote`; one whose key is
    /// taken (the same peer IP and tag, which the tag draws avoid) stays out
    /// of it and cannot follow a port change.
    by_tag: HashMap<(IpAddr, u32), (AssocHandle, SocketAddr)>,
    next_handle: usize,
    listening: bool,
    stats: EndpointStats,
}

impl Endpoint {
    /// An endpoint on SCTP port `local_port`; `listening`: INITs from new
    /// peers are answered. `seed` is the only randomness it ever uses (tags,
    /// initial TSNs, the cookie key): give it 32 bytes from the OS.
    pub fn new(
        config: Config,
        local_port: u16,
        listening: bool,
        seed: [u8; 32],
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut rng = StdRng::from_seed(seed);
        let key = CookieKey::new(rng.random());
        Ok(Endpoint {
            shared: Arc::new(Shared {
                config,
                key,
                epoch: now,
                local_port,
                pool: Arc::new(ReceivePool::new(Limits::default().receive_memory)),
            }),
            rng,
            by_remote: HashMap::new(),
            per_source: HashMap::new(),
            limits: Limits::default(),
            limit_logs: Default::default(),
            by_tag: HashMap::new(),
            init_acks: TokenBucket::default(),
            next_handle: 0,
            listening,
            stats: EndpointStats::default(),
        })
    }

    /// The configuration every association gets.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// What was dropped so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// Associations the endpoint routes to (what it keeps per peer).
    pub fn associations(&self) -> usize {
        self.by_remote.len()
    }

    /// How many associations peers may open (`Limits::default()` until set).
    pub fn set_limits(&mut self, limits: Limits) {
        self.shared.pool.set_budget(limits.receive_memory);
        self.limits = limits;
    }

    /// Receive memory the associations hold, as charged against
    /// `Limits::receive_memory`, bytes.
    pub fn receive_memory(&self) -> usize {
        self.shared.pool.used()
    }

    /// Whether INITs from new peers are answered.
    pub fn set_listening(&mut self, listening: bool) {
        self.listening = listening;
    }

    /// Starts an association to `remote` (SCTP port `peer_port`): its INIT
    /// goes out on the first `poll_transmit`.
    pub fn connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        peer_port: u16,
    ) -> (AssocHandle, Association) {
        let handle = self.new_handle();
        let assoc = loop {
            let assoc = Association::connect(
                self.shared.clone(),
                now,
                remote,
                peer_port,
                self.rng.random(),
            );
            if !self.by_tag.contains_key(&(remote.ip(), assoc.local_tag())) {
                break assoc;
            }
        };
        self.insert(remote, handle, assoc.local_tag());
        (handle, assoc)
    }

    /// The association is over: its address may start a new one.
    pub fn forget(&mut self, handle: AssocHandle) {
        let gone: Vec<SocketAddr> = self
            .by_remote
            .iter()
            .filter(|(_, (h, _))| *h == handle)
            .map(|(remote, _)| *remote)
            .collect();
        for remote in gone {
            self.unroute(&remote);
        }
        self.by_tag.retain(|_, (h, _)| *h != handle);
    }

    /// Routes `remote` and (`remote`'s IP, `tag`) to `handle`. A key already
    /// taken in `by_tag` keeps its association (see `by_tag`).
    fn insert(&mut self, remote: SocketAddr, handle: AssocHandle, tag: u32) {
        self.route(remote, handle, tag);
        self.by_tag
            .entry((remote.ip(), tag))
            .or_insert((handle, remote));
    }

    /// Routes datagrams from `remote` to `handle`, counting the address
    /// against its source unless it was routed already (a restart, or a
    /// port taken over from another association).
    fn route(&mut self, remote: SocketAddr, handle: AssocHandle, tag: u32) {
        if self.by_remote.insert(remote, (handle, tag)).is_none() {
            *self.per_source.entry(source_of(&remote)).or_default() += 1;
        }
    }

    /// Routes nothing from `remote` any more, and uncounts it.
    fn unroute(&mut self, remote: &SocketAddr) {
        if self.by_remote.remove(remote).is_none() {
            return;
        }
        let source = source_of(remote);
        if let Some(n) = self.per_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }

    /// Which limit a new association from `remote` would pass, if any.
    fn over_limit(&self, remote: &SocketAddr) -> Option<Limit> {
        if self.by_remote.len() >= self.limits.max_associations {
            return Some(Limit::Total);
        }
        let from_source = self.per_source.get(&source_of(remote)).copied();
        if from_source.unwrap_or(0) >= self.limits.max_per_source {
            return Some(Limit::PerSource);
        }
        None
    }

    /// Counts and logs (first, then at most once a minute) a refusal.
    fn refused(&mut self, now: Instant, remote: SocketAddr, limit: Limit) {
        let (count, log, what, max) = match limit {
            Limit::Total => (
                &mut self.stats.refused_at_total_limit,
                &mut self.limit_logs[0],
                "associations in all",
                self.limits.max_associations,
            ),
            Limit::PerSource => (
                &mut self.stats.refused_at_source_limit,
                &mut self.limit_logs[1],
                "associations from one source",
                self.limits.max_per_source,
            ),
            Limit::InitRate => (
                &mut self.stats.refused_at_init_rate,
                &mut self.limit_logs[2],
                "INIT ACKs a second",
                self.limits.init_acks_per_second as usize,
            ),
        };
        *count += 1;
        log.since += 1;
        if log.last.is_none_or(|t| now >= t + LIMIT_LOG_INTERVAL) {
            if limit == Limit::InitRate {
                warn!(
                    %remote,
                    refused = log.since,
                    "at the limit of {max} {what}: INITs from new peers dropped unanswered \
                     (one line a minute at most; `refused` counts since the last)"
                );
            } else {
                warn!(
                    %remote,
                    refused = log.since,
                    "at the limit of {max} {what}: new associations refused \
                     (one line a minute at most; `refused` counts since the last)"
                );
            }
            log.last = Some(now);
            log.since = 0;
        }
    }

    /// An ABORT with "Out of Resource", for a peer refused at a limit.
    fn refuse(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        ports: (u16, u16),
        peer_tag: u32,
        limit: Limit,
    ) -> Option<DatagramEvent> {
        self.refused(now, remote, limit);
        let abort = Chunk::Abort {
            reflected: false,
            causes: vec![ErrorCause::new(cause::OUT_OF_RESOURCE, Bytes::new())],
        };
        self.respond(remote, ports, peer_tag, abort)
    }

    /// The association a packet from `remote` proves to belong to although
    /// it came from another UDP port, now routed from `remote`: a NAT
    /// rebinding (RFC 6951 5.4). The proof is the association's own
    /// verification tag on a packet that must carry it (`proves_peer`) from
    /// the peer's IP address; the association checks the same when it
    /// handles the packet, and takes the port too.
    ///
    /// Our tags are 32 random bits, seen only by the peer and the hops
    /// between us: an off-path sender must guess one (and the peer's IP
    /// address), and a wrong guess is out of the blue as before. A hop on
    /// the path can move the association, but it can already drop or
    /// rewrite the packets; that is what RFC 6951 5.4 accepts.
    fn rebound(&mut self, remote: SocketAddr, packet: &Packet) -> Option<AssocHandle> {
        let key = (remote.ip(), packet.vtag);
        let &(handle, old) = self.by_tag.get(&key)?;
        if old == remote || !proves_peer(packet, packet.vtag) {
            return None;
        }
        if self.by_remote.get(&old).is_some_and(|(h, _)| *h == handle) {
            self.unroute(&old);
        }
        // An association still routed from `remote` (its peer's NAT mapping
        // went, and the port was given to this one) keeps its tag entry, so
        // that its own peer, if alive, brings it back from another port.
        self.route(remote, handle, packet.vtag);
        self.by_tag.insert(key, (handle, remote));
        self.stats.port_changes += 1;
        debug!(%old, new = %remote, "a peer's UDP port changed: its association follows");
        Some(handle)
    }

    fn new_handle(&mut self) -> AssocHandle {
        let handle = AssocHandle(self.next_handle);
        self.next_handle += 1;
        handle
    }

    /// One received datagram from `remote`.
    ///
    /// One UDP socket is one SCTP endpoint (RFC 6951), so the packet's
    /// destination port is not checked: a hop that translates UDP ports (a
    /// relay, a port forward) makes the peer address the port it knows us
    /// by, and the association answers from that port.
    pub fn handle(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        datagram: Bytes,
    ) -> Option<DatagramEvent> {
        let packet = match Packet::decode(datagram) {
            Ok(packet) => packet,
            Err(e) => {
                trace!(%remote, error = %e, "datagram dropped");
                self.stats.malformed += 1;
                return None;
            }
        };
        let existing = self.by_remote.get(&remote).copied();
        if let Some(Chunk::CookieEcho(cookie)) = packet.chunks.first() {
            let cookie = cookie.clone();
            return self.on_cookie_echo(now, remote, packet, &cookie, existing);
        }
        let handle = match existing {
            // Most packets: the peer's address and its tag.
            Some((handle, tag)) if packet.vtag == tag => Some(handle),
            _ => self
                .rebound(remote, &packet)
                .or(existing.map(|(handle, _)| handle)),
        };
        match handle {
            Some(handle) => Some(DatagramEvent::Association(
                handle,
                Incoming {
                    packet,
                    from: remote,
                    cookie: None,
                },
            )),
            None => self.out_of_the_blue(now, remote, packet),
        }
    }

    fn on_cookie_echo(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        mut packet: Packet,
        cookie: &[u8],
        existing: Option<(AssocHandle, u32)>,
    ) -> Option<DatagramEvent> {
        // Opened at time zero so that a stale cookie still yields its state:
        // its tags address the Stale Cookie error (RFC 9260 5.1.5 item 3).
        let state = match CookieState::open(cookie, &self.shared.key, &remote, 0) {
            Ok(state) => state,
            Err(_) => {
                self.stats.forged_cookies += 1;
                return None;
            }
        };
        if packet.vtag != state.local_tag {
            self.stats.forged_cookies += 1;
            return None;
        }
        let now_ms = self.shared.now_ms(now);
        let expires = state.issued_ms.saturating_add(u64::from(state.lifetime_ms));
        if now_ms > expires {
            self.stats.stale_cookies += 1;
            let by_us = (now_ms - expires).saturating_mul(1000);
            let info =
                Bytes::copy_from_slice(&u32::try_from(by_us).unwrap_or(u32::MAX).to_be_bytes());
            let error = Chunk::Error(vec![ErrorCause::new(cause::STALE_COOKIE, info)]);
            return self.respond(
                remote,
                (state.local_port, state.peer_port),
                state.peer_tag,
                error,
            );
        }
        let replaces = match existing {
            Some((handle, tag)) if tag == state.local_tag => {
                // Cases B and D of RFC 9260 5.2.4: the association sorts them.
                return Some(DatagramEvent::Association(
                    handle,
                    Incoming {
                        packet,
                        from: remote,
                        cookie: Some(state),
                    },
                ));
            }
            // Case A: the peer restarted; the tie-tag proves the cookie was
            // issued by that association.
            Some((handle, tag)) if state.local_tie_tag == tag && tag != 0 => Some(handle),
            // Case C, or a cookie from before an association we have now.
            Some(_) => return None,
            None if !self.listening => return None,
            None => {
                if let Some(limit) = self.over_limit(&remote) {
                    let ports = (state.local_port, state.peer_port);
                    return self.refuse(now, remote, ports, state.peer_tag, limit);
                }
                None
            }
        };
        let handle = self.new_handle();
        let mut association = Box::new(Association::accept(
            self.shared.clone(),
            now,
            remote,
            &state,
            self.rng.random(),
        ));
        self.insert(remote, handle, association.local_tag());
        packet.chunks.remove(0);
        if !packet.chunks.is_empty() {
            association.handle(
                now,
                Incoming {
                    packet,
                    from: remote,
                    cookie: None,
                },
            );
        }
        Some(DatagramEvent::NewAssociation {
            handle,
            association,
            replaces,
        })
    }

    /// A packet for no association (RFC 9260 8.4), or an INIT that may
    /// start one.
    fn out_of_the_blue(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        packet: Packet,
    ) -> Option<DatagramEvent> {
        self.stats.out_of_the_blue += 1;
        let first = packet.chunks.first()?;
        match first {
            Chunk::Init(init) => {
                if !self.listening || packet.vtag != 0 || packet.chunks.len() != 1 {
                    return None;
                }
                if init.initiate_tag == 0 {
                    // RFC 9260 3.3.2: silently discarded. Zero is no tag
                    // (8.5.1 A reserves it for the INIT's own header), so an
                    // ABORT to it would reach nobody.
                    return None;
                }
                if init.outbound_streams == 0 || init.inbound_streams == 0 {
                    // RFC 9260 3.3.2: an INIT with zero streams is aborted.
                    let abort = Chunk::Abort {
                        reflected: false,
                        causes: vec![ErrorCause::new(cause::INVALID_PARAMETER, Bytes::new())],
                    };
                    return self.respond(
                        remote,
                        (packet.dst_port, packet.src_port),
                        init.initiate_tag,
                        abort,
                    );
                }
                self.stats.out_of_the_blue -= 1;
                if !self.init_acks.take(now, self.limits.init_acks_per_second) {
                    // Dropped before any work a spoofed flood could make
                    // us repeat: no HMAC, no datagram out.
                    self.refused(now, remote, Limit::InitRate);
                    return None;
                }
                let init = init.clone();
                if let Some(limit) = self.over_limit(&remote) {
                    let ports = (packet.dst_port, packet.src_port);
                    return self.refuse(now, remote, ports, init.initiate_tag, limit);
                }
                self.stats.init_acks += 1;
                self.init_ack(now, remote, packet.src_port, packet.dst_port, init)
            }
            // Rules 2, 6 and 7: never answered.
            Chunk::Abort { .. }
            | Chunk::ShutdownComplete { .. }
            | Chunk::CookieAck
            | Chunk::Error(_) => None,
            // Rule 5: SHUTDOWN ACK is answered with SHUTDOWN COMPLETE, T set.
            Chunk::ShutdownAck => {
                let complete = Chunk::ShutdownComplete { reflected: true };
                self.respond(
                    remote,
                    (packet.dst_port, packet.src_port),
                    packet.vtag,
                    complete,
                )
            }
            // Rule 8: anything else gets an ABORT with the T bit.
            _ => {
                if packet.vtag == 0 {
                    return None;
                }
                let abort = Chunk::Abort {
                    reflected: true,
                    causes: Vec::new(),
                };
                self.respond(
                    remote,
                    (packet.dst_port, packet.src_port),
                    packet.vtag,
                    abort,
                )
            }
        }
    }

    fn init_ack(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        peer_port: u16,
        local_port: u16,
        init: Init,
    ) -> Option<DatagramEvent> {
        let config = &self.shared.config;
        let idata = config.idata && init.supports_idata();
        // A tag that an association with this peer's IP address has would
        // make the two indistinguishable after a port change (`by_tag`).
        let local_tag = loop {
            let tag = nonzero(&mut self.rng);
            if !self.by_tag.contains_key(&(remote.ip(), tag)) {
                break tag;
            }
        };
        // Drawn even when a test fixes it, so the tags stay what the seed gives.
        let local_initial_tsn = config.initial_tsn.unwrap_or(self.rng.random());
        let state = CookieState {
            issued_ms: self.shared.now_ms(now),
            lifetime_ms: config.cookie_life_ms(init.cookie_preservative),
            local_tag,
            local_initial_tsn,
            peer_tag: init.initiate_tag,
            peer_initial_tsn: init.initial_tsn,
            peer_a_rwnd: init.a_rwnd,
            outbound_streams: config.outbound_streams.min(init.inbound_streams),
            inbound_streams: config.max_inbound_streams.min(init.outbound_streams),
            idata,
            local_port,
            peer_port,
            local_tie_tag: 0,
            peer_tie_tag: 0,
        };
        let cookie = state.seal(&self.shared.key, &remote);
        let ack = Init {
            initiate_tag: local_tag,
            a_rwnd: config.recv_window,
            outbound_streams: config.outbound_streams,
            inbound_streams: config.max_inbound_streams,
            initial_tsn: local_initial_tsn,
            cookie: Some(cookie),
            extensions: if idata {
                vec![kind::I_DATA]
            } else {
                Vec::new()
            },
            cookie_preservative: None,
            unrecognized: init.unrecognized,
        };
        self.respond(
            remote,
            (local_port, peer_port),
            init.initiate_tag,
            Chunk::InitAck(ack),
        )
    }

    /// A one-chunk packet to `remote`; `ports` are (ours as the peer
    /// addressed it, the peer's). None if the chunk cannot be encoded, which
    /// nothing an endpoint answers with can be: what it echoes of a peer is
    /// capped by `wire::MAX_REPORT_LEN`.
    fn respond(
        &self,
        remote: SocketAddr,
        ports: (u16, u16),
        vtag: u32,
        chunk: Chunk,
    ) -> Option<DatagramEvent> {
        let packet = Packet {
            src_port: ports.0,
            dst_port: ports.1,
            vtag,
            chunks: vec![chunk],
        };
        let mut buf = BytesMut::with_capacity(packet.encoded_len());
        if let Err(e) = packet.encode(&mut buf) {
            debug!(%remote, error = %e, "answer not sent");
            return None;
        }
        Some(DatagramEvent::Response(Transmit {
            destination: remote,
            contents: buf.freeze(),
        }))
    }
}
