//! The settings of an association, as the `[transport]` table of either
//! daemon's configuration file spells them. A leaf of the crate: it checks
//! what every backend shares ([`AssociationConfig::validate_common`]); each
//! backend checks its own settings (`Backend::validate`), and `lib` runs both.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::TransportError;

/// Whether the userspace backend batches UDP datagrams (GSO on send, GRO on
/// receive). In the configuration: `"auto"`, `true` or `false`.
///
/// Batching cuts CPU per GB about fivefold (docs/transport.md, "Batched UDP
/// I/O"). One peer could not take it: a Linux 6.1 kernel whose SCTP listens
/// for UDP encapsulation stopped dead receiving our GSO datagrams over
/// loopback (a kernel-side failure not yet understood). On a real path GSO
/// segments are split before the wire, so only a kernel SCTP on this same
/// host (same network namespace) can receive one whole; `Auto` therefore
/// batches unless this host's kernel SCTP listens for UDP encapsulation
/// (`net.sctp.udp_port` non-zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpOffload {
    /// On, unless this host's kernel SCTP listens for UDP encapsulation.
    #[default]
    Auto,
    /// Always (where the kernel offers GSO and GRO).
    On,
    /// Never: one datagram per send and per receive buffer.
    Off,
}

impl UdpOffload {
    /// Whether to batch on this host, now.
    pub fn enabled(self) -> bool {
        match self {
            UdpOffload::On => true,
            UdpOffload::Off => false,
            UdpOffload::Auto => !kernel_sctp_encapsulates(),
        }
    }
}

/// Whether this network namespace's kernel SCTP listens for UDP-encapsulated
/// packets. No sctp module, or port 0: no.
fn kernel_sctp_encapsulates() -> bool {
    crate::host::kernel_sctp_udp_port().is_some()
}

impl Serialize for UdpOffload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            UdpOffload::Auto => serializer.serialize_str("auto"),
            UdpOffload::On => serializer.serialize_bool(true),
            UdpOffload::Off => serializer.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for UdpOffload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Flag(bool),
            Word(String),
        }
        match Repr::deserialize(deserializer)? {
            Repr::Flag(true) => Ok(UdpOffload::On),
            Repr::Flag(false) => Ok(UdpOffload::Off),
            Repr::Word(word) if word == "auto" => Ok(UdpOffload::Auto),
            Repr::Word(word) => Err(serde::de::Error::custom(format!(
                "expected \"auto\", true or false, not \"{word}\""
            ))),
        }
    }
}

/// Default UDP port for SCTP over UDP (RFC 6951, IANA `sctp-tunneling`).
pub const SCTP_UDP_PORT: u16 = 9899;

/// Settings common to every backend. Field names match the `[transport]` table of
/// the gateway's and origin's config files.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AssociationConfig {
    /// Outbound streams to ask for, counting stream 0 (1..=65535).
    pub streams: u16,
    /// Most inbound streams to grant the peer, counting stream 0.
    pub max_inbound_streams: u16,
    /// Give up connecting after this long.
    #[serde(with = "duration_ms")]
    pub connect_timeout: Duration,
    /// Probe an idle peer this often (SCTP HEARTBEAT; framed TCP: a ping frame;
    /// QUIC: a PING frame).
    #[serde(with = "duration_ms")]
    pub heartbeat_interval: Duration,
    /// Declare the peer unreachable after this long without hearing from it.
    #[serde(with = "duration_ms")]
    pub idle_timeout: Duration,
    /// `send` waits while a stream's queued bytes exceed this, bytes. Kept small so
    /// that the sender's scheduler, not the transport's queue, decides the order.
    pub max_buffered_per_stream: usize,
    /// Largest message sent or accepted, bytes.
    pub max_message: usize,
    /// Socket send buffer, bytes; `None` keeps the system default.
    pub send_buffer: Option<usize>,
    /// Socket receive buffer, bytes; `None` keeps the system default.
    pub recv_buffer: Option<usize>,
    /// Kernel backend only: encapsulate in UDP to this remote port (RFC 6951,
    /// Linux >= 5.11); `None` sends native SCTP (IP protocol 132).
    pub udp_encapsulation_port: Option<u16>,
    /// Userspace SCTP: longest a SACK is delayed, milliseconds (RFC 9260 allows
    /// at most 500; 200 is its typical value).
    #[serde(with = "duration_ms")]
    pub ack_delay: Duration,
    /// Userspace SCTP: initial congestion window, bytes; `None` keeps RFC 9260's
    /// min(4 * MTU, max(2 * MTU, 4380)).
    pub initial_window: Option<usize>,
    /// Userspace SCTP: retransmission time-out before any RTT measurement,
    /// milliseconds.
    #[serde(with = "duration_ms")]
    pub rto_initial: Duration,
    /// Userspace SCTP: smallest retransmission time-out, milliseconds. Below
    /// RFC 9260's 1 s for quicker loss recovery, above the peer's delayed SACK.
    #[serde(with = "duration_ms")]
    pub rto_min: Duration,
    /// Userspace SCTP: largest retransmission time-out, back-off included,
    /// milliseconds.
    #[serde(with = "duration_ms")]
    pub rto_max: Duration,
    /// Userspace SCTP: the stream scheduler (RFC 8260): `fcfs`, `rr`,
    /// `rr-packet`, `priority`, `fc` or `wfq`. `fcfs` by default: the sender's
    /// own scheduler (the origin's) decides the order, and a FIFO transport
    /// keeps it, as kernel SCTP's default does; `rr` interleaves what is queued.
    pub scheduler: String,
    /// Userspace SCTP: largest SCTP packet (UDP payload) sent, bytes.
    pub mtu: usize,
    /// Userspace SCTP: offer and accept I-DATA (RFC 8260), so that a large
    /// message on one stream does not hold back the others' small ones.
    /// Interleaving also needs a scheduler that moves between streams (`rr`).
    pub idata: bool,
    /// Kernel SCTP: offer I-DATA, best effort (Linux offers it only where
    /// `net.sctp.intl_enable` is 1; otherwise it is logged at debug level and
    /// the association uses DATA). Off by default: Linux numbers the fragments
    /// of an I-DATA message differently from RFC 8260 and from our userspace
    /// stack (its second fragment carries FSN 0, not 1), so a kernel end that
    /// negotiates I-DATA with a userspace end cannot exchange a fragmented
    /// message. Use it only when both ends are kernel SCTP.
    pub kernel_idata: bool,
    /// Userspace SCTP: the congestion controller, `reno` (RFC 9260), `cubic`
    /// (RFC 9438) or `bbr` (model-based: random loss is not congestion).
    /// QUIC: the same names pick quinn's NewReno, CUBIC and its experimental
    /// BBR, so that the two backends can be compared with the same kind of
    /// controller.
    /// `bbr` by default: on 80 ms links with 1 % loss the page loads in 0.85x
    /// nginx's time with it and 3.8x with Reno (docs/transport.md).
    pub congestion: String,
    /// Userspace SCTP, `cubic` only: how many CUBIC flows the association
    /// stands for (1 to 6, the connections a browser opens to one host).
    pub flows: u32,
    /// Userspace SCTP: time-based loss detection and a tail-loss probe
    /// (RACK-TLP, RFC 8985) instead of RFC 9260's three miss indications
    /// alone.
    pub rack_tlp: bool,
    /// Userspace SCTP: ask for an immediate SACK (RFC 7053) on the last packet
    /// of a burst.
    pub sack_immediately: bool,
    /// Userspace SCTP: space DATA packets at the congestion window's rate
    /// over the round trip instead of sending the window as one burst.
    pub pacing: bool,
    /// Userspace SCTP: batch UDP datagrams with GSO on send and GRO on receive
    /// where the kernel offers them (see [`UdpOffload`]).
    pub udp_offload: UdpOffload,
    /// QUIC, connecting side: the SHA-256 of the listener's certificate, 64 hex
    /// digits (colons between bytes allowed), as the listener logs at start. The
    /// client accepts exactly that certificate and nothing else; required for
    /// `transport = "quic"`.
    pub quic_server_cert_sha256: Option<String>,
    /// Userspace SCTP, listening: how many associations peers may open, in
    /// all and per source, and the receive memory they share (see
    /// `sctp::Limits`). Not read from `[transport]`: the origin sets it from
    /// its `[limits]`.
    #[serde(skip)]
    pub listener_limits: sctp::Limits,
}

