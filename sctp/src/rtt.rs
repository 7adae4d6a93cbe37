//! The round-trip time estimator and the retransmission time-out (RTO) of one
//! path: RFC 9260 sections 6.3.1 (rules C1-C3, C6, C7 and G1) and 6.3.3
//! (rule E2, the back-off on a T3-rtx expiry).
//!
//! It only does arithmetic on measurements the association hands it. Choosing
//! what to measure is the caller's: at most one measurement per round trip
//! (C4; the others go to `observe`, which keeps only the latest and the
//! minimum) and never from a chunk that was retransmitted (Karn's rule, C5).
//!
//! Invariants:
//! - `rto()` is always within `[config.min, config.max]` (when `min <= max`;
//!   otherwise `max` wins, so a time-out is never longer than the operator
//!   allowed);
//! - before the first sample `rto()` is `config.initial`, clamped likewise
//!   (C1);
//! - a sample recomputes the RTO from SRTT and RTTVAR and so drops any back-off
//!   (RFC 9260 6.3.3 E2 keeps the doubled RTO only until a new measurement).

use std::time::Duration;

/// RTO.Alpha of RFC 9260 section 15, as the fraction 1/`RTO_ALPHA_DIV`: the
/// weight of a new sample in SRTT.
const RTO_ALPHA_DIV: u32 = 8;

/// RTO.Beta of RFC 9260 section 15, as the fraction 1/`RTO_BETA_DIV`: the
/// weight of a new deviation in RTTVAR.
const RTO_BETA_DIV: u32 = 4;

/// The multiplier K of RTTVAR in the RTO (RFC 9260 6.3.1 C2, C3: SRTT + 4 *
/// RTTVAR).
const RTTVAR_MULTIPLIER: u32 = 4;

/// Clock granularity G, the resolution our callers' `Instant`s are trusted
/// to (1 ms). RTTVAR is never let below it (rule G1), so the RTO always keeps a
/// margin of at least 4 * G over SRTT even on a path whose samples never vary.
pub const CLOCK_GRANULARITY: Duration = Duration::from_millis(1);

/// RTO.Initial of RFC 9260 section 15: 1 s.
pub const DEFAULT_RTO_INITIAL: Duration = Duration::from_secs(1);

/// RTO.Min of RFC 9260 section 15: 1 s.
pub const DEFAULT_RTO_MIN: Duration = Duration::from_secs(1);

/// RTO.Max of RFC 9260 section 15: 60 s.
pub const DEFAULT_RTO_MAX: Duration = Duration::from_secs(60);

/// The RTO protocol parameters of one association.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttConfig {
    /// RTO before any measurement (RTO.Initial).
    pub initial: Duration,
    /// Lower bound of the RTO (RTO.Min).
    pub min: Duration,
    /// Upper bound of the RTO, back-off included (RTO.Max).
    pub max: Duration,
}

impl Default for RttConfig {
    /// RFC 9260's values: 1 s, 1 s, 60 s.
    fn default() -> Self {
        Self {
            initial: DEFAULT_RTO_INITIAL,
            min: DEFAULT_RTO_MIN,
            max: DEFAULT_RTO_MAX,
        }
    }
}

impl RttConfig {
    /// `rto` within `[min, max]`; `max` wins if the two are crossed.
    fn clamp(&self, rto: Duration) -> Duration {
        rto.max(self.min).min(self.max)
    }
}

/// SRTT, RTTVAR and the RTO of one path (RFC 9260 section 6.3.1).
#[derive(Debug, Clone)]
pub struct RttEstimator {
    config: RttConfig,
    /// SRTT and RTTVAR, once the first sample is in (C2).
    smoothed: Option<Smoothed>,
    /// The most recent sample.
    latest: Option<Duration>,
    /// The smallest sample ever seen.
    min: Option<Duration>,
    /// The current RTO, clamped and backed off.
    rto: Duration,
}

/// The smoothed state, present only together.
#[derive(Debug, Clone, Copy)]
struct Smoothed {
    srtt: Duration,
    rttvar: Duration,
}

impl RttEstimator {
    /// An estimator with no samples: the RTO is `config.initial` (C1).
    pub fn new(config: RttConfig) -> Self {
        Self {
            config,
            smoothed: None,
            latest: None,
            min: None,
            rto: config.clamp(config.initial),
        }
    }

