//! The settings of an association, as the `[transport]` table of either
//! daemon's configuration file spells them. A leaf of the crate: it checks
//! what every backend shares ([`AssociationConfig::validate_common`]); each
//! backend checks its own settings (`Backend::validate`), and `lib` runs both.

use std::time::Duration;

use sctp::stream_scheduler::StreamSchedulerKind;
use serde::{Deserialize, Serialize};

use crate::error::TransportError;

/// Whether the userspace backend batches UDP datagrams (GSO on send, GRO on
/// receive). In the configuration (`[transport.userspace] udp_offload`):
/// `"auto"`, `true` or `false`.
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

/// The settings of an association: the `[transport]` table of the gateway's
/// and the origin's config files. The fields at the top apply to every
/// backend; `userspace`, `kernel` and `quic` are each one backend's own
/// sub-table (`[transport.userspace]`, ...), read whatever backend is chosen
/// and checked by that backend.
///
/// The keys of those sub-tables used to sit flat in `[transport]`
/// (`congestion`, `kernel_idata`, `quic_server_cert_sha256`, ...). They are
/// still read there, with a deprecation line each (see
/// [`AssociationConfig::deprecated_keys`]).
#[derive(Debug, Clone, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_buffer: Option<usize>,
    /// Socket receive buffer, bytes; `None` keeps the system default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recv_buffer: Option<usize>,
    /// The userspace SCTP backend's own settings, `[transport.userspace]`.
    pub userspace: UserspaceConfig,
    /// The kernel SCTP backend's own settings, `[transport.kernel]`.
    pub kernel: KernelConfig,
    /// The QUIC backend's own settings, `[transport.quic]`.
    pub quic: QuicConfig,
    /// Userspace SCTP, listening: how many associations peers may open, in
    /// all and per source, and the receive memory they share (see
    /// `sctp::Limits`). Not read from `[transport]`: the origin sets it from
    /// its `[limits]`.
    #[serde(skip)]
    pub listener_limits: sctp::Limits,
    /// Old flat keys this configuration was read with (see
    /// [`AssociationConfig::deprecated_keys`]).
    #[serde(skip)]
    pub deprecated: DeprecatedKeys,
}

/// `[transport.userspace]`: our SCTP core over UDP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserspaceConfig {
    /// Longest a SACK is delayed, milliseconds (RFC 9260 allows at most 500;
    /// 200 is its typical value).
    #[serde(with = "duration_ms")]
    pub ack_delay: Duration,
    /// Initial congestion window, bytes; `None` keeps RFC 9260's
    /// min(4 * MTU, max(2 * MTU, 4380)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_window: Option<usize>,
    /// Retransmission time-out before any RTT measurement, milliseconds.
    #[serde(with = "duration_ms")]
    pub rto_initial: Duration,
    /// Smallest retransmission time-out, milliseconds. Below RFC 9260's 1 s
    /// for quicker loss recovery, above the peer's delayed SACK.
    #[serde(with = "duration_ms")]
    pub rto_min: Duration,
    /// Largest retransmission time-out, back-off included, milliseconds.
    #[serde(with = "duration_ms")]
    pub rto_max: Duration,
    /// The SCTP stream scheduler (RFC 8260), `stream_scheduler`: `fcfs`,
    /// `rr`, `rr-packet`, `priority`, `fc` or `wfq`. `fcfs` by default: the
    /// sender's own order (the origin's response scheduler) decides, and a
    /// FIFO transport keeps it, as kernel SCTP's default does; `rr`
    /// interleaves what is queued. Called `scheduler` before, a name still
    /// read with a deprecation line.
    #[serde(with = "by_name")]
    pub stream_scheduler: StreamSchedulerKind,
    /// `scheduler`, `stream_scheduler`'s name before: read so that an old
    /// file still works, moved into `stream_scheduler` (with a deprecation
    /// line, [`AssociationConfig::deprecated_keys`]) when `[transport]` is
    /// read, so always `None` after. (A field rather than a serde alias: an
    /// alias would leave no trace to warn about.)
    #[serde(
        rename = "scheduler",
        default,
        skip_serializing,
        deserialize_with = "some_by_name"
    )]
    pub old_scheduler: Option<StreamSchedulerKind>,
    /// Largest SCTP packet (UDP payload) sent, bytes.
    pub mtu: usize,
    /// Offer and accept I-DATA (RFC 8260), so that a large message on one
    /// stream does not hold back the others' small ones. Interleaving also
    /// needs a scheduler that moves between streams (`rr`).
    pub idata: bool,
    /// The congestion controller. `bbr` by default: on 80 ms links with 1 %
    /// loss the page loads in 0.85x nginx's time with it and 3.8x with Reno
    /// (docs/transport.md).
    pub congestion: Congestion,
    /// `cubic` only: how many CUBIC flows the association stands for (1 to
    /// 6, the connections a browser opens to one host).
    pub flows: u32,
    /// Time-based loss detection and a tail-loss probe (RACK-TLP, RFC 8985)
    /// instead of RFC 9260's three miss indications alone.
    pub rack_tlp: bool,
    /// Ask for an immediate SACK (RFC 7053) on the last packet of a burst.
    pub sack_immediately: bool,
    /// Space DATA packets at the congestion window's rate over the round
    /// trip instead of sending the window as one burst.
    pub pacing: bool,
    /// Batch UDP datagrams with GSO on send and GRO on receive where the
    /// kernel offers them (see [`UdpOffload`]).
    pub udp_offload: UdpOffload,
}

