//! The redb store: entries, body chunks, the commit protocol, size accounting
//! and SIEVE eviction.
//!
//! Every call here blocks (redb is synchronous): callers on the async side go
//! through `tokio::task::spawn_blocking`. Eviction runs on its own thread.
//!
//! Tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | primary key, 0, secondary key | [`EntryMeta`], encoded, with its own CRC-32C |
//! | `vary` | primary key | the Vary field names of the entries under it, `\n`-separated |
//! | `chunks` | (entry id, chunk index) | CRC-32C of the data (4 bytes LE), then up to [`CHUNK_BYTES`] of body |
//! | `pending` | entry id | when its writer started (Unix seconds) |
//! | `state` | name | counters (`next_id`) |
//!
//! Commit protocol: a writer registers its entry id in `pending`, then commits
//! each chunk as it fills (non-durable commits: cheap, and lost together on a
//! crash). Finishing reads every chunk back, checks lengths and the whole-body
//! CRC, then in one durable commit inserts the `meta` row and removes the
//! `pending` row. Only a `meta` row makes an entry visible, so a crash at any
//! point leaves either the whole entry or none of it; [`Store::open`] deletes
//! the chunks of every entry still `pending`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use redb::{
    Builder, ConcurrencyMode, Database, Durability, ReadOnlyDatabase, ReadableDatabase,
    ReadableTable, StorageBackend, TableDefinition,
};

use super::policy::StoredResponse;
use crate::sync::lock;

/// Body bytes per chunk row: a little under 64 KiB, so that a chunk row (data,
/// CRC, key, leaf header) fits a 64 KiB redb page instead of spilling into a
/// 128 KiB one.
pub const CHUNK_BYTES: usize = 63 * 1024;
/// One head update in this many is a durable commit: redb reuses the pages
/// that non-durable commits free only after a durable one, so a long run of
/// revalidations with no fill between them (nothing else commits durably)
/// must not grow the file without bound ([`Store::update_head`]).
const DURABLE_HEAD_UPDATES: u64 = 256;

/// redb's page cache, in bytes. The OS page cache does the rest.
const REDB_CACHE_BYTES: usize = 16 << 20;
/// Eviction starts when stored bytes exceed this share of the budget...
const HIGH_WATERMARK: f64 = 0.45;
/// ...and stops below this one. The rest of the budget is redb's: pages of
/// the B-trees, free pages not yet reusable, and the headroom a write needs.
const LOW_WATERMARK: f64 = 0.35;
/// A new entry is refused outright above this share (eviction is behind).
const HARD_LIMIT: f64 = 0.55;
/// Encoding version of `meta` rows.
const META_VERSION: u8 = 1;

const META: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("meta");
const VARY: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("vary");
const CHUNKS: TableDefinition<'_, (u64, u32), &[u8]> = TableDefinition::new("chunks");
const PENDING: TableDefinition<'_, u64, u64> = TableDefinition::new("pending");
const STATE: TableDefinition<'_, &str, u64> = TableDefinition::new("state");

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb reported an error (I/O, a full disk, corruption).
    #[error("cache database: {0}")]
    Db(#[from] redb::Error),
    /// A row did not decode or its checksum did not match.
    #[error("corrupt cache entry: {0}")]
    Corrupt(&'static str),
    /// The store was opened read-only.
    #[error("the cache is open read-only")]
    ReadOnly,
    /// Caching was switched off after a write error.
    #[error("caching is disabled after an earlier error")]
    Disabled,
    /// The body exceeds `max_object_bytes`.
    #[error("object larger than the maximum object size")]
    TooLarge,
    /// The store is over its hard limit and eviction has not caught up.
    #[error("cache over budget")]
    OverBudget,
    /// The body ended before its declared length.
    #[error("body shorter than announced")]
    Truncated,
}

fn db_err(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Db(e.into())
}

/// Limits the store enforces.
#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    /// The database file's budget, in bytes.
    pub max_bytes: u64,
    /// Largest body stored, in bytes.
    pub max_object_bytes: u64,
}

/// An entry's metadata: the stored response head plus what the store needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryMeta {
    /// Unique per stored entry (never reused), names its chunks.
    pub id: u64,
    /// The response head and fetch times.
    pub response: StoredResponse,
    /// Number of chunk rows.
    pub chunks: u32,
    /// CRC-32C of the whole body.
    pub body_crc: u32,
    /// When it was stored (Unix seconds).
    pub stored_at: u64,
}

