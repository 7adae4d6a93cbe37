//! The endpoint against hostile packets: an INIT flood, forged, expired and
//! replayed cookies, wrong verification tags, out-of-the-blue packets and
//! unknown chunks. Packets are built by hand with the crate's own codec.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sctp::chunk::{Chunk, DataChunk, DataKind, ErrorCause, Init, Packet, cause};
use sctp::{Config, DatagramEvent, Endpoint, Event, State};
use support::{CLIENT, Link, SERVER, Sim, init_asking_for_huge_reports};

const PORT: u16 = 9899;

fn server(now: Instant) -> Endpoint {
    Endpoint::new(Config::default(), PORT, true, [7; 32], now).expect("config")
}

fn encode(vtag: u32, chunks: Vec<Chunk>) -> Bytes {
    let packet = Packet {
        src_port: PORT,
        dst_port: PORT,
        vtag,
        chunks,
    };
    let mut buf = BytesMut::new();
    packet.encode(&mut buf).expect("encodes");
    buf.freeze()
}

fn init(tag: u32) -> Chunk {
    Chunk::Init(Init {
        initiate_tag: tag,
        a_rwnd: 65536,
        outbound_streams: 4,
        inbound_streams: 4,
        initial_tsn: 1000,
        ..Init::default()
    })
}

fn peer(i: u32) -> SocketAddr {
    SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 9899))
}

/// The INIT ACK's packet, decoded.
fn response(event: Option<DatagramEvent>) -> Packet {
    match event {
        Some(DatagramEvent::Response(t)) => Packet::decode(t.contents).expect("valid answer"),
        other => panic!("expected a stateless response, got {other:?}"),
    }
}

fn cookie_of(answer: &Packet) -> Bytes {
    match &answer.chunks[0] {
        Chunk::InitAck(ack) => ack.cookie.clone().expect("INIT ACK carries a cookie"),
        other => panic!("expected INIT ACK, got {other:?}"),
    }
}

fn initiate_tag_of(answer: &Packet) -> u32 {
    match &answer.chunks[0] {
        Chunk::InitAck(ack) => ack.initiate_tag,
        other => panic!("expected INIT ACK, got {other:?}"),
    }
}

#[test]
fn an_init_flood_keeps_no_state() {
    let now = Instant::now();
    let mut ep = server(now);
    for i in 0..10_000 {
        let answer = response(ep.handle(now, peer(i), encode(0, vec![init(i + 1)])));
        assert_eq!(answer.vtag, i + 1, "INIT ACK goes to the INIT's tag");
        assert!(matches!(answer.chunks[0], Chunk::InitAck(_)));
    }
    assert_eq!(ep.associations(), 0);
    assert_eq!(ep.stats().init_acks, 10_000);
}

/// INIT ACKs to new peers are a token bucket (`Limits::init_acks_per_second`,
/// burst as large): a flood from spoofed sources gets at most that many a
/// second, the rest are dropped unanswered and counted, and the bucket
/// refills with time, never above its burst.
#[test]
fn inits_beyond_the_init_ack_rate_are_dropped_and_counted() {
    let now = Instant::now();
    let mut ep = server(now);
    ep.set_limits(sctp::Limits {
        init_acks_per_second: 100,
        ..sctp::Limits::default()
    });
    let mut next = 0u32;
    let mut send = |ep: &mut Endpoint, at: Instant, count: u32| {
        let mut answered = 0;
        for _ in 0..count {
            next += 1;
            match ep.handle(at, peer(next), encode(0, vec![init(next)])) {
                Some(DatagramEvent::Response(_)) => answered += 1,
                None => {}
                Some(other) => panic!("unexpected {other:?}"),
            }
        }
        answered
    };
    assert_eq!(send(&mut ep, now, 150), 100, "the burst");
    assert_eq!(ep.stats().refused_at_init_rate, 50);
    assert_eq!(ep.stats().init_acks, 100);
    let later = now + Duration::from_millis(100);
    assert_eq!(send(&mut ep, later, 20), 10, "10 tokens in 100 ms");
    let much_later = later + Duration::from_secs(60);
    assert_eq!(
        send(&mut ep, much_later, 150),
        100,
        "refilled to the burst, no more"
    );
    assert_eq!(ep.stats().refused_at_init_rate, 50 + 10 + 50);
    assert_eq!(ep.associations(), 0);
    // A peer answered in time still completes its handshake.
    open(
        &mut ep,
        much_later + Duration::from_secs(1),
        peer(1_000_000),
        7,
    );
    assert_eq!(ep.associations(), 1);
}

