//! The access log: one line per request, written through `tracing` with the
//! target [`TARGET`] (`origin::access`) at info, like the gateway's
//! `gateway::access`.
//!
//! ```text
//! INFO origin::access: peer=192.0.2.7:9899 id=12 stream=3 method=GET target=/_static/jquery.js status=403 bytes=14 ms=0 outcome=complete reason=symlink-out-of-root via=request
//! ```
//!
//! [`AccessLog`] wraps the [`Service`] for one association: it notes the
//! request line before the service answers, the status from the head it
//! answers with, and counts the body bytes as the driver pulls them. The line
//! is written when the body has been read to its end (`outcome=complete`), when
//! reading it failed (`reset`: the gateway got a RESET, not a short body), or
//! when the response was dropped before its end (`aborted`: CANCEL or RESET
//! from the gateway, or the association went away). `ms` runs from the
//! request's start to that moment; the driver reads at most a few chunks ahead
//! of the wire, so for a complete response it is the time to the last chunk
//! handed to the sender. Every field is one token: method and target have
//! bytes outside visible ASCII, `"` and `\` written as `\xNN`, as nginx does,
//! and a missing value is `-`. docs/origin.md documents the format.
//!
//! It never touches the response: head and body pass through unchanged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::server::{BodySource, Handler, IncomingRequest, PushTarget, Reply};
use crate::service::{Service, ServiceBody};

/// The `tracing` target of access-log lines.
pub const TARGET: &str = "origin::access";

/// The handler of one association: the service, with an access-log line per
/// request.
#[derive(Debug)]
pub struct AccessLog {
    service: Arc<Service>,
    peer: SocketAddr,
}

impl AccessLog {
    /// Logs the requests of the association with `peer`, answered by `service`.
    pub fn new(service: Arc<Service>, peer: SocketAddr) -> AccessLog {
        AccessLog { service, peer }
    }
}

impl Handler for AccessLog {
    type Body = LoggedBody;

    fn pushes(
        &self,
        page: &IncomingRequest,
    ) -> impl std::future::Future<Output = Vec<PushTarget>> + Send {
        self.service.pushes(page)
    }

    async fn handle(&self, request: IncomingRequest) -> Reply<LoggedBody> {
        let (method, target) = request_line(&request.request.head);
        // Created before the answer: if the request is cancelled while the
        // service works on it, dropping the entry still writes the line.
        let mut entry = Entry {
            peer: self.peer,
            id: request.id,
            stream: request.stream,
            method,
            target,
            status: None,
            reason: None,
            bytes: 0,
            via: if request.tunnelled {
                "tls"
            } else if gateway_protocol::is_push_id(request.id) {
                "push"
            } else {
                "request"
            },
            started: Instant::now(),
            written: false,
        };
        let (reply, reason) = self.service.answer(request).await;
        entry.status = status_of(&reply.head);
        entry.reason = reason;
        Reply {
            head: reply.head,
            body_len: reply.body_len,
            body: LoggedBody {
                body: reply.body,
                entry,
            },
        }
    }
}

/// A response body that writes the access-log line when it ends.
#[derive(Debug)]
pub struct LoggedBody {
    body: ServiceBody,
    entry: Entry,
}

impl BodySource for LoggedBody {
    async fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Bytes>> {
        let result = self.body.next_chunk(max).await;
        match &result {
            Ok(Some(chunk)) => self.entry.bytes += chunk.len() as u64,
            Ok(None) => self.entry.write(Outcome::Complete),
            Err(_) => self.entry.write(Outcome::Reset),
        }
        result
    }
}

/// How a response ended, as the `outcome` field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The body was read to its end.
    Complete,
    /// Reading the body failed: the request was RESET.
    Reset,
    /// Dropped before its end: cancelled, reset by the gateway, association gone.
    Aborted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Reset => "reset",
            Outcome::Aborted => "aborted",
        }
    }
}

/// One request's line, written once.
#[derive(Debug)]
struct Entry {
    peer: SocketAddr,
    id: gateway_protocol::RequestId,
    stream: u16,
    method: String,
    target: String,
    status: Option<u16>,
    reason: Option<&'static str>,
    bytes: u64,
    /// `request` (a REQUEST message) or `tls` (decrypted from a TLS tunnel).
    via: &'static str,
    started: Instant,
    written: bool,
}

impl Entry {
    fn write(&mut self, outcome: Outcome) {
        if !self.written {
            self.written = true;
            self.emit(self.started.elapsed(), outcome);
        }
    }

