//! `cargo xtask bench wan`: the WAN emulator (bench/wanem) measured against the
//! tolerances its issue sets: round-trip time within 1 ms of the configured
//! one, loss within 0.3 percentage points over 100,000 frames, rate within 3%.
//!
//! It builds `wanem` in release, creates the testbed topology with a middle
//! `wan` namespace, and for each check starts `wanem` there with the check's
//! settings (testbed's `WanEmulator`), measures from the gateway namespace to
//! the origin namespace with testbed's probes, and stops it. The report, with
//! the emulator's own counters and CPU time per check, goes to
//! bench/results/wan-emulator.md. Every load is bounded in count and time;
//! Ctrl-C ends the run after the current check, and the namespaces go away
//! with their guards (on error too).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use testbed::probe::{self, TcpSink, UdpEcho, UdpSink};
use testbed::topology::WAN;
use testbed::{LinkParams, Loss, Topology, WanEmulator, WanLink, WanParams, WanStats};

use super::common::{build_wanem, cpu_seconds, report_header};
use crate::cmd::{install_stop_handlers, stop_requested, workspace_root};

/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwwan-";

/// The round-trip tolerance.
const RTT_TOLERANCE: Duration = Duration::from_millis(1);
/// The loss tolerance, in percentage points.
const LOSS_TOLERANCE_POINTS: f64 = 0.3;
/// The rate tolerance, relative.
const RATE_TOLERANCE: f64 = 0.03;

/// One-way delays whose round trip is measured (0: what forwarding alone adds).
const RTT_DELAYS_MS: [u64; 4] = [0, 10, 40, 100];
/// Probes per delay, and their spacing.
const RTT_PROBES: u64 = 500;
const RTT_INTERVAL: Duration = Duration::from_millis(10);
/// UDP payload of a probe.
const RTT_PROBE_BYTES: usize = 64;

/// Frames per loss setting, their pace and UDP payload.
const LOSS_FRAMES: u64 = 100_000;
const LOSS_FRAMES_PER_SECOND: f64 = 20_000.0;
const LOSS_PAYLOAD: usize = 64;
/// Upper bound on one loss run.
const LOSS_MAX_TIME: Duration = Duration::from_secs(30);

/// Loss settings checked (gateway to origin only).
const LOSS_SETTINGS: [Loss; 3] = [
    Loss::Random(1.0),
    Loss::Random(3.0),
    Loss::GilbertElliott {
        p: 1.0,
        r: 50.0,
        h: 30.0,
        k: 100.0,
    },
];

/// Link rates checked, in Mbit/s.
const RATES_MBIT: [u64; 2] = [10, 100];
/// One-way delay during the rate checks.
const RATE_DELAY: Duration = Duration::from_millis(5);
/// How long each rate check loads the link, and how much of the start is
/// left out of the measurement (TCP's slow start, the UDP queue filling).
const RATE_LOAD_TIME: Duration = Duration::from_secs(8);
const RATE_SKIP: Duration = Duration::from_secs(2);
/// How long the TCP receiver may take to get what was written once the
/// sender stops.
const TCP_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// The UDP overload: this many times the link rate, in full-size frames.
const UDP_OVERLOAD: f64 = 1.5;
const UDP_PAYLOAD: usize = 1472;
/// Ethernet + IPv4 + UDP headers: a 1472-byte payload is a 1514-byte frame.
const UDP_FRAME_OVERHEAD: usize = 14 + 20 + 8;
/// Ethernet + IPv4 + TCP headers with the timestamp option: an MSS of 1448
/// bytes is a 1514-byte frame.
const TCP_FRAME_OVERHEAD: u32 = 14 + 20 + 20 + 12;

/// Ports on the origin's WAN address.
const ECHO_PORT: u16 = 7007;
const SINK_PORT: u16 = 9000;
const TCP_PORT: u16 = 5001;

