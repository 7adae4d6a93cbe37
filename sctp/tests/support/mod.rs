//! A simulated network for the SCTP core: two endpoints, a virtual clock and
//! a link with seeded loss (independent or in bursts), reordering,
//! duplication, delay and a rate with a drop-tail queue. Nothing real: the
//! same seed gives the same run, so a failure is replayed exactly.
//!
//! The loop (`Sim::step`) is the driver a real socket would have: deliver
//! what is due, run due timers, drain every association's transmits and
//! events, read every message, then jump the clock to the next deadline.
//!
//! The seed decides everything random: the link's draws and, through
//! [`endpoint_seeds`], each endpoint's own seed (verification tags, initial
//! TSNs, the cookie key), distinct per side. So each seed also gives other
//! tags and initial TSNs, and a property test over seeds covers TSNs
//! anywhere in the 32-bit space, not one fixed start.

#![allow(
    dead_code,
    reason = "each test file uses a different part of the harness"
)]

pub(crate) mod dumbbell;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sctp::{AssocHandle, Association, Config, DatagramEvent, Endpoint, Event, Message, Transmit};

/// How the link treats each datagram, both directions alike.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// One-way delay.
    pub(crate) delay: Duration,
    /// Extra random delay, uniform in 0..jitter (reorders packets).
    pub(crate) jitter: Duration,
    /// Probability a datagram is lost (independent).
    pub(crate) loss: f64,
    /// Gilbert burst loss: (probability of entering the bad state per
    /// datagram, probability of staying in it); every datagram in the bad state is lost.
    pub(crate) burst: Option<(f64, f64)>,
    /// Probability a datagram is delivered twice.
    pub(crate) duplicate: f64,
    /// Bits per second, if limited.
    pub(crate) rate: Option<u64>,
    /// Longest a datagram may wait in the rate limiter's queue before it is dropped.
    pub(crate) queue: Duration,
    /// Datagrams larger than this are dropped (a path MTU), bytes.
    pub(crate) max_datagram: Option<usize>,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            delay: Duration::from_millis(10),
            jitter: Duration::ZERO,
            loss: 0.0,
            burst: None,
            duplicate: 0.0,
            rate: None,
            queue: Duration::from_millis(100),
            max_datagram: None,
        }
    }
}

/// One side: an endpoint and the associations it drives.
pub(crate) struct Side {
    pub(crate) endpoint: Endpoint,
    pub(crate) addr: SocketAddr,
    pub(crate) assocs: BTreeMap<AssocHandle, Association>,
    /// Every message read, in order of reading.
    pub(crate) received: Vec<Message>,
    pub(crate) events: Vec<(AssocHandle, Event)>,
    /// Read messages as they arrive (false: leave them in the association).
    pub(crate) reading: bool,
}

impl Side {
    fn new(
        config: Config,
        addr: SocketAddr,
        listening: bool,
        seed: [u8; 32],
        now: Instant,
    ) -> Self {
        Side {
            endpoint: Endpoint::new(config, addr.port(), listening, seed, now)
                .expect("valid configuration"),
            addr,
            assocs: BTreeMap::new(),
            received: Vec::new(),
            events: Vec::new(),
            reading: true,
        }
    }

    /// Takes a datagram from `from`: to its association, or a new one; the
    /// endpoint's own answer (INIT ACK, ABORT, ...) is returned to be sent.
    fn handle(&mut self, now: Instant, from: SocketAddr, data: Bytes) -> Option<Transmit> {
        match self.endpoint.handle(now, from, data)? {
            DatagramEvent::Association(handle, incoming) => {
                if let Some(assoc) = self.assocs.get_mut(&handle) {
                    assoc.handle(now, incoming);
                }
                None
            }
            DatagramEvent::NewAssociation {
                handle,
                association,
                replaces,
            } => {
                if let Some(old) = replaces
                    && let Some(mut assoc) = self.assocs.remove(&old)
                {
                    assoc.peer_restarted();
                    while let Some(event) = assoc.poll_event() {
                        self.events.push((old, event));
                    }
                }
                self.assocs.insert(handle, *association);
                None
            }
            DatagramEvent::Response(transmit) => Some(transmit),
        }
    }

    /// The only association of this side.
    pub(crate) fn assoc(&mut self) -> &mut Association {
        self.assocs
            .values_mut()
            .next()
            .expect("the side has an association")
    }
}

