//! The whole demo on a [`Topology`]: nginx on the site's addresses (the original
//! destination and the fail-open target), nginx on the unmapped web server, the
//! `origin` binary serving the demo site over SCTP, and the `gateway` binary in
//! the router namespace with a config generated from `config/gateway.toml`.
//!
//! `cargo xtask run` and the gateway's end-to-end tests both start it through
//! [`Demo::start`]; the tests then stop, kill and restart the parts one by one.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{Result, TestbedError, io};
use crate::https::{DemoHttps, TLS_PORT};
use crate::netns::{exec_in, ip, run};
use crate::nginx::{Nginx, write_web_page};
use crate::process::{NsProcess, wait_until};
use crate::topology::WanLink;
use crate::topology::{
    LAN_IF, ORIGIN_PORT, SITE_NET_V4, SITE_NET_V6, SITE_V4, SITE_V6, Topology, WAN, WEB_V4, WEB_V6,
    origin_sctp_v4,
};
use crate::wan::{WanEmulator, WanParams};

/// How long the origin and the gateway get to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// `RUST_LOG` for the daemons: info, plus the origin's per-request line (which
/// names the stream a request came on).
pub const DAEMON_LOG_FILTER: &str = "info,origin::service=debug";

/// The variable that replaces [`DAEMON_LOG_FILTER`] for the testbed's daemons,
/// e.g. `TESTBED_DAEMON_LOG=info,gateway::front::prefetch=debug` to see a
/// benchmark's prefetches in its gateway.log.
pub const DAEMON_LOG_VARIABLE: &str = "TESTBED_DAEMON_LOG";

/// `RUST_LOG` for the daemons: [`DAEMON_LOG_VARIABLE`] if set, else
/// [`DAEMON_LOG_FILTER`].
pub fn daemon_log_filter() -> String {
    std::env::var(DAEMON_LOG_VARIABLE).unwrap_or_else(|_| DAEMON_LOG_FILTER.to_owned())
}

/// Changes to the shipped `config/gateway.toml`; `None` keeps the file's value.
#[derive(Debug, Clone, Default)]
pub struct GatewayConfigOverrides {
    /// `intercept.lan_interfaces`.
    pub lan_interfaces: Option<Vec<String>>,
    /// `intercept.tls_port`, also added to `intercept.ports`: HTTPS to the
    /// origin's destinations is tunnelled (docs/gateway.md, "HTTPS").
    pub tls_port: Option<u16>,
    /// The first `[[origin]]`'s `address`.
    pub origin_address: Option<SocketAddr>,
    /// The first `[[origin]]`'s `destinations` (CIDRs).
    pub destinations: Option<Vec<String>>,
    /// The first `[[origin]]`'s `fail_open`.
    pub fail_open: Option<bool>,
    /// The first `[[origin]]`'s `reconnect_max`, in ms.
    pub reconnect_max_ms: Option<u64>,
    /// The first `[[origin]]`'s `transport.heartbeat_interval`, in ms.
    pub heartbeat_interval_ms: Option<u64>,
    /// The first `[[origin]]`'s `transport.idle_timeout`, in ms.
    pub idle_timeout_ms: Option<u64>,
    /// The first `[[origin]]`'s `transport.connect_timeout`, in ms.
    pub connect_timeout_ms: Option<u64>,
    /// `cache.path` ([`Demo::start`] puts it in the demo's directory).
    pub cache_path: Option<PathBuf>,
    /// `cache.enabled`.
    pub cache_enabled: Option<bool>,
    /// `http.max_connections` (the load benchmark holds more than the
    /// shipped 4,096).
    pub max_connections: Option<u64>,
    /// `http.header_timeout`, in ms (also how long the gateway waits for a
    /// whole ClientHello on the TLS port).
    pub header_timeout_ms: Option<u64>,
    /// `prefetch.enabled_for_origins`.
    pub prefetch_enabled: Option<bool>,
    /// `push.enabled`: take the origins' pushes into the cache.
    pub push_enabled: Option<bool>,
    /// The first `[[origin]]`'s `feedback.enabled`.
    pub feedback_enabled: Option<bool>,
    /// The first `[[origin]]`'s `backend` (auto, kernel, userspace, framed-tcp, quic).
    pub backend: Option<String>,
    /// The first `[[origin]]`'s `transport.quic.server_cert_sha256`: the pin a
    /// QUIC origin logs at start.
    pub quic_server_cert_sha256: Option<String>,
    /// The first `[[origin]]`'s `transport.userspace.congestion` and
    /// `transport.quic.congestion` (reno, cubic, bbr).
    pub congestion: Option<String>,
    /// `ebpf.object`: the ebpf-programs object, which attaches the LAN-side
    /// TCP programs.
    pub ebpf_object: Option<PathBuf>,
    /// `ebpf.interface`: where xdp_sctp attaches (the WAN interface).
    pub ebpf_interface: Option<String>,
}

