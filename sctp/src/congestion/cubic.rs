//! CUBIC (RFC 9438) for an SCTP association, optionally standing for an
//! aggregate of `flows` CUBIC flows in the manner of MulTCP.
//!
//! After a reduction the window follows `W(t) = C·N·(t − K)³ + W_max`
//! (segments, `t` seconds since the reduction, RFC 9438 4.2): concave up to
//! the window where the loss happened, then convex probing beyond it. Where
//! Reno would be faster (short RTTs, small windows) the Reno-friendly
//! estimate `W_est` takes over (4.3). The reduction is `β = 0.7` (4.6) with
//! fast convergence (4.7); a time-out collapses the window to one MTU as
//! RFC 9260 7.2.3 says (RFC 9438 4.8).
//!
//! The aggregate: one association carries the flows of many browser
//! connections, which over TCP would be several CUBIC flows, each losing and
//! reducing on its own. Standing for `N` flows means one loss reduces the
//! aggregate by `(1 − β)/N` instead of `1 − β`, and the window grows N times
//! as fast (`C·N`, N Reno-friendly increments). `N = 1` is RFC 9438 exactly;
//! `N` is bounded by [`MAX_FLOWS`] so the association never claims more than
//! the six connections a browser opens to one host would.
//!
//! Slow start is RFC 9260's (as [`super::Reno`]'s), with the same
//! "window in use" rule. Idle decay is RFC 9260 7.2.1's, and the cubic epoch
//! starts over after it.

use std::time::{Duration, Instant};

use super::{
    Acked, Controller, ControllerFactory, LOSS_WINDOW_MTUS, MIN_SSTHRESH_MTUS,
    SLOW_START_LIMIT_MTUS, idle_decay, initial_window, to_bytes,
};

/// RFC 9438's C: the window's growth constant, segments per second cubed.
const C: f64 = 0.4;
/// RFC 9438's β_cubic: the window after a loss is this share of the window before.
const BETA: f64 = 0.7;
/// The most flows one association may stand for: the connections a browser
/// opens to one host (six in Chromium and Firefox).
pub const MAX_FLOWS: u32 = 6;

/// The configuration of [`Cubic`], and its factory.
#[derive(Debug, Clone)]
pub struct CubicConfig {
    /// Initial window, bytes; `None`: RFC 9260's min(4·MTU, max(2·MTU, 4380)).
    pub initial_window: Option<u64>,
    /// How many CUBIC flows the association stands for, 1..=[`MAX_FLOWS`].
    pub flows: u32,
}

impl Default for CubicConfig {
    fn default() -> Self {
        CubicConfig {
            initial_window: None,
            flows: 1,
        }
    }
}

impl ControllerFactory for CubicConfig {
    fn build(&self, now: Instant, mtu: usize) -> Box<dyn Controller> {
        Box::new(Cubic::new(self, now, mtu))
    }
}

/// CUBIC congestion control (RFC 9438) for N aggregated flows.
#[derive(Debug, Clone)]
pub struct Cubic {
    configured_initial: Option<u64>,
    /// Flows stood for, as a float for the formulas.
    flows: f64,
    mtu: u64,
    cwnd: u64,
    ssthresh: u64,
    /// The window before the last reduction, bytes (W_max).
    w_max: f64,
    /// The Reno-friendly estimate, bytes (W_est).
    w_est: f64,
    /// The window just before the last reduction, bytes (cwnd_prior).
    cwnd_prior: f64,
    /// Seconds from the epoch's start to the window's return to W_max (K).
    k: f64,
    /// When the current congestion-avoidance epoch began.
    epoch: Option<Instant>,
    recovery_start: Option<Instant>,
    idle_since: Instant,
    started: bool,
    /// The state before the last fast-recovery reduction, restored if it
    /// proves spurious (RFC 9438 4.9).
    undo: Option<Saved>,
}

