//! `cargo xtask run`: the demo. Installs what is missing, builds the gateway and
//! the origin (release), brings up the testbed's topology (client, gateway,
//! origin host, unmapped web server, each a network namespace), starts nginx, the
//! origin and the gateway, checks the page with headless Chromium over HTTP and
//! over HTTPS, prints what to try, and on Ctrl-C (SIGINT, SIGTERM, SIGHUP) stops the gateway first, checks it
//! removed its interception, and deletes everything it created.
//!
//! HTTPS: the site is also `https://site.test/`. The origin holds a demo
//! certificate for that name, made at start into the run's directory; the
//! gateway intercepts port 443 for the site's addresses and tunnels the TLS
//! bytes on a data stream to the origin, which terminates TLS (the gateway
//! never decrypts). The instructions show how curl (`--cacert`) and Chromium
//! (the certificate's key pin) trust it.
//!
//! With `--site DIR` the origin (and the site's nginx) serve DIR instead of
//! config/demo-site, and the Chromium check loads DIR's index.html through the
//! gateway: your own pages carried over the association.
//!
//! With `--lan-interface IF --origin ADDR` it runs the gateway on this host's own
//! interfaces instead (a real router): no namespaces, just the build, a generated
//! config and the gateway in the foreground.
//!
//! The topology, the processes and the browser live in the `testbed` crate
//! (bench/testbed), which the end-to-end tests share; docs/demo.md draws it.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use testbed::https::{DemoHttps, SITE_NAME};
use testbed::topology::{SITE_V4, SITE_V6, WEB_V4};
use testbed::{
    Binaries, Browser, BrowserConfig, Demo, DemoOptions, GatewayConfig, GatewayConfigOverrides,
    NsProcess,
};

use crate::cmd::{install_stop_handlers, run_command, stop_requested, workspace_root};
use crate::setup;
use crate::shipped::ShippedConfig;

/// Options for `cargo xtask run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunOptions {
    /// Skip `cargo xtask setup` (Debian packages, rust-src, bpf-linker).
    #[arg(long)]
    pub no_setup: bool,
    /// Real router: intercept on this interface of this host (repeatable). Runs
    /// the gateway here, without namespaces; needs --origin.
    #[arg(long = "lan-interface", value_name = "IF", requires = "origin")]
    pub lan_interfaces: Vec<String>,
    /// Real router: the SCTP origin's address (for userspace SCTP its UDP
    /// address), e.g. 192.0.2.66:9899. Needs --lan-interface.
    #[arg(long, value_name = "ADDR", requires = "lan_interfaces")]
    pub origin: Option<SocketAddr>,
    /// Real router: destination networks the origin serves (repeatable); those of
    /// config/gateway.toml by default.
    #[arg(long = "destination", value_name = "CIDR", requires = "origin")]
    pub destinations: Vec<String>,
    /// Skip the check that loads the page in headless Chromium once everything runs.
    #[arg(long)]
    pub no_check: bool,
    /// Serve this directory (a static site with an index.html) as the origin's
    /// document root instead of config/demo-site.
    #[arg(long, value_name = "DIR", conflicts_with = "origin")]
    pub site: Option<PathBuf>,
}

/// Namespace prefix of the demo (`gwdemo-<pid>-1-client`, ...).
const PREFIX: &str = "gwdemo-";

/// How long the gateway gets to remove its rules and exit after SIGTERM.
const GATEWAY_STOP_GRACE: Duration = Duration::from_secs(10);

/// How long the origin and nginx get after SIGTERM.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(5);

/// How often the foreground loop looks at the signal flag and the processes.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// How long the start-up check gives Chromium to load the page.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn run(options: &RunOptions) -> Result<()> {
    // Before anything is installed or built: a wrong directory is a typo.
    let site = options.site.as_deref().map(site_root).transpose()?;
    install_stop_handlers()?;
    if !options.no_setup {
        step("set-up (what is missing gets installed)");
        setup::run(&setup::SetupOptions {
            only: vec![setup::Step::Apt, setup::Step::Rust, setup::Step::BpfLinker],
            demo: true,
            ..setup::SetupOptions::default()
        })?;
    }
    if is_not_root() {
        bail!("the demo creates network namespaces and nftables rules: run it as root");
    }
    match options.origin {
        Some(origin) => run_router(options, origin),
        None => run_demo(options, site),
    }
}