/// A gateway configuration generated from the shipped file, and the keys the
/// testbed needs to find what the gateway installs.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The TOML text.
    pub text: String,
    /// `intercept.table`.
    pub table: String,
    /// `intercept.tproxy_mark`.
    pub tproxy_mark: u32,
    /// `intercept.route_table`.
    pub route_table: u32,
    /// `listen.port`.
    pub listen_port: u16,
}

impl GatewayConfig {
    /// Reads `config/gateway.toml` from `workspace` and applies `overrides`.
    pub fn from_shipped(workspace: &Path, overrides: &GatewayConfigOverrides) -> Result<Self> {
        let path = workspace.join("config/gateway.toml");
        let text =
            std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
        let bad = |what: String| TestbedError::Config {
            path: path.clone(),
            what,
        };
        let mut table: toml::Table = text.parse().map_err(|e| bad(format!("{e}")))?;
        override_intercept(&mut table, overrides);
        override_prefetch(&mut table, overrides).map_err(bad)?;
        override_push(&mut table, overrides).map_err(bad)?;
        override_cache(&mut table, overrides).map_err(bad)?;
        override_http(&mut table, overrides).map_err(bad)?;
        override_origin(&mut table, overrides).map_err(bad)?;
        override_ebpf(&mut table, overrides).map_err(bad)?;
        Self::from_table(&table).map_err(bad)
    }

    /// The configuration with `table` as its text and the keys the testbed
    /// reads from it; `Err` says which key is missing.
    fn from_table(table: &toml::Table) -> Result<Self, String> {
        let int = |section: &str, key: &str| -> Result<i64, String> {
            table
                .get(section)
                .and_then(|s| s.get(key))
                .and_then(toml::Value::as_integer)
                .ok_or_else(|| format!("no integer {section}.{key}"))
        };
        let tproxy_mark = int("intercept", "tproxy_mark")? as u32;
        let route_table = int("intercept", "route_table")? as u32;
        let listen_port = int("listen", "port")? as u16;
        let table_name = table
            .get("intercept")
            .and_then(|s| s.get("table"))
            .and_then(toml::Value::as_str)
            .ok_or_else(|| "no intercept.table".to_owned())?
            .to_owned();
        let body = toml::to_string(table).map_err(|e| format!("{e}"))?;
        Ok(GatewayConfig {
            text: format!(
                "# Generated from config/gateway.toml (which documents every key) by the testbed.\n\n{body}"
            ),
            table: table_name,
            tproxy_mark,
            route_table,
            listen_port,
        })
    }

    /// What of the gateway's interception is installed in namespace `ns` (the
    /// current one if `None`): its nftables table, policy rules with its mark,
    /// routes in its table. Empty when nothing is.
    pub fn installed_in(&self, ns: Option<&str>) -> Result<Vec<String>> {
        let mut found = Vec::new();
        let mut nft = Command::new("nft");
        nft.args(["list", "ruleset"]);
        let ruleset = match ns {
            Some(ns) => run(&mut exec_in(ns, &nft))?,
            None => run(&mut nft)?,
        };
        if ruleset.lines().any(|l| {
            l.trim_start()
                .starts_with(&format!("table inet {} ", self.table))
        }) {
            found.push(format!("nftables table inet {}", self.table));
        }
        let mark = format!("fwmark {:#x}", self.tproxy_mark);
        let route_table = self.route_table.to_string();
        for family in ["-4", "-6"] {
            let in_ns = |args: &[&str]| -> Result<String> {
                let mut all = Vec::new();
                if let Some(ns) = ns {
                    all.extend(["-n", ns]);
                }
                all.push(family);
                all.extend(args);
                ip(&all)
            };
            let rules = in_ns(&["rule", "show"])?;
            found.extend(
                rules
                    .lines()
                    .filter(|l| l.contains(&mark))
                    .map(|l| format!("ip {family} rule: {}", l.trim())),
            );
            // A table that was never created is an error for `ip route show`.
            let routes = in_ns(&["route", "show", "table", &route_table]).unwrap_or_default();
            found.extend(routes.lines().map(|l| {
                format!(
                    "ip {family} route in table {}: {}",
                    self.route_table,
                    l.trim()
                )
            }));
        }
        Ok(found)
    }
}

