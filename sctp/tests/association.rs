//! The association on the simulated network: handshake, data both ways over
//! clean and hostile links, shutdown and abort from either side, restart and
//! collisions.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use sctp::chunk::{Chunk, Packet};
use sctp::stream_scheduler::StreamSchedulerKind;
use sctp::{AssociationError, Config, Event, State};
use support::{CLIENT, Link, SERVER, Sim};

const SECOND: Duration = Duration::from_secs(1);

fn config() -> Config {
    Config {
        // Tests want quick recovery; RFC 9260's 1 s minimum would only slow them.
        rtt: sctp::rtt::RttConfig {
            initial: Duration::from_millis(300),
            min: Duration::from_millis(100),
            max: Duration::from_secs(5),
        },
        ..Config::default()
    }
}

/// A message whose bytes tell its stream and index, `len` long.
fn message(stream: u16, index: u32, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len.max(6));
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(&index.to_be_bytes());
    while v.len() < len {
        v.push((v.len() as u32 ^ index) as u8);
    }
    v.truncate(len.max(6));
    Bytes::from(v)
}

fn established(link: Link, seed: u64) -> Sim {
    let mut sim = Sim::new(config(), config(), link, seed);
    sim.connect();
    assert!(
        sim.run_until(30 * SECOND, |s| s.saw(CLIENT, &Event::Connected)
            && s.saw(SERVER, &Event::Connected)),
        "handshake did not complete"
    );
    sim
}

/// Sends `per_stream` messages on each of `streams` streams from the client
/// and checks the server got each exactly once, intact, in order per stream.
fn transfer(sim: &mut Sim, streams: u16, per_stream: u32, len: impl Fn(u32) -> usize) {
    let mut expected = 0;
    for i in 0..per_stream {
        for s in 0..streams {
            let assoc = sim.sides[CLIENT].assoc();
            assoc
                .send(s, message(s, i, len(i)), 0, false)
                .expect("send accepted");
            expected += 1;
        }
    }
    let done = sim.run_until(600 * SECOND, |s| s.sides[SERVER].received.len() >= expected);
    assert!(
        done,
        "{} of {expected} messages arrived by {:?}",
        sim.sides[SERVER].received.len(),
        sim.now
    );
    let mut next: BTreeMap<u16, u32> = BTreeMap::new();
    for msg in &sim.sides[SERVER].received {
        let index = next.entry(msg.stream).or_default();
        assert_eq!(
            msg.data,
            message(msg.stream, *index, len(*index)),
            "stream {} message {index}",
            msg.stream
        );
        *index += 1;
    }
    assert_eq!(
        sim.sides[SERVER].received.len(),
        expected,
        "delivered exactly once"
    );
}

#[test]
fn handshake_then_messages_both_ways() {
    let mut sim = established(Link::default(), 1);
    assert_eq!(sim.sides[CLIENT].assoc().streams(), Some((16, 16)));
    sim.sides[CLIENT]
        .assoc()
        .send(3, Bytes::from_static(b"hello"), 7, false)
        .expect("send");
    sim.sides[SERVER]
        .assoc()
        .send(5, Bytes::from_static(b"world"), 9, true)
        .expect("send");
    assert!(
        sim.run_until(SECOND, |s| !s.sides[SERVER].received.is_empty()
            && !s.sides[CLIENT].received.is_empty())
    );
    let got = &sim.sides[SERVER].received[0];
    assert_eq!((got.stream, got.ppid, &got.data[..]), (3, 7, &b"hello"[..]));
    let got = &sim.sides[CLIENT].received[0];
    assert_eq!(
        (got.stream, got.ppid, got.unordered, &got.data[..]),
        (5, 9, true, &b"world"[..])
    );
}

