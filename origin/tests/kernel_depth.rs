//! The origin's per-stream depth of kernel SCTP's send queue, measured by
//! `tc_sctp` on the loopback's egress, with a reader that stops reading and
//! then reads everything: the figure rises while the peer's window is shut,
//! the scheduler keeps it near its per-stream limit (so the origin hands the
//! kernel a bounded amount, instead of filling its multi-megabyte send
//! buffer), and it returns to zero once the reader has caught up.
//!
//! Beside it: `tc_sctp`'s per-stream counts equal what each stream carried over
//! kernel SCTP, exactly; and the real origin binary without CAP_BPF says once
//! why it has no per-stream depth, and serves.
//!
//! Needs kernel SCTP, root and the built object (`GATEWAY_EBPF_OBJECT`), so it
//! is `#[ignore]`d and run inside the VM by `cargo xtask vm-test --test
//! origin:kernel_depth`. It changes the guest's loopback (GSO on, SCTP
//! segmentation off, as on a real NIC; a clsact qdisc on kernels without TCX)
//! and undoes both, also on failure.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gateway_protocol::RequestClass;
use gateway_transport::{AssociationConfig, BackendKind, Listener, connect};
use origin::ebpf::{EbpfConfig, EgressCounters};
use origin::response_scheduler::{ResponsePolicyKind, ResponseSchedulerConfig};
use origin::server::{DriverConfig, drive};
use origin::synthetic::{SyntheticHandler, pattern_byte};
use support::TestGateway;
use tokio::time::Instant;

/// The response the slow reader asks for, bytes: more than
/// [`WRITTEN_WHILE_SHUT`], less than the kernel's send buffer, so that without
/// the figure the origin would hand it all over while the reader is shut.
const RESPONSE: u64 = 3_000_000;
/// The scheduler's per-stream limit on bytes in the transport.
const STREAM_LIMIT: u64 = 64 * 1024;
/// Body bytes per RESPONSE_BODY.
const CHUNK: usize = 16 * 1024;
/// What the origin may hand the kernel while the reader reads nothing: the
/// reader's receive buffer, what is in flight, and the scheduler's limit,
/// with room to spare. Without the eBPF figure the origin would fill the
/// send buffer (at least 2 MiB: it must hold a whole `max_message`).
const WRITTEN_WHILE_SHUT: u64 = 1024 * 1024;
/// How long the figures must stand still to count as settled.
const SETTLED: Duration = Duration::from_millis(500);
const DEADLINE: Duration = Duration::from_secs(60);
/// The catching up: a small receive window under software emulation is slow.
const CATCH_UP: Duration = Duration::from_secs(240);
const POLL: Duration = Duration::from_millis(20);
const OBJECT_PATH_ENV: &str = "GATEWAY_EBPF_OBJECT";

/// Runs a command, failing with its output.
fn run(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("run {program}"))?;
    ensure!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Sets the loopback up as a real NIC looks to kernel SCTP for the test, and
/// back to the loopback's defaults after; removes the clsact qdisc `tc_sctp`
/// needs on kernels without TCX.
///
/// `gso on`: the socket builds SCTP GSO packets (up to 64 KiB, one common
/// header, each segment's chunks in a `frag_list` skb), which pass TC egress
/// whole; `tc_sctp` reads them past the linear head with
/// `bpf_skb_load_bytes`. `tx-sctp-segmentation off`, as on most NICs: the
/// stack segments them in software after TC, the path on which pulling such an
/// skb into its head crashed 6.1 (docs/ebpf.md, "What we learned"). Set before
/// the association: the socket takes the device's features when it connects.
struct LoopbackGuard;

impl LoopbackGuard {
    fn new() -> Result<Self> {
        run(
            "ethtool",
            &["-K", "lo", "gso", "on", "tx-sctp-segmentation", "off"],
        )?;
        Ok(Self)
    }
}

impl Drop for LoopbackGuard {
    fn drop(&mut self) {
        let _ = run(
            "ethtool",
            &["-K", "lo", "gso", "on", "tx-sctp-segmentation", "on"],
        );
        // Absent with TCX, or after an earlier clean-up: nothing to do then.
        let _ = run("tc", &["qdisc", "del", "dev", "lo", "clsact"]);
    }
}

fn object_path() -> Result<PathBuf> {
    let path = std::env::var_os(OBJECT_PATH_ENV).with_context(|| {
        format!("{OBJECT_PATH_ENV} is not set: run `cargo xtask build-ebpf` and set it")
    })?;
    let path = PathBuf::from(path);
    ensure!(
        path.is_file(),
        "{OBJECT_PATH_ENV}={} is no file",
        path.display()
    );
    Ok(path)
}