/// The sub-table `name` of `table`, inserted empty if missing; `None` when
/// the key holds something other than a table.
fn section<'a>(table: &'a mut toml::Table, name: &str) -> Option<&'a mut toml::Table> {
    table
        .entry(name)
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
}

/// `intercept.lan_interfaces` and `intercept.tls_port` (with its port added
/// to `intercept.ports`); left alone if `intercept` is not a table.
fn override_intercept(table: &mut toml::Table, overrides: &GatewayConfigOverrides) {
    let Some(intercept) = section(table, "intercept") else {
        return;
    };
    if let Some(interfaces) = &overrides.lan_interfaces {
        intercept.insert("lan_interfaces".into(), interfaces.clone().into());
    }
    if let Some(port) = overrides.tls_port {
        let port = toml::Value::Integer(port.into());
        let ports = intercept
            .entry("ports")
            .or_insert_with(|| toml::Value::Array(vec![80.into()]));
        if let Some(list) = ports.as_array_mut()
            && !list.contains(&port)
        {
            list.push(port.clone());
        }
        intercept.insert("tls_port".into(), port);
    }
}

/// `ebpf.object` and `ebpf.interface`.
fn override_ebpf(
    table: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    if overrides.ebpf_object.is_none() && overrides.ebpf_interface.is_none() {
        return Ok(());
    }
    let ebpf = section(table, "ebpf").ok_or_else(|| "ebpf is not a table".to_owned())?;
    if let Some(object) = &overrides.ebpf_object {
        ebpf.insert("object".into(), object.display().to_string().into());
    }
    if let Some(interface) = &overrides.ebpf_interface {
        ebpf.insert("interface".into(), interface.clone().into());
    }
    Ok(())
}

/// `prefetch.enabled_for_origins`.
fn override_prefetch(
    table: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    if let Some(enabled) = overrides.prefetch_enabled {
        let prefetch =
            section(table, "prefetch").ok_or_else(|| "prefetch is not a table".to_owned())?;
        prefetch.insert("enabled_for_origins".into(), enabled.into());
    }
    Ok(())
}

/// `push.enabled`.
fn override_push(
    table: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    if let Some(enabled) = overrides.push_enabled {
        let push = section(table, "push").ok_or_else(|| "push is not a table".to_owned())?;
        push.insert("enabled".into(), enabled.into());
    }
    Ok(())
}

/// `http.max_connections` and `http.header_timeout`.
fn override_http(
    table: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    let keys = [
        ("max_connections", overrides.max_connections),
        ("header_timeout", overrides.header_timeout_ms),
    ];
    for (key, value) in keys {
        if let Some(value) = value {
            let http = section(table, "http").ok_or_else(|| "http is not a table".to_owned())?;
            let value = i64::try_from(value).map_err(|_| format!("{key} {value}"))?;
            http.insert(key.into(), value.into());
        }
    }
    Ok(())
}

/// `cache.path` and `cache.enabled`.
fn override_cache(
    table: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    if overrides.cache_path.is_none() && overrides.cache_enabled.is_none() {
        return Ok(());
    }
    let cache = section(table, "cache").ok_or_else(|| "cache is not a table".to_owned())?;
    if let Some(path) = &overrides.cache_path {
        cache.insert("path".into(), path.display().to_string().into());
    }
    if let Some(enabled) = overrides.cache_enabled {
        cache.insert("enabled".into(), enabled.into());
    }
    Ok(())
}

