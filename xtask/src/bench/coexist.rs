//! `cargo xtask bench coexist`: does our association share a loss-free
//! bottleneck with the household's other traffic, and how much queue does it
//! build while doing so?
//!
//! ```text
//!  gateway ns (senders)            wan ns: wanem                 origin ns (receivers)
//!  subject ───────────┐   50 Mbit/s, RTT/2 each way, no loss   ┌──> its server :9899
//!  competitor 1..6 ───┼──> drop-tail queue of B × BDP bytes ───┼──> their servers :9900..
//!  UDP probe every 10 ms ┘                                      └──> UDP echo :9950
//! ```
//!
//! A cell is one round-trip time, one buffer (in bandwidth-delay products of
//! the 50 Mbit/s link, set in bytes; the frame limit is raised so that bytes
//! govern), one competition and one subject. The subject is our association
//! (userspace SCTP with its default controller) or, as the reference, one
//! kernel BBR TCP flow in its place; the competition is one CUBIC TCP flow, one
//! BBR TCP flow, or six CUBIC TCP flows (a browser's worth). Every flow is a
//! `transport_bench` pair in timed mode (the measuring program of
//! `transport --wan`): the senders in the gateway namespace, the receivers in
//! the origin namespace, all started together and sending for the cell's
//! time; each flow's goodput is taken over the common window from a quarter of
//! the time to its end (start-up left out), as `transport --wan` does.
//!
//! Queueing delay: testbed's UDP echo (`probe::UdpEcho`) answers in the origin
//! namespace; before the flows start, 50 probes from the gateway namespace
//! give the cell's base round trip (their median), and during the common
//! window a 16-byte probe every 10 ms crosses the same queue (wanem forwards
//! every frame of the namespaces' link, UDP like TCP). RTT inflation = a
//! probe's round trip minus the base; probes the full queue dropped are
//! counted as lost. Loss: wanem's counters of the data direction (frames
//! dropped at the full queue over frames received, the whole cell).
//!
//! Controllers as run: each TCP sender reads its socket's `TCP_CONGESTION`
//! back after connecting (the cell fails if it is not the one asked for), and
//! `ss -ti` in the sending namespace halfway through the window lists what
//! the kernel runs per connection (a mismatch fails the cell too); the
//! association's line names its configured controller. Report:
//! bench/results/coexist.md, data in bench/results/coexist/cells.csv.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use testbed::probe::{RttReport, UdpEcho, measure_rtt};
use testbed::topology::WAN;
use testbed::{LinkParams, Loss, WanParams, WanStats};

use super::common::field;
use super::common::{build_example_with, load_average, report_header};
use super::link::{Pair, Sides, WanCell, WanPath, jain_index, run_pairs_with, window_mbit};
use crate::cmd::{install_stop_handlers, stop_requested, workspace_root};

/// Prefix of this benchmark's namespace names.
const PREFIX: &str = "gwco-";

/// The bottleneck's rate each way, Mbit/s.
const RATE_MBIT: u64 = 50;

/// Cells when `--rtt` and `--buffers` are not given.
const DEFAULT_RTTS_MS: [u64; 2] = [20, 80];
const DEFAULT_BUFFERS_BDP: [f64; 4] = [0.5, 1.0, 2.0, 8.0];
/// The largest buffer `--buffers` accepts, in BDP.
const MAX_BUFFER_BDP: f64 = 16.0;
/// The largest round trip `--rtt` accepts, ms.
const MAX_RTT_MS: u64 = 500;

/// How long each cell sends unless `--seconds` says otherwise, and the bounds
/// (the measuring program caps a run at 60 s).
const DEFAULT_SECONDS: f64 = 60.0;
const MIN_SECONDS: f64 = 4.0;
const MAX_SECONDS: f64 = 60.0;
/// The share of a cell's time left out at its start.
const WARM_UP_SHARE: f64 = 0.25;

/// Every flow's messages: `transport --wan`'s cell.
const MESSAGE_SIZE: usize = 16 * 1024;
const STREAMS: u16 = 8;

/// The subject's port, the first competitor's (the others follow), the echo's.
const SUBJECT_PORT: u16 = 9899;
const FIRST_COMPETITOR_PORT: u16 = 9900;
const ECHO_PORT: u16 = 9950;

/// The queue-delay probes: one of `PROBE_BYTES` every `PROBE_INTERVAL`.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
const PROBE_BYTES: usize = 16;
/// Probes on the idle link that give a cell's base round trip.
const BASE_PROBES: u64 = 50;
/// How long after the last probe an answer still counts: above the deepest
/// queue's delay (8 BDP at 80 ms is 640 ms; 16 at 500 ms would be 8 s, which
/// such a cell's probes then count as lost).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The queue's frame limit: high enough that the byte limit governs even for
/// minimum-size frames (8 BDP at 80 ms and 50 Mbit/s is 2,640 full frames,
/// above wanem's default 1,000).
const QUEUE_FRAMES: u32 = 1_000_000;
/// A full Ethernet frame, bytes: the smallest queue holds one.
const FULL_FRAME: u64 = 1514;

/// The issue's targets for the association.
const ONE_CUBIC_SHARE: (f64, f64) = (0.5, 0.86);
const SIX_CUBIC_MIN_SHARE: f64 = 1.0 / 7.0;
/// How much above kernel BBR's p95 queueing delay the association's may be
/// and still count as no worse: the probes' resolution on these machines
/// (wanem's forwarding and the probe threads' wake-ups, bench/results/wan-emulator.md).
const P95_TOLERANCE_MS: f64 = 1.0;

