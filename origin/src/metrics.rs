//! The origin's own figures for Prometheus (`[metrics]` in origin.toml): a
//! small HTTP/1.1 server on a configured address, loopback by convention.
//!
//! | request | answer |
//! |---|---|
//! | `GET /metrics` | OpenMetrics text, encoded by `prometheus-client` |
//! | another method on `/metrics` | 405 |
//! | any other path | 404 |
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `origin_associations_open` | gauge | associations being served now |
//! | `origin_associations_total` | counter | associations accepted since start |
//! | `origin_requests_total` | counter | REQUESTs received |
//! | `origin_responses_completed_total` | counter | responses ended with RESPONSE_END |
//! | `origin_responses_cancelled_total` | counter | responses stopped by the gateway's CANCEL |
//! | `origin_responses_reset_total` | counter | requests answered with RESET (refused, malformed, failed) |
//! | `origin_body_bytes_total` | counter | response body bytes handed to the transport (pushes' included) |
//! | `origin_pushes_promised_total` | counter | PUSH_PROMISEs sent (docs/protocol.md, "PUSH") |
//! | `origin_pushes_revalidations_total` | counter | of those, conditional GETs revalidating a stale copy the gateway holds |
//! | `origin_pushes_skipped_held_fresh_total` | counter | pushes not made because the gateway holds a fresh copy (PUSH_BUDGET) |
//! | `origin_push_body_bytes_total` | counter | RESPONSE_BODY bytes of pushes handed to the transport |
//! | `origin_pushes_cancelled_total` | counter | pushes stopped by the gateway: CANCEL or RESET of the push, or of its page |
//! | `origin_scheduler_chunks_total{policy}` | counter | messages the stream scheduler handed to the transport |
//! | `origin_scheduler_holds_total{policy,reason}` | counter | times the scheduler began holding ready work back: `backlog`, `stream_transport` (queue-aware), `transport` (every policy) |
//! | `origin_transport_driver_panics_total` | counter | times a userspace SCTP driver task panicked (a bug; its associations ended, the listener started again) |
//!
//! The scheduler's series exist from the start, at 0, for the configured
//! policy ([`OriginMetrics::for_policy`]); holds count when they begin, not
//! at every decision ([`crate::response_scheduler::ResponseSchedulerTally`]).
//!
//! The counters are the per-association [`AssociationStats`] summed over every
//! association since the origin started, and move as things happen (the
//! driver counts into both), not when an association ends: an association
//! that ends in an error still counts. The open gauge is not called
//! `origin_associations`: OpenMetrics names the counter's family
//! `origin_associations` too, and two families may not share a name.
//!
//! What it never does: answer anything but `/metrics`, or hold a lock a
//! driver waits on (the figures are atomics).
//!
//! [`AssociationStats`]: crate::server::AssociationStats

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::response_scheduler::{ResponsePolicyKind, ResponseSchedulerTally};

/// The content type of `/metrics`' answer.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `[metrics]`: absent, no endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// TCP address of the endpoint. Whoever reaches it reads the figures:
    /// keep it on loopback.
    pub listen: SocketAddr,
}

/// The origin's counters, shared by every association's driver and the
/// endpoint. Clones count into the same figures.
#[derive(Debug, Clone, Default)]
pub struct OriginMetrics {
    associations_open: Gauge,
    associations: Counter,
    requests: Counter,
    completed: Counter,
    cancelled: Counter,
    reset: Counter,
    body_bytes: Counter,
    pushes_promised: Counter,
    push_revalidations: Counter,
    pushes_skipped_fresh: Counter,
    push_body_bytes: Counter,
    pushes_cancelled: Counter,
    scheduler_chunks: Family<PolicyLabel, Counter>,
    scheduler_holds: Family<HoldLabels, Counter>,
}

/// `origin_scheduler_chunks_total`'s label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PolicyLabel {
    policy: &'static str,
}

/// `origin_scheduler_holds_total`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HoldLabels {
    policy: &'static str,
    reason: &'static str,
}

