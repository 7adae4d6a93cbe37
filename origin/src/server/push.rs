//! Pushes (docs/protocol.md, "PUSH"): the responses the driver sends a
//! gateway unasked, because the page it asked for will need them.
//!
//! ```text
//!  REQUEST page ────────▶ noted (Page)                      [pushes negotiated]
//!  PUSH_BUDGET page ────▶ held entries noted ─┐
//!  page's head produced, or the page ended ───┴─▶ Handler::pushes(page), a task
//!  its targets ─────────▶ plan: held fresh: skipped; held stale: conditional GET;
//!                         page with credentials: public targets only;
//!                         at most [push] max_per_page
//!  waiting ─(grant left, page allowance, PUSHES_AT_ONCE)─▶ preparing:
//!                         Handler::handle(push's request) in a producer task
//!  push's head produced ▶ in push-id order: allowed, 200 or 304, known length
//!                         within the page's bytes left? PUSH_PROMISE, then the
//!                         scheduler sends its HEAD/BODY/END below every request
//! ```
//!
//! Invariants:
//! - PUSH_PROMISEs go out in the order of their push ids, which are taken
//!   from one counter: ids rise on every stream, as the protocol requires,
//!   wherever each push is placed.
//! - A push is promised only once its handler has answered, so that one
//!   whose known length exceeds what is left of the page's `max_bytes`
//!   (minus what the page's other promised pushes still have to send) is
//!   never promised; a body of unknown length that would exceed it ends with
//!   RESET TOO_LARGE before the chunk (`Session::handle_push_body_sent` is
//!   asked before every push chunk, never after).
//! - A page the gateway cancels or resets takes its pushes with it: those
//!   promised stop at once (no RESET: the gateway has forgotten them), those
//!   preparing or waiting are dropped.
//! - Pushes never count against `limits.max_open_requests`: they are bounded
//!   by the gateway's grant and by [`PUSHES_AT_ONCE`].
//!
//! **Where a push goes.** Each push is placed on the data stream that carries
//! the fewest jobs now (ties taken in turn), not on its page's stream. The
//! page's stream carries the browser's connection that asked for the page,
//! whose next requests (the page's subresources, demand) follow on it: a lost
//! packet of a push on that stream would hold them back in the stream's
//! order. Spread out, a page's pushes also do not queue behind each other in
//! one stream's order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use gateway_protocol::{
    ErrorCode, HeldEntry, MAX_HEAD, MAX_HELD_TARGET, MAX_PUSH_PAGES, Message, PUSH_ID_BIT,
    PushBudget, PushPromise, Request, RequestClass, RequestId, Urgency, push_head_host,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

use super::{CHUNKS_AHEAD, Driver, DriverError, Event, Handler, IncomingRequest, Job, produce};
use crate::metrics::Tally;
use crate::response_scheduler::JobSpec;

/// Pushes of one association being prepared (the handler answering) or
/// sent at once, on top of the gateway's grant: each holds a producer task
/// and up to `CHUNKS_AHEAD` chunks.
pub const PUSHES_AT_ONCE: usize = 16;

/// Fields of a page's request head read to build its pushes' heads; a page
/// with more gets no pushes.
const MAX_PAGE_FIELDS: usize = 128;

/// `[push]` in origin.toml.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConfig {
    /// Announce the PUSH capability and push what handlers name for a page
    /// whose gateway sent a PUSH_BUDGET.
    pub enabled: bool,
    /// Pushes for one page at most (the gateway's PUSH_BUDGET may allow
    /// fewer).
    pub max_per_page: u16,
}

impl Default for PushConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_per_page: 64,
        }
    }
}

/// One thing a page will need, as a [`Handler`] names it
/// ([`Handler::pushes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    /// Origin-form target on the page's host: `/path?query`.
    pub target: String,
    /// The page cannot render before it (stylesheets, synchronous scripts,
    /// fonts): pushed ahead of the others.
    pub render_blocking: bool,
    /// The response is the same for everyone, credentials or not (a static
    /// file): only such targets are pushed for a page requested with Cookie
    /// or Authorization.
    pub public: bool,
    /// What the page uses it as, if known (a closure entry's kind): an
    /// Early Hint names only targets whose kind gives its `as`
    /// (`server/tunnel/early_hints.rs`).
    pub kind: Option<page_resources::Kind>,
}

