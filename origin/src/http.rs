//! HTTP/1.1 request heads in, response heads out: no I/O, no transport.
//!
//! A REQUEST message of the gateway-origin protocol carries one complete request
//! head (request line, fields, empty line); [`RequestHead::parse`] turns it into
//! typed parts with `httparse` doing the byte-level work. The answer's head is a
//! [`ResponseHead`], rendered byte for byte by [`ResponseHead::render`] into the
//! payload of a RESPONSE_HEAD message. Bodies never pass through here: on this
//! protocol they travel in RESPONSE_BODY chunks, so no chunked coding is produced.
//!
//! Types come from the `http` crate ([`Method`], [`StatusCode`], [`HeaderMap`],
//! [`HeaderName`], [`HeaderValue`]): a [`HeaderValue`] cannot hold CR, LF or NUL,
//! so a response head built from them cannot carry an injected field.
//!
//! Start with [`RequestHead::parse`] and [`HttpError::status`].

use std::cell::RefCell;
use std::time::SystemTime;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, DATE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

/// Most header fields accepted in one request head (count of field lines). More is
/// answered with 431.
pub const MAX_HEADERS: usize = 100;

/// Longest request target accepted, in bytes. Longer is answered with 414. The
/// head itself is capped by the protocol at `gateway_protocol::MAX_HEAD` bytes.
pub const MAX_TARGET: usize = 8 * 1024;

/// Why a request head was refused. [`HttpError::status`] decides the status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The bytes are not an HTTP/1.x request head (`httparse` said why).
    #[error("malformed request head: {0}")]
    Malformed(httparse::Error),
    /// The head ended before the empty line; on this protocol a head arrives whole,
    /// so a partial head is malformed, not "need more bytes".
    #[error("request head is incomplete")]
    Incomplete,
    /// Bytes follow the empty line that ends the head.
    #[error("{0} bytes after the end of the request head")]
    TrailingBytes(usize),
    /// More than [`MAX_HEADERS`] field lines.
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    /// The request target is longer than [`MAX_TARGET`] bytes.
    #[error("request target of {0} bytes exceeds {MAX_TARGET}")]
    TargetTooLong(usize),
    /// The protocol version is not HTTP/1.0 or HTTP/1.1.
    #[error("unsupported HTTP version")]
    UnsupportedVersion,
    /// The method is not a valid token.
    #[error("invalid method")]
    InvalidMethod,
    /// A field name or value `httparse` accepted but `http` did not.
    #[error("invalid header field")]
    InvalidField,
    /// An HTTP/1.1 request without a Host field (RFC 9112 §3.2 requires 400).
    #[error("HTTP/1.1 request without Host")]
    MissingHost,
    /// More than one Host field line (RFC 9112 §3.2 requires 400).
    #[error("more than one Host field")]
    DuplicateHost,
}

impl HttpError {
    /// The status code the origin answers this error with.
    pub fn status(&self) -> StatusCode {
        match self {
            HttpError::TooManyHeaders => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            HttpError::TargetTooLong(_) => StatusCode::URI_TOO_LONG,
            HttpError::UnsupportedVersion => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            HttpError::Malformed(_)
            | HttpError::Incomplete
            | HttpError::TrailingBytes(_)
            | HttpError::InvalidMethod
            | HttpError::InvalidField
            | HttpError::MissingHost
            | HttpError::DuplicateHost => StatusCode::BAD_REQUEST,
        }
    }

    /// The complete answer to a request refused with this error: a short
    /// text/plain error response.
    pub fn response(&self) -> (ResponseHead, Bytes) {
        ResponseHead::error(self.status())
    }
}

/// A parsed request head. Field names are case-insensitive ([`HeaderMap`] lowercases
/// them); values are kept as received (bytes, validated by `httparse`).
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// The request method; extension methods are kept, not refused here.
    pub method: Method,
    /// The request target as sent (origin-form `/path?query` normally).
    pub target: String,
    /// `Version::HTTP_10` or `Version::HTTP_11`.
    pub version: Version,
    /// Every field line, in order, names lowercased.
    pub headers: HeaderMap,
}