/// One measurement.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// Round-trip time with this one-way delay.
    Rtt(Duration),
    /// Loss with this setting.
    Loss(Loss),
    /// Rate under UDP overload, Mbit/s.
    UdpRate(u64),
    /// Rate of a TCP bulk transfer, Mbit/s.
    TcpRate(u64),
}

/// The kinds of check, as `--only` names them.
const CHECK_KINDS: [&str; 3] = ["rtt", "loss", "rate"];

impl Check {
    fn kind(&self) -> &'static str {
        match self {
            Check::Rtt(_) => "rtt",
            Check::Loss(_) => "loss",
            Check::UdpRate(_) | Check::TcpRate(_) => "rate",
        }
    }

    fn name(&self) -> String {
        match *self {
            Check::Rtt(delay) => format!("RTT, {} ms one way", delay.as_millis()),
            Check::Loss(loss) => format!("loss, {}", describe_loss(loss)),
            Check::UdpRate(mbit) => format!("rate, UDP overload, {mbit} Mbit/s"),
            Check::TcpRate(mbit) => format!("rate, TCP bulk, {mbit} Mbit/s"),
        }
    }
}

/// One line of the table.
struct Row {
    check: String,
    configured: String,
    measured: String,
    tolerance: String,
    pass: bool,
}

/// Everything the report says.
struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
    /// How busy the machine was, at the start and the end.
    machine: Vec<String>,
}

pub(crate) fn run(only: &[String]) -> Result<()> {
    for kind in only {
        if !CHECK_KINDS.contains(&kind.as_str()) {
            bail!(
                "--only {kind}: the wan benchmark has {}",
                CHECK_KINDS.join(", ")
            );
        }
    }
    install_stop_handlers()?;
    let started = Instant::now();
    let binary = build_wanem()?;
    for name in testbed::cleanup_stale(PREFIX)? {
        println!("==> removed namespace {name} left by a killed run");
    }
    let topology = Topology::create_with(PREFIX, WanLink::ThroughNamespace)?;
    let logs = workspace_root().join("bench/results/tmp/wan");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let bench = Bench {
        topology: &topology,
        binary: &binary,
        logs: &logs,
    };
    let mut report = Report {
        rows: Vec::new(),
        notes: Vec::new(),
        machine: vec![machine_condition("start")?],
    };
    let cpu_at_start = cpu_times();

    let mut checks: Vec<Check> = RTT_DELAYS_MS
        .iter()
        .map(|&ms| Check::Rtt(Duration::from_millis(ms)))
        .collect();
    checks.extend(LOSS_SETTINGS.map(Check::Loss));
    for mbit in RATES_MBIT {
        checks.extend([Check::UdpRate(mbit), Check::TcpRate(mbit)]);
    }
    checks.retain(|c| only.is_empty() || only.iter().any(|k| k == c.kind()));
    // A check that fails to measure is a FAIL row with its error, and the run
    // goes on; an interruption ends it.
    for check in checks {
        interruption_point()?;
        if let Err(error) = bench.run(check, &mut report) {
            interruption_point()?;
            report.push(Row {
                check: check.name(),
                configured: String::new(),
                measured: format!("error: {error:#}"),
                tolerance: String::new(),
                pass: false,
            });
        }
    }
    drop(topology);
    report.machine.push(machine_condition("end")?);
    if let (Some(start), Some(end)) = (cpu_at_start, cpu_times()) {
        let total = end.0.saturating_sub(start.0).max(1);
        report.machine.push(format!(
            "whole run: the host took {:.1}% of this machine's CPU time away (steal), others' processes and ours used {:.0}% (busy)",
            100.0 * end.2.saturating_sub(start.2) as f64 / total as f64,
            100.0 * end.1.saturating_sub(start.1) as f64 / total as f64
        ));
    }

    let subcommand: String = std::iter::once("wan".to_owned())
        .chain(only.iter().map(|k| format!("--only {k}")))
        .collect::<Vec<_>>()
        .join(" ");
    let text = render(&report, &subcommand, started.elapsed())?;
    let name = if only.is_empty() {
        "wan-emulator.md".to_owned()
    } else {
        format!("wan-emulator-{}.md", only.join("-"))
    };
    let path = workspace_root().join("bench/results").join(&name);
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    println!("\n{text}\nxtask: report written to bench/results/{name}");
    let failed = report.rows.iter().filter(|r| !r.pass).count();
    if failed > 0 {
        bail!("{failed} of {} checks failed", report.rows.len());
    }
    Ok(())
}

