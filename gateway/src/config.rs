//! The gateway's configuration: serde structs with defaults, read from a TOML file,
//! then one [`GatewayConfig::validate`] that names the offending key. Unknown keys
//! are errors. Durations are milliseconds, as in the origin's file.
//!
//! `config/gateway.toml` documents every key with its default.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gateway_transport::{AssociationConfig, BackendChoice};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::ebpf::XdpMode;

pub use crate::cache::config::CacheConfig;
pub use crate::prefetch::PrefetchConfig;

/// Why the configuration cannot be used (shared with the other daemon).
pub use daemon_config::ConfigError;
/// `[log]`, alike in both daemons' files.
pub use daemon_config::{LogConfig, LogFormat};

/// Everything the gateway needs to run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// The transparent listener that TPROXY delivers to.
    pub listen: ListenConfig,
    /// The nftables table and policy routing the gateway installs.
    pub intercept: InterceptConfig,
    /// Traffic the gateway leaves alone.
    pub bypass: BypassConfig,
    /// The browser-facing HTTP/1.1 side: limits and time-outs.
    pub http: HttpConfig,
    /// Plain TCP toward original destinations (unmapped, bypassed, failed open).
    pub direct: DirectConfig,
    /// The persistent HTTP cache (`[cache]`, docs/cache.md).
    pub cache: CacheConfig,
    /// The HTML-driven prefetch queue (`[prefetch]`, docs/prefetch.md).
    pub prefetch: PrefetchConfig,
    /// Taking the origins' pushes into the cache (`[push]`, docs/protocol.md
    /// "PUSH").
    pub push: PushConfig,
    /// The operator's endpoint: metrics, cache stats and purge (`[admin]`).
    pub admin: AdminConfig,
    /// The XDP cross-check of per-stream accounting (`[ebpf]`).
    pub ebpf: EbpfConfig,
    /// How log lines are written: text or JSON (`[log]`).
    pub log: LogConfig,
    /// SCTP origins and the destinations they serve (`[[origin]]`).
    #[serde(rename = "origin")]
    pub origins: Vec<OriginEntry>,
}

/// `[listen]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// The port TPROXY steers intercepted flows to. The listener binds it on every
    /// address in `addresses` with `IP_TRANSPARENT`.
    pub port: u16,
    /// Addresses to bind; `0.0.0.0` and `::` (IPv6 only) by default.
    pub addresses: Vec<IpAddr>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            port: 3129,
            addresses: vec![IpAddr::from([0, 0, 0, 0]), IpAddr::from([0u16; 8])],
        }
    }
}

/// `[intercept]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InterceptConfig {
    /// Install the nftables table and policy routes at start and remove them at
    /// exit. `false` for people who load `config/nftables.nft` themselves.
    pub manage: bool,
    /// LAN interfaces whose arriving TCP is intercepted. Empty means every
    /// interface but loopback.
    pub lan_interfaces: Vec<String>,
    /// Destination TCP ports intercepted.
    pub ports: Vec<u16>,
    /// Name of the gateway's own nftables table (family `inet`).
    pub table: String,
    /// Mark TPROXY puts on intercepted packets; the policy rule routes it locally.
    pub tproxy_mark: u32,
    /// Routing table that holds the `local` default routes for `tproxy_mark`.
    pub route_table: u32,
    /// Priority of the policy routing rules (`ip rule ... priority`).
    pub rule_priority: u32,
    /// `SO_MARK` on the gateway's own upstream sockets; the rules let it pass.
    pub upstream_mark: u32,
    /// The intercepted port whose flows are TLS (443 on a real LAN): the table
    /// intercepts it only for the `destinations` of the `[[origin]]`s, and
    /// those flows are tunnelled to the origin by SNI, never parsed as HTTP
    /// (docs/gateway.md, "HTTPS"). None: every intercepted port is HTTP.
    /// It must be one of `ports`.
    pub tls_port: Option<u16>,
}

