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
//! - (h) HTTPS through the gateway: the site by its name over TLS, the
//!   gateway tunnelling each TLS connection on a stream of the userspace-SCTP
//!   association to the origin, which terminates TLS (against (b)).
//!
//! Every load goes from the client namespace through the router namespace and
//! the WAN emulator (`wanem`) to the origin host, where nginx and the SCTP origin
//! serve the same files (the generated corpus and the demo site): only the thing
//! in the router changes. The emulator is restarted with each link's settings;
//! within a link the alternatives run one after another, each with its loads back
//! to back (so one daemon start per alternative and link, not per load).
//!
//! What is cold and what is warm, per alternative, is part of the method and in
//! the report: every load uses a fresh Chromium profile (no browser cache, new
//! connections); a proxy (Squid, the gateway) gets one warm-up request before
//! each load so that its upstream connection or association is up, as it would
//! be on a router that has been running; then its cache is emptied (Squid is
//! restarted on an empty cache, the gateway's is purged through its admin
//! endpoint), except for (g), whose cache keeps what the first, unrecorded load
//! put in it.

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
/// Settings of a run that its rows do not show, one per line, beside its CSV.
const NOTES_FILE: &str = "notes.txt";
/// The run's command line after `cargo xtask bench`, beside its CSV.
const COMMAND_FILE: &str = "command.txt";
/// The page of the demo site, by its name in the report.
const DEMO_PAGE: &str = "demo";

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
    /// The gateway over QUIC (quinn), cold cache, prefetch off.
    Q,
    /// HTTPS through the gateway's tunnel over userspace SCTP.
    H,
}

impl Alternative {
    pub(crate) const ALL: [Alternative; 9] = [
        Self::A,
        Self::B,
        Self::C,
        Self::D,
        Self::E,
        Self::F,
        Self::G,
        Self::Q,
        Self::H,
    ];

    fn letter(self) -> char {
        match self {
            Self::A => 'a',
            Self::B => 'b',
            Self::C => 'c',
            Self::D => 'd',
            Self::E => 'e',
            Self::F => 'f',
            Self::G => 'g',
            Self::Q => 'q',
            Self::H => 'h',
        }
    }

    fn from_letter(letter: char) -> Option<Self> {
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
            Self::H => {
                "Chromium over HTTPS by the site's name (a certificate at the origin, trusted by its key); the gateway intercepts port 443 for the site, reads the ClientHello's server name and tunnels each TLS connection on a stream of the userspace-SCTP association to the origin, which terminates TLS (HTTP/1.1 by its ALPN); nothing cached or prefetched; one warm-up request over port 80 before each load"
            }
            Self::Q => {
                "as (e) over the QUIC backend (quinn with the controller named by the shipped configs' `congestion`, mapped to quinn's; one connection, one QUIC stream per stream number): the multistream transport our SCTP is measured against"
            }
        }
    }

    fn is_gateway(self) -> bool {
        matches!(
            self,
            Self::D | Self::E | Self::F | Self::G | Self::Q | Self::H
        )
    }
}

/// The links' round-trip times when `--rtt` is not given, ms.
pub(crate) const DEFAULT_RTTS_MS: [u64; 3] = [20, 80, 200];

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
    /// Which alternatives.
    pub alternatives: Vec<Alternative>,
    /// Which pages: generated profiles (p25, p50, p75) and `demo`.
    pub pages: Vec<String>,
    /// The report's name: bench/results/{name}.md and bench/results/{name}/.
    pub name: String,
    /// TCP congestion control for every TCP sender on the origin host (nginx,
    /// the framed-TCP origin), e.g. `reno`; the kernel's default if `None`.
    pub origin_tcp_cc: Option<String>,
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

/// One recorded load, or why it failed.
#[derive(Debug, Clone)]
struct Record {
    page: String,
    alternative: Alternative,
    link: LinkCell,
    index: usize,
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
    _framed_origin: NsProcess,
    _quic_origin: NsProcess,
    /// The certificate pin the QUIC origin logged at start, for (q)'s gateway.
    quic_pin: String,
}