/// The document root `--site DIR` names, absolute (the origin and nginx run
/// elsewhere), once it is known to hold an index.html: without one `/` answers
/// 404 and there is no page to check.
fn site_root(dir: &Path) -> Result<PathBuf> {
    let root = dir
        .canonicalize()
        .with_context(|| format!("--site {}: no such directory", dir.display()))?;
    if !root.is_dir() {
        bail!("--site {}: not a directory", dir.display());
    }
    if !root.join("index.html").is_file() {
        bail!(
            "--site {}: no index.html in it; the demo serves the site's index.html \
             at / and checks it in Chromium",
            dir.display()
        );
    }
    Ok(root)
}

/// `site` (from `--site`) is the origin's document root; the demo site if `None`.
fn run_demo(options: &RunOptions, site: Option<PathBuf>) -> Result<()> {
    let root = workspace_root();
    let binaries = build(&["gateway", "origin"])?;
    let binaries = Binaries {
        gateway: binaries[0].clone(),
        origin: binaries[1].clone(),
    };

    step("topology, nginx, origin and gateway");
    for name in testbed::cleanup_stale(PREFIX)? {
        println!("  removed namespace {name}, left by a killed run");
    }
    let dir = testbed::target_dir().join("demo");
    // Logs of the previous run would be confusing next to this one's.
    let _ = std::fs::remove_dir_all(&dir);
    let served = site
        .clone()
        .unwrap_or_else(|| root.join("config/demo-site"));
    std::fs::create_dir_all(&dir)?;
    let ebpf = ebpf_object();
    let demo_options = DemoOptions {
        origin_root: site.clone(),
        origin_config: Some(queue_aware_origin_config(&dir)?),
        https: true,
        gateway: GatewayConfigOverrides {
            ebpf_interface: ebpf.is_some().then(|| testbed::topology::WAN_IF.to_owned()),
            ebpf_object: ebpf.clone(),
            ..GatewayConfigOverrides::default()
        },
        ..DemoOptions::new(PREFIX, &root, &dir)
    };
    let mut demo = Demo::start(binaries, demo_options)
        .with_context(|| format!("starting the demo (logs in {})", dir.display()))?;
    println!("  namespaces: {}", demo.topology.namespaces().join(", "));
    println!(
        "  site served by the origin (and by nginx, for direct access): {}",
        served.display()
    );
    if let Some(https) = &demo.https {
        println!(
            "  https://{SITE_NAME}/: the origin's demo certificate {}",
            https.tls.cert.display()
        );
    }

    if !options.no_check {
        step(&format!(
            "check: {} in headless Chromium, from the client namespace",
            served.join("index.html").display()
        ));
        check_page(&demo, site.is_some(), None);
        if let Some(https) = &demo.https {
            check_page(&demo, site.is_some(), Some(https));
        }
    }
    print_timeline();
    print_instructions(&demo, &served);
    print_ebpf(&demo, ebpf.is_some());

    let outcome = watch(&mut demo);
    step("stopping");
    let stopped = stop(&mut demo);
    let names: Vec<String> = demo
        .topology
        .namespaces()
        .iter()
        .map(|n| n.to_string())
        .collect();
    drop(demo);
    let left: Vec<&String> = names.iter().filter(|n| testbed::exists(n)).collect();
    if left.is_empty() {
        println!("  deleted namespaces {}", names.join(", "));
    } else {
        println!("  WARNING: namespaces still present: {left:?}; delete with `ip netns del NAME`");
    }
    outcome.and(stopped)
}

/// The ebpf-programs object, built now (`cargo xtask build-ebpf`), so that the
/// demo's gateway runs the programs the product is named for; `None`, said
/// with the reason, where it cannot be built here: the gateway then runs with
/// its userspace accounting only.
fn ebpf_object() -> Option<PathBuf> {
    step("the eBPF programs (ebpf-programs)");
    match crate::ebpf::build(&crate::ebpf::BuildOptions::default()) {
        Ok(object) => Some(object),
        Err(e) => {
            println!(
                "  not built, so the gateway runs without eBPF (userspace accounting only): {e:#}"
            );
            None
        }
    }
}

