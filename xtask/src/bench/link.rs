//! The path between a benchmark's two processes, and running them across it.
//! A leaf, like `common`: it imports no benchmark.
//!
//! ```text
//!  veth:  server ns 10.78.0.1 ─── veth (optionally TBF) ─── client ns 10.78.0.2
//!
//!  wan:   origin ns (server) eth0 ── origin0 [wan ns: wanem] gw0 ── wan0 gateway ns (client)
//!         192.0.2.66                                                   192.0.2.65
//! ```
//!
//! - [`Sides`]: which namespace runs the listening side (the server), which the
//!   connecting side (the client), and the server's address.
//! - [`WanCell`]: one emulated link (`--wan RTT_MS,LOSS_PERCENT,RATE_MBIT`) and
//!   the wanem settings it stands for.
//! - [`WanPath`]: the testbed topology with its middle `wan` namespace; the
//!   server runs in the origin namespace, the client in the gateway namespace,
//!   and [`WanPath::forward`] starts wanem for one cell (stopped on drop).
//! - [`run_pairs`]: servers up, then all clients at once, then every side's
//!   last JSON line; every process is killed on the way out, on error too.

use std::fmt;
use std::io::{BufRead, BufReader, Read as _};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use testbed::topology::{HOST_IF, WAN, WAN_IF};
use testbed::{Topology, VethPair, WanEmulator, WanLink, WanParams};

use super::common::{array_field, build_wanem, field};
use crate::cmd::workspace_root;

/// Where a benchmark's two processes run.
#[derive(Debug, Clone)]
pub(super) struct Sides {
    /// The namespace of the side that listens.
    pub server_ns: String,
    /// The namespace of the side that connects.
    pub client_ns: String,
    /// The listening side's address.
    pub server_ip: IpAddr,
}

impl Sides {
    /// The server and client namespaces of `pair`, the server at `server_ip`.
    pub(super) fn veth(pair: &VethPair, server_ip: IpAddr) -> Self {
        Self {
            server_ns: pair.server.name().to_owned(),
            client_ns: pair.client.name().to_owned(),
            server_ip,
        }
    }

    /// The server's `ip:port`, as the measuring programs' `--addr` takes it.
    pub(super) fn addr(&self, port: u16) -> String {
        SocketAddr::new(self.server_ip, port).to_string()
    }
}

/// The largest round trip, loss and rate `--wan` accepts: beyond them a cell
/// would measure nothing in the bounded time of a run.
const MAX_RTT_MS: u64 = 2_000;
const MAX_LOSS_PERCENT: f64 = 50.0;
const MAX_RATE_MBIT: u64 = 10_000;

/// One emulated link, the same both ways: round trip (half each way), random
/// loss in each direction, token-bucket rate each way, and a drop-tail queue
/// of one bandwidth-delay product (at least 64 full frames), as the page-load
/// benchmark's links have.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WanCell {
    pub rtt_ms: u64,
    pub loss_percent: f64,
    pub rate_mbit: u64,
}

/// A full Ethernet frame, bytes: the queue's minimum is counted in these.
const FULL_FRAME: u64 = 1514;

impl WanCell {
    /// The drop-tail queue of each direction, bytes.
    pub(crate) fn queue_bytes(&self) -> u64 {
        let bdp = self.rate_mbit * 1_000_000 / 8 * self.rtt_ms / 1000;
        bdp.max(64 * FULL_FRAME)
    }

    /// wanem's settings for this link.
    pub(crate) fn params(&self) -> WanParams {
        let mut params = WanParams::cell(
            Duration::from_millis(self.rtt_ms),
            self.loss_percent,
            self.rate_mbit,
        );
        for direction in [&mut params.a_to_b, &mut params.b_to_a] {
            direction.queue_bytes = Some(self.queue_bytes());
        }
        params
    }

    /// The flag's value that gives this cell (`80,1,100`).
    pub(crate) fn arg(&self) -> String {
        format!("{},{},{}", self.rtt_ms, self.loss_percent, self.rate_mbit)
    }
}

impl fmt::Display for WanCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ms RTT, {} % random loss each way, {} Mbit/s each way, drop-tail queue of {} KB",
            self.rtt_ms,
            self.loss_percent,
            self.rate_mbit,
            self.queue_bytes() / 1000
        )
    }
}