/// RFC 9260 3.2.1 lets a receiver report what it did not recognize; it
/// need not report everything. An INIT as large as a datagram, whose
/// parameters all ask to be reported, gets an INIT ACK that reports what
/// fits `wire::MAX_REPORT_LEN` (the small one, not the 4 KB ones), and the
/// handshake completes on it. It used to panic the encoder.
#[test]
fn an_init_asking_for_more_reports_than_a_chunk_holds_gets_a_bounded_init_ack() {
    let now = Instant::now();
    let mut ep = server(now);
    for small in [false, true] {
        let from = peer(u32::from(small));
        let init = init_asking_for_huge_reports(0xabcd, (PORT, PORT), small);
        let Some(DatagramEvent::Response(t)) = ep.handle(now, from, init) else {
            panic!("the INIT was not answered");
        };
        assert!(
            t.contents.len() <= sctp::DEFAULT_MTU,
            "the INIT ACK is {} bytes",
            t.contents.len()
        );
        let answer = Packet::decode(t.contents).expect("valid answer");
        let Chunk::InitAck(ack) = &answer.chunks[0] else {
            panic!("expected INIT ACK, got {answer:?}");
        };
        let reported: Vec<usize> = ack.unrecognized.iter().map(Bytes::len).collect();
        assert_eq!(reported, if small { vec![8] } else { vec![] });
        let reported: usize = ack
            .unrecognized
            .iter()
            .map(|p| sctp::wire::report_len(p.len()))
            .sum();
        assert!(reported <= sctp::wire::MAX_REPORT_LEN);
        let echo = encode(
            ack.initiate_tag,
            vec![Chunk::CookieEcho(cookie_of(&answer))],
        );
        let Some(DatagramEvent::NewAssociation { association, .. }) = ep.handle(now, from, echo)
        else {
            panic!("the cookie of a bounded INIT ACK opens the association");
        };
        assert_eq!(association.state(), State::Established);
    }
    assert_eq!(ep.associations(), 2);
}

#[test]
fn a_valid_cookie_opens_one_association_and_data_behind_it_is_delivered() {
    let now = Instant::now();
    let mut ep = server(now);
    let from = peer(1);
    let answer = response(ep.handle(now, from, encode(0, vec![init(0xabcd)])));
    let tag = initiate_tag_of(&answer);
    let data = Chunk::Data(DataChunk {
        kind: DataKind::Data,
        unordered: false,
        beginning: true,
        ending: true,
        immediate: false,
        tsn: 1000,
        stream: 2,
        mid: 0,
        fsn: 0,
        ppid: 0,
        payload: Bytes::from_static(b"first request"),
    });
    let echo = encode(tag, vec![Chunk::CookieEcho(cookie_of(&answer)), data]);
    let Some(DatagramEvent::NewAssociation {
        mut association, ..
    }) = ep.handle(now, from, echo.clone())
    else {
        panic!("expected a new association");
    };
    assert_eq!(ep.associations(), 1);
    assert_eq!(association.state(), State::Established);
    assert_eq!(association.poll_event(), Some(Event::Connected));
    let msg = association.recv().expect("the bundled DATA was delivered");
    assert_eq!((msg.stream, &msg.data[..]), (2, &b"first request"[..]));
    // The reply: COOKIE ACK at once; the SACK for TSN 1000 after the delayed-ack time.
    let reply =
        Packet::decode(association.poll_transmit(now).expect("reply").contents).expect("valid");
    assert_eq!(reply.vtag, 0xabcd);
    assert_eq!(reply.chunks, vec![Chunk::CookieAck]);
    // Then, with nothing else to send, the first path MTU probe.
    let probe =
        Packet::decode(association.poll_transmit(now).expect("probe").contents).expect("valid");
    assert!(matches!(
        probe.chunks[..],
        [Chunk::Heartbeat(_), Chunk::Pad(_)]
    ));
    assert_eq!(probe.encoded_len(), sctp::DEFAULT_MTU);
    assert_eq!(association.poll_transmit(now), None);
    let delay = Config::default().ack.max_delay;
    assert_eq!(association.poll_timeout(), Some(now + delay));
    association.handle_timeout(now + delay);
    let reply = Packet::decode(
        association
            .poll_transmit(now + delay)
            .expect("SACK")
            .contents,
    )
    .expect("valid");
    assert!(matches!(&reply.chunks[0], Chunk::Sack(s) if s.cum_tsn_ack == 1000));

    // A replayed COOKIE ECHO is routed to the association it made (RFC 9260
    // 5.2.4 D): no second association.
    match ep.handle(now, from, echo) {
        Some(DatagramEvent::Association(_, incoming)) => association.handle(now, incoming),
        other => panic!("expected routing to the existing association, got {other:?}"),
    }
    assert_eq!(ep.associations(), 1);
    assert_eq!(association.recv(), None, "the replayed DATA is a duplicate");
}

