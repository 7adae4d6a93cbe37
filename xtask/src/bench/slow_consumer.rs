//! `cargo xtask bench slow-consumer`: one browser that reads at 1 Mbit/s
//! beside three fast downloads, all through the gateway and one association
//! over the WAN emulator, with the gateway's FEEDBACK off, on, and on with
//! the gateway's eBPF programs attached (issues 17 and 32).
//!
//! ```text
//!  client ns: curl ×3 (fast) + curl whose output is read at 125 kB/s (slow)
//!      │ LAN (unemulated)
//!  gateway ns: gateway (cache and prefetch off) ── wanem (--wan) ── origin (queue-aware)
//! ```
//!
//! Each cell restarts the gateway with `feedback.enabled` (and the eBPF
//! object, for that setup) for the cell, then runs two phases on the same
//! association: the fast downloads alone, then the slow browser first and the
//! fast downloads [`FAST_DELAY`] later. The figure is the fast downloads'
//! aggregate rate with the slow browser against without it (the issue's
//! target: at least 0.90 with feedback on, in every round). Every [`SAMPLE`]
//! the gateway's `/metrics` gives the largest per-stream backlog, which with
//! feedback on should stay within the origin's `backlog_window` plus one round
//! trip at the link's rate. Each link rate (`--rate`, 20 and 100 Mbit/s unless
//! given) runs `--rounds` rounds (5); the setups' order rotates from round to
//! round so that drift on a shared machine hits all of them. The report gives
//! every cell, then per rate and setup the spread of the ratio over the
//! rounds; bench/results/slow-consumer/cells.csv has the cells.
//!
//! For diagnosis, each cell's per-flow bytes per 100 ms (Unix milliseconds)
//! and its gateway log are kept under the target directory's
//! `bench-slow-consumer/cells/`; run with `TESTBED_DAEMON_LOG=info,
//! origin::schedule=debug,gateway::feedback=debug` to have the origin's
//! scheduler figures and the FEEDBACK reports in the logs beside them
//! (docs/operations.md).

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testbed::exec_in;
use testbed::topology::SITE_V4;
use testbed::{Binaries, Demo, DemoOptions, DemoWan, GatewayConfigOverrides};

use super::link::WanCell;
use crate::cmd::workspace_root;
use crate::plot::{self, Series};
use crate::shipped::ShippedConfig;