impl Default for UserspaceConfig {
    fn default() -> Self {
        Self {
            ack_delay: Duration::from_millis(200),
            initial_window: None,
            rto_initial: Duration::from_millis(1000),
            rto_min: Duration::from_millis(500),
            rto_max: Duration::from_millis(10_000),
            stream_scheduler: StreamSchedulerKind::Fcfs,
            old_scheduler: None,
            mtu: sctp::DEFAULT_MTU,
            idata: true,
            congestion: Congestion::Bbr,
            flows: 1,
            rack_tlp: true,
            sack_immediately: true,
            pacing: true,
            udp_offload: UdpOffload::Auto,
        }
    }
}

/// `[transport.kernel]`: Linux SCTP.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KernelConfig {
    /// Encapsulate in UDP to this remote port (RFC 6951, Linux >= 5.11);
    /// `None` sends native SCTP (IP protocol 132).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_encapsulation_port: Option<u16>,
    /// Offer I-DATA, best effort (Linux offers it only where
    /// `net.sctp.intl_enable` is 1; otherwise it is logged at debug level and
    /// the association uses DATA). Off by default: Linux numbers the fragments
    /// of an I-DATA message differently from RFC 8260 and from our userspace
    /// stack (its second fragment carries FSN 0, not 1), so a kernel end that
    /// negotiates I-DATA with a userspace end cannot exchange a fragmented
    /// message. Use it only when both ends are kernel SCTP.
    pub idata: bool,
}

/// `[transport.quic]`: QUIC (quinn).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuicConfig {
    /// Connecting side: the SHA-256 of the listener's certificate, 64 hex
    /// digits (colons between bytes allowed), as the listener logs at start.
    /// The client accepts exactly that certificate and nothing else; required
    /// for `backend = "quic"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cert_sha256: Option<String>,
    /// quinn's controller under the same names as ours: NewReno, CUBIC and
    /// its experimental BBR, so that the two backends can be compared with
    /// the same kind of controller. `bbr` by default, as ours.
    pub congestion: Congestion,
}

impl Default for QuicConfig {
    fn default() -> Self {
        Self {
            server_cert_sha256: None,
            congestion: Congestion::Bbr,
        }
    }
}

/// A congestion controller, by the name the configuration uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Congestion {
    /// RFC 9260's (Reno-like: halve on loss).
    Reno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// Model-based (BBR): random loss is not congestion.
    Bbr,
}

impl std::fmt::Display for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Congestion::Reno => "reno",
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
        })
    }
}

/// Serde for a type by its `Display` and `FromStr` names (the stream
/// scheduler), so that a wrong name is refused when the file is read.
mod by_name {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub(super) fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr<Err = String>,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The old flat keys of `[transport]` a configuration still used, each with
/// the key that replaces it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeprecatedKeys(Vec<(&'static str, &'static str)>);

impl DeprecatedKeys {
    /// `(old key, new key)` pairs, in the order of [`FLAT_KEYS`].
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.0.iter().copied()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Every flat key of `[transport]` that moved into a backend's sub-table, and
/// every key of a sub-table that was renamed, with its new place.
pub const FLAT_KEYS: [(&str, &str); 18] = [
    ("ack_delay", "userspace.ack_delay"),
    ("initial_window", "userspace.initial_window"),
    ("rto_initial", "userspace.rto_initial"),
    ("rto_min", "userspace.rto_min"),
    ("rto_max", "userspace.rto_max"),
    ("scheduler", "userspace.stream_scheduler"),
    ("mtu", "userspace.mtu"),
    ("idata", "userspace.idata"),
    ("congestion", "userspace.congestion and quic.congestion"),
    ("flows", "userspace.flows"),
    ("rack_tlp", "userspace.rack_tlp"),
    ("sack_immediately", "userspace.sack_immediately"),
    ("pacing", "userspace.pacing"),
    ("udp_offload", "userspace.udp_offload"),
    ("udp_encapsulation_port", "kernel.udp_encapsulation_port"),
    ("kernel_idata", "kernel.idata"),
    ("quic_server_cert_sha256", "quic.server_cert_sha256"),
    ("userspace.scheduler", "userspace.stream_scheduler"),
];

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
            userspace: UserspaceConfig::default(),
            kernel: KernelConfig::default(),
            quic: QuicConfig::default(),
            listener_limits: sctp::Limits::default(),
            deprecated: DeprecatedKeys::default(),
        }
    }
}

