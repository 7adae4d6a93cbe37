//! The WAN emulator (`wanem`, from bench/wanem) on a topology's gateway–origin
//! link: [`WanEmulator::start`] prepares the interfaces and starts it in the
//! middle `wan` namespace of a [`WanLink::ThroughNamespace`] topology, between
//! `gw0` (side a, toward the gateway) and `origin0` (side b, toward the origin);
//! dropping it stops it. [`WanParams`] is its command line, typed.
//!
//! Preparing means: GRO, GSO, TSO and tx checksumming off on `gw0`, `origin0`,
//! the gateway's `wan0` and the origin's `eth0` (with them on, frames cross the
//! veths as 64 KiB super-packets or with their checksum left to offload, which
//! raw forwarding cannot carry), and IPv6 off on `gw0` and `origin0`, so the
//! middle namespace sends nothing of its own.
//!
//! [`WanLink::ThroughNamespace`]: crate::WanLink::ThroughNamespace

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::error::{Result, TestbedError};
use crate::netns::{exec_in, run, sysctl};
use crate::process::NsProcess;
use crate::topology::{HOST_IF, Topology, WAN_IF, WAN_TOWARD_GATEWAY, WAN_TOWARD_ORIGIN};

/// The line `wanem` prints once it forwards.
pub const WANEM_READY: &str = "wanem ready";

/// The `ethtool -K` arguments that turn the troublesome offloads off: tx
/// checksumming (and with it TSO and UDP segmentation), TSO, GSO, GRO.
pub const OFFLOADS_OFF: [&str; 8] = ["tx", "off", "tso", "off", "gso", "off", "gro", "off"];

/// How long `wanem` gets to open its sockets.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `wanem` gets to print its counters and exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How one direction loses frames.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Loss {
    /// Nothing is lost.
    #[default]
    None,
    /// Each frame independently, with this probability in percent.
    Random(f64),
    /// Gilbert-Elliott bursts, each value in percent: `p` Good→Bad, `r`
    /// Bad→Good, `h` and `k` the delivery probabilities in Bad and Good (netem's
    /// model; tc's `gemodel` takes 1-h and 1-k instead).
    GilbertElliott {
        /// Good→Bad, percent per frame.
        p: f64,
        /// Bad→Good, percent per frame.
        r: f64,
        /// Delivery probability in Bad, percent (0: Bad loses everything).
        h: f64,
        /// Delivery probability in Good, percent (100: Good loses nothing).
        k: f64,
    },
}

impl Loss {
    /// The long-run share of frames lost, in percent.
    pub fn expected_percent(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Random(percent) => percent,
            Loss::GilbertElliott { p, r, h, k } => {
                let bad = if p + r == 0.0 { 0.0 } else { p / (p + r) };
                (1.0 - bad) * (100.0 - k) + bad * (100.0 - h)
            }
        }
    }
}

/// One direction of the emulated link.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LinkParams {
    /// One-way delay.
    pub delay: Duration,
    /// Uniform jitter (delay ± jitter), at most the delay.
    pub jitter: Duration,
    /// Loss.
    pub loss: Loss,
    /// Bottleneck rate in bits per second (whole Ethernet frames); `None` for
    /// no limit.
    pub rate_bits_per_second: Option<u64>,
    /// Most frames in the bottleneck queue; `None` for wanem's default (1000).
    pub queue_frames: Option<u32>,
    /// Most bytes in the bottleneck queue; `None` for no byte limit.
    pub queue_bytes: Option<u64>,
    /// Drop exactly one frame: the `.0`th (from 1) of those of at least `.1`
    /// bytes (wanem's `--*-drop-nth N,MIN_BYTES`); `None` for no such drop.
    pub drop_nth: Option<(u64, usize)>,
}

impl LinkParams {
    /// A link with a one-way `delay` and nothing else.
    pub fn delay(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    fn args(&self, prefix: &str) -> Vec<String> {
        let flag = |name: &str| format!("--{prefix}-{name}");
        let mut args = vec![
            flag("delay"),
            format!("{}ns", self.delay.as_nanos()),
            flag("jitter"),
            format!("{}ns", self.jitter.as_nanos()),
        ];
        match self.loss {
            Loss::None => args.extend([flag("loss"), "0%".into()]),
            Loss::Random(percent) => args.extend([flag("loss"), format!("{percent}%")]),
            Loss::GilbertElliott { p, r, h, k } => {
                args.extend([flag("ge"), format!("{p}%,{r}%,{h}%,{k}%")]);
            }
        }
        if let Some(rate) = self.rate_bits_per_second {
            args.extend([flag("rate"), format!("{rate}bit")]);
        }
        if let Some(frames) = self.queue_frames {
            args.extend([flag("queue"), frames.to_string()]);
        }
        if let Some(bytes) = self.queue_bytes {
            args.extend([flag("queue-bytes"), bytes.to_string()]);
        }
        if let Some((nth, min_len)) = self.drop_nth {
            args.extend([flag("drop-nth"), format!("{nth},{min_len}")]);
        }
        args
    }
}

/// The emulator's settings: both directions, and how it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct WanParams {
    /// Side a to side b (in a topology: gateway to origin).
    pub a_to_b: LinkParams,
    /// Side b to side a (origin to gateway).
    pub b_to_a: LinkParams,
    /// Seed of the loss and jitter random numbers.
    pub seed: u64,
    /// Let jitter reorder frames (off: departures stay in arrival order).
    pub reorder: bool,
    /// Print counters this often into the log (read with
    /// [`WanEmulator::latest_stats`]); only at exit when `None`.
    pub stats_every: Option<Duration>,
    /// SCHED_FIFO priority of the forwarding threads (0: normal scheduling);
    /// `None` for wanem's default (50).
    pub rt_priority: Option<u8>,
}

