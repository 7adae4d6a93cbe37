//! The link model of one direction, without I/O: frames go in with
//! [`Link::handle_arrival`] (the time and the length are all it looks at) and come
//! out of [`Link::poll_transmit`] when they are due; [`Link::poll_timeout`] says
//! when the next one is. Time is passed in, so the model is deterministic for a
//! given seed and testable without a clock.
//!
//! What happens to a frame, in order:
//!
//! 1. **loss**: a deterministic single drop ([`DropNth`], for experiments that need
//!    exactly one loss at a known point), then Bernoulli or Gilbert-Elliott
//!    ([`LossModel`]); a lost frame takes no place in the queue and no time on the
//!    link (as in netem, where loss is decided at enqueue);
//! 2. **queue limit**: tail drop when the bottleneck already holds
//!    [`LinkConfig::queue_packets`] frames or the frame would take it past
//!    [`LinkConfig::queue_bytes`]. The bottleneck holds the frames that arrived
//!    and have not yet been serialized; frames in propagation (the delay) are on
//!    the wire and take no buffer space;
//! 3. **rate** (serialization): the frame's last bit leaves the bottleneck at
//!    `max(arrival, previous departure) + len * 8 / rate`;
//! 4. **delay and jitter**: it arrives at the far end `delay + U(-jitter, +jitter)`
//!    later (never less than zero); unless [`LinkConfig::reorder`] is set, never
//!    before the frame ahead of it, so departures are monotonic as on a real WAN
//!    path.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::error::ConfigError;

/// Queue limit in frames when none is given; netem's default `limit`.
pub const DEFAULT_QUEUE_PACKETS: usize = 1000;

/// How frames are lost.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LossModel {
    /// Nothing is lost.
    #[default]
    None,
    /// Each frame is lost independently with this probability (0 to 1).
    Bernoulli(f64),
    /// Bursts: a two-state Markov chain, see [`GilbertElliott`].
    GilbertElliott(GilbertElliott),
}

impl LossModel {
    /// The long-run fraction of frames lost.
    pub fn expected_loss(&self) -> f64 {
        match self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => *p,
            LossModel::GilbertElliott(ge) => ge.stationary_loss(),
        }
    }
}

/// The Gilbert-Elliott burst-loss model with netem's parameters and semantics:
/// the chain is in state Good or Bad; a frame is lost with probability `1 - k`
/// in Good and `1 - h` in Bad; after each frame the chain moves Good→Bad with
/// probability `p` and Bad→Good with probability `r`. It starts in Good.
///
/// All four are probabilities from 0 to 1. Note that `tc ... loss gemodel`
/// takes `p r 1-h 1-k` (the loss probabilities), while this type, like the
/// literature, holds `h` and `k` (the delivery probabilities).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Probability of moving from Good to Bad after a frame.
    pub p: f64,
    /// Probability of moving from Bad to Good after a frame.
    pub r: f64,
    /// Probability that a frame is delivered in Bad (loss there is `1 - h`).
    pub h: f64,
    /// Probability that a frame is delivered in Good (loss there is `1 - k`).
    pub k: f64,
}

impl GilbertElliott {
    /// The simple Gilbert model: Bad loses everything, Good nothing.
    pub fn gilbert(p: f64, r: f64) -> Self {
        Self {
            p,
            r,
            h: 0.0,
            k: 1.0,
        }
    }

    /// The long-run share of frames that find the chain in Bad: `p / (p + r)`.
    pub fn stationary_bad(&self) -> f64 {
        if self.p + self.r == 0.0 {
            0.0 // never leaves Good, where it starts
        } else {
            self.p / (self.p + self.r)
        }
    }

    /// The long-run loss: `(1 - πB)(1 - k) + πB (1 - h)`.
    pub fn stationary_loss(&self) -> f64 {
        let bad = self.stationary_bad();
        (1.0 - bad) * (1.0 - self.k) + bad * (1.0 - self.h)
    }
}