/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwsc-";
/// Fast downloads at once.
const FAST_FLOWS: usize = 3;
/// The slow browser's pace, bytes per second (1 Mbit/s): this process reads
/// curl's output no faster, steadily, so curl reads its socket at that pace
/// and the socket's receive window stays small, as a browser's behind a slow
/// link. curl's own `--limit-rate` was not used: it reads in bursts (nothing,
/// then all that piled up), so Linux grew the socket's buffer to megabytes,
/// acknowledged bytes the browser had not read, and the gateway saw a fast
/// reader (bench/results/slow-consumer.md, 2026-11-29 05:01, round 1).
const SLOW_RATE: u64 = 125_000;
/// The slow reader's pace is kept in steps this long.
const SLOW_STEP: Duration = Duration::from_millis(20);
/// How long after the slow browser the fast downloads start, so that its
/// backlog has built up when they run.
const FAST_DELAY: Duration = Duration::from_secs(3);
/// How often the gateway's per-stream figures are read.
const SAMPLE: Duration = Duration::from_millis(500);
/// The origin's `response_scheduler.backlog_window` in this benchmark (its default).
const BACKLOG_WINDOW: u64 = 1_048_576;
/// The gateway's admin endpoint (config/gateway.toml).
const ADMIN: &str = "http://127.0.0.1:3130/metrics";
/// How to read the table, under it.
const NOTES: &str = "How to read it:
- **ratio**: the fast downloads' aggregate rate beside the slow browser over their rate alone. With FEEDBACK off the origin keeps sending the slow browser's stream; its bytes fill the gateway's queue for it, the gateway stops taking that stream from the association, and the association's receive window, which every stream shares, fills with them: the other streams stall too (head-of-line blocking one level up). The gateway cancels a response whose reader stalls for 5 s.
- **each**: the origin's queue-aware policy is shortest-remaining-first among the streams it may send on, so of three equal, endless downloads it serves the ones ahead and starves the last (0.0): that is SCF's rule, not a fault of the feedback; the aggregate is what the table compares.
- **largest backlog**: with FEEDBACK on, each report carries the bytes that had arrived on the stream when the gateway measured it, and the origin counts everything it wrote beyond them as on its way (docs/gateway-origin-link.md, \"What the origin counts\"), so a slow browser's stream stops at its window plus one chunk; the bound checked is the issue's, the window plus one round trip at the link's rate. The sample is the gateway's, every 500 ms, so a short peak between samples is missed.
- **on, eBPF**: the same FEEDBACK, with the gateway's programs attached (xdp_sctp counting DATA per stream on the WAN side, tc_tcp_egress and tc_tcp_ingress counting bytes in flight per browser flow on the LAN side); FEEDBACK's figures still come from userspace (docs/ebpf.md), so this row shows what the programs cost the loop, not a different figure.";

/// Rounds per link rate when `--rounds` is not given.
pub(crate) const DEFAULT_ROUNDS: usize = 5;
/// Link rates when neither `--rate` nor `--wan` is given, Mbit/s.
pub(crate) const DEFAULT_RATES: [u64; 2] = [20, 100];
/// The link when `--wan` is not given: the scheduler benchmark's round trip
/// and rate, no loss.
pub(crate) const DEFAULT_CELL: WanCell = WanCell {
    rtt_ms: 80,
    loss_percent: 0.0,
    rate_mbit: 20,
};

/// Options for `cargo xtask bench slow-consumer`.
#[derive(Debug, Clone)]
pub(crate) struct SlowConsumerBench {
    /// The link between the gateway and the origin (its rate is replaced by
    /// each of `rates`).
    pub cell: WanCell,
    /// Link rates, Mbit/s, one demo each.
    pub rates: Vec<u64>,
    /// Rounds per rate.
    pub rounds: usize,
    /// Seconds the fast downloads run in each phase.
    pub seconds: f64,
}

/// How the gateway runs in a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// FEEDBACK off.
    Off,
    /// FEEDBACK on, no eBPF object.
    On,
    /// FEEDBACK on, with `xdp_sctp` on the WAN interface and the TC TCP
    /// programs on the LAN one.
    OnEbpf,
}

impl Setup {
    const ALL: [Setup; 3] = [Setup::Off, Setup::On, Setup::OnEbpf];

    fn name(self) -> &'static str {
        match self {
            Setup::Off => "off",
            Setup::On => "on",
            Setup::OnEbpf => "on, eBPF",
        }
    }

    fn feedback(self) -> bool {
        self != Setup::Off
    }
}

/// One round's figures for one setup.
#[derive(Debug, Clone)]
struct Cell {
    rate_mbit: u64,
    round: usize,
    setup: Setup,
    /// Fast downloads' aggregate bytes per second, alone.
    alone: f64,
    /// The same beside the slow browser.
    beside_slow: f64,
    /// Each fast download's bytes per second, alone and beside the slow one.
    alone_flows: Vec<f64>,
    beside_flows: Vec<f64>,
    /// The slow browser's bytes per second over its whole run (its reader
    /// keeps the pace in [`SLOW_STEP`] steps).
    slow: f64,
    /// Seconds after its start at which the gateway ended the slow
    /// browser's response, if it did (curl: "transfer closed").
    slow_cut_at: Option<f64>,
    /// Fast downloads whose response the gateway ended early.
    fast_cut: usize,
    /// Largest per-stream backlog the gateway reported, bytes.
    peak_backlog: u64,
    /// (seconds since the phase began, bytes per second) per flow, slow first.
    timelines: Vec<Vec<(f64, f64)>>,
    /// Every flow of the second phase, slow first, for the fine time series.
    flows: Vec<Received>,
}

