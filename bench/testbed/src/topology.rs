//! The demo topology: a LAN client, the gateway as its router, the origin host and
//! an unmapped web server, each in a network namespace, IPv4 and IPv6.
//!
//! ```text
//!  client            gateway (router)                 origin
//!  eth0 ───── lan0 ─┤              ├─ wan0 ─────── eth0   SCTP origin :9899 on its eth0
//!                   │              │                      lo: site 203.0.113.10,
//!                   │              │                          2001:db8:203::10 (nginx :80)
//!                   │              ├─ web0 ─────── eth0   web
//!                                                         lo: 198.51.100.10,
//!                                                             2001:db8:198::10 (nginx :80)
//! ```
//!
//! Only documentation and unique-local ranges are used. Links are point-to-point
//! subnets of 192.0.2.0/24 and of the ULA prefix `fd5c:7a7e:a11::/48`; the
//! servers' public-looking addresses sit on their loopback and are routed by the
//! gateway. The gateway–origin link ([`WanLink`]) can pass through a middle
//! namespace, where a WAN emulator forwards frames between two interfaces.
//!
//! Names are `{prefix}{pid}-{n}-{role}`, unique per instance, so tests run in
//! parallel; [`cleanup_stale`](crate::cleanup_stale) removes what killed runs left.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::Result;
use crate::netns::{Netns, ip, sysctl, veth};

/// The site the browser dials: its original destination, served by the origin
/// over SCTP through the gateway, and by nginx on the origin host over plain TCP
/// (what fail-open reaches).
pub const SITE_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// The site's IPv6 address.
pub const SITE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x203, 0, 0, 0, 0, 0x10);
/// The network the demo origin serves (its `destinations`), IPv4.
pub const SITE_NET_V4: &str = "203.0.113.0/24";
/// The network the demo origin serves, IPv6.
pub const SITE_NET_V6: &str = "2001:db8:203::/48";

/// The unmapped web server (no SCTP origin): reached over plain TCP.
pub const WEB_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// The unmapped web server's IPv6 address.
pub const WEB_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x198, 0, 0, 0, 0, 0x10);
const WEB_NET_V4: &str = "198.51.100.0/24";
const WEB_NET_V6: &str = "2001:db8:198::/48";

/// The origin's SCTP port (UDP for the userspace backend, RFC 6951).
pub const ORIGIN_PORT: u16 = 9899;

/// One point-to-point link's addresses: the gateway's end and the host's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAddrs {
    /// The gateway's address on the link, IPv4.
    pub gateway_v4: Ipv4Addr,
    /// The other host's address, IPv4.
    pub host_v4: Ipv4Addr,
    /// The gateway's address, IPv6.
    pub gateway_v6: Ipv6Addr,
    /// The other host's address, IPv6.
    pub host_v6: Ipv6Addr,
}

impl LinkAddrs {
    const fn new(v4_net: u8, v6_net: u16) -> Self {
        Self {
            gateway_v4: Ipv4Addr::new(192, 0, 2, v4_net + 1),
            host_v4: Ipv4Addr::new(192, 0, 2, v4_net + 2),
            gateway_v6: Ipv6Addr::new(0xfd5c, 0x7a7e, 0xa11, v6_net, 0, 0, 0, 1),
            host_v6: Ipv6Addr::new(0xfd5c, 0x7a7e, 0xa11, v6_net, 0, 0, 0, 2),
        }
    }

    /// The host's address in `family`.
    pub fn host(&self, v6: bool) -> IpAddr {
        if v6 {
            self.host_v6.into()
        } else {
            self.host_v4.into()
        }
    }
}

/// IPv4 prefix length of every link (a /26 each out of 192.0.2.0/24).
const LINK_PREFIX_V4: u8 = 26;

/// client `eth0` – gateway `lan0`: 192.0.2.0/26, `fd5c:7a7e:a11:1::/64`.
pub const LAN: LinkAddrs = LinkAddrs::new(0, 1);
/// origin `eth0` – gateway `wan0`: 192.0.2.64/26, `fd5c:7a7e:a11:2::/64`.
pub const WAN: LinkAddrs = LinkAddrs::new(64, 2);
/// web `eth0` – gateway `web0`: 192.0.2.128/26, `fd5c:7a7e:a11:3::/64`.
pub const WEB_LINK: LinkAddrs = LinkAddrs::new(128, 3);

/// The gateway's interface names.
pub const LAN_IF: &str = "lan0";
/// The gateway's interface toward the origin.
pub const WAN_IF: &str = "wan0";
/// The gateway's interface toward the unmapped web server.
pub const WEB_IF: &str = "web0";
/// Every other host's one interface (the client's, the origin's, the web server's).
pub const HOST_IF: &str = "eth0";

/// The origin's SCTP address over IPv4 (what the gateway config points at).
pub fn origin_sctp_v4() -> SocketAddr {
    SocketAddr::new(WAN.host_v4.into(), ORIGIN_PORT)
}

/// The origin's SCTP address over IPv6.
pub fn origin_sctp_v6() -> SocketAddr {
    SocketAddr::new(WAN.host_v6.into(), ORIGIN_PORT)
}

/// How the gateway's `wan0` reaches the origin's `eth0`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WanLink {
    /// One veth pair.
    #[default]
    Direct,
    /// Through a namespace `wan` holding [`WAN_TOWARD_GATEWAY`] (peer of `wan0`)
    /// and [`WAN_TOWARD_ORIGIN`] (peer of the origin's `eth0`), both up, without
    /// addresses and with nothing forwarding between them: whoever asks for this
    /// (a WAN emulator, a bridge) moves the frames.
    ThroughNamespace,
}