impl FromStr for WanCell {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [rtt, loss, rate] = parts[..] else {
            return Err(format!(
                "--wan {s}: three values, RTT_MS,LOSS_PERCENT,RATE_MBIT (e.g. 80,1,100)"
            ));
        };
        let rtt_ms: u64 = rtt
            .parse()
            .map_err(|e| format!("--wan: round trip {rtt:?} in whole ms: {e}"))?;
        let loss_percent: f64 = loss
            .parse()
            .map_err(|e| format!("--wan: loss {loss:?} in percent: {e}"))?;
        let rate_mbit: u64 = rate
            .parse()
            .map_err(|e| format!("--wan: rate {rate:?} in whole Mbit/s: {e}"))?;
        if rtt_ms > MAX_RTT_MS {
            return Err(format!(
                "--wan: round trip {rtt_ms} ms, at most {MAX_RTT_MS}"
            ));
        }
        if !(0.0..=MAX_LOSS_PERCENT).contains(&loss_percent) {
            return Err(format!(
                "--wan: loss {loss_percent} %, from 0 to {MAX_LOSS_PERCENT}"
            ));
        }
        if !(1..=MAX_RATE_MBIT).contains(&rate_mbit) {
            return Err(format!(
                "--wan: rate {rate_mbit} Mbit/s, from 1 to {MAX_RATE_MBIT}"
            ));
        }
        Ok(Self {
            rtt_ms,
            loss_percent,
            rate_mbit,
        })
    }
}

/// The testbed topology with wanem's middle namespace: the server side in the
/// origin namespace, the client side in the gateway namespace. Removed on drop.
pub(super) struct WanPath {
    topology: Topology,
    wanem: PathBuf,
    logs: PathBuf,
    cell: WanCell,
}

impl WanPath {
    /// Builds wanem, removes what killed runs of `prefix` left, creates the
    /// topology and pins the neighbour entries across the emulated link.
    /// wanem's logs go to bench/results/tmp/`logs`.
    pub(super) fn create(prefix: &str, cell: WanCell, logs: &str) -> Result<Self> {
        let wanem = build_wanem()?;
        for name in testbed::cleanup_stale(prefix)? {
            println!("==> removed namespace {name} left by a killed run");
        }
        let topology = Topology::create_with(prefix, WanLink::ThroughNamespace)?;
        pin_neighbours(&topology)?;
        let logs = workspace_root().join("bench/results/tmp").join(logs);
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        Ok(Self {
            topology,
            wanem,
            logs,
            cell,
        })
    }

    pub(super) fn sides(&self) -> Sides {
        Sides {
            server_ns: self.topology.origin.name().to_owned(),
            client_ns: self.topology.gateway.name().to_owned(),
            server_ip: WAN.host_v4.into(),
        }
    }

    /// Starts wanem with this path's cell for one measurement, logging to
    /// `name`-wanem.log; it stops when dropped (or with
    /// [`WanEmulator::stop`], which returns its counters).
    pub(super) fn forward(&self, name: &str) -> Result<WanEmulator> {
        self.forward_with(name, &self.cell.params())
    }

    /// As [`forward`](Self::forward), with `params` instead of the path's
    /// cell (a benchmark that varies the link within one topology).
    pub(super) fn forward_with(&self, name: &str, params: &WanParams) -> Result<WanEmulator> {
        let log = self.logs.join(format!("{name}-wanem.log"));
        Ok(WanEmulator::start(
            &self.topology,
            &self.wanem,
            params,
            &log,
        )?)
    }
}

/// Permanent neighbour entries on both ends of the emulated link: neighbour
/// resolution through the emulator would add a round trip to the first
/// packet of a run (and to any run after the entry went stale), which cold
/// starts and timed windows must not contain.
pub(super) fn pin_neighbours(topology: &Topology) -> Result<()> {
    let mac = |ns: &str, dev: &str| -> Result<String> {
        let mut cat = Command::new("cat");
        cat.arg(format!("/sys/class/net/{dev}/address"));
        Ok(testbed::run(&mut testbed::exec_in(ns, &cat))?
            .trim()
            .to_owned())
    };
    let (gateway, origin) = (topology.gateway.name(), topology.origin.name());
    let origin_mac = mac(origin, HOST_IF)?;
    let gateway_mac = mac(gateway, WAN_IF)?;
    for (ns, addr, lladdr, dev) in [
        (gateway, WAN.host_v4, &origin_mac, WAN_IF),
        (origin, WAN.gateway_v4, &gateway_mac, HOST_IF),
    ] {
        testbed::ip(&[
            "-n",
            ns,
            "neigh",
            "replace",
            &addr.to_string(),
            "lladdr",
            lladdr,
            "dev",
            dev,
            "nud",
            "permanent",
        ])?;
    }
    Ok(())
}