/// Drains every association of `side`: its transmits (returned, in order),
/// events, and (if it is reading) its messages; forgets the drained ones.
fn drain_side(side: &mut Side, now: Instant) -> Vec<Transmit> {
    let mut out = Vec::new();
    let mut over = Vec::new();
    for (handle, assoc) in side.assocs.iter_mut() {
        while let Some(t) = assoc.poll_transmit(now) {
            out.push(t);
        }
        while let Some(event) = assoc.poll_event() {
            side.events.push((*handle, event));
        }
        if side.reading {
            while let Some(msg) = assoc.recv() {
                side.received.push(msg);
            }
            // Reading may have reopened the window: a SACK may be due.
            while let Some(t) = assoc.poll_transmit(now) {
                out.push(t);
            }
        }
        if assoc.is_drained() {
            over.push(*handle);
        }
    }
    for handle in over {
        side.endpoint.forget(handle);
    }
    out
}

struct InFlight {
    to: usize,
    from: SocketAddr,
    data: Bytes,
}

/// Two sides and the link between them.
pub(crate) struct Sim {
    pub(crate) now: Instant,
    pub(crate) sides: [Side; 2],
    pub(crate) link: Link,
    rng: StdRng,
    queue: BinaryHeap<(Reverse<Instant>, u64, usize)>,
    flights: HashMap<u64, InFlight>,
    seq: u64,
    link_free: [Instant; 2],
    bad: [bool; 2],
    /// Every datagram that entered the link, by direction (0: client to server).
    pub(crate) sent: [Vec<Bytes>; 2],
    /// When each of `sent` entered the link.
    pub(crate) sent_at: [Vec<Instant>; 2],
    pub(crate) dropped: u64,
    /// Datagrams carrying DATA with one of these TSNs are dropped, once per
    /// entry (the first transmission, if listed once).
    pub(crate) drop_tsns: Vec<u32>,
    /// Datagrams carrying DATA with one of these TSNs arrive this much later
    /// than the link would deliver them, once per entry: reordering.
    pub(crate) hold_tsns: Vec<(u32, Duration)>,
    /// Datagrams to these addresses are dropped (a NAT mapping that is gone).
    pub(crate) unreachable: Vec<SocketAddr>,
}

/// Turns the loop may take without the clock moving before the run counts
/// as a livelock (a timer that fires and re-arms for the same instant).
const MAX_TURNS_AT_ONE_INSTANT: u32 = 10_000;

/// The TSNs of the DATA chunks a datagram carries (none if it does not decode).
fn data_tsns(data: &Bytes) -> Vec<u32> {
    sctp::chunk::Packet::decode(data.clone()).map_or_else(
        |_| Vec::new(),
        |packet| {
            packet
                .chunks
                .iter()
                .filter_map(|c| match c {
                    sctp::chunk::Chunk::Data(d) => Some(d.tsn),
                    _ => None,
                })
                .collect()
        },
    )
}

pub(crate) const CLIENT: usize = 0;
pub(crate) const SERVER: usize = 1;

/// The endpoint seeds of simulation `seed`, `n` of them, all distinct: drawn
/// from their own generator, so the link's draws for a seed stay what they
/// were before the endpoints' seeds came from it.
pub(crate) fn endpoint_seeds(seed: u64, n: usize) -> Vec<[u8; 32]> {
    /// Keeps this generator's stream apart from the link's (same seed).
    const ENDPOINTS: u64 = 0x5eed_e4d9_0147_5a11;
    let mut rng = StdRng::seed_from_u64(seed ^ ENDPOINTS);
    let mut seeds: Vec<[u8; 32]> = Vec::with_capacity(n);
    while seeds.len() < n {
        let next: [u8; 32] = rng.random();
        if !seeds.contains(&next) {
            seeds.push(next);
        }
    }
    seeds
}

impl Sim {
    /// A client (side 0) and a listening server (side 1).
    pub(crate) fn new(client: Config, server: Config, link: Link, seed: u64) -> Self {
        let now = Instant::now();
        let client_addr: SocketAddr = "192.0.2.1:9899".parse().expect("address");
        let server_addr: SocketAddr = "192.0.2.2:9899".parse().expect("address");
        let seeds = endpoint_seeds(seed, 2);
        Sim {
            now,
            sides: [
                Side::new(client, client_addr, false, seeds[CLIENT], now),
                Side::new(server, server_addr, true, seeds[SERVER], now),
            ],
            link,
            rng: StdRng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            flights: HashMap::new(),
            seq: 0,
            link_free: [now; 2],
            bad: [false; 2],
            sent: [Vec::new(), Vec::new()],
            sent_at: [Vec::new(), Vec::new()],
            dropped: 0,
            drop_tsns: Vec::new(),
            hold_tsns: Vec::new(),
            unreachable: Vec::new(),
        }
    }

    /// The client opens an association to the server.
    pub(crate) fn connect(&mut self) -> AssocHandle {
        let server = self.sides[SERVER].addr;
        let now = self.now;
        let side = &mut self.sides[CLIENT];
        let (handle, assoc) = side.endpoint.connect(now, server, server.port());
        side.assocs.insert(handle, assoc);
        handle
    }

