//! `gateway doctor`: checks the host for everything this configuration needs
//! and says, per item, what it found and what to do.
//!
//! Each check asks the code that will later do the work, not a copy of it:
//! the nftables expressions are loaded by `intercept` (in a scratch table,
//! guarded so that nothing is intercepted), the policy routing is added and
//! removed by `intercept` too, the eBPF object is loaded by `ebpf`, the
//! transport verdicts come from `gateway_transport::doctor`, and an origin is
//! reachable when `gateway_transport::connect` brings an association up.
//!
//! What it never does: leave anything behind (the scratch table, the routing
//! it tried and the association it opened are gone when it returns), touch a
//! running gateway's table or routes, or change a sysctl. It only reports; the
//! fixes are for the operator. Everything is checked in the calling process's
//! network namespace.
//!
//! Verdicts: `FAIL` for what stops the gateway from intercepting or carrying
//! flows (IPv4 forwarding, the capabilities, a configured interface, the
//! nftables expressions, the policy routing, an unreachable origin, an unusable
//! cache directory); `warn` for what works partly (IPv6 forwarding off, strict
//! rp_filter, a bridge without br_netfilter, eBPF that would fall back to
//! userspace accounting); `skip` for what this configuration does not use.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use daemon_config::doctor::{Check, Report};

use crate::accounting::chain;
use crate::config::{GatewayConfig, OriginEntry};
use crate::ebpf::{SctpAccounting, SctpAccountingConfig};
use crate::intercept::{self, InterceptError, RoutingProbe};

/// How long closing the probe association may take before it is aborted.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Capability numbers (linux/capability.h) the gateway uses.
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Where the kernel publishes its own BTF, which the eBPF programs need.
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Runs every check for `config` and returns the report.
pub fn run(config: &GatewayConfig) -> Report {
    let mut report = Report::default();
    let caps = effective_capabilities();
    capabilities(&mut report, caps, config);
    forwarding(&mut report);
    let lan = lan_interfaces(&mut report, config);
    for interface in &lan {
        rp_filter(&mut report, interface);
        bridge(&mut report, interface);
    }
    nftables(&mut report, config);
    policy_routing(&mut report, config);
    origins(&mut report, config);
    cache(&mut report, config);
    ebpf(&mut report, config, caps);
    report
}

/// The effective capability set of this process (`CapEff` in
/// /proc/self/status); `None` when it cannot be read.
fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

fn has(caps: Option<u64>, cap: u32) -> bool {
    caps.is_some_and(|set| set & (1 << cap) != 0)
}

fn capabilities(report: &mut Report, caps: Option<u64>, config: &GatewayConfig) {
    let item = "capabilities";
    if caps.is_none() {
        report.push(Check::warn(
            item,
            "cannot read CapEff from /proc/self/status",
            "run on Linux with /proc mounted",
        ));
        return;
    }
    let missing: Vec<&str> = [
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
        (CAP_NET_RAW, "CAP_NET_RAW"),
    ]
    .into_iter()
    .filter(|(cap, _)| !has(caps, *cap))
    .map(|(_, name)| name)
    .collect();
    if missing.is_empty() {
        report.push(Check::ok(
            item,
            "CAP_NET_ADMIN and CAP_NET_RAW (nftables, policy routing, transparent sockets, SO_MARK)",
        ));
    } else {
        report.push(Check::fail(
            item,
            format!("missing {}", missing.join(" and ")),
            "run as root, or grant them (the installed unit's AmbientCapabilities= / \
             CapabilityBoundingSet= do)",
        ));
    }
    if config.ebpf.object.is_some() {
        let bpf = has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_BPF) && has(caps, CAP_PERFMON));
        report.push(if bpf {
            Check::ok("BPF privilege", "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)")
        } else {
            Check::warn(
                "BPF privilege",
                "no CAP_BPF with CAP_PERFMON, nor CAP_SYS_ADMIN: accounting falls back to userspace",
                "grant CAP_BPF and CAP_PERFMON, or unset ebpf.object",
            )
        });
    }
}

/// Reads a sysctl in this network namespace (`net.ipv4.ip_forward`).
fn sysctl(key: &str) -> Option<String> {
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()
        .map(|v| v.trim().to_owned())
}

