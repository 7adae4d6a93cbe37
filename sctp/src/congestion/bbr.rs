//! A model-based controller in the BBR family (after Cardwell et al., "BBR:
//! Congestion-Based Congestion Control", and the IETF draft's BBRv1 state
//! machine), for paths whose random loss is not congestion.
//!
//! It keeps a model of the path, the bottleneck bandwidth (the largest
//! delivery rate of the last [`BW_WINDOW_ROUNDS`] round trips) and the
//! minimum RTT (over [`MIN_RTT_WINDOW`]), and sends at the model's rate:
//! pacing at `pacing_gain × bandwidth`, with at most `cwnd_gain × BDP` in
//! flight. A loss does not shrink the window (the model, not loss, says what
//! the path carries); a T3-rtx time-out does, to one MTU, until the next ack.
//!
//! ```text
//!  Startup ──bandwidth flat for 3 rounds──► Drain ──flight ≤ BDP──► ProbeBw
//!  (gain 2.89)                              (1/2.89)                (1.25, 0.75, 1 × 6, one per min RTT)
//!      ProbeBw ──min RTT not refreshed for 10 s──► ProbeRtt (4 packets, 200 ms) ──► ProbeBw
//! ```
//!
//! Delivery-rate samples: each send records how much had been delivered and
//! when; the ack of that send gives `(delivered now − delivered then) /
//! (now − then)`. The records are keyed by send time, the only identity the
//! `Controller` interface carries, and dropped once a later send is acked, so
//! they never outnumber the packets in flight.
//!
//! The window's target is `cwnd_gain × BDP` plus two allowances of the
//! draft (BBRv2 onwards, and Linux's BBR since 2019) for paths where acks do
//! not come back as smoothly as the data left: a quantization budget of three
//! send quanta (a quantum is 1 ms at the pacing rate, the most a driver that
//! wakes once a millisecond sends in one go), and the extra acked, the
//! largest amount acked beyond what the bandwidth estimate explains, over the
//! last [`BW_WINDOW_ROUNDS`] rounds (acks held back and released in a batch:
//! delayed SACKs, a receiver's driver that reads in batches). Without them a
//! path whose RTT is shorter than the ack batching, such as a veth or a LAN,
//! is held to two tiny BDPs and runs window-limited far below its rate.
//!
//! Application-limited samples (the draft's `C.app_limited`): when the sender
//! runs dry with room in the window, everything sent until that flight is
//! delivered is marked. A marked sample enters the bandwidth filter only if
//! it raises the estimate, and a round whose sample is marked does not count
//! toward Startup's "bandwidth flat for 3 rounds". Without this a web page's
//! traffic (a small HTML, a pause while the browser parses it, a few small
//! objects) made Startup end at the rate of the first few kilobytes, and
//! later small objects pushed the big rounds out of the filter's window;
//! ProbeBw's one 1.25x probe per eight round trips then took seconds to
//! find the path again (the slow first page load of bench/results
//! pages-own-stack.md).
//!
//! Simplifications against the draft, each a place to refine with measurements:
//! no packet conservation after a loss, no long-term (policer) mode.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Acked, Controller, ControllerFactory, initial_window, to_bytes};

