//! Runs `ebpf-programs`'s browser-flow programs (`tc_tcp_egress`,
//! `tc_tcp_ingress`) in the kernel on hand-built frames with
//! `BPF_PROG_TEST_RUN` and checks, exactly, what they counted; then attaches
//! them to a namespace's loopback and checks their figures against a real TCP
//! connection: every payload byte the client read, and nothing in flight once
//! it has read everything.
//!
//! The frame convention: the gateway (the "server" side of a browser flow,
//! port 80) is 192.0.2.1 / 2001:db8::1 and sends toward the browser,
//! 192.0.2.2 / 2001:db8::2, port 40000 (egress frames); the browser's frames
//! go the other way (ingress).
//!
//! `#[ignore]`d like ebpf_sctp.rs: they need root and a built object (`cargo
//! xtask build-ebpf --load-test` and `cargo xtask test` run them). Without
//! either they FAIL saying so.

#[path = "support/frames.rs"]
#[allow(dead_code, reason = "ebpf_sctp.rs uses the SCTP builders")]
mod frames;
#[path = "support/ebpf.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use frames::*;
use support::{chain, namespace_with_loopback, object_path, require_root};

use ebpf_common::{TcpFlowCounters, TcpFlowKey, TcpStats};
use gateway::ebpf::{TcpFlowAccounting, TcpHook, test_run};
use proptest::{
    prelude::*,
    test_runner::{Config as ProptestConfig, TestRunner},
};

const TC_ACT_PIPE: u32 = 3;
const IPPROTO_TCP: u8 = 6;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const BROWSER_PORT: u16 = 40000;
const TO_BROWSER: (u16, u16) = (80, BROWSER_PORT);
const FROM_BROWSER: (u16, u16) = (BROWSER_PORT, 80);