/// The depth of `stream` the origin publishes for `peer`: `None` while it has
/// no figure, `Some(0)` with nothing queued.
fn depth(counters: &EgressCounters, peer: SocketAddr, stream: u16) -> Option<u64> {
    let depths = counters.depths();
    let streams = depths.get(&peer)?;
    Some(
        streams
            .iter()
            .find(|(s, _)| *s == stream)
            .map_or(0, |(_, d)| *d),
    )
}

/// The two tests that change the loopback take turns: one's clean-up (the
/// clsact qdisc on kernels without TCX) would detach the other's program.
static LOOPBACK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn slow_reader_moves_the_depth() -> Result<()> {
    let object = object_path()?;
    let _turn = LOOPBACK.lock().await;
    let _loopback = LoopbackGuard::new()?;
    let counters = Arc::new(
        EgressCounters::start(&EbpfConfig {
            object: Some(object),
            interface: Some("lo".into()),
        })
        .map_err(|e| anyhow::anyhow!("tc_sctp did not start: {e}"))?,
    );

    let origin_config = AssociationConfig {
        streams: 9,
        max_inbound_streams: 9,
        ..AssociationConfig::default()
    };
    let listener = Listener::bind(
        BackendKind::Kernel,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &origin_config,
    )
    .await?;
    let addr = listener.local_addr()?;
    let handler = Arc::new(SyntheticHandler::default());
    let driver = DriverConfig {
        // SCF: the per-stream limit (`stream_queue_limit`) holds for every
        // policy; queue-aware would also wait for FEEDBACK, which this test
        // gateway never sends.
        response_scheduler: ResponseSchedulerConfig {
            policy: ResponsePolicyKind::Scf,
            ..ResponseSchedulerConfig::default()
        },
        chunk_size: CHUNK,
        max_open_requests: 64,
        max_request_body: 1 << 20,
        stream_queue_limit: STREAM_LIMIT,
        egress: Some(Arc::clone(&counters)),
        tunnels: None,
    };
    let origin_handler = Arc::clone(&handler);
    let origin = tokio::spawn(async move {
        let assoc = listener.accept().await?;
        drive(assoc, origin_handler, driver).await?;
        anyhow::Ok(())
    });

    let gateway_config = AssociationConfig {
        recv_buffer: Some(64 * 1024),
        ..origin_config
    };
    let assoc = connect(BackendKind::Kernel, addr, &gateway_config).await?;
    // The origin names associations by the gateway's address.
    let gateway_addr = {
        let kernel = assoc.kernel().context("not a kernel association")?;
        kernel.local_addr()?
    };
    let mut gw = TestGateway::open(assoc).await?;
    let id = gw
        .request(1, &format!("/bytes/{RESPONSE}"), RequestClass::Demand)
        .await?;

    // The reader reads nothing: the figure rises and settles.
    let started = Instant::now();
    let mut highest = 0;
    let mut last = (0, 0);
    let mut since = Instant::now();
    let (shut_depth, shut_written) = loop {
        ensure!(
            started.elapsed() < DEADLINE,
            "the depth never settled above 0 (last {last:?}, figures {:?}, egress {:?})",
            counters.depths(),
            counters.egress_stats()
        );
        let now = (
            depth(&counters, gateway_addr, 1).unwrap_or(0),
            handler.produced.load(Ordering::Relaxed),
        );
        highest = highest.max(now.0);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if now.0 > 0 && since.elapsed() >= SETTLED {
            break now;
        }
        tokio::time::sleep(POLL).await;
    };
    println!(
        "reader shut: stream 1 depth {shut_depth} bytes (highest {highest}), \
         {shut_written} body bytes produced of {RESPONSE}"
    );
    // The scheduler holds a stream back from its limit on; one message may
    // cross it.
    let message_max = (CHUNK + 64) as u64;
    ensure!(
        highest <= STREAM_LIMIT + message_max,
        "depth {highest} above the stream limit {STREAM_LIMIT} plus one message"
    );
    ensure!(
        shut_written <= WRITTEN_WHILE_SHUT,
        "{shut_written} bytes handed on while the reader read nothing: the depth did \
         not hold the stream back"
    );

    // The reader catches up: everything arrives, the figure returns to 0.
    tokio::time::timeout(CATCH_UP, gw.until_finished(1))
        .await
        .with_context(|| {
            format!(
                "the response did not finish once the reader read again (figures {:?})",
                counters.depths()
            )
        })??;
    let seen = &gw.seen[&id];
    ensure!(seen.end == Some(RESPONSE), "end {:?}", seen.end);
    ensure!(
        seen.body.len() as u64 == RESPONSE
            && seen
                .body
                .iter()
                .enumerate()
                .all(|(i, b)| *b == pattern_byte(i as u64)),
        "body of {} bytes differs",
        seen.body.len()
    );
    let drained = Instant::now();
    loop {
        if depth(&counters, gateway_addr, 1) == Some(0) {
            break;
        }
        if drained.elapsed() > DEADLINE {
            bail!("the depth did not return to 0: {:?}", counters.depths());
        }
        tokio::time::sleep(POLL).await;
    }
    let stats = counters.egress_stats()?;
    println!(
        "reader caught up: stream 1 depth 0; tc_sctp egress saw {} SCTP packets \
         ({} of them GSO), {} chunks, chunk limit {}, malformed {}",
        stats.sctp_packets, stats.gso_packets, stats.chunks, stats.chunk_limit, stats.malformed
    );
    // The point of the test: the figure survived GSO packets, walked whole.
    ensure!(
        stats.gso_packets > 0,
        "no GSO packet passed tc_sctp: the test did not exercise GSO ({stats:?})"
    );
    ensure!(
        stats.chunk_limit == 0 && stats.malformed == 0,
        "tc_sctp walked packets only in part: {stats:?}"
    );
    gw.assoc.close().await?;
    tokio::time::timeout(DEADLINE, origin)
        .await
        .context("the origin's driver did not end")???;
    Ok(())
}

