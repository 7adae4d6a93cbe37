//! A miss or a validation in progress: the request the front forwards, the
//! response it brings back, and the two tasks that carry the body into the
//! store and to every waiter.
//!
//! ```text
//!  upstream body ──> producer task ──> flight (coalesce) ──> the browser's subscriber
//!                                                      ├──> followers' subscribers
//!                                                      └──> writer task ──> redb
//! ```
//!
//! The producer reads the upstream body only as fast as the slowest reader once
//! the flight is closed to joiners ([`FillGuard::ready`]), and stops when nobody
//! reads any more (the browser left and the entry is not being stored). The
//! writer makes the entry visible only if no invalidation of its URI happened
//! while it was written (a POST that raced the fill).

use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;

use super::coalesce::{FillGuard, Hold, Subscriber};
use super::policy::{self, ResponseDecision, StoredResponse};
use super::store::{CHUNK_BYTES, EntryMeta, EntryWriter, StoreError, full_key};
use super::{Shared, body};
use crate::body::Body;
use crate::sync::lock;

/// Body bytes the writer gathers before one blocking write.
const WRITE_BATCH: usize = 4 * CHUNK_BYTES;

/// What a flight tells the requests that joined it.
#[derive(Debug)]
pub enum FlightHead {
    /// A storable response is streaming in.
    Stream {
        /// Its status.
        status: StatusCode,
        /// Its end-to-end header fields, as the leader's browser gets them.
        headers: HeaderMap,
        /// The field names of its `Vary`.
        vary: Vec<String>,
        /// The leader request's values of those fields (its secondary key): a
        /// follower whose own differ must not take this response.
        leader_secondary: Vec<u8>,
        /// The response as the store will hold it, with the times it was
        /// fetched, and its freshness worked out once: a follower takes the
        /// flight only where it could take the stored entry (`Shared::follow`).
        stored: Box<(StoredResponse, policy::Freshness)>,
    },
    /// A validation freshened the stored entry: read it from the store.
    Refreshed,
    /// The response may not be shared (or is too large to buffer): fetch alone.
    Uncacheable,
}

/// What [`Fill::respond`] makes of the upstream response.
#[derive(Debug)]
pub enum Filled {
    /// Send this to the browser.
    Answer(Response<Body>),
    /// The origin answered the cache's validation with a 304 that does not
    /// match the stored entry (now dropped), and the browser had asked
    /// unconditionally: forward the request again, untouched.
    Refetch,
}

/// A registered fill of one primary key: lets an invalidation that happens
/// while the fill runs stop the entry from becoming visible.
#[derive(Debug)]
pub(super) struct FillTicket {
    shared: Arc<Shared>,
    primary: String,
    epoch: u64,
}

impl FillTicket {
    pub(super) fn new(shared: &Arc<Shared>, primary: &str) -> Self {
        let mut fills = lock(&shared.fills);
        let slot = fills.entry(primary.to_owned()).or_insert((0, 0));
        slot.0 += 1;
        Self {
            shared: Arc::clone(shared),
            primary: primary.to_owned(),
            epoch: slot.1,
        }
    }

    /// Whether the primary key was invalidated since the ticket was taken.
    fn invalidated(&self) -> bool {
        lock(&self.shared.fills)
            .get(&self.primary)
            .is_some_and(|&(_, epoch)| epoch != self.epoch)
    }
}

impl Drop for FillTicket {
    fn drop(&mut self) {
        let mut fills = lock(&self.shared.fills);
        if let Some(slot) = fills.get_mut(&self.primary) {
            slot.0 -= 1;
            if slot.0 == 0 {
                fills.remove(&self.primary);
            }
        }
    }
}

