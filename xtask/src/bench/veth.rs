//! The benchmarks between two namespaces joined by one veth pair, reported as
//! ratios: `bench transport` (every association backend against plain TCP,
//! measured by `gateway-transport/examples/transport_bench.rs`), `bench
//! scheduler` (the origin's schedulers on the wire) and `bench static` (the
//! origin against nginx on the same file; both measured by
//! `origin/examples/sched_bench.rs`), and `bench ebpf` (the eBPF programs'
//! cost per packet, and the userspace backend's throughput with them attached
//! against detached; `gateway/examples/ebpf_bench.rs`). `bench scheduler --wan` runs the
//! rate-limited sections over the WAN emulator instead (`link::WanPath`).
//!
//! Each builds its measuring program, creates the namespaces (removed on drop,
//! also on error), runs each cell, and writes a markdown report to
//! bench/results/.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testbed::{Nginx, VethPair};

use super::common::field;
use super::common::{
    build_example, build_example_with, callgrind_total, report_header, tempfile_dir,
};
use super::link::{Sides, WanPath, run_pair, with_pin};
use super::options::BenchOptions;
use crate::cmd::workspace_root;

/// Backends of the transport benchmark, in report order; `userspace-reno` is
/// the userspace backend with RFC 9260's controller instead of the default
/// BBR; `quic` (quinn) is the multistream transport our SCTP is measured
/// against.
const BACKENDS: [&str; 5] = ["tcp", "framed-tcp", "userspace", "userspace-reno", "quic"];

/// (label, message size, streams, share of --bytes)
const CELLS: [(&str, usize, u16, u64); 3] = [
    ("bulk 16 KiB messages, 8 streams", 16 * 1024, 8, 1),
    ("bulk 64 KiB messages, 8 streams", 64 * 1024, 8, 1),
    ("small 64 B messages, 8 streams", 64, 8, 256),
];

/// Prefix of the benchmark's namespace names: `gwb-<pid>-srv`, `gwb-<pid>-cli`.
const NAMESPACE_PREFIX: &str = "gwb-";

/// The two namespaces of every cell (testbed's [`VethPair`]), after removing
/// those a killed run left.
fn namespaces() -> Result<VethPair> {
    // A killed run (its process id, in the names, no longer exists) runs no
    // destructors.
    for name in testbed::cleanup_stale(NAMESPACE_PREFIX)? {
        println!("==> removed namespace {name} left by a killed run");
    }
    let tag = format!("{NAMESPACE_PREFIX}{}", std::process::id());
    Ok(VethPair::create(&tag, "10.78.0.1/24", "10.78.0.2/24")?)
}

/// The server's address on the veth pair.
const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 78, 0, 1));

/// Who runs where on the veth pair `ns`.
fn sides(ns: &VethPair) -> Sides {
    Sides::veth(ns, SERVER_IP)
}

/// Prefix of the namespace names of `bench scheduler --wan`.
const WAN_PREFIX: &str = "gwbw-";

/// One side's JSON line, read with the few fields we need.
#[derive(Debug, Default, Clone, Copy)]
struct Measured {
    mbit_per_s: f64,
    messages_per_s: f64,
    bytes: f64,
    cpu_seconds: f64,
}

fn run_cell(
    ns: &VethPair,
    binary: &Path,
    backend: &str,
    size: usize,
    streams: u16,
    bytes: u64,
) -> Result<(Measured, f64)> {
    let common = |role: &str| {
        vec![
            role.to_owned(),
            "--backend".into(),
            backend.into(),
            "--addr".into(),
            "10.78.0.1:9899".into(),
            "--size".into(),
            size.to_string(),
            "--streams".into(),
            streams.to_string(),
            "--bytes".into(),
            bytes.to_string(),
        ]
    };
    let (line, client_line) =
        run_pair(&sides(ns), binary, &common("--server"), &common("--client"))
            .with_context(|| format!("{backend} with {size}-byte messages"))?;
    let measured = Measured {
        mbit_per_s: field(&line, "mbit_per_s").unwrap_or(0.0),
        messages_per_s: field(&line, "messages_per_s").unwrap_or(0.0),
        bytes: field(&line, "bytes").unwrap_or(0.0),
        cpu_seconds: field(&line, "cpu_seconds").unwrap_or(0.0),
    };
    let client_cpu = field(&client_line, "cpu_seconds").unwrap_or(0.0);
    Ok((measured, client_cpu))
}

/// One table of the scheduling report.
struct Section {
    title: &'static str,
    workload: &'static str,
    loads: &'static [f64],
    policies: &'static [&'static str],
    seconds: f64,
    /// Whether the link is rate-limited to [`SCHEDULER_RATE`] (the sections
    /// `--wan` runs over the emulated link).
    limited: bool,
}

/// Link rate of the scheduling benchmarks on the veth (TBF), and the rate the
/// load generator's loads are shares of.
const SCHEDULER_RATE: &str = "20mbit";
const SCHEDULER_RATE_MBIT: u64 = 20;

/// The origin's port in the scheduling benchmarks.
const SCHEDULER_PORT: u16 = 9899;

