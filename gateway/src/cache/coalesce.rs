//! Request coalescing: concurrent misses for one key share one upstream fetch.
//!
//! The first request for a key becomes the leader and gets a [`FillGuard`]; it
//! feeds the response head and body chunks in as they arrive. Every other
//! request for the key while the fetch runs gets a [`Subscriber`] that yields
//! the head, then every chunk from the first: what already arrived at once,
//! the rest as it comes. A fetch that fails (or whose guard is dropped
//! unfinished) fails every subscriber with an error, so a truncated body is
//! never presented as complete.
//!
//! Memory: a flight keeps its chunks while it takes joiners, so that late
//! joiners can start from byte 0. Once it holds more than its limit it stops
//! taking new joiners (they fetch on their own); those already in keep
//! reading, chunks every reader has passed are released, and
//! [`FillGuard::ready`] holds the producer back while the slowest reader is
//! more than [`READ_AHEAD_CHUNKS`] behind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{Notify, watch};

use crate::sync::lock;

/// How many chunks a closed flight's producer may run ahead of its slowest
/// reader.
pub const READ_AHEAD_CHUNKS: usize = 64;

/// Why a coalesced fetch did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream fetch failed: {0}")]
pub struct FetchError(pub Arc<str>);

#[derive(Debug)]
struct State<H> {
    head: Option<Arc<H>>,
    /// Chunks from index `offset` on (earlier ones were released).
    chunks: std::collections::VecDeque<Bytes>,
    /// Absolute index of `chunks[0]`.
    offset: usize,
    bytes: u64,
    end: Option<Result<(), FetchError>>,
    /// Still taking joiners (so every chunk from the first is kept).
    open: bool,
    /// Each reader's next absolute chunk index, by reader id.
    readers: HashMap<u64, usize>,
    next_reader: u64,
}

impl<H> State<H> {
    /// Releases the chunks every reader has passed, once nobody can join.
    fn trim(&mut self) {
        if self.open {
            return;
        }
        let end = self.offset + self.chunks.len();
        let slowest = self.readers.values().copied().min().unwrap_or(end);
        while self.offset < slowest && !self.chunks.is_empty() {
            self.chunks.pop_front();
            self.offset += 1;
        }
    }
}

/// The flights in progress by key.
type Flights<H> = Mutex<HashMap<Vec<u8>, Arc<Flight<H>>>>;

#[derive(Debug)]
struct Flight<H> {
    state: Mutex<State<H>>,
    /// Bumped on every change; subscribers wait on it.
    version: watch::Sender<u64>,
    /// Signalled when a reader advances or leaves; the producer waits on it.
    progress: Notify,
}

impl<H> Flight<H> {
    fn update(&self, f: impl FnOnce(&mut State<H>)) {
        f(&mut lock(&self.state));
        self.version.send_modify(|v| *v += 1);
    }
}

/// The flights in progress, by cache key. `H` is the response head type.
#[derive(Debug)]
pub struct Coalescer<H> {
    flights: Arc<Flights<H>>,
    /// A flight holding more body bytes than this takes no new joiners.
    join_limit: u64,
}

/// The outcome of [`Coalescer::join`].
#[derive(Debug)]
pub enum Join<H> {
    /// Nobody is fetching this key: fetch it and feed the guard.
    Leader(FillGuard<H>),
    /// A fetch is under way: read it.
    Follower(Subscriber<H>),
}

impl<H> Coalescer<H> {
    /// A coalescer whose flights accept joiners up to `join_limit` body bytes.
    pub fn new(join_limit: u64) -> Self {
        Self {
            flights: Arc::new(Mutex::new(HashMap::new())),
            join_limit,
        }
    }

