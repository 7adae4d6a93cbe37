//! What a hostile peer can make one association and one endpoint hold,
//! counted by a global allocator that tracks live bytes: every allocation
//! is counted, datagram buffers included.
//!
//! Each case drives the worst input we know of for one structure through
//! the real endpoint and association (packets built with the crate's codec,
//! each padded to the largest UDP payload, 65,507 bytes) and checks the
//! live bytes against the bound the configuration gives
//! (`Config::receive_memory_bound`).

use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use sctp::chunk::{Chunk, DataChunk, DataKind, Init, Packet, kind};
use sctp::{Association, Config, DatagramEvent, Endpoint, State};

#[path = "support/counting.rs"]
mod counting;

use counting::{Counting, live, peak, reset_peak};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The largest UDP payload over IPv4.
const DATAGRAM: usize = 65_507;
const PORT: u16 = 9899;
/// The tag and first TSN of the hostile peer.
const PEER_TAG: u32 = 0x5eed_0001;
const PEER_TSN: u32 = 1000;

fn encode(vtag: u32, chunks: Vec<Chunk>, pad_to: usize) -> Bytes {
    let mut packet = Packet {
        src_port: PORT,
        dst_port: PORT,
        vtag,
        chunks,
    };
    let mut buf = BytesMut::new();
    packet.encode(&mut buf).expect("encodes");
    if buf.len() + 4 <= pad_to {
        let pad = u16::try_from(pad_to - buf.len()).expect("a chunk's length");
        packet.chunks.push(Chunk::Pad(pad - 4));
        buf.clear();
        packet.encode(&mut buf).expect("encodes");
    }
    buf.freeze()
}

/// A one-byte DATA chunk (I-DATA when `mid` is given with an FSN).
fn chunk(
    tsn: u32,
    stream: u16,
    mid: u32,
    fsn: Option<u32>,
    beginning: bool,
    ending: bool,
) -> Chunk {
    Chunk::Data(DataChunk {
        kind: if fsn.is_some() {
            DataKind::IData
        } else {
            DataKind::Data
        },
        unordered: false,
        beginning,
        ending,
        immediate: false,
        tsn,
        stream,
        mid,
        fsn: fsn.unwrap_or(0),
        ppid: 0,
        payload: Bytes::from_static(b"x"),
    })
}

fn data(tsn: u32, stream: u16, ssn: u32, beginning: bool, ending: bool) -> Chunk {
    chunk(tsn, stream, ssn, None, beginning, ending)
}

/// An endpoint listening with `config`, and an association a hostile peer
/// opened on it (offering I-DATA if the config does), with the tag the peer
/// must use.
fn opened(config: &Config, now: Instant) -> (Endpoint, Association, u32) {
    let mut ep = Endpoint::new(config.clone(), PORT, true, [7; 32], now).expect("config");
    let (assoc, tag) = open(&mut ep, config, now, peer());
    (ep, assoc, tag)
}

/// An association the peer at `from` opens on `ep`, and its tag.
fn open(ep: &mut Endpoint, config: &Config, now: Instant, from: SocketAddr) -> (Association, u32) {
    let init = Chunk::Init(Init {
        initiate_tag: PEER_TAG,
        a_rwnd: 1 << 20,
        outbound_streams: 16,
        inbound_streams: 16,
        initial_tsn: PEER_TSN,
        extensions: if config.idata {
            vec![kind::I_DATA]
        } else {
            vec![]
        },
        ..Init::default()
    });
    let Some(DatagramEvent::Response(answer)) = ep.handle(now, from, encode(0, vec![init], 0))
    else {
        panic!("an INIT is answered");
    };
    let answer = Packet::decode(answer.contents).expect("a valid INIT ACK");
    let Chunk::InitAck(ack) = &answer.chunks[0] else {
        panic!("expected an INIT ACK, got {answer:?}");
    };
    let tag = ack.initiate_tag;
    let echo = encode(
        tag,
        vec![Chunk::CookieEcho(ack.cookie.clone().expect("a cookie"))],
        0,
    );
    let Some(DatagramEvent::NewAssociation { association, .. }) = ep.handle(now, from, echo) else {
        panic!("the cookie opens the association");
    };
    assert_eq!(association.state(), State::Established);
    (*association, tag)
}

fn peer() -> SocketAddr {
    SocketAddr::from(([192, 0, 2, 1], PORT))
}

/// Passes one datagram from the peer, as the driver would, and drains what
/// the association sends back (its SACKs); the application reads every
/// message if `reading`.
fn deliver(
    ep: &mut Endpoint,
    assoc: &mut Association,
    now: Instant,
    datagram: Bytes,
    reading: bool,
) {
    deliver_from(ep, assoc, peer(), now, datagram, reading);
}