/// The sections of the scheduling report, in its order.
const SCHEDULER_SECTIONS: [Section; 3] = [
    Section {
        title: "Zipf sizes (1 KiB to 4 MiB, alpha 1), Poisson arrivals",
        workload: "zipf",
        loads: &[0.5, 0.8],
        policies: &["fcfs", "rr", "scf"],
        seconds: 40.0,
        limited: true,
    },
    Section {
        title: "Demand (50 KiB every 200 ms) during a 16 MiB prefetch",
        workload: "prefetch",
        loads: &[0.0],
        policies: &["fcfs", "priority", "wfq"],
        seconds: 6.0,
        limited: true,
    },
    Section {
        title: "The thesis's experiment: 6,000 requests, 1-256 KiB uniform, 64 outstanding, unlimited veth",
        workload: "thesis",
        loads: &[0.0],
        policies: &["scf", "rr"],
        seconds: 0.0,
        limited: false,
    },
];

pub(super) fn scheduler(options: &BenchOptions) -> Result<()> {
    if options.wan.is_some() && options.only.iter().any(|w| w == "thesis") {
        bail!(
            "--only thesis with --wan: the thesis's experiment runs on an unlimited veth; run it without --wan"
        );
    }
    let binary = build_example_with("origin", "sched_bench", &["baselines"])?;
    let mut report = scheduler_report_header(options)?;
    // Over the emulated link, one topology serves every row.
    let wan_path = options
        .wan
        .map(|cell| WanPath::create(WAN_PREFIX, cell, "scheduler"))
        .transpose()?;
    let mut run = SchedulerRun {
        binary: &binary,
        wan_path: wan_path.as_ref(),
        rate_mbit: options
            .wan
            .map_or(SCHEDULER_RATE_MBIT, |cell| cell.rate_mbit),
        notes: Vec::new(),
    };
    for section in &SCHEDULER_SECTIONS {
        let chosen = if options.only.is_empty() {
            // Over the emulated link, the rate-limited sections only.
            section.limited || run.wan_path.is_none()
        } else {
            options.only.iter().any(|w| w == section.workload)
        };
        if !chosen {
            continue;
        }
        let seconds = if section.limited {
            options.seconds.unwrap_or(section.seconds)
        } else {
            section.seconds
        };
        run.section(&mut report, section, seconds)?;
    }
    let notes = std::mem::take(&mut run.notes);
    drop(wan_path);
    if !notes.is_empty() {
        writeln!(report, "## Notes\n")?;
        for note in &notes {
            writeln!(report, "- {note}")?;
        }
        writeln!(report)?;
    }
    let dir = workspace_root().join("bench/results");
    std::fs::create_dir_all(&dir)?;
    let base = if options.wan.is_some() {
        "scheduler-wan"
    } else {
        "scheduler"
    };
    let name = if options.only.is_empty() {
        format!("{base}.md")
    } else {
        format!("{base}-{}.md", options.only.join("-"))
    };
    std::fs::write(dir.join(&name), &report)?;
    println!("\n{report}\nxtask: report written to bench/results/{name}");
    Ok(())
}

/// The scheduling report's title, the command that made it and the path its
/// figures were measured on.
fn scheduler_report_header(options: &BenchOptions) -> Result<String> {
    let mut flags: String = options
        .wan
        .map_or(String::new(), |cell| format!(" --wan {}", cell.arg()));
    for w in &options.only {
        write!(flags, " --only {w}")?;
    }
    if let Some(seconds) = options.seconds {
        write!(flags, " --seconds {seconds}")?;
    }
    let mut report = report_header("Scheduling benchmark", &format!("scheduler{flags}"))?;
    match options.wan {
        None => writeln!(
            report,
            "- path: origin and load generator in two namespaces joined by one veth, with TBF {SCHEDULER_RATE} on both ends unless a section says \"unlimited veth\"; userspace SCTP, 64 data streams, 16 KiB chunks"
        )?,
        Some(cell) => writeln!(
            report,
            "- path: the origin in the testbed's origin namespace, the load generator in its gateway namespace, wanem between them ({cell}; neighbour entries pinned, offloads off), started afresh for each row; userspace SCTP with its default settings, 64 data streams, 16 KiB chunks; loads are shares of {} Mbit/s",
            cell.rate_mbit
        )?,
    }
    writeln!(
        report,
        "- response time: REQUEST sent to RESPONSE_END received, at the load generator\n"
    )?;
    Ok(report)
}

/// What every row of the scheduling benchmark shares, and the notes its rows
/// leave for the report's end.
struct SchedulerRun<'a> {
    binary: &'a Path,
    /// The emulated link, with `--wan`; a fresh veth pair per row without.
    wan_path: Option<&'a WanPath>,
    /// The rate the loads are shares of.
    rate_mbit: u64,
    notes: Vec<String>,
}

