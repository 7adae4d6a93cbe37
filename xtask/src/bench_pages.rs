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
//! - (g) the same with a warm cache.
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

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testbed::corpus::{self, GeneratedPage, Link};
use testbed::{
    Binaries, Browser, BrowserConfig, Demo, DemoOptions, DemoWan, GatewayConfig,
    GatewayConfigOverrides, Nginx, NsProcess, PageLoad, Squid, TlsSite, WanEmulator, WanParams,
};

use crate::cmd::{install_stop_handlers, stop_requested, workspace_root};

/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwpg-";
/// The site's address as the browser dials it.
const SITE: &str = "203.0.113.10";
/// The framed-TCP origin's port (the userspace-SCTP origin has the demo's 9899).
const FRAMED_TCP_PORT: u16 = 9900;
/// The gateway's admin endpoint in the router namespace (the shipped default).
const ADMIN: &str = "127.0.0.1:3130";
/// How long one load may take before it counts as failed.
const LOAD_TIMEOUT: Duration = Duration::from_secs(90);
/// Seed of the generated corpus.
const CORPUS_SEED: u64 = 2026;
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
}

impl Alternative {
    pub(crate) const ALL: [Alternative; 7] = [
        Self::A,
        Self::B,
        Self::C,
        Self::D,
        Self::E,
        Self::F,
        Self::G,
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
        }
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
        }
    }

    fn is_gateway(self) -> bool {
        matches!(self, Self::D | Self::E | Self::F | Self::G)
    }
}

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
    tls: TlsSite,
    _tls_nginx: Nginx,
    _framed_origin: NsProcess,
}

pub(crate) fn run(options: &PagesBench) -> Result<()> {
    install_stop_handlers()?;
    let built = crate::run::build(&["gateway", "origin", "wanem"])?;
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
    let mut bench = Bench::start(&built, &dir, &site, pages, first)?;
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

    let results = workspace_root().join("bench/results");
    let csv_dir = results.join("pages");
    std::fs::create_dir_all(&csv_dir)?;
    write_csv(&csv_dir, &records, &bench.pages)?;
    let report = report(options, &cells, &records, &bench.pages)?;
    let path = results.join("pages.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    println!("{report}");
    println!("==> report written to bench/results/pages.md, CSV to bench/results/pages/");
    Ok(())
}

/// Writes the corpus and the demo site into `site` and describes the pages asked for.
fn site_pages(site: &Path, wanted: &[String]) -> Result<Vec<GeneratedPage>> {
    let generated = corpus::generate(site, CORPUS_SEED).context("generating the page corpus")?;
    let demo = testbed::demo_site();
    for entry in std::fs::read_dir(&demo)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), site.join(entry.file_name()))?;
        }
    }
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

