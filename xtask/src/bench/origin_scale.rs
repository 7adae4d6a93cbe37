//! `cargo xtask bench origin-scale`: one origin process holding
//! `--associations` (10,000) associations, each from its own UDP port on
//! loopback, while 100 of them load pages.
//!
//! The real `origin` binary serves the demo site over userspace SCTP on
//! 127.0.0.1; the clients are `origin/examples/scale_client.rs` (release),
//! speaking the real protocol. All on one source address, so the bench's
//! configuration raises `limits.max_associations_per_source` (and
//! `max_associations`) above the count; the open-file limits of the origin
//! and the clients are raised with `prlimit` (each client association is one
//! UDP socket). In order:
//!
//! 1. the origin's RSS at rest;
//! 2. (b) one association loading the page every [`PAGE_INTERVAL_MS`] for
//!    `--seconds` (30), alone;
//! 3. (a) [`LOADERS`] associations doing the same, no others open;
//! 4. the origin's RSS again (no association open, its heap warmed by the
//!    loads); then a holder process opens `--associations` minus the loaders
//!    as idle associations;
//! 5. (c) a fresh loader process opens the [`LOADERS`]: now the count is
//!    held; the origin's RSS is read, then for [`IDLE_SECONDS`] nothing but
//!    heartbeats runs and the origin's utime+stime is read before and after;
//!    then the loaders load as in (a) beside the idle associations;
//! 6. every idle association asks once for a small file (they were all
//!    still open and served).
//!
//! Every wait has a deadline; the processes are killed on every way out.
//! Report: bench/results/origin-scale.md, the phases in origin-scale.csv.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::common::field;
use super::common::{
    build_example, cpu_seconds, load_average, report_header, rss_kib, stdout_lines,
};
use crate::cmd::workspace_root;

/// `--associations` when not given (options.rs).
pub(super) const DEFAULT_ASSOCIATIONS: usize = 10_000;
/// `--seconds` when not given: each loading phase.
const DEFAULT_SECONDS: f64 = 30.0;
/// Associations that load pages.
const LOADERS: usize = 100;
/// Each loading association starts a page this often, ms: 100 of them make
/// 50 pages (1,850 requests) a second, a small share of what the origin
/// serves (bench/results/static.md), so the machine is not saturated.
const PAGE_INTERVAL_MS: u64 = 2000;
/// The idle window over which the origin's CPU is read, seconds: six
/// heartbeat intervals (5 s by default).
const IDLE_SECONDS: f64 = 30.0;
/// Open-file limit asked for the client processes (each association is a
/// socket); where the hard limit is lower and cannot be raised (no
/// CAP_SYS_RESOURCE, as in a container), that hard limit.
const NOFILE: u64 = 65_536;
/// Opening the idle associations may take this long.
const OPEN_DEADLINE: Duration = Duration::from_secs(600);
/// The origin binds within this long.
const START_DEADLINE: Duration = Duration::from_secs(20);
/// Target for the loaders' p99 beside the idle associations, as a multiple
/// of one association's p99 (issue 27).
const TARGET_RATIO: f64 = 1.2;

/// A child process killed (and reaped) on drop.
struct Process {
    child: Child,
    name: &'static str,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The lines a child writes on stdout, read by a thread.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn of(child: &mut Child) -> Result<Self> {
        Ok(Self(stdout_lines(child)?))
    }

    /// The next line holding `"key":`, within `timeout`.
    fn wait_for(&self, key: &str, timeout: Duration, what: &str) -> Result<String> {
        let deadline = Instant::now() + timeout;
        let marker = format!("\"{key}\":");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) if line.contains(&marker) => return Ok(line),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("{what}: nothing within {} s", timeout.as_secs())
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("{what}: the process ended first")
                }
            }
        }
    }
}

/// The text of a `"first_error":"..."` field, if any.
fn first_error(line: &str) -> Option<String> {
    let start = line.find("\"first_error\":\"")? + "\"first_error\":\"".len();
    let rest = &line[start..];
    Some(rest.trim_end_matches('}').trim_end_matches('"').to_owned())
}

/// One loading phase as the loader process reported it, with the origin's
/// CPU over it.
#[derive(Debug, Clone, Default)]
struct Phase {
    name: &'static str,
    loaders: usize,
    idle: usize,
    pages: u64,
    failed_pages: u64,
    requests: u64,
    seconds: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    objects_per_page: usize,
    origin_cpu_seconds: f64,
    first_error: Option<String>,
}