impl Default for InterceptConfig {
    fn default() -> Self {
        Self {
            manage: true,
            lan_interfaces: Vec::new(),
            ports: vec![80],
            table: "sctp_gateway".to_owned(),
            tproxy_mark: 0x5c7_0001,
            route_table: 3129,
            rule_priority: 3129,
            upstream_mark: 0x5c7_0002,
            tls_port: None,
        }
    }
}

/// `[bypass]`: never intercepted (CIDRs, in the nft rules) or never sent to an
/// origin or cache (Host names, decided per request).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BypassConfig {
    /// Destination networks left untouched by the rules.
    pub destinations: Vec<IpNet>,
    /// Client networks left untouched by the rules.
    pub clients: Vec<IpNet>,
    /// Host names forwarded directly to the original destination. A leading `*.`
    /// matches every subdomain.
    pub hosts: Vec<String>,
}

/// The request head's field count hyper parses on the stack (its default).
pub const DEFAULT_MAX_HEADER_FIELDS: usize = 100;
/// The largest `http.max_header_fields` accepted, a count.
pub const MAX_HEADER_FIELDS_LIMIT: usize = 10_000;

/// `[http]`: the browser-facing side.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Largest request head (request line and headers), bytes; above it: 431.
    pub max_header_bytes: usize,
    /// Most header fields in a request head, a count; above it: 431.
    /// [`DEFAULT_MAX_HEADER_FIELDS`] keeps hyper's buffer on the stack; any
    /// other value moves it to the heap, one allocation per request.
    pub max_header_fields: usize,
    /// Longest request target, bytes; above it: 414.
    pub max_uri_bytes: usize,
    /// Largest request body, bytes; above it: 413.
    pub max_body_bytes: u64,
    /// A client must send a whole request head within this long, counted from the
    /// connection's start or the end of the previous response; otherwise the
    /// connection is closed. This also ends idle keep-alive connections.
    #[serde(with = "gateway_transport::duration_ms")]
    pub header_timeout: Duration,
    /// A request body must arrive whole within this long; otherwise: 408.
    #[serde(with = "gateway_transport::duration_ms")]
    pub body_timeout: Duration,
    /// Browser connections served at once; further ones wait in the backlog.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_header_bytes: 32 * 1024,
            max_header_fields: DEFAULT_MAX_HEADER_FIELDS,
            max_uri_bytes: 8 * 1024,
            max_body_bytes: 16 * 1024 * 1024,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
        }
    }
}

/// `[direct]`: plain TCP to the original destination.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectConfig {
    /// Give up connecting after this long (the browser gets 502).
    #[serde(with = "gateway_transport::duration_ms")]
    pub connect_timeout: Duration,
    /// Give up when the response head has not arrived within this long (504).
    #[serde(with = "gateway_transport::duration_ms")]
    pub response_timeout: Duration,
}

impl Default for DirectConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(60),
        }
    }
}

/// `[admin]`: the operator's endpoint (`crate::admin`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve the endpoint at all.
    pub enabled: bool,
    /// Where. Keep it on loopback unless the network in front is trusted.
    pub listen: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_ADMIN_PORT)),
        }
    }
}

/// The admin endpoint's default port, next to the listener's 3129.
pub const DEFAULT_ADMIN_PORT: u16 = 3130;

/// Shortest FEEDBACK interval accepted in the configuration.
pub const MIN_FEEDBACK_INTERVAL: Duration = Duration::from_millis(1);
/// Longest FEEDBACK interval accepted: beyond it the origin's view of a slow
/// browser is too old to protect anyone.
pub const MAX_FEEDBACK_INTERVAL: Duration = Duration::from_secs(1);
/// Most pushes `push.in_flight` may keep open at once.
pub const MAX_PUSHES_IN_FLIGHT: u32 = 1024;
/// Most pages `push.pages` may remember the closure of.
pub const MAX_PUSH_PAGES_REMEMBERED: usize = 1 << 20;

