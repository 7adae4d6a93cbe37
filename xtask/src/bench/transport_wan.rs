//! `cargo xtask bench transport --wan RTT_MS,LOSS_PERCENT,RATE_MBIT`: one
//! association over an emulated WAN link, alone and beside one CUBIC TCP
//! connection on the same link at the same time (the fairness figure).
//!
//! The measuring program is `gateway-transport/examples/transport_bench.rs` in
//! its timed mode (`--seconds`): the client, in the topology's gateway
//! namespace, sends 16 KiB messages over 8 streams for the cell's time; the
//! server, in the origin namespace, reports what it received per 0.1 s. Every
//! flow's goodput is taken over one window common to the cell, from a quarter
//! of the cell's time after the clients started to its end, so start-up
//! (handshake, slow start or BBR's startup) and the drain after the senders
//! stop are left out, and flows that ran side by side are measured over the
//! same interval. The whole-transfer figure (first to last payload) is beside
//! it for the cells alone.
//!
//! wanem (bench/wanem) forwards between the two namespaces with the cell's
//! settings, started afresh for every cell; its counters give the loss each
//! flow actually met and the drops at the bottleneck's queue. TCP is the
//! kernel's CUBIC, set on each TCP socket (the host's default may differ, and
//! a namespace's default can only name the host's allowed controllers); the
//! cell fails if the socket ran another.
//! Report: bench/results/transport-wan.md.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};
use testbed::WanStats;

use super::common::field;
use super::common::{build_example_with, load_average, report_header};
use super::link::{Pair, Sides, WanCell, WanPath, jain_index, run_pairs, window_mbit};
use super::options::BenchOptions;
use crate::cmd::{install_stop_handlers, stop_requested, workspace_root};

/// Prefix of this benchmark's namespace names.
const PREFIX: &str = "gwtw-";

/// The association's server port (UDP for SCTP and QUIC, TCP for the `tcp`
/// row) and the competing TCP connection's.
const ASSOCIATION_PORT: u16 = 9899;
const COMPETITOR_PORT: u16 = 9900;

/// How long each cell sends unless `--seconds` says otherwise.
const DEFAULT_SECONDS: f64 = 20.0;
/// The share of a cell's time left out at its start.
const WARM_UP_SHARE: f64 = 0.25;

/// Message size and data streams of every cell: the transport benchmark's
/// first bulk cell.
const MESSAGE_SIZE: usize = 16 * 1024;
const STREAMS: u16 = 8;

/// The target for the userspace stack alone at 80 ms / 1 % / 100
/// Mbit/s, Mbit/s.
const TARGET_MBIT: f64 = 50.0;

/// The TCP congestion controller of the plain TCP rows and of the competitor.
const TCP_CONGESTION: &str = "cubic";

/// Rows measured alone, in report order, with the congestion controller each
/// stands for.
const ALONE: [(&str, &str); 6] = [
    ("tcp", "CUBIC (kernel)"),
    ("userspace", "BBR (the default)"),
    ("userspace-cubic", "CUBIC (RFC 9438)"),
    ("userspace-reno", "Reno (RFC 9260)"),
    ("quic", "CUBIC (quinn's default)"),
    ("quic-bbr", "BBR (quinn's, experimental)"),
];

/// Rows measured beside one CUBIC TCP connection; `tcp` beside it is the
/// reference: two CUBIC flows.
const BESIDE_TCP: [&str; 6] = [
    "tcp",
    "userspace",
    "userspace-cubic",
    "userspace-reno",
    "quic",
    "quic-bbr",
];

pub(super) fn run(options: &BenchOptions, cell: WanCell) -> Result<()> {
    if options.rate_limited || options.callgrind {
        bail!("--wan runs its own cells: leave out --rate-limited and --callgrind");
    }
    let seconds = options.seconds.unwrap_or(DEFAULT_SECONDS);
    if !(1.0..=60.0).contains(&seconds) {
        bail!("--seconds {seconds}: from 1 to 60 for transport --wan");
    }
    install_stop_handlers()?;
    let started = Instant::now();
    let load_at_start = load_average();
    let binary = build_example_with("gateway-transport", "transport_bench", &["baselines"])?;
    let path = WanPath::create(PREFIX, cell, "transport-wan")?;
    let bench = Bench {
        path: &path,
        sides: path.sides(),
        binary: &binary,
        seconds,
    };

    let alone = bench.alone()?;
    let beside = bench.beside_tcp()?;
    drop(path);
    let mut report = wan_report_header(options, cell, seconds, &load_at_start, started)?;
    report.push_str(&alone);
    report.push_str(&beside);

    let root = workspace_root();
    let dir = root.join("bench/results");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("transport-wan.md"), &report)?;
    println!("\n{report}\nxtask: report written to bench/results/transport-wan.md");
    Ok(())
}