/// What the idle window measured.
#[derive(Debug, Clone, Default)]
struct Idle {
    opened: usize,
    failed: usize,
    open_seconds: f64,
    first_error: Option<String>,
    rss_before_kib: u64,
    rss_held_kib: u64,
    window_seconds: f64,
    origin_cpu_seconds: f64,
    holder_cpu_seconds: f64,
    answered: usize,
    check_failed: usize,
    check_error: Option<String>,
}

struct Setup {
    client: PathBuf,
    site: PathBuf,
    addr: SocketAddr,
    seconds: f64,
}

pub(super) fn run(associations: usize, seconds: Option<f64>) -> Result<()> {
    let seconds = seconds.unwrap_or(DEFAULT_SECONDS);
    if associations == 0 {
        bail!("--associations must be at least 1");
    }
    if (nofile_limit() as usize) < associations + 256 {
        bail!(
            "{associations} associations need an open-file limit above {}; the hard limit is {}",
            associations + 256,
            nofile_limit()
        );
    }
    let loaders = LOADERS.min(associations);
    let idle_count = associations - loaders;
    let load_at_start = load_average();
    let origin_exe = crate::run::build(&["origin"])?.remove(0);
    let client = build_example("origin", "scale_client")?;
    let root = workspace_root();
    let dir = testbed::target_dir().join("bench-origin-scale");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let port = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let config = dir.join("origin.toml");
    std::fs::write(
        &config,
        origin_config(addr, &root.join("config/demo-site"), associations),
    )?;
    let log = dir.join("origin.log");

    println!("==> starting the origin on {addr} (udp)");
    let origin = start_origin(&origin_exe, &config, &log)?;
    let setup = Setup {
        client,
        site: root.join("config/demo-site"),
        addr,
        seconds,
    };
    std::thread::sleep(Duration::from_secs(1));
    let rss_start = rss_kib(origin.pid());

    println!("==> (b) one association loading alone for {seconds} s");
    let solo = load_phase(&setup, &origin, "(b) one association alone", 1, 0, None)?;
    println!("    {solo:?}");
    println!("==> (a) {loaders} associations loading, no others open");
    let crowd = load_phase(
        &setup,
        &origin,
        "(a) loaders, no idle ones",
        loaders,
        0,
        None,
    )?;
    println!("    {crowd:?}");
    std::thread::sleep(Duration::from_secs(2));

    println!("==> opening {idle_count} idle associations");
    let mut idle = Idle {
        rss_before_kib: rss_kib(origin.pid()),
        ..Idle::default()
    };
    let mut holder = spawn_client(
        &setup,
        &["--role", "idle", "--associations", &idle_count.to_string()],
        "idle holder",
    )?;
    let holder_lines = Lines::of(&mut holder.child)?;
    let opened = holder_lines.wait_for("opened", OPEN_DEADLINE, "opening the idle associations")?;
    idle.opened = field(&opened, "opened").unwrap_or(0.0) as usize;
    idle.failed = field(&opened, "failed").unwrap_or(0.0) as usize;
    idle.open_seconds = field(&opened, "seconds").unwrap_or(0.0);
    idle.first_error = first_error(&opened);
    println!("    {opened}");

    println!(
        "==> (c) {loaders} associations: {IDLE_SECONDS} s idle beside the others, then loading"
    );
    let with_idle = load_phase(
        &setup,
        &origin,
        "(c) loaders beside the idle ones",
        loaders,
        idle.opened,
        Some((&mut idle, holder.pid())),
    )?;
    println!("    {with_idle:?}");

    println!("==> every idle association asks once more");
    let mut stdin: ChildStdin = holder.child.stdin.take().context("no stdin pipe")?;
    writeln!(stdin, "check")?;
    let checked = holder_lines.wait_for("answered", Duration::from_secs(300), "the check")?;
    idle.answered = field(&checked, "answered").unwrap_or(0.0) as usize;
    idle.check_failed = field(&checked, "failed").unwrap_or(0.0) as usize;
    idle.check_error = first_error(&checked);
    println!("    {checked}");
    drop(stdin);
    let load_at_end = load_average();
    drop(holder);
    drop(origin);

    let phases = [solo, crowd, with_idle];
    let report = report(&Report {
        associations,
        loaders,
        seconds,
        rss_start,
        phases: &phases,
        idle: &idle,
        load: (load_at_start, load_at_end),
    })?;
    let results = root.join("bench/results");
    std::fs::write(results.join("origin-scale.md"), &report)?;
    std::fs::write(results.join("origin-scale.csv"), csv(&phases)?)?;
    println!("{report}");
    println!("==> report written to bench/results/origin-scale.md (phases in origin-scale.csv)");
    Ok(())
}