fn forwarding(report: &mut Report) {
    let v4 = "net.ipv4.ip_forward";
    report.push(match sysctl(v4).as_deref() {
        Some("1") => Check::ok("ipv4 forwarding", format!("{v4} = 1")),
        other => Check::fail(
            "ipv4 forwarding",
            format!(
                "{v4} = {}: the LAN's other traffic is not routed",
                other.unwrap_or("unreadable")
            ),
            format!("sysctl -w {v4}=1 (and set it in /etc/sysctl.d/ to keep it)"),
        ),
    });
    let v6 = "net.ipv6.conf.all.forwarding";
    report.push(match sysctl(v6).as_deref() {
        Some("1") => Check::ok("ipv6 forwarding", format!("{v6} = 1")),
        None => Check::skip("ipv6 forwarding", "this host has no IPv6"),
        Some(other) => Check::warn(
            "ipv6 forwarding",
            format!("{v6} = {other}: IPv6 clients are not routed"),
            format!("sysctl -w {v6}=1, if the LAN uses IPv6"),
        ),
    });
}

/// Checks the configured LAN interfaces (and the eBPF one) exist; returns the
/// LAN interfaces to check further: the configured ones that exist, or every
/// interface but `lo` when none is configured.
fn lan_interfaces(report: &mut Report, config: &GatewayConfig) -> Vec<String> {
    let configured = &config.intercept.lan_interfaces;
    let mut present = Vec::new();
    for name in configured {
        if interface_exists(name) {
            report.push(Check::ok(
                format!("interface {name}"),
                "present (intercept.lan_interfaces)",
            ));
            present.push(name.clone());
        } else {
            report.push(Check::fail(
                format!("interface {name}"),
                "no such interface in this network namespace (intercept.lan_interfaces)",
                "create it (or bring up what creates it), or correct intercept.lan_interfaces \
                 (`ip link` lists what exists)",
            ));
        }
    }
    if let Some(name) = &config.ebpf.interface {
        let item = format!("interface {name}");
        if interface_exists(name) {
            report.push(Check::ok(item, "present (ebpf.interface)"));
        } else {
            report.push(Check::warn(
                item,
                "no such interface (ebpf.interface): accounting falls back to userspace",
                "correct ebpf.interface to the WAN interface the origins' packets arrive on",
            ));
        }
    }
    if !configured.is_empty() {
        return present;
    }
    report.push(Check::ok(
        "LAN interfaces",
        "intercept.lan_interfaces is empty: every interface but lo is intercepted",
    ));
    nix::net::if_::if_nameindex()
        .map(|list| {
            list.iter()
                .map(|i| i.name().to_string_lossy().into_owned())
                .filter(|n| n != "lo")
                .collect()
        })
        .unwrap_or_default()
}

fn interface_exists(name: &str) -> bool {
    nix::net::if_::if_nametoindex(name).is_ok()
}

fn rp_filter(report: &mut Report, interface: &str) {
    let item = format!("rp_filter on {interface}");
    let read = |scope: &str| {
        sysctl(&format!("net.ipv4.conf.{scope}.rp_filter")).and_then(|v| v.parse::<u8>().ok())
    };
    // The kernel applies the larger of the two.
    let (Some(all), Some(own)) = (read("all"), read(interface)) else {
        report.push(Check::skip(
            item,
            "no IPv4 configuration for this interface",
        ));
        return;
    };
    let effective = all.max(own);
    report.push(if effective == 1 {
        Check::warn(
            item,
            format!(
                "strict (all = {all}, {interface} = {own}): intercepted packets from clients \
                     whose return path leaves by another interface are dropped"
            ),
            format!(
                "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{interface}.rp_filter=2 \
                 (loose), if clients sit behind another router or the LAN is multi-homed"
            ),
        )
    } else {
        Check::ok(
            item,
            format!(
                "{} (all = {all}, {interface} = {own})",
                if effective == 0 { "off" } else { "loose" }
            ),
        )
    });
}

fn bridge(report: &mut Report, interface: &str) {
    let sys = Path::new("/sys/class/net").join(interface);
    let item = format!("bridge {interface}");
    if sys.join("brport").exists() {
        report.push(Check::fail(
            item,
            "a port of a bridge: routed packets arrive on the bridge, so rules matching \
             this port's name never match",
            "put the bridge's name in intercept.lan_interfaces instead",
        ));
        return;
    }
    if !sys.join("bridge").exists() {
        return;
    }
    let call = sysctl("net.bridge.bridge-nf-call-iptables");
    report.push(match call.as_deref() {
        Some("1") => Check::ok(
            item,
            "a bridge; br_netfilter passes bridged IPv4 through the IP hooks too",
        ),
        _ => Check::warn(
            item,
            "a bridge without br_netfilter: flows routed through this host are intercepted, \
             flows bridged between its ports (this host as a transparent bridge) are not",
            "if this host bridges the clients to their router: modprobe br_netfilter; \
             sysctl -w net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1",
        ),
    });
}

