//! Our userspace SCTP (our own `sctp` core over UDP) against the Linux kernel's SCTP with
//! RFC 6951 UDP encapsulation: two implementations that share nothing but the
//! wire format.
//!
//! Needs a kernel with SCTP: `#[ignore]`d on the host, run by `cargo xtask
//! vm-test` inside the VM, where `net.sctp.udp_port` is 9899 and
//! `net.sctp.intl_enable` is 1. The kernel listens for encapsulated packets on
//! that UDP port; our userspace side uses the same number as its SCTP port on
//! both ends, so a kernel listener binds SCTP port 9899 too (one per family at
//! a time: [`KERNEL_LISTENER_PORT`]).
//!
//! The tests are one table per kind, each row a direction (which backend
//! connects) and an address family:
//! - echo: every size both ways on several streams, bytes checked, then a
//!   graceful close;
//! - the same echo under loss (`lossy_*`): `cargo xtask vm-test` runs the tests
//!   whose name contains `lossy` in a second phase, after adding
//!   `netem loss 2%` to the guest's loopback, and the others before it, so a
//!   clean test never runs under loss. Each lossy test checks that netem is on
//!   and dropped packets while it ran, so it cannot pass on a clean path;
//! - I-DATA (RFC 8260): both ends negotiate it; 100 bytes go on stream 2 right
//!   after 2 MB on stream 1. Linux 6.1 numbers I-DATA fragments one lower than
//!   RFC 8260 and our core, so fragmented messages do not get through in
//!   either direction; these tests pin that behaviour down (see [`idata`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::kernel::StreamScheduler;
use gateway_transport::{
    Association, AssociationConfig, BackendKind, KernelConfig, Listener, SCTP_UDP_PORT,
    StreamSchedulerKind, TransportError, UdpOffload, UserspaceConfig, connect,
};
use tokio::sync::{Mutex, MutexGuard};

/// Time limit of a test on a clean loopback.
const LIMIT: Duration = Duration::from_secs(90);
/// Time limit of a test under netem loss: Linux SCTP's smallest RTO is 1 s and
/// doubles per time-out, and the VM runs under software emulation.
const LOSSY_LIMIT: Duration = Duration::from_secs(240);
/// Message sizes of the echo tests, bytes: one byte up to ~200 packets.
const ECHO_SIZES: [usize; 6] = [1, 100, 1_500, 9_000, 65_536, 300_000];
/// The I-DATA test's large message, bytes: ~1,400 packets at the VM's MTU.
const LARGE: usize = 2 * 1024 * 1024;
/// The I-DATA test's small message, bytes.
const SMALL: usize = 100;

/// The kernel listener must bind SCTP port 9899 (see the module doc), and two
/// listening SCTP sockets cannot share a port and address: the tests with a
/// kernel listener take turns, per family.
static KERNEL_LISTENER_PORT: [Mutex<()>; 2] = [Mutex::const_new(()), Mutex::const_new(())];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn loopback(self) -> IpAddr {
        match self {
            Family::V4 => Ipv4Addr::LOCALHOST.into(),
            Family::V6 => Ipv6Addr::LOCALHOST.into(),
        }
    }
}

/// The echo tests' settings: DATA, not I-DATA, on both sides (Linux's I-DATA
/// does not interoperate with ours, see [`idata`]; the VM enables it).
fn config() -> AssociationConfig {
    AssociationConfig {
        streams: 8,
        max_inbound_streams: 8,
        connect_timeout: Duration::from_secs(30),
        userspace: UserspaceConfig {
            idata: false,
            // GSO into the guest kernel's SCTP encapsulation over loopback made
            // the VM stop dead (see `UserspaceConfig::udp_offload`); set
            // INTEROP_UDP_OFFLOAD to reproduce.
            udp_offload: if std::env::var_os("INTEROP_UDP_OFFLOAD").is_some() {
                UdpOffload::On
            } else {
                UdpOffload::Off
            },
            ..UserspaceConfig::default()
        },
        ..AssociationConfig::default()
    }
}