/// What a reduction changes, saved for its undo (RFC 9438 4.9's list).
#[derive(Debug, Clone, Copy)]
struct Saved {
    cwnd: u64,
    ssthresh: u64,
    w_max: f64,
    w_est: f64,
    cwnd_prior: f64,
    k: f64,
    epoch: Option<Instant>,
    recovery_start: Option<Instant>,
}

impl Cubic {
    /// A controller in slow start (threshold unbounded until the first loss).
    pub fn new(config: &CubicConfig, now: Instant, mtu: usize) -> Self {
        let cwnd = config
            .initial_window
            .unwrap_or_else(|| initial_window(mtu))
            .max(to_bytes(mtu));
        Cubic {
            configured_initial: config.initial_window,
            flows: f64::from(config.flows.clamp(1, MAX_FLOWS)),
            mtu: to_bytes(mtu),
            cwnd,
            ssthresh: u64::MAX,
            w_max: 0.0,
            w_est: 0.0,
            cwnd_prior: 0.0,
            k: 0.0,
            epoch: None,
            recovery_start: None,
            undo: None,
            idle_since: now,
            started: false,
        }
    }

    /// The aggregate's β: one flow of N reduces.
    fn beta(&self) -> f64 {
        1.0 - (1.0 - BETA) / self.flows
    }

    /// The Reno-friendly additive increase per RTT, segments (RFC 9438 4.3:
    /// 3(1−β)/(1+β) until W_est passes cwnd_prior, then 1; N flows add N).
    fn alpha(&self) -> f64 {
        let beta = self.beta();
        let per_flow = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            3.0 * (1.0 - beta) / (1.0 + beta)
        };
        per_flow * self.flows
    }

    /// W_cubic(t) in bytes, `t` seconds into the epoch.
    fn w_cubic(&self, t: f64) -> f64 {
        let segments = C * self.flows * (t - self.k).powi(3);
        segments * self.mtu as f64 + self.w_max
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }

    fn start_epoch(&mut self, now: Instant) {
        self.epoch = Some(now);
        let mtu = self.mtu as f64;
        let cwnd = self.cwnd as f64;
        self.k = if self.w_max > cwnd {
            ((self.w_max - cwnd) / mtu / (C * self.flows)).cbrt()
        } else {
            0.0
        };
        self.w_est = cwnd;
    }

    /// The window after a reduction and the new W_max (RFC 9438 4.6, 4.7).
    fn reduce(&mut self, now: Instant) {
        let cwnd = self.cwnd as f64;
        let beta = self.beta();
        // Fast convergence: a flow that lost below its last W_max releases
        // bandwidth for newer flows.
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + beta) / 2.0
        } else {
            cwnd
        };
        self.cwnd_prior = cwnd;
        let floor = MIN_SSTHRESH_MTUS * self.mtu;
        self.ssthresh = ((cwnd * beta) as u64).max(floor);
        self.epoch = None;
        self.recovery_start = Some(now);
    }
}

