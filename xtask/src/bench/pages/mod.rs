//! `cargo xtask bench pages`: page loads in headless Chromium through every
//! alternative, over the same emulated links, in one run.
//!
//! The alternatives (the letters):
//! - (a) nginx, HTTP/1.1 over TCP, the browser's usual 6 connections per host;
//! - (b) nginx, HTTP/2 over TLS;
//! - (c) Squid in transparent TPROXY mode with its cache (cold);
//! - (d) our gateway over the framed-TCP backend, cold cache, prefetch off;
//! - (e) our gateway over userspace SCTP, cold cache, prefetch off;
//! - (f) the same with prefetch on;
//! - (g) the same with a warm cache;
//! - (p) as (e) with push on: the origin sends the page's closure with the
//!   page, the gateway takes it into its cache (docs/push.md), prefetch off;
//! - (fp) push and prefetch both on, cold cache;
//! - (h) HTTPS through the gateway: the site by its name over TLS, the
//!   gateway tunnelling each TLS connection on a stream of the userspace-SCTP
//!   association to the origin, which terminates TLS (against (b)).
//!
//! Every load goes from the client namespace through the router namespace and
//! the WAN emulator (`wanem`) to the origin host, where nginx and the SCTP origin
//! serve the same files (the generated corpus and the demo site): only the thing
//! in the router changes. The emulator is restarted with each link's settings.
//!
//! Within a link the alternatives are interleaved: round after round, each
//! alternative in turn, so that a slow spell of the shared machine falls on
//! all of them. In each round an alternative starts afresh (the gateway is
//! restarted, its association set up by a warm-up request), carries one
//! unrecorded load per page, as a transport in use has, and then records
//! two: one after [`IDLE_BEFORE_FIRST_LOAD`] of silence, longer than any
//! sender's idle restart (TCP's and SCTP's RTO-based ones, BBR's restart
//! from idle), and one at once after it, on a transport that has just
//! carried a page. The report shows both ("after idle", "warm").
//!
//! Every sender's congestion controller is set by `--tcp-cc` (BBR unless
//! given): the kernel's TCP in every namespace (nginx, Squid, the framed-TCP
//! origin, the browser), our SCTP at both ends and quinn through the
//! daemons' `congestion`; what ran is read back and kept in the run's
//! manifest ([`manifest`]), from which every report is rendered.
//!
//! What is cold and what is warm, per alternative, is part of the method and in
//! the report: every load uses a fresh Chromium profile (no browser cache, new
//! connections); a proxy (Squid, the gateway) gets one warm-up request before
//! each load so that its upstream connection or association is up, as it would
//! be on a router that has been running; then its cache is emptied (Squid is
//! restarted on an empty cache, the gateway's is purged through its admin
//! endpoint), except for (g), whose cache keeps what the first, unrecorded load
//! put in it.
//!
//! Push: the SCTP origin runs with `push.enabled` for the whole of a run that
//! has (p) or (fp), and pushes only to a gateway that announced PUSH, so only
//! those two receive pushes; each alternative's gateway `push.enabled` is
//! read back from its configuration into the manifest. A push cell's ideal
//! is the issue's: (g)'s warm-cache load of the same cell plus the page's
//! bytes at the bottleneck rate.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testbed::corpus::{self, GeneratedPage, Link};
use testbed::{
    Binaries, Browser, BrowserConfig, Demo, DemoOptions, DemoWan, GatewayConfigOverrides,
    NsProcess, PageLoad, Squid, TlsSite, WanEmulator, WanParams,
};

use crate::cmd::{install_stop_handlers, stop_requested, workspace_root};
use crate::shipped::ShippedConfig;

mod manifest;

use manifest::Manifest;

/// The gateway's `gateway_push_*` counters after each round of (p) and
/// (fp), in the run's data directory.
const PUSH_METRICS: &str = "push-metrics.txt";
/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwpg-";
/// The site's address as the browser dials it.
const SITE: &str = "203.0.113.10";
/// The framed-TCP origin's port (the userspace-SCTP origin has the demo's 9899).
const FRAMED_TCP_PORT: u16 = 9900;
/// The QUIC origin's UDP port, on the origin host's WAN address.
const QUIC_PORT: u16 = 9901;
/// The gateway's admin endpoint in the router namespace (the shipped default).
const ADMIN: &str = "127.0.0.1:3130";
/// How long one load may take before it counts as failed.
const LOAD_TIMEOUT: Duration = Duration::from_secs(90);
/// Seed of the generated corpus.
const CORPUS_SEED: u64 = 2026;
/// Silence before each "after idle" load: longer than any sender's idle
/// restart (RFC 9260 7.2.1 and TCP's RFC 5681 4.1 reset after an RTO, at
/// most about 1 s on these links once measured, 3 s before; BBR restarts
/// from idle on any silence).
const IDLE_BEFORE_FIRST_LOAD: Duration = Duration::from_secs(4);
/// A load average (1 minute) above this during a run gets a warning in its
/// report: the machine was busy enough to move the figures.
const BUSY_LOAD_AVERAGE: f64 = 1.5;
/// Below this many loads a cell's spread is shown as min-max, not as
/// percentiles.
const PERCENTILE_LOADS: usize = 10;
/// The page of the demo site, by its name in the report.
const DEMO_PAGE: &str = "demo";
/// A real site's page, by its name in the report: a chapter of the Debian
/// Administrator's Handbook (package debian-handbook) with its screenshots,
/// served as its files are.
const HANDBOOK_PAGE: &str = "handbook";
/// Where the debian-handbook package puts the English HTML.
const HANDBOOK_DIR: &str = "/usr/share/doc/debian-handbook/html/en-US";
/// The handbook's chapter loaded: 21 screenshots and the book's stylesheets.
const HANDBOOK_CHAPTER: &str = "sect.installation-steps.html";

/// The alternatives, in the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Alternative {
    /// nginx, HTTP/1.1 over TCP.
    A,
    /// nginx, HTTP/2 over TLS.
    B,
    /// Squid, transparent TPROXY, cold cache.
    C,
    /// The gateway over framed TCP, cold cache, prefetch off.
    D,
    /// The gateway over userspace SCTP, cold cache, prefetch off.
    E,
    /// The gateway over userspace SCTP, cold cache, prefetch on.
    F,
    /// The gateway over userspace SCTP, warm cache, prefetch on.
    G,
    /// The gateway over userspace SCTP, cold cache, push on, prefetch off.
    P,
    /// The gateway over userspace SCTP, cold cache, push and prefetch on.
    Fp,
    /// The gateway over QUIC (quinn), cold cache, prefetch off.
    Q,
    /// HTTPS through the gateway's tunnel over userspace SCTP.
    H,
}

impl Alternative {
    pub(crate) const ALL: [Alternative; 11] = [
        Self::A,
        Self::B,
        Self::C,
        Self::D,
        Self::E,
        Self::F,
        Self::G,
        Self::P,
        Self::Fp,
        Self::Q,
        Self::H,
    ];

    /// Its name in the report, the CSVs and on the command line: the issue's
    /// letter, or letters.
    fn letter(self) -> &'static str {
        match self {
            Self::A => "a",
            Self::B => "b",
            Self::C => "c",
            Self::D => "d",
            Self::E => "e",
            Self::F => "f",
            Self::G => "g",
            Self::P => "p",
            Self::Fp => "fp",
            Self::Q => "q",
            Self::H => "h",
        }
    }

    fn from_letter(letter: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.letter() == letter)
    }

    fn label(self) -> &'static str {
        match self {
            Self::A => "nginx HTTP/1.1",
            Self::B => "nginx HTTP/2+TLS",
            Self::C => "Squid TPROXY, cold",
            Self::D => "gateway framed TCP, cold",
            Self::E => "gateway SCTP, cold",
            Self::F => "gateway SCTP, cold, prefetch",
            Self::G => "gateway SCTP, warm cache",
            Self::P => "gateway SCTP, cold, push",
            Self::Fp => "gateway SCTP, cold, push and prefetch",
            Self::Q => "gateway QUIC, cold",
            Self::H => "gateway SCTP, HTTPS tunnel",
        }
    }

    fn method(self) -> &'static str {
        match self {
            Self::A => {
                "Chromium to nginx on the origin host over plain HTTP/1.1; the router only forwards"
            }
            Self::B => {
                "Chromium to nginx on the origin host over HTTP/2 and TLS 1.3 (a certificate Chromium trusts by its key); the router only forwards"
            }
            Self::C => {
                "Squid intercepts port 80 on the router (TPROXY) and fetches from nginx; restarted on an empty cache before each load, then one warm-up request"
            }
            Self::D => {
                "the gateway intercepts port 80 and carries requests to the origin over its framed-TCP backend (one TCP connection, streams framed on it); prefetch off; cache purged before each load, after one warm-up request"
            }
            Self::E => "as (d) over userspace SCTP (one association, 32 streams)",
            Self::F => "as (e) with the prefetch queue on",
            Self::G => "as (f); the cache keeps what one unrecorded load (fresh profile) put in it",
            Self::P => {
                "as (e) with the gateway's `push.enabled`: it announces PUSH, and the origin (push on for the whole run) sends each navigation's closure into the gateway's cache below the page's own bytes; prefetch off"
            }
            Self::Fp => "as (p) with the prefetch queue on",
            Self::H => {
                "Chromium over HTTPS by the site's name (a certificate at the origin, trusted by its key); the gateway intercepts port 443 for the site, reads the ClientHello's server name and tunnels each TLS connection on a stream of the userspace-SCTP association to the origin, which terminates TLS (HTTP/1.1 by its ALPN); nothing cached or prefetched; one warm-up request over port 80 before each load"
            }
            Self::Q => {
                "as (e) over the QUIC backend (quinn with the controller named by the shipped configs' `congestion`, mapped to quinn's; one connection, one QUIC stream per stream number): the multistream transport our SCTP is measured against"
            }
        }
    }

    /// Round trips of connection set-up this alternative surely pays across
    /// the WAN before its first request (for [`corpus::discovery_bound`]):
    /// the browser's TCP handshake to nginx, TLS 1.3's on top for (b) and
    /// (h) (which terminates TLS at the origin); none where the router's
    /// upstream connection or association is up before the load. `None`:
    /// the load does not cross the WAN (a warm cache).
    fn handshakes(self) -> Option<u32> {
        match self {
            Self::A => Some(1),
            Self::B => Some(2),
            Self::H => Some(1),
            Self::C | Self::D | Self::E | Self::F | Self::P | Self::Fp | Self::Q => Some(0),
            Self::G => None,
        }
    }

    fn is_gateway(self) -> bool {
        matches!(
            self,
            Self::D | Self::E | Self::F | Self::G | Self::P | Self::Fp | Self::Q | Self::H
        )
    }

    /// Whether its gateway takes pushes (`push.enabled`).
    fn push(self) -> bool {
        matches!(self, Self::P | Self::Fp)
    }

    /// Whether its gateway prefetches (`prefetch.enabled_for_origins`).
    fn prefetch(self) -> bool {
        matches!(self, Self::F | Self::G | Self::Fp)
    }
}