fn payload(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

/// An established association between the two backends over UDP.
struct Pair {
    /// The side that connected (`client` of the row).
    client: Association,
    /// The side that accepted.
    server: Association,
    /// Held while a kernel listener owns SCTP port 9899.
    _turn: Option<MutexGuard<'static, ()>>,
}

/// Connects a `client` backend to a listener of the other backend on
/// `family`'s loopback, both with `config` (plus the kernel's encapsulation
/// port).
async fn pair(client: BackendKind, family: Family, config: &AssociationConfig) -> Result<Pair> {
    let ip = family.loopback();
    let (client, server, turn) = match client {
        BackendKind::Userspace => {
            let turn = KERNEL_LISTENER_PORT[family as usize].lock().await;
            let addr = SocketAddr::new(ip, SCTP_UDP_PORT);
            let kernel_config = AssociationConfig {
                kernel: KernelConfig {
                    // Replies go back encapsulated to the port the userspace side used.
                    udp_encapsulation_port: Some(SCTP_UDP_PORT),
                    ..config.kernel.clone()
                },
                ..config.clone()
            };
            let listener = Listener::bind(BackendKind::Kernel, addr, &kernel_config).await?;
            let (client, server) = tokio::join!(
                connect(BackendKind::Userspace, addr, config),
                listener.accept()
            );
            (
                client.context("userspace connect")?,
                server.context("kernel accept")?,
                Some(turn),
            )
        }
        BackendKind::Kernel => {
            // The kernel owns UDP 9899 (net.sctp.udp_port); ours listens on a
            // port of its own and uses it as its SCTP port, as it always does.
            let listener =
                Listener::bind(BackendKind::Userspace, SocketAddr::new(ip, 0), config).await?;
            let addr = listener.local_addr()?;
            let kernel_config = AssociationConfig {
                kernel: KernelConfig {
                    udp_encapsulation_port: Some(addr.port()),
                    ..config.kernel.clone()
                },
                ..config.clone()
            };
            let (client, server) = tokio::join!(
                connect(BackendKind::Kernel, addr, &kernel_config),
                listener.accept()
            );
            (
                client.context("kernel connect")?,
                server.context("userspace accept")?,
                None,
            )
        }
        #[cfg_attr(
            not(feature = "baselines"),
            expect(unreachable_patterns, reason = "only the baselines have no row")
        )]
        other => bail!("no interop row for a {other} client"),
    };
    ensure!(
        client.streams().outbound == 8 && server.streams().inbound == 8,
        "streams: client {:?}, server {:?}",
        client.streams(),
        server.streams()
    );
    Ok(Pair {
        client,
        server,
        _turn: turn,
    })
}

/// The client sends every (stream, size), the server echoes each message back
/// on its stream; both check bytes.
async fn echo_both_ways(client: &Association, server: &Association) -> Result<()> {
    let echo = async {
        for _ in ECHO_SIZES {
            let m = server.recv().await.context("server recv")?;
            server.send(m.stream, m.data).await.context("server echo")?;
        }
        Ok::<_, anyhow::Error>(())
    };
    let drive = async {
        for (i, len) in ECHO_SIZES.into_iter().enumerate() {
            let stream = 1 + (i as u16 % 7);
            let data = payload(i as u8 + 1, len);
            client
                .send(stream, data.clone())
                .await
                .context("client send")?;
            let back = client.recv().await.context("client recv")?;
            ensure!(
                back.stream == stream,
                "echo of {len} B came on stream {}",
                back.stream
            );
            ensure!(back.data == data, "echo of {len} B differs");
        }
        Ok(())
    };
    let (a, b) = tokio::join!(echo, drive);
    a?;
    b
}

/// The client closes; the server sees `Closed` after the last message.
async fn close(pair: &Pair) -> Result<()> {
    pair.client.close().await.context("client close")?;
    match pair.server.recv().await {
        Err(TransportError::Closed) => Ok(()),
        other => bail!("server expected Closed, got {other:?}"),
    }
}

async fn echo(client: BackendKind, family: Family) -> Result<()> {
    tokio::time::timeout(LIMIT, async {
        let pair = pair(client, family, &config()).await?;
        echo_both_ways(&pair.client, &pair.server).await?;
        close(&pair).await
    })
    .await
    .context("no result in time")?
}

async fn lossy_echo(client: BackendKind, family: Family) -> Result<()> {
    let before = netem_drops()?;
    tokio::time::timeout(LOSSY_LIMIT, async {
        let pair = pair(client, family, &config()).await?;
        echo_both_ways(&pair.client, &pair.server).await?;
        close(&pair).await
    })
    .await
    .context("no result in time")??;
    let after = netem_drops()?;
    ensure!(
        after > before,
        "netem dropped nothing while the test ran ({before} before, {after} after)"
    );
    Ok(())
}

/// Packets the netem qdisc on the guest's loopback has dropped so far; an error
/// if there is none (the test would not be lossy).
fn netem_drops() -> Result<u64> {
    let out = Command::new("tc")
        .args(["-s", "qdisc", "show", "dev", "lo"])
        .output()
        .context("run tc")?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.contains("netem"),
        "no netem qdisc on lo (cargo xtask vm-test adds it for the tests named lossy): {text}"
    );
    let dropped = text
        .split_once("dropped ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .context("no drop count in tc's statistics")?;
    Ok(dropped.parse()?)
}

/// How long the I-DATA test waits for a message that Linux will not deliver.
const UNDELIVERED_WAIT: Duration = Duration::from_secs(10);