pub(crate) fn run(options: &PagesBench) -> Result<()> {
    install_stop_handlers()?;
    // Alternatives (d) and (q) run the daemons over framed TCP and QUIC.
    let built = crate::run::build_with_baselines(&["gateway", "origin", "wanem"])?;
    let dir = testbed::target_dir().join("bench-pages");
    let _ = std::fs::remove_dir_all(&dir);
    testbed::cleanup_stale(PREFIX)?;
    let site = dir.join("site");
    let pages = site_pages(&site, &options.pages)?;
    let cells: Vec<LinkCell> = options
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
        .collect();
    let Some(&first) = cells.first() else {
        bail!("no link to run: give at least one --rtt, --loss and --rate");
    };

    println!(
        "==> {} links x {} alternatives x {} pages x {} loads",
        cells.len(),
        options.alternatives.len(),
        pages.len(),
        options.loads
    );
    let mut bench = Bench::start(
        &built,
        &dir,
        &site,
        pages,
        first,
        options.origin_tcp_cc.as_deref(),
        options.tunnel_h2,
    )?;
    let mut records = Vec::new();
    'links: for (n, &cell) in cells.iter().enumerate() {
        println!("==> link {}/{}: {}", n + 1, cells.len(), cell.name());
        bench.set_link(cell)?;
        for &alternative in &options.alternatives {
            if stop_requested() {
                println!("==> stopping early (signal); writing what was measured");
                break 'links;
            }
            records.extend(bench.run_alternative(alternative, cell, options.loads)?);
        }
    }
    bench.stop_gateway()?;

    let csv_dir = results_dir().join(&options.name);
    std::fs::create_dir_all(&csv_dir)?;
    write_resources(&csv_dir.join("resources.csv"), &records)?;
    let rows: Vec<LoadRow> = records
        .iter()
        .map(|r| LoadRow::from_record(r, &bench.pages))
        .collect();
    write_loads(&csv_dir.join("loads.csv"), &rows)?;
    let mut notes = match &options.origin_tcp_cc {
        Some(cc) => vec![format!(
            "TCP congestion control on the origin host (nginx, the framed-TCP origin): {cc}"
        )],
        None => Vec::new(),
    };
    if options.tunnel_h2 {
        notes.push(
            "the origin offers h2 by ALPN on HTTPS tunnels (`tls.h2`): (h) is HTTP/2 inside one tunnel"
                .into(),
        );
    }
    // Kept beside the CSV so that --from-csv says them again.
    std::fs::write(csv_dir.join(NOTES_FILE), notes.join("\n"))?;
    let command = invocation();
    std::fs::write(csv_dir.join(COMMAND_FILE), &command)?;
    render(&options.name, &command, &rows, &bench.pages, &notes)
}