// ---------------------------------------------------------------- the tests

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn a_flow_counts_payload_sent_and_what_the_browser_acknowledged() {
    let t = Harness::load(&[]);
    // The handshake's SYN-ACK (sequence 999, SYN counts one), two data
    // segments, one retransmitted; a FIN.
    t.run(
        TcpHook::Egress,
        &ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, 999, 5, SYN | ACK, 0, &[])),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(
            IPPROTO_TCP,
            &tcp(TO_BROWSER, 1000, 5, ACK | PSH, 12, &[7; 1000]),
        ),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, 2000, 5, ACK, 0, &[8; 500])),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, 1000, 5, ACK, 0, &[7; 1000])),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, 2500, 5, FIN | ACK, 0, &[])),
    );
    // The browser: its SYN (no ACK: nothing counted), then ACKs, one stale.
    t.run(
        TcpHook::Ingress,
        &ipv4_reply(IPPROTO_TCP, &tcp(FROM_BROWSER, 4, 0, SYN, 0, &[])),
    );
    t.run(
        TcpHook::Ingress,
        &ipv4_reply(IPPROTO_TCP, &tcp(FROM_BROWSER, 5, 2000, ACK, 0, &[])),
    );
    t.run(
        TcpHook::Ingress,
        &ipv4_reply(IPPROTO_TCP, &tcp(FROM_BROWSER, 5, 1000, ACK, 0, &[])),
    );
    let flows = t.flows();
    let expected = TcpFlowCounters {
        payload_bytes: 2500,
        segments: 5,
        acks: 2,
        snd_end: 2501,
        ack: 2000,
        ..TcpFlowCounters::default()
    };
    assert_eq!(flows, BTreeMap::from([(v4_key(), expected)]));
    assert_eq!(flows[&v4_key()].in_flight(), Some(501));
    let (ingress, egress) = t.stats();
    assert_eq!(ingress, stats(3, 3));
    assert_eq!(egress, stats(5, 5));
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn sequence_numbers_wrap() {
    let t = Harness::load(&[]);
    let seq = u32::MAX - 99;
    t.run(
        TcpHook::Egress,
        &ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, seq, 0, ACK, 0, &[1; 300])),
    );
    t.run(
        TcpHook::Ingress,
        &ipv4_reply(
            IPPROTO_TCP,
            &tcp(FROM_BROWSER, 0, seq.wrapping_add(150), ACK, 0, &[]),
        ),
    );
    let flow = t.flows()[&v4_key()];
    assert_eq!(flow.snd_end, 200);
    assert_eq!(flow.in_flight(), Some(150));
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn ipv6_with_extension_headers_keys_by_the_full_addresses() {
    let t = Harness::load(&[]);
    let extensions = [
        (IPPROTO_HOPOPTS, ext_header(8)),
        (IPPROTO_DSTOPTS, ext_header(16)),
    ];
    t.run(
        TcpHook::Egress,
        &ipv6(
            &extensions,
            IPPROTO_TCP,
            &tcp(TO_BROWSER, 10, 0, ACK, 0, &[3; 1200]),
        ),
    );
    t.run(
        TcpHook::Ingress,
        &ipv6_reply(&[], IPPROTO_TCP, &tcp(FROM_BROWSER, 0, 610, ACK, 0, &[])),
    );
    let key = TcpFlowKey {
        browser_addr: v6(2),
        server_addr: v6(1),
        browser_port: BROWSER_PORT,
        server_port: 80,
        _pad: [0; 4],
    };
    let expected = TcpFlowCounters {
        payload_bytes: 1200,
        segments: 1,
        acks: 1,
        snd_end: 1210,
        ack: 610,
        ..TcpFlowCounters::default()
    };
    assert_eq!(t.flows(), BTreeMap::from([(key, expected)]));
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn only_the_configured_server_ports_are_counted() {
    // Default: port 80 only. The gateway's own connections to the browser's
    // other ports, and other protocols, are not flows.
    let t = Harness::load(&[]);
    t.run(
        TcpHook::Egress,
        &ipv4(
            IPPROTO_TCP,
            &tcp((443, BROWSER_PORT), 1, 0, ACK, 0, &[1; 10]),
        ),
    );
    t.run(
        TcpHook::Ingress,
        &ipv4_reply(IPPROTO_TCP, &tcp((BROWSER_PORT, 443), 1, 0, ACK, 0, &[])),
    );
    // Port 80 as the browser's side is not the server's port either.
    t.run(
        TcpHook::Egress,
        &ipv4(
            IPPROTO_TCP,
            &tcp((BROWSER_PORT, 80), 1, 0, ACK, 0, &[1; 10]),
        ),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(IPPROTO_UDP, &udp(80, BROWSER_PORT, &[1; 10])),
    );
    assert!(t.flows().is_empty());
    assert_eq!(t.stats(), (stats(1, 0), stats(3, 0)));

    let t = Harness::load(&[8080, 443]);
    t.run(
        TcpHook::Egress,
        &ipv4(
            IPPROTO_TCP,
            &tcp((80, BROWSER_PORT), 1, 0, ACK, 0, &[1; 10]),
        ),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(
            IPPROTO_TCP,
            &tcp((443, BROWSER_PORT), 1, 0, ACK, 0, &[1; 10]),
        ),
    );
    t.run(
        TcpHook::Egress,
        &ipv4(
            IPPROTO_TCP,
            &tcp((8080, BROWSER_PORT), 1, 0, ACK, 0, &[1; 20]),
        ),
    );
    let ports: Vec<(u16, u64)> = t
        .flows()
        .iter()
        .map(|(k, v)| (k.server_port, v.payload_bytes))
        .collect();
    assert_eq!(ports, vec![(443, 10), (8080, 20)]);
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn a_header_length_that_contradicts_the_packet_counts_nothing() {
    let t = Harness::load(&[]);
    // Data offset 4 (16 bytes: shorter than the fixed header).
    let mut short = tcp(TO_BROWSER, 1, 0, ACK, 0, &[1; 40]);
    short[12] = 4 << 4;
    t.run(TcpHook::Egress, &ipv4(IPPROTO_TCP, &short));
    // Data offset 15 (60 bytes) in a packet of 20 + 8.
    let mut long = tcp(TO_BROWSER, 1, 0, ACK, 0, &[1; 8]);
    long[12] = 15 << 4;
    t.run(TcpHook::Egress, &ipv4(IPPROTO_TCP, &long));
    // A header cut short by the IP length (the frame goes on).
    let mut cut = ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, 1, 0, ACK, 0, &[]));
    cut.truncate(cut.len() - 4);
    cut[16..18].copy_from_slice(&36_u16.to_be_bytes());
    cut.extend_from_slice(&[0; 10]);
    t.run(TcpHook::Egress, &cut);
    assert!(t.flows().is_empty());
    let (_, egress) = t.stats();
    assert_eq!(egress.malformed, 3, "{egress:?}");
    assert_eq!(egress.packets, 3, "{egress:?}");
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn random_packets_never_change_the_verdict_or_the_bytes() {
    let t = Harness::load(&[]);
    for hook in [TcpHook::Egress, TcpHook::Ingress] {
        let fd = t.fd(hook);
        let mut runner = TestRunner::new(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let valid = ipv4(IPPROTO_TCP, &tcp(TO_BROWSER, 1, 2, ACK, 8, &[5; 64]));
        let valid6 = ipv6_reply(&[], IPPROTO_TCP, &tcp(FROM_BROWSER, 1, 2, ACK, 0, &[]));
        let strategy = prop_oneof![
            proptest::collection::vec(any::<u8>(), 14..1500),
            mutate(valid),
            mutate(valid6),
        ];
        let sent = std::cell::Cell::new(0_u64);
        runner
            .run(&strategy, |frame| {
                sent.set(sent.get() + frame.len() as u64);
                // The kernel refuses to build an skb whose IP header is cut
                // (EINVAL): no such packet reaches TC.
                let Ok(out) = test_run::run(fd, &frame, 1) else {
                    return Ok(());
                };
                prop_assert_eq!(out.retval, TC_ACT_PIPE);
                prop_assert_eq!(&out.data_out, &frame);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{hook:?}: {e}"));
        let counted: u64 = t.flows().values().map(|f| f.payload_bytes).sum();
        assert!(
            counted <= sent.get(),
            "{hook:?}: {counted} > {}",
            sent.get()
        );
    }
}

/// The programs on a namespace's loopback (GSO and BIG TCP packets at TC,
/// as loopback makes them), a real TCP connection to port 80 there, both
/// families. While the client does not read, what is in flight never exceeds
/// what the server's socket holds (SIOCOUTQ). Once the client has read
/// everything and the FIN is acknowledged, nothing is in flight, and the
/// flow's payload equals the kernel's own count of data bytes the socket sent
/// (`tcpi_bytes_sent`, retransmissions included: a closed window makes the
/// sender probe with data).
#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn on_a_real_connection_the_flow_matches_what_the_client_read() {
    let object = object_path();
    require_root();
    let netns = namespace_with_loopback("gw-ebpf-tcp");
    testbed::in_netns(netns.name(), move || {
        let mut accounting = TcpFlowAccounting::load_file(&object, &[80])
            .unwrap_or_else(|e| panic!("loading {}: {}", object.display(), chain(&e)));
        accounting
            .attach("lo")
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        for server in ["127.0.0.1:80", "[::1]:80"] {
            let server: SocketAddr = server.parse().expect("address");
            one_connection(&accounting, server, 3_000_000);
        }
        accounting
            .detach()
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        assert!(accounting.attached_interfaces().is_empty());
    })
    .unwrap_or_else(|e| panic!("entering the namespace: {e}"));
    drop(netns);
}

/// The gateway's side (`gateway::accounting`): started with a LAN interface,
/// it attaches both programs there and says so, and finds the connections it
/// serves in their map by the socket's own addresses, through a dual-stack
/// listener as the gateway's is (IPv4 peers as IPv4-mapped addresses) and over
/// IPv6; a socket the programs never saw as a browser flow is not found.
#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn the_gateway_finds_the_connections_it_serves_in_the_flow_map() {
    use gateway::accounting::{Accounting, BrowserFlows, EbpfConfig, LanSide};
    use gateway::browser_socket::BrowserSocket;
    use std::sync::Arc;

    let object = object_path();
    require_root();
    let netns = namespace_with_loopback("gw-ebpf-tcp-gw");
    testbed::in_netns(netns.name(), move || {
        let lan = LanSide {
            interfaces: vec!["lo".into()],
            ports: vec![80],
        };
        let config = EbpfConfig {
            object: Some(object),
            ..EbpfConfig::default()
        };
        let accounting = Accounting::start(&config, &lan);
        assert!(
            accounting
                .describe()
                .ends_with("; browser flows: eBPF (tc_tcp_egress and tc_tcp_ingress on lo)"),
            "{}",
            accounting.describe()
        );
        for connect in ["127.0.0.1:80", "[::1]:80"] {
            let listener = TcpListener::bind("[::]:80").expect("a dual-stack listener on port 80");
            let mut client = TcpStream::connect(connect).expect("connecting");
            let (mut served, _) = listener.accept().expect("accepting");
            served.write_all(&[7; 100_000]).expect("serving");
            let mut read = vec![0_u8; 100_000];
            client.read_exact(&mut read).expect("reading");
            let served = Arc::new(BrowserSocket::of(&served).expect("the served socket"));
            let unrelated = Arc::new(BrowserSocket::of(&client).expect("the client's socket"));
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let flows = accounting
                    .browser_in_flight(&[(7, Arc::clone(&served)), (9, Arc::clone(&unrelated))]);
                let expected = BTreeMap::from([
                    (
                        7,
                        BrowserFlows {
                            connections: 1,
                            seen: 1,
                            in_flight: 0,
                        },
                    ),
                    (
                        9,
                        BrowserFlows {
                            connections: 1,
                            seen: 0,
                            in_flight: 0,
                        },
                    ),
                ]);
                if flows.as_ref() == Some(&expected) {
                    break;
                }
                assert!(Instant::now() < deadline, "{connect}: {flows:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    })
    .unwrap_or_else(|e| panic!("entering the namespace: {e}"));
    drop(netns);
}

/// Serves `bytes` from `server` to one client that reads nothing at first,
/// then everything; checks the flow at both moments.
fn one_connection(accounting: &TcpFlowAccounting, server: SocketAddr, bytes: usize) {
    let listener = TcpListener::bind(server).unwrap_or_else(|e| panic!("binding {server}: {e}"));
    let mut client = TcpStream::connect(server).expect("connecting");
    let (mut served, _) = listener.accept().expect("accepting");
    let probe = served
        .try_clone()
        .expect("a second handle on the served socket");
    let key = flow_key(client.local_addr().expect("client address"), server);
    let writer = std::thread::spawn(move || {
        served.write_all(&vec![0x5a_u8; bytes]).expect("serving");
        served.shutdown(Shutdown::Write).expect("sending the FIN");
    });
    // The client reads nothing: its receive buffer fills, the window closes
    // and the rest waits in the server's socket.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stalled = loop {
        let flow = accounting.flow(&key).expect("reading the map");
        if let Some(flow) = flow.filter(|f| f.payload_bytes > 0 && f.acks > 0) {
            break flow;
        }
        assert!(
            Instant::now() < deadline,
            "{server}: the flow was not seen: {flow:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let outq = socket_outq(&probe);
    let in_flight = stalled.in_flight().expect("both directions seen") as usize;
    assert!(
        in_flight <= outq,
        "{server}: in flight {in_flight} > what the socket holds unacknowledged or unsent {outq}"
    );
    assert!(
        stalled.payload_bytes <= bytes as u64,
        "{server}: {stalled:?}"
    );
    let mut read = Vec::new();
    client.read_to_end(&mut read).expect("reading");
    writer.join().expect("the writer");
    assert_eq!(read.len(), bytes, "{server}: the client read everything");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let flow = accounting
            .flow(&key)
            .expect("reading the map")
            .expect("seen");
        if flow.in_flight() == Some(0) {
            // The kernel's own count of data bytes sent, retransmissions
            // included (RFC 4898 tcpEStatsPerfHCDataOctetsOut), and acked.
            let (sent, acked) = bytes_sent_and_acked(&probe);
            assert_eq!(flow.payload_bytes, sent, "{server}: {flow:?}");
            // tcpi_bytes_acked counts the FIN as one.
            assert_eq!(acked, bytes as u64 + 1, "{server}: everything acknowledged");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{server}: still in flight after 10 s: {flow:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tcpi_bytes_sent` and `tcpi_bytes_acked` of the socket's `TCP_INFO`
/// (Linux 4.19+; offsets from `struct tcp_info` in linux/tcp.h).
fn bytes_sent_and_acked(socket: &TcpStream) -> (u64, u64) {
    use std::os::fd::AsRawFd as _;
    const BYTES_ACKED: usize = 120;
    const BYTES_SENT: usize = 200;
    let mut info = [0_u8; 256];
    let mut len = libc::socklen_t::try_from(info.len()).expect("fits");
    // SAFETY: a valid socket, a writable buffer of `len` bytes and its length.
    let result = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    assert_eq!(result, 0, "TCP_INFO");
    assert!(
        len as usize >= BYTES_SENT + 8,
        "TCP_INFO without tcpi_bytes_sent ({len} bytes)"
    );
    let field = |at: usize| u64::from_ne_bytes(info[at..at + 8].try_into().expect("8 bytes"));
    (field(BYTES_SENT), field(BYTES_ACKED))
}

/// Bytes the socket holds unsent or unacknowledged (`SIOCOUTQ`).
fn socket_outq(socket: &TcpStream) -> usize {
    use std::os::fd::AsRawFd as _;
    let mut queued: libc::c_int = 0;
    // SAFETY: a valid socket descriptor and a writable int, as SIOCOUTQ wants.
    let result = unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &raw mut queued) };
    assert_eq!(result, 0, "SIOCOUTQ");
    usize::try_from(queued).expect("non-negative")
}

// ---------------------------------------------------------------- helpers

/// One freshly loaded copy of the programs.
struct Harness {
    accounting: TcpFlowAccounting,
}

impl Harness {
    fn load(ports: &[u16]) -> Self {
        let object = object_path();
        require_root();
        let accounting = TcpFlowAccounting::load_file(&object, ports)
            .unwrap_or_else(|e| panic!("loading {}: {}", object.display(), chain(&e)));
        Self { accounting }
    }

    fn fd(&self, hook: TcpHook) -> std::os::fd::BorrowedFd<'_> {
        self.accounting
            .program_fd(hook)
            .unwrap_or_else(|e| panic!("{}", chain(&e)))
    }

    /// Runs `hook`'s program on `frame`; fails unless it passed the frame on
    /// unchanged.
    fn run(&self, hook: TcpHook, frame: &[u8]) {
        let out = test_run::run(self.fd(hook), frame, 1)
            .unwrap_or_else(|e| panic!("{hook:?}: BPF_PROG_TEST_RUN: {e}"));
        assert_eq!(out.retval, TC_ACT_PIPE, "{hook:?}: wrong verdict");
        assert_eq!(out.data_out, frame, "{hook:?}: the frame changed");
    }

    /// Every flow, timestamps checked to be set where something was counted,
    /// then zeroed.
    fn flows(&self) -> BTreeMap<TcpFlowKey, TcpFlowCounters> {
        let flows = self
            .accounting
            .flows()
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        flows
            .into_iter()
            .map(|(key, flow)| {
                assert_eq!(
                    flow.segments > 0,
                    flow.last_sent_ns > 0,
                    "{key:?}: {flow:?}"
                );
                assert_eq!(flow.acks > 0, flow.last_ack_ns > 0, "{key:?}: {flow:?}");
                let flow = TcpFlowCounters {
                    last_sent_ns: 0,
                    last_ack_ns: 0,
                    ..flow
                };
                (key, flow)
            })
            .collect()
    }

    fn stats(&self) -> (TcpStats, TcpStats) {
        self.accounting
            .stats()
            .unwrap_or_else(|e| panic!("{}", chain(&e)))
    }
}

fn stats(packets: u64, flow_packets: u64) -> TcpStats {
    TcpStats {
        packets,
        flow_packets,
        ..TcpStats::default()
    }
}

/// The flow of the frames' IPv4 convention.
fn v4_key() -> TcpFlowKey {
    TcpFlowKey {
        browser_addr: mapped([192, 0, 2, 2]),
        server_addr: mapped([192, 0, 2, 1]),
        browser_port: BROWSER_PORT,
        server_port: 80,
        _pad: [0; 4],
    }
}

fn mapped(v4: [u8; 4]) -> [u8; 16] {
    std::net::Ipv4Addr::from(v4).to_ipv6_mapped().octets()
}

/// 2001:db8::`last`, the frames' IPv6 addresses.
fn v6(last: u16) -> [u8; 16] {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last).octets()
}

/// The key the programs build for a browser at `client` connected to `server`.
fn flow_key(client: SocketAddr, server: SocketAddr) -> TcpFlowKey {
    let octets = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    TcpFlowKey {
        browser_addr: octets(client.ip()),
        server_addr: octets(server.ip()),
        browser_port: client.port(),
        server_port: server.port(),
        _pad: [0; 4],
    }
}

/// `frame` with up to 8 bytes overwritten at random places.
fn mutate(frame: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = frame.len();
    proptest::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |edits| {
        let mut frame = frame.clone();
        for (at, byte) in edits {
            frame[at] = byte;
        }
        frame
    })
}