impl Controller for Cubic {
    fn on_sent(&mut self, now: Instant, _bytes: u64) {
        self.idle_since = now;
        self.started = true;
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        if self.in_recovery(acked.sent) {
            return;
        }
        let fully_used = acked.flight_before.saturating_add(self.mtu) > self.cwnd;
        if !fully_used {
            // Application-limited: neither slow start nor the cubic curve may
            // grow a window that is not in use (RFC 9438 4.5 / RFC 7661).
            return;
        }
        // RFC 9438 4.10: slow start below the threshold (RFC 9260's "<=" would
        // put the window right after a reduction back into slow start).
        if self.cwnd < self.ssthresh {
            if acked.cum_advanced {
                let limit = SLOW_START_LIMIT_MTUS * self.mtu;
                self.cwnd = self.cwnd.saturating_add(acked.bytes.min(limit));
            }
            return;
        }
        if self.epoch.is_none() {
            self.start_epoch(now);
        }
        let Some(epoch) = self.epoch else {
            return;
        };
        let rtt = acked.smoothed_rtt.unwrap_or(Duration::from_millis(100));
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let cwnd = self.cwnd as f64;
        let mtu = self.mtu as f64;
        // 4.3: the Reno-friendly estimate grows by alpha segments per window
        // acknowledged.
        self.w_est += self.alpha() * mtu * (acked.bytes as f64 / cwnd);
        let cubic_now = self.w_cubic(t);
        let next = if cubic_now < self.w_est {
            self.w_est
        } else {
            // 4.4 and 4.5: aim at W_cubic one RTT ahead, at most 1.5 cwnd, and
            // close a share of the gap proportional to what was acked.
            let target = self.w_cubic(t + rtt.as_secs_f64()).clamp(cwnd, 1.5 * cwnd);
            cwnd + (target - cwnd) * (acked.bytes as f64 / cwnd)
        };
        self.cwnd = (next as u64).max(self.cwnd);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        _lost_bytes: u64,
    ) {
        if persistent {
            // RFC 9438 4.8 with RFC 9260 7.2.3: threshold by β, window to one MTU.
            self.undo = None;
            self.reduce(now);
            self.cwnd = LOSS_WINDOW_MTUS * self.mtu;
            return;
        }
        if self.in_recovery(sent) {
            return;
        }
        self.undo = Some(Saved {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            w_max: self.w_max,
            w_est: self.w_est,
            cwnd_prior: self.cwnd_prior,
            k: self.k,
            epoch: self.epoch,
            recovery_start: self.recovery_start,
        });
        self.reduce(now);
        self.cwnd = self.ssthresh;
    }

    fn on_spurious_congestion(&mut self, _now: Instant) {
        let Some(saved) = self.undo.take() else {
            return;
        };
        // RFC 9438 4.9: back to the state before the reduction; what was
        // gained since is kept.
        self.cwnd = self.cwnd.max(saved.cwnd);
        self.ssthresh = self.ssthresh.max(saved.ssthresh);
        self.w_max = saved.w_max;
        self.w_est = saved.w_est;
        self.cwnd_prior = saved.cwnd_prior;
        self.k = saved.k;
        self.epoch = saved.epoch;
        self.recovery_start = saved.recovery_start;
    }

    fn on_idle(&mut self, now: Instant, rto: Duration) {
        if idle_decay(&mut self.cwnd, &mut self.idle_since, self.mtu, now, rto) {
            // The curve's clock must not count the idle time (RFC 9438 5.8).
            self.epoch = None;
        }
    }

