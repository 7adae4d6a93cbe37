//! Response heads: writing the one a RESPONSE_HEAD message carries, and
//! parsing it on the other side.
//!
//! The origin builds a [`ResponseHead`] (values are [`HeaderValue`]s, which
//! refuse CR, LF and NUL, so no field can be injected) and renders it byte for
//! byte with [`ResponseHead::render`]. The gateway reads it back with
//! [`parse_response_head`]. A RESPONSE_HEAD is one whole transport message, so
//! there is no "need more bytes" state: an incomplete head is as malformed as a
//! garbled one. Bodies never pass through here: on this protocol they travel in
//! RESPONSE_BODY chunks, so no chunked coding is produced.

use std::cell::RefCell;
use std::time::SystemTime;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, DATE};
use http::response::Parts;
use http::{HeaderName, HeaderValue, Response, StatusCode, Version};

/// Most header fields accepted in one response head. Heads are at most
/// `gateway_protocol::MAX_HEAD` (64 KiB) already; this bounds the parser's array.
pub const MAX_RESPONSE_HEADERS: usize = 128;

/// A response head: status and fields in the order they will be written.
///
/// Values are [`HeaderValue`]s, which refuse CR, LF and NUL at construction, so
/// [`ResponseHead::render`] cannot emit an injected field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code; the reason phrase is its canonical one.
    pub status: StatusCode,
    /// Field lines in order; repeated names are written as repeated lines.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ResponseHead {
    /// A head with `status` and no fields.
    pub fn new(status: StatusCode) -> ResponseHead {
        ResponseHead {
            status,
            headers: Vec::new(),
        }
    }

    /// Appends a field line.
    pub fn push(&mut self, name: HeaderName, value: HeaderValue) {
        self.headers.push((name, value));
    }

    /// Appends a field line from text, refusing (not emitting) a value with CR, LF,
    /// NUL or another control character, and a name that is not a token.
    pub fn try_push(&mut self, name: &str, value: &str) -> Result<(), InvalidResponseField> {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| InvalidResponseField)?;
        let value = HeaderValue::from_str(value).map_err(|_| InvalidResponseField)?;
        self.push(name, value);
        Ok(())
    }

    /// The first value of field `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&HeaderValue> {
        self.headers
            .iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Appends a Date field for `now` (IMF-fixdate). The value is formatted
    /// once a second per thread, as nginx keeps its time string.
    pub fn push_date(&mut self, now: SystemTime) {
        thread_local! {
            static LAST: RefCell<Option<(u64, HeaderValue)>> = const { RefCell::new(None) };
        }
        let Ok(since_epoch) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            // A clock before 1970 is broken; httpdate cannot format it.
            self.push(DATE, http_date(SystemTime::UNIX_EPOCH));
            return;
        };
        let second = since_epoch.as_secs();
        let value = LAST.with_borrow_mut(|last| match last {
            Some((at, value)) if *at == second => value.clone(),
            _ => {
                let value = http_date(now);
                *last = Some((second, value.clone()));
                value
            }
        });
        self.push(DATE, value);
    }

    /// The head as HTTP/1.1 bytes: status line, each field as `Name: value`
    /// (names in Title-Case), CRLF after each line, and the empty line.
    pub fn render(&self) -> Bytes {
        let reason = self.status.canonical_reason().unwrap_or("");
        let fields: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        let mut out = BytesMut::with_capacity(16 + reason.len() + fields);
        out.put_slice(b"HTTP/1.1 ");
        out.put_slice(self.status.as_str().as_bytes());
        out.put_u8(b' ');
        out.put_slice(reason.as_bytes());
        out.put_slice(b"\r\n");
        for (name, value) in &self.headers {
            put_title_case(&mut out, name.as_str());
            out.put_slice(b": ");
            out.put_slice(value.as_bytes());
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"\r\n");
        out.freeze()
    }

    /// A small error response: `status`, `Content-Type: text/plain;
    /// charset=utf-8`, Content-Length, and the body `"<code> <reason>\n"`.
    pub fn error(status: StatusCode) -> (ResponseHead, Bytes) {
        let body = Bytes::from(format!(
            "{} {}\n",
            status.as_str(),
            status.canonical_reason().unwrap_or("")
        ));
        let mut head = ResponseHead::new(status);
        head.push(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        head.push(CONTENT_LENGTH, HeaderValue::from(body.len()));
        (head, body)
    }
}

/// A response field name or value that would not be valid on the wire (a value
/// with CR, LF or another control character, a name that is not a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid response header field")]
pub struct InvalidResponseField;

/// `time` as an IMF-fixdate field value (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(time: SystemTime) -> HeaderValue {
    let text = httpdate::fmt_http_date(time);
    // An IMF-fixdate is visible ASCII; the fallback is never taken.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Writes a lowercase field name in the customary Title-Case (`content-type` →