impl WanParams {
    /// The same link both ways, seed 1.
    pub fn symmetric(link: LinkParams) -> Self {
        Self {
            a_to_b: link,
            b_to_a: link,
            seed: 1,
            reorder: false,
            stats_every: None,
            rt_priority: None,
        }
    }

    /// A benchmark cell: round-trip time `rtt` (half each way), `loss_percent`
    /// random loss in each direction, and `rate_mbit` Mbit/s each way.
    pub fn cell(rtt: Duration, loss_percent: f64, rate_mbit: u64) -> Self {
        Self::symmetric(LinkParams {
            delay: rtt / 2,
            loss: if loss_percent > 0.0 {
                Loss::Random(loss_percent)
            } else {
                Loss::None
            },
            rate_bits_per_second: Some(rate_mbit * 1_000_000),
            ..LinkParams::default()
        })
    }

    /// The command-line arguments after `--a IF --b IF`: every setting given per
    /// direction, so nothing depends on wanem's symmetric defaults.
    pub fn args(&self) -> Vec<String> {
        let mut args = self.a_to_b.args("a-to-b");
        args.extend(self.b_to_a.args("b-to-a"));
        args.extend(["--seed".into(), self.seed.to_string()]);
        if self.reorder {
            args.push("--reorder".into());
        }
        if let Some(priority) = self.rt_priority {
            args.extend(["--rt-priority".into(), priority.to_string()]);
        }
        if let Some(every) = self.stats_every {
            args.extend(["--stats-every".into(), format!("{}ms", every.as_millis())]);
        }
        args
    }
}

/// One direction's counters as wanem prints them (its own type, which also
/// reads them back).
pub use wanem::DirectionStats as DirectionCounters;

/// Both directions' counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WanStats {
    /// Side a to side b (gateway to origin).
    pub a_to_b: DirectionCounters,
    /// Side b to side a (origin to gateway).
    pub b_to_a: DirectionCounters,
}

impl WanStats {
    /// The last lines of kind `kind` (`stats` or `final`) for `a->b` and `b->a`
    /// in `log`.
    fn parse(log: &str, kind: &str, a: &str, b: &str) -> Option<Self> {
        let forward = format!("{kind} {a}->{b} ");
        let backward = format!("{kind} {b}->{a} ");
        let last = |prefix: &str| {
            log.lines()
                .rev()
                .find_map(|line| line.strip_prefix(prefix))
                .map(DirectionCounters::parse_fields)
        };
        Some(Self {
            a_to_b: last(&forward)?,
            b_to_a: last(&backward)?,
        })
    }
}

/// A running `wanem`; killed on drop ([`stop`](Self::stop) ends it politely and
/// returns its final counters).
#[derive(Debug)]
pub struct WanEmulator {
    process: NsProcess,
    a: String,
    b: String,
}

impl WanEmulator {
    /// Prepares the interfaces of `topology`'s gateway–origin link (see the
    /// module docs) and starts `binary` (the `wanem` executable) in its `wan`
    /// namespace with `params`, side a `gw0`, side b `origin0`, logging to
    /// `log`. Returns once it forwards. Fails if the topology has no `wan`
    /// namespace.
    pub fn start(
        topology: &Topology,
        binary: &Path,
        params: &WanParams,
        log: &Path,
    ) -> Result<Self> {
        let wan = topology.wan.as_ref().ok_or_else(|| {
            TestbedError::Topology(
                "no wan namespace to run the WAN emulator in (create it with WanLink::ThroughNamespace)"
                    .into(),
            )
        })?;
        for (ns, dev) in [
            (topology.gateway.name(), WAN_IF),
            (wan.name(), WAN_TOWARD_GATEWAY),
            (wan.name(), WAN_TOWARD_ORIGIN),
            (topology.origin.name(), HOST_IF),
        ] {
            disable_offloads(ns, dev)?;
        }
        for dev in [WAN_TOWARD_GATEWAY, WAN_TOWARD_ORIGIN] {
            sysctl(
                wan.name(),
                &format!("net.ipv6.conf.{dev}.disable_ipv6"),
                "1",
            )?;
        }
        Self::start_in(
            wan.name(),
            WAN_TOWARD_GATEWAY,
            WAN_TOWARD_ORIGIN,
            binary,
            params,
            log,
        )
    }