impl EntryMeta {
    /// Bytes this entry accounts for: body, chunk CRCs, metadata.
    fn charge(&self, encoded_len: usize, key_len: usize) -> u64 {
        self.response.body_len + u64::from(self.chunks) * 16 + (encoded_len + key_len) as u64
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.push(META_VERSION);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.response.status.as_u16().to_le_bytes());
        out.extend_from_slice(&unix(self.response.request_time).to_le_bytes());
        out.extend_from_slice(&unix(self.response.response_time).to_le_bytes());
        out.extend_from_slice(&self.response.body_len.to_le_bytes());
        out.extend_from_slice(&self.chunks.to_le_bytes());
        out.extend_from_slice(&self.body_crc.to_le_bytes());
        out.extend_from_slice(&self.stored_at.to_le_bytes());
        let count = u32::try_from(self.response.headers.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for (name, value) in &self.response.headers {
            let name = name.as_str().as_bytes();
            out.extend_from_slice(&u32::try_from(name.len()).unwrap_or(0).to_le_bytes());
            out.extend_from_slice(name);
            let value = value.as_bytes();
            out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(0).to_le_bytes());
            out.extend_from_slice(value);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = StoreError::Corrupt;
        let (body, crc) = bytes
            .split_last_chunk::<4>()
            .ok_or(corrupt("meta too short"))?;
        if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
            return Err(corrupt("meta checksum"));
        }
        let mut r = Reader(body);
        if r.take::<1>()?[0] != META_VERSION {
            return Err(corrupt("meta version"));
        }
        let id = u64::from_le_bytes(r.take()?);
        let status =
            StatusCode::from_u16(u16::from_le_bytes(r.take()?)).map_err(|_| corrupt("status"))?;
        let request_time = from_unix(u64::from_le_bytes(r.take()?));
        let response_time = from_unix(u64::from_le_bytes(r.take()?));
        let body_len = u64::from_le_bytes(r.take()?);
        let chunks = u32::from_le_bytes(r.take()?);
        let body_crc = u32::from_le_bytes(r.take()?);
        let stored_at = u64::from_le_bytes(r.take()?);
        let count = u32::from_le_bytes(r.take()?);
        let mut headers = HeaderMap::new();
        for _ in 0..count {
            let len = u32::from_le_bytes(r.take()?) as usize;
            let name = HeaderName::from_bytes(r.slice(len)?).map_err(|_| corrupt("name"))?;
            let len = u32::from_le_bytes(r.take()?) as usize;
            let value = HeaderValue::from_bytes(r.slice(len)?).map_err(|_| corrupt("value"))?;
            headers.append(name, value);
        }
        Ok(Self {
            id,
            response: StoredResponse {
                status,
                headers,
                request_time,
                response_time,
                body_len,
            },
            chunks,
            body_crc,
            stored_at,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(StoreError::Corrupt("meta truncated"))?;
        self.0 = rest;
        Ok(*head)
    }

    fn slice(&mut self, len: usize) -> Result<&[u8], StoreError> {
        if self.0.len() < len {
            return Err(StoreError::Corrupt("meta truncated"));
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn from_unix(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// The full key of an entry: primary key, a 0 byte, secondary key. URIs never
/// hold a 0 byte, so the primary key's entries are exactly the keys that start
/// with it and the 0.
pub fn full_key(primary: &str, secondary: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(primary.len() + 1 + secondary.len());
    key.extend_from_slice(primary.as_bytes());
    key.push(0);
    key.extend_from_slice(secondary);
    key
}

/// What to purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purge {
    /// Every variant of one effective URI (`http://host/path?query`).
    Url(String),
    /// Every entry whose URI starts with this.
    Prefix(String),
    /// Every entry of one host (any port), lower-case, IPv6 in brackets.
    Host(String),
}

impl Purge {
    /// The key prefixes a prefix or host purge removes (the store scans each
    /// as a range); `None` for a single URL, which is removed by its key.
    pub fn prefixes(&self) -> Option<Vec<String>> {
        match self {
            Purge::Url(_) => None,
            Purge::Prefix(prefix) => Some(vec![prefix.clone()]),
            Purge::Host(host) => {
                let host = host.to_ascii_lowercase();
                Some(vec![format!("http://{host}/"), format!("http://{host}:")])
            }
        }
    }

    /// Whether the effective URI `uri` (`http://host[:port]/path?query`, the
    /// form of the cache's keys) is one this purge removes: the same rule the
    /// store applies.
    pub fn matches(&self, uri: &str) -> bool {
        match self.prefixes() {
            Some(prefixes) => prefixes.iter().any(|p| uri.starts_with(p.as_str())),
            None => matches!(self, Purge::Url(url) if url == uri),
        }
    }
}

/// The store's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Visible entries.
    pub entries: u64,
    /// Bytes accounted to them (bodies plus metadata).
    pub bytes: u64,
    /// Entries evicted since open.
    pub evictions: u64,
    /// Size of the database file, in bytes.
    pub file_bytes: u64,
    /// Caching stopped after a write error.
    pub disabled: bool,
}

enum Db {
    Writable(Database),
    ReadOnly(ReadOnlyDatabase),
}

/// The SIEVE queue (Zhang et al., NSDI 2024): a FIFO of entries with a
/// `visited` bit; a hit sets the bit, nothing moves; the hand walks from the
/// oldest entry toward the newest, clearing bits, and evicts the first entry
/// found unvisited. Nodes live in a slab; `prev` points toward newer entries.
#[derive(Debug, Default)]
struct Sieve {
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    by_key: HashMap<Vec<u8>, usize>,
    /// Newest.
    head: Option<usize>,
    /// Oldest.
    tail: Option<usize>,
    hand: Option<usize>,
    bytes: u64,
}

#[derive(Debug)]
struct Node {
    key: Vec<u8>,
    id: u64,
    size: u64,
    visited: bool,
    /// Toward the head (newer).
    newer: Option<usize>,
    /// Toward the tail (older).
    older: Option<usize>,
}

impl Sieve {
    fn insert(&mut self, key: Vec<u8>, id: u64, size: u64) {
        self.remove(&key);
        let node = Node {
            key: key.clone(),
            id,
            size,
            visited: false,
            newer: None,
            older: self.head,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot] = Some(node);
                slot
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        if let Some(old_head) = self.head
            && let Some(n) = self.nodes[old_head].as_mut()
        {
            n.newer = Some(slot);
        }
        self.head = Some(slot);
        if self.tail.is_none() {
            self.tail = Some(slot);
        }
        self.by_key.insert(key, slot);
        self.bytes += size;
    }

    fn touch(&mut self, key: &[u8]) {
        if let Some(&slot) = self.by_key.get(key)
            && let Some(n) = self.nodes[slot].as_mut()
        {
            n.visited = true;
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<(u64, u64)> {
        let slot = self.by_key.remove(key)?;
        let node = self.nodes[slot].take()?;
        match node.newer {
            Some(n) => {
                if let Some(x) = self.nodes[n].as_mut() {
                    x.older = node.older;
                }
            }
            None => self.head = node.older,
        }
        match node.older {
            Some(o) => {
                if let Some(x) = self.nodes[o].as_mut() {
                    x.newer = node.newer;
                }
            }
            None => self.tail = node.newer,
        }
        if self.hand == Some(slot) {
            self.hand = node.newer;
        }
        self.free.push(slot);
        self.bytes -= node.size;
        Some((node.id, node.size))
    }

    /// The next victim: key and entry id. Does not remove it.
    fn victim(&mut self) -> Option<(Vec<u8>, u64)> {
        let mut cursor = self.hand.or(self.tail)?;
        loop {
            let node = self.nodes[cursor].as_mut()?;
            if node.visited {
                node.visited = false;
                cursor = node.newer.or(self.tail)?;
            } else {
                self.hand = node.newer;
                return Some((node.key.clone(), node.id));
            }
        }
    }
}

struct Inner {
    db: Db,
    limits: StoreLimits,
    sieve: Mutex<Sieve>,
    next_id: AtomicU64,
    /// Head updates so far ([`Store::update_head`]): every
    /// [`DURABLE_HEAD_UPDATES`]th is a durable commit.
    head_updates: AtomicU64,
    disabled: AtomicBool,
    evictions: AtomicU64,
    evict_tx: Mutex<Option<mpsc::SyncSender<()>>>,
    path_len: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// The cache database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("limits", &self.inner.limits)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Store {
    /// Opens (or creates) the database at `path` for reading and writing,
    /// removes what unfinished writers left, and starts the eviction thread.
    /// Blocks; may take a while after a crash (redb's repair).
    pub fn open(path: &Path, limits: StoreLimits) -> Result<Self, StoreError> {
        let db = builder().create(path).map_err(db_err)?;
        let path = path.to_owned();
        Self::from_db(
            db,
            limits,
            Box::new(move || std::fs::metadata(&path).map_or(0, |m| m.len())),
        )
    }

    /// As [`Store::open`], over any redb backend (tests inject a disk that fills).
    pub fn open_with_backend(
        backend: impl StorageBackend,
        limits: StoreLimits,
    ) -> Result<Self, StoreError> {
        let db = builder().create_with_backend(backend).map_err(db_err)?;
        Self::from_db(db, limits, Box::new(|| 0))
    }

    /// Opens the database read-only, for inspection while no gateway has it
    /// open (redb refuses otherwise). Nothing is swept or evicted.
    ///
    /// A file a crashed gateway left cannot be read until redb has repaired
    /// it, and a read-only open cannot repair: it is then opened read-write
    /// once, which repairs it exactly as the gateway's next start would (the
    /// repair is redb's own; entries the crash left unfinished stay for that
    /// start to sweep), and read-only after.
    pub fn open_read_only(path: &Path) -> Result<Self, StoreError> {
        let db = match builder().open_read_only(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::RepairAborted) => {
                tracing::warn!(
                    path = %path.display(),
                    "the cache was not closed cleanly (a gateway crashed or was killed): repairing it"
                );
                drop(builder().open(path).map_err(db_err)?);
                builder().open_read_only(path).map_err(db_err)?
            }
            Err(e) => return Err(db_err(e)),
        };
        let store = Self::new_inner(
            Db::ReadOnly(db),
            StoreLimits {
                max_bytes: u64::MAX,
                max_object_bytes: 0,
            },
            Box::new(|| 0),
        );
        store.rebuild_index()?;
        Ok(store)
    }

    fn new_inner(
        db: Db,
        limits: StoreLimits,
        path_len: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                limits,
                sieve: Mutex::new(Sieve::default()),
                next_id: AtomicU64::new(1),
                head_updates: AtomicU64::new(0),
                disabled: AtomicBool::new(false),
                evictions: AtomicU64::new(0),
                evict_tx: Mutex::new(None),
                path_len,
            }),
        }
    }

    fn from_db(
        db: Database,
        limits: StoreLimits,
        path_len: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<Self, StoreError> {
        let store = Self::new_inner(Db::Writable(db), limits, path_len);
        store.sweep_pending()?;
        store.rebuild_index()?;
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        *lock(&store.inner.evict_tx) = Some(tx);
        let weak = Arc::downgrade(&store.inner);
        std::thread::Builder::new()
            .name("cache-evict".to_owned())
            .spawn(move || {
                while rx.recv().is_ok() {
                    let Some(inner) = weak.upgrade() else { break };
                    let store = Store { inner };
                    if let Err(e) = store.evict() {
                        store.disable(&e);
                    }
                }
            })
            .map_err(|e| StoreError::Db(redb::Error::Io(e)))?;
        Ok(store)
    }

    fn writable(&self) -> Result<&Database, StoreError> {
        match &self.inner.db {
            Db::Writable(db) => Ok(db),
            Db::ReadOnly(_) => Err(StoreError::ReadOnly),
        }
    }

    fn read_txn(&self) -> Result<redb::ReadTransaction, StoreError> {
        match &self.inner.db {
            Db::Writable(db) => db.begin_read().map_err(db_err),
            Db::ReadOnly(db) => db.begin_read().map_err(db_err),
        }
    }

    /// Deletes the chunks of writers that never finished, creates the tables.
    fn sweep_pending(&self) -> Result<(), StoreError> {
        let db = self.writable()?;
        let txn = db.begin_write().map_err(db_err)?;
        let mut swept = 0u64;
        {
            txn.open_table(META).map_err(db_err)?;
            txn.open_table(VARY).map_err(db_err)?;
            let mut pending = txn.open_table(PENDING).map_err(db_err)?;
            let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
            let state = txn.open_table(STATE).map_err(db_err)?;
            let ids: Vec<u64> = pending
                .iter()
                .map_err(db_err)?
                .filter_map(|row| row.ok().map(|(k, _)| k.value()))
                .collect();
            for id in ids {
                chunks
                    .retain_in((id, 0)..=(id, u32::MAX), |_, _| false)
                    .map_err(db_err)?;
                pending.remove(id).map_err(db_err)?;
                swept += 1;
            }
            let next = state
                .get("next_id")
                .map_err(db_err)?
                .map_or(1, |v| v.value());
            self.inner.next_id.store(next, Ordering::SeqCst);
        }
        txn.commit().map_err(db_err)?;
        if swept > 0 {
            tracing::info!(swept, "cache: removed entries left unfinished by a crash");
        }
        Ok(())
    }

    fn rebuild_index(&self) -> Result<(), StoreError> {
        let txn = self.read_txn()?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(db_err(e)),
        };
        let mut rows: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        for row in meta.iter().map_err(db_err)? {
            let (key, value) = row.map_err(db_err)?;
            let value = value.value();
            // A row that does not decode is skipped here and removed on lookup.
            if let Ok(entry) = EntryMeta::decode(value) {
                let charge = entry.charge(value.len(), key.value().len());
                rows.push((entry.id, key.value().to_vec(), charge));
            }
        }
        rows.sort_unstable_by_key(|r| r.0);
        let mut sieve = lock(&self.inner.sieve);
        let mut max_id = 0;
        for (id, key, charge) in rows {
            max_id = max_id.max(id);
            sieve.insert(key, id, charge);
        }
        drop(sieve);
        self.inner.next_id.fetch_max(max_id + 1, Ordering::SeqCst);
        Ok(())
    }

    /// Whether writes are off (read-only, or after an error).
    pub fn is_disabled(&self) -> bool {
        matches!(self.inner.db, Db::ReadOnly(_)) || self.inner.disabled.load(Ordering::Relaxed)
    }

    /// Switches caching off after a write error, logging it once.
    fn disable(&self, error: &StoreError) {
        if !self.inner.disabled.swap(true, Ordering::SeqCst) {
            tracing::error!(%error, "cache: write failed, caching disabled; traffic continues uncached");
        }
    }

    /// The largest body this store accepts.
    pub fn max_object_bytes(&self) -> u64 {
        self.inner.limits.max_object_bytes
    }

    /// The Vary field names of the entries stored under `primary` (empty when
    /// they do not vary), or `None` when nothing is stored under it.
    pub fn vary_names(&self, primary: &str) -> Result<Option<Vec<String>>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(VARY).map_err(db_err)?;
        let Some(value) = table.get(primary).map_err(db_err)? else {
            return Ok(None);
        };
        let names = std::str::from_utf8(value.value())
            .map_err(|_| StoreError::Corrupt("vary"))?
            .split('\n')
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(Some(names))
    }

