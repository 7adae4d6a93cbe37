//! The memory tier: small, recently stored or served entries with their bodies,
//! in front of redb, so that a hit on a hot object needs no blocking call
//! (Squid's `cache_mem` in front of its disk cache plays the same part).
//!
//! It holds copies: redb stays the record. Every path that removes or changes
//! an entry in the store (invalidation, purge, a 304's new head, a discarded
//! entry) removes it here first; store eviction does not, so a hot entry may
//! outlive its row until this tier evicts it, which is harmless (it is still a
//! complete, verified response, judged fresh or not on every hit).
//!
//! Eviction is second chance (CLOCK): a hit sets a bit; the hand skips and
//! clears set bits and evicts the first clear one.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::HeaderMap;

use super::policy;
use super::store::{EntryMeta, Purge, full_key};
use crate::sync::lock;

/// Largest body kept in memory.
pub(super) const MAX_OBJECT_BYTES: u64 = 256 * 1024;

/// One entry in memory.
#[derive(Debug, Clone)]
pub(super) struct Hot {
    pub(super) entry: EntryMeta,
    pub(super) body: Bytes,
    /// What the entry's own fields say of its freshness, parsed once here
    /// rather than on every hit.
    pub(super) freshness: policy::Freshness,
}

impl Hot {
    pub(super) fn new(entry: EntryMeta, body: Bytes) -> Self {
        let freshness = policy::Freshness::of(&entry.response);
        Self {
            entry,
            body,
            freshness,
        }
    }
}

#[derive(Debug)]
struct Slot {
    hot: Arc<Hot>,
    primary: String,
    visited: bool,
    /// Tells this insertion's place in `order` from an earlier one's.
    generation: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Vec<u8>, Slot>,
    /// Vary names per primary key with entries here, and how many entries.
    vary: HashMap<String, (Vec<String>, usize)>,
    /// Insertion order for the hand; places of removed entries are skipped.
    order: VecDeque<(Vec<u8>, u64)>,
    bytes: u64,
    next_generation: u64,
}

/// The memory tier; `budget` bytes of bodies and heads.
#[derive(Debug)]
pub(super) struct Memory {
    inner: Mutex<Inner>,
    budget: u64,
}

impl Memory {
    pub(super) fn new(budget: u64) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// The entry for `primary` that matches `request`'s Vary values, marked as
    /// used, with its full key.
    pub(super) fn get(&self, primary: &str, request: &HeaderMap) -> Option<(Vec<u8>, Arc<Hot>)> {
        let mut inner = lock(&self.inner);
        let (names, _) = inner.vary.get(primary)?;
        let key = full_key(primary, &policy::secondary_key(names, request));
        let slot = inner.entries.get_mut(&key)?;
        slot.visited = true;
        Some((key, Arc::clone(&slot.hot)))
    }

    /// Keeps `hot` under `key` (replacing what was there) if it is small
    /// enough, evicting others to stay within the budget.
    pub(super) fn insert(&self, primary: &str, vary: &[String], key: Vec<u8>, hot: Hot) {
        if self.budget == 0 || hot.body.len() as u64 > MAX_OBJECT_BYTES {
            return;
        }
        let size = charge(&key, &hot);
        let mut inner = lock(&self.inner);
        remove_key(&mut inner, &key);
        // A different Vary for the primary replaces its other variants.
        if inner
            .vary
            .get(primary)
            .is_some_and(|(names, _)| names != vary)
        {
            remove_primary(&mut inner, primary);
        }
        while inner.bytes + size > self.budget {
            let Some((victim, generation)) = inner.order.pop_front() else {
                break;
            };
            match inner.entries.get_mut(&victim) {
                Some(slot) if slot.generation != generation => {}
                Some(slot) if slot.visited => {
                    slot.visited = false;
                    inner.order.push_back((victim, generation));
                }
                Some(_) => remove_key(&mut inner, &victim),
                None => {}
            }
        }
        inner
            .vary
            .entry(primary.to_owned())
            .or_insert_with(|| (vary.to_vec(), 0))
            .1 += 1;
        inner.bytes += size;
        let generation = inner.next_generation;
        inner.next_generation += 1;
        inner.order.push_back((key.clone(), generation));
        inner.entries.insert(
            key,
            Slot {
                hot: Arc::new(hot),
                primary: primary.to_owned(),
                visited: false,
                generation,
            },
        );
        // Places of removed entries pile up only until the hand passes them;
        // bound them anyway.
        if inner.order.len() > 2 * inner.entries.len() + 64 {
            let Inner { order, entries, .. } = &mut *inner;
            order.retain(|(k, g)| entries.get(k).is_some_and(|s| s.generation == *g));
        }
    }

    pub(super) fn remove(&self, key: &[u8]) {
        remove_key(&mut lock(&self.inner), key);
    }