/// What `[transport]` may hold: the current keys and sub-tables, and the old
/// flat keys (each `None` unless the file still uses it).
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct TransportTable {
    streams: u16,
    max_inbound_streams: u16,
    #[serde(with = "duration_ms")]
    connect_timeout: Duration,
    #[serde(with = "duration_ms")]
    heartbeat_interval: Duration,
    #[serde(with = "duration_ms")]
    idle_timeout: Duration,
    max_buffered_per_stream: usize,
    max_message: usize,
    send_buffer: Option<usize>,
    recv_buffer: Option<usize>,
    userspace: UserspaceConfig,
    kernel: KernelConfig,
    quic: QuicConfig,
    // The old flat keys.
    ack_delay: Option<u64>,
    initial_window: Option<usize>,
    rto_initial: Option<u64>,
    rto_min: Option<u64>,
    rto_max: Option<u64>,
    #[serde(deserialize_with = "some_by_name")]
    scheduler: Option<StreamSchedulerKind>,
    mtu: Option<usize>,
    idata: Option<bool>,
    congestion: Option<Congestion>,
    flows: Option<u32>,
    rack_tlp: Option<bool>,
    sack_immediately: Option<bool>,
    pacing: Option<bool>,
    udp_offload: Option<UdpOffload>,
    udp_encapsulation_port: Option<u16>,
    kernel_idata: Option<bool>,
    quic_server_cert_sha256: Option<String>,
}

fn some_by_name<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<StreamSchedulerKind>, D::Error> {
    by_name::deserialize(d).map(Some)
}

impl Default for TransportTable {
    fn default() -> Self {
        let d = AssociationConfig::default();
        Self {
            streams: d.streams,
            max_inbound_streams: d.max_inbound_streams,
            connect_timeout: d.connect_timeout,
            heartbeat_interval: d.heartbeat_interval,
            idle_timeout: d.idle_timeout,
            max_buffered_per_stream: d.max_buffered_per_stream,
            max_message: d.max_message,
            send_buffer: d.send_buffer,
            recv_buffer: d.recv_buffer,
            userspace: d.userspace,
            kernel: d.kernel,
            quic: d.quic,
            ack_delay: None,
            initial_window: None,
            rto_initial: None,
            rto_min: None,
            rto_max: None,
            scheduler: None,
            mtu: None,
            idata: None,
            congestion: None,
            flows: None,
            rack_tlp: None,
            sack_immediately: None,
            pacing: None,
            udp_offload: None,
            udp_encapsulation_port: None,
            kernel_idata: None,
            quic_server_cert_sha256: None,
        }
    }
}

