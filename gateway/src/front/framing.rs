//! Request framing watched ahead of hyper, for the two answers hyper cannot
//! give on its own (issue 14):
//!
//! - **an oversized chunk at once.** hyper reads a chunk-size line and then
//!   waits for the chunk's data without telling anyone its size, so a body
//!   that declares `ffffffffffffffff` bytes held the connection until the
//!   body time-out (408). Here the size line is seen as it arrives: a chunk
//!   that takes the body past `http.max_body_bytes` is a 413 at once.
//! - **the HTTP version (RFC 9112, section 2.3).** httparse knows only
//!   `HTTP/1.0` and `HTTP/1.1`. A higher 1.x minor version is served as 1.1
//!   (the request line's minor digit is rewritten before hyper parses it); any
//!   other major version is rewritten too, so that hyper parses the head, and
//!   noted for the front to answer 505.
//!
//! ```text
//!  browser ──► FramedStream ──(settled bytes)──► hyper ──► Front::handle
//!                  │ RequestFraming: head, Content-Length or chunks, trailers
//!                  └──── Finding { request n } ──watch──────────┘
//! ```
//!
//! [`RequestFraming`] is the I/O-free core: it is handed the bytes hyper has
//! not been given yet and says how many of them may go. Only what must be seen
//! whole is held back: a request head until it is complete, a chunk-size line
//! until its end, the CRLF after a chunk's data. Request bodies' data pass
//! through as they arrive. hyper's own header time-out runs while a head is
//! held (it starts when hyper starts waiting for a head, not at its first
//! byte), so holding back opens no slowloris window.
//!
//! Invariant: the core follows the framing hyper applies (RFC 9112, section
//! 6: Transfer-Encoding chunked over Content-Length, equal repeated lengths,
//! no body without either). Wherever the two could disagree (a head httparse
//! refuses, a `Transfer-Encoding` that does not end in `chunked`, different
//! lengths, a size line over [`MAX_CHUNK_LINE_BYTES`]) the core stops
//! watching the connection and passes every later byte through untouched:
//! hyper then decides alone, as it did before, and no request is ever refused
//! because the core lost count. The n-th head the core lets through is the
//! n-th request hyper hands the front, counted from 0, because hyper serves a
//! connection's requests in order and stops at the first head it refuses.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

/// The longest chunk-size line (size, extensions, CRLF) the core waits for,
/// bytes. Longer lines are passed to hyper unwatched (hyper bounds extensions
/// itself).
pub const MAX_CHUNK_LINE_BYTES: usize = 4096;
/// How many bytes are read from the socket at a time while the core watches.
const READ_BYTES: usize = 8192;

/// What the core found about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// The request line named an HTTP major version other than 1: 505.
    UnsupportedVersion {
        /// The major version digit.
        major: u8,
    },
    /// The chunk sizes declared so far take the body past
    /// `http.max_body_bytes`: 413, without waiting for the data.
    BodyTooLarge {
        /// The body's length the chunk-size lines declared up to that line,
        /// saturating at `u64::MAX`.
        declared: u64,
    },
}

/// A finding and the request it is about (0 for a connection's first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Noted {
    /// The request's position on its connection, from 0.
    pub request: u64,
    /// What was found.
    pub finding: Finding,
}

/// Where the core is in the request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a whole request head.
    Head,
    /// This many body bytes are left (Content-Length).
    Length(u64),
    /// Waiting for a whole chunk-size line; `body` bytes declared before it.
    ChunkSize { body: u64 },
    /// `left` bytes of the current chunk's data are still to come.
    ChunkData { left: u64, body: u64 },
    /// The CRLF after a chunk's data.
    ChunkEnd { body: u64 },
    /// Trailer fields after the last chunk, up to an empty line; `bytes` so far.
    Trailers { bytes: usize },
    /// Not watching: every byte passes through (a finding, or lost certainty).
    Off,
}

/// How far one step got.
enum Step {
    /// These many bytes may go to hyper (the state may have changed).
    Settle(usize),
    /// The state changed without settling a byte.
    Moved,
    /// Nothing can be decided before more bytes come.
    NeedMore,
}

/// The I/O-free core: request framing as hyper applies it.
#[derive(Debug)]
pub struct RequestFraming {
    state: State,
    /// hyper's limit on a head, bytes: a longer one is hyper's to refuse.
    max_head_bytes: usize,
    /// hyper's limit on a head's field count.
    max_head_fields: usize,
    /// `http.max_body_bytes`.
    max_body_bytes: u64,
    /// Heads let through so far: the next head's request number.
    heads: u64,
    finding: Option<Noted>,
}