/// What a page's request head says that its pushes' heads repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PageFields {
    /// The page's own target (never pushed for itself).
    target: Vec<u8>,
    host: Vec<u8>,
    accept_encoding: Option<Vec<u8>>,
    accept_language: Option<Vec<u8>>,
    /// Cookie, Authorization or Proxy-Authorization present.
    credentials: bool,
}

/// Reads `head` (a page's request head); `None` without exactly one Host or
/// when it does not parse.
fn page_fields(head: &[u8]) -> Option<PageFields> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_PAGE_FIELDS];
    let mut request = httparse::Request::new(&mut fields);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let mut page = PageFields {
        target: request.path?.as_bytes().to_vec(),
        host: Vec::new(),
        accept_encoding: None,
        accept_language: None,
        credentials: false,
    };
    let mut hosts = 0;
    let join = |into: &mut Option<Vec<u8>>, value: &[u8]| match into {
        Some(list) => {
            list.extend_from_slice(b", ");
            list.extend_from_slice(value);
        }
        None => *into = Some(value.to_vec()),
    };
    for field in request.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            page.host = field.value.to_vec();
        } else if name.eq_ignore_ascii_case("accept-encoding") {
            join(&mut page.accept_encoding, field.value);
        } else if name.eq_ignore_ascii_case("accept-language") {
            join(&mut page.accept_language, field.value);
        } else if ["cookie", "authorization", "proxy-authorization"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
        {
            page.credentials = true;
        }
    }
    (hosts == 1 && !page.host.is_empty()).then_some(page)
}

/// A target a push may name: origin-form, visible ASCII, within the held
/// entries' bound.
fn valid_target(target: &str) -> bool {
    target.starts_with('/')
        && target.len() <= MAX_HELD_TARGET
        && target.bytes().all(|b| b.is_ascii_graphic())
}

/// The push's request head: GET `target` on the page's host, with the
/// `Accept` a browser sends for its kind (`*/*` when unknown), the
/// page's Accept-Encoding and Accept-Language, and the validators of a stale
/// held copy; never credentials. `None` if it would break the protocol's
/// rules for a push head (checked as the gateway will check it).
fn push_head(
    page: &PageFields,
    target: &str,
    kind: Option<page_resources::Kind>,
    stale: Option<&HeldEntry>,
) -> Option<Bytes> {
    let mut head = BytesMut::with_capacity(256);
    let mut field = |name: &[u8], value: &[u8]| {
        head.put_slice(name);
        head.put_slice(b": ");
        head.put_slice(value);
        head.put_slice(b"\r\n");
    };
    // The request line first: `field` writes only fields.
    let mut line = BytesMut::new();
    line.put_slice(b"GET ");
    line.put_slice(target.as_bytes());
    line.put_slice(b" HTTP/1.1\r\n");
    field(b"Host", &page.host);
    // As the browser will ask for it, so that `Vary: Accept` matches.
    let accept = kind.and_then(page_resources::Kind::browser_accept);
    field(b"Accept", accept.unwrap_or("*/*").as_bytes());
    if let Some(value) = &page.accept_encoding {
        field(b"Accept-Encoding", value);
    }
    if let Some(value) = &page.accept_language {
        field(b"Accept-Language", value);
    }
    if let Some(held) = stale {
        if !held.etag.is_empty() {
            field(b"If-None-Match", &held.etag);
        }
        if !held.last_modified.is_empty() {
            field(b"If-Modified-Since", &held.last_modified);
        }
    }
    line.put_slice(&head);
    line.put_slice(b"\r\n");
    let head = line.freeze();
    (head.len() <= MAX_HEAD && push_head_host(&head).is_ok()).then_some(head)
}