    /// A new measurement (Karn's rule is the caller's: never from a
    /// retransmitted chunk). Rules C2 (the first sample) and C3 (the later
    /// ones) with RTO.Alpha 1/8 and RTO.Beta 1/4, G1 with the clock
    /// granularity [`CLOCK_GRANULARITY`], then C6 and C7: the RTO is clamped
    /// to `[min, max]`. Any back-off is dropped.
    pub fn on_sample(&mut self, rtt: Duration) {
        let smoothed = match self.smoothed {
            // C2: SRTT <- R, RTTVAR <- R/2.
            None => Smoothed {
                srtt: rtt,
                rttvar: rtt / 2,
            },
            // C3: RTTVAR is updated with the SRTT from before this sample,
            // as the RFC requires, so the order of the two lines matters.
            Some(Smoothed { srtt, rttvar }) => Smoothed {
                rttvar: rttvar - rttvar / RTO_BETA_DIV + srtt.abs_diff(rtt) / RTO_BETA_DIV,
                srtt: srtt - srtt / RTO_ALPHA_DIV + rtt / RTO_ALPHA_DIV,
            },
        };
        // G1 says an RTTVAR of 0 becomes G. Our `Duration`s are finer than
        // the clock we trust, and anything below G is 0 at that granularity,
        // so the floor is G.
        let smoothed = Smoothed {
            rttvar: smoothed.rttvar.max(CLOCK_GRANULARITY),
            ..smoothed
        };
        self.smoothed = Some(smoothed);
        self.latest = Some(rtt);
        self.min = Some(self.min.map_or(rtt, |min| min.min(rtt)));
        let rto = smoothed
            .srtt
            .saturating_add(smoothed.rttvar.saturating_mul(RTTVAR_MULTIPLIER));
        self.rto = self.config.clamp(rto);
    }

    /// A measurement that does not update SRTT, RTTVAR or the RTO (RFC
    /// 9260 6.3.1 C4 takes one per round trip for those): only the most
    /// recent and the minimum sample, which loss detection reads on every
    /// acknowledgement.
    pub fn observe(&mut self, rtt: Duration) {
        self.latest = Some(rtt);
        self.min = Some(self.min.map_or(rtt, |min| min.min(rtt)));
    }

    /// The current RTO, back-off included.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// T3-rtx expired (rule E2): RTO doubles, up to max.
    pub fn back_off(&mut self) {
        self.rto = self.config.clamp(self.rto.saturating_mul(2));
    }

