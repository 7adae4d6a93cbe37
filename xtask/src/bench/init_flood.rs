//! `cargo xtask bench init-flood`: spoofed INITs against an origin while
//! established associations download from it.
//!
//! Two namespaces joined by one veth (`ifl-<pid>-srv`, the origin, and
//! `ifl-<pid>-cli`, its clients and the attacker) and a sink (`-snk`),
//! created here and removed
//! on every way out (a killed run's are removed by the next). In order:
//!
//! 1. Timed on this host: `init_flood --handle 100000` (release) times 100,000 INITs
//!    from distinct sources through `sctp::Endpoint::handle`: decode, the
//!    cookie's HMAC, the INIT ACK's encoding and CRC32c.
//! 2. The real `origin` binary in the server namespace serves a
//!    [`BULK_BYTES`] file; the server's veth egress is limited to
//!    [`BULK_RATE`] (a token bucket), so that the downloads are bounded by
//!    the link, not by the two shared cores, and what the flood takes from
//!    them shows. INIT ACKs to the spoofed sources leave by a dummy
//!    interface (a route for 10.128.0.0/9), whose transmit counter counts
//!    them; rp_filter is off there so the spoofed INITs are taken.
//! 3. [`DOWNLOADERS`] associations (scale_client `--role bulk`) download the
//!    file again and again; after [`WARM_UP`] + `--seconds` (30) the
//!    flooder (`init_flood --flood`, one core, raw socket, pre-built
//!    datagrams) sends INITs from spoofed sources for `--seconds`; then the
//!    downloads go on for [`COOL_DOWN`]. Their per-second goodput before
//!    the flood is compared with the goodput during it (target: at least
//!    [`TARGET_SHARE`]).
//!
//! Report: bench/results/init-flood.md, the per-second series in
//! init-flood.csv.
//!
//! `--callgrind` runs only the host-free count instead ([`run_callgrind`]):
//! the instructions of one INIT answered and of one dropped at the rate
//! limit, counted by callgrind, with where they go; report
//! bench/results/init-flood-callgrind.md.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testbed::{VethPair, exec_in, ip, sysctl};

use super::common::{array_field, field};
use super::common::{build_example, cpu_seconds, load_average, report_header, stdout_lines};
use crate::cmd::workspace_root;

/// Namespace prefix of this benchmark.
const PREFIX: &str = "ifl-";
const SERVER_ADDR: &str = "10.79.0.1";
const CLIENT_ADDR: &str = "10.79.0.2";
const PORT: u16 = 9899;
/// The spoofed sources (init_flood's range), routed to the sink namespace.
const SPOOFED: &str = "10.128.0.0/9";
/// The server's interface toward the sink namespace, where INIT ACKs go.
const SINK_IF: &str = "sink0";
const SINK_ADDR: &str = "10.80.0.2";
/// The file the downloads fetch.
const BULK_BYTES: usize = 16 << 20;
/// The server's egress rate (tc's notation).
const BULK_RATE: &str = "200mbit";
/// Associations downloading.
const DOWNLOADERS: usize = 4;
/// Seconds of download before the baseline window starts.
const WARM_UP: u64 = 5;
/// Seconds of download after the flood.
const COOL_DOWN: u64 = 5;
/// `--seconds` when not given: the baseline window and the flood.
const DEFAULT_SECONDS: f64 = 30.0;
/// INITs through `Endpoint::handle` in the timed measurement.
const HANDLE_INITS: usize = 100_000;
/// INITs through `Endpoint::handle` under callgrind (about 50 times slower).
const CALLGRIND_INITS: usize = 10_000;
/// Functions listed with their inclusive cost in the callgrind report.
const CALLGRIND_TOP: usize = 16;
/// Share of the baseline goodput the downloads must keep during the flood.
const TARGET_SHARE: f64 = 0.9;

/// A child process killed (and reaped) on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The next line of `rx` holding `"key":`, within `timeout`.
fn wait_for(
    rx: &mpsc::Receiver<String>,
    key: &str,
    timeout: Duration,
    what: &str,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    let marker = format!("\"{key}\":");
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains(&marker) => return Ok(line),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("{what}: nothing within {} s", timeout.as_secs())
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("{what}: the process ended first"),
        }
    }
}