/// What `cargo xtask bench coexist` was asked for.
#[derive(Debug, Clone)]
pub(crate) struct CoexistBench {
    /// Round-trip times, ms (empty: the default two).
    pub rtts_ms: Vec<u64>,
    /// Buffers in bandwidth-delay products (empty: the default four).
    pub buffers_bdp: Vec<f64>,
    /// Subjects by key (`association`, `kernel-bbr`; empty: both).
    pub subjects: Vec<String>,
    /// Competitions by key (`cubic1`, `bbr1`, `cubic6`; empty: all three).
    pub competitions: Vec<String>,
    /// Seconds per cell (`None`: 60).
    pub seconds: Option<f64>,
}

/// The entries of `all` named by `keys` (all of them if `keys` is empty), in
/// `all`'s order; an unknown key is an error naming the option.
fn pick<T: Copy>(
    option: &str,
    keys: &[String],
    all: &[T],
    key: impl Fn(T) -> &'static str,
) -> Result<Vec<T>> {
    if let Some(unknown) = keys
        .iter()
        .find(|k| !all.iter().any(|t| key(*t) == k.as_str()))
    {
        let known: Vec<&str> = all.iter().map(|t| key(*t)).collect();
        bail!("--{option} {unknown}: one of {}", known.join(", "));
    }
    Ok(all
        .iter()
        .copied()
        .filter(|t| keys.is_empty() || keys.iter().any(|k| k == key(*t)))
        .collect())
}

/// The flow whose share and queue are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    /// Our association: userspace SCTP with its default controller.
    Association,
    /// The reference: one kernel BBR TCP flow in its place.
    KernelBbr,
}

impl Subject {
    const ALL: [Self; 2] = [Self::Association, Self::KernelBbr];

    fn key(self) -> &'static str {
        match self {
            Self::Association => "association",
            Self::KernelBbr => "kernel-bbr",
        }
    }

    fn flow(self) -> Flow {
        match self {
            Self::Association => Flow {
                backend: "userspace",
                tcp_congestion: None,
            },
            Self::KernelBbr => Flow {
                backend: "tcp",
                tcp_congestion: Some("bbr"),
            },
        }
    }
}

/// What the subject shares the bottleneck with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Competition {
    OneCubic,
    OneBbr,
    SixCubic,
}

impl Competition {
    const ALL: [Self; 3] = [Self::OneCubic, Self::OneBbr, Self::SixCubic];

    fn key(self) -> &'static str {
        match self {
            Self::OneCubic => "cubic1",
            Self::OneBbr => "bbr1",
            Self::SixCubic => "cubic6",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::OneCubic => "1 CUBIC",
            Self::OneBbr => "1 BBR",
            Self::SixCubic => "6 CUBIC",
        }
    }

    /// The kernel controller of each competing TCP flow.
    fn controllers(self) -> &'static [&'static str] {
        match self {
            Self::OneCubic => &["cubic"],
            Self::OneBbr => &["bbr"],
            Self::SixCubic => &["cubic"; 6],
        }
    }

    fn needs_bbr(self) -> bool {
        self == Self::OneBbr
    }
}

/// One flow: the measuring program's backend and, for TCP, the kernel
/// controller set on its socket.
#[derive(Debug, Clone, Copy)]
struct Flow {
    backend: &'static str,
    tcp_congestion: Option<&'static str>,
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cell {
    rtt_ms: u64,
    buffer_bdp: f64,
    competition: Competition,
    subject: Subject,
}

impl Cell {
    /// The link's bandwidth-delay product, bytes of whole frames.
    fn bdp_bytes(&self) -> u64 {
        RATE_MBIT * 1_000_000 / 8 * self.rtt_ms / 1000
    }

    /// The bottleneck's buffer, bytes (at least one full frame).
    fn queue_bytes(&self) -> u64 {
        ((self.bdp_bytes() as f64 * self.buffer_bdp).round() as u64).max(FULL_FRAME)
    }

    /// wanem's settings: no loss, the rate, half the round trip each way, the
    /// queue in bytes (both directions alike; the data goes gateway to
    /// origin, side a to b).
    fn params(&self) -> WanParams {
        WanParams::symmetric(LinkParams {
            delay: Duration::from_millis(self.rtt_ms) / 2,
            loss: Loss::None,
            rate_bits_per_second: Some(RATE_MBIT * 1_000_000),
            queue_frames: Some(QUEUE_FRAMES),
            queue_bytes: Some(self.queue_bytes()),
            ..LinkParams::default()
        })
    }

    fn name(&self) -> String {
        format!(
            "{}ms-{}bdp-{}-{}",
            self.rtt_ms,
            self.buffer_bdp,
            self.competition.key(),
            self.subject.key()
        )
    }

    /// The subject first, then the competitors.
    fn flows(&self) -> Vec<Flow> {
        std::iter::once(self.subject.flow())
            .chain(self.competition.controllers().iter().map(|cc| Flow {
                backend: "tcp",
                tcp_congestion: Some(cc),
            }))
            .collect()
    }
}

/// What one cell measured.
#[derive(Debug, Clone)]
struct Measured {
    /// The subject's goodput over the window, Mbit/s.
    subject_mbit: f64,
    /// Each competitor's, Mbit/s.
    competitors_mbit: Vec<f64>,
    /// The idle link's round trip (median of the base probes).
    base_rtt: Duration,
    /// The round trips of the probes during the window.
    probes: RttReport,
    /// wanem's counters over the whole cell.
    link: WanStats,
    /// Each flow's controller as its sender reported it.
    controllers: Vec<String>,
    /// What `ss -ti` showed halfway: (server port, controller).
    ss_seen: Vec<(u16, String)>,
    /// The subject sender's CPU time, s.
    subject_cpu_s: f64,
    /// The 1-minute load average at the cell's end.
    load: String,
}

impl Measured {
    fn competitors_sum(&self) -> f64 {
        self.competitors_mbit.iter().sum()
    }

