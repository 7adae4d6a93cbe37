//! The feedback driver: one task per association whose origin acts on
//! FEEDBACK. It measures the pinned browser sockets, feeds the [`Backlog`]
//! core, and sends what [`Backlog::poll_feedback`] hands out on stream 0.
//!
//! It sleeps while every backlog is zero and reported (no FEEDBACK on an idle
//! association), wakes when response bytes arrive, then ticks at the
//! configured interval until the backlogs are drained and reported again. Between
//! ticks, arriving bytes wake it to check for a backlog that grew too fast to
//! wait (without measuring the sockets).
//!
//! [`Backlog`]: super::backlog::Backlog
//! [`Backlog::poll_feedback`]: super::backlog::Backlog::poll_feedback

use std::sync::Arc;

use gateway_protocol::{CONTROL_STREAM, Message};
use tokio::sync::watch;
use tokio::time::Instant;

use super::Shared;
use super::conn::{CLOSE_LIMIT, Conn, ConnStatus, describe};
use super::pin::stream_for;
use crate::browser_socket::BrowserSocket;
use crate::sync::lock;

/// Runs until the association has ended or a FEEDBACK cannot be sent.
pub(crate) async fn drive(shared: Arc<Shared>, conn: Arc<Conn>) {
    let mut status = conn.status();
    loop {
        let wake = conn.backlog().poll_timeout(std::time::Instant::now());
        // A tick measures the sockets; arriving bytes only re-check the core
        // (a fast-growing backlog is reported before the tick), and measure
        // only if a report is due, so that it carries fresh socket figures.
        let tick = tokio::select! {
            biased;
            () = ended(&mut status) => return,
            () = tick(wake) => true,
            () = conn.activity() => wake.is_none(),
        };
        let measure = tick || conn.backlog().is_due(std::time::Instant::now());
        let sockets = measure.then(|| socket_queues(&shared, conn.data_streams()));
        let entries = {
            let mut backlog = conn.backlog();
            if let Some(sockets) = &sockets {
                backlog.handle_socket_queues(sockets);
            }
            backlog.poll_feedback(std::time::Instant::now())
        };
        let Some(entries) = entries else {
            continue;
        };
        if tracing::enabled!(target: "gateway::feedback", tracing::Level::DEBUG) {
            // What each reported figure is made of, for the slow-consumer
            // benchmark's time series.
            let figures: Vec<(u16, u64, u64, u64)> = (conn.backlog().figures().iter())
                .filter(|f| entries.iter().any(|e| e.stream == f.stream))
                .map(|f| (f.stream, f.queued, f.socket_queued, f.arrived))
                .collect();
            tracing::debug!(target: "gateway::feedback", ?figures, "FEEDBACK (stream, queued, socket_queued, arrived)");
        }
        let count = entries.len();
        let send = conn
            .association()
            .send(CONTROL_STREAM, Message::Feedback(entries).to_bytes());
        match tokio::time::timeout(CLOSE_LIMIT, send).await {
            Ok(Ok(())) => tracing::trace!(origin = %shared.name, count, "FEEDBACK sent"),
            Ok(Err(e)) => {
                tracing::debug!(origin = %shared.name, "FEEDBACK not sent: {}", describe(&e));
                return;
            }
            Err(_) => {
                tracing::debug!(origin = %shared.name, "FEEDBACK not sent within {CLOSE_LIMIT:?}");
                return;
            }
        }
    }
}

/// Until `wake`; never while idle (`None`).
async fn tick(wake: Option<std::time::Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

async fn ended(status: &mut watch::Receiver<ConnStatus>) {
    let _ = status.wait_for(|s| matches!(s, ConnStatus::Ended(_))).await;
}

/// Bytes below the origin link of every live pinned browser connection
/// (handed on and not yet written, then unsent or unacknowledged), by the
/// data stream its pin maps to on an association of `data_streams`. Forgets
/// sockets whose flow has ended.
fn socket_queues(shared: &Shared, data_streams: u16) -> Vec<(u16, u64)> {
    live_sockets(shared, data_streams)
        .iter()
        .filter_map(|(stream, socket)| Some((*stream, socket.backlog().ok()?)))
        .collect()
}

/// Every live pinned browser connection, by the data stream its pin maps to
/// on an association of `data_streams`. Forgets sockets whose flow has ended.
pub(super) fn live_sockets(shared: &Shared, data_streams: u16) -> Vec<(u16, Arc<BrowserSocket>)> {
    let mut sockets = lock(&shared.sockets);
    sockets.retain(|(_, socket)| socket.strong_count() > 0);
    sockets
        .iter()
        .filter_map(|(stream, socket)| Some((stream_for(*stream, data_streams), socket.upgrade()?)))
        .collect()
}
