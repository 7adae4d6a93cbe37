//! Congestion control: the [`Controller`] trait the association calls at
//! defined points, the [`ControllerFactory`] that builds one per association,
//! and [`Reno`], RFC 9260's own algorithm (sections 7.2.1 slow start, 7.2.2
//! congestion avoidance, 7.2.3 reaction to loss and time-out, 7.2.4 fast
//! recovery). The shape follows quinn-proto's `congestion` module so that
//! CUBIC, a BBR-family controller and pacing can be added later as one file
//! each, behind the same two traits.
//!
//! The calling protocol, from the association's side:
//!
//! ```text
//!   DATA goes out ─────────────── on_sent(now, bytes)
//!   SACK newly acks DATA ──────── on_ack(now, &Acked { .. })
//!   fast retransmit decided ──── on_congestion_event(now, sent, false, lost)
//!   T3-rtx expires ────────────── on_congestion_event(now, sent, true, lost)
//!   idle for >= 1 RTO ─────────── on_idle(now, rto)   (as often as it likes)
//!   path MTU changes ──────────── on_mtu(mtu)
//!   may I send? ───────────────── window() against the flight size
//! ```
//!
//! A controller never sees TSNs: "before the recovery period" is judged by
//! send times, as quinn-proto does. A loss or an acknowledgement concerning
//! data sent at or before the instant the window was last reduced belongs to
//! that reduction's recovery period.
//!
//! Units: windows and byte counts are bytes of DATA chunks as RFC 9260 counts
//! the flight size (chunk header included, padding excluded). "MTU" is what
//! `on_mtu` was last given, the largest SCTP packet on the path. RFC 9260 states
//! some increments in PMDCS (the MTU less the SCTP, IP and DATA headers); using
//! the MTU instead grows the window by a few dozen bytes more per step, which
//! keeps one implementation for DATA and I-DATA.
//!
//! [`Reno`]'s invariants:
//! - the window is never below one MTU;
//! - the slow-start threshold, once reduced, is never below four MTUs;
//! - it grows by at most one MTU per SACK, and only while the window was in
//!   use and the data acknowledged was sent after the last reduction;
//! - it is reduced at most once per recovery period by miss indications, and
//!   always by a time-out.

use std::fmt;
use std::time::{Duration, Instant};

mod bbr;
mod cubic;
mod reno;

pub use bbr::{
    BW_WINDOW_ROUNDS, Bbr, BbrConfig, LOSS_THRESH, MIN_RTT_WINDOW, Mode as BbrMode,
    PROBE_RTT_INTERVAL, Phase as BbrPhase,
};
pub use cubic::{Cubic, CubicConfig, MAX_FLOWS};
pub use reno::{Reno, RenoConfig};

/// The floor of RFC 9260's initial window, min(4*MTU, max(2*MTU, 4380
/// bytes)), in bytes.
pub const INITIAL_WINDOW_BYTES: u64 = 4380;

/// RFC 9260 7.2.1's L, the most MTUs one SACK may grow the window by in slow
/// start (as RFC 3465's L = 1).
pub(crate) const SLOW_START_LIMIT_MTUS: u64 = 1;

/// The slow-start threshold after any reduction is at least this many MTUs
/// (RFC 9260 7.2.3: max(cwnd/2, 4*MTU)); idle decay stops at it too (7.2.1).
pub(crate) const MIN_SSTHRESH_MTUS: u64 = 4;

/// The window after a T3-rtx time-out, in MTUs (RFC 9260 7.2.3).
pub(crate) const LOSS_WINDOW_MTUS: u64 = 1;

/// What a SACK newly acknowledged, for `Controller::on_ack`.
#[derive(Debug, Clone, Copy)]
pub struct Acked {
    /// DATA bytes newly acknowledged by this SACK (cumulatively or in gap
    /// blocks), chunk sizes as RFC 9260 counts the flight size.
    pub bytes: u64,
    /// When the most recently sent of the newly acknowledged chunks was sent.
    pub sent: Instant,
    /// Bytes in flight before this SACK was processed.
    pub flight_before: u64,
    /// The SACK advanced the cumulative TSN ack point.
    pub cum_advanced: bool,
    /// Smoothed RTT after this SACK's sample, if any sample exists.
    pub smoothed_rtt: Option<Duration>,
    /// This SACK's own RTT sample, if it gave one (Karn's rule: never from a
    /// retransmitted chunk, so a model-based controller can trust it).
    pub rtt_sample: Option<Duration>,
    /// Of `bytes`, those sent before the newest chunk an earlier SACK had
    /// already acknowledged: when they arrived is unknown and may lie far
    /// back (a peer reports a bounded number of gap blocks, and a block it
    /// left out is reported only once the holes below it are filled), so
    /// they are no evidence of the path's current delivery rate.
    pub late_bytes: u64,
}

