//! Where a request goes: to an SCTP origin or straight to its original destination.
//!
//! The decision has two inputs: the address the browser dialled (from the accepted
//! socket, which the browser cannot forge) and the Host header (which it can). The
//! Host header is believed only once it is checked against that address
//! ([`HostVerifier`]): an IP literal must equal it, a name must resolve to it. A
//! request whose Host does not match goes to the original destination over plain
//! TCP and is never cached, so a forged Host cannot poison the cache or reach an
//! origin it should not (Squid's "Host header forgery", CVE-2009-0801).
//!
//! [`RouteTable::decide`] is free of I/O; the verifier is the only part that
//! resolves names.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::uri::Authority;
use ipnet::IpNet;

use crate::config::{GatewayConfig, host_matches};

/// Where one request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Over the association to `GatewayConfig::origins[i]`.
    Origin(usize),
    /// Over plain TCP to the original destination.
    Direct,
}

/// The routing decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Where it goes.
    pub target: Target,
    /// Whether its response may be stored (the Host was verified and not bypassed).
    pub cacheable: bool,
    /// Why, for the access log.
    pub reason: &'static str,
}

/// The Host header checked against the original destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCheck {
    /// The Host names the original destination. Holds the host, lower-case,
    /// without port; IPv6 literals without brackets.
    Verified(String),
    /// The Host names something else (or another port), or could not be resolved.
    Mismatch,
}

/// The routing rules of a configuration.
#[derive(Debug)]
pub struct RouteTable {
    /// Per origin, in configuration order: its destination networks and Host patterns.
    origins: Vec<(Vec<IpNet>, Vec<String>)>,
    bypass_hosts: Vec<String>,
}

impl RouteTable {
    /// The rules of `config`.
    pub fn new(config: &GatewayConfig) -> Self {
        Self {
            origins: config
                .origins
                .iter()
                .map(|o| (o.destinations.clone(), o.hosts.clone()))
                .collect(),
            bypass_hosts: config.bypass.hosts.clone(),
        }
    }

    /// Decides where a request for `dst` whose Host checked as `host` goes.
    ///
    /// In order: a bypassed or unverified Host goes direct and is not cached; an
    /// origin whose `hosts` match the Host takes it; then the origin whose
    /// `destinations` hold `dst` most specifically; otherwise direct (cacheable:
    /// the rest of the web goes through the same cache).
    pub fn decide(&self, dst: IpAddr, host: &HostCheck) -> Decision {
        let HostCheck::Verified(host) = host else {
            return Decision {
                target: Target::Direct,
                cacheable: false,
                reason: "host-mismatch",
            };
        };
        if self.bypass_hosts.iter().any(|p| host_matches(p, host)) {
            return Decision {
                target: Target::Direct,
                cacheable: false,
                reason: "bypass-host",
            };
        }
        let by_host = self
            .origins
            .iter()
            .position(|(_, hosts)| hosts.iter().any(|p| host_matches(p, host)));
        if let Some(i) = by_host {
            return Decision {
                target: Target::Origin(i),
                cacheable: true,
                reason: "origin-host",
            };
        }
        let by_dst = self
            .origins
            .iter()
            .enumerate()
            .flat_map(|(i, (nets, _))| nets.iter().map(move |n| (i, n)))
            .filter(|(_, net)| net.contains(&dst))
            .max_by_key(|(i, net)| (net.prefix_len(), std::cmp::Reverse(*i)));
        match by_dst {
            Some((i, _)) => Decision {
                target: Target::Origin(i),
                cacheable: true,
                reason: "origin-destination",
            },
            None => Decision {
                target: Target::Direct,
                cacheable: true,
                reason: "unmapped",
            },
        }
    }
}

/// Why a Host header is unusable (the browser gets 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// HTTP/1.1 requires exactly one Host header.
    #[error("missing Host header")]
    Missing,
    /// More than one Host header.
    #[error("more than one Host header")]
    Repeated,
    /// Not a valid `host[:port]`.
    #[error("invalid Host header")]
    Invalid,
    /// A bare `host[:port]` as the request target: the authority form is for
    /// CONNECT only (RFC 9112, section 3.2.3).
    #[error("an authority-form request target is only for CONNECT")]
    AuthorityForm,
}

