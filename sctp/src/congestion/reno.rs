//! RFC 9260's own congestion control (sections 7.2.1-7.2.4), the
//! conformance baseline every other controller is measured against.

use std::time::{Duration, Instant};

use super::{
    Acked, Controller, ControllerFactory, LOSS_WINDOW_MTUS, MIN_SSTHRESH_MTUS,
    SLOW_START_LIMIT_MTUS, idle_decay, initial_window, to_bytes,
};

/// The configuration of [`Reno`], and its factory.
#[derive(Debug, Clone, Default)]
pub struct RenoConfig {
    /// initial window, bytes; None: RFC 9260's min(4*MTU, max(2*MTU, 4380))
    pub initial_window: Option<u64>,
}

impl ControllerFactory for RenoConfig {
    fn build(&self, now: Instant, mtu: usize) -> Box<dyn Controller> {
        Box::new(Reno::new(self, now, mtu))
    }
}

/// RFC 9260 section 7.2's congestion control: slow start, congestion
/// avoidance with `partial_bytes_acked`, halving on fast retransmit with one
/// reduction per recovery period, one MTU after a time-out, and decay while
/// idle.
#[derive(Debug, Clone)]
pub struct Reno {
    /// The configured initial window, if not RFC 9260's.
    configured_initial: Option<u64>,
    /// The path's MTU, bytes.
    mtu: u64,
    /// cwnd, bytes.
    cwnd: u64,
    /// ssthresh, bytes.
    ssthresh: u64,
    /// RFC 9260 7.2.2's partial_bytes_acked, bytes.
    partial_bytes_acked: u64,
    /// When the window was last reduced: data sent at or before it belongs to
    /// that recovery period.
    recovery_start: Option<Instant>,
    /// Idle decay counts whole RTOs from here: the last send, moved on by the
    /// RTOs already charged.
    idle_since: Instant,
    /// Some DATA has been sent (the initial window is then in use and an MTU
    /// change no longer recomputes it).
    started: bool,
    /// cwnd, ssthresh and the recovery start before the last fast-recovery
    /// reduction, restored if it proves spurious.
    undo: Option<(u64, u64, Option<Instant>)>,
}

impl Reno {
    /// A controller in slow start with the initial window for `mtu` and an
    /// arbitrarily high slow-start threshold. RFC 9260 7.2.1 suggests the
    /// peer's advertised receive window; a controller does not see it, and the
    /// sender is bounded by that window anyway, so the threshold is
    /// `u64::MAX` until the first reduction.
    pub fn new(config: &RenoConfig, now: Instant, mtu: usize) -> Self {
        let cwnd = config
            .initial_window
            .unwrap_or_else(|| initial_window(mtu))
            .max(to_bytes(mtu));
        Self {
            configured_initial: config.initial_window,
            mtu: to_bytes(mtu),
            cwnd,
            ssthresh: u64::MAX,
            partial_bytes_acked: 0,
            recovery_start: None,
            undo: None,
            idle_since: now,
            started: false,
        }
    }

    /// RFC 9260 7.2.2's partial_bytes_acked, bytes.
    pub fn partial_bytes_acked(&self) -> u64 {
        self.partial_bytes_acked
    }

    /// When the current (or last) recovery period began, if the window was
    /// ever reduced.
    pub fn recovery_start(&self) -> Option<Instant> {
        self.recovery_start
    }

    /// Data sent at or before `sent` belongs to the current recovery period.
    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }

    /// RFC 9260 7.2.3's max(cwnd/2, 4*MTU).
    fn reduced_threshold(&self) -> u64 {
        (self.cwnd / 2).max(MIN_SSTHRESH_MTUS * self.mtu)
    }
}

impl Controller for Reno {
    fn on_sent(&mut self, now: Instant, _bytes: u64) {
        self.idle_since = now;
        self.started = true;
    }

