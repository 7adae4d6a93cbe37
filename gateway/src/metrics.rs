//! The figures `/metrics` adds beside the cache's, the prefetch queue's and
//! the per-stream ones ([`crate::accounting`]): how long requests take and
//! which side failed them ([`RequestMetrics`], fed by the front), and what our
//! SCTP stack says about each origin's association ([`TransportCollector`],
//! read at each scrape), and the bytes sent to each LAN client
//! ([`ClientBytes`], at most [`MAX_CLIENT_SERIES`] clients by name).
//! docs/operations.md lists every metric.
//!
//! Names follow Prometheus conventions: the unit last (`_seconds`, `_bytes`,
//! added by the encoder from the descriptor's unit), `_total` on counters
//! (added by the encoder too).
//!
//! Errors by side: the front answers a request itself when it cannot forward
//! it ([`Side`] says whose fault that was, decided where the refusal is
//! made), and hyper answers a malformed request before the front sees it
//! (counted as `browser` when the connection ends with a parse error). A
//! response that breaks after its head is not counted here: the browser's
//! connection is closed and the access log says so.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Unit;

pub use crate::client_bytes::{ClientBytes, ClientTally, MAX_CLIENT_SERIES, OTHER_CLIENTS};
use crate::origin_link::{OriginLink, TransportFigures};
use crate::push::Pushes;
pub use crate::upstream::Side;

/// Upper bounds of `gateway_request_duration_seconds`' buckets, seconds: a
/// cache hit on loopback (1 ms) to the origins' default response time-out
/// (30 s); a time-out itself lands in `+Inf`.
pub const REQUEST_DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// `gateway_request_duration_seconds`' labels: the access log's `route=` and
/// `cache=` (both from fixed sets of words, so the series stay few).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
    cache: &'static str,
}

/// `gateway_request_errors_total`'s label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SideLabel {
    side: &'static str,
}

type DurationFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

/// Request durations by route and cache outcome, and errors by side. Shared
/// by the front (which records) and the admin endpoint (which encodes it
/// through [`collector`](Self::collector)).
#[derive(Debug)]
pub struct RequestMetrics {
    durations: DurationFamily,
    errors: Family<SideLabel, Counter>,
    clients: Arc<ClientBytes>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        let errors = Family::default();
        for side in Side::ALL {
            // Every side from the start, so that a graph shows 0, not nothing.
            drop(errors.get_or_create(&SideLabel {
                side: side.as_str(),
            }));
        }
        Self {
            durations: Family::new_with_constructor(|| Histogram::new(REQUEST_DURATION_BUCKETS)),
            errors,
            clients: Arc::new(ClientBytes::default()),
        }
    }
}

impl RequestMetrics {
    /// One request answered (its head handed to hyper) after `elapsed`.
    pub fn observe(&self, route: &'static str, cache: &'static str, elapsed: Duration) {
        self.durations
            .get_or_create(&RouteLabels { route, cache })
            .observe(elapsed.as_secs_f64());
    }

    /// One request failed on `side`.
    pub fn error(&self, side: Side) {
        self.errors
            .get_or_create(&SideLabel {
                side: side.as_str(),
            })
            .inc();
    }

    /// Errors counted on `side` so far.
    pub fn errors(&self, side: Side) -> u64 {
        self.errors
            .get_or_create(&SideLabel {
                side: side.as_str(),
            })
            .get()
    }

    /// Where a connection of `client` counts the bytes written to it.
    pub fn client_tally(&self, client: IpAddr) -> ClientTally {
        ClientBytes::tally(&self.clients, client)
    }

    /// Bytes sent per client (see [`ClientBytes`]).
    pub fn clients(&self) -> &ClientBytes {
        &self.clients
    }

    /// For [`admin::serve_with`](crate::admin::serve_with).
    pub fn collector(self: &Arc<Self>) -> Box<dyn Collector> {
        Box::new(RequestCollector(Arc::clone(self)))
    }
}

#[derive(Debug)]
struct RequestCollector(Arc<RequestMetrics>);

impl Collector for RequestCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let metrics = &self.0;
        metrics.durations.encode(encoder.encode_descriptor(
            "gateway_request_duration",
            "Time from the request head to the response head (the body's streaming excluded), by route and cache outcome as in the access log",
            Some(&Unit::Seconds),
            metrics.durations.metric_type(),
        )?)?;
        metrics.errors.encode(encoder.encode_descriptor(
            "gateway_request_errors",
            "Requests the gateway could not serve, by the side that failed: browser, origin or internal",
            None,
            metrics.errors.metric_type(),
        )?)?;
        encode_clients(&metrics.clients, &mut encoder)
    }
}