/// The leader of a miss (or of a validation): forward the request with
/// [`Fill::prepare`] applied, then hand the response to [`Fill::respond`].
/// Dropping it instead (the upstream failed) fails every follower, which then
/// fetch on their own.
#[derive(Debug)]
pub struct Fill {
    pub(super) shared: Arc<Shared>,
    pub(super) guard: FillGuard<FlightHead>,
    pub(super) ticket: FillTicket,
    pub(super) primary: String,
    /// The key looked up (the stored entry's, when validating).
    pub(super) key: Vec<u8>,
    pub(super) method: Method,
    /// The browser's end-to-end request fields, its own conditionals included.
    pub(super) request: HeaderMap,
    /// The entry being validated.
    pub(super) stored: Option<EntryMeta>,
    /// The entry under the key when it is refetched rather than validated
    /// (it has no validators): what `stale-if-error` may still answer with.
    pub(super) fallback: Option<EntryMeta>,
    /// `If-None-Match` / `If-Modified-Since` for the validation.
    pub(super) conditional: HeaderMap,
    pub(super) request_time: SystemTime,
    /// A further condition for storing (and sharing) the response.
    pub(super) keep: Option<fn(StatusCode, &HeaderMap) -> bool>,
}

impl Fill {
    /// Rewrites the forwarded request's fields: the browser's own
    /// preconditions and Range go (the cache answers them from the full
    /// response), the validators of the stored entry come in.
    pub fn prepare(&self, headers: &mut HeaderMap) {
        for name in &policy::CLIENT_PRECONDITIONS {
            headers.remove(name);
        }
        headers.remove(header::RANGE);
        for (name, value) in &self.conditional {
            headers.insert(name.clone(), value.clone());
        }
    }

    /// Stores (and shares with joiners) the response only if `keep` also
    /// says so: a prefetch keeps nothing that varies on the credentials it
    /// did not send.
    pub fn only_if(&mut self, keep: fn(StatusCode, &HeaderMap) -> bool) {
        self.keep = Some(keep);
    }

