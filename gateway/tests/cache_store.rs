//! The redb store against real files: persistence, budget and eviction,
//! checksums, purge, read-only open, a disk that fills, and a writer killed
//! mid-entry.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use gateway::cache::policy::StoredResponse;
use gateway::cache::store::{CHUNK_BYTES, Purge, Store, StoreError, StoreLimits, full_key};
use http::{HeaderMap, HeaderValue, StatusCode};

const LIMITS: StoreLimits = StoreLimits {
    max_bytes: 16 << 20,
    max_object_bytes: 4 << 20,
};

fn response() -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert("cache-control", HeaderValue::from_static("max-age=60"));
    headers.insert("etag", HeaderValue::from_static("\"e\""));
    StoredResponse {
        status: StatusCode::OK,
        headers,
        request_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        response_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_001),
        body_len: 0,
    }
}

fn body(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn put(store: &Store, uri: &str, data: &[u8]) {
    let mut writer = store.begin(uri, &[], b"", response()).expect("begin");
    for piece in data.chunks(10_000) {
        writer.write(piece).expect("write");
    }
    writer.finish(Some(data.len() as u64)).expect("finish");
}

fn read_all(store: &Store, uri: &str) -> Option<Vec<u8>> {
    let entry = store.get(&full_key(uri, b"")).expect("get")?;
    let chunks = store
        .read_chunks(entry.id, 0, entry.chunks)
        .expect("chunks");
    Some(chunks.concat())
}

#[test]
fn entries_survive_a_reopen_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.redb");
    let data = body(7, 3 * CHUNK_BYTES + 123);
    {
        let store = Store::open(&path, LIMITS).expect("open");
        put(&store, "http://a.example/x", &data);
        let entry = store
            .get(&full_key("http://a.example/x", b""))
            .expect("get")
            .expect("entry");
        assert_eq!(entry.chunks, 4);
        assert_eq!(entry.response.body_len, data.len() as u64);
        assert_eq!(entry.body_crc, crc32c::crc32c(&data));
    }
    let store = Store::open(&path, LIMITS).expect("reopen");
    assert_eq!(
        read_all(&store, "http://a.example/x").as_deref(),
        Some(&data[..])
    );
    let entry = store
        .get(&full_key("http://a.example/x", b""))
        .expect("get")
        .expect("entry");
    assert_eq!(
        entry.response.headers.get("etag").map(|v| v.as_bytes()),
        Some(&b"\"e\""[..])
    );
    assert_eq!(store.stats().entries, 1);
}

#[test]
fn an_unfinished_or_short_entry_is_never_visible() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("c.redb"), LIMITS).expect("open");
    let mut writer = store
        .begin("http://a.example/x", &[], b"", response())
        .expect("begin");
    writer.write(&body(1, 2 * CHUNK_BYTES)).expect("write");
    assert!(
        store
            .get(&full_key("http://a.example/x", b""))
            .expect("get")
            .is_none()
    );
    drop(writer);
    let mut writer = store
        .begin("http://a.example/x", &[], b"", response())
        .expect("begin");
    writer.write(b"short").expect("write");
    assert!(matches!(
        writer.finish(Some(10)),
        Err(StoreError::Truncated)
    ));
    assert!(
        store
            .get(&full_key("http://a.example/x", b""))
            .expect("get")
            .is_none()
    );
    assert_eq!(store.stats().entries, 0);
}

#[test]
fn objects_over_the_maximum_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("c.redb"), LIMITS).expect("open");
    let mut writer = store
        .begin("http://a.example/big", &[], b"", response())
        .expect("begin");
    let result = writer.write(&vec![0; (LIMITS.max_object_bytes + 1) as usize]);
    assert!(matches!(result, Err(StoreError::TooLarge)));
}

#[test]
fn the_budget_holds_and_eviction_keeps_recently_hit_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.redb");
    let store = Store::open(&path, LIMITS).expect("open");
    let data = body(3, 200_000);
    put(&store, "http://a.example/hot", &data);
    // Three times the budget, the hot entry read between writes.
    for i in 0..250 {
        let uri = format!("http://a.example/{i}");
        match store.begin(&uri, &[], b"", response()) {
            Ok(mut w) => {
                w.write(&data).expect("write");
                w.finish(None).expect("finish");
            }
            Err(StoreError::OverBudget) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
        assert!(
            read_all(&store, "http://a.example/hot").is_some(),
            "hot entry evicted at {i}"
        );
        store.evict().expect("evict");
    }
    let stats = store.stats();
    assert!(stats.evictions > 0, "{stats:?}");
    assert!(stats.bytes <= LIMITS.max_bytes / 2, "{stats:?}");
    let file = std::fs::metadata(&path).expect("file").len();
    assert!(
        file <= LIMITS.max_bytes,
        "file {file} over budget {}",
        LIMITS.max_bytes
    );
}