/// The shipped config/origin.toml with the queue-aware response scheduler,
/// the one that acts on the gateway's FEEDBACK (written into `dir`).
fn queue_aware_origin_config(dir: &Path) -> Result<PathBuf> {
    let mut origin = ShippedConfig::read("origin.toml")?;
    origin
        .table("response_scheduler")?
        .insert("policy".into(), "queue-aware".into());
    origin.write(
        dir,
        "origin-demo.toml",
        "the queue-aware response scheduler (cargo xtask run)",
    )
}

/// Where the demo's eBPF figures are to be seen, or why there are none.
fn print_ebpf(demo: &Demo, built: bool) {
    let gateway = demo.topology.gateway.name();
    let status = demo
        .gateway_config
        .text
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("admin")?.get("listen")?.as_str().map(str::to_owned))
        .map_or_else(
            || "its admin address".to_owned(),
            |a| format!("http://{a}/"),
        );
    let chromium_flags = testbed::CHROMIUM_FLAGS.join(" ");
    let shot = demo.dir().join("status.png");
    if built {
        println!(
            "
  eBPF: xdp_sctp on {wan} counts each stream's DATA bytes as they arrive,
  tc_tcp_egress/tc_tcp_ingress on the LAN count the bytes in flight toward
  each browser; the gateway's log says what it attached (grep 'accounting').
  FEEDBACK carries each stream's backlog to the origin, whose queue-aware
  scheduler holds back a stream whose browser is slow. See them on the
  gateway's status page, Streams table, the columns marked eBPF ({status},
  in the gateway's namespace):
    ip netns exec {gateway} chromium {chromium_flags} --user-data-dir=$(mktemp -d) \\
        --window-size=1280,1600 --virtual-time-budget=5000 --screenshot={shot} {status}
    ip netns exec {gateway} curl -s {status}metrics | grep ebpf",
            wan = testbed::topology::WAN_IF,
            shot = shot.display(),
        );
    } else {
        println!(
            "
  eBPF: not running (see above); the Streams table's eBPF columns show –."
        );
    }
}

/// Waits for a stop signal, or fails when the gateway or origin dies on its own.
fn watch(demo: &mut Demo) -> Result<()> {
    while !stop_requested() {
        for process in [demo.gateway.as_mut(), demo.origin.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = process.ensure_running("Ctrl-C") {
                return Err(e.into());
            }
        }
        std::thread::sleep(WATCH_INTERVAL);
    }
    println!();
    Ok(())
}

/// Stops the gateway (SIGTERM: it removes its interception itself), checks that
/// it did, then stops the origin and nginx.
fn stop(demo: &mut Demo) -> Result<()> {
    let mut result = Ok(());
    if let Some(gateway) = demo.gateway.as_mut() {
        result = stop_process(gateway, GATEWAY_STOP_GRACE);
        let gateway_ns = demo.topology.gateway.name();
        match demo.gateway_leftovers() {
            Ok(left) if left.is_empty() => {
                println!(
                    "  the gateway removed its interception (nft ruleset and ip rules checked in {gateway_ns})"
                );
            }
            Ok(left) => {
                println!("  WARNING: the gateway left in {gateway_ns}:");
                for item in &left {
                    println!("    {item}");
                }
                println!("  (deleting the namespace removes them)");
            }
            Err(e) => println!("  WARNING: cannot inspect {gateway_ns}: {e}"),
        }
    }
    if let Some(origin) = demo.origin.as_mut() {
        result = result.and(stop_process(origin, SERVER_STOP_GRACE));
    }
    let direct_tls = demo.https.as_mut().and_then(|h| h.direct.as_mut());
    for nginx in [Some(&mut demo.site), Some(&mut demo.web), direct_tls]
        .into_iter()
        .flatten()
    {
        result = result.and(stop_process(nginx.process(), SERVER_STOP_GRACE));
    }
    result
}

fn stop_process(process: &mut NsProcess, grace: Duration) -> Result<()> {
    if let Some(status) = process.try_status()? {
        println!("  {} had already exited ({status})", process.name());
        return Ok(());
    }
    let (status, killed) = process.stop(grace)?;
    if killed {
        println!(
            "  WARNING: {} ignored SIGTERM for {grace:?} and was killed; log: {}",
            process.name(),
            process.log_path().display()
        );
    } else {
        println!("  {} stopped ({status})", process.name());
    }
    Ok(())
}