/// `[push]`: the origins' pushes into the cache (issue 31). Push needs the
/// cache: with `cache.enabled = false` it is not announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConfig {
    /// Announce PUSH in HELLO, grant pushes and invite them for pages.
    pub enabled: bool,
    /// Pushes open at once per association: the first MAX_PUSHES grant, and
    /// one more granted as each push ends. 1 to [`MAX_PUSHES_IN_FLIGHT`].
    pub in_flight: u32,
    /// Pushes invited per page (PUSH_BUDGET's `max_pushes`), at least 1.
    pub max_per_page: u16,
    /// Body bytes all of a page's pushes may carry (PUSH_BUDGET's
    /// `max_bytes`), at least 1.
    pub max_bytes_per_page: u32,
    /// Pages whose closure (the URLs pushed for them) is remembered, least
    /// recently used forgotten first: what the held entries of a PUSH_BUDGET
    /// are read from. 1 to [`MAX_PUSH_PAGES_REMEMBERED`].
    pub pages: usize,
}

impl Default for PushConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            in_flight: 32,
            max_per_page: 128,
            max_bytes_per_page: 8 << 20,
            pages: 4096,
        }
    }
}

/// `[push]`.
fn validate_push(p: &PushConfig) -> Result<(), ConfigError> {
    if !(1..=MAX_PUSHES_IN_FLIGHT).contains(&p.in_flight) {
        return invalid(
            "push.in_flight",
            "between 1 and 1024 (each open push holds a response queue)",
        );
    }
    if p.max_per_page == 0 {
        return invalid(
            "push.max_per_page",
            "at least 1 (turn push off with push.enabled = false)",
        );
    }
    if p.max_bytes_per_page == 0 {
        return invalid(
            "push.max_bytes_per_page",
            "at least 1 (turn push off with push.enabled = false)",
        );
    }
    if !(1..=MAX_PUSH_PAGES_REMEMBERED).contains(&p.pages) {
        return invalid("push.pages", "between 1 and 1048576");
    }
    Ok(())
}

/// `[origin.feedback]`: per-stream backlog reports to the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FeedbackConfig {
    /// Announce FEEDBACK in HELLO and send it (to an origin that announced it).
    pub enabled: bool,
    /// Shortest time between two FEEDBACK messages, while any backlog changes.
    #[serde(with = "gateway_transport::duration_ms")]
    pub interval: Duration,
}

impl Default for FeedbackConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: Duration::from_millis(20),
        }
    }
}

/// One `[[origin]]`: an SCTP origin and what it serves.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginEntry {
    /// Name used in logs.
    pub name: String,
    /// The origin's SCTP address (for userspace SCTP, its UDP address).
    pub address: SocketAddr,
    /// Destination networks whose requests go to this origin.
    #[serde(default)]
    pub destinations: Vec<IpNet>,
    /// Host names whose requests go to this origin (only when the Host header
    /// matches the original destination; see docs/gateway.md).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Transport backend: auto, kernel, userspace, framed-tcp or quic.
    #[serde(default)]
    pub backend: BackendChoice,
    /// When the origin is unreachable, send its destinations straight to the
    /// original destination over TCP instead of answering 502.
    #[serde(default = "default_true")]
    pub fail_open: bool,
    /// First delay before reconnecting a dead association; doubles up to
    /// `reconnect_max`.
    #[serde(
        default = "default_reconnect_min",
        with = "gateway_transport::duration_ms"
    )]
    pub reconnect_min: Duration,
    /// Longest delay between reconnection attempts.
    #[serde(
        default = "default_reconnect_max",
        with = "gateway_transport::duration_ms"
    )]
    pub reconnect_max: Duration,
    /// A request whose response head has not arrived within this long is
    /// abandoned (RESET toward the origin, 504 toward the browser).
    #[serde(
        default = "default_response_timeout",
        with = "gateway_transport::duration_ms"
    )]
    pub response_timeout: Duration,
    /// Association settings (streams, time-outs, buffers).
    #[serde(default)]
    pub transport: AssociationConfig,
    /// Per-stream backlog reports to the origin (`[origin.feedback]`).
    #[serde(default)]
    pub feedback: FeedbackConfig,
}