impl Report {
    /// Adds `row` and prints it.
    fn push(&mut self, row: Row) {
        println!(
            "    {}: {} (configured {}, tolerance {}) {}",
            row.check,
            row.measured,
            row.configured,
            row.tolerance,
            if row.pass { "PASS" } else { "FAIL" }
        );
        self.rows.push(row);
    }
}

fn interruption_point() -> Result<()> {
    if stop_requested() {
        bail!("interrupted; the namespaces are being removed");
    }
    Ok(())
}

/// The topology and what each check needs to start the emulator.
struct Bench<'a> {
    topology: &'a Topology,
    binary: &'a Path,
    logs: &'a Path,
}

/// The emulator's counters and CPU use during one check.
struct Run {
    stats: WanStats,
    cpu_seconds: f64,
    wall_seconds: f64,
    /// Share of the machine's CPU time that was busy (everyone's) and stolen
    /// by the host during the check.
    machine_busy: f64,
    machine_steal: f64,
}

impl Run {
    fn note(&self, check: &str) -> String {
        let (ab, ba) = (self.stats.a_to_b, self.stats.b_to_a);
        format!(
            "{check}: machine {:.0}% busy, {:.1}% stolen; wanem CPU {:.2} s over {:.1} s ({:.0}% of one core); gateway→origin received {} dropped_loss {} dropped_queue {} sent {} pending {} faults {} late ≥ 1 ms {} latest {} µs; origin→gateway received {} sent {} faults {} late ≥ 1 ms {} latest {} µs",
            100.0 * self.machine_busy,
            100.0 * self.machine_steal,
            self.cpu_seconds,
            self.wall_seconds,
            100.0 * self.cpu_seconds / self.wall_seconds.max(1e-9),
            ab.received,
            ab.dropped_loss,
            ab.dropped_queue,
            ab.sent,
            ab.pending,
            ab.faults(),
            ab.late_over_1ms,
            ab.late_max_us,
            ba.received,
            ba.sent,
            ba.faults(),
            ba.late_over_1ms,
            ba.late_max_us
        )
    }
}

