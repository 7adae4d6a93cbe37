//! Interception: the nftables table and the policy routing that make TPROXY hand
//! browser TCP to port 80 to the gateway's transparent listener, for IPv4 and
//! IPv6. docs/interception.md explains every rule.
//!
//! - [`Interception::install`] replaces leftovers of an earlier run, then installs
//!   the policy routing (`policy_routing`) and the table (`ruleset`, applied by `nft`).
//!   The returned guard removes both on [`Interception::remove`] or on drop.
//! - [`cleanup`] removes leftovers after a crash (`gateway cleanup`).
//! - [`ruleset_text`] renders the same table in nft syntax: `config/nftables.nft`,
//!   for people who manage their firewall themselves (`intercept.manage = false`).
//! - [`probe_nftables`] and [`probe_policy_routing`] try what `install` needs
//!   without intercepting anything (`gateway doctor`).
//!
//! What it never does: touch tables, rules or routes that are not its own. It
//! finds its own by the configured table name, mark, routing table and priority.
//! Everything acts on the calling thread's network namespace.

mod nft;
mod policy_routing;
mod ruleset;

use std::fmt;

use crate::config::GatewayConfig;
pub use nft::Feature as NftFeature;
use policy_routing::{PolicyRouting, RoutingRemoved};
use ruleset::Ruleset;

/// Why interception could not be installed or removed.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    /// The `nft` program is not on `PATH`.
    #[error("nft not found: install the nftables package")]
    NftNotFound,
    /// A program could not be started or waited for.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The process lacks `CAP_NET_ADMIN` in its network namespace.
    #[error("permission denied changing {what}: run as root or with CAP_NET_ADMIN")]
    PermissionDenied {
        /// `nftables` or `policy routing`.
        what: &'static str,
    },
    /// The kernel lacks an nftables expression the rules need.
    #[error(
        "the kernel does not support nftables {feature}: load the module or use a kernel built with it"
    )]
    KernelUnsupported {
        /// The expression and its kernel option.
        feature: &'static str,
    },
    /// nft refused a command.
    #[error("nft failed {action}: {message}")]
    Nft {
        /// What was being done.
        action: &'static str,
        /// nft's own message.
        message: String,
    },
    /// nft's JSON could not be written or read.
    #[error("nft JSON: {0}")]
    NftJson(#[source] serde_json::Error),
    /// A netlink request for the policy routing failed.
    #[error("netlink failed {action}: {source}")]
    Netlink {
        /// What was being done.
        action: &'static str,
        /// The kernel's or the library's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The installed table and policy routing. Removed by [`Interception::remove`],
/// or, best effort and logged, when dropped.
#[derive(Debug)]
pub struct Interception {
    table: String,
    routing: PolicyRouting,
    /// Cleared once removed, so that drop after `remove` does nothing.
    installed: bool,
}

impl Interception {
    /// Removes leftovers of an earlier run (same table name, same rules and
    /// routes), then installs the policy routing and the nftables table for IPv4
    /// and IPv6.
    ///
    /// Routing goes first, so that the first packet the table marks already has
    /// its route; if anything fails, what was added is taken back. The daemon
    /// calls this only when `intercept.manage` is set.
    pub fn install(config: &GatewayConfig) -> Result<Interception, InterceptError> {
        let ruleset = Ruleset::new(config);
        let routing = PolicyRouting::new(&config.intercept);
        let stale = routing.remove()?;
        if stale != RoutingRemoved::default() {
            tracing::info!(
                rules = stale.rules,
                routes = stale.routes,
                "removed policy routing left by an earlier run"
            );
        }
        // From here on, an error drops `interception`, which takes back whatever
        // part got installed (a half-added routing included).
        let interception = Interception {
            table: config.intercept.table.clone(),
            routing,
            installed: true,
        };
        routing.install()?;
        // The batch itself replaces a leftover table, atomically.
        nft::apply(&ruleset.to_batch(), "installing the table")?;
        tracing::info!(
            table = %interception.table,
            port = config.listen.port,
            "interception installed"
        );
        Ok(interception)
    }

    /// Removes everything [`install`](Self::install) added. Both halves are tried
    /// even when the first fails; the first error is returned.
    pub fn remove(mut self) -> Result<(), InterceptError> {
        self.installed = false;
        let table = nft::delete_table(&self.table);
        let routing = self.routing.remove();
        table?;
        routing?;
        tracing::info!(table = %self.table, "interception removed");
        Ok(())
    }
}

impl Drop for Interception {
    fn drop(&mut self) {
        if !self.installed {
            return;
        }
        if let Err(e) = nft::delete_table(&self.table) {
            tracing::warn!("removing nftables table inet {}: {e}", self.table);
        }
        if let Err(e) = self.routing.remove() {
            tracing::warn!("removing the policy routing: {e}");
        }
    }
}

/// What [`cleanup`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// The nftables table that was removed, if one existed.
    pub table: Option<String>,
    /// Policy rules removed (IPv4 and IPv6).
    pub rules: usize,
    /// Routes removed from the gateway's routing table (IPv4 and IPv6).
    pub routes: usize,
}

impl CleanupReport {
    /// Whether there was nothing to remove.
    pub fn is_empty(&self) -> bool {
        self.table.is_none() && self.rules == 0 && self.routes == 0
    }
}

impl fmt::Display for CleanupReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing to clean up");
        }
        let mut parts = Vec::new();
        if let Some(table) = &self.table {
            parts.push(format!("nftables table inet {table}"));
        }
        if self.rules > 0 {
            parts.push(format!("{} policy rule(s)", self.rules));
        }
        if self.routes > 0 {
            parts.push(format!("{} route(s)", self.routes));
        }
        write!(f, "removed {}", parts.join(", "))
    }
}