    /// The entry under `key`, marked as used. A row that fails its checksum
    /// is removed and reported as absent.
    pub fn get(&self, key: &[u8]) -> Result<Option<EntryMeta>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(META).map_err(db_err)?;
        let Some(value) = table.get(key).map_err(db_err)? else {
            return Ok(None);
        };
        match EntryMeta::decode(value.value()) {
            Ok(entry) => {
                lock(&self.inner.sieve).touch(key);
                Ok(Some(entry))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cache: dropping a corrupt entry");
                drop((value, table, txn));
                self.remove_keys(&[key.to_vec()])?;
                Ok(None)
            }
        }
    }

    /// Chunks `first..first + count` of entry `id`, each checked against its
    /// CRC. A mismatch is an error: the caller must not send those bytes and
    /// should [`Store::remove_keys`] the entry.
    pub fn read_chunks(&self, id: u64, first: u32, count: u32) -> Result<Vec<Bytes>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(CHUNKS).map_err(db_err)?;
        let end = first.saturating_add(count);
        let mut out = Vec::with_capacity(count as usize);
        for row in table.range((id, first)..(id, end)).map_err(db_err)? {
            let (_, value) = row.map_err(db_err)?;
            out.push(check_chunk(value.value())?);
        }
        Ok(out)
    }

    /// Starts storing a response under `primary` + `secondary`. Fails when
    /// writes are off or the store is over its hard limit.
    pub fn begin(
        &self,
        primary: &str,
        vary: &[String],
        secondary: &[u8],
        response: StoredResponse,
    ) -> Result<EntryWriter, StoreError> {
        if self.is_disabled() {
            return Err(StoreError::Disabled);
        }
        let budget = self.inner.limits.max_bytes as f64;
        if lock(&self.inner.sieve).bytes as f64 > budget * HARD_LIMIT {
            self.kick_eviction();
            return Err(StoreError::OverBudget);
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        let result = (|| {
            let db = self.writable()?;
            let mut txn = db.begin_write().map_err(db_err)?;
            txn.set_durability(Durability::None).map_err(db_err)?;
            {
                let mut pending = txn.open_table(PENDING).map_err(db_err)?;
                pending
                    .insert(id, unix(SystemTime::now()))
                    .map_err(db_err)?;
                let mut state = txn.open_table(STATE).map_err(db_err)?;
                state.insert("next_id", id + 1).map_err(db_err)?;
            }
            txn.commit().map_err(db_err)
        })();
        if let Err(e) = result {
            self.disable(&e);
            return Err(e);
        }
        Ok(EntryWriter {
            store: self.clone(),
            primary: primary.to_owned(),
            vary: vary.to_vec(),
            key: full_key(primary, secondary),
            response,
            id,
            buffer: BytesMut::with_capacity(CHUNK_BYTES),
            chunks: 0,
            len: 0,
            crc: 0,
            done: false,
        })
    }

    /// Replaces the response head of the entry under `key` (a 304 freshened
    /// it), if it is still entry `id`.
    ///
    /// A non-durable commit, like the chunks', but for one in
    /// [`DURABLE_HEAD_UPDATES`]: a crash rolls the head back to the one of the
    /// last durable commit, a complete entry that the next request
    /// revalidates again. A durable commit (an fsync) per 304 made every
    /// revalidation wait on the disk; under a soak of 2,000 304s a second the
    /// blocking pool grew to its 512 threads, all queued on the write lock,
    /// and the gateway's RSS to 800 MiB (bench/results/load.md).
    pub fn update_head(
        &self,
        key: &[u8],
        id: u64,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        let result = (|| {
            let mut txn = self.writable()?.begin_write().map_err(db_err)?;
            let n = self.inner.head_updates.fetch_add(1, Ordering::Relaxed) + 1;
            if !n.is_multiple_of(DURABLE_HEAD_UPDATES) {
                txn.set_durability(Durability::None).map_err(db_err)?;
            }
            {
                let mut meta = txn.open_table(META).map_err(db_err)?;
                let current = meta
                    .get(key)
                    .map_err(db_err)?
                    .and_then(|v| EntryMeta::decode(v.value()).ok());
                if let Some(mut entry) = current.filter(|e| e.id == id) {
                    entry.response = StoredResponse {
                        body_len: entry.response.body_len,
                        ..response.clone()
                    };
                    meta.insert(key, entry.encode().as_slice())
                        .map_err(db_err)?;
                }
            }
            txn.commit().map_err(db_err)
        })();
        result.inspect_err(|e| self.disable(e))
    }

    /// Removes every entry under each primary key (invalidation, section 4.4).
    pub fn remove_primaries(&self, primaries: &[String]) -> Result<u64, StoreError> {
        let mut keys = Vec::new();
        {
            let txn = self.read_txn()?;
            let meta = txn.open_table(META).map_err(db_err)?;
            for primary in primaries {
                let start = full_key(primary, b"");
                for row in meta.range(start.as_slice()..).map_err(db_err)? {
                    let (key, _) = row.map_err(db_err)?;
                    if !key.value().starts_with(&start) {
                        break;
                    }
                    keys.push(key.value().to_vec());
                }
            }
        }
        let removed = keys.len() as u64;
        self.remove_keys(&keys)?;
        if !primaries.is_empty() && !self.is_disabled() {
            let txn = self.writable()?.begin_write().map_err(db_err)?;
            {
                let mut vary = txn.open_table(VARY).map_err(db_err)?;
                for p in primaries {
                    vary.remove(p.as_str()).map_err(db_err)?;
                }
            }
            txn.commit().map_err(db_err)?;
        }
        Ok(removed)
    }

    /// Removes entries by key, with their chunks.
    pub fn remove_keys(&self, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        let result = (|| {
            let txn = self.writable()?.begin_write().map_err(db_err)?;
            {
                let mut meta = txn.open_table(META).map_err(db_err)?;
                let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
                for key in keys {
                    let removed = meta.remove(key.as_slice()).map_err(db_err)?;
                    if let Some(id) = removed
                        .and_then(|v| EntryMeta::decode(v.value()).ok())
                        .map(|e| e.id)
                    {
                        chunks
                            .retain_in((id, 0)..=(id, u32::MAX), |_, _| false)
                            .map_err(db_err)?;
                    }
                }
            }
            txn.commit().map_err(db_err)
        })();
        if let Err(e) = result {
            if !matches!(e, StoreError::ReadOnly) {
                self.disable(&e);
            }
            return Err(e);
        }
        let mut sieve = lock(&self.inner.sieve);
        for key in keys {
            sieve.remove(key);
        }
        Ok(())
    }

    /// Purges by URL, prefix or host; returns how many entries went.
    pub fn purge(&self, purge: &Purge) -> Result<u64, StoreError> {
        let prefixes = match (purge, purge.prefixes()) {
            (Purge::Url(url), _) => return self.remove_primaries(std::slice::from_ref(url)),
            (_, Some(prefixes)) => prefixes,
            (_, None) => return Ok(0),
        };
        let mut primaries = Vec::new();
        {
            let txn = self.read_txn()?;
            let vary = txn.open_table(VARY).map_err(db_err)?;
            for prefix in &prefixes {
                for row in vary.range(prefix.as_str()..).map_err(db_err)? {
                    let (key, _) = row.map_err(db_err)?;
                    if !key.value().starts_with(prefix.as_str()) {
                        break;
                    }
                    primaries.push(key.value().to_owned());
                }
            }
        }
        self.remove_primaries(&primaries)
    }

    /// Entries, bytes, evictions, file size.
    pub fn stats(&self) -> StoreStats {
        let sieve = lock(&self.inner.sieve);
        StoreStats {
            entries: sieve.by_key.len() as u64,
            bytes: sieve.bytes,
            evictions: self.inner.evictions.load(Ordering::Relaxed),
            file_bytes: (self.inner.path_len)(),
            disabled: self.is_disabled(),
        }
    }

    /// The primary keys stored (for inspection tools), in key order.
    pub fn primaries(&self) -> Result<Vec<String>, StoreError> {
        let txn = self.read_txn()?;
        let vary = txn.open_table(VARY).map_err(db_err)?;
        let mut out = Vec::new();
        for row in vary.iter().map_err(db_err)? {
            out.push(row.map_err(db_err)?.0.value().to_owned());
        }
        Ok(out)
    }

    /// Every entry with its effective URI, in key order (for inspection
    /// tools). Rows that do not decode are skipped.
    pub fn entries(&self) -> Result<Vec<(String, EntryMeta)>, StoreError> {
        let txn = self.read_txn()?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(db_err(e)),
        };
        let mut out = Vec::new();
        for row in meta.iter().map_err(db_err)? {
            let (key, value) = row.map_err(db_err)?;
            let key = key.value();
            let primary = key.split(|&b| b == 0).next().unwrap_or(key);
            if let Ok(entry) = EntryMeta::decode(value.value()) {
                out.push((String::from_utf8_lossy(primary).into_owned(), entry));
            }
        }
        Ok(out)
    }

    fn kick_eviction(&self) {
        if let Some(tx) = lock(&self.inner.evict_tx).as_ref() {
            // A full channel means a pass is already due.
            let _ = tx.try_send(());
        }
    }

    /// Evicts until stored bytes are below the low watermark. Runs on the
    /// eviction thread; public for tests that want it synchronous.
    pub fn evict(&self) -> Result<(), StoreError> {
        let budget = self.inner.limits.max_bytes as f64;
        let target = (budget * LOW_WATERMARK) as u64;
        loop {
            let victims: Vec<Vec<u8>> = {
                let mut sieve = lock(&self.inner.sieve);
                let mut victims = Vec::new();
                let mut freed = 0;
                let excess = sieve.bytes.saturating_sub(target);
                while freed < excess && victims.len() < 256 {
                    let Some((key, _)) = sieve.victim() else {
                        break;
                    };
                    if let Some((_, size)) = sieve.remove(&key) {
                        freed += size;
                    }
                    victims.push(key);
                }
                victims
            };
            if victims.is_empty() {
                return Ok(());
            }
            let n = victims.len() as u64;
            self.remove_keys(&victims)?;
            self.inner.evictions.fetch_add(n, Ordering::Relaxed);
        }
    }
}