impl RequestFraming {
    /// A core for a new connection, with the front's limits.
    pub fn new(max_head_bytes: usize, max_head_fields: usize, max_body_bytes: u64) -> Self {
        Self {
            state: State::Head,
            max_head_bytes,
            max_head_fields,
            max_body_bytes,
            heads: 0,
            finding: None,
        }
    }

    /// The finding that ended the watch, if one did.
    pub fn finding(&self) -> Option<Noted> {
        self.finding
    }

    /// Whether every further byte passes through unexamined.
    pub fn is_off(&self) -> bool {
        self.state == State::Off
    }

    /// Examines `input` (the bytes not yet given to hyper, oldest first; on
    /// the next call the same bytes minus those settled, then the newer ones),
    /// may rewrite a request line's version in place, and returns how many
    /// bytes from the front may go to hyper now. The rest wait for more.
    pub fn handle_input(&mut self, input: &mut [u8]) -> usize {
        let mut settled = 0;
        while settled < input.len() {
            match self.step(&mut input[settled..]) {
                Step::Settle(n) => settled += n,
                Step::Moved => {}
                Step::NeedMore => break,
            }
        }
        settled
    }

    fn step(&mut self, rest: &mut [u8]) -> Step {
        match self.state {
            State::Off => Step::Settle(rest.len()),
            State::Head => self.step_head(rest),
            State::Length(left) => {
                let take = left.min(rest.len() as u64);
                self.state = if take == left {
                    State::Head
                } else {
                    State::Length(left - take)
                };
                Step::Settle(usize::try_from(take).unwrap_or(rest.len()))
            }
            State::ChunkSize { body } => self.step_chunk_size(rest, body),
            State::ChunkData { left, body } => {
                let take = left.min(rest.len() as u64);
                self.state = if take == left {
                    State::ChunkEnd { body }
                } else {
                    State::ChunkData {
                        left: left - take,
                        body,
                    }
                };
                Step::Settle(usize::try_from(take).unwrap_or(rest.len()))
            }
            State::ChunkEnd { body } => match rest {
                [b'\r', b'\n', ..] => {
                    self.state = State::ChunkSize { body };
                    Step::Settle(2)
                }
                [b'\r'] => Step::NeedMore,
                _ => self.stop(),
            },
            State::Trailers { bytes } => match line_end(rest) {
                Some(0) => self.stop(),
                Some(end) if end == 1 && rest[0] == b'\r' => {
                    self.state = State::Head;
                    Step::Settle(2)
                }
                Some(end) if bytes + end < self.max_head_bytes => {
                    self.state = State::Trailers {
                        bytes: bytes + end + 1,
                    };
                    Step::Settle(end + 1)
                }
                None if bytes + rest.len() < self.max_head_bytes => Step::NeedMore,
                _ => self.stop(),
            },
        }
    }

    /// A request head: the version first (httparse refuses all but 1.0 and
    /// 1.1), then the framing fields.
    fn step_head(&mut self, rest: &mut [u8]) -> Step {
        let start = rest
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(rest.len());
        let Some(line_len) = line_end(&rest[start..]) else {
            return self.need_head_bytes(rest.len());
        };
        let line = if rest[start..start + line_len].ends_with(b"\r") {
            line_len - 1
        } else {
            line_len
        };
        if let Some(major) = rewrite_version(&mut rest[start..start + line]) {
            self.finding = Some(Noted {
                request: self.heads,
                finding: Finding::UnsupportedVersion { major },
            });
            self.heads += 1;
            return self.stop();
        }
        let mut fields = vec![httparse::EMPTY_HEADER; self.max_head_fields];
        let mut request = httparse::Request::new(&mut fields);
        let head_len = match request.parse(rest) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return self.need_head_bytes(rest.len()),
            // hyper refuses it too (400, 431): its answer, unwatched.
            Err(_) => return self.stop(),
        };
        let Some(next) = body_framing(&request) else {
            return self.stop();
        };
        self.heads += 1;
        self.state = next;
        Step::Settle(head_len)
    }

    fn step_chunk_size(&mut self, rest: &[u8], body: u64) -> Step {
        let Some(end) = line_end(rest) else {
            return if rest.len() < MAX_CHUNK_LINE_BYTES {
                Step::NeedMore
            } else {
                self.stop()
            };
        };
        let Ok(httparse::Status::Complete((len, size))) = httparse::parse_chunk_size(&rest[..=end])
        else {
            // A size httparse reads differently from hyper (17 digits with
            // leading zeros, say): hyper's to judge.
            return self.stop();
        };
        let declared = body.saturating_add(size);
        if declared > self.max_body_bytes {
            self.finding = Some(Noted {
                request: self.heads.saturating_sub(1),
                finding: Finding::BodyTooLarge { declared },
            });
            return self.stop();
        }
        self.state = if size == 0 {
            State::Trailers { bytes: 0 }
        } else {
            State::ChunkData {
                left: size,
                body: declared,
            }
        };
        Step::Settle(len)
    }

    fn need_head_bytes(&mut self, held: usize) -> Step {
        if held > self.max_head_bytes {
            self.stop()
        } else {
            Step::NeedMore
        }
    }

    /// Stops watching this connection.
    fn stop(&mut self) -> Step {
        self.state = State::Off;
        Step::Moved
    }
}