/// The bench origin's configuration: the demo site on `addr` over
/// userspace SCTP, limits above `associations`, the shipped defaults
/// otherwise (heartbeats every 5 s, BBR, SCF).
fn origin_config(addr: SocketAddr, site: &Path, associations: usize) -> String {
    let limit = associations + 2 * LOADERS + 64;
    format!(
        "[listen]\naddresses = [\"{addr}\"]\nbackend = \"userspace\"\n\n\
         [limits]\nmax_associations = {limit}\nmax_associations_per_source = {limit}\n\n\
         [files]\nroot = {:?}\nindex = \"index.html\"\n",
        site.display().to_string()
    )
}

/// The origin (one UDP socket: its open-file limit does not matter), its log (warnings and errors: no access log
/// lines, whose writing is not what is measured) in `log`; returns once it
/// listens.
fn start_origin(exe: &Path, config: &Path, log: &Path) -> Result<Process> {
    let child = Command::new(exe)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info,origin::access=warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .context("starting the origin (prlimit from util-linux)")?;
    let mut origin = Process {
        child,
        name: "origin",
    };
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("listening on") {
            return Ok(origin);
        }
        if let Ok(Some(status)) = origin.child.try_wait() {
            bail!("the {} exited ({status}):\n{text}", origin.name);
        }
        if Instant::now() >= deadline {
            bail!(
                "the origin did not listen within {} s:\n{text}",
                START_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The client example with `args`, under `prlimit`, stdin and stdout piped.
fn spawn_client(setup: &Setup, args: &[&str], name: &'static str) -> Result<Process> {
    let nofile = nofile_limit();
    let child = Command::new("prlimit")
        .arg(format!("--nofile={nofile}:{nofile}"))
        .arg("--")
        .arg(&setup.client)
        .args(["--addr", &setup.addr.to_string()])
        .arg("--site")
        .arg(&setup.site)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting the {name}"))?;
    Ok(Process { child, name })
}

/// [`NOFILE`], or this process's hard open-file limit where that is lower
/// (a child cannot be given more without CAP_SYS_RESOURCE).
fn nofile_limit() -> u64 {
    let hard = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(4)?.parse::<u64>().ok()
        })
        .unwrap_or(NOFILE);
    NOFILE.min(hard)
}

/// One loading phase: a loader process with `loaders` associations. With
/// `idle` given, the loaders first sit [`IDLE_SECONDS`] beside the others
/// while the origin's RSS and CPU (and the holder's CPU) are read.
fn load_phase(
    setup: &Setup,
    origin: &Process,
    name: &'static str,
    loaders: usize,
    idle_count: usize,
    idle: Option<(&mut Idle, u32)>,
) -> Result<Phase> {
    let idle_first = if idle.is_some() { IDLE_SECONDS } else { 0.0 };
    let mut loader = spawn_client(
        setup,
        &[
            "--role",
            "load",
            "--associations",
            &loaders.to_string(),
            "--seconds",
            &setup.seconds.to_string(),
            "--idle-first",
            &idle_first.to_string(),
            "--page-interval-ms",
            &PAGE_INTERVAL_MS.to_string(),
        ],
        "loader",
    )?;
    let lines = Lines::of(&mut loader.child)?;
    let opened = lines.wait_for("opened", Duration::from_secs(120), "opening the loaders")?;
    if field(&opened, "opened") != Some(loaders as f64) {
        bail!("{name}: not every loader opened: {opened}");
    }
    if let Some((idle, holder)) = idle {
        // Let the last handshakes' work settle before the reading.
        std::thread::sleep(Duration::from_secs(1));
        idle.rss_held_kib = rss_kib(origin.pid());
        let (origin0, holder0, at) = (
            cpu_seconds(origin.pid()),
            cpu_seconds(holder),
            Instant::now(),
        );
        lines.wait_for(
            "loading",
            Duration::from_secs_f64(IDLE_SECONDS + 30.0),
            "the idle window",
        )?;
        idle.window_seconds = at.elapsed().as_secs_f64();
        idle.origin_cpu_seconds = cpu_seconds(origin.pid()) - origin0;
        idle.holder_cpu_seconds = cpu_seconds(holder) - holder0;
    } else {
        lines.wait_for("loading", Duration::from_secs(30), "the loaders' start")?;
    }
    let cpu0 = cpu_seconds(origin.pid());
    let done = lines.wait_for(
        "p99_ms",
        Duration::from_secs_f64(setup.seconds + 60.0),
        "the loading phase",
    )?;
    let origin_cpu_seconds = cpu_seconds(origin.pid()) - cpu0;
    let _ = loader.child.wait();
    let number = |key: &str| field(&done, key).unwrap_or(0.0);
    Ok(Phase {
        name,
        loaders,
        idle: idle_count,
        pages: number("pages") as u64,
        failed_pages: number("failed_pages") as u64,
        requests: number("requests") as u64,
        seconds: number("seconds"),
        p50_ms: number("p50_ms"),
        p90_ms: number("p90_ms"),
        p99_ms: number("p99_ms"),
        max_ms: number("max_ms"),
        objects_per_page: number("objects_per_page") as usize,
        origin_cpu_seconds,
        first_error: first_error(&done),
    })
}

struct Report<'a> {
    associations: usize,
    loaders: usize,
    seconds: f64,
    rss_start: u64,
    phases: &'a [Phase],
    idle: &'a Idle,
    load: (String, String),
}

