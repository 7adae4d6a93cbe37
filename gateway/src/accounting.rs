//! Per-stream accounting at the gateway: how it runs (userspace, optionally
//! cross-checked by the XDP program), the one start-up line that says so, and
//! the per-stream figures on the admin endpoint's metrics.
//!
//! The backlog the gateway reports to origins (FEEDBACK) is always computed in
//! userspace (`origin_link`'s backlog core: response bytes queued in the
//! gateway plus the browser sockets' unacknowledged bytes), so it is correct
//! with or without BPF. Where `[ebpf]` names the object and the WAN interface
//! and the kernel lets us load it, `xdp_sctp` also counts the DATA bytes that
//! arrive per stream; those figures are exported next to the userspace ones
//! (`gateway_ebpf_stream_arrived_bytes`), as a cross-check: they include what
//! still waits in the association's receive buffer, which userspace cannot see
//! per stream. Nothing depends on them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use ebpf_common::{DIRECTION_INGRESS, TcpFlowKey};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::browser_socket::BrowserSocket;
pub use crate::config::{EbpfConfig, XdpModeChoice};
use crate::ebpf::{SctpAccounting, SctpAccountingConfig, TcpFlowAccounting, XdpMode};
use crate::origin_link::{OriginLink, StreamFigures};

/// How per-stream accounting runs.
#[derive(Debug)]
pub struct Accounting {
    /// The loaded and attached programs, if any.
    ebpf: Option<Mutex<SctpAccounting>>,
    /// The browser-flow programs on the LAN interfaces, if they run.
    browsers: Option<Mutex<TcpFlowAccounting>>,
    /// The start-up line's explanation.
    how: String,
}

/// The LAN side the browser-flow programs attach to: the interfaces where
/// browsers are intercepted, and the intercepted server ports.
#[derive(Debug, Clone, Default)]
pub struct LanSide {
    /// `intercept.lan_interfaces`.
    pub interfaces: Vec<String>,
    /// `intercept.ports`.
    pub ports: Vec<u16>,
}

impl Accounting {
    /// Loads and attaches `xdp_sctp` if `config` asks for it and the kernel
    /// allows it; otherwise userspace only. Never fails: the reason is in
    /// [`describe`](Self::describe).
    pub fn start(config: &EbpfConfig, lan: &LanSide) -> Self {
        let userspace = |why: String| Self {
            ebpf: None,
            browsers: None,
            how: format!("userspace only ({why})"),
        };
        let Some(object) = &config.object else {
            return userspace("ebpf.object is not set".into());
        };
        let (browsers, browsers_how) = start_browser_flows(object, lan);
        let with_browsers = |how: String| format!("{how}; browser flows: {browsers_how}");
        let Some(interface) = &config.interface else {
            return Self {
                ebpf: None,
                browsers,
                how: with_browsers(
                    "userspace only (ebpf.interface is not set: no WAN interface for xdp_sctp)"
                        .into(),
                ),
            };
        };
        let mut loaded = match SctpAccounting::load_file(object, SctpAccountingConfig::default()) {
            Ok(loaded) => loaded,
            Err(e) => {
                return Self {
                    ebpf: None,
                    browsers,
                    how: with_browsers(format!(
                        "userspace only (loading {} failed: {}; BPF needs root or CAP_BPF \
                         with CAP_NET_ADMIN, and a kernel with BTF)",
                        object.display(),
                        chain(&e)
                    )),
                };
            }
        };
        let mode = XdpMode::from(config.xdp_mode);
        if let Err(e) = loaded.attach_ingress(interface, mode) {
            return Self {
                ebpf: None,
                browsers,
                how: with_browsers(format!(
                    "userspace only (attaching xdp_sctp to {interface} failed: {})",
                    chain(&e)
                )),
            };
        }
        Self {
            ebpf: Some(Mutex::new(loaded)),
            browsers,
            how: with_browsers(format!(
                "userspace, cross-checked by eBPF (xdp_sctp on {interface}, {mode} mode)"
            )),
        }
    }

    /// Userspace only, for `reason`.
    pub fn userspace_only(reason: &str) -> Self {
        Self {
            ebpf: None,
            browsers: None,
            how: format!("userspace only ({reason})"),
        }
    }