#[test]
fn data_sent_before_the_handshake_rides_with_the_cookie_echo() {
    let mut sim = Sim::new(config(), config(), Link::default(), 2);
    sim.connect();
    sim.sides[CLIENT]
        .assoc()
        .send(1, Bytes::from_static(b"GET / HTTP/1.1\r\n\r\n"), 0, false)
        .expect("queued before the handshake");
    assert!(sim.run_until(SECOND, |s| !s.sides[SERVER].received.is_empty()));
    // The client's second packet is COOKIE ECHO with the DATA behind it.
    let second = Packet::decode(sim.sent[CLIENT][1].clone()).expect("valid packet");
    assert!(matches!(second.chunks[0], Chunk::CookieEcho(_)));
    assert!(
        matches!(&second.chunks[1], Chunk::Data(d) if &d.payload[..] == b"GET / HTTP/1.1\r\n\r\n")
    );
    // One round trip for INIT, one for the request: 2 x 2 x 10 ms.
    assert_eq!(sim.sides[SERVER].received[0].stream, 1);
}

#[test]
fn fewer_streams_granted_means_fewer_used() {
    let server = Config {
        max_inbound_streams: 4,
        outbound_streams: 2,
        ..config()
    };
    let mut sim = Sim::new(config(), server, Link::default(), 3);
    sim.connect();
    assert!(sim.run_until(SECOND, |s| s.saw(CLIENT, &Event::Connected)));
    assert_eq!(sim.sides[CLIENT].assoc().streams(), Some((4, 2)));
    assert_eq!(
        sim.sides[CLIENT]
            .assoc()
            .send(4, Bytes::from_static(b"x"), 0, false),
        Err(sctp::SendError::InvalidStream(4))
    );
}

#[test]
fn large_messages_are_fragmented_and_reassembled_with_data_and_idata() {
    for idata in [false, true] {
        let cfg = Config { idata, ..config() };
        let mut sim = Sim::new(cfg.clone(), cfg, Link::default(), 4);
        sim.connect();
        assert!(sim.run_until(SECOND, |s| s.saw(SERVER, &Event::Connected)));
        transfer(&mut sim, 3, 5, |i| 1 + (i as usize) * 70_000);
    }
}

#[test]
fn clean_fast_link_carries_many_messages() {
    let link = Link {
        rate: Some(100_000_000),
        delay: Duration::from_millis(20),
        ..Link::default()
    };
    let mut sim = established(link, 5);
    transfer(&mut sim, 8, 200, |_| 1000);
}

#[test]
fn every_message_arrives_once_and_in_order_over_a_lossy_reordering_link() {
    let link = Link {
        loss: 0.1,
        duplicate: 0.05,
        jitter: Duration::from_millis(15),
        ..Link::default()
    };
    let mut sim = established(link, 6);
    transfer(&mut sim, 8, 50, |i| 200 + (i as usize % 7) * 900);
    assert!(sim.dropped > 0);
}

#[test]
fn burst_loss_is_recovered() {
    let link = Link {
        burst: Some((0.02, 0.7)),
        rate: Some(10_000_000),
        delay: Duration::from_millis(40),
        ..Link::default()
    };
    let mut sim = established(link, 7);
    transfer(&mut sim, 4, 100, |_| 3000);
}

#[test]
fn idata_lets_a_small_message_overtake_a_large_one() {
    let link = Link {
        rate: Some(10_000_000),
        ..Link::default()
    };
    let cfg = Config {
        idata: true,
        stream_scheduler: StreamSchedulerKind::RoundRobin,
        ..config()
    };
    let mut sim = Sim::new(cfg.clone(), cfg, link, 8);
    sim.connect();
    assert!(sim.run_until(SECOND, |s| s.saw(SERVER, &Event::Connected)));
    let assoc = sim.sides[CLIENT].assoc();
    assoc
        .send(0, message(0, 0, 512 * 1024), 0, false)
        .expect("send");
    assoc.send(1, message(1, 0, 100), 0, false).expect("send");
    assert!(sim.run_until(60 * SECOND, |s| s.sides[SERVER].received.len() == 2));
    assert_eq!(
        sim.sides[SERVER].received[0].stream, 1,
        "the small message came first"
    );
}

#[test]
fn graceful_close_from_either_side_delivers_everything_first() {
    for closer in [CLIENT, SERVER] {
        let mut sim = established(Link::default(), 9);
        for i in 0..20 {
            sim.sides[closer]
                .assoc()
                .send(1, message(1, i, 5000), 0, false)
                .expect("send");
        }
        let now = sim.now;
        sim.sides[closer].assoc().close(now);
        let other = 1 - closer;
        assert!(sim.run_until(10 * SECOND, |s| s.saw(CLIENT, &Event::Closed)
            && s.saw(SERVER, &Event::Closed)));
        assert_eq!(sim.sides[other].received.len(), 20);
        assert_eq!(sim.sides[closer].assoc().state(), State::Closed);
    }
}