#[test]
fn forged_cookies_are_dropped() {
    let now = Instant::now();
    let mut ep = server(now);
    let from = peer(1);
    let answer = response(ep.handle(now, from, encode(0, vec![init(5)])));
    let tag = initiate_tag_of(&answer);
    let cookie = cookie_of(&answer);
    // A flipped bit anywhere.
    for i in [0, 10, cookie.len() - 1] {
        let mut bad = cookie.to_vec();
        bad[i] ^= 1;
        let echo = encode(tag, vec![Chunk::CookieEcho(Bytes::from(bad))]);
        assert!(ep.handle(now, from, echo).is_none());
    }
    // A good cookie from another address.
    let echo = encode(tag, vec![Chunk::CookieEcho(cookie.clone())]);
    assert!(ep.handle(now, peer(2), echo).is_none());
    // A good cookie under another verification tag.
    let echo = encode(tag ^ 1, vec![Chunk::CookieEcho(cookie)]);
    assert!(ep.handle(now, from, echo).is_none());
    assert_eq!(ep.associations(), 0);
    assert_eq!(ep.stats().forged_cookies, 5);
}

#[test]
fn an_expired_cookie_gets_a_stale_cookie_error() {
    let now = Instant::now();
    let mut ep = server(now);
    let from = peer(1);
    let answer = response(ep.handle(now, from, encode(0, vec![init(5)])));
    let tag = initiate_tag_of(&answer);
    let echo = encode(tag, vec![Chunk::CookieEcho(cookie_of(&answer))]);
    let late = now + Config::default().cookie_lifetime + Duration::from_millis(250);
    let error = response(ep.handle(late, from, echo));
    assert_eq!(error.vtag, 5);
    assert_eq!(
        error.chunks,
        vec![Chunk::Error(vec![ErrorCause::new(
            cause::STALE_COOKIE,
            Bytes::copy_from_slice(&250_000u32.to_be_bytes())
        )])]
    );
    assert_eq!(ep.associations(), 0);
}

#[test]
fn out_of_the_blue_packets_are_answered_as_rfc_9260_8_4_says() {
    let now = Instant::now();
    let mut ep = server(now);
    let from = peer(1);
    // SHUTDOWN ACK: SHUTDOWN COMPLETE with the T bit, the packet's own tag.
    let answer = response(ep.handle(now, from, encode(77, vec![Chunk::ShutdownAck])));
    assert_eq!(answer.vtag, 77);
    assert_eq!(
        answer.chunks,
        vec![Chunk::ShutdownComplete { reflected: true }]
    );
    // DATA: ABORT with the T bit.
    let sack = Chunk::Shutdown { cum_tsn_ack: 1 };
    let answer = response(ep.handle(now, from, encode(78, vec![sack])));
    assert_eq!(answer.vtag, 78);
    assert!(matches!(
        answer.chunks[0],
        Chunk::Abort {
            reflected: true,
            ..
        }
    ));
    // ABORT, SHUTDOWN COMPLETE, COOKIE ACK, ERROR: never answered.
    for chunk in [
        Chunk::Abort {
            reflected: false,
            causes: vec![],
        },
        Chunk::ShutdownComplete { reflected: false },
        Chunk::CookieAck,
        Chunk::Error(vec![]),
    ] {
        assert!(ep.handle(now, from, encode(79, vec![chunk])).is_none());
    }
    // An INIT bundled with anything else, or with a non-zero tag, is dropped.
    assert!(ep.handle(now, from, encode(1, vec![init(3)])).is_none());
    // Garbage is counted, never answered.
    assert!(ep.handle(now, from, Bytes::from_static(&[0; 40])).is_none());
    assert_eq!(ep.stats().malformed, 1);
    assert_eq!(ep.associations(), 0);
}

