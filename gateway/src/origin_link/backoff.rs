//! Reconnection delays: when an origin link tries again, with exponential
//! back-off and jitter. No I/O, so it is tested deterministically.

use std::time::Duration;

/// Exponential backoff between connection attempts: `min`, doubling per failed
/// attempt up to `max`, each delay spread by ±[`JITTER`] so that gateways that
/// lost the same origin at the same moment do not reconnect in lockstep. A delay
/// is never below `min` nor above `max`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    nominal: Duration,
}

/// Fraction of the nominal delay by which a delay may differ from it.
pub(crate) const JITTER: f64 = 0.25;

impl Backoff {
    /// Starts at `min`.
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            nominal: min,
        }
    }

    /// Back to `min` (after an association came up).
    pub(crate) fn reset(&mut self) {
        self.nominal = self.min;
    }

    /// The delay before the next attempt, then doubles the nominal delay.
    /// `sample` is uniform in `[0, 1)`; the caller supplies it so that tests can.
    pub(crate) fn next_delay(&mut self, sample: f64) -> Duration {
        let spread = 1.0 - JITTER + 2.0 * JITTER * sample.clamp(0.0, 1.0);
        let delay = self.nominal.mul_f64(spread).clamp(self.min, self.max);
        self.nominal = self.nominal.saturating_mul(2).min(self.max);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_up_to_the_maximum() {
        let mut b = Backoff::new(100 * MS, 1000 * MS);
        let nominal: Vec<_> = (0..6).map(|_| b.next_delay(0.5)).collect();
        assert_eq!(
            nominal,
            [100, 200, 400, 800, 1000, 1000].map(|ms| ms * MS).to_vec()
        );
        b.reset();
        assert_eq!(b.next_delay(0.5), 100 * MS);
    }

    #[test]
    fn jitter_spreads_but_stays_within_bounds() {
        let mut b = Backoff::new(100 * MS, 1000 * MS);
        assert_eq!(b.next_delay(0.0), 100 * MS, "never below min");
        assert_eq!(b.next_delay(0.0), 150 * MS);
        assert_eq!(b.next_delay(0.999_999).as_millis(), 499);
        for _ in 0..4 {
            assert!(b.next_delay(1.0) <= 1000 * MS, "never above max");
        }
        assert_eq!(b.next_delay(0.0), 750 * MS);
    }
}