/// The links' round-trip times when `--rtt` is not given, ms.
pub(crate) const DEFAULT_RTTS_MS: [u64; 3] = [20, 80, 200];
/// Bottleneck rates when `--rate` is not given, Mbit/s.
pub(crate) const DEFAULT_RATES_MBIT: [u64; 2] = [10, 100];

/// Options for `cargo xtask bench pages`.
#[derive(Debug, Clone)]
pub(crate) struct PagesBench {
    /// Recorded loads per page, alternative and link.
    pub loads: usize,
    /// Round-trip times, ms.
    pub rtts_ms: Vec<u64>,
    /// Random loss per direction, percent.
    pub losses: Vec<f64>,
    /// Bottleneck rates, Mbit/s.
    pub rates_mbit: Vec<u64>,
    /// Explicit links, `RTT/LOSS/RATE` each, run in this order instead of
    /// every combination of the three above (when not empty).
    pub links: Vec<String>,
    /// Which alternatives.
    pub alternatives: Vec<Alternative>,
    /// Which pages: generated profiles (p25, p50, p75) and `demo`.
    pub pages: Vec<String>,
    /// The report's name: bench/results/{name}.md and bench/results/{name}/.
    pub name: String,
    /// The congestion controller of every sender: the kernel's TCP in every
    /// namespace, our SCTP and quinn (`bbr`, `cubic` or `reno`).
    pub tcp_cc: String,
    /// The origin offers h2 on HTTPS tunnels (`tls.h2`): (h) is HTTP/2.
    pub tunnel_h2: bool,
}

/// One emulated link.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LinkCell {
    rtt_ms: u64,
    loss_percent: f64,
    rate_mbit: u64,
}

impl LinkCell {
    /// A link from `--links`: `RTT/LOSS/RATE` (ms, percent, Mbit/s).
    fn parse(text: &str) -> Result<Self> {
        let bad = || format!("--links {text}: RTT/LOSS/RATE (ms, percent, Mbit/s), as 80/0/100");
        let mut parts = text.split('/');
        let (Some(rtt), Some(loss), Some(rate), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            bail!(bad());
        };
        let cell = LinkCell {
            rtt_ms: rtt.trim().parse().with_context(bad)?,
            loss_percent: loss.trim().parse().with_context(bad)?,
            rate_mbit: rate.trim().parse().with_context(bad)?,
        };
        if cell.rate_mbit == 0 || !(0.0..100.0).contains(&cell.loss_percent) {
            bail!(bad());
        }
        Ok(cell)
    }

    fn params(self) -> WanParams {
        let mut params = WanParams::cell(
            Duration::from_millis(self.rtt_ms),
            self.loss_percent,
            self.rate_mbit,
        );
        // A drop-tail queue of one bandwidth-delay product (at least 64 full
        // frames): what a well-configured access router holds, without the
        // seconds of queueing a 1000-frame default adds at 10 Mbit/s.
        let bdp = self.rate_mbit * 1_000_000 / 8 * self.rtt_ms / 1000;
        let queue = bdp.max(64 * 1514);
        for direction in [&mut params.a_to_b, &mut params.b_to_a] {
            direction.queue_bytes = Some(queue);
        }
        params
    }

    fn link(self) -> Link {
        Link {
            rtt: Duration::from_millis(self.rtt_ms),
            rate_bits_per_second: self.rate_mbit * 1_000_000,
        }
    }

    fn name(self) -> String {
        format!(
            "{} ms, {}% loss, {} Mbit/s",
            self.rtt_ms, self.loss_percent, self.rate_mbit
        )
    }
}

/// The transport's state at a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The first load of a round, after [`IDLE_BEFORE_FIRST_LOAD`] of silence.
    AfterIdle,
    /// The next one, at once.
    Warm,
}

impl Phase {
    /// Its name in loads.csv's `transport` column.
    fn name(self) -> &'static str {
        match self {
            Self::AfterIdle => "after idle",
            Self::Warm => "warm",
        }
    }
}

/// One recorded load, or why it failed.
#[derive(Debug, Clone)]
struct Record {
    page: String,
    alternative: Alternative,
    link: LinkCell,
    /// The round, from 0.
    index: usize,
    phase: Phase,
    /// The 1-minute load average when the load started.
    load_average: Option<f64>,
    outcome: std::result::Result<Measured, String>,
}

#[derive(Debug, Clone)]
struct Measured {
    load: PageLoad,
    /// Bytes of every response on the wire, as Chromium counted them.
    bytes: u64,
}

/// Everything that runs for the whole benchmark.
struct Bench {
    demo: Demo,
    wanem: PathBuf,
    dir: PathBuf,
    pages: Vec<GeneratedPage>,
    /// (b)'s nginx's certificate (the demo's TLS nginx on the site's
    /// addresses).
    tls: TlsSite,
    /// Every sender's congestion controller (`--tcp-cc`).
    tcp_cc: String,
    _framed_origin: NsProcess,
    _quic_origin: NsProcess,
    /// The certificate pin the QUIC origin logged at start, for (q)'s gateway.
    quic_pin: String,
}

pub(crate) fn run(options: &PagesBench) -> Result<()> {
    install_stop_handlers()?;
    if !["bbr", "cubic", "reno"].contains(&options.tcp_cc.as_str()) {
        bail!(
            "--tcp-cc {}: bbr, cubic or reno (a controller every sender has)",
            options.tcp_cc
        );
    }
    // Alternatives (d) and (q) run the daemons over framed TCP and QUIC.
    let built = crate::run::build_with_baselines(&["gateway", "origin", "wanem"])?;
    let dir = testbed::target_dir().join("bench-pages");
    let _ = std::fs::remove_dir_all(&dir);
    testbed::cleanup_stale(PREFIX)?;
    let site = dir.join("site");
    let pages = site_pages(&site, &options.pages)?;
    let cells: Vec<LinkCell> = if !options.links.is_empty() {
        options
            .links
            .iter()
            .map(|l| LinkCell::parse(l))
            .collect::<Result<_>>()?
    } else {
        options
            .rtts_ms
            .iter()
            .flat_map(|&rtt_ms| {
                options.losses.iter().flat_map(move |&loss_percent| {
                    options.rates_mbit.iter().map(move |&rate_mbit| LinkCell {
                        rtt_ms,
                        loss_percent,
                        rate_mbit,
                    })
                })
            })
            .collect()
    };
    let Some(&first) = cells.first() else {
        bail!("no link to run: give at least one --rtt, --loss and --rate");
    };

    println!(
        "==> {} links x {} rounds x {} alternatives x {} pages x 2 loads (after idle, warm)",
        cells.len(),
        options.loads,
        options.alternatives.len(),
        pages.len(),
    );
    let mut manifest = Manifest::starting(invocation(), &options.alternatives);
    manifest.congestion = Some(options.tcp_cc.clone());
    manifest.idle_before_first_load_ms = Some(IDLE_BEFORE_FIRST_LOAD.as_millis() as u64);
    manifest.warming_load = true;
    if options.tunnel_h2 {
        manifest.notes.push(
            "the origin offers h2 by ALPN on HTTPS tunnels (`tls.h2`): (h) is HTTP/2 inside one tunnel"
                .into(),
        );
    }
    if options.alternatives.iter().any(|a| a.push()) {
        manifest.notes.push(
            "the userspace-SCTP origin runs with `push.enabled = true` for the whole run; it pushes only to a gateway that announced PUSH (its own `push.enabled`), so of the alternatives only (p) and (fp) receive pushes: the Alternatives table's push column is each gateway's `push.enabled` as read back from the configuration it ran with".into(),
        );
    }
    let mut bench = Bench::start(&built, &dir, &site, pages, first, options, &mut manifest)?;
    let mut records = Vec::new();
    'links: for (n, &cell) in cells.iter().enumerate() {
        println!("==> link {}/{}: {}", n + 1, cells.len(), cell.name());
        bench.set_link(cell)?;
        for round in 0..options.loads {
            for &alternative in &options.alternatives {
                if stop_requested() {
                    println!("==> stopping early (signal); writing what was measured");
                    break 'links;
                }
                records.extend(bench.run_round(
                    alternative,
                    cell,
                    round,
                    options.loads,
                    &mut manifest,
                )?);
            }
        }
    }
    bench.stop_gateway()?;
    manifest.finish();

    let csv_dir = results_dir().join(&options.name);
    std::fs::create_dir_all(&csv_dir)?;
    // What older runs kept instead of a manifest.
    for old in ["notes.txt", "command.txt"] {
        let _ = std::fs::remove_file(csv_dir.join(old));
    }
    manifest.write(&csv_dir)?;
    let push_metrics = dir.join(PUSH_METRICS);
    if push_metrics.exists() {
        std::fs::copy(&push_metrics, csv_dir.join(PUSH_METRICS))
            .context("copying the push counters")?;
    }
    write_resources(&csv_dir.join("resources.csv"), &records)?;
    let rows: Vec<LoadRow> = records
        .iter()
        .map(|r| LoadRow::from_record(r, &bench.pages))
        .collect();
    write_loads(&csv_dir.join("loads.csv"), &rows)?;
    render(&options.name, &manifest, &rows, &bench.pages)
}

/// `cargo xtask bench pages --from-csv`: the report and charts again from a
/// run's bench/results/{name}/loads.csv and its manifest (reconstructed
/// first for a run older than manifests), without loading anything.
pub(crate) fn rerender(name: &str) -> Result<()> {
    let manifest = Manifest::of_run(name)?;
    let path = results_dir().join(name).join("loads.csv");
    let mut reader =
        csv::Reader::from_path(&path).with_context(|| format!("reading {}", path.display()))?;
    let rows = reader
        .deserialize()
        .collect::<std::result::Result<Vec<LoadRow>, _>>()
        .with_context(|| format!("parsing {}", path.display()))?;
    let mut names: Vec<String> = Vec::new();
    for row in &rows {
        if !names.contains(&row.page) {
            names.push(row.page.clone());
        }
    }
    // The corpus is deterministic: generating it again describes the same pages.
    let site = rerender_dir()?;
    let pages = site_pages(&site, &names)?;
    let rendered = render(name, &manifest, &rows, &pages);
    let _ = std::fs::remove_dir_all(&site);
    rendered
}

fn results_dir() -> PathBuf {
    workspace_root().join("bench/results")
}

