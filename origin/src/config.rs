//! The origin's configuration: serde structs with defaults, read from a TOML file,
//! then command-line overrides, then one [`OriginConfig::validate`] that names the
//! offending key. Unknown keys are errors.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use gateway_transport::{AssociationConfig, BackendChoice};
use serde::{Deserialize, Serialize};

use crate::ebpf::EbpfConfig;
use crate::files::FilesConfig;
use crate::learned::LearnedConfig;
use crate::metrics::MetricsConfig;
use crate::proxy::{ProxyConfig, ProxyConfigError};
use crate::response_scheduler::ResponseSchedulerConfig;
use crate::server::PushConfig;

/// Why the configuration cannot be used (shared with the other daemon).
pub use daemon_config::ConfigError;
/// `[log]`, alike in both daemons' files.
pub use daemon_config::{LogConfig, LogFormat};

/// `[push]`: the driver's keys ([`PushConfig`]: `enabled`, `max_per_page`)
/// and the learned manifest's ([`LearnedConfig`]: the keys starting with
/// `learn`) in one table. Each part refuses a key it does not know, so a
/// misspelt key is still an error.
#[derive(Debug, Clone, Default)]
pub struct PushTable {
    /// What the association driver reads.
    pub driver: PushConfig,
    /// What the files service's learned manifest reads (`crate::learned`).
    pub learned: LearnedConfig,
}

impl<'de> Deserialize<'de> for PushTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let table = toml::Table::deserialize(deserializer)?;
        let (learned, driver): (toml::Table, toml::Table) = table
            .into_iter()
            .partition(|(key, _)| key.starts_with("learn"));
        Ok(PushTable {
            driver: PushConfig::deserialize(toml::Value::Table(driver))
                .map_err(D::Error::custom)?,
            learned: LearnedConfig::deserialize(toml::Value::Table(learned))
                .map_err(D::Error::custom)?,
        })
    }
}

/// Everything the origin needs to run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OriginConfig {
    /// Where to accept associations.
    pub listen: ListenConfig,
    /// Association settings shared with the gateway's.
    pub transport: AssociationConfig,
    /// Which response sends its next chunk (`[response_scheduler]`; not the
    /// SCTP stream scheduler, `transport.userspace.stream_scheduler`).
    pub response_scheduler: ResponseSchedulerConfig,
    /// `[scheduler]`, the old name of `[response_scheduler]`: moved there when
    /// the file is read, and named in [`OriginConfig::deprecated_keys`].
    #[serde(rename = "scheduler")]
    old_scheduler: Option<ResponseSchedulerConfig>,
    /// Old keys this configuration was read with (see
    /// [`OriginConfig::deprecated_keys`]).
    #[serde(skip)]
    deprecated: Vec<(&'static str, &'static str)>,
    /// Request limits.
    pub limits: LimitsConfig,
    /// Pushes (`[push]`; docs/protocol.md, "PUSH"): off by default.
    pub push: PushTable,
    /// The document root; `root` relative to the config file's directory.
    pub files: Option<FilesConfig>,
    /// Reverse-proxy mode: the upstream to forward to (instead of `[files]`).
    pub upstream: Option<ProxyConfig>,
    /// Kernel SCTP: `tc_sctp` for the per-stream depth of the send queue.
    pub ebpf: EbpfConfig,
    /// How log lines are written: text or JSON (`[log]`).
    pub log: LogConfig,
    /// The origin's own `/metrics` endpoint; absent, none.
    pub metrics: Option<MetricsConfig>,
    /// TLS tunnels: certificates per server name and passthrough upstreams;
    /// absent, the origin announces no tunnels.
    pub tls: Option<crate::tls::TlsConfig>,
}

