//! Loads `ebpf-programs`'s `xdp_count` into the kernel, attaches it to one end of a
//! veth pair between two fresh network namespaces, sends a known number of UDP
//! datagrams across and checks the counters saw them, then that nothing is counted
//! after detaching.
//!
//! The tests are `#[ignore]`d because they need root (namespaces, BPF, XDP) and a
//! built object: `cargo test --workspace` on a laptop stays green, and `cargo xtask
//! build-ebpf --load-test` builds the object and runs them with `--ignored` and
//! `GATEWAY_EBPF_OBJECT` set. Run by hand, without that variable or without root,
//! they FAIL with a message saying so; they never pass vacuously.
//!
//! Everything they create (two namespaces, which own the veth pair and so the XDP
//! attachment) is removed by [`NetnsPairGuard`] on drop, also when a test panics.

#[path = "support/ebpf.rs"]
mod support;

use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::{Duration, Instant},
};

use ebpf_common::PacketCounters;
use gateway::ebpf::{XdpCounter, XdpMode};
use support::{chain, object_path, require_root};

/// Datagrams sent while the program is attached.
const DATAGRAMS: u64 = 200;
/// UDP payload of each datagram, in bytes.
const PAYLOAD_LEN: usize = 64;
/// Ethernet (14) + IPv4 (20) + UDP (8) + payload: the frame length XDP sees.
const FRAME_LEN: u64 = 14 + 20 + 8 + PAYLOAD_LEN as u64;
/// Frames the test tolerates beyond its own datagrams (ARP refreshes and the like).
const NOISE_FRAMES: u64 = 16;
/// How long to wait for frames to be counted before giving up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(3);

/// The XDP side (attached end) and the sending side, on TEST-NET-1 (RFC 5737):
/// both exist only inside the namespaces this test creates.
const XDP_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PEER_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The discard port: nothing listens, which is fine, XDP sees the frame first.
const DISCARD_PORT: u16 = 9;

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn xdp_count_counts_in_generic_mode() {
    counts_and_detaches(XdpMode::Generic);
}

#[test]
#[ignore = "needs root and a built eBPF object: run `cargo xtask build-ebpf --load-test`"]
fn xdp_count_counts_in_driver_mode() {
    counts_and_detaches(XdpMode::Driver);
}

fn counts_and_detaches(mode: XdpMode) {
    let object = object_path();
    require_root();
    let net = NetnsPairGuard::create();
    let (xdp_ns, peer_ns, xdp_if) = (net.xdp_ns.clone(), net.peer_ns.clone(), net.xdp_if.clone());

    let (before, attached, detached) = in_netns(&xdp_ns, move || {
        let mut counter = XdpCounter::load_file(&object)
            .unwrap_or_else(|e| panic!("loading {}: {}", object.display(), chain(&e)));
        counter
            .attach(&xdp_if, mode)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        assert_eq!(counter.attached_interface(), Some(xdp_if.as_str()));

        // One datagram first so ARP is resolved and the measured run is exactly
        // our datagrams; wait until the ARP request and the datagram are counted.
        send_datagrams(&peer_ns, 1);
        wait_for(&counter, 2);
        let before = read(&counter);

        send_datagrams(&peer_ns, DATAGRAMS);
        let attached = wait_for(&counter, before.packets + DATAGRAMS);

        counter.detach().unwrap_or_else(|e| panic!("{}", chain(&e)));
        assert_eq!(counter.attached_interface(), None);
        send_datagrams(&peer_ns, DATAGRAMS);
        // Give the datagrams time to arrive, then check none was counted.
        thread::sleep(Duration::from_millis(300));
        let detached = read(&counter);
        (before, attached, detached)
    });

    let packets = attached.packets - before.packets;
    let bytes = attached.bytes - before.bytes;
    assert!(
        packets >= DATAGRAMS,
        "{mode}: counted {packets} frames, sent {DATAGRAMS}"
    );
    assert!(
        packets <= DATAGRAMS + NOISE_FRAMES,
        "{mode}: counted {packets} frames, sent only {DATAGRAMS}: double counting?"
    );
    assert!(
        bytes >= DATAGRAMS * FRAME_LEN,
        "{mode}: counted {bytes} bytes for {packets} frames, expected at least {}",
        DATAGRAMS * FRAME_LEN
    );
    assert_eq!(
        detached, attached,
        "{mode}: frames were counted after detaching"
    );
}