    /// SRTT, once there is a sample.
    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed.map(|s| s.srtt)
    }

    /// RTTVAR, once there is a sample.
    pub fn variation(&self) -> Option<Duration> {
        self.smoothed.map(|s| s.rttvar)
    }

    /// The most recent sample.
    pub fn latest(&self) -> Option<Duration> {
        self.latest
    }

    /// The smallest sample seen (for part 2's controllers). Never forgets: a
    /// controller that wants a windowed minimum (BBR's min_rtt filter) keeps
    /// its own from `latest`.
    pub fn min(&self) -> Option<Duration> {
        self.min
    }

    /// The configuration this estimator was built with.
    pub fn config(&self) -> RttConfig {
        self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// RTO bounds low enough that the formula shows through the clamp.
    fn open() -> RttConfig {
        RttConfig {
            initial: ms(1000),
            min: ms(10),
            max: ms(60_000),
        }
    }

    #[test]
    fn defaults_are_rfc_9260_values() {
        let config = RttConfig::default();
        assert_eq!(config.initial, Duration::from_secs(1));
        assert_eq!(config.min, Duration::from_secs(1));
        assert_eq!(config.max, Duration::from_secs(60));
    }

    #[test]
    fn c1_initial_rto_before_any_sample() {
        let rtt = RttEstimator::new(RttConfig::default());
        assert_eq!(rtt.rto(), ms(1000));
        assert_eq!(rtt.smoothed(), None);
        assert_eq!(rtt.variation(), None);
        assert_eq!(rtt.latest(), None);
        assert_eq!(rtt.min(), None);
    }

    #[test]
    fn c2_first_sample() {
        let mut rtt = RttEstimator::new(open());
        rtt.on_sample(ms(100));
        // SRTT 100, RTTVAR 50, RTO 100 + 4 * 50.
        assert_eq!(rtt.smoothed(), Some(ms(100)));
        assert_eq!(rtt.variation(), Some(ms(50)));
        assert_eq!(rtt.rto(), ms(300));
        assert_eq!(rtt.latest(), Some(ms(100)));
        assert_eq!(rtt.min(), Some(ms(100)));
    }

    #[test]
    fn c3_later_samples_use_the_old_srtt_for_rttvar() {
        let mut rtt = RttEstimator::new(open());
        rtt.on_sample(ms(100));
        rtt.on_sample(ms(200));
        // RTTVAR = 3/4 * 50 + 1/4 * |100 - 200| = 37.5 + 25 = 62.5;
        // SRTT = 7/8 * 100 + 1/8 * 200 = 87.5 + 25 = 112.5;
        // RTO = 112.5 + 4 * 62.5 = 362.5.
        assert_eq!(rtt.variation(), Some(Duration::from_micros(62_500)));
        assert_eq!(rtt.smoothed(), Some(Duration::from_micros(112_500)));
        assert_eq!(rtt.rto(), Duration::from_micros(362_500));
        assert_eq!(rtt.latest(), Some(ms(200)));
        assert_eq!(rtt.min(), Some(ms(100)));
        rtt.on_sample(ms(40));
        // RTTVAR = 3/4 * 62.5 + 1/4 * |112.5 - 40| = 46.875 + 18.125 = 65;
        // SRTT = 7/8 * 112.5 + 1/8 * 40 = 98.4375 + 5 = 103.4375;
        // RTO = 103.4375 + 260 = 363.4375.
        assert_eq!(rtt.variation(), Some(ms(65)));
        assert_eq!(rtt.smoothed(), Some(Duration::from_nanos(103_437_500)));
        assert_eq!(rtt.rto(), Duration::from_nanos(363_437_500));
        assert_eq!(rtt.min(), Some(ms(40)));
        assert_eq!(rtt.latest(), Some(ms(40)));
    }

    #[test]
    fn g1_rttvar_never_below_granularity() {
        let config = RttConfig {
            min: Duration::ZERO,
            ..open()
        };
        let mut rtt = RttEstimator::new(config);
        rtt.on_sample(Duration::from_micros(500));
        // R/2 = 250 us is below G: RTTVAR = 1 ms, RTO = 0.5 + 4 = 4.5 ms.
        assert_eq!(rtt.variation(), Some(ms(1)));
        assert_eq!(rtt.rto(), Duration::from_micros(4_500));
        for _ in 0..100 {
            rtt.on_sample(Duration::from_micros(500));
        }
        assert_eq!(rtt.variation(), Some(ms(1)));
        assert_eq!(rtt.rto(), Duration::from_micros(4_500));
    }

    #[test]
    fn c6_c7_clamp_to_min_and_max() {
        let mut rtt = RttEstimator::new(RttConfig::default());
        rtt.on_sample(ms(20));
        // 20 + 4 * 10 = 60 ms, raised to RTO.Min.
        assert_eq!(rtt.rto(), ms(1000));
        rtt.on_sample(Duration::from_secs(100));
        assert_eq!(rtt.rto(), Duration::from_secs(60));
    }

    #[test]
    fn initial_is_clamped_too() {
        let rtt = RttEstimator::new(RttConfig {
            initial: ms(5),
            ..RttConfig::default()
        });
        assert_eq!(rtt.rto(), ms(1000));
    }

    #[test]
    fn crossed_bounds_let_max_win() {
        let mut rtt = RttEstimator::new(RttConfig {
            initial: ms(500),
            min: ms(3000),
            max: ms(2000),
        });
        assert_eq!(rtt.rto(), ms(2000));
        rtt.on_sample(ms(10));
        assert_eq!(rtt.rto(), ms(2000));
    }

    #[test]
    fn e2_back_off_doubles_up_to_max() {
        let mut rtt = RttEstimator::new(RttConfig::default());
        let expected = [2, 4, 8, 16, 32, 60, 60];
        for secs in expected {
            rtt.back_off();
            assert_eq!(rtt.rto(), Duration::from_secs(secs));
        }
    }

    #[test]
    fn a_sample_drops_the_back_off() {
        let mut rtt = RttEstimator::new(open());
        rtt.on_sample(ms(100));
        rtt.back_off();
        rtt.back_off();
        assert_eq!(rtt.rto(), ms(1200));
        rtt.on_sample(ms(100));
        // RTTVAR = 3/4 * 50 = 37.5, SRTT 100: RTO = 250.
        assert_eq!(rtt.rto(), ms(250));
    }

    proptest! {
        #[test]
        fn rto_stays_within_bounds(
            samples in proptest::collection::vec((0u64..200_000, 0u8..4), 0..50),
            min_ms in 0u64..2_000,
            span_ms in 0u64..100_000,
        ) {
            let config = RttConfig {
                initial: ms(1000),
                min: ms(min_ms),
                max: ms(min_ms + span_ms),
            };
            let mut rtt = RttEstimator::new(config);
            for (sample, backoffs) in samples {
                rtt.on_sample(ms(sample));
                prop_assert!(rtt.variation() >= Some(CLOCK_GRANULARITY));
                for _ in 0..backoffs {
                    rtt.back_off();
                }
                prop_assert!(rtt.rto() >= config.min);
                prop_assert!(rtt.rto() <= config.max);
                prop_assert!(rtt.min() <= rtt.latest());
            }
        }
    }
}