/// The report's title, the command that made it, and how it was measured;
/// written after the cells, for the load average at the end.
fn wan_report_header(
    options: &BenchOptions,
    cell: WanCell,
    seconds: f64,
    load_at_start: &str,
    started: Instant,
) -> Result<String> {
    let mut flags = format!("transport --wan {}", cell.arg());
    if let Some(seconds) = options.seconds {
        write!(flags, " --seconds {seconds}")?;
    }
    let mut report = report_header("Transport benchmark over an emulated WAN link", &flags)?;
    writeln!(
        report,
        "- path: the testbed topology; `transport_bench` (release) receives in the origin namespace and sends from the gateway namespace; wanem (release) between them: {cell}; started afresh for every cell; neighbour entries pinned, offloads off"
    )?;
    writeln!(
        report,
        "- each cell: {MESSAGE_SIZE}-byte messages round-robin over {STREAMS} streams (the TCP rows: the same bytes on one socket), sent for {seconds} s; goodput = payload delivered to the receiving application over the window from {:.1} s to {seconds} s after the clients started, common to flows side by side; whole transfer: first to last payload",
        seconds * WARM_UP_SHARE
    )?;
    writeln!(
        report,
        "- every side one process, single-threaded tokio runtime; association settings: the backend's defaults (userspace: GSO/GRO where offered, pacing, RACK-TLP); TCP: the kernel's {TCP_CONGESTION}, set on each socket"
    )?;
    writeln!(
        report,
        "- loss met: frames of the data direction the loss model dropped, of those wanem received (1 % configured); queue drops: frames of the data direction dropped at the full bottleneck queue"
    )?;
    writeln!(
        report,
        "- load: load average {load_at_start} at the start, {} at the end; run time {:.0} s\n",
        load_average(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(report)
}

fn interruption_point() -> Result<()> {
    if stop_requested() {
        bail!("interrupted; the namespaces are being removed");
    }
    Ok(())
}

/// What every cell needs.
struct Bench<'a> {
    path: &'a WanPath,
    sides: Sides,
    binary: &'a Path,
    seconds: f64,
}

/// One flow's goodput.
struct Flow {
    /// Over the cell's common window, Mbit/s.
    window_mbit: f64,
    /// From its first payload to its last, Mbit/s.
    whole_mbit: f64,
}

/// One cell's flows (in the order asked for) and wanem's counters.
struct Measured {
    flows: Vec<Flow>,
    link: WanStats,
}

impl Measured {
    /// The data direction's loss, percent of frames received, as text.
    fn loss_percent(&self) -> String {
        let forward = &self.link.a_to_b;
        if forward.received == 0 {
            return "-".into();
        }
        format!(
            "{:.2}",
            forward.dropped_loss as f64 * 100.0 / forward.received as f64
        )
    }
}

impl Bench<'_> {
    /// The table of each backend alone on the link, and the userspace
    /// stack's target.
    fn alone(&self) -> Result<String> {
        let mut alone = String::new();
        writeln!(
            alone,
            "## Alone\n\n| backend | congestion control | Mbit/s (window) | Mbit/s (whole transfer) | ratio to TCP | loss met, % | queue drops |"
        )?;
        writeln!(alone, "|---|---|---|---|---|---|---|")?;
        let mut tcp_alone = None;
        let mut userspace_alone = None;
        for (backend, controller) in ALONE {
            interruption_point()?;
            println!("==> alone: {backend}");
            match self.cell(&format!("alone-{backend}"), &[backend]) {
                Ok(measured) => {
                    let flow = &measured.flows[0];
                    let base = *tcp_alone.get_or_insert(flow.window_mbit);
                    if backend == "userspace" {
                        userspace_alone = Some(flow.window_mbit);
                    }
                    println!(
                        "    {:.1} Mbit/s in the window, {:.1} over the whole transfer",
                        flow.window_mbit, flow.whole_mbit
                    );
                    writeln!(
                        alone,
                        "| {backend} | {controller} | {:.1} | {:.1} | {:.2} | {} | {} |",
                        flow.window_mbit,
                        flow.whole_mbit,
                        flow.window_mbit / base.max(1e-9),
                        measured.loss_percent(),
                        measured.link.a_to_b.dropped_queue
                    )?;
                }
                Err(e) => {
                    println!("    failed: {e:#}");
                    writeln!(alone, "| {backend} | {controller} | failed: {e} | | | | |")?;
                }
            }
        }
        writeln!(alone)?;
        if let Some(mbit) = userspace_alone {
            writeln!(
                alone,
                "Target: the userspace stack with its default controller at least {TARGET_MBIT} Mbit/s alone: {mbit:.1} Mbit/s, {}.\n",
                if mbit >= TARGET_MBIT { "met" } else { "missed" }
            )?;
        }
        Ok(alone)
    }

    /// The table of each backend beside one CUBIC TCP connection.
    fn beside_tcp(&self) -> Result<String> {
        let mut beside = String::new();
        writeln!(
            beside,
            "## Beside one CUBIC TCP connection\n\nBoth flows start together and send for the same time; each one's goodput over the common window, its share of their sum, and Jain's fairness index of the two (1: equal shares, 0.5: one takes all).\n"
        )?;
        writeln!(
            beside,
            "| association | its Mbit/s | TCP CUBIC's Mbit/s | its share | Jain's index | loss met, % | queue drops |"
        )?;
        writeln!(beside, "|---|---|---|---|---|---|---|")?;
        for backend in BESIDE_TCP {
            interruption_point()?;
            println!("==> beside TCP CUBIC: {backend}");
            match self.cell(&format!("beside-{backend}"), &[backend, "tcp"]) {
                Ok(measured) => {
                    let (ours, theirs) =
                        (measured.flows[0].window_mbit, measured.flows[1].window_mbit);
                    println!("    {ours:.1} Mbit/s beside TCP's {theirs:.1}");
                    writeln!(
                        beside,
                        "| {backend} | {ours:.1} | {theirs:.1} | {:.2} | {:.2} | {} | {} |",
                        ours / (ours + theirs).max(1e-9),
                        jain_index(&[ours, theirs]),
                        measured.loss_percent(),
                        measured.link.a_to_b.dropped_queue
                    )?;
                }
                Err(e) => {
                    println!("    failed: {e:#}");
                    writeln!(beside, "| {backend} | failed: {e} | | | | | |")?;
                }
            }
        }
        writeln!(beside)?;
        Ok(beside)
    }

    /// Runs one flow per backend in `backends` side by side (the first on
    /// [`ASSOCIATION_PORT`], a second on [`COMPETITOR_PORT`]) with wanem
    /// forwarding; stops wanem on error too.
    fn cell(&self, name: &str, backends: &[&str]) -> Result<Measured> {
        let pairs: Vec<Pair> = backends
            .iter()
            .zip([ASSOCIATION_PORT, COMPETITOR_PORT])
            .map(|(backend, port)| {
                let args = |role: &str| {
                    vec![
                        role.to_owned(),
                        "--backend".into(),
                        (*backend).into(),
                        "--addr".into(),
                        self.sides.addr(port),
                        "--size".into(),
                        MESSAGE_SIZE.to_string(),
                        "--streams".into(),
                        STREAMS.to_string(),
                        "--seconds".into(),
                        self.seconds.to_string(),
                        "--tcp-congestion".into(),
                        TCP_CONGESTION.into(),
                    ]
                };
                Pair {
                    server: args("--server"),
                    client: args("--client"),
                }
            })
            .collect();
        let wanem = self.path.forward(name)?;
        let run = run_pairs(&self.sides, self.binary, &pairs);
        let link = wanem.stop()?;
        let run = run?;
        if link.a_to_b.faults() + link.b_to_a.faults() > 0 {
            bail!(
                "wanem lost {} frames other than by its loss model or queue (see bench/results/tmp/transport-wan/{name}-wanem.log)",
                link.a_to_b.faults() + link.b_to_a.faults()
            );
        }
        let expected = format!("\"tcp_congestion\":\"{TCP_CONGESTION}\"");
        for (backend, (_, client)) in backends.iter().zip(&run.lines) {
            if *backend == "tcp" && !client.contains(&expected) {
                bail!("a TCP flow did not run {TCP_CONGESTION}: {client}");
            }
        }
        let from = run.clients_started_unix_ms + self.seconds * WARM_UP_SHARE * 1000.0;
        let to = run.clients_started_unix_ms + self.seconds * 1000.0;
        let flows = run
            .lines
            .iter()
            .map(|(server, _)| {
                Ok(Flow {
                    window_mbit: window_mbit(server, from, to)
                        .ok_or_else(|| anyhow::anyhow!("no received series in {server:?}"))?,
                    whole_mbit: field(server, "mbit_per_s").unwrap_or(f64::NAN),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Measured { flows, link })
    }
}
