//! A handler that serves generated bodies of requested sizes: `GET /bytes/N`
//! answers N bytes of a fixed pattern, `GET /endless` never ends. For tests and
//! the scheduling benchmarks, where response sizes must be known exactly and no
//! disk may interfere.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::server::{BodySource, Handler, IncomingRequest, Reply};

/// The pattern byte at body offset `i`.
pub fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(31) % 251) as u8
}

/// Serves `/bytes/N` and `/endless`; counts the requests it answered and the
/// body bytes it generated.
#[derive(Debug, Default)]
pub struct SyntheticHandler {
    /// Body bytes generated so far, across all requests.
    pub produced: Arc<AtomicU64>,
    /// Requests handed to the handler so far. The driver has scheduled a
    /// request's job by the time it counts here, so a test can wait for it
    /// before acting on the request (cancelling or reprioritising it).
    pub requests: Arc<AtomicU64>,
}

/// A generated body.
#[derive(Debug)]
pub struct Pattern {
    left: Option<u64>,
    offset: u64,
    produced: Arc<AtomicU64>,
}

impl BodySource for Pattern {
    async fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Bytes>> {
        let n = match self.left {
            Some(0) => return Ok(None),
            Some(left) => left.min(max as u64),
            None => max as u64,
        };
        let chunk: Vec<u8> = (self.offset..self.offset + n).map(pattern_byte).collect();
        self.offset += n;
        if let Some(left) = &mut self.left {
            *left -= n;
        }
        self.produced.fetch_add(n, Ordering::Relaxed);
        Ok(Some(Bytes::from(chunk)))
    }
}

impl Handler for SyntheticHandler {
    type Body = Pattern;

    async fn handle(&self, request: IncomingRequest) -> Reply<Pattern> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let head = &request.request.head;
        let path = head
            .split(|b| *b == b' ')
            .nth(1)
            .and_then(|p| std::str::from_utf8(p).ok())
            .unwrap_or("/");
        let len = path
            .strip_prefix("/bytes/")
            .and_then(|n| n.parse::<u64>().ok());
        let (status, len) = match (path, len) {
            ("/endless", _) => ("200 OK", None),
            (_, Some(len)) => ("200 OK", Some(len)),
            _ => ("404 Not Found", Some(0)),
        };
        let length_field = len.map_or(String::new(), |l| format!("content-length: {l}\r\n"));
        Reply {
            head: Bytes::from(format!("HTTP/1.1 {status}\r\n{length_field}\r\n")),
            body_len: len,
            body: Pattern {
                left: len,
                offset: 0,
                produced: Arc::clone(&self.produced),
            },
        }
    }
}
