//! The acknowledgement policy: when the data receiver sends a SACK. The
//! [`AckPolicy`] trait is called by the association for every received packet
//! that carried DATA and for every SACK it sends; [`DelayedAck`] is RFC 9260's
//! delayed acknowledgement (sections 6.2 and 6.7) with the SACK-IMMEDIATELY
//! flag of RFC 7053.
//!
//! The policy decides only *when*; what the SACK says (cumulative TSN, gap
//! blocks, duplicates, window) is the receiver's (`recv`). The association
//! asks `on_data` as each packet is processed and, if the answer is no, arms a
//! timer for `deadline()`; when a SACK goes out for any reason (bundled with
//! DATA or alone) it calls `on_sack_sent`, which disarms it.
//!
//! [`DelayedAck`]'s invariants:
//! - a SACK is asked for at once for a packet that was out of order, carried
//!   a duplicate, had the I flag, or left gaps (RFC 9260 6.7, RFC 7053 4.2);
//! - otherwise at the latest on the `every`-th unacknowledged packet with DATA
//!   (RFC 9260 6.2: at least every second packet);
//! - and never later than `max_delay` after the first unacknowledged packet
//!   arrived, `max_delay` being at most [`MAX_SACK_DELAY`] (RFC 9260 6.2's
//!   500 ms MUST);
//! - at most one "SACK now" per packet, since the answer is per call (RFC 9260
//!   6.2: no more than one SACK per packet received, window updates aside).

use std::fmt;
use std::time::{Duration, Instant};

/// RFC 9260 6.2: an acknowledgement MUST NOT be delayed longer than 500 ms.
/// A configured `max_delay` above it is lowered to it.
pub const MAX_SACK_DELAY: Duration = Duration::from_millis(500);

/// RFC 9260 6.2's typical delay, 200 ms (the default `max_delay`).
pub const DEFAULT_SACK_DELAY: Duration = Duration::from_millis(200);

/// RFC 9260 6.2: a SACK for at least every second packet with DATA (the
/// default `every`).
pub const DEFAULT_SACK_EVERY_PACKETS: u32 = 2;

/// The delayed-acknowledgement parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckConfig {
    /// longest a SACK waits, RFC 9260 says at most 500 ms, 200 ms typical
    pub max_delay: Duration,
    /// SACK at least every this many packets with DATA (2)
    pub every: u32,
}

impl Default for AckConfig {
    /// RFC 9260 behaviour: 200 ms, every second packet.
    fn default() -> Self {
        Self {
            max_delay: DEFAULT_SACK_DELAY,
            every: DEFAULT_SACK_EVERY_PACKETS,
        }
    }
}

/// What one received packet with DATA was like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrival {
    /// it carried a TSN above a gap, or filled one (out of order)
    pub out_of_order: bool,
    /// it carried a duplicate TSN
    pub duplicate: bool,
    /// a chunk had the SACK-IMMEDIATELY (I) flag
    pub immediate: bool,
    /// gaps remain after it
    pub gaps_remain: bool,
}

impl Arrival {
    /// Whether RFC 9260 6.7 or RFC 7053 asks for a SACK without delay.
    fn urgent(self) -> bool {
        self.out_of_order || self.duplicate || self.immediate || self.gaps_remain
    }
}

/// Decides when the receiver sends a SACK. Called by the association.
pub trait AckPolicy: Send + fmt::Debug {
    /// A packet with DATA arrived; true: SACK now (in this packet's reply).
    fn on_data(&mut self, now: Instant, arrival: Arrival) -> bool;

    /// A SACK was sent (bundled or alone): the pending state is cleared.
    fn on_sack_sent(&mut self, now: Instant);

    /// When a delayed SACK must go out, if one is pending.
    fn deadline(&self) -> Option<Instant>;

    /// A copy of this policy with all its state, boxed (a trait object cannot
    /// be `Clone` itself).
    fn clone_box(&self) -> Box<dyn AckPolicy>;
}

impl Clone for Box<dyn AckPolicy> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// RFC 9260's delayed SACK: immediately when something is amiss, otherwise
/// every `every`-th packet or `max_delay` after the first unacknowledged one.
#[derive(Debug, Clone)]
pub struct DelayedAck {
    /// The configuration in force (`max_delay` capped, `every` at least 1).
    config: AckConfig,
    /// Packets with DATA received since the last SACK.
    pending: u32,
    /// Arrival of the first of them.
    first_unacked: Option<Instant>,
}

impl DelayedAck {
    /// A policy with nothing pending. `max_delay` above [`MAX_SACK_DELAY`] is
    /// lowered to it; `every == 0` means every packet, as 1 does.
    pub fn new(config: AckConfig) -> Self {
        Self {
            config: AckConfig {
                max_delay: config.max_delay.min(MAX_SACK_DELAY),
                every: config.every.max(1),
            },
            pending: 0,
            first_unacked: None,
        }
    }