    fn share(&self) -> f64 {
        self.subject_mbit / (self.subject_mbit + self.competitors_sum()).max(1e-9)
    }

    fn jain(&self) -> f64 {
        let mut all = vec![self.subject_mbit];
        all.extend(&self.competitors_mbit);
        jain_index(&all)
    }

    /// The `q` quantile of RTT inflation over the base, ms.
    fn inflation_ms(&self, q: f64) -> Option<f64> {
        let rtt = self.probes.quantile(q)?;
        Some((rtt.as_secs_f64() - self.base_rtt.as_secs_f64()) * 1000.0)
    }

    fn probes_lost_percent(&self) -> f64 {
        self.probes.lost() as f64 * 100.0 / (self.probes.sent.max(1)) as f64
    }

    /// Frames of the data direction dropped at the full queue, percent of
    /// those received.
    fn queue_drop_percent(&self) -> f64 {
        let forward = &self.link.a_to_b;
        forward.dropped_queue as f64 * 100.0 / (forward.received.max(1)) as f64
    }
}

/// A cell and what came of it.
struct Outcome {
    cell: Cell,
    result: std::result::Result<Measured, String>,
}

pub(super) fn run(options: &CoexistBench) -> Result<()> {
    let seconds = options.seconds.unwrap_or(DEFAULT_SECONDS);
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
        bail!("--seconds {seconds}: from {MIN_SECONDS} to {MAX_SECONDS} for coexist");
    }
    let rtts = if options.rtts_ms.is_empty() {
        DEFAULT_RTTS_MS.to_vec()
    } else {
        options.rtts_ms.clone()
    };
    let buffers = if options.buffers_bdp.is_empty() {
        DEFAULT_BUFFERS_BDP.to_vec()
    } else {
        options.buffers_bdp.clone()
    };
    if let Some(rtt) = rtts.iter().find(|r| !(1..=MAX_RTT_MS).contains(*r)) {
        bail!("--rtt {rtt}: from 1 to {MAX_RTT_MS} ms");
    }
    if let Some(b) = buffers
        .iter()
        .find(|b| !(b.is_finite() && **b > 0.0 && **b <= MAX_BUFFER_BDP))
    {
        bail!("--buffers {b}: above 0 and at most {MAX_BUFFER_BDP} BDP");
    }
    let subjects = pick("subjects", &options.subjects, &Subject::ALL, Subject::key)?;
    let competitions = pick(
        "competitions",
        &options.competitions,
        &Competition::ALL,
        Competition::key,
    )?;
    install_stop_handlers()?;
    let started = Instant::now();
    let load_at_start = load_average();
    let bbr = kernel_bbr_available()?;
    let binary = build_example_with("gateway-transport", "transport_bench", &["baselines"])?;
    let first = WanCell {
        rtt_ms: rtts[0],
        loss_percent: 0.0,
        rate_mbit: RATE_MBIT,
    };
    let path = WanPath::create(PREFIX, first, "coexist")?;
    let sides = path.sides();
    let echo_addr = SocketAddr::new(IpAddr::V4(WAN.host_v4), ECHO_PORT);
    let echo = UdpEcho::start(&sides.server_ns, echo_addr)?;
    let bench = Bench {
        path: &path,
        sides,
        binary: &binary,
        seconds,
        echo: echo_addr,
    };

    let cells = matrix(&rtts, &buffers, &competitions, &subjects);
    let mut outcomes = Vec::new();
    let mut interrupted = false;
    for (i, cell) in cells.iter().enumerate() {
        if stop_requested() {
            interrupted = true;
            break;
        }
        println!("==> [{}/{}] {}", i + 1, cells.len(), cell.name());
        let result = if !bbr && (cell.subject == Subject::KernelBbr || cell.competition.needs_bbr())
        {
            Err("kernel BBR (tcp_bbr) is not available".to_owned())
        } else {
            bench.cell(cell).map_err(|e| format!("{e:#}"))
        };
        match &result {
            Ok(m) => println!(
                "    subject {:.1} Mbit/s, competitors {:.1}, share {:.2}, Jain {:.2}, queueing p50 {} p95 {} ms, queue drops {:.2} %",
                m.subject_mbit,
                m.competitors_sum(),
                m.share(),
                m.jain(),
                ms(m.inflation_ms(0.5)),
                ms(m.inflation_ms(0.95)),
                m.queue_drop_percent()
            ),
            Err(e) => println!("    failed: {e}"),
        }
        outcomes.push(Outcome {
            cell: *cell,
            result,
        });
    }
    let echoed = echo.stop()?;
    drop(path);

    let root = workspace_root();
    let dir = root.join("bench/results");
    std::fs::create_dir_all(dir.join("coexist"))?;
    std::fs::write(dir.join("coexist/cells.csv"), csv(&outcomes)?)?;
    let report = report(&ReportInput {
        options,
        rtts: &rtts,
        buffers: &buffers,
        subjects: &subjects,
        competitions: &competitions,
        seconds,
        outcomes: &outcomes,
        planned: cells.len(),
        interrupted,
        bbr,
        echoed,
        load_at_start: &load_at_start,
        started,
    })?;
    std::fs::write(dir.join("coexist.md"), &report)?;
    println!(
        "\n{report}\nxtask: report written to bench/results/coexist.md, data to bench/results/coexist/cells.csv"
    );
    if interrupted {
        bail!(
            "interrupted after {} of {} cells",
            outcomes.len(),
            cells.len()
        );
    }
    Ok(())
}