    /// A pushed response, judged on its head before its body is read
    /// (issue 31): `Ok` when [`Fill::respond`] would store it (a 200 the
    /// cache's RFC 9111 policy stores for the push's request, no larger than
    /// an entry may be) or freshen the entry this fill validates with it (a
    /// 304 that matches it); otherwise why not, as a metrics label. Any other
    /// status is refused too, even a storable one: a push is for what the
    /// page needs, not for errors.
    pub fn judge_push(&self, status: StatusCode, headers: &HeaderMap) -> Result<(), &'static str> {
        if status != StatusCode::OK && status != StatusCode::NOT_MODIFIED {
            return Err("status");
        }
        let decision = policy::decide_response(
            &self.method,
            &self.request,
            self.stored.as_ref().map(|e| &e.response),
            status,
            headers,
            self.request_time,
            SystemTime::now(),
        );
        match decision {
            ResponseDecision::Store(_) => {
                if content_length(headers)
                    .is_some_and(|len| len > self.shared.store.max_object_bytes())
                {
                    Err("too_large")
                } else if self.shared.store.is_disabled() {
                    Err("not_storable")
                } else {
                    Ok(())
                }
            }
            ResponseDecision::Freshen(_) if self.stored.is_some() => Ok(()),
            ResponseDecision::Freshen(_) | ResponseDecision::ServeStale => Err("unmatched_304"),
            ResponseDecision::Pass { reason, .. } => Err(match reason {
                _ if status == StatusCode::NOT_MODIFIED => "unmatched_304",
                Some(policy::NotStorable::NoStore) => "no_store",
                Some(policy::NotStorable::Private) => "private",
                Some(policy::NotStorable::SetCookie) => "set_cookie",
                Some(policy::NotStorable::VaryStar) => "vary",
                _ => "not_storable",
            }),
        }
    }

    /// Whether this fill is a validation of a stored entry.
    pub fn is_validation(&self) -> bool {
        self.stored.is_some()
    }

    /// Takes the upstream response (hop-by-hop fields already removed, no
    /// `Via` yet) and returns what the browser gets, storing and sharing the
    /// body on the way where RFC 9111 allows.
    pub async fn respond(self, response: Response<Body>) -> Filled {
        let now = SystemTime::now();
        let (parts, upstream) = response.into_parts();
        if self.stored.is_none()
            && let Some(entry) = self.fallback.clone()
            && policy::stale_if_error_allows(&self.request, &entry.response, parts.status, now)
        {
            return Filled::Answer(self.serve_stale(entry, parts.status, now));
        }
        let decision = policy::decide_response(
            &self.method,
            &self.request,
            self.stored.as_ref().map(|e| &e.response),
            parts.status,
            &parts.headers,
            self.request_time,
            now,
        );
        let shared = Arc::clone(&self.shared);
        match decision {
            ResponseDecision::Freshen(fresh) => match self.stored {
                Some(ref entry) => {
                    shared.counters.inc(&shared.counters.revalidated);
                    let (key, id) = (self.key.clone(), entry.id);
                    let fresh = StoredResponse {
                        body_len: entry.response.body_len,
                        ..fresh
                    };
                    shared
                        .changes
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    shared.memory.remove(&self.key);
                    let store = shared.store.clone();
                    let head = fresh.clone();
                    let updated =
                        tokio::task::spawn_blocking(move || store.update_head(&key, id, &head))
                            .await;
                    if let Ok(Err(e)) = updated {
                        tracing::debug!(error = %e, "cache: freshening an entry failed");
                    }
                    self.guard.set_head(FlightHead::Refreshed);
                    self.guard.finish();
                    let age = policy::current_age(&fresh, now);
                    let answer =
                        policy::answer_from_stored(&self.method, &self.request, &fresh, age);
                    let mut response = shared.answer(self.key, entry, answer, None);
                    // The 304 answered this browser's request: what it set for
                    // this browser alone reaches it, and only it.
                    for (name, value) in &parts.headers {
                        if policy::is_per_client(name) {
                            response.headers_mut().append(name, value.clone());
                        }
                    }
                    Filled::Answer(response)
                }
                None => Filled::Refetch,
            },
            ResponseDecision::ServeStale => match self.stored.clone() {
                Some(entry) => Filled::Answer(self.serve_stale(entry, parts.status, now)),
                None => Filled::Answer(Response::from_parts(parts, upstream)),
            },
            ResponseDecision::Pass { reason, discard } => {
                tracing::debug!(uri = self.primary, ?reason, discard, "cache: not stored");
                if discard {
                    shared.remove_key(self.key.clone()).await;
                }
                self.guard.set_head(FlightHead::Uncacheable);
                self.guard.finish();
                if parts.status == StatusCode::NOT_MODIFIED && !has_preconditions(&self.request) {
                    // Our validator's 304 for a representation we no longer
                    // hold; the browser did not ask conditionally.
                    return Filled::Refetch;
                }
                Filled::Answer(Response::from_parts(parts, upstream))
            }
            ResponseDecision::Store(stored) => {
                let declared = content_length(&parts.headers);
                let max = shared.store.max_object_bytes();
                let refused = self
                    .keep
                    .is_some_and(|keep| !keep(parts.status, &parts.headers));
                if declared.is_some_and(|len| len > max) || shared.store.is_disabled() || refused {
                    if self.stored.is_some() {
                        shared.remove_key(self.key.clone()).await;
                    }
                    self.guard.set_head(FlightHead::Uncacheable);
                    self.guard.finish();
                    return Filled::Answer(Response::from_parts(parts, upstream));
                }
                self.stream(parts, upstream, stored, declared)
            }
        }
    }

    /// The request could not be forwarded at all: the gateway's own answer
    /// would be `status` (502 for an origin or destination that cannot be
    /// reached, 504 for one that does not answer). Returns the stored entry's
    /// answer where its or the request's `stale-if-error` allows (RFC 5861,
    /// section 4), as for an origin's own 5xx; otherwise `None`, and the fill
    /// is dropped (followers fetch on their own).
    pub fn failed(self, status: StatusCode) -> Option<Response<Body>> {
        let now = SystemTime::now();
        let entry = self.stored.clone().or_else(|| self.fallback.clone())?;
        policy::stale_if_error_allows(&self.request, &entry.response, status, now)
            .then(|| self.serve_stale(entry, status, now))
    }

    /// Answers from `entry` as it is in place of the origin's `status`; the
    /// entry is kept.
    fn serve_stale(self, entry: EntryMeta, status: StatusCode, now: SystemTime) -> Response<Body> {
        tracing::debug!(
            uri = self.primary,
            status = status.as_u16(),
            "cache: the origin failed; stale-if-error serves the stored response"
        );
        let shared = Arc::clone(&self.shared);
        shared.counters.inc(&shared.counters.hits);
        // Followers look again and validate on their own: the entry is
        // unchanged, and may be usable for them too.
        self.guard.set_head(FlightHead::Refreshed);
        self.guard.finish();
        let age = policy::current_age(&entry.response, now);
        let answer = policy::answer_from_stored(&self.method, &self.request, &entry.response, age);
        shared.answer(self.key, &entry, answer, None)
    }

    /// The storable case: the flight carries the body to the browser, the
    /// followers and the writer.
    fn stream(
        self,
        parts: http::response::Parts,
        upstream: Body,
        stored: StoredResponse,
        declared: Option<u64>,
    ) -> Filled {
        let Fill {
            shared,
            guard,
            ticket,
            primary,
            request,
            ..
        } = self;
        let vary = policy::vary_names(&stored.headers).unwrap_or_default();
        let secondary = policy::secondary_key(&vary, &request);
        let conditional_hit = policy::not_modified_for(&request, &stored.headers);
        let freshness = policy::Freshness::of(&stored);
        guard.set_head(FlightHead::Stream {
            status: parts.status,
            headers: parts.headers.clone(),
            vary: vary.clone(),
            leader_secondary: secondary.clone(),
            stored: Box::new((stored.clone(), freshness)),
        });
        let browser = (!conditional_hit).then(|| guard.subscribe());
        let writer = guard.subscribe();
        let hold = Arc::new(std::sync::Mutex::new(HoldSlot::Waiting));
        tokio::spawn(produce(guard, upstream, Arc::clone(&hold)));
        tokio::spawn(write(
            Arc::clone(&shared),
            writer,
            WriteJob {
                hold,
                ticket,
                primary,
                vary,
                secondary,
                stored,
                declared,
            },
        ));
        match browser {
            Some(subscriber) => {
                Filled::Answer(Response::from_parts(parts, body::subscriber(subscriber)))
            }
            None => {
                // The browser's own If-None-Match / If-Modified-Since matches
                // what arrived: 304 to it, the body only to the store.
                let mut response = Response::new(body::empty());
                *response.status_mut() = StatusCode::NOT_MODIFIED;
                *response.headers_mut() = policy::not_modified_headers(&parts.headers);
                Filled::Answer(response)
            }
        }
    }
}