    /// The configuration in force, after the limits above.
    pub fn config(&self) -> AckConfig {
        self.config
    }

    /// Packets with DATA received since the last SACK was sent.
    pub fn pending_packets(&self) -> u32 {
        self.pending
    }
}

impl AckPolicy for DelayedAck {
    fn on_data(&mut self, now: Instant, arrival: Arrival) -> bool {
        // Counted even when the answer is "now": if the SACK cannot go out
        // with this reply, the deadline still covers the packet.
        self.pending = self.pending.saturating_add(1);
        self.first_unacked.get_or_insert(now);
        arrival.urgent() || self.pending >= self.config.every
    }

    fn on_sack_sent(&mut self, _now: Instant) {
        self.pending = 0;
        self.first_unacked = None;
    }

    fn deadline(&self) -> Option<Instant> {
        // Anchored on the first unacknowledged packet: 6.2's limit is from
        // the arrival of any unacknowledged DATA chunk, so later arrivals
        // must not push it back.
        self.first_unacked
            .map(|first| first + self.config.max_delay)
    }

    fn clone_box(&self) -> Box<dyn AckPolicy> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    const IN_ORDER: Arrival = Arrival {
        out_of_order: false,
        duplicate: false,
        immediate: false,
        gaps_remain: false,
    };

    #[test]
    fn defaults_are_rfc_9260_behaviour() {
        let config = AckConfig::default();
        assert_eq!(config.max_delay, Duration::from_millis(200));
        assert_eq!(config.every, 2);
        assert_eq!(DelayedAck::new(config).config(), config);
    }

    #[test]
    fn every_second_packet_in_order() {
        let start = Instant::now();
        let mut ack = DelayedAck::new(AckConfig::default());
        assert_eq!(ack.deadline(), None);
        assert!(!ack.on_data(at(start, 0), IN_ORDER));
        assert_eq!(ack.deadline(), Some(at(start, 200)));
        assert!(ack.on_data(at(start, 50), IN_ORDER));
        ack.on_sack_sent(at(start, 50));
        assert_eq!(ack.deadline(), None);
        assert_eq!(ack.pending_packets(), 0);
        assert!(!ack.on_data(at(start, 300), IN_ORDER));
        assert_eq!(ack.deadline(), Some(at(start, 500)));
    }

    #[test]
    fn deadline_is_anchored_on_the_first_unacked_packet() {
        let start = Instant::now();
        let mut ack = DelayedAck::new(AckConfig {
            max_delay: Duration::from_millis(200),
            every: 10,
        });
        for ms in [0, 100, 150, 199] {
            assert!(!ack.on_data(at(start, ms), IN_ORDER));
            assert_eq!(ack.deadline(), Some(at(start, 200)));
        }
        assert_eq!(ack.pending_packets(), 4);
        // The timer fired and the association sent the SACK.
        ack.on_sack_sent(at(start, 200));
        assert!(!ack.on_data(at(start, 210), IN_ORDER));
        assert_eq!(ack.deadline(), Some(at(start, 410)));
    }

    #[test]
    fn every_n_th_packet() {
        let start = Instant::now();
        let mut ack = DelayedAck::new(AckConfig {
            max_delay: Duration::from_millis(200),
            every: 3,
        });
        let answers: Vec<bool> = (0..7)
            .map(|ms| {
                let now = at(start, ms);
                let sack = ack.on_data(now, IN_ORDER);
                if sack {
                    ack.on_sack_sent(now);
                }
                sack
            })
            .collect();
        assert_eq!(answers, [false, false, true, false, false, true, false]);
    }

    #[test]
    fn every_zero_or_one_acks_every_packet() {
        for every in [0, 1] {
            let start = Instant::now();
            let mut ack = DelayedAck::new(AckConfig {
                max_delay: Duration::from_millis(200),
                every,
            });
            assert_eq!(ack.config().every, 1);
            assert!(ack.on_data(at(start, 0), IN_ORDER));
            ack.on_sack_sent(at(start, 0));
            assert!(ack.on_data(at(start, 1), IN_ORDER));
        }
    }

    #[test]
    fn max_delay_is_capped_at_500_ms() {
        let start = Instant::now();
        let mut ack = DelayedAck::new(AckConfig {
            max_delay: Duration::from_secs(2),
            every: 2,
        });
        assert_eq!(ack.config().max_delay, Duration::from_millis(500));
        assert!(!ack.on_data(at(start, 0), IN_ORDER));
        assert_eq!(ack.deadline(), Some(at(start, 500)));
    }

