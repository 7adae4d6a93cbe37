//! Several associations through one bottleneck: N client endpoints, each
//! with one association to one listening server endpoint, every datagram
//! through one shared rate-limited drop-tail queue per direction (the
//! "dumbbell" of congestion-control studies). Cross traffic is what the
//! two-endpoint [`Sim`](super::Sim) cannot show: associations competing for
//! one queue, each seeing the others' losses and delay.
//!
//! ```text
//!  client 0 --delay[0]--\                         /-- server
//!  client 1 --delay[1]---+== queue, rate (up) ===>+
//!  ...                  <=== queue, rate (down) ==
//! ```
//!
//! Each client's one-way delay is its own (so round trips may differ); the
//! queue is where the associations meet. Deterministic: no randomness but
//! the endpoints' seeds, drawn from the run's seed like [`Sim`](super::Sim)'s.
//! Per-pair goodput is what each client read, over the time it took.
//!
//! [`Dumbbell::mixed`] gives each client its own configuration (so its own
//! congestion controller) and lets the clients upload: what the server read
//! from client `i` is in `uploads[i]`. That is how a loss-based reference
//! sender (our CUBIC or Reno) shares the queue with a BBR association.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sctp::{Association, Config, Event};

use super::{Side, drain_side, endpoint_seeds};

/// The shared link.
#[derive(Debug, Clone)]
pub(crate) struct Bottleneck {
    /// Bits per second, each direction.
    pub(crate) rate: u64,
    /// The longest a datagram may wait in the queue; one that would wait
    /// longer is dropped (drop-tail, the buffer given as time at `rate`).
    pub(crate) queue: Duration,
}

/// Which way a datagram crosses the bottleneck.
const UP: usize = 0;
const DOWN: usize = 1;

/// Bytes of IPv4 and UDP header each datagram costs on the wire.
const HEADERS: u64 = 28;

/// Where a datagram goes: the server or client `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Server,
    Client(usize),
}

struct Flight {
    to: Node,
    from: SocketAddr,
    data: Bytes,
}

/// What one pair got.
#[derive(Debug, Clone, Default)]
pub(crate) struct PairReport {
    /// Message bytes client `i` read.
    pub(crate) bytes: u64,
    /// When its first and last messages were read.
    pub(crate) first: Option<Instant>,
    pub(crate) last: Option<Instant>,
    /// Each message read: when, and its bytes.
    pub(crate) reads: Vec<(Instant, u64)>,
}

