//! The command line: symmetric link settings, per-direction overrides, and the
//! driver's options. [`Cli::directions`] turns it into validated configs.

use std::time::Duration;

use clap::Parser;

use crate::driver::{DirectionConfig, DriverOptions};
use crate::error::ConfigError;
use crate::model::{DEFAULT_QUEUE_PACKETS, DropNth, GilbertElliott, LinkConfig, LossModel, Rate};
use crate::units::{
    parse_drop_nth, parse_duration, parse_gilbert_elliott, parse_percent, parse_rate,
};

/// Forward Ethernet frames between two interfaces with delay, jitter, loss, a
/// rate limit and a queue limit, like a WAN link.
///
/// The settings apply to both directions; `--a-to-b-*` and `--b-to-a-*`
/// override one direction. Percentages need the % sign. Offloads (GRO, GSO,
/// TSO, tx checksumming) must be off on both interfaces and on the endpoints'
/// interfaces: frames that do not fit the MTU are dropped and counted as
/// oversize.
///
/// Prints `wanem ready` once forwarding, counters per direction every
/// --stats-every, and the final counters on SIGINT or SIGTERM.
#[derive(Debug, Parser)]
#[command(name = "wanem", version)]
pub struct Cli {
    /// One interface (say the gateway's side).
    #[arg(long, value_name = "IF")]
    pub a: String,
    /// The other interface (say the origin's side).
    #[arg(long, value_name = "IF")]
    pub b: String,

    /// One-way delay, e.g. 40ms.
    #[arg(long, value_parser = parse_duration, default_value = "0ms")]
    pub delay: Duration,
    /// Uniform jitter: each frame's delay is delay ± jitter (at most the delay).
    #[arg(long, value_parser = parse_duration, default_value = "0ms")]
    pub jitter: Duration,
    /// Random (Bernoulli) loss, e.g. 1%.
    #[arg(long, value_parser = parse_percent, conflicts_with = "ge")]
    pub loss: Option<f64>,
    /// Gilbert-Elliott burst loss `p,r[,h[,k]]` in percent: p Good→Bad, r
    /// Bad→Good, h and k the delivery probabilities in Bad (default 0%) and Good
    /// (default 100%). tc's `loss gemodel` takes 1-h and 1-k instead.
    #[arg(long, value_parser = parse_gilbert_elliott, value_name = "P,R[,H[,K]]")]
    pub ge: Option<GilbertElliott>,
    /// Bottleneck rate, e.g. 10mbit (Ethernet frame bytes, like tc); none by
    /// default.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<Rate>,
    /// Most frames in the bottleneck queue (tail drop beyond).
    #[arg(long, value_name = "FRAMES", default_value_t = DEFAULT_QUEUE_PACKETS)]
    pub queue: usize,
    /// Most bytes in the bottleneck queue; no byte limit by default.
    #[arg(long, value_name = "BYTES")]
    pub queue_bytes: Option<usize>,
    /// Let jitter reorder frames (netem's behaviour). By default a frame never
    /// leaves before the one ahead of it.
    #[arg(long)]
    pub reorder: bool,

    /// Seed of the random numbers (loss and jitter); the same seed gives the
    /// same pattern for the same frames.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print each direction's counters this often (e.g. 1s); only at exit by
    /// default.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub stats_every: Option<Duration>,
    /// Busy-wait this long before each departure instead of sleeping, for
    /// timing precision; 0 to never spin.
    #[arg(long, value_parser = parse_duration, default_value = "50us")]
    pub spin: Duration,
    /// Run the forwarding threads under SCHED_FIFO with this priority (1-99),
    /// so a busy machine's other processes do not delay departures by a
    /// scheduler slice; 0 for normal scheduling. Needs CAP_SYS_NICE; without it
    /// wanem warns and runs normally.
    #[arg(long, value_name = "PRIORITY", default_value_t = DEFAULT_RT_PRIORITY,
          value_parser = clap::value_parser!(u8).range(0..=99))]
    pub rt_priority: u8,

    // Last, so that their help headings do not capture the options above.
    #[command(flatten)]
    pub a_to_b: AToB,
    #[command(flatten)]
    pub b_to_a: BToA,
}

/// SCHED_FIFO priority of the forwarding threads unless --rt-priority says
/// otherwise: mid-range, above nothing the testbed runs.
pub const DEFAULT_RT_PRIORITY: u8 = 50;