fn rerender_dir() -> Result<PathBuf> {
    let dir = testbed::target_dir().join("bench-pages-rerender");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// This run's arguments after `cargo xtask bench`, for the report.
fn invocation() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.iter()
        .skip_while(|a| *a != "pages")
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes bench/results/{name}.md and the charts for `rows`, as `manifest`
/// says the run was.
fn render(
    name: &str,
    manifest: &Manifest,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
) -> Result<()> {
    let run = RunShape::of(rows);
    let charts = charts(name, &run, rows, pages)?;
    let mut report = report(name, manifest, &run, rows, pages, &charts)?;
    resource_waits(&mut report, &run, pages, &read_resource_waits(name))?;
    let path = results_dir().join(format!("{name}.md"));
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    println!("{report}");
    println!(
        "==> report written to bench/results/{name}.md, CSV and charts to bench/results/{name}/"
    );
    Ok(())
}

/// Writes the corpus and the demo site into `site` and describes the pages asked for.
fn site_pages(site: &Path, wanted: &[String]) -> Result<Vec<GeneratedPage>> {
    let generated = corpus::generate(site, CORPUS_SEED).context("generating the page corpus")?;
    copy_tree(&testbed::demo_site(), site).context("copying the demo site")?;
    let generated_page = |name: &str| {
        generated.iter().find(|p| p.name == name).with_context(|| {
            let known: Vec<&str> = generated.iter().map(|p| p.name.as_str()).collect();
            format!(
                "no page {name}: the corpus has {known:?}, their script-driven js25, js50 and \
                 js75, {DEMO_PAGE} and {HANDBOOK_PAGE}"
            )
        })
    };
    let mut pages = Vec::new();
    for name in wanted {
        let page = if name == DEMO_PAGE {
            let mut page =
                corpus::describe_dir(site, "/").context("describing the demo site's page")?;
            page.name = DEMO_PAGE.into();
            page
        } else if name == HANDBOOK_PAGE {
            let handbook = Path::new(HANDBOOK_DIR);
            if !handbook.is_dir() {
                bail!(
                    "page {HANDBOOK_PAGE} needs the debian-handbook package ({HANDBOOK_DIR}): \
                     `cargo xtask setup` installs it"
                );
            }
            copy_tree(handbook, &site.join(HANDBOOK_PAGE))
                .context("copying the Debian handbook")?;
            let mut page =
                corpus::describe_dir(site, &format!("/{HANDBOOK_PAGE}/{HANDBOOK_CHAPTER}"))
                    .context("describing the handbook's chapter")?;
            page.name = HANDBOOK_PAGE.into();
            page
        } else if let Some(percentile) = name.strip_prefix("js") {
            let base = generated_page(&format!("p{percentile}"))?;
            corpus::script_driven(site, base)
                .with_context(|| format!("writing the script-driven page {name}"))?
        } else {
            generated_page(name)?.clone()
        };
        pages.push(page);
    }
    Ok(pages)
}

/// Copies the files and directories under `from` into `to`.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Starts an origin serving `site` on `listen` over `transport`, beside the
/// demo's own (userspace SCTP) origin, and waits until it listens.
fn spawn_origin(
    binary: &Path,
    config: &Path,
    namespace: &str,
    site: &Path,
    transport: &str,
    listen: SocketAddr,
    dir: &Path,
) -> Result<NsProcess> {
    let mut command = Command::new(binary);
    command
        .arg("--config")
        .arg(config)
        .args(["--transport", transport, "--listen"])
        .arg(listen.to_string())
        .arg("--root")
        .arg(site)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1");
    let name = format!("origin-{transport}");
    let mut origin =
        NsProcess::spawn(namespace, &name, &command, &dir.join(format!("{name}.log")))?;
    origin.wait_for_log(&format!("listening on {listen}"), testbed::READY_TIMEOUT)?;
    Ok(origin)
}

/// The shipped config/origin.toml with `transport.userspace.congestion` and
/// `transport.quic.congestion` set to `congestion`, written into `dir`; its
/// path.
fn origin_config(dir: &Path, congestion: &str) -> Result<PathBuf> {
    let mut origin = ShippedConfig::read("origin.toml")?;
    for backend in ["userspace", "quic"] {
        origin
            .table(&format!("transport.{backend}"))?
            .insert("congestion".into(), congestion.into());
    }
    origin.write(
        dir,
        "origin-pages.toml",
        &format!(
            "transport.userspace.congestion and transport.quic.congestion = {congestion:?} (bench pages --tcp-cc)"
        ),
    )
}

/// Sets the kernel's TCP congestion control to `cc` in every namespace of
/// the run (the browser's, the router's with Squid and the gateway, the
/// origin host's with nginx and the framed-TCP origin), reads it back, and
/// notes each in the manifest with the daemons' own `congestion`.
fn set_tcp_congestion(demo: &Demo, cc: &str, manifest: &mut Manifest) -> Result<()> {
    const KEY: &str = "net.ipv4.tcp_congestion_control";
    let topology = &demo.topology;
    for (role, ns) in [
        ("browser (client namespace)", topology.client.name()),
        ("router (Squid, the gateway's TCP)", topology.gateway.name()),
        (
            "origin host (nginx, framed-TCP origin)",
            topology.origin.name(),
        ),
    ] {
        testbed::sysctl(ns, KEY, cc)
            .with_context(|| format!("setting TCP congestion control {cc} in {ns}"))?;
        let read = testbed::run(&mut testbed::exec_in(
            ns,
            Command::new("sysctl").args(["-n", KEY]),
        ))
        .with_context(|| format!("reading {KEY} in {ns}"))?;
        let read = read.trim();
        if read != cc {
            bail!("{KEY} in {ns} reads {read:?} after setting {cc:?}");
        }
        manifest
            .controllers
            .push(format!("{role}: TCP {read} ({KEY}, read back)"));
    }
    manifest.controllers.push(format!(
        "our SCTP (gateway and origin) and quinn (QUIC): `transport.userspace.congestion` and `transport.quic.congestion` = \"{cc}\" in both daemons' configurations (below)"
    ));
    Ok(())
}

/// `push.enabled` of a gateway configuration (false where the key or the
/// section is absent: the gateway's default).
fn push_enabled(config: &str) -> Result<bool> {
    let table: toml::Table = config
        .parse()
        .context("parsing the gateway's configuration")?;
    Ok(table
        .get("push")
        .and_then(|push| push.get("enabled"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(false))
}

/// The 1-minute load average now (the first of `load_average`'s figures).
fn one_minute_load() -> Option<f64> {
    super::common::load_average()
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The certificate pin a QUIC origin logs at start (its line "QUIC
/// certificate SHA-256 (...): PIN").
fn quic_origin_pin(origin: &NsProcess) -> Result<String> {
    const MARK: &str = "QUIC certificate SHA-256";
    let log = origin.log();
    log.lines()
        .find(|line| line.contains(MARK))
        .and_then(|line| line.rsplit(": ").next())
        .map(|pin| pin.trim().to_owned())
        .with_context(|| format!("the QUIC origin logged no \"{MARK}\" line:\n{log}"))
}

impl Bench {
    fn start(
        built: &[PathBuf],
        dir: &Path,
        site: &Path,
        pages: Vec<GeneratedPage>,
        first: LinkCell,
        options: &PagesBench,
        manifest: &mut Manifest,
    ) -> Result<Self> {
        let (tcp_cc, tunnel_h2) = (options.tcp_cc.as_str(), options.tunnel_h2);
        let origin_push = options.alternatives.iter().any(|a| a.push());
        let binaries = Binaries {
            gateway: built[0].clone(),
            origin: built[1].clone(),
        };
        std::fs::create_dir_all(dir)?;
        let origin_config = origin_config(dir, tcp_cc)?;
        let mut options = DemoOptions::new(PREFIX, &workspace_root(), dir);
        options.origin_root = Some(site.to_owned());
        options.origin_transport = Some("userspace".into());
        options.origin_config = Some(origin_config.clone());
        // Set either way, so that the configuration recorded says it.
        options.origin_push = Some(origin_push);
        options.start_gateway = false;
        // (h)'s certificate at the origin and (b)'s TLS nginx.
        options.https = true;
        options.https_h2 = tunnel_h2;
        options.wan = Some(DemoWan {
            wanem: built[2].clone(),
            params: first.params(),
        });
        println!("==> starting namespaces, nginx, the origins and the WAN emulator");
        let demo = Demo::start(binaries, options)?;
        set_tcp_congestion(&demo, tcp_cc, manifest)?;
        let origin_ns = demo.topology.origin.name().to_owned();

        let wan_host = testbed::topology::WAN.host_v4;
        let framed_origin = spawn_origin(
            &built[1],
            &origin_config,
            &origin_ns,
            site,
            "framed-tcp",
            SocketAddr::new(wan_host.into(), FRAMED_TCP_PORT),
            dir,
        )?;
        let quic_origin = spawn_origin(
            &built[1],
            &origin_config,
            &origin_ns,
            site,
            "quic",
            SocketAddr::new(wan_host.into(), QUIC_PORT),
            dir,
        )?;
        let quic_pin = quic_origin_pin(&quic_origin)?;
        manifest.add_config(
            "origin over framed TCP and QUIC ((d), (q); `--transport`, `--listen`, `--root` \
             on its command line)"
                .into(),
            std::fs::read_to_string(&origin_config)?,
        );
        let sctp_config = demo
            .origin_config_path()
            .context("the demo started no origin")?;
        manifest.add_config(
            "origin over userspace SCTP (every other alternative through the gateway; \
             `--transport`, `--listen`, `--root` on its command line)"
                .into(),
            std::fs::read_to_string(sctp_config)
                .with_context(|| format!("reading {}", sctp_config.display()))?,
        );

        let tls = (demo.https.as_ref())
            .and_then(|h| h.direct_tls.clone())
            .context("the demo started no TLS nginx")?;
        Ok(Self {
            demo,
            wanem: built[2].clone(),
            dir: dir.to_owned(),
            pages,
            tls,
            tcp_cc: tcp_cc.to_owned(),
            _framed_origin: framed_origin,
            _quic_origin: quic_origin,
            quic_pin,
        })
    }

    /// Restarts the WAN emulator with `cell`'s link.
    fn set_link(&mut self, cell: LinkCell) -> Result<()> {
        if let Some(old) = self.demo.wan.take() {
            old.stop()?;
        }
        self.demo.wan = Some(WanEmulator::start(
            &self.demo.topology,
            &self.wanem,
            &cell.params(),
            &self.dir.join("wanem.log"),
        )?);
        Ok(())
    }

    fn stop_gateway(&mut self) -> Result<()> {
        if let Some(mut gateway) = self.demo.gateway.take() {
            gateway.stop(Duration::from_secs(10))?;
        }
        Ok(())
    }

    /// Starts the gateway configured for `alternative` on an empty cache file.
    fn start_gateway(&mut self, alternative: Alternative) -> Result<()> {
        self.stop_gateway()?;
        let cache_path = self.dir.join("cache.redb");
        let _ = std::fs::remove_file(&cache_path);
        let wan_host = testbed::topology::WAN.host_v4.into();
        let (backend, port) = match alternative {
            Alternative::D => ("framed-tcp", Some(FRAMED_TCP_PORT)),
            Alternative::Q => ("quic", Some(QUIC_PORT)),
            _ => ("userspace", None),
        };
        self.demo.restart_gateway(GatewayConfigOverrides {
            origin_address: port.map(|port| SocketAddr::new(wan_host, port)),
            cache_path: Some(cache_path),
            prefetch_enabled: Some(alternative.prefetch()),
            push_enabled: Some(alternative.push()),
            backend: Some(backend.into()),
            quic_server_cert_sha256: (alternative == Alternative::Q).then(|| self.quic_pin.clone()),
            // A dead origin must show as failed loads, not as nginx's answers.
            fail_open: Some(false),
            tls_port: (alternative == Alternative::H).then_some(testbed::https::TLS_PORT),
            congestion: Some(self.tcp_cc.clone()),
            ..GatewayConfigOverrides::default()
        })?;
        Ok(())
    }

    /// One round of `alternative` on the current link: started afresh, then
    /// for each page a load after [`IDLE_BEFORE_FIRST_LOAD`] of silence and
    /// one at once after it (see the module documentation).
    fn run_round(
        &mut self,
        alternative: Alternative,
        cell: LinkCell,
        round: usize,
        rounds: usize,
        manifest: &mut Manifest,
    ) -> Result<Vec<Record>> {
        if alternative.is_gateway() {
            self.start_gateway(alternative)?;
            let text = &self.demo.gateway_config.text;
            manifest.add_config(format!("gateway ({})", alternative.letter()), text.clone());
            manifest.note_push(alternative.letter(), push_enabled(text)?);
        } else {
            self.stop_gateway()?;
            manifest.note_push(alternative.letter(), false);
        }
        let mut records = Vec::new();
        for page in self.pages.clone() {
            // One unrecorded load first: it warms (g)'s cache, and for every
            // alternative it is the traffic a transport in use has carried, so
            // that "after idle" is a transport's first load after a pause, not
            // a new association's or connection's first load. The other
            // proxies' caches are emptied again before each recorded load.
            let squid = self.prepare_load(alternative)?;
            if alternative == Alternative::G {
                // Its cache is kept, so its preparation does nothing: bring
                // the association up here.
                self.warm_up()?;
            }
            let warming = self.load(alternative, &page);
            drop(squid);
            if let Err(e) = warming {
                println!(
                    "    ({}) warming load of {} failed: {e}",
                    alternative.letter(),
                    page.name
                );
            }
            for phase in [Phase::AfterIdle, Phase::Warm] {
                let squid = self.prepare_load(alternative)?;
                if phase == Phase::AfterIdle {
                    std::thread::sleep(IDLE_BEFORE_FIRST_LOAD);
                }
                let load_average = one_minute_load();
                let outcome = self.load(alternative, &page).map_err(|e| format!("{e:#}"));
                drop(squid);
                let what = format!(
                    "    ({}) {} round {}/{rounds}, {}",
                    alternative.letter(),
                    page.name,
                    round + 1,
                    phase.name()
                );
                match &outcome {
                    Ok(m) => println!(
                        "{what}: load event {:.0} ms, {} requests, {} KB",
                        m.load.timing.load_event_end,
                        m.load.requests.len(),
                        m.bytes / 1000
                    ),
                    Err(e) => println!("{what}: FAILED: {e}"),
                }
                records.push(Record {
                    page: page.name.clone(),
                    alternative,
                    link: cell,
                    index: round,
                    phase,
                    load_average,
                    outcome,
                });
            }
        }
        if alternative.push() {
            self.record_push_counters(alternative, cell, round)?;
        }
        Ok(records)
    }

    /// Appends the gateway's `gateway_push_*` counters (cumulative since its
    /// start, this round's) to [`PUSH_METRICS`]: what push did, beside the
    /// load times.
    fn record_push_counters(
        &self,
        alternative: Alternative,
        cell: LinkCell,
        round: usize,
    ) -> Result<()> {
        let mut curl = Command::new("curl");
        curl.args(["-sf", "--max-time", "10"])
            .arg(format!("http://{ADMIN}/metrics"));
        let metrics = testbed::run(&mut testbed::exec_in(
            self.demo.topology.gateway.name(),
            &curl,
        ))
        .context("reading the gateway's /metrics")?;
        let mut text = format!(
            "# ({}) {} round {}\n",
            alternative.letter(),
            cell.name(),
            round + 1
        );
        for line in metrics.lines().filter(|l| l.starts_with("gateway_push_")) {
            text.push_str(line);
            text.push('\n');
        }
        let path = self.dir.join(PUSH_METRICS);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        std::io::Write::write_all(&mut file, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Puts the proxy of `alternative` in its pre-load state: Squid started on
    /// an empty cache (returned: dropping it stops it), the gateway's cache
    /// purged; a warm-up request in both cases.
    fn prepare_load(&mut self, alternative: Alternative) -> Result<Option<Squid>> {
        match alternative {
            Alternative::A | Alternative::B => Ok(None),
            Alternative::C => {
                let squid_dir = self.dir.join("squid");
                let _ = std::fs::remove_dir_all(&squid_dir);
                let squid = Squid::start(
                    self.demo.topology.gateway.name(),
                    testbed::topology::LAN_IF,
                    &squid_dir,
                )?;
                self.warm_up()?;
                Ok(Some(squid))
            }
            Alternative::D
            | Alternative::E
            | Alternative::F
            | Alternative::P
            | Alternative::Fp
            | Alternative::Q => {
                self.warm_up()?;
                self.purge()?;
                Ok(None)
            }
            Alternative::G => Ok(None),
            // Nothing of a tunnel is cached: the association up is all.
            Alternative::H => {
                self.warm_up()?;
                Ok(None)
            }
        }
    }

    /// Requests a file outside every page until the answer is not a 502, so
    /// that the proxy's upstream connection or association is up before the
    /// load (the gateway, with fail-open off, answers 502 until it is).
    fn warm_up(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + testbed::READY_TIMEOUT;
        loop {
            let mut curl = Command::new("curl");
            curl.args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "30",
            ])
            .arg(format!("http://{SITE}/warm-up.txt"));
            let status = testbed::run(&mut testbed::exec_in(
                self.demo.topology.client.name(),
                &curl,
            ))
            .context("the warm-up request")?;
            if status.trim() != "502" {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "the warm-up request was still answered 502 after {:?}: no upstream",
                    testbed::READY_TIMEOUT
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Empties the gateway's cache (memory tier and redb) for the site.
    fn purge(&self) -> Result<()> {
        let mut curl = Command::new("curl");
        curl.args(["-sf", "-X", "POST", "--max-time", "10"])
            .arg(format!("http://{ADMIN}/cache/purge?host={SITE}"));
        testbed::run(&mut testbed::exec_in(
            self.demo.topology.gateway.name(),
            &curl,
        ))
        .context("purging the gateway's cache")?;
        Ok(())
    }

    /// One page load in a fresh Chromium.
    fn load(&self, alternative: Alternative, page: &GeneratedPage) -> Result<Measured> {
        let site_v4 = testbed::topology::SITE_V4.into();
        let (url, extra_args) = match (alternative, &self.demo.https) {
            (Alternative::B, _) => (
                format!("https://{SITE}{}", page.url_path),
                self.tls.chromium_args(),
            ),
            (Alternative::H, Some(https)) => {
                (https.url(&page.url_path), https.chromium_args(site_v4))
            }
            (Alternative::H, None) => bail!("(h) needs the demo's HTTPS"),
            _ => (format!("http://{SITE}{}", page.url_path), Vec::new()),
        };
        let config = BrowserConfig {
            extra_args,
            command_timeout: LOAD_TIMEOUT,
            ..BrowserConfig::default()
        };
        let mut browser = Browser::launch(self.demo.topology.client.name(), &config)?;
        let mut tab = browser.new_page()?;
        let load = tab.load(&url, LOAD_TIMEOUT)?;
        let failures = load.failures();
        if !failures.is_empty() {
            let urls: Vec<String> = failures
                .iter()
                .map(|r| format!("{} ({:?} {:?})", r.url, r.status, r.error_text))
                .collect();
            bail!("{} failed requests: {}", urls.len(), urls.join(", "));
        }
        let bytes = load.requests.iter().filter_map(|r| r.encoded_bytes).sum();
        Ok(Measured { load, bytes })
    }
}

/// One load as the CSV holds it: what the report needs, from a run or from
/// the file.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct LoadRow {
    page: String,
    /// [`Alternative::letter`] (one letter in runs before (fp)).
    alternative: String,
    rtt_ms: u64,
    loss_percent: f64,
    rate_mbit: u64,
    load: usize,
    ok: bool,
    error: String,
    protocol: String,
    response_start_ms: Option<f64>,
    dom_content_loaded_ms: Option<f64>,
    load_event_end_ms: Option<f64>,
    requests: Option<usize>,
    bytes: Option<u64>,
    /// [`corpus::lower_bound`]: the discovery bound with one handshake (what
    /// reports called the lower bound before the floor), kept for readers of
    /// older runs.
    lower_bound_ms: f64,
    /// `after idle` or `warm` ([`Phase`]); empty in runs that did not tell.
    #[serde(default)]
    transport: String,
    /// The 1-minute load average when the load started.
    #[serde(default)]
    load_average: Option<f64>,
    /// First contentful paint, ms since navigation start.
    #[serde(default)]
    first_contentful_paint_ms: Option<f64>,
    /// Largest contentful paint, ms since navigation start.
    #[serde(default)]
    largest_contentful_paint_ms: Option<f64>,
}

impl LoadRow {
    fn from_record(r: &Record, pages: &[GeneratedPage]) -> Self {
        let lower_bound_ms = pages
            .iter()
            .find(|p| p.name == r.page)
            .map_or(f64::NAN, |p| ms_of(corpus::lower_bound(p, &r.link.link())));
        let mut row = LoadRow {
            page: r.page.clone(),
            alternative: r.alternative.letter().to_owned(),
            rtt_ms: r.link.rtt_ms,
            loss_percent: r.link.loss_percent,
            rate_mbit: r.link.rate_mbit,
            load: r.index + 1,
            ok: r.outcome.is_ok(),
            error: String::new(),
            protocol: String::new(),
            response_start_ms: None,
            dom_content_loaded_ms: None,
            load_event_end_ms: None,
            requests: None,
            bytes: None,
            lower_bound_ms,
            transport: r.phase.name().to_owned(),
            load_average: r.load_average,
            first_contentful_paint_ms: None,
            largest_contentful_paint_ms: None,
        };
        match &r.outcome {
            Ok(m) => {
                row.first_contentful_paint_ms = m.load.paint.first_contentful_paint;
                row.largest_contentful_paint_ms = m.load.paint.largest_contentful_paint;
                let t = &m.load.timing;
                row.protocol = t.next_hop_protocol.clone();
                row.response_start_ms = Some(t.response_start);
                row.dom_content_loaded_ms = Some(t.dom_content_loaded_event_end);
                row.load_event_end_ms = Some(t.load_event_end);
                row.requests = Some(m.load.requests.len());
                row.bytes = Some(m.bytes);
            }
            Err(e) => row.error = e.clone(),
        }
        row
    }

    fn link(&self) -> LinkCell {
        LinkCell {
            rtt_ms: self.rtt_ms,
            loss_percent: self.loss_percent,
            rate_mbit: self.rate_mbit,
        }
    }

    fn is(&self, page: &str, alternative: Alternative, cell: LinkCell) -> bool {
        self.page == page && self.alternative == alternative.letter() && self.link() == cell
    }
}

/// One resource timing entry of one load.
#[derive(Debug, serde::Serialize)]
struct ResourceRow<'a> {
    page: &'a str,
    alternative: &'a str,
    rtt_ms: u64,
    loss_percent: f64,
    rate_mbit: u64,
    load: usize,
    url: &'a str,
    initiator: &'a str,
    protocol: &'a str,
    start_ms: f64,
    response_start_ms: f64,
    response_end_ms: f64,
    transfer_size: u64,
    transport: &'a str,
}

/// What the per-resource wait table reads back from resources.csv.
#[derive(Debug, serde::Deserialize)]
struct ResourceWait {
    page: String,
    alternative: String,
    rtt_ms: u64,
    loss_percent: f64,
    rate_mbit: u64,
    load: usize,
    start_ms: f64,
    response_start_ms: f64,
    response_end_ms: f64,
    /// `after idle` or `warm`; empty in older runs.
    #[serde(default)]
    transport: String,
}

impl ResourceWait {
    fn link(&self) -> LinkCell {
        LinkCell {
            rtt_ms: self.rtt_ms,
            loss_percent: self.loss_percent,
            rate_mbit: self.rate_mbit,
        }
    }
}

/// resources.csv of the report `name`, or nothing if it is missing or
/// unreadable (older runs): the table it feeds is then left out.
fn read_resource_waits(name: &str) -> Vec<ResourceWait> {
    let path = results_dir().join(name).join("resources.csv");
    csv::Reader::from_path(&path)
        .map(|mut reader| reader.deserialize().filter_map(|row| row.ok()).collect())
        .unwrap_or_default()
}

fn write_loads(path: &Path, rows: &[LoadRow]) -> Result<()> {
    let mut writer =
        csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    for row in rows {
        writer.serialize(row)?;
    }
    writer.flush()?;
    Ok(())
}

fn write_resources(path: &Path, records: &[Record]) -> Result<()> {
    let mut writer =
        csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    for r in records {
        let Ok(m) = &r.outcome else { continue };
        for res in &m.load.resources {
            writer.serialize(ResourceRow {
                page: &r.page,
                alternative: r.alternative.letter(),
                rtt_ms: r.link.rtt_ms,
                loss_percent: r.link.loss_percent,
                rate_mbit: r.link.rate_mbit,
                load: r.index + 1,
                url: &res.name,
                initiator: &res.initiator_type,
                protocol: &res.next_hop_protocol,
                start_ms: res.start_time,
                response_start_ms: res.response_start,
                response_end_ms: res.response_end,
                transfer_size: res.transfer_size,
                transport: r.phase.name(),
            })?;
        }
    }
    writer.flush()?;
    Ok(())
}

fn ms_of(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What a run covered, in the order it ran, as read back from its rows.
struct RunShape {
    pages: Vec<String>,
    alternatives: Vec<Alternative>,
    cells: Vec<LinkCell>,
    /// Rounds (recorded loads per page, alternative, link and phase).
    loads: usize,
    /// The phases the rows tell apart; `[None]` for a run that did not.
    phases: Vec<Option<Phase>>,
    /// The highest 1-minute load average at a load, if recorded.
    busiest: Option<f64>,
}

impl RunShape {
    fn of(rows: &[LoadRow]) -> Self {
        let mut shape = RunShape {
            pages: Vec::new(),
            alternatives: Vec::new(),
            cells: Vec::new(),
            loads: 0,
            phases: vec![None],
            busiest: None,
        };
        for row in rows {
            if !shape.pages.contains(&row.page) {
                shape.pages.push(row.page.clone());
            }
            if let Some(a) = Alternative::from_letter(&row.alternative)
                && !shape.alternatives.contains(&a)
            {
                shape.alternatives.push(a);
            }
            if !shape.cells.contains(&row.link()) {
                shape.cells.push(row.link());
            }
            shape.loads = shape.loads.max(row.load);
            if let Some(load) = row.load_average {
                shape.busiest = Some(shape.busiest.map_or(load, |b: f64| b.max(load)));
            }
        }
        if rows.iter().any(|r| !r.transport.is_empty()) {
            shape.phases = vec![Some(Phase::AfterIdle), Some(Phase::Warm)];
        }
        shape.alternatives.sort();
        shape
    }

    fn values<T: PartialEq + Copy>(&self, f: fn(&LinkCell) -> T) -> Vec<T> {
        let mut out = Vec::new();
        for c in &self.cells {
            if !out.contains(&f(c)) {
                out.push(f(c));
            }
        }
        out
    }
}

/// A phase's name in headings, or what a run without phases recorded.
fn phase_title(phase: Option<Phase>) -> &'static str {
    match phase {
        Some(Phase::AfterIdle) => "first load after idle",
        Some(Phase::Warm) => "warm transport",
        None => "every load (this run did not tell idle from warm)",
    }
}

fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Nearest rank: the smallest value with at least p of the values at or below it.
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    Some(if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    })
}

/// Summary of one cell.
#[derive(Debug, Clone)]
struct CellSummary {
    failed: usize,
    /// The successful loads' loadEventEnd, ms.
    loads: Vec<f64>,
    load_median: Option<f64>,
    dcl_median: Option<f64>,
    ttfb_median: Option<f64>,
    fcp_median: Option<f64>,
    lcp_median: Option<f64>,
}

impl CellSummary {
    /// The spread of loadEventEnd as the report shows it: min–max below
    /// [`PERCENTILE_LOADS`] loads, p25–p75 from there on.
    fn spread(&self) -> Option<(f64, f64)> {
        if self.loads.is_empty() {
            return None;
        }
        if self.loads.len() < PERCENTILE_LOADS {
            let min = self.loads.iter().copied().fold(f64::INFINITY, f64::min);
            let max = self.loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Some((min, max))
        } else {
            Some((
                percentile(&self.loads, 0.25)?,
                percentile(&self.loads, 0.75)?,
            ))
        }
    }

    fn spread_text(&self) -> String {
        self.spread()
            .map_or_else(|| "–".into(), |(lo, hi)| format!("{lo:.0}–{hi:.0}"))
    }

    /// Loads that came in under `bound`, ms.
    fn under(&self, bound: f64) -> usize {
        self.loads.iter().filter(|&&l| l < bound).count()
    }
}

fn summarize(
    rows: &[LoadRow],
    page: &str,
    alternative: Alternative,
    cell: LinkCell,
    phase: Option<Phase>,
) -> CellSummary {
    let cell_rows: Vec<&LoadRow> = rows
        .iter()
        .filter(|r| r.is(page, alternative, cell))
        .filter(|r| phase.is_none_or(|p| r.transport == p.name()))
        .collect();
    let pick = |f: fn(&LoadRow) -> Option<f64>| -> Vec<f64> {
        cell_rows
            .iter()
            .filter(|r| r.ok)
            .filter_map(|r| f(r))
            .collect()
    };
    let loads = pick(|r| r.load_event_end_ms);
    CellSummary {
        failed: cell_rows.iter().filter(|r| !r.ok).count(),
        load_median: median(&loads),
        loads,
        dcl_median: median(&pick(|r| r.dom_content_loaded_ms)),
        ttfb_median: median(&pick(|r| r.response_start_ms)),
        fcp_median: median(&pick(|r| r.first_contentful_paint_ms)),
        lcp_median: median(&pick(|r| r.largest_contentful_paint_ms)),
    }
}

/// How far two spreads overlap, as a share of the narrower one (a spread of
/// one value counts as overlapping fully when it lies inside the other).
fn overlap_share(a: (f64, f64), b: (f64, f64)) -> f64 {
    let overlap = a.1.min(b.1) - a.0.max(b.0);
    let narrower = (a.1 - a.0).min(b.1 - b.0);
    if narrower <= 0.0 {
        if overlap >= 0.0 { 1.0 } else { 0.0 }
    } else {
        (overlap / narrower).max(0.0)
    }
}

/// The verdict on "`x` takes at most `scale` times `y`": by the medians,
/// unless the spreads (`y`'s scaled) overlap by more than half of the
/// narrower, which the report calls "within noise"; "–" when either is
/// missing.
fn verdict(x: &CellSummary, y: &CellSummary, scale: f64) -> &'static str {
    let (Some(xm), Some(ym), Some(xs), Some(ys)) =
        (x.load_median, y.load_median, x.spread(), y.spread())
    else {
        return "–";
    };
    if overlap_share(xs, (ys.0 * scale, ys.1 * scale)) > 0.5 {
        "within noise"
    } else if xm <= scale * ym {
        "met"
    } else {
        "missed"
    }
}

/// The same against a fixed figure (a reference time): within noise if the
/// figure lies inside `x`'s spread.
fn verdict_against(x: &CellSummary, limit: f64) -> &'static str {
    let (Some(xm), Some((lo, hi))) = (x.load_median, x.spread()) else {
        return "–";
    };
    if lo <= limit && limit <= hi && lo < hi {
        "within noise"
    } else if xm <= limit {
        "met"
    } else {
        "missed"
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "–".into(), |v| format!("{v:.0}"))
}

fn ratio(value: Option<f64>, base: Option<f64>) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}", v / b),
        _ => "–".into(),
    }
}