#[test]
fn packets_with_a_wrong_verification_tag_are_dropped() {
    let mut sim = Sim::new(Config::default(), Config::default(), Link::default(), 1);
    sim.connect();
    assert!(sim.run_until(Duration::from_secs(2), |s| s.saw(SERVER, &Event::Connected)));
    let tag = sim.sides[SERVER].assoc().local_tag();
    let bogus = Chunk::Abort {
        reflected: false,
        causes: vec![],
    };
    sim.transmit(CLIENT, encode(tag ^ 0x5555, vec![bogus]));
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.sides[SERVER].assoc().state(), State::Established);
    // The right tag ends it.
    let abort = Chunk::Abort {
        reflected: false,
        causes: vec![],
    };
    sim.transmit(CLIENT, encode(tag, vec![abort]));
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.sides[SERVER].assoc().state(), State::Closed);
}

#[test]
fn unknown_chunks_follow_their_type_bits() {
    let mut sim = Sim::new(Config::default(), Config::default(), Link::default(), 2);
    sim.connect();
    assert!(sim.run_until(Duration::from_secs(2), |s| s.saw(SERVER, &Event::Connected)));
    let tag = sim.sides[SERVER].assoc().local_tag();
    let before = sim.sent[SERVER].len();
    // 0x40: stop processing and report; the HEARTBEAT behind it is not answered.
    let unknown = Chunk::Unknown {
        kind: 0x40 | 0x3f,
        flags: 0,
        value: Bytes::from_static(b"abcd"),
    };
    let heartbeat = Chunk::Heartbeat(Bytes::from_static(b"ping"));
    sim.transmit(CLIENT, encode(tag, vec![unknown, heartbeat.clone()]));
    sim.run_for(Duration::from_millis(50));
    let replies: Vec<Packet> = sim.sent[SERVER][before..]
        .iter()
        .map(|d| Packet::decode(d.clone()).expect("valid"))
        .collect();
    assert!(replies.iter().any(|p| p.chunks.iter().any(
        |c| matches!(c, Chunk::Error(causes) if causes[0].code == cause::UNRECOGNIZED_CHUNK)
    )));
    assert!(!replies.iter().any(|p| {
        p.chunks
            .contains(&Chunk::HeartbeatAck(Bytes::from_static(b"ping")))
    }));
    // 0x80: skip silently and go on; the HEARTBEAT is answered.
    let before = sim.sent[SERVER].len();
    let unknown = Chunk::Unknown {
        kind: 0x80 | 0x3f,
        flags: 0,
        value: Bytes::new(),
    };
    sim.transmit(CLIENT, encode(tag, vec![unknown, heartbeat]));
    sim.run_for(Duration::from_millis(50));
    let replies: Vec<Packet> = sim.sent[SERVER][before..]
        .iter()
        .map(|d| Packet::decode(d.clone()).expect("valid"))
        .collect();
    assert!(replies.iter().any(|p| {
        p.chunks
            .contains(&Chunk::HeartbeatAck(Bytes::from_static(b"ping")))
    }));
    assert!(
        !replies
            .iter()
            .any(|p| p.chunks.iter().any(|c| matches!(c, Chunk::Error(_))))
    );
}