    fn on_ack(&mut self, _now: Instant, acked: &Acked) {
        // RFC 9260 7.2.1 and 7.2.2 both forbid growth in fast recovery; here
        // that is any acknowledgement of data sent before the last reduction.
        if !self.in_recovery(acked.sent) {
            if self.cwnd <= self.ssthresh {
                // 7.2.1: grow only on a SACK that advances the cumulative ack
                // and only if the window was fully used. "Fully used" is read
                // as "less than one MTU of room left": a sender that packs
                // whole packets cannot use the last partial MTU, and RFC 9260
                // 6.1 rule B lets the flight run past cwnd by up to an MTU.
                let fully_used = acked.flight_before.saturating_add(self.mtu) > self.cwnd;
                if acked.cum_advanced && fully_used {
                    let limit = SLOW_START_LIMIT_MTUS * self.mtu;
                    self.cwnd = self.cwnd.saturating_add(acked.bytes.min(limit));
                }
            } else {
                // 7.2.2, exactly as written: every newly acked byte counts;
                // the window grows by one MTU per window's worth of them, but
                // only if the flight before the SACK filled cwnd. Otherwise the
                // counter is capped at cwnd, so an under-used window cannot
                // bank credit for later.
                self.partial_bytes_acked = self.partial_bytes_acked.saturating_add(acked.bytes);
                if acked.flight_before >= self.cwnd {
                    if self.partial_bytes_acked >= self.cwnd {
                        self.partial_bytes_acked -= self.cwnd;
                        self.cwnd = self.cwnd.saturating_add(self.mtu);
                    }
                } else if self.partial_bytes_acked > self.cwnd {
                    self.partial_bytes_acked = self.cwnd;
                }
            }
        }
        // 7.2.2: when everything sent has been acknowledged, the count starts
        // over, in recovery or not.
        if acked.flight_before.saturating_sub(acked.bytes) == 0 {
            self.partial_bytes_acked = 0;
        }
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        _lost_bytes: u64,
    ) {
        if persistent {
            // 7.2.3, T3-rtx: back to one MTU. It also opens a recovery
            // period, so a fast retransmit of data sent before it cannot cut
            // the already collapsed window a second time.
            self.undo = None;
            self.ssthresh = self.reduced_threshold();
            self.cwnd = LOSS_WINDOW_MTUS * self.mtu;
        } else {
            // 7.2.4: one reduction per recovery period.
            if self.in_recovery(sent) {
                return;
            }
            self.undo = Some((self.cwnd, self.ssthresh, self.recovery_start));
            // 7.2.3, as written: cwnd = ssthresh = max(cwnd/2, 4*MTU). Below
            // four MTUs (after a time-out) this raises the window.
            self.ssthresh = self.reduced_threshold();
            self.cwnd = self.ssthresh;
        }
        self.partial_bytes_acked = 0;
        self.recovery_start = Some(now);
    }

    fn on_spurious_congestion(&mut self, _now: Instant) {
        if let Some((cwnd, ssthresh, recovery_start)) = self.undo.take() {
            // What was gained since the cut is kept.
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = self.ssthresh.max(ssthresh);
            self.recovery_start = recovery_start;
            self.partial_bytes_acked = 0;
        }
    }

    fn on_idle(&mut self, now: Instant, rto: Duration) {
        idle_decay(&mut self.cwnd, &mut self.idle_since, self.mtu, now, rto);
    }