fn deliver_from(
    ep: &mut Endpoint,
    assoc: &mut Association,
    from: SocketAddr,
    now: Instant,
    datagram: Bytes,
    reading: bool,
) {
    match ep.handle(now, from, datagram) {
        Some(DatagramEvent::Association(_, incoming)) => assoc.handle(now, incoming),
        Some(DatagramEvent::Response(_)) | None => {}
        Some(other) => panic!("unexpected {other:?}"),
    }
    while assoc.poll_transmit(now).is_some() {}
    while assoc.poll_event().is_some() {}
    while reading && assoc.recv().is_some() {}
}

/// Runs `attack` (datagram `i` for the association's tag, until it yields
/// none) against a fresh association and checks that the live bytes the
/// endpoint and the association hold beyond their state after the
/// handshake stay within the configured bound, at the end and at their peak
/// (which may add the one datagram in hand and its decoding).
fn attack(
    what: &str,
    config: &Config,
    reading: bool,
    datagram: impl Fn(u32, usize) -> Option<Bytes>,
) {
    let now = Instant::now();
    let (mut ep, mut assoc, tag) = opened(config, now);
    let base = reset_peak();
    let mut i = 0;
    while let Some(datagram) = datagram(tag, i) {
        deliver(&mut ep, &mut assoc, now, datagram, reading);
        i += 1;
    }
    let held = usize::try_from(live() - base).unwrap_or(0);
    let peak = usize::try_from(peak() - base).unwrap_or(0);
    let bound = config.receive_memory_bound();
    eprintln!("{what}: {i} datagrams, {held} bytes held, peak {peak}, bound {bound}");
    assert_eq!(
        assoc.state(),
        State::Established,
        "{what}: the attack kept to the protocol"
    );
    assert!(
        held <= bound,
        "{what}: {held} bytes held, above the bound of {bound}"
    );
    assert!(
        peak <= bound + 3 * DATAGRAM,
        "{what}: a peak of {peak} bytes, above the bound of {bound} and the datagram in hand"
    );
    drop((ep, assoc));
}

/// A small window, so that in the cases of tiny chunks the bound is mostly
/// the bookkeeping per held chunk, which they must stay under.
fn config(idata: bool) -> Config {
    Config {
        idata,
        recv_window: 64 * 1024,
        max_message: 32 * 1024,
        ..Config::default()
    }
}

/// More datagrams than any case lets the receiver keep.
const ROUNDS: usize = 10_000;

#[test]
fn one_byte_ordered_messages_behind_a_gap_on_every_stream() {
    // SSN 0 of every stream never comes; 1, 2, ... wait for it, in order of
    // TSN (each is the chunk at cum_tsn + 1, accepted beyond the window).
    attack("DATA behind SSN gaps", &config(false), false, |tag, i| {
        (i < ROUNDS).then(|| {
            let (stream, ssn) = ((i % 16) as u16, (i / 16 + 1) as u32);
            encode(
                tag,
                vec![data(PEER_TSN + i as u32, stream, ssn, true, true)],
                DATAGRAM,
            )
        })
    });
    attack("I-DATA behind MID gaps", &config(true), false, |tag, i| {
        (i < ROUNDS).then(|| {
            let (stream, mid) = ((i % 16) as u16, (i / 16 + 1) as u32);
            let c = chunk(PEER_TSN + i as u32, stream, mid, Some(0), true, true);
            encode(tag, vec![c], DATAGRAM)
        })
    });
}

#[test]
fn messages_that_never_end() {
    // DATA: one message, one byte per datagram, in order, never an E.
    attack(
        "an endless DATA message",
        &config(false),
        false,
        |tag, i| {
            (i < ROUNDS).then(|| {
                encode(
                    tag,
                    vec![data(PEER_TSN + i as u32, 0, 0, i == 0, false)],
                    DATAGRAM,
                )
            })
        },
    );
    // I-DATA: a new message on every TSN, each only its first fragment.
    attack("endless I-DATA messages", &config(true), false, |tag, i| {
        (i < ROUNDS).then(|| {
            let c = chunk(
                PEER_TSN + i as u32,
                (i % 16) as u16,
                (i / 16) as u32,
                Some(0),
                true,
                false,
            );
            encode(tag, vec![c], DATAGRAM)
        })
    });
}