/// 2/ln 2: Startup's gain, the smallest that doubles the delivery rate each round.
const HIGH_GAIN: f64 = 2.885;
/// The pacing gains of ProbeBw's eight phases, one per minimum RTT.
const PROBE_BW_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// The window in ProbeBw, in BDPs: room for delayed and aggregated acks.
const CWND_GAIN: f64 = 2.0;
/// Round trips the bandwidth filter remembers.
pub const BW_WINDOW_ROUNDS: u64 = 10;
/// How long a minimum RTT stays valid before ProbeRtt refreshes it.
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long ProbeRtt holds the window at its floor.
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// The window's floor, in MTUs.
const MIN_CWND_MTUS: u64 = 4;
/// Startup ends when the bandwidth grew less than this factor...
const FULL_BW_GROWTH: f64 = 1.25;
/// ...for this many rounds in a row.
const FULL_BW_ROUNDS: u32 = 3;
/// A send quantum is this long at the pacing rate...
const SEND_QUANTUM_TIME: Duration = Duration::from_millis(1);
/// ...and at most this many bytes (Linux's cap, one GSO/TSO super-packet).
const MAX_SEND_QUANTUM: u64 = 64 * 1024;
/// Send quanta the window holds beyond the BDP (the draft's quantization budget).
const QUANTIZATION_QUANTA: u64 = 3;
/// The window's room for ack aggregation is at most this long at the
/// bandwidth (Linux's bbr_extra_acked_max_us).
const MAX_AGGREGATION_TIME: Duration = Duration::from_millis(100);
/// Startup also ends after a round that lost more than this share of what it
/// sent (after BBRv2): random loss of a few percent does not, the overflow
/// of a queue by Startup's 2.89 BDPs does.
const STARTUP_LOSS_LIMIT: f64 = 0.10;
/// ...and lost at least this many MTUs (after Linux's BBRv2, which wants
/// eight loss events): in a round of a few packets one random loss is over
/// the share limit, and leaving Startup on it left the bandwidth estimate at
/// the first few kilobytes' rate, which ProbeBw's one 1.25x probe per eight
/// round trips took seconds to correct at 200 ms.
const STARTUP_LOSS_MIN_MTUS: u64 = 8;

/// The configuration of [`Bbr`], and its factory.
#[derive(Debug, Clone, Default)]
pub struct BbrConfig {
    /// Initial window, bytes; `None`: RFC 9260's.
    pub initial_window: Option<u64>,
}

impl ControllerFactory for BbrConfig {
    fn build(&self, now: Instant, mtu: usize) -> Box<dyn Controller> {
        Box::new(Bbr::new(self, now, mtu))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw { phase: usize, since: Instant },
    ProbeRtt { until: Option<Instant> },
}

#[derive(Debug, Clone, Copy)]
struct SendRecord {
    sent: Instant,
    delivered: u64,
    /// [`Bbr::delivered_timely`] when this was sent.
    delivered_timely: u64,
    delivered_time: Instant,
    /// The send time of the most recently delivered packet when this one
    /// was sent: the send side of the rate interval.
    first_sent: Instant,
    /// Sent while the application, not the window, limited the sending.
    app_limited: bool,
}

/// A max filter over the last [`BW_WINDOW_ROUNDS`] rounds: the best value of
/// each round, newest last (the bandwidth and the extra acked both use one).
#[derive(Debug, Clone, Default)]
struct RoundMax<T> {
    samples: VecDeque<(u64, T)>,
}

impl<T: Copy + PartialOrd> RoundMax<T> {
    /// Takes `value` as a sample of `round`, and forgets rounds out of the window.
    fn update(&mut self, round: u64, value: T) {
        match self.samples.back_mut() {
            Some((r, best)) if *r == round => {
                if value > *best {
                    *best = value;
                }
            }
            _ => self.samples.push_back((round, value)),
        }
        while self
            .samples
            .front()
            .is_some_and(|(r, _)| r + BW_WINDOW_ROUNDS <= round)
        {
            self.samples.pop_front();
        }
    }