/// [`corpus::floor`] in ms.
fn floor_ms(page: &GeneratedPage, cell: LinkCell) -> f64 {
    ms_of(corpus::floor(page, &cell.link()))
}

/// [`corpus::discovery_bound`] for `alternative`, ms; `None` where it does
/// not apply ([`Alternative::handshakes`]).
fn discovery_ms(page: &GeneratedPage, cell: LinkCell, alternative: Alternative) -> Option<f64> {
    let handshakes = alternative.handshakes()?;
    Some(ms_of(corpus::discovery_bound(
        page,
        &cell.link(),
        handshakes,
    )))
}

/// One grouped-bar chart per page, rate and phase: median loadEventEnd per
/// link, one bar per alternative, and the floor. Returns the charts' paths
/// relative to bench/results/, with a caption each.
fn charts(
    name: &str,
    run: &RunShape,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
) -> Result<Vec<(String, String)>> {
    crate::plot::check_font()?;
    let mut made = Vec::new();
    for page in pages {
        for rate in run.values(|c| c.rate_mbit) {
            for &phase in &run.phases {
                let cells: Vec<LinkCell> = run
                    .cells
                    .iter()
                    .copied()
                    .filter(|c| c.rate_mbit == rate)
                    .collect();
                let categories: Vec<String> = cells
                    .iter()
                    .map(|c| format!("{}ms/{}%", c.rtt_ms, c.loss_percent))
                    .collect();
                let mut groups = vec![crate::plot::BarGroup {
                    name: "floor".into(),
                    values: cells.iter().map(|&c| floor_ms(page, c) / 1000.0).collect(),
                }];
                for &a in &run.alternatives {
                    groups.push(crate::plot::BarGroup {
                        name: format!("({}) {}", a.letter(), a.label()),
                        values: cells
                            .iter()
                            .map(|&c| {
                                summarize(rows, &page.name, a, c, phase)
                                    .load_median
                                    .map_or(0.0, |v| v / 1000.0)
                            })
                            .collect(),
                    });
                }
                let suffix = match phase {
                    Some(Phase::AfterIdle) => "-idle",
                    Some(Phase::Warm) => "-warm",
                    None => "",
                };
                let file = format!("{name}/{}-{rate}mbit{suffix}.png", page.name);
                crate::plot::bars(
                    &results_dir().join(&file),
                    &format!(
                        "{}: median loadEventEnd at {rate} Mbit/s, {} (RTT / loss)",
                        page.name,
                        phase_title(phase)
                    ),
                    "link (round trip / loss each way)",
                    "seconds",
                    &categories,
                    &groups,
                )?;
                made.push((
                    file,
                    format!(
                        "{}, {rate} Mbit/s, {}: median loadEventEnd per link and alternative, with the floor",
                        page.name,
                        phase_title(phase)
                    ),
                ));
            }
        }
    }
    Ok(made)
}