/// The `reason` label's values, in [`ResponseSchedulerTally`]'s order.
const HOLD_REASONS: [&str; 3] = ["backlog", "stream_transport", "transport"];

/// One association driver's handles on the scheduler's series of its
/// policy: [`add`](Self::add) moves them by what its scheduler decided since
/// the last call.
#[derive(Debug, Clone)]
pub struct SchedulerCounters {
    chunks: Counter,
    holds: [Counter; 3],
    reported: ResponseSchedulerTally,
}

impl SchedulerCounters {
    /// Counts the difference between `tally` (the scheduler's running
    /// figures) and the last one reported.
    pub fn add(&mut self, tally: ResponseSchedulerTally) {
        if tally == self.reported {
            return;
        }
        let last = self.reported;
        self.chunks.inc_by(tally.chunks.saturating_sub(last.chunks));
        for (counter, (now, before)) in self.holds.iter().zip([
            (tally.held_for_backlog, last.held_for_backlog),
            (
                tally.held_for_stream_transport,
                last.held_for_stream_transport,
            ),
            (tally.held_for_transport, last.held_for_transport),
        ]) {
            counter.inc_by(now.saturating_sub(before));
        }
        self.reported = tally;
    }
}

/// One association's place in `origin_associations_open`, given back on drop
/// (also when the driver's task is aborted).
#[derive(Debug)]
pub struct OpenAssociation(Gauge);

impl Drop for OpenAssociation {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What a driver counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// A REQUEST arrived.
    Request,
    /// A response ended with RESPONSE_END.
    Completed,
    /// A response was cancelled.
    Cancelled,
    /// A request was answered with RESET.
    Reset,
    /// This many body bytes were sent.
    BodyBytes(u64),
    /// A PUSH_PROMISE was sent; `conditional` for a revalidation.
    PushPromised {
        /// The push is a conditional GET for a stale copy the gateway holds.
        conditional: bool,
    },
    /// This many pushes were not made: the gateway holds them fresh.
    PushesSkippedFresh(u64),
    /// This many body bytes of a push were sent (also counted as `BodyBytes`).
    PushBodyBytes(u64),
    /// The gateway stopped a promised push.
    PushCancelled,
}

impl OriginMetrics {
    /// Figures whose scheduler series for `policy` exist from the start, at 0.
    pub fn for_policy(policy: ResponsePolicyKind) -> Self {
        let metrics = Self::default();
        drop(metrics.scheduler(policy));
        metrics
    }

    /// The scheduler's series of `policy`, for one association's driver.
    pub fn scheduler(&self, policy: ResponsePolicyKind) -> SchedulerCounters {
        let policy = policy.name();
        SchedulerCounters {
            chunks: self
                .scheduler_chunks
                .get_or_create(&PolicyLabel { policy })
                .clone(),
            holds: HOLD_REASONS.map(|reason| {
                self.scheduler_holds
                    .get_or_create(&HoldLabels { policy, reason })
                    .clone()
            }),
            reported: ResponseSchedulerTally::default(),
        }
    }

    /// Counts an association accepted; it stays open until the guard drops.
    pub fn association_opened(&self) -> OpenAssociation {
        self.associations.inc();
        self.associations_open.inc();
        OpenAssociation(self.associations_open.clone())
    }

    pub(crate) fn count(&self, tally: Tally) {
        match tally {
            Tally::Request => self.requests.inc(),
            Tally::Completed => self.completed.inc(),
            Tally::Cancelled => self.cancelled.inc(),
            Tally::Reset => self.reset.inc(),
            Tally::BodyBytes(n) => self.body_bytes.inc_by(n),
            Tally::PushPromised { conditional } => {
                if conditional {
                    self.push_revalidations.inc();
                }
                self.pushes_promised.inc()
            }
            Tally::PushesSkippedFresh(n) => self.pushes_skipped_fresh.inc_by(n),
            Tally::PushBodyBytes(n) => self.push_body_bytes.inc_by(n),
            Tally::PushCancelled => self.pushes_cancelled.inc(),
        };
    }