    /// Whether the XDP program runs.
    pub fn with_ebpf(&self) -> bool {
        self.ebpf.is_some()
    }

    /// How it runs and why, for the start-up line.
    pub fn describe(&self) -> &str {
        &self.how
    }

    /// DATA and I-DATA bytes `xdp_sctp` saw arrive, per stream id, summed over
    /// every association on the interface (`None` without eBPF or on a map
    /// error).
    pub fn arrived_per_stream(&self) -> Option<BTreeMap<u16, u64>> {
        let ebpf = self.ebpf.as_ref()?;
        let snapshot = ebpf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .snapshot()
            .ok()?;
        let mut arrived = BTreeMap::new();
        for (key, counters) in &snapshot.streams {
            if key.direction == DIRECTION_INGRESS {
                *arrived.entry(key.stream_id).or_insert(0) += counters.data_bytes;
            }
        }
        Some(arrived)
    }

    /// Bytes in flight toward the browsers of `sockets` (sent after the LAN
    /// interface's qdisc and not yet acknowledged), per data stream; `None`
    /// without the browser-flow programs. A connection the programs have not
    /// seen in both directions counts in `connections` only.
    pub fn browser_in_flight(
        &self,
        sockets: &[(u16, Arc<BrowserSocket>)],
    ) -> Option<BTreeMap<u16, BrowserFlows>> {
        let browsers = self.browsers.as_ref()?;
        let browsers = browsers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut per_stream: BTreeMap<u16, BrowserFlows> = BTreeMap::new();
        for (stream, socket) in sockets {
            let flows = per_stream.entry(*stream).or_default();
            flows.connections += 1;
            let Ok((local, peer)) = socket.addresses() else {
                continue;
            };
            let key = TcpFlowKey {
                browser_addr: v6_octets(peer.ip()),
                server_addr: v6_octets(local.ip()),
                browser_port: peer.port(),
                server_port: local.port(),
                _pad: [0; 4],
            };
            if let Some(in_flight) = browsers
                .flow(&key)
                .ok()
                .flatten()
                .and_then(|f| f.in_flight())
            {
                flows.seen += 1;
                flows.in_flight += u64::from(in_flight);
            }
        }
        Some(per_stream)
    }
}

/// What the browser-flow programs say about one data stream's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrowserFlows {
    /// Pinned browser connections.
    pub connections: u32,
    /// Of those, the ones the programs saw both ways.
    pub seen: u32,
    /// Their bytes in flight, summed.
    pub in_flight: u64,
}

/// Loads the browser-flow programs and attaches them to every LAN
/// interface; the programs (if they run) and the start-up line's words.
fn start_browser_flows(object: &Path, lan: &LanSide) -> (Option<Mutex<TcpFlowAccounting>>, String) {
    if lan.interfaces.is_empty() {
        return (None, "not counted (no LAN interface)".into());
    }
    let mut loaded = match TcpFlowAccounting::load_file(object, &lan.ports) {
        Ok(loaded) => loaded,
        Err(e) => return (None, format!("not counted (loading failed: {})", chain(&e))),
    };
    for interface in &lan.interfaces {
        if let Err(e) = loaded.attach(interface) {
            return (
                None,
                format!(
                    "not counted (attaching to {interface} failed: {})",
                    chain(&e)
                ),
            );
        }
    }
    let how = format!(
        "eBPF (tc_tcp_egress and tc_tcp_ingress on {})",
        lan.interfaces.join(", ")
    );
    (Some(Mutex::new(loaded)), how)
}

/// `ip` as the browser-flow map keys it: IPv6, or IPv4-mapped IPv6.
fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// An error with its sources, `: ` apart (the kernel's reason is in a source).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The per-stream figures of every origin link (and the eBPF cross-check),
/// read at each scrape.
#[derive(Debug)]
pub struct StreamCollector {
    links: Vec<OriginLink>,
    accounting: std::sync::Arc<Accounting>,
}

impl StreamCollector {
    /// Figures of `links`, and of `accounting`'s programs if they run.
    pub fn new(links: Vec<OriginLink>, accounting: std::sync::Arc<Accounting>) -> Self {
        Self { links, accounting }
    }