fn report(
    name: &str,
    manifest: &Manifest,
    run: &RunShape,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
    charts: &[(String, String)],
) -> Result<String> {
    let mut r = String::new();
    writeln!(
        r,
        "# Page loads: the gateway against the alternatives over emulated links\n"
    )?;
    writeln!(r, "- command: `cargo xtask bench {}`", manifest.command)?;
    let finished = if manifest.finished.is_empty() {
        String::new()
    } else {
        format!(" to {}", manifest.finished)
    };
    writeln!(r, "- date: {}{finished}", manifest.started)?;
    writeln!(r, "- machine: {}", manifest.machine)?;
    writeln!(r, "- commit: {}", manifest.commit)?;
    if !manifest.load_before.is_empty() {
        writeln!(
            r,
            "- load average (1, 5, 15 min): {} before the first load, {} after the last{}",
            manifest.load_before,
            manifest.load_after,
            run.busiest
                .map(|b| format!("; the highest 1-minute figure at a load: {b:.2}"))
                .unwrap_or_default()
        )?;
    }
    if run.busiest.is_some_and(|b| b > BUSY_LOAD_AVERAGE) {
        writeln!(
            r,
            "- **warning**: the load average exceeded {BUSY_LOAD_AVERAGE} during this run: the machine was busy with more than this benchmark, and the figures may have moved with it"
        )?;
    }
    match &manifest.congestion {
        Some(cc) => writeln!(
            r,
            "- congestion control: {cc} for every sender (`--tcp-cc`)"
        )?,
        None => writeln!(
            r,
            "- congestion control: not set by the run, and not recorded with it"
        )?,
    }
    for controller in &manifest.controllers {
        writeln!(r, "  - {controller}")?;
    }
    let order = if run.phases.len() > 1 {
        format!(
            "{} rounds, the alternatives interleaved: in each round every alternative afresh, {}one load per page after {} s of silence (\"after idle\") and one at once after it (\"warm\")",
            run.loads,
            if manifest.warming_load {
                "one unrecorded load per page (the traffic a transport in use has carried), then "
            } else {
                "no load before the recorded ones (so \"after idle\" is a new association's or connection's first load), then "
            },
            manifest.idle_before_first_load_ms.unwrap_or(0) / 1000
        )
    } else {
        format!(
            "{} recorded loads per page, alternative and link, each alternative's back to back on one daemon start (the run predates interleaving, so most of its loads ran on a warm transport)",
            run.loads
        )
    };
    writeln!(
        r,
        "- run: {order}; pages {}; links {} ms RTT x {}% loss x {} Mbit/s ({} links)",
        run.pages.join(", "),
        join(&run.values(|c| c.rtt_ms)),
        join(&run.values(|c| c.loss_percent)),
        join(&run.values(|c| c.rate_mbit)),
        run.cells.len()
    )?;
    writeln!(
        r,
        "- browser: headless Chromium in the client namespace, fresh profile per load; navigation, paint and resource timing read over the DevTools protocol; times in ms since navigation start"
    )?;
    writeln!(
        r,
        "- link: wanem between the router and the origin host, the round trip split evenly, random loss in each direction, token-bucket rate each way, drop-tail queue of one bandwidth-delay product (at least 64 frames); the LAN is not emulated"
    )?;
    writeln!(
        r,
        "- floor: one round trip plus every byte at the bottleneck rate (`testbed::corpus::floor`): no load whose bytes cross the WAN can take less, whatever the protocol; (g), from the router's cache, does not cross it"
    )?;
    writeln!(
        r,
        "- discovery bound: what a browser that discovers each dependency level itself can do at best: the handshakes the alternative surely pays across the WAN, then one round trip per level, plus every byte at the bottleneck rate (`testbed::corpus::discovery_bound`); a reference, not a floor (prefetch does not discover level by level, and any load may overlap a level's round trip with bytes)"
    )?;
    writeln!(
        r,
        "- spreads: min–max of the loads below {PERCENTILE_LOADS} loads per cell, p25–p75 from there; a comparison whose two spreads overlap by more than half of the narrower is called \"within noise\", not met or missed"
    )?;
    writeln!(
        r,
        "- data: bench/results/{name}/loads.csv (every load), resources.csv (every resource timing entry), {} (how the run was: {}); `cargo xtask bench pages --name {name} --from-csv` redraws this report and its charts from them",
        manifest::FILE,
        manifest.source
    )?;
    for note in &manifest.notes {
        writeln!(r, "- {note}")?;
    }
    writeln!(r)?;
    writeln!(r, "## Alternatives\n")?;
    // Runs before push did not record it: their table is as it was.
    let show_push = run.alternatives.iter().any(|a| {
        manifest
            .alternative(a.letter())
            .is_some_and(|n| n.push.is_some())
    });
    if show_push {
        writeln!(
            r,
            "| | alternative | how (as the run recorded it) | push (the gateway's `push.enabled`, read back) |"
        )?;
        writeln!(r, "|---|---|---|---|")?;
    } else {
        writeln!(r, "| | alternative | how (as the run recorded it) |")?;
        writeln!(r, "|---|---|---|")?;
    }
    for a in &run.alternatives {
        let note = manifest.alternative(a.letter());
        let (label, method) = match note {
            Some(note) => (note.label.as_str(), note.method.as_str()),
            None => (a.label(), "not recorded with the run"),
        };
        write!(r, "| ({}) | {label} | {method} |", a.letter())?;
        if show_push {
            let push = match note.and_then(|n| n.push) {
                Some(true) => "on",
                Some(false) => "off",
                None => "not recorded",
            };
            write!(r, " {push} |")?;
        }
        writeln!(r)?;
    }
    writeln!(
        r,
        "\n(g) is answered from the router's cache: its loads cross only the LAN, so it can come in under the floor. Failed loads are left out of the medians and counted beside them."
    )?;
    writeln!(r, "\n## Pages\n")?;
    writeln!(r, "| page | objects | bytes | dependency levels |")?;
    writeln!(r, "|---|---|---|---|")?;
    for p in pages {
        writeln!(
            r,
            "| {} | {} | {} | {} |",
            p.name,
            p.objects.len(),
            p.total_bytes(),
            p.max_depth() + 1
        )?;
    }

    for &phase in &run.phases {
        targets(&mut r, run, rows, phase)?;
        transport_targets(&mut r, run, rows, pages, phase)?;
        https_targets(&mut r, run, rows, phase)?;
        push_targets(&mut r, run, rows, pages, phase)?;
    }
    for page in pages {
        for &phase in &run.phases {
            load_tables(&mut r, run, rows, page, phase)?;
        }
    }
    if !charts.is_empty() {
        writeln!(r, "\n## Charts\n")?;
        for (file, caption) in charts {
            writeln!(r, "![{caption}]({file})\n")?;
        }
    }
    if !manifest.configs.is_empty() {
        writeln!(
            r,
            "\n## Configurations\n\nThe daemons' configuration files as the run used them are in bench/results/{name}/{}: {}.",
            manifest::FILE,
            manifest
                .configs
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )?;
    }
    failed_loads(&mut r, rows)?;
    Ok(r)
}