/// One push decided for a page, waiting for room.
#[derive(Debug, Clone)]
struct PlannedPush {
    head: Bytes,
    render_blocking: bool,
    /// Revalidates a stale copy the gateway holds.
    conditional: bool,
}

/// A page's pushes, from its handler's targets.
#[derive(Debug, Default)]
struct Plan {
    pushes: Vec<PlannedPush>,
    /// Targets the gateway holds fresh.
    skipped_fresh: u64,
}

/// Decides a page's pushes from its handler's `targets`, in their order:
/// held fresh skipped, held stale revalidated, only public targets for a
/// page with credentials, the page itself and repeats never, at most `max`.
fn plan(page: &PageFields, targets: Vec<PushTarget>, held: &[HeldEntry], max: usize) -> Plan {
    let held: HashMap<&[u8], &HeldEntry> = held.iter().map(|h| (&h.target[..], h)).collect();
    let mut seen = HashSet::new();
    let mut plan = Plan::default();
    for t in targets {
        if plan.pushes.len() >= max {
            break;
        }
        if (page.credentials && !t.public)
            || !valid_target(&t.target)
            || t.target.as_bytes() == page.target
            || !seen.insert(t.target.clone())
        {
            continue;
        }
        let held = held.get(t.target.as_bytes()).copied();
        if held.is_some_and(|h| h.fresh) {
            plan.skipped_fresh += 1;
            continue;
        }
        if let Some(head) = push_head(page, &t.target, t.kind, held) {
            plan.pushes.push(PlannedPush {
                head,
                render_blocking: t.render_blocking,
                conditional: held.is_some(),
            });
        }
    }
    plan
}

/// Statuses worth a push: the response itself, or "still valid" for a
/// revalidation. Anything else (a 404 of a stale closure, a 5xx) is not
/// promised.
fn worth_pushing(head: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 0];
    let mut response = httparse::Response::new(&mut fields);
    // The status line is all that is needed; the fields stop the parse.
    let _ = response.parse(head);
    matches!(response.code, Some(200 | 304))
}

/// A page noted at its REQUEST, until its handler's targets are planned.
#[derive(Debug)]
struct Page {
    request: Request,
    stream: u16,
    /// The PUSH_BUDGET's held entries, once it came.
    held: Option<Vec<HeldEntry>>,
    /// `Handler::pushes` running for it.
    asked: Option<AbortHandle>,
}

/// The push part of a job (`Job::push`).
#[derive(Debug)]
pub(super) struct PushJob {
    /// The page whose budget it spends.
    page: RequestId,
    /// Its request head, for the PUSH_PROMISE.
    head: Bytes,
    render_blocking: bool,
    conditional: bool,
    /// PUSH_PROMISE sent: the session and the scheduler know it.
    pub(super) promised: bool,
    /// The body length its handler announced.
    pub(super) body_len: Option<u64>,
}

/// One association's pushes (the driver's `pushes`).
#[derive(Debug)]
pub(super) struct Pushes {
    config: PushConfig,
    /// Pages that may still ask for pushes, and their order (oldest first).
    pages: HashMap<RequestId, Page>,
    page_order: VecDeque<RequestId>,
    /// Planned pushes waiting for room, pages in the order their targets
    /// came.
    waiting: VecDeque<(RequestId, PlannedPush)>,
    /// Push ids whose handler is answering, in id order: promises go out in
    /// this order.
    preparing: VecDeque<RequestId>,
    /// Push jobs in the driver's `jobs` (preparing and promised).
    running: usize,
    /// The next push id; `None` once the id space is spent.
    next_id: Option<RequestId>,
    /// The highest MAX_PUSHES received, and the promises sent.
    granted: u64,
    promised: u64,
    /// The stream the last push was placed on.
    last_stream: u16,
}

impl Pushes {
    pub(super) fn new(config: PushConfig) -> Self {
        Self {
            config,
            pages: HashMap::new(),
            page_order: VecDeque::new(),
            waiting: VecDeque::new(),
            preparing: VecDeque::new(),
            running: 0,
            next_id: Some(PUSH_ID_BIT | 1),
            granted: 0,
            promised: 0,
            last_stream: 0,
        }
    }

