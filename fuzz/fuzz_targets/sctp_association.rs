//! An established association pair fed arbitrary sequences of operations:
//! datagrams (arbitrary bytes, or packets built from the input with the
//! right verification tag and a valid checksum, so they reach the state
//! machine), real packets delivered, dropped, duplicated or replayed, time
//! advanced, application sends, reads, closes and aborts. Datagrams go up to
//! the largest UDP payload over IPv4 (65,507 bytes), as a peer's can: raw
//! ones, forged ones with large chunks and long gap and duplicate lists, and
//! full-size ones (a DATA bundle in the window, a SACK with more reports than
//! the decoder reads, an INIT with thousands of parameters).
//!
//! Invariants checked after every operation:
//! - nothing panics, and every loop terminates (a bounded number of
//!   transmits per drain);
//! - every datagram an association emits decodes with our own decoder and
//!   fits the configured MTU;
//! - after `handle_timeout(now)`, `poll_timeout` is never at or before `now`;
//! - the bytes of whole messages waiting to be read never exceed twice the
//!   configured receive window, and what each endpoint's receivers charge to
//!   its memory pool stays within `Config::receive_memory_bound` per
//!   association (memory is bounded whatever the peer sends);
//! - counted by a global allocator, an input gives back every byte it
//!   allocated once the pair is dropped (nothing leaks, whatever the peer
//!   did; sctp/tests/memory.rs holds the worst cases to the bound itself).
//! - an association ends at most once, and says nothing after it ended.
#![no_main]

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use sctp::chunk::{
    Chunk, DataChunk, DataKind, ErrorCause, GapBlock, Init, Packet, Sack, cause, kind,
};
use sctp::{AssocHandle, Association, Config, DatagramEvent, Endpoint, Event, State};

#[path = "../../sctp/tests/support/counting.rs"]
mod counting;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// What an input may leave allocated once its pair is dropped.
const LEAK_SLACK: isize = 4 * 1024;

/// The receive window both sides advertise, bytes: small, so the fuzzer
/// reaches a full window quickly.
const WINDOW: u32 = 64 * 1024;
/// The largest message either side accepts, bytes.
const MAX_MESSAGE: usize = 16 * 1024;
/// Operations taken from one input at most.
const MAX_OPS: usize = 256;
/// Datagrams one drain of one association may yield before it counts as a
/// livelock.
const MAX_TRANSMITS_PER_DRAIN: usize = 4096;
/// Real datagrams kept for replay.
const MAX_RECORDED: usize = 64;
/// Datagrams waiting on the link each way at most (older ones are lost).
const MAX_QUEUED: usize = 1024;
/// SCTP port of both sides.
const PORT: u16 = 5000;
/// The largest SCTP packet a UDP datagram over IPv4 carries, bytes.
const MAX_UDP_PAYLOAD: usize = 65_507;
/// Gap blocks and duplicate TSNs a forged SACK may carry at most: past the
/// 256 of each the decoder reads.
const MAX_FORGED_REPORTS: usize = 300;

fn config(idata: bool) -> Config {
    Config {
        recv_window: WINDOW,
        max_message: MAX_MESSAGE,
        idata,
        rtt: sctp::rtt::RttConfig {
            initial: Duration::from_millis(300),
            min: Duration::from_millis(100),
            max: Duration::from_secs(5),
        },
        ..Config::default()
    }
}

struct Side {
    endpoint: Endpoint,
    addr: SocketAddr,
    assocs: BTreeMap<AssocHandle, Association>,
    /// Associations that reported their end.
    ended: Vec<AssocHandle>,
    reading: bool,
    /// Datagrams on their way to this side.
    inbound: VecDeque<Bytes>,
    /// The highest TSN this side sent (its initial TSN less one before any
    /// DATA): forged SACKs to this side and forged DATA from its peer aim
    /// near it, so they land inside the windows the receivers accept.
    sent_tsn: u32,
}