    fn emit(&self, elapsed: Duration, outcome: Outcome) {
        let status = self
            .status
            .map_or_else(|| "-".to_owned(), |s| s.to_string());
        tracing::info!(
            target: TARGET,
            peer = %self.peer,
            id = self.id,
            stream = self.stream,
            method = %self.method,
            target = %self.target,
            status = %status,
            bytes = self.bytes,
            ms = elapsed.as_millis() as u64,
            outcome = %outcome.as_str(),
            reason = %self.reason.unwrap_or("-"),
            via = %self.via,
        );
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.write(Outcome::Aborted);
    }
}

/// Method and target of a request head's first line, escaped to one token each
/// (`-` when missing).
fn request_line(head: &[u8]) -> (String, String) {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ').filter(|p| !p.is_empty());
    let method = escape(parts.next().unwrap_or_default());
    let target = escape(parts.next().unwrap_or_default());
    (method, target)
}

/// `bytes` as one log token: visible ASCII other than `"` and `\` as is, every
/// other byte as `\xNN`; empty as `-`.
fn escape(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".to_owned();
    }
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

/// The status code of a rendered response head (`HTTP/1.1 200 OK\r\n...`).
fn status_of(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.")?;
    let code = rest.get(2..5)?;
    if rest.get(1) != Some(&b' ') || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn request_lines_become_tokens() {
        assert_eq!(
            request_line(b"GET /a/b?c=d HTTP/1.1\r\nHost: h\r\n\r\n"),
            ("GET".into(), "/a/b?c=d".into())
        );
        assert_eq!(
            request_line(b"GET /caf\xc3\xa9\"\\ HTTP/1.1\r\n\r\n"),
            ("GET".into(), "/caf\\xC3\\xA9\\x22\\x5C".into())
        );
        assert_eq!(request_line(b"\r\n"), ("-".into(), "-".into()));
        assert_eq!(
            request_line(b"BREW\tx\x00"),
            ("BREW\\x09x\\x00".into(), "-".into())
        );
    }

    #[test]
    fn status_from_the_rendered_head() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.0 404 Not Found\r\n"), Some(404));
        assert_eq!(status_of(b"HTTP/1.1 599 \r\n"), Some(599));
        assert_eq!(status_of(b"HTTP/1.1 20"), None);
        assert_eq!(status_of(b"HTTP/2 200\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 2x0 OK\r\n"), None);
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            crate::sync::lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(run: impl FnOnce()) -> Vec<String> {
        let sink = Captured::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        let bytes = crate::sync::lock(&sink.0).clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn entry() -> Entry {
        Entry {
            peer: SocketAddr::from(([192, 0, 2, 7], 9899)),
            id: 12,
            stream: 3,
            method: "GET".into(),
            target: "/_static/jquery.js".into(),
            status: Some(403),
            reason: Some("symlink-out-of-root"),
            bytes: 14,
            via: "request",
            started: Instant::now(),
            written: false,
        }
    }

    #[test]
    fn the_line_format() {
        let logged = lines(|| {
            let mut entry = entry();
            entry.written = true;
            entry.emit(Duration::from_micros(2_700), Outcome::Complete);
        });
        assert_eq!(
            logged,
            [
                " INFO origin::access: peer=192.0.2.7:9899 id=12 stream=3 method=GET \
              target=/_static/jquery.js status=403 bytes=14 ms=2 outcome=complete \
              reason=symlink-out-of-root via=request"
            ]
        );
    }

    #[test]
    fn a_request_from_a_tls_tunnel_says_so() {
        let logged = lines(|| {
            let mut entry = entry();
            entry.via = "tls";
            entry.write(Outcome::Complete);
        });
        assert!(
            logged.len() == 1 && logged[0].ends_with(" reason=symlink-out-of-root via=tls"),
            "{logged:#?}"
        );
    }

    #[test]
    fn one_line_per_request_however_it_ends() {
        let logged = lines(|| {
            let mut complete = entry();
            complete.write(Outcome::Complete);
            complete.write(Outcome::Reset);
            drop(complete);
            let mut unanswered = entry();
            unanswered.status = None;
            unanswered.reason = None;
            drop(unanswered);
        });
        assert_eq!(logged.len(), 2, "{logged:#?}");
        assert!(logged[0].contains(" outcome=complete "), "{}", logged[0]);
        assert!(
            logged[1].contains(" status=- bytes=14 ")
                && logged[1].ends_with(" outcome=aborted reason=- via=request"),
            "{}",
            logged[1]
        );
    }
}
