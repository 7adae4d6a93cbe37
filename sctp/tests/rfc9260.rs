//! Handshake and tag rules of RFC 9260, each test named after its section:
//! the association driven by hand with packets built by the crate's codec
//! (a peer that says exactly what the test needs, hostile where it says so),
//! or on the simulated link when both real ends are wanted.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sctp::chunk::{Chunk, DataChunk, DataKind, ErrorCause, Init, Packet, cause};
use sctp::{
    AssocHandle, Association, AssociationError, Config, DatagramEvent, Endpoint, Event, State,
};
use support::{CLIENT, Link, SERVER, Sim};

const PORT: u16 = 9899;
/// The peer's tag in its INIT ACK.
const PEER_TAG: u32 = 0x0bad_cafe;
/// The peer's first TSN in its INIT ACK.
const PEER_TSN: u32 = 5000;

fn server_addr() -> SocketAddr {
    "192.0.2.2:9899".parse().expect("address")
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

fn init_chunk(tag: u32, tsn: u32, cookie: Option<Bytes>) -> Init {
    Init {
        initiate_tag: tag,
        a_rwnd: 65_536,
        outbound_streams: 4,
        inbound_streams: 4,
        initial_tsn: tsn,
        cookie,
        ..Init::default()
    }
}

fn abort(reflected: bool) -> Chunk {
    Chunk::Abort {
        reflected,
        causes: Vec::new(),
    }
}

/// A client association and its endpoint, driven by hand; the peer is
/// whatever the test feeds it, from `server_addr()`.
struct Client {
    now: Instant,
    ep: Endpoint,
    handle: AssocHandle,
    assoc: Association,
}

impl Client {
    fn new(config: Config) -> Self {
        let now = Instant::now();
        let mut ep = Endpoint::new(config, PORT, false, [1; 32], now).expect("config");
        let (handle, assoc) = ep.connect(now, server_addr(), PORT);
        Client {
            now,
            ep,
            handle,
            assoc,
        }
    }

    fn tag(&self) -> u32 {
        self.assoc.local_tag()
    }

    /// A packet from the peer, through the endpoint.
    fn feed(&mut self, vtag: u32, chunks: Vec<Chunk>) {
        match self
            .ep
            .handle(self.now, server_addr(), encode(vtag, chunks))
        {
            Some(DatagramEvent::Association(handle, incoming)) => {
                assert_eq!(handle, self.handle);
                self.assoc.handle(self.now, incoming);
            }
            None => {}
            other => panic!("expected routing to the association, got {other:?}"),
        }
    }

    /// Everything the association sends now, decoded.
    fn sent(&mut self) -> Vec<Packet> {
        let mut out = Vec::new();
        while let Some(t) = self.assoc.poll_transmit(self.now) {
            assert_eq!(t.destination, server_addr());
            out.push(Packet::decode(t.contents).expect("valid packet"));
        }
        out
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.assoc.poll_event()).collect()
    }

    /// The INIT goes out.
    fn sent_init(&mut self) {
        let init = self.sent();
        assert!(matches!(init[0].chunks[0], Chunk::Init(_)), "{init:?}");
    }

    /// The INIT (sent) answered by an INIT ACK with `PEER_TAG`: COOKIE-ECHOED.
    fn drive_to_cookie_echoed(&mut self) {
        let ack = init_chunk(PEER_TAG, PEER_TSN, Some(Bytes::from_static(b"cookie")));
        self.feed(self.tag(), vec![Chunk::InitAck(ack)]);
        assert_eq!(self.assoc.state(), State::CookieEchoed);
    }

    /// The rest of the handshake: COOKIE ECHO out, COOKIE ACK in.
    fn drive_to_established(&mut self) {
        let echo = self.sent();
        assert!(
            echo.iter()
                .any(|p| p.vtag == PEER_TAG && matches!(p.chunks[0], Chunk::CookieEcho(_))),
            "{echo:?}"
        );
        self.feed(self.tag(), vec![Chunk::CookieAck]);
        assert_eq!(self.assoc.state(), State::Established);
        assert_eq!(self.events(), vec![Event::Connected]);
    }
}

