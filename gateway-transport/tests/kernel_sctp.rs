//! Kernel SCTP backend tests, through the public association API only.
//!
//! They need a kernel with SCTP, which the development and CI hosts lack, so every
//! test is `#[ignore]`d: a plain `cargo test` lists them as ignored (never as
//! passed), and `cargo xtask vm-test` runs them with `--ignored` inside a
//! virtme-ng VM booting Debian's kernel, after `modprobe sctp`, with
//! `net.sctp.udp_port` set to 9899, `net.sctp.intl_enable` to 1 (so that
//! associations with `kernel.idata` set negotiate I-DATA; it is off by default)
//! and the loopback MTU lowered to 1500 so that messages span many packets. Two tests talk to lksctp-tools' `sctp_darn`, a peer
//! we did not write.
//!
//! Every test is bounded by [`LIMIT`]; timings in the emulated VM mean nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::kernel::StreamScheduler;
use gateway_transport::{
    Association, AssociationConfig, BackendKind, KernelConfig, Listener, SCTP_UDP_PORT,
    TransportError, connect,
};
use tokio::io::AsyncWriteExt;

/// Upper bound for one test's exchange (software-emulated VM: generous).
const LIMIT: Duration = Duration::from_secs(60);

fn config(streams: u16) -> AssociationConfig {
    AssociationConfig {
        streams,
        max_inbound_streams: streams,
        connect_timeout: Duration::from_secs(20),
        ..AssociationConfig::default()
    }
}

async fn within<T>(what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(LIMIT, fut)
        .await
        .with_context(|| format!("{what}: no result within {LIMIT:?}"))?
}

/// A listener on `addr` and one association to it: (client side, server side).
async fn pair(
    addr: &str,
    client: &AssociationConfig,
    server: &AssociationConfig,
) -> Result<(Association, Association)> {
    let addr: SocketAddr = addr.parse()?;
    let listener = Listener::bind(BackendKind::Kernel, addr, server).await?;
    let local = listener.local_addr()?;
    let (c, s) = tokio::join!(
        connect(BackendKind::Kernel, local, client),
        listener.accept()
    );
    let (c, s) = (c.context("connect")?, s.context("accept")?);
    ensure!(c.kind() == BackendKind::Kernel && s.kind() == BackendKind::Kernel);
    ensure!(
        c.peer_addr() == local,
        "client's peer {} != {local}",
        c.peer_addr()
    );
    Ok((c, s))
}