/// The first `[[origin]]`'s keys and its `transport` table's; the file must
/// have an `[[origin]]` even when nothing is overridden.
fn override_origin(
    table: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    let origin = table
        .get_mut("origin")
        .and_then(|o| o.as_array_mut())
        .and_then(|a| a.first_mut())
        .and_then(|o| o.as_table_mut())
        .ok_or_else(|| "no [[origin]] table".to_owned())?;
    if let Some(address) = overrides.origin_address {
        origin.insert("address".into(), address.to_string().into());
    }
    if let Some(destinations) = &overrides.destinations {
        origin.insert("destinations".into(), destinations.clone().into());
    }
    if let Some(backend) = &overrides.backend {
        origin.insert("backend".into(), backend.clone().into());
    }
    if let Some(fail_open) = overrides.fail_open {
        origin.insert("fail_open".into(), fail_open.into());
    }
    if let Some(enabled) = overrides.feedback_enabled {
        section(origin, "feedback")
            .ok_or_else(|| "origin.feedback is not a table".to_owned())?
            .insert("enabled".into(), enabled.into());
    }
    if let Some(ms) = overrides.reconnect_max_ms {
        origin.insert("reconnect_max".into(), (ms as i64).into());
        let min = origin
            .get("reconnect_min")
            .and_then(toml::Value::as_integer)
            .unwrap_or(250);
        origin.insert("reconnect_min".into(), min.min(ms as i64).into());
    }
    override_origin_transport(origin, overrides)
}

/// The first `[[origin]]`'s `transport` time-outs (ms), QUIC certificate pin
/// and congestion controller.
fn override_origin_transport(
    origin: &mut toml::Table,
    overrides: &GatewayConfigOverrides,
) -> Result<(), String> {
    let transport_keys = [
        ("heartbeat_interval", overrides.heartbeat_interval_ms),
        ("idle_timeout", overrides.idle_timeout_ms),
        ("connect_timeout", overrides.connect_timeout_ms),
    ];
    if transport_keys.iter().all(|(_, v)| v.is_none())
        && overrides.quic_server_cert_sha256.is_none()
        && overrides.congestion.is_none()
    {
        return Ok(());
    }
    let transport =
        section(origin, "transport").ok_or_else(|| "origin.transport is not a table".to_owned())?;
    for (key, value) in transport_keys {
        if let Some(ms) = value {
            transport.insert(key.into(), (ms as i64).into());
        }
    }
    if let Some(pin) = &overrides.quic_server_cert_sha256 {
        let quic = section(transport, "quic")
            .ok_or_else(|| "origin.transport.quic is not a table".to_owned())?;
        quic.insert("server_cert_sha256".into(), pin.clone().into());
    }
    if let Some(congestion) = &overrides.congestion {
        for backend in ["userspace", "quic"] {
            section(transport, backend)
                .ok_or_else(|| format!("origin.transport.{backend} is not a table"))?
                .insert("congestion".into(), congestion.clone().into());
        }
    }
    Ok(())
}

/// Where the demo's executables are.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The `gateway` executable.
    pub gateway: PathBuf,
    /// The `origin` executable.
    pub origin: PathBuf,
}

/// How to start the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Namespace name prefix (see [`Topology::create`]).
    pub prefix: String,
    /// Directory for generated configs and logs (created).
    pub dir: PathBuf,
    /// The workspace (for `config/`).
    pub workspace: PathBuf,
    /// The origin's and the site nginx's document root; `config/demo-site` by
    /// default.
    pub origin_root: Option<PathBuf>,
    /// The origin's transport (`--transport`: auto, kernel, userspace,
    /// framed-tcp); the origin's config file decides if `None`.
    pub origin_transport: Option<String>,
    /// The origin's configuration file; `config/origin.toml` if `None`.
    pub origin_config: Option<PathBuf>,
    /// The origin's `push.enabled` (the file is then rewritten into `dir`
    /// with it); the file's own setting if `None`.
    pub origin_push: Option<bool>,
    /// Changes to the shipped gateway config (the origin address and LAN
    /// interface are set to the topology's unless given here).
    pub gateway: GatewayConfigOverrides,
    /// Start the origin (false: the site's address is served by nginx only).
    pub start_origin: bool,
    /// Start the gateway (false: only the topology, nginx and the origin).
    pub start_gateway: bool,
    /// Put the WAN emulator between the gateway and the origin host.
    pub wan: Option<DemoWan>,
    /// Serve the site over HTTPS too ([`crate::https`]): the origin gets a
    /// certificate for [`SITE_NAME`](crate::https::SITE_NAME) made at start
    /// (its config, the given or shipped one, is rewritten into `dir` with a
    /// `[tls]` section), the gateway intercepts port 443 for the site's
    /// addresses (unless `gateway.tls_port` says otherwise) and resolves the
    /// name through its namespace's hosts file, and nginx serves the site
    /// over TLS on the site's addresses.
    pub https: bool,
    /// With [`DemoOptions::https`]: the origin offers HTTP/2 on its tunnels
    /// (`tls.h2`).
    pub https_h2: bool,
    /// More entries of the gateway namespace's hosts file, which exists only
    /// with [`DemoOptions::https`].
    pub gateway_hosts: Vec<(IpAddr, String)>,
}