#[test]
fn purge_by_url_prefix_and_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("c.redb"), LIMITS).expect("open");
    for uri in [
        "http://a.example/x",
        "http://a.example/img/1",
        "http://a.example/img/2",
        "http://a.example:8080/y",
        "http://a.example.org/z",
        "http://b.example/w",
    ] {
        put(&store, uri, b"data");
    }
    assert_eq!(
        store
            .purge(&Purge::Url("http://a.example/x".into()))
            .expect("url"),
        1
    );
    assert_eq!(
        store
            .purge(&Purge::Prefix("http://a.example/img/".into()))
            .expect("prefix"),
        2
    );
    assert_eq!(
        store.purge(&Purge::Host("A.example".into())).expect("host"),
        1
    );
    assert_eq!(
        store.primaries().expect("list"),
        ["http://a.example.org/z", "http://b.example/w"]
    );
    assert_eq!(store.stats().entries, 2);
}

#[test]
fn purge_matches_the_uris_the_store_removes() {
    let uris = [
        "http://a.example/x",
        "http://a.example/img/1",
        "http://a.example:8080/y",
        "http://a.example.org/z",
        "http://b.example/w",
    ];
    let matched = |purge: Purge| -> Vec<&str> {
        uris.iter()
            .copied()
            .filter(|uri| purge.matches(uri))
            .collect()
    };
    assert_eq!(
        matched(Purge::Url("http://a.example/x".into())),
        ["http://a.example/x"]
    );
    assert_eq!(
        matched(Purge::Prefix("http://a.example/img/".into())),
        ["http://a.example/img/1"]
    );
    assert_eq!(
        matched(Purge::Host("A.example".into())),
        [
            "http://a.example/x",
            "http://a.example/img/1",
            "http://a.example:8080/y"
        ]
    );
    // What the store removes for each purge is what `matches` names.
    for purge in [
        Purge::Url("http://a.example/x".into()),
        Purge::Prefix("http://a.example/".into()),
        Purge::Host("a.example".into()),
        Purge::Host("b.example".into()),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("c.redb"), LIMITS).expect("open");
        for uri in uris {
            put(&store, uri, b"data");
        }
        let removed = store.purge(&purge).expect("purge");
        assert_eq!(removed as usize, matched(purge.clone()).len(), "{purge:?}");
        let left = store.primaries().expect("list");
        assert!(
            left.iter().all(|uri| !purge.matches(uri)),
            "{purge:?} left {left:?}"
        );
    }
}

#[test]
fn a_corrupt_chunk_is_detected_before_its_bytes_are_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.redb");
    let data = vec![0x5a; 2 * CHUNK_BYTES];
    {
        let store = Store::open(&path, LIMITS).expect("open");
        put(&store, "http://a.example/x", &data);
    }
    // Flip one byte of the body inside the file (the pattern is unique there).
    let mut file = std::fs::read(&path).expect("read");
    let at = file
        .windows(4096)
        .position(|w| w.iter().all(|&b| b == 0x5a))
        .expect("body in file");
    file[at + 100] ^= 0xff;
    std::fs::write(&path, &file).expect("write");
    let store = Store::open(&path, LIMITS).expect("reopen");
    let entry = store
        .get(&full_key("http://a.example/x", b""))
        .expect("get")
        .expect("meta intact");
    let result = store.read_chunks(entry.id, 0, entry.chunks);
    assert!(matches!(result, Err(StoreError::Corrupt(_))), "{result:?}");
    store
        .remove_keys(&[full_key("http://a.example/x", b"")])
        .expect("discard");
    assert!(
        store
            .get(&full_key("http://a.example/x", b""))
            .expect("get")
            .is_none()
    );
}