    /// Joins the flight for `key`, or starts one. The leader also gets a
    /// subscriber of its own ([`FillGuard::subscribe`]).
    pub fn join(&self, key: &[u8]) -> Join<H> {
        let mut flights = lock(&self.flights);
        if let Some(flight) = flights.get(key) {
            return Join::Follower(Subscriber::new(Arc::clone(flight)));
        }
        let (version, _) = watch::channel(0);
        let flight = Arc::new(Flight {
            state: Mutex::new(State {
                head: None,
                chunks: std::collections::VecDeque::new(),
                offset: 0,
                bytes: 0,
                end: None,
                open: true,
                readers: HashMap::new(),
                next_reader: 0,
            }),
            version,
            progress: Notify::new(),
        });
        flights.insert(key.to_vec(), Arc::clone(&flight));
        Join::Leader(FillGuard {
            flight,
            key: key.to_vec(),
            flights: Arc::clone(&self.flights),
            join_limit: self.join_limit,
            ended: false,
        })
    }

    /// Flights in progress.
    pub fn in_flight(&self) -> usize {
        lock(&self.flights).len()
    }

    /// Whether a flight is in progress for a key `matches` selects.
    pub fn any(&self, matches: impl Fn(&[u8]) -> bool) -> bool {
        lock(&self.flights).keys().any(|key| matches(key))
    }

    /// Takes no new joiners for the keys `matches` selects (their response
    /// was invalidated); those already in keep reading.
    pub fn forget(&self, matches: impl Fn(&[u8]) -> bool) {
        lock(&self.flights).retain(|key, _| !matches(key));
    }
}

/// A finished flight that still takes joiners (they read the whole body at
/// once) until this is dropped: the fill holds it until its entry is
/// committed, so that no request falls between the flight and the store.
#[derive(Debug)]
pub struct Hold<H> {
    flight: Arc<Flight<H>>,
    key: Vec<u8>,
    flights: Arc<Flights<H>>,
}

impl<H> Drop for Hold<H> {
    fn drop(&mut self) {
        let mut flights = lock(&self.flights);
        if flights
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            flights.remove(&self.key);
        }
    }
}

/// The leader's side of a flight. Dropping it before [`FillGuard::finish`]
/// fails the flight.
#[derive(Debug)]
pub struct FillGuard<H> {
    flight: Arc<Flight<H>>,
    key: Vec<u8>,
    flights: Arc<Flights<H>>,
    join_limit: u64,
    ended: bool,
}

impl<H> FillGuard<H> {
    /// A reader of this flight (the leader's own client, the store writer).
    pub fn subscribe(&self) -> Subscriber<H> {
        Subscriber::new(Arc::clone(&self.flight))
    }

    /// The response head arrived.
    pub fn set_head(&self, head: H) {
        self.flight.update(|s| s.head = Some(Arc::new(head)));
    }

    /// A body chunk arrived.
    pub fn push(&self, chunk: Bytes) {
        let mut too_big = false;
        self.flight.update(|s| {
            s.bytes += chunk.len() as u64;
            too_big = s.open && s.bytes > self.join_limit;
            s.chunks.push_back(chunk);
            if too_big {
                s.open = false;
            }
            s.trim();
        });
        if too_big {
            self.detach();
        }
    }

    /// Readers still attached (subscribers not yet dropped).
    pub fn readers(&self) -> usize {
        lock(&self.flight.state).readers.len()
    }

    /// Waits until the next chunk may be pushed: at once while the flight takes
    /// joiners; afterwards, while the slowest reader is less than
    /// [`READ_AHEAD_CHUNKS`] behind. A producer that pushes only after this
    /// holds at most that many unread chunks in memory once the flight closed.
    pub async fn ready(&self) {
        loop {
            let notified = self.flight.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = lock(&self.flight.state);
                let end = state.offset + state.chunks.len();
                let slowest = state.readers.values().copied().min().unwrap_or(end);
                if state.open || end - slowest < READ_AHEAD_CHUNKS {
                    return;
                }
            }
            notified.await;
        }
    }

    /// The body is complete.
    pub fn finish(mut self) {
        self.end(Ok(()));
    }

    /// The body is complete; the flight keeps taking joiners until the
    /// returned [`Hold`] is dropped.
    pub fn finish_held(mut self) -> Hold<H> {
        self.ended = true;
        self.flight.update(|s| s.end = Some(Ok(())));
        Hold {
            flight: Arc::clone(&self.flight),
            key: self.key.clone(),
            flights: Arc::clone(&self.flights),
        }
    }

    /// The fetch failed: every reader gets `reason`.
    pub fn fail(mut self, reason: &str) {
        self.end(Err(FetchError(reason.into())));
    }

    fn end(&mut self, result: Result<(), FetchError>) {
        self.ended = true;
        self.detach();
        self.flight.update(|s| s.end = Some(result));
    }

    /// No new joiners from now on.
    fn detach(&self) {
        {
            let mut state = lock(&self.flight.state);
            state.open = false;
            state.trim();
        }
        let mut flights = lock(&self.flights);
        if flights
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            flights.remove(&self.key);
        }
    }
}

