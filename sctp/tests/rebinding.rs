//! NAT rebinding (RFC 6951 5.4) on the simulated network: a peer whose UDP
//! port changes mid-transfer keeps its association, found by the
//! association's own verification tag from the peer's IP address; a packet
//! that does not prove that from a new port is out of the blue as before.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sctp::chunk::{Chunk, Packet};
use sctp::{Config, DatagramEvent, Event, State};
use support::{CLIENT, Link, SERVER, Sim};

const SECOND: Duration = Duration::from_secs(1);
/// Messages of the transfer, and their size, bytes: enough to be in flight
/// across the port change.
const MESSAGES: u32 = 400;
const MESSAGE_LEN: usize = 1000;

fn established(seed: u64) -> Sim {
    let link = Link {
        delay: Duration::from_millis(20),
        rate: Some(20_000_000),
        ..Link::default()
    };
    let mut sim = Sim::new(Config::default(), Config::default(), link, seed);
    sim.connect();
    assert!(
        sim.run_until(10 * SECOND, |s| s.saw(CLIENT, &Event::Connected)
            && s.saw(SERVER, &Event::Connected)),
        "handshake did not complete"
    );
    sim
}

fn message(index: u32) -> Bytes {
    let mut v = index.to_be_bytes().to_vec();
    v.resize(MESSAGE_LEN, index as u8);
    Bytes::from(v)
}

/// The same address on another UDP port.
fn moved(addr: SocketAddr, port: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), port)
}

fn aborts(sent: &[Bytes]) -> usize {
    sent.iter()
        .filter_map(|d| Packet::decode(d.clone()).ok())
        .flat_map(|p| p.chunks)
        .filter(|c| matches!(c, Chunk::Abort { .. }))
        .count()
}

fn encode(vtag: u32, chunk: Chunk) -> Bytes {
    let packet = Packet {
        src_port: 9899,
        dst_port: 9899,
        vtag,
        chunks: vec![chunk],
    };
    let mut buf = BytesMut::new();
    packet.encode(&mut buf).expect("encodes");
    buf.freeze()
}

/// `sender` sends MESSAGES to the other side; a third of the way through,
/// `rebound`'s UDP port changes: its old address stops receiving (the NAT
/// mapping is gone) and what it sends comes from the new one. Returns the sim
/// after every message arrived.
fn transfer_across_a_port_change(sender: usize, rebound: usize, seed: u64) -> Sim {
    let mut sim = established(seed);
    let receiver = 1 - sender;
    let handles = [0, 1].map(|i| *sim.sides[i].assocs.keys().next().expect("association"));
    for i in 0..MESSAGES {
        sim.sides[sender]
            .assoc()
            .send(0, message(i), 0, false)
            .expect("send accepted");
    }
    assert!(
        sim.run_until(30 * SECOND, |s| s.sides[receiver].received.len()
            >= MESSAGES as usize / 3)
    );
    let old = sim.sides[rebound].addr;
    let new = moved(old, 40_001);
    sim.sides[rebound].addr = new;
    sim.unreachable.push(old);
    let done = sim.run_until(60 * SECOND, |s| {
        s.sides[receiver].received.len() >= MESSAGES as usize
    });
    assert!(
        done,
        "{} of {MESSAGES} messages arrived",
        sim.sides[receiver].received.len()
    );
    for (i, msg) in sim.sides[receiver].received.iter().enumerate() {
        assert_eq!(msg.data, message(i as u32), "message {i}");
    }
    let other = 1 - rebound;
    // The same association on both sides, the other one now at the new port.
    for i in [CLIENT, SERVER] {
        assert_eq!(sim.sides[i].assocs.len(), 1, "side {i}");
        assert_eq!(sim.sides[i].endpoint.associations(), 1, "side {i}");
        let (handle, assoc) = sim.sides[i].assocs.iter().next().expect("association");
        assert_eq!(*handle, handles[i], "side {i} kept its association");
        assert_eq!(assoc.state(), State::Established, "side {i}");
        assert!(
            !sim.sides[i]
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Lost(_))),
            "side {i}: {:?}",
            sim.sides[i].events
        );
        assert_eq!(aborts(&sim.sent[i]), 0, "side {i} sent no ABORT");
    }
    let follower = sim.sides[other].assoc();
    assert_eq!(follower.remote(), new);
    assert_eq!(follower.stats().counters.port_changes, 1);
    assert_eq!(sim.sides[other].endpoint.stats().port_changes, 1);
    assert_eq!(sim.sides[other].endpoint.stats().out_of_the_blue, 0);
    sim
}

#[test]
fn a_download_survives_the_clients_port_change() {
    // The gateway's NAT gives it a new port: the origin (sending) follows
    // the client's SACKs to it.
    transfer_across_a_port_change(SERVER, CLIENT, 1);
}

