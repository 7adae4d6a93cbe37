//! What an endpoint and its associations are configured with. Every limit has
//! its unit in its name or its doc; `Config::default()` follows RFC 9260's
//! protocol parameters (section 16) except where a doc says why not.

use std::sync::Arc;
use std::time::Duration;

use crate::ack::AckConfig;
use crate::congestion::{ControllerFactory, RenoConfig};
use crate::rtt::RttConfig;
use crate::stream_scheduler::StreamSchedulerKind;

/// The largest SCTP packet (UDP payload) we build by default, bytes: fits a
/// 1500-byte Ethernet MTU under an IPv6 (40) and UDP (8) header, so under IPv4
/// too.
pub const DEFAULT_MTU: usize = 1452;
/// The smallest packet size we accept as a configured MTU, bytes: IPv6's
/// minimum link MTU (1280) less the IPv6 and UDP headers.
pub const MIN_MTU: usize = 1232;
/// The most a peer's Cookie Preservative may add to a state cookie's life by
/// default: a few seconds cover a staleness of one slow round trip and RFC
/// 9260 5.2.6's "no more than 1 second beyond the measured RTT", while a
/// cookie that stays valid for long is a longer window for its replay.
pub const DEFAULT_MAX_COOKIE_EXTENSION: Duration = Duration::from_secs(5);

/// An endpoint's and its associations' settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Outbound streams we ask for (the peer may grant fewer).
    pub outbound_streams: u16,
    /// Inbound streams we accept at most.
    pub max_inbound_streams: u16,
    /// Our receive buffer, bytes: the window we advertise when it is empty.
    pub recv_window: u32,
    /// The largest message we accept, bytes (below `recv_window`: delivery is
    /// of whole messages only).
    pub max_message: usize,
    /// The largest SCTP packet we build, bytes.
    pub mtu: usize,
    /// Offer and accept I-DATA (RFC 8260), so messages of different streams
    /// interleave.
    pub idata: bool,
    /// The stream scheduler (RFC 8260 section 3).
    pub stream_scheduler: StreamSchedulerKind,
    /// Retransmission time-out bounds (RFC 9260 6.3).
    pub rtt: RttConfig,
    /// When SACKs go out.
    pub ack: AckConfig,
    /// The congestion controller each association gets.
    pub congestion: Arc<dyn ControllerFactory>,
    /// Time-based loss detection (RACK, RFC 8985 6) beside RFC 9260's three
    /// miss indications.
    pub rack: bool,
    /// A tail-loss probe (RFC 8985 7) about two round trips after the last
    /// send, so a lost tail is found without waiting for the RTO.
    pub tail_loss_probe: bool,
    /// Space DATA packets at the congestion window's rate over the round
    /// trip instead of sending the window as one burst.
    pub pacing: bool,
    /// Set the SACK-IMMEDIATELY flag (RFC 7053) on the last DATA packet of a
    /// burst, so the peer's delayed SACK does not hold the sender back.
    pub sack_immediately: bool,
    /// A HEARTBEAT goes out after this long without hearing from the peer.
    pub heartbeat_interval: Duration,
    /// The peer is unreachable after this long without hearing from it.
    pub idle_timeout: Duration,
    /// INIT and COOKIE ECHO are sent at most this many times
    /// (RFC 9260 Max.Init.Retransmits is 8).
    pub max_init_transmits: u32,
    /// Consecutive T3-rtx time-outs and unanswered heartbeats after which the
    /// peer is unreachable (RFC 9260 Association.Max.Retrans).
    pub max_retransmits: u32,
    /// How long an issued state cookie is good for (RFC 9260 Valid.Cookie.Life).
    pub cookie_lifetime: Duration,
    /// The most a peer's Cookie Preservative (RFC 9260 5.2.6) adds to
    /// `cookie_lifetime`; a larger request is cut to this, zero ignores it.
    pub max_cookie_extension: Duration,
    /// Tests only: the initial TSN every association of the endpoint starts
    /// with instead of a random one, so a test can start near 2^32 and see
    /// the TSN wrap end to end. `None` (the default, and the only sane
    /// production value): random, as RFC 9260 5.1 asks. The random draw is
    /// made either way, so tags stay what the seed gives.
    #[doc(hidden)]
    pub initial_tsn: Option<u32>,
    /// Tests only: the first MID of every stream, ordered and unordered,
    /// instead of 0, for I-DATA (RFC 8260 2.1 starts at 0). Both ends of a
    /// test must set the same, so that a test can see the 32-bit MID wrap
    /// without 2^32 messages. `None`: 0.
    #[doc(hidden)]
    pub initial_mid: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            outbound_streams: 16,
            max_inbound_streams: 16,
            recv_window: 2 * 1024 * 1024,
            max_message: 1024 * 1024,
            mtu: DEFAULT_MTU,
            idata: true,
            stream_scheduler: StreamSchedulerKind::default(),
            rtt: RttConfig::default(),
            ack: AckConfig::default(),
            congestion: Arc::new(RenoConfig::default()),
            rack: true,
            tail_loss_probe: true,
            sack_immediately: true,
            pacing: true,
            heartbeat_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_init_transmits: 8,
            max_retransmits: 10,
            cookie_lifetime: Duration::from_secs(60),
            max_cookie_extension: DEFAULT_MAX_COOKIE_EXTENSION,
            initial_tsn: None,
            initial_mid: None,
        }
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sctp setting {key}: {reason}")]
pub struct ConfigError {
    /// The setting's name.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl Config {
    /// The life of a state cookie issued to a peer whose INIT asked for
    /// `preservative_ms` more (RFC 9260 5.2.6), in milliseconds: the request
    /// counts up to `max_cookie_extension`, so a peer cannot have a cookie
    /// that stays valid (and replayable) for days.
    pub(crate) fn cookie_life_ms(&self, preservative_ms: Option<u32>) -> u32 {
        let max = u64::try_from(self.max_cookie_extension.as_millis()).unwrap_or(u64::MAX);
        let extension = u64::from(preservative_ms.unwrap_or(0)).min(max);
        let base = u64::try_from(self.cookie_lifetime.as_millis()).unwrap_or(u64::MAX);
        u32::try_from(base.saturating_add(extension)).unwrap_or(u32::MAX)
    }