/// `cargo xtask bench pages --from-csv`: the report and charts again from the
/// last run's bench/results/pages/loads.csv, without loading anything.
pub(crate) fn rerender(name: &str) -> Result<()> {
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
    let notes: Vec<String> = std::fs::read_to_string(results_dir().join(name).join(NOTES_FILE))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    let command = std::fs::read_to_string(results_dir().join(name).join(COMMAND_FILE))
        .map(|c| c.trim().to_owned())
        .unwrap_or_else(|_| "pages".into());
    let rendered = render(name, &command, &rows, &pages, &notes);
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

/// Writes bench/results/{name}.md and the charts for `rows`; `command` is what
/// followed `cargo xtask bench` in the run.
fn render(
    name: &str,
    command: &str,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
    notes: &[String],
) -> Result<()> {
    let run = RunShape::of(rows);
    let charts = charts(name, &run, rows, pages)?;
    let mut report = report(name, command, &run, rows, pages, &charts, notes)?;
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
    let mut pages = Vec::new();
    for name in wanted {
        if name == DEMO_PAGE {
            let mut page =
                corpus::describe_dir(site, "/").context("describing the demo site's page")?;
            page.name = DEMO_PAGE.into();
            pages.push(page);
        } else {
            let page = generated
                .iter()
                .find(|p| &p.name == name)
                .with_context(|| {
                    let known: Vec<&str> = generated.iter().map(|p| p.name.as_str()).collect();
                    format!("no page {name}: the corpus has {known:?} and {DEMO_PAGE}")
                })?;
            pages.push(page.clone());
        }
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
    namespace: &str,
    site: &Path,
    transport: &str,
    listen: SocketAddr,
    dir: &Path,
) -> Result<NsProcess> {
    let mut command = Command::new(binary);
    command
        .arg("--config")
        .arg(workspace_root().join("config/origin.toml"))
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
        origin_tcp_cc: Option<&str>,
        tunnel_h2: bool,
    ) -> Result<Self> {
        let binaries = Binaries {
            gateway: built[0].clone(),
            origin: built[1].clone(),
        };
        let mut options = DemoOptions::new(PREFIX, &workspace_root(), dir);
        options.origin_root = Some(site.to_owned());
        options.origin_transport = Some("userspace".into());
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
        let origin_ns = demo.topology.origin.name().to_owned();
        if let Some(cc) = origin_tcp_cc {
            testbed::sysctl(&origin_ns, "net.ipv4.tcp_congestion_control", cc).with_context(
                || format!("setting TCP congestion control {cc} on the origin host"),
            )?;
        }

        let wan_host = testbed::topology::WAN.host_v4;
        let framed_origin = spawn_origin(
            &built[1],
            &origin_ns,
            site,
            "framed-tcp",
            SocketAddr::new(wan_host.into(), FRAMED_TCP_PORT),
            dir,
        )?;
        let quic_origin = spawn_origin(
            &built[1],
            &origin_ns,
            site,
            "quic",
            SocketAddr::new(wan_host.into(), QUIC_PORT),
            dir,
        )?;
        let quic_pin = quic_origin_pin(&quic_origin)?;

        let tls = (demo.https.as_ref())
            .and_then(|h| h.direct_tls.clone())
            .context("the demo started no TLS nginx")?;
        Ok(Self {
            demo,
            wanem: built[2].clone(),
            dir: dir.to_owned(),
            pages,
            tls,
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
            prefetch_enabled: Some(matches!(alternative, Alternative::F | Alternative::G)),
            backend: Some(backend.into()),
            quic_server_cert_sha256: (alternative == Alternative::Q).then(|| self.quic_pin.clone()),
            // A dead origin must show as failed loads, not as nginx's answers.
            fail_open: Some(false),
            tls_port: (alternative == Alternative::H).then_some(testbed::https::TLS_PORT),
            ..GatewayConfigOverrides::default()
        })?;
        Ok(())
    }

    /// Runs every page's loads for `alternative` on the current link.
    fn run_alternative(
        &mut self,
        alternative: Alternative,
        cell: LinkCell,
        loads: usize,
    ) -> Result<Vec<Record>> {
        if alternative.is_gateway() {
            self.start_gateway(alternative)?;
        } else {
            self.stop_gateway()?;
        }
        let mut records = Vec::new();
        for page in self.pages.clone() {
            if alternative == Alternative::G {
                // The unrecorded load that warms the cache.
                self.warm_up()?;
                if let Err(e) = self.load(alternative, &page) {
                    println!("    (g) warming load of {} failed: {e}", page.name);
                }
            }
            for index in 0..loads {
                let squid = self.prepare_load(alternative)?;
                let outcome = self.load(alternative, &page).map_err(|e| format!("{e:#}"));
                drop(squid);
                match &outcome {
                    Ok(m) => println!(
                        "    ({}) {} load {}/{loads}: load event {:.0} ms, {} requests, {} KB",
                        alternative.letter(),
                        page.name,
                        index + 1,
                        m.load.timing.load_event_end,
                        m.load.requests.len(),
                        m.bytes / 1000
                    ),
                    Err(e) => println!(
                        "    ({}) {} load {}/{loads}: FAILED: {e}",
                        alternative.letter(),
                        page.name,
                        index + 1
                    ),
                }
                records.push(Record {
                    page: page.name.clone(),
                    alternative,
                    link: cell,
                    index,
                    outcome,
                });
            }
        }
        Ok(records)
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
            Alternative::D | Alternative::E | Alternative::F | Alternative::Q => {
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
    alternative: char,
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
    lower_bound_ms: f64,
}

impl LoadRow {
    fn from_record(r: &Record, pages: &[GeneratedPage]) -> Self {
        let lower_bound_ms = pages
            .iter()
            .find(|p| p.name == r.page)
            .map_or(f64::NAN, |p| ms_of(corpus::lower_bound(p, &r.link.link())));
        let mut row = LoadRow {
            page: r.page.clone(),
            alternative: r.alternative.letter(),
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
        };
        match &r.outcome {
            Ok(m) => {
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
    alternative: char,
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
}

/// What the per-resource wait table reads back from resources.csv.
#[derive(Debug, serde::Deserialize)]
struct ResourceWait {
    page: String,
    alternative: char,
    rtt_ms: u64,
    loss_percent: f64,
    rate_mbit: u64,
    load: usize,
    start_ms: f64,
    response_start_ms: f64,
    response_end_ms: f64,
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
    loads: usize,
}

impl RunShape {
    fn of(rows: &[LoadRow]) -> Self {
        let mut shape = RunShape {
            pages: Vec::new(),
            alternatives: Vec::new(),
            cells: Vec::new(),
            loads: 0,
        };
        for row in rows {
            if !shape.pages.contains(&row.page) {
                shape.pages.push(row.page.clone());
            }
            if let Some(a) = Alternative::from_letter(row.alternative)
                && !shape.alternatives.contains(&a)
            {
                shape.alternatives.push(a);
            }
            if !shape.cells.contains(&row.link()) {
                shape.cells.push(row.link());
            }
            shape.loads = shape.loads.max(row.load);
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
#[derive(Debug, Clone, Copy)]
struct CellSummary {
    failed: usize,
    load_median: Option<f64>,
    load_p25: Option<f64>,
    load_p75: Option<f64>,
    load_p95: Option<f64>,
    dcl_median: Option<f64>,
    ttfb_median: Option<f64>,
}

fn summarize(
    rows: &[LoadRow],
    page: &str,
    alternative: Alternative,
    cell: LinkCell,
) -> CellSummary {
    let cell_rows: Vec<&LoadRow> = rows
        .iter()
        .filter(|r| r.is(page, alternative, cell))
        .collect();
    let pick = |f: fn(&LoadRow) -> Option<f64>| -> Vec<f64> {
        cell_rows
            .iter()
            .filter(|r| r.ok)
            .filter_map(|r| f(r))
            .collect()
    };
    let load = pick(|r| r.load_event_end_ms);
    CellSummary {
        failed: cell_rows.iter().filter(|r| !r.ok).count(),
        load_median: median(&load),
        load_p25: percentile(&load, 0.25),
        load_p75: percentile(&load, 0.75),
        load_p95: percentile(&load, 0.95),
        dcl_median: median(&pick(|r| r.dom_content_loaded_ms)),
        ttfb_median: median(&pick(|r| r.response_start_ms)),
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

/// One grouped-bar chart per page and rate: median loadEventEnd per link,
/// one bar per alternative, and the lower bound. Returns the charts' paths
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
                name: "lower bound".into(),
                values: cells
                    .iter()
                    .map(|c| ms_of(corpus::lower_bound(page, &c.link())) / 1000.0)
                    .collect(),
            }];
            for &a in &run.alternatives {
                groups.push(crate::plot::BarGroup {
                    name: format!("({}) {}", a.letter(), a.label()),
                    values: cells
                        .iter()
                        .map(|&c| {
                            summarize(rows, &page.name, a, c)
                                .load_median
                                .map_or(0.0, |v| v / 1000.0)
                        })
                        .collect(),
                });
            }
            let file = format!("{name}/{}-{rate}mbit.png", page.name);
            crate::plot::bars(
                &results_dir().join(&file),
                &format!(
                    "{}: median loadEventEnd at {rate} Mbit/s (RTT / loss)",
                    page.name
                ),
                "link (round trip / loss each way)",
                "seconds",
                &categories,
                &groups,
            )?;
            made.push((
                file,
                format!("{}, {rate} Mbit/s: median loadEventEnd per link and alternative, with the lower bound", page.name),
            ));
        }
    }
    Ok(made)
}

fn report(
    name: &str,
    command: &str,
    run: &RunShape,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
    charts: &[(String, String)],
    notes: &[String],
) -> Result<String> {
    let mut r = super::common::report_header(
        "Page loads: the gateway against the alternatives over emulated links",
        command,
    )?;
    writeln!(
        r,
        "- run: {} recorded loads per page, alternative and link; pages {}; links {} ms RTT x {}% loss x {} Mbit/s ({} links)",
        run.loads,
        run.pages.join(", "),
        join(&run.values(|c| c.rtt_ms)),
        join(&run.values(|c| c.loss_percent)),
        join(&run.values(|c| c.rate_mbit)),
        run.cells.len()
    )?;
    writeln!(
        r,
        "- browser: headless Chromium in the client namespace, fresh profile per load; navigation and resource timing read over the DevTools protocol; times in ms since navigation start"
    )?;
    writeln!(
        r,
        "- link: wanem between the router and the origin host, the round trip split evenly, random loss in each direction, token-bucket rate each way, drop-tail queue of one bandwidth-delay product (at least 64 frames); the LAN is not emulated"
    )?;
    writeln!(
        r,
        "- lower bound: one round trip to connect, one per dependency level, all bytes at the bottleneck rate (`testbed::corpus::lower_bound`)"
    )?;
    writeln!(
        r,
        "- data: bench/results/{name}/loads.csv (every load), resources.csv (every resource timing entry); `cargo xtask bench pages --name {name} --from-csv` redraws this report and its charts from loads.csv"
    )?;
    for note in notes {
        writeln!(r, "- {note}")?;
    }
    writeln!(r)?;
    writeln!(r, "## Alternatives\n")?;
    writeln!(r, "| | alternative | how |")?;
    writeln!(r, "|---|---|---|")?;
    for a in &run.alternatives {
        writeln!(r, "| ({}) | {} | {} |", a.letter(), a.label(), a.method())?;
    }
    writeln!(
        r,
        "\n(g) is answered from the router's cache: its loads cross only the LAN, so it can come in under the WAN's lower bound. Failed loads are left out of the medians and counted beside them."
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

    targets(&mut r, run, rows)?;
    transport_targets(&mut r, run, rows, pages)?;
    https_targets(&mut r, run, rows)?;
    quartiles_at_80_ms(&mut r, run, rows)?;

    for page in pages {
        load_tables(&mut r, run, rows, page)?;
    }
    if !charts.is_empty() {
        writeln!(r, "\n## Charts\n")?;
        for (file, caption) in charts {
            writeln!(r, "![{caption}]({file})\n")?;
        }
    }
    failed_loads(&mut r, rows)?;
    Ok(r)
}

/// One page's tables: median loadEventEnd per link and alternative (with p95,
/// the ratio to (a) and the multiple of the lower bound), then DCL and TTFB.
fn load_tables(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    page: &GeneratedPage,
) -> Result<()> {
    writeln!(
        r,
        "\n## {}: median loadEventEnd, ms (p95; ratio to (a); multiple of the lower bound)\n",
        page.name
    )?;
    table_header(r, &["link", "lower bound"], &run.alternatives, &[""])?;
    for &cell in &run.cells {
        let bound = ms_of(corpus::lower_bound(page, &cell.link()));
        let base = summarize(rows, &page.name, Alternative::A, cell).load_median;
        write!(r, "| {} | {bound:.0} |", cell.name())?;
        for &a in &run.alternatives {
            let s = summarize(rows, &page.name, a, cell);
            let failed = if s.failed > 0 {
                format!(", {} failed", s.failed)
            } else {
                String::new()
            };
            write!(
                r,
                " {} ({}; {}; {}x{failed}) |",
                ms(s.load_median),
                ms(s.load_p95),
                ratio(s.load_median, base),
                ratio(s.load_median, Some(bound)),
            )?;
        }
        writeln!(r)?;
    }
    writeln!(
        r,
        "\n### {}: median DOMContentLoaded end and responseStart (time to first byte), ms\n",
        page.name
    )?;
    table_header(r, &["link"], &run.alternatives, &[" DCL", " TTFB"])?;
    for &cell in &run.cells {
        write!(r, "| {} |", cell.name())?;
        for &a in &run.alternatives {
            let s = summarize(rows, &page.name, a, cell);
            write!(r, " {} | {} |", ms(s.dcl_median), ms(s.ttfb_median))?;
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
            writeln!(
                r,
                "- {} ({}) {} load {}: {}",
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
/// there to its last byte, medians over the loads.
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
                let mut per_load: BTreeMap<usize, (f64, f64, usize)> = BTreeMap::new();
                for w in waits.iter().filter(|w| {
                    w.page == page.name && w.alternative == a.letter() && w.link() == cell
                }) {
                    let entry = per_load.entry(w.load).or_default();
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
fn targets(r: &mut String, run: &RunShape, rows: &[LoadRow]) -> Result<()> {
    writeln!(r, "\n## Targets (median loadEventEnd)\n")?;
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
            let m = |a| summarize(rows, page, a, cell).load_median;
            writeln!(
                r,
                "| {page} | {} | {} | {} | {} |",
                cell.name(),
                ratio(m(Alternative::F), m(Alternative::A)),
                ratio(m(Alternative::F), m(Alternative::B)),
                ratio(m(Alternative::G), m(Alternative::A)),
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
/// max(0.6 x (a), 1.15 x the lower bound) on links of 80 ms or more; (e)
/// within 1.3 x the lower bound on clean 10 Mbit/s links.
fn transport_targets(
    r: &mut String,
    run: &RunShape,
    rows: &[LoadRow],
    pages: &[GeneratedPage],
) -> Result<()> {
    writeln!(r, "\n## Targets of the transport (median loadEventEnd)\n")?;
    writeln!(
        r,
        "(e) is met where it is no slower than each of (a), (b), (d) and (q) that ran; \
         (f) where it takes at most max(0.6 x (a), 1.15 x the lower bound), on links of \
         80 ms or more; (e) on clean 10 Mbit/s links where it is within 1.3 x the lower bound.\n"
    )?;
    writeln!(
        r,
        "| page | link | (e) / (a) | (e) / (b) | (e) / (d) | (e) / (q) | (e) no slower | \
         (f) / its target | (e) / lower bound ≤ 1.3 |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|---|---|---|")?;
    let verdict = |met: bool| if met { "met" } else { "missed" };
    for page in pages {
        for &cell in &run.cells {
            let m = |a| summarize(rows, &page.name, a, cell).load_median;
            let bound = ms_of(corpus::lower_bound(page, &cell.link()));
            let e = m(Alternative::E);
            let others = [
                Alternative::A,
                Alternative::B,
                Alternative::D,
                Alternative::Q,
            ];
            let no_slower = match e {
                Some(e) => {
                    let ran: Vec<f64> = others.iter().filter_map(|&a| m(a)).collect();
                    if ran.is_empty() {
                        "–".into()
                    } else {
                        verdict(ran.iter().all(|&o| e <= o)).to_owned()
                    }
                }
                None => "–".into(),
            };
            let f_target = match (m(Alternative::F), m(Alternative::A)) {
                (Some(f), Some(a)) if cell.rtt_ms >= 80 => {
                    let target = (0.6 * a).max(1.15 * bound);
                    format!("{:.2} ({})", f / target, verdict(f <= target))
                }
                _ if cell.rtt_ms < 80 => "n/a".into(),
                _ => "–".into(),
            };
            let clean_10 = cell.loss_percent == 0.0 && cell.rate_mbit == 10;
            let e_bound = match e {
                Some(e) if clean_10 => {
                    format!("{:.2} ({})", e / bound, verdict(e <= 1.3 * bound))
                }
                _ if !clean_10 => "n/a".into(),
                _ => "–".into(),
            };
            writeln!(
                r,
                "| {} | {} | {} | {} | {} | {} | {no_slower} | {f_target} | {e_bound} |",
                page.name,
                cell.name(),
                ratio(e, m(Alternative::A)),
                ratio(e, m(Alternative::B)),
                ratio(e, m(Alternative::D)),
                ratio(e, m(Alternative::Q)),
            )?;
        }
    }
    Ok(())
}

/// Issue 19's targets for HTTPS, one row per page and link where (h) and (b)
/// ran: (h) no slower than (b) on any link, at most 0.8 x (b) on links of
/// 80 ms or more.
fn https_targets(r: &mut String, run: &RunShape, rows: &[LoadRow]) -> Result<()> {
    if !run.alternatives.contains(&Alternative::H) || !run.alternatives.contains(&Alternative::B) {
        return Ok(());
    }
    writeln!(r, "\n## Targets of HTTPS (median loadEventEnd)\n")?;
    writeln!(
        r,
        "(h) is met where it is no slower than (b), and on links of 80 ms or more where it \
         takes at most 0.8 x (b).\n"
    )?;
    writeln!(r, "| page | link | (h) / (b) | target | |")?;
    writeln!(r, "|---|---|---|---|---|")?;
    for page in &run.pages {
        for &cell in &run.cells {
            let m = |a| summarize(rows, page, a, cell).load_median;
            let limit = if cell.rtt_ms >= 80 { 0.8 } else { 1.0 };
            let verdict = match (m(Alternative::H), m(Alternative::B)) {
                (Some(h), Some(b)) if h <= limit * b => "met",
                (Some(_), Some(_)) => "missed",
                _ => "–",
            };
            writeln!(
                r,
                "| {page} | {} | {} | ≤ {limit} | {verdict} |",
                cell.name(),
                ratio(m(Alternative::H), m(Alternative::B)),
            )?;
        }
    }
    Ok(())
}

/// p25 and p75 of loadEventEnd on the links of 80 ms, the spread the issue
/// asks for beside the medians (nearest rank: with few loads these are the
/// lower and upper loads).
fn quartiles_at_80_ms(r: &mut String, run: &RunShape, rows: &[LoadRow]) -> Result<()> {
    let cells: Vec<LinkCell> = run
        .cells
        .iter()
        .copied()
        .filter(|c| c.rtt_ms == 80)
        .collect();
    if cells.is_empty() {
        return Ok(());
    }
    writeln!(r, "\n## loadEventEnd p25 – p75 at 80 ms, ms\n")?;
    table_header(r, &["page", "link"], &run.alternatives, &[""])?;
    for page in &run.pages {
        for &cell in &cells {
            write!(r, "| {page} | {} |", cell.name())?;
            for &a in &run.alternatives {
                let s = summarize(rows, page, a, cell);
                write!(r, " {} – {} |", ms(s.load_p25), ms(s.load_p75))?;
            }
            writeln!(r)?;
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
            alternative: 'f',
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
        let s = summarize(&read, "p50", Alternative::F, ok.link());
        assert_eq!((s.failed, s.load_median), (1, Some(2400.0)));
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