/// `client_args` plus the QUIC server's certificate pin, when its ready line
/// (`{"ready":true,"quic_cert_sha256":"..."}`) carries one.
pub(super) fn with_pin(ready: &str, client_args: &[String]) -> Vec<String> {
    let mut args = client_args.to_vec();
    let key = "\"quic_cert_sha256\":\"";
    if let Some(start) = ready.find(key).map(|i| i + key.len())
        && let Some(len) = ready[start..].find('"')
    {
        args.push("--quic-cert-sha256".into());
        args.push(ready[start..start + len].to_owned());
    }
    args
}

fn spawn_side(ns: &str, binary: &Path, args: &[String]) -> Result<Child> {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(binary)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} in {ns}", binary.display()))
}

/// Children killed (and reaped) on drop unless they were waited for.
#[derive(Default)]
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// One server and its client: their arguments.
pub(super) struct Pair {
    pub server: Vec<String>,
    pub client: Vec<String>,
}

/// What [`run_pairs`] returns.
pub(super) struct PairsRun {
    /// Each pair's (server, client) last JSON lines, in the order given.
    pub lines: Vec<(String, String)>,
    /// When the clients were started: wall-clock ms since the Unix epoch.
    pub clients_started_unix_ms: f64,
}

/// Starts every pair's server in `sides.server_ns` and waits for each one's
/// ready line, then starts all clients at once in `sides.client_ns`, waits
/// for them to end, and returns every side's last line.
pub(super) fn run_pairs(sides: &Sides, binary: &Path, pairs: &[Pair]) -> Result<PairsRun> {
    run_pairs_with(sides, binary, pairs, || {})
}

/// As [`run_pairs`], calling `clients_starting` just before the clients are
/// started (when every server is ready): what must run beside the flows
/// starts there, at the time their common window counts from.
pub(super) fn run_pairs_with(
    sides: &Sides,
    binary: &Path,
    pairs: &[Pair],
    clients_starting: impl FnOnce(),
) -> Result<PairsRun> {
    let mut servers = Children::default();
    let mut server_outs = Vec::new();
    let mut readies = Vec::new();
    for pair in pairs {
        let mut server = spawn_side(&sides.server_ns, binary, &pair.server)?;
        let out = server.stdout.take().context("server stdout")?;
        servers.0.push(server);
        let mut out = BufReader::new(out);
        let mut ready = String::new();
        out.read_line(&mut ready)?;
        if !ready.contains("ready") {
            bail!("server did not start");
        }
        server_outs.push(out);
        readies.push(ready);
    }
    clients_starting();
    let clients_started_unix_ms = unix_ms();
    let mut clients = Children::default();
    for (pair, ready) in pairs.iter().zip(&readies) {
        clients.0.push(spawn_side(
            &sides.client_ns,
            binary,
            &with_pin(ready, &pair.client),
        )?);
    }
    let mut client_lines = Vec::new();
    for client in &mut clients.0 {
        let mut out = String::new();
        if let Some(mut stdout) = client.stdout.take() {
            stdout.read_to_string(&mut out)?;
        }
        let status = client.wait()?;
        if !status.success() {
            bail!("client failed ({status})");
        }
        client_lines.push(out.lines().last().unwrap_or_default().to_owned());
    }
    let mut lines = Vec::new();
    for ((server, out), client_line) in servers.0.iter_mut().zip(&mut server_outs).zip(client_lines)
    {
        let mut line = String::new();
        out.read_line(&mut line)?;
        let status = server.wait()?;
        if !status.success() {
            bail!("server failed ({status})");
        }
        lines.push((line, client_line));
    }
    Ok(PairsRun {
        lines,
        clients_started_unix_ms,
    })
}

/// Starts the server, waits for its ready line, runs the client to its end,
/// and returns both sides' last JSON lines.
pub(super) fn run_pair(
    sides: &Sides,
    binary: &Path,
    server_args: &[String],
    client_args: &[String],
) -> Result<(String, String)> {
    let run = run_pairs(
        sides,
        binary,
        &[Pair {
            server: server_args.to_vec(),
            client: client_args.to_vec(),
        }],
    )?;
    run.lines.into_iter().next().context("no lines")
}