/// RFC 9260 8.5.1 B: an ABORT is accepted under our own tag without the T
/// bit, or under the peer's tag with it. In COOKIE-WAIT the peer's tag is
/// not known, so a T-bit ABORT matches nothing: not tag 0 (which only an
/// INIT's packet carries, 8.5.1 A), not our own tag. It used to accept the
/// first, so anyone who saw an INIT go by could end the handshake.
#[test]
fn rfc9260_8_5_1_b_a_t_bit_abort_is_not_accepted_in_cookie_wait() {
    let mut c = Client::new(Config::default());
    c.sent_init();
    for (vtag, reflected) in [(0, true), (c.tag(), true), (c.tag() ^ 1, false)] {
        c.feed(vtag, vec![abort(reflected)]);
        assert_eq!(
            c.assoc.state(),
            State::CookieWait,
            "ABORT under tag {vtag:#x}, T bit {reflected}, accepted"
        );
        // SHUTDOWN COMPLETE follows the same rule (8.5.1 C).
        c.feed(vtag, vec![Chunk::ShutdownComplete { reflected }]);
        assert_eq!(c.assoc.state(), State::CookieWait);
    }
    assert_eq!(c.events(), vec![]);
    // Our own tag without the T bit: accepted.
    c.feed(c.tag(), vec![abort(false)]);
    assert_eq!(c.assoc.state(), State::Closed);
    assert_eq!(
        c.events(),
        vec![Event::Lost(AssociationError::Aborted(Vec::new()))]
    );

    // Once the INIT ACK has told us the peer's tag, a T-bit ABORT under it
    // is accepted, and one under another tag is not.
    let mut c = Client::new(Config::default());
    c.sent_init();
    c.drive_to_cookie_echoed();
    c.feed(PEER_TAG ^ 1, vec![abort(true)]);
    assert_eq!(c.assoc.state(), State::CookieEchoed);
    c.feed(PEER_TAG, vec![abort(true)]);
    assert_eq!(c.assoc.state(), State::Closed);
}

/// RFC 9260 3.3.2: an INIT whose Initiate Tag is 0 is silently discarded
/// (there is no tag to send an ABORT to). It used to get an ABORT under
/// verification tag 0.
#[test]
fn rfc9260_3_3_2_an_init_with_initiate_tag_0_is_silently_discarded() {
    let now = Instant::now();
    let mut ep = Endpoint::new(Config::default(), PORT, true, [7; 32], now).expect("config");
    let init = Chunk::Init(init_chunk(0, 1000, None));
    assert!(
        ep.handle(now, server_addr(), encode(0, vec![init]))
            .is_none()
    );
    // Zero streams still get the ABORT 3.3.2 asks for, under the INIT's tag.
    let mut zero_streams = init_chunk(77, 1000, None);
    zero_streams.outbound_streams = 0;
    let answer = ep.handle(
        now,
        server_addr(),
        encode(0, vec![Chunk::Init(zero_streams)]),
    );
    let Some(DatagramEvent::Response(t)) = answer else {
        panic!("expected an ABORT, got {answer:?}");
    };
    let answer = Packet::decode(t.contents).expect("valid");
    assert_eq!(answer.vtag, 77);
    assert!(matches!(
        answer.chunks[0],
        Chunk::Abort {
            reflected: false,
            ..
        }
    ));
    assert_eq!(ep.associations(), 0);
}

/// RFC 9260 8.4 rule 5 and 8.5.1 E: a SHUTDOWN ACK reaching a handshake
/// (COOKIE-WAIT or COOKIE-ECHOED) is out of the blue and is answered with
/// SHUTDOWN COMPLETE, T bit set, under the tag the SHUTDOWN ACK's packet
/// carried. The association's answer used its stored peer tag instead (0
/// in COOKIE-WAIT). The endpoint's answer for no association at all is
/// checked too.
#[test]
fn rfc9260_8_4_rule_5_shutdown_complete_reflects_the_received_tag() {
    let mut c = Client::new(Config::default());
    c.sent_init();
    let expect_complete = |packets: Vec<Packet>, vtag: u32| {
        assert_eq!(packets.len(), 1, "{packets:?}");
        assert_eq!(packets[0].vtag, vtag);
        assert_eq!(
            packets[0].chunks,
            vec![Chunk::ShutdownComplete { reflected: true }]
        );
    };
    c.feed(0x1234, vec![Chunk::ShutdownAck]);
    expect_complete(c.sent(), 0x1234);
    assert_eq!(c.assoc.state(), State::CookieWait);

    c.drive_to_cookie_echoed();
    c.sent();
    c.feed(0x4321, vec![Chunk::ShutdownAck]);
    expect_complete(c.sent(), 0x4321);
    assert_eq!(c.assoc.state(), State::CookieEchoed);

    // From an address with no association: the endpoint answers alike.
    let stranger: SocketAddr = "192.0.2.9:9899".parse().expect("address");
    let answer =
        c.ep.handle(c.now, stranger, encode(0x7777, vec![Chunk::ShutdownAck]));
    let Some(DatagramEvent::Response(t)) = answer else {
        panic!("expected SHUTDOWN COMPLETE, got {answer:?}");
    };
    assert_eq!(t.destination, stranger);
    expect_complete(vec![Packet::decode(t.contents).expect("valid")], 0x7777);
}