/// Defines the per-direction override group `$name` with flags `--$prefix-*`.
macro_rules! overrides {
    ($name:ident, $heading:literal, $delay:literal, $jitter:literal, $loss:literal, $ge:literal,
     $rate:literal, $queue:literal, $queue_bytes:literal, $drop_nth:literal) => {
        /// Settings of one direction that override the symmetric ones.
        #[derive(Debug, Default, clap::Args)]
        #[command(next_help_heading = $heading)]
        pub struct $name {
            /// One-way delay of this direction.
            #[arg(id = $delay, long = $delay, value_parser = parse_duration, value_name = "DURATION")]
            pub delay: Option<Duration>,
            /// Jitter of this direction.
            #[arg(id = $jitter, long = $jitter, value_parser = parse_duration, value_name = "DURATION")]
            pub jitter: Option<Duration>,
            /// Random loss of this direction (replaces --loss and --ge).
            #[arg(id = $loss, long = $loss, value_parser = parse_percent, value_name = "PERCENT", conflicts_with = $ge)]
            pub loss: Option<f64>,
            /// Gilbert-Elliott loss of this direction (replaces --loss and --ge).
            #[arg(id = $ge, long = $ge, value_parser = parse_gilbert_elliott, value_name = "P,R[,H[,K]]")]
            pub ge: Option<GilbertElliott>,
            /// Rate of this direction.
            #[arg(id = $rate, long = $rate, value_parser = parse_rate, value_name = "RATE")]
            pub rate: Option<Rate>,
            /// Queue limit in frames of this direction.
            #[arg(id = $queue, long = $queue, value_name = "FRAMES")]
            pub queue: Option<usize>,
            /// Queue limit in bytes of this direction.
            #[arg(id = $queue_bytes, long = $queue_bytes, value_name = "BYTES")]
            pub queue_bytes: Option<usize>,
            /// Drop exactly one frame of this direction: the Nth (from 1) of
            /// those of at least MIN_BYTES bytes (default 0), e.g. 400,1000.
            #[arg(id = $drop_nth, long = $drop_nth, value_parser = parse_drop_nth, value_name = "N[,MIN_BYTES]")]
            pub drop_nth: Option<DropNth>,
        }

        impl $name {
            fn overrides(&self) -> Overrides {
                Overrides {
                    delay: self.delay,
                    jitter: self.jitter,
                    loss: self.loss,
                    ge: self.ge,
                    rate: self.rate,
                    queue: self.queue,
                    queue_bytes: self.queue_bytes,
                    drop_nth: self.drop_nth,
                }
            }
        }
    };
}

overrides!(
    AToB,
    "From a to b (overrides)",
    "a-to-b-delay",
    "a-to-b-jitter",
    "a-to-b-loss",
    "a-to-b-ge",
    "a-to-b-rate",
    "a-to-b-queue",
    "a-to-b-queue-bytes",
    "a-to-b-drop-nth"
);
overrides!(
    BToA,
    "From b to a (overrides)",
    "b-to-a-delay",
    "b-to-a-jitter",
    "b-to-a-loss",
    "b-to-a-ge",
    "b-to-a-rate",
    "b-to-a-queue",
    "b-to-a-queue-bytes",
    "b-to-a-drop-nth"
);

/// One direction's overrides, whichever group they came from.
#[derive(Debug, Clone, Copy)]
struct Overrides {
    delay: Option<Duration>,
    jitter: Option<Duration>,
    loss: Option<f64>,
    ge: Option<GilbertElliott>,
    rate: Option<Rate>,
    queue: Option<usize>,
    queue_bytes: Option<usize>,
    drop_nth: Option<DropNth>,
}