/// `gateway cleanup`: removes what a crashed run left behind (the table, the
/// policy rules and routes that match the configuration). Idempotent.
pub fn cleanup(config: &GatewayConfig) -> Result<CleanupReport, InterceptError> {
    let table = &config.intercept.table;
    let table_removed = nft::delete_table(table)?;
    let routing = PolicyRouting::new(&config.intercept).remove()?;
    Ok(CleanupReport {
        table: table_removed.then(|| table.clone()),
        rules: routing.rules,
        routes: routing.routes,
    })
}

/// What [`probe_nftables`] found.
#[derive(Debug)]
pub struct NftProbe {
    /// Whether the gateway's table (`intercept.table`) exists now: a gateway
    /// runs, or a crashed one left it.
    pub table_present: bool,
    /// Each expression the rules need beyond plain nftables, and whether the
    /// kernel took it.
    pub features: Vec<(NftFeature, Result<(), InterceptError>)>,
}

/// Tries, in a scratch table of its own that it deletes again, each nftables
/// expression the rules need (tproxy, socket, fib), so that the kernel loads
/// and validates them. The rules are guarded by a mark no packet carries, so
/// nothing is intercepted meanwhile. The outer error is for nft itself
/// (missing, or no permission to list tables).
pub fn probe_nftables(config: &GatewayConfig) -> Result<NftProbe, InterceptError> {
    let table_present = nft::table_exists(&config.intercept.table)?;
    let guard_mark = !config.intercept.tproxy_mark;
    let features = NftFeature::ALL
        .into_iter()
        .map(|feature| (feature, nft::probe_in_kernel(feature, guard_mark)))
        .collect();
    Ok(NftProbe {
        table_present,
        features,
    })
}

/// What [`probe_policy_routing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingProbe {
    /// Rules or routes of ours are in place (a running gateway's, or a crashed
    /// one's); left alone.
    Present {
        /// Policy rules of ours (IPv4 and IPv6).
        rules: usize,
        /// Local default routes in our table.
        routes: usize,
    },
    /// None were there; adding and removing them again worked.
    Usable,
}

/// Whether the policy routing can be installed: when none of ours exists,
/// adds it and takes it away again (harmless: only packets with the tproxy
/// mark use it, and without the table none carry it); when some exists, says
/// so and leaves it.
pub fn probe_policy_routing(config: &GatewayConfig) -> Result<RoutingProbe, InterceptError> {
    let routing = PolicyRouting::new(&config.intercept);
    let present = routing.present()?;
    if present != RoutingRemoved::default() {
        return Ok(RoutingProbe::Present {
            rules: present.rules,
            routes: present.routes,
        });
    }
    let installed = routing.install();
    // Taken back whether or not the install went all the way.
    let removed = routing.remove();
    installed?;
    removed?;
    Ok(RoutingProbe::Usable)
}