    fn on_mtu(&mut self, mtu: usize) {
        self.mtu = to_bytes(mtu);
        if !self.started {
            // Nothing sent yet: the initial window is still the one to start
            // with, for the path as it now is.
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
        "reno"
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MTU: usize = 1452;
    const M: u64 = 1452;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    fn reno(initial_window: Option<u64>) -> (Reno, Instant) {
        let start = Instant::now();
        (Reno::new(&RenoConfig { initial_window }, start, MTU), start)
    }

    fn ack(bytes: u64, sent: Instant, flight_before: u64) -> Acked {
        Acked {
            bytes,
            sent,
            flight_before,
            cum_advanced: true,
            smoothed_rtt: None,
            rtt_sample: None,
            late_bytes: 0,
        }
    }

    /// A Reno in congestion avoidance with cwnd 11452, ssthresh 10000 and
    /// its recovery period behind it; returns a send time after it.
    fn in_congestion_avoidance() -> (Reno, Instant) {
        let (mut cc, start) = reno(Some(20_000));
        cc.on_congestion_event(at(start, 10), at(start, 5), false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (10_000, 10_000));
        cc.on_ack(at(start, 30), &ack(M, at(start, 20), 10_000));
        assert_eq!(cc.window(), 11_452);
        (cc, at(start, 40))
    }

    #[test]
    fn initial_window_per_rfc() {
        assert_eq!(initial_window(1452), 4380);
        assert_eq!(initial_window(1200), 4380);
        assert_eq!(initial_window(9000), 18_000);
        assert_eq!(initial_window(500), 2000);
        assert_eq!(initial_window(2000), 4380);
        assert_eq!(initial_window(3000), 6000);
    }

    #[test]
    fn starts_in_slow_start_with_a_high_threshold() {
        let (cc, _) = reno(None);
        assert_eq!(cc.window(), 4380);
        assert_eq!(cc.ssthresh(), u64::MAX);
        assert_eq!(cc.partial_bytes_acked(), 0);
        assert_eq!(cc.name(), "reno");
        assert_eq!(cc.pacing_rate(), None);
        let (cc, _) = reno(Some(10_000));
        assert_eq!(cc.window(), 10_000);
    }

    #[test]
    fn factory_builds_reno() {
        let cc = RenoConfig::default().build(Instant::now(), 9000);
        assert_eq!(cc.name(), "reno");
        assert_eq!(cc.window(), 18_000);
        let copy = cc.clone();
        assert_eq!(copy.window(), 18_000);
    }

    #[test]
    fn slow_start_grows_by_acked_bytes_up_to_one_mtu() {
        let (mut cc, start) = reno(None);
        // Three full packets (4356 bytes) in a 4380-byte window: 24 bytes of
        // room, less than an MTU, so the window counts as fully used.
        cc.on_ack(at(start, 100), &ack(1000, at(start, 1), 4356));
        assert_eq!(cc.window(), 5380);
        cc.on_ack(at(start, 100), &ack(2904, at(start, 1), 5380));
        assert_eq!(cc.window(), 5380 + M);
        assert_eq!(cc.partial_bytes_acked(), 0);
    }

    #[test]
    fn slow_start_needs_a_fully_used_window() {
        let (mut cc, start) = reno(None);
        // 4380 - 2928 = 1452: a whole packet still fits, no growth.
        cc.on_ack(at(start, 100), &ack(M, at(start, 1), 2928));
        assert_eq!(cc.window(), 4380);
        // 4380 - 2929 = 1451: less than a packet of room.
        cc.on_ack(at(start, 100), &ack(M, at(start, 1), 2929));
        assert_eq!(cc.window(), 4380 + M);
    }

    #[test]
    fn slow_start_needs_the_cumulative_ack_to_advance() {
        let (mut cc, start) = reno(None);
        let gap_only = Acked {
            cum_advanced: false,
            ..ack(M, at(start, 1), 4380)
        };
        cc.on_ack(at(start, 100), &gap_only);
        assert_eq!(cc.window(), 4380);
    }

    #[test]
    fn congestion_avoidance_one_mtu_per_window() {
        let (mut cc, sent) = in_congestion_avoidance();
        let now = at(sent, 100);
        cc.on_ack(now, &ack(5000, sent, 12_000));
        cc.on_ack(now, &ack(5000, sent, 12_000));
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (11_452, 10_000));
        cc.on_ack(now, &ack(5000, sent, 12_000));
        // 15000 >= 11452: pba 15000 - 11452 = 3548, cwnd + one MTU.
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (12_904, 3548));
        // One increase per SACK, however many bytes it acked.
        cc.on_ack(now, &ack(40_000, sent, 50_000));
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (14_356, 30_644));
    }

    #[test]
    fn congestion_avoidance_counts_gap_acked_bytes() {
        let (mut cc, sent) = in_congestion_avoidance();
        let gap_only = Acked {
            cum_advanced: false,
            ..ack(11_452, sent, 12_000)
        };
        cc.on_ack(at(sent, 100), &gap_only);
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (12_904, 0));
    }

    #[test]
    fn congestion_avoidance_caps_credit_when_the_window_is_not_full() {
        let (mut cc, sent) = in_congestion_avoidance();
        let now = at(sent, 100);
        for _ in 0..3 {
            cc.on_ack(now, &ack(5000, sent, 11_000));
        }
        // 15000 acked with the flight below cwnd: pba held at cwnd, no growth.
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (11_452, 11_452));
        cc.on_ack(now, &ack(1000, sent, 11_452));
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (12_904, 1000));
    }

    #[test]
    fn partial_bytes_acked_resets_when_all_data_is_acked() {
        let (mut cc, sent) = in_congestion_avoidance();
        let now = at(sent, 100);
        cc.on_ack(now, &ack(5000, sent, 12_000));
        assert_eq!(cc.partial_bytes_acked(), 5000);
        cc.on_ack(now, &ack(7000, sent, 7000));
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (11_452, 0));
    }

    #[test]
    fn fast_retransmit_halves_once_per_recovery_period() {
        let (mut cc, start) = reno(Some(20_000));
        cc.on_congestion_event(at(start, 100), at(start, 50), false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (10_000, 10_000));
        assert_eq!(cc.recovery_start(), Some(at(start, 100)));
        // More loss of data sent before the reduction: ignored.
        cc.on_congestion_event(at(start, 120), at(start, 90), false, M);
        cc.on_congestion_event(at(start, 130), at(start, 100), false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (10_000, 10_000));
        // Loss of data sent after it: a new reduction, 4 MTUs at least.
        cc.on_congestion_event(at(start, 300), at(start, 150), false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (5808, 5808));
        assert_eq!(cc.recovery_start(), Some(at(start, 300)));
    }

    #[test]
    fn fast_retransmit_follows_the_rfc_even_below_four_mtus() {
        let (mut cc, start) = reno(None);
        cc.on_congestion_event(at(start, 100), at(start, 50), true, M);
        assert_eq!(cc.window(), M);
        cc.on_congestion_event(at(start, 300), at(start, 200), false, M);
        // max(1452/2, 4*1452) = 5808: RFC 9260 7.2.3 taken literally.
        assert_eq!((cc.window(), cc.ssthresh()), (5808, 5808));
    }

    #[test]
    fn no_growth_from_acks_of_data_sent_before_the_reduction() {
        let (mut cc, start) = reno(Some(20_000));
        cc.on_ack(at(start, 10), &ack(5000, at(start, 1), 20_000));
        assert_eq!(cc.window(), 21_452);
        cc.on_congestion_event(at(start, 100), at(start, 50), false, M);
        assert_eq!(cc.window(), 10_726);
        // Slow start would apply (cwnd == ssthresh), but these are old data.
        cc.on_ack(at(start, 150), &ack(M, at(start, 99), 20_000));
        cc.on_ack(at(start, 150), &ack(M, at(start, 100), 20_000));
        assert_eq!(cc.window(), 10_726);
        // Data sent after the reduction: recovery is over, growth resumes.
        cc.on_ack(at(start, 250), &ack(M, at(start, 101), 10_726));
        assert_eq!(cc.window(), 10_726 + M);
    }

    #[test]
    fn recovery_blocks_partial_bytes_acked_too() {
        let (mut cc, sent) = in_congestion_avoidance();
        let base = sent;
        cc.on_congestion_event(at(base, 100), sent, false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (5808, 5808));
        cc.on_ack(at(base, 110), &ack(M, sent, 11_452));
        assert_eq!((cc.window(), cc.partial_bytes_acked()), (5808, 0));
    }

    #[test]
    fn time_out_collapses_to_one_mtu() {
        let (mut cc, start) = reno(Some(20_000));
        cc.on_congestion_event(at(start, 1000), at(start, 1), true, M);
        assert_eq!((cc.window(), cc.ssthresh()), (M, 10_000));
        assert_eq!(cc.recovery_start(), Some(at(start, 1000)));
        // Again: ssthresh floors at 4 MTUs.
        cc.on_congestion_event(at(start, 3000), at(start, 1), true, M);
        assert_eq!((cc.window(), cc.ssthresh()), (M, 5808));
    }

    #[test]
    fn time_out_acts_even_in_recovery() {
        let (mut cc, start) = reno(Some(20_000));
        cc.on_congestion_event(at(start, 100), at(start, 50), false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (10_000, 10_000));
        // A T3 for data sent before that reduction still acts.
        cc.on_congestion_event(at(start, 1100), at(start, 40), true, M);
        assert_eq!((cc.window(), cc.ssthresh()), (M, 5808));
        assert_eq!(cc.partial_bytes_acked(), 0);
        // A fast retransmit of data sent before the time-out: ignored.
        cc.on_congestion_event(at(start, 1200), at(start, 1000), false, M);
        assert_eq!((cc.window(), cc.ssthresh()), (M, 5808));
    }

    #[test]
    fn time_out_resets_partial_bytes_acked() {
        let (mut cc, sent) = in_congestion_avoidance();
        let base = sent;
        cc.on_ack(at(base, 100), &ack(5000, sent, 12_000));
        assert_eq!(cc.partial_bytes_acked(), 5000);
        cc.on_congestion_event(at(base, 2000), sent, true, M);
        assert_eq!(cc.window(), M);
        // max(11452/2, 5808) = 5808.
        assert_eq!(cc.ssthresh(), 5808);
        assert_eq!(cc.partial_bytes_acked(), 0);
    }

    #[test]
    fn idle_halves_per_rto_down_to_four_mtus() {
        let (mut cc, start) = reno(Some(40_000));
        let rto = Duration::from_secs(1);
        cc.on_sent(at(start, 0), M);
        cc.on_idle(at(start, 999), rto);
        assert_eq!(cc.window(), 40_000);
        cc.on_idle(at(start, 1000), rto);
        assert_eq!(cc.window(), 20_000);
        // Called again within the same RTO: nothing more.
        cc.on_idle(at(start, 1500), rto);
        assert_eq!(cc.window(), 20_000);
        // Two more RTOs at once: 10000, then max(5000, 5808).
        cc.on_idle(at(start, 3000), rto);
        assert_eq!(cc.window(), 5808);
        cc.on_idle(at(start, 9000), rto);
        assert_eq!(cc.window(), 5808);
    }

    #[test]
    fn idle_counts_from_the_last_send() {
        let (mut cc, start) = reno(Some(40_000));
        let rto = Duration::from_secs(1);
        cc.on_sent(at(start, 0), M);
        cc.on_idle(at(start, 1500), rto);
        assert_eq!(cc.window(), 20_000);
        cc.on_sent(at(start, 1800), M);
        cc.on_idle(at(start, 2500), rto);
        assert_eq!(cc.window(), 20_000);
        cc.on_idle(at(start, 2800), rto);
        assert_eq!(cc.window(), 10_000);
        // A zero RTO is nonsense: ignored rather than looping.
        cc.on_idle(at(start, 9000), Duration::ZERO);
        assert_eq!(cc.window(), 10_000);
    }

    #[test]
    fn idle_never_raises_the_window() {
        let (mut cc, start) = reno(None);
        cc.on_congestion_event(at(start, 10), at(start, 5), true, M);
        assert_eq!(cc.window(), M);
        cc.on_idle(at(start, 5000), Duration::from_secs(1));
        assert_eq!(cc.window(), M);
    }

    #[test]
    fn mtu_change_before_sending_recomputes_the_initial_window() {
        let mut cc = Reno::new(&RenoConfig::default(), Instant::now(), 1200);
        assert_eq!(cc.window(), 4380);
        cc.on_mtu(9000);
        assert_eq!(cc.window(), 18_000);
        cc.on_sent(Instant::now(), 9000);
        cc.on_mtu(1452);
        assert_eq!(cc.window(), 18_000);
        cc.on_congestion_event(Instant::now(), Instant::now(), true, 9000);
        assert_eq!(cc.window(), M);
        // The window never holds less than one packet.
        cc.on_mtu(9000);
        assert_eq!(cc.window(), 9000);
    }

    #[test]
    fn configured_initial_window_survives_an_mtu_change() {
        let mut cc = Reno::new(
            &RenoConfig {
                initial_window: Some(30_000),
            },
            Instant::now(),
            MTU,
        );
        cc.on_mtu(1200);
        assert_eq!(cc.window(), 30_000);
    }

    #[derive(Debug, Clone)]
    enum Event {
        Sent,
        Ack {
            bytes: u64,
            flight: u64,
            cum: bool,
            old: bool,
        },
        Loss {
            persistent: bool,
            old: bool,
        },
        Idle {
            rtos: u32,
        },
        Mtu(usize),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Sent),
            (1u64..30_000, 0u64..60_000, any::<bool>(), any::<bool>()).prop_map(
                |(bytes, flight, cum, old)| Event::Ack {
                    bytes,
                    flight: flight.max(bytes),
                    cum,
                    old
                }
            ),
            (any::<bool>(), any::<bool>())
                .prop_map(|(persistent, old)| Event::Loss { persistent, old }),
            (0u32..5).prop_map(|rtos| Event::Idle { rtos }),
            (500usize..9000).prop_map(Event::Mtu),
        ]
    }

    proptest! {
        #[test]
        fn reno_invariants(events in proptest::collection::vec(event(), 0..80)) {
            let start = Instant::now();
            let mut cc = Reno::new(&RenoConfig::default(), start, MTU);
            let rto = Duration::from_millis(200);
            let mut now = start;
            let mut mtu = M;
            for event in events {
                now += Duration::from_millis(10);
                let before = cc.window();
                let sent = match cc.recovery_start() {
                    Some(recovery) if matches!(event, Event::Ack { old: true, .. } | Event::Loss { old: true, .. }) => recovery,
                    _ => now - Duration::from_millis(5),
                };
                match event {
                    Event::Sent => cc.on_sent(now, mtu),
                    Event::Ack { bytes, flight, cum, .. } => {
                        let acked = Acked { bytes, sent, flight_before: flight, cum_advanced: cum, smoothed_rtt: None, rtt_sample: None, late_bytes: 0 };
                        cc.on_ack(now, &acked);
                        prop_assert!(cc.window() <= before + mtu);
                        if cc.recovery_start().is_some_and(|r| sent <= r) {
                            prop_assert_eq!(cc.window(), before);
                        }
                    }
                    Event::Loss { persistent, .. } => {
                        let reduced = cc.recovery_start().is_none_or(|r| sent > r) || persistent;
                        cc.on_congestion_event(now, sent, persistent, mtu);
                        if reduced {
                            prop_assert!(cc.ssthresh() >= 4 * mtu);
                            prop_assert_eq!(cc.partial_bytes_acked(), 0);
                        } else {
                            prop_assert_eq!(cc.window(), before);
                        }
                    }
                    Event::Idle { rtos } => {
                        now += rto * rtos;
                        cc.on_idle(now, rto);
                        prop_assert!(cc.window() <= before);
                    }
                    Event::Mtu(new) => {
                        mtu = to_bytes(new);
                        cc.on_mtu(new);
                    }
                }
                prop_assert!(cc.window() >= mtu);
            }
        }
    }
}