/// Drop exactly one frame: the `nth` (counting from 1) of the frames of at
/// least `min_len` bytes that arrive in this direction. Smaller frames (ACKs,
/// SACKs, handshakes) are not counted, so a data frame is hit at a point that
/// depends only on how much data has flowed, not on the acknowledgement pattern.
/// The frame is counted as lost (`dropped_loss`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropNth {
    /// Which of the counted frames to drop, from 1.
    pub nth: u64,
    /// Frames shorter than this, bytes, are not counted.
    pub min_len: usize,
}

/// A link rate in bits per second, counting every byte of the Ethernet frame as
/// the socket sees it (destination MAC to end of payload; no preamble, gap or
/// FCS), as tc's rates do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate {
    bits_per_second: u64,
}

impl Rate {
    /// `None` for zero.
    pub fn from_bits_per_second(bits_per_second: u64) -> Option<Self> {
        (bits_per_second > 0).then_some(Self { bits_per_second })
    }

    /// The rate.
    pub fn bits_per_second(&self) -> u64 {
        self.bits_per_second
    }

    /// How long `len` bytes take to serialize, rounded up to the nanosecond.
    pub fn transmit_time(&self, len: usize) -> Duration {
        let bits = len as u128 * 8;
        let nanos = (bits * 1_000_000_000).div_ceil(u128::from(self.bits_per_second));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// What one direction of the emulated link does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Half-width of the uniform jitter added to [`delay`](Self::delay).
    pub jitter: Duration,
    /// How frames are lost.
    pub loss: LossModel,
    /// The bottleneck's rate; `None` for no limit (and then no queue).
    pub rate: Option<Rate>,
    /// Most frames the bottleneck holds (waiting or being serialized); `None`
    /// for no limit.
    pub queue_packets: Option<usize>,
    /// Most bytes the bottleneck holds; `None` for no limit.
    pub queue_bytes: Option<usize>,
    /// Let jitter reorder frames (netem's behaviour); off by default, so a frame
    /// never leaves before the one ahead of it.
    pub reorder: bool,
    /// Drop exactly one chosen frame; `None` for no such drop.
    pub drop_nth: Option<DropNth>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: LossModel::None,
            rate: None,
            queue_packets: Some(DEFAULT_QUEUE_PACKETS),
            queue_bytes: None,
            reorder: false,
            drop_nth: None,
        }
    }
}

impl LinkConfig {
    /// Rejects what cannot be meant. `direction` names the direction in the
    /// message (`gw0->origin0`).
    pub fn validate(&self, direction: &str) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| ConfigError::Invalid {
            direction: direction.to_owned(),
            key,
            reason,
        };
        if self.jitter > self.delay {
            return Err(invalid(
                "jitter",
                format!(
                    "{:?} is larger than the delay ({:?}): delays would have to be negative",
                    self.jitter, self.delay
                ),
            ));
        }
        let probability = |key, value: f64| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(invalid(key, format!("{value} is not a probability")))
            }
        };
        match self.loss {
            LossModel::None => {}
            LossModel::Bernoulli(p) => probability("loss", p)?,
            LossModel::GilbertElliott(ge) => {
                for value in [ge.p, ge.r, ge.h, ge.k] {
                    probability("ge", value)?;
                }
            }
        }
        if self.queue_packets == Some(0) {
            return Err(invalid("queue", "0 frames would drop everything".into()));
        }
        if self.drop_nth.is_some_and(|d| d.nth == 0) {
            return Err(invalid(
                "drop-nth",
                "frames are counted from 1, so the 0th never arrives".into(),
            ));
        }
        if self.queue_bytes == Some(0) {
            return Err(invalid(
                "queue-bytes",
                "0 bytes would drop everything".into(),
            ));
        }
        Ok(())
    }
}

/// The loss process of one direction: the model, its state and its random
/// numbers.
#[derive(Debug, Clone)]
pub struct LossProcess {
    model: LossModel,
    bad: bool,
    rng: ChaCha8Rng,
}

impl LossProcess {
    /// Starts in Good with its own random stream.
    pub fn new(model: LossModel, rng: ChaCha8Rng) -> Self {
        Self {
            model,
            bad: false,
            rng,
        }
    }

