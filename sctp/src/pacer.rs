//! Pacing: DATA leaves at the rate the congestion window allows over one
//! round trip, not in window-sized bursts that overflow a bottleneck's queue
//! (the part 2 issue: "pacing of everything sent"; the shape of quinn-proto's
//! pacer and Linux's fq pacing).
//!
//! A token bucket: tokens (bytes) accrue at the pacing rate up to a burst of
//! [`BURST_PACKETS`] packets or 2 ms at the rate, whichever is more; a DATA
//! packet needs a packet's worth. The rate
//! is the controller's own if it has one, else `cwnd / SRTT` times a gain:
//! twice that in slow start (the window doubles each round trip) and 1.25
//! times in congestion avoidance, Linux's choices. Before the first RTT
//! sample nothing is paced. Control chunks and SACKs are never held back.

use std::time::{Duration, Instant};

/// Packets that may leave back to back (the bucket's depth)...
pub(crate) const BURST_PACKETS: u64 = 10;
/// ...or this long at the pacing rate, if more: a driver's timer wakes it no
/// more often than about once a millisecond (tokio's resolution), so a
/// shallower bucket would cap the rate at a bucket per millisecond.
const BURST_TIME: Duration = Duration::from_millis(2);
/// Pacing gain in slow start.
const SLOW_START_GAIN: f64 = 2.0;
/// Pacing gain in congestion avoidance.
const AVOIDANCE_GAIN: f64 = 1.25;

/// The token bucket.
#[derive(Debug)]
pub(crate) struct Pacer {
    tokens: f64,
    last: Instant,
}

impl Pacer {
    /// A full bucket.
    pub(crate) fn new(now: Instant, mtu: usize) -> Self {
        Pacer {
            tokens: (BURST_PACKETS * mtu as u64) as f64,
            last: now,
        }
    }

    /// The rate for a controller's window and state, bytes per second.
    pub(crate) fn rate(
        cwnd: u64,
        ssthresh: u64,
        srtt: Option<Duration>,
        own: Option<u64>,
    ) -> Option<f64> {
        if let Some(own) = own {
            return Some(own as f64);
        }
        let srtt = srtt?.as_secs_f64();
        if srtt <= 0.0 {
            return None;
        }
        let gain = if cwnd < ssthresh {
            SLOW_START_GAIN
        } else {
            AVOIDANCE_GAIN
        };
        Some(cwnd as f64 / srtt * gain)
    }

    /// `None` if a packet of `size` bytes may go now, else when it may.
    pub(crate) fn delay(
        &mut self,
        now: Instant,
        size: usize,
        mtu: usize,
        rate: Option<f64>,
    ) -> Option<Instant> {
        let rate = rate?;
        let capacity = ((BURST_PACKETS * mtu as u64) as f64).max(rate * BURST_TIME.as_secs_f64());
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(capacity);
        self.last = now;
        let need = size as f64;
        if self.tokens >= need {
            return None;
        }
        let wait = (need - self.tokens) / rate;
        // At least a microsecond: a deadline equal to now would never pass.
        Some(now + Duration::from_secs_f64(wait).max(Duration::from_micros(1)))
    }

    /// A packet of `size` bytes left.
    pub(crate) fn spend(&mut self, size: usize) {
        self.tokens -= size as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000);
        let rate = Some(100_000.0); // 100 packets of 1000 bytes per second
        for _ in 0..10 {
            assert_eq!(p.delay(start, 1000, 1000, rate), None);
            p.spend(1000);
        }
        let next = p.delay(start, 1000, 1000, rate).expect("bucket empty");
        assert_eq!(next - start, Duration::from_millis(10));
        assert_eq!(p.delay(next, 1000, 1000, rate), None);
    }

    #[test]
    fn no_rate_no_pacing() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000);
        for _ in 0..100 {
            assert_eq!(p.delay(start, 1000, 1000, None), None);
            p.spend(1000);
        }
    }

    #[test]
    fn rate_follows_the_window_and_the_phase() {
        let srtt = Some(Duration::from_millis(100));
        assert_eq!(Pacer::rate(10_000, u64::MAX, srtt, None), Some(200_000.0));
        assert_eq!(Pacer::rate(10_000, 5_000, srtt, None), Some(125_000.0));
        assert_eq!(Pacer::rate(10_000, 5_000, None, None), None);
        assert_eq!(Pacer::rate(10_000, 5_000, srtt, Some(7)), Some(7.0));
    }
}