impl SchedulerRun<'_> {
    /// One section's table: a row per load and policy, then SCF's mean over
    /// RR's where the section has both.
    fn section(&mut self, report: &mut String, section: &Section, seconds: f64) -> Result<()> {
        let Section {
            title,
            workload,
            loads,
            policies,
            ..
        } = *section;
        writeln!(report, "## {title}\n")?;
        writeln!(
            report,
            "| load | policy | completed | mean s | p95 s | small (<=64 KiB) mean s | demand mean s | demand p95 s | Mbit/s | mean / first policy |"
        )?;
        writeln!(report, "|---|---|---|---|---|---|---|---|---|---|")?;
        let mut ratios = Vec::new();
        for load in loads {
            let mut first_mean = None;
            let mut means = Vec::new();
            for policy in policies {
                println!("==> {workload} load {load}: {policy}");
                match self.row(section, *load, policy, seconds) {
                    Ok((_, c)) => {
                        let get = |k| field(&c, k).unwrap_or(f64::NAN);
                        let mean = if workload == "prefetch" {
                            get("demand_mean_s")
                        } else {
                            get("mean_s")
                        };
                        let base = *first_mean.get_or_insert(mean);
                        means.push((*policy, mean));
                        println!("    {c}");
                        writeln!(
                            report,
                            "| {load} | {policy} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.2} |",
                            get("completed"),
                            get("mean_s"),
                            get("p95_s"),
                            get("small_mean_s"),
                            get("demand_mean_s"),
                            get("demand_p95_s"),
                            get("mbit_per_s"),
                            mean / base
                        )?;
                    }
                    Err(e) => {
                        println!("    failed: {e:#}");
                        writeln!(report, "| {load} | {policy} | failed: {e} | | | | | | | |")?;
                    }
                }
            }
            let mean_of = |policy| means.iter().find(|(p, _)| *p == policy).map(|m| m.1);
            if let (Some(scf), Some(rr)) = (mean_of("scf"), mean_of("rr")) {
                ratios.push(format!("{:.2} at load {load}", scf / rr));
            }
        }
        writeln!(report)?;
        if !ratios.is_empty() {
            writeln!(
                report,
                "SCF's mean response time / RR's: {}.\n",
                ratios.join(", ")
            )?;
        }
        Ok(())
    }

    /// One row on a fresh link: a fresh veth pair, or wanem restarted (an
    /// empty queue, its own counters). The server's and the client's last
    /// lines.
    fn row(
        &mut self,
        section: &Section,
        load: f64,
        policy: &str,
        seconds: f64,
    ) -> Result<(String, String)> {
        let workload = section.workload;
        let (sides, _veth, wanem) = match self.wan_path {
            None => {
                let ns = namespaces()?;
                if section.limited {
                    ns.rate_limit(SCHEDULER_RATE)?;
                }
                (sides(&ns), Some(ns), None)
            }
            Some(path) => (
                path.sides(),
                None,
                Some(path.forward(&format!("{workload}-{load}-{policy}"))?),
            ),
        };
        let common = |role: &str| -> Vec<String> {
            [
                role,
                "--addr",
                &sides.addr(SCHEDULER_PORT),
                "--policy",
                policy,
                "--workload",
                workload,
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([
                "--load".into(),
                load.to_string(),
                "--rate-mbit".into(),
                self.rate_mbit.to_string(),
                "--seconds".into(),
                seconds.to_string(),
            ])
            .collect()
        };
        let result = run_pair(
            &sides,
            self.binary,
            &common("--server"),
            &common("--client"),
        );
        if let Some(wanem) = wanem {
            match wanem.stop() {
                Ok(stats) if stats.a_to_b.faults() + stats.b_to_a.faults() > 0 => self.notes.push(format!(
                    "{workload} load {load} {policy}: wanem counted {} frames lost other than by the loss model or the queue (faults)",
                    stats.a_to_b.faults() + stats.b_to_a.faults()
                )),
                Ok(_) => {}
                Err(e) => self.notes.push(format!(
                    "{workload} load {load} {policy}: wanem did not stop cleanly: {e}"
                )),
            }
        }
        result
    }
}

/// The file both servers serve in the static benchmark, under config/demo-site.
const STATIC_PATH: &str = "/assets/tile-01.svg";

/// Where nginx listens in the static benchmark, in the server namespace.
const NGINX_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 78, 0, 1)), 8080);

/// How long each row of `bench static` loads its server, and with how many
/// requests outstanding: the origin's load generator and wrk alike (wrk's
/// `-d` and `-c`), so that the rows differ only in the server and its
/// protocol.
const STATIC_SECONDS: u32 = 10;
const STATIC_OUTSTANDING: u32 = 64;

/// nginx's settings for keeping open files and their metadata between
/// requests, as the origin's small-file cache does (`files.small_file_recheck`
/// is 1 s, like `open_file_cache_valid` here), and sendfile.
const NGINX_TUNED: &str = "sendfile on; open_file_cache max=1000 inactive=20s; \
                           open_file_cache_valid 1s;";

/// nginx with one worker (the origin's runtime is single-threaded too), in the
/// server namespace, killed when the guard drops; its files stay in `dir`.
/// `extra` goes into its `http` block.
fn start_nginx(
    ns: &VethPair,
    root: &Path,
    listen: SocketAddr,
    dir: &Path,
    extra: &str,
) -> Result<Nginx> {
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;\n\
         error_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; {extra} server {{ listen {listen}; root {root}; }} }}\n",
        d = dir.display(),
        root = root.display()
    );
    Nginx::start_with_config(ns.server.name(), &[listen], &conf, dir)
        .context("starting nginx (package nginx-light)")
}