/// `gateway_client_sent_bytes_total{client}`: the named clients, busiest
/// first, then `other` (always present, 0 until a client is evicted).
fn encode_clients(clients: &ClientBytes, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    let (mut named, other) = clients.snapshot();
    named.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut family = encoder.encode_descriptor(
        "gateway_client_sent",
        "Bytes written to browser connections (heads and bodies), per LAN client address; past the most recent clients named, the rest are summed under client=\"other\"",
        Some(&Unit::Bytes),
        ConstCounter::new(0u64).metric_type(),
    )?;
    for (client, bytes) in named {
        let client = client.to_string();
        ConstCounter::new(bytes).encode(family.encode_family(&[("client", client.as_str())])?)?;
    }
    ConstCounter::new(other).encode(family.encode_family(&[("client", OTHER_CLIENTS)])?)
}

/// The push taker's figures (`gateway_push_*`, issue 31), read at each
/// scrape; absent with `[push]` off.
#[derive(Debug)]
pub struct PushCollector(pub Arc<Pushes>);

impl Collector for PushCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = self.0.stats();
        for (name, help, value) in [
            (
                "gateway_push_offered",
                "Pushes the origins promised (the link's own refusals included)",
                s.offered,
            ),
            (
                "gateway_push_stored",
                "Pushes stored whole in the cache",
                s.stored,
            ),
            (
                "gateway_push_revalidated",
                "304 pushes that freshened a stored entry",
                s.revalidated,
            ),
            (
                "gateway_push_used",
                "Pushed entries a browser then got from the cache (a hit or a join on the push in flight), each once",
                s.used,
            ),
            (
                "gateway_push_held_fresh",
                "Held entries sent as fresh in PUSH_BUDGETs: pushes skipped because held",
                s.held_fresh,
            ),
            (
                "gateway_push_held_stale",
                "Held entries sent stale with validators: pushes the origin can answer with a 304",
                s.held_stale,
            ),
            (
                "gateway_push_budgets",
                "PUSH_BUDGETs built for page requests",
                s.budgets,
            ),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        for (name, help, value) in [
            (
                "gateway_push_stored",
                "Body bytes of the pushes stored",
                s.stored_bytes,
            ),
            (
                "gateway_push_used",
                "Body bytes of the pushed entries a browser got from the cache",
                s.used_bytes,
            ),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                Some(&Unit::Bytes),
                counter.metric_type(),
            )?)?;
        }
        let unused = ConstGauge::new(i64::try_from(s.unused_bytes()).unwrap_or(i64::MAX));
        unused.encode(encoder.encode_descriptor(
            "gateway_push_unused",
            "Pushed bytes no browser has used (yet): stored minus used; what is evicted unused stays in it (wasted)",
            Some(&Unit::Bytes),
            unused.metric_type(),
        )?)?;
        for (name, help, reasons) in [
            (
                "gateway_push_refused",
                "Pushes refused, by reason",
                &s.refused,
            ),
            (
                "gateway_push_cancelled",
                "Pushes cancelled as not needed (held fresh, or already being fetched), by reason",
                &s.cancelled,
            ),
        ] {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0u64).metric_type(),
            )?;
            for (reason, count) in reasons {
                ConstCounter::new(*count)
                    .encode(family.encode_family(&[("reason", reason.as_str())])?)?;
            }
        }
        Ok(())
    }
}

/// The transport figures of every origin link, read at each scrape.
#[derive(Debug)]
pub struct TransportCollector {
    links: Vec<OriginLink>,
}

impl TransportCollector {
    /// Figures of `links`.
    pub fn new(links: Vec<OriginLink>) -> Self {
        Self { links }
    }
}

/// One time of the current association, seconds: name, help and the figure.
type SecondsPick = fn(&gateway_transport::SctpStats) -> Option<f64>;

/// One size of the current association, bytes: name, help and the figure.
type BytesPick = fn(&gateway_transport::SctpStats) -> u64;

/// One counter of our SCTP stack: name, help and the figure.
type CounterPick = fn(&gateway_transport::SctpCounters) -> u64;