    /// A registry of these figures (clones: they go on counting).
    pub fn registry(&self) -> Registry {
        let mut r = Registry::default();
        r.register(
            "origin_associations_open",
            "Associations being served now",
            self.associations_open.clone(),
        );
        r.register(
            "origin_associations",
            "Associations accepted",
            self.associations.clone(),
        );
        r.register(
            "origin_requests",
            "REQUESTs received",
            self.requests.clone(),
        );
        r.register(
            "origin_responses_completed",
            "Responses ended with RESPONSE_END",
            self.completed.clone(),
        );
        r.register(
            "origin_responses_cancelled",
            "Responses stopped by the gateway's CANCEL",
            self.cancelled.clone(),
        );
        r.register(
            "origin_responses_reset",
            "Requests answered with RESET (refused, malformed, failed)",
            self.reset.clone(),
        );
        r.register_with_unit(
            "origin_body",
            "Response body bytes handed to the transport",
            Unit::Bytes,
            self.body_bytes.clone(),
        );
        r.register(
            "origin_pushes_promised",
            "PUSH_PROMISEs sent",
            self.pushes_promised.clone(),
        );
        r.register(
            "origin_pushes_revalidations",
            "PUSH_PROMISEs of conditional GETs revalidating a stale copy the gateway holds",
            self.push_revalidations.clone(),
        );
        r.register(
            "origin_pushes_skipped_held_fresh",
            "Pushes not made because the gateway holds a fresh copy",
            self.pushes_skipped_fresh.clone(),
        );
        r.register_with_unit(
            "origin_push_body",
            "Response body bytes of pushes handed to the transport",
            Unit::Bytes,
            self.push_body_bytes.clone(),
        );
        r.register(
            "origin_pushes_cancelled",
            "Pushes stopped by the gateway (CANCEL or RESET of the push or of its page)",
            self.pushes_cancelled.clone(),
        );
        r.register_collector(Box::new(DriverPanics));
        r.register_collector(Box::new(EndpointEvents));
        r.register(
            "origin_scheduler_chunks",
            "Messages the stream scheduler handed to the transport, by policy",
            self.scheduler_chunks.clone(),
        );
        r.register(
            "origin_scheduler_holds",
            "Times the scheduler began holding ready work back: backlog (queue-aware: a gateway backlog above backlog_window), stream_transport (queue-aware: a stream at stream_transport_target), transport (the transport at transport_target)",
            self.scheduler_holds.clone(),
        );
        r
    }
}

/// `origin_transport_driver_panics_total`, read at each scrape from the
/// userspace SCTP backend's process-wide count.
#[derive(Debug)]
struct DriverPanics;

impl Collector for DriverPanics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let metric = encoder.encode_descriptor(
            "origin_transport_driver_panics",
            "Times a userspace SCTP driver task panicked (the associations of its socket ended and the listener started again); nonzero means a bug to report",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        ConstCounter::new(gateway_transport::userspace::driver_panics()).encode(metric)
    }
}

/// `origin_sctp_endpoint_events_total{event}`, read at each scrape from the
/// userspace SCTP backend's process-wide counts.
#[derive(Debug)]
struct EndpointEvents;

impl Collector for EndpointEvents {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let mut family = encoder.encode_descriptor(
            "origin_sctp_endpoint_events",
            "What the userspace SCTP listeners counted before any association: malformed datagrams, INIT ACKs sent, forged and stale cookies, out-of-the-blue packets, INITs and cookies refused at limits.max_associations (refused_at_total_limit) or limits.max_associations_per_source (refused_at_source_limit), INITs left unanswered beyond limits.init_acks_per_second (refused_at_init_rate), and peers' UDP port changes followed (RFC 6951 5.4)",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (event, count) in gateway_transport::userspace::endpoint_events() {
            let labels = [("event", event)];
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(count).encode(metric)?;
        }
        Ok(())
    }
}