/// Congestion control, called by the association at defined points.
pub trait Controller: Send + fmt::Debug {
    /// `bytes` of DATA (new or retransmitted) went out at `now`.
    fn on_sent(&mut self, now: Instant, bytes: u64);

    /// A SACK newly acknowledged data.
    fn on_ack(&mut self, now: Instant, acked: &Acked);

    /// Loss was detected: by miss indications (fast retransmit, `persistent
    /// == false`) or by a T3-rtx time-out (`persistent == true`). `sent` is
    /// when the most recently sent lost chunk was sent; an event for data sent
    /// before the current recovery period began is ignored (one reduction per
    /// window, RFC 9260 7.2.3/7.2.4 fast recovery), except a time-out, which
    /// always acts.
    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    );

    /// `bytes` of DATA were taken for lost, by any means (miss indications,
    /// RACK, a time-out), including inside a recovery period that
    /// [`Controller::on_congestion_event`] is not called for again. A model
    /// that counts the share of what is lost needs every loss; a window
    /// that halves once per window needs only the event.
    fn on_lost(&mut self, now: Instant, bytes: u64) {
        let _ = (now, bytes);
    }

    /// The last congestion event (not a time-out) proved spurious: every
    /// chunk retransmitted in its recovery came back reported as a duplicate
    /// TSN, so the originals had arrived. A controller that cut its window
    /// for it restores what it had (RFC 9438 4.9); one that does not read a
    /// single loss as congestion need not act.
    fn on_spurious_congestion(&mut self, now: Instant) {
        let _ = now;
    }

    /// The sender has nothing more to send although the window has room,
    /// with `flight` bytes in flight: what goes out until that flight is
    /// delivered says how fast the application is, not the path (the BBR
    /// draft's `C.app_limited`). Called whenever the sender runs dry.
    fn on_app_limited(&mut self, flight: u64) {
        let _ = flight;
    }

    /// Nothing was sent for an RTO or more while data could have been (RFC
    /// 9260 7.2.1 last paragraph): the window decays.
    fn on_idle(&mut self, now: Instant, rto: Duration) {
        let _ = (now, rto);
    }

    /// The path MTU (the largest SCTP packet) changed.
    fn on_mtu(&mut self, mtu: usize);

    /// The congestion window, bytes.
    fn window(&self) -> u64;

    /// Slow-start threshold, bytes (for reports).
    fn ssthresh(&self) -> u64;

    /// Pacing rate in bytes per second, if the controller paces.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// A short name for logs and reports ("reno").
    fn name(&self) -> &'static str;

    /// A copy of this controller with all its state, boxed (a trait object
    /// cannot be `Clone` itself).
    fn clone_box(&self) -> Box<dyn Controller>;
}

impl Clone for Box<dyn Controller> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// Builds a controller for each new association.
pub trait ControllerFactory: Send + Sync + fmt::Debug {
    /// A controller for an association that starts at `now` on a path whose
    /// largest SCTP packet is `mtu` bytes.
    fn build(&self, now: Instant, mtu: usize) -> Box<dyn Controller>;
}

/// RFC 9260's initial window for a path of `mtu`-byte packets:
/// min(4*MTU, max(2*MTU, 4380 bytes)) (section 7.2.1).
pub fn initial_window(mtu: usize) -> u64 {
    let mtu = to_bytes(mtu);
    (4 * mtu).min((2 * mtu).max(INITIAL_WINDOW_BYTES))
}

/// An MTU as a byte count (`usize` fits in `u64` on every target we build for).
pub(crate) fn to_bytes(mtu: usize) -> u64 {
    u64::try_from(mtu).unwrap_or(u64::MAX)
}

/// RFC 9260 7.2.1's idle decay, shared by the window-based controllers: the
/// window falls to max(cwnd/2, 4*MTU) once per RTO without sending, never
/// rising. Whole RTOs are counted from `idle_since`, which moves on by the
/// RTOs charged, so calling it as often as the association likes is exact.
/// Returns whether any RTO was charged.
pub(crate) fn idle_decay(
    cwnd: &mut u64,
    idle_since: &mut Instant,
    mtu: u64,
    now: Instant,
    rto: Duration,
) -> bool {
    if rto.is_zero() {
        return false;
    }
    let periods = now.saturating_duration_since(*idle_since).as_nanos() / rto.as_nanos();
    if periods == 0 {
        return false;
    }
    let floor = MIN_SSTHRESH_MTUS * mtu;
    // Halving stops at the floor long before 64 rounds.
    for _ in 0..periods.min(64) {
        let decayed = (*cwnd / 2).max(floor);
        if decayed >= *cwnd {
            break;
        }
        *cwnd = decayed;
    }
    let charged = rto.saturating_mul(u32::try_from(periods).unwrap_or(u32::MAX));
    *idle_since = idle_since.checked_add(charged).unwrap_or(now).min(now);
    true
}