fn nftables(report: &mut Report, config: &GatewayConfig) {
    let probe = match intercept::probe_nftables(config) {
        Ok(probe) => probe,
        Err(e) => {
            let fix = match e {
                InterceptError::NftNotFound => "apt-get install nftables".to_owned(),
                InterceptError::PermissionDenied { .. } => {
                    "run as root or with CAP_NET_ADMIN".to_owned()
                }
                _ => "see nft's message".to_owned(),
            };
            report.push(Check::fail("nftables", e.to_string(), fix));
            return;
        }
    };
    let table = &config.intercept.table;
    report.push(Check::ok(
        "nftables",
        if probe.table_present {
            format!("nft works; table inet {table} exists (a gateway runs, or `gateway cleanup` after a crash)")
        } else {
            "nft works".to_owned()
        },
    ));
    for (feature, result) in probe.features {
        let item = format!("nftables {}", feature.name());
        report.push(match result {
            Ok(()) => Check::ok(
                item,
                "the kernel loads it (tried in a scratch table, removed)",
            ),
            Err(e) => Check::fail(
                item,
                e.to_string(),
                "load its module (modprobe nft_tproxy nft_socket nft_fib_inet) or use a \
                 kernel built with it",
            ),
        });
    }
}

fn policy_routing(report: &mut Report, config: &GatewayConfig) {
    let i = &config.intercept;
    let item = "policy routing";
    report.push(match intercept::probe_policy_routing(config) {
        Ok(RoutingProbe::Present { rules, routes }) => Check::ok(
            item,
            format!(
                "{rules} rule(s) for mark {:#x} and {routes} local route(s) in table {} already \
                 in place (a gateway runs, or `gateway cleanup` after a crash)",
                i.tproxy_mark, i.route_table
            ),
        ),
        Ok(RoutingProbe::Usable) if !i.manage => Check::warn(
            item,
            "intercept.manage = false and the rules are not in place",
            "add the policy routing that `gateway rules` prints in its header",
        ),
        Ok(RoutingProbe::Usable) => Check::ok(
            item,
            format!(
                "rules for mark {:#x} into table {} at priority {} can be added (tried, removed)",
                i.tproxy_mark, i.route_table, i.rule_priority
            ),
        ),
        Err(e) => Check::fail(
            item,
            e.to_string(),
            "run as root or with CAP_NET_ADMIN; check `ip rule` for a conflicting rule",
        ),
    });
}

