//! Response bodies the cache produces: a stored entry's bytes read back from
//! redb, and a coalesced fetch read through a [`Subscriber`].

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use tokio::sync::mpsc;

use super::coalesce::Subscriber;
use super::policy::BodySlice;
use super::store::{CHUNK_BYTES, Store, StoreError};
use crate::body::{Body, BoxError};

/// Chunk rows read per blocking call when streaming an entry (about 1 MiB).
const CHUNKS_PER_READ: u32 = 16;
/// Bodies up to this size are read in the lookup's blocking call and sent from
/// memory, without a streaming task.
pub(super) const INLINE_BYTES: u64 = 256 * 1024;

/// The chunk rows that hold `slice` of a `len`-byte body: first row, row count,
/// bytes to skip in the first row, bytes to send.
pub(super) fn chunk_span(slice: BodySlice, len: u64) -> Option<(u32, u32, usize, u64)> {
    let (start, end) = match slice {
        BodySlice::Empty => return None,
        BodySlice::Whole => (0, len),
        BodySlice::Range { start, end } => (start, end),
    };
    if start >= end {
        return None;
    }
    let chunk = CHUNK_BYTES as u64;
    let first = start / chunk;
    let last = (end - 1) / chunk;
    Some((
        u32::try_from(first).ok()?,
        u32::try_from(last - first + 1).ok()?,
        (start % chunk) as usize,
        end - start,
    ))
}

/// Cuts the rows of a span down to the requested bytes.
pub(super) fn cut(rows: Vec<Bytes>, skip: usize, len: u64) -> Result<Vec<Bytes>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    let mut skip = skip;
    let mut left = len;
    for mut row in rows {
        if skip > 0 {
            if row.len() < skip {
                return Err(StoreError::Corrupt("chunk shorter than its entry says"));
            }
            row = row.slice(skip..);
            skip = 0;
        }
        let take = (row.len() as u64).min(left);
        left -= take;
        out.push(row.slice(..take as usize));
        if left == 0 {
            break;
        }
    }
    if left != 0 {
        return Err(StoreError::Corrupt("entry body shorter than its length"));
    }
    Ok(out)
}

/// A body held in memory.
pub(super) fn full(parts: Vec<Bytes>) -> Body {
    match parts.len() {
        0 => empty(),
        1 => Full::new(parts.into_iter().next().unwrap_or_default())
            .map_err(|never| match never {})
            .boxed_unsync(),
        _ => {
            let total: usize = parts.iter().map(Bytes::len).sum();
            let mut joined = bytes::BytesMut::with_capacity(total);
            for part in parts {
                joined.extend_from_slice(&part);
            }
            Full::new(joined.freeze())
                .map_err(|never| match never {})
                .boxed_unsync()
        }
    }
}

/// An empty body.
pub(super) fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Streams `slice` of entry `id` (`len` bytes long) from the store: a task
/// reads batches of rows in `spawn_blocking`, checks each row's CRC, and sends
/// them through a channel of two batches. A read error ends the body with an
/// error (the front closes the connection) and removes the entry under `key`.
pub(super) fn stored(store: Store, key: Vec<u8>, id: u64, slice: BodySlice, len: u64) -> Body {
    let Some((first, count, skip, send)) = chunk_span(slice, len) else {
        return empty();
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, BoxError>>(2 * CHUNKS_PER_READ as usize);
    tokio::spawn(async move {
        let mut next = first;
        let end = first + count;
        let mut skip = skip;
        let mut left = send;
        while next < end && left > 0 {
            let batch = CHUNKS_PER_READ.min(end - next);
            let reader = store.clone();
            let read = tokio::task::spawn_blocking(move || reader.read_chunks(id, next, batch))
                .await
                .unwrap_or_else(|_| Err(StoreError::Corrupt("reader task failed")));
            let rows = match read {
                Ok(rows) if rows.len() == batch as usize => rows,
                Ok(_) => {
                    let e = StoreError::Corrupt("entry has fewer chunks than it says");
                    fail(&store, key, &tx, e).await;
                    return;
                }
                Err(e) => {
                    fail(&store, key, &tx, e).await;
                    return;
                }
            };
            let batch_bytes: u64 = rows.iter().map(|r| r.len() as u64).sum::<u64>() - skip as u64;
            let want = batch_bytes.min(left);
            let parts = match cut(rows, skip, want) {
                Ok(parts) => parts,
                Err(e) => {
                    fail(&store, key, &tx, e).await;
                    return;
                }
            };
            skip = 0;
            left -= want;
            next += batch;
            for part in parts {
                if tx.send(Ok(part)).await.is_err() {
                    return; // the browser went away
                }
            }
        }
    });
    channel_body(rx)
}

async fn fail(
    store: &Store,
    key: Vec<u8>,
    tx: &mpsc::Sender<Result<Bytes, BoxError>>,
    error: StoreError,
) {
    tracing::warn!(%error, "cache: a stored body failed to read; entry dropped");
    let _ = tx.send(Err(Box::new(error))).await;
    let store = store.clone();
    let _ = tokio::task::spawn_blocking(move || store.remove_keys(&[key])).await;
}

fn channel_body(rx: mpsc::Receiver<Result<Bytes, BoxError>>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item.map(Frame::data), rx))
    });
    StreamBody::new(stream).boxed_unsync()
}

/// The body of a coalesced fetch, read from byte 0 as it arrives. A failed
/// fetch ends it with an error. Generic over the flight's head so that this
/// leaf does not depend on the fill that defines it.
pub(super) fn subscriber<H: Send + Sync + 'static>(subscriber: Subscriber<H>) -> Body {
    let stream = futures_util::stream::unfold(subscriber, |mut sub| async move {
        match sub.next_chunk().await? {
            Ok(chunk) => Some((Ok(Frame::data(chunk)), sub)),
            Err(e) => Some((Err(Box::new(e) as BoxError), sub)),
        }
    });
    StreamBody::new(stream).boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_exactly_the_requested_bytes() {
        let c = CHUNK_BYTES as u64;
        assert_eq!(chunk_span(BodySlice::Whole, 0), None);
        assert_eq!(chunk_span(BodySlice::Empty, 10), None);
        assert_eq!(chunk_span(BodySlice::Whole, 10), Some((0, 1, 0, 10)));
        assert_eq!(chunk_span(BodySlice::Whole, c), Some((0, 1, 0, c)));
        assert_eq!(chunk_span(BodySlice::Whole, c + 1), Some((0, 2, 0, c + 1)));
        assert_eq!(
            chunk_span(
                BodySlice::Range {
                    start: c - 1,
                    end: c + 1
                },
                3 * c
            ),
            Some((0, 2, (c - 1) as usize, 2))
        );
        assert_eq!(
            chunk_span(
                BodySlice::Range {
                    start: 2 * c,
                    end: 2 * c + 5
                },
                3 * c
            ),
            Some((2, 1, 0, 5))
        );
    }

    #[test]
    fn cut_skips_and_truncates_and_refuses_short_rows() {
        let rows = vec![Bytes::from_static(b"abcdef"), Bytes::from_static(b"ghij")];
        let parts = cut(rows.clone(), 4, 4).expect("fits");
        assert_eq!(
            parts,
            [Bytes::from_static(b"ef"), Bytes::from_static(b"gh")]
        );
        assert!(cut(rows, 0, 11).is_err());
    }
}