fn check_chunk(value: &[u8]) -> Result<Bytes, StoreError> {
    let (crc, data) = value
        .split_first_chunk::<4>()
        .ok_or(StoreError::Corrupt("chunk too short"))?;
    if crc32c::crc32c(data) != u32::from_le_bytes(*crc) {
        return Err(StoreError::Corrupt("chunk checksum"));
    }
    Ok(Bytes::copy_from_slice(data))
}

fn builder() -> Builder {
    let mut builder = Builder::new();
    // The default exclusive-writer mode: the multi-process modes refuse the
    // non-durable chunk commits the write protocol relies on. A read-only
    // inspector therefore opens the file while no gateway has it open.
    builder
        .set_cache_size(REDB_CACHE_BYTES)
        .set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
    builder
}

/// Writes one entry's body, chunk by chunk. Nothing is visible until
/// [`EntryWriter::finish`] succeeds; dropping it unfinished removes what was
/// written (or leaves it `pending` for the next open to sweep).
#[derive(Debug)]
pub struct EntryWriter {
    store: Store,
    primary: String,
    vary: Vec<String>,
    key: Vec<u8>,
    response: StoredResponse,
    id: u64,
    buffer: BytesMut,
    chunks: u32,
    len: u64,
    crc: u32,
    done: bool,
}