/// The WAN emulator of a demo: its executable and the link it emulates.
#[derive(Debug, Clone)]
pub struct DemoWan {
    /// The `wanem` executable.
    pub wanem: PathBuf,
    /// The link.
    pub params: WanParams,
}

impl DemoOptions {
    /// Everything started, the shipped configs unchanged but for the topology's
    /// addresses; namespaces named `{prefix}...`, files in `dir`.
    pub fn new(prefix: &str, workspace: &Path, dir: &Path) -> Self {
        Self {
            prefix: prefix.to_owned(),
            dir: dir.to_owned(),
            workspace: workspace.to_owned(),
            origin_root: None,
            origin_transport: None,
            origin_config: None,
            origin_push: None,
            gateway: GatewayConfigOverrides::default(),
            start_origin: true,
            start_gateway: true,
            wan: None,
            https: false,
            https_h2: false,
            gateway_hosts: Vec::new(),
        }
    }
}

/// The running demo. Fields drop in order: processes first, namespaces last.
#[derive(Debug)]
pub struct Demo {
    /// The gateway process, if started.
    pub gateway: Option<NsProcess>,
    /// The origin process, if running.
    pub origin: Option<NsProcess>,
    /// nginx on the site's addresses in the origin namespace.
    pub site: Nginx,
    /// nginx on the unmapped web server.
    pub web: Nginx,
    /// The WAN emulator, if asked for.
    pub wan: Option<WanEmulator>,
    /// The site over HTTPS, if asked for ([`DemoOptions::https`]).
    pub https: Option<DemoHttps>,
    /// The generated gateway config.
    pub gateway_config: GatewayConfig,
    /// Its path.
    pub gateway_config_path: PathBuf,
    /// The namespaces.
    pub topology: Topology,
    binaries: Binaries,
    options: DemoOptions,
    origin_starts: u32,
    /// The configuration file the origin last started with.
    origin_config_path: Option<PathBuf>,
}

impl Demo {
    /// Builds the topology and starts nginx twice, the origin and (if asked) the
    /// gateway, each waited for until ready.
    pub fn start(binaries: Binaries, mut options: DemoOptions) -> Result<Self> {
        for binary in [&binaries.gateway, &binaries.origin] {
            if !binary.is_file() {
                return Err(TestbedError::Io {
                    context: format!("looking for {}", binary.display()),
                    source: std::io::ErrorKind::NotFound.into(),
                });
            }
        }
        let dir = &options.dir.clone();
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let topology = match &options.wan {
            None => Topology::create(&options.prefix)?,
            Some(_) => Topology::create_with(&options.prefix, WanLink::ThroughNamespace)?,
        };
        let wan = match &options.wan {
            None => None,
            Some(demo_wan) => Some(WanEmulator::start(
                &topology,
                &demo_wan.wanem,
                &demo_wan.params,
                &dir.join("wanem.log"),
            )?),
        };
        let root = options
            .origin_root
            .clone()
            .unwrap_or_else(|| options.workspace.join("config/demo-site"));
        let site = Nginx::start(
            topology.origin.name(),
            &[
                SocketAddr::new(SITE_V4.into(), 80),
                SocketAddr::new(SITE_V6.into(), 80),
            ],
            &root,
            &dir.join("nginx-site"),
        )?;
        let https = if options.https {
            Some(start_https(&mut options, &topology, &root)?)
        } else {
            None
        };
        let web_root = write_web_page(&dir.join("web-root"))?;
        let web = Nginx::start(
            topology.web.name(),
            &[
                SocketAddr::new(WEB_V4.into(), 80),
                SocketAddr::new(WEB_V6.into(), 80),
            ],
            &web_root,
            &dir.join("nginx-web"),
        )?;

        let gateway_config = topology_config(&options, options.gateway.clone())?;
        let gateway_config_path = dir.join("gateway.toml");
        std::fs::write(&gateway_config_path, &gateway_config.text)
            .map_err(io(format!("writing {}", gateway_config_path.display())))?;

        let (start_origin, start_gateway) = (options.start_origin, options.start_gateway);
        let mut demo = Demo {
            gateway: None,
            origin: None,
            site,
            web,
            gateway_config,
            gateway_config_path,
            topology,
            binaries,
            options,
            origin_starts: 0,
            origin_config_path: None,
            wan,
            https,
        };
        if start_origin {
            demo.start_origin()?;
        }
        if start_gateway {
            demo.start_gateway()?;
        }
        Ok(demo)
    }