pub(crate) fn run(options: SlowConsumerBench) -> Result<()> {
    let built = crate::run::build(&["gateway", "origin", "wanem"])?;
    let binaries = Binaries {
        gateway: built[0].clone(),
        origin: built[1].clone(),
    };
    let object = crate::ebpf::build(&crate::ebpf::BuildOptions::default())
        .context("building the gateway's eBPF programs for the eBPF row")?;
    let dir = testbed::target_dir().join("bench-slow-consumer");
    let _ = std::fs::remove_dir_all(&dir);
    testbed::cleanup_stale(PREFIX)?;
    let load_before = super::common::load_average();
    let mut cells = Vec::new();
    for &rate_mbit in &options.rates {
        let cell = WanCell {
            rate_mbit,
            ..options.cell
        };
        let site = write_site(&dir.join("site"), file_bytes(cell, options.seconds))?;
        let mut demo_options = DemoOptions::new(PREFIX, &workspace_root(), &dir);
        demo_options.origin_root = Some(site);
        demo_options.origin_config = Some(queue_aware_origin_config(&dir)?);
        demo_options.gateway = overrides(Setup::Off, &object);
        demo_options.wan = Some(DemoWan {
            wanem: built[2].clone(),
            params: cell.params(),
        });
        println!("==> starting the demo over {cell}");
        let mut demo = Demo::start(binaries.clone(), demo_options)?;
        let rounds = options.rounds;
        for round in 0..rounds {
            for i in 0..Setup::ALL.len() {
                let setup = Setup::ALL[(i + round) % Setup::ALL.len()];
                demo.restart_gateway(overrides(setup, &object))?;
                let cell = run_cell(&demo, rate_mbit, round, setup, options.seconds)?;
                keep_cell_traces(&demo, &cell)?;
                println!(
                    "    {rate_mbit} Mbit/s, round {}/{rounds}, feedback {}: fast {:.1} Mbit/s alone, {:.1} beside the slow browser ({:.2}); slow {:.2} Mbit/s{}; largest backlog {} KiB",
                    round + 1,
                    setup.name(),
                    mbit(cell.alone),
                    mbit(cell.beside_slow),
                    cell.ratio(),
                    mbit(cell.slow),
                    cell.slow_cut_at
                        .map(|at| format!(", cut by the gateway after {at:.1} s"))
                        .unwrap_or_default(),
                    cell.peak_backlog / 1024,
                );
                cells.push(cell);
            }
        }
        if let Some(gateway) = demo.gateway.as_mut() {
            let _ = gateway.stop(Duration::from_secs(10));
        }
        drop(demo);
    }
    let load = format!(
        "{load_before} before, {} after",
        super::common::load_average()
    );
    write_report(&cells, &options, &load)
}

impl Cell {
    fn ratio(&self) -> f64 {
        self.beside_slow / self.alone
    }
}

fn mbit(bytes_per_second: f64) -> f64 {
    bytes_per_second * 8.0 / 1e6
}

/// Per-flow rates in Mbit/s, `a / b / c`.
fn each(rates: &[f64]) -> String {
    let parts: Vec<String> = rates.iter().map(|r| format!("{:.1}", mbit(*r))).collect();
    parts.join(" / ")
}

/// The gateway's configuration for a cell: no cache and no prefetch, so that
/// every byte crosses the association, FEEDBACK as the setup says, and the
/// eBPF `object` on the WAN interface (and so the LAN ones) for `OnEbpf`.
fn overrides(setup: Setup, object: &Path) -> GatewayConfigOverrides {
    let ebpf = setup == Setup::OnEbpf;
    GatewayConfigOverrides {
        cache_enabled: Some(false),
        prefetch_enabled: Some(false),
        feedback_enabled: Some(setup.feedback()),
        ebpf_object: ebpf.then(|| object.to_owned()),
        ebpf_interface: ebpf.then(|| testbed::topology::WAN_IF.to_owned()),
        ..GatewayConfigOverrides::default()
    }
}