/// Whether the browser sent conditionals of its own.
fn has_preconditions(request: &HeaderMap) -> bool {
    policy::CLIENT_PRECONDITIONS
        .iter()
        .any(|name| request.contains_key(name))
}

/// `Content-Length`, if present and a number.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Between the producer and the writer: the finished flight stays joinable
/// until the writer is done with the store, so that a request arriving in
/// between reads the flight instead of fetching again.
#[derive(Debug)]
enum HoldSlot {
    Waiting,
    /// Dropping it lets the flight go.
    Held {
        _hold: Hold<FlightHead>,
    },
    WriterDone,
}

/// Reads the upstream body into the flight, no faster than its slowest reader
/// once the flight is closed to joiners; stops when nobody reads.
async fn produce(
    guard: FillGuard<FlightHead>,
    mut upstream: Body,
    hold: Arc<std::sync::Mutex<HoldSlot>>,
) {
    loop {
        guard.ready().await;
        if guard.readers() == 0 {
            // Dropping the guard fails the flight; dropping the upstream body
            // cancels the origin request.
            return;
        }
        match upstream.frame().await {
            None => {
                let held = guard.finish_held();
                let mut slot = lock(&hold);
                if !matches!(*slot, HoldSlot::WriterDone) {
                    *slot = HoldSlot::Held { _hold: held };
                }
                return;
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    guard.push(data);
                }
            }
            Some(Err(e)) => {
                guard.fail(&e.to_string());
                return;
            }
        }
    }
}

/// What the writer stores.
struct WriteJob {
    hold: Arc<std::sync::Mutex<HoldSlot>>,
    ticket: FillTicket,
    primary: String,
    vary: Vec<String>,
    secondary: Vec<u8>,
    stored: StoredResponse,
    declared: Option<u64>,
}

/// Stores the flight's body: batches of chunks written in `spawn_blocking`,
/// then the verified, durable finish, unless the URI was invalidated meanwhile.
/// Then lets the finished flight go.
async fn write(shared: Arc<Shared>, reader: Subscriber<FlightHead>, job: WriteJob) {
    let hold = Arc::clone(&job.hold);
    write_entry(shared, reader, job).await;
    let released = std::mem::replace(&mut *lock(&hold), HoldSlot::WriterDone);
    drop(released);
}