    /// Whether the next frame is lost. Gilbert-Elliott decides with the state
    /// the frame finds and then moves the chain, as netem does.
    pub fn lose(&mut self) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli(p) => self.rng.random::<f64>() < p,
            LossModel::GilbertElliott(ge) => {
                let delivered = if self.bad { ge.h } else { ge.k };
                let lost = self.rng.random::<f64>() >= delivered;
                let leave = if self.bad { ge.r } else { ge.p };
                if self.rng.random::<f64>() < leave {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }

    /// Whether the chain is in Bad now (always false but for Gilbert-Elliott).
    pub fn is_bad(&self) -> bool {
        self.bad
    }
}

/// What became of an arriving frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It will be transmitted at `due`.
    Scheduled {
        /// When [`Link::poll_transmit`] hands it out.
        due: Instant,
    },
    /// The loss model dropped it.
    Lost,
    /// The bottleneck's queue was full.
    QueueFull,
}

/// Counters of the model (the driver counts what it sent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames handed to [`Link::handle_arrival`].
    pub arrived: u64,
    /// Their bytes.
    pub arrived_bytes: u64,
    /// Frames the loss model dropped.
    pub dropped_loss: u64,
    /// Frames dropped because the queue was full.
    pub dropped_queue: u64,
}

/// A frame waiting for its time, ordered by (due, arrival order).
#[derive(Debug)]
struct Scheduled<T> {
    due: Instant,
    seq: u64,
    frame: T,
}

impl<T> PartialEq for Scheduled<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Scheduled<T> {}

impl<T> PartialOrd for Scheduled<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Scheduled<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// One direction of the emulated link, holding frames of type `T` (the driver's
/// buffers; tests use anything).
#[derive(Debug)]
pub struct Link<T> {
    config: LinkConfig,
    loss: LossProcess,
    /// Frames counted toward [`LinkConfig::drop_nth`] so far.
    counted_for_drop: u64,
    jitter_rng: ChaCha8Rng,
    /// (departure of the last bit, length) of each frame in the bottleneck,
    /// oldest first.
    bottleneck: VecDeque<(Instant, usize)>,
    bottleneck_bytes: usize,
    /// When the bottleneck is next free.
    link_free_at: Option<Instant>,
    /// The latest due time handed out (for no-reordering).
    last_due: Option<Instant>,
    /// The latest arrival time seen; earlier ones are taken as this.
    last_arrival: Option<Instant>,
    pending: BinaryHeap<Reverse<Scheduled<T>>>,
    next_seq: u64,
    stats: LinkStats,
}

