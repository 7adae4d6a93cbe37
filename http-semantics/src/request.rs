//! Request heads: parsing the one a REQUEST message carries, and writing the
//! one the gateway sends.
//!
//! A REQUEST message of the gateway-origin protocol carries one complete request
//! head (request line, fields, empty line); [`RequestHead::parse`] turns it into
//! typed parts with `httparse` doing the byte-level work. The gateway writes that
//! head with [`write_request_head`]; what it writes, [`RequestHead::parse`]
//! accepts (tested here and fuzzed by `http_semantics`).
//!
//! Types come from the `http` crate: a [`HeaderValue`] cannot hold CR, LF or
//! NUL, so a head written from them cannot carry an injected field.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

use crate::response::ResponseHead;

/// Most header fields accepted in one request head (count of field lines). More is
/// answered with 431.
pub const MAX_HEADERS: usize = 100;

/// Longest request target accepted, in bytes. Longer is answered with 414. The
/// head itself is capped by the protocol at `gateway_protocol::MAX_HEAD` bytes.
pub const MAX_TARGET: usize = 8 * 1024;

/// Why a request head was refused. [`RequestHeadError::status`] decides the
/// status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestHeadError {
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

impl RequestHeadError {
    /// The status code a server answers this error with.
    pub fn status(&self) -> StatusCode {
        match self {
            RequestHeadError::TooManyHeaders => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            RequestHeadError::TargetTooLong(_) => StatusCode::URI_TOO_LONG,
            RequestHeadError::UnsupportedVersion => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            RequestHeadError::Malformed(_)
            | RequestHeadError::Incomplete
            | RequestHeadError::TrailingBytes(_)
            | RequestHeadError::InvalidMethod
            | RequestHeadError::InvalidField
            | RequestHeadError::MissingHost
            | RequestHeadError::DuplicateHost => StatusCode::BAD_REQUEST,
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
    pub fn parse(bytes: &[u8]) -> Result<RequestHead, RequestHeadError> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut fields);
        let len = match request.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Err(RequestHeadError::Incomplete),
            Err(httparse::Error::TooManyHeaders) => return Err(RequestHeadError::TooManyHeaders),
            Err(httparse::Error::Version) => return Err(RequestHeadError::UnsupportedVersion),
            Err(e) => return Err(RequestHeadError::Malformed(e)),
        };
        if len != bytes.len() {
            return Err(RequestHeadError::TrailingBytes(bytes.len() - len));
        }
        let version = match request.version {
            Some(0) => Version::HTTP_10,
            Some(1) => Version::HTTP_11,
            _ => return Err(RequestHeadError::UnsupportedVersion),
        };
        let method = request
            .method
            .ok_or(RequestHeadError::Incomplete)
            .and_then(|m| {
                Method::from_bytes(m.as_bytes()).map_err(|_| RequestHeadError::InvalidMethod)
            })?;
        let target = request.path.ok_or(RequestHeadError::Incomplete)?;
        if target.len() > MAX_TARGET {
            return Err(RequestHeadError::TargetTooLong(target.len()));
        }
        let mut headers = HeaderMap::with_capacity(request.headers.len());
        for field in request.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes())
                .map_err(|_| RequestHeadError::InvalidField)?;
            let value =
                HeaderValue::from_bytes(field.value).map_err(|_| RequestHeadError::InvalidField)?;
            headers.append(name, value);
        }
        match headers.get_all(HOST).iter().count() {
            0 if version == Version::HTTP_11 => return Err(RequestHeadError::MissingHost),
            0 | 1 => {}
            _ => return Err(RequestHeadError::DuplicateHost),
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
}

/// The HTTP/1.1 request head carried in a REQUEST message: `method` and the
/// origin-form `target`, `host` first, the end-to-end `headers` (their own
/// Host and Content-Length left out), `content-length: body_len` for a body,
/// and `via` last.
pub fn write_request_head(
    method: &Method,
    target: &str,
    host: &HeaderValue,
    headers: &HeaderMap,
    body_len: usize,
    via: &HeaderValue,
) -> Bytes {
    let mut head = BytesMut::with_capacity(512);
    head.put_slice(method.as_str().as_bytes());
    head.put_u8(b' ');
    head.put_slice(target.as_bytes());
    head.put_slice(b" HTTP/1.1\r\nhost: ");
    head.put_slice(host.as_bytes());
    head.put_slice(b"\r\n");
    for (name, value) in headers {
        if name == HOST || name == CONTENT_LENGTH {
            continue;
        }
        head.put_slice(name.as_str().as_bytes());
        head.put_slice(b": ");
        head.put_slice(value.as_bytes());
        head.put_slice(b"\r\n");
    }
    if body_len > 0 {
        head.put_slice(format!("content-length: {body_len}\r\n").as_bytes());
    }
    head.put_slice(b"via: ");
    head.put_slice(via.as_bytes());
    head.put_slice(b"\r\n\r\n");
    head.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RequestHead, RequestHeadError> {
        RequestHead::parse(text.as_bytes())
    }

    #[test]
    fn parses_a_get() -> Result<(), RequestHeadError> {
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
        Ok(())
    }

    #[test]
    fn http10_without_host_is_accepted() -> Result<(), RequestHeadError> {
        let head = parse("HEAD / HTTP/1.0\r\n\r\n")?;
        assert_eq!(head.version, Version::HTTP_10);
        assert_eq!(head.method, Method::HEAD);
        assert_eq!(head.query(), None);
        Ok(())
    }

    #[test]
    fn extension_methods_parse() -> Result<(), RequestHeadError> {
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
    fn target_at_the_limit_is_accepted() -> Result<(), RequestHeadError> {
        let target = format!("/{}", "a".repeat(MAX_TARGET - 1));
        let head = parse(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"))?;
        assert_eq!(head.target.len(), MAX_TARGET);
        Ok(())
    }

    #[test]
    fn written_head_is_a_valid_request() -> Result<(), RequestHeadError> {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::ACCEPT, HeaderValue::from_static("text/html"));
        headers.insert(HOST, HeaderValue::from_static("ignored"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("99"));
        let head = write_request_head(
            &Method::POST,
            "/a?b=c",
            &HeaderValue::from_static("203.0.113.10"),
            &headers,
            3,
            &HeaderValue::from_static("1.1 sctp-gateway-0123abcd"),
        );
        assert_eq!(
            &head[..],
            b"POST /a?b=c HTTP/1.1\r\nhost: 203.0.113.10\r\naccept: text/html\r\ncontent-length: 3\r\nvia: 1.1 sctp-gateway-0123abcd\r\n\r\n"
        );
        let parsed = RequestHead::parse(&head)?;
        assert_eq!(parsed.method, Method::POST);
        assert_eq!(parsed.target, "/a?b=c");
        let names: Vec<_> = parsed.headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["host", "accept", "content-length", "via"]);
        assert_eq!(parsed.header_str("host"), Some("203.0.113.10"));
        assert_eq!(parsed.header_str("content-length"), Some("3"));
        Ok(())
    }

    #[test]
    fn written_head_without_body_has_no_content_length() -> Result<(), RequestHeadError> {
        let head = write_request_head(
            &Method::GET,
            "/",
            &HeaderValue::from_static("h.example:8080"),
            &HeaderMap::new(),
            0,
            &HeaderValue::from_static("1.1 g"),
        );
        assert_eq!(
            &head[..],
            b"GET / HTTP/1.1\r\nhost: h.example:8080\r\nvia: 1.1 g\r\n\r\n"
        );
        assert_eq!(RequestHead::parse(&head)?.header_count("content-length"), 0);
        Ok(())
    }
}