impl EntryWriter {
    /// Appends body bytes; commits a chunk whenever [`CHUNK_BYTES`] are buffered.
    pub fn write(&mut self, mut data: &[u8]) -> Result<(), StoreError> {
        self.len += data.len() as u64;
        if self.len > self.store.inner.limits.max_object_bytes {
            return Err(StoreError::TooLarge);
        }
        self.crc = crc32c::crc32c_append(self.crc, data);
        while !data.is_empty() {
            let room = CHUNK_BYTES - self.buffer.len();
            let take = room.min(data.len());
            self.buffer.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buffer.len() == CHUNK_BYTES {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let data = self.buffer.split().freeze();
        let mut value = Vec::with_capacity(4 + data.len());
        value.extend_from_slice(&crc32c::crc32c(&data).to_le_bytes());
        value.extend_from_slice(&data);
        let result = (|| {
            let mut txn = self.store.writable()?.begin_write().map_err(db_err)?;
            txn.set_durability(Durability::None).map_err(db_err)?;
            {
                let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
                chunks
                    .insert((self.id, self.chunks), value.as_slice())
                    .map_err(db_err)?;
            }
            txn.commit().map_err(db_err)
        })();
        result.inspect_err(|e| self.store.disable(e))?;
        self.chunks += 1;
        Ok(())
    }

    /// Completes the entry: the last chunk, a read-back check of length and
    /// CRC, then one durable commit that makes it visible (replacing what was
    /// under its key, and every variant if its Vary differs). `expected_len`
    /// is the `Content-Length` the origin announced, if any.
    pub fn finish(mut self, expected_len: Option<u64>) -> Result<EntryMeta, StoreError> {
        if expected_len.is_some_and(|n| n != self.len) {
            return Err(StoreError::Truncated);
        }
        self.flush()?;
        let mut crc = 0;
        let mut len = 0u64;
        for batch_start in (0..self.chunks).step_by(16) {
            for chunk in self.store.read_chunks(self.id, batch_start, 16)? {
                crc = crc32c::crc32c_append(crc, &chunk);
                len += chunk.len() as u64;
            }
        }
        if crc != self.crc || len != self.len {
            return Err(StoreError::Corrupt("read-back mismatch"));
        }
        let mut response = self.response.clone();
        response.body_len = self.len;
        let entry = EntryMeta {
            id: self.id,
            response,
            chunks: self.chunks,
            body_crc: crc,
            stored_at: unix(SystemTime::now()),
        };
        let encoded = entry.encode();
        let vary = self.vary.join("\n");
        let mut dropped: Vec<Vec<u8>> = Vec::new();
        let result = (|| {
            let txn = self.store.writable()?.begin_write().map_err(db_err)?;
            {
                let mut meta = txn.open_table(META).map_err(db_err)?;
                let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
                let mut vary_table = txn.open_table(VARY).map_err(db_err)?;
                let same_vary = vary_table
                    .get(self.primary.as_str())
                    .map_err(db_err)?
                    .is_some_and(|v| v.value() == vary.as_bytes());
                let start = full_key(&self.primary, b"");
                let mut old: Vec<(Vec<u8>, u64)> = Vec::new();
                for row in meta.range(start.as_slice()..).map_err(db_err)? {
                    let (key, value) = row.map_err(db_err)?;
                    let key = key.value();
                    if !key.starts_with(&start) {
                        break;
                    }
                    if !same_vary || key == self.key.as_slice() {
                        let id = EntryMeta::decode(value.value()).map_or(u64::MAX, |e| e.id);
                        old.push((key.to_vec(), id));
                    }
                }
                for (key, id) in old {
                    meta.remove(key.as_slice()).map_err(db_err)?;
                    chunks
                        .retain_in((id, 0)..=(id, u32::MAX), |_, _| false)
                        .map_err(db_err)?;
                    dropped.push(key);
                }
                vary_table
                    .insert(self.primary.as_str(), vary.as_bytes())
                    .map_err(db_err)?;
                meta.insert(self.key.as_slice(), encoded.as_slice())
                    .map_err(db_err)?;
                let mut pending = txn.open_table(PENDING).map_err(db_err)?;
                pending.remove(self.id).map_err(db_err)?;
            }
            txn.commit().map_err(db_err)
        })();
        result.inspect_err(|e| self.store.disable(e))?;
        self.done = true;
        let over = {
            let mut sieve = lock(&self.store.inner.sieve);
            for key in &dropped {
                sieve.remove(key);
            }
            sieve.insert(
                self.key.clone(),
                self.id,
                entry.charge(encoded.len(), self.key.len()),
            );
            sieve.bytes as f64 > self.store.inner.limits.max_bytes as f64 * HIGH_WATERMARK
        };
        if over {
            self.store.kick_eviction();
        }
        Ok(entry)
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for EntryWriter {
    fn drop(&mut self) {
        if self.done || self.store.is_disabled() {
            return;
        }
        let id = self.id;
        let result = (|| {
            let mut txn = self.store.writable()?.begin_write().map_err(db_err)?;
            txn.set_durability(Durability::None).map_err(db_err)?;
            {
                let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
                chunks
                    .retain_in((id, 0)..=(id, u32::MAX), |_, _| false)
                    .map_err(db_err)?;
                let mut pending = txn.open_table(PENDING).map_err(db_err)?;
                pending.remove(id).map_err(db_err)?;
            }
            txn.commit().map_err(db_err)
        })();
        if let Err(e) = result {
            tracing::debug!(error = %e, id, "cache: could not remove an abandoned entry; the next open will");
        }
    }
}