#[tokio::test]
#[ignore = "needs kernel SCTP, root and GATEWAY_EBPF_OBJECT: run by cargo xtask vm-test --test origin:kernel_depth"]
async fn a_slow_reader_moves_the_per_stream_depth_and_the_scheduler_bounds_it() -> Result<()> {
    slow_reader_moves_the_depth().await
}

/// `tc_sctp` over kernel SCTP counts, per stream, exactly the bytes each
/// stream carried (no loss on the loopback, so nothing is sent twice), with
/// kernel GSO on as the other test has it: 20 messages of 3,000 bytes on
/// stream 3 and one of 100,000 on stream 5, both directions of the
/// association leaving through `lo`'s egress; nothing walked in part.
#[tokio::test]
#[ignore = "needs kernel SCTP, root and GATEWAY_EBPF_OBJECT: run by cargo xtask vm-test --test origin:kernel_depth"]
async fn per_stream_counts_equal_what_each_stream_carried_over_kernel_sctp() -> Result<()> {
    use ebpf_common::DIRECTION_EGRESS;
    use ebpf_loader::{SctpAccounting, SctpAccountingConfig};
    use std::collections::BTreeMap;

    let object = object_path()?;
    let _turn = LOOPBACK.lock().await;
    let _loopback = LoopbackGuard::new()?;
    let mut accounting = SctpAccounting::load_file(&object, SctpAccountingConfig::default())?;
    accounting.attach_egress("lo")?;
    let retransmitted_before = sctp_retransmissions()?;
    let config = AssociationConfig {
        streams: 8,
        max_inbound_streams: 8,
        ..AssociationConfig::default()
    };
    let listener = Listener::bind(BackendKind::Kernel, "127.0.0.1:0".parse()?, &config).await?;
    let client = connect(BackendKind::Kernel, listener.local_addr()?, &config).await?;
    let server = listener.accept().await?;
    let sent: BTreeMap<u16, u64> = [(3, 60_000), (5, 100_000)].into();
    for _ in 0..20 {
        server.send(3, bytes::Bytes::from(vec![3u8; 3000])).await?;
    }
    server
        .send(5, bytes::Bytes::from(vec![5u8; 100_000]))
        .await?;
    let mut received: BTreeMap<u16, u64> = BTreeMap::new();
    tokio::time::timeout(DEADLINE, async {
        while received.values().sum::<u64>() < 160_000 {
            let message = client.recv().await?;
            *received.entry(message.stream).or_default() += message.data.len() as u64;
        }
        anyhow::Ok(())
    })
    .await
    .context("the messages did not arrive")??;
    ensure!(received == sent, "received {received:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snapshot = accounting.snapshot()?;
        let mut counted: BTreeMap<u16, u64> = BTreeMap::new();
        for (key, counters) in &snapshot.streams {
            if key.direction == DIRECTION_EGRESS {
                *counted.entry(key.stream_id).or_default() += counters.data_bytes;
            }
        }
        ensure!(
            snapshot.egress.malformed == 0 && snapshot.egress.chunk_limit == 0,
            "walked in part: {:?}",
            snapshot.egress
        );
        if counted == sent {
            break;
        }
        // tc_sctp counts every DATA chunk that leaves, a retransmission
        // again. Loopback loses nothing, but a timer can fire early on a
        // loaded host (seen twice: 1,444 bytes more on a stream of 100,000):
        // when the kernel says it retransmitted, each stream may count more
        // than it carried, by at most a tenth.
        let retransmitted = sctp_retransmissions()? - retransmitted_before;
        if retransmitted > 0
            && counted.keys().eq(sent.keys())
            && counted
                .iter()
                .all(|(stream, n)| *n >= sent[stream] && *n <= sent[stream] + sent[stream] / 10)
        {
            println!("{retransmitted} retransmission(s): counted {counted:?}");
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "tc_sctp counted {counted:?}, the streams carried {sent:?} \
             ({retransmitted} retransmissions)"
        );
        tokio::time::sleep(POLL).await;
    }
    client.abort();
    server.abort();
    accounting.detach()?;
    Ok(())
}