/// Large enough that no fast download ends within a phase: the link's whole
/// rate for the phase, at least 64 MiB.
fn file_bytes(cell: WanCell, seconds: f64) -> u64 {
    let phase = seconds + FAST_DELAY.as_secs_f64() + 5.0;
    ((cell.rate_mbit as f64 * 1e6 / 8.0 * phase) as u64).max(64 << 20)
}

/// The site: an index and `large.bin` of `bytes` (sparse: zeros on disk
/// cost nothing, and the origin reads them like any file).
fn write_site(dir: &Path, bytes: u64) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><title>slow consumer</title>\n",
    )?;
    let file = std::fs::File::create(dir.join("large.bin"))?;
    file.set_len(bytes)?;
    Ok(dir.to_owned())
}

/// config/origin.toml with `response_scheduler.policy = "queue-aware"` and the
/// shipped `backlog_window` checked against [`BACKLOG_WINDOW`].
fn queue_aware_origin_config(dir: &Path) -> Result<PathBuf> {
    let mut origin = ShippedConfig::read("origin.toml")?;
    let scheduler = origin.table("response_scheduler")?;
    scheduler.insert("policy".into(), "queue-aware".into());
    let window = scheduler
        .get("backlog_window")
        .and_then(toml::Value::as_integer);
    if window != Some(BACKLOG_WINDOW as i64) {
        bail!(
            "config/origin.toml's backlog_window is {window:?}, this benchmark reports against {BACKLOG_WINDOW}"
        );
    }
    origin.write(
        dir,
        "origin.toml",
        "the queue-aware response scheduler (bench slow-consumer)",
    )
}

/// Both phases of one cell on the running gateway.
fn run_cell(demo: &Demo, rate_mbit: u64, round: usize, setup: Setup, seconds: f64) -> Result<Cell> {
    let client = demo.topology.client.name();
    let gateway = demo.topology.gateway.name();
    let phase = Duration::from_secs_f64(seconds);
    wait_origin_up(gateway)?;
    let attached = admin_metrics(gateway)?
        .lines()
        .any(|l| l == "gateway_stream_accounting_ebpf 1");
    if attached != (setup == Setup::OnEbpf) {
        bail!(
            "the gateway's eBPF programs are {} in the \"{}\" setup (gateway_stream_accounting_ebpf)",
            if attached { "attached" } else { "not attached" },
            setup.name()
        );
    }
    let alone = finish_all(start_fast(client, phase)?)?;
    let sampler = BacklogSampler::start(gateway);
    let started = Instant::now();
    let slow = Download::start(client, Some(SLOW_RATE), phase + FAST_DELAY)?;
    std::thread::sleep(FAST_DELAY);
    let beside = finish_all(start_fast(client, phase)?)?;
    let slow = slow.finish()?;
    let peak_backlog = sampler.stop();
    let mut timelines = vec![slow.timeline(started)];
    timelines.extend(beside.iter().map(|f| f.timeline(started)));
    let slow_bytes = slow.bytes();
    let slow_cut_at = slow.cut.is_some().then(|| slow.span());
    let rates = |flows: &[Received]| flows.iter().map(|f| f.bytes() as f64 / seconds).collect();
    let alone_flows: Vec<f64> = rates(&alone);
    let beside_flows: Vec<f64> = rates(&beside);
    Ok(Cell {
        rate_mbit,
        round,
        setup,
        alone: alone_flows.iter().sum(),
        beside_slow: beside_flows.iter().sum(),
        alone_flows,
        beside_flows,
        slow: slow_bytes as f64 / (seconds + FAST_DELAY.as_secs_f64()),
        slow_cut_at,
        fast_cut: alone
            .iter()
            .chain(&beside)
            .filter(|f| f.cut.is_some())
            .count(),
        peak_backlog,
        timelines,
        flows: std::iter::once(slow).chain(beside).collect(),
    })
}

/// How fine the kept time series is.
const FINE: Duration = Duration::from_millis(100);