fn default_true() -> bool {
    true
}

fn default_reconnect_min() -> Duration {
    Duration::from_millis(250)
}

fn default_reconnect_max() -> Duration {
    Duration::from_secs(10)
}

fn default_response_timeout() -> Duration {
    Duration::from_secs(60)
}

impl GatewayConfig {
    /// Reads `path`; unknown keys and type mismatches are errors naming the key.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        daemon_config::from_file(path)
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        daemon_config::from_toml(text)
    }

    /// Rejects values that cannot work, naming the key. Sections are checked
    /// in the file's order; the first bad value is the one reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.listen.port == 0 {
            return invalid("listen.port", "must be a port number above 0");
        }
        if self.listen.addresses.is_empty() {
            return invalid("listen.addresses", "at least one address is needed");
        }
        validate_intercept(&self.intercept, self.listen.port)?;
        if let Some(bad) = self.bypass.hosts.iter().find(|h| !valid_host_pattern(h)) {
            return invalid(
                "bypass.hosts",
                &format!("`{bad}` is no host name or `*.` pattern"),
            );
        }
        if let Err(e) = self.cache.validate() {
            return invalid(&format!("cache.{}", e.key), &e.reason);
        }
        if let Err(e) = self.prefetch.validate() {
            return invalid(&format!("prefetch.{}", e.key), &e.reason);
        }
        validate_push(&self.push)?;
        validate_http(&self.http)?;
        for (n, origin) in self.origins.iter().enumerate() {
            validate_origin(n, origin, &self.origins[..n])?;
        }
        Ok(())
    }
}

/// The error for `key`, as every check below returns it.
fn invalid(key: &str, reason: &str) -> Result<(), ConfigError> {
    Err(ConfigError::invalid(key, reason))
}

/// `[intercept]`; its ports must not take `listen_port`.
fn validate_intercept(i: &InterceptConfig, listen_port: u16) -> Result<(), ConfigError> {
    if i.ports.is_empty() {
        return invalid("intercept.ports", "at least one port is needed");
    }
    if i.ports.contains(&listen_port) {
        return invalid("intercept.ports", "must not contain listen.port");
    }
    if let Some(port) = i.tls_port
        && !i.ports.contains(&port)
    {
        return invalid("intercept.tls_port", "must be one of intercept.ports");
    }
    if i.table.is_empty()
        || !i
            .table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return invalid("intercept.table", "letters, digits and `_` only");
    }
    if i.tproxy_mark == 0 || i.upstream_mark == 0 || i.tproxy_mark == i.upstream_mark {
        return invalid(
            "intercept.upstream_mark",
            "tproxy_mark and upstream_mark must be distinct and non-zero",
        );
    }
    // 0 is unspec, 253..=255 are default, main and local.
    if i.route_table == 0 || (253..=255).contains(&i.route_table) {
        return invalid("intercept.route_table", "0, 253, 254 and 255 are reserved");
    }
    if i.rule_priority == 0 {
        return invalid("intercept.rule_priority", "0 is the local table's rule");
    }
    if let Some(bad) = i.lan_interfaces.iter().find(|n| !valid_ifname(n)) {
        return invalid(
            "intercept.lan_interfaces",
            &format!("`{bad}` is no interface name"),
        );
    }
    Ok(())
}

