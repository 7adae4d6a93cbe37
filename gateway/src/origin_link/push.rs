//! The link's side of PUSH (docs/protocol.md, "PUSH"): what the link is
//! given to take pushes ([`LinkPushes`]), the invitation a page's request
//! carries ([`PageBudget`], sent as PUSH_BUDGET right after its REQUEST),
//! and what it hands on for each promise ([`PushOffer`]).
//!
//! ```text
//!  front ── request_page(page, budget) ──► REQUEST, PUSH_BUDGET (page's stream)
//!  supervisor, once up ──────────────────► MAX_PUSHES in_flight (stream 0)
//!  receive task ◄── PUSH_PROMISE ─ slot opened under the push id
//!        └──► PushOffer ──► sink (the taker: crate::push) ─► head(), body
//!  each push's end (END, RESET, CANCEL) ─► MAX_PUSHES + 1 (cumulative)
//! ```
//!
//! The link knows nothing about caching: whether a push is stored, and why
//! not, is the taker's decision. It only refuses what it cannot hand on (a
//! promise for a page it no longer remembers, a full sink) and counts what
//! the session refused ([`LinkPushCounters`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use gateway_protocol::{HeldEntry, RequestClass, RequestId};
use tokio::sync::{mpsc, watch};

use super::body::ResponseBody;
use super::conn::{Event, Pending};
use super::error::LinkError;

/// Urgency a push has until a browser asks for it (RFC 9218's lowest): the
/// origin sends pushes below every demand request anyway.
pub const PUSH_URGENCY: u8 = 7;

/// What a link needs to take pushes: announced in HELLO only when given.
#[derive(Debug, Clone)]
pub struct LinkPushes {
    /// Pushes open at once: the first MAX_PUSHES, and one more granted as
    /// each push ends.
    pub in_flight: u32,
    /// Where promised pushes go. A promise that finds it full is cancelled
    /// and counted ([`LinkPushCounters::busy`]).
    pub sink: mpsc::Sender<PushOffer>,
    /// What the link refused before any taker saw it.
    pub counters: Arc<LinkPushCounters>,
}

/// Promises the link refused itself, since start.
#[derive(Debug, Default)]
pub struct LinkPushCounters {
    /// The session reset them: a promise naming another host than its page's.
    pub other_host: AtomicU64,
    /// The session reset them for another reason (a malformed head, beyond
    /// the page's count, a forgotten or uninvited page, after GOAWAY).
    pub protocol: AtomicU64,
    /// The taker's queue was full.
    pub busy: AtomicU64,
}

impl LinkPushCounters {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The page a PUSH_BUDGET invited pushes for, as the cache keys it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushPage {
    /// The verified host, lower-case (the cache's key).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The page's origin-form target.
    pub target: String,
    /// The page's `Host` field value as sent: each of its pushes must name it.
    pub host_field: Bytes,
}

/// A page request's invitation to push: PUSH_BUDGET's fields.
#[derive(Debug, Clone)]
pub struct PageBudget {
    /// The page.
    pub page: PushPage,
    /// Pushes the origin may promise for it.
    pub max_pushes: u16,
    /// Body bytes its pushes may carry.
    pub max_bytes: u32,
    /// What the gateway holds of its closure, within `MAX_HELD_ENTRIES` and
    /// `MAX_HEAD` bytes (the caller bounds it).
    pub held: Vec<HeldEntry>,
}

/// One promised push, handed to the taker.
#[derive(Debug)]
pub struct PushOffer {
    /// The page it was promised for.
    pub page: PushPage,
    /// Its push id.
    pub id: RequestId,
    /// The push's request head (checked by the session: GET, origin-form,
    /// the page's Host, no credentials).
    pub head: Bytes,
    /// Its response; dropping it cancels the push.
    pub response: PushResponse,
    /// Promotes the push (PRIORITY on its stream) when a browser waits for
    /// it: `send_replace((urgency, RequestClass::Demand))`.
    pub promote: watch::Sender<(u8, RequestClass)>,
}

/// A push's response, still to come. Dropping it (or its body) before the
/// end cancels the push: CANCEL by its id once its head has arrived, RESET
/// CANCELLED on its stream before.
#[derive(Debug)]
pub struct PushResponse {
    pending: Pending,
}

impl PushResponse {
    pub(crate) fn new(pending: Pending) -> Self {
        Self { pending }
    }

    /// Waits for the response head; the body streams.
    pub async fn head(mut self) -> Result<http::Response<ResponseBody>, LinkError> {
        match self.pending.rx.recv().await {
            Some(Event::Head(parts)) => Ok(http::Response::from_parts(
                parts,
                ResponseBody::new(self.pending),
            )),
            Some(_) => Err(LinkError::Malformed("body before the push's head".into())),
            None => Err(Pending::take_error(&self.pending.outcome, || {
                LinkError::Unavailable("the association's receive task ended".into())
            })),
        }
    }
}