    /// The configuration file the origin last started with (the given or
    /// shipped one, or its rewrite with `[tls]` or `push.enabled`), if it
    /// was started.
    pub fn origin_config_path(&self) -> Option<&Path> {
        self.origin_config_path.as_deref()
    }

    /// Starts (or restarts) the origin in the origin namespace, on the WAN
    /// addresses of both families, and waits until it listens.
    pub fn start_origin(&mut self) -> Result<()> {
        if let Some(mut old) = self.origin.take() {
            old.kill()?;
        }
        self.origin_starts += 1;
        let mut config = (self.options.origin_config.clone())
            .unwrap_or_else(|| self.options.workspace.join("config/origin.toml"));
        if let Some(push) = self.options.origin_push {
            config = origin_config_with_push(&config, push, &self.options.dir)?;
        }
        self.origin_config_path = Some(config.clone());
        let mut command = Command::new(&self.binaries.origin);
        command
            .arg("--config")
            .arg(config)
            .arg("--listen")
            .arg(origin_sctp_v4().to_string())
            .arg("--listen")
            .arg(SocketAddr::new(WAN.host_v6.into(), ORIGIN_PORT).to_string())
            .env("RUST_LOG", daemon_log_filter())
            .env("NO_COLOR", "1")
            // An error's message, not a backtrace, belongs at the end of the log.
            .env("RUST_BACKTRACE", "0");
        if let Some(root) = &self.options.origin_root {
            command.arg("--root").arg(root);
        }
        if let Some(transport) = &self.options.origin_transport {
            command.arg("--transport").arg(transport);
        }
        let log = self
            .options
            .dir
            .join(format!("origin-{}.log", self.origin_starts));
        let mut origin = NsProcess::spawn(self.topology.origin.name(), "origin", &command, &log)?;
        origin.wait_for_log(&format!("listening on {}", origin_sctp_v4()), READY_TIMEOUT)?;
        self.origin = Some(origin);
        Ok(())
    }

    /// Starts the gateway in the gateway namespace and waits until its nftables
    /// table is installed and its listener accepts.
    pub fn start_gateway(&mut self) -> Result<()> {
        let mut command = Command::new(&self.binaries.gateway);
        command
            .arg("--config")
            .arg(&self.gateway_config_path)
            .env("RUST_LOG", daemon_log_filter())
            .env("NO_COLOR", "1")
            // An error's message, not a backtrace, belongs at the end of the log.
            .env("RUST_BACKTRACE", "0");
        let ns = self.topology.gateway.name().to_owned();
        let mut gateway = NsProcess::spawn(
            &ns,
            "gateway",
            &command,
            &self.options.dir.join("gateway.log"),
        )?;
        let config = &self.gateway_config;
        let table = format!("nftables table inet {}", config.table);
        let what = format!(
            "the gateway's {table} and its listener on port {}",
            config.listen_port
        );
        wait_until(&what, READY_TIMEOUT, || {
            gateway.ensure_running(&what)?;
            Ok(config.installed_in(Some(&ns))?.contains(&table)
                && tcp_listening(&ns, config.listen_port)?)
        })?;
        self.gateway = Some(gateway);
        Ok(())
    }

    /// Stops the gateway if it runs, writes a config generated from the
    /// shipped one with `overrides` (the topology's LAN interface, origin,
    /// destinations and cache path unless given) and starts it again.
    pub fn restart_gateway(&mut self, overrides: GatewayConfigOverrides) -> Result<()> {
        if let Some(mut gateway) = self.gateway.take() {
            gateway.stop(Duration::from_secs(10))?;
        }
        let config = topology_config(&self.options, overrides)?;
        std::fs::write(&self.gateway_config_path, &config.text).map_err(io(format!(
            "writing {}",
            self.gateway_config_path.display()
        )))?;
        self.gateway_config = config;
        self.start_gateway()
    }