pub(super) fn static_files(options: &BenchOptions) -> Result<()> {
    let root = &workspace_root();
    let binary = build_example_with("origin", "sched_bench", &["baselines"])?;
    if options.callgrind {
        return static_callgrind(&binary);
    }
    if options.flamegraph {
        return static_flamegraph(&binary);
    }
    let site = root.join("config/demo-site");
    let ns = namespaces()?;
    let mut rows = Vec::new();
    for backend in ["userspace", "framed-tcp"] {
        println!(
            "==> origin over {backend}: {STATIC_PATH} for {STATIC_SECONDS} s, {STATIC_OUTSTANDING} outstanding"
        );
        let args = |role: &str| -> Vec<String> {
            [
                role,
                "--addr",
                "10.78.0.1:9899",
                "--backend",
                backend,
                "--workload",
                "static",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([
                "--root".into(),
                site.display().to_string(),
                "--path".into(),
                STATIC_PATH.into(),
                "--seconds".into(),
                STATIC_SECONDS.to_string(),
            ])
            .collect()
        };
        let (_, client) = run_pair(&sides(&ns), &binary, &args("--server"), &args("--client"))?;
        let rate = field(&client, "requests_per_s").unwrap_or(f64::NAN);
        println!("    {rate:.0} requests/s");
        rows.push((
            format!("origin over {backend} (one association, 64 streams)"),
            rate,
        ));
    }
    let nginx_rate = nginx_static(&ns, &site, "")?;
    rows.push((
        "nginx 1 worker, wrk 1 thread, 64 connections (TCP)".into(),
        nginx_rate,
    ));
    let tuned_rate = nginx_static(&ns, &site, NGINX_TUNED)?;
    rows.push((
        "nginx as above, with sendfile and open_file_cache (valid 1 s)".into(),
        tuned_rate,
    ));

    let mut report = report_header("Static-file benchmark", "static")?;
    writeln!(
        report,
        "- path: server and client in two namespaces joined by one veth, no rate limit"
    )?;
    writeln!(
        report,
        "- file: config/demo-site{STATIC_PATH}; every row loads its server for {STATIC_SECONDS} s with {STATIC_OUTSTANDING} requests outstanding: the origin by its load generator (`sched_bench --workload static --seconds {STATIC_SECONDS}`, which speaks the gateway protocol, {STATIC_OUTSTANDING} requests on one association), nginx by wrk (`-t1 -c{STATIC_OUTSTANDING} -d{STATIC_SECONDS}s`, one request at a time on each of {STATIC_OUTSTANDING} connections)"
    )?;
    writeln!(
        report,
        "- nginx's tuned row adds `{NGINX_TUNED}`; the whole path a browser's request takes (through the gateway, cache off, to the origin, against nginx over TCP) is in bench/results/cache.md\n"
    )?;
    writeln!(
        report,
        "| server | requests/s | ratio to nginx | ratio to nginx tuned |"
    )?;
    writeln!(report, "|---|---|---|---|")?;
    for (name, rate) in &rows {
        writeln!(
            report,
            "| {name} | {rate:.0} | {:.2} | {:.2} |",
            rate / nginx_rate,
            rate / tuned_rate
        )?;
    }
    let dir = root.join("bench/results");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("static.md"), &report)?;
    println!("\n{report}\nxtask: report written to bench/results/static.md");
    Ok(())
}

/// wrk's requests per second against nginx serving `site` with `extra` in
/// its `http` block: one thread, [`STATIC_OUTSTANDING`] connections,
/// [`STATIC_SECONDS`].
fn nginx_static(ns: &VethPair, site: &Path, extra: &str) -> Result<f64> {
    let label = if extra.is_empty() { "" } else { " tuned" };
    println!("==> nginx{label}: wrk, {STATIC_OUTSTANDING} connections, {STATIC_SECONDS} s");
    let nginx_dir = tempfile_dir("gwb-nginx")?;
    let nginx = start_nginx(ns, site, NGINX_LISTEN, &nginx_dir, extra)?;
    let out = Command::new("ip")
        .args(["netns", "exec", ns.client.name(), "wrk", "-t1"])
        .arg(format!("-c{STATIC_OUTSTANDING}"))
        .arg(format!("-d{STATIC_SECONDS}s"))
        .arg(format!("http://10.78.0.1:8080{STATIC_PATH}"))
        .output()
        .context("running wrk (package wrk)")?;
    drop(nginx);
    let _ = std::fs::remove_dir_all(&nginx_dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("no Requests/sec in wrk's output:\n{text}"))?;
    println!("    {rate:.0} requests/s");
    Ok(rate)
}

/// Requests of the two callgrind runs of `bench static --callgrind`: the
/// difference of their counts, divided by the difference of these, is the
/// cost of one request without the start-up and the association's set-up.
const STATIC_CALLGRIND_COUNTS: [usize; 2] = [500, 4500];

/// Functions listed with their inclusive cost in the callgrind reports.
const CALLGRIND_TOP: usize = 40;

