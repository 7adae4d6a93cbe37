//! The task that keeps one association to an origin: connect, HELLO, watch it,
//! and after it dies (or the origin goes away) connect again with backoff.

use std::sync::Arc;
use std::time::Duration;

use gateway_protocol::{CONTROL_STREAM, Capabilities, GoAway, Message, Reaction};
use gateway_transport::hello::{HelloError, open_gateway_session};
use gateway_transport::{Association, BackendKind};
use tokio::sync::watch;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::conn::{CLOSE_LIMIT, Conn, ConnStatus, describe};
use super::feedback;
use super::{LinkState, Shared, sum_counters};
use crate::sync::lock;

/// An association that lived at least this long was healthy: the next
/// reconnection starts again from `reconnect_min`. One that dies sooner keeps
/// the backoff growing, so a flapping origin is not hammered.
pub(crate) const STABLE_ASSOCIATION: Duration = Duration::from_secs(10);

/// How the backend is named in log lines.
pub(crate) fn backend_name(kind: BackendKind) -> &'static str {
    kind.label()
}

pub(crate) async fn supervise(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut backoff = Backoff::new(shared.reconnect_min, shared.reconnect_max);
    // Log once per state change, never once per attempt.
    let mut reported_unreachable = false;
    loop {
        let attempted_at = Instant::now();
        let attempt = tokio::select! {
            attempt = establish(&shared) => attempt,
            () = stopped(&mut shutdown) => return,
        };
        match attempt {
            Ok(conn) => {
                reported_unreachable = false;
                let up_since = Instant::now();
                let conn = Arc::new(conn);
                let mut status = conn.status();
                *lock(&shared.current) = Some(Arc::clone(&conn));
                tokio::spawn(Arc::clone(&conn).run());
                conn.grant_pushes().await;
                if shared.feedback.enabled && conn.origin_takes_feedback() {
                    tokio::spawn(feedback::drive(Arc::clone(&shared), Arc::clone(&conn)));
                }
                tracing::info!(
                    "origin {}: up ({}, {} data streams)",
                    shared.name,
                    backend_name(conn.kind()),
                    conn.data_streams()
                );
                shared.state.send_replace(LinkState::Up);
                let reason = tokio::select! {
                    retired = status.wait_for(|s| *s != ConnStatus::Accepting) => match retired {
                        Ok(status) => status.reason().to_owned(),
                        Err(_) => "the association's receive task ended".to_owned(),
                    },
                    () = stopped(&mut shutdown) => {
                        log_transport(&shared.name, &conn);
                        return;
                    }
                };
                log_transport(&shared.name, &conn);
                {
                    let mut current = lock(&shared.current);
                    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                        // Under the same lock as the removal, so that a scrape
                        // never counts this association twice or not at all.
                        if let Some(sctp) = conn.association().sctp_stats() {
                            let mut ended = lock(&shared.ended_counters);
                            *ended = sum_counters(&ended, &sctp.counters);
                        }
                        *current = None;
                    }
                }
                *lock(&shared.down_reason) = reason.clone();
                shared.state.send_replace(LinkState::Down);
                tracing::warn!("origin {}: down ({reason}); reconnecting", shared.name);
                if up_since.elapsed() >= STABLE_ASSOCIATION {
                    backoff.reset();
                }
            }
            Err(reason) => {
                if reported_unreachable {
                    tracing::debug!("origin {}: still unreachable ({reason})", shared.name);
                } else {
                    let consequence = if shared.fail_open {
                        "its destinations fail open to direct TCP"
                    } else {
                        "its destinations get 502 until it is back"
                    };
                    tracing::warn!(
                        "origin {}: unreachable ({reason}); {consequence}",
                        shared.name
                    );
                    reported_unreachable = true;
                }
                *lock(&shared.down_reason) = reason;
                shared.state.send_replace(LinkState::Down);
            }
        }
        let delay = backoff.next_delay(rand::random::<f64>());
        if !wait_before_retry(&shared, &mut shutdown, attempted_at, delay).await {
            return;
        }
    }
}

/// What our SCTP stack says about an association that ends: how much of it
/// was loss recovery (the other backends do not say).
fn log_transport(origin: &str, conn: &Conn) {
    if let Some(sctp) = conn.association().sctp_stats() {
        tracing::info!(
            srtt = ?sctp.srtt,
            controller = sctp.controller,
            "origin {origin}: transport: {}",
            sctp.counters
        );
    }
}

/// Resolves once shutdown has been asked for (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Sleeps `delay`, or less when a request kicks (it found the link down), but
/// never past one attempt per `reconnect_min`. False on shutdown.
async fn wait_before_retry(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
    attempted_at: Instant,
    delay: Duration,
) -> bool {
    let mut deadline = Instant::now() + delay;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return true,
            () = shared.kick.notified() => {
                deadline = deadline.min(attempted_at + shared.reconnect_min);
            }
            () = stopped(shutdown) => return false,
        }
    }
}

/// Connects and exchanges HELLO, all within the connect time-out.
async fn establish(shared: &Shared) -> Result<Conn, String> {
    let config = &shared.transport;
    let assoc = gateway_transport::connect(shared.kind, shared.address, config)
        .await
        .map_err(|e| describe(&e))?;
    let mut capabilities = Capabilities::PREFETCH_CLASS | Capabilities::PRIORITY;
    if shared.feedback.enabled {
        capabilities = capabilities | Capabilities::FEEDBACK | Capabilities::FEEDBACK_ARRIVED;
    }
    if shared.pushes.is_some() {
        capabilities = capabilities | Capabilities::PUSH;
    }
    let handshake = open_gateway_session(&assoc, capabilities);
    match tokio::time::timeout(config.connect_timeout, handshake).await {
        Ok(Ok(session)) => Ok(Conn::new(
            Arc::clone(&shared.name),
            assoc,
            session,
            shared.feedback.interval,
            shared.pushes.clone(),
        )),
        Ok(Err(HelloError::Refused(reaction))) => {
            refuse_hello(&assoc, &reaction).await;
            Err(HelloError::Refused(reaction).to_string())
        }
        Ok(Err(HelloError::Transport(e))) => {
            assoc.abort();
            Err(describe(&e))
        }
        Ok(Err(other @ HelloError::NoDataStream)) => {
            assoc.abort();
            Err(other.to_string())
        }
        Err(_) => {
            assoc.abort();
            Err(format!(
                "no HELLO answer within {:?}",
                config.connect_timeout
            ))
        }
    }
}

/// GOAWAY with the session's code, then close: the protocol's answer to a bad
/// HELLO (version mismatch, missing ACK, zero streams).
async fn refuse_hello(assoc: &Association, reaction: &Reaction) {
    if let Reaction::GoAway { code } = *reaction {
        let goaway = Message::GoAway(GoAway {
            last_request: 0,
            code,
            reason: "HELLO refused".into(),
        });
        let _ =
            tokio::time::timeout(CLOSE_LIMIT, assoc.send(CONTROL_STREAM, goaway.to_bytes())).await;
        if matches!(
            tokio::time::timeout(CLOSE_LIMIT, assoc.close()).await,
            Ok(Ok(()))
        ) {
            return;
        }
    }
    assoc.abort();
}