/// `Content-Type`, `etag` → `Etag`). Case carries no meaning in HTTP/1.1 field
/// names; this is for people reading traces.
fn put_title_case(out: &mut BytesMut, name: &str) {
    // Copied whole, then cased in place: one capacity check, not one a byte.
    let start = out.len();
    out.put_slice(name.as_bytes());
    let mut upper = true;
    for b in &mut out[start..] {
        if upper {
            b.make_ascii_uppercase();
        }
        upper = *b == b'-';
    }
}

/// Why a response head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseHeadError {
    /// The head ended before its empty line.
    #[error("head ends before its empty line")]
    Incomplete,
    /// More than [`MAX_RESPONSE_HEADERS`] field lines.
    #[error("more than {MAX_RESPONSE_HEADERS} header fields")]
    TooManyHeaders,
    /// The bytes are not an HTTP/1.x response head (`httparse` said why).
    #[error("unparsable head: {0}")]
    Malformed(httparse::Error),
    /// Bytes follow the empty line that ends the head.
    #[error("{0} bytes after the head")]
    TrailingBytes(usize),
    /// The status code is outside 100 to 999.
    #[error("status {0}")]
    InvalidStatus(u16),
    /// An interim (1xx) response: the protocol carries exactly one head per
    /// request.
    #[error("interim response {0}")]
    Interim(u16),
    /// A field name `httparse` accepted but `http` did not.
    #[error("field name {0:?}")]
    InvalidName(String),
    /// A field value `http` did not accept.
    #[error("value of field {0:?}")]
    InvalidValue(String),
}

/// A response head that parsed: its parts, and its reason phrase when that is
/// not the status code's canonical one (hyper keeps it as `ReasonPhrase`).
#[derive(Debug)]
pub struct ParsedResponseHead {
    /// Status, version and fields, in order.
    pub parts: Parts,
    /// The reason phrase, when present and not the canonical one.
    pub reason: Option<String>,
}