/// One page's tables for one phase: median loadEventEnd per link and
/// alternative (spread; ratio to (a); multiple of the floor), loads under
/// the discovery bound, then DCL and TTFB, then first and largest
/// contentful paint.
fn load_tables(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    page: &GeneratedPage,
    phase: Option<Phase>,
) -> Result<()> {
    writeln!(
        r,
        "\n## {}, {}: median loadEventEnd, ms (spread; ratio to (a); multiple of the floor)\n",
        page.name,
        phase_title(phase)
    )?;
    table_header(r, &["link", "floor"], &run.alternatives, &[""])?;
    let mut beaten = Vec::new();
    for &cell in &run.cells {
        let floor = floor_ms(page, cell);
        let base = summarize(rows, &page.name, Alternative::A, cell, phase).load_median;
        write!(r, "| {} | {floor:.0} |", cell.name())?;
        for &a in &run.alternatives {
            let s = summarize(rows, &page.name, a, cell, phase);
            let failed = if s.failed > 0 {
                format!(", {} failed", s.failed)
            } else {
                String::new()
            };
            write!(
                r,
                " {} ({}; {}; {}x{failed}) |",
                ms(s.load_median),
                s.spread_text(),
                ratio(s.load_median, base),
                ratio(s.load_median, Some(floor)),
            )?;
            if let Some(bound) = discovery_ms(page, cell, a) {
                let under = s.under(bound);
                if under > 0 {
                    beaten.push(format!(
                        "({}) at {}: {under} of {} loads under its discovery bound of {bound:.0} ms",
                        a.letter(),
                        cell.name(),
                        s.loads.len()
                    ));
                }
            }
        }
        writeln!(r)?;
    }
    if !beaten.is_empty() {
        writeln!(
            r,
            "\nLoads that beat their discovery bound (it is a reference, not a floor): {}.",
            beaten.join("; ")
        )?;
    }
    two_figure_table(
        r,
        run,
        rows,
        page,
        phase,
        "median DOMContentLoaded end and responseStart (time to first byte)",
        [" DCL", " TTFB"],
        |s| (s.dcl_median, s.ttfb_median),
    )?;
    if rows.iter().any(|r| r.first_contentful_paint_ms.is_some()) {
        two_figure_table(
            r,
            run,
            rows,
            page,
            phase,
            "median first and largest contentful paint",
            [" FCP", " LCP"],
            |s| (s.fcp_median, s.lcp_median),
        )?;
    }
    Ok(())
}

/// A table of two figures per alternative (`columns`, picked from each
/// cell's summary by `pick`), ms, one row per link.
#[expect(
    clippy::too_many_arguments,
    reason = "one table's settings, each used once"
)]
fn two_figure_table(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    page: &GeneratedPage,
    phase: Option<Phase>,
    title: &str,
    columns: [&str; 2],
    pick: fn(&CellSummary) -> (Option<f64>, Option<f64>),
) -> Result<()> {
    writeln!(
        r,
        "\n### {}, {}: {title}, ms\n",
        page.name,
        phase_title(phase)
    )?;
    table_header(r, &["link"], &run.alternatives, &columns)?;
    for &cell in &run.cells {
        write!(r, "| {} |", cell.name())?;
        for &a in &run.alternatives {
            let (first, second) = pick(&summarize(rows, &page.name, a, cell, phase));
            write!(r, " {} | {} |", ms(first), ms(second))?;
        }
        writeln!(r)?;
    }
    Ok(())
}

/// The failed loads, one line each, if there were any.
fn failed_loads(r: &mut String, rows: &[LoadRow]) -> Result<()> {
    let failures: Vec<&LoadRow> = rows.iter().filter(|r| !r.ok).collect();
    if !failures.is_empty() {
        writeln!(r, "\n## Failed loads\n")?;
        for f in failures {
            let phase = if f.transport.is_empty() {
                String::new()
            } else {
                format!(", {}", f.transport)
            };
            writeln!(
                r,
                "- {} ({}) {} load {}{phase}: {}",
                f.page,
                f.alternative,
                f.link().name(),
                f.load,
                f.error
            )?;
        }
    }
    Ok(())
}