/// Keeps, beside the demo's logs, what a cell's second phase looked like:
/// each flow's bytes per [`FINE`] interval, timestamped in Unix milliseconds
/// so that it lines up with the daemons' logs (`TESTBED_DAEMON_LOG` with
/// `origin::schedule=debug,gateway::feedback=debug` adds the origin's
/// scheduler decisions and the gateway's FEEDBACK), and the gateway's log,
/// which its next restart truncates.
fn keep_cell_traces(demo: &Demo, cell: &Cell) -> Result<()> {
    let dir = demo.dir().join("cells");
    std::fs::create_dir_all(&dir)?;
    let name = format!(
        "{}-round{}-{}",
        cell.rate_mbit,
        cell.round + 1,
        cell.setup.name().replace(", ", "-")
    );
    let mut out = String::from("unix_ms,flow,bytes\n");
    let now = (Instant::now(), std::time::SystemTime::now());
    let unix_ms = |at: Instant| -> u128 {
        let wall = now.1 - now.0.duration_since(at);
        wall.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    for (i, flow) in cell.flows.iter().enumerate() {
        let label = if i == 0 {
            "slow".to_owned()
        } else {
            format!("fast{i}")
        };
        let mut bin_start = flow.started;
        let mut last = 0;
        let mut at_bin_start = 0;
        for &(when, total) in &flow.reads {
            while when.duration_since(bin_start) >= FINE {
                writeln!(
                    out,
                    "{},{label},{}",
                    unix_ms(bin_start),
                    last - at_bin_start
                )?;
                bin_start += FINE;
                at_bin_start = last;
            }
            last = total;
        }
        writeln!(
            out,
            "{},{label},{}",
            unix_ms(bin_start),
            last - at_bin_start
        )?;
    }
    std::fs::write(dir.join(format!("{name}.csv")), out)?;
    let _ = std::fs::copy(
        demo.dir().join("gateway.log"),
        dir.join(format!("{name}-gateway.log")),
    );
    Ok(())
}

fn start_fast(client: &str, phase: Duration) -> Result<Vec<Download>> {
    (0..FAST_FLOWS)
        .map(|_| Download::start(client, None, phase))
        .collect()
}

fn finish_all(downloads: Vec<Download>) -> Result<Vec<Received>> {
    downloads.into_iter().map(Download::finish).collect()
}

/// Waits until the gateway's `/metrics` says its origin is up, so that no
/// download of a cell falls back to direct TCP while the association opens.
fn wait_origin_up(ns: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = admin_metrics(ns).unwrap_or_default();
        if metrics
            .lines()
            .any(|l| l.starts_with("gateway_origin_up{") && l.ends_with(" 1"))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the gateway's origin was not up within 20 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One curl in the client namespace whose body this process reads and
/// timestamps, so the rate over time is the browser's.
struct Download {
    child: Child,
    reader: JoinHandle<Vec<(Instant, u64)>>,
    started: Instant,
    /// Read at a set pace (the slow browser), ended by its reader.
    paced: bool,
}

/// What a [`Download`] read: (when, bytes so far) after each read.
#[derive(Debug, Clone)]
struct Received {
    started: Instant,
    reads: Vec<(Instant, u64)>,
    /// curl's message if the response ended before curl's time limit.
    cut: Option<String>,
}

impl Download {
    /// Starts curl for `large.bin`, its output read at `rate` bytes/s if
    /// given ([`SLOW_RATE`]), ended by curl after `limit`.
    fn start(ns: &str, rate: Option<u64>, limit: Duration) -> Result<Self> {
        let mut curl = Command::new("curl");
        curl.args([
            "-sS",
            "--write-out",
            "%{stderr}curl: HTTP %{http_code}, %{size_download} bytes, %{errormsg}\n",
            "--max-time",
        ])
        .arg(format!("{:.1}", limit.as_secs_f64()))
        .args(["-o", "-"]);
        curl.arg(format!("http://{SITE_V4}/large.bin"));
        let mut child = exec_in(ns, &curl)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting curl in the client namespace")?;
        let mut stdout = child.stdout.take().context("curl's stdout")?;
        let reader = std::thread::spawn(move || {
            // Paced: at most one step's bytes per read, and no read before
            // the bytes so far are due at `rate`.
            let step = rate.map(|rate| (rate as f64 * SLOW_STEP.as_secs_f64()) as usize);
            let mut buf = vec![0u8; step.unwrap_or(256 * 1024).max(1)];
            let mut total = 0u64;
            let mut reads = Vec::new();
            let start = Instant::now();
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n as u64;
                reads.push((Instant::now(), total));
                if let Some(rate) = rate {
                    // curl blocked on a full pipe does not keep its own
                    // time limit: the planned end is the reader's, and
                    // closing the pipe ends curl (a write error, 23).
                    if start.elapsed() >= limit {
                        break;
                    }
                    let due = start + Duration::from_secs_f64(total as f64 / rate as f64);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                }
            }
            reads
        });
        Ok(Self {
            child,
            reader,
            started: Instant::now(),
            paced: rate.is_some(),
        })
    }

    /// Waits for curl (its time-out is the planned end) and its reader.
    fn finish(mut self) -> Result<Received> {
        let mut said = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut said);
        }
        let status = self.child.wait()?;
        let reads = (self.reader.join()).map_err(|_| anyhow::anyhow!("the reader panicked"))?;
        let cut = match status.code() {
            // 28: "operation timed out", the planned end of a timed download
            // (0: the whole file came first, which `file_bytes` prevents);
            // 23: "write error", the paced reader closed its end at the
            // planned end.
            Some(0 | 28) => None,
            Some(23) if self.paced => None,
            // 18: "transfer closed with bytes remaining", 56: "failure in
            // receiving": the gateway ended the response early.
            Some(18 | 56) => Some(said.trim().to_owned()),
            _ => bail!(
                "curl in the client namespace failed ({status}): {}",
                said.trim()
            ),
        };
        Ok(Received {
            started: self.started,
            reads,
            cut,
        })
    }
}