    /// The largest value in the window.
    fn max(&self) -> Option<T> {
        self.samples
            .iter()
            .map(|(_, v)| *v)
            .reduce(|a, b| if b > a { b } else { a })
    }
}

/// The BBR-family controller.
#[derive(Debug, Clone)]
pub struct Bbr {
    mode: Mode,
    mtu: u64,
    cwnd: u64,
    /// The window before a time-out, restored when acks come back.
    prior_cwnd: Option<u64>,
    /// Bytes delivered since the start, and when the last were.
    delivered: u64,
    /// Of those, the ones acknowledged in time to say when they arrived
    /// (not [`Acked::late_bytes`]): the numerator of rate samples.
    delivered_timely: u64,
    delivered_time: Instant,
    /// The send time of the most recently delivered packet.
    delivered_sent: Instant,
    records: VecDeque<SendRecord>,
    /// Round trips counted by delivery: a round ends when data sent after
    /// the previous round's end is acknowledged.
    round: u64,
    next_round_delivered: u64,
    /// The best delivery rate of each recent round, bytes per second.
    bw_samples: RoundMax<f64>,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Instant,
    full_bw: f64,
    full_bw_rounds: u32,
    /// Bytes lost and delivered in the current round (Startup's loss limit).
    round_lost: u64,
    round_delivered: u64,
    flight: u64,
    /// Ack aggregation: when the current measuring interval started and what
    /// was acked in it.
    extra_acked_start: Instant,
    extra_acked_delivered: u64,
    /// The largest extra acked of each recent round, bytes.
    extra_acked_samples: RoundMax<u64>,
    /// Non-zero while the sending is application-limited: the `delivered`
    /// count past which it no longer is (the draft's `C.app_limited`).
    app_limited_until: u64,
}

impl Bbr {
    /// A controller in Startup with RFC 9260's initial window.
    pub fn new(config: &BbrConfig, now: Instant, mtu: usize) -> Self {
        let cwnd = config
            .initial_window
            .unwrap_or_else(|| initial_window(mtu))
            .max(to_bytes(mtu));
        Bbr {
            mode: Mode::Startup,
            mtu: to_bytes(mtu),
            cwnd,
            prior_cwnd: None,
            delivered: 0,
            delivered_timely: 0,
            delivered_time: now,
            delivered_sent: now,
            records: VecDeque::new(),
            round: 0,
            next_round_delivered: 0,
            bw_samples: RoundMax::default(),
            min_rtt: None,
            min_rtt_stamp: now,
            full_bw: 0.0,
            full_bw_rounds: 0,
            round_lost: 0,
            round_delivered: 0,
            flight: 0,
            extra_acked_start: now,
            extra_acked_delivered: 0,
            extra_acked_samples: RoundMax::default(),
            app_limited_until: 0,
        }
    }

    /// The bottleneck bandwidth estimate, bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bw_samples.max().unwrap_or(0.0)
    }

    /// The largest excess of acked bytes over what the bandwidth estimate
    /// explains, over the last [`BW_WINDOW_ROUNDS`] rounds.
    pub fn extra_acked(&self) -> u64 {
        self.extra_acked_samples.max().unwrap_or(0)
    }

    /// The extra acked the window makes room for: none in Startup (whose
    /// 2.89 gain already covers it, and whose bandwidth estimate lags the
    /// acks), and never more than [`MAX_AGGREGATION_TIME`] at the bandwidth.
    fn ack_aggregation_allowance(&self) -> u64 {
        if self.mode == Mode::Startup {
            return 0;
        }
        let cap = (self.bandwidth() * MAX_AGGREGATION_TIME.as_secs_f64()) as u64;
        self.extra_acked().min(cap)
    }

    /// What the pacer releases in one go at the current rate, bytes: 1 ms
    /// at the pacing rate, between two MTUs and [`MAX_SEND_QUANTUM`].
    fn send_quantum(&self) -> u64 {
        let at_rate = self.pacing_rate().unwrap_or(0) as f64 * SEND_QUANTUM_TIME.as_secs_f64();
        (at_rate as u64).clamp(2 * self.mtu, MAX_SEND_QUANTUM.max(2 * self.mtu))
    }