/// Deterministic bytes that differ per `seed` and position (xorshift).
fn pattern(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn expect_err(
    result: Result<gateway_transport::Message, TransportError>,
) -> Result<TransportError> {
    match result {
        Ok(m) => bail!(
            "expected an error, got a {}-byte message on stream {}",
            m.data.len(),
            m.stream
        ),
        Err(e) => Ok(e),
    }
}

async fn round_trip(addr: &str) -> Result<()> {
    let cfg = config(8);
    let (client, server) = pair(addr, &cfg, &cfg).await?;
    ensure!(client.streams().outbound == 8 && client.streams().inbound == 8);
    ensure!(server.streams().outbound == 8 && server.streams().inbound == 8);
    client.send(5, Bytes::from_static(b"ping")).await?;
    let got = server.recv().await?;
    ensure!(got.stream == 5 && got.data == "ping", "server got {got:?}");
    server.send(7, Bytes::from_static(b"pong")).await?;
    let got = client.recv().await?;
    ensure!(got.stream == 7 && got.data == "pong", "client got {got:?}");
    ensure!(
        client.buffered(0).is_none(),
        "kernel cannot tell per-stream bytes"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn ipv4_loopback_round_trip() -> Result<()> {
    within("ipv4", round_trip("127.0.0.1:0")).await
}

#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn ipv6_loopback_round_trip() -> Result<()> {
    within("ipv6", round_trip("[::1]:0")).await
}

/// 16 tasks each send numbered messages of varying length on their own stream at
/// once; the receiver checks every stream's order and every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn sixteen_streams_in_parallel_keep_order_per_stream() -> Result<()> {
    const STREAMS: u16 = 16;
    const PER_STREAM: u32 = 150;
    within("16 streams", async {
        let cfg = config(STREAMS + 1);
        let (client, server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        let message = |stream: u16, seq: u32| {
            let body = pattern(
                u64::from(stream) << 32 | u64::from(seq),
                (seq as usize * 97) % 5000,
            );
            let mut m = Vec::with_capacity(6 + body.len());
            m.extend_from_slice(&stream.to_be_bytes());
            m.extend_from_slice(&seq.to_be_bytes());
            m.extend_from_slice(&body);
            Bytes::from(m)
        };
        let mut senders = Vec::new();
        for stream in 1..=STREAMS {
            let client = client.clone();
            senders.push(tokio::spawn(async move {
                for seq in 0..PER_STREAM {
                    client.send(stream, message(stream, seq)).await?;
                }
                Ok::<_, TransportError>(())
            }));
        }
        let mut next: HashMap<u16, u32> = HashMap::new();
        for _ in 0..u32::from(STREAMS) * PER_STREAM {
            let got = server.recv().await?;
            let want_seq = next.entry(got.stream).or_insert(0);
            ensure!(got.data.len() >= 6, "short message {:?}", got.data);
            let stream = u16::from_be_bytes([got.data[0], got.data[1]]);
            let seq = u32::from_be_bytes([got.data[2], got.data[3], got.data[4], got.data[5]]);
            ensure!(
                stream == got.stream,
                "message for stream {stream} arrived on {}",
                got.stream
            );
            ensure!(
                seq == *want_seq,
                "stream {stream}: got #{seq}, expected #{want_seq}"
            );
            ensure!(
                got.data == message(stream, seq),
                "stream {stream} #{seq}: bytes differ"
            );
            *want_seq += 1;
        }
        for s in senders {
            s.await??;
        }
        ensure!(next.len() == usize::from(STREAMS));
        Ok(())
    })
    .await
}

/// One byte to 4 MiB, across the fragmentation point and beyond the socket
/// buffers, both directions, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn sizes_from_one_byte_to_four_mib_arrive_whole() -> Result<()> {
    const SIZES: [usize; 14] = [
        1,
        2,
        100,
        1_399,
        1_500,
        8_999,
        65_535,
        65_536,
        65_537,
        200_000,
        1 << 20,
        (1 << 20) + 7,
        3 * 1024 * 1024 + 1,
        4 * 1024 * 1024,
    ];
    within("sizes", async {
        let cfg = config(4);
        let (client, server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        let send_all = |from: Association, stream: u16| async move {
            for (i, size) in SIZES.iter().enumerate() {
                from.send(stream, pattern(i as u64, *size)).await?;
            }
            Ok::<_, TransportError>(())
        };
        let up = tokio::spawn(send_all(client.clone(), 1));
        let down = tokio::spawn(send_all(server.clone(), 2));
        for (side, assoc, stream) in [("server", &server, 1), ("client", &client, 2)] {
            for (i, size) in SIZES.iter().enumerate() {
                let got = assoc.recv().await?;
                ensure!(
                    got.stream == stream,
                    "{side}: stream {} != {stream}",
                    got.stream
                );
                ensure!(
                    got.data.len() == *size,
                    "{side}: message {i} has {} bytes, sent {size}",
                    got.data.len()
                );
                ensure!(
                    got.data == pattern(i as u64, *size),
                    "{side}: message {i} differs"
                );
            }
        }
        up.await??;
        down.await??;
        Ok(())
    })
    .await
}

/// The peer grants fewer streams than asked: both sides use the smaller counts,
/// and sending beyond them is refused locally.
#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn peer_granting_fewer_streams_is_used_with_fewer() -> Result<()> {
    within("fewer streams", async {
        let client_cfg = config(32);
        let server_cfg = AssociationConfig {
            streams: 3,
            max_inbound_streams: 4,
            ..config(32)
        };
        let (client, server) = pair("127.0.0.1:0", &client_cfg, &server_cfg).await?;
        let (c, s) = (client.streams(), server.streams());
        ensure!(c.outbound == 4 && c.inbound == 3, "client streams {c:?}");
        ensure!(s.outbound == 3 && s.inbound == 4, "server streams {s:?}");
        match client.send(4, Bytes::from_static(b"x")).await {
            Err(TransportError::InvalidStream {
                stream: 4,
                outbound: 4,
            }) => {}
            other => bail!("send on stream 4 of 4: {other:?}"),
        }
        client.send(3, Bytes::from_static(b"last")).await?;
        let got = server.recv().await?;
        ensure!(got.stream == 3 && got.data == "last", "got {got:?}");
        Ok(())
    })
    .await
}

/// Abort: the peer's `recv` reports `Aborted` (not `Closed`), and so does every
/// later call on either side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn abort_reaches_the_peer_as_aborted() -> Result<()> {
    within("abort", async {
        let cfg = config(4);
        let (client, server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        client.send(1, Bytes::from_static(b"before")).await?;
        let got = server.recv().await?;
        ensure!(got.data == "before");
        // A recv pending on the aborting side must end too.
        let pending = tokio::spawn({
            let client = client.clone();
            async move { client.recv().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.abort();
        let e = expect_err(pending.await?)?;
        ensure!(
            matches!(e, TransportError::Aborted),
            "aborting side's recv: {e:?}"
        );
        let e = expect_err(server.recv().await)?;
        ensure!(matches!(e, TransportError::Aborted), "peer's recv: {e:?}");
        let e = expect_err(server.recv().await)?;
        ensure!(
            matches!(e, TransportError::Aborted),
            "peer's second recv: {e:?}"
        );
        match server.send(1, Bytes::from_static(b"after")).await {
            Err(TransportError::Aborted) => {}
            other => bail!("peer's send after abort: {other:?}"),
        }
        match client.send(1, Bytes::from_static(b"after")).await {
            Err(TransportError::Aborted) => {}
            other => bail!("aborting side's send: {other:?}"),
        }
        Ok(())
    })
    .await
}

/// Graceful close: everything sent before `close` arrives, then `Closed`, on
/// both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn graceful_close_delivers_everything_then_closed() -> Result<()> {
    const COUNT: u64 = 60;
    within("close", async {
        let cfg = config(4);
        let (client, server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        let reader = tokio::spawn({
            let server = server.clone();
            async move {
                let mut got = Vec::new();
                loop {
                    match server.recv().await {
                        Ok(m) => got.push(m),
                        Err(e) => return (got, e),
                    }
                }
            }
        });
        within("close: sending", async {
            for i in 0..COUNT {
                client.send((i % 3) as u16, pattern(i, 30_000)).await?;
            }
            Ok(())
        })
        .await?;
        within("close: close()", async { Ok(client.close().await?) }).await?;
        let (got, end) = within("close: peer reading", async { Ok(reader.await?) }).await?;
        ensure!(
            matches!(end, TransportError::Closed),
            "peer ended with {end:?}"
        );
        ensure!(
            got.len() == COUNT as usize,
            "peer got {} of {COUNT}",
            got.len()
        );
        for (i, m) in got.iter().enumerate() {
            // Per-stream order holds; across streams any interleaving is fine.
            ensure!(
                m.data.len() == 30_000,
                "message {i} has {} bytes",
                m.data.len()
            );
        }
        let mut by_stream: HashMap<u16, Vec<&Bytes>> = HashMap::new();
        for m in &got {
            by_stream.entry(m.stream).or_default().push(&m.data);
        }
        for (stream, msgs) in by_stream {
            let want: Vec<Bytes> = (0..COUNT)
                .filter(|i| (i % 3) as u16 == stream)
                .map(|i| pattern(i, 30_000))
                .collect();
            ensure!(
                msgs.iter().copied().eq(want.iter()),
                "stream {stream}: bytes or order differ"
            );
        }
        let e = expect_err(client.recv().await)?;
        ensure!(
            matches!(e, TransportError::Closed),
            "closing side's recv: {e:?}"
        );
        Ok(())
    })
    .await
}

/// A message above the receiver's `max_message` is reported and skipped; the
/// next one arrives intact.
#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn oversized_message_is_refused_and_skipped() -> Result<()> {
    within("max_message", async {
        let server_cfg = AssociationConfig {
            max_message: 100_000,
            ..config(4)
        };
        let (client, server) = pair("127.0.0.1:0", &config(4), &server_cfg).await?;
        client.send(1, pattern(1, 300_000)).await?;
        client.send(2, pattern(2, 99_999)).await?;
        match server.recv().await {
            Err(TransportError::MessageTooLarge { limit: 100_000, .. }) => {}
            other => bail!("oversized message: {other:?}"),
        }
        let got = server.recv().await?;
        ensure!(
            got.stream == 2 && got.data == pattern(2, 99_999),
            "next message differs"
        );
        match server.send(1, pattern(3, 100_001)).await {
            Err(TransportError::MessageTooLarge { len: 100_001, .. }) => {}
            other => bail!("oversized send: {other:?}"),
        }
        Ok(())
    })
    .await
}

/// The kernel's stream schedulers can be chosen and tuned per association.
#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn stream_scheduler_options() -> Result<()> {
    within("schedulers", async {
        let cfg = config(8);
        let (client, _server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        let kernel = client.kernel().context("a kernel association")?;
        ensure!(
            kernel.stream_scheduler()? == StreamScheduler::Fcfs,
            "default is FCFS"
        );
        kernel.set_stream_scheduler(StreamScheduler::RoundRobin)?;
        ensure!(kernel.stream_scheduler()? == StreamScheduler::RoundRobin);
        kernel.set_stream_scheduler(StreamScheduler::Priority)?;
        ensure!(kernel.stream_scheduler()? == StreamScheduler::Priority);
        kernel.set_stream_scheduler_value(3, 7)?;
        kernel.set_stream_scheduler_value(4, 1)?;
        ensure!(kernel.stream_scheduler_value(3)? == 7);
        ensure!(kernel.stream_scheduler_value(4)? == 1);
        ensure!(matches!(
            kernel.set_stream_scheduler_value(8, 1),
            Err(TransportError::InvalidStream { .. })
        ));
        for newer in [StreamScheduler::FairCapacity, StreamScheduler::WeightedFair] {
            match kernel.set_stream_scheduler(newer) {
                Ok(()) => ensure!(kernel.stream_scheduler()? == newer),
                Err(TransportError::Unavailable(why)) => eprintln!("{newer:?}: {why}"),
                Err(e) => bail!("{newer:?}: {e}"),
            }
        }
        // Data still flows under the last scheduler set.
        client.send(3, Bytes::from_static(b"scheduled")).await?;
        let got = _server.recv().await?;
        ensure!(got.data == "scheduled");
        Ok(())
    })
    .await
}

/// `InDatagrams` of the `Udp:` line in /proc/net/snmp (IPv4, whole VM).
fn udp_in_datagrams() -> Result<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp")?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (
        udp.next().context("no Udp: header")?,
        udp.next().context("no Udp: values")?,
    );
    let column = names
        .split_whitespace()
        .position(|n| n == "InDatagrams")
        .context("no InDatagrams column")?;
    Ok(values
        .split_whitespace()
        .nth(column)
        .context("short Udp: line")?
        .parse()?)
}

/// RFC 6951: both kernel sockets send to UDP port 9899, where this kernel
/// listens (`net.sctp.udp_port`, set by the VM runner). The UDP counters prove
/// the packets really went over UDP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn udp_encapsulated_association_between_kernel_sockets() -> Result<()> {
    let sysctl = std::fs::read_to_string("/proc/sys/net/sctp/udp_port")
        .context("no net.sctp.udp_port (Linux >= 5.11 needed)")?;
    ensure!(
        sysctl.trim() == SCTP_UDP_PORT.to_string(),
        "net.sctp.udp_port is {} (the VM runner sets {SCTP_UDP_PORT})",
        sysctl.trim()
    );
    within("udp encapsulation", async {
        let cfg = AssociationConfig {
            kernel: KernelConfig {
                udp_encapsulation_port: Some(SCTP_UDP_PORT),
                ..config(8).kernel
            },
            ..config(8)
        };
        let before = udp_in_datagrams()?;
        let (client, server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        const SIZES: [usize; 5] = [1, 1_200, 5_000, 100_000, 1 << 20];
        for (i, size) in SIZES.iter().enumerate() {
            client
                .send((i % 8) as u16, pattern(i as u64, *size))
                .await?;
        }
        for (i, size) in SIZES.iter().enumerate() {
            let got = server.recv().await?;
            ensure!(got.stream == (i % 8) as u16 && got.data == pattern(i as u64, *size));
        }
        server.send(2, Bytes::from_static(b"back over udp")).await?;
        ensure!(client.recv().await?.data == "back over udp");
        let datagrams = udp_in_datagrams()? - before;
        // A 1 MiB message at MTU 1500 alone is ~700 packets.
        ensure!(
            datagrams >= 700,
            "only {datagrams} UDP datagrams: not encapsulated?"
        );
        eprintln!("UDP-encapsulated exchange: {datagrams} datagrams");
        Ok(())
    })
    .await
}

/// lksctp-tools' `sctp_darn` (one-to-many socket, its own code) sends stdin lines
/// to our listener; each arrives as one message: the line, its newline and the
/// terminating NUL, as `sctp_darn` sends `strlen + 1` bytes.
#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn interop_sctp_darn_client_sends_to_our_listener() -> Result<()> {
    const LINES: usize = 50;
    within("sctp_darn -s", async {
        let listener =
            Listener::bind(BackendKind::Kernel, "127.0.0.1:0".parse()?, &config(16)).await?;
        let port = listener.local_addr()?.port().to_string();
        let mut darn = tokio::process::Command::new("sctp_darn")
            .args([
                "-H",
                "127.0.0.1",
                "-P",
                "0",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-s",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("run sctp_darn (lksctp-tools)")?;
        let mut stdin = darn.stdin.take().context("sctp_darn stdin")?;
        let lines: Vec<String> = (0..LINES)
            .map(|i| format!("line {i} {}\n", "x".repeat(i * 13)))
            .collect();
        let feed = tokio::spawn({
            let lines = lines.clone();
            async move {
                for line in lines {
                    stdin.write_all(line.as_bytes()).await?;
                }
                stdin.shutdown().await
            }
        });
        let assoc = listener.accept().await?;
        for (i, line) in lines.iter().enumerate() {
            let got = assoc.recv().await?;
            let mut want = line.clone().into_bytes();
            want.push(0);
            ensure!(got.stream == 0, "line {i} on stream {}", got.stream);
            ensure!(
                got.data == want,
                "line {i}: got {:?}",
                String::from_utf8_lossy(&got.data)
            );
        }
        feed.await??;
        let e = expect_err(assoc.recv().await)?;
        ensure!(
            matches!(e, TransportError::Closed),
            "after sctp_darn exits: {e:?}"
        );
        // sctp_darn's exit code is the length of its last send, not a verdict.
        darn.wait().await?;
        Ok(())
    })
    .await
}

/// Our client against `sctp_darn -l -e` (listen and echo each message back on
/// stream 0): the echoes come back whole and byte for byte.
#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn interop_our_client_against_sctp_darn_echo_server() -> Result<()> {
    const PORT: u16 = 47_913;
    within("sctp_darn -l -e", async {
        let _darn = tokio::process::Command::new("sctp_darn")
            .args(["-H", "127.0.0.1", "-P", &PORT.to_string(), "-l", "-e"])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("run sctp_darn (lksctp-tools)")?;
        let addr: SocketAddr = ([127, 0, 0, 1], PORT).into();
        // sctp_darn needs a moment to listen. Before it does, an INIT is refused
        // or (bound, not yet listening) silently dropped, and the kernel's INIT
        // retransmission backs off from 3 s: retry with short attempts instead.
        let attempt = AssociationConfig {
            connect_timeout: Duration::from_secs(2),
            ..config(4)
        };
        let assoc = loop {
            match connect(BackendKind::Kernel, addr, &attempt).await {
                Ok(a) => break a,
                Err(TransportError::ConnectTimeout(_)) => {}
                Err(TransportError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        for (i, size) in [1usize, 10, 500, 1_400, 4_000, 20_000]
            .into_iter()
            .enumerate()
        {
            let sent = pattern(100 + i as u64, size);
            assoc.send(0, sent.clone()).await?;
            let got = assoc.recv().await?;
            ensure!(got.stream == 0, "echo {i} on stream {}", got.stream);
            ensure!(
                got.data == sent,
                "echo {i} ({size} bytes) differs: {} bytes",
                got.data.len()
            );
        }
        assoc.close().await?;
        Ok(())
    })
    .await
}

/// I-DATA between two kernel sockets (the VM sets `net.sctp.intl_enable = 1`):
/// both negotiate it, and with the round-robin scheduler 100 bytes sent on
/// stream 2 right after 2 MiB on stream 1 arrive first, and the large one
/// follows whole (its pieces may come interleaved with the small one's when
/// Linux starts a partial delivery; `recv` reassembles per stream). Without the
/// sysctl (or with `[transport.kernel] idata = false`, the default) both sides would use DATA.
#[tokio::test]
#[ignore = "needs kernel SCTP: run by cargo xtask vm-test"]
async fn idata_lets_a_small_message_overtake_a_large_one() -> Result<()> {
    within("idata", async {
        let cfg = AssociationConfig {
            kernel: KernelConfig {
                idata: true,
                ..config(4).kernel
            },
            ..config(4)
        };
        let (client, server) = pair("127.0.0.1:0", &cfg, &cfg).await?;
        ensure!(
            client.idata() && server.idata(),
            "I-DATA not negotiated: client {}, server {}, net.sctp.intl_enable = {:?}",
            client.idata(),
            server.idata(),
            std::fs::read_to_string("/proc/sys/net/sctp/intl_enable")
        );
        client
            .kernel()
            .context("kernel")?
            .set_stream_scheduler(StreamScheduler::RoundRobin)?;
        let large = pattern(1, 2 * 1024 * 1024);
        let small = pattern(2, 100);
        client.send(1, large.clone()).await?;
        client.send(2, small.clone()).await?;
        let first = server.recv().await?;
        ensure!(
            first.stream == 2 && first.data == small,
            "first: {} B on stream {}",
            first.data.len(),
            first.stream
        );
        let second = server.recv().await?;
        ensure!(second.stream == 1 && second.data == large, "large differs");
        client.close().await?;
        Ok(())
    })
    .await
}