#[test]
fn abort_from_either_side_is_seen_as_aborted() {
    for aborter in [CLIENT, SERVER] {
        let mut sim = established(Link::default(), 10);
        let now = sim.now;
        sim.sides[aborter].assoc().abort(now, "going away");
        let other = 1 - aborter;
        assert!(sim.run_until(SECOND, |s| {
            s.sides[other]
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Lost(AssociationError::Aborted(_))))
        }));
        assert!(
            sim.sides[other]
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Lost(AssociationError::Aborted(c)) if &c[0].info[..] == b"going away"))
        );
    }
}

/// The first `len` bytes of an SCTP packet with verification tag `vtag` whose
/// first chunk is an INIT with Initiate Tag `initiate`, as an ICMP message
/// quotes it.
fn quoted_init(vtag: u32, initiate: u32, len: usize) -> Vec<u8> {
    let mut packet = vec![0x13, 0x88, 0x13, 0x88];
    packet.extend(vtag.to_be_bytes());
    packet.extend([0; 4]); // checksum
    packet.extend([sctp::chunk::kind::INIT, 0, 0, 20]);
    packet.extend(initiate.to_be_bytes());
    packet.truncate(len);
    packet
}

/// The first `len` bytes of an SCTP packet with verification tag `vtag`.
fn quoted(vtag: u32, len: usize) -> Vec<u8> {
    let mut packet = quoted_init(vtag, 0, 20);
    packet[12] = sctp::chunk::kind::SACK;
    packet.truncate(len);
    packet
}

/// RFC 9260 Appendix C (ICMP6, ICMP7): an ICMP "port unreachable" (over UDP,
/// SCTP's "protocol unreachable") ends the association as an ABORT would, but
/// only when it quotes the peer's verification tag.
#[test]
fn port_unreachable_ends_the_association_only_with_the_peers_tag() {
    let mut sim = established(Link::default(), 12);
    let peer_tag = sim.sides[SERVER].assoc().local_tag();
    let own_tag = sim.sides[CLIENT].assoc().local_tag();
    let client = sim.sides[CLIENT].assoc();
    for wrong in [peer_tag.wrapping_add(1), own_tag, 0] {
        if wrong != peer_tag {
            assert!(
                !client.handle_port_unreachable(&quoted(wrong, 12)),
                "tag {wrong:#x}"
            );
        }
    }
    // An INIT with our own tag, but we are past COOKIE-WAIT.
    assert!(!client.handle_port_unreachable(&quoted_init(0, own_tag, 20)));
    // Too short a quote to hold the tag.
    assert!(!client.handle_port_unreachable(&quoted(peer_tag, 7)));
    assert_eq!(client.state(), State::Established);
    assert!(client.handle_port_unreachable(&quoted(peer_tag, 8)));
    assert_eq!(client.state(), State::Closed);
    assert!(
        !client.handle_port_unreachable(&quoted(peer_tag, 12)),
        "ends it once"
    );
    assert!(sim.run_until(SECOND, |s| {
        s.saw(CLIENT, &Event::Lost(AssociationError::PortUnreachable))
    }));
}

/// RFC 9260 Appendix C (ICMP6): in COOKIE-WAIT the packet an ICMP message
/// answers is our INIT, with verification tag 0; the quote must show an INIT
/// carrying our own Initiate Tag, which no off-path sender knows.
#[test]
fn port_unreachable_in_cookie_wait_needs_our_init_quoted() {
    let mut sim = Sim::new(config(), config(), Link::default(), 13);
    sim.connect();
    let client = sim.sides[CLIENT].assoc();
    assert_eq!(client.state(), State::CookieWait);
    let own_tag = client.local_tag();
    for (why, quote) in [
        ("another tag", quoted_init(0, own_tag.wrapping_add(1), 20)),
        ("not an INIT", quoted(0, 20)),
        (
            "a nonzero verification tag",
            quoted_init(own_tag, own_tag, 20),
        ),
        ("the Initiate Tag cut off", quoted_init(0, own_tag, 19)),
        ("only the common header", quoted_init(0, own_tag, 12)),
    ] {
        assert!(!client.handle_port_unreachable(&quote), "{why}");
    }
    assert_eq!(client.state(), State::CookieWait);
    assert!(client.handle_port_unreachable(&quoted_init(0, own_tag, 20)));
    assert_eq!(client.state(), State::Closed);
}

