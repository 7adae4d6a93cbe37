//! `cargo xtask bench load`: the gateway under many browsers, in the demo
//! topology's namespaces (loopback and namespace addresses only).
//!
//! 1. **Hold**: `--connections` (10,000) keep-alive connections from the client
//!    namespace through TPROXY to the site's address, each asking once for a
//!    cached file, all held open at once; the gateway's RSS and open files are
//!    sampled at the plateau and checked against [`BUDGET_PER_CONNECTION_KIB`];
//!    then each connection asks again, which shows it was still open and
//!    served. The whole phase takes seconds, well inside the gateway's
//!    `http.header_timeout` (30 s), which would end idle connections.
//! 2. **Soak**: wrk with [`SOAK_CONNECTIONS`] connections for `--seconds`
//!    (600), half the requests cache hits and half `no-cache` requests over a
//!    bounded set of URLs, which the cache sends over the association to the
//!    origin (a fill or a validation each); the RSS and open files of gateway
//!    and origin are sampled every [`SAMPLE_EVERY`] and compared between the
//!    first and last windows after the warm-up ([`growth`]).
//!
//! Both phases are bounded in time (socket time-outs, wrk's duration). The
//! open-file limits of this process and of the gateway are raised with
//! `prlimit` to [`NOFILE`]. Report: bench/results/load.md.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testbed::topology::SITE_V4;
use testbed::{Binaries, Demo, DemoOptions, GatewayConfigOverrides, exec_in};

use super::cache::{Load, cache_stats, curl, parse_wrk, rss_kib};
use crate::cmd::workspace_root;

/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwload-";
/// The cached file every held connection asks for.
const FILE: &str = "/assets/tile-01.svg";
/// The memory budget while connections are held: the gateway's RSS may grow
/// by at most this much per held connection over its RSS before the phase
/// (hyper's read and write buffers, the connection's task, its flow state).
const BUDGET_PER_CONNECTION_KIB: u64 = 48;
/// Open files the gateway may hold beyond one per held connection.
const BUDGET_EXTRA_FDS: u64 = 256;
/// Open-file limit asked for this process and the gateway.
const NOFILE: u64 = 65_536;
/// Each connect, write and read of the hold phase ends within this long.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Threads that open the held connections.
const OPENERS: usize = 8;
/// `--connections` when not given (options.rs).
const DEFAULT_CONNECTIONS: usize = 10_000;
/// wrk's connections during the soak.
const SOAK_CONNECTIONS: u32 = 200;
/// The soak's default length, in seconds.
const SOAK_SECONDS: f64 = 600.0;
/// How often the soak samples RSS and open files.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Distinct URLs the soak's `no-cache` half cycles through.
const SOAK_URLS: u32 = 4000;
/// Growth allowed between the soak's first and last windows: RSS by this
/// fraction, open files by [`FD_SLACK`].
const RSS_SLACK: f64 = 0.10;
/// See [`RSS_SLACK`].
const FD_SLACK: f64 = 16.0;

/// RSS and open files of one process at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    rss_kib: u64,
    fds: u64,
}

impl Usage {
    fn of(pid: u32) -> Self {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
        Self {
            rss_kib: rss_kib(&[pid]),
            fds,
        }
    }
}

/// What the hold phase saw.
#[derive(Debug, Default)]
struct Hold {
    asked: usize,
    /// Connections that got their first 200.
    opened: usize,
    /// Of those, answered from the cache (an `Age` field).
    hits: usize,
    /// Connections that got a second 200 after all were open.
    second_ok: usize,
    first_error: Option<String>,
    open_seconds: f64,
    before: Usage,
    /// The highest of three samples at the plateau.
    plateau: Usage,
    after_close: Usage,
}

/// One soak sample: seconds since the start, gateway and origin.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: f64,
    gateway: Usage,
    origin: Usage,
}