impl RequestHead {
    /// Parses one complete request head: request line, fields, empty line, and
    /// nothing after it.
    pub fn parse(bytes: &[u8]) -> Result<RequestHead, HttpError> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut fields);
        let len = match request.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Err(HttpError::Incomplete),
            Err(httparse::Error::TooManyHeaders) => return Err(HttpError::TooManyHeaders),
            Err(httparse::Error::Version) => return Err(HttpError::UnsupportedVersion),
            Err(e) => return Err(HttpError::Malformed(e)),
        };
        if len != bytes.len() {
            return Err(HttpError::TrailingBytes(bytes.len() - len));
        }
        let version = match request.version {
            Some(0) => Version::HTTP_10,
            Some(1) => Version::HTTP_11,
            _ => return Err(HttpError::UnsupportedVersion),
        };
        let method = request
            .method
            .ok_or(HttpError::Incomplete)
            .and_then(|m| Method::from_bytes(m.as_bytes()).map_err(|_| HttpError::InvalidMethod))?;
        let target = request.path.ok_or(HttpError::Incomplete)?;
        if target.len() > MAX_TARGET {
            return Err(HttpError::TargetTooLong(target.len()));
        }
        let mut headers = HeaderMap::with_capacity(request.headers.len());
        for field in request.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes())
                .map_err(|_| HttpError::InvalidField)?;
            let value =
                HeaderValue::from_bytes(field.value).map_err(|_| HttpError::InvalidField)?;
            headers.append(name, value);
        }
        match headers.get_all(HOST).iter().count() {
            0 if version == Version::HTTP_11 => return Err(HttpError::MissingHost),
            0 | 1 => {}
            _ => return Err(HttpError::DuplicateHost),
        }
        Ok(RequestHead {
            method,
            target: target.to_owned(),
            version,
            headers,
        })
    }

    /// The target's path: everything before the first `?`.
    pub fn path(&self) -> &str {
        match self.target.split_once('?') {
            Some((path, _)) => path,
            None => &self.target,
        }
    }

    /// The target's query (after the first `?`), if any.
    pub fn query(&self) -> Option<&str> {
        self.target.split_once('?').map(|(_, query)| query)
    }

    /// The first value of field `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.get(name)
    }

    /// The first value of field `name` as text, if present and visible ASCII.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| v.to_str().ok())
    }

    /// How many field lines named `name` the request carries.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers.get_all(name).iter().count()
    }

    /// All values of a list-valued field, combined as RFC 9110 §5.3 allows: the
    /// field lines joined with `", "`. `None` when the field is absent.
    pub fn header_list(&self, name: &str) -> Option<Vec<u8>> {
        let mut values = self.headers.get_all(name).iter();
        let first = values.next()?;
        let mut combined = first.as_bytes().to_vec();
        for value in values {
            combined.extend_from_slice(b", ");
            combined.extend_from_slice(value.as_bytes());
        }
        Some(combined)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RequestHead, HttpError> {
        RequestHead::parse(text.as_bytes())
    }

    #[test]
    fn parses_a_get() -> Result<(), HttpError> {
        let head = parse(
            "GET /a/b.html?x=1&y HTTP/1.1\r\nHost: example.test\r\nIf-None-Match: \"a\"\r\nif-none-match: \"b\"\r\n\r\n",
        )?;
        assert_eq!(head.method, Method::GET);
        assert_eq!(head.target, "/a/b.html?x=1&y");
        assert_eq!(head.path(), "/a/b.html");
        assert_eq!(head.query(), Some("x=1&y"));
        assert_eq!(head.version, Version::HTTP_11);
        assert_eq!(head.header_str("HOST"), Some("example.test"));
        assert_eq!(head.header_count("If-None-Match"), 2);
        assert_eq!(
            head.header_list("if-none-match").as_deref(),
            Some(&b"\"a\", \"b\""[..])
        );
        assert_eq!(head.header_list("range"), None);
        Ok(())
    }

    #[test]
    fn http10_without_host_is_accepted() -> Result<(), HttpError> {
        let head = parse("HEAD / HTTP/1.0\r\n\r\n")?;
        assert_eq!(head.version, Version::HTTP_10);
        assert_eq!(head.method, Method::HEAD);
        assert_eq!(head.query(), None);
        Ok(())
    }

    #[test]
    fn extension_methods_parse() -> Result<(), HttpError> {
        assert_eq!(
            parse("BREW /pot HTTP/1.1\r\nHost: h\r\n\r\n")?
                .method
                .as_str(),
            "BREW"
        );
        Ok(())
    }

    #[test]
    fn refusals_map_to_statuses() {
        let cases: Vec<(String, u16)> = vec![
            ("GET / HTTP/1.1\r\n\r\n".into(), 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into(), 400),
            ("GET / HTTP/1.1\r\nHost: a\r\n".into(), 400),
            (
                "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n".into(),
                400,
            ),
            ("GET / HTTP/2.0\r\nHost: a\r\n\r\n".into(), 505),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n".into(),
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n".into(),
                400,
            ),
            ("GET\r\n\r\n".into(), 400),
            (
                format!(
                    "GET /{} HTTP/1.1\r\nHost: a\r\n\r\n",
                    "a".repeat(MAX_TARGET)
                ),
                414,
            ),
            (
                format!(
                    "GET / HTTP/1.1\r\nHost: a\r\n{}\r\n",
                    "X: y\r\n".repeat(MAX_HEADERS)
                ),
                431,
            ),
        ];
        for (text, status) in cases {
            match parse(&text) {
                Ok(head) => panic!("{text:?} parsed as {head:?}"),
                Err(e) => assert_eq!(e.status().as_u16(), status, "{text:?}: {e}"),
            }
        }
    }

    #[test]
    fn target_at_the_limit_is_accepted() -> Result<(), HttpError> {
        let target = format!("/{}", "a".repeat(MAX_TARGET - 1));
        let head = parse(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"))?;
        assert_eq!(head.target.len(), MAX_TARGET);
        Ok(())
    }

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
}