    /// The draft's BBRUpdateACKAggregation: how much more was acked in the
    /// current interval than the bandwidth estimate says could have been.
    fn update_ack_aggregation(&mut self, now: Instant, newly_acked: u64) {
        let bw = self.bandwidth();
        let interval = now.saturating_duration_since(self.extra_acked_start);
        let mut expected = (bw * interval.as_secs_f64()) as u64;
        // Acks at or below the expected rate: a new interval starts here.
        if self.extra_acked_delivered <= expected {
            self.extra_acked_delivered = 0;
            self.extra_acked_start = now;
            expected = 0;
        }
        self.extra_acked_delivered += newly_acked;
        let extra = self
            .extra_acked_delivered
            .saturating_sub(expected)
            .min(self.cwnd);
        self.extra_acked_samples.update(self.round, extra);
    }

    /// The minimum RTT, once measured.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Bandwidth × minimum RTT, bytes, once both are known.
    fn bdp(&self) -> Option<f64> {
        let bw = self.bandwidth();
        (bw > 0.0).then_some(())?;
        Some(bw * self.min_rtt?.as_secs_f64())
    }

    fn pacing_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => HIGH_GAIN,
            Mode::Drain => 1.0 / HIGH_GAIN,
            Mode::ProbeBw { phase, .. } => PROBE_BW_GAINS[phase],
            Mode::ProbeRtt { .. } => 1.0,
        }
    }

    fn cwnd_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup | Mode::Drain => HIGH_GAIN,
            _ => CWND_GAIN,
        }
    }

    fn floor(&self) -> u64 {
        MIN_CWND_MTUS * self.mtu
    }

    /// A new delivery-rate sample from the record of the acked send.
    fn sample(&mut self, now: Instant, sent: Instant) {
        let mut record = None;
        while let Some(r) = self.records.front() {
            if r.sent > sent {
                break;
            }
            record = self.records.pop_front();
        }
        let Some(record) = record else {
            return;
        };
        if record.delivered >= self.next_round_delivered {
            self.round += 1;
            self.next_round_delivered = self.delivered;
            self.on_round_end(record.app_limited);
        }
        // The longer of the ack and the send intervals, as the draft's
        // delivery-rate estimation does: acks compressed on the way back must
        // not make the path look faster than it sent.
        let interval = now
            .saturating_duration_since(record.delivered_time)
            .max(record.sent.saturating_duration_since(record.first_sent));
        if interval.is_zero() {
            return;
        }
        let rate =
            (self.delivered_timely - record.delivered_timely) as f64 / interval.as_secs_f64();
        // An application-limited sample says the path carries at least this
        // much, never that it carries less.
        if !record.app_limited || rate >= self.bandwidth() {
            self.bw_samples.update(self.round, rate);
        }
    }

    /// A round ended; `app_limited` if its sample was sent while the
    /// application limited the sending.
    fn on_round_end(&mut self, app_limited: bool) {
        let lost_bytes = std::mem::take(&mut self.round_lost);
        let lost = lost_bytes as f64;
        let sent = lost + std::mem::take(&mut self.round_delivered) as f64;
        if self.mode != Mode::Startup {
            return;
        }
        if sent > 0.0
            && lost / sent > STARTUP_LOSS_LIMIT
            && lost_bytes >= STARTUP_LOSS_MIN_MTUS * self.mtu
        {
            self.mode = Mode::Drain;
            return;
        }
        if app_limited {
            // A flat rate here is the application's: the pipe may be far
            // from full.
            return;
        }
        let bw = self.bandwidth();
        if bw >= self.full_bw * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
        } else {
            self.full_bw_rounds += 1;
            if self.full_bw_rounds >= FULL_BW_ROUNDS {
                self.mode = Mode::Drain;
            }
        }
    }

    fn update_mode(&mut self, now: Instant) {
        let bdp = self.bdp();
        match self.mode {
            Mode::Drain if bdp.is_some_and(|bdp| self.flight as f64 <= bdp) => {
                self.mode = Mode::ProbeBw {
                    phase: 0,
                    since: now,
                };
            }
            Mode::ProbeBw { phase, since } => {
                let min_rtt = self.min_rtt.unwrap_or(Duration::from_millis(100));
                if now.saturating_duration_since(since) >= min_rtt {
                    self.mode = Mode::ProbeBw {
                        phase: (phase + 1) % PROBE_BW_GAINS.len(),
                        since: now,
                    };
                }
            }
            Mode::ProbeRtt { until } if until.is_some_and(|t| now >= t) => {
                self.min_rtt_stamp = now;
                self.mode = Mode::ProbeBw {
                    phase: 2,
                    since: now,
                };
            }
            _ => {}
        }
        let stale = now.saturating_duration_since(self.min_rtt_stamp) > MIN_RTT_WINDOW;
        if stale && matches!(self.mode, Mode::ProbeBw { .. }) {
            // The draft waits for the flight to drain to the floor before
            // timing ProbeRtt; the flight also holds chunks lost in holes,
            // which only retransmissions the floor forbids would clear, so
            // the 200 ms run from the start.
            self.mode = Mode::ProbeRtt {
                until: Some(now + PROBE_RTT_TIME),
            };
        }
    }
}