impl<H> Drop for FillGuard<H> {
    fn drop(&mut self) {
        if !self.ended {
            self.end(Err(FetchError("fetch abandoned".into())));
        }
    }
}

/// One reader of a flight.
#[derive(Debug)]
pub struct Subscriber<H> {
    flight: Arc<Flight<H>>,
    version: watch::Receiver<u64>,
    id: u64,
    next: usize,
}

impl<H> Subscriber<H> {
    fn new(flight: Arc<Flight<H>>) -> Self {
        let version = flight.version.subscribe();
        let id = {
            let mut state = lock(&flight.state);
            let id = state.next_reader;
            state.next_reader += 1;
            state.readers.insert(id, 0);
            id
        };
        Self {
            flight,
            version,
            id,
            next: 0,
        }
    }

    /// The response head, once it arrived; an error if the fetch failed first.
    pub async fn head(&mut self) -> Result<Arc<H>, FetchError> {
        loop {
            {
                let state = lock(&self.flight.state);
                if let Some(head) = &state.head {
                    return Ok(Arc::clone(head));
                }
                if let Some(Err(e)) = &state.end {
                    return Err(e.clone());
                }
                if let Some(Ok(())) = &state.end {
                    return Err(FetchError("ended without a head".into()));
                }
            }
            if self.version.changed().await.is_err() {
                return Err(FetchError("fetch abandoned".into()));
            }
        }
    }

    /// The next body chunk; `None` at the end of a complete body; an error if
    /// the fetch failed (the body so far must not be taken as complete).
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, FetchError>> {
        loop {
            {
                let mut state = lock(&self.flight.state);
                // A subscriber's position is never below `offset`: trimming
                // stops at the slowest reader.
                if let Some(chunk) = state.chunks.get(self.next - state.offset).cloned() {
                    self.next += 1;
                    state.readers.insert(self.id, self.next);
                    state.trim();
                    drop(state);
                    self.flight.progress.notify_waiters();
                    return Some(Ok(chunk));
                }
                match &state.end {
                    Some(Ok(())) => return None,
                    Some(Err(e)) => return Some(Err(e.clone())),
                    None => {}
                }
            }
            if self.version.changed().await.is_err() {
                return Some(Err(FetchError("fetch abandoned".into())));
            }
        }
    }
}