#[test]
fn an_upload_survives_the_clients_port_change() {
    transfer_across_a_port_change(CLIENT, CLIENT, 2);
}

#[test]
fn a_download_survives_the_servers_port_change() {
    // The origin as the client sees it moved (a NAT in front of the origin):
    // the same code, the other way.
    transfer_across_a_port_change(SERVER, SERVER, 3);
}

/// A packet from a new port of the client's IP address, straight to the
/// server's endpoint; the answer, if any.
fn from_new_port(sim: &mut Sim, vtag: u32, chunk: Chunk) -> Option<DatagramEvent> {
    let from = moved(sim.sides[CLIENT].addr, 40_002);
    let now = sim.now;
    sim.sides[SERVER]
        .endpoint
        .handle(now, from, encode(vtag, chunk))
}

#[test]
fn a_new_port_without_the_associations_tag_is_out_of_the_blue() {
    let mut sim = established(4);
    let client = sim.sides[CLIENT].addr;
    let server_tag = sim.sides[SERVER].assoc().local_tag();
    let client_tag = sim.sides[CLIENT].assoc().local_tag();
    let heartbeat = || Chunk::Heartbeat(Bytes::from_static(b"probe"));

    // A wrong tag: ABORT with the T bit, as RFC 9260 8.4 rule 8 says, to the
    // sender only.
    match from_new_port(&mut sim, server_tag ^ 1, heartbeat()) {
        Some(DatagramEvent::Response(t)) => {
            assert_eq!(t.destination, moved(client, 40_002));
            let answer = Packet::decode(t.contents).expect("valid answer");
            assert_eq!(answer.vtag, server_tag ^ 1);
            assert!(matches!(
                answer.chunks[0],
                Chunk::Abort {
                    reflected: true,
                    ..
                }
            ));
        }
        other => panic!("expected an ABORT with the T bit, got {other:?}"),
    }
    // Packets verified by anything but our own tag move nothing: an ABORT
    // and a SHUTDOWN COMPLETE with the T bit carry the peer's tag (never
    // answered out of the blue), an INIT carries none (answered with an INIT
    // ACK for a new association, which needs its cookie back).
    for chunk in [
        Chunk::Abort {
            reflected: true,
            causes: vec![],
        },
        Chunk::ShutdownComplete { reflected: true },
    ] {
        assert!(from_new_port(&mut sim, client_tag, chunk).is_none());
    }
    let init = Chunk::Init(sctp::chunk::Init {
        initiate_tag: 5,
        a_rwnd: 65_536,
        outbound_streams: 1,
        inbound_streams: 1,
        initial_tsn: 1,
        ..sctp::chunk::Init::default()
    });
    assert!(matches!(
        from_new_port(&mut sim, 0, init),
        Some(DatagramEvent::Response(_))
    ));
    // The right tag from another IP address is out of the blue too.
    let elsewhere: SocketAddr = "198.51.100.9:9899".parse().expect("address");
    let now = sim.now;
    assert!(matches!(
        sim.sides[SERVER]
            .endpoint
            .handle(now, elsewhere, encode(server_tag, heartbeat())),
        Some(DatagramEvent::Response(_))
    ));

    let stats = sim.sides[SERVER].endpoint.stats();
    assert_eq!(stats.port_changes, 0);
    assert_eq!(stats.out_of_the_blue, 4, "{stats:?}");
    assert_eq!(
        stats.init_acks, 2,
        "the handshake's and this one: {stats:?}"
    );
    let assoc = sim.sides[SERVER].assoc();
    assert_eq!(assoc.remote(), client);
    assert_eq!(assoc.state(), State::Established);

    // The right tag from the new port moves it.
    match from_new_port(&mut sim, server_tag, heartbeat()) {
        Some(DatagramEvent::Association(handle, incoming)) => {
            let now = sim.now;
            let assoc = sim.sides[SERVER]
                .assocs
                .get_mut(&handle)
                .expect("the association");
            assoc.handle(now, incoming);
            assert_eq!(assoc.remote(), moved(client, 40_002));
            let answer = assoc.poll_transmit(now).expect("HEARTBEAT ACK");
            assert_eq!(answer.destination, moved(client, 40_002));
        }
        other => panic!("expected the association, got {other:?}"),
    }
    assert_eq!(sim.sides[SERVER].endpoint.stats().port_changes, 1);
    // The old address is free: a packet from it is out of the blue now.
    assert!(matches!(
        sim.sides[SERVER]
            .endpoint
            .handle(now, client, encode(server_tag ^ 1, heartbeat())),
        Some(DatagramEvent::Response(_))
    ));
}