/// The cells in run order: per link and buffer, each competition with our
/// association and then with kernel BBR in its place, back to back, so that
/// the two compared figures are measured minutes apart at most.
fn matrix(
    rtts: &[u64],
    buffers: &[f64],
    competitions: &[Competition],
    subjects: &[Subject],
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &rtt_ms in rtts {
        for &buffer_bdp in buffers {
            for &competition in competitions {
                for &subject in subjects {
                    cells.push(Cell {
                        rtt_ms,
                        buffer_bdp,
                        competition,
                        subject,
                    });
                }
            }
        }
    }
    cells
}

/// Whether the kernel offers BBR for TCP sockets, after loading `tcp_bbr` if
/// it is a module that is not loaded yet.
fn kernel_bbr_available() -> Result<bool> {
    let available = || -> Result<bool> {
        let list = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .context("reading the kernel's available TCP congestion controls")?;
        Ok(list.split_whitespace().any(|cc| cc == "bbr"))
    };
    if available()? {
        return Ok(true);
    }
    println!("==> tcp_bbr not loaded: modprobe tcp_bbr");
    let _ = Command::new("modprobe").arg("tcp_bbr").status();
    available()
}

/// What every cell needs.
struct Bench<'a> {
    path: &'a WanPath,
    sides: Sides,
    binary: &'a Path,
    seconds: f64,
    echo: SocketAddr,
}