/// A datagram of unknown "skip and report" chunks gets one ERROR whose
/// reports fit `wire::MAX_REPORT_LEN`, not an ERROR per chunk (16,000
/// four-byte chunks would have asked for 16,000 ERRORs, three times the
/// bytes that came in), and a chunk too large to echo is not echoed.
#[test]
fn a_datagram_of_unknown_chunks_gets_one_bounded_error() {
    let mut sim = Sim::new(Config::default(), Config::default(), Link::default(), 3);
    sim.connect();
    assert!(sim.run_until(Duration::from_secs(2), |s| s.saw(SERVER, &Event::Connected)));
    sim.run_for(Duration::from_secs(1));
    let tag = sim.sides[SERVER].assoc().local_tag();
    let tiny = Chunk::Unknown {
        kind: 0xc0 | 0x3f,
        flags: 0,
        value: Bytes::new(),
    };
    let huge = Chunk::Unknown {
        kind: 0xc0 | 0x3e,
        flags: 0,
        value: Bytes::from(vec![7; 60_000]),
    };
    let mut chunks = vec![huge];
    chunks.extend(std::iter::repeat_n(tiny, 1_000));
    let datagram = encode(tag, chunks);
    assert!(datagram.len() > 60_000);
    let before = sim.sent[SERVER].len();
    sim.transmit(CLIENT, datagram);
    sim.run_for(Duration::from_millis(50));
    // The ERROR chunks sent, raw (decoding keeps only the first 16 causes),
    // whatever else shares their packets.
    let errors: Vec<Bytes> = sim.sent[SERVER][before..]
        .iter()
        .flat_map(raw_chunks)
        .filter(|c| c[0] == 9)
        .collect();
    assert_eq!(errors.len(), 1, "one ERROR for the packet: {errors:?}");
    // Each tiny chunk is reported as an 8-byte cause; the huge one is not.
    let reports = sctp::wire::MAX_REPORT_LEN / 8;
    assert_eq!(
        errors[0].len(),
        4 + reports * 8,
        "ERROR chunk header, causes"
    );
    assert!(
        errors[0][4..]
            .chunks(8)
            .all(|c| c == [0, 6, 0, 8, 0xff, 0, 0, 4]),
        "every cause reports one tiny chunk"
    );
    assert_eq!(sim.sides[SERVER].assoc().state(), State::Established);
}

/// The chunks of a datagram, each as long as its length field says.
fn raw_chunks(datagram: &Bytes) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut at = 12;
    while at + 4 <= datagram.len() {
        let len = usize::from(u16::from_be_bytes([datagram[at + 2], datagram[at + 3]]));
        chunks.push(datagram.slice(at..at + len));
        at += len.max(4).next_multiple_of(4);
    }
    chunks
}

/// The INIT of `init_asking_for_huge_reports`, spoofed from the server's
/// address into the client's established association (a gateway's, in the
/// product), is answered as RFC 9260 5.2.2 says, with reports that fit, and
/// the association goes on carrying messages. It used to panic inside the
/// association, which left a gateway's link up but dead.
#[test]
fn a_spoofed_init_asking_for_huge_reports_leaves_the_association_working() {
    let mut sim = Sim::new(Config::default(), Config::default(), Link::default(), 4);
    sim.connect();
    assert!(
        sim.run_until(Duration::from_secs(2), |s| s.saw(CLIENT, &Event::Connected)
            && s.saw(SERVER, &Event::Connected))
    );
    let ports = (sim.sides[SERVER].addr.port(), sim.sides[CLIENT].addr.port());
    let before = sim.sent[CLIENT].len();
    sim.transmit(SERVER, init_asking_for_huge_reports(0x5eed, ports, true));
    sim.run_for(Duration::from_millis(50));
    let init_acks: Vec<(usize, Init)> = sim.sent[CLIENT][before..]
        .iter()
        .map(|d| (d.len(), Packet::decode(d.clone()).expect("valid")))
        .filter_map(|(len, p)| match p.chunks.into_iter().next() {
            Some(Chunk::InitAck(ack)) => Some((len, ack)),
            _ => None,
        })
        .collect();
    assert_eq!(
        init_acks.len(),
        1,
        "RFC 9260 5.2.2: answered with an INIT ACK"
    );
    let (len, ack) = &init_acks[0];
    assert!(*len <= sctp::DEFAULT_MTU, "INIT ACK of {len} bytes");
    assert_eq!(ack.unrecognized.len(), 1, "the small parameter is reported");
    sim.sides[SERVER].reading = true;
    sim.sides[CLIENT]
        .assoc()
        .send(1, Bytes::from_static(b"after the spoofed INIT"), 0, false)
        .expect("send");
    assert!(sim.run_until(Duration::from_secs(2), |s| {
        !s.sides[SERVER].received.is_empty()
    }));
    assert_eq!(
        &sim.sides[SERVER].received[0].data[..],
        b"after the spoofed INIT"
    );
    assert_eq!(sim.sides[CLIENT].assoc().state(), State::Established);
}