/// Serves `/metrics` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    metrics: OriginMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let registry = Arc::new(metrics.registry());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let answer = handle(&registry, &request);
                async move { Ok::<_, Infallible>(answer) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn handle(registry: &Registry, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => reply(StatusCode::OK, OPENMETRICS, text),
                Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        (_, "/metrics") => plain(StatusCode::METHOD_NOT_ALLOWED, "GET only"),
        _ => plain(StatusCode::NOT_FOUND, "GET /metrics"),
    }
}

fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", format!("{message}\n"))
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_every_figure_summed_and_the_gauge_follows_guards() {
        let metrics = OriginMetrics::default();
        let first = metrics.association_opened();
        let second = metrics.clone().association_opened();
        drop(first);
        for tally in [
            Tally::Request,
            Tally::Request,
            Tally::Completed,
            Tally::Cancelled,
            Tally::Reset,
            Tally::BodyBytes(100),
            Tally::BodyBytes(23),
            Tally::PushPromised { conditional: false },
            Tally::PushPromised { conditional: true },
            Tally::PushesSkippedFresh(3),
            Tally::PushBodyBytes(40),
            Tally::PushCancelled,
        ] {
            metrics.count(tally);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry()).expect("encodes");
        for line in [
            "# TYPE origin_associations_open gauge",
            "origin_associations_open 1\n",
            "# TYPE origin_associations counter",
            "origin_associations_total 2\n",
            "origin_requests_total 2\n",
            "origin_responses_completed_total 1\n",
            "origin_responses_cancelled_total 1\n",
            "origin_responses_reset_total 1\n",
            "# UNIT origin_body_bytes bytes",
            "origin_body_bytes_total 123\n",
            "origin_pushes_promised_total 2\n",
            "origin_pushes_revalidations_total 1\n",
            "origin_pushes_skipped_held_fresh_total 3\n",
            "# UNIT origin_push_body_bytes bytes",
            "origin_push_body_bytes_total 40\n",
            "origin_pushes_cancelled_total 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        let mut scheduler = metrics.scheduler(ResponsePolicyKind::QueueAware);
        scheduler.add(ResponseSchedulerTally {
            chunks: 5,
            held_for_backlog: 2,
            held_for_stream_transport: 0,
            held_for_transport: 1,
        });
        // Running figures: only the difference counts.
        scheduler.add(ResponseSchedulerTally {
            chunks: 7,
            held_for_backlog: 2,
            held_for_stream_transport: 1,
            held_for_transport: 1,
        });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry()).expect("encodes");
        for line in [
            "# TYPE origin_scheduler_chunks counter",
            "origin_scheduler_chunks_total{policy=\"queue-aware\"} 7\n",
            "origin_scheduler_holds_total{policy=\"queue-aware\",reason=\"backlog\"} 2\n",
            "origin_scheduler_holds_total{policy=\"queue-aware\",reason=\"stream_transport\"} 1\n",
            "origin_scheduler_holds_total{policy=\"queue-aware\",reason=\"transport\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        drop(second);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry()).expect("encodes");
        assert!(text.contains("origin_associations_open 0\n"), "{text}");
    }

    #[test]
    fn the_configured_policy_has_its_series_at_zero_from_the_start() {
        let metrics = OriginMetrics::for_policy(ResponsePolicyKind::Scf);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry()).expect("encodes");
        for line in [
            "origin_scheduler_chunks_total{policy=\"scf\"} 0\n",
            "origin_scheduler_holds_total{policy=\"scf\",reason=\"backlog\"} 0\n",
            "origin_scheduler_holds_total{policy=\"scf\",reason=\"transport\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        for event in gateway_transport::userspace::ENDPOINT_EVENTS {
            let series = format!("origin_sctp_endpoint_events_total{{event=\"{event}\"}} ");
            assert!(text.contains(&series), "{series:?} missing from\n{text}");
        }
    }
}