impl PairReport {
    fn record(&mut self, now: Instant, bytes: u64) {
        self.bytes += bytes;
        self.reads.push((now, bytes));
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Message bytes read in `from..=to`.
    pub(crate) fn bytes_between(&self, from: Instant, to: Instant) -> u64 {
        self.reads
            .iter()
            .filter(|(at, _)| (from..=to).contains(at))
            .map(|(_, bytes)| bytes)
            .sum()
    }

    /// Bits per second from the first message read to the last.
    pub(crate) fn goodput(&self) -> f64 {
        match (self.first, self.last) {
            (Some(first), Some(last)) if last > first => {
                self.bytes as f64 * 8.0 / (last - first).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

/// N clients and a server through one bottleneck.
pub(crate) struct Dumbbell {
    pub(crate) now: Instant,
    pub(crate) server: Side,
    pub(crate) clients: Vec<Side>,
    /// One-way delay between client `i` and the server, queueing aside.
    pub(crate) delays: Vec<Duration>,
    pub(crate) bottleneck: Bottleneck,
    /// Datagrams the queue dropped, by direction (0: toward the server).
    pub(crate) dropped: [u64; 2],
    /// What each client read, and when.
    pub(crate) reports: Vec<PairReport>,
    /// What the server read from each client, and when.
    pub(crate) uploads: Vec<PairReport>,
    queue: BinaryHeap<(Reverse<Instant>, u64)>,
    flights: HashMap<u64, Flight>,
    seq: u64,
    /// When the bottleneck is free again, by direction.
    link_free: [Instant; 2],
}

impl Dumbbell {
    /// One client per entry of `delays` (its one-way delay), a listening
    /// server; none connected yet.
    pub(crate) fn new(
        client: Config,
        server: Config,
        bottleneck: Bottleneck,
        delays: Vec<Duration>,
        seed: u64,
    ) -> Self {
        let clients = vec![client; delays.len()];
        Dumbbell::mixed(clients, server, bottleneck, delays, seed)
    }

    /// One client per entry of `clients` (its configuration) and of `delays`
    /// (its one-way delay), a listening server; none connected yet.
    pub(crate) fn mixed(
        clients: Vec<Config>,
        server: Config,
        bottleneck: Bottleneck,
        delays: Vec<Duration>,
        seed: u64,
    ) -> Self {
        assert_eq!(clients.len(), delays.len(), "one delay per client");
        let now = Instant::now();
        let seeds = endpoint_seeds(seed, delays.len() + 1);
        let server_addr: SocketAddr = "192.0.2.2:9899".parse().expect("address");
        let clients = clients
            .into_iter()
            .enumerate()
            .map(|(i, config)| {
                let port = 10_000 + u16::try_from(i).expect("a few clients");
                let addr = SocketAddr::from(([198, 51, 100, 1], port));
                Side::new(config, addr, false, seeds[i + 1], now)
            })
            .collect();
        let mut server = Side::new(server, server_addr, true, seeds[0], now);
        // The server's reads are taken per association in `drain`.
        server.reading = false;
        Dumbbell {
            now,
            server,
            clients,
            reports: vec![PairReport::default(); delays.len()],
            uploads: vec![PairReport::default(); delays.len()],
            delays,
            bottleneck,
            dropped: [0; 2],
            queue: BinaryHeap::new(),
            flights: HashMap::new(),
            seq: 0,
            link_free: [now; 2],
        }
    }

    /// Every client opens its association; true when all are up on both
    /// sides within `limit`.
    pub(crate) fn connect_all(&mut self, limit: Duration) -> bool {
        let server = self.server.addr;
        for client in &mut self.clients {
            let (handle, assoc) = client.endpoint.connect(self.now, server, server.port());
            client.assocs.insert(handle, assoc);
        }
        let n = self.clients.len();
        self.run_until(limit, |d| {
            let up = |side: &Side| {
                side.events
                    .iter()
                    .filter(|(_, e)| *e == Event::Connected)
                    .count()
            };
            d.clients.iter().all(|c| up(c) == 1) && up(&d.server) == n
        })
    }

    /// The server's association with client `i`.
    pub(crate) fn server_assoc(&mut self, i: usize) -> &mut Association {
        let addr = self.clients[i].addr;
        self.server
            .assocs
            .values_mut()
            .find(|a| a.remote() == addr)
            .expect("the server has an association with the client")
    }

    /// Puts a datagram from `from` on its way to `to`: through the shared
    /// queue of its direction (or dropped at its tail), then the client's delay.
    fn transmit(&mut self, from: SocketAddr, to: Node, data: Bytes) {
        let (direction, client) = match to {
            Node::Server => (UP, self.clients.iter().position(|c| c.addr == from)),
            Node::Client(i) => (DOWN, Some(i)),
        };
        let Some(client) = client else {
            return;
        };
        let start = self.link_free[direction].max(self.now);
        if start.duration_since(self.now) > self.bottleneck.queue {
            self.dropped[direction] += 1;
            return;
        }
        let bits = (data.len() as u64 + HEADERS) * 8;
        self.link_free[direction] =
            start + Duration::from_nanos(bits * 1_000_000_000 / self.bottleneck.rate);
        let at = self.link_free[direction] + self.delays[client];
        self.seq += 1;
        self.flights.insert(self.seq, Flight { to, from, data });
        self.queue.push((Reverse(at), self.seq));
    }

    fn deliver(&mut self, flight: Flight) {
        let now = self.now;
        let side = match flight.to {
            Node::Server => &mut self.server,
            Node::Client(i) => &mut self.clients[i],
        };
        if let Some(response) = side.handle(now, flight.from, flight.data) {
            let from = side.addr;
            self.route(from, response.destination, response.contents);
        }
    }

    /// Sends what a node emitted to its destination, if it is on the network.
    fn route(&mut self, from: SocketAddr, destination: SocketAddr, data: Bytes) {
        let to = if destination == self.server.addr {
            Some(Node::Server)
        } else {
            self.clients
                .iter()
                .position(|c| c.addr == destination)
                .map(Node::Client)
        };
        if let Some(to) = to {
            self.transmit(from, to, data);
        }
    }

    /// Drains every association of every node, and counts what clients read.
    fn drain(&mut self) {
        let now = self.now;
        let mut out = Vec::new();
        let from = self.server.addr;
        out.extend(
            drain_side(&mut self.server, now)
                .into_iter()
                .map(|t| (from, t)),
        );
        for assoc in self.server.assocs.values_mut() {
            let client = self.clients.iter().position(|c| c.addr == assoc.remote());
            let mut read = false;
            while let Some(message) = assoc.recv() {
                read = true;
                if let Some(i) = client {
                    self.uploads[i].record(now, message.data.len() as u64);
                }
            }
            // Reading may have reopened the window: a SACK may be due.
            while read && let Some(t) = assoc.poll_transmit(now) {
                out.push((from, t));
            }
        }
        for (i, client) in self.clients.iter_mut().enumerate() {
            let read_before = client.received.len();
            let from = client.addr;
            out.extend(drain_side(client, now).into_iter().map(|t| (from, t)));
            let report = &mut self.reports[i];
            for message in &client.received[read_before..] {
                report.record(now, message.data.len() as u64);
            }
        }
        for (from, t) in out {
            self.route(from, t.destination, t.contents);
        }
    }

    fn associations(&self) -> impl Iterator<Item = &Association> {
        self.clients
            .iter()
            .chain(std::iter::once(&self.server))
            .flat_map(|s| s.assocs.values())
    }

    /// One turn, as [`Sim::step`](super::Sim::step): deliver, time-outs,
    /// drain, then the clock moves; false when nothing will happen.
    fn step(&mut self) -> bool {
        while let Some(&(Reverse(at), seq)) = self.queue.peek() {
            if at > self.now {
                break;
            }
            self.queue.pop();
            if let Some(flight) = self.flights.remove(&seq) {
                self.deliver(flight);
            }
        }
        let now = self.now;
        for side in self
            .clients
            .iter_mut()
            .chain(std::iter::once(&mut self.server))
        {
            for assoc in side.assocs.values_mut() {
                if assoc.poll_timeout().is_some_and(|t| t <= now) {
                    assoc.handle_timeout(now);
                    assert!(
                        assoc.poll_timeout().is_none_or(|t| t > now),
                        "a timer is still due after handle_timeout"
                    );
                }
            }
        }
        self.drain();
        let next_packet = self.queue.peek().map(|(Reverse(at), _)| *at);
        let next_timer = self
            .associations()
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
        done: impl FnMut(&mut Dumbbell) -> bool,
    ) -> bool {
        super::run_until(self, limit, done)
    }

    /// The association of client `i`.
    pub(crate) fn client_assoc(&mut self, i: usize) -> &mut Association {
        self.clients[i].assoc()
    }
}

impl super::Stepped for Dumbbell {
    fn now(&self) -> Instant {
        self.now
    }

    fn step(&mut self) -> bool {
        Dumbbell::step(self)
    }
}