impl Received {
    fn bytes(&self) -> u64 {
        self.reads.last().map_or(0, |r| r.1)
    }

    /// Seconds from start to the last byte.
    fn span(&self) -> f64 {
        self.reads
            .last()
            .map_or(0.0, |r| r.0.duration_since(self.started).as_secs_f64())
    }

    /// Bytes per second in each [`SAMPLE`] interval since `origin`.
    fn timeline(&self, origin: Instant) -> Vec<(f64, f64)> {
        let step = SAMPLE.as_secs_f64();
        let mut bins: Vec<u64> = Vec::new();
        let mut last = 0;
        for &(when, total) in &self.reads {
            let bin = (when.duration_since(origin).as_secs_f64() / step) as usize;
            if bins.len() <= bin {
                bins.resize(bin + 1, 0);
            }
            bins[bin] += total - last;
            last = total;
        }
        bins.iter()
            .enumerate()
            .map(|(i, &b)| ((i as f64 + 1.0) * step, b as f64 / step))
            .collect()
    }
}

/// Reads the gateway's largest `gateway_stream_backlog_bytes` every
/// [`SAMPLE`] until stopped; keeps the peak.
struct BacklogSampler {
    stop: Arc<Mutex<bool>>,
    thread: JoinHandle<u64>,
}

impl BacklogSampler {
    fn start(ns: &str) -> Self {
        let stop = Arc::new(Mutex::new(false));
        let ns = ns.to_owned();
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !*flag.lock().unwrap_or_else(|e| e.into_inner()) {
                peak = peak.max(largest_backlog(&ns).unwrap_or(0));
                std::thread::sleep(SAMPLE);
            }
            peak
        });
        Self { stop, thread }
    }

    fn stop(self) -> u64 {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.thread.join().unwrap_or(0)
    }
}

/// The gateway's `/metrics` now.
fn admin_metrics(ns: &str) -> Result<String> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "2", ADMIN]);
    let out = exec_in(ns, &curl).output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The largest per-stream backlog on the gateway's `/metrics` now.