impl<T> Link<T> {
    /// A link with `config`. `seed` and `direction` pick the random streams:
    /// the same pair gives the same losses and jitter, and the two directions of
    /// one emulator (direction 0 and 1) draw independently.
    pub fn new(config: LinkConfig, seed: u64, direction: u64) -> Self {
        let stream = |n: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(direction * 2 + n);
            rng
        };
        Self {
            config,
            loss: LossProcess::new(config.loss, stream(0)),
            counted_for_drop: 0,
            jitter_rng: stream(1),
            bottleneck: VecDeque::new(),
            bottleneck_bytes: 0,
            link_free_at: None,
            last_due: None,
            last_arrival: None,
            pending: BinaryHeap::new(),
            next_seq: 0,
            stats: LinkStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// A frame of `len` bytes arrived at `now`. Arrival times must not go
    /// backwards; one that does is taken as the latest seen.
    pub fn handle_arrival(&mut self, now: Instant, len: usize, frame: T) -> Verdict {
        let now = match self.last_arrival {
            Some(last) if last > now => last,
            _ => now,
        };
        self.last_arrival = Some(now);
        self.stats.arrived += 1;
        self.stats.arrived_bytes += len as u64;

        if let Some(drop) = self.config.drop_nth
            && len >= drop.min_len
        {
            self.counted_for_drop += 1;
            if self.counted_for_drop == drop.nth {
                self.stats.dropped_loss += 1;
                return Verdict::Lost;
            }
        }
        if self.loss.lose() {
            self.stats.dropped_loss += 1;
            return Verdict::Lost;
        }

        let leaves_bottleneck = match self.config.rate {
            None => now,
            Some(rate) => {
                while let Some(&(departure, bytes)) = self.bottleneck.front() {
                    if departure > now {
                        break;
                    }
                    self.bottleneck.pop_front();
                    self.bottleneck_bytes -= bytes;
                }
                let full_packets = self
                    .config
                    .queue_packets
                    .is_some_and(|limit| self.bottleneck.len() >= limit);
                let full_bytes = self
                    .config
                    .queue_bytes
                    .is_some_and(|limit| self.bottleneck_bytes + len > limit);
                if full_packets || full_bytes {
                    self.stats.dropped_queue += 1;
                    return Verdict::QueueFull;
                }
                let start = self.link_free_at.map_or(now, |free| free.max(now));
                let departure = start + rate.transmit_time(len);
                self.link_free_at = Some(departure);
                self.bottleneck.push_back((departure, len));
                self.bottleneck_bytes += len;
                departure
            }
        };

        let mut due = leaves_bottleneck + self.draw_delay();
        if !self.config.reorder
            && let Some(last) = self.last_due
        {
            due = due.max(last);
        }
        self.last_due = Some(self.last_due.map_or(due, |last| last.max(due)));
        self.pending.push(Reverse(Scheduled {
            due,
            seq: self.next_seq,
            frame,
        }));
        self.next_seq += 1;
        Verdict::Scheduled { due }
    }

    /// `delay + U(-jitter, +jitter)`, at least zero.
    fn draw_delay(&mut self) -> Duration {
        let delay = self.config.delay;
        let jitter = self.config.jitter;
        if jitter.is_zero() {
            return delay;
        }
        let half_width = i128::try_from(jitter.as_nanos()).unwrap_or(i128::MAX);
        let offset = self.jitter_rng.random_range(-half_width..=half_width);
        let nanos = (delay.as_nanos() as i128 + offset).max(0);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The next frame due at or before `now`, if any, with the time it was due
    /// (so the driver can tell how late it is).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<(Instant, T)> {
        if self.pending.peek()?.0.due > now {
            return None;
        }
        self.pending.pop().map(|Reverse(s)| (s.due, s.frame))
    }

    /// When the next frame is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.peek().map(|Reverse(s)| s.due)
    }