/// `[http]`.
fn validate_http(h: &HttpConfig) -> Result<(), ConfigError> {
    // hyper's read buffer cannot be smaller than 8 KiB.
    if h.max_header_bytes < 8192 {
        return invalid("http.max_header_bytes", "at least 8192");
    }
    if h.header_timeout.is_zero() || h.body_timeout.is_zero() {
        return invalid("http.header_timeout", "time-outs must be above zero");
    }
    if !(1..=MAX_HEADER_FIELDS_LIMIT).contains(&h.max_header_fields) {
        return invalid(
            "http.max_header_fields",
            "between 1 and 10000 (each field of a head costs parser memory)",
        );
    }
    if h.max_uri_bytes < 64 {
        return invalid("http.max_uri_bytes", "at least 64");
    }
    if h.max_connections == 0 {
        return invalid("http.max_connections", "at least 1");
    }
    Ok(())
}

/// The `n`th `[[origin]]`; `earlier` are the ones before it, whose names it
/// must not repeat.
fn validate_origin(
    n: usize,
    origin: &OriginEntry,
    earlier: &[OriginEntry],
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("origin[{n}].{k}");
    if origin.name.is_empty() {
        return invalid(&key("name"), "must not be empty");
    }
    if earlier.iter().any(|o| o.name == origin.name) {
        return invalid(&key("name"), "names must be unique");
    }
    if origin.destinations.is_empty() && origin.hosts.is_empty() {
        return invalid(
            &key("destinations"),
            "an origin needs destinations or hosts",
        );
    }
    if let Some(bad) = origin.hosts.iter().find(|h| !valid_host_pattern(h)) {
        return invalid(
            &key("hosts"),
            &format!("`{bad}` is no host name or `*.` pattern"),
        );
    }
    if origin.response_timeout.is_zero() {
        return invalid(&key("response_timeout"), "must be above zero");
    }
    let interval = origin.feedback.interval;
    if !(MIN_FEEDBACK_INTERVAL..=MAX_FEEDBACK_INTERVAL).contains(&interval) {
        return invalid(&key("feedback.interval"), "must be 1 to 1000 ms");
    }
    if origin.reconnect_min.is_zero() || origin.reconnect_max < origin.reconnect_min {
        return invalid(
            &key("reconnect_max"),
            "need 0 < reconnect_min <= reconnect_max",
        );
    }
    if let Err(gateway_transport::TransportError::Config { key: k, reason }) =
        origin.transport.validate()
    {
        return invalid(&key(&format!("transport.{k}")), &reason);
    }
    // The gateway connects: what the chosen backend needs for that (QUIC:
    // the origin's certificate pin).
    if let BackendChoice::Fixed(kind) = origin.backend
        && let Err(gateway_transport::TransportError::Config { key: k, reason }) =
            origin.transport.validate_connecting(kind)
    {
        return invalid(&key(&format!("transport.{k}")), &reason);
    }
    if origin.transport.streams < 2 {
        return invalid(
            &key("transport.streams"),
            "at least 2: stream 0 carries control, data needs one more",
        );
    }
    Ok(())
}

/// Linux interface names: 1 to 15 bytes, no `/`, no whitespace.
fn valid_ifname(name: &str) -> bool {
    (1..16).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
}