/// Opens an association from `from` with the peer tag `tag`; its handle.
fn open(ep: &mut Endpoint, now: Instant, from: SocketAddr, tag: u32) -> sctp::AssocHandle {
    let answer = response(ep.handle(now, from, encode(0, vec![init(tag)])));
    let echo = encode(
        initiate_tag_of(&answer),
        vec![Chunk::CookieEcho(cookie_of(&answer))],
    );
    match ep.handle(now, from, echo) {
        Some(DatagramEvent::NewAssociation { handle, .. }) => handle,
        other => panic!("expected a new association from {from}, got {other:?}"),
    }
}

/// An ABORT with "Out of Resource" to the tag `tag`.
fn assert_refused(event: Option<DatagramEvent>, tag: u32) {
    let answer = response(event);
    assert_eq!(answer.vtag, tag, "the ABORT goes to the peer's tag");
    match &answer.chunks[..] {
        [
            Chunk::Abort {
                reflected: false,
                causes,
            },
        ] => {
            assert_eq!(causes[0].code, cause::OUT_OF_RESOURCE);
        }
        other => panic!("expected an ABORT with Out of Resource, got {other:?}"),
    }
}

#[test]
fn the_association_limit_refuses_inits_and_earlier_cookies_with_out_of_resource() {
    let now = Instant::now();
    let mut ep = server(now);
    ep.set_limits(sctp::Limits {
        max_associations: 2,
        max_per_source: 256,
        ..sctp::Limits::default()
    });
    // A cookie issued while there was room, echoed when there is none.
    let early = response(ep.handle(now, peer(3), encode(0, vec![init(33)])));
    let first = open(&mut ep, now, peer(1), 11);
    open(&mut ep, now, peer(2), 22);
    assert_refused(ep.handle(now, peer(4), encode(0, vec![init(44)])), 44);
    let echo = encode(
        initiate_tag_of(&early),
        vec![Chunk::CookieEcho(cookie_of(&early))],
    );
    assert_refused(ep.handle(now, peer(3), echo.clone()), 33);
    assert_eq!(ep.associations(), 2);
    assert_eq!(ep.stats().refused_at_total_limit, 2);
    // One ends: there is room again, for the same cookie too.
    ep.forget(first);
    assert!(matches!(
        ep.handle(now, peer(3), echo),
        Some(DatagramEvent::NewAssociation { .. })
    ));
    assert_eq!(ep.associations(), 2);
}

#[test]
fn the_per_source_limit_counts_an_ipv4_address_and_an_ipv6_64() {
    let now = Instant::now();
    let mut ep = server(now);
    ep.set_limits(sctp::Limits {
        max_associations: 100,
        max_per_source: 2,
        ..sctp::Limits::default()
    });
    let at = |ip: &str, port: u16| SocketAddr::new(ip.parse().expect("an address"), port);
    for (source, other_in_source, elsewhere) in [
        ("192.0.2.1", "192.0.2.1", "192.0.2.2"),
        ("2001:db8::1", "2001:db8::ffff", "2001:db8:0:1::1"),
    ] {
        let first = open(&mut ep, now, at(source, 1000), 1);
        open(&mut ep, now, at(other_in_source, 1001), 2);
        let init_3 = encode(0, vec![init(3)]);
        assert_refused(ep.handle(now, at(source, 1002), init_3.clone()), 3);
        open(&mut ep, now, at(elsewhere, 1002), 4);
        // When one of the source's associations ends, it may open another.
        ep.forget(first);
        open(&mut ep, now, at(source, 1002), 3);
    }
    // An IPv4-mapped IPv6 address is its IPv4 address.
    let mapped = at("::ffff:192.0.2.1", 1003);
    assert_refused(ep.handle(now, mapped, encode(0, vec![init(5)])), 5);
    assert_eq!(ep.stats().refused_at_source_limit, 3);
    assert_eq!(ep.stats().refused_at_total_limit, 0);
}