/// The index of the first LF in `bytes`.
fn line_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Rewrites the request line's `HTTP/D.D` (its last word) to `HTTP/1.1` when
/// it is not 1.0 or 1.1. Returns the major version when it is not 1 (505).
/// Anything that is not `HTTP/` and two single digits is left for httparse
/// to refuse (400).
fn rewrite_version(line: &mut [u8]) -> Option<u8> {
    let word = line.rsplit(|&b| b == b' ').next()?;
    let [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] = *word else {
        return None;
    };
    if !major.is_ascii_digit() || !minor.is_ascii_digit() {
        return None;
    }
    let len = line.len();
    if major == b'1' {
        if minor > b'1' {
            // RFC 9112, section 2.3: a higher minor version is served as
            // the highest this side implements.
            line[len - 1] = b'1';
        }
        return None;
    }
    line[len - 3] = b'1';
    line[len - 1] = b'1';
    Some(major - b'0')
}

/// The state after a head: its body's framing, as hyper decides it (RFC 9112,
/// section 6.3), or `None` where the core would have to guess.
fn body_framing(request: &httparse::Request<'_, '_>) -> Option<State> {
    let values = |name: &'static str| {
        request
            .headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    if values("transfer-encoding").next().is_some() {
        if request.version != Some(1) {
            return None;
        }
        let last = values("transfer-encoding")
            .next_back()?
            .rsplit(|&b| b == b',')
            .next()?
            .trim_ascii();
        return last
            .eq_ignore_ascii_case(b"chunked")
            .then_some(State::ChunkSize { body: 0 });
    }
    let mut length = None;
    for value in values("content-length") {
        for part in value.split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n: u64 = std::str::from_utf8(part).ok()?.parse().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        }
    }
    Some(match length {
        Some(n) if n > 0 => State::Length(n),
        _ => State::Head,
    })
}

/// A browser connection's stream with its request framing watched: bytes
/// reach hyper as [`RequestFraming`] settles them; findings go to the front
/// through a watch channel.
#[derive(Debug)]
pub(crate) struct FramedStream<S> {
    inner: S,
    framing: RequestFraming,
    /// Read from the socket, not yet given to hyper.
    held: BytesMut,
    /// How many of `held`'s first bytes may go.
    settled: usize,
    /// The browser closed its side.
    eof: bool,
    findings: watch::Sender<Option<Noted>>,
}