    /// Runs `gateway cleanup --config ...` in the gateway namespace.
    pub fn gateway_cleanup(&self) -> Result<String> {
        let mut command = Command::new(&self.binaries.gateway);
        command
            .arg("cleanup")
            .arg("--config")
            .arg(&self.gateway_config_path);
        run(&mut exec_in(self.topology.gateway.name(), &command))
    }

    /// What the gateway has installed in its namespace now.
    pub fn gateway_leftovers(&self) -> Result<Vec<String>> {
        self.gateway_config
            .installed_in(Some(self.topology.gateway.name()))
    }

    /// The directory with configs and logs.
    pub fn dir(&self) -> &Path {
        &self.options.dir
    }
}

/// `base` with `push.enabled = push`, written as `origin-push.toml` in `dir`;
/// a relative `files.root` is made absolute, as it was relative to `base`.
fn origin_config_with_push(base: &Path, push: bool, dir: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(base).map_err(io(format!("reading {}", base.display())))?;
    let bad = |what: String| TestbedError::Config {
        path: base.to_owned(),
        what,
    };
    let mut table: toml::Table = text.parse().map_err(|e| bad(format!("{e}")))?;
    section(&mut table, "push")
        .ok_or_else(|| bad("push is not a table".to_owned()))?
        .insert("enabled".into(), push.into());
    if let Some(files) = table.get_mut("files").and_then(toml::Value::as_table_mut)
        && let Some(root) = files.get("root").and_then(toml::Value::as_str)
        && Path::new(root).is_relative()
    {
        let absolute = base.parent().unwrap_or(Path::new(".")).join(root);
        files.insert("root".into(), absolute.display().to_string().into());
    }
    let path = dir.join("origin-push.toml");
    std::fs::write(&path, table.to_string()).map_err(io(format!("writing {}", path.display())))?;
    Ok(path)
}

/// The demo's HTTPS ([`DemoOptions::https`]): the certificate and origin
/// config, the gateway's hosts file, the TLS nginx; `options` then name that
/// origin config and (unless set) the TLS port.
fn start_https(options: &mut DemoOptions, topology: &Topology, root: &Path) -> Result<DemoHttps> {
    let base = (options.origin_config.clone())
        .unwrap_or_else(|| options.workspace.join("config/origin.toml"));
    let site_ips = [IpAddr::from(SITE_V4), IpAddr::from(SITE_V6)];
    let mut https = DemoHttps::prepare(
        &base,
        root,
        &options.dir,
        topology.gateway.name(),
        &site_ips,
        &options.gateway_hosts,
        options.https_h2,
    )?;
    https.start_direct(
        topology.origin.name(),
        &site_ips,
        root,
        &options.dir.join("nginx-site-tls"),
    )?;
    options.origin_config = Some(https.origin_config.clone());
    options.gateway.tls_port.get_or_insert(TLS_PORT);
    Ok(https)
}

/// The shipped gateway config with `overrides`, where the topology's LAN
/// interface, origin, destinations and a cache file in the demo's directory
/// fill what `overrides` leaves unset.
fn topology_config(
    options: &DemoOptions,
    mut overrides: GatewayConfigOverrides,
) -> Result<GatewayConfig> {
    overrides
        .lan_interfaces
        .get_or_insert_with(|| vec![LAN_IF.to_owned()]);
    overrides.origin_address.get_or_insert_with(origin_sctp_v4);
    overrides
        .destinations
        .get_or_insert_with(|| vec![SITE_NET_V4.to_owned(), SITE_NET_V6.to_owned()]);
    overrides
        .cache_path
        .get_or_insert_with(|| options.dir.join("cache.redb"));
    GatewayConfig::from_shipped(&options.workspace, &overrides)
}

/// Whether something listens on TCP `port` in namespace `ns` (`ss`, so nothing
/// connects to it).
pub fn tcp_listening(ns: &str, port: u16) -> Result<bool> {
    let out = run(&mut exec_in(
        ns,
        Command::new("ss").args(["-Hltn", &format!("sport = :{port}")]),
    ))?;
    Ok(!out.trim().is_empty())
}