/// Parses a status line and header fields ending in CRLFCRLF, with nothing
/// after. Interim (1xx) responses are refused.
pub fn parse_response_head(head: &[u8]) -> Result<ParsedResponseHead, ResponseHeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(head) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Err(ResponseHeadError::Incomplete),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseHeadError::TooManyHeaders),
        Err(e) => return Err(ResponseHeadError::Malformed(e)),
    };
    if len != head.len() {
        return Err(ResponseHeadError::TrailingBytes(head.len() - len));
    }
    let code = parsed.code.ok_or(ResponseHeadError::Incomplete)?;
    let status = StatusCode::from_u16(code).map_err(|_| ResponseHeadError::InvalidStatus(code))?;
    if status.is_informational() {
        return Err(ResponseHeadError::Interim(code));
    }
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ResponseHeadError::InvalidName(field.name.to_owned()))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| ResponseHeadError::InvalidValue(field.name.to_owned()))?;
        parts.headers.append(name, value);
    }
    let reason = parsed
        .reason
        .filter(|reason| !reason.is_empty() && Some(*reason) != status.canonical_reason())
        .map(str::to_owned);
    Ok(ParsedResponseHead { parts, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_byte_for_byte() -> Result<(), InvalidResponseField> {
        let mut head = ResponseHead::new(StatusCode::PARTIAL_CONTENT);
        head.try_push("content-range", "bytes 0-9/100")?;
        head.try_push("ETag", "\"1-2-3\"")?;
        head.push(CONTENT_LENGTH, HeaderValue::from(10u64));
        head.try_push("x-a-b", "v\twith tab")?;
        assert_eq!(
            &head.render()[..],
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nEtag: \"1-2-3\"\r\nContent-Length: 10\r\nX-A-B: v\twith tab\r\n\r\n"
        );
        Ok(())
    }

    #[test]
    fn renders_unknown_status_with_empty_reason() -> Result<(), http::status::InvalidStatusCode> {
        let head = ResponseHead::new(StatusCode::from_u16(599)?);
        assert_eq!(&head.render()[..], b"HTTP/1.1 599 \r\n\r\n");
        Ok(())
    }

    #[test]
    fn refuses_injection() {
        let mut head = ResponseHead::new(StatusCode::OK);
        assert!(head.try_push("Location", "/a\r\nSet-Cookie: x=1").is_err());
        assert!(head.try_push("Location", "/a\nx").is_err());
        assert!(head.try_push("Location", "/a\rx").is_err());
        assert!(head.try_push("Location", "/a\0x").is_err());
        assert!(head.try_push("Bad\r\nName", "x").is_err());
        assert!(head.try_push("", "x").is_err());
        assert!(head.headers.is_empty());
        assert_eq!(&head.render()[..], b"HTTP/1.1 200 OK\r\n\r\n");
    }

    #[test]
    fn error_response_is_complete() {
        let (head, body) = ResponseHead::error(StatusCode::NOT_FOUND);
        assert_eq!(&body[..], b"404 Not Found\n");
        assert_eq!(
            &head.render()[..],
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\n\r\n"
        );
        assert_eq!(head.get("content-length"), Some(&HeaderValue::from(14u64)));
    }

    #[test]
    fn date_is_imf_fixdate() {
        let mut head = ResponseHead::new(StatusCode::NO_CONTENT);
        head.push_date(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(784111777));
        assert_eq!(
            &head.render()[..],
            b"HTTP/1.1 204 No Content\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"
        );
    }

    /// The value kept for a second is that second's, never another's.
    #[test]
    fn date_kept_per_second_follows_the_clock() {
        let epoch = SystemTime::UNIX_EPOCH;
        let at = |secs: u64, millis: u64| {
            let mut head = ResponseHead::new(StatusCode::NO_CONTENT);
            head.push_date(
                epoch
                    + std::time::Duration::from_secs(secs)
                    + std::time::Duration::from_millis(millis),
            );
            head.get("date").cloned()
        };
        let same = at(784111777, 0);
        assert_eq!(at(784111777, 999), same);
        assert_eq!(
            at(784111778, 1).as_ref().and_then(|v| v.to_str().ok()),
            Some("Sun, 06 Nov 1994 08:49:38 GMT")
        );
        // Back in time (a clock step) formats afresh too.
        assert_eq!(
            at(784111777, 500).as_ref().and_then(|v| v.to_str().ok()),
            Some("Sun, 06 Nov 1994 08:49:37 GMT")
        );
        let mut before = ResponseHead::new(StatusCode::NO_CONTENT);
        before.push_date(epoch - std::time::Duration::from_secs(1));
        assert_eq!(
            before.get("date").and_then(|v| v.to_str().ok()),
            Some("Thu, 01 Jan 1970 00:00:00 GMT")
        );
    }

    #[test]
    fn a_plain_head_parses_with_every_field() -> Result<(), ResponseHeadError> {
        let parsed = parse_response_head(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nset-cookie: a\r\nset-cookie: b\r\n\r\n",
        )?;
        let parts = parsed.parts;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(parts.version, Version::HTTP_11);
        assert_eq!(parts.headers["content-length"], "5");
        let cookies: Vec<_> = parts.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a", "b"]);
        assert_eq!(parsed.reason, None);
        Ok(())
    }

    #[test]
    fn an_unusual_reason_phrase_is_kept() -> Result<(), ResponseHeadError> {
        let parsed = parse_response_head(b"HTTP/1.0 404 Nothing Here\r\n\r\n")?;
        assert_eq!(parsed.parts.version, Version::HTTP_10);
        assert_eq!(parsed.reason.as_deref(), Some("Nothing Here"));
        Ok(())
    }

    #[test]
    fn malformed_heads_are_refused_with_a_reason() {
        let cases: [(&[u8], ResponseHeadError); 7] = [
            (b"", ResponseHeadError::Incomplete),
            (b"HTTP/1.1 200 OK\r\n", ResponseHeadError::Incomplete),
            (
                b"HTTP/1.1 200 OK\r\n\r\nbody",
                ResponseHeadError::TrailingBytes(4),
            ),
            (
                b"HTTP/1.1 2000 OK\r\n\r\n",
                ResponseHeadError::Malformed(httparse::Error::Status),
            ),
            (
                b"HTTP/1.1 100 Continue\r\n\r\n",
                ResponseHeadError::Interim(100),
            ),
            (
                b"garbage\r\n\r\n",
                ResponseHeadError::Malformed(httparse::Error::Version),
            ),
            (
                b"HTTP/1.1 200 OK\r\nbad field: x\r\n\r\n",
                ResponseHeadError::Malformed(httparse::Error::HeaderName),
            ),
        ];
        for (head, expected) in cases {
            assert_eq!(
                parse_response_head(head).map(|p| p.parts.status),
                Err(expected),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn the_field_count_is_capped() {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_RESPONSE_HEADERS {
            head.extend_from_slice(format!("x-{i}: y\r\n").as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        let err = parse_response_head(&head).map(|p| p.parts.status);
        assert_eq!(err, Err(ResponseHeadError::TooManyHeaders));
    }

    /// What the origin renders, the gateway reads back field for field.
    #[test]
    fn a_rendered_head_parses_to_itself() -> Result<(), ResponseHeadError> {
        let mut head = ResponseHead::new(StatusCode::PARTIAL_CONTENT);
        head.push(CONTENT_LENGTH, HeaderValue::from(10u64));
        head.push(
            http::header::CONTENT_RANGE,
            HeaderValue::from_static("bytes 0-9/100"),
        );
        head.push(http::header::SET_COOKIE, HeaderValue::from_static("a=1"));
        head.push(http::header::SET_COOKIE, HeaderValue::from_static("b=2"));
        let parsed = parse_response_head(&head.render())?;
        assert_eq!(parsed.parts.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(parsed.reason, None);
        let fields: Vec<_> = parsed
            .parts
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let mut expected = head.headers.clone();
        expected.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        let mut fields_sorted = fields;
        fields_sorted.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        assert_eq!(fields_sorted, expected);
        Ok(())
    }
}