    /// Push jobs among the driver's jobs: not requests.
    pub(super) fn running(&self) -> usize {
        self.running
    }

    /// Stops every task it started (the association is over).
    pub(super) fn abort_all(&self) {
        for page in self.pages.values() {
            if let Some(task) = &page.asked {
                task.abort();
            }
        }
    }

    fn forget_page(&mut self, id: RequestId) -> Option<Page> {
        let page = self.pages.remove(&id)?;
        self.page_order.retain(|p| *p != id);
        if let Some(task) = &page.asked {
            task.abort();
        }
        Some(page)
    }
}

/// Runs `Handler::pushes` for a page and hands its targets to the driver.
async fn ask<H: Handler>(
    handler: Arc<H>,
    page: IncomingRequest,
    events: tokio::sync::mpsc::Sender<Event>,
) {
    let targets = handler.pushes(&page).await;
    let _ = events.send(Event::PushTargets(page.id, targets)).await;
}

impl<H: Handler> Driver<H> {
    /// A request started: with pushes negotiated, note it as a page that a
    /// PUSH_BUDGET may follow. At most [`MAX_PUSH_PAGES`] are kept (as the
    /// session keeps allowances); to make room goes the oldest without a
    /// budget (most requests are not pages), else the oldest not being
    /// asked; when every one is being asked, the new page gets no pushes.
    pub(super) fn note_page(&mut self, stream: u16, request: &Request) {
        if !self.session.pushes_negotiated() {
            return;
        }
        let pushes = &mut self.pushes;
        if pushes.pages.len() >= MAX_PUSH_PAGES {
            let oldest = |evictable: &dyn Fn(&Page) -> bool| {
                pushes
                    .page_order
                    .iter()
                    .copied()
                    .find(|p| pushes.pages.get(p).is_none_or(evictable))
            };
            let victim = oldest(&|page| page.held.is_none())
                .or_else(|| oldest(&|page| page.asked.is_none()));
            let Some(victim) = victim else {
                return;
            };
            pushes.forget_page(victim);
        }
        pushes.pages.insert(
            request.id,
            Page {
                request: request.clone(),
                stream,
                held: None,
                asked: None,
            },
        );
        pushes.page_order.push_back(request.id);
    }

    /// PUSH_BUDGET (the session took it: pushes negotiated, an allowance
    /// opened).
    pub(super) fn handle_push_budget(&mut self, budget: PushBudget) {
        let page = budget.page;
        if let Some(noted) = self.pushes.pages.get_mut(&page) {
            noted.held = Some(budget.held);
        }
        self.maybe_ask(page);
    }

    /// MAX_PUSHES: the grant grew, maybe.
    pub(super) fn handle_max_pushes(&mut self, max: u32) {
        self.pushes.granted = self.pushes.granted.max(u64::from(max));
        self.pump_pushes();
    }

    /// Asks the handler what to push for `page` once both its budget has
    /// come and its head has been produced (or it has ended): the handler's
    /// answer then never delays the page's own head.
    pub(super) fn maybe_ask(&mut self, id: RequestId) {
        let head_out = match self.jobs.get(&id) {
            Some(job) => job.head_len > 0,
            None => !self.pending_bodies.contains_key(&id),
        };
        let Some(page) = self.pushes.pages.get(&id) else {
            return;
        };
        if page.held.is_none() || page.asked.is_some() || !head_out {
            return;
        }
        if !self.page_may_push(id) {
            self.pushes.forget_page(id);
            return;
        }
        let incoming = IncomingRequest {
            id,
            stream: page.stream,
            request: page.request.clone(),
            body: Bytes::new(),
            tunnelled: false,
        };
        let task = tokio::spawn(ask(
            Arc::clone(&self.handler),
            incoming,
            self.events_tx.clone(),
        ));
        if let Some(page) = self.pushes.pages.get_mut(&id) {
            page.asked = Some(task.abort_handle());
        }
    }