#[test]
fn a_silent_peer_becomes_unreachable() {
    let cfg = Config {
        heartbeat_interval: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(5),
        ..config()
    };
    let mut sim = Sim::new(cfg.clone(), cfg, Link::default(), 11);
    sim.connect();
    assert!(sim.run_until(SECOND, |s| s.saw(SERVER, &Event::Connected)));
    // Idle but alive: heartbeats keep it up.
    sim.run_for(Duration::from_secs(20));
    assert_eq!(sim.sides[CLIENT].assoc().state(), State::Established);
    // Now the link dies.
    sim.link.loss = 1.0;
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.saw(CLIENT, &Event::Lost(AssociationError::Unreachable))
    }));
}

#[test]
fn an_idle_association_outlives_an_outage_shorter_than_the_idle_limit() {
    // The gateway's settings: a heartbeat every 5 s, 30 s of silence allowed.
    let cfg = Config {
        heartbeat_interval: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        ..config()
    };
    let mut sim = Sim::new(cfg.clone(), cfg, Link::default(), 17);
    sim.connect();
    assert!(sim.run_until(SECOND, |s| s.saw(SERVER, &Event::Connected)));
    sim.run_for(Duration::from_secs(12));
    // 15 s of total loss: unanswered heartbeats back off instead of
    // exhausting the error limit at the same RTO.
    sim.link.loss = 1.0;
    sim.run_for(Duration::from_secs(15));
    sim.link.loss = 0.0;
    sim.run_for(Duration::from_secs(12));
    for side in [CLIENT, SERVER] {
        assert_eq!(sim.sides[side].assoc().state(), State::Established);
        assert!(
            !sim.sides[side]
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Lost(_))),
            "side {side} lost the association"
        );
    }
    // And a path that stays silent is still given up, by the idle limit.
    sim.link.loss = 1.0;
    assert!(sim.run_until(Duration::from_secs(40), |s| {
        s.saw(CLIENT, &Event::Lost(AssociationError::Unreachable))
    }));
}

#[test]
fn an_unanswered_init_fails_the_handshake() {
    let link = Link {
        loss: 1.0,
        ..Link::default()
    };
    let mut sim = Sim::new(config(), config(), link, 12);
    sim.connect();
    assert!(sim.run_until(Duration::from_secs(120), |s| {
        s.saw(CLIENT, &Event::Lost(AssociationError::HandshakeFailed))
    }));
    assert_eq!(sim.sent[CLIENT].len(), 8, "Max.Init.Retransmits INITs");
}

#[test]
fn simultaneous_inits_collide_into_one_association() {
    let mut sim = Sim::new(config(), config(), Link::default(), 13);
    sim.sides[SERVER].endpoint.set_listening(true);
    sim.sides[CLIENT].endpoint.set_listening(true);
    let client_addr = sim.sides[CLIENT].addr;
    let now = sim.now;
    let (h, assoc) = sim.sides[SERVER]
        .endpoint
        .connect(now, client_addr, client_addr.port());
    sim.sides[SERVER].assocs.insert(h, assoc);
    sim.connect();
    assert!(
        sim.run_until(5 * SECOND, |s| s.saw(CLIENT, &Event::Connected)
            && s.saw(SERVER, &Event::Connected))
    );
    assert_eq!(sim.sides[CLIENT].assocs.len(), 1);
    assert_eq!(sim.sides[SERVER].assocs.len(), 1);
    transfer(&mut sim, 2, 3, |_| 10);
}