impl<H> Drop for Subscriber<H> {
    fn drop(&mut self) {
        {
            let mut state = lock(&self.flight.state);
            state.readers.remove(&self.id);
            state.trim();
        }
        self.flight.progress.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(mut s: Subscriber<u16>) -> Result<(u16, Vec<u8>), FetchError> {
        let head = *s.head().await?;
        let mut body = Vec::new();
        while let Some(chunk) = s.next_chunk().await {
            body.extend_from_slice(&chunk?);
        }
        Ok((head, body))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thirty_two_waiters_one_fetch_identical_bodies_and_a_late_joiner() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        const N: usize = 32;
        let coalescer = Arc::new(Coalescer::<u16>::new(1 << 20));
        let fetches = Arc::new(AtomicUsize::new(0));
        let joined = Arc::new(tokio::sync::Barrier::new(N + 1));
        let (release_tx, release_rx) = watch::channel(0u8);
        let mut tasks = Vec::new();
        for _ in 0..N {
            let coalescer = Arc::clone(&coalescer);
            let fetches = Arc::clone(&fetches);
            let joined = Arc::clone(&joined);
            let mut release = release_rx.clone();
            tasks.push(tokio::spawn(async move {
                let reader = match coalescer.join(b"k") {
                    Join::Leader(guard) => {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let mine = guard.subscribe();
                        // The "upstream": half the body, a pause for the late
                        // joiner, the other half.
                        tokio::spawn(async move {
                            let _ = release.wait_for(|r| *r >= 1).await;
                            guard.set_head(200);
                            for i in 0..25u8 {
                                guard.push(Bytes::from(vec![i; 1000]));
                            }
                            let _ = release.wait_for(|r| *r >= 2).await;
                            for i in 25..50u8 {
                                guard.push(Bytes::from(vec![i; 1000]));
                                tokio::task::yield_now().await;
                            }
                            guard.finish();
                        });
                        mine
                    }
                    Join::Follower(s) => s,
                };
                joined.wait().await;
                collect(reader).await
            }));
        }
        joined.wait().await;
        release_tx.send(1).expect("release");
        let Join::Follower(late) = coalescer.join(b"k") else {
            panic!("the flight is still in progress")
        };
        release_tx.send(2).expect("release");
        let expected: Vec<u8> = (0..50u8).flat_map(|i| vec![i; 1000]).collect();
        for task in tasks {
            let (status, body) = task.await.expect("task").expect("fetch");
            assert_eq!(status, 200);
            assert_eq!(body, expected);
        }
        let (_, body) = collect(late).await.expect("late joiner");
        assert_eq!(body, expected);
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert_eq!(coalescer.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_failed_fetch_fails_every_reader_after_partial_data() {
        let coalescer = Coalescer::<u16>::new(1 << 20);
        let Join::Leader(guard) = coalescer.join(b"k") else {
            panic!("first is leader")
        };
        let Join::Follower(mut follower) = coalescer.join(b"k") else {
            panic!("second follows")
        };
        guard.set_head(200);
        guard.push(Bytes::from_static(b"part"));
        drop(guard);
        assert_eq!(follower.head().await, Ok(Arc::new(200)));
        assert_eq!(
            follower.next_chunk().await,
            Some(Ok(Bytes::from_static(b"part")))
        );
        assert!(matches!(follower.next_chunk().await, Some(Err(_))));
        assert!(matches!(coalescer.join(b"k"), Join::Leader(_)));
    }

    #[tokio::test]
    async fn a_closed_flight_releases_read_chunks_and_waits_for_its_slowest_reader() {
        let coalescer = Coalescer::<u16>::new(10);
        let Join::Leader(guard) = coalescer.join(b"k") else {
            panic!("leader")
        };
        let mut fast = guard.subscribe();
        let mut slow = guard.subscribe();
        guard.set_head(200);
        // Over the join limit: closed from the first push on.
        for _ in 0..READ_AHEAD_CHUNKS {
            guard.ready().await;
            guard.push(Bytes::from_static(b"0123456789ab"));
        }
        for _ in 0..READ_AHEAD_CHUNKS {
            fast.next_chunk().await.expect("chunk").expect("ok");
        }
        // The slow reader has read nothing: nothing is released, and the
        // producer must wait.
        assert_eq!(lock(&guard.flight.state).chunks.len(), READ_AHEAD_CHUNKS);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), guard.ready());
        assert!(
            waiting.await.is_err(),
            "the producer runs ahead of the slow reader"
        );
        slow.next_chunk().await.expect("chunk").expect("ok");
        guard.ready().await;
        assert_eq!(
            lock(&guard.flight.state).chunks.len(),
            READ_AHEAD_CHUNKS - 1
        );
        // A reader that leaves no longer holds anything back.
        drop(slow);
        assert!(lock(&guard.flight.state).chunks.is_empty());
        assert_eq!(guard.readers(), 1);
        guard.finish();
        assert_eq!(fast.next_chunk().await, None);
    }

    #[tokio::test]
    async fn a_flight_over_its_limit_takes_no_new_joiners() {
        let coalescer = Coalescer::<u16>::new(10);
        let Join::Leader(guard) = coalescer.join(b"k") else {
            panic!("leader")
        };
        let early = guard.subscribe();
        guard.set_head(200);
        guard.push(Bytes::from_static(b"0123456789abc"));
        assert!(matches!(coalescer.join(b"k"), Join::Leader(_)));
        guard.finish();
        let (_, body) = collect(early).await.expect("complete");
        assert_eq!(body, b"0123456789abc");
    }
}