fn origins(report: &mut Report, config: &GatewayConfig) {
    if config.origins.is_empty() {
        report.push(Check::warn(
            "origins",
            "none configured: every request goes straight to its destination",
            "add an [[origin]] table (config/gateway.toml shows one)",
        ));
        return;
    }
    // The transport's verdicts once per backend in use.
    let mut seen = BTreeSet::new();
    for entry in &config.origins {
        if seen.insert(entry.backend.resolve().to_string()) {
            for check in gateway_transport::doctor::checks(entry.backend, &entry.transport, &[]) {
                report.push(check);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            report.push(Check::fail(
                "origins",
                format!("cannot start a runtime to try them: {e}"),
                "",
            ));
            return;
        }
    };
    for entry in &config.origins {
        report.push(runtime.block_on(reach(entry)));
    }
}

/// Opens an association to `entry` and closes it again.
async fn reach(entry: &OriginEntry) -> Check {
    let item = format!("origin {}", entry.name);
    let kind = entry.backend.resolve();
    let started = Instant::now();
    match gateway_transport::connect(kind, entry.address, &entry.transport).await {
        Ok(association) => {
            let took = started.elapsed();
            let streams = association.streams();
            if tokio::time::timeout(CLOSE_GRACE, association.close())
                .await
                .is_err()
            {
                association.abort();
            }
            Check::ok(
                item,
                format!(
                    "association to {} over {kind} up in {} ms ({streams:?})",
                    entry.address,
                    took.as_millis()
                ),
            )
        }
        Err(e) => Check::fail(
            item,
            format!("no association to {} over {kind}: {e}", entry.address),
            format!(
                "is the origin running and listening on {}? Does the path pass {}? \
                 `origin doctor` on the origin's host checks its side{}",
                entry.address,
                match kind.wire() {
                    gateway_transport::Wire::Sctp
                        if entry.transport.kernel.udp_encapsulation_port.is_none() =>
                        "SCTP (IP protocol 132; NAT often does not)".to_owned(),
                    gateway_transport::Wire::Tcp => format!("TCP to port {}", entry.address.port()),
                    _ => format!("UDP to port {}", entry.address.port()),
                },
                if entry.fail_open {
                    "; meanwhile its destinations go direct (fail_open)"
                } else {
                    "; meanwhile its destinations get 502"
                }
            ),
        ),
    }
}

fn cache(report: &mut Report, config: &GatewayConfig) {
    let c = &config.cache;
    let item = "cache directory";
    if !c.enabled {
        report.push(Check::skip(item, "cache.enabled = false"));
        return;
    }
    let Some(dir) = c.path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        report.push(Check::ok(item, "the working directory"));
        return;
    };
    // The directory is created at start if missing: then its nearest existing
    // ancestor is what must be writable.
    let existing = dir.ancestors().find(|d| d.exists()).unwrap_or(dir);
    if !existing.is_dir() {
        report.push(Check::fail(
            item,
            format!(
                "{} is in the way of {}: it is not a directory",
                existing.display(),
                dir.display()
            ),
            "move cache.path, or move that file away",
        ));
        return;
    }
    if let Err(e) = try_write(existing) {
        report.push(Check::fail(
            item,
            format!("cannot create files in {}: {e}", existing.display()),
            format!(
                "make {} writable by the gateway's user (the installed unit's \
                 StateDirectory= does), or move cache.path",
                dir.display()
            ),
        ));
        return;
    }
    let free = match nix::sys::statvfs::statvfs(existing) {
        Ok(s) => s.blocks_available().saturating_mul(s.fragment_size()),
        Err(e) => {
            report.push(Check::warn(
                item,
                format!("writable, but statvfs({}) failed: {e}", existing.display()),
                "",
            ));
            return;
        }
    };
    let used = std::fs::metadata(&c.path).map(|m| m.len()).unwrap_or(0);
    let needed = c.max_bytes.saturating_sub(used);
    let what = if existing == dir {
        format!("{} writable", dir.display())
    } else {
        format!(
            "{} will be created in {}",
            dir.display(),
            existing.display()
        )
    };
    let mib = |b: u64| b >> 20;
    report.push(if free >= needed {
        Check::ok(
            item,
            format!(
                "{what}; {} MiB free for cache.max_bytes = {} MiB",
                mib(free),
                mib(c.max_bytes)
            ),
        )
    } else if free >= crate::cache::config::MIN_MAX_BYTES {
        Check::warn(
            item,
            format!(
                "{what}; only {} MiB free for cache.max_bytes = {} MiB: the disk fills before \
                 eviction starts, and caching stops (answers stay whole)",
                mib(free),
                mib(c.max_bytes)
            ),
            format!(
                "free space, or lower cache.max_bytes below {} MiB",
                mib(free + used)
            ),
        )
    } else {
        Check::fail(
            item,
            format!("{what}; only {} MiB free", mib(free)),
            "free space, move cache.path, or set cache.enabled = false",
        )
    });
}

/// Creates and removes a scratch file in `dir`: the real test of permission
/// (mode bits, ACLs, read-only mounts and sandboxing alike).
fn try_write(dir: &Path) -> std::io::Result<()> {
    let probe: PathBuf = dir.join(format!(".gateway-doctor-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

fn ebpf(report: &mut Report, config: &GatewayConfig, caps: Option<u64>) {
    let item = "eBPF";
    let e = &config.ebpf;
    let (Some(object), Some(_)) = (&e.object, &e.interface) else {
        report.push(Check::skip(
            item,
            "ebpf.object and ebpf.interface are not both set: per-stream accounting runs in \
             userspace only (nothing depends on the XDP cross-check)",
        ));
        return;
    };
    let btf = Path::new(VMLINUX_BTF).exists();
    report.push(if btf {
        Check::ok("BTF", format!("{VMLINUX_BTF} present"))
    } else {
        Check::warn(
            "BTF",
            format!("{VMLINUX_BTF} missing: the kernel has no BTF"),
            "use a kernel built with CONFIG_DEBUG_INFO_BTF (Debian's has it), or unset ebpf.object",
        )
    });
    if !has(caps, CAP_SYS_ADMIN) && !has(caps, CAP_BPF) {
        report.push(Check::warn(
            item,
            "not tried: no CAP_BPF",
            "grant CAP_BPF and CAP_PERFMON",
        ));
        return;
    }
    report.push(
        match SctpAccounting::load_file(object, SctpAccountingConfig::default()) {
            Ok(_loaded) => Check::ok(
                item,
                format!(
                    "{} loads and the verifier accepts xdp_sctp and tc_sctp",
                    object.display()
                ),
            ),
            Err(error) => Check::warn(
                item,
                format!("{}: accounting falls back to userspace", chain(&error)),
                "build the object with `cargo xtask build-ebpf` and point ebpf.object at it",
            ),
        },
    );
}