/// Loads the site's index (`/`) in Chromium, over HTTP, or over HTTPS by the
/// site's name through the tunnel when `https` is given; `own_site` names the
/// screenshot after the user's site rather than the demo's.
fn check_page(demo: &Demo, own_site: bool, https: Option<&DemoHttps>) {
    let name = match (own_site, https.is_some()) {
        (false, false) => "demo-site.png",
        (false, true) => "demo-site-https.png",
        (true, false) => "site.png",
        (true, true) => "site-https.png",
    };
    let shot = demo.dir().join(name);
    let (url, extra_args) = match https {
        Some(https) => (https.url("/"), https.chromium_args(SITE_V4.into())),
        None => (format!("http://{SITE_V4}/"), Vec::new()),
    };
    let config = BrowserConfig {
        extra_args,
        ..BrowserConfig::default()
    };
    let result = (|| -> Result<String> {
        let mut browser = Browser::launch(demo.topology.client.name(), &config)?;
        let mut page = browser.new_page()?;
        let load = page.load(&url, CHECK_TIMEOUT)?;
        page.screenshot(&shot)?;
        let failures = load.failures();
        let mut summary = format!(
            "{} requests, {} failed, load event at {:.0} ms; screenshot {}",
            load.requests.len(),
            failures.len(),
            load.load_event_ms,
            shot.display()
        );
        for failure in failures.iter().take(5) {
            summary.push_str(&format!(
                "\n    failed: {} {:?} {}",
                failure.url,
                failure.status,
                failure.error_text.as_deref().unwrap_or("")
            ));
        }
        Ok(summary)
    })();
    match result {
        Ok(summary) => println!("  {url}: {summary}"),
        Err(e) => println!("  WARNING: the page check of {url} failed: {e:#}"),
    }
}

fn print_instructions(demo: &Demo, served: &Path) {
    let client = demo.topology.client.name();
    let gateway = demo.topology.gateway.name();
    let origin = demo.topology.origin.name();
    let dir = demo.dir();
    let chromium_flags = testbed::CHROMIUM_FLAGS.join(" ");
    println!(
        "
==> the demo runs. The client namespace has nothing configured but its default
    routes via the gateway: the gateway intercepts its port-80 traffic.

  The site ({served}), carried over SCTP from the origin (IPv4, IPv6):
    ip netns exec {client} curl -v http://{SITE_V4}/
    ip netns exec {client} curl -v http://[{SITE_V6}]/
  An unmapped destination, proxied over plain TCP:
    ip netns exec {client} curl -v http://{WEB_V4}/
{https}
  The page in Chromium, headless, to a screenshot:
    ip netns exec {client} chromium {chromium_flags} --user-data-dir=$(mktemp -d) \\
        --window-size=1280,800 --screenshot={shot} http://{SITE_V4}/
  A visible Chromium, if this machine has a display (X11 through its
  /tmp/.X11-unix socket, or Wayland, both reachable from the namespace):
    ip netns exec {client} chromium --no-sandbox --user-data-dir=$(mktemp -d) http://{SITE_V4}/

  Look inside:
    ip netns exec {gateway} nft list ruleset       # the gateway's interception
    tail -f {dir}/gateway.log {dir}/origin-1.log
    ip netns exec {origin} ss -uanp                 # the origin's SCTP-over-UDP socket

  Logs and configs: {dir}/ (gateway.toml is the generated config)
  Ctrl-C stops everything and deletes the namespaces.",
        shot = dir.join("screenshot.png").display(),
        dir = dir.display(),
        served = served.display(),
        https = demo
            .https
            .as_ref()
            .map(|https| https_instructions(
                client,
                &https.tls.cert,
                &https.chromium_args(SITE_V4.into()),
                &dir.join("screenshot-https.png"),
            ))
            .unwrap_or_default(),
    );
}