/// Splits a Host header value into the lower-case host (IPv6 without brackets)
/// and the port, which defaults to 80.
pub fn parse_host(value: &[u8]) -> Result<(String, u16), HostError> {
    let text = std::str::from_utf8(value).map_err(|_| HostError::Invalid)?;
    let authority = Authority::from_str(text).map_err(|_| HostError::Invalid)?;
    // An authority may carry userinfo; a Host header may not.
    if text.contains('@') {
        return Err(HostError::Invalid);
    }
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(HostError::Invalid);
    }
    // An out-of-range port is invalid; an empty one means the default (RFC 3986,
    // section 3.2.3).
    // `Authority::port` hides a port it cannot parse, so read what follows the host.
    let port = match authority.as_str()[authority.host().len()..].strip_prefix(':') {
        None | Some("") => 80,
        Some(p) => p.parse().map_err(|_| HostError::Invalid)?,
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// How long a resolved name is trusted.
const RESOLVE_TTL: Duration = Duration::from_secs(60);
/// Names remembered at most; the memory is cleared when full.
const RESOLVE_CACHE_ENTRIES: usize = 4096;

/// Checks Host headers against original destinations, resolving names with the
/// system resolver (bounded by a time-out, results remembered for a minute).
#[derive(Debug)]
pub struct HostVerifier {
    timeout: Duration,
    resolved: Mutex<HashMap<String, (Instant, Vec<IpAddr>)>>,
}

impl HostVerifier {
    /// A verifier whose lookups give up after `timeout` (then: mismatch).
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            resolved: Mutex::new(HashMap::new()),
        }
    }

    /// Checks `host:port` (from [`parse_host`]) against `dst`.
    pub async fn check(&self, host: &str, port: u16, dst: SocketAddr) -> HostCheck {
        if port != dst.port() {
            return HostCheck::Mismatch;
        }
        let matches = match host.parse::<IpAddr>() {
            Ok(ip) => same_ip(ip, dst.ip()),
            Err(_) => self
                .resolve(host)
                .await
                .iter()
                .any(|&ip| same_ip(ip, dst.ip())),
        };
        if matches {
            HostCheck::Verified(host.to_owned())
        } else {
            HostCheck::Mismatch
        }
    }

    async fn resolve(&self, name: &str) -> Vec<IpAddr> {
        if let Some((at, ips)) = self.lock().get(name)
            && at.elapsed() < RESOLVE_TTL
        {
            return ips.clone();
        }
        let lookup = tokio::net::lookup_host((name, 0));
        let ips: Vec<IpAddr> = match tokio::time::timeout(self.timeout, lookup).await {
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
            Ok(Err(e)) => {
                tracing::debug!(name, error = %e, "host name does not resolve");
                Vec::new()
            }
            Err(_) => {
                tracing::debug!(name, "host name lookup timed out");
                Vec::new()
            }
        };
        let mut resolved = self.lock();
        if resolved.len() >= RESOLVE_CACHE_ENTRIES {
            resolved.clear();
        }
        resolved.insert(name.to_owned(), (Instant::now(), ips.clone()));
        ips
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Vec<IpAddr>)>> {
        // A panic while holding this lock leaves a consistent map behind.
        crate::sync::lock(&self.resolved)
    }
}