#[test]
fn read_only_open_inspects_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.redb");
    {
        let store = Store::open(&path, LIMITS).expect("open");
        put(&store, "http://a.example/x", b"hello");
    }
    let before = std::fs::read(&path).expect("read");
    let store = Store::open_read_only(&path).expect("read-only");
    assert_eq!(
        read_all(&store, "http://a.example/x").as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(store.stats().entries, 1);
    assert!(store.is_disabled());
    assert!(matches!(
        store.begin("http://a.example/y", &[], b"", response()),
        Err(StoreError::Disabled)
    ));
    drop(store);
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

/// `gateway cache list` after a crash: the file a killed gateway leaves
/// (copied here while a store has it open, so the "not shut down cleanly"
/// mark is on it) is repaired and then read, not refused with "Database
/// repair aborted".
#[test]
fn read_only_open_repairs_what_a_crash_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.redb");
    let crashed = dir.path().join("crashed.redb");
    {
        let store = Store::open(&path, LIMITS).expect("open");
        put(&store, "http://a.example/x", b"hello");
        std::fs::copy(&path, &crashed).expect("copy while open");
    }
    let store = Store::open_read_only(&crashed).expect("repaired, then read-only");
    assert_eq!(
        read_all(&store, "http://a.example/x").as_deref(),
        Some(&b"hello"[..])
    );
    drop(store);
    // Repaired once: the next read-only open needs nothing.
    Store::open_read_only(&crashed).expect("clean now");
}

/// A redb backend over a file that refuses to grow past a limit, as a full
/// disk does.
#[derive(Debug)]
struct FullDisk {
    inner: redb::backends::FileBackend,
    limit: u64,
}

impl redb::StorageBackend for FullDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        if len > self.limit {
            return Err(std::io::Error::from_raw_os_error(libc_enospc()));
        }
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        if offset + data.len() as u64 > self.limit {
            return Err(std::io::Error::from_raw_os_error(libc_enospc()));
        }
        self.inner.write(offset, data)
    }
}

fn libc_enospc() -> i32 {
    28
}

#[test]
fn a_full_disk_disables_caching_and_reads_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("c.redb"))
        .expect("file");
    let backend = FullDisk {
        inner: redb::backends::FileBackend::new(file).expect("backend"),
        limit: 3 << 20,
    };
    let store = Store::open_with_backend(backend, LIMITS).expect("open");
    put(&store, "http://a.example/small", b"small");
    let data = body(9, 1 << 20);
    let mut failed = false;
    for i in 0..8 {
        let Ok(mut w) = store.begin(&format!("http://a.example/{i}"), &[], b"", response()) else {
            failed = true;
            break;
        };
        if w.write(&data).is_err() || w.finish(None).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the disk never filled");
    assert!(store.stats().disabled);
    assert!(matches!(
        store.begin("http://a.example/after", &[], b"", response()),
        Err(StoreError::Disabled)
    ));
}

/// The crash test's child: writes a large entry slowly until it is killed.
/// Runs only when the parent test sets the variable.
#[test]
fn crash_child_writer() {
    let Some(path) = std::env::var_os("CACHE_CRASH_DB") else {
        return;
    };
    let store = Store::open(Path::new(&path), LIMITS).expect("open");
    put(&store, "http://a.example/complete", b"complete entry");
    let mut writer = store
        .begin("http://a.example/partial", &[], b"", response())
        .expect("begin");
    println!("WRITING");
    let chunk = body(5, CHUNK_BYTES);
    loop {
        writer.write(&chunk).expect("write");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigkill_mid_write_leaves_a_database_that_opens_without_the_partial_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.redb");
    for round in 0..3 {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "crash_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CACHE_CRASH_DB", &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("WRITING") {
            let n = std::io::Read::read(&mut stdout, &mut buf).expect("read child");
            assert!(
                n > 0,
                "child ended early: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        // Let it commit a few chunks (and a durable commit may land in between
        // for the first entry), then kill it mid-entry.
        std::thread::sleep(Duration::from_millis(150 + 100 * round));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");

        let store = Store::open(&path, LIMITS).expect("the database opens after SIGKILL");
        assert_eq!(
            read_all(&store, "http://a.example/complete").as_deref(),
            Some(&b"complete entry"[..]),
            "round {round}"
        );
        assert!(
            store
                .get(&full_key("http://a.example/partial", b""))
                .expect("get")
                .is_none(),
            "round {round}: a partial entry is visible"
        );
        assert_eq!(store.stats().entries, 1, "round {round}");
    }
}