pub(super) fn run(connections: usize, soak_seconds: Option<f64>) -> Result<()> {
    let soak_seconds = soak_seconds.unwrap_or(SOAK_SECONDS);
    let built = crate::run::build(&["gateway", "origin"])?;
    let binaries = Binaries {
        gateway: built[0].clone(),
        origin: built[1].clone(),
    };
    let dir = testbed::target_dir().join("bench-load");
    let _ = std::fs::remove_dir_all(&dir);
    testbed::cleanup_stale(PREFIX)?;
    println!("==> starting the demo topology (gateway, origin)");
    let mut options = DemoOptions::new(PREFIX, &workspace_root(), &dir);
    options.gateway = GatewayConfigOverrides {
        max_connections: Some(connections as u64 + 1024),
        ..GatewayConfigOverrides::default()
    };
    let mut demo = Demo::start(binaries.clone(), options)?;
    let client_ns = demo.topology.client.name().to_owned();
    let gateway_pid = demo.gateway.as_ref().context("gateway")?.pid();
    let origin_pid = demo.origin.as_ref().context("origin")?.pid();
    let own_limit = raise_nofile(std::process::id())?;
    let gateway_limit = raise_nofile(gateway_pid)?;
    println!("    open-file limits: this process {own_limit}, the gateway {gateway_limit}");
    if (gateway_limit.min(own_limit) as usize) < connections + BUDGET_EXTRA_FDS as usize {
        bail!(
            "{connections} connections need an open-file limit above {}; the hard limit is \
             {gateway_limit} and cannot be raised here",
            connections + BUDGET_EXTRA_FDS as usize
        );
    }

    let url = format!("http://{SITE_V4}{FILE}");
    println!("==> filling the cache with {url}");
    curl(&client_ns, &url)?;
    wait_stored(&binaries, &demo)?;

    println!("==> holding {connections} keep-alive connections");
    let hold = testbed::in_netns(&client_ns, || hold(connections, gateway_pid))??;
    println!("    {hold:?}");
    let stats_before = cache_stats(&binaries.gateway, &demo)?;
    println!("==> soak: wrk -c{SOAK_CONNECTIONS} for {soak_seconds} s");
    let (load, samples) = soak(&client_ns, &dir, soak_seconds, [gateway_pid, origin_pid])?;
    let stats_after = cache_stats(&binaries.gateway, &demo)?;
    let counted = |key: &str| {
        stats_after[key]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(stats_before[key].as_u64().unwrap_or(0))
    };
    let cache_line = format!(
        "hits {}, misses {}, revalidated {}, stored {}",
        counted("hits"),
        counted("misses"),
        counted("revalidated"),
        counted("stored")
    );
    let report = report(
        connections,
        &hold,
        soak_seconds,
        &load,
        &samples,
        &cache_line,
    )?;
    let path = workspace_root().join("bench/results/load.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    println!("{report}");
    println!("==> report written to bench/results/load.md");
    if let Some(gateway) = demo.gateway.as_mut() {
        let _ = gateway.stop(Duration::from_secs(10));
    }
    Ok(())
}

/// Raises `pid`'s open-file limit to [`NOFILE`] or, where the hard limit is
/// lower and cannot be raised (no CAP_SYS_RESOURCE, as in a container), to
/// that hard limit (util-linux `prlimit`); returns the soft limit set.
fn raise_nofile(pid: u32) -> Result<u64> {
    let set = |limit: u64| {
        Command::new("prlimit")
            .args([
                "--pid",
                &pid.to_string(),
                &format!("--nofile={limit}:{limit}"),
            ])
            .stderr(std::process::Stdio::null())
            .status()
            .context("running prlimit (util-linux)")
    };
    if set(NOFILE)?.success() {
        return Ok(NOFILE);
    }
    let hard = hard_nofile(pid)?;
    let status = set(hard)?;
    if !status.success() {
        bail!("prlimit --pid {pid} --nofile={hard}:{hard} failed: {status}");
    }
    Ok(hard)
}

/// The hard open-file limit of `pid`, from /proc/PID/limits.
fn hard_nofile(pid: u32) -> Result<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .context("no open-file limit in /proc/PID/limits")?;
    let hard = line
        .split_whitespace()
        .nth(4)
        .context("unexpected /proc/PID/limits")?;
    Ok(hard.parse().unwrap_or(NOFILE))
}