    /// Starts `binary` in namespace `ns` forwarding between interfaces `a` and
    /// `b`, which the caller has prepared ([`disable_offloads`]). Returns once
    /// it forwards.
    pub fn start_in(
        ns: &str,
        a: &str,
        b: &str,
        binary: &Path,
        params: &WanParams,
        log: &Path,
    ) -> Result<Self> {
        let mut command = Command::new(binary);
        command.args(["--a", a, "--b", b]).args(params.args());
        let mut process = NsProcess::spawn(ns, "wanem", &command, log)?;
        process.wait_for_log(WANEM_READY, START_TIMEOUT)?;
        Ok(Self {
            process,
            a: a.to_owned(),
            b: b.to_owned(),
        })
    }

    /// The process (its pid, log, state).
    pub fn process(&mut self) -> &mut NsProcess {
        &mut self.process
    }

    /// The counters of the last `stats` lines (needs
    /// [`WanParams::stats_every`]); `None` before the first.
    pub fn latest_stats(&self) -> Option<WanStats> {
        WanStats::parse(&self.process.log(), "stats", &self.a, &self.b)
    }

    /// SIGTERM, then the final counters wanem prints on its way out. Fails if it
    /// does not exit cleanly within a few seconds or prints no counters.
    pub fn stop(mut self) -> Result<WanStats> {
        let (status, killed) = self.process.stop(STOP_GRACE)?;
        let log = self.process.log();
        match WanStats::parse(&log, "final", &self.a, &self.b) {
            Some(stats) if status.success() && !killed => Ok(stats),
            _ => Err(TestbedError::Exited {
                name: "wanem".into(),
                status,
                what: "its final counters".into(),
                log: self.process.log_path().to_owned(),
                tail: self.process.log_tail(),
            }),
        }
    }
}

/// Turns GRO, GSO, TSO and tx checksumming off on `dev` in `ns` with `ethtool`
/// (Debian package ethtool).
pub fn disable_offloads(ns: &str, dev: &str) -> Result<()> {
    let mut command = Command::new("ethtool");
    command.arg("-K").arg(dev).args(OFFLOADS_OFF);
    run(&mut exec_in(ns, &command)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_become_per_direction_flags() {
        let mut params = WanParams::cell(Duration::from_millis(80), 1.0, 10);
        params.b_to_a.loss = Loss::GilbertElliott {
            p: 1.0,
            r: 30.0,
            h: 0.0,
            k: 100.0,
        };
        params.b_to_a.queue_frames = Some(50);
        params.b_to_a.drop_nth = Some((400, 1000));
        params.stats_every = Some(Duration::from_secs(1));
        assert_eq!(
            params.args().join(" "),
            "--a-to-b-delay 40000000ns --a-to-b-jitter 0ns --a-to-b-loss 1% --a-to-b-rate 10000000bit \
             --b-to-a-delay 40000000ns --b-to-a-jitter 0ns --b-to-a-ge 1%,30%,0%,100% --b-to-a-rate 10000000bit --b-to-a-queue 50 --b-to-a-drop-nth 400,1000 \
             --seed 1 --stats-every 1000ms"
        );
    }

    #[test]
    fn expected_loss() {
        assert_eq!(Loss::Random(3.0).expected_percent(), 3.0);
        let ge = Loss::GilbertElliott {
            p: 1.0,
            r: 50.0,
            h: 30.0,
            k: 100.0,
        };
        assert!((ge.expected_percent() - 70.0 / 51.0).abs() < 1e-9);
    }

    #[test]
    fn counters_are_read_from_the_last_lines() {
        let log = "wanem ready (seed 1)\n\
            stats gw0->origin0 elapsed_s=1.000 received=5 sent=5 pending=0\n\
            stats origin0->gw0 elapsed_s=1.000 received=2 sent=2\n\
            final gw0->origin0 elapsed_s=1.500 received=9 dropped_loss=1 sent=8 oversize=0\n\
            final origin0->gw0 elapsed_s=1.500 received=3 sent=3 send_errors=1\n";
        let stats = WanStats::parse(log, "final", "gw0", "origin0").expect("final lines");
        assert_eq!(
            (
                stats.a_to_b.received,
                stats.a_to_b.dropped_loss,
                stats.a_to_b.sent
            ),
            (9, 1, 8)
        );
        assert_eq!(stats.b_to_a.send_errors, 1);
        assert_eq!(stats.b_to_a.faults(), 1);
        let latest = WanStats::parse(log, "stats", "gw0", "origin0").expect("stats lines");
        assert_eq!(latest.a_to_b.received, 5);
        assert!(WanStats::parse("wanem ready", "final", "gw0", "origin0").is_none());
    }
}