    #[test]
    fn each_irregularity_asks_for_a_sack_at_once() {
        let irregular = [
            Arrival {
                out_of_order: true,
                ..IN_ORDER
            },
            Arrival {
                duplicate: true,
                ..IN_ORDER
            },
            Arrival {
                immediate: true,
                ..IN_ORDER
            },
            Arrival {
                gaps_remain: true,
                ..IN_ORDER
            },
        ];
        for arrival in irregular {
            let start = Instant::now();
            let mut ack = DelayedAck::new(AckConfig::default());
            // As the first packet, where the count alone would wait.
            assert!(ack.on_data(at(start, 0), arrival), "{arrival:?}");
            ack.on_sack_sent(at(start, 0));
            // And the count starts over after that SACK.
            assert!(!ack.on_data(at(start, 10), IN_ORDER));
            assert_eq!(ack.deadline(), Some(at(start, 210)));
        }
    }

    #[test]
    fn sack_every_packet_while_gaps_persist() {
        let start = Instant::now();
        let mut ack = DelayedAck::new(AckConfig::default());
        // TSN 1 arrives, 2 is lost, 3, 4, 5 arrive above the gap.
        assert!(!ack.on_data(at(start, 0), IN_ORDER));
        let above_gap = Arrival {
            out_of_order: true,
            gaps_remain: true,
            ..IN_ORDER
        };
        for ms in [1, 2, 3] {
            assert!(ack.on_data(at(start, ms), above_gap));
            ack.on_sack_sent(at(start, ms));
        }
        // The retransmitted 2 fills the gap: out of order, no gaps remain.
        let fills_gap = Arrival {
            out_of_order: true,
            ..IN_ORDER
        };
        assert!(ack.on_data(at(start, 100), fills_gap));
        ack.on_sack_sent(at(start, 100));
        // Back to delaying.
        assert!(!ack.on_data(at(start, 110), IN_ORDER));
    }

    #[test]
    fn an_unsent_sack_keeps_its_deadline() {
        let start = Instant::now();
        let mut ack = DelayedAck::new(AckConfig::default());
        assert!(!ack.on_data(at(start, 0), IN_ORDER));
        // "SACK now" but the reply could not carry it: still pending.
        assert!(ack.on_data(at(start, 5), IN_ORDER));
        assert_eq!(ack.deadline(), Some(at(start, 200)));
        assert_eq!(ack.pending_packets(), 2);
        assert!(ack.on_data(at(start, 6), IN_ORDER));
        assert_eq!(ack.pending_packets(), 3);
    }

    #[test]
    fn boxed_policies_clone_their_state() {
        let start = Instant::now();
        let mut ack: Box<dyn AckPolicy> = Box::new(DelayedAck::new(AckConfig::default()));
        assert!(!ack.on_data(at(start, 0), IN_ORDER));
        let copy = ack.clone();
        ack.on_sack_sent(at(start, 1));
        assert_eq!(ack.deadline(), None);
        assert_eq!(copy.deadline(), Some(at(start, 200)));
    }

    fn arrival() -> impl Strategy<Value = Arrival> {
        (
            proptest::bool::weighted(0.1),
            proptest::bool::weighted(0.1),
            proptest::bool::weighted(0.1),
            proptest::bool::weighted(0.1),
        )
            .prop_map(
                |(out_of_order, duplicate, immediate, gaps_remain)| Arrival {
                    out_of_order,
                    duplicate,
                    immediate,
                    gaps_remain,
                },
            )
    }

    proptest! {
        /// Driven as the association would (SACK when told or when the
        /// deadline passes), no packet waits longer than max_delay and no more
        /// than `every` packets go unacknowledged.
        #[test]
        fn no_packet_waits_too_long(
            every in 0u32..5,
            delay_ms in 0u64..1000,
            arrivals in proptest::collection::vec((0u64..300, arrival()), 0..100),
        ) {
            let start = Instant::now();
            let mut ack = DelayedAck::new(AckConfig { max_delay: Duration::from_millis(delay_ms), every });
            let limit = ack.config().max_delay;
            let mut now = start;
            let mut oldest: Option<Instant> = None;
            for (gap_ms, arrival) in arrivals {
                let next = now + Duration::from_millis(gap_ms);
                if let Some(deadline) = ack.deadline().filter(|d| *d <= next) {
                    prop_assert!(oldest.is_some_and(|o| deadline <= o + limit));
                    ack.on_sack_sent(deadline);
                    oldest = None;
                }
                now = next;
                oldest.get_or_insert(now);
                let sack = ack.on_data(now, arrival);
                if arrival != Arrival::default() {
                    prop_assert!(sack);
                }
                prop_assert!(ack.pending_packets() <= ack.config().every);
                prop_assert_eq!(ack.deadline(), oldest.map(|o| o + limit));
                if sack {
                    ack.on_sack_sent(now);
                    oldest = None;
                    prop_assert_eq!(ack.deadline(), None);
                }
            }
        }
    }
}