fn largest_backlog(ns: &str) -> Result<u64> {
    let text = admin_metrics(ns)?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("gateway_stream_backlog_bytes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0f64, f64::max) as u64)
}

/// Bytes a slow stream's backlog may reach with FEEDBACK on: the window plus
/// one round trip at the link's rate (the issue's bound).
fn backlog_bound(rate_mbit: u64, rtt_ms: u64) -> u64 {
    BACKLOG_WINDOW + rate_mbit * 1_000_000 / 8 * rtt_ms / 1000
}

fn write_report(cells: &[Cell], options: &SlowConsumerBench, load: &str) -> Result<()> {
    let results = workspace_root().join("bench/results");
    let charts = results.join("slow-consumer");
    std::fs::create_dir_all(&charts)?;
    let rates: Vec<String> = options.rates.iter().map(u64::to_string).collect();
    let mut r = super::common::report_header(
        "Slow-consumer benchmark: one browser at 1 Mbit/s beside three fast downloads",
        &format!(
            "slow-consumer --wan {} --rate {} --rounds {} --seconds {}",
            options.cell.arg(),
            rates.join(","),
            options.rounds,
            options.seconds
        ),
    )?;
    // The header has the commit and the load as the report is written; the
    // run's load before it started is this benchmark's own.
    writeln!(
        r,
        "- load average (1, 5, 15 min) before and after the run: {load}"
    )?;
    writeln!(
        r,
        "- path: curl in the client namespace → gateway (cache and prefetch off) → wanem ({} ms RTT, {} % random loss each way, at {} Mbit/s) → origin (queue-aware scheduler, backlog_window {} KiB), userspace SCTP, one association",
        options.cell.rtt_ms,
        options.cell.loss_percent,
        rates.join(" and "),
        BACKLOG_WINDOW / 1024
    )?;
    writeln!(
        r,
        "- each cell: the gateway restarted with FEEDBACK off, on, or on with its eBPF programs attached (xdp_sctp on the WAN interface, tc_tcp_egress and tc_tcp_ingress on the LAN one: `gateway_stream_accounting_ebpf 1` checked); {FAST_FLOWS} fast downloads for {:.0} s alone, then a browser reading at {} Mbit/s (curl, its output read steadily at that pace by the benchmark, so that curl reads its socket at it too) and {} s later the same fast downloads for {:.0} s; {} rounds per rate, the setups' order rotating",
        options.seconds,
        SLOW_RATE * 8 / 1_000_000,
        FAST_DELAY.as_secs(),
        options.seconds,
        options.rounds
    )?;
    writeln!(
        r,
        "- largest backlog: the largest `gateway_stream_backlog_bytes` of any stream, read every {} ms during the second phase; bound: the window plus one round trip at the link's rate\n",
        SAMPLE.as_millis()
    )?;
    writeln!(r, "## Spread over the rounds\n")?;
    writeln!(
        r,
        "| rate, Mbit/s | feedback | rounds | ratio min | median | max | rounds ≥ 0.90 | largest backlog, KiB (max over rounds) | bound, KiB | within it |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|---|---|---|---|")?;
    for &rate in &options.rates {
        for setup in Setup::ALL {
            let of: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.rate_mbit == rate && c.setup == setup)
                .collect();
            if of.is_empty() {
                continue;
            }
            let mut ratios: Vec<f64> = of.iter().map(|c| c.ratio()).collect();
            ratios.sort_by(f64::total_cmp);
            let median = ratios[ratios.len() / 2];
            let peak = of.iter().map(|c| c.peak_backlog).max().unwrap_or(0);
            let bound = backlog_bound(rate, options.cell.rtt_ms);
            let feedback = setup.feedback();
            writeln!(
                r,
                "| {rate} | {} | {} | {:.2} | {median:.2} | {:.2} | {} | {} | {} | {} |",
                setup.name(),
                ratios.len(),
                ratios[0],
                ratios[ratios.len() - 1],
                if feedback {
                    format!(
                        "{} of {}",
                        ratios.iter().filter(|x| **x >= 0.90).count(),
                        ratios.len()
                    )
                } else {
                    String::new()
                },
                peak / 1024,
                bound / 1024,
                if !feedback {
                    ""
                } else if peak <= bound {
                    "yes"
                } else {
                    "no"
                }
            )?;
        }
    }
    writeln!(r, "\n## Every cell\n")?;
    writeln!(
        r,
        "| rate, Mbit/s | round | feedback | fast alone, Mbit/s (each) | fast beside slow, Mbit/s (each) | ratio | slow, Mbit/s | slow cut by the gateway | fast cut | largest backlog, KiB |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|---|---|---|---|")?;
    for c in cells {
        writeln!(
            r,
            "| {} | {} | {} | {:.1} ({}) | {:.1} ({}) | {:.2} | {:.2} | {} | {} | {} |",
            c.rate_mbit,
            c.round + 1,
            c.setup.name(),
            mbit(c.alone),
            each(&c.alone_flows),
            mbit(c.beside_slow),
            each(&c.beside_flows),
            c.ratio(),
            mbit(c.slow),
            c.slow_cut_at
                .map_or_else(|| "no".to_owned(), |at| format!("after {at:.1} s")),
            c.fast_cut,
            c.peak_backlog / 1024
        )?;
    }
    writeln!(r, "\n{NOTES}")?;
    for &rate in &options.rates {
        for setup in [Setup::Off, Setup::On] {
            let Some(cell) = cells
                .iter()
                .find(|c| c.rate_mbit == rate && c.setup == setup)
            else {
                continue;
            };
            let name = format!("feedback-{}-{rate}.png", setup.name());
            chart(&charts.join(&name), cell)?;
            writeln!(
                r,
                "\n![per-flow throughput at {rate} Mbit/s, feedback {}, round 1](slow-consumer/{name})",
                setup.name()
            )?;
        }
    }
    std::fs::write(charts.join("cells.csv"), csv(cells)?)?;
    let path = results.join("slow-consumer.md");
    std::fs::write(&path, &r).with_context(|| format!("writing {}", path.display()))?;
    println!("{r}");
    println!(
        "==> report written to bench/results/slow-consumer.md, cells to bench/results/slow-consumer/cells.csv"
    );
    Ok(())
}