impl Cli {
    /// Parses `args` (the first is the program name); clap's error otherwise.
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        <Self as Parser>::try_parse_from(args)
    }

    /// The two directions, a→b then b→a, validated.
    pub fn directions(&self) -> Result<[DirectionConfig; 2], ConfigError> {
        let make = |from: &str, to: &str, o: Overrides| -> Result<DirectionConfig, ConfigError> {
            let loss = match (o.loss, o.ge, self.loss, self.ge) {
                (Some(p), _, _, _) => LossModel::Bernoulli(p),
                (None, Some(ge), _, _) => LossModel::GilbertElliott(ge),
                (None, None, Some(p), _) => LossModel::Bernoulli(p),
                (None, None, None, Some(ge)) => LossModel::GilbertElliott(ge),
                (None, None, None, None) => LossModel::None,
            };
            let direction = DirectionConfig {
                from: from.to_owned(),
                to: to.to_owned(),
                link: LinkConfig {
                    delay: o.delay.unwrap_or(self.delay),
                    jitter: o.jitter.unwrap_or(self.jitter),
                    loss,
                    rate: o.rate.or(self.rate),
                    queue_packets: Some(o.queue.unwrap_or(self.queue)),
                    queue_bytes: o.queue_bytes.or(self.queue_bytes),
                    reorder: self.reorder,
                    drop_nth: o.drop_nth,
                },
            };
            direction.link.validate(&direction.label())?;
            Ok(direction)
        };
        Ok([
            make(&self.a, &self.b, self.a_to_b.overrides())?,
            make(&self.b, &self.a, self.b_to_a.overrides())?,
        ])
    }

    /// The driver's options.
    pub fn driver_options(&self) -> DriverOptions {
        DriverOptions {
            spin: self.spin,
            seed: self.seed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_args(["wanem", "--a", "gw0", "--b", "origin0"].iter().chain(args))
            .expect("parses")
    }

    #[test]
    fn symmetric_settings_apply_to_both_directions() {
        let cli = parse(&[
            "--delay", "40ms", "--jitter", "2ms", "--loss", "1%", "--rate", "10mbit", "--queue",
            "100",
        ]);
        let [ab, ba] = cli.directions().expect("valid");
        assert_eq!((ab.from.as_str(), ab.to.as_str()), ("gw0", "origin0"));
        assert_eq!((ba.from.as_str(), ba.to.as_str()), ("origin0", "gw0"));
        for d in [ab, ba] {
            assert_eq!(d.link.delay, Duration::from_millis(40));
            assert_eq!(d.link.jitter, Duration::from_millis(2));
            assert_eq!(d.link.loss, LossModel::Bernoulli(0.01));
            assert_eq!(d.link.rate.map(|r| r.bits_per_second()), Some(10_000_000));
            assert_eq!(d.link.queue_packets, Some(100));
            assert!(!d.link.reorder);
        }
    }

    #[test]
    fn overrides_change_one_direction() {
        let cli = parse(&[
            "--delay",
            "10ms",
            "--loss",
            "1%",
            "--a-to-b-delay",
            "30ms",
            "--b-to-a-ge",
            "1%,30%",
            "--b-to-a-rate",
            "1mbit",
        ]);
        let [ab, ba] = cli.directions().expect("valid");
        assert_eq!(ab.link.delay, Duration::from_millis(30));
        assert_eq!(ba.link.delay, Duration::from_millis(10));
        assert_eq!(ab.link.loss, LossModel::Bernoulli(0.01));
        assert_eq!(
            ba.link.loss,
            LossModel::GilbertElliott(GilbertElliott::gilbert(0.01, 0.30))
        );
        assert_eq!(ab.link.rate, None);
        assert_eq!(ba.link.rate.map(|r| r.bits_per_second()), Some(1_000_000));
        let cli = parse(&["--b-to-a-drop-nth", "400,1000"]);
        let [ab, ba] = cli.directions().expect("valid");
        assert_eq!(ab.link.drop_nth, None);
        assert_eq!(
            ba.link.drop_nth,
            Some(DropNth {
                nth: 400,
                min_len: 1000
            })
        );
    }

    #[test]
    fn defaults_are_a_plain_wire_with_netems_queue() {
        let [ab, _] = parse(&[]).directions().expect("valid");
        assert_eq!(
            ab.link,
            LinkConfig {
                queue_packets: Some(DEFAULT_QUEUE_PACKETS),
                ..LinkConfig::default()
            }
        );
        assert_eq!(parse(&[]).driver_options().spin, Duration::from_micros(50));
        assert_eq!(parse(&[]).rt_priority, DEFAULT_RT_PRIORITY);
    }

    #[test]
    fn nonsense_is_rejected_naming_the_setting() {
        let cli = parse(&["--delay", "5ms", "--b-to-a-jitter", "6ms"]);
        let message = cli.directions().expect_err("jitter > delay").to_string();
        assert!(message.starts_with("origin0->gw0 jitter"), "{message}");
        for args in [
            &["--loss", "1"][..],
            &["--loss", "1%", "--ge", "1%,30%"],
            &["--rate", "10mbps"],
            &["--delay", "40"],
            &["--a-to-b-loss", "1%", "--a-to-b-ge", "1%,2%"],
            &["--rt-priority", "100"],
        ] {
            assert!(
                Cli::try_parse_args(["wanem", "--a", "x", "--b", "y"].iter().chain(args)).is_err(),
                "{args:?} accepted"
            );
        }
        assert!(parse(&["--queue", "0"]).directions().is_err());
    }
}