    /// Frames waiting (in the bottleneck or in propagation).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: u64 = 0x5eed;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn due(verdict: Verdict) -> Instant {
        match verdict {
            Verdict::Scheduled { due } => due,
            other => panic!("expected a scheduled frame, got {other:?}"),
        }
    }

    fn loss_rate(model: LossModel, draws: u32) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(SEED);
        rng.set_stream(0);
        let mut process = LossProcess::new(model, rng);
        let lost = (0..draws).filter(|_| process.lose()).count();
        lost as f64 / f64::from(draws)
    }

    #[test]
    fn gilbert_elliott_stationary_loss_matches_theory() {
        // Successive frames are correlated through the chain: the variance of the
        // mean grows by (1 + rho) / (1 - rho) with rho = 1 - p - r. Allow four
        // standard errors.
        let draws = 300_000;
        for ge in [
            GilbertElliott::gilbert(0.01, 0.30),
            GilbertElliott {
                p: 0.01,
                r: 0.5,
                h: 0.3,
                k: 1.0,
            },
            GilbertElliott {
                p: 0.05,
                r: 0.2,
                h: 0.5,
                k: 0.99,
            },
        ] {
            let expected = ge.stationary_loss();
            let rho = 1.0 - ge.p - ge.r;
            let variance =
                expected * (1.0 - expected) / f64::from(draws) * (1.0 + rho) / (1.0 - rho);
            let tolerance = 4.0 * variance.sqrt();
            let measured = loss_rate(LossModel::GilbertElliott(ge), draws);
            assert!(
                (measured - expected).abs() < tolerance,
                "{ge:?}: measured {measured}, expected {expected} +- {tolerance}"
            );
        }
    }

    #[test]
    fn gilbert_elliott_formula() {
        let ge = GilbertElliott::gilbert(0.01, 0.30);
        assert!((ge.stationary_loss() - 0.01 / 0.31).abs() < 1e-12);
        let ge = GilbertElliott {
            p: 0.01,
            r: 0.5,
            h: 0.3,
            k: 1.0,
        };
        assert!((ge.stationary_loss() - 0.7 * 0.01 / 0.51).abs() < 1e-12);
        // p = r = 0: stays in Good.
        let stuck = GilbertElliott {
            p: 0.0,
            r: 0.0,
            h: 0.0,
            k: 0.9,
        };
        assert!((stuck.stationary_loss() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn gilbert_losses_come_in_bursts_of_mean_length_one_over_r() {
        let ge = GilbertElliott::gilbert(0.01, 0.25);
        let mut rng = ChaCha8Rng::seed_from_u64(SEED);
        rng.set_stream(0);
        let mut process = LossProcess::new(LossModel::GilbertElliott(ge), rng);
        let (mut bursts, mut lost, mut previous) = (0u32, 0u32, false);
        for _ in 0..300_000 {
            let now = process.lose();
            if now {
                lost += 1;
                if !previous {
                    bursts += 1;
                }
            }
            previous = now;
        }
        let mean = f64::from(lost) / f64::from(bursts);
        // About 2,900 bursts: the standard error of their mean is about 0.06.
        assert!((mean - 4.0).abs() < 0.25, "mean burst {mean}");
    }

    #[test]
    fn bernoulli_loss_and_its_edges() {
        let measured = loss_rate(LossModel::Bernoulli(0.03), 300_000);
        assert!((measured - 0.03).abs() < 0.001, "{measured}");
        assert_eq!(loss_rate(LossModel::Bernoulli(0.0), 10_000), 0.0);
        assert_eq!(loss_rate(LossModel::Bernoulli(1.0), 10_000), 1.0);
        assert_eq!(loss_rate(LossModel::None, 10_000), 0.0);
    }

    #[test]
    fn the_same_seed_gives_the_same_losses_and_directions_differ() {
        let config = LinkConfig {
            loss: LossModel::Bernoulli(0.5),
            ..LinkConfig::default()
        };
        let pattern = |direction| {
            let mut link = Link::new(config, SEED, direction);
            let t = Instant::now();
            (0..200)
                .map(|_| link.handle_arrival(t, 100, ()) == Verdict::Lost)
                .collect::<Vec<_>>()
        };
        assert_eq!(pattern(0), pattern(0));
        assert_ne!(pattern(0), pattern(1));
    }

    #[test]
    fn drop_nth_drops_exactly_the_nth_large_frame_once() {
        let config = LinkConfig {
            drop_nth: Some(DropNth {
                nth: 3,
                min_len: 1000,
            }),
            ..LinkConfig::default()
        };
        let mut link = Link::new(config, SEED, 0);
        let t = Instant::now();
        // Small frames in between are neither counted nor dropped.
        let lens = [1500, 60, 1500, 60, 1200, 1500, 60, 1500, 1500];
        let lost: Vec<bool> = lens
            .iter()
            .map(|&len| link.handle_arrival(t, len, ()) == Verdict::Lost)
            .collect();
        assert_eq!(
            lost,
            [false, false, false, false, true, false, false, false, false]
        );
        assert_eq!(link.stats().dropped_loss, 1);
        let zero = LinkConfig {
            drop_nth: Some(DropNth { nth: 0, min_len: 0 }),
            ..LinkConfig::default()
        };
        assert!(zero.validate("a->b").is_err());
    }

    #[test]
    fn delay_only_schedules_at_arrival_plus_delay() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                delay: ms(40),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        assert_eq!(due(link.handle_arrival(t0, 1500, 1)), t0 + ms(40));
        assert_eq!(
            due(link.handle_arrival(t0 + us(10), 60, 2)),
            t0 + ms(40) + us(10)
        );
        assert_eq!(link.poll_timeout(), Some(t0 + ms(40)));
        assert_eq!(link.poll_transmit(t0 + ms(39)), None);
        assert_eq!(link.poll_transmit(t0 + ms(40)), Some((t0 + ms(40), 1)));
        assert_eq!(link.poll_transmit(t0 + ms(40)), None);
        assert_eq!(
            link.poll_transmit(t0 + ms(41)),
            Some((t0 + ms(40) + us(10), 2))
        );
        assert_eq!(link.poll_timeout(), None);
    }

    #[test]
    fn token_bucket_departures_are_serialization_times() {
        // 10 Mbit/s: a 1250-byte frame takes exactly 1 ms.
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                rate: Rate::from_bits_per_second(10_000_000),
                delay: ms(5),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        // A burst of three at t0 leaves back to back.
        let dues: Vec<Instant> = (0..3)
            .map(|i| due(link.handle_arrival(t0, 1250, i)))
            .collect();
        assert_eq!(dues, [t0 + ms(6), t0 + ms(7), t0 + ms(8)]);
        // One arriving while the link is busy waits for it.
        assert_eq!(due(link.handle_arrival(t0 + us(500), 1250, 3)), t0 + ms(9));
        // After the link went idle, a frame starts at its arrival.
        assert_eq!(
            due(link.handle_arrival(t0 + ms(10), 125, 4)),
            t0 + ms(15) + us(100)
        );
    }

    #[test]
    fn rate_transmit_times() {
        let rate = Rate::from_bits_per_second(100_000_000).expect("non-zero");
        assert_eq!(rate.transmit_time(1514), Duration::from_nanos(121_120));
        let odd = Rate::from_bits_per_second(3).expect("non-zero");
        // 8 bits at 3 bit/s: 2.666... s, rounded up.
        assert_eq!(odd.transmit_time(1), Duration::from_nanos(2_666_666_667));
        assert_eq!(Rate::from_bits_per_second(0), None);
    }

    #[test]
    fn queue_limit_in_packets_tail_drops_and_frees_as_frames_leave() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                rate: Rate::from_bits_per_second(10_000_000),
                queue_packets: Some(3),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        let verdicts: Vec<Verdict> = (0..5).map(|i| link.handle_arrival(t0, 1250, i)).collect();
        assert!(matches!(verdicts[2], Verdict::Scheduled { .. }));
        assert_eq!(verdicts[3..], [Verdict::QueueFull, Verdict::QueueFull]);
        // The first frame's last bit left at 1 ms: room for one more.
        assert!(matches!(
            link.handle_arrival(t0 + ms(1), 1250, 5),
            Verdict::Scheduled { .. }
        ));
        assert_eq!(link.handle_arrival(t0 + ms(1), 1250, 6), Verdict::QueueFull);
        let stats = link.stats();
        assert_eq!((stats.arrived, stats.dropped_queue), (7, 3));
        assert_eq!(link.pending(), 4);
    }

    #[test]
    fn queue_limit_in_bytes() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                rate: Rate::from_bits_per_second(1_000_000),
                queue_packets: None,
                queue_bytes: Some(3000),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        assert!(matches!(
            link.handle_arrival(t0, 1500, ()),
            Verdict::Scheduled { .. }
        ));
        assert!(matches!(
            link.handle_arrival(t0, 1500, ()),
            Verdict::Scheduled { .. }
        ));
        assert_eq!(link.handle_arrival(t0, 1, ()), Verdict::QueueFull);
    }

    #[test]
    fn frames_in_propagation_take_no_queue_space() {
        // 100 ms of delay at 10 Mbit/s with a 2-frame queue: a frame every 1 ms
        // (exactly the rate) is never dropped although 100 are in flight.
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                rate: Rate::from_bits_per_second(10_000_000),
                delay: ms(100),
                queue_packets: Some(2),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        for i in 0..200u64 {
            let verdict = link.handle_arrival(t0 + ms(i), 1250, i);
            assert!(matches!(verdict, Verdict::Scheduled { .. }), "{i}");
        }
        assert_eq!(link.pending(), 200);
    }

    #[test]
    fn without_a_rate_the_queue_limit_never_drops() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                queue_packets: Some(1),
                delay: ms(10),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        for i in 0..100 {
            assert!(matches!(
                link.handle_arrival(t0, 1500, i),
                Verdict::Scheduled { .. }
            ));
        }
    }

    #[test]
    fn jitter_never_reorders_by_default() {
        let t0 = Instant::now();
        let config = LinkConfig {
            delay: ms(20),
            jitter: ms(10),
            ..LinkConfig::default()
        };
        let mut link = Link::new(config, SEED, 0);
        let mut previous = t0;
        let mut spread = (Duration::MAX, Duration::ZERO);
        // Frames 100 µs apart, much closer than the jitter's width.
        for i in 0..10_000u64 {
            let arrival = t0 + us(100 * i);
            let d = due(link.handle_arrival(arrival, 100, i));
            assert!(
                d >= previous,
                "frame {i} would leave before its predecessor"
            );
            assert!(d >= arrival + ms(10), "frame {i} below delay - jitter");
            previous = d;
            spread = (spread.0.min(d - arrival), spread.1.max(d - arrival));
        }
        // Frames leave in arrival order.
        let order: Vec<u64> =
            std::iter::from_fn(|| link.poll_transmit(previous).map(|(_, frame)| frame)).collect();
        assert_eq!(order, (0..10_000).collect::<Vec<_>>());
        assert!(
            spread.1 > ms(29),
            "jitter never reached the top: {spread:?}"
        );
    }

    #[test]
    fn jitter_is_uniform_around_the_delay_when_frames_are_far_apart() {
        let t0 = Instant::now();
        let config = LinkConfig {
            delay: ms(20),
            jitter: ms(5),
            ..LinkConfig::default()
        };
        let mut link = Link::new(config, SEED, 0);
        let n = 20_000u32;
        let mut sum = 0.0;
        for i in 0..n {
            // 100 ms apart: the no-reordering clamp never bites.
            let arrival = t0 + ms(100 * u64::from(i));
            let d = due(link.handle_arrival(arrival, 100, ())) - arrival;
            assert!(d >= ms(15) && d <= ms(25), "{d:?}");
            sum += d.as_secs_f64();
        }
        let mean = sum / f64::from(n);
        assert!((mean - 0.020).abs() < 0.0001, "mean delay {mean}");
    }

    #[test]
    fn jitter_may_reorder_when_allowed() {
        let t0 = Instant::now();
        let config = LinkConfig {
            delay: ms(20),
            jitter: ms(10),
            reorder: true,
            ..LinkConfig::default()
        };
        let mut link = Link::new(config, SEED, 0);
        for i in 0..1000u64 {
            link.handle_arrival(t0 + us(100 * i), 100, i);
        }
        let order: Vec<u64> =
            std::iter::from_fn(|| link.poll_transmit(t0 + ms(1000)).map(|(_, frame)| frame))
                .collect();
        assert_eq!(order.len(), 1000);
        assert!(
            order.windows(2).any(|w| w[1] < w[0]),
            "no reordering at all"
        );
    }

    #[test]
    fn lost_frames_take_no_queue_space() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                loss: LossModel::Bernoulli(1.0),
                rate: Rate::from_bits_per_second(1000),
                queue_packets: Some(1),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        for i in 0..10 {
            assert_eq!(link.handle_arrival(t0, 1500, i), Verdict::Lost);
        }
        assert_eq!(link.stats().dropped_queue, 0);
        assert_eq!(link.pending(), 0);
    }

    #[test]
    fn arrivals_going_backwards_are_clamped() {
        let t0 = Instant::now();
        let mut link = Link::new(
            LinkConfig {
                delay: ms(1),
                ..LinkConfig::default()
            },
            SEED,
            0,
        );
        due(link.handle_arrival(t0 + ms(5), 10, ()));
        assert_eq!(due(link.handle_arrival(t0, 10, ())), t0 + ms(6));
    }

    #[test]
    fn validation_names_the_key() {
        let bad = LinkConfig {
            delay: ms(1),
            jitter: ms(2),
            ..LinkConfig::default()
        };
        let message = bad
            .validate("gw0->origin0")
            .expect_err("jitter > delay")
            .to_string();
        assert!(
            message.contains("gw0->origin0") && message.contains("jitter"),
            "{message}"
        );
        let zero_queue = LinkConfig {
            queue_packets: Some(0),
            ..LinkConfig::default()
        };
        assert!(zero_queue.validate("x").is_err());
        let ge = LinkConfig {
            loss: LossModel::GilbertElliott(GilbertElliott::gilbert(1.5, 0.1)),
            ..LinkConfig::default()
        };
        assert!(ge.validate("x").is_err());
        assert!(LinkConfig::default().validate("x").is_ok());
    }
}