impl Bench<'_> {
    fn origin(&self, port: u16) -> SocketAddr {
        SocketAddr::new(WAN.host(false), port)
    }

    /// Runs `measure` with wanem running under `params`; returns what it
    /// measured and the emulator's counters.
    fn with_wanem<T>(
        &self,
        name: &str,
        params: &WanParams,
        measure: impl FnOnce() -> Result<T>,
    ) -> Result<(T, Run)> {
        let log = self.logs.join(format!("{name}.log"));
        let mut wanem = WanEmulator::start(self.topology, self.binary, params, &log)?;
        let pid = wanem.process().pid();
        let cpu_before = cpu_seconds(pid);
        let machine_before = cpu_times();
        let started = Instant::now();
        let measured = measure();
        let cpu_seconds = cpu_seconds(pid) - cpu_before;
        let wall_seconds = started.elapsed().as_secs_f64();
        let (machine_busy, machine_steal) = match (machine_before, cpu_times()) {
            (Some(a), Some(b)) => {
                let total = b.0.saturating_sub(a.0).max(1) as f64;
                (
                    b.1.saturating_sub(a.1) as f64 / total,
                    b.2.saturating_sub(a.2) as f64 / total,
                )
            }
            _ => (f64::NAN, f64::NAN),
        };
        let stats = wanem.stop()?;
        Ok((
            measured?,
            Run {
                stats,
                cpu_seconds,
                wall_seconds,
                machine_busy,
                machine_steal,
            },
        ))
    }

    fn run(&self, check: Check, report: &mut Report) -> Result<()> {
        match check {
            Check::Rtt(delay) => self.rtt(delay, report),
            Check::Loss(loss) => self.loss(loss, report),
            Check::UdpRate(mbit) => self.udp_rate(mbit, report),
            Check::TcpRate(mbit) => self.tcp_rate(mbit, report),
        }
    }

    /// Neighbour resolution both ways through the current emulator, so the
    /// first measured frames do not wait in (or overflow) the ARP queue.
    fn resolve_neighbours(&self) -> Result<()> {
        let echo = UdpEcho::start(self.topology.origin.name(), self.origin(ECHO_PORT))?;
        probe::measure_rtt(
            self.topology.gateway.name(),
            self.origin(ECHO_PORT),
            1,
            RTT_PROBE_BYTES,
            RTT_INTERVAL,
            Duration::from_millis(100),
        )?;
        echo.stop()?;
        Ok(())
    }

    fn rtt(&self, delay: Duration, report: &mut Report) -> Result<()> {
        let configured = delay * 2;
        println!("==> RTT with {delay:?} one way: {RTT_PROBES} UDP probes");
        let params = WanParams::symmetric(LinkParams::delay(delay));
        let name = format!("rtt-{}ms", delay.as_millis());
        let (rtt, run) = self.with_wanem(&name, &params, || {
            let _echo = UdpEcho::start(self.topology.origin.name(), self.origin(ECHO_PORT))?;
            Ok(probe::measure_rtt(
                self.topology.gateway.name(),
                self.origin(ECHO_PORT),
                RTT_PROBES,
                RTT_PROBE_BYTES,
                RTT_INTERVAL,
                configured + Duration::from_millis(200),
            )?)
        })?;
        for (label, value) in [("median", rtt.median()), ("p99", rtt.quantile(0.99))] {
            let value = value.context("no probe was answered")?;
            let error = value.abs_diff(configured);
            report.push(Row {
                check: format!("RTT {label}, {} ms one way", delay.as_millis()),
                configured: format!("{:.3} ms", ms(configured)),
                measured: format!("{:.3} ms", ms(value)),
                tolerance: format!("± {:.0} ms", ms(RTT_TOLERANCE)),
                pass: error <= RTT_TOLERANCE && rtt.lost() == 0,
            });
        }
        report.notes.push(format!(
            "{}; probes {} sent, {} lost, min {:.3} ms, max {:.3} ms",
            run.note(&format!("RTT {} ms one way", delay.as_millis())),
            rtt.sent,
            rtt.lost(),
            rtt.min().map_or(f64::NAN, ms),
            rtt.max().map_or(f64::NAN, ms),
        ));
        Ok(())
    }

    fn loss(&self, loss: Loss, report: &mut Report) -> Result<()> {
        let label = describe_loss(loss);
        let name = match loss {
            Loss::GilbertElliott { .. } => "loss-ge".to_owned(),
            Loss::Random(p) => format!("loss-{p}"),
            Loss::None => "loss-none".to_owned(),
        };
        println!("==> loss {label}: {LOSS_FRAMES} UDP frames gateway→origin");
        let params = WanParams {
            a_to_b: LinkParams {
                loss,
                ..LinkParams::default()
            },
            ..WanParams::symmetric(LinkParams::default())
        };
        let ((sent, arrivals), run) = self.with_wanem(&name, &params, || {
            self.resolve_neighbours()?;
            let sink = UdpSink::start(
                self.topology.origin.name(),
                self.origin(SINK_PORT),
                LOSS_FRAMES as usize,
            )?;
            let sent = probe::send_udp(
                self.topology.gateway.name(),
                self.origin(SINK_PORT),
                LOSS_FRAMES,
                LOSS_PAYLOAD,
                LOSS_FRAMES_PER_SECOND,
                LOSS_MAX_TIME,
            )?;
            std::thread::sleep(Duration::from_millis(300));
            Ok((sent, sink.stop()?))
        })?;
        if sent < LOSS_FRAMES {
            bail!("only {sent} of {LOSS_FRAMES} frames could be sent in {LOSS_MAX_TIME:?}");
        }
        let (lost, runs) = probe::loss_runs(sent, arrivals.iter().map(|a| a.seq));
        let measured = 100.0 * lost as f64 / sent as f64;
        let expected = loss.expected_percent();
        report.push(Row {
            check: format!("loss, {label}, {sent} frames"),
            configured: format!("{expected:.3}%"),
            measured: format!("{measured:.3}%"),
            tolerance: format!("± {LOSS_TOLERANCE_POINTS} points"),
            pass: (measured - expected).abs() <= LOSS_TOLERANCE_POINTS,
        });
        let emulator = run.stats.a_to_b;
        report.notes.push(format!(
            "{}; mean loss run {:.2} frames; the emulator's own loss count {:.3}%",
            run.note(&format!("loss {label}")),
            lost as f64 / runs.max(1) as f64,
            100.0 * emulator.dropped_loss as f64 / emulator.received.max(1) as f64,
        ));
        Ok(())
    }

    fn rate_params(mbit: u64) -> WanParams {
        WanParams::symmetric(LinkParams {
            delay: RATE_DELAY,
            rate_bits_per_second: Some(mbit * 1_000_000),
            ..LinkParams::default()
        })
    }

    fn udp_rate(&self, mbit: u64, report: &mut Report) -> Result<()> {
        let rate = (mbit * 1_000_000) as f64;
        let frame_bits = ((UDP_PAYLOAD + UDP_FRAME_OVERHEAD) * 8) as f64;
        let per_second = UDP_OVERLOAD * rate / frame_bits;
        let count = (per_second * RATE_LOAD_TIME.as_secs_f64()) as u64;
        println!(
            "==> rate {mbit} Mbit/s: UDP at {:.0}% of the rate for {RATE_LOAD_TIME:?}",
            UDP_OVERLOAD * 100.0
        );
        let (arrivals, run) =
            self.with_wanem(&format!("udp-{mbit}mbit"), &Self::rate_params(mbit), || {
                self.resolve_neighbours()?;
                let sink = UdpSink::start(
                    self.topology.origin.name(),
                    self.origin(SINK_PORT),
                    count as usize,
                )?;
                probe::send_udp(
                    self.topology.gateway.name(),
                    self.origin(SINK_PORT),
                    count,
                    UDP_PAYLOAD,
                    per_second,
                    RATE_LOAD_TIME + Duration::from_secs(2),
                )?;
                // The queue drains: at most 1000 frames at the link rate.
                std::thread::sleep(Duration::from_secs_f64(1000.0 * frame_bits / rate + 0.3));
                Ok(sink.stop()?)
            })?;
        let times: Vec<Instant> = arrivals.iter().map(|a| a.at).collect();
        let measured = probe::steady_rate(
            &times,
            |i| ((arrivals[i].len + UDP_FRAME_OVERHEAD) * 8) as f64,
            RATE_SKIP,
        )
        .context("too few UDP frames arrived to measure a rate")?;
        report.push(rate_row(
            format!(
                "rate, UDP overload {:.0}%, {mbit} Mbit/s",
                UDP_OVERLOAD * 100.0
            ),
            rate,
            measured,
        ));
        report.notes.push(format!(
            "{}; {} frames arrived",
            run.note(&format!("UDP overload at {mbit} Mbit/s")),
            arrivals.len()
        ));
        Ok(())
    }

    fn tcp_rate(&self, mbit: u64, report: &mut Report) -> Result<()> {
        let rate = (mbit * 1_000_000) as f64;
        println!("==> rate {mbit} Mbit/s: TCP bulk for {RATE_LOAD_TIME:?}");
        let ((sent, progress), run) =
            self.with_wanem(&format!("tcp-{mbit}mbit"), &Self::rate_params(mbit), || {
                let sink = TcpSink::start(self.topology.origin.name(), self.origin(TCP_PORT))?;
                let sent = probe::send_tcp(
                    self.topology.gateway.name(),
                    self.origin(TCP_PORT),
                    RATE_LOAD_TIME,
                )?;
                // What is still in the send buffer and the queue drains at
                // the link rate: a few MiB, seconds at 10 Mbit/s.
                Ok((sent, sink.wait(TCP_DRAIN_TIMEOUT)?))
            })?;
        let received = progress.last().map_or(0, |p| p.bytes);
        report.push(Row {
            check: format!("TCP bulk at {mbit} Mbit/s: bytes received of those sent"),
            configured: sent.bytes.to_string(),
            measured: received.to_string(),
            tolerance: "0".into(),
            pass: received == sent.bytes,
        });
        let mss = if sent.mss > 0 { sent.mss } else { 1448 };
        let times: Vec<Instant> = progress.iter().map(|p| p.at).collect();
        let goodput = probe::steady_rate(
            &times,
            |i| {
                let before = if i == 0 { 0 } else { progress[i - 1].bytes };
                ((progress[i].bytes - before) * 8) as f64
            },
            RATE_SKIP,
        )
        .context("too few TCP reads to measure a rate")?;
        let wire = goodput * f64::from(mss + TCP_FRAME_OVERHEAD) / f64::from(mss);
        report.push(rate_row(
            format!(
                "rate, TCP bulk, {mbit} Mbit/s (goodput {:.2} Mbit/s × {}/{mss})",
                goodput / 1e6,
                mss + TCP_FRAME_OVERHEAD
            ),
            rate,
            wire,
        ));
        let faults = run.stats.a_to_b.faults() + run.stats.b_to_a.faults();
        report.push(Row {
            check: format!(
                "TCP bulk at {mbit} Mbit/s: oversize, send errors, unfinished checksums, kernel drops"
            ),
            configured: "0".into(),
            measured: faults.to_string(),
            tolerance: "0".into(),
            pass: faults == 0,
        });
        report.notes.push(format!(
            "{}; {} MiB sent, MSS {mss}",
            run.note(&format!("TCP bulk at {mbit} Mbit/s")),
            sent.bytes >> 20
        ));
        Ok(())
    }
}