/// The INIT ACK `c`'s association sends to an INIT the peer sends it in
/// COOKIE-WAIT (RFC 9260 5.2.1): its cookie carries our tag and `peer_tag`.
fn crossing_cookie(c: &mut Client, peer_tag: u32, peer_tsn: u32) -> Bytes {
    c.feed(0, vec![Chunk::Init(init_chunk(peer_tag, peer_tsn, None))]);
    let acks = c.sent();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0].vtag, peer_tag);
    match &acks[0].chunks[0] {
        Chunk::InitAck(ack) => {
            assert_eq!(ack.initiate_tag, c.tag(), "5.2.1: our own tag");
            ack.cookie.clone().expect("a cookie")
        }
        other => panic!("expected INIT ACK, got {other:?}"),
    }
}

fn data(tsn: u32, payload: &'static [u8]) -> Chunk {
    Chunk::Data(DataChunk {
        kind: DataKind::Data,
        unordered: false,
        beginning: true,
        ending: true,
        immediate: true,
        tsn,
        stream: 0,
        mid: 0,
        fsn: 0,
        ppid: 0,
        payload: Bytes::from_static(payload),
    })
}

/// RFC 9260 5.2.4 case B (our tag matches, the peer's does not: the peer's
/// INIT crossed ours and it went on under a new tag) in ESTABLISHED: stay
/// ESTABLISHED, take the cookie's peer tag, send COOKIE ACK. It used to be
/// ignored, so the peer never completed its handshake. Then case D (both
/// tags match: a COOKIE ECHO repeated) is answered with COOKIE ACK and
/// changes nothing.
#[test]
fn rfc9260_5_2_4_case_b_in_established_takes_the_new_peer_tag() {
    const NEW_TAG: u32 = 0x5eed_0002;
    const NEW_TSN: u32 = 7000;
    let mut c = Client::new(Config::default());
    c.sent_init();
    let cookie = crossing_cookie(&mut c, NEW_TAG, NEW_TSN);
    c.drive_to_cookie_echoed();
    c.drive_to_established();

    let echo = vec![Chunk::CookieEcho(cookie)];
    c.feed(c.tag(), echo.clone());
    let sent = c.sent();
    assert!(
        sent.iter()
            .any(|p| p.vtag == NEW_TAG && p.chunks.contains(&Chunk::CookieAck)),
        "COOKIE ACK under the new tag: {sent:?}"
    );
    assert_eq!(c.assoc.state(), State::Established);
    assert_eq!(c.events(), vec![], "not connected twice");
    // Everything goes under the new tag now.
    c.assoc
        .send(0, Bytes::from_static(b"after case B"), 0, false)
        .expect("send");
    let sent = c.sent();
    assert!(!sent.is_empty());
    assert!(sent.iter().all(|p| p.vtag == NEW_TAG), "{sent:?}");
    // Nothing had come under the old numbering: the peer's DATA counts
    // from the cookie's TSN.
    c.feed(c.tag(), vec![data(NEW_TSN, b"from the new peer TCB")]);
    let msg = c.assoc.recv().expect("delivered");
    assert_eq!(&msg.data[..], b"from the new peer TCB");

    // Case D: the same COOKIE ECHO again.
    c.feed(c.tag(), echo);
    let sent = c.sent();
    assert!(
        sent.iter()
            .any(|p| p.vtag == NEW_TAG && p.chunks.contains(&Chunk::CookieAck)),
        "{sent:?}"
    );
    assert_eq!(c.assoc.state(), State::Established);
    assert_eq!(c.events(), vec![]);
}