fn read(counter: &XdpCounter) -> PacketCounters {
    counter
        .counters()
        .unwrap_or_else(|e| panic!("{}", chain(&e)))
}

/// Polls the counters until at least `packets` frames are counted or
/// [`SETTLE_TIMEOUT`] passes; returns the last reading either way.
fn wait_for(counter: &XdpCounter, packets: u64) -> PacketCounters {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let now = read(counter);
        if now.packets >= packets || Instant::now() >= deadline {
            return now;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `count` datagrams from the peer namespace to the XDP side.
fn send_datagrams(peer_ns: &str, count: u64) {
    in_netns(peer_ns, move || {
        let socket = UdpSocket::bind(SocketAddrV4::new(PEER_ADDR, 0))
            .unwrap_or_else(|e| panic!("binding {PEER_ADDR}: {e}"));
        let target = SocketAddrV4::new(XDP_ADDR, DISCARD_PORT);
        let payload = [0x5a_u8; PAYLOAD_LEN];
        for i in 0..count {
            // Pace the burst so the veth and the neighbour queue never drop.
            if i % 32 == 31 {
                thread::sleep(Duration::from_millis(2));
            }
            let sent = socket
                .send_to(&payload, target)
                .unwrap_or_else(|e| panic!("sending to {target}: {e}"));
            assert_eq!(sent, PAYLOAD_LEN);
        }
    });
}

/// Runs `f` on a thread inside namespace `name`; a panic in `f` is re-raised here.
fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    testbed::in_netns(name, f).unwrap_or_else(|e| panic!("entering {name}: {e}"))
}

/// Two network namespaces joined by a veth pair, deleted on drop.
///
/// The XDP end lives in `xdp_ns`, the peer end in `peer_ns`: with both ends in
/// one namespace the kernel would route between the two local addresses over
/// loopback and nothing would cross the veth.
struct NetnsPairGuard {
    xdp_ns: String,
    peer_ns: String,
    xdp_if: String,
    /// Deleting the namespaces destroys the veth pair and with it any XDP
    /// attachment still on it.
    _namespaces: [testbed::Netns; 2],
}

impl NetnsPairGuard {
    fn create() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let create = |name: String| {
            testbed::Netns::create(&name).unwrap_or_else(|e| panic!("creating {name}: {e}"))
        };
        let namespaces = [
            create(format!("gw-ebpf-test-{id}-xdp")),
            create(format!("gw-ebpf-test-{id}-peer")),
        ];
        let (xdp_ns, peer_ns) = (
            namespaces[0].name().to_owned(),
            namespaces[1].name().to_owned(),
        );
        // Interface names are at most 15 bytes: 3 + pid (<= 7) + counter.
        let xdp_if = format!("gxa{id}");
        let peer_if = format!("gxb{id}");
        ip(&[
            "link", "add", &xdp_if, "netns", &xdp_ns, "type", "veth", "peer", "name", &peer_if,
            "netns", &peer_ns,
        ]);
        for (ns, dev, addr) in [
            (&xdp_ns, &xdp_if, XDP_ADDR),
            (&peer_ns, &peer_if, PEER_ADDR),
        ] {
            // No IPv6 link-local address: keeps DAD and MLD frames out of the count.
            ip(&["-n", ns, "link", "set", dev, "addrgenmode", "none"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        Self {
            xdp_ns,
            peer_ns,
            xdp_if,
            _namespaces: namespaces,
        }
    }
}

/// Runs `ip ARGS`, failing the test with the command line if it fails.
fn ip(args: &[&str]) {
    if let Err(e) = testbed::ip(args) {
        panic!("{e}");
    }
}