/// Where a load's time goes, per alternative and link: the mean time a
/// subresource waits from its fetch start to its first response byte (for a
/// connection, the request's round trip, the server) and the mean time from
/// there to its last byte, medians over the loads (both phases together).
fn resource_waits(
    r: &mut String,
    run: &RunShape,
    pages: &[GeneratedPage],
    waits: &[ResourceWait],
) -> Result<()> {
    if waits.is_empty() {
        return Ok(());
    }
    for page in pages {
        writeln!(
            r,
            "\n## {}: where the time goes, per subresource, ms (mean wait from fetch start to first byte / mean first to last byte; medians over loads)\n",
            page.name
        )?;
        writeln!(
            r,
            "Over HTTP/1.1 Chromium opens at most six connections per host, so a level of n objects costs about n/6 request round trips; over HTTP/2 it sends them all at once, and the transfers share one connection instead.\n"
        )?;
        table_header(r, &["link"], &run.alternatives, &[""])?;
        for &cell in &run.cells {
            write!(r, "| {} |", cell.name())?;
            for &a in &run.alternatives {
                let mut per_load: BTreeMap<(usize, String), (f64, f64, usize)> = BTreeMap::new();
                for w in waits.iter().filter(|w| {
                    w.page == page.name && w.alternative == a.letter() && w.link() == cell
                }) {
                    let entry = per_load.entry((w.load, w.transport.clone())).or_default();
                    entry.0 += w.response_start_ms - w.start_ms;
                    entry.1 += w.response_end_ms - w.response_start_ms;
                    entry.2 += 1;
                }
                let (wait, transfer): (Vec<f64>, Vec<f64>) = per_load
                    .values()
                    .map(|&(wait, transfer, n)| (wait / n as f64, transfer / n as f64))
                    .unzip();
                write!(r, " {} / {} |", ms(median(&wait)), ms(median(&transfer)))?;
            }
            writeln!(r)?;
        }
    }
    Ok(())
}

/// A markdown table's header and rule: the `leading` columns, then one column
/// per alternative and `suffix` (`(a) DCL`, `(a) TTFB`, ...).
fn table_header(
    r: &mut String,
    leading: &[&str],
    alternatives: &[Alternative],
    suffixes: &[&str],
) -> Result<()> {
    let mut columns: Vec<String> = leading.iter().map(|c| (*c).to_owned()).collect();
    for a in alternatives {
        for suffix in suffixes {
            columns.push(format!("({}){suffix}", a.letter()));
        }
    }
    writeln!(r, "| {} |", columns.join(" | "))?;
    writeln!(r, "|{}", "---|".repeat(columns.len()))?;
    Ok(())
}