impl Default for AssociationConfig {
    fn default() -> Self {
        Self {
            streams: 32,
            max_inbound_streams: 32,
            connect_timeout: Duration::from_secs(5),
            heartbeat_interval: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_buffered_per_stream: 64 * 1024,
            max_message: 4 * 1024 * 1024 + 64 * 1024,
            send_buffer: None,
            recv_buffer: None,
            udp_encapsulation_port: None,
            ack_delay: Duration::from_millis(200),
            initial_window: None,
            rto_initial: Duration::from_millis(1000),
            rto_min: Duration::from_millis(500),
            rto_max: Duration::from_millis(10_000),
            scheduler: "fcfs".to_owned(),
            mtu: sctp::DEFAULT_MTU,
            idata: true,
            kernel_idata: false,
            congestion: "bbr".to_owned(),
            flows: 1,
            rack_tlp: true,
            sack_immediately: true,
            pacing: true,
            udp_offload: UdpOffload::Auto,
            quic_server_cert_sha256: None,
            listener_limits: sctp::Limits::default(),
        }
    }
}

impl AssociationConfig {
    /// Rejects values of the settings every backend shares, naming the
    /// setting ([`AssociationConfig::validate`] adds each backend's own).
    pub(crate) fn validate_common(&self) -> Result<(), TransportError> {
        let bad = |key, reason: &str| {
            Err(TransportError::Config {
                key,
                reason: reason.to_owned(),
            })
        };
        if self.streams == 0 {
            return bad("streams", "must be at least 1 (stream 0 carries control)");
        }
        if self.max_inbound_streams == 0 {
            return bad("max_inbound_streams", "must be at least 1");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout", "must be above zero");
        }
        if self.heartbeat_interval.is_zero() {
            return bad("heartbeat_interval", "must be above zero");
        }
        if self.idle_timeout <= self.heartbeat_interval {
            return bad("idle_timeout", "must be longer than heartbeat_interval");
        }
        if self.max_buffered_per_stream == 0 {
            return bad("max_buffered_per_stream", "must be above zero");
        }
        if self.max_message == 0 || self.max_message > 64 * 1024 * 1024 {
            return bad("max_message", "must be between 1 byte and 64 MiB");
        }
        if self.initial_window == Some(0) {
            return bad("initial_window", "must be above zero (or left unset)");
        }
        if self.rto_min.is_zero() {
            return bad("rto_min", "must be above zero");
        }
        if self.rto_initial < self.rto_min {
            return bad("rto_initial", "must be at least rto_min");
        }
        if self.rto_max < self.rto_min {
            return bad("rto_max", "must be at least rto_min");
        }
        Ok(())
    }
}

/// Serde for `Duration` as whole milliseconds, the unit of every duration in the
/// project's config files. Use as `#[serde(with = "gateway_transport::duration_ms")]`.
pub mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes whole milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    /// Reads whole milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
