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
//! Simplifications against the draft, each a place to refine with measurements:
//! no packet conservation after a loss, no long-term (policer) mode, no
//! application-limited marking of samples (an app-limited sample can only
//! lower the estimate, and the max filter ignores it).

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
/// Startup also ends after a round that lost more than this share of what it
/// sent (after BBRv2): random loss of a few percent does not, the overflow
/// of a queue by Startup's 2.89 BDPs does.
const STARTUP_LOSS_LIMIT: f64 = 0.10;

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
    delivered_time: Instant,
    /// The send time of the most recently delivered packet when this one
    /// was sent: the send side of the rate interval.
    first_sent: Instant,
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
    delivered_time: Instant,
    /// The send time of the most recently delivered packet.
    delivered_sent: Instant,
    records: VecDeque<SendRecord>,
    /// Round trips counted by delivery: a round ends when data sent after
    /// the previous round's end is acknowledged.
    round: u64,
    next_round_delivered: u64,
    /// (round, best rate in that round), bytes per second, newest last.
    bw_samples: VecDeque<(u64, f64)>,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Instant,
    full_bw: f64,
    full_bw_rounds: u32,
    /// Bytes lost and delivered in the current round (Startup's loss limit).
    round_lost: u64,
    round_delivered: u64,
    flight: u64,
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
            delivered_time: now,
            delivered_sent: now,
            records: VecDeque::new(),
            round: 0,
            next_round_delivered: 0,
            bw_samples: VecDeque::new(),
            min_rtt: None,
            min_rtt_stamp: now,
            full_bw: 0.0,
            full_bw_rounds: 0,
            round_lost: 0,
            round_delivered: 0,
            flight: 0,
        }
    }

    /// The bottleneck bandwidth estimate, bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bw_samples
            .iter()
            .map(|(_, bw)| *bw)
            .fold(0.0, f64::max)
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
            self.on_round_end();
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
        let rate = (self.delivered - record.delivered) as f64 / interval.as_secs_f64();
        match self.bw_samples.back_mut() {
            Some((round, best)) if *round == self.round => *best = best.max(rate),
            _ => self.bw_samples.push_back((self.round, rate)),
        }
        while self
            .bw_samples
            .front()
            .is_some_and(|(round, _)| round + BW_WINDOW_ROUNDS <= self.round)
        {
            self.bw_samples.pop_front();
        }
    }

    fn on_round_end(&mut self) {
        let lost = self.round_lost as f64;
        let sent = lost + self.round_delivered as f64;
        self.round_lost = 0;
        self.round_delivered = 0;
        if self.mode != Mode::Startup {
            return;
        }
        if sent > 0.0 && lost / sent > STARTUP_LOSS_LIMIT {
            self.mode = Mode::Drain;
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
            delivered_time: self.delivered_time,
            first_sent: self.delivered_sent,
        });
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        self.flight = acked.flight_before.saturating_sub(acked.bytes);
        self.delivered += acked.bytes;
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
        self.update_mode(now);
        if let Some(prior) = self.prior_cwnd.take() {
            self.cwnd = self.cwnd.max(prior);
        }
        let target = match self.bdp() {
            Some(bdp) => ((bdp * self.cwnd_gain()) as u64).max(self.floor()),
            None => u64::MAX,
        };
        // Grow by what was delivered, never past gain × BDP: even in Startup
        // the window stays within 2.89 BDPs of the bandwidth seen so far.
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
        self.round_lost += lost_bytes;
        if persistent {
            // A time-out says the path may be gone: start again from one
            // packet, and restore the window once acks return.
            self.prior_cwnd = Some(self.cwnd);
            self.cwnd = self.mtu;
        }
        // A loss alone is not congestion for a model-based controller.
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
        // The window is about two BDPs (100 KB each).
        assert!(
            (150_000..=300_000).contains(&cc.window()),
            "{}",
            cc.window()
        );
        assert_eq!(cc.min_rtt(), Some(rtt));
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