fn describe_loss(loss: Loss) -> String {
    match loss {
        Loss::GilbertElliott { p, r, h, k } => {
            format!("Gilbert-Elliott p={p}% r={r}% h={h}% k={k}%")
        }
        Loss::Random(p) => format!("random {p}%"),
        Loss::None => "none".to_owned(),
    }
}

fn rate_row(check: String, configured: f64, measured: f64) -> Row {
    let error = 100.0 * (measured / configured - 1.0);
    // No "-0.00%" for an error that rounds to nothing.
    let error = if error.abs() < 0.005 { 0.0 } else { error };
    Row {
        check,
        configured: format!("{:.3} Mbit/s", configured / 1e6),
        measured: format!("{:.3} Mbit/s ({error:+.2}%)", measured / 1e6),
        tolerance: format!("± {:.0}%", RATE_TOLERANCE * 100.0),
        pass: (measured / configured - 1.0).abs() <= RATE_TOLERANCE,
    }
}

/// Sleeps a SCHED_FIFO thread takes this many times to gauge how late the
/// machine wakes threads, and how long each.
const WAKE_UP_SAMPLES: u32 = 500;
const WAKE_UP_SLEEP: Duration = Duration::from_millis(2);

/// The load average and how late a real-time thread with 1 ns timer slack
/// (as wanem's) wakes from short sleeps now: on a machine shared with
/// others' builds the scheduler, not the emulator, sets the floor of the
/// round-trip checks.
fn machine_condition(when: &str) -> Result<String> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let mut late = std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 50 };
        // SAFETY: these change only this thread's scheduling and timer slack.
        let realtime = unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
            libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0
        };
        let samples: Vec<Duration> = (0..WAKE_UP_SAMPLES)
            .map(|_| {
                let start = Instant::now();
                std::thread::sleep(WAKE_UP_SLEEP);
                start.elapsed().saturating_sub(WAKE_UP_SLEEP)
            })
            .collect();
        (realtime, samples)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the wake-up probe panicked"))?;
    late.1.sort();
    let at = |q: f64| late.1[((late.1.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    Ok(format!(
        "{when}: load average {}; a {} thread sleeping {} ms woke late by median {:.0} µs, p99 {:.0} µs, max {:.0} µs ({WAKE_UP_SAMPLES} sleeps)",
        load.join(" "),
        if late.0 {
            "SCHED_FIFO"
        } else {
            "normally scheduled"
        },
        WAKE_UP_SLEEP.as_millis(),
        at(0.5),
        at(0.99),
        at(1.0)
    ))
}

/// (total, busy, steal) jiffies of all CPUs, from /proc/stat.
fn cpu_times() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4)?;
    let steal = *fields.get(7)?;
    Some((total, total - idle - steal, steal))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn render(report: &Report, subcommand: &str, took: Duration) -> Result<String> {
    let mut text = report_header("WAN emulator validation", subcommand)?;
    writeln!(
        text,
        "- path: testbed topology with a middle `wan` namespace; `wanem` (release) forwards between `gw0` and `origin0`; probes run from the gateway namespace (`wan0`) to the origin namespace (`eth0`, {}); offloads off on all four interfaces",
        WAN.host_v4
    )?;
    writeln!(
        text,
        "- RTT: {RTT_PROBES} UDP probes of {RTT_PROBE_BYTES} bytes every {} ms to an echo, symmetric delay, after a warm-up probe (neighbour resolution)",
        RTT_INTERVAL.as_millis()
    )?;
    writeln!(
        text,
        "- loss: {LOSS_FRAMES} numbered UDP datagrams of {LOSS_PAYLOAD} bytes at {LOSS_FRAMES_PER_SECOND:.0}/s, loss on the gateway→origin direction only, counted at the receiver; expected = the model's stationary loss"
    )?;
    writeln!(
        text,
        "- rate: {} ms one way, queue 1000 frames; rates count whole Ethernet frames (as tc does). UDP: {:.0}% of the rate in 1514-byte frames for {} s; TCP: one bulk connection for {} s, goodput scaled by frame/payload size; both measured at the receiver after the first {} s",
        RATE_DELAY.as_millis(),
        UDP_OVERLOAD * 100.0,
        RATE_LOAD_TIME.as_secs(),
        RATE_LOAD_TIME.as_secs(),
        RATE_SKIP.as_secs()
    )?;
    writeln!(text, "- run time: {:.0} s", took.as_secs_f64())?;
    for line in &report.machine {
        writeln!(text, "- machine, {line}")?;
    }
    writeln!(text)?;
    writeln!(
        text,
        "| check | configured | measured | tolerance | result |"
    )?;
    writeln!(text, "|---|---|---|---|---|")?;
    for row in &report.rows {
        writeln!(
            text,
            "| {} | {} | {} | {} | {} |",
            row.check,
            row.configured,
            row.measured,
            row.tolerance,
            if row.pass { "PASS" } else { "FAIL" }
        )?;
    }
    writeln!(text, "\n## The emulator during each check\n")?;
    writeln!(
        text,
        "faults = frames dropped as oversize, failed sends, frames with unfinished checksums and kernel receive-buffer drops; all should be 0.\n"
    )?;
    for note in &report.notes {
        writeln!(text, "- {note}")?;
    }
    Ok(text)
}