impl Bench<'_> {
    /// Runs one cell with wanem forwarding (stopped on error too).
    fn cell(&self, cell: &Cell) -> Result<Measured> {
        let flows = cell.flows();
        let pairs: Vec<Pair> = flows
            .iter()
            .enumerate()
            .map(|(i, flow)| self.pair(flow, port_of(i)))
            .collect();
        let wanem = self.path.forward_with(&cell.name(), &cell.params())?;
        let measured = self.measure(&flows, &pairs);
        let link = wanem.stop()?;
        let mut measured = measured?;
        let faults = link.a_to_b.faults() + link.b_to_a.faults();
        if faults > 0 {
            bail!(
                "wanem lost {faults} frames other than at its queue (see bench/results/tmp/coexist/{}-wanem.log)",
                cell.name()
            );
        }
        measured.link = link;
        Ok(measured)
    }

    fn pair(&self, flow: &Flow, port: u16) -> Pair {
        let args = |role: &str| {
            let mut args = vec![
                role.to_owned(),
                "--backend".into(),
                flow.backend.into(),
                "--addr".into(),
                self.sides.addr(port),
                "--size".into(),
                MESSAGE_SIZE.to_string(),
                "--streams".into(),
                STREAMS.to_string(),
                "--seconds".into(),
                self.seconds.to_string(),
            ];
            if let Some(cc) = flow.tcp_congestion {
                args.extend(["--tcp-congestion".into(), cc.into()]);
            }
            args
        };
        Pair {
            server: args("--server"),
            client: args("--client"),
        }
    }

    /// The base round trip, then every flow at once with the probes and the
    /// `ss` look beside them; the controllers checked.
    fn measure(&self, flows: &[Flow], pairs: &[Pair]) -> Result<Measured> {
        let ns = self.sides.client_ns.clone();
        let base = measure_rtt(
            &ns,
            self.echo,
            BASE_PROBES,
            PROBE_BYTES,
            PROBE_INTERVAL,
            Duration::from_millis(500),
        )?;
        let base_rtt = base
            .median()
            .context("no answer to the probes on the idle link")?;
        let warm_up = Duration::from_secs_f64(self.seconds * WARM_UP_SHARE);
        let window = Duration::from_secs_f64(self.seconds) - warm_up;
        let count = (window.as_millis() / PROBE_INTERVAL.as_millis()) as u64;
        let mut probing: Option<JoinHandle<testbed::Result<RttReport>>> = None;
        let mut looking: Option<JoinHandle<Result<String>>> = None;
        let run = run_pairs_with(&self.sides, self.binary, pairs, || {
            let (probe_ns, echo) = (ns.clone(), self.echo);
            probing = Some(std::thread::spawn(move || {
                std::thread::sleep(warm_up);
                measure_rtt(
                    &probe_ns,
                    echo,
                    count,
                    PROBE_BYTES,
                    PROBE_INTERVAL,
                    PROBE_TIMEOUT,
                )
            }));
            let ns = ns.clone();
            looking = Some(std::thread::spawn(move || {
                std::thread::sleep(warm_up + window / 2);
                let mut ss = Command::new("ss");
                ss.args(["-tinH"]);
                Ok(testbed::run(&mut testbed::exec_in(&ns, &ss))?)
            }));
        });
        // Joined on failure too: each ends by itself within the cell's time.
        let probes = probing.map(|t| t.join());
        let ss = looking.map(|t| t.join());
        let run = run?;
        let probes = probes
            .context("the probes did not start")?
            .map_err(|_| anyhow!("the probe thread panicked"))??;
        let ss = ss
            .context("ss did not run")?
            .map_err(|_| anyhow!("the ss thread panicked"))??;
        let ss_seen = ss_controllers(&ss, self.sides.server_ip);

        let mut controllers = Vec::new();
        for (i, (flow, (_, client))) in flows.iter().zip(&run.lines).enumerate() {
            let ran = string_field(client, "congestion")
                .with_context(|| format!("no controller in the sender's line {client:?}"))?;
            if let Some(asked) = flow.tcp_congestion {
                if ran != asked {
                    bail!("a TCP flow ran {ran}, not {asked}: {client}");
                }
                let port = port_of(i);
                if let Some((_, seen)) =
                    ss_seen.iter().find(|(p, seen)| *p == port && seen != asked)
                {
                    bail!("ss -ti shows {seen} on the flow to port {port}, not {asked}");
                }
            }
            controllers.push(ran);
        }

        let from = run.clients_started_unix_ms + warm_up.as_secs_f64() * 1000.0;
        let to = run.clients_started_unix_ms + self.seconds * 1000.0;
        let mut rates = run
            .lines
            .iter()
            .map(|(server, _)| {
                window_mbit(server, from, to)
                    .ok_or_else(|| anyhow!("no received series in {server:?}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let subject_mbit = rates.remove(0);
        let subject_cpu_s = run
            .lines
            .first()
            .and_then(|(_, client)| field(client, "cpu_seconds"))
            .unwrap_or(f64::NAN);
        Ok(Measured {
            subject_mbit,
            competitors_mbit: rates,
            base_rtt,
            probes,
            link: WanStats::default(),
            controllers,
            ss_seen,
            subject_cpu_s,
            load: load_average(),
        })
    }
}

/// The server port of the `i`th flow of a cell (0: the subject).
fn port_of(i: usize) -> u16 {
    match i {
        0 => SUBJECT_PORT,
        i => FIRST_COMPETITOR_PORT + (i - 1) as u16,
    }
}

/// A string field of a side's JSON line (`"congestion":"bbr"`).
fn string_field(line: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":\"");
    let start = line.find(&key)? + key.len();
    let len = line[start..].find('"')?;
    Some(line[start..start + len].to_owned())
}

/// The controller of each TCP connection to `server` in `ss -tinH`'s output:
/// (the server's port, the controller), sorted. A connection's line is
/// followed by an indented line of its internals, which starts with the
/// controller's name.
fn ss_controllers(out: &str, server: IpAddr) -> Vec<(u16, String)> {
    let prefix = format!("{server}:");
    let mut seen = Vec::new();
    let mut port: Option<u16> = None;
    for line in out.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(port) = port.take()
                && let Some(cc) = line.split_whitespace().next()
            {
                seen.push((port, cc.to_owned()));
            }
        } else {
            port = line
                .split_whitespace()
                .nth(4)
                .and_then(|peer| peer.strip_prefix(&prefix))
                .and_then(|p| p.parse().ok());
        }
    }
    seen.sort();
    seen
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The data, one row per cell.
fn csv(outcomes: &[Outcome]) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "subject,rtt_ms,buffer_bdp,queue_bytes,competition,subject_mbit,competitors_mbit,competitor_mbit_each,subject_share,jain,base_rtt_ms,queue_delay_p50_ms,queue_delay_p95_ms,queue_delay_max_ms,probes_sent,probes_lost,data_frames_received,data_frames_dropped_queue,data_queue_drop_percent,ack_frames_dropped_queue,wanem_late_over_1ms,controllers,ss_controllers,subject_sender_cpu_s,load_1min,error"
    )?;
    for Outcome { cell, result } in outcomes {
        write!(
            out,
            "{},{},{},{},{},",
            cell.subject.key(),
            cell.rtt_ms,
            cell.buffer_bdp,
            cell.queue_bytes(),
            cell.competition.key()
        )?;
        match result {
            Ok(m) => {
                let each: Vec<String> = m
                    .competitors_mbit
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect();
                let ss: Vec<String> = m
                    .ss_seen
                    .iter()
                    .map(|(port, cc)| format!("{port}={cc}"))
                    .collect();
                writeln!(
                    out,
                    "{:.2},{:.2},{},{:.4},{:.4},{:.2},{},{},{},{},{},{},{},{:.3},{},{},{},{},{:.2},{},",
                    m.subject_mbit,
                    m.competitors_sum(),
                    each.join(";"),
                    m.share(),
                    m.jain(),
                    m.base_rtt.as_secs_f64() * 1000.0,
                    ms(m.inflation_ms(0.5)),
                    ms(m.inflation_ms(0.95)),
                    ms(m.inflation_ms(1.0)),
                    m.probes.sent,
                    m.probes.lost(),
                    m.link.a_to_b.received,
                    m.link.a_to_b.dropped_queue,
                    m.queue_drop_percent(),
                    m.link.b_to_a.dropped_queue,
                    m.link.a_to_b.late_over_1ms + m.link.b_to_a.late_over_1ms,
                    m.controllers.join(";"),
                    ss.join(";"),
                    m.subject_cpu_s,
                    m.load.split_whitespace().next().unwrap_or("-"),
                )?;
            }
            Err(e) => {
                writeln!(
                    out,
                    "{},\"{}\"",
                    ",".repeat(20),
                    e.replace('"', "'").replace('\n', " ")
                )?;
            }
        }
    }
    Ok(out)
}

/// What the report is made of.
struct ReportInput<'a> {
    options: &'a CoexistBench,
    rtts: &'a [u64],
    buffers: &'a [f64],
    subjects: &'a [Subject],
    competitions: &'a [Competition],
    seconds: f64,
    outcomes: &'a [Outcome],
    planned: usize,
    interrupted: bool,
    bbr: bool,
    echoed: u64,
    load_at_start: &'a str,
    started: Instant,
}