impl<'de> Deserialize<'de> for AssociationConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let t = TransportTable::deserialize(deserializer)?;
        let mut config = AssociationConfig {
            streams: t.streams,
            max_inbound_streams: t.max_inbound_streams,
            connect_timeout: t.connect_timeout,
            heartbeat_interval: t.heartbeat_interval,
            idle_timeout: t.idle_timeout,
            max_buffered_per_stream: t.max_buffered_per_stream,
            max_message: t.max_message,
            send_buffer: t.send_buffer,
            recv_buffer: t.recv_buffer,
            userspace: t.userspace,
            kernel: t.kernel,
            quic: t.quic,
            listener_limits: sctp::Limits::default(),
            deprecated: DeprecatedKeys::default(),
        };
        // An old flat key, where given, wins over the sub-table's value: a
        // file that still has it was written before the sub-tables existed.
        let mut moved = Vec::new();
        let mut take = |old: &'static str, present: bool| {
            if present {
                let new = FLAT_KEYS
                    .iter()
                    .find(|(key, _)| *key == old)
                    .map_or(old, |(_, new)| new);
                moved.push((old, new));
            }
        };
        let u = &mut config.userspace;
        take("ack_delay", t.ack_delay.is_some());
        if let Some(ms) = t.ack_delay {
            u.ack_delay = Duration::from_millis(ms);
        }
        take("initial_window", t.initial_window.is_some());
        if t.initial_window.is_some() {
            u.initial_window = t.initial_window;
        }
        take("rto_initial", t.rto_initial.is_some());
        if let Some(ms) = t.rto_initial {
            u.rto_initial = Duration::from_millis(ms);
        }
        take("rto_min", t.rto_min.is_some());
        if let Some(ms) = t.rto_min {
            u.rto_min = Duration::from_millis(ms);
        }
        take("rto_max", t.rto_max.is_some());
        if let Some(ms) = t.rto_max {
            u.rto_max = Duration::from_millis(ms);
        }
        take("scheduler", t.scheduler.is_some());
        if let Some(scheduler) = t.scheduler {
            u.stream_scheduler = scheduler;
        }
        take("mtu", t.mtu.is_some());
        if let Some(mtu) = t.mtu {
            u.mtu = mtu;
        }
        take("idata", t.idata.is_some());
        if let Some(idata) = t.idata {
            u.idata = idata;
        }
        take("congestion", t.congestion.is_some());
        if let Some(congestion) = t.congestion {
            u.congestion = congestion;
            config.quic.congestion = congestion;
        }
        let u = &mut config.userspace;
        take("flows", t.flows.is_some());
        if let Some(flows) = t.flows {
            u.flows = flows;
        }
        take("rack_tlp", t.rack_tlp.is_some());
        if let Some(on) = t.rack_tlp {
            u.rack_tlp = on;
        }
        take("sack_immediately", t.sack_immediately.is_some());
        if let Some(on) = t.sack_immediately {
            u.sack_immediately = on;
        }
        take("pacing", t.pacing.is_some());
        if let Some(on) = t.pacing {
            u.pacing = on;
        }
        take("udp_offload", t.udp_offload.is_some());
        if let Some(offload) = t.udp_offload {
            u.udp_offload = offload;
        }
        take("udp_encapsulation_port", t.udp_encapsulation_port.is_some());
        if t.udp_encapsulation_port.is_some() {
            config.kernel.udp_encapsulation_port = t.udp_encapsulation_port;
        }
        take("kernel_idata", t.kernel_idata.is_some());
        if let Some(on) = t.kernel_idata {
            config.kernel.idata = on;
        }
        take(
            "quic_server_cert_sha256",
            t.quic_server_cert_sha256.is_some(),
        );
        if t.quic_server_cert_sha256.is_some() {
            config.quic.server_cert_sha256 = t.quic_server_cert_sha256;
        }
        let old = config.userspace.old_scheduler.take();
        take("userspace.scheduler", old.is_some());
        if let Some(scheduler) = old {
            config.userspace.stream_scheduler = scheduler;
        }
        config.deprecated = DeprecatedKeys(moved);
        Ok(config)
    }
}