#[test]
fn every_other_tsn_and_tsns_beyond_the_window() {
    attack("every other TSN", &config(false), false, |tag, i| {
        (i < ROUNDS).then(|| {
            let tsn = PEER_TSN + 1 + 2 * i as u32;
            encode(tag, vec![data(tsn, 0, i as u32, true, true)], DATAGRAM)
        })
    });
    // Unordered one-byte messages at every other TSN, read at once: the TSN
    // map keeps a gap range for each although nothing else is held.
    attack(
        "every other TSN, unordered, read",
        &config(false),
        true,
        |tag, i| {
            (i < 40_000).then(|| {
                let Chunk::Data(mut d) = data(PEER_TSN + 1 + 2 * i as u32, 0, 0, true, true) else {
                    unreachable!()
                };
                d.unordered = true;
                encode(tag, vec![Chunk::Data(d)], DATAGRAM)
            })
        },
    );
    // Far beyond what a gap block can report: dropped.
    attack("TSNs out of the window", &config(false), false, |tag, i| {
        (i < ROUNDS).then(|| {
            let tsn = PEER_TSN.wrapping_add(70_000 + 3 * i as u32);
            encode(tag, vec![data(tsn, 0, i as u32, true, true)], DATAGRAM)
        })
    });
}

#[test]
fn payloads_just_large_enough_to_be_kept_in_their_datagram() {
    // A payload of 3/4 of its datagram is not copied: the datagram is
    // pinned, a third more than the payload. Behind an SSN gap, in order.
    let payload = Bytes::from(vec![7; DATAGRAM * 3 / 4]);
    let config = Config {
        idata: false,
        ..Config::default()
    };
    attack(
        "3/4-datagram payloads behind a gap",
        &config,
        false,
        |tag, i| {
            (i < 200).then(|| {
                let Chunk::Data(mut d) = data(PEER_TSN + i as u32, 0, i as u32 + 1, true, true)
                else {
                    unreachable!()
                };
                d.payload = payload.clone();
                encode(tag, vec![Chunk::Data(d)], DATAGRAM)
            })
        },
    );
}

#[test]
fn half_open_handshakes_keep_nothing() {
    let now = Instant::now();
    let mut ep = Endpoint::new(config(true), PORT, true, [7; 32], now).expect("config");
    let mut base = live();
    for i in 0..ROUNDS as u32 {
        if i == 100 {
            // After the first hundred: what the first ones set up once
            // (the tracing dispatcher's caches) is not per handshake.
            base = live();
        }
        let from = SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], PORT));
        let init = Chunk::Init(Init {
            initiate_tag: i + 1,
            a_rwnd: 1 << 20,
            outbound_streams: 16,
            inbound_streams: 16,
            initial_tsn: i,
            ..Init::default()
        });
        let answer = ep.handle(now, from, encode(0, vec![init], 0));
        assert!(
            matches!(answer, Some(DatagramEvent::Response(_))),
            "INIT {i} is answered"
        );
    }
    let held = live() - base;
    eprintln!("{ROUNDS} half-open handshakes: {held} bytes held");
    assert!(held < 4096, "{ROUNDS} INITs left {held} bytes held");
    assert_eq!(ep.associations(), 0);
}

#[test]
fn associations_together_stay_within_twice_the_endpoint_budget() {
    const BUDGET: usize = 256 * 1024;
    const PEERS: u8 = 16;
    let config = config(false);
    let now = Instant::now();
    let mut ep = Endpoint::new(config.clone(), PORT, true, [7; 32], now).expect("config");
    ep.set_limits(sctp::Limits {
        receive_memory: BUDGET,
        ..sctp::Limits::default()
    });
    let from = |i: u8| SocketAddr::from(([192, 0, 2, i + 1], PORT));
    let mut assocs: Vec<(Association, u32)> = (0..PEERS)
        .map(|i| open(&mut ep, &config, now, from(i)))
        .collect();
    let base = reset_peak();
    // Every peer sends one-byte ordered messages behind an SSN gap, in turn:
    // alone, each association could hold about 90 KB (the case above).
    for round in 0..2_000usize {
        for (i, (assoc, tag)) in assocs.iter_mut().enumerate() {
            let tsn = PEER_TSN + round as u32;
            let (stream, ssn) = ((round % 16) as u16, (round / 16 + 1) as u32);
            let datagram = encode(*tag, vec![data(tsn, stream, ssn, true, true)], DATAGRAM);
            deliver_from(&mut ep, assoc, from(i as u8), now, datagram, false);
        }
    }
    let held = usize::try_from(live() - base).unwrap_or(0);
    let charged = ep.receive_memory();
    eprintln!("{PEERS} associations: {held} bytes held, {charged} charged, budget {BUDGET}");
    for (assoc, _) in &assocs {
        assert_eq!(assoc.state(), State::Established);
    }
    assert!(
        charged <= 2 * BUDGET,
        "{charged} bytes charged, budget {BUDGET}"
    );
    assert!(held <= 2 * BUDGET, "{held} bytes held, budget {BUDGET}");
    drop(assocs);
    assert_eq!(
        ep.receive_memory(),
        0,
        "the associations gave back what they charged"
    );
}