/// Retransmissions the kernel's SCTP made in this network namespace (the
/// whole VM): `SctpT3Retransmits`, `SctpPmtudRetransmits` and
/// `SctpFastRetransmits` of /proc/net/sctp/snmp. Each counts a
/// retransmission event, which may resend several chunks.
fn sctp_retransmissions() -> Result<u64> {
    let snmp =
        std::fs::read_to_string("/proc/net/sctp/snmp").context("reading /proc/net/sctp/snmp")?;
    let mut found = 0;
    let mut total = 0;
    for line in snmp.lines() {
        let mut fields = line.split_whitespace();
        if let (Some(name), Some(value)) = (fields.next(), fields.next())
            && [
                "SctpT3Retransmits",
                "SctpPmtudRetransmits",
                "SctpFastRetransmits",
            ]
            .contains(&name)
        {
            found += 1;
            total += value
                .parse::<u64>()
                .context("a counter of /proc/net/sctp/snmp")?;
        }
    }
    ensure!(
        found == 3,
        "/proc/net/sctp/snmp lacks a retransmission counter:\n{snmp}"
    );
    Ok(total)
}

/// Without CAP_BPF the origin on kernel SCTP still starts, says once that it
/// has no per-stream depth and why (the kernel's refusal), and serves. The
/// real binary under `setpriv --bounding-set -bpf,-sys_admin,-perfmon` (root
/// keeps CAP_NET_ADMIN; loading BPF needs CAP_BPF or CAP_SYS_ADMIN), a request
/// over a kernel SCTP association, the file's bytes back.
#[tokio::test]
#[ignore = "needs kernel SCTP, root and GATEWAY_EBPF_OBJECT: run by cargo xtask vm-test --test origin:kernel_depth"]
async fn without_cap_bpf_the_origin_says_so_once_and_serves() -> Result<()> {
    let object = object_path()?;
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace")?
        .to_owned();
    let site = workspace.join("config/demo-site");
    let dir = std::env::temp_dir().join(format!("origin-nobpf-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0")?;
        socket.local_addr()?.port()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let config = dir.join("origin.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddresses = [\"{addr}\"]\nbackend = \"kernel\"\n\
             [ebpf]\nobject = \"{}\"\ninterface = \"lo\"\n\
             [files]\nroot = \"{}\"\n",
            object.display(),
            site.display()
        ),
    )?;
    let log_path = dir.join("origin.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new("setpriv")
        .args(["--bounding-set", "-bpf,-sys_admin,-perfmon"])
        .arg(env!("CARGO_BIN_EXE_origin"))
        .arg("--config")
        .arg(&config)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting the origin under setpriv")?;
    let _origin = KillOnDrop(child);
    let served = tokio::time::timeout(DEADLINE, async {
        let mut gw = loop {
            let config = AssociationConfig {
                connect_timeout: Duration::from_millis(500),
                ..AssociationConfig::default()
            };
            match connect(BackendKind::Kernel, addr, &config).await {
                Ok(assoc) => break TestGateway::open(assoc).await?,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let head = "GET /index.html HTTP/1.1\r\nHost: demo\r\n\r\n".to_owned();
        let id = gw.request_head(1, head, RequestClass::Demand).await?;
        gw.until_finished(1).await?;
        anyhow::Ok(gw.seen.remove(&id).context("no response")?)
    })
    .await
    .context("no answer within the deadline")??;
    let head = String::from_utf8_lossy(served.head.as_deref().unwrap_or_default()).into_owned();
    ensure!(head.starts_with("HTTP/1.1 200"), "{head}");
    ensure!(
        served.body == std::fs::read(site.join("index.html"))?,
        "the body differs from the file"
    );
    let text = std::fs::read_to_string(&log_path)?;
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("per-stream transport depth:"))
        .collect();
    ensure!(said.len() == 1, "said {said:?}\n{text}");
    ensure!(
        said[0].contains("unknown for kernel SCTP (loading")
            && said[0].contains("Operation not permitted"),
        "{}",
        said[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A child process killed (and reaped) when the test ends, also on failure.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