    /// Puts a datagram on the link from side `from`.
    pub(crate) fn transmit(&mut self, from: usize, data: Bytes) {
        let to = 1 - from;
        self.sent[from].push(data.clone());
        self.sent_at[from].push(self.now);
        let tsns = if self.drop_tsns.is_empty() && self.hold_tsns.is_empty() {
            Vec::new()
        } else {
            data_tsns(&data)
        };
        if let Some(i) = tsns
            .iter()
            .find_map(|tsn| self.drop_tsns.iter().position(|t| t == tsn))
        {
            self.drop_tsns.remove(i);
            self.dropped += 1;
            return;
        }
        let held = tsns
            .iter()
            .find_map(|tsn| self.hold_tsns.iter().position(|(t, _)| t == tsn))
            .map_or(Duration::ZERO, |i| self.hold_tsns.remove(i).1);
        let link = self.link.clone();
        if link.max_datagram.is_some_and(|max| data.len() > max) {
            self.dropped += 1;
            return;
        }
        if let Some((enter, stay)) = link.burst {
            let p = if self.bad[from] { stay } else { enter };
            self.bad[from] = self.rng.random_bool(p);
            if self.bad[from] {
                self.dropped += 1;
                return;
            }
        }
        if link.loss > 0.0 && self.rng.random_bool(link.loss) {
            self.dropped += 1;
            return;
        }
        let mut depart = self.now;
        if let Some(rate) = link.rate {
            let start = self.link_free[from].max(self.now);
            if start.duration_since(self.now) > link.queue {
                self.dropped += 1;
                return;
            }
            let bits = (data.len() as u64 + 28) * 8;
            let serialise = Duration::from_nanos(bits * 1_000_000_000 / rate);
            self.link_free[from] = start + serialise;
            depart = self.link_free[from];
        }
        let copies = if link.duplicate > 0.0 && self.rng.random_bool(link.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = if link.jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_nanos(self.rng.random_range(0..link.jitter.as_nanos() as u64))
            };
            let at = depart + link.delay + jitter + held;
            self.seq += 1;
            self.flights.insert(
                self.seq,
                InFlight {
                    to,
                    from: self.sides[from].addr,
                    data: data.clone(),
                },
            );
            self.queue.push((Reverse(at), self.seq, to));
        }
    }

    fn deliver(&mut self, to: usize, from: SocketAddr, data: Bytes) {
        let now = self.now;
        if let Some(response) = self.sides[to].handle(now, from, data) {
            if self.unreachable.contains(&response.destination) {
                self.dropped += 1;
            } else {
                self.transmit(to, response.contents);
            }
        }
    }

    /// Drains every association of both sides: transmits, events, messages.
    pub(crate) fn drain(&mut self) {
        for i in 0..2 {
            let now = self.now;
            for t in drain_side(&mut self.sides[i], now) {
                if self.unreachable.contains(&t.destination) {
                    self.dropped += 1;
                } else {
                    self.transmit(i, t.contents);
                }
            }
        }
    }

    /// One turn: deliver what is due, run timers, drain. Then the clock moves
    /// to the next thing that will happen; false when nothing will.
    pub(crate) fn step(&mut self) -> bool {
        while let Some(&(Reverse(at), seq, to)) = self.queue.peek() {
            if at > self.now {
                break;
            }
            self.queue.pop();
            if let Some(f) = self.flights.remove(&seq) {
                debug_assert_eq!(f.to, to);
                self.deliver(to, f.from, f.data);
            }
        }
        let now = self.now;
        for side in &mut self.sides {
            for assoc in side.assocs.values_mut() {
                if assoc.poll_timeout().is_some_and(|t| t <= now) {
                    assoc.handle_timeout(now);
                    // A driver sleeps until poll_timeout: a deadline still
                    // due after handle_timeout would make it spin.
                    assert!(
                        assoc.poll_timeout().is_none_or(|t| t > now),
                        "a timer is still due after handle_timeout"
                    );
                }
            }
        }
        self.drain();
        let next_packet = self.queue.peek().map(|(Reverse(at), _, _)| *at);
        let next_timer = self
            .sides
            .iter()
            .flat_map(|s| s.assocs.values())
            .filter_map(Association::poll_timeout)
            .min();
        match [next_packet, next_timer].into_iter().flatten().min() {
            Some(at) => {
                self.now = self.now.max(at);
                true
            }
            None => false,
        }
    }

    /// Steps until `done` holds or `limit` of simulated time passes; returns
    /// whether `done` held.
    pub(crate) fn run_until(
        &mut self,
        limit: Duration,
        done: impl FnMut(&mut Sim) -> bool,
    ) -> bool {
        run_until(self, limit, done)
    }

    /// Runs for `span` of simulated time.
    pub(crate) fn run_for(&mut self, span: Duration) {
        let end = self.now + span;
        self.run_until(span, |sim| sim.now >= end);
    }

    /// DATA chunks side `i` put on the link, by TSN, first transmissions and
    /// retransmissions alike.
    pub(crate) fn data_sent(&self, i: usize) -> Vec<u32> {
        self.sent[i]
            .iter()
            .filter_map(|d| sctp::chunk::Packet::decode(d.clone()).ok())
            .flat_map(|p| p.chunks)
            .filter_map(|c| match c {
                sctp::chunk::Chunk::Data(d) => Some(d.tsn),
                _ => None,
            })
            .collect()
    }

    /// Whether side `i` saw `event`.
    pub(crate) fn saw(&self, i: usize, event: &Event) -> bool {
        self.sides[i].events.iter().any(|(_, e)| e == event)
    }
}

