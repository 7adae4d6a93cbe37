//! The driver's debug time series (`RUST_LOG=origin::schedule=debug`): every
//! [`PERIOD`] one line with how the driver spent the period (sending, or
//! waiting: for work, for the policy, for the transport) and, per stream with
//! a job, what the response scheduler saw ([`StreamView`]) and the bytes
//! written on it. With the FEEDBACK lines (same target) it shows why a link
//! was left idle. Nothing is measured unless the target is enabled.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

use crate::response_scheduler::{ResponseScheduler, StreamView};

/// How often a line is written.
const PERIOD: Duration = Duration::from_millis(100);

/// What the driver waited for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    /// No job had a chunk ready.
    Work,
    /// Ready work held by the policy, nothing in the transport.
    Policy,
    /// Ready work held by a full transport (in total or on its stream).
    Transport,
}

/// One association's time series; inert unless the target is enabled.
pub(super) struct ScheduleTrace {
    enabled: bool,
    since: Instant,
    waited: [Duration; 3],
    /// Bytes written per stream this period.
    written: BTreeMap<u16, u64>,
}

impl ScheduleTrace {
    pub(super) fn new() -> Self {
        Self {
            enabled: tracing::enabled!(target: "origin::schedule", tracing::Level::DEBUG),
            since: Instant::now(),
            waited: [Duration::ZERO; 3],
            written: BTreeMap::new(),
        }
    }

    /// Whether waits are worth timing.
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    pub(super) fn handle_wait(&mut self, wait: Wait, took: Duration) {
        self.waited[wait as usize] += took;
    }

    pub(super) fn handle_written(&mut self, stream: u16, bytes: usize) {
        if self.enabled {
            *self.written.entry(stream).or_default() += bytes as u64;
        }
    }

    /// Writes the line if a period has passed.
    pub(super) fn poll(&mut self, scheduler: &ResponseScheduler) {
        if !self.enabled || self.since.elapsed() < PERIOD {
            return;
        }
        let mut streams = String::new();
        for view in scheduler.stream_views() {
            let written = self.written.get(&view.stream).copied().unwrap_or(0);
            let _ = write!(streams, " [{}]", describe(&view, written));
        }
        let [work, policy, transport] = self.waited.map(|d| d.as_millis());
        tracing::debug!(
            target: "origin::schedule",
            period_ms = self.since.elapsed().as_millis(),
            wait_work_ms = work,
            wait_policy_ms = policy,
            wait_transport_ms = transport,
            transport_queued = scheduler.transport_queued(),
            "streams:{streams}"
        );
        self.since = Instant::now();
        self.waited = [Duration::ZERO; 3];
        self.written.clear();
    }
}

fn describe(v: &StreamView, written_now: u64) -> String {
    let opt = |x: Option<u64>| x.map_or_else(|| "-".to_owned(), |x| x.to_string());
    format!(
        "s{} jobs={} ready={} remaining={} wrote={} written={} reported={} arrived={} backlog={} in_transport={} browser_limited={} held={}",
        v.stream,
        v.jobs,
        v.ready,
        opt(v.remaining),
        written_now,
        v.written,
        opt(v.reported),
        opt(v.arrived.map(u64::from)),
        opt(v.backlog),
        opt(v.in_transport),
        v.browser_limited,
        v.held.unwrap_or("-"),
    )
}
