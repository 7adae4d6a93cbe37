//! Small files kept in memory between lookups, as nginx's `open_file_cache`
//! keeps descriptors and their metadata: a file of at most
//! [`WHOLE_FILE_MAX_BYTES`](super::WHOLE_FILE_MAX_BYTES) that a lookup found
//! and read whole is answered from memory, with the head fields worked out
//! then, until `files.small_file_recheck` has passed. The next request after
//! that looks it up again (path checks, open, read) and replaces the entry.
//!
//! So a file changed, removed or made unreadable is served as it was for at
//! most the recheck interval, which is the trade nginx's
//! `open_file_cache_valid` makes too. Refusals (404, 403) are never kept: each
//! is looked up again.
//!
//! Bounded in bytes (`files.small_file_cache_bytes`, the contents plus the key
//! and a fixed overhead per entry). When an insert does not fit, the entries
//! past their recheck time go first, then arbitrary ones (the hash map's
//! order): random replacement, which costs nothing per hit, where an LRU list
//! would cost a write on every hit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::FileFacts;

/// Bytes charged per entry besides its contents and key: the map slot, the
/// facts' fields and the `Arc`.
const ENTRY_OVERHEAD: usize = 256;

/// A small file as the last lookup found it.
#[derive(Debug)]
pub(super) struct SmallFile {
    pub(super) facts: FileFacts,
    pub(super) contents: Bytes,
}

/// The cache; one per [`StaticFiles`](super::StaticFiles), shared by its clones.
#[derive(Debug)]
pub(super) struct SmallFileCache {
    budget: usize,
    recheck: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Box<str>, Entry>,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    file: Arc<SmallFile>,
    looked_up: Instant,
}

impl Entry {
    fn charge(key: &str, file: &SmallFile) -> usize {
        key.len() + file.contents.len() + file.facts.url.len() + ENTRY_OVERHEAD
    }
}

impl SmallFileCache {
    /// A cache of at most `budget` bytes whose entries are trusted for
    /// `recheck`; `None` when either is zero (the cache is off).
    pub(super) fn new(budget: u64, recheck: Duration) -> Option<SmallFileCache> {
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        (budget > 0 && !recheck.is_zero()).then(|| SmallFileCache {
            budget,
            recheck,
            state: Mutex::new(State::default()),
        })
    }

    /// The file kept under `key` (a request target's path), if it was looked
    /// up less than the recheck interval before `now`.
    pub(super) fn get(&self, key: &str, now: Instant) -> Option<Arc<SmallFile>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = state.entries.get(key)?;
        (now.saturating_duration_since(entry.looked_up) < self.recheck)
            .then(|| Arc::clone(&entry.file))
    }

    /// Keeps `file`, looked up at `now`, under `key`, replacing what was there.
    /// A file larger than the whole budget is not kept.
    pub(super) fn insert(&self, key: &str, file: Arc<SmallFile>, now: Instant) {
        let charge = Entry::charge(key, &file);
        if charge > self.budget {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        if let Some(old) = state.entries.remove(key) {
            state.bytes -= Entry::charge(key, &old.file);
        }
        if state.bytes + charge > self.budget {
            let recheck = self.recheck;
            let before = state.entries.len();
            state
                .entries
                .retain(|_, entry| now.saturating_duration_since(entry.looked_up) < recheck);
            if state.entries.len() != before {
                state.bytes = state
                    .entries
                    .iter()
                    .map(|(key, entry)| Entry::charge(key, &entry.file))
                    .sum();
            }
        }
        while state.bytes + charge > self.budget {
            let Some(victim) = state.entries.keys().next().cloned() else {
                break;
            };
            if let Some(old) = state.entries.remove(&victim) {
                state.bytes -= Entry::charge(&victim, &old.file);
            }
        }
        state.bytes += charge;
        state.entries.insert(
            key.into(),
            Entry {
                file,
                looked_up: now,
            },
        );
    }

    /// Entries and bytes charged (for tests and metrics).
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.entries.len(), state.bytes)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::super::file_etag;
    use super::*;

    fn file(len: usize) -> Arc<SmallFile> {
        Arc::new(SmallFile {
            facts: FileFacts {
                url: "/a".into(),
                len: len as u64,
                etag: HeaderValue::from_str(&file_etag(1, 0, len as u64, 7)).expect("etag"),
                modified: 1,
                last_modified: HeaderValue::from_static("x"),
                content_type: HeaderValue::from_static("text/plain"),
                cache_control: None,
            },
            contents: Bytes::from(vec![b'x'; len]),
        })
    }

    #[test]
    fn off_when_either_setting_is_zero() {
        assert!(SmallFileCache::new(0, Duration::from_secs(1)).is_none());
        assert!(SmallFileCache::new(1 << 20, Duration::ZERO).is_none());
    }

    #[test]
    fn an_entry_is_served_until_its_recheck_time() {
        let cache = SmallFileCache::new(1 << 20, Duration::from_secs(1)).expect("on");
        let t0 = Instant::now();
        assert!(cache.get("/a", t0).is_none());
        cache.insert("/a", file(10), t0);
        assert!(cache.get("/a", t0 + Duration::from_millis(999)).is_some());
        assert!(cache.get("/a", t0 + Duration::from_secs(1)).is_none());
        assert!(cache.get("/b", t0).is_none());
        // A new lookup replaces the entry and its charge.
        cache.insert("/a", file(20), t0 + Duration::from_secs(2));
        let hit = cache.get("/a", t0 + Duration::from_secs(2)).expect("kept");
        assert_eq!(hit.contents.len(), 20);
        assert_eq!(cache.usage(), (1, 2 + 20 + 2 + ENTRY_OVERHEAD));
    }

    #[test]
    fn the_budget_holds_expired_entries_going_first() {
        let per_entry = 2 + 1000 + 2 + ENTRY_OVERHEAD;
        let cache = SmallFileCache::new(3 * per_entry as u64, Duration::from_secs(1)).expect("on");
        let t0 = Instant::now();
        cache.insert("/1", file(1000), t0);
        cache.insert("/2", file(1000), t0 + Duration::from_millis(500));
        cache.insert("/3", file(1000), t0 + Duration::from_millis(600));
        assert_eq!(cache.usage(), (3, 3 * per_entry));
        // At 1.2 s only /1 is past its recheck time: it makes the room.
        let t = t0 + Duration::from_millis(1200);
        cache.insert("/4", file(1000), t);
        assert_eq!(cache.usage(), (3, 3 * per_entry));
        assert!(cache.get("/1", t).is_none());
        for key in ["/2", "/3", "/4"] {
            assert!(cache.get(key, t).is_some(), "{key}");
        }
        // None expired: one arbitrary entry goes, the budget still holds.
        cache.insert("/5", file(1000), t);
        assert_eq!(cache.usage(), (3, 3 * per_entry));
        assert!(cache.get("/5", t).is_some());
        // Larger than the whole budget: not kept, nothing evicted for it.
        cache.insert("/big", file(4 * per_entry), t);
        assert!(cache.get("/big", t).is_none());
        assert_eq!(cache.usage(), (3, 3 * per_entry));
    }
}