impl Bench {
    fn start(
        built: &[PathBuf],
        dir: &Path,
        site: &Path,
        pages: Vec<GeneratedPage>,
        first: LinkCell,
    ) -> Result<Self> {
        let binaries = Binaries {
            gateway: built[0].clone(),
            origin: built[1].clone(),
        };
        let mut options = DemoOptions::new(PREFIX, &workspace_root(), dir);
        options.origin_root = Some(site.to_owned());
        options.origin_transport = Some("userspace".into());
        options.start_gateway = false;
        options.wan = Some(DemoWan {
            wanem: built[2].clone(),
            params: first.params(),
        });
        println!("==> starting namespaces, nginx, the origins and the WAN emulator");
        let demo = Demo::start(binaries, options)?;
        let origin_ns = demo.topology.origin.name().to_owned();

        let framed = testbed::topology::WAN.host_v4;
        let mut command = Command::new(&built[1]);
        command
            .arg("--config")
            .arg(workspace_root().join("config/origin.toml"))
            .args(["--transport", "framed-tcp", "--listen"])
            .arg(SocketAddr::new(framed.into(), FRAMED_TCP_PORT).to_string())
            .arg("--root")
            .arg(site)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1");
        let mut framed_origin = NsProcess::spawn(
            &origin_ns,
            "origin-framed-tcp",
            &command,
            &dir.join("origin-framed-tcp.log"),
        )?;
        framed_origin.wait_for_log(
            &format!("listening on {framed}:{FRAMED_TCP_PORT}"),
            testbed::READY_TIMEOUT,
        )?;

        let (tls_nginx, tls) = Nginx::start_tls(
            &origin_ns,
            &[
                SocketAddr::new(testbed::topology::SITE_V4.into(), 443),
                SocketAddr::new(testbed::topology::SITE_V6.into(), 443),
            ],
            site,
            &dir.join("nginx-tls"),
        )?;
        Ok(Self {
            demo,
            wanem: built[2].clone(),
            dir: dir.to_owned(),
            pages,
            tls,
            _tls_nginx: tls_nginx,
            _framed_origin: framed_origin,
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
        let framed = alternative == Alternative::D;
        let origin = if framed {
            SocketAddr::new(testbed::topology::WAN.host_v4.into(), FRAMED_TCP_PORT)
        } else {
            testbed::topology::origin_sctp_v4()
        };
        let overrides = GatewayConfigOverrides {
            lan_interfaces: Some(vec![testbed::topology::LAN_IF.to_owned()]),
            origin_address: Some(origin),
            destinations: Some(vec![
                testbed::topology::SITE_NET_V4.to_owned(),
                testbed::topology::SITE_NET_V6.to_owned(),
            ]),
            cache_path: Some(cache_path),
            prefetch_enabled: Some(matches!(alternative, Alternative::F | Alternative::G)),
            backend: Some(if framed { "framed-tcp" } else { "userspace" }.into()),
            // A dead origin must show as failed loads, not as nginx's answers.
            fail_open: Some(false),
            ..GatewayConfigOverrides::default()
        };
        let config = GatewayConfig::from_shipped(&workspace_root(), &overrides)?;
        std::fs::write(&self.demo.gateway_config_path, &config.text)?;
        self.demo.gateway_config = config;
        self.demo.start_gateway()?;
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
            Alternative::D | Alternative::E | Alternative::F => {
                self.warm_up()?;
                self.purge()?;
                Ok(None)
            }
            Alternative::G => Ok(None),
        }
    }

    /// Requests a file outside every page until the answer is not a 502, so
    /// that the proxy's upstream connection or association is up before the
    /// load (the gateway, with fail-open off, answers 502 until it is).
    fn warm_up(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + testbed::READY_TIMEOUT;
        loop {
            let mut curl = Command::new("curl");
            curl.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30"])
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
        let (scheme, extra_args) = match alternative {
            Alternative::B => ("https", self.tls.chromium_args()),
            _ => ("http", Vec::new()),
        };
        let config = BrowserConfig {
            extra_args,
            command_timeout: LOAD_TIMEOUT,
            ..BrowserConfig::default()
        };
        let mut browser = Browser::launch(self.demo.topology.client.name(), &config)?;
        let mut tab = browser.new_page()?;
        let url = format!("{scheme}://{SITE}{}", page.url_path);
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

/// The recorded loads of one cell that succeeded.
fn successes<'r>(
    records: &'r [Record],
    page: &str,
    alternative: Alternative,
    cell: LinkCell,
) -> impl Iterator<Item = &'r Measured> + 'r {
    let page = page.to_owned();
    records
        .iter()
        .filter(move |r| r.page == page && r.alternative == alternative && r.link == cell)
        .filter_map(|r| r.outcome.as_ref().ok())
}

/// Summary of one cell.
#[derive(Debug, Clone, Copy)]
struct CellSummary {
    failed: usize,
    load_median: Option<f64>,
    load_p95: Option<f64>,
    dcl_median: Option<f64>,
    ttfb_median: Option<f64>,
}

fn summarize(
    records: &[Record],
    page: &str,
    alternative: Alternative,
    cell: LinkCell,
) -> CellSummary {
    let measured: Vec<&Measured> = successes(records, page, alternative, cell).collect();
    let failed = records
        .iter()
        .filter(|r| {
            r.page == page && r.alternative == alternative && r.link == cell && r.outcome.is_err()
        })
        .count();
    let pick = |f: fn(&Measured) -> f64| measured.iter().map(|m| f(m)).collect::<Vec<f64>>();
    let load = pick(|m| m.load.timing.load_event_end);
    CellSummary {
        failed,
        load_median: median(&load),
        load_p95: percentile(&load, 0.95),
        dcl_median: median(&pick(|m| m.load.timing.dom_content_loaded_event_end)),
        ttfb_median: median(&pick(|m| m.load.timing.response_start)),
    }
}

fn write_csv(dir: &Path, records: &[Record], pages: &[GeneratedPage]) -> Result<()> {
    let mut loads = String::from(
        "page,alternative,rtt_ms,loss_percent,rate_mbit,load,ok,error,protocol,response_start_ms,dom_content_loaded_ms,load_event_end_ms,requests,bytes,lower_bound_ms\n",
    );
    let mut resources = String::from(
        "page,alternative,rtt_ms,loss_percent,rate_mbit,load,url,initiator,protocol,start_ms,response_start_ms,response_end_ms,transfer_size\n",
    );
    for r in records {
        let bound = pages
            .iter()
            .find(|p| p.name == r.page)
            .map(|p| corpus::lower_bound(p, &r.link.link()).as_secs_f64() * 1000.0)
            .unwrap_or(f64::NAN);
        let key = format!(
            "{},{},{},{},{},{}",
            r.page,
            r.alternative.letter(),
            r.link.rtt_ms,
            r.link.loss_percent,
            r.link.rate_mbit,
            r.index + 1
        );
        match &r.outcome {
            Ok(m) => {
                let t = &m.load.timing;
                writeln!(
                    loads,
                    "{key},1,,{},{:.1},{:.1},{:.1},{},{},{bound:.1}",
                    t.next_hop_protocol,
                    t.response_start,
                    t.dom_content_loaded_event_end,
                    t.load_event_end,
                    m.load.requests.len(),
                    m.bytes
                )?;
                for res in &m.load.resources {
                    writeln!(
                        resources,
                        "{key},{},{},{},{:.1},{:.1},{:.1},{}",
                        csv_field(&res.name),
                        res.initiator_type,
                        res.next_hop_protocol,
                        res.start_time,
                        res.response_start,
                        res.response_end,
                        res.transfer_size
                    )?;
                }
            }
            Err(e) => writeln!(loads, "{key},0,{},,,,,,,{bound:.1}", csv_field(e))?,
        }
    }
    std::fs::write(dir.join("loads.csv"), loads)?;
    std::fs::write(dir.join("resources.csv"), resources)?;
    Ok(())
}

/// Quotes a CSV field that needs it.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\"").replace('\n', " "))
    } else {
        text.to_owned()
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

fn report(
    options: &PagesBench,
    cells: &[LinkCell],
    records: &[Record],
    pages: &[GeneratedPage],
) -> Result<String> {
    let mut r = crate::bench::report_header(
        "Page loads: the gateway against the alternatives over emulated links",
        "pages",
    )?;
    writeln!(
        r,
        "- run: {} recorded loads per page, alternative and link; pages {}; links {} ms RTT x {}% loss x {} Mbit/s",
        options.loads,
        options.pages.join(", "),
        join(&options.rtts_ms),
        join(&options.losses),
        join(&options.rates_mbit)
    )?;
    writeln!(
        r,
        "- browser: headless Chromium in the client namespace, fresh profile per load; navigation and resource timing read over the DevTools protocol; times in ms since navigation start"
    )?;
    writeln!(
        r,
        "- link: wanem between the router and the origin host, the given round trip split evenly, random loss in each direction, token-bucket rate each way, drop-tail queue of one bandwidth-delay product (at least 64 frames); the LAN is not emulated"
    )?;
    writeln!(
        r,
        "- lower bound: one round trip to connect, one per dependency level, all bytes at the bottleneck rate (`testbed::corpus::lower_bound`)"
    )?;
    writeln!(
        r,
        "- CSV: bench/results/pages/loads.csv (every load), resources.csv (every resource timing entry)\n"
    )?;
    writeln!(r, "## Alternatives\n")?;
    writeln!(r, "| | alternative | how |")?;
    writeln!(r, "|---|---|---|")?;
    for a in &options.alternatives {
        writeln!(r, "| ({}) | {} | {} |", a.letter(), a.label(), a.method())?;
    }
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

    targets(&mut r, options, cells, records)?;

    for page in pages {
        writeln!(
            r,
            "\n## {}: median loadEventEnd, ms (p95; ratio to (a); multiple of the lower bound)\n",
            page.name
        )?;
        write!(r, "| link | lower bound |")?;
        for a in &options.alternatives {
            write!(r, " ({}) |", a.letter())?;
        }
        write!(r, "\n|---|---|")?;
        for _ in &options.alternatives {
            write!(r, "---|")?;
        }
        writeln!(r)?;
        for &cell in cells {
            let bound = corpus::lower_bound(page, &cell.link()).as_secs_f64() * 1000.0;
            let base = summarize(records, &page.name, Alternative::A, cell).load_median;
            write!(r, "| {} | {bound:.0} |", cell.name())?;
            for &a in &options.alternatives {
                let s = summarize(records, &page.name, a, cell);
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
            "\n### {}: median DOMContentLoaded end and responseStart, ms\n",
            page.name
        )?;
        write!(r, "| link |")?;
        for a in &options.alternatives {
            write!(r, " ({}) DCL | ({}) TTFB |", a.letter(), a.letter())?;
        }
        write!(r, "\n|---|")?;
        for _ in &options.alternatives {
            write!(r, "---|---|")?;
        }
        writeln!(r)?;
        for &cell in cells {
            write!(r, "| {} |", cell.name())?;
            for &a in &options.alternatives {
                let s = summarize(records, &page.name, a, cell);
                write!(r, " {} | {} |", ms(s.dcl_median), ms(s.ttfb_median))?;
            }
            writeln!(r)?;
        }
    }
    let failures: Vec<&Record> = records.iter().filter(|r| r.outcome.is_err()).collect();
    if !failures.is_empty() {
        writeln!(r, "\n## Failed loads\n")?;
        for f in failures {
            if let Err(e) = &f.outcome {
                writeln!(
                    r,
                    "- {} ({}) {} load {}: {e}",
                    f.page,
                    f.alternative.letter(),
                    f.link.name(),
                    f.index + 1
                )?;
            }
        }
    }
    Ok(r)
}

/// The targets, each page and rate at the link they name.
fn targets(
    r: &mut String,
    options: &PagesBench,
    cells: &[LinkCell],
    records: &[Record],
) -> Result<()> {
    writeln!(r, "\n## Targets (median loadEventEnd)\n")?;
    writeln!(
        r,
        "| page | link | (f) / (a) ≤ 0.6 | (f) / (b) ≤ 1 | (g) / (a) ≤ 0.2 |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    let mut any = false;
    for page in &options.pages {
        for &cell in cells
            .iter()
            .filter(|c| c.rtt_ms == 80 && (c.loss_percent - 1.0).abs() < f64::EPSILON)
        {
            any = true;
            let m = |a| summarize(records, page, a, cell).load_median;
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

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b \"c\""), "\"a,b \"\"c\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