    fn on_mtu(&mut self, mtu: usize) {
        self.mtu = to_bytes(mtu);
        if !self.started {
            self.cwnd = self
                .configured_initial
                .unwrap_or_else(|| initial_window(mtu));
        }
        self.cwnd = self.cwnd.max(self.mtu);
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    fn name(&self) -> &'static str {
        "cubic"
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: usize = 1000;
    const M: u64 = 1000;

    fn ack(bytes: u64, sent: Instant, flight_before: u64) -> Acked {
        Acked {
            bytes,
            sent,
            flight_before,
            cum_advanced: true,
            smoothed_rtt: Some(Duration::from_millis(100)),
            rtt_sample: Some(Duration::from_millis(100)),
            late_bytes: 0,
        }
    }

    fn cubic(flows: u32, window: u64) -> (Cubic, Instant) {
        let start = Instant::now();
        let config = CubicConfig {
            initial_window: Some(window),
            flows,
        };
        (Cubic::new(&config, start, MTU), start)
    }

    /// Acks a full window every RTT for `rtts` round trips; returns the time.
    fn run(cc: &mut Cubic, mut now: Instant, rtts: u32) -> Instant {
        for _ in 0..rtts {
            let window = cc.window();
            let sent = now;
            now += Duration::from_millis(100);
            let mut acked = 0;
            while acked < window {
                let bytes = M.min(window - acked);
                cc.on_ack(now, &ack(bytes, sent, window));
                acked += bytes;
            }
        }
        now
    }

    #[test]
    fn a_loss_reduces_by_beta_and_the_window_returns_to_w_max_after_k() {
        let (mut cc, start) = cubic(1, 100 * M);
        cc.on_congestion_event(start, start, false, M);
        assert_eq!(cc.window(), 70 * M);
        assert_eq!(cc.ssthresh(), 70 * M);
        // K = cbrt(W_max (1 - β) / C) = cbrt(100 · 0.3 / 0.4) = 4.217 s.
        let after = start + Duration::from_millis(1);
        cc.on_ack(after, &ack(M, after, 70 * M));
        assert!((cc.k - 4.217).abs() < 0.01, "K = {}", cc.k);
        let now = run(&mut cc, after, 42);
        // About K later the window is back near W_max, and then grows past it.
        assert!((95 * M..=105 * M).contains(&cc.window()), "{}", cc.window());
        // 4 s past K: W = 0.4 · 4³ + 100 ≈ 125 segments.
        run(&mut cc, now, 40);
        assert!(
            (118 * M..=130 * M).contains(&cc.window()),
            "{}",
            cc.window()
        );
    }

    #[test]
    fn one_reduction_per_recovery_period_and_a_time_out_always_acts() {
        let (mut cc, start) = cubic(1, 100 * M);
        let t = |ms| start + Duration::from_millis(ms);
        cc.on_congestion_event(t(10), t(5), false, M);
        cc.on_congestion_event(t(20), t(8), false, M);
        assert_eq!(cc.window(), 70 * M);
        cc.on_congestion_event(t(30), t(8), true, M);
        assert_eq!(cc.window(), M);
        assert_eq!(cc.ssthresh(), 49 * M);
    }

    #[test]
    fn fast_convergence_lowers_w_max_below_the_last_one() {
        let (mut cc, start) = cubic(1, 100 * M);
        let t = |ms| start + Duration::from_millis(ms);
        cc.on_congestion_event(t(10), t(5), false, M);
        cc.on_congestion_event(t(300), t(200), false, M);
        // cwnd 70 < W_max 100: W_max = 70 (1 + 0.7) / 2 = 59.5 segments.
        assert!((cc.w_max - 59_500.0).abs() < 1.0);
        assert_eq!(cc.window(), 49 * M);
    }

    #[test]
    fn an_aggregate_of_n_flows_reduces_less_and_grows_faster() {
        let (mut one, start) = cubic(1, 100 * M);
        let (mut six, _) = cubic(6, 100 * M);
        one.on_congestion_event(start, start, false, M);
        six.on_congestion_event(start, start, false, M);
        assert_eq!(one.window(), 70 * M);
        assert_eq!(six.window(), 95 * M);
        // Three seconds on: six flows' K is 1.28 s and their curve climbs
        // 2.4 segments/s³ past W_max (≈ 112 segments); one flow's K is 4.2 s
        // and it is still below W_max (≈ 99).
        run(&mut one, start + Duration::from_millis(1), 30);
        run(&mut six, start + Duration::from_millis(1), 30);
        assert!(six.window() > 108 * M, "six: {}", six.window());
        assert!(one.window() < 102 * M, "one: {}", one.window());
    }

    #[test]
    fn flows_are_bounded() {
        let (cc, _) = cubic(50, 100 * M);
        assert_eq!(cc.flows, f64::from(MAX_FLOWS));
        let (cc, _) = cubic(0, 100 * M);
        assert_eq!(cc.flows, 1.0);
    }

    #[test]
    fn an_unused_window_does_not_grow() {
        let (mut cc, start) = cubic(1, 10 * M);
        cc.on_ack(start, &ack(M, start, 2 * M));
        assert_eq!(cc.window(), 10 * M);
        cc.on_ack(start, &ack(M, start, 10 * M));
        assert_eq!(cc.window(), 11 * M);
    }

    #[test]
    fn reno_friendly_region_at_short_rtts() {
        // A small window right after a loss: W_est (Reno-friendly) grows
        // at least as fast as Reno would with α.
        let (mut cc, start) = cubic(1, 10 * M);
        cc.on_congestion_event(start, start, false, M);
        let before = cc.window();
        run(&mut cc, start + Duration::from_millis(1), 10);
        assert!(cc.window() >= before + 5 * M, "{}", cc.window());
    }
}