    pub(super) fn remove_primaries(&self, primaries: &[String]) {
        let mut inner = lock(&self.inner);
        for primary in primaries {
            remove_primary(&mut inner, primary);
        }
    }

    pub(super) fn purge(&self, what: &Purge) {
        let mut inner = lock(&self.inner);
        let primaries: Vec<String> = inner
            .vary
            .keys()
            .filter(|p| purge_matches(what, p))
            .cloned()
            .collect();
        for primary in primaries {
            remove_primary(&mut inner, &primary);
        }
    }

    /// Entries and bytes held.
    pub(super) fn size(&self) -> (u64, u64) {
        let inner = lock(&self.inner);
        (inner.entries.len() as u64, inner.bytes)
    }
}

/// Whether `primary` is among what `what` purges.
pub(super) fn purge_matches(what: &Purge, primary: &str) -> bool {
    match what {
        Purge::Url(url) => primary == url,
        Purge::Prefix(prefix) => primary.starts_with(prefix.as_str()),
        Purge::Host(host) => {
            let host = host.to_ascii_lowercase();
            primary.starts_with(&format!("http://{host}/"))
                || primary.starts_with(&format!("http://{host}:"))
        }
    }
}

fn charge(key: &[u8], hot: &Hot) -> u64 {
    let head: usize = hot
        .entry
        .response
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32)
        .sum();
    (hot.body.len() + head + key.len() + 128) as u64
}

fn remove_key(inner: &mut Inner, key: &[u8]) {
    let Some(slot) = inner.entries.remove(key) else {
        return;
    };
    inner.bytes -= charge(key, &slot.hot);
    if let Some(count) = inner.vary.get_mut(&slot.primary) {
        count.1 -= 1;
        if count.1 == 0 {
            inner.vary.remove(&slot.primary);
        }
    }
    // The key's place in `order` goes when the hand reaches it.
}

fn remove_primary(inner: &mut Inner, primary: &str) {
    let start = full_key(primary, b"");
    let keys: Vec<Vec<u8>> = inner
        .entries
        .keys()
        .filter(|k| k.starts_with(&start))
        .cloned()
        .collect();
    for key in keys {
        remove_key(inner, &key);
    }
    inner.vary.remove(primary);
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use http::{HeaderValue, StatusCode};

    use super::*;
    use crate::cache::policy::StoredResponse;

    fn hot(body: &'static [u8]) -> Hot {
        Hot::new(
            EntryMeta {
                id: 1,
                response: StoredResponse {
                    status: StatusCode::OK,
                    headers: HeaderMap::new(),
                    request_time: SystemTime::UNIX_EPOCH,
                    response_time: SystemTime::UNIX_EPOCH,
                    body_len: body.len() as u64,
                },
                chunks: 1,
                body_crc: 0,
                stored_at: 0,
            },
            Bytes::from_static(body),
        )
    }

    #[test]
    fn variants_are_found_by_their_vary_values_and_removed_by_primary() {
        let memory = Memory::new(1 << 20);
        let vary = vec!["accept-language".to_owned()];
        let mut de = HeaderMap::new();
        de.insert("accept-language", HeaderValue::from_static("de"));
        let mut fr = HeaderMap::new();
        fr.insert("accept-language", HeaderValue::from_static("fr"));
        for (request, body) in [(&de, &b"de"[..]), (&fr, &b"fr"[..])] {
            let key = full_key("http://a/x", &policy::secondary_key(&vary, request));
            let mut h = hot(b"");
            h.body = Bytes::copy_from_slice(body);
            memory.insert("http://a/x", &vary, key, h);
        }
        let (_, found) = memory.get("http://a/x", &fr).expect("fr variant");
        assert_eq!(&found.body[..], b"fr");
        assert!(memory.get("http://a/x", &HeaderMap::new()).is_none());
        memory.remove_primaries(&["http://a/x".to_owned()]);
        assert!(memory.get("http://a/x", &de).is_none());
        assert_eq!(memory.size(), (0, 0));
    }

    #[test]
    fn the_budget_holds_and_a_used_entry_gets_a_second_chance() {
        let one = charge(&full_key("http://a/0", b""), &hot(&[0; 1000]));
        let memory = Memory::new(3 * one);
        let key = |i: u32| full_key(&format!("http://a/{i}"), b"");
        for i in 0..3 {
            memory.insert(&format!("http://a/{i}"), &[], key(i), hot(&[0; 1000]));
        }
        // Entry 0 is used: the next insert evicts 1 instead.
        memory
            .get("http://a/0", &HeaderMap::new())
            .expect("entry 0");
        memory.insert("http://a/3", &[], key(3), hot(&[0; 1000]));
        assert!(memory.get("http://a/0", &HeaderMap::new()).is_some());
        assert!(memory.get("http://a/1", &HeaderMap::new()).is_none());
        assert!(memory.size().1 <= 3 * one);
        memory.purge(&Purge::Host("a".into()));
        assert_eq!(memory.size(), (0, 0));
    }
}