#[test]
fn a_restarted_peer_replaces_its_old_association() {
    let mut sim = established(Link::default(), 14);
    // The client's process restarts: a new endpoint on the same address.
    let cfg = config();
    let addr = sim.sides[CLIENT].addr;
    let now = sim.now;
    sim.sides[CLIENT].endpoint =
        sctp::Endpoint::new(cfg, addr.port(), false, [99; 32], now).expect("config");
    sim.sides[CLIENT].assocs.clear();
    sim.sides[CLIENT].events.clear();
    sim.connect();
    assert!(sim.run_until(5 * SECOND, |s| s.saw(CLIENT, &Event::Connected)));
    assert!(sim.saw(SERVER, &Event::Lost(AssociationError::PeerRestarted)));
    assert_eq!(sim.sides[SERVER].assocs.len(), 1);
    transfer(&mut sim, 2, 3, |_| 10);
}

#[test]
fn the_path_mtu_is_probed_up_to_the_maximum() {
    let mut sim = established(Link::default(), 15);
    assert!(sim.run_until(SECOND, |s| s.sides[CLIENT].assoc().mtu()
        == sctp::DEFAULT_MTU
        && s.sides[SERVER].assoc().mtu() == sctp::DEFAULT_MTU));
}

#[test]
fn a_smaller_path_mtu_is_found_and_data_fits_it() {
    let link = Link {
        max_datagram: Some(1300),
        ..Link::default()
    };
    let mut sim = established(link, 16);
    sim.run_for(10 * SECOND);
    let mtu = sim.sides[CLIENT].assoc().mtu();
    assert!((1268..=1300).contains(&mtu), "found {mtu}");
    transfer(&mut sim, 2, 20, |_| 4000);
    // Nothing but the probes was lost to the path's size: 1452, 1340 and
    // 1312 bytes, three probes each.
    let too_big = sim.sent[CLIENT].iter().filter(|d| d.len() > 1300).count();
    assert_eq!(too_big, 9, "datagrams over the path MTU");
}

#[test]
fn both_sides_closing_at_once_still_close_cleanly() {
    let mut sim = established(Link::default(), 17);
    let now = sim.now;
    sim.sides[CLIENT].assoc().close(now);
    sim.sides[SERVER].assoc().close(now);
    assert!(sim.run_until(10 * SECOND, |s| s.saw(CLIENT, &Event::Closed)
        && s.saw(SERVER, &Event::Closed)));
}

#[test]
fn a_lost_tail_is_retransmitted_after_the_rto_with_back_off() {
    let mut sim = established(Link::default(), 18);
    // The link goes dark for 2 s: the one message in flight is retransmitted
    // by T3-rtx, the RTO doubling each time (RFC 9260 6.3.3 E2).
    sim.link.loss = 1.0;
    let rto = sim.sides[CLIENT].assoc().rto();
    sim.sides[CLIENT]
        .assoc()
        .send(0, Bytes::from_static(b"tail"), 0, false)
        .expect("send");
    sim.run_for(2 * SECOND);
    assert!(sim.sides[CLIENT].assoc().rto() >= rto * 4);
    sim.link.loss = 0.0;
    assert!(sim.run_until(10 * SECOND, |s| s.sides[SERVER].received.len() == 1));
    assert_eq!(&sim.sides[SERVER].received[0].data[..], b"tail");
}

#[test]
fn a_slow_handshake_still_gets_heartbeats_afterwards() {
    let cfg = Config {
        heartbeat_interval: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(3),
        ..config()
    };
    let link = Link {
        loss: 1.0,
        ..Link::default()
    };
    // Only the client heartbeats (the server's interval is longer than the
    // test), so only the client's heartbeats can keep the pair alive.
    let server = Config {
        heartbeat_interval: Duration::from_secs(600),
        ..cfg.clone()
    };
    let mut sim = Sim::new(cfg, server, link, 19);
    sim.connect();
    // The first INITs are lost for longer than the heartbeat interval.
    sim.run_for(Duration::from_millis(1500));
    sim.link.loss = 0.0;
    assert!(sim.run_until(10 * SECOND, |s| s.saw(CLIENT, &Event::Connected)));
    // Idle, but heartbeats keep both sides hearing each other.
    sim.run_for(Duration::from_secs(20));
    assert_eq!(sim.sides[CLIENT].assoc().state(), State::Established);
    assert_eq!(sim.sides[SERVER].assoc().state(), State::Established);
}