    /// The handler named what `page` needs: plan its pushes and start what
    /// the budgets allow.
    pub(super) fn handle_push_targets(&mut self, id: RequestId, targets: Vec<PushTarget>) {
        let Some(page) = self.pushes.forget_page(id) else {
            return;
        };
        if !self.page_may_push(id) {
            return;
        }
        let Some(fields) = page_fields(&page.request.head) else {
            tracing::debug!(id, "no pushes: the page's head has no single Host");
            return;
        };
        let held = page.held.unwrap_or_default();
        let max = usize::from(self.pushes.config.max_per_page);
        let plan = plan(&fields, targets, &held, max);
        tracing::debug!(
            id,
            pushes = plan.pushes.len(),
            skipped_fresh = plan.skipped_fresh,
            "pushes planned"
        );
        if plan.skipped_fresh > 0 {
            self.counts
                .add(Tally::PushesSkippedFresh(plan.skipped_fresh));
        }
        self.pushes
            .waiting
            .extend(plan.pushes.into_iter().map(|p| (id, p)));
        self.pump_pushes();
    }

    /// Promises the association's grant still allows (MAX_PUSHES received
    /// minus PUSH_PROMISEs sent).
    fn grant_left(&self) -> u64 {
        self.pushes.granted.saturating_sub(self.pushes.promised)
    }

    /// Whether `page` may get pushes, now or once the gateway grants more:
    /// [`gateway_protocol::Session::push_allowance`] also says no while the
    /// grant is spent, which is no reason to give up on a page.
    fn page_may_push(&self, page: RequestId) -> bool {
        self.grant_left() == 0 || self.session.push_allowance(page).is_some()
    }

    /// Starts waiting pushes while the grant, their page's allowance and
    /// [`PUSHES_AT_ONCE`] leave room. A push being prepared counts against
    /// the grant and its page's count as a promise will.
    pub(super) fn pump_pushes(&mut self) {
        while self.pushes.running < PUSHES_AT_ONCE {
            let Some(&(page, _)) = self.pushes.waiting.front() else {
                return;
            };
            let preparing = self.pushes.preparing.len() as u64;
            if preparing >= self.grant_left() {
                // Until the gateway grants more (MAX_PUSHES) or a
                // preparation is dropped.
                return;
            }
            let Some(allowance) = self.session.push_allowance(page) else {
                // The page's count or budget is spent, the page was ended,
                // or the gateway is going away: none of its pushes will go.
                self.pushes.waiting.retain(|(p, _)| *p != page);
                continue;
            };
            let page_preparing = self
                .pushes
                .preparing
                .iter()
                .filter(|id| self.push_job(**id).is_some_and(|p| p.page == page))
                .count() as u64;
            if page_preparing >= allowance.pushes {
                return;
            }
            let Some((page, planned)) = self.pushes.waiting.pop_front() else {
                return;
            };
            self.start_push(page, planned);
        }
    }

    fn push_job(&self, id: RequestId) -> Option<&PushJob> {
        self.jobs.get(&id).and_then(|job| job.push.as_ref())
    }

    /// Runs the handler on a planned push, as on a request; the promise
    /// waits for its head.
    fn start_push(&mut self, page: RequestId, planned: PlannedPush) {
        let Some(id) = self.pushes.next_id else {
            self.pushes.waiting.clear();
            return;
        };
        self.pushes.next_id = id.checked_add(1);
        let stream = self.push_stream();
        let request = Request {
            id,
            urgency: Urgency::LOWEST,
            class: RequestClass::Prefetch,
            end: true,
            head: planned.head.clone(),
        };
        let permits = Arc::new(Semaphore::new(CHUNKS_AHEAD));
        let incoming = IncomingRequest {
            id,
            stream,
            request,
            body: Bytes::new(),
            tunnelled: false,
        };
        let producer = tokio::spawn(produce(
            Arc::clone(&self.handler),
            incoming,
            self.events_tx.clone(),
            Arc::clone(&permits),
            self.config.chunk_size,
        ));
        let mut job = Job::new(stream, producer.abort_handle(), permits, None);
        job.push = Some(PushJob {
            page,
            head: planned.head,
            render_blocking: planned.render_blocking,
            conditional: planned.conditional,
            promised: false,
            body_len: None,
        });
        self.insert_job(id, job);
        self.pushes.preparing.push_back(id);
        self.pushes.running += 1;
    }