    /// Rejects settings that cannot work, naming the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key, reason: &str| {
            Err(ConfigError {
                key,
                reason: reason.to_owned(),
            })
        };
        if self.outbound_streams == 0 {
            return err("outbound_streams", "must be at least 1");
        }
        if self.max_inbound_streams == 0 {
            return err("max_inbound_streams", "must be at least 1");
        }
        if self.mtu < MIN_MTU || self.mtu > usize::from(u16::MAX) {
            return err("mtu", &format!("must be between {MIN_MTU} and 65535 bytes"));
        }
        if self.max_message == 0 || self.max_message >= self.recv_window as usize {
            return err(
                "max_message",
                "must be at least 1 and below the receive window",
            );
        }
        if self.rtt.min > self.rtt.max || self.rtt.initial < self.rtt.min {
            return err("rtt", "needs min <= initial and min <= max");
        }
        if self.ack.max_delay > Duration::from_millis(500) {
            return err("ack.max_delay", "RFC 9260 allows at most 500 ms");
        }
        if self.max_init_transmits == 0 || self.max_retransmits == 0 {
            return err("max_retransmits", "must be at least 1");
        }
        Ok(())
    }

    /// The most memory, in allocated bytes, a peer can make one
    /// association's receiver hold with this configuration, whatever it
    /// sends: 2.7 receive windows of payload (twice the window may be held,
    /// each payload pinning at most 4/3 of itself), bookkeeping of at most
    /// 640 bytes per held chunk (a window holds one chunk per 256 bytes,
    /// 4,096 at most: 5 windows' worth for small windows, 5.2 MB at most),
    /// and 0.5 MB for the TSN map. The sender's side holds only what our
    /// own application queued.
    pub fn receive_memory_bound(&self) -> usize {
        crate::recv::memory_bound(self.recv_window, self.max_inbound_streams)
    }
}