const TRANSPORT_SECONDS: [(&str, &str, SecondsPick); 2] = [
    (
        "gateway_origin_srtt",
        "Our SCTP stack's smoothed round-trip time on the current association (absent until measured)",
        |s| s.srtt.map(|d| d.as_secs_f64()),
    ),
    (
        "gateway_origin_rto",
        "Our SCTP stack's retransmission time-out on the current association, back-off included",
        |s| Some(s.rto.as_secs_f64()),
    ),
];

const TRANSPORT_BYTES: [(&str, &str, BytesPick); 2] = [
    (
        "gateway_origin_cwnd",
        "Our SCTP stack's congestion window on the current association",
        |s| s.cwnd,
    ),
    (
        "gateway_origin_in_flight",
        "Our SCTP stack's bytes sent and not yet acknowledged on the current association",
        |s| s.flight,
    ),
];

const TRANSPORT_COUNTERS: [(&str, &str, CounterPick); 8] = [
    (
        "gateway_origin_packets_sent",
        "SCTP packets our stack handed to the network, every association of the link summed",
        |c| c.packets_sent,
    ),
    (
        "gateway_origin_packets_received",
        "SCTP packets our stack received with the right verification tag",
        |c| c.packets_received,
    ),
    (
        "gateway_origin_retransmitted_chunks",
        "DATA chunks sent again, whatever marked them",
        |c| c.retransmitted_chunks,
    ),
    (
        "gateway_origin_chunks_lost_by_sack",
        "DATA chunks declared lost from SACKs (gap reports, RACK's time rule)",
        |c| c.lost_by_sack,
    ),
    (
        "gateway_origin_chunks_lost_by_reorder_timer",
        "DATA chunks declared lost when RACK's reordering timer fired",
        |c| c.lost_by_reorder_timer,
    ),
    (
        "gateway_origin_tail_loss_probes",
        "Tail-loss probes sent (RFC 8985)",
        |c| c.tail_probes,
    ),
    (
        "gateway_origin_rto_expirations",
        "Retransmission time-outs with data outstanding",
        |c| c.rto_expirations,
    ),
    (
        "gateway_origin_spurious_recoveries",
        "Fast recoveries undone: every chunk they retransmitted had arrived",
        |c| c.spurious_recoveries,
    ),
];