/// `sched_bench`'s arguments for `role` in the static workload: `count`
/// requests for [`STATIC_PATH`] under `site` over `backend`.
fn static_args(role: &str, backend: &str, site: &Path, count: usize) -> Vec<String> {
    let mut v: Vec<String> = [
        role,
        "--addr",
        "10.78.0.1:9899",
        "--backend",
        backend,
        "--workload",
        "static",
        "--path",
        STATIC_PATH,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend([
        "--root".into(),
        site.display().to_string(),
        "--count".into(),
        count.to_string(),
    ]);
    v
}

/// Requests of `bench static --flamegraph`'s run.
const FLAMEGRAPH_COUNT: usize = 20_000;

/// `bench static --flamegraph`: a flame graph of the origin serving the
/// static file over userspace SCTP, the server side of `sched_bench` under
/// `perf record` (DWARF stacks), the load generator natively; written to
/// bench/results/static-flamegraph.svg.
fn static_flamegraph(binary: &Path) -> Result<()> {
    let root = workspace_root();
    let site = root.join("config/demo-site");
    let ns = namespaces()?;
    let scratch = tempfile_dir("gwb-static-flamegraph")?;
    let perf_data = scratch.join("perf.data");
    println!("==> perf record on the origin: {FLAMEGRAPH_COUNT} requests over userspace");
    let mut server: Vec<String> = ["perf", "record", "-F", "499", "--call-graph", "dwarf", "-o"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    server.extend([
        perf_data.display().to_string(),
        "--".into(),
        binary.display().to_string(),
    ]);
    server.extend(static_args(
        "--server",
        "userspace",
        &site,
        FLAMEGRAPH_COUNT,
    ));
    let mut client = vec![binary.display().to_string()];
    client.extend(static_args(
        "--client",
        "userspace",
        &site,
        FLAMEGRAPH_COUNT,
    ));
    run_pair_wrapped(&ns, &server, &client)?;
    let svg = root.join("bench/results/static-flamegraph.svg");
    super::common::flamegraph(
        &perf_data,
        &svg,
        "origin: static file over userspace SCTP, 64 outstanding, under perf",
    )?;
    let _ = std::fs::remove_dir_all(&scratch);
    println!("xtask: flame graph written to bench/results/static-flamegraph.svg");
    Ok(())
}

/// `bench static --callgrind`: the origin's instructions per static-file
/// request, over each backend: the server side of `sched_bench` under
/// callgrind (the load generator runs natively), two runs of different
/// request counts. Writes bench/results/static-callgrind.md and keeps the
/// larger run's callgrind files in the target directory's
/// bench-static-callgrind/ (they name the machine's paths: not for the
/// repository).
fn static_callgrind(binary: &Path) -> Result<()> {
    let root = workspace_root();
    let site = root.join("config/demo-site");
    let kept = testbed::target_dir().join("bench-static-callgrind");
    std::fs::create_dir_all(&kept)?;
    let ns = namespaces()?;
    let scratch = tempfile_dir("gwb-static-callgrind")?;
    let mut report = report_header(
        "Static-file requests: the origin's instructions per request (callgrind)",
        "static --callgrind",
    )?;
    let [small, large] = STATIC_CALLGRIND_COUNTS;
    writeln!(
        report,
        "- path: `sched_bench --workload static` (the origin's association driver and file service) under `valgrind --tool=callgrind` in one namespace, its load generator natively in the other, one veth; 64 requests outstanding\n\
         - file: config/demo-site{STATIC_PATH}\n\
         - instructions per request: (instructions of a {large}-request run - those of a {small}-request run) / {}, user space only (the kernel's share of each system call is not counted)\n",
        large - small
    )?;
    writeln!(report, "| backend | instructions per request |")?;
    writeln!(report, "|---|---|")?;
    let mut tops = String::new();
    for backend in ["userspace", "framed-tcp"] {
        let mut totals = Vec::new();
        for count in STATIC_CALLGRIND_COUNTS {
            println!("==> callgrind: origin over {backend}, {count} requests for {STATIC_PATH}");
            let out = scratch.join(format!("{backend}-{count}.out"));
            let args = |role: &str| static_args(role, backend, &site, count);
            let mut server = vec![
                "valgrind".to_owned(),
                "--tool=callgrind".into(),
                format!("--callgrind-out-file={}", out.display()),
                binary.display().to_string(),
            ];
            server.extend(args("--server"));
            let mut client = vec![binary.display().to_string()];
            client.extend(args("--client"));
            run_pair_wrapped(&ns, &server, &client)?;
            totals.push(callgrind_total(&out)?);
            if count == large {
                let keep = kept.join(format!("{backend}.callgrind"));
                std::fs::copy(&out, &keep)
                    .with_context(|| format!("keeping {}", keep.display()))?;
                writeln!(
                    tops,
                    "\n## {backend}: top inclusive costs of the {large}-request run (% of its instructions)\n\n\
                     | % | function |\n|---|---|"
                )?;
                tops.push_str(&super::common::callgrind_top(&out, CALLGRIND_TOP)?);
            }
        }
        let per_request = (totals[1] as f64 - totals[0] as f64) / (large - small) as f64;
        println!("    {per_request:.0} instructions per request");
        writeln!(report, "| {backend} | {per_request:.0} |")?;
    }
    report.push_str(&tops);
    let _ = std::fs::remove_dir_all(&scratch);
    let path = root.join("bench/results/static-callgrind.md");
    std::fs::write(&path, &report)?;
    println!("\n{report}\nxtask: report written to bench/results/static-callgrind.md");
    Ok(())
}

pub(super) fn transport(options: &BenchOptions) -> Result<()> {
    if options.seconds.is_some() {
        bail!("--seconds times the cells of transport --wan; the veth cells move --bytes");
    }
    let root = &workspace_root();
    let binary = build_example_with("gateway-transport", "transport_bench", &["baselines"])?;
    let mut flags = String::new();
    if options.rate_limited {
        flags.push_str(" --rate-limited");
    }
    if options.callgrind {
        flags.push_str(" --callgrind");
    }
    let mut report = report_header("Transport benchmark", &format!("transport{flags}"))?;
    writeln!(
        report,
        "- path: two network namespaces joined by one veth pair; each side one process, single-threaded tokio runtime"
    )?;
    writeln!(
        report,
        "- bulk cells send {} MiB; small-message cells send 1/256 of that",
        options.bytes >> 20
    )?;
    writeln!(
        report,
        "- CPU s/GB: user+system CPU of both processes per 10^9 payload bytes\n"
    )?;

    let links: Vec<Option<&str>> = if options.rate_limited {
        vec![None, Some("100mbit")]
    } else {
        vec![None]
    };
    for link in links {
        let ns = namespaces()?;
        if let Some(rate) = link {
            ns.rate_limit(rate)?;
        }
        let link_name = link.map_or("unlimited veth".to_owned(), |r| {
            format!("veth with TBF {r}")
        });
        for (label, size, streams, divisor) in CELLS {
            let bytes = (options.bytes / divisor).max(size as u64);
            let bytes = if link.is_some() {
                bytes.min(200 << 20)
            } else {
                bytes
            };
            writeln!(report, "## {label}, {link_name}\n")?;
            writeln!(
                report,
                "| backend | Mbit/s | messages/s | ratio to TCP | CPU s/GB |"
            )?;
            writeln!(report, "|---|---|---|---|---|")?;
            let mut tcp_rate = None;
            for backend in BACKENDS {
                println!("==> {label}, {link_name}: {backend}");
                match run_cell(&ns, &binary, backend, size, streams, bytes) {
                    Ok((m, client_cpu)) => {
                        let rate = m.mbit_per_s;
                        let base = *tcp_rate.get_or_insert(rate);
                        let cpu_per_gb = (m.cpu_seconds + client_cpu) / (m.bytes / 1e9).max(1e-9);
                        println!("    {rate:.0} Mbit/s, {:.0} msg/s", m.messages_per_s);
                        writeln!(
                            report,
                            "| {backend} | {rate:.0} | {:.0} | {:.2} | {cpu_per_gb:.2} |",
                            m.messages_per_s,
                            rate / base.max(1e-9)
                        )?;
                    }
                    Err(e) => {
                        println!("    failed: {e:#}");
                        writeln!(report, "| {backend} | failed: {e} | | | |")?;
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            writeln!(report)?;
        }
    }
    if options.callgrind {
        callgrind_section(&mut report, &binary)?;
    }
    let dir = root.join("bench/results");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("transport.md");
    std::fs::write(&path, &report)?;
    println!("\n{report}\nxtask: report written to bench/results/transport.md");
    Ok(())
}

/// Payload the callgrind cells move, bytes per (message size) row: small
/// enough for valgrind's slowdown, large enough that start-up is noise.
const CALLGRIND_CELLS: [(&str, usize, u64); 2] = [
    ("bulk 16 KiB messages, 8 streams", 16 * 1024, 32 << 20),
    ("small 64 B messages, 8 streams", 64, 1 << 20),
];

/// Instructions per payload byte of each backend, from callgrind (both
/// processes' instruction counts summed): a figure that does not move with
/// the machine's load, unlike the rates above.
fn callgrind_section(report: &mut String, binary: &Path) -> Result<()> {
    let ns = namespaces()?;
    let scratch = tempfile_dir("gwb-callgrind")?;
    writeln!(
        report,
        "## instructions per payload byte (callgrind), unlimited veth\n\nBoth processes under `valgrind --tool=callgrind`; their instruction counts summed, divided by the payload.\n"
    )?;
    writeln!(
        report,
        "| backend | {} |",
        CALLGRIND_CELLS.map(|c| c.0).join(" | ")
    )?;
    writeln!(report, "|---|{}", "---|".repeat(CALLGRIND_CELLS.len()))?;
    for backend in BACKENDS {
        let mut row = format!("| {backend} |");
        for (label, size, bytes) in CALLGRIND_CELLS {
            println!("==> callgrind {label}: {backend}");
            let args = |role: &str| {
                vec![
                    role.to_owned(),
                    "--backend".into(),
                    backend.into(),
                    "--addr".into(),
                    "10.78.0.1:9899".into(),
                    "--size".into(),
                    size.to_string(),
                    "--streams".into(),
                    "8".into(),
                    "--bytes".into(),
                    bytes.to_string(),
                ]
            };
            let out = |side: &str| scratch.join(format!("{backend}-{size}-{side}.out"));
            let wrap = |side: &str, role: &str| {
                let mut v = vec![
                    "valgrind".to_owned(),
                    "--tool=callgrind".into(),
                    format!("--callgrind-out-file={}", out(side).display()),
                    binary.display().to_string(),
                ];
                v.extend(args(role));
                v
            };
            let result = run_pair_wrapped(&ns, &wrap("srv", "--server"), &wrap("cli", "--client"))
                .and_then(|_| Ok(callgrind_total(&out("srv"))? + callgrind_total(&out("cli"))?));
            match result {
                Ok(instructions) => {
                    let per_byte = instructions as f64 / bytes as f64;
                    println!("    {per_byte:.1} instructions per byte");
                    write!(row, " {per_byte:.1} |")?;
                }
                Err(e) => {
                    println!("    failed: {e:#}");
                    write!(row, " failed: {e} |")?;
                }
            }
        }
        writeln!(report, "{row}")?;
    }
    writeln!(report)?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// As `run_pair`, with each side's whole command line given (a wrapper such
/// as valgrind first).
fn run_pair_wrapped(ns: &VethPair, server: &[String], client: &[String]) -> Result<()> {
    let spawn = |netns: &str, argv: &[String]| {
        Command::new("ip")
            .args(["netns", "exec", netns])
            .args(argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {} in {netns}", argv.join(" ")))
    };
    let mut server = spawn(ns.server.name(), server)?;
    let mut server_out = BufReader::new(server.stdout.take().context("server stdout")?);
    let mut ready = String::new();
    server_out.read_line(&mut ready)?;
    if !ready.contains("ready") {
        let _ = server.kill();
        bail!("server did not start");
    }
    let client = spawn(ns.client.name(), &with_pin(&ready, client))?.wait_with_output()?;
    if !client.status.success() {
        let _ = server.kill();
        let _ = server.wait();
        bail!("client failed ({})", client.status);
    }
    let status = server.wait()?;
    if !status.success() {
        bail!("server failed ({status})");
    }
    Ok(())
}

/// Repetitions of each crafted frame in `bench ebpf`'s cost table.
const EBPF_REPEAT: u32 = 1_000_000;
/// Rounds of each kind (detached, attached) in `bench ebpf`'s throughput
/// table, alternating.
const EBPF_ROUNDS: usize = 4;
/// The throughput ratio (attached / detached) issue 17 asks for.
const EBPF_TARGET_RATIO: f64 = 0.97;

/// `ebpf_bench hold` in `netns`: `xdp_sctp` and `tc_sctp` on its veth0 until
/// dropped (its stdin closes, it prints its counters and detaches; killed
/// if it does not end).
struct EbpfHold {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl EbpfHold {
    /// Attaches both programs to veth0 in `netns`, `xdp_sctp` in `mode`
    /// (`auto`, `generic` or `driver`).
    fn start(netns: &str, binary: &Path, object: &Path, mode: &str) -> Result<Self> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", netns])
            .arg(binary)
            .arg("hold")
            .arg(object)
            .arg("veth0")
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting ebpf_bench hold in {netns}"))?;
        let mut out = BufReader::new(child.stdout.take().context("hold stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        let hold = Self { child, out };
        if line.trim() != "attached" {
            bail!("ebpf_bench hold in {netns} did not attach: {line:?}");
        }
        Ok(hold)
    }

    /// Detaches; returns the programs' counters (a JSON line).
    fn stop(mut self) -> Result<String> {
        drop(self.child.stdin.take());
        let mut line = String::new();
        self.out.read_line(&mut line)?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("ebpf_bench hold failed ({status})");
        }
        Ok(line.trim().to_owned())
    }
}

impl Drop for EbpfHold {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(super) fn ebpf(options: &BenchOptions) -> Result<()> {
    let root = &workspace_root();
    let object = crate::ebpf::build(&crate::ebpf::BuildOptions::default())?;
    let probe = build_example("gateway", "ebpf_bench")?;
    let transport = build_example_with("gateway-transport", "transport_bench", &["baselines"])?;
    let subcommand = if options.rate_limited {
        "ebpf --rate-limited"
    } else {
        "ebpf"
    };
    let mut report = report_header("eBPF programs: cost per packet and throughput", subcommand)?;
    writeln!(
        report,
        "- load average at the start: {}\n",
        super::common::load_average()
    )?;

    ebpf_cost(&mut report, &probe, &object)?;
    ebpf_throughput(&mut report, options, &probe, &object, &transport, None)?;
    if options.rate_limited {
        let rate = Some(EBPF_LINK_RATE);
        ebpf_throughput(&mut report, options, &probe, &object, &transport, rate)?;
    }
    writeln!(
        report,
        "- load average at the end: {}",
        super::common::load_average()
    )?;
    let dir = root.join("bench/results");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("ebpf.md"), &report)?;
    println!("\n{report}\nxtask: report written to bench/results/ebpf.md");
    Ok(())
}

/// The cost table: `ebpf_bench cost` runs each program on crafted frames
/// through BPF_PROG_TEST_RUN and prints one JSON line per frame.
fn ebpf_cost(report: &mut String, probe: &Path, object: &Path) -> Result<()> {
    println!("==> cost per packet: BPF_PROG_TEST_RUN, {EBPF_REPEAT} repetitions per frame");
    let out = Command::new(probe)
        .arg("cost")
        .arg(object)
        .arg(EBPF_REPEAT.to_string())
        .output()
        .context("running ebpf_bench cost")?;
    if !out.status.success() {
        bail!(
            "ebpf_bench cost failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    writeln!(
        report,
        "## Cost per packet (BPF_PROG_TEST_RUN, {EBPF_REPEAT} repetitions, the kernel's mean)\n"
    )?;
    writeln!(report, "| program | frame | frame bytes | ns per packet |")?;
    writeln!(report, "|---|---|---|---|")?;
    let mut verified = Vec::new();
    for line in text.lines() {
        let string = |key: &str| {
            line.split(&format!("\"{key}\":\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("?")
                .to_owned()
        };
        let program = string("program");
        if let Some(count) = field(line, "verified_instructions") {
            verified.push(format!("{program} {count:.0}"));
            continue;
        }
        writeln!(
            report,
            "| {program} | {} | {:.0} | {:.0} |",
            string("frame"),
            field(line, "bytes").unwrap_or(f64::NAN),
            field(line, "ns").unwrap_or(f64::NAN)
        )?;
    }
    writeln!(
        report,
        "\nInstructions the verifier processed to accept each program (limit 1,000,000): {}.\n",
        verified.join(", ")
    )?;

    Ok(())
}

/// The rate of `bench ebpf --rate-limited`'s link: a router's WAN port.
const EBPF_LINK_RATE: &str = "1gbit";

/// The throughput rounds: detached and attached alternately, then the ratio
/// of their means against the target; over the bare veth, or a veth whose
/// both ends are shaped to `rate` (tc's TBF).
fn ebpf_throughput(
    report: &mut String,
    options: &BenchOptions,
    probe: &Path,
    object: &Path,
    transport: &Path,
    rate: Option<&str>,
) -> Result<()> {
    /// What a round runs with: nothing, or both programs with `xdp_sctp` in
    /// this XDP mode.
    const KINDS: [Option<&str>; 3] = [None, Some("driver"), Some("generic")];
    let bytes = options.bytes / 2;
    let (size, streams) = (16 * 1024, 8);
    let link = rate.map_or_else(
        || "no rate limit".to_owned(),
        |rate| format!("both ends shaped to {rate} (TBF, burst 64 KB)"),
    );
    writeln!(
        report,
        "## Throughput, userspace SCTP over UDP (RFC 6951 port), attached against detached, {}\n",
        rate.map_or_else(|| "bare veth".to_owned(), |rate| format!("{rate} link"))
    )?;
    writeln!(
        report,
        "- path: two namespaces joined by one veth pair, {link}; `transport_bench` with the userspace backend (its defaults: UDP GSO/GRO on, BBR), {streams} streams of {} KiB messages, {} MiB per round",
        size / 1024,
        bytes >> 20
    )?;
    writeln!(
        report,
        "- attached: `xdp_sctp` at the ingress and `tc_sctp` at the egress of veth0 in both namespaces, so every packet of both directions crosses both programs; `xdp_sctp` in native (driver) mode or in generic (skb) mode; rounds rotate detached, native, generic, {EBPF_ROUNDS} of each. Native XDP on a veth makes the peer segment its GSO packets before they cross (the XDP program sees every wire-sized packet), generic XDP runs on the skb after GRO\n"
    )?;
    writeln!(report, "| round | programs | Mbit/s | walker counters |")?;
    writeln!(report, "|---|---|---|---|")?;
    let ns = namespaces()?;
    if let Some(rate) = rate {
        ns.rate_limit(rate)?;
    }
    let mut rates: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..KINDS.len() * EBPF_ROUNDS {
        let kind = round % KINDS.len();
        let label = KINDS[kind].map_or("detached".to_owned(), |mode| {
            format!("attached, XDP {mode}")
        });
        println!("==> round {}: {label}", round + 1);
        let holds = match KINDS[kind] {
            Some(mode) => vec![
                EbpfHold::start(ns.server.name(), probe, object, mode)?,
                EbpfHold::start(ns.client.name(), probe, object, mode)?,
            ],
            None => Vec::new(),
        };
        let result = run_cell(&ns, transport, "userspace", size, streams, bytes);
        let mut counters = Vec::new();
        for hold in holds {
            counters.push(hold.stop()?);
        }
        let (measured, _) = result?;
        println!("    {:.0} Mbit/s", measured.mbit_per_s);
        rates[kind].push(measured.mbit_per_s);
        writeln!(
            report,
            "| {} | {label} | {:.0} | {} |",
            round + 1,
            measured.mbit_per_s,
            counters.join(" ")
        )?;
        std::thread::sleep(Duration::from_millis(200));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let detached = mean(&rates[0]);
    writeln!(report)?;
    for (kind, mode) in KINDS.iter().enumerate().skip(1) {
        let attached = mean(&rates[kind]);
        let ratio = attached / detached.max(1e-9);
        writeln!(
            report,
            "- XDP {}: mean {attached:.0} Mbit/s against {detached:.0} detached, ratio {ratio:.3} (target ≥ {EBPF_TARGET_RATIO}: {})",
            mode.unwrap_or("?"),
            if ratio >= EBPF_TARGET_RATIO {
                "met"
            } else {
                "NOT met"
            }
        )?;
    }
    writeln!(report)?;
    Ok(())
}
