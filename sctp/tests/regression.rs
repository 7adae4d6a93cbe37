//! Regressions found by the `sctp_association` fuzz target, each replayed on
//! the simulated network.

mod support;

use std::time::Duration;

use bytes::BytesMut;
use sctp::chunk::{Chunk, Packet};
use sctp::{AssociationError, Config, Event, State};
use support::{CLIENT, Link, SERVER, Sim};

const SECOND: Duration = Duration::from_secs(1);

fn established() -> Sim {
    // No heartbeat in the way of the timers these tests watch.
    let config = Config {
        heartbeat_interval: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(7200),
        ..Config::default()
    };
    let mut sim = Sim::new(config.clone(), config, Link::default(), 1);
    sim.connect();
    assert!(
        sim.run_until(30 * SECOND, |s| s.saw(CLIENT, &Event::Connected)
            && s.saw(SERVER, &Event::Connected)),
        "handshake did not complete"
    );
    sim
}

/// A SHUTDOWN whose cumulative ack acknowledges data the server never sent
/// is a protocol violation: the server aborts, and stays aborted. It used to
/// carry on into SHUTDOWN-RECEIVED after ending (`on_shutdown` set the state
/// after the violation had closed the association), so it sent SHUTDOWN ACK
/// after its ABORT and a later `abort` reported a second end.
#[test]
fn shutdown_acknowledging_unsent_data_aborts_once() {
    let mut sim = established();
    let server_initial_tsn = sim.sent[SERVER]
        .iter()
        .filter_map(|d| Packet::decode(d.clone()).ok())
        .flat_map(|p| p.chunks)
        .find_map(|c| match c {
            Chunk::InitAck(i) => Some(i.initial_tsn),
            _ => None,
        })
        .expect("the server sent INIT ACK");
    let packet = Packet {
        src_port: sim.sides[CLIENT].addr.port(),
        dst_port: sim.sides[SERVER].addr.port(),
        vtag: sim.sides[SERVER].assoc().local_tag(),
        chunks: vec![Chunk::Shutdown {
            cum_tsn_ack: server_initial_tsn.wrapping_add(1000),
        }],
    };
    let mut buf = BytesMut::new();
    packet.encode(&mut buf).expect("encodes");
    let sent_before = sim.sent[SERVER].len();
    sim.transmit(CLIENT, buf.freeze());
    sim.run_for(10 * SECOND);

    assert_eq!(sim.sides[SERVER].assoc().state(), State::Closed);
    let now = sim.now;
    sim.sides[SERVER].assoc().abort(now, "late");
    sim.drain();
    let ends: Vec<_> = sim.sides[SERVER]
        .events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Closed | Event::Lost(_)))
        .collect();
    assert_eq!(
        ends.len(),
        1,
        "the association ended more than once: {ends:?}"
    );
    assert!(matches!(
        &ends[0].1,
        Event::Lost(AssociationError::LocallyAborted(why)) if why.contains("never sent")
    ));
    let after: Vec<Chunk> = sim.sent[SERVER][sent_before..]
        .iter()
        .filter_map(|d| Packet::decode(d.clone()).ok())
        .flat_map(|p| p.chunks)
        .collect();
    // (A HEARTBEAT ACK for the client's path MTU probe may come first.)
    assert!(
        after.iter().any(|c| matches!(c, Chunk::Abort { .. })),
        "the server answered with ABORT: {after:?}"
    );
    assert!(
        !after.iter().any(|c| matches!(c, Chunk::ShutdownAck)),
        "no SHUTDOWN ACK after the ABORT: {after:?}"
    );
}

/// After `handle_timeout(now)` the next deadline is after `now`, even before
/// the driver polls transmits: a fired delayed-ack timer used to stay in
/// `poll_timeout` until the SACK went out, so a driver computing its sleep
/// between the two would spin.
#[test]
fn fired_delayed_ack_leaves_poll_timeout() {
    let mut sim = established();
    let now = sim.now;
    let client_addr = sim.sides[CLIENT].addr;
    let client = sim.sides[CLIENT].assoc();
    client
        .send(0, bytes::Bytes::from_static(b"one"), 0, false)
        .expect("send accepted");
    let data = client.poll_transmit(now).expect("the DATA goes out");
    let server = &mut sim.sides[SERVER];
    match server.endpoint.handle(now, client_addr, data.contents) {
        Some(sctp::DatagramEvent::Association(handle, incoming)) => {
            server
                .assocs
                .get_mut(&handle)
                .expect("the server's association")
                .handle(now, incoming);
        }
        other => panic!("the DATA went to the association: {other:?}"),
    }
    // Run the server's timers one by one, as a driver that sleeps until
    // `poll_timeout` would, until the delayed SACK goes out (a heartbeat
    // may come first: the run stopped at the first deadline).
    let server = server.assoc();
    let mut sacked = false;
    for _ in 0..8 {
        let deadline = server.poll_timeout().expect("a timer runs");
        assert!(deadline <= now + Duration::from_secs(5));
        server.handle_timeout(deadline);
        let next = server.poll_timeout().expect("the idle timer runs");
        assert!(next > deadline, "a timer still due after handle_timeout");
        while let Some(t) = server.poll_transmit(deadline) {
            let packet = Packet::decode(t.contents).expect("valid packet");
            sacked |= packet.chunks.iter().any(|c| matches!(c, Chunk::Sack(_)));
        }
        if sacked {
            break;
        }
    }
    assert!(sacked, "the delayed SACK went out");
}