/// Bytes of the largest SCTP packet one UDP datagram over IPv4 carries
/// (65,535 minus 20 bytes of IP and 8 of UDP header).
pub(crate) const MAX_UDP_PAYLOAD: usize = 65_507;

/// An INIT as large as a UDP datagram over IPv4 allows, whose parameters are
/// all of unknown types that ask to be skipped and reported (RFC 9260
/// 3.2.1): `small` first, then parameters of 4,092 bytes while they fit.
/// Reporting them all would take an INIT ACK longer than a chunk can be;
/// once such a datagram made the encoder panic, which stopped the
/// listener's driver (and, spoofed, a gateway's association).
pub(crate) fn init_asking_for_huge_reports(tag: u32, ports: (u16, u16), small: bool) -> Bytes {
    use bytes::BytesMut;
    use sctp::chunk::{Chunk, Init, Packet};

    const FIXED: usize = 12 + 20;
    const LARGE: usize = 4092;
    let param = |kind: u16, len: usize| {
        let mut p = Vec::with_capacity(len);
        p.extend_from_slice(&kind.to_be_bytes());
        p.extend_from_slice(&u16::try_from(len).expect("short").to_be_bytes());
        p.resize(len, 0xa5);
        Bytes::from(p)
    };
    let mut params = Vec::new();
    let mut total = FIXED;
    if small {
        params.push(param(0xc1ff, 8));
        total += 8;
    }
    let mut kind = 0xc100;
    while total + LARGE <= MAX_UDP_PAYLOAD {
        params.push(param(kind, LARGE));
        total += LARGE;
        kind += 1;
    }
    let packet = Packet {
        src_port: ports.0,
        dst_port: ports.1,
        vtag: 0,
        chunks: vec![Chunk::Init(Init {
            initiate_tag: tag,
            a_rwnd: 65_536,
            outbound_streams: 4,
            inbound_streams: 4,
            initial_tsn: 1000,
            unrecognized: params,
            ..Init::default()
        })],
    };
    let mut out = BytesMut::new();
    packet
        .encode(&mut out)
        .expect("an INIT of one datagram encodes");
    assert_eq!(out.len(), total, "built as planned");
    assert!(
        out.len() > MAX_UDP_PAYLOAD - LARGE,
        "as large as a datagram allows"
    );
    out.freeze()
}

/// A simulation that advances by steps: the two-sided [`Sim`] and the
/// [`dumbbell::Dumbbell`].
pub(crate) trait Stepped {
    /// The simulated time.
    fn now(&self) -> Instant;
    /// One turn; false when nothing is left to happen.
    fn step(&mut self) -> bool;
}

impl Stepped for Sim {
    fn now(&self) -> Instant {
        self.now
    }

    fn step(&mut self) -> bool {
        Sim::step(self)
    }
}

/// Steps `sim` until `done` holds or `limit` of simulated time passes;
/// returns whether `done` held. Many turns at one instant are a livelock.
pub(crate) fn run_until<S: Stepped>(
    sim: &mut S,
    limit: Duration,
    mut done: impl FnMut(&mut S) -> bool,
) -> bool {
    let start = sim.now();
    let end = start + limit;
    let mut same_instant = 0;
    loop {
        if done(sim) {
            return true;
        }
        let before = sim.now();
        if sim.now() > end || !sim.step() {
            return done(sim);
        }
        same_instant = if sim.now() == before {
            same_instant + 1
        } else {
            0
        };
        assert!(
            same_instant < MAX_TURNS_AT_ONE_INSTANT,
            "livelock: the clock stopped at {:?}",
            sim.now() - start
        );
    }
}