    /// Whether eBPF cross-checks the accounting, and what it saw arrive.
    fn encode_ebpf(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let ebpf = ConstGauge::new(i64::from(self.accounting.with_ebpf()));
        ebpf.encode(encoder.encode_descriptor(
            "gateway_stream_accounting_ebpf",
            "1 when xdp_sctp cross-checks the per-stream accounting, 0 for userspace only",
            None,
            ebpf.metric_type(),
        )?)?;
        self.encode_browser_in_flight(encoder)?;
        if let Some(arrived) = self.accounting.arrived_per_stream() {
            let mut family = encoder.encode_descriptor(
                "gateway_ebpf_stream_arrived_bytes",
                "Per stream id: DATA bytes xdp_sctp saw arrive on the WAN interface (all associations)",
                None,
                ConstCounter::new(0u64).metric_type(),
            )?;
            for (stream, bytes) in arrived {
                let stream = stream.to_string();
                ConstCounter::new(bytes).encode(family.encode_family(&[("stream", &stream)])?)?;
            }
        }
        Ok(())
    }
}

/// One figure of a data stream.
type Pick = fn(&StreamFigures) -> u64;

/// One figure of a data stream's browser flows.
type FlowsPick = fn(&BrowserFlows) -> u64;

/// The per-stream gauges: name, help and the figure each one exports.
const STREAM_GAUGES: [(&str, &str, Pick); 4] = [
    (
        "gateway_stream_backlog_bytes",
        "Per data stream: response bytes in the gateway plus the pinned browser sockets' unacknowledged bytes (what FEEDBACK reports)",
        |f| f.backlog,
    ),
    (
        "gateway_stream_queued_bytes",
        "Per data stream: response bytes received and not yet taken from the response queues",
        |f| f.queued,
    ),
    (
        "gateway_stream_socket_bytes",
        "Per data stream: bytes handed on toward the pinned browsers and not yet acknowledged by them",
        |f| f.socket_queued,
    ),
    (
        "gateway_stream_backlog_peak_bytes",
        "Per data stream: the largest backlog seen on the current association",
        |f| f.peak,
    ),
];

/// The per-stream counters, as [`STREAM_GAUGES`].
const STREAM_COUNTERS: [(&str, &str, Pick); 3] = [
    (
        "gateway_stream_received_bytes",
        "Per data stream: response body bytes received from the association",
        |f| f.received,
    ),
    (
        "gateway_stream_delivered_bytes",
        "Per data stream: response body bytes taken toward browsers",
        |f| f.delivered,
    ),
    (
        "gateway_stream_discarded_bytes",
        "Per data stream: response body bytes dropped because their request ended first",
        |f| f.discarded,
    ),
];

impl StreamCollector {
    /// Per origin and data stream, the bytes in flight toward its browsers
    /// (the LAN-side TCP programs), when they run.
    fn encode_browser_in_flight(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let per_link: Vec<(&str, BTreeMap<u16, BrowserFlows>)> = self
            .links
            .iter()
            .filter_map(|link| {
                let flows = self.accounting.browser_in_flight(&link.browser_sockets())?;
                Some((link.name(), flows))
            })
            .collect();
        if per_link.is_empty() {
            return Ok(());
        }
        let families: [(&str, &str, FlowsPick); 2] = [
            (
                "gateway_ebpf_stream_browser_in_flight_bytes",
                "Per data stream: bytes sent toward its pinned browsers and not yet acknowledged \
                 by them, as tc_tcp_egress and tc_tcp_ingress saw them on the LAN interfaces",
                |f| f.in_flight,
            ),
            (
                "gateway_ebpf_stream_browser_flows",
                "Per data stream: pinned browser connections the LAN-side TCP programs saw both ways",
                |f| u64::from(f.seen),
            ),
        ];
        for (name, help, pick) in families {
            let mut family =
                encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
            for (origin, streams) in &per_link {
                for (stream, flows) in streams {
                    let stream = stream.to_string();
                    ConstGauge::new(i64::try_from(pick(flows)).unwrap_or(i64::MAX)).encode(
                        family
                            .encode_family(&[("origin", *origin), ("stream", stream.as_str())])?,
                    )?;
                }
            }
        }
        Ok(())
    }
}