/// The goodput in Mbit/s of a server's received series (its `first_unix_ms`,
/// `bin_ms` and `bins`) over the window from `from_ms` to `to_ms` (wall-clock
/// ms since the Unix epoch): the bins whose middle falls in the window, over
/// the window's length. Bins before the flow's first payload count as empty.
pub(super) fn window_mbit(server_line: &str, from_ms: f64, to_ms: f64) -> Option<f64> {
    let first = field(server_line, "first_unix_ms")?;
    let bin_ms = field(server_line, "bin_ms")?;
    let bins = array_field(server_line, "bins")?;
    if to_ms <= from_ms || bin_ms <= 0.0 {
        return None;
    }
    let bytes: f64 = bins
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            let middle = first + (*i as f64 + 0.5) * bin_ms;
            (from_ms..to_ms).contains(&middle)
        })
        .map(|(_, bytes)| bytes)
        .sum();
    let seconds = (to_ms - from_ms) / 1000.0;
    Some(bytes * 8.0 / seconds / 1e6)
}

/// Jain's fairness index of `rates`: 1 for equal shares, 1/n when one flow
/// of n takes everything; NaN when nothing was sent.
pub(super) fn jain_index(rates: &[f64]) -> f64 {
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|r| r * r).sum();
    if squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (rates.len() as f64 * squares)
}

pub(super) fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wan_cell_is_three_values_within_bounds() {
        let cell: WanCell = "80,1,100".parse().expect("valid");
        assert_eq!(
            cell,
            WanCell {
                rtt_ms: 80,
                loss_percent: 1.0,
                rate_mbit: 100
            }
        );
        assert_eq!(cell.arg(), "80,1,100");
        // One bandwidth-delay product: 100 Mbit/s for 80 ms.
        assert_eq!(cell.queue_bytes(), 1_000_000);
        assert_eq!(cell.params().b_to_a.queue_bytes, Some(1_000_000));
        assert_eq!(
            "0.5,1,100".parse::<WanCell>().map(|_| ()),
            Err("--wan: round trip \"0.5\" in whole ms: invalid digit found in string".into())
        );
        for bad in [
            "80,1",
            "80,1,100,3",
            "80,60,100",
            "80,1,0",
            "3000,1,10",
            "80,x,10",
        ] {
            assert!(bad.parse::<WanCell>().is_err(), "{bad}");
        }
        let small: WanCell = "20,0,1".parse().expect("valid");
        assert_eq!(small.queue_bytes(), 64 * FULL_FRAME);
    }

    #[test]
    fn the_window_takes_the_bins_whose_middle_is_inside() {
        // Bins of 100 ms from t = 1000 ms: 1 MB each, the last one 0.
        let line = r#"{"side":"server","first_unix_ms":1000,"bin_ms":100,"bins":[1000000,1000000,1000000,1000000,0]}"#;
        // 1100..1300: bins 1 and 2 (middles 1150, 1250), 2 MB in 0.2 s.
        let mbit = window_mbit(line, 1100.0, 1300.0).expect("a series");
        assert!((mbit - 80.0).abs() < 1e-9, "{mbit}");
        // A window that starts before the first payload counts that time as
        // empty: 4 MB over 1 s.
        let mbit = window_mbit(line, 500.0, 1500.0).expect("a series");
        assert!((mbit - 32.0).abs() < 1e-9, "{mbit}");
        assert_eq!(window_mbit(line, 1300.0, 1300.0), None);
        assert_eq!(window_mbit(r#"{"bins":[1]}"#, 0.0, 100.0), None);
    }

    #[test]
    fn jain_index_of_n() {
        assert_eq!(jain_index(&[10.0, 10.0]), 1.0);
        assert_eq!(jain_index(&[10.0, 0.0]), 0.5);
        assert!((jain_index(&[30.0, 10.0]) - 0.8).abs() < 1e-12);
        assert!(jain_index(&[0.0, 0.0]).is_nan());
        // One of seven takes everything: 1/7; seven equal: 1.
        assert!((jain_index(&[7.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]) - 1.0 / 7.0).abs() < 1e-12);
        assert!((jain_index(&[3.0; 7]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn fields_are_read_from_a_json_line() {
        let line = r#"{"side":"server","mbit_per_s":41.5,"first_unix_ms":1700000000123,"bin_ms":100,"bins":[10,20,0]}"#;
        assert_eq!(field(line, "mbit_per_s"), Some(41.5));
        assert_eq!(field(line, "first_unix_ms"), Some(1_700_000_000_123.0));
        assert_eq!(array_field(line, "bins"), Some(vec![10.0, 20.0, 0.0]));
        assert_eq!(array_field(r#"{"bins":[]}"#, "bins"), Some(vec![]));
        assert_eq!(array_field(line, "missing"), None);
        assert_eq!(field(line, "missing"), None);
    }
}