fn list<T: ToString>(values: &[T]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `git` in the workspace, its output trimmed (empty if it failed).
fn git(args: &[&str]) -> String {
    Command::new("git")
        .current_dir(workspace_root())
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn report(input: &ReportInput<'_>) -> Result<String> {
    let mut flags = String::from("coexist");
    if !input.options.rtts_ms.is_empty() {
        write!(flags, " --rtt {}", list(input.rtts))?;
    }
    if !input.options.buffers_bdp.is_empty() {
        write!(flags, " --buffers {}", list(input.buffers))?;
    }
    if !input.options.subjects.is_empty() {
        let keys: Vec<&str> = input.subjects.iter().map(|s| s.key()).collect();
        write!(flags, " --subjects {}", keys.join(","))?;
    }
    if !input.options.competitions.is_empty() {
        let keys: Vec<&str> = input.competitions.iter().map(|c| c.key()).collect();
        write!(flags, " --competitions {}", keys.join(","))?;
    }
    if let Some(seconds) = input.options.seconds {
        write!(flags, " --seconds {seconds}")?;
    }
    let mut r = report_header("Coexistence on a loss-free shared bottleneck", &flags)?;
    let dirty = if git(&["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        ""
    } else {
        " (with uncommitted changes)"
    };
    writeln!(
        r,
        "- commit: {}{dirty}; the association's controller: sctp/src/congestion as of {}",
        git(&["log", "-1", "--format=%h %s"]),
        git(&[
            "log",
            "-1",
            "--format=%h (%ad) %s",
            "--date=short",
            "--",
            "sctp/src/congestion"
        ])
    )?;
    writeln!(
        r,
        "- load: load average {} at the start, {} at the end; run time {:.0} s",
        input.load_at_start,
        load_average(),
        input.started.elapsed().as_secs_f64()
    )?;
    writeln!(
        r,
        "- link: wanem (release) between the testbed's gateway and origin namespaces, started afresh per cell: {RATE_MBIT} Mbit/s each way, no loss, half the round trip each way, a drop-tail queue of the buffer's bytes each way (buffer × BDP, BDP = {RATE_MBIT} Mbit/s × RTT; frame limit {QUEUE_FRAMES}, so bytes govern); neighbour entries pinned, offloads off"
    )?;
    writeln!(
        r,
        "- flows: `transport_bench` (release) pairs, senders in the gateway namespace, receivers in the origin namespace, all started together, each sending {MESSAGE_SIZE}-byte messages for {} s (the association over {STREAMS} streams); goodput over the common window from {:.1} s to {} s",
        input.seconds,
        input.seconds * WARM_UP_SHARE,
        input.seconds
    )?;
    writeln!(
        r,
        "- subject: our association (userspace SCTP, the default controller, as configured: see the controllers line) or, as the reference, one kernel BBR TCP flow; competition: one CUBIC TCP flow, one BBR TCP flow (the kernel's), or six CUBIC TCP flows"
    )?;
    writeln!(
        r,
        "- controllers as run: every TCP sender read `TCP_CONGESTION` back after connecting and `ss -ti` in the sending namespace listed each connection's halfway through; a flow on another controller fails its cell. Kernel BBR: {}. Seen: {}",
        if input.bbr {
            "available"
        } else {
            "NOT available (tcp_bbr missing): its cells were not run"
        },
        controllers_seen(input.outcomes)
    )?;
    writeln!(
        r,
        "- queueing delay: a {PROBE_BYTES}-byte UDP probe every {} ms from the gateway namespace to testbed's echo in the origin namespace, through the same queue, during the window ({} echoed in all); RTT inflation = round trip − the cell's base round trip (median of {BASE_PROBES} probes on the idle link just before); probes lost: dropped at the full queue (or answered over {} s late)",
        PROBE_INTERVAL.as_millis(),
        input.echoed,
        PROBE_TIMEOUT.as_secs()
    )?;
    writeln!(
        r,
        "- loss: wanem's counters of the data direction over the whole cell: frames dropped at the full queue, percent of frames received (the link has no random loss)"
    )?;
    writeln!(
        r,
        "- cells: RTT {} ms × buffers {} BDP × {} competitions × {} subjects = {} planned, {} run{}{}{}\n",
        list(input.rtts),
        list(input.buffers),
        input.competitions.len(),
        input.subjects.len(),
        input.planned,
        input.outcomes.len(),
        if input.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        not_run(input.rtts, input.buffers),
        left_out(input.subjects, input.competitions)
    )?;

    for subject in Subject::ALL {
        let title = match subject {
            Subject::Association => "Our association (userspace SCTP, default controller)",
            Subject::KernelBbr => "Reference: one kernel BBR TCP flow in its place",
        };
        writeln!(
            r,
            "## {title}\n\n| RTT, ms | buffer, BDP (KB) | beside | its Mbit/s | theirs, Mbit/s | its share | Jain's index | queueing delay p50 / p95, ms | probes lost, % | queue drops, % |"
        )?;
        writeln!(r, "|---|---|---|---|---|---|---|---|---|---|")?;
        if !input.subjects.contains(&subject) {
            writeln!(
                r,
                "\nNot run this time (`--subjects`): its last figures are in the previous reports under bench/results.\n"
            )?;
            continue;
        }
        for Outcome { cell, result } in input.outcomes.iter().filter(|o| o.cell.subject == subject)
        {
            write!(
                r,
                "| {} | {} ({}) | {} |",
                cell.rtt_ms,
                cell.buffer_bdp,
                cell.queue_bytes() / 1000,
                cell.competition.label()
            )?;
            match result {
                Ok(m) => {
                    let theirs = if m.competitors_mbit.len() > 1 {
                        let min = m
                            .competitors_mbit
                            .iter()
                            .copied()
                            .fold(f64::INFINITY, f64::min);
                        let max = m.competitors_mbit.iter().copied().fold(0.0, f64::max);
                        format!("{:.1} ({min:.1}-{max:.1} each)", m.competitors_sum())
                    } else {
                        format!("{:.1}", m.competitors_sum())
                    };
                    writeln!(
                        r,
                        " {:.1} | {theirs} | {:.2} | {:.2} | {} / {} | {:.1} | {:.2} |",
                        m.subject_mbit,
                        m.share(),
                        m.jain(),
                        ms(m.inflation_ms(0.5)),
                        ms(m.inflation_ms(0.95)),
                        m.probes_lost_percent(),
                        m.queue_drop_percent()
                    )?;
                }
                Err(e) => writeln!(r, " failed: {} | | | | | | |", e.replace('|', "/"))?,
            }
        }
        writeln!(r)?;
    }
    r.push_str(&targets(input.outcomes)?);
    Ok(r)
}

/// Every controller the senders reported, per kind of flow.
fn controllers_seen(outcomes: &[Outcome]) -> String {
    let mut seen = std::collections::BTreeSet::new();
    for Outcome { cell, result } in outcomes {
        if let Ok(m) = result {
            for (i, cc) in m.controllers.iter().enumerate() {
                let role = match (i, cell.subject) {
                    (0, Subject::Association) => "association",
                    (0, Subject::KernelBbr) => "reference TCP",
                    _ => "competing TCP",
                };
                seen.insert(format!("{role} {cc}"));
            }
            for (_, cc) in &m.ss_seen {
                seen.insert(format!("ss: {cc}"));
            }
        }
    }
    if seen.is_empty() {
        return "none".into();
    }
    seen.into_iter().collect::<Vec<_>>().join(", ")
}

/// The subjects and competitions this run left out (`--subjects`,
/// `--competitions`), as text.
fn left_out(subjects: &[Subject], competitions: &[Competition]) -> String {
    let mut missing: Vec<&str> = Subject::ALL
        .iter()
        .filter(|s| !subjects.contains(s))
        .map(|s| s.key())
        .collect();
    missing.extend(
        Competition::ALL
            .iter()
            .filter(|c| !competitions.contains(c))
            .map(|c| c.key()),
    );
    if missing.is_empty() {
        String::new()
    } else {
        format!("; left out by choice: {}", missing.join(", "))
    }
}

/// The cells of the default matrix that this run left out, as text.
fn not_run(rtts: &[u64], buffers: &[f64]) -> String {
    let missing: Vec<String> = DEFAULT_RTTS_MS
        .iter()
        .flat_map(|rtt| {
            DEFAULT_BUFFERS_BDP
                .iter()
                .filter(move |b| !(rtts.contains(rtt) && buffers.contains(b)))
                .map(move |b| format!("{rtt} ms / {b} BDP"))
        })
        .collect();
    if missing.is_empty() {
        String::new()
    } else {
        format!("; not run of the full matrix: {}", missing.join(", "))
    }
}

/// The issue's three targets, cell by cell.
fn targets(outcomes: &[Outcome]) -> Result<String> {
    let mut t = String::from("## Targets (the association)\n\n");
    let ours = |competition: Competition| {
        outcomes.iter().filter(move |o| {
            o.cell.subject == Subject::Association && o.cell.competition == competition
        })
    };
    let (low, high) = ONE_CUBIC_SHARE;
    let mut lines = Vec::new();
    for (competition, what) in [
        (
            Competition::OneCubic,
            format!("share beside one CUBIC flow within {low}-{high}"),
        ),
        (
            Competition::SixCubic,
            "share beside six CUBIC flows at least 1/7 (0.143)".to_owned(),
        ),
    ] {
        let (mut met, mut cells, mut missed) = (0, 0, Vec::new());
        for o in ours(competition) {
            let Ok(m) = &o.result else { continue };
            cells += 1;
            let share = m.share();
            let ok = match competition {
                Competition::SixCubic => share >= SIX_CUBIC_MIN_SHARE,
                _ => (low..=high).contains(&share),
            };
            if ok {
                met += 1;
            } else {
                missed.push(format!(
                    "{} ms / {} BDP: {share:.2}",
                    o.cell.rtt_ms, o.cell.buffer_bdp
                ));
            }
        }
        lines.push(format!(
            "- {what}: met in {met} of {cells} cells{}",
            if missed.is_empty() {
                String::new()
            } else {
                format!("; missed: {}", missed.join(", "))
            }
        ));
    }
    let (mut met, mut cells, mut missed) = (0, 0, Vec::new());
    for o in outcomes
        .iter()
        .filter(|o| o.cell.subject == Subject::Association)
    {
        let reference = outcomes.iter().find(|r| {
            r.cell
                == Cell {
                    subject: Subject::KernelBbr,
                    ..o.cell
                }
        });
        let (Ok(m), Some(Outcome { result: Ok(k), .. })) = (&o.result, reference) else {
            continue;
        };
        let (Some(ours), Some(theirs)) = (m.inflation_ms(0.95), k.inflation_ms(0.95)) else {
            continue;
        };
        cells += 1;
        if ours <= theirs + P95_TOLERANCE_MS {
            met += 1;
        } else {
            missed.push(format!(
                "{} ms / {} BDP / {}: {ours:.1} against {theirs:.1}",
                o.cell.rtt_ms,
                o.cell.buffer_bdp,
                o.cell.competition.label()
            ));
        }
    }
    let reference_run = outcomes
        .iter()
        .any(|o| o.cell.subject == Subject::KernelBbr);
    lines.push(format!(
        "- p95 queueing delay no worse than kernel BBR's in the same cell (within {P95_TOLERANCE_MS} ms): {}",
        if !reference_run {
            "not judged: kernel BBR was not run this time (compare with the previous report's reference rows)".to_owned()
        } else if missed.is_empty() {
            format!("met in {met} of {cells} cells")
        } else {
            format!(
                "met in {met} of {cells} cells; missed (ours against kernel BBR's, ms): {}",
                missed.join(", ")
            )
        }
    ));
    for line in lines {
        writeln!(t, "{line}")?;
    }
    writeln!(t)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest Ethernet frame as wanem counts it (no FCS), bytes.
    const MIN_FRAME: u64 = 60;

    #[test]
    fn queues_are_buffers_of_the_bdp_in_bytes() {
        let cell = |rtt_ms, buffer_bdp| Cell {
            rtt_ms,
            buffer_bdp,
            competition: Competition::OneCubic,
            subject: Subject::Association,
        };
        // 50 Mbit/s × 20 ms = 125,000 bytes; × 80 ms = 500,000.
        assert_eq!(cell(20, 1.0).bdp_bytes(), 125_000);
        assert_eq!(cell(20, 0.5).queue_bytes(), 62_500);
        assert_eq!(cell(80, 8.0).queue_bytes(), 4_000_000);
        let params = cell(80, 2.0).params();
        assert_eq!(params.a_to_b.queue_bytes, Some(1_000_000));
        assert_eq!(params.a_to_b.delay, Duration::from_millis(40));
        assert_eq!(params.a_to_b.loss, Loss::None);
        // The frame limit never governs: the deepest buffer in full frames.
        assert!(
            u64::from(QUEUE_FRAMES) * MIN_FRAME > cell(MAX_RTT_MS, MAX_BUFFER_BDP).queue_bytes()
        );
        // A tiny buffer still holds one full frame.
        assert_eq!(cell(1, 0.01).queue_bytes(), FULL_FRAME);
    }

    #[test]
    fn the_matrix_pairs_each_cell_with_its_reference() {
        let cells = matrix(&[20, 80], &[1.0, 8.0], &Competition::ALL, &Subject::ALL);
        assert_eq!(cells.len(), 2 * 2 * 3 * 2);
        for pair in cells.chunks(2) {
            assert_eq!(pair[0].subject, Subject::Association);
            assert_eq!(
                pair[1],
                Cell {
                    subject: Subject::KernelBbr,
                    ..pair[0]
                }
            );
        }
        let six = cells
            .iter()
            .find(|c| c.competition == Competition::SixCubic)
            .expect("a six-flow cell");
        let flows = six.flows();
        assert_eq!(flows.len(), 7);
        assert_eq!(flows[0].backend, "userspace");
        assert!(
            flows[1..]
                .iter()
                .all(|f| f.backend == "tcp" && f.tcp_congestion == Some("cubic"))
        );
        assert_eq!((port_of(0), port_of(1), port_of(6)), (9899, 9900, 9905));
        assert_eq!(
            not_run(&[20, 80], &[1.0, 8.0]),
            "; not run of the full matrix: 20 ms / 0.5 BDP, 20 ms / 2 BDP, 80 ms / 0.5 BDP, 80 ms / 2 BDP"
        );
        assert_eq!(not_run(&DEFAULT_RTTS_MS, &DEFAULT_BUFFERS_BDP), "");
    }

    #[test]
    fn subjects_and_competitions_can_be_left_out_by_name() {
        let keys = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let subjects = pick(
            "subjects",
            &keys(&["association"]),
            &Subject::ALL,
            Subject::key,
        )
        .expect("known");
        assert_eq!(subjects, [Subject::Association]);
        let all = pick("competitions", &[], &Competition::ALL, Competition::key).expect("all");
        assert_eq!(all, Competition::ALL);
        let err =
            pick("subjects", &keys(&["quic"]), &Subject::ALL, Subject::key).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "--subjects quic: one of association, kernel-bbr"
        );
        let cells = matrix(&[20], &[1.0], &Competition::ALL, &subjects);
        assert_eq!(cells.len(), 3);
        assert!(cells.iter().all(|c| c.subject == Subject::Association));
        assert_eq!(
            left_out(&subjects, &all),
            "; left out by choice: kernel-bbr"
        );
        assert_eq!(left_out(&Subject::ALL, &Competition::ALL), "");
    }

    #[test]
    fn ss_output_gives_each_connections_controller() {
        let out = "ESTAB 0 12345 192.0.2.65:40002 192.0.2.66:9900\n\t cubic wscale:7,7 rto:220 rtt:20.5/1 mss:1448 cwnd:60\nESTAB 0 0 192.0.2.65:40004 192.0.2.66:9899\n\t bbr wscale:7,7 rto:204 bbr:(bw:24Mbps,mrtt:20)\nESTAB 0 0 10.0.0.1:22 10.0.0.2:5000\n\t cubic wscale:7,7\n";
        let server: IpAddr = "192.0.2.66".parse().expect("address");
        assert_eq!(
            ss_controllers(out, server),
            vec![(9899, "bbr".to_owned()), (9900, "cubic".to_owned())]
        );
        assert_eq!(ss_controllers("", server), vec![]);
    }

    #[test]
    fn string_fields_and_shares() {
        let line = r#"{"side":"client","backend":"tcp","tcp_congestion":"cubic","congestion":"cubic","seconds":1.0}"#;
        assert_eq!(string_field(line, "congestion").as_deref(), Some("cubic"));
        assert_eq!(string_field(line, "missing"), None);
        let m = Measured {
            subject_mbit: 10.0,
            competitors_mbit: vec![30.0],
            base_rtt: Duration::from_millis(20),
            probes: RttReport {
                sent: 4,
                rtts: vec![
                    Duration::from_millis(21),
                    Duration::from_millis(25),
                    Duration::from_millis(40),
                ],
            },
            link: WanStats::default(),
            controllers: vec![],
            ss_seen: vec![],
            subject_cpu_s: 0.0,
            load: String::new(),
        };
        assert!((m.share() - 0.25).abs() < 1e-12);
        assert!((m.jain() - 0.8).abs() < 1e-12);
        assert!((m.inflation_ms(0.5).expect("p50") - 5.0).abs() < 1e-9);
        assert!((m.inflation_ms(0.95).expect("p95") - 20.0).abs() < 1e-9);
        assert!((m.probes_lost_percent() - 25.0).abs() < 1e-12);
    }
}