/// Interface counters of one namespace's interface.
fn link_packets(ns: &str, dev: &str, tx: bool) -> u64 {
    let dir = if tx { "tx_packets" } else { "rx_packets" };
    let mut command = Command::new("cat");
    command.arg(format!("/sys/class/net/{dev}/statistics/{dir}"));
    // /sys/class/net shows the namespace of the process reading it only
    // through `ip netns exec`, which remounts /sys.
    exec_in(ns, &command)
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

/// UDP receive-buffer drops in namespace `ns` (`RcvbufErrors` of
/// /proc/net/snmp).
fn udp_rcvbuf_errors(ns: &str) -> u64 {
    let mut command = Command::new("cat");
    command.arg("/proc/net/snmp");
    let Ok(out) = exec_in(ns, &command).output() else {
        return 0;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// What one round (downloads, then the flood) measured.
#[derive(Debug, Default)]
struct Round {
    name: &'static str,
    bins: Vec<f64>,
    flood_from: f64,
    flood_to: f64,
    flood_line: String,
    download_error: Option<String>,
    files: u64,
    init_acks: u64,
    veth_rx: u64,
    rcvbuf_drops: u64,
    origin_cpu_before: f64,
    origin_cpu_flood: f64,
    window_before: f64,
}

pub(super) fn run(seconds: Option<f64>, callgrind: bool) -> Result<()> {
    if callgrind {
        return run_callgrind();
    }
    let seconds = seconds.unwrap_or(DEFAULT_SECONDS).max(5.0);
    let load_at_start = load_average();
    let origin_exe = crate::run::build(&["origin"])?.remove(0);
    let client = build_example("origin", "scale_client")?;
    let flooder = build_example("gateway-transport", "init_flood")?;

    println!("==> timed: {HANDLE_INITS} INITs through Endpoint::handle, three times");
    let mut handle_lines = Vec::new();
    for _ in 0..3 {
        let out = Command::new(&flooder)
            .args(["--handle", &HANDLE_INITS.to_string()])
            .output()
            .context("running init_flood --handle")?;
        if !out.status.success() {
            bail!(
                "init_flood --handle: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        println!("    {line}");
        handle_lines.push(line);
    }

    testbed::cleanup_stale(PREFIX)?;
    let tag = format!("{PREFIX}{}", std::process::id());
    let pair = VethPair::create(
        &tag,
        &format!("{SERVER_ADDR}/24"),
        &format!("{CLIENT_ADDR}/24"),
    )?;
    let (srv, cli) = (pair.server.name().to_owned(), pair.client.name().to_owned());
    for key in [
        "net.ipv4.conf.all.rp_filter",
        "net.ipv4.conf.default.rp_filter",
        "net.ipv4.conf.veth0.rp_filter",
    ] {
        sysctl(&srv, key, "0")?;
    }
    // This kernel has no dummy interfaces: a veth into a sink namespace,
    // which drops what it is not addressed to (no forwarding).
    let sink = testbed::Netns::create(&format!("{tag}-snk"))?;
    testbed::veth(&srv, SINK_IF, sink.name(), SINK_IF)?;
    ip(&["-n", &srv, "addr", "add", "10.80.0.1/24", "dev", SINK_IF])?;
    ip(&[
        "-n",
        sink.name(),
        "addr",
        "add",
        &format!("{SINK_ADDR}/24"),
        "dev",
        SINK_IF,
    ])?;
    ip(&[
        "-n", &srv, "route", "add", SPOOFED, "via", SINK_ADDR, "dev", SINK_IF,
    ])?;
    testbed::run(Command::new("tc").args([
        "-n", &srv, "qdisc", "replace", "dev", "veth0", "root", "tbf", "rate", BULK_RATE, "burst",
        "64kb", "latency", "100ms",
    ]))?;

    let dir = testbed::target_dir().join("bench-init-flood");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("site"))?;
    let bulk: Vec<u8> = (0..BULK_BYTES).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(dir.join("site/bulk.bin"), bulk)?;
    std::fs::write(dir.join("site/index.html"), "bench\n")?;
    let mut rounds = Vec::new();
    for (name, rate) in [
        ("INIT ACK rate limit off", Some(u32::MAX)),
        ("INIT ACK rate limit at its default", None),
    ] {
        println!("==> {name}");
        let limit = rate.map_or_else(String::new, |r| {
            format!("[limits]\ninit_acks_per_second = {r}\n\n")
        });
        let config = dir.join("origin.toml");
        std::fs::write(
            &config,
            format!(
                "[listen]\naddresses = [\"{SERVER_ADDR}:{PORT}\"]\nbackend = \"userspace\"\n\n\
                 {limit}[files]\nroot = {:?}\n",
                dir.join("site").display().to_string()
            ),
        )?;
        let log = dir.join("origin.log");
        let origin = start_origin(&srv, &origin_exe, &config, &log)?;
        let mut round = Round {
            name,
            ..Round::default()
        };
        measure(
            &mut round,
            &cli,
            &srv,
            &client,
            &flooder,
            origin.0.id(),
            seconds,
        )?;
        drop(origin);
        rounds.push(round);
    }
    let load_at_end = load_average();
    drop(sink);
    drop(pair);

    let report = report(
        &handle_lines,
        &rounds,
        seconds,
        (&load_at_start, &load_at_end),
    )?;
    let results = workspace_root().join("bench/results");
    std::fs::write(results.join("init-flood.md"), &report)?;
    std::fs::write(results.join("init-flood.csv"), csv(&rounds)?)?;
    println!("{report}");
    println!("==> report written to bench/results/init-flood.md (series in init-flood.csv)");
    Ok(())
}

/// `--callgrind`: `init_flood --handle` under callgrind twice, each time
/// counting only one of its two measured loops (`--toggle-collect` on
/// `answer_inits`, then on `drop_inits`), so that the counts are exactly
/// [`CALLGRIND_INITS`] INITs answered, or dropped at the INIT ACK rate limit.
fn run_callgrind() -> Result<()> {
    let flooder = build_example("gateway-transport", "init_flood")?;
    let dir = super::common::tempfile_dir("init-flood-callgrind")?;
    let mut counts = Vec::new();
    for function in ["answer_inits", "drop_inits"] {
        println!("==> callgrind: {CALLGRIND_INITS} INITs, counting {function}");
        let out_file = dir.join(format!("{function}.out"));
        let out = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--toggle-collect=*{function}*"))
            .arg(format!("--callgrind-out-file={}", out_file.display()))
            .arg(&flooder)
            .args(["--handle", &CALLGRIND_INITS.to_string()])
            .output()
            .context("running valgrind (package valgrind)")?;
        if !out.status.success() {
            bail!(
                "valgrind init_flood --handle: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        counts.push((out_file.clone(), super::common::callgrind_total(&out_file)?));
    }
    let per = |i: usize| counts[i].1 as f64 / CALLGRIND_INITS as f64;
    let mut r = report_header(
        "INITs: instructions per INIT answered and dropped (callgrind)",
        "init-flood --callgrind",
    )?;
    writeln!(
        r,
        "- what: gateway-transport/examples/init_flood.rs `--handle {CALLGRIND_INITS}` (release) \
         under `valgrind --tool=callgrind`: {CALLGRIND_INITS} INITs (40 bytes, from distinct \
         sources) through `sctp::Endpoint::handle` with the INIT ACK rate limit off \
         (decode, the cookie's HMAC-SHA-256, the INIT ACK's encoding and CRC32c), then \
         {CALLGRIND_INITS} more with the limit spent (decode, the token bucket, dropped); \
         each loop counted alone (`--toggle-collect`), after a warm-up of as many INITs\n\
         - valgrind's CPU does not offer the SHA extensions, so `sha2` runs its \
         portable code here: on a CPU with them (SHA-NI) the HMAC costs fewer \
         instructions, so these counts bound the INIT's cost from above for this code\n"
    )?;
    writeln!(
        r,
        "| INIT | instructions each |\n|---|---|\n\
         | answered with an INIT ACK | {:.0} |\n\
         | dropped at the INIT ACK rate limit | {:.0} |",
        per(0),
        per(1)
    )?;
    writeln!(
        r,
        "\n## Where an answered INIT's instructions go (inclusive, % of the counted)\n\n\
         | % | function |\n|---|---|"
    )?;
    r.push_str(&super::common::callgrind_top(&counts[0].0, CALLGRIND_TOP)?);
    let path = workspace_root().join("bench/results/init-flood-callgrind.md");
    std::fs::write(&path, &r).with_context(|| format!("writing {}", path.display()))?;
    println!("{r}\n==> report written to bench/results/init-flood-callgrind.md");
    Ok(())
}

/// The origin in namespace `ns`; returns once it listens.
fn start_origin(ns: &str, exe: &Path, config: &Path, log: &Path) -> Result<Process> {
    let mut command = Command::new(exe);
    command
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info,origin::access=warn");
    let child = exec_in(ns, &command)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .context("starting the origin")?;
    let mut origin = Process(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("listening on") {
            return Ok(origin);
        }
        if let Ok(Some(status)) = origin.0.try_wait() {
            bail!("the origin exited ({status}):\n{text}");
        }
        if Instant::now() >= deadline {
            bail!("the origin did not listen within 20 s:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn measure(
    m: &mut Round,
    cli: &str,
    srv: &str,
    client: &PathBuf,
    flooder: &PathBuf,
    origin_pid: u32,
    seconds: f64,
) -> Result<()> {
    let total = WARM_UP as f64 + 2.0 * seconds + COOL_DOWN as f64;
    let mut command = Command::new(client);
    command.args([
        "--role",
        "bulk",
        "--addr",
        &format!("{SERVER_ADDR}:{PORT}"),
        "--associations",
        &DOWNLOADERS.to_string(),
        "--path",
        "/bulk.bin",
        "--seconds",
        &total.to_string(),
    ]);
    println!(
        "==> {DOWNLOADERS} downloads for {total} s; the flood from {} s for {seconds} s",
        WARM_UP as f64 + seconds
    );
    let mut bulk = Process(
        exec_in(cli, &command)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the downloads")?,
    );
    let bulk_lines = stdout_lines(&mut bulk.0)?;
    let opened = wait_for(
        &bulk_lines,
        "opened",
        Duration::from_secs(30),
        "opening the downloads",
    )?;
    if field(&opened, "opened") != Some(DOWNLOADERS as f64) {
        bail!("not every download opened: {opened}");
    }
    wait_for(
        &bulk_lines,
        "loading",
        Duration::from_secs(10),
        "the downloads' start",
    )?;
    let begin = Instant::now();
    std::thread::sleep(Duration::from_secs(WARM_UP));
    let cpu0 = cpu_seconds(origin_pid);
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let cpu1 = cpu_seconds(origin_pid);
    m.origin_cpu_before = cpu1 - cpu0;
    m.window_before = seconds;

    let (acks0, rx0, drops0) = (
        link_packets(srv, SINK_IF, true),
        link_packets(srv, "veth0", false),
        udp_rcvbuf_errors(srv),
    );
    let mut command = Command::new(flooder);
    command.args([
        "--flood",
        "--target",
        &format!("{SERVER_ADDR}:{PORT}"),
        "--seconds",
        &seconds.to_string(),
    ]);
    m.flood_from = begin.elapsed().as_secs_f64();
    let mut flood = Process(
        exec_in(cli, &command)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the flooder")?,
    );
    let flood_lines = stdout_lines(&mut flood.0)?;
    m.flood_line = wait_for(
        &flood_lines,
        "sent",
        Duration::from_secs_f64(seconds + 30.0),
        "the flood",
    )?;
    m.flood_to = begin.elapsed().as_secs_f64();
    m.origin_cpu_flood = cpu_seconds(origin_pid) - cpu1;
    // INIT ACKs still queued in the origin leave within a moment.
    std::thread::sleep(Duration::from_millis(500));
    m.init_acks = link_packets(srv, SINK_IF, true) - acks0;
    m.veth_rx = link_packets(srv, "veth0", false) - rx0;
    m.rcvbuf_drops = udp_rcvbuf_errors(srv) - drops0;
    println!("    flood: {}", m.flood_line);

    let done = wait_for(
        &bulk_lines,
        "bins",
        Duration::from_secs_f64(COOL_DOWN as f64 + 60.0),
        "the downloads",
    )?;
    m.bins = array_field(&done, "bins").unwrap_or_default();
    m.files = field(&done, "files").unwrap_or(0.0) as u64;
    m.download_error = done
        .split_once("\"first_error\":\"")
        .map(|(_, e)| e.trim_end_matches('}').trim_end_matches('"').to_owned());
    Ok(())
}

/// Mean goodput, Mbit/s, of the whole seconds of `bins` inside `from..to`
/// (seconds since the downloads began).
fn mean_mbit(bins: &[f64], from: f64, to: f64) -> f64 {
    let (first, last) = (from.ceil() as usize, (to.floor() as usize).min(bins.len()));
    if last <= first {
        return 0.0;
    }
    bins[first..last].iter().sum::<f64>() / (last - first) as f64 * 8.0 / 1e6
}

fn report(
    handle_lines: &[String],
    rounds: &[Round],
    seconds: f64,
    load: (&str, &str),
) -> Result<String> {
    let mut subcommand = "init-flood".to_owned();
    if seconds != DEFAULT_SECONDS {
        write!(subcommand, " --seconds {seconds}")?;
    }
    let mut t = report_header(
        "INIT flood against an origin with established downloads",
        &subcommand,
    )?;
    writeln!(
        t,
        "- load average (1, 5, 15 min): {} at the start, {} at the end; the machine was shared \
         with other engineers' builds; the run was not niced",
        load.0, load.1
    )?;
    writeln!(
        t,
        "- path: two namespaces joined by one veth; the server's egress limited to {BULK_RATE} \
         (tbf, 64 kB burst), so the downloads are bounded by the link rather than by the two \
         shared cores; INIT ACKs to the spoofed sources ({SPOOFED}) leave by a second veth into \
         a sink namespace that drops them (its transmit counter counts them); rp_filter off in \
         the server's namespace"
    )?;
    writeln!(
        t,
        "- origin: the `origin` binary (release), shipped defaults (userspace SCTP, BBR, \
         SCF), serving a {} MiB file; downloads: {DOWNLOADERS} associations \
         (origin/examples/scale_client.rs `--role bulk`), one request at a time each",
        BULK_BYTES >> 20
    )?;
    writeln!(
        t,
        "- flooder: gateway-transport/examples/init_flood.rs `--flood`: one thread, a raw IPv4 \
         socket, sendmmsg of 64 pre-built IPv4+UDP+SCTP INIT datagrams (CRC32c by \
         `sctp::chunk::Packet::encode`), only the source address and port changing"
    )?;

    writeln!(
        t,
        "\n## Cost of one INIT, timed on this host (instructions: init-flood-callgrind.md)\n"
    )?;
    writeln!(
        t,
        "`init_flood --handle {HANDLE_INITS}` (release): {HANDLE_INITS} INITs from distinct sources \
         through `sctp::Endpoint::handle` (decode, HMAC-SHA-256 cookie, INIT ACK encoding, \
         CRC32c) with the INIT ACK rate limit off, after a warm-up; no state is kept; then \
         {HANDLE_INITS} more with the limit spent, each dropped after decoding.\n"
    )?;
    writeln!(
        t,
        "| run | ns per INIT answered | INITs/s on one core | ns per INIT dropped at the \
         rate limit | INIT bytes | INIT ACK bytes |"
    )?;
    writeln!(t, "|---|---|---|---|---|---|")?;
    for (i, line) in handle_lines.iter().enumerate() {
        writeln!(
            t,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            i + 1,
            field(line, "ns_per_init").unwrap_or(0.0),
            field(line, "inits_per_s").unwrap_or(0.0),
            field(line, "ns_per_dropped_init").unwrap_or(0.0),
            field(line, "init_bytes").unwrap_or(0.0),
            field(line, "init_ack_bytes").unwrap_or(0.0)
        )?;
    }
    writeln!(
        t,
        "\nEach round below starts the origin afresh with one setting of \
         `[limits] init_acks_per_second`: {} (off), then left at its default ({}).",
        u32::MAX,
        shipped_init_rate().map_or_else(|| "see config/origin.toml".to_owned(), |r| r.to_string())
    )?;
    for m in rounds {
        write_round(&mut t, m)?;
    }
    Ok(t)
}

/// `[limits] init_acks_per_second` of the shipped config/origin.toml, which
/// shows the default.
fn shipped_init_rate() -> Option<i64> {
    let text = std::fs::read_to_string(workspace_root().join("config/origin.toml")).ok()?;
    let config: toml::Value = toml::from_str(&text).ok()?;
    config
        .get("limits")?
        .get("init_acks_per_second")?
        .as_integer()
}

/// One round's section of the report.
fn write_round(t: &mut String, m: &Round) -> Result<()> {
    let before = mean_mbit(&m.bins, WARM_UP as f64, m.flood_from);
    let during = mean_mbit(&m.bins, m.flood_from, m.flood_to);
    let share = during / before.max(1e-9);
    let flood_s = (m.flood_to - m.flood_from).max(1e-9);
    let sent = field(&m.flood_line, "sent").unwrap_or(0.0);
    writeln!(t, "\n## {}\n", m.name)?;
    writeln!(
        t,
        "- flooder: {sent:.0} INITs in {:.1} s, {:.0} per second ({} send errors)",
        field(&m.flood_line, "seconds").unwrap_or(0.0),
        field(&m.flood_line, "per_s").unwrap_or(0.0),
        field(&m.flood_line, "send_errors").unwrap_or(0.0)
    )?;
    writeln!(
        t,
        "- at the origin's namespace: {} datagrams received on veth0 ({:.0}/s, downloads' SACKs \
         included), {} dropped at the origin's full UDP receive buffer (RcvbufErrors)",
        m.veth_rx,
        m.veth_rx as f64 / flood_s,
        m.rcvbuf_drops
    )?;
    writeln!(
        t,
        "- INITs answered (INIT ACKs out of the veth to the sink): **{} in {flood_s:.1} s, {:.0} \
         per second**",
        m.init_acks,
        m.init_acks as f64 / flood_s
    )?;
    writeln!(
        t,
        "- the origin's CPU: {:.1} % of one core before the flood (downloads only), {:.1} % \
         during it",
        m.origin_cpu_before / m.window_before.max(1e-9) * 100.0,
        m.origin_cpu_flood / flood_s * 100.0
    )?;
    writeln!(
        t,
        "- downloads: {} files completed; goodput of all {DOWNLOADERS} together, whole seconds: \
         **{before:.1} Mbit/s** before the flood (from {WARM_UP} s to {:.1} s), **{during:.1} \
         Mbit/s** during it ({:.1} s to {:.1} s): **{:.1} %** of before; target at least \
         {:.0} %: {}",
        m.files,
        m.flood_from,
        m.flood_from,
        m.flood_to,
        share * 100.0,
        TARGET_SHARE * 100.0,
        if share >= TARGET_SHARE {
            "met"
        } else {
            "**missed**"
        }
    )?;
    if let Some(e) = &m.download_error {
        writeln!(t, "- a download failed: {e}")?;
    }
    writeln!(t, "\nPer second (Mbit/s; * flood):\n")?;
    let row: Vec<String> = m
        .bins
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mark = if (i as f64) + 1.0 > m.flood_from && (i as f64) < m.flood_to {
                "*"
            } else {
                ""
            };
            format!("{:.0}{mark}", b * 8.0 / 1e6)
        })
        .collect();
    writeln!(t, "{}", row.join(" "))?;
    Ok(())
}

fn csv(rounds: &[Round]) -> Result<String> {
    let mut c = String::from("round,second,mbit_per_s,flood\n");
    for m in rounds {
        for (i, b) in m.bins.iter().enumerate() {
            let flood = (i as f64) + 1.0 > m.flood_from && (i as f64) < m.flood_to;
            writeln!(
                c,
                "\"{}\",{i},{:.2},{}",
                m.name,
                b * 8.0 / 1e6,
                u8::from(flood)
            )?;
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_is_the_mean_of_the_whole_seconds_inside_the_window() {
        // 1 Mbit/s is 125,000 bytes a second.
        let bins = [0.0, 125_000.0, 250_000.0, 375_000.0, 0.0];
        assert_eq!(mean_mbit(&bins, 1.0, 3.0), 1.5);
        // Partial seconds at either end are left out.
        assert_eq!(mean_mbit(&bins, 0.4, 3.9), 1.5);
        assert_eq!(mean_mbit(&bins, 2.5, 3.5), 0.0);
        assert_eq!(mean_mbit(&bins, 3.0, 99.0), 1.5);
    }
}