impl Collector for StreamCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let per_link: Vec<_> = self
            .links
            .iter()
            .map(|link| (link.name().to_owned(), link.backlog()))
            .collect();
        encode_per_stream(&mut encoder, &per_link)?;
        let mut family = encoder.encode_descriptor(
            "gateway_feedback_sent",
            "FEEDBACK messages sent on the current association",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (origin, (_, sent)) in &per_link {
            ConstCounter::new(*sent)
                .encode(family.encode_family(&[("origin", origin.as_str())])?)?;
        }
        self.encode_ebpf(&mut encoder)
    }
}

/// [`STREAM_GAUGES`] and [`STREAM_COUNTERS`], one series per origin and data
/// stream.
fn encode_per_stream(
    encoder: &mut DescriptorEncoder<'_>,
    per_link: &[(String, (Vec<StreamFigures>, u64))],
) -> std::fmt::Result {
    for (name, help, pick) in STREAM_GAUGES {
        let mut family =
            encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
        for (origin, (figures, _)) in per_link {
            for f in figures {
                let stream = f.stream.to_string();
                let value = i64::try_from(pick(f)).unwrap_or(i64::MAX);
                ConstGauge::new(value).encode(
                    family.encode_family(&[("origin", origin.as_str()), ("stream", &stream)])?,
                )?;
            }
        }
    }
    for (name, help, pick) in STREAM_COUNTERS {
        let mut family =
            encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
        for (origin, (figures, _)) in per_link {
            for f in figures {
                let stream = f.stream.to_string();
                ConstCounter::new(pick(f)).encode(
                    family.encode_family(&[("origin", origin.as_str()), ("stream", &stream)])?,
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_object_or_interface_it_says_userspace_only_and_why() {
        let none = Accounting::start(&EbpfConfig::default(), &LanSide::default());
        assert!(!none.with_ebpf());
        assert_eq!(none.describe(), "userspace only (ebpf.object is not set)");
        assert_eq!(none.arrived_per_stream(), None);

        let no_interface = Accounting::start(
            &EbpfConfig {
                object: Some("ebpf-programs.o".into()),
                ..EbpfConfig::default()
            },
            &LanSide::default(),
        );
        assert!(!no_interface.with_ebpf());
        assert!(
            no_interface
                .describe()
                .ends_with("; browser flows: not counted (no LAN interface)"),
            "{}",
            no_interface.describe()
        );
        assert!(
            no_interface
                .describe()
                .contains("ebpf.interface is not set"),
            "{}",
            no_interface.describe()
        );
    }

    #[test]
    fn an_unloadable_object_falls_back_to_userspace() {
        let lan = LanSide {
            interfaces: vec!["lo".into()],
            ports: vec![80],
        };
        let missing = Accounting::start(
            &EbpfConfig {
                object: Some("/nonexistent/ebpf-programs".into()),
                interface: Some("lo".into()),
                xdp_mode: XdpModeChoice::Generic,
            },
            &lan,
        );
        assert!(!missing.with_ebpf());
        assert_eq!(missing.browser_in_flight(&[]), None);
        let how = missing.describe();
        assert!(
            how.starts_with("userspace only (loading /nonexistent/ebpf-programs failed"),
            "{how}"
        );
        assert!(
            how.contains("; browser flows: not counted (loading failed: cannot load eBPF object"),
            "{how}"
        );
    }

    #[test]
    fn ebpf_keys_parse_and_unknown_ones_are_named() {
        let config = crate::config::GatewayConfig::from_toml(
            "[ebpf]\nobject = \"x.o\"\ninterface = \"wan0\"\nxdp_mode = \"driver\"\n",
        )
        .expect("parses");
        assert_eq!(config.ebpf.interface.as_deref(), Some("wan0"));
        assert_eq!(config.ebpf.xdp_mode, XdpModeChoice::Driver);
        let err = crate::config::GatewayConfig::from_toml("[ebpf]\ninterfaces = \"wan0\"\n")
            .expect_err("unknown key");
        assert!(err.to_string().contains("interfaces"), "{err}");
    }
}