    /// The data stream with the fewest jobs now, ties taken in turn after
    /// the last one used (see the module docs for why not the page's).
    fn push_stream(&mut self) -> u16 {
        let streams = self.session.data_streams().max(1);
        let last = self.pushes.last_stream;
        let stream = (1..=streams)
            .min_by_key(|s| {
                let jobs = self.job_streams.get(s).copied().unwrap_or(0);
                (jobs, *s <= last, *s)
            })
            .unwrap_or(1);
        self.pushes.last_stream = stream;
        stream
    }

    /// Promises the prepared pushes at the front of the queue, in id order,
    /// then starts more.
    pub(super) async fn promise_ready(&mut self) -> Result<(), DriverError> {
        while let Some(&id) = self.pushes.preparing.front() {
            match self.jobs.get(&id) {
                None => {}
                Some(job) if job.head_len == 0 => break,
                Some(_) => {
                    self.pushes.preparing.pop_front();
                    self.promise(id).await?;
                    continue;
                }
            }
            self.pushes.preparing.pop_front();
        }
        self.pump_pushes();
        Ok(())
    }

    /// Sends `id`'s PUSH_PROMISE and hands it to the scheduler, or drops it
    /// (no allowance left, a status not worth pushing, a known length beyond
    /// the page's bytes left).
    async fn promise(&mut self, id: RequestId) -> Result<(), DriverError> {
        let Some(job) = self.jobs.get(&id) else {
            return Ok(());
        };
        let Some(push) = &job.push else {
            return Ok(());
        };
        let (page, stream) = (push.page, job.stream);
        let status_ok = match job.ready.front() {
            Some(super::Produced::Head { head, .. }) => worth_pushing(head),
            _ => false,
        };
        let reserved = self.reserved_push_bytes(page);
        let fits = self.session.push_allowance(page).is_some_and(|allowance| {
            let left = allowance.bytes.saturating_sub(reserved);
            push.body_len.is_none_or(|len| len <= left)
        });
        if !status_ok || !fits || self.session.handle_push_sent(id, page, stream).is_err() {
            tracing::debug!(id, page, status_ok, fits, "push dropped before its promise");
            self.drop_push(id);
            return Ok(());
        }
        self.pushes.promised += 1;
        let (head, render_blocking, conditional, body_len) = (
            push.head.clone(),
            push.render_blocking,
            push.conditional,
            push.body_len,
        );
        let ready = !job.ready.is_empty();
        let remaining = body_len.map(|len| len + job.head_len);
        if let Some(push) = self.jobs.get_mut(&id).and_then(|j| j.push.as_mut()) {
            push.promised = true;
        }
        tracing::debug!(id, page, stream, conditional, "push promised");
        let promise = Message::PushPromise(PushPromise { id, page, head }).to_bytes();
        let len = promise.len();
        self.send_watched(stream, promise).await?;
        self.note_written(stream, len);
        self.counts.add(Tally::PushPromised { conditional });
        self.scheduler.handle_push_arrival(
            JobSpec {
                id,
                stream,
                class: RequestClass::Prefetch,
                urgency: Urgency::LOWEST,
                remaining,
            },
            render_blocking,
        );
        self.scheduler.handle_ready(id, ready);
        Ok(())
    }

    /// Body bytes the promised pushes of `page` will still send, as far as
    /// their lengths are known.
    fn reserved_push_bytes(&self, page: RequestId) -> u64 {
        self.jobs
            .values()
            .filter_map(|job| {
                let push = job.push.as_ref()?;
                let len = push.body_len?;
                (push.page == page && push.promised).then(|| len.saturating_sub(job.body_sent))
            })
            .sum()
    }