/// The targets, each page and rate at the link they name.
fn targets(r: &mut String, run: &RunShape, rows: &[LoadRow], phase: Option<Phase>) -> Result<()> {
    writeln!(
        r,
        "\n## Targets (median loadEventEnd), {}\n",
        phase_title(phase)
    )?;
    writeln!(
        r,
        "| page | link | (f) / (a) ≤ 0.6 | (f) / (b) ≤ 1 | (g) / (a) ≤ 0.2 |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    let mut any = false;
    for page in &run.pages {
        for &cell in run
            .cells
            .iter()
            .filter(|c| c.rtt_ms == 80 && (c.loss_percent - 1.0).abs() < f64::EPSILON)
        {
            any = true;
            let s = |a| summarize(rows, page, a, cell, phase);
            let (a, b, f, g) = (
                s(Alternative::A),
                s(Alternative::B),
                s(Alternative::F),
                s(Alternative::G),
            );
            let cell_text = |x: &CellSummary, y: &CellSummary, scale: f64| {
                format!(
                    "{} ({})",
                    ratio(x.load_median, y.load_median),
                    verdict(x, y, scale)
                )
            };
            writeln!(
                r,
                "| {page} | {} | {} | {} | {} |",
                cell.name(),
                cell_text(&f, &a, 0.6),
                cell_text(&f, &b, 1.0),
                cell_text(&g, &a, 0.2),
            )?;
        }
    }
    if !any {
        writeln!(r, "| – | this run had no 80 ms, 1% link | | | |")?;
    }
    Ok(())
}

/// Issue 16's targets for the association, one row per page and link: (e) no
/// slower than any other way to the origin that ran; (f) at most
/// max(0.6 x (a), 1.15 x the floor) on links of 80 ms or more; (e) within
/// 1.3 x the floor on clean 10 Mbit/s links. (Issue 16 wrote them against
/// what was then called the lower bound, a discovery bound that prefetch
/// beats; the floor is one no load beats.)
fn transport_targets(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
    phase: Option<Phase>,
) -> Result<()> {
    writeln!(
        r,
        "\n## Targets of the transport (median loadEventEnd), {}\n",
        phase_title(phase)
    )?;
    writeln!(
        r,
        "(e) is met where it is no slower than each of (a), (b), (d) and (q) that ran; \
         (f) where it takes at most max(0.6 x (a), 1.15 x the floor), on links of \
         80 ms or more; (e) on clean 10 Mbit/s links where it is within 1.3 x the floor. \
         Spreads that overlap by more than half are \"within noise\".\n"
    )?;
    writeln!(
        r,
        "| page | link | (e) / (a) | (e) / (b) | (e) / (d) | (e) / (q) | (e) no slower | \
         (f) / its target | (e) / floor ≤ 1.3 |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|---|---|---|")?;
    for page in pages {
        for &cell in &run.cells {
            let s = |a| summarize(rows, &page.name, a, cell, phase);
            let floor = floor_ms(page, cell);
            let e = s(Alternative::E);
            let others: Vec<CellSummary> = [
                Alternative::A,
                Alternative::B,
                Alternative::D,
                Alternative::Q,
            ]
            .into_iter()
            .map(s)
            .filter(|o| o.load_median.is_some())
            .collect();
            let no_slower = if e.load_median.is_none() || others.is_empty() {
                "–"
            } else {
                let verdicts: Vec<&str> = others.iter().map(|o| verdict(&e, o, 1.0)).collect();
                if verdicts.contains(&"missed") {
                    "missed"
                } else if verdicts.contains(&"within noise") {
                    "within noise"
                } else {
                    "met"
                }
            };
            let f = s(Alternative::F);
            let a = s(Alternative::A);
            let f_target = match (f.load_median, a.load_median) {
                (Some(fm), Some(am)) if cell.rtt_ms >= 80 => {
                    let target = (0.6 * am).max(1.15 * floor);
                    format!("{:.2} ({})", fm / target, verdict_against(&f, target))
                }
                _ if cell.rtt_ms < 80 => "n/a".into(),
                _ => "–".into(),
            };
            let clean_10 = cell.loss_percent == 0.0 && cell.rate_mbit == 10;
            let e_floor = match e.load_median {
                Some(em) if clean_10 => {
                    format!("{:.2} ({})", em / floor, verdict_against(&e, 1.3 * floor))
                }
                _ if !clean_10 => "n/a".into(),
                _ => "–".into(),
            };
            let m = |x: &CellSummary| x.load_median;
            writeln!(
                r,
                "| {} | {} | {} | {} | {} | {} | {no_slower} | {f_target} | {e_floor} |",
                page.name,
                cell.name(),
                ratio(m(&e), m(&a)),
                ratio(m(&e), m(&s(Alternative::B))),
                ratio(m(&e), m(&s(Alternative::D))),
                ratio(m(&e), m(&s(Alternative::Q))),
            )?;
        }
    }
    Ok(())
}

/// Issue 19's targets for HTTPS, one row per page and link where (h) and (b)
/// ran: (h) no slower than (b) on any link, at most 0.8 x (b) on links of
/// 80 ms or more.
fn https_targets(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    phase: Option<Phase>,
) -> Result<()> {
    if !run.alternatives.contains(&Alternative::H) || !run.alternatives.contains(&Alternative::B) {
        return Ok(());
    }
    writeln!(
        r,
        "\n## Targets of HTTPS (median loadEventEnd), {}\n",
        phase_title(phase)
    )?;
    writeln!(
        r,
        "(h) is met where it is no slower than (b), and on links of 80 ms or more where it \
         takes at most 0.8 x (b).\n"
    )?;
    writeln!(r, "| page | link | (h) / (b) | target | |")?;
    writeln!(r, "|---|---|---|---|---|")?;
    for page in &run.pages {
        for &cell in &run.cells {
            let s = |a| summarize(rows, page, a, cell, phase);
            let limit = if cell.rtt_ms >= 80 { 0.8 } else { 1.0 };
            let (h, b) = (s(Alternative::H), s(Alternative::B));
            writeln!(
                r,
                "| {page} | {} | {} | ≤ {limit} | {} |",
                cell.name(),
                ratio(h.load_median, b.load_median),
                verdict(&h, &b, limit),
            )?;
        }
    }
    Ok(())
}

/// The ideal of a push load (issue 31): (g)'s median warm-cache load of the
/// same page and link, which already holds the HTML's round trip and the
/// browser's work, plus every byte of the page at the bottleneck rate, ms;
/// `None` without (g).
fn push_ideal(g: &CellSummary, page: &GeneratedPage, cell: LinkCell) -> Option<f64> {
    Some(g.load_median? + ms_of(corpus::transfer_time(page, &cell.link())))
}

/// Issue 31's targets for push, one row per page and link where (p) or (fp)
/// ran: (p) within 1.2 x its ideal on links of 80 ms or more, at most 0.6 x
/// (b) at 200 ms and no slower than (b) anywhere, no slower than (e) by more
/// than 5 % anywhere, its FCP and LCP no later than (e)'s.
fn push_targets(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
    phase: Option<Phase>,
) -> Result<()> {
    if !run.alternatives.iter().any(|a| a.push()) {
        return Ok(());
    }
    writeln!(
        r,
        "\n## Targets of push (median loadEventEnd), {}\n",
        phase_title(phase)
    )?;
    writeln!(
        r,
        "The ideal is (g)'s median of the same page and link plus the page's bytes at the \
         bottleneck rate (`testbed::corpus::transfer_time`): (g) already holds the HTML's round \
         trip and the browser's work, so a cold load can at best add the transfer of what the \
         cache would have held. (p) is met where it takes at most 1.2 x the ideal (links of \
         80 ms or more); at most 0.6 x (b) at 200 ms and at most (b) elsewhere; at most 1.05 x \
         (e) on every link; FCP and LCP (medians) no later than (e)'s. (fp) is shown against \
         the same ideal and (e).\n"
    )?;
    writeln!(
        r,
        "| page | link | (g) | bytes at the rate | ideal | (p) | (p) / ideal ≤ 1.2 | \
         (p) / (b) | (p) / (e) ≤ 1.05 | (p) FCP / LCP against (e)'s | (fp) | (fp) / ideal | \
         (fp) / (e) |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for page in pages {
        for &cell in &run.cells {
            let s = |a| summarize(rows, &page.name, a, cell, phase);
            let (b, e, g, p, fp) = (
                s(Alternative::B),
                s(Alternative::E),
                s(Alternative::G),
                s(Alternative::P),
                s(Alternative::Fp),
            );
            let transfer = ms_of(corpus::transfer_time(page, &cell.link()));
            let ideal = push_ideal(&g, page, cell);
            let against_ideal = |x: &CellSummary, target: bool| match (x.load_median, ideal) {
                (Some(xm), Some(i)) if target && cell.rtt_ms >= 80 => {
                    format!("{:.2} ({})", xm / i, verdict_against(x, 1.2 * i))
                }
                (Some(xm), Some(i)) => format!("{:.2}", xm / i),
                _ => "–".into(),
            };
            let b_limit = if cell.rtt_ms >= 200 { 0.6 } else { 1.0 };
            let p_b = format!(
                "{} (≤ {b_limit}: {})",
                ratio(p.load_median, b.load_median),
                verdict(&p, &b, b_limit)
            );
            let p_e = format!(
                "{} ({})",
                ratio(p.load_median, e.load_median),
                verdict(&p, &e, 1.05)
            );
            let paints = match (p.fcp_median, p.lcp_median, e.fcp_median, e.lcp_median) {
                (Some(pf), Some(pl), Some(ef), Some(el)) => format!(
                    "{pf:.0} / {pl:.0} against {ef:.0} / {el:.0} ({})",
                    if pf <= ef && pl <= el {
                        "met"
                    } else {
                        "missed"
                    }
                ),
                _ => "–".into(),
            };
            writeln!(
                r,
                "| {} | {} | {} | {transfer:.0} | {} | {} | {} | {p_b} | {p_e} | {paints} | {} | {} | {} |",
                page.name,
                cell.name(),
                ms(g.load_median),
                ms(ideal),
                ms(p.load_median),
                against_ideal(&p, true),
                ms(fp.load_median),
                against_ideal(&fp, false),
                ratio(fp.load_median, e.load_median),
            )?;
        }
    }
    Ok(())
}

fn join<T: std::fmt::Display>(values: &[T]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(median(&values), Some(3.0));
        assert_eq!(percentile(&values, 0.95), Some(5.0));
        assert_eq!(percentile(&values, 0.2), Some(1.0));
        assert_eq!(median(&[1.0, 2.0]), Some(1.5));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn load_rows_read_back_as_written() {
        let ok = LoadRow {
            page: "p50".into(),
            alternative: "f".into(),
            rtt_ms: 80,
            loss_percent: 1.0,
            rate_mbit: 10,
            load: 2,
            ok: true,
            error: String::new(),
            protocol: "http/1.1".into(),
            response_start_ms: Some(170.5),
            dom_content_loaded_ms: Some(900.25),
            load_event_end_ms: Some(2400.0),
            requests: Some(55),
            bytes: Some(1_962_000),
            lower_bound_ms: 1893.5,
            transport: "warm".into(),
            load_average: Some(0.42),
            first_contentful_paint_ms: Some(310.0),
            largest_contentful_paint_ms: Some(1210.5),
        };
        let failed = LoadRow {
            ok: false,
            error: "1 failed request: \"/p50/\" (502), then, more".into(),
            protocol: String::new(),
            response_start_ms: None,
            dom_content_loaded_ms: None,
            load_event_end_ms: None,
            requests: None,
            bytes: None,
            first_contentful_paint_ms: None,
            largest_contentful_paint_ms: None,
            ..ok.clone()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("loads.csv");
        write_loads(&path, &[ok.clone(), failed.clone()]).expect("write");
        let read: Vec<LoadRow> = csv::Reader::from_path(&path)
            .expect("open")
            .deserialize()
            .collect::<std::result::Result<_, _>>()
            .expect("parse");
        assert_eq!(read, vec![ok.clone(), failed]);
        let shape = RunShape::of(&read);
        assert_eq!(shape.alternatives, vec![Alternative::F]);
        assert_eq!(shape.loads, 2);
        let s = summarize(&read, "p50", Alternative::F, ok.link(), Some(Phase::Warm));
        assert_eq!((s.failed, s.load_median), (1, Some(2400.0)));
        assert_eq!(s.lcp_median, Some(1210.5));
        let idle = summarize(
            &read,
            "p50",
            Alternative::F,
            ok.link(),
            Some(Phase::AfterIdle),
        );
        assert_eq!((idle.failed, idle.load_median), (0, None));
        assert_eq!(
            shape.phases,
            vec![Some(Phase::AfterIdle), Some(Phase::Warm)]
        );
        assert_eq!(shape.busiest, Some(0.42));
    }

    #[test]
    fn an_older_csv_without_the_new_columns_still_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("loads.csv");
        std::fs::write(
            &path,
            "page,alternative,rtt_ms,loss_percent,rate_mbit,load,ok,error,protocol,response_start_ms,\
             dom_content_loaded_ms,load_event_end_ms,requests,bytes,lower_bound_ms\n\
             p50,e,80,0.0,10,1,true,,http/1.1,170,900,2400,55,1962000,1893.5\n",
        )
        .expect("write");
        let read: Vec<LoadRow> = csv::Reader::from_path(&path)
            .expect("open")
            .deserialize()
            .collect::<std::result::Result<_, _>>()
            .expect("parse");
        assert_eq!(read[0].transport, "");
        assert_eq!(RunShape::of(&read).phases, vec![None]);
    }

    #[test]
    fn spreads_that_overlap_by_more_than_half_are_within_noise() {
        let cell = |loads: &[f64]| CellSummary {
            failed: 0,
            loads: loads.to_vec(),
            load_median: median(loads),
            dcl_median: None,
            ttfb_median: None,
            fcp_median: None,
            lcp_median: None,
        };
        // 100-200 against 150-300: overlap 50 of the narrower 100.
        let x = cell(&[100.0, 150.0, 200.0]);
        assert_eq!(verdict(&x, &cell(&[150.0, 200.0, 300.0]), 1.0), "met");
        // 100-200 against 110-210: overlap 90 of 100.
        assert_eq!(
            verdict(&x, &cell(&[110.0, 160.0, 210.0]), 1.0),
            "within noise"
        );
        // Apart: met or missed by the medians.
        assert_eq!(verdict(&x, &cell(&[400.0, 500.0]), 1.0), "met");
        assert_eq!(verdict(&cell(&[400.0, 500.0]), &x, 1.0), "missed");
        // Scaled: 100-200 against 0.5 x 300-360 = 150-180, inside it.
        assert_eq!(verdict(&x, &cell(&[300.0, 360.0]), 0.5), "within noise");
        assert_eq!(verdict_against(&x, 150.0), "within noise");
        assert_eq!(verdict_against(&x, 250.0), "met");
        assert_eq!(verdict_against(&x, 90.0), "missed");
        // Below ten loads the spread is min-max.
        assert_eq!(x.spread(), Some((100.0, 200.0)));
    }

    #[test]
    fn push_alternatives_read_back_by_their_names() {
        for a in Alternative::ALL {
            assert_eq!(Alternative::from_letter(a.letter()), Some(a));
            let value = clap::ValueEnum::to_possible_value(&a).expect("a value");
            assert_eq!(value.get_name(), a.letter(), "the CLI and the CSV agree");
        }
        assert!(Alternative::P.push() && !Alternative::P.prefetch());
        assert!(Alternative::Fp.push() && Alternative::Fp.prefetch());
        assert!(!Alternative::E.push() && !Alternative::G.push());
    }

    #[test]
    fn push_enabled_is_read_from_the_gateway_configuration() {
        assert!(push_enabled("[push]\nenabled = true\n").expect("parse"));
        assert!(!push_enabled("[push]\nenabled = false\n").expect("parse"));
        assert!(!push_enabled("[cache]\nenabled = true\n").expect("parse"));
        assert!(push_enabled("[push").is_err());
    }

    #[test]
    fn the_push_ideal_is_the_warm_load_plus_the_bytes_at_the_rate() {
        let page = GeneratedPage {
            name: "one".into(),
            url_path: "/one/".into(),
            objects: vec![corpus::ObjectSpec {
                path: "/one/index.html".into(),
                kind: corpus::ObjectKind::Html,
                bytes: 1_250_000,
                depth: 0,
            }],
        };
        let cell = LinkCell {
            rtt_ms: 80,
            loss_percent: 0.0,
            rate_mbit: 100,
        };
        let row = |alternative: &str, load: usize, ms: f64| LoadRow {
            page: "one".into(),
            alternative: alternative.into(),
            rtt_ms: 80,
            loss_percent: 0.0,
            rate_mbit: 100,
            load,
            ok: true,
            error: String::new(),
            protocol: "http/1.1".into(),
            response_start_ms: Some(90.0),
            dom_content_loaded_ms: Some(ms),
            load_event_end_ms: Some(ms),
            requests: Some(1),
            bytes: Some(1_250_000),
            lower_bound_ms: 0.0,
            transport: "warm".into(),
            load_average: None,
            first_contentful_paint_ms: Some(ms / 2.0),
            largest_contentful_paint_ms: Some(ms / 2.0),
        };
        let rows = vec![
            row("g", 1, 300.0),
            row("g", 2, 310.0),
            row("p", 1, 420.0),
            row("p", 2, 440.0),
            row("e", 1, 900.0),
            row("e", 2, 950.0),
        ];
        let g = summarize(&rows, "one", Alternative::G, cell, Some(Phase::Warm));
        // 1.25 MB at 100 Mbit/s: 100 ms, on (g)'s median of 305 ms.
        assert_eq!(push_ideal(&g, &page, cell), Some(405.0));
        let mut r = String::new();
        push_targets(
            &mut r,
            &RunShape::of(&rows),
            &rows,
            &[page],
            Some(Phase::Warm),
        )
        .expect("render");
        // (p)'s 430 ms: 1.06 x the ideal, within 1.2 x of it (486 ms).
        assert!(
            r.contains("| one | 80 ms, 0% loss, 100 Mbit/s | 305 | 100 | 405 | 430 | 1.06 (met) |"),
            "{r}"
        );
        assert!(r.contains("| 0.46 (met) |"), "(p) / (e): {r}");
    }

    #[test]
    fn links_are_read_as_rtt_loss_rate() {
        let cell = LinkCell::parse("20/0/10").expect("a link");
        assert_eq!(
            cell,
            LinkCell {
                rtt_ms: 20,
                loss_percent: 0.0,
                rate_mbit: 10
            }
        );
        assert_eq!(
            LinkCell::parse("80/1.5/100").expect("a link").loss_percent,
            1.5
        );
        for bad in ["80/0", "80/0/100/1", "80/x/100", "80/0/0", "80/100/10", ""] {
            assert!(LinkCell::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_queue_holds_one_bandwidth_delay_product() {
        let cell = LinkCell {
            rtt_ms: 200,
            loss_percent: 1.0,
            rate_mbit: 100,
        };
        // 100 Mbit/s x 200 ms = 2.5 MB.
        assert_eq!(cell.params().a_to_b.queue_bytes, Some(2_500_000));
        let small = LinkCell {
            rtt_ms: 20,
            loss_percent: 0.0,
            rate_mbit: 10,
        };
        // 25 KB is less than 64 frames.
        assert_eq!(small.params().b_to_a.queue_bytes, Some(64 * 1514));
    }
}