impl<S> FramedStream<S> {
    /// Wraps `inner`; the receiver sees the finding that ends the watch.
    pub(crate) fn new(inner: S, framing: RequestFraming) -> (Self, watch::Receiver<Option<Noted>>) {
        let (findings, receiver) = watch::channel(None);
        let stream = Self {
            inner,
            framing,
            held: BytesMut::new(),
            settled: 0,
            eof: false,
            findings,
        };
        (stream, receiver)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FramedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.settled > 0 {
                let n = this.settled.min(buf.remaining());
                buf.put_slice(&this.held[..n]);
                this.held.advance(n);
                this.settled -= n;
                return Poll::Ready(Ok(()));
            }
            if this.framing.is_off() && this.held.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.eof {
                // What is held goes as it is; then the end.
                if this.held.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.settled = this.held.len();
                continue;
            }
            // Uninitialized: the socket writes what it read, and only that is
            // looked at. Zeroing 8 KiB on every poll (a pending one too, three
            // per request) was a quarter of a cache hit's instructions.
            let mut chunk = [MaybeUninit::<u8>::uninit(); READ_BYTES];
            let mut read = ReadBuf::uninit(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
                continue;
            }
            this.held.extend_from_slice(read.filled());
            this.settled = this.framing.handle_input(&mut this.held);
            if let Some(noted) = this.framing.finding() {
                this.findings.send_if_modified(|current| {
                    let new = current.is_none();
                    if new {
                        *current = Some(noted);
                    }
                    new
                });
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FramedStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_BODY: u64 = 1000;

    fn core() -> RequestFraming {
        RequestFraming::new(8192, 100, MAX_BODY)
    }

    /// Feeds `input` whole, then byte by byte into a second core: both must
    /// settle every byte (or hold the same tail), rewrite alike and agree on
    /// the finding.
    fn run(input: &[u8]) -> (Vec<u8>, Option<Noted>) {
        let mut whole = input.to_vec();
        let mut one = core();
        let settled = one.handle_input(&mut whole);
        whole.truncate(settled);

        let mut split = core();
        let mut held = Vec::new();
        let mut out = Vec::new();
        for &b in input {
            held.push(b);
            let n = split.handle_input(&mut held);
            out.extend(held.drain(..n));
        }
        assert_eq!(whole, out, "split reads must settle as one read does");
        assert_eq!(one.finding(), split.finding());
        (whole, one.finding())
    }

    #[test]
    fn a_higher_minor_version_is_served_as_1_1() {
        let (out, finding) =
            run(b"GET / HTTP/1.2\r\nhost: a\r\n\r\nGET /b HTTP/1.1\r\nhost: a\r\n\r\n");
        assert_eq!(
            out,
            b"GET / HTTP/1.1\r\nhost: a\r\n\r\nGET /b HTTP/1.1\r\nhost: a\r\n\r\n"
        );
        assert_eq!(finding, None);
    }

    #[test]
    fn another_major_version_is_noted_for_505() {
        let input = b"GET / HTTP/1.1\r\nhost: a\r\n\r\nGET / HTTP/2.0\r\nhost: a\r\n\r\n";
        let (out, finding) = run(input);
        assert_eq!(
            out,
            b"GET / HTTP/1.1\r\nhost: a\r\n\r\nGET / HTTP/1.1\r\nhost: a\r\n\r\n"
        );
        assert_eq!(
            finding,
            Some(Noted {
                request: 1,
                finding: Finding::UnsupportedVersion { major: 2 }
            })
        );
    }

    #[test]
    fn versions_that_are_not_two_digits_are_left_for_httparse() {
        for input in [
            &b"GET / HTTP/1.10\r\n\r\n"[..],
            b"GET / HTTP/2\r\n\r\n",
            b"GET / http/2.0\r\n\r\n",
        ] {
            let (out, finding) = run(input);
            assert_eq!(out, input, "untouched");
            assert_eq!(finding, None);
        }
    }

    #[test]
    fn a_chunk_past_the_body_limit_is_noted_before_its_data() {
        let (out, finding) = run(
            b"GET / HTTP/1.1\r\nhost: a\r\n\r\nPOST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        );
        assert!(out.ends_with(b"ffffffffffffffff\r\n"), "all passed on");
        assert_eq!(
            finding,
            Some(Noted {
                request: 1,
                finding: Finding::BodyTooLarge { declared: u64::MAX }
            })
        );
    }

    #[test]
    fn chunks_are_summed_and_trailers_skipped() {
        let (_, finding) =
            run(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3e8;ext=1\r\n");
        assert_eq!(finding, None, "exactly the limit");
        let (_, finding) =
            run(b"POST / HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n3e8\r\n");
        assert_eq!(finding, None, "chunked last");
        let body = "a".repeat(600);
        let input = format!(
            "POST /1 HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n258\r\n{body}\r\n0\r\nx-t: 1\r\n\r\n\
             POST /2 HTTP/1.1\r\ncontent-length: 600\r\n\r\n{body}\
             POST /3 HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n258\r\n{body}\r\n258\r\n"
        );
        let (out, finding) = run(input.as_bytes());
        assert_eq!(out, input.as_bytes());
        assert_eq!(
            finding,
            Some(Noted {
                request: 2,
                finding: Finding::BodyTooLarge { declared: 1200 }
            })
        );
    }

    #[test]
    fn uncertain_framing_stops_the_watch_and_passes_everything() {
        for input in [
            // Different lengths, a coding after chunked, chunked on HTTP/1.0,
            // a malformed chunk end, a size httparse reads otherwise.
            &b"POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nffffffffffffffff\r\n"[..],
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked, gzip\r\n\r\nffffffffffffffff\r\n",
            b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n1\r\naXYffffffffffffffff\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0000000000000000001\r\nffffffffffffffff\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\nPOST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        ] {
            let (out, finding) = run(input);
            assert_eq!(out, input);
            assert_eq!(finding, None, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn an_incomplete_head_is_held_until_it_is_whole_or_too_long() {
        let mut framing = core();
        let mut partial = b"GET / HTTP/1.2\r\nhost:".to_vec();
        assert_eq!(framing.handle_input(&mut partial), 0);
        let mut long = vec![b'x'; 9000];
        long.splice(0..0, b"GET / HTTP/1.1\r\nx: ".iter().copied());
        assert_eq!(framing.handle_input(&mut long), long.len(), "hyper's 431");
        assert!(framing.is_off());
    }
}