    /// Forgets a push that was never promised, or stops one the gateway
    /// forgot with its page (no RESET either way).
    fn drop_push(&mut self, id: RequestId) -> bool {
        let Some(job) = self.remove_job(id) else {
            return false;
        };
        if let Some(producer) = job.producer {
            producer.abort();
        }
        self.pushes.running = self.pushes.running.saturating_sub(1);
        let promised = job.push.is_some_and(|p| p.promised);
        if promised {
            self.scheduler.handle_done(id);
            self.session.handle_request_finished(id);
        }
        promised
    }

    /// A push job ended (sent its end or RESET, or the gateway stopped it):
    /// room for the next.
    pub(super) fn push_ended(&mut self) {
        self.pushes.running = self.pushes.running.saturating_sub(1);
        self.pump_pushes();
    }

    /// The gateway cancelled or reset `page`: its pushes end (those promised
    /// without a RESET: the gateway forgot them), and it gets no more.
    pub(super) fn end_page_pushes(&mut self, page: RequestId) {
        self.pushes.forget_page(page);
        self.pushes.waiting.retain(|(p, _)| *p != page);
        let preparing: Vec<RequestId> = self
            .pushes
            .preparing
            .iter()
            .copied()
            .filter(|id| self.push_job(*id).is_some_and(|p| p.page == page))
            .collect();
        for id in preparing {
            self.drop_push(id);
        }
        for id in self.session.pushes_of(page) {
            if self.drop_push(id) {
                self.counts.add(Tally::PushCancelled);
            }
        }
        self.pump_pushes();
    }
}

/// The reason of the RESET that ends a push whose body would exceed its
/// page's budget.
pub(super) const TOO_LARGE: (ErrorCode, &str) =
    (ErrorCode::TooLarge, "push body beyond the page's max_bytes");