fn report(r: &Report<'_>) -> Result<String> {
    let mut subcommand = "origin-scale".to_owned();
    if r.associations != DEFAULT_ASSOCIATIONS {
        write!(subcommand, " --associations {}", r.associations)?;
    }
    if r.seconds != DEFAULT_SECONDS {
        write!(subcommand, " --seconds {}", r.seconds)?;
    }
    let mut t = report_header(
        &format!(
            "Origin scale: {} associations, {} of them loading pages",
            r.associations, r.loaders
        ),
        &subcommand,
    )?;
    let idle = r.idle;
    writeln!(
        t,
        "- load average (1, 5, 15 min): {} at the start, {} at the end; the machine was shared \
         with other engineers' builds; the run was not niced (its figures are latencies)",
        r.load.0, r.load.1
    )?;
    writeln!(
        t,
        "- origin: the `origin` binary (release) serving config/demo-site over userspace SCTP on \
         127.0.0.1, shipped defaults (heartbeat_interval 5 s, idle_timeout 30 s, congestion \
         control BBR, scheduler SCF) except `[limits] max_associations` and \
         `max_associations_per_source` = {} (every client shares the source address 127.0.0.1, \
         each association is its own UDP port); access log off (RUST_LOG at warn for it)",
        r.associations + 2 * LOADERS + 64
    )?;
    writeln!(
        t,
        "- clients: origin/examples/scale_client.rs (release, one thread each): a holder process \
         with the idle associations (64 KiB socket buffers) and a loader process per phase; each \
         loader loads the demo page (index.html, then its {} subresources at once, each on its \
         own stream) every {PAGE_INTERVAL_MS} ms, the associations' loads spread evenly over the \
         interval; latency is from sending a request to its RESPONSE_END at the client",
        r.phases
            .first()
            .map_or(0, |p| p.objects_per_page.saturating_sub(1))
    )?;
    writeln!(
        t,
        "- the clients' open-file limit set with prlimit to {} (the hard limit here)",
        nofile_limit()
    )?;

    writeln!(t, "\n## Memory and CPU of idle associations\n")?;
    let held = idle.opened + r.loaders;
    writeln!(
        t,
        "- opened {} idle associations in {:.1} s ({} failed{}); with the {} loaders, {held} held",
        idle.opened,
        idle.open_seconds,
        idle.failed,
        idle.first_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default(),
        r.loaders
    )?;
    let per = |before: u64| idle.rss_held_kib.saturating_sub(before) as f64 / held.max(1) as f64;
    writeln!(t, "\n| origin RSS | MiB |")?;
    writeln!(t, "|---|---|")?;
    writeln!(
        t,
        "| at rest, before any association | {:.1} |",
        mib(r.rss_start)
    )?;
    writeln!(
        t,
        "| after phases (a) and (b), no association open | {:.1} |",
        mib(idle.rss_before_kib)
    )?;
    writeln!(
        t,
        "| {held} associations open, idle | {:.1} |",
        mib(idle.rss_held_kib)
    )?;
    writeln!(
        t,
        "\nRSS per association: **{:.1} KiB** over the RSS before them (after the loads); {:.1} KiB \
         over the RSS at rest.",
        per(idle.rss_before_kib),
        per(r.rss_start)
    )?;
    let per_assoc_us =
        idle.origin_cpu_seconds / held.max(1) as f64 / idle.window_seconds.max(1e-9) * 1e6;
    writeln!(
        t,
        "\nIdle window: {:.1} s with {held} associations open and no requests (heartbeats only): \
         the origin used {:.2} CPU seconds ({:.1} % of one core), **{per_assoc_us:.2} µs of CPU per \
         association per second**; the idle holder (the other ends) used {:.2} CPU seconds.",
        idle.window_seconds,
        idle.origin_cpu_seconds,
        idle.origin_cpu_seconds / idle.window_seconds.max(1e-9) * 100.0,
        idle.holder_cpu_seconds
    )?;
    writeln!(
        t,
        "\nAfter phase (c), each idle association asked once for /assets/tile-01.svg: {} \
         answered, {} failed{}.",
        idle.answered,
        idle.check_failed,
        idle.check_error
            .as_deref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    )?;

    writeln!(t, "\n## Request latency at the client\n")?;
    writeln!(
        t,
        "| phase | loaders | idle | pages (failed) | requests | req/s | p50 ms | p90 ms | p99 ms | max ms | p99 / (b) | origin CPU % of a core |"
    )?;
    writeln!(t, "|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let solo_p99 = r.phases.first().map_or(0.0, |p| p.p99_ms);
    for p in r.phases {
        writeln!(
            t,
            "| {} | {} | {} | {} ({}) | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} |",
            p.name,
            p.loaders,
            p.idle,
            p.pages,
            p.failed_pages,
            p.requests,
            p.requests as f64 / p.seconds.max(1e-9),
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.max_ms,
            p.p99_ms / solo_p99.max(1e-9),
            p.origin_cpu_seconds / p.seconds.max(1e-9) * 100.0
        )?;
    }
    for p in r.phases {
        if let Some(e) = &p.first_error {
            writeln!(t, "\n{}: first failure: {e}", p.name)?;
        }
    }
    if let Some(c) = r.phases.get(2) {
        let ratio = c.p99_ms / solo_p99.max(1e-9);
        writeln!(
            t,
            "\nTarget: p99 of (c) within {TARGET_RATIO}x of (b): {ratio:.2}x, {}.",
            if ratio <= TARGET_RATIO {
                "met"
            } else {
                "**missed**"
            }
        )?;
    }
    Ok(t)
}

fn csv(phases: &[Phase]) -> Result<String> {
    let mut c = String::from(
        "phase,loaders,idle,pages,failed_pages,requests,seconds,p50_ms,p90_ms,p99_ms,max_ms,origin_cpu_seconds\n",
    );
    for p in phases {
        writeln!(
            c,
            "\"{}\",{},{},{},{},{},{:.2},{:.3},{:.3},{:.3},{:.3},{:.2}",
            p.name,
            p.loaders,
            p.idle,
            p.pages,
            p.failed_pages,
            p.requests,
            p.seconds,
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.max_ms,
            p.origin_cpu_seconds
        )?;
    }
    Ok(c)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_is_read_from_a_client_line() {
        assert_eq!(
            first_error(r#"{"opened":3,"failed":1,"first_error":"timed out"}"#).as_deref(),
            Some("timed out")
        );
        assert_eq!(
            first_error(r#"{"opened":3,"failed":0,"first_error":null}"#),
            None
        );
    }

    #[test]
    fn the_bench_config_lifts_both_association_limits_above_the_count() {
        let config = origin_config(
            "127.0.0.1:9".parse().expect("addr"),
            Path::new("/site"),
            10_000,
        );
        let value: toml::Value = toml::from_str(&config).expect("valid TOML");
        let limits = &value["limits"];
        assert!(limits["max_associations"].as_integer() > Some(10_000));
        assert!(limits["max_associations_per_source"].as_integer() > Some(10_000));
    }
}