async fn write_entry(shared: Arc<Shared>, mut reader: Subscriber<FlightHead>, job: WriteJob) {
    let store = shared.store.clone();
    let (primary, vary, secondary, stored) = (
        job.primary.clone(),
        job.vary.clone(),
        job.secondary.clone(),
        job.stored.clone(),
    );
    let began =
        tokio::task::spawn_blocking(move || store.begin(&primary, &vary, &secondary, stored)).await;
    let mut writer = match began {
        Ok(Ok(writer)) => writer,
        Ok(Err(e)) => {
            tracing::debug!(uri = job.primary, error = %e, "cache: not stored");
            return;
        }
        Err(_) => return,
    };
    let mut batch = BytesMut::new();
    // A copy of a small body for the memory tier.
    let mut copy = Some(BytesMut::new());
    loop {
        match reader.next_chunk().await {
            Some(Ok(chunk)) => {
                batch.extend_from_slice(&chunk);
                if let Some(c) = &mut copy {
                    if (c.len() + chunk.len()) as u64 <= super::memory::MAX_OBJECT_BYTES {
                        c.extend_from_slice(&chunk);
                    } else {
                        copy = None;
                    }
                }
                if batch.len() >= WRITE_BATCH {
                    let data = batch.split().freeze();
                    match write_blocking(writer, data).await {
                        Ok(w) => writer = w,
                        Err(e) => {
                            tracing::debug!(uri = job.primary, error = %e, "cache: not stored");
                            return;
                        }
                    }
                }
            }
            Some(Err(e)) => {
                tracing::debug!(uri = job.primary, error = %e, "cache: fetch failed, not stored");
                abandon(writer).await;
                return;
            }
            None => break,
        }
    }
    // Done reading: the producer no longer waits for this reader.
    drop(reader);
    if job.ticket.invalidated() {
        tracing::debug!(
            uri = job.primary,
            "cache: invalidated while filling, not stored"
        );
        abandon(writer).await;
        return;
    }
    finish_entry(&shared, &job, writer, batch.freeze(), copy).await;
}

/// Writes the last of the body and commits the entry (checked against the
/// declared length, durable), then puts a small body's `copy` in the memory
/// tier, unless an invalidation came in meanwhile.
async fn finish_entry(
    shared: &Shared,
    job: &WriteJob,
    mut writer: EntryWriter,
    data: Bytes,
    copy: Option<BytesMut>,
) {
    let declared = job.declared;
    let changes = shared.changes.load(std::sync::atomic::Ordering::SeqCst);
    let finished = tokio::task::spawn_blocking(move || {
        writer.write(&data)?;
        writer.finish(declared)
    })
    .await;
    match finished {
        Ok(Ok(entry)) => {
            shared.counters.inc(&shared.counters.stored);
            shared
                .commits
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // An invalidation between write_entry's check and the commit: undo.
            if job.ticket.invalidated() {
                shared
                    .remove_key(full_key(&job.primary, &job.secondary))
                    .await;
            } else {
                tracing::debug!(
                    uri = job.primary,
                    bytes = entry.response.body_len,
                    "cache: stored"
                );
                if let Some(body) = copy {
                    let key = full_key(&job.primary, &job.secondary);
                    shared.remember(
                        &job.primary,
                        &job.vary,
                        &key,
                        &entry,
                        body.freeze(),
                        changes,
                    );
                }
            }
        }
        Ok(Err(e)) => tracing::debug!(uri = job.primary, error = %e, "cache: not stored"),
        Err(_) => {}
    }
}

/// One blocking write; on failure the writer is dropped (in the blocking
/// context: dropping it writes to the database).
async fn write_blocking(mut writer: EntryWriter, data: Bytes) -> Result<EntryWriter, StoreError> {
    tokio::task::spawn_blocking(move || writer.write(&data).map(|()| writer))
        .await
        .unwrap_or(Err(StoreError::Corrupt("writer task failed")))
}

/// Drops an unfinished writer where blocking is allowed.
async fn abandon(writer: EntryWriter) {
    let _ = tokio::task::spawn_blocking(move || drop(writer)).await;
}