/// One line per cell, rates in bytes per second.
fn csv(cells: &[Cell]) -> Result<String> {
    let mut out = String::from(
        "rate_mbit,round,setup,alone_bps,beside_slow_bps,ratio,slow_bps,slow_cut_at_s,fast_cut,peak_backlog_bytes\n",
    );
    for c in cells {
        writeln!(
            out,
            "{},{},{},{:.0},{:.0},{:.4},{:.0},{},{},{}",
            c.rate_mbit,
            c.round + 1,
            match c.setup {
                Setup::Off => "off",
                Setup::On => "on",
                Setup::OnEbpf => "on-ebpf",
            },
            c.alone,
            c.beside_slow,
            c.ratio(),
            c.slow,
            c.slow_cut_at
                .map_or_else(String::new, |at| format!("{at:.1}")),
            c.fast_cut,
            c.peak_backlog
        )?;
    }
    Ok(out)
}

/// Per-flow throughput over the second phase of `cell`.
fn chart(path: &Path, cell: &Cell) -> Result<()> {
    let series: Vec<Series> = cell
        .timelines
        .iter()
        .enumerate()
        .map(|(i, points)| Series {
            name: if i == 0 {
                "slow browser".to_owned()
            } else {
                format!("fast {i}")
            },
            points: points.iter().map(|&(t, r)| (t, mbit(r))).collect(),
        })
        .collect();
    plot::lines(
        path,
        &format!(
            "Per-flow throughput at {} Mbit/s, feedback {}",
            cell.rate_mbit,
            cell.setup.name()
        ),
        "seconds since the slow browser started",
        &format!("Mbit/s per {} ms", SAMPLE.as_millis()),
        &series,
    )
}