/// The HTTPS lines of the instructions for namespace `client`: curl by the
/// site's name on both families, trusting the demo certificate `cert`
/// (`--cacert`), and Chromium with `chromium_args` (the certificate's key
/// pin and the name's mapping), its screenshot to `shot`.
fn https_instructions(client: &str, cert: &Path, chromium_args: &[String], shot: &Path) -> String {
    let cert = cert.display();
    let chromium_flags = testbed::CHROMIUM_FLAGS.join(" ");
    let trust: Vec<String> = chromium_args.iter().map(|a| format!("'{a}'")).collect();
    format!(
        "  The site over HTTPS as https://{SITE_NAME}/: the gateway tunnels the TLS bytes
  to the origin, which holds the demo certificate ({cert}); the
  gateway never decrypts. Trust that certificate, and resolve the name (the
  client has no DNS):
    ip netns exec {client} curl -v --cacert {cert} \\
        --resolve {SITE_NAME}:443:{SITE_V4} https://{SITE_NAME}/
    ip netns exec {client} curl -v --cacert {cert} \\
        --resolve '{SITE_NAME}:443:[{SITE_V6}]' https://{SITE_NAME}/
  The same in Chromium, which trusts the certificate by its key's pin:
    ip netns exec {client} chromium {chromium_flags} --user-data-dir=$(mktemp -d) \\
        {trust} \\
        --window-size=1280,800 --screenshot={shot} https://{SITE_NAME}/
",
        shot = shot.display(),
        trust = trust.join(" "),
    )
}

fn run_router(options: &RunOptions, origin: SocketAddr) -> Result<()> {
    let root = workspace_root();
    let gateway = build(&["gateway"])?.remove(0);
    let config = GatewayConfig::from_shipped(
        &root,
        &GatewayConfigOverrides {
            lan_interfaces: Some(options.lan_interfaces.clone()),
            origin_address: Some(origin),
            destinations: (!options.destinations.is_empty()).then(|| options.destinations.clone()),
            ..GatewayConfigOverrides::default()
        },
    )?;
    let dir = testbed::target_dir().join("demo");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("gateway-router.toml");
    std::fs::write(&path, &config.text)?;
    step(&format!(
        "gateway on this host: intercepting on {}, origin {origin}; config {}",
        options.lan_interfaces.join(", "),
        path.display()
    ));
    println!("  Ctrl-C stops it; it removes its nftables table and policy routes itself.");
    let mut child = Command::new(&gateway)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", testbed::daemon_log_filter())
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", gateway.display()))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop_requested() {
            println!("\n  stopping the gateway (SIGTERM)");
            // SAFETY: kill(2) has no memory-safety preconditions; the child is
            // not reaped yet, so its pid is still ours.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = std::time::Instant::now() + GATEWAY_STOP_GRACE;
            while child.try_wait()?.is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(WATCH_INTERVAL);
            }
            if child.try_wait()?.is_none() {
                println!("  WARNING: the gateway ignored SIGTERM; killing it");
                child.kill()?;
            }
            break child.wait()?;
        }
        std::thread::sleep(WATCH_INTERVAL);
    };
    let left = config.installed_in(None)?;
    if !left.is_empty() {
        println!("  WARNING: left behind on this host:");
        for item in &left {
            println!("    {item}");
        }
        println!(
            "  remove with: {} cleanup --config {}",
            gateway.display(),
            path.display()
        );
    }
    if !status.success() && !stop_requested() {
        bail!("the gateway exited with {status}");
    }
    Ok(())
}

/// Builds the binaries of `packages` (each package's binary of the same name) in
/// release mode, as the product ships them; returns their paths in that order.
pub(crate) fn build(packages: &[&str]) -> Result<Vec<PathBuf>> {
    build_features(packages, &[])
}

/// [`build`] with the transport baselines (framed TCP, QUIC) in the daemons,
/// for the benchmarks that run them over those.
pub(crate) fn build_with_baselines(packages: &[&str]) -> Result<Vec<PathBuf>> {
    let features: Vec<String> = packages
        .iter()
        .filter(|package| DAEMONS.contains(package))
        .map(|package| format!("{package}/baselines"))
        .collect();
    build_features(packages, &features)
}

/// The packages with a `baselines` feature of their own.
const DAEMONS: [&str; 2] = ["gateway", "origin"];

fn build_features(packages: &[&str], features: &[String]) -> Result<Vec<PathBuf>> {
    step(&format!("building {} (release)", packages.join(" and ")));
    let mut command = Command::new("cargo");
    command
        .current_dir(workspace_root())
        .args(["build", "--release"]);
    for package in packages {
        command.args(["-p", package]);
    }
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    run_command(&mut command)?;
    let release = testbed::target_dir().join("release");
    packages
        .iter()
        .map(|package| {
            let path = release.join(package);
            if path.is_file() {
                Ok(path)
            } else {
                bail!("cargo built no {}", path.display())
            }
        })
        .collect()
}