/// The middle namespace's interface toward the gateway.
pub const WAN_TOWARD_GATEWAY: &str = "gw0";
/// The middle namespace's interface toward the origin.
pub const WAN_TOWARD_ORIGIN: &str = "origin0";

/// The four namespaces (five with a middle WAN namespace), wired and routed;
/// every namespace (and so every interface) is deleted on drop.
#[derive(Debug)]
pub struct Topology {
    /// The LAN client: one default route per family via the gateway, no proxy.
    pub client: Netns,
    /// The router where the gateway runs: forwarding on, `lan0`, `wan0`, `web0`.
    pub gateway: Netns,
    /// The origin host: SCTP origin on its WAN address, the site addresses on `lo`.
    pub origin: Netns,
    /// The unmapped web server: its addresses on `lo`.
    pub web: Netns,
    /// The middle namespace of [`WanLink::ThroughNamespace`].
    pub wan: Option<Netns>,
}

static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);

impl Topology {
    /// Builds the topology with a direct gateway–origin link. Names start with
    /// `prefix` (say `gwe2e-`), then this process's id and a per-process counter.
    pub fn create(prefix: &str) -> Result<Self> {
        Self::create_with(prefix, WanLink::Direct)
    }

    /// Builds the topology with the given gateway–origin link.
    pub fn create_with(prefix: &str, wan_link: WanLink) -> Result<Self> {
        let n = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let base = format!("{prefix}{}-{n}-", std::process::id());
        // Each guard deletes its namespace if a later step fails.
        let topology = Topology {
            client: Netns::create(&format!("{base}client"))?,
            gateway: Netns::create(&format!("{base}gateway"))?,
            origin: Netns::create(&format!("{base}origin"))?,
            web: Netns::create(&format!("{base}web"))?,
            wan: match wan_link {
                WanLink::Direct => None,
                WanLink::ThroughNamespace => Some(Netns::create(&format!("{base}wan"))?),
            },
        };
        topology.wire()?;
        Ok(topology)
    }

    fn wire(&self) -> Result<()> {
        let (client, gw, origin, web) = (
            self.client.name(),
            self.gateway.name(),
            self.origin.name(),
            self.web.name(),
        );
        veth(gw, LAN_IF, client, HOST_IF)?;
        match &self.wan {
            None => veth(gw, WAN_IF, origin, HOST_IF)?,
            Some(wan) => {
                veth(gw, WAN_IF, wan.name(), WAN_TOWARD_GATEWAY)?;
                veth(wan.name(), WAN_TOWARD_ORIGIN, origin, HOST_IF)?;
            }
        }
        veth(gw, WEB_IF, web, HOST_IF)?;

        for (host, link, gw_if) in [
            (client, LAN, LAN_IF),
            (origin, WAN, WAN_IF),
            (web, WEB_LINK, WEB_IF),
        ] {
            address(gw, gw_if, link.gateway_v4.into(), LINK_PREFIX_V4)?;
            address(gw, gw_if, link.gateway_v6.into(), 64)?;
            address(host, HOST_IF, link.host_v4.into(), LINK_PREFIX_V4)?;
            address(host, HOST_IF, link.host_v6.into(), 64)?;
            ip(&[
                "-n",
                host,
                "route",
                "add",
                "default",
                "via",
                &link.gateway_v4.to_string(),
            ])?;
            ip(&[
                "-n",
                host,
                "-6",
                "route",
                "add",
                "default",
                "via",
                &link.gateway_v6.to_string(),
            ])?;
        }

        address(origin, "lo", SITE_V4.into(), 32)?;
        address(origin, "lo", SITE_V6.into(), 128)?;
        address(web, "lo", WEB_V4.into(), 32)?;
        address(web, "lo", WEB_V6.into(), 128)?;
        for (net, via) in [
            (SITE_NET_V4, WAN.host_v4.to_string()),
            (SITE_NET_V6, WAN.host_v6.to_string()),
            (WEB_NET_V4, WEB_LINK.host_v4.to_string()),
            (WEB_NET_V6, WEB_LINK.host_v6.to_string()),
        ] {
            ip(&["-n", gw, "route", "add", net, "via", &via])?;
        }

        sysctl(gw, "net.ipv4.ip_forward", "1")?;
        sysctl(gw, "net.ipv6.conf.all.forwarding", "1")?;
        Ok(())
    }

    /// The namespace names, in the order client, gateway, origin, web (and wan).
    pub fn namespaces(&self) -> Vec<&str> {
        let mut names = vec![
            self.client.name(),
            self.gateway.name(),
            self.origin.name(),
            self.web.name(),
        ];
        names.extend(self.wan.as_ref().map(Netns::name));
        names
    }
}

/// Adds `addr/prefix` to `dev` in `ns`; IPv6 without duplicate address detection,
/// so the address is usable at once instead of tentative for a second or two.
fn address(ns: &str, dev: &str, addr: IpAddr, prefix: u8) -> Result<()> {
    let cidr = format!("{addr}/{prefix}");
    match addr {
        IpAddr::V4(_) => ip(&["-n", ns, "addr", "add", &cidr, "dev", dev])?,
        IpAddr::V6(_) => ip(&["-n", ns, "addr", "add", &cidr, "dev", dev, "nodad"])?,
    };
    Ok(())
}