impl Controller for Bbr {
    fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.flight += bytes;
        self.records.push_back(SendRecord {
            sent: now,
            delivered: self.delivered,
            delivered_timely: self.delivered_timely,
            delivered_time: self.delivered_time,
            first_sent: self.delivered_sent,
            app_limited: self.app_limited_until != 0,
        });
    }

    fn on_app_limited(&mut self, flight: u64) {
        self.app_limited_until = (self.delivered + flight).max(1);
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        self.flight = acked.flight_before.saturating_sub(acked.bytes);
        self.delivered += acked.bytes;
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        self.delivered_timely += acked.bytes - acked.late_bytes.min(acked.bytes);
        self.round_delivered += acked.bytes;
        self.delivered_time = now;
        self.delivered_sent = self.delivered_sent.max(acked.sent);
        // Only unambiguous acks feed the model: the ack of a retransmission
        // may be for the original, and its RTT and delivery rate would be
        // fiction (a few milliseconds, or many times the link's rate).
        if let Some(rtt) = acked.rtt_sample {
            if self.min_rtt.is_none_or(|m| rtt <= m)
                || now.saturating_duration_since(self.min_rtt_stamp) > MIN_RTT_WINDOW
            {
                self.min_rtt = Some(rtt);
                self.min_rtt_stamp = now;
            }
            self.sample(now, acked.sent);
        }
        self.update_ack_aggregation(now, acked.bytes);
        self.update_mode(now);
        if let Some(prior) = self.prior_cwnd.take() {
            self.cwnd = self.cwnd.max(prior);
        }
        let target = match self.bdp() {
            Some(bdp) => ((bdp * self.cwnd_gain()) as u64)
                .saturating_add(QUANTIZATION_QUANTA * self.send_quantum())
                .saturating_add(self.ack_aggregation_allowance())
                .max(self.floor()),
            None => u64::MAX,
        };
        // Grow by what was delivered, never past gain × BDP and the two
        // allowances: even in Startup the window stays within 2.89 BDPs of
        // the bandwidth seen so far, plus what batching of acks explains.
        self.cwnd = self.cwnd.saturating_add(acked.bytes).min(target);
        if matches!(self.mode, Mode::ProbeRtt { .. }) {
            self.cwnd = self.cwnd.min(self.floor());
        }
        self.cwnd = self.cwnd.max(self.floor());
    }

    fn on_congestion_event(
        &mut self,
        _now: Instant,
        _sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    ) {
        self.flight = self.flight.saturating_sub(lost_bytes);
        if persistent {
            // A time-out says the path may be gone: start again from one
            // packet, and restore the window once acks return.
            self.prior_cwnd = Some(self.cwnd);
            self.cwnd = self.mtu;
        }
        // A loss alone is not congestion for a model-based controller.
    }

    fn on_lost(&mut self, _now: Instant, bytes: u64) {
        // Every loss counts toward Startup's loss limit, not only the one
        // that opened a recovery period.
        self.round_lost += bytes;
    }

    fn on_mtu(&mut self, mtu: usize) {
        self.mtu = to_bytes(mtu);
        self.cwnd = self.cwnd.max(self.floor());
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> u64 {
        // Reported for the pacer's phase: "slow start" while in Startup.
        if self.mode == Mode::Startup {
            u64::MAX
        } else {
            0
        }
    }

    fn pacing_rate(&self) -> Option<u64> {
        let bw = self.bandwidth();
        (bw > 0.0).then(|| (bw * self.pacing_gain()) as u64)
    }

    fn name(&self) -> &'static str {
        "bbr"
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: usize = 1000;

    /// A path of `rate` bytes per second and `rtt` that delivers what the
    /// controller allows, one window per round trip; `loss` of the acks'
    /// bytes are reported lost each round. Returns the window after `rounds`.
    fn drive(
        cc: &mut Bbr,
        start: Instant,
        rate: f64,
        rtt: Duration,
        rounds: u32,
        loss: f64,
    ) -> Instant {
        let mut now = start;
        for _ in 0..rounds {
            let bdp = rate * rtt.as_secs_f64();
            let send = (cc.window() as f64).min(bdp * 1.5) as u64;
            let packets = (send / MTU as u64).max(1);
            let sent = now;
            for _ in 0..packets {
                cc.on_sent(sent, MTU as u64);
            }
            // Delivered at most the bottleneck's share of a round trip.
            let delivered = ((packets * MTU as u64) as f64).min(bdp) as u64;
            now += rtt.max(Duration::from_secs_f64(delivered as f64 / rate));
            let lost = (delivered as f64 * loss) as u64;
            let flight = packets * MTU as u64;
            cc.on_ack(
                now,
                &Acked {
                    bytes: delivered - lost,
                    sent,
                    flight_before: flight,
                    cum_advanced: true,
                    smoothed_rtt: Some(rtt),
                    rtt_sample: Some(rtt),
                    late_bytes: 0,
                },
            );
            if lost > 0 {
                cc.on_congestion_event(now, sent, false, lost);
            }
        }
        now
    }

    #[test]
    fn startup_finds_the_bandwidth_and_leaves_for_probe_bw() {
        let start = Instant::now();
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        let rate = 1_250_000.0; // 10 Mbit/s
        let rtt = Duration::from_millis(80);
        drive(&mut cc, start, rate, rtt, 40, 0.0);
        let bw = cc.bandwidth();
        assert!((0.8 * rate..=1.3 * rate).contains(&bw), "bandwidth {bw}");
        assert!(matches!(cc.mode, Mode::ProbeBw { .. }), "{:?}", cc.mode);
        // The window is two BDPs (100 KB each), plus the extra acked: this
        // path acks a whole round in one SACK, a BDP beyond what the
        // bandwidth explains at that instant.
        assert!(
            (250_000..=320_000).contains(&cc.window()),
            "{}",
            cc.window()
        );
        assert_eq!(cc.min_rtt(), Some(rtt));
    }

    /// A round of a small application's traffic: `packets` sent at once
    /// (telling the controller it runs dry when `say_so`), of which `lost`
    /// are reported lost and the rest acknowledged a round trip later.
    #[derive(Clone, Copy)]
    struct SmallRound {
        packets: u64,
        lost: u64,
        say_so: bool,
    }

    /// `rounds` rounds of `round`, from `start`; returns the time after them.
    fn trickle(
        cc: &mut Bbr,
        start: Instant,
        rtt: Duration,
        rounds: u32,
        round: SmallRound,
    ) -> Instant {
        let mtu = MTU as u64;
        let mut now = start;
        for _ in 0..rounds {
            let sent = now;
            for _ in 0..round.packets {
                cc.on_sent(sent, mtu);
            }
            if round.say_so {
                cc.on_app_limited(round.packets * mtu);
            }
            now += rtt;
            if round.lost > 0 {
                cc.on_lost(now, round.lost * mtu);
            }
            cc.on_ack(
                now,
                &Acked {
                    bytes: (round.packets - round.lost) * mtu,
                    sent,
                    flight_before: round.packets * mtu,
                    cum_advanced: true,
                    smoothed_rtt: Some(rtt),
                    rtt_sample: Some(rtt),
                    late_bytes: 0,
                },
            );
        }
        now
    }

    /// Two packets a round trip, none lost.
    const TWO: SmallRound = SmallRound {
        packets: 2,
        lost: 0,
        say_so: true,
    };

    #[test]
    fn application_limited_rounds_neither_end_startup_nor_lower_the_estimate() {
        let start = Instant::now();
        let rtt = Duration::from_millis(80);
        // A page's first objects: a few packets a round, then nothing.
        let mut told = Bbr::new(&BbrConfig::default(), start, MTU);
        let mut untold = Bbr::new(&BbrConfig::default(), start, MTU);
        trickle(&mut told, start, rtt, 10, TWO);
        let untold_round = SmallRound {
            say_so: false,
            ..TWO
        };
        trickle(&mut untold, start, rtt, 10, untold_round);
        assert_eq!(told.mode, Mode::Startup, "app-limited rounds ended Startup");
        assert!(
            !matches!(untold.mode, Mode::Startup),
            "unmarked flat rounds end Startup: {:?}",
            untold.mode
        );

        // Once the path's rate is known, small app-limited rounds (more
        // than the filter's window of them) do not push it out.
        let rate = 1_250_000.0;
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        let now = drive(&mut cc, start, rate, rtt, 40, 0.0);
        trickle(&mut cc, now, rtt, 3 * BW_WINDOW_ROUNDS as u32, TWO);
        let bw = cc.bandwidth();
        assert!(bw >= 0.8 * rate, "estimate fell to {bw}");
    }

    #[test]
    fn one_loss_in_a_small_round_does_not_end_startup() {
        let start = Instant::now();
        let rtt = Duration::from_millis(200);
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        // Rounds of four packets, one of them lost: 25 % of a round, but
        // one random loss, not a queue that overflowed. The application
        // (a page's first objects), not the window, limits these rounds.
        let round = SmallRound {
            packets: 4,
            lost: 1,
            say_so: true,
        };
        trickle(&mut cc, start, rtt, 6, round);
        assert_eq!(cc.mode, Mode::Startup);
    }

    #[test]
    fn random_loss_does_not_shrink_the_window() {
        let start = Instant::now();
        let rate = 1_250_000.0;
        let rtt = Duration::from_millis(80);
        let mut clean = Bbr::new(&BbrConfig::default(), start, MTU);
        let mut lossy = Bbr::new(&BbrConfig::default(), start, MTU);
        drive(&mut clean, start, rate, rtt, 40, 0.0);
        drive(&mut lossy, start, rate, rtt, 40, 0.03);
        assert!(lossy.window() as f64 >= 0.8 * clean.window() as f64);
        assert!(lossy.pacing_rate().unwrap_or(0) as f64 >= 0.8 * rate);
    }

    #[test]
    fn a_time_out_collapses_the_window_until_acks_return() {
        let start = Instant::now();
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        let now = drive(
            &mut cc,
            start,
            1_250_000.0,
            Duration::from_millis(80),
            30,
            0.0,
        );
        let before = cc.window();
        cc.on_congestion_event(now, now, true, 10_000);
        assert_eq!(cc.window(), MTU as u64);
        drive(&mut cc, now, 1_250_000.0, Duration::from_millis(80), 1, 0.0);
        assert!(cc.window() >= before.min(200_000) / 2);
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_new_minimum() {
        let start = Instant::now();
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        let mut now = drive(
            &mut cc,
            start,
            1_250_000.0,
            Duration::from_millis(80),
            30,
            0.0,
        );
        // The RTT rises (a queue elsewhere): no new minimum for 10 s.
        now = drive(
            &mut cc,
            now,
            1_250_000.0,
            Duration::from_millis(100),
            110,
            0.0,
        );
        let _ = now;
        assert!(
            matches!(cc.mode, Mode::ProbeRtt { .. })
                || cc.min_rtt() == Some(Duration::from_millis(100)),
            "{:?} {:?}",
            cc.mode,
            cc.min_rtt()
        );
    }

    /// A path far faster than the ack clock: 1 Gbit/s with a 100 µs round
    /// trip, but the receiver's driver acknowledges in one batch per
    /// millisecond (a veth between two processes). Each tick the sender
    /// sends what window and rate allow; everything sent is acked at the
    /// next tick. Returns the bytes delivered per second over the last
    /// `measure` ticks.
    fn drive_batched(cc: &mut Bbr, start: Instant, ticks: u32, measure: u32) -> f64 {
        let rate = 125_000_000.0;
        let tick = Duration::from_millis(1);
        let rtt = Duration::from_micros(100);
        let mut now = start;
        let mut delivered = 0u64;
        for i in 0..ticks {
            let room = cc.window().saturating_sub(cc.flight);
            let send = room.min((rate * tick.as_secs_f64()) as u64);
            let packets = send / MTU as u64;
            let sent = now + tick - rtt;
            for _ in 0..packets {
                cc.on_sent(sent, MTU as u64);
            }
            now += tick;
            if packets > 0 {
                cc.on_ack(
                    now,
                    &Acked {
                        bytes: packets * MTU as u64,
                        sent,
                        flight_before: cc.flight,
                        cum_advanced: true,
                        smoothed_rtt: Some(rtt),
                        rtt_sample: Some(rtt),
                        late_bytes: 0,
                    },
                );
            }
            if i >= ticks - measure {
                delivered += packets * MTU as u64;
            }
        }
        delivered as f64 / (tick * measure).as_secs_f64()
    }

    #[test]
    fn batched_acks_on_a_short_path_do_not_hold_the_window_to_two_tiny_bdps() {
        let start = Instant::now();
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        let goodput = drive_batched(&mut cc, start, 2000, 500);
        // Two BDPs alone are 25 KB, 25 MB/s at one window per tick.
        assert!(goodput >= 100_000_000.0, "goodput {goodput} B/s, {cc:?}");
        assert!(cc.extra_acked() > 0);
    }

    #[test]
    fn chunks_acknowledged_late_do_not_inflate_the_bandwidth() {
        let start = Instant::now();
        let rate = 1_250_000.0;
        let rtt = Duration::from_millis(80);
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        let now = drive(&mut cc, start, rate, rtt, 40, 0.0);
        let before = cc.bandwidth();
        // One packet sent now, acked a round trip later together with 5 MB
        // that arrived long ago but were reported only now (above the
        // peer's last gap block until the holes below them were filled).
        cc.on_sent(now, MTU as u64);
        let late = 5_000_000;
        cc.on_ack(
            now + rtt,
            &Acked {
                bytes: late + MTU as u64,
                sent: now,
                flight_before: MTU as u64,
                cum_advanced: true,
                smoothed_rtt: Some(rtt),
                rtt_sample: Some(rtt),
                late_bytes: late,
            },
        );
        assert!(
            cc.bandwidth() <= before * 1.01,
            "{} after {before}",
            cc.bandwidth()
        );
    }

    #[test]
    fn records_do_not_outlive_their_acks() {
        let start = Instant::now();
        let mut cc = Bbr::new(&BbrConfig::default(), start, MTU);
        drive(
            &mut cc,
            start,
            1_250_000.0,
            Duration::from_millis(20),
            200,
            0.01,
        );
        assert!(cc.records.len() < 1000, "{}", cc.records.len());
    }
}