/// Equality that treats IPv4-mapped IPv6 and IPv4 as the same address.
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OriginEntry;

    fn table() -> RouteTable {
        let mut config = GatewayConfig::default();
        let origin = |name: &str, dst: &[&str], hosts: &[&str]| OriginEntry {
            name: name.to_owned(),
            address: "192.0.2.2:9899".parse().expect("literal"),
            destinations: dst.iter().map(|d| d.parse().expect("cidr")).collect(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            backend: Default::default(),
            fail_open: true,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(1),

            response_timeout: Duration::from_secs(10),
            feedback: Default::default(),
            transport: Default::default(),
        };
        config.origins = vec![
            origin("wide", &["203.0.113.0/24", "2001:db8:203::/48"], &[]),
            origin("narrow", &["203.0.113.128/25"], &["*.cdn.example"]),
        ];
        config.bypass.hosts = vec!["bank.example".to_owned()];
        RouteTable::new(&config)
    }

    fn verified(h: &str) -> HostCheck {
        HostCheck::Verified(h.to_owned())
    }

    #[test]
    fn longest_prefix_wins() {
        let t = table();
        let d = t.decide(
            "203.0.113.200".parse().expect("ip"),
            &verified("203.0.113.200"),
        );
        assert_eq!(d.target, Target::Origin(1));
        let d = t.decide(
            "203.0.113.10".parse().expect("ip"),
            &verified("203.0.113.10"),
        );
        assert_eq!(d.target, Target::Origin(0));
        let d = t.decide(
            "2001:db8:203::10".parse().expect("ip"),
            &verified("2001:db8:203::10"),
        );
        assert_eq!(d.target, Target::Origin(0));
        assert!(d.cacheable);
    }

    #[test]
    fn unmapped_goes_direct_and_is_cacheable() {
        let d = table().decide(
            "198.51.100.10".parse().expect("ip"),
            &verified("198.51.100.10"),
        );
        assert_eq!((d.target, d.cacheable), (Target::Direct, true));
    }

    #[test]
    fn host_names_route_only_when_verified() {
        let t = table();
        let dst: IpAddr = "198.51.100.10".parse().expect("ip");
        assert_eq!(
            t.decide(dst, &verified("img.cdn.example")).target,
            Target::Origin(1)
        );
        let d = t.decide("203.0.113.10".parse().expect("ip"), &HostCheck::Mismatch);
        assert_eq!((d.target, d.cacheable), (Target::Direct, false));
    }

    #[test]
    fn bypassed_hosts_go_direct_uncached() {
        let d = table().decide(
            "203.0.113.10".parse().expect("ip"),
            &verified("bank.example"),
        );
        assert_eq!((d.target, d.cacheable), (Target::Direct, false));
    }

    #[test]
    fn host_header_parsing() {
        assert_eq!(parse_host(b"Example.COM"), Ok(("example.com".into(), 80)));
        assert_eq!(
            parse_host(b"203.0.113.10:8080"),
            Ok(("203.0.113.10".into(), 8080))
        );
        assert_eq!(parse_host(b"[2001:DB8::1]"), Ok(("2001:db8::1".into(), 80)));
        assert_eq!(
            parse_host(b"[2001:db8::1]:81"),
            Ok(("2001:db8::1".into(), 81))
        );
        assert_eq!(parse_host(b"user@host"), Err(HostError::Invalid));
        assert_eq!(parse_host(b""), Err(HostError::Invalid));
        assert_eq!(parse_host(b"a b"), Err(HostError::Invalid));
        assert_eq!(parse_host(b"host:99999"), Err(HostError::Invalid));
        assert_eq!(parse_host(b"host:"), Ok(("host".into(), 80)));
        assert_eq!(parse_host(b"\xff"), Err(HostError::Invalid));
    }

    #[tokio::test]
    async fn literals_are_checked_without_lookup() {
        let v = HostVerifier::new(Duration::from_millis(100));
        let dst: SocketAddr = "203.0.113.10:80".parse().expect("literal");
        assert_eq!(
            v.check("203.0.113.10", 80, dst).await,
            verified("203.0.113.10")
        );
        assert_eq!(v.check("203.0.113.11", 80, dst).await, HostCheck::Mismatch);
        assert_eq!(
            v.check("203.0.113.10", 8080, dst).await,
            HostCheck::Mismatch
        );
        let mapped: SocketAddr = "[::ffff:203.0.113.10]:80".parse().expect("literal");
        assert_eq!(
            v.check("203.0.113.10", 80, mapped).await,
            verified("203.0.113.10")
        );
        let v6: SocketAddr = "[2001:db8::1]:80".parse().expect("literal");
        assert_eq!(
            v.check("2001:db8::1", 80, v6).await,
            verified("2001:db8::1")
        );
    }

    #[tokio::test]
    async fn names_resolve_through_the_system_resolver() {
        // `localhost` resolves through /etc/hosts on every Linux system.
        let v = HostVerifier::new(Duration::from_secs(2));
        let dst: SocketAddr = "127.0.0.1:80".parse().expect("literal");
        assert_eq!(v.check("localhost", 80, dst).await, verified("localhost"));
        let elsewhere: SocketAddr = "203.0.113.10:80".parse().expect("literal");
        assert_eq!(
            v.check("localhost", 80, elsewhere).await,
            HostCheck::Mismatch
        );
    }
}