/// The steps so far, each with when it began: [`step`] closes the one
/// before with its time, [`print_timeline`] lists them all.
static TIMELINE: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

fn step(name: &str) {
    let now = Instant::now();
    let mut timeline = TIMELINE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((previous, began)) = timeline.last() {
        println!(
            "  ({previous}: {:.1} s)",
            now.duration_since(*began).as_secs_f64()
        );
    }
    timeline.push((name.to_owned(), now));
    println!("\n==> xtask run: {name}");
}

/// Each step's time so far and their sum: how long the demo took to its
/// first page (cargo's build of xtask itself, before this process, is not
/// in it).
fn print_timeline() {
    let now = Instant::now();
    let timeline = TIMELINE.lock().unwrap_or_else(PoisonError::into_inner);
    let Some((_, first)) = timeline.first() else {
        return;
    };
    println!("\n  time to the first page, by step:");
    for (i, (name, began)) in timeline.iter().enumerate() {
        let end = timeline.get(i + 1).map_or(now, |(_, next)| *next);
        println!(
            "    {:>7.1} s  {name}",
            end.duration_since(*began).as_secs_f64()
        );
    }
    println!(
        "    {:>7.1} s  in all",
        now.duration_since(*first).as_secs_f64()
    );
}

fn is_not_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and has no preconditions.
    unsafe { libc::geteuid() != 0 }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        options: RunOptions,
    }

    #[test]
    fn a_site_without_an_index_is_refused_with_the_reason() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("about.html"), "<h1>about</h1>\n")?;
        let args = ["run", "--site"].into_iter().chain(dir.path().to_str());
        let site = Cli::try_parse_from(args)?.options.site.context("--site")?;
        // What `run` checks first, before set-up and build.
        let error = site_root(&site).expect_err("no index.html").to_string();
        assert!(error.contains("no index.html in it"), "{error}");
        assert!(error.contains(&dir.path().display().to_string()), "{error}");

        let error = site_root(&dir.path().join("missing"))
            .expect_err("no such directory")
            .to_string();
        assert!(error.contains("no such directory"), "{error}");
        let error = site_root(&dir.path().join("about.html"))
            .expect_err("a file")
            .to_string();
        assert!(error.contains("not a directory"), "{error}");
        Ok(())
    }

    #[test]
    fn a_site_with_an_index_is_served_by_its_absolute_path() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("index.html"), "<h1>mine</h1>\n")?;
        let root = site_root(dir.path())?;
        assert!(root.is_absolute());
        assert_eq!(root, dir.path().canonicalize()?);
        Ok(())
    }

    #[test]
    fn the_https_instructions_trust_the_demo_certificate_on_both_families() {
        let args = [
            "--ignore-certificate-errors-spki-list=PIN+/=".to_owned(),
            format!("--host-resolver-rules=MAP {SITE_NAME} {SITE_V4}"),
        ];
        let text = https_instructions(
            "ns-client",
            Path::new("/d/cert.pem"),
            &args,
            Path::new("/d/shot.png"),
        );
        for expected in [
            "ip netns exec ns-client curl -v --cacert /d/cert.pem".to_owned(),
            format!("--resolve {SITE_NAME}:443:{SITE_V4} https://{SITE_NAME}/"),
            format!("--resolve '{SITE_NAME}:443:[{SITE_V6}]' https://{SITE_NAME}/"),
            format!("'{}' '{}'", args[0], args[1]),
            format!("--screenshot=/d/shot.png https://{SITE_NAME}/"),
        ] {
            assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
        }
    }

    #[test]
    fn site_is_for_the_demo_not_for_a_real_router() {
        let parsed = Cli::try_parse_from([
            "run",
            "--site",
            "www",
            "--lan-interface",
            "eth1",
            "--origin",
            "192.0.2.66:9899",
        ]);
        assert!(parsed.is_err(), "{parsed:?}");
        let parsed = Cli::try_parse_from(["run", "--site", "www"]).map(|c| c.options.site);
        assert_eq!(parsed.ok().flatten(), Some(PathBuf::from("www")));
    }
}