/// `[listen]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// Addresses to listen on, IPv4 and IPv6 (for userspace SCTP, UDP addresses).
    pub addresses: Vec<SocketAddr>,
    /// Transport backend: auto, kernel, userspace, framed-tcp or quic.
    pub backend: BackendChoice,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            addresses: vec![
                SocketAddr::from(([0, 0, 0, 0], gateway_transport::SCTP_UDP_PORT)),
                SocketAddr::from(([0u16; 8], gateway_transport::SCTP_UDP_PORT)),
            ],
            backend: BackendChoice::Auto,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Associations served at once. Userspace SCTP refuses an INIT beyond
    /// it with an ABORT ("Out of Resource"); other transports leave further
    /// peers waiting in the backlog.
    pub max_associations: usize,
    /// Userspace SCTP: associations from one IPv4 address or one IPv6 /64;
    /// beyond it INITs are refused as above. Households behind one carrier
    /// NAT share an address.
    pub max_associations_per_source: usize,
    /// Userspace SCTP: the receive memory all associations of one listener
    /// share, bytes (payload held, with what of its datagram it pins, and
    /// bookkeeping). Past it receivers take only what unblocks delivery, so
    /// they hold less than twice this (docs/security.md).
    pub receive_memory: usize,
    /// Userspace SCTP: INIT ACKs a second to new peers (a token bucket with
    /// a burst of as many); INITs beyond it are dropped unanswered, so a
    /// flood of spoofed INITs costs their decoding only (docs/security.md).
    pub init_acks_per_second: u32,
    /// Requests open at once on one association; more are refused (RESET REFUSED).
    pub max_open_requests: usize,
    /// Body bytes per RESPONSE_BODY message (at most 64 KiB, the protocol's limit).
    pub chunk_size: usize,
    /// Largest request body accepted, bytes (413 above it).
    pub max_request_body: u64,
    /// A request whose response has not started within this long is answered 504.
    #[serde(with = "gateway_transport::duration_ms")]
    pub response_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_associations: 10_000,
            max_associations_per_source: 256,
            receive_memory: 1 << 30,
            init_acks_per_second: gateway_transport::DEFAULT_INIT_ACKS_PER_SECOND,
            max_open_requests: 1024,
            chunk_size: 16 * 1024,
            max_request_body: 16 * 1024 * 1024,
            response_timeout: Duration::from_secs(30),
        }
    }
}

