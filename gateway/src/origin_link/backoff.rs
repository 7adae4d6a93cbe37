//! Reconnection delays and stream pinning: the two decisions of an origin link that
//! need no I/O, kept here so that they are tested deterministically.

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

/// Browser flows pinned per data stream. Streams are numbered from 1; index
/// `s - 1` holds stream `s`.
#[derive(Debug, Clone)]
pub(crate) struct PinTable {
    counts: Vec<u32>,
}

impl PinTable {
    /// A table for data streams `1..=streams` (at least one).
    pub(crate) fn new(streams: u16) -> Self {
        Self {
            counts: vec![0; usize::from(streams.max(1))],
        }
    }

    /// Pins one flow among streams `1..=usable` (clamped to the table): the one
    /// with the fewest pinned flows, the lowest number on ties.
    pub(crate) fn pin(&mut self, usable: u16) -> u16 {
        let usable = usize::from(usable).clamp(1, self.counts.len());
        let (index, count) = self.counts[..usable]
            .iter_mut()
            .enumerate()
            .min_by_key(|(index, count)| (**count, *index))
            .expect("at least one stream");
        *count += 1;
        index as u16 + 1
    }

    /// Releases one flow pinned to `stream`.
    pub(crate) fn unpin(&mut self, stream: u16) {
        if let Some(count) = usize::from(stream)
            .checked_sub(1)
            .and_then(|i| self.counts.get_mut(i))
        {
            *count = count.saturating_sub(1);
        }
    }

    /// Flows pinned to `stream`.
    pub(crate) fn pinned(&self, stream: u16) -> u32 {
        usize::from(stream)
            .checked_sub(1)
            .and_then(|i| self.counts.get(i))
            .copied()
            .unwrap_or(0)
    }
}

/// The data stream a pin uses on an association with `data_streams` streams. A
/// pin outlives associations; if a later one negotiated fewer streams, pins fold
/// onto the ones it has.
pub(crate) fn stream_for(pinned: u16, data_streams: u16) -> u16 {
    let n = data_streams.max(1);
    (pinned.max(1) - 1) % n + 1
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

    #[test]
    fn pins_go_to_the_least_loaded_stream_lowest_first() {
        let mut t = PinTable::new(3);
        assert_eq!([t.pin(3), t.pin(3), t.pin(3), t.pin(3)], [1, 2, 3, 1]);
        t.unpin(2);
        assert_eq!(t.pin(3), 2, "the freed stream is the least loaded");
        t.unpin(1);
        t.unpin(1);
        assert_eq!(t.pinned(1), 0);
        assert_eq!(t.pin(3), 1);
        // Only the first `usable` streams are candidates.
        assert_eq!(t.pin(1), 1);
        assert_eq!(t.pinned(1), 2);
        // Unknown streams and extra unpins change nothing.
        t.unpin(0);
        t.unpin(9);
        t.unpin(3);
        t.unpin(3);
        assert_eq!(t.pinned(3), 0);
    }

    #[test]
    fn pins_fold_onto_fewer_streams() {
        assert_eq!(stream_for(1, 4), 1);
        assert_eq!(stream_for(4, 4), 4);
        assert_eq!(stream_for(5, 4), 1);
        assert_eq!(stream_for(31, 8), 7);
        assert_eq!(stream_for(3, 0), 1);
    }
}