fn wait_stored(binaries: &Binaries, demo: &Demo) -> Result<()> {
    for _ in 0..100 {
        if cache_stats(&binaries.gateway, demo)?["stored"].as_u64() >= Some(1) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the file was not stored within 10 s")
}

/// The hold phase, run inside the client namespace.
fn hold(connections: usize, gateway_pid: u32) -> Result<Hold> {
    let target = SocketAddr::new(SITE_V4.into(), 80);
    let request = format!("GET {FILE} HTTP/1.1\r\nhost: {SITE_V4}\r\n\r\n");
    let mut result = Hold {
        asked: connections,
        before: Usage::of(gateway_pid),
        ..Hold::default()
    };
    let start = Instant::now();
    // Opened by several threads at once (they inherit this thread's
    // namespace): one by one, 10,000 take long enough on a loaded machine for
    // the first to reach the gateway's 30 s idle time-out.
    let per_thread = connections.div_ceil(OPENERS);
    let opened: Vec<Vec<Result<(TcpStream, bool)>>> = std::thread::scope(|scope| {
        let openers: Vec<_> = (0..OPENERS)
            .map(|i| {
                let count = per_thread.min(connections.saturating_sub(i * per_thread));
                let request = &request;
                scope.spawn(move || (0..count).map(|_| open(target, request)).collect())
            })
            .collect();
        openers
            .into_iter()
            .map(|o| o.join().unwrap_or_default())
            .collect()
    });
    let mut streams = Vec::with_capacity(connections);
    for outcome in opened.into_iter().flatten() {
        match outcome {
            Ok((stream, hit)) => {
                result.hits += usize::from(hit);
                streams.push(stream);
            }
            Err(e) => {
                result.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    result.opened = streams.len();
    result.open_seconds = start.elapsed().as_secs_f64();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(1));
        let now = Usage::of(gateway_pid);
        result.plateau.rss_kib = result.plateau.rss_kib.max(now.rss_kib);
        result.plateau.fds = result.plateau.fds.max(now.fds);
    }
    for stream in &mut streams {
        match ask(stream, &request) {
            Ok(_) => result.second_ok += 1,
            Err(e) => {
                result
                    .first_error
                    .get_or_insert_with(|| format!("second request: {e:#}"));
            }
        }
    }
    drop(streams);
    std::thread::sleep(Duration::from_secs(2));
    result.after_close = Usage::of(gateway_pid);
    Ok(result)
}

/// One connection to `target` that asked `request` once and got a 200;
/// `true` when it came from the cache.
fn open(target: SocketAddr, request: &str) -> Result<(TcpStream, bool)> {
    let mut stream = TcpStream::connect_timeout(&target, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let hit = ask(&mut stream, request)?;
    Ok((stream, hit))
}

/// Sends `request` on `stream` and reads one response with a Content-Length
/// body; `Ok(true)` for a 200 from the cache (it carries `Age`).
fn ask(stream: &mut TcpStream, request: &str) -> Result<bool> {
    stream.write_all(request.as_bytes())?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("closed before a whole response");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        let httparse::Status::Complete(head) = response.parse(&buf)? else {
            continue;
        };
        if response.code != Some(200) {
            bail!("status {:?}", response.code);
        }
        let field = |name: &str| {
            response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let length: usize = field("content-length")
            .context("no content-length")?
            .trim()
            .parse()?;
        let hit = field("age").is_some();
        while buf.len() < head + length {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                bail!("closed inside the body");
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        if buf.len() > head + length {
            bail!("bytes after the response");
        }
        return Ok(hit);
    }
}

/// wrk's Lua script for the soak: every other request a hit on [`FILE`], the
/// others `no-cache` over [`SOAK_URLS`] query strings, each a fill or a
/// validation over the association.
fn soak_script() -> String {
    format!(
        "counter = 0\n\
         request = function()\n\
         \x20 counter = counter + 1\n\
         \x20 if counter % 2 == 0 then\n\
         \x20   return wrk.format(\"GET\", \"{FILE}\")\n\
         \x20 end\n\
         \x20 return wrk.format(\"GET\", \"{FILE}?v=\" .. (counter % {SOAK_URLS}), {{[\"Cache-Control\"] = \"no-cache\"}})\n\
         end\n"
    )
}

/// wrk for `seconds` with the soak script while a thread samples `pids`
/// (gateway, origin) every [`SAMPLE_EVERY`].
fn soak(
    ns: &str,
    dir: &std::path::Path,
    seconds: f64,
    pids: [u32; 2],
) -> Result<(Load, Vec<Sample>)> {
    let script = dir.join("soak.lua");
    std::fs::write(&script, soak_script())?;
    let done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (done, samples) = (Arc::clone(&done), Arc::clone(&samples));
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut next = Duration::ZERO;
            while !done.load(Ordering::Relaxed) {
                if start.elapsed() >= next {
                    let sample = Sample {
                        at: start.elapsed().as_secs_f64(),
                        gateway: Usage::of(pids[0]),
                        origin: Usage::of(pids[1]),
                    };
                    samples
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(sample);
                    next += SAMPLE_EVERY;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let mut command = Command::new("sh");
    command.args([
        "-c",
        &format!(
            "ulimit -n 16384 && exec wrk -t2 -c{SOAK_CONNECTIONS} -d{}s --timeout 5s --latency -s {} http://{SITE_V4}/",
            seconds.round() as u64,
            script.display()
        ),
    ]);
    let out = exec_in(ns, &command).output().context("running wrk");
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "wrk failed: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let load = parse_wrk(&text).with_context(|| format!("unexpected wrk output:\n{text}"))?;
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok((load, samples))
}

/// Growth of one series between the first and the last window after the
/// warm-up (the first sixth of the run, at least one sample): the two means.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Growth {
    first: f64,
    last: f64,
}

impl Growth {
    fn ratio(&self) -> f64 {
        if self.first == 0.0 {
            0.0
        } else {
            self.last / self.first - 1.0
        }
    }
}

/// Splits `values` (in sample order) into warm-up, first window and last
/// window, each a sixth of the run (at least one sample), and compares the
/// windows' means. `None` with fewer than three samples.
fn growth(values: &[f64]) -> Option<Growth> {
    if values.len() < 3 {
        return None;
    }
    let window = (values.len() / 6).max(1);
    let warm = window.min(values.len() - 2 * window);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    Some(Growth {
        first: mean(&values[warm..warm + window]),
        last: mean(&values[values.len() - window..]),
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report(
    connections: usize,
    hold: &Hold,
    soak_seconds: f64,
    load: &Load,
    samples: &[Sample],
    cache_line: &str,
) -> Result<String> {
    let mut subcommand = "load".to_owned();
    if connections != DEFAULT_CONNECTIONS {
        subcommand.push_str(&format!(" --connections {connections}"));
    }
    if soak_seconds != SOAK_SECONDS {
        subcommand.push_str(&format!(" --seconds {soak_seconds}"));
    }
    let mut r = super::common::report_header(
        "Load: held connections and a soak through the cache and the association",
        &subcommand,
    )?;
    writeln!(
        r,
        "- load average at the end: {} (the machine was shared with other builds and tests; \
         the run was niced)",
        super::common::load_average()
    )?;
    write_hold(&mut r, connections, hold)?;
    write_soak(&mut r, soak_seconds, load, samples, cache_line)?;
    Ok(r)
}

fn write_hold(r: &mut String, connections: usize, hold: &Hold) -> Result<()> {
    let budget_kib = hold.before.rss_kib + connections as u64 * BUDGET_PER_CONNECTION_KIB;
    let per_connection = (hold.plateau.rss_kib.saturating_sub(hold.before.rss_kib)) as f64
        / hold.opened.max(1) as f64;
    let fd_budget = hold.before.fds + connections as u64 + BUDGET_EXTRA_FDS;
    let verdict = |ok: bool| if ok { "within" } else { "**over**" };
    writeln!(
        r,
        "\n## {connections} keep-alive browser connections held at once\n"
    )?;
    writeln!(
        r,
        "From the client namespace through TPROXY to {SITE_V4}:80, each connection asks for \
         {FILE} (in the cache) and is kept open; once all are open the gateway is sampled three \
         times a second apart (the highest counts), then every connection asks again.\n"
    )?;
    writeln!(
        r,
        "- budget: the gateway's RSS before the phase plus {BUDGET_PER_CONNECTION_KIB} KiB per \
         connection = {:.1} MiB; open files: before + one per connection + {BUDGET_EXTRA_FDS} = {fd_budget}",
        mib(budget_kib)
    )?;
    writeln!(
        r,
        "- opened and answered: {} of {} in {:.1} s ({} from the cache); answered again while all \
         were open: {}",
        hold.opened, hold.asked, hold.open_seconds, hold.hits, hold.second_ok
    )?;
    if let Some(error) = &hold.first_error {
        writeln!(r, "- first failure: {error}")?;
    }
    writeln!(r, "\n| gateway | RSS, MiB | open files |")?;
    writeln!(r, "|---|---|---|")?;
    for (name, usage) in [
        ("before", hold.before),
        ("all connections open", hold.plateau),
        ("2 s after they closed", hold.after_close),
    ] {
        writeln!(r, "| {name} | {:.1} | {} |", mib(usage.rss_kib), usage.fds)?;
    }
    let held_at_once = hold.plateau.fds.saturating_sub(hold.before.fds);
    if held_at_once + 16 < hold.opened as u64 {
        writeln!(
            r,
            "\n**Not held at once**: the gateway had {held_at_once} more open files than before \
             at the plateau, fewer than the {} connections opened; the first ones had been \
             closed (the gateway's idle time-out is 30 s). The budget is not shown to hold.",
            hold.opened
        )?;
    }
    writeln!(
        r,
        "\nPer connection answered: {per_connection:.1} KiB of RSS. Memory {} the budget, open files {} it.",
        verdict(hold.plateau.rss_kib <= budget_kib),
        verdict(hold.plateau.fds <= fd_budget)
    )?;
    Ok(())
}

fn write_soak(
    r: &mut String,
    soak_seconds: f64,
    load: &Load,
    samples: &[Sample],
    cache_line: &str,
) -> Result<()> {
    writeln!(r, "\n## Soak: {soak_seconds:.0} s at sustained load\n")?;
    writeln!(
        r,
        "wrk -t2 -c{SOAK_CONNECTIONS} from the client namespace: every other request a cache hit on \
         {FILE}, the others `Cache-Control: no-cache` over {SOAK_URLS} query strings of it, so each \
         of those goes over the association to the origin (a fill, then validations).\n"
    )?;
    writeln!(
        r,
        "- wrk: {} requests, {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
        load.requests, load.rps, load.p50_ms, load.p99_ms, load.errors
    )?;
    writeln!(r, "- the gateway's cache during the soak: {cache_line}")?;
    let series = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<_>>();
    let checks = [
        ("gateway RSS", series(|s| s.gateway.rss_kib as f64), true),
        (
            "gateway open files",
            series(|s| s.gateway.fds as f64),
            false,
        ),
        ("origin RSS", series(|s| s.origin.rss_kib as f64), true),
        ("origin open files", series(|s| s.origin.fds as f64), false),
    ];
    writeln!(
        r,
        "- growth check: the mean of the first window after the warm-up against the last \
         window's (each a sixth of the samples); no growth means RSS within +{:.0} % and open \
         files within +{FD_SLACK}\n",
        RSS_SLACK * 100.0
    )?;
    writeln!(
        r,
        "| series | first window | last window | change | verdict |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    for (name, values, is_rss) in checks {
        let Some(g) = growth(&values) else {
            writeln!(r, "| {name} | - | - | - | too few samples |")?;
            continue;
        };
        let (ok, unit, scale) = if is_rss {
            (g.ratio() <= RSS_SLACK, "MiB", 1024.0)
        } else {
            (g.last - g.first <= FD_SLACK, "", 1.0)
        };
        writeln!(
            r,
            "| {name} | {:.1} {unit} | {:.1} {unit} | {:+.1} % | {} |",
            g.first / scale,
            g.last / scale,
            g.ratio() * 100.0,
            if ok { "no growth" } else { "**grew**" }
        )?;
    }
    writeln!(r, "\n### Samples every {} s\n", SAMPLE_EVERY.as_secs())?;
    writeln!(
        r,
        "| t, s | gateway RSS, MiB | gateway files | origin RSS, MiB | origin files |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    for s in samples {
        writeln!(
            r,
            "| {:.0} | {:.1} | {} | {:.1} | {} |",
            s.at,
            mib(s.gateway.rss_kib),
            s.gateway.fds,
            mib(s.origin.rss_kib),
            s.origin.fds
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_compares_the_windows_after_the_warm_up() {
        let flat = [
            50.0, 100.0, 100.0, 100.0, 101.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0,
        ];
        let g = growth(&flat).expect("enough");
        assert_eq!((g.first, g.last), (100.0, 100.0));
        let rising: Vec<f64> = (0..12).map(|i| 100.0 + 10.0 * f64::from(i)).collect();
        let g = growth(&rising).expect("enough");
        assert_eq!((g.first, g.last), (125.0, 205.0));
        assert!(g.ratio() > 0.6);
        assert_eq!(growth(&[1.0, 2.0]), None);
        let g = growth(&[1.0, 2.0, 3.0]).expect("three");
        assert_eq!((g.first, g.last), (2.0, 3.0));
    }

    #[test]
    fn the_soak_script_mixes_hits_and_no_cache() {
        let script = soak_script();
        assert!(script.contains(&format!("\"{FILE}\")")));
        assert!(script.contains("no-cache"));
        assert!(script.contains(&format!("% {SOAK_URLS}")));
    }
}