impl OriginConfig {
    /// Reads `path`; unknown keys and type mismatches are errors naming the key.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let mut config: Self = daemon_config::from_file(path)?;
        config.migrate();
        if let (Some(files), Some(dir)) = (&mut config.files, path.parent())
            && files.root.is_relative()
        {
            files.root = dir.join(&files.root);
        }
        if let (Some(tls), Some(dir)) = (&mut config.tls, path.parent()) {
            tls.resolve_paths(dir);
        }
        Ok(config)
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        let mut config: Self = daemon_config::from_toml(text)?;
        config.migrate();
        Ok(config)
    }

    /// Moves what was read under an old name to its new one. An old table,
    /// where given, wins (as the transport's old flat keys do): a file that
    /// still has it was written before the rename.
    fn migrate(&mut self) {
        if let Some(old) = self.old_scheduler.take() {
            self.response_scheduler = old;
            self.deprecated.push(("scheduler", "response_scheduler"));
        }
    }

    /// Old keys or tables this configuration was read with, each with its new
    /// name, for one warning line each at start (the transport's own are
    /// `transport.deprecated_keys()`).
    pub fn deprecated_keys(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.deprecated.iter().copied()
    }

    /// Rejects values that cannot work, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| Err(ConfigError::invalid(key, reason));
        match (&self.files, &self.upstream) {
            (None, None) => {
                return invalid(
                    "files",
                    "a [files] table (document root) or an [upstream] table (reverse proxy) is needed",
                );
            }
            (Some(_), Some(_)) => {
                return invalid("upstream", "[files] and [upstream] exclude each other");
            }
            (Some(files), None) => {
                if let Err(e) = files.validate() {
                    return invalid("files", &e.to_string());
                }
            }
            (None, Some(upstream)) => {
                if let Err(ProxyConfigError::Invalid { key, reason }) = upstream.validate() {
                    return invalid(&format!("upstream.{key}"), &reason);
                }
            }
        }
        if let Some(Err((key, reason))) = self.tls.as_ref().map(crate::tls::TlsConfig::validate) {
            return invalid(&key, &reason);
        }
        if self.listen.addresses.is_empty() {
            return invalid("listen.addresses", "at least one address is needed");
        }
        if let Err(gateway_transport::TransportError::Config { key, reason }) =
            self.transport.validate()
        {
            return invalid(&format!("transport.{key}"), &reason);
        }
        if self.transport.streams < 2 {
            return invalid(
                "transport.streams",
                "at least 2: stream 0 carries control, data needs one more",
            );
        }
        let s = &self.response_scheduler;
        if s.demand_weight == 0 {
            return invalid("response_scheduler.demand_weight", "must be at least 1");
        }
        if s.prefetch_weight == 0 {
            return invalid("response_scheduler.prefetch_weight", "must be at least 1");
        }
        if s.transport_target == 0 {
            return invalid("response_scheduler.transport_target", "must be above zero");
        }
        let l = &self.limits;
        if l.chunk_size == 0 || l.chunk_size > gateway_protocol::MAX_CHUNK {
            return invalid("limits.chunk_size", "must be between 1 and 65536 bytes");
        }
        if l.max_associations == 0 {
            return invalid("limits.max_associations", "must be at least 1");
        }
        if l.max_associations_per_source == 0 {
            return invalid("limits.max_associations_per_source", "must be at least 1");
        }
        if l.init_acks_per_second == 0 {
            return invalid("limits.init_acks_per_second", "must be at least 1");
        }
        if l.receive_memory < 1 << 20 {
            return invalid("limits.receive_memory", "must be at least 1 MiB");
        }
        if l.max_open_requests == 0 {
            return invalid("limits.max_open_requests", "must be at least 1");
        }
        if l.response_timeout.is_zero() {
            return invalid("limits.response_timeout", "must be above zero");
        }
        if let Err(crate::learned::LearnedConfigError::Invalid { key, reason }) =
            self.push.learned.validate()
        {
            return invalid(&format!("push.{key}"), reason);
        }
        if self.push.driver.enabled && self.push.driver.max_per_page == 0 {
            return invalid(
                "push.max_per_page",
                "must be at least 1 (or push.enabled = false)",
            );
        }
        if let Some(metrics) = &self.metrics
            && metrics.listen.port() == 0
        {
            return invalid(
                "metrics.listen",
                "needs a port other than 0: Prometheus must know where to scrape",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response_scheduler::ResponsePolicyKind;

    #[test]
    fn defaults_with_a_root_are_valid() {
        let config = OriginConfig {
            files: Some(FilesConfig::new("/srv/www")),
            ..OriginConfig::default()
        };
        config.validate().expect("defaults validate");
        let err = OriginConfig::default().validate().expect_err("no root");
        assert!(err.to_string().contains("files"), "{err}");
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        for table in ["response_scheduler", "scheduler"] {
            let err =
                OriginConfig::from_toml(&format!("[{table}]\npolicy = \"scf\"\nwieght = 3\n"))
                    .expect_err("unknown key");
            assert!(err.to_string().contains("wieght"), "{err}");
        }
        let err = OriginConfig::from_toml("[listne]\n").expect_err("unknown table");
        assert!(err.to_string().contains("listne"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("[response_scheduler]\npolicy = \"fastest\"\n", "fastest"),
            ("[limits]\nchunk_size = 100000\n", "limits.chunk_size"),
            ("[transport]\nstreams = 1\n", "transport.streams"),
            ("[transport]\nidle_timeout = 1\n", "transport.idle_timeout"),
            ("[listen]\naddresses = []\n", "listen.addresses"),
            (
                "[response_scheduler]\nprefetch_weight = 0\n",
                "response_scheduler.prefetch_weight",
            ),
            (
                "[scheduler]\nprefetch_weight = 0\n",
                "response_scheduler.prefetch_weight",
            ),
            ("[metrics]\nlisten = \"127.0.0.1:0\"\n", "metrics.listen"),
            ("[metrics]\nlisten = \"localhost\"\n", "listen"),
            ("[metrics]\n", "listen"),
            (
                "[push]\nenabled = true\nmax_per_page = 0\n",
                "push.max_per_page",
            ),
            ("[push]\nenabeld = true\n", "enabeld"),
            ("[push]\nlearn_window_ms = 0\n", "push.learn_window_ms"),
            ("[push]\nlearn_windw_ms = 100\n", "learn_windw_ms"),
        ];
        for (text, key) in cases {
            let text = format!("{text}[files]\nroot = \"/srv/www\"\n");
            let message = match OriginConfig::from_toml(&text) {
                Err(e) => e.to_string(),
                Ok(config) => config.validate().expect_err(&text).to_string(),
            };
            assert!(message.contains(key), "{text}: {message}");
        }
    }

    #[test]
    fn the_old_scheduler_table_is_read_with_a_deprecation() {
        let config = OriginConfig::from_toml("[scheduler]\npolicy = \"rr\"\ndemand_weight = 3\n")
            .expect("old table");
        assert_eq!(config.response_scheduler.policy, ResponsePolicyKind::Rr);
        assert_eq!(config.response_scheduler.demand_weight, 3);
        let old: Vec<_> = config.deprecated_keys().collect();
        assert_eq!(old, [("scheduler", "response_scheduler")]);
        let config =
            OriginConfig::from_toml("[response_scheduler]\npolicy = \"rr\"\n").expect("new table");
        assert_eq!(config.response_scheduler.policy, ResponsePolicyKind::Rr);
        assert_eq!(config.deprecated_keys().count(), 0);
    }
}