/// RFC 9260 5.2.4 case B in COOKIE-ECHOED (enter ESTABLISHED) with messages
/// queued: they go out under the new tag, none lost.
#[test]
fn rfc9260_5_2_4_case_b_in_cookie_echoed_enters_established_and_keeps_messages() {
    const NEW_TAG: u32 = 0x5eed_0003;
    let mut c = Client::new(Config::default());
    c.sent_init();
    c.assoc
        .send(0, Bytes::from_static(b"one"), 0, false)
        .expect("send");
    let cookie = crossing_cookie(&mut c, NEW_TAG, 9000);
    c.drive_to_cookie_echoed();
    c.assoc
        .send(1, Bytes::from_static(b"two"), 0, false)
        .expect("send");
    c.sent();
    c.feed(c.tag(), vec![Chunk::CookieEcho(cookie)]);
    assert_eq!(c.assoc.state(), State::Established);
    assert_eq!(c.events(), vec![Event::Connected]);
    let sent = c.sent();
    assert!(sent.iter().all(|p| p.vtag == NEW_TAG), "{sent:?}");
    let payloads: Vec<Bytes> = sent
        .into_iter()
        .flat_map(|p| p.chunks)
        .filter_map(|c| match c {
            Chunk::Data(d) => Some(d.payload),
            _ => None,
        })
        .collect();
    assert_eq!(payloads, vec![&b"one"[..], &b"two"[..]]);
}

/// RFC 9260 5.2.4 case C (our tag does not match, the peer's does, no
/// tie-tags: a cookie issued before the association existed) is discarded.
#[test]
fn rfc9260_5_2_4_case_c_is_discarded() {
    let now = Instant::now();
    let mut ep = Endpoint::new(Config::default(), PORT, true, [1; 32], now).expect("config");
    // Before any association: a stateless INIT ACK to the peer's INIT.
    let init = Chunk::Init(init_chunk(PEER_TAG, PEER_TSN, None));
    let Some(DatagramEvent::Response(t)) = ep.handle(now, server_addr(), encode(0, vec![init]))
    else {
        panic!("the INIT is answered");
    };
    let answer = Packet::decode(t.contents).expect("valid");
    let Chunk::InitAck(old) = &answer.chunks[0] else {
        panic!("expected INIT ACK");
    };
    let (old_tag, old_cookie) = (old.initiate_tag, old.cookie.clone().expect("cookie"));
    // Then our own association to that peer, which gets PEER_TAG.
    let (handle, assoc) = ep.connect(now, server_addr(), PORT);
    let mut c = Client {
        now,
        ep,
        handle,
        assoc,
    };
    c.sent_init();
    c.drive_to_cookie_echoed();
    c.drive_to_established();
    c.sent();
    assert_ne!(old_tag, c.tag());
    let echo = encode(old_tag, vec![Chunk::CookieEcho(old_cookie)]);
    assert!(c.ep.handle(now, server_addr(), echo).is_none());
    assert_eq!(c.ep.associations(), 1);
    assert_eq!(c.assoc.state(), State::Established);
    assert!(c.sent().is_empty());
}