/// A host name, optionally with a leading `*.`; ASCII letters, digits, `-` and `.`.
pub(crate) fn valid_host_pattern(pattern: &str) -> bool {
    let name = pattern.strip_prefix("*.").unwrap_or(pattern);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Whether `host` (lower-case, no port) matches `pattern` (`name` or `*.name`).
pub(crate) fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            // Bytes, not str slices: `host` comes from the network and need not
            // be ASCII.
            let (h, s) = (host.as_bytes(), suffix.as_bytes());
            h.len() > s.len() + 1
                && h[h.len() - s.len() - 1] == b'.'
                && h[h.len() - s.len()..].eq_ignore_ascii_case(s)
        }
        None => host.eq_ignore_ascii_case(pattern),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        GatewayConfig::default()
            .validate()
            .expect("defaults are valid");
    }

    #[test]
    fn unknown_key_is_named() {
        let err = GatewayConfig::from_toml("[http]\nmax_headers = 3\n").expect_err("must fail");
        assert!(err.to_string().contains("max_headers"), "{err}");
    }

    #[test]
    fn origin_table_parses() {
        let c = GatewayConfig::from_toml(
            r#"
            [[origin]]
            name = "demo"
            address = "192.0.2.2:9899"
            destinations = ["203.0.113.0/24", "2001:db8:203::/48"]
            hosts = ["*.demo.example"]
            [origin.transport]
            streams = 8
            "#,
        )
        .expect("parses");
        c.validate().expect("valid");
        assert_eq!(c.origins.len(), 1);
        assert!(c.origins[0].fail_open);
        assert_eq!(c.origins[0].transport.streams, 8);
    }

    #[test]
    fn udp_offload_is_auto_true_or_false() {
        use gateway_transport::UdpOffload;
        let origin = |value: &str| {
            format!(
                r#"
                [[origin]]
                name = "demo"
                address = "192.0.2.2:9899"
                destinations = ["203.0.113.0/24"]
                [origin.transport.userspace]
                udp_offload = {value}
                "#
            )
        };
        for (value, want) in [
            (r#""auto""#, UdpOffload::Auto),
            ("true", UdpOffload::On),
            ("false", UdpOffload::Off),
        ] {
            let c = GatewayConfig::from_toml(&origin(value)).expect("parses");
            assert_eq!(
                c.origins[0].transport.userspace.udp_offload, want,
                "{value}"
            );
        }
        let err = GatewayConfig::from_toml(&origin(r#""yes""#))
            .expect_err("not a choice")
            .to_string();
        assert!(err.contains("udp_offload"), "{err}");
        assert_eq!(
            gateway_transport::AssociationConfig::default()
                .userspace
                .udp_offload,
            UdpOffload::Auto
        );
    }

    #[test]
    fn origin_feedback_has_defaults_and_checks_its_keys() {
        let origin = |feedback: &str| {
            format!(
                "[[origin]]\nname = \"demo\"\naddress = \"192.0.2.2:9899\"\n\
                 destinations = [\"203.0.113.0/24\"]\n[origin.feedback]\n{feedback}\n"
            )
        };
        let c = GatewayConfig::from_toml(&origin("")).expect("parses");
        c.validate().expect("valid");
        assert_eq!(c.origins[0].feedback, FeedbackConfig::default());
        assert!(c.origins[0].feedback.enabled);
        let c =
            GatewayConfig::from_toml(&origin("enabled = false\ninterval = 50")).expect("parses");
        assert!(!c.origins[0].feedback.enabled);
        assert_eq!(c.origins[0].feedback.interval, Duration::from_millis(50));
        let err = GatewayConfig::from_toml(&origin("intervall = 50")).expect_err("unknown key");
        assert!(err.to_string().contains("intervall"), "{err}");
        let c = GatewayConfig::from_toml(&origin("interval = 0")).expect("parses");
        let err = c.validate().expect_err("zero interval").to_string();
        assert!(err.contains("origin[0].feedback.interval"), "{err}");
    }

    #[test]
    fn quic_origin_needs_the_pinned_certificate() {
        let origin = |pin: &str| {
            format!(
                r#"
                [[origin]]
                name = "demo"
                address = "192.0.2.2:9899"
                destinations = ["203.0.113.0/24"]
                backend = "quic"
                [origin.transport.quic]
                {pin}
                "#
            )
        };
        let c = GatewayConfig::from_toml(&origin("")).expect("parses");
        let err = c.validate().expect_err("no pin").to_string();
        assert!(err.contains("transport.quic.server_cert_sha256"), "{err}");
        let c =
            GatewayConfig::from_toml(&origin(r#"server_cert_sha256 = "12:34""#)).expect("parses");
        let err = c.validate().expect_err("short pin").to_string();
        assert!(err.contains("transport.quic.server_cert_sha256"), "{err}");
        let pin = format!(r#"server_cert_sha256 = "{}""#, "ab".repeat(32));
        let c = GatewayConfig::from_toml(&origin(&pin)).expect("parses");
        c.validate().expect("valid with a pin");
        assert_eq!(c.origins[0].backend.to_string(), "quic");
    }

    #[test]
    fn invalid_values_name_their_key() {
        let mut c = GatewayConfig::default();
        c.intercept.ports = vec![3129];
        let err = c.validate().expect_err("must fail").to_string();
        assert!(err.contains("intercept.ports"), "{err}");

        let mut c = GatewayConfig::default();
        c.bypass.hosts = vec!["bad host".into()];
        let err = c.validate().expect_err("must fail").to_string();
        assert!(err.contains("bypass.hosts"), "{err}");

        for fields in [0, MAX_HEADER_FIELDS_LIMIT + 1] {
            let mut c = GatewayConfig::default();
            c.http.max_header_fields = fields;
            let err = c.validate().expect_err("must fail").to_string();
            assert!(err.contains("http.max_header_fields"), "{err}");
        }
    }

    #[test]
    fn push_has_defaults_and_checks_its_keys() {
        let c = GatewayConfig::from_toml("").expect("parses");
        assert_eq!(c.push, PushConfig::default());
        assert!(!c.push.enabled, "off until measured (issue 31)");
        assert_eq!(
            (
                c.push.in_flight,
                c.push.max_per_page,
                c.push.max_bytes_per_page
            ),
            (32, 128, 8 << 20)
        );
        let c =
            GatewayConfig::from_toml("[push]\nenabled = true\nin_flight = 4\n").expect("parses");
        c.validate().expect("valid");
        assert_eq!((c.push.enabled, c.push.in_flight), (true, 4));
        let err = GatewayConfig::from_toml("[push]\nin_flite = 4\n").expect_err("unknown key");
        assert!(err.to_string().contains("in_flite"), "{err}");
        for (key, text) in [
            ("push.in_flight", "in_flight = 0"),
            ("push.in_flight", "in_flight = 1025"),
            ("push.max_per_page", "max_per_page = 0"),
            ("push.max_bytes_per_page", "max_bytes_per_page = 0"),
            ("push.pages", "pages = 0"),
        ] {
            let c = GatewayConfig::from_toml(&format!("[push]\n{text}\n")).expect("parses");
            let err = c.validate().expect_err(text).to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        let err = GatewayConfig::from_toml("[push]\nmax_per_page = 70000\n")
            .expect_err("beyond the wire's u16");
        assert!(err.to_string().contains("max_per_page"), "{err}");
    }

    #[test]
    fn host_patterns() {
        assert!(host_matches("demo.example", "DEMO.example"));
        assert!(host_matches("*.demo.example", "a.demo.example"));
        assert!(!host_matches("*.demo.example", "demo.example"));
        assert!(!host_matches("*.demo.example", "xdemo.example"));
        assert!(!host_matches("demo.example", "a.demo.example"));
    }
}

/// `[ebpf]`: the optional kernel-side cross-check of per-stream accounting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EbpfConfig {
    /// The `ebpf-programs` object (`cargo xtask build-ebpf`); none: userspace only.
    pub object: Option<PathBuf>,
    /// The WAN interface the origins' packets arrive on (`xdp_sctp` attaches here).
    pub interface: Option<String>,
    /// How `xdp_sctp` attaches: auto, generic or driver.
    pub xdp_mode: XdpModeChoice,
}

/// `ebpf.xdp_mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpModeChoice {
    /// Native if the driver supports it, else generic.
    #[default]
    Auto,
    /// Generic (skb) XDP.
    Generic,
    /// Native (driver) XDP.
    Driver,
}

impl From<XdpModeChoice> for XdpMode {
    fn from(choice: XdpModeChoice) -> Self {
        match choice {
            XdpModeChoice::Auto => XdpMode::Auto,
            XdpModeChoice::Generic => XdpMode::Generic,
            XdpModeChoice::Driver => XdpMode::Driver,
        }
    }
}