impl AssociationConfig {
    /// The old flat keys this configuration was read with, each with the key
    /// that replaces it, for one warning line each at start:
    /// `[transport] congestion is deprecated: write userspace.congestion and
    /// quic.congestion`.
    pub fn deprecated_keys(&self) -> &DeprecatedKeys {
        &self.deprecated
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<AssociationConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn sub_tables_are_read_into_typed_settings() {
        let c = read(
            "streams = 8\n\
             [userspace]\ncongestion = \"cubic\"\nstream_scheduler = \"rr-packet\"\nudp_offload = false\n\
             [kernel]\nidata = true\nudp_encapsulation_port = 9899\n\
             [quic]\ncongestion = \"reno\"\nserver_cert_sha256 = \"ab\"\n",
        )
        .expect("reads");
        assert_eq!(c.streams, 8);
        assert_eq!(c.userspace.congestion, Congestion::Cubic);
        assert_eq!(
            c.userspace.stream_scheduler,
            StreamSchedulerKind::RoundRobinPerPacket
        );
        assert_eq!(c.userspace.udp_offload, UdpOffload::Off);
        assert!(c.kernel.idata);
        assert_eq!(c.kernel.udp_encapsulation_port, Some(9899));
        assert_eq!(c.quic.congestion, Congestion::Reno);
        assert_eq!(c.quic.server_cert_sha256.as_deref(), Some("ab"));
        assert!(c.deprecated_keys().is_empty());
    }

    #[test]
    fn old_flat_keys_still_work_and_are_reported() {
        let c = read(
            "congestion = \"reno\"\nscheduler = \"rr\"\nrto_min = 300\n\
             kernel_idata = true\nquic_server_cert_sha256 = \"cd\"\n\
             [userspace]\nmtu = 1400\n",
        )
        .expect("reads");
        assert_eq!(c.userspace.congestion, Congestion::Reno);
        assert_eq!(c.quic.congestion, Congestion::Reno);
        assert_eq!(
            c.userspace.stream_scheduler,
            StreamSchedulerKind::RoundRobin
        );
        assert_eq!(c.userspace.rto_min, Duration::from_millis(300));
        assert_eq!(c.userspace.mtu, 1400);
        assert!(c.kernel.idata);
        assert_eq!(c.quic.server_cert_sha256.as_deref(), Some("cd"));
        let old: Vec<&str> = c.deprecated_keys().iter().map(|(old, _)| old).collect();
        assert_eq!(
            old,
            [
                "rto_min",
                "scheduler",
                "congestion",
                "kernel_idata",
                "quic_server_cert_sha256"
            ]
        );
        assert!(
            c.deprecated_keys()
                .iter()
                .any(|pair| pair == ("kernel_idata", "kernel.idata"))
        );
    }

    #[test]
    fn the_stream_schedulers_old_name_is_read_and_reported() {
        let c = read("[userspace]\nscheduler = \"wfq\"\nmtu = 1400\n").expect("reads");
        assert_eq!(
            c.userspace.stream_scheduler,
            StreamSchedulerKind::WeightedFair
        );
        assert_eq!(c.userspace.mtu, 1400);
        let pairs: Vec<_> = c.deprecated_keys().iter().collect();
        assert_eq!(
            pairs,
            [("userspace.scheduler", "userspace.stream_scheduler")]
        );
        let c = read("scheduler = \"rr\"\n").expect("reads");
        assert_eq!(
            c.userspace.stream_scheduler,
            StreamSchedulerKind::RoundRobin
        );
        let pairs: Vec<_> = c.deprecated_keys().iter().collect();
        assert_eq!(pairs, [("scheduler", "userspace.stream_scheduler")]);
    }

    #[test]
    fn every_flat_key_is_still_accepted() {
        for (old, _) in FLAT_KEYS {
            let value = match old {
                "scheduler" | "userspace.scheduler" => "\"fcfs\"",
                "congestion" => "\"bbr\"",
                "quic_server_cert_sha256" => "\"ab\"",
                "udp_offload" | "idata" | "kernel_idata" | "rack_tlp" | "sack_immediately"
                | "pacing" => "true",
                _ => "1000",
            };
            let c = read(&format!("{old} = {value}\n")).unwrap_or_else(|e| panic!("{old}: {e}"));
            assert_eq!(c.deprecated_keys().iter().count(), 1, "{old}");
        }
    }

    #[test]
    fn bad_names_and_unknown_keys_are_refused_naming_the_key() {
        let err = read("[userspace]\ncongestion = \"vegas\"\n").expect_err("vegas");
        assert!(err.contains("congestion") && err.contains("vegas"), "{err}");
        let err = read("[quic]\ncongestion = \"vegas\"\n").expect_err("vegas");
        assert!(err.contains("congestion") && err.contains("vegas"), "{err}");
        for old_or_new in ["scheduler", "stream_scheduler"] {
            let err = read(&format!("[userspace]\n{old_or_new} = \"lifo\"\n")).expect_err("lifo");
            assert!(
                err.contains(old_or_new) && err.contains("unknown stream scheduler `lifo`"),
                "{err}"
            );
        }
        let err = read("scheduler = \"lifo\"\n").expect_err("lifo");
        assert!(err.contains("unknown stream scheduler `lifo`"), "{err}");
        for text in [
            "colour = 1\n",
            "[userspace]\ncolour = 1\n",
            "[kernel]\ncolour = 1\n",
            "[quic]\ncolour = 1\n",
        ] {
            let err = read(text).expect_err(text);
            assert!(err.contains("colour"), "{err}");
        }
    }

    #[test]
    fn defaults_serialize_as_sub_tables_and_read_back() {
        let text = toml::to_string(&AssociationConfig::default()).expect("serializes");
        assert!(
            text.contains("[userspace]") && text.contains("[quic]"),
            "{text}"
        );
        let back = read(&text).expect("reads back");
        assert_eq!(back.userspace.stream_scheduler, StreamSchedulerKind::Fcfs);
        assert_eq!(back.userspace.congestion, Congestion::Bbr);
        assert!(back.deprecated_keys().is_empty());
    }
}
