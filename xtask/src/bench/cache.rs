//! `cargo xtask bench cache`: a cache hit served by the gateway against the same
//! file served by nginx, loaded by wrk in one run, the gateway's memory with
//! 1,000 browser connections open, and the whole path without the cache
//! (wrk → gateway → origin over SCTP against wrk → nginx over TCP).
//!
//! Both servers run in the gateway's namespace and are reached by wrk in the
//! client namespace over the same veth: the gateway through TPROXY at the site's
//! address (the file is in its cache; the origin is not asked), nginx at the
//! router's LAN address. nginx runs as it would on this machine: one worker per
//! core, access log on (the gateway logs each request too). The cells alternate
//! (gateway, nginx, gateway, nginx) so that drift on a noisy machine hits both.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testbed::topology::{LAN, SITE_V4};
use testbed::{Binaries, Demo, DemoOptions, Nginx, exec_in};

use crate::cmd::workspace_root;

/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwbench-";
/// The file both servers serve.
const FILE: &str = "/assets/tile-01.svg";
/// nginx's port on the router's LAN address.
const NGINX_PORT: u16 = 8080;
/// Rounds of (gateway, nginx).
const ROUNDS: usize = 2;
/// Length of each wrk cell.
const CELL_SECONDS: u32 = 10;

/// One wrk run's figures.
#[derive(Debug, Clone, Copy)]
pub(super) struct Load {
    pub(super) requests: u64,
    pub(super) rps: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) errors: u64,
}

/// Connections wrk holds while callgrind counts: enough that requests
/// overlap, few enough that the requests still in flight when the count is
/// dumped are noise.
const CALLGRIND_CONNECTIONS: u32 = 10;
/// How long wrk loads the gateway under callgrind (about 50 times slower
/// than natively).
const CALLGRIND_SECONDS: u32 = 20;
/// Functions listed with their inclusive cost in the callgrind report.
const CALLGRIND_TOP: usize = 40;