struct Pair {
    now: Instant,
    sides: [Side; 2],
    recorded: Vec<Bytes>,
    mtu: usize,
}

impl Side {
    fn new(config: Config, addr: SocketAddr, listening: bool, seed: u8, now: Instant) -> Self {
        Side {
            endpoint: Endpoint::new(config, PORT, listening, [seed; 32], now)
                .expect("valid configuration"),
            addr,
            assocs: BTreeMap::new(),
            ended: Vec::new(),
            reading: true,
            inbound: VecDeque::new(),
            sent_tsn: 0,
        }
    }
}

impl Pair {
    fn new(idata: bool) -> Self {
        let now = Instant::now();
        let config = config(idata);
        let mtu = config.mtu;
        let a: SocketAddr = "192.0.2.1:9899".parse().expect("address");
        let b: SocketAddr = "192.0.2.2:9899".parse().expect("address");
        let mut pair = Pair {
            now,
            sides: [
                Side::new(config.clone(), a, false, 1, now),
                Side::new(config, b, true, 2, now),
            ],
            recorded: Vec::new(),
            mtu,
        };
        let (handle, assoc) = pair.sides[0].endpoint.connect(now, b, PORT);
        pair.sides[0].assocs.insert(handle, assoc);
        // The handshake, with real packets: INIT, INIT ACK, COOKIE ECHO, COOKIE ACK.
        for _ in 0..8 {
            pair.drain();
            for to in 0..2 {
                while let Some(d) = pair.sides[to].inbound.pop_front() {
                    pair.deliver(to, d);
                }
            }
        }
        pair.drain();
        for side in &mut pair.sides {
            let established = side
                .assocs
                .values()
                .any(|a| a.state() == State::Established);
            assert!(established, "the handshake completes on a clean link");
        }
        pair
    }

    fn deliver(&mut self, to: usize, data: Bytes) {
        let now = self.now;
        let from = self.sides[1 - to].addr;
        let side = &mut self.sides[to];
        match side.endpoint.handle(now, from, data) {
            None => {}
            Some(DatagramEvent::Association(handle, incoming)) => {
                if let Some(assoc) = side.assocs.get_mut(&handle) {
                    assoc.handle(now, incoming);
                }
            }
            Some(DatagramEvent::NewAssociation {
                handle,
                association,
                replaces,
            }) => {
                if let Some(old) = replaces
                    && let Some(mut assoc) = side.assocs.remove(&old)
                {
                    assoc.peer_restarted();
                    while assoc.poll_event().is_some() {}
                    side.endpoint.forget(old);
                }
                side.assocs.insert(handle, *association);
            }
            Some(DatagramEvent::Response(t)) => self.send(to, t.contents),
        }
    }

    /// Puts a datagram from side `from` on the link.
    fn send(&mut self, from: usize, data: Bytes) {
        if let Ok(packet) = Packet::decode(data.clone()) {
            for chunk in &packet.chunks {
                if let Chunk::Data(d) = chunk
                    && sctp::seq::lt32(self.sides[from].sent_tsn, d.tsn)
                {
                    self.sides[from].sent_tsn = d.tsn;
                }
                if let Chunk::Init(i) | Chunk::InitAck(i) = chunk {
                    self.sides[from].sent_tsn = i.initial_tsn.wrapping_sub(1);
                }
            }
        }
        if self.recorded.len() < MAX_RECORDED {
            self.recorded.push(data.clone());
        }
        let queue = &mut self.sides[1 - from].inbound;
        if queue.len() >= MAX_QUEUED {
            queue.pop_front();
        }
        queue.push_back(data);
    }