/// `Handler::pushes`' default: nothing.
pub(super) fn no_pushes() -> impl Future<Output = Vec<PushTarget>> + Send {
    std::future::ready(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(head: &str) -> PageFields {
        page_fields(head.as_bytes()).expect("a page head")
    }

    fn target(t: &str, render_blocking: bool, public: bool) -> PushTarget {
        PushTarget {
            target: t.to_owned(),
            render_blocking,
            public,
            kind: None,
        }
    }

    fn held(target: &str, fresh: bool, etag: &str, date: &str) -> HeldEntry {
        HeldEntry {
            fresh,
            target: Bytes::copy_from_slice(target.as_bytes()),
            etag: Bytes::copy_from_slice(etag.as_bytes()),
            last_modified: Bytes::copy_from_slice(date.as_bytes()),
        }
    }

    const PAGE: &str = "GET /index.html HTTP/1.1\r\nHost: www.example.org\r\n\
        Accept-Encoding: gzip\r\naccept-encoding: br\r\nAccept-Language: de\r\n\
        User-Agent: x\r\n\r\n";

    #[test]
    fn a_push_head_repeats_host_and_the_negotiation_fields_and_nothing_else() {
        let plan = plan(&page(PAGE), vec![target("/a.css", true, false)], &[], 64);
        assert_eq!(plan.pushes.len(), 1);
        assert_eq!(
            &plan.pushes[0].head[..],
            b"GET /a.css HTTP/1.1\r\nHost: www.example.org\r\nAccept: */*\r\n\
              Accept-Encoding: gzip, br\r\nAccept-Language: de\r\n\r\n"
        );
        assert!(plan.pushes[0].render_blocking && !plan.pushes[0].conditional);
    }

    #[test]
    fn a_push_asks_with_the_accept_a_browser_sends_for_its_kind() {
        let image = PushTarget {
            kind: Some(page_resources::Kind::Image),
            ..target("/a.png", false, true)
        };
        let style = PushTarget {
            kind: Some(page_resources::Kind::Style),
            ..target("/a.css", true, true)
        };
        let plan = plan(&page(PAGE), vec![image, style], &[], 64);
        let heads: Vec<&str> = plan
            .pushes
            .iter()
            .map(|p| std::str::from_utf8(&p.head).expect("ASCII"))
            .collect();
        assert!(
            heads[0].contains("\r\nAccept: image/avif,image/webp,"),
            "{}",
            heads[0]
        );
        assert!(
            heads[1].contains("\r\nAccept: text/css,*/*;q=0.1\r\n"),
            "{}",
            heads[1]
        );
    }

    #[test]
    fn held_fresh_is_skipped_and_held_stale_is_revalidated() {
        let held = [
            held("/fresh.png", true, "\"f\"", ""),
            held(
                "/stale.js",
                false,
                "W/\"s\"",
                "Sun, 29 Nov 2026 04:00:00 GMT",
            ),
        ];
        let targets = vec![
            target("/fresh.png", false, true),
            target("/stale.js", true, true),
        ];
        let plan = plan(&page(PAGE), targets, &held, 64);
        assert_eq!(plan.skipped_fresh, 1);
        assert_eq!(plan.pushes.len(), 1);
        let head = std::str::from_utf8(&plan.pushes[0].head).expect("ASCII");
        assert!(head.starts_with("GET /stale.js HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("\r\nIf-None-Match: W/\"s\"\r\n"), "{head}");
        assert!(
            head.contains("\r\nIf-Modified-Since: Sun, 29 Nov 2026 04:00:00 GMT\r\n"),
            "{head}"
        );
        assert!(plan.pushes[0].conditional);
    }

    #[test]
    fn a_page_with_credentials_gets_only_public_targets_and_never_its_credentials() {
        for field in [
            "Cookie: s=1",
            "Authorization: Basic eDp5",
            "proxy-authorization: x",
        ] {
            let head = format!("GET / HTTP/1.1\r\nHost: h\r\n{field}\r\n\r\n");
            let targets = vec![
                target("/private", false, false),
                target("/public", false, true),
            ];
            let plan = plan(&page(&head), targets, &[], 64);
            assert_eq!(plan.pushes.len(), 1, "{field}");
            let pushed = std::str::from_utf8(&plan.pushes[0].head).expect("ASCII");
            assert!(pushed.starts_with("GET /public "), "{pushed}");
            let lower = pushed.to_ascii_lowercase();
            assert!(!lower.contains("cookie") && !lower.contains("authorization"));
        }
    }

    #[test]
    fn bad_targets_repeats_the_page_itself_and_the_excess_are_not_pushed() {
        let targets = vec![
            target("/index.html", false, true),
            target("relative.css", false, true),
            target("/with space", false, true),
            target("/crlf\r\nX: y", false, true),
            target("/a", false, true),
            target("/a", false, true),
            target("/b", false, true),
            target("/c", false, true),
        ];
        let plan = plan(&page(PAGE), targets, &[], 2);
        let pushed: Vec<&[u8]> = plan.pushes.iter().map(|p| &p.head[..10]).collect();
        assert_eq!(pushed, [&b"GET /a HTT"[..], &b"GET /b HTT"[..]]);
    }

    #[test]
    fn a_page_without_a_single_host_gets_no_pushes() {
        assert!(page_fields(b"GET / HTTP/1.1\r\n\r\n").is_none());
        assert!(page_fields(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").is_none());
        assert!(page_fields(b"GET / HTTP/1.1\r\nHost: a\r\n").is_none());
    }

    #[test]
    fn only_200_and_304_are_worth_a_push() {
        assert!(worth_pushing(
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n"
        ));
        assert!(worth_pushing(b"HTTP/1.1 304 Not Modified\r\n\r\n"));
        assert!(!worth_pushing(b"HTTP/1.1 404 Not Found\r\n\r\n"));
        assert!(!worth_pushing(b"HTTP/1.1 206 Partial Content\r\n\r\n"));
        assert!(!worth_pushing(b"garbage"));
    }
}