/// `bench cache`; with `callgrind` only the gateway's instructions per
/// cache hit ([`run_callgrind`]), with `flamegraph` only a flame graph of
/// its hits ([`run_flamegraph`]).
pub(crate) fn run(callgrind: bool, flamegraph: bool) -> Result<()> {
    if callgrind {
        return run_callgrind();
    }
    if flamegraph {
        return run_flamegraph();
    }
    let built = crate::run::build(&["gateway", "origin"])?;
    let binaries = Binaries {
        gateway: built[0].clone(),
        origin: built[1].clone(),
    };
    let dir = testbed::target_dir().join("bench-cache");
    let _ = std::fs::remove_dir_all(&dir);
    testbed::cleanup_stale(PREFIX)?;
    println!("==> starting the demo topology (gateway, origin, nginx)");
    let mut demo = Demo::start(
        binaries.clone(),
        DemoOptions::new(PREFIX, &workspace_root(), &dir),
    )?;
    let gateway_ns = demo.topology.gateway.name().to_owned();
    let client_ns = demo.topology.client.name().to_owned();
    let mut nginx = start_nginx(
        &gateway_ns,
        SocketAddr::new(LAN.gateway_v4.into(), NGINX_PORT),
        &testbed::demo_site(),
        &dir.join("nginx-baseline"),
    )?;
    let gateway_url = format!("http://{SITE_V4}{FILE}");
    let nginx_url = format!("http://{}:{NGINX_PORT}{FILE}", LAN.gateway_v4);

    println!("==> filling the cache with {gateway_url}");
    curl(&client_ns, &gateway_url)?;
    let stats = |demo: &Demo| cache_stats(&binaries.gateway, demo);
    for _ in 0..100 {
        if stats(&demo)?["stored"].as_u64() >= Some(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let hits_before = stats(&demo)?["hits"].as_u64().unwrap_or(0);

    let cells = alternate(
        "cache hits",
        &client_ns,
        [("gateway", &gateway_url), ("nginx", &nginx_url)],
    )?;
    let hits = stats(&demo)?["hits"].as_u64().unwrap_or(0) - hits_before;
    let gateway_requests: u64 = cells
        .iter()
        .filter(|(n, _)| *n == "gateway")
        .map(|(_, l)| l.requests)
        .sum();

    println!("==> memory: wrk with 1,000 connections against each");
    let gateway_pid = demo.gateway.as_ref().context("gateway")?.pid();
    let gateway_idle = rss_kib(&[gateway_pid]);
    let (gateway_peak, gateway_load) =
        peak_rss_under_load(&client_ns, &gateway_url, move || vec![gateway_pid])?;
    let nginx_pid = nginx.process().pid();
    let nginx_pids = move || with_children(nginx_pid);
    let nginx_idle = rss_kib(&nginx_pids());
    let (nginx_peak, nginx_load) = peak_rss_under_load(&client_ns, &nginx_url, nginx_pids)?;

    let mut report = report(
        &cells,
        hits,
        gateway_requests,
        [
            ("gateway", gateway_idle, gateway_peak, gateway_load),
            ("nginx (all processes)", nginx_idle, nginx_peak, nginx_load),
        ],
    )?;
    let _ = nginx.process().stop(Duration::from_secs(5));
    if let Some(gateway) = demo.gateway.as_mut() {
        let _ = gateway.stop(Duration::from_secs(10));
    }
    drop(nginx);
    drop(demo);

    let whole = whole_path(&binaries, &dir)?;
    whole_path_report(&mut report, &whole)?;
    let path = workspace_root().join("bench/results/cache.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    println!("{report}");
    println!("==> report written to bench/results/cache.md");
    Ok(())
}

/// wrk (2 threads, 100 connections, [`CELL_SECONDS`]) against each of
/// `servers` in turn, [`ROUNDS`] times, so that drift on a noisy machine
/// hits both: the cells in the order they ran, each named by its server.
fn alternate(
    part: &str,
    client_ns: &str,
    servers: [(&'static str, &String); 2],
) -> Result<Vec<(&'static str, Load)>> {
    let mut cells = Vec::new();
    for round in 1..=ROUNDS {
        for (name, url) in servers {
            println!(
                "==> {part}, round {round}/{ROUNDS}: {name}, wrk 2 threads, 100 connections, {CELL_SECONDS} s"
            );
            let load = wrk(client_ns, url, 100, CELL_SECONDS)?;
            println!(
                "    {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
                load.rps, load.p50_ms, load.p99_ms, load.errors
            );
            cells.push((name, load));
        }
    }
    Ok(cells)
}

/// The whole path a browser's request takes when the cache does not answer:
/// wrk → the gateway (TPROXY, `cache.enabled = false`) → the origin over
/// userspace SCTP, against the same wrk → nginx on the origin host over TCP,
/// the router only forwarding. Both servers serve the demo site from the
/// origin namespace; cells alternate as in the cache-hit part.
fn whole_path(binaries: &Binaries, dir: &Path) -> Result<Vec<(&'static str, Load)>> {
    println!("==> the whole path: the demo topology again, the gateway's cache off");
    let mut options = DemoOptions::new(PREFIX, &workspace_root(), &dir.join("whole-path"));
    options.gateway.cache_enabled = Some(false);
    let mut demo = Demo::start(binaries.clone(), options)?;
    let client_ns = demo.topology.client.name().to_owned();
    let mut nginx = start_nginx(
        demo.topology.origin.name(),
        SocketAddr::new(SITE_V4.into(), NGINX_PORT),
        &testbed::demo_site(),
        &dir.join("nginx-origin"),
    )?;
    let gateway_url = format!("http://{SITE_V4}{FILE}");
    let nginx_url = format!("http://{SITE_V4}:{NGINX_PORT}{FILE}");
    curl(&client_ns, &gateway_url)?;
    curl(&client_ns, &nginx_url)?;
    let cells = alternate(
        "whole path",
        &client_ns,
        [("gateway → origin", &gateway_url), ("nginx", &nginx_url)],
    )?;
    // With the cache off nothing may have been answered from it.
    match cache_stats(&binaries.gateway, &demo) {
        Ok(stats) => {
            let hits = stats["hits"].as_u64().unwrap_or(0);
            if hits != 0 {
                bail!("the gateway answered {hits} requests from a cache that is off");
            }
        }
        Err(e) => println!("    (no cache figures with the cache off: {e:#})"),
    }
    let _ = nginx.process().stop(Duration::from_secs(5));
    if let Some(gateway) = demo.gateway.as_mut() {
        let _ = gateway.stop(Duration::from_secs(10));
    }
    Ok(cells)
}

fn whole_path_report(r: &mut String, cells: &[(&str, Load)]) -> Result<()> {
    writeln!(
        r,
        "\n## The whole path, cache off: wrk → gateway → origin over SCTP, against wrk → nginx over TCP\n"
    )?;
    writeln!(
        r,
        "The same wrk (-t2 -c100 -d{CELL_SECONDS}s --latency, client namespace) and the same file: \
         once through the gateway (TPROXY at {SITE_V4}:80, `cache.enabled = false`, so every request \
         crosses the association to the origin, which serves config/demo-site), once to nginx in the \
         origin's namespace ({SITE_V4}:{NGINX_PORT}, configured as above, same root) over TCP, the \
         router only forwarding. No WAN emulator: the link is a veth, so this is the cost of the path's \
         processing, not of a round trip. Gateway, origin, nginx and wrk share the machine's cores.\n"
    )?;
    cell_table(r, "path", cells)?;
    let pick = |path: &str, f: fn(&Load) -> f64| median_of(cells, path, f);
    let (g, n) = ("gateway → origin", "nginx");
    let (g_rps, n_rps) = (pick(g, |l| l.rps), pick(n, |l| l.rps));
    let (g_p99, n_p99) = (pick(g, |l| l.p99_ms), pick(n, |l| l.p99_ms));
    writeln!(
        r,
        "\n| median over rounds | gateway → origin | nginx | ratio |\n|---|---|---|---|"
    )?;
    writeln!(
        r,
        "| requests/s | {g_rps:.0} | {n_rps:.0} | {:.2} |",
        g_rps / n_rps
    )?;
    writeln!(
        r,
        "| p99 latency, ms | {g_p99:.2} | {n_p99:.2} | {:.2} |",
        g_p99 / n_p99
    )?;
    Ok(())
}

/// The gateway's instructions per cache hit: the gateway under `valgrind
/// --tool=callgrind` in the demo topology, the file in its cache, wrk
/// loading it for a warm-up; then the counters are zeroed, wrk loads it for
/// [`CALLGRIND_SECONDS`], the counters are dumped, and their total is divided
/// by the requests wrk completed. Writes bench/results/cache-callgrind.md and
/// keeps the dump in the target directory's bench-cache-callgrind/ (it
/// names the machine's paths: not for the repository).
fn run_callgrind() -> Result<()> {
    let built = crate::run::build(&["gateway", "origin"])?;
    let dir = testbed::target_dir().join("bench-cache-callgrind");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("gateway.callgrind");
    let wrapper = dir.join("gateway-under-callgrind");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={} {} \"$@\"\n",
            out.display(),
            built[0].display()
        ),
    )?;
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    println!("==> starting the demo topology, the gateway under callgrind");
    let binaries = Binaries {
        gateway: wrapper,
        origin: built[1].clone(),
    };
    let (mut demo, client_ns, url) = start_filled(binaries, &built[0], &dir)?;
    let stats = |demo: &Demo| cache_stats(&built[0], demo);
    println!("==> warm-up: wrk, {CALLGRIND_CONNECTIONS} connections, 3 s");
    wrk(&client_ns, &url, CALLGRIND_CONNECTIONS, 3)?;
    let pid = demo.gateway.as_ref().context("gateway")?.pid();
    callgrind_control(pid, "--zero")?;
    let hits_before = stats(&demo)?["hits"].as_u64().unwrap_or(0);
    println!("==> counting: wrk, {CALLGRIND_CONNECTIONS} connections, {CALLGRIND_SECONDS} s");
    let load = wrk(&client_ns, &url, CALLGRIND_CONNECTIONS, CALLGRIND_SECONDS)?;
    callgrind_control(pid, "--dump=counted")?;
    let hits = stats(&demo)?["hits"].as_u64().unwrap_or(0) - hits_before;
    if let Some(gateway) = demo.gateway.as_mut() {
        let _ = gateway.stop(Duration::from_secs(30));
    }
    let dump = counted_dump(&dir, &out)?;
    let instructions = super::common::callgrind_total(&dump)?;
    let per_request = instructions as f64 / load.requests.max(1) as f64;
    println!(
        "    {} requests ({hits} hits counted by the cache), {per_request:.0} instructions per request",
        load.requests
    );
    let mut r = super::common::report_header(
        "Cache hits: the gateway's instructions per request (callgrind)",
        "cache --callgrind",
    )?;
    writeln!(
        r,
        "- path: the demo topology; the gateway under `valgrind --tool=callgrind`, config/demo-site{FILE} in its cache; \
         wrk -t1 -c{CALLGRIND_CONNECTIONS} in the client namespace through TPROXY; counters zeroed after a 3 s warm-up, dumped after {CALLGRIND_SECONDS} s of load\n\
         - {} requests completed by wrk, {hits} hits counted by the cache; user space only (the kernel's share of each system call is not counted)\n",
        load.requests
    )?;
    writeln!(
        r,
        "| | instructions per request |\n|---|---|\n| cache hit (all threads of the gateway) | {per_request:.0} |"
    )?;
    writeln!(
        r,
        "\n## Top inclusive costs (% of the counted instructions)\n\n| % | function |\n|---|---|"
    )?;
    r.push_str(&super::common::callgrind_top(&dump, CALLGRIND_TOP)?);
    let path = workspace_root().join("bench/results/cache-callgrind.md");
    std::fs::write(&path, &r).with_context(|| format!("writing {}", path.display()))?;
    println!("{r}\n==> report written to bench/results/cache-callgrind.md");
    Ok(())
}

/// The demo topology started with `binaries` in `dir`, the file in the
/// gateway's cache (`gateway` is the real executable, for `cache stats`);
/// returns it with the client namespace and the file's URL.
fn start_filled(binaries: Binaries, gateway: &Path, dir: &Path) -> Result<(Demo, String, String)> {
    testbed::cleanup_stale(PREFIX)?;
    let demo = Demo::start(binaries, DemoOptions::new(PREFIX, &workspace_root(), dir))?;
    let client_ns = demo.topology.client.name().to_owned();
    let url = format!("http://{SITE_V4}{FILE}");
    println!("==> filling the cache with {url}");
    curl(&client_ns, &url)?;
    for _ in 0..100 {
        if cache_stats(gateway, &demo)?["stored"].as_u64() >= Some(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((demo, client_ns, url))
}

/// Seconds perf samples the gateway for the flame graph.
const FLAMEGRAPH_SECONDS: u32 = 10;

/// A flame graph of the gateway answering cache hits: perf samples its
/// stacks (DWARF unwinding) while wrk loads it with 100 connections; written
/// to bench/results/cache-flamegraph.svg.
fn run_flamegraph() -> Result<()> {
    let built = crate::run::build(&["gateway", "origin"])?;
    let dir = testbed::target_dir().join("bench-cache-flamegraph");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let binaries = Binaries {
        gateway: built[0].clone(),
        origin: built[1].clone(),
    };
    let (mut demo, client_ns, url) = start_filled(binaries, &built[0], &dir)?;
    wrk(&client_ns, &url, 100, 2)?;
    let pid = demo.gateway.as_ref().context("gateway")?.pid();
    let perf_data = dir.join("perf.data");
    println!("==> perf record on the gateway while wrk loads it, {FLAMEGRAPH_SECONDS} s");
    let mut perf = super::common::perf_record(
        &perf_data,
        Some(pid),
        &["sleep", &FLAMEGRAPH_SECONDS.to_string()],
    )?;
    let load = wrk(&client_ns, &url, 100, FLAMEGRAPH_SECONDS);
    let recorded = perf.wait();
    if let Some(gateway) = demo.gateway.as_mut() {
        let _ = gateway.stop(Duration::from_secs(10));
    }
    let load = load?;
    if !recorded?.success() {
        bail!("perf record failed");
    }
    let svg = workspace_root().join("bench/results/cache-flamegraph.svg");
    super::common::flamegraph(
        &perf_data,
        &svg,
        &format!(
            "gateway: cache hits, wrk -c100, {:.0} requests/s under perf",
            load.rps
        ),
    )?;
    println!("==> flame graph written to bench/results/cache-flamegraph.svg");
    Ok(())
}

/// Runs `callgrind_control ACTION PID` (zeroing or dumping the counters of
/// the process under callgrind).
fn callgrind_control(pid: u32, action: &str) -> Result<()> {
    let status = Command::new("callgrind_control")
        .arg(action)
        .arg(pid.to_string())
        .status()
        .context("running callgrind_control (package valgrind)")?;
    if !status.success() {
        bail!("callgrind_control {action} {pid} failed: {status}");
    }
    Ok(())
}

/// The dump `callgrind_control --dump` wrote beside `out` (callgrind numbers
/// dumps `out.1`, `out.2`, ...; the first one is the counted load).
fn counted_dump(dir: &Path, out: &Path) -> Result<std::path::PathBuf> {
    let first = std::path::PathBuf::from(format!("{}.1", out.display()));
    if first.is_file() {
        return Ok(first);
    }
    bail!("no callgrind dump {} in {}", first.display(), dir.display())
}

/// nginx as configured for production on this machine: a master, one worker
/// per core, access log on, in the foreground.
fn start_nginx(ns: &str, listen: SocketAddr, root: &Path, dir: &Path) -> Result<Nginx> {
    let d = dir.display();
    let conf = format!(
        "daemon off;\nworker_processes auto;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         worker_rlimit_nofile 8192;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  types {{ text/html html; text/css css; application/javascript js; image/svg+xml svg; }}\n\
         \x20 access_log {d}/access.log;\n  sendfile on;\n\
         \x20 client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         \x20 server {{ listen {listen}; root {root}; }}\n}}\n",
        root = root.display()
    );
    Ok(Nginx::start_with_config(ns, &[listen], &conf, dir)?)
}

pub(super) fn curl(ns: &str, url: &str) -> Result<()> {
    let mut command = Command::new("curl");
    command.args(["-sS", "--fail", "-o", "/dev/null", "--max-time", "10", url]);
    let status = exec_in(ns, &command).status().context("running curl")?;
    if !status.success() {
        bail!("curl {url} failed: {status}");
    }
    Ok(())
}

pub(super) fn cache_stats(gateway: &Path, demo: &Demo) -> Result<testbed::serde_json::Value> {
    let mut command = Command::new(gateway);
    command
        .arg("--config")
        .arg(&demo.gateway_config_path)
        .args(["cache", "stats"]);
    let out = exec_in(demo.topology.gateway.name(), &command)
        .output()
        .context("running gateway cache stats")?;
    if !out.status.success() {
        bail!(
            "gateway cache stats: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(testbed::serde_json::from_slice(&out.stdout)?)
}

/// wrk in `ns` with `connections`, two threads, for `seconds`; the open-file
/// limit raised for large connection counts.
fn wrk(ns: &str, url: &str, connections: u32, seconds: u32) -> Result<Load> {
    let mut command = Command::new("sh");
    command.args([
        "-c",
        &format!(
            "ulimit -n 16384 && exec wrk -t2 -c{connections} -d{seconds}s --timeout 5s --latency {url}"
        ),
    ]);
    let out = exec_in(ns, &command)
        .output()
        .context("running wrk (package wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "wrk failed: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_wrk(&text).with_context(|| format!("unexpected wrk output:\n{text}"))
}

pub(super) fn parse_wrk(text: &str) -> Option<Load> {
    let mut load = Load {
        requests: 0,
        rps: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        errors: 0,
    };
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", rps] => load.rps = rps.parse().ok()?,
            ["50%", value] => load.p50_ms = millis(value)?,
            ["99%", value] => load.p99_ms = millis(value)?,
            [n, "requests", "in", ..] => load.requests = n.parse().ok()?,
            ["Non-2xx", "or", "3xx", "responses:", n] => load.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                load.errors += rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    (load.rps > 0.0).then_some(load)
}

/// wrk's latency figures: `812.00us`, `1.23ms`, `1.02s`.
fn millis(value: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = value.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = value.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// Resident memory of `pids`, summed, in KiB.
pub(super) fn rss_kib(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// `pid` and its children (nginx's workers).
fn with_children(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    pids
}

/// The highest summed RSS of `pids()` sampled every 100 ms while wrk holds
/// 1,000 connections to `url` for 10 s; also wrk's figures.
fn peak_rss_under_load(
    ns: &str,
    url: &str,
    pids: impl Fn() -> Vec<u32> + Send + 'static,
) -> Result<(u64, Load)> {
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(Mutex::new(0u64));
    let sampler = {
        let (done, peak) = (Arc::clone(&done), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let now = rss_kib(&pids());
                let mut peak = peak.lock().unwrap_or_else(|e| e.into_inner());
                *peak = (*peak).max(now);
                drop(peak);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let load = wrk(ns, url, 1000, 10);
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let peak = *peak.lock().unwrap_or_else(|e| e.into_inner());
    Ok((peak, load?))
}

/// One row per wrk cell, in the order they ran; `what` heads the column
/// that names each cell's server.
fn cell_table(r: &mut String, what: &str, cells: &[(&str, Load)]) -> Result<()> {
    writeln!(
        r,
        "| cell | {what} | requests/s | p50 ms | p99 ms | errors |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|")?;
    for (i, (name, load)) in cells.iter().enumerate() {
        writeln!(
            r,
            "| {} | {name} | {:.0} | {:.2} | {:.2} | {} |",
            i + 1,
            load.rps,
            load.p50_ms,
            load.p99_ms,
            load.errors
        )?;
    }
    Ok(())
}

/// The median over `name`'s cells of one figure `f` of each.
fn median_of(cells: &[(&str, Load)], name: &str, f: fn(&Load) -> f64) -> f64 {
    median(
        cells
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, l)| f(l))
            .collect(),
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn report(
    cells: &[(&str, Load)],
    hits: u64,
    gateway_requests: u64,
    memory: [(&str, u64, u64, Load); 2],
) -> Result<String> {
    let mut r =
        super::common::report_header("Cache-hit benchmark: the gateway against nginx", "cache")?;
    writeln!(
        r,
        "- path: wrk in the client namespace, one veth to the router namespace, where both servers run: \
         the gateway behind TPROXY (site address {SITE_V4}:80, the file in its cache) and nginx \
         ({}:{NGINX_PORT}, `worker_processes auto`, sendfile, access log on)",
        LAN.gateway_v4
    )?;
    writeln!(
        r,
        "- file: config/demo-site{FILE}; each cell wrk -t2 -c100 -d{CELL_SECONDS}s --latency; cells alternate, {ROUNDS} rounds"
    )?;
    writeln!(
        r,
        "- the gateway's cache counted {hits} hits for the {gateway_requests} requests wrk completed against it\n"
    )?;
    cell_table(&mut r, "server", cells)?;
    let pick = |server: &str, f: fn(&Load) -> f64| median_of(cells, server, f);
    let (g_rps, n_rps) = (pick("gateway", |l| l.rps), pick("nginx", |l| l.rps));
    let (g_p99, n_p99) = (pick("gateway", |l| l.p99_ms), pick("nginx", |l| l.p99_ms));
    writeln!(
        r,
        "\n| median over rounds | gateway | nginx | ratio (gateway / nginx) | target |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    writeln!(
        r,
        "| requests/s | {g_rps:.0} | {n_rps:.0} | {:.2} | ≥ 0.8 |",
        g_rps / n_rps
    )?;
    writeln!(
        r,
        "| p99 latency, ms | {g_p99:.2} | {n_p99:.2} | {:.2} | ≤ 2 |",
        g_p99 / n_p99
    )?;
    writeln!(
        r,
        "\n## Memory with 1,000 connections (wrk -t2 -c1000 -d10s)\n"
    )?;
    writeln!(
        r,
        "| server | RSS idle, MiB | peak RSS under load, MiB | requests/s | errors |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    for (name, idle, peak, load) in memory {
        writeln!(
            r,
            "| {name} | {:.1} | {:.1} | {:.0} | {} |",
            idle as f64 / 1024.0,
            peak as f64 / 1024.0,
            load.rps,
            load.errors
        )?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_output_is_read() {
        let text = "Running 10s test @ http://x/\n  2 threads and 100 connections\n\
            \x20 Latency Distribution\n     50%  812.00us\n     75%    1.10ms\n     90%    2.00ms\n     99%    4.25ms\n\
            \x20 523400 requests in 10.00s, 1.20GB read\n\
            \x20 Socket errors: connect 0, read 2, write 0, timeout 1\n\
            Requests/sec:  52340.12\nTransfer/sec:    123.00MB\n";
        let load = parse_wrk(text).expect("parses");
        assert_eq!(load.requests, 523_400);
        assert!((load.rps - 52_340.12).abs() < 1e-6);
        assert!((load.p50_ms - 0.812).abs() < 1e-9);
        assert!((load.p99_ms - 4.25).abs() < 1e-9);
        assert_eq!(load.errors, 3);
        assert_eq!(millis("1.02s"), Some(1020.0));
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
    }
}