/// RFC 9260 5.2.6: a peer that answers every COOKIE ECHO with a Stale
/// Cookie error cannot keep the handshake looping. Every INIT after the
/// first carries a Cookie Preservative (the staleness reported plus the
/// exchange's round trip), each counts against Max.Init.Retransmits, and
/// the handshake fails at the limit. It used to restart with the counter
/// at zero and no preservative, forever (1,500 INITs in 120 s).
#[test]
fn rfc9260_5_2_6_stale_cookie_restarts_count_against_max_init_retransmits() {
    let config = Config::default();
    let max = config.max_init_transmits;
    let mut c = Client::new(config);
    let hop = Duration::from_millis(50);
    let mut preservatives = Vec::new();
    for _ in 0..100 {
        if c.assoc.state() == State::Closed {
            break;
        }
        for packet in c.sent() {
            c.now += hop;
            match &packet.chunks[0] {
                Chunk::Init(init) => {
                    preservatives.push(init.cookie_preservative);
                    let ack = init_chunk(PEER_TAG, PEER_TSN, Some(Bytes::from_static(b"c")));
                    c.feed(init.initiate_tag, vec![Chunk::InitAck(ack)]);
                }
                Chunk::CookieEcho(_) => {
                    let stale_by_us = 1_500_000u32;
                    let error = Chunk::Error(vec![ErrorCause::new(
                        cause::STALE_COOKIE,
                        Bytes::copy_from_slice(&stale_by_us.to_be_bytes()),
                    )]);
                    c.feed(c.tag(), vec![error]);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(c.assoc.state(), State::Closed, "the handshake never ended");
    assert_eq!(
        c.events(),
        vec![Event::Lost(AssociationError::HandshakeFailed)]
    );
    assert_eq!(preservatives.len(), max as usize, "INITs sent");
    assert_eq!(preservatives[0], None);
    // 1.5 s of staleness plus the 50 ms the COOKIE ECHO and the ERROR took.
    assert!(preservatives[1..].iter().all(|p| *p == Some(1550)));
}

/// RFC 9260 5.2.6 on both real ends: the server's cookies live 1 ms, so the
/// first COOKIE ECHO (20 ms after the INIT reached the server) is stale;
/// the client starts again with a Cookie Preservative that covers the
/// staleness, the handshake completes, and the five messages sent before
/// it (which rode with the stale COOKIE ECHO) are all delivered, in order.
/// They used to be lost, and without the preservative the handshake
/// looped.
#[test]
fn rfc9260_5_2_6_after_a_stale_cookie_the_handshake_completes_and_messages_arrive() {
    let server = Config {
        cookie_lifetime: Duration::from_millis(1),
        ..Config::default()
    };
    let mut sim = Sim::new(Config::default(), server, Link::default(), 11);
    sim.connect();
    for i in 0..5u8 {
        sim.sides[CLIENT]
            .assoc()
            .send(0, Bytes::from(vec![i; 100]), 0, false)
            .expect("send");
    }
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.saw(CLIENT, &Event::Connected) && s.sides[SERVER].received.len() == 5
    }));
    let got: Vec<Vec<u8>> = sim.sides[SERVER]
        .received
        .iter()
        .map(|m| m.data.to_vec())
        .collect();
    let want: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100]).collect();
    assert_eq!(got, want);
    assert_eq!(sim.sides[SERVER].endpoint.stats().stale_cookies, 1);
    let inits: Vec<Init> = sim.sent[CLIENT]
        .iter()
        .filter_map(|d| Packet::decode(d.clone()).ok())
        .filter_map(|p| match p.chunks.into_iter().next() {
            Some(Chunk::Init(init)) => Some(init),
            _ => None,
        })
        .collect();
    assert_eq!(inits.len(), 2);
    // Stale by 19 ms, and 20 ms for the COOKIE ECHO and the ERROR.
    assert_eq!(inits[1].cookie_preservative, Some(39));
}

/// RFC 9260 5.2.6 lets the receiver of a Cookie Preservative ignore or cap
/// it: an INIT asking for 49 days gets a cookie that lives
/// `cookie_lifetime` + `max_cookie_extension` (5 s by default) and no
/// longer; a request within the bound is honoured; zero ignores it.
#[test]
fn rfc9260_5_2_6_the_cookie_preservative_is_bounded() {
    let now = Instant::now();
    let config = Config::default();
    let lifetime = config.cookie_lifetime;
    let bound = config.max_cookie_extension;
    assert_eq!(bound, sctp::DEFAULT_MAX_COOKIE_EXTENSION);
    let echo_after = |config: Config, preservative: u32, after: Duration| {
        let mut ep = Endpoint::new(config, PORT, true, [7; 32], now).expect("config");
        let mut init = init_chunk(PEER_TAG, PEER_TSN, None);
        init.cookie_preservative = Some(preservative);
        let Some(DatagramEvent::Response(t)) =
            ep.handle(now, server_addr(), encode(0, vec![Chunk::Init(init)]))
        else {
            panic!("the INIT is answered");
        };
        let answer = Packet::decode(t.contents).expect("valid");
        let Chunk::InitAck(ack) = &answer.chunks[0] else {
            panic!("expected INIT ACK");
        };
        let echo = encode(
            ack.initiate_tag,
            vec![Chunk::CookieEcho(ack.cookie.clone().expect("cookie"))],
        );
        match ep.handle(now + after, server_addr(), echo) {
            Some(DatagramEvent::NewAssociation { .. }) => true,
            Some(DatagramEvent::Response(t)) => {
                let error = Packet::decode(t.contents).expect("valid");
                assert!(
                    matches!(&error.chunks[0], Chunk::Error(c) if c[0].code == cause::STALE_COOKIE)
                );
                false
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    let ms = Duration::from_millis;
    assert!(!echo_after(
        Config::default(),
        u32::MAX,
        lifetime + bound + ms(1)
    ));
    assert!(!echo_after(
        Config::default(),
        u32::MAX,
        lifetime + ms(3_600_000)
    ));
    assert!(echo_after(Config::default(), u32::MAX, lifetime + bound));
    assert!(echo_after(Config::default(), 2000, lifetime + ms(1500)));
    let ignoring = Config {
        max_cookie_extension: Duration::ZERO,
        ..Config::default()
    };
    assert!(!echo_after(ignoring, 2000, lifetime + ms(1500)));
}