/// I-DATA against the kernel: both ends negotiate it, and the client (the
/// sender) queues `LARGE` bytes on stream 1, then `SMALL` on stream 2, with a
/// round-robin scheduler.
///
/// What Linux 6.1 does with it, pinned here so that a change on either side
/// shows: it numbers I-DATA fragments differently from RFC 8260 section 2.1
/// and from our core. The first fragment (B bit) has FSN 0 implicitly, so
/// ours numbers the second fragment 1; Linux's sender numbers it 0
/// (`sctp_chunk_assign_mid` counts from 0 over the non-first fragments only)
/// and its receiver expects 0 after the first fragment
/// (`sctp_intl_retrieve_reassembled`). Hence:
/// - kernel to userspace: our receiver rejects the second fragment as a
///   protocol violation ("FSN 0 but no B bit") and the association ends;
/// - userspace to kernel: the unfragmented small message arrives first (the
///   interleaving itself works), and the large one is never reassembled.
async fn idata(client: BackendKind, family: Family) -> Result<()> {
    tokio::time::timeout(LIMIT, async {
        let config = AssociationConfig {
            userspace: UserspaceConfig {
                idata: true,
                // FCFS would send the whole large message first, I-DATA or not.
                stream_scheduler: StreamSchedulerKind::RoundRobin,
                ..config().userspace
            },
            kernel: KernelConfig {
                idata: true,
                ..config().kernel
            },
            ..config()
        };
        let pair = pair(client, family, &config).await?;
        let (kernel, userspace) = match client {
            BackendKind::Kernel => (&pair.client, &pair.server),
            _ => (&pair.server, &pair.client),
        };
        let kernel_says = kernel.kernel().context("kernel side")?.idata();
        ensure!(
            matches!(kernel_says, Ok(true)) && userspace.idata(),
            "I-DATA not negotiated: kernel SCTP_INTERLEAVING_SUPPORTED {kernel_says:?}, \
             userspace {}, net.sctp.intl_enable = {:?}",
            userspace.idata(),
            std::fs::read_to_string("/proc/sys/net/sctp/intl_enable").map(|s| s.trim().to_owned())
        );
        if let Some(sender) = pair.client.kernel() {
            sender.set_stream_scheduler(StreamScheduler::RoundRobin)?;
        }
        let large = payload(3, LARGE);
        let small = payload(5, SMALL);
        pair.client.send(1, large).await.context("send large")?;
        pair.client.send(2, small.clone()).await.context("send small")?;
        match client {
            BackendKind::Kernel => {
                // Until the violation: nothing, or the small message.
                let err = loop {
                    match pair.server.recv().await {
                        Ok(m) if m.stream == 2 && m.data == small => continue,
                        Ok(m) => bail!("{} B on stream {} arrived", m.data.len(), m.stream),
                        Err(e) => break e,
                    }
                };
                ensure!(
                    matches!(&err, TransportError::Protocol(why) if why.contains("FSN 0 but no B bit")),
                    "expected our receiver to reject Linux's FSN numbering, got {err:?}: \
                     if the large message now arrives, turn this into the positive test"
                );
            }
            _ => {
                let first = pair.server.recv().await.context("first recv")?;
                ensure!(
                    first.stream == 2 && first.data == small,
                    "the {} B message on stream {} arrived first",
                    first.data.len(),
                    first.stream
                );
                let second = tokio::time::timeout(UNDELIVERED_WAIT, pair.server.recv()).await;
                ensure!(
                    second.is_err(),
                    "Linux delivered {second:?} after the small message: if it is the \
                     {LARGE} B one, its FSN numbering changed; turn this into the positive test"
                );
            }
        }
        pair.client.abort();
        pair.server.abort();
        Ok(())
    })
    .await
    .context("no result in time")?
}

/// One `#[ignore]`d test per row: `name: scenario(client backend, family);`.
macro_rules! interop_tests {
    ($($name:ident: $scenario:ident($client:ident, $family:ident);)*) => {$(
        #[tokio::test]
        #[ignore = "needs kernel SCTP with UDP encapsulation: run by cargo xtask vm-test"]
        async fn $name() -> Result<()> {
            $scenario(BackendKind::$client, Family::$family).await
        }
    )*};
}

interop_tests! {
    userspace_client_kernel_listener_ipv4: echo(Userspace, V4);
    userspace_client_kernel_listener_ipv6: echo(Userspace, V6);
    kernel_client_userspace_listener_ipv4: echo(Kernel, V4);
    kernel_client_userspace_listener_ipv6: echo(Kernel, V6);

    lossy_userspace_client_kernel_listener_ipv4: lossy_echo(Userspace, V4);
    lossy_userspace_client_kernel_listener_ipv6: lossy_echo(Userspace, V6);
    lossy_kernel_client_userspace_listener_ipv4: lossy_echo(Kernel, V4);
    lossy_kernel_client_userspace_listener_ipv6: lossy_echo(Kernel, V6);

    idata_fsn_mismatch_userspace_sends_to_kernel_ipv4: idata(Userspace, V4);
    idata_fsn_mismatch_userspace_sends_to_kernel_ipv6: idata(Userspace, V6);
    idata_fsn_mismatch_kernel_sends_to_userspace_ipv4: idata(Kernel, V4);
    idata_fsn_mismatch_kernel_sends_to_userspace_ipv6: idata(Kernel, V6);
}