impl Collector for TransportCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let figures: Vec<(&str, TransportFigures)> = self
            .links
            .iter()
            .map(|link| (link.name(), link.transport()))
            .collect();
        let mut up = encoder.encode_descriptor(
            "gateway_origin_up",
            "1 when the origin's association is established and its HELLO answered, else 0",
            None,
            ConstGauge::new(0i64).metric_type(),
        )?;
        for (origin, f) in &figures {
            ConstGauge::new(i64::from(f.up)).encode(up.encode_family(&[("origin", *origin)])?)?;
        }
        for (name, help, pick) in TRANSPORT_SECONDS {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                Some(&Unit::Seconds),
                ConstGauge::new(0.0f64).metric_type(),
            )?;
            for (origin, f) in &figures {
                if let Some(value) = f.sctp.as_ref().and_then(pick) {
                    ConstGauge::new(value).encode(family.encode_family(&[("origin", *origin)])?)?;
                }
            }
        }
        for (name, help, pick) in TRANSPORT_BYTES {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                Some(&Unit::Bytes),
                ConstGauge::new(0i64).metric_type(),
            )?;
            for (origin, f) in &figures {
                if let Some(stats) = &f.sctp {
                    let value = i64::try_from(pick(stats)).unwrap_or(i64::MAX);
                    ConstGauge::new(value).encode(family.encode_family(&[("origin", *origin)])?)?;
                }
            }
        }
        let panics = encoder.encode_descriptor(
            "gateway_transport_driver_panics",
            "Times a userspace SCTP driver task panicked (its association ended and the link reconnected); nonzero means a bug to report",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        ConstCounter::new(gateway_transport::userspace::driver_panics()).encode(panics)?;
        for (name, help, pick) in TRANSPORT_COUNTERS {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                ConstCounter::new(0u64).metric_type(),
            )?;
            for (origin, f) in &figures {
                if let Some(counters) = &f.counters {
                    ConstCounter::new(pick(counters))
                        .encode(family.encode_family(&[("origin", *origin)])?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(metrics: &Arc<RequestMetrics>) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(metrics.collector());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    /// Every push series is there from the start, each refusal reason at 0,
    /// under the names docs/operations.md gives.
    #[tokio::test]
    async fn push_series_are_named_as_documented() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = crate::config::CacheConfig {
            path: dir.path().join("cache.redb"),
            ..crate::config::CacheConfig::default()
        };
        let cache = crate::cache::Cache::open(&config).await.expect("a cache");
        let push = crate::config::PushConfig {
            enabled: true,
            ..crate::config::PushConfig::default()
        };
        let pushes = Pushes::start(&push, &cache).expect("push on with the cache on");
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(PushCollector(pushes)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for line in [
            "gateway_push_offered_total 0",
            "gateway_push_stored_total 0",
            "gateway_push_stored_bytes_total 0",
            "gateway_push_revalidated_total 0",
            "gateway_push_used_total 0",
            "gateway_push_used_bytes_total 0",
            "gateway_push_unused_bytes 0",
            "gateway_push_held_fresh_total 0",
            "gateway_push_held_stale_total 0",
            "gateway_push_budgets_total 0",
            "gateway_push_refused_total{reason=\"set_cookie\"} 0",
            "gateway_push_refused_total{reason=\"other_host\"} 0",
            "gateway_push_cancelled_total{reason=\"fresh\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
        let refused = text
            .lines()
            .filter(|l| l.starts_with("gateway_push_refused_total{"))
            .count();
        assert_eq!(refused, crate::push::REFUSED_REASONS.len());
    }

    #[test]
    fn durations_land_in_their_bucket_per_route_and_cache() {
        let metrics = Arc::new(RequestMetrics::default());
        metrics.observe("origin-host", "miss", Duration::from_millis(30));
        metrics.observe("origin-host", "miss", Duration::from_millis(3));
        metrics.observe("cache", "hit", Duration::from_micros(500));
        let text = encoded(&metrics);
        for line in [
            "# TYPE gateway_request_duration_seconds histogram",
            "# UNIT gateway_request_duration_seconds seconds",
            "gateway_request_duration_seconds_count{route=\"origin-host\",cache=\"miss\"} 2",
            "gateway_request_duration_seconds_bucket{le=\"0.005\",route=\"origin-host\",cache=\"miss\"} 1",
            "gateway_request_duration_seconds_bucket{le=\"0.05\",route=\"origin-host\",cache=\"miss\"} 2",
            "gateway_request_duration_seconds_bucket{le=\"0.001\",route=\"cache\",cache=\"hit\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn client_bytes_are_per_address_and_the_least_recent_leaves_for_other() {
        let metrics = Arc::new(RequestMetrics {
            clients: Arc::new(ClientBytes::with_limit(2)),
            ..RequestMetrics::default()
        });
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        let a = metrics.client_tally(ip("192.168.1.10"));
        a.add(100);
        metrics.client_tally(ip("::ffff:192.168.1.10")).add(1);
        metrics.client_tally(ip("192.168.1.11")).add(50);
        a.add(10);
        let text = encoded(&metrics);
        for line in [
            "# TYPE gateway_client_sent_bytes counter",
            "# UNIT gateway_client_sent_bytes bytes",
            "gateway_client_sent_bytes_total{client=\"192.168.1.10\"} 111",
            "gateway_client_sent_bytes_total{client=\"192.168.1.11\"} 50",
            "gateway_client_sent_bytes_total{client=\"other\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        // A third client: .11 was sent to least recently, so it goes.
        metrics.client_tally(ip("2001:db8::7")).add(7);
        let text = encoded(&metrics);
        for line in [
            "gateway_client_sent_bytes_total{client=\"192.168.1.10\"} 111",
            "gateway_client_sent_bytes_total{client=\"2001:db8::7\"} 7",
            "gateway_client_sent_bytes_total{client=\"other\"} 50",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains("192.168.1.11"), "{text}");
        // Busiest first.
        let first = text.find("192.168.1.10").expect("named");
        assert!(first < text.find("2001:db8::7").expect("named"), "{text}");
        let (named, other) = metrics.clients().snapshot();
        assert_eq!((named.len(), other), (2, 50));
    }

    #[test]
    fn every_side_is_there_from_the_start() {
        let metrics = Arc::new(RequestMetrics::default());
        metrics.error(Side::Origin);
        metrics.error(Side::Origin);
        assert_eq!(metrics.errors(Side::Origin), 2);
        let text = encoded(&metrics);
        for line in [
            "# TYPE gateway_request_errors counter",
            "gateway_request_errors_total{side=\"browser\"} 0",
            "gateway_request_errors_total{side=\"origin\"} 2",
            "gateway_request_errors_total{side=\"internal\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