    /// Drains every association: transmits (checked), events (checked),
    /// messages (the unread total checked).
    fn drain(&mut self) {
        let now = self.now;
        let mtu = self.mtu;
        for i in 0..2 {
            let mut out = Vec::new();
            let side = &mut self.sides[i];
            let mut over = Vec::new();
            for (handle, assoc) in side.assocs.iter_mut() {
                let mut n = 0;
                while let Some(t) = assoc.poll_transmit(now) {
                    n += 1;
                    assert!(n < MAX_TRANSMITS_PER_DRAIN, "poll_transmit never stops");
                    assert!(t.contents.len() <= mtu, "a datagram over the MTU");
                    if let Err(e) = Packet::decode(t.contents.clone()) {
                        panic!("we emitted a datagram we cannot decode: {e}");
                    }
                    out.push(t.contents);
                }
                while let Some(event) = assoc.poll_event() {
                    let ended = side.ended.contains(handle);
                    assert!(!ended, "event {event:?} after the association ended");
                    if matches!(event, Event::Closed | Event::Lost(_)) {
                        side.ended.push(*handle);
                    }
                }
                if side.reading {
                    let mut unread = 0;
                    while let Some(msg) = assoc.recv() {
                        assert!(msg.data.len() <= MAX_MESSAGE, "a message over the limit");
                        unread += msg.data.len();
                    }
                    assert!(
                        unread <= 2 * WINDOW as usize,
                        "{unread} bytes were waiting to be read"
                    );
                    let mut n = 0;
                    while let Some(t) = assoc.poll_transmit(now) {
                        n += 1;
                        assert!(n < MAX_TRANSMITS_PER_DRAIN, "poll_transmit never stops");
                        assert!(Packet::decode(t.contents.clone()).is_ok());
                        out.push(t.contents);
                    }
                }
                if assoc.is_drained() {
                    over.push(*handle);
                }
            }
            let bound = side.endpoint.config().receive_memory_bound();
            let charged = side.endpoint.receive_memory();
            assert!(
                charged <= bound * side.assocs.len().max(1),
                "receivers charged {charged} bytes; one association's bound is {bound}"
            );
            for handle in over {
                side.endpoint.forget(handle);
            }
            for data in out {
                self.send(i, data);
            }
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        let now = self.now;
        for side in &mut self.sides {
            for assoc in side.assocs.values_mut() {
                if assoc.poll_timeout().is_some_and(|t| t <= now) {
                    assoc.handle_timeout(now);
                    if let Some(t) = assoc.poll_timeout() {
                        assert!(t > now, "a timer still due after handle_timeout");
                    }
                }
            }
        }
    }

    /// Jumps to the earliest deadline of either side, if any.
    fn next_timeout(&mut self) {
        let next = self
            .sides
            .iter()
            .flat_map(|s| s.assocs.values())
            .filter_map(Association::poll_timeout)
            .min();
        if let Some(at) = next {
            let by = at.saturating_duration_since(self.now);
            self.advance(by);
        }
    }

    fn assoc(&mut self, side: usize) -> Option<&mut Association> {
        self.sides[side].assocs.values_mut().next_back()
    }
}

fn bytes(u: &mut Unstructured<'_>, max: usize) -> ArbResult<Bytes> {
    let len = u.int_in_range(0..=max)?;
    Ok(Bytes::copy_from_slice(u.bytes(len.min(u.len()))?))
}

/// A TSN near `base` (most of the time) or anywhere.
fn tsn_near(u: &mut Unstructured<'_>, base: u32) -> ArbResult<u32> {
    if u.ratio(1, 8)? {
        u.arbitrary()
    } else {
        let off: i16 = u.arbitrary()?;
        Ok(base.wrapping_add_signed(i32::from(off) % 64))
    }
}

/// A chunk with fuzzer-chosen fields. `their_tsn` is the last TSN the
/// (pretended) sender used; `our_tsn` the last the receiver sent.
fn chunk(u: &mut Unstructured<'_>, their_tsn: u32, our_tsn: u32) -> ArbResult<Chunk> {
    Ok(match u.int_in_range(0..=15u8)? {
        0..=2 => {
            let kind = if u.arbitrary()? {
                DataKind::IData
            } else {
                DataKind::Data
            };
            let len = if u.ratio(1, 8)? {
                u.int_in_range(0..=MAX_UDP_PAYLOAD)?
            } else {
                u.int_in_range(0..=2000usize)?
            };
            Chunk::Data(DataChunk {
                kind,
                unordered: u.ratio(1, 4)?,
                beginning: u.arbitrary()?,
                ending: u.arbitrary()?,
                immediate: u.ratio(1, 8)?,
                tsn: tsn_near(u, their_tsn.wrapping_add(1))?,
                stream: u.int_in_range(0..=20)?,
                mid: u.int_in_range(0..=8)?,
                fsn: u.int_in_range(0..=8)?,
                ppid: u.arbitrary()?,
                payload: Bytes::from(vec![0xa5; len]),
            })
        }
        3 | 4 => {
            let cum = tsn_near(u, our_tsn)?;
            let long = u.ratio(1, 8)?;
            let n = u.int_in_range(0..=if long { MAX_FORGED_REPORTS } else { 4 })?;
            let mut gaps = Vec::new();
            for _ in 0..n {
                gaps.push(GapBlock {
                    start: u.arbitrary()?,
                    end: u.arbitrary()?,
                });
            }
            let n = u.int_in_range(0..=if long { MAX_FORGED_REPORTS } else { 3 })?;
            let mut dups = Vec::new();
            for _ in 0..n {
                dups.push(u.arbitrary()?);
            }
            Chunk::Sack(Sack {
                cum_tsn_ack: cum,
                a_rwnd: u.arbitrary()?,
                gaps,
                dups,
            })
        }
        5 => Chunk::Shutdown {
            cum_tsn_ack: tsn_near(u, our_tsn)?,
        },
        6 => Chunk::ShutdownAck,
        7 => Chunk::ShutdownComplete {
            reflected: u.arbitrary()?,
        },
        8 => Chunk::Abort {
            reflected: u.arbitrary()?,
            causes: vec![ErrorCause::new(cause::USER_ABORT, bytes(u, 16)?)],
        },
        9 => Chunk::Heartbeat(bytes(u, 64)?),
        10 => Chunk::HeartbeatAck(bytes(u, 64)?),
        11 | 12 => {
            let init = Init {
                initiate_tag: u.arbitrary()?,
                a_rwnd: u.arbitrary()?,
                outbound_streams: u.arbitrary()?,
                inbound_streams: u.arbitrary()?,
                initial_tsn: u.arbitrary()?,
                cookie: if u.arbitrary()? {
                    Some(bytes(u, 128)?)
                } else {
                    None
                },
                extensions: if u.arbitrary()? {
                    vec![kind::I_DATA]
                } else {
                    Vec::new()
                },
                cookie_preservative: u.arbitrary()?,
                unrecognized: Vec::new(),
            };
            if u.arbitrary()? {
                Chunk::Init(init)
            } else {
                Chunk::InitAck(init)
            }
        }
        13 => Chunk::CookieEcho(bytes(u, 256)?),
        14 => Chunk::Error(vec![ErrorCause::new(u.arbitrary()?, bytes(u, 16)?)]),
        _ => {
            if u.arbitrary()? {
                Chunk::CookieAck
            } else {
                Chunk::Unknown {
                    kind: u.arbitrary()?,
                    flags: u.arbitrary()?,
                    value: bytes(u, 64)?,
                }
            }
        }
    })
}

/// The chunks of a datagram as large as UDP over IPv4 carries: DATA (or
/// I-DATA) of consecutive TSNs from the receiver's next, a SACK with more
/// gap blocks and duplicates than the decoder reads, or an INIT with
/// thousands of small parameters of every handling kind.
fn full_size(u: &mut Unstructured<'_>, their_tsn: u32, our_tsn: u32) -> ArbResult<Vec<Chunk>> {
    /// Common header plus a chunk header.
    const OVERHEAD: usize = 12 + 4;
    Ok(match u.int_in_range(0..=2u8)? {
        0 => {
            let kind = if u.arbitrary()? {
                DataKind::IData
            } else {
                DataKind::Data
            };
            let per = u.int_in_range(1..=8192usize)?;
            let header = 16 + if kind == DataKind::IData { 4 } else { 0 };
            let stream = u.int_in_range(0..=20)?;
            let mut chunks = Vec::new();
            let mut len = 12;
            let mut tsn = their_tsn.wrapping_add(1);
            let mut mid = 0;
            while len + header + 1 <= MAX_UDP_PAYLOAD {
                let take = per.min(MAX_UDP_PAYLOAD - len - header);
                let (beginning, ending) = (u.arbitrary()?, u.arbitrary()?);
                chunks.push(Chunk::Data(DataChunk {
                    kind,
                    unordered: false,
                    beginning,
                    ending,
                    immediate: false,
                    tsn,
                    stream,
                    mid,
                    fsn: 0,
                    ppid: 0,
                    payload: Bytes::from(vec![0xa5; take]),
                }));
                len += (header + take + 3) & !3;
                tsn = tsn.wrapping_add(1);
                if ending {
                    mid += 1;
                }
            }
            chunks
        }
        1 => {
            let count = (MAX_UDP_PAYLOAD - OVERHEAD - 12) / 4;
            let gaps = u.int_in_range(0..=count)?;
            vec![Chunk::Sack(Sack {
                cum_tsn_ack: tsn_near(u, our_tsn)?,
                a_rwnd: u.arbitrary()?,
                gaps: (0..gaps)
                    .map(|i| {
                        let start = u16::try_from(2 * i + 2).unwrap_or(u16::MAX);
                        GapBlock { start, end: start }
                    })
                    .collect(),
                dups: (0..count - gaps)
                    .map(|i| our_tsn.wrapping_sub(i as u32))
                    .collect(),
            })]
        }
        _ => {
            let param =
                |kind: u16| Bytes::from([kind.to_be_bytes(), [0, 8], [0, 0], [0, 0]].concat());
            let count = (MAX_UDP_PAYLOAD - OVERHEAD - 16) / 8;
            let unrecognized = (0..count)
                .map(|i| {
                    let low = (i % 0x3fff) as u16;
                    param(match i % 3 {
                        0 => 5,
                        1 => 0x8000 | low,
                        _ => 0xc000 | low,
                    })
                })
                .collect();
            vec![Chunk::Init(Init {
                initiate_tag: u.arbitrary()?,
                a_rwnd: u.arbitrary()?,
                outbound_streams: u.arbitrary()?,
                inbound_streams: u.arbitrary()?,
                initial_tsn: u.arbitrary()?,
                cookie: None,
                extensions: vec![kind::I_DATA],
                cookie_preservative: u.arbitrary()?,
                unrecognized,
            })]
        }
    })
}

/// A packet to side `to` built from the input, with its tag right (mostly)
/// and its checksum valid.
fn forged(u: &mut Unstructured<'_>, pair: &mut Pair, to: usize) -> ArbResult<Bytes> {
    let our_tsn = pair.sides[to].sent_tsn;
    let their_tsn = pair.sides[1 - to].sent_tsn;
    let tag = pair.assoc(to).map_or(0, |a| a.local_tag());
    let n = if u.ratio(1, 8)? {
        u.int_in_range(1..=64)?
    } else {
        u.int_in_range(1..=4)?
    };
    let mut chunks = Vec::with_capacity(n);
    for _ in 0..n {
        chunks.push(chunk(u, their_tsn, our_tsn)?);
    }
    if u.ratio(1, 16)? {
        chunks = full_size(u, their_tsn, our_tsn)?;
    }
    let vtag = match u.int_in_range(0..=7u8)? {
        0 => 0,
        1 => u.arbitrary()?,
        _ if matches!(chunks.first(), Some(Chunk::Init(_))) => 0,
        _ => tag,
    };
    let mut packet = Packet {
        src_port: PORT,
        dst_port: PORT,
        vtag,
        chunks,
    };
    // No datagram is larger: the chunks that do not fit are left out.
    while packet.encoded_len() > MAX_UDP_PAYLOAD && packet.chunks.len() > 1 {
        packet.chunks.pop();
    }
    if packet.encoded_len() > MAX_UDP_PAYLOAD {
        return Err(libfuzzer_sys::arbitrary::Error::IncorrectFormat);
    }
    let mut out = BytesMut::with_capacity(packet.encoded_len());
    // A forged chunk too long to encode is not a packet anyone can send.
    packet
        .encode(&mut out)
        .map_err(|_| libfuzzer_sys::arbitrary::Error::IncorrectFormat)?;
    Ok(out.freeze())
}

fn run(u: &mut Unstructured<'_>) -> ArbResult<()> {
    let mut pair = Pair::new(u.arbitrary()?);
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let side = usize::from(u.arbitrary::<bool>()?);
        match u.int_in_range(0..=13u8)? {
            // Arbitrary bytes.
            0 => {
                let data = bytes(u, MAX_UDP_PAYLOAD)?;
                pair.deliver(side, data);
            }
            // Arbitrary bytes behind a valid checksum.
            1 => {
                let mut data = bytes(u, MAX_UDP_PAYLOAD)?.to_vec();
                if data.len() >= sctp::wire::COMMON_HEADER_LEN {
                    sctp::wire::seal_checksum(&mut data);
                }
                pair.deliver(side, data.into());
            }
            // A structurally valid packet.
            2..=4 => {
                let data = forged(u, &mut pair, side)?;
                pair.deliver(side, data);
            }
            // Real traffic: deliver, drop, duplicate.
            5 | 6 => {
                let n = u.int_in_range(1..=16)?;
                for _ in 0..n {
                    let Some(d) = pair.sides[side].inbound.pop_front() else {
                        break;
                    };
                    pair.deliver(side, d);
                }
            }
            7 => {
                let drop_it = u.arbitrary::<bool>()?;
                if let Some(d) = pair.sides[side].inbound.pop_front()
                    && !drop_it
                {
                    pair.deliver(side, d.clone());
                    pair.deliver(side, d);
                }
            }
            // Replay a real datagram seen earlier (INIT, COOKIE ECHO, ...).
            8 => {
                if !pair.recorded.is_empty() {
                    let i = u.choose_index(pair.recorded.len())?;
                    let d = pair.recorded[i].clone();
                    pair.deliver(side, d);
                }
            }
            // Time.
            9 => {
                let ms = u.int_in_range(0..=10_000u64)?;
                pair.advance(Duration::from_millis(ms));
            }
            10 => pair.next_timeout(),
            // The application.
            11 => {
                let stream = u.int_in_range(0..=20u16)?;
                let len = u.int_in_range(0..=3 * MAX_MESSAGE)?;
                let unordered = u.ratio(1, 4)?;
                if let Some(assoc) = pair.assoc(side) {
                    let _ = assoc.send(stream, Bytes::from(vec![0x5a; len]), 0, unordered);
                }
            }
            12 => pair.sides[side].reading = !pair.sides[side].reading,
            _ => {
                let now = pair.now;
                if let Some(assoc) = pair.assoc(side) {
                    if u.ratio(1, 4)? {
                        assoc.abort(now, "fuzz");
                    } else {
                        assoc.close(now);
                    }
                }
            }
        }
        pair.drain();
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let base = counting::live();
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
    let left = counting::live() - base;
    assert!(left <= LEAK_SLACK, "the input left {left} bytes allocated");
});