/// The table as an nft script: what `config/nftables.nft` holds for the default
/// configuration. Loading it with `nft -f` replaces any table of the same name.
pub fn ruleset_text(config: &GatewayConfig) -> String {
    let i = &config.intercept;
    let mut out = String::new();
    out.push_str(HEADER);
    out.push_str(&format!(
        "#\n\
         # This copy was generated for: listen.port = {port}, intercept.table = \"{table}\",\n\
         # tproxy_mark = {tmark:#x}, upstream_mark = {umark:#x}. It needs this policy routing:\n\
         #\n\
         #   ip rule add fwmark {tmark:#x} lookup {rt} priority {prio}\n\
         #   ip route add local 0.0.0.0/0 dev lo table {rt}\n\
         #   ip -6 rule add fwmark {tmark:#x} lookup {rt} priority {prio}\n\
         #   ip -6 route add local ::/0 dev lo table {rt}\n\n",
        port = config.listen.port,
        table = i.table,
        tmark = i.tproxy_mark,
        umark = i.upstream_mark,
        rt = i.route_table,
        prio = i.rule_priority,
    ));
    out.push_str(&Ruleset::new(config).to_text());
    out.push_str(&format!(
        "\n\
         # Examples.\n\
         #\n\
         # Leave a network alone, at run time (one set per family, for clients and\n\
         # for destinations):\n\
         #   nft add element inet {t} bypass_destinations_v4 {{ 192.0.2.0/24 }}\n\
         #   nft add element inet {t} bypass_clients_v6 {{ 2001:db8:1::/48 }}\n\
         #\n\
         # Intercept only what arrives on the LAN interfaces, instead of on every\n\
         # interface but lo (intercept.lan_interfaces = [\"br-lan\", \"wlan0\"]):\n\
         #   iifname {{ \"br-lan\", \"wlan0\" }} tcp dport 80 jump intercept\n\
         #\n\
         # See whether interception happens (the counters on the accept rules):\n\
         #   nft list chain inet {t} intercept\n",
        t = i.table,
    ));
    out
}

const HEADER: &str = "\
#!/usr/sbin/nft -f
#
# The sctp gateway's interception table: browser TCP to port 80 goes to the
# gateway's transparent listener (TPROXY), for IPv4 and IPv6. HTTPS and all other
# traffic pass untouched; connections made to the listener's port directly, from
# any side, are dropped. docs/interception.md explains every rule.
#
# The gateway installs this itself (intercept.manage = true). Load this file
# only when you manage the firewall yourself (intercept.manage = false); then add
# the policy routing below too. Generated by the gateway from its configuration;
# a unit test keeps this copy equal to the default configuration's.
";

#[cfg(test)]
mod tests {
    use super::*;

    /// `config/nftables.nft` is generated; it must never drift from the code.
    #[test]
    fn shipped_file_is_the_default_ruleset() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/nftables.nft");
        let shipped = std::fs::read_to_string(path).expect("config/nftables.nft is readable");
        let generated = ruleset_text(&GatewayConfig::default());
        if shipped != generated {
            // Regenerate with GATEWAY_WRITE_NFTABLES=1 after a deliberate change.
            if std::env::var_os("GATEWAY_WRITE_NFTABLES").is_some() {
                std::fs::write(path, &generated).expect("config/nftables.nft is writable");
                return;
            }
            panic!(
                "config/nftables.nft differs from ruleset_text(&GatewayConfig::default()); \
                 rerun with GATEWAY_WRITE_NFTABLES=1 to regenerate it"
            );
        }
    }

    #[test]
    fn cleanup_report_says_what_it_removed() {
        assert_eq!(CleanupReport::default().to_string(), "nothing to clean up");
        let report = CleanupReport {
            table: Some("sctp_gateway".into()),
            rules: 2,
            routes: 2,
        };
        assert_eq!(
            report.to_string(),
            "removed nftables table inet sctp_gateway, 2 policy rule(s), 2 route(s)"
        );
    }

    #[test]
    fn errors_name_the_fix() {
        assert_eq!(
            InterceptError::NftNotFound.to_string(),
            "nft not found: install the nftables package"
        );
        assert!(
            InterceptError::PermissionDenied { what: "nftables" }
                .to_string()
                .contains("CAP_NET_ADMIN")
        );
    }
}
