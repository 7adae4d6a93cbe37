//! RESPONSE_HEAD payloads into `http` response parts.
//!
//! A RESPONSE_HEAD is one whole transport message, so there is no "need more
//! bytes" state: an incomplete head is as malformed as a garbled one.

use http::header::{HeaderName, HeaderValue};
use http::response::Parts;
use http::{Response, StatusCode, Version};

/// Most header fields accepted in one response head. Heads are at most
/// `gateway_protocol::MAX_HEAD` (64 KiB) already; this bounds the parser's array.
pub const MAX_RESPONSE_HEADERS: usize = 128;

/// Parses a status line and header fields ending in CRLFCRLF, with nothing after.
/// The reason phrase is kept (as hyper's `ReasonPhrase` extension) when it is not
/// the status code's canonical one. Interim (1xx) responses are refused: the
/// protocol carries exactly one head per request.
pub fn parse_response_head(head: &[u8]) -> Result<Parts, String> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(head) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Err("head ends before its empty line".into()),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!("more than {MAX_RESPONSE_HEADERS} header fields"));
        }
        Err(e) => return Err(format!("unparsable head: {e}")),
    };
    if len != head.len() {
        return Err(format!("{} bytes after the head", head.len() - len));
    }
    let code = parsed.code.ok_or("no status code")?;
    let status = StatusCode::from_u16(code).map_err(|_| format!("status {code}"))?;
    if status.is_informational() {
        return Err(format!("interim response {code}"));
    }
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| format!("field name {:?}", field.name))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| format!("value of field {:?}", field.name))?;
        parts.headers.append(name, value);
    }
    if let Some(reason) = parsed.reason
        && !reason.is_empty()
        && Some(reason) != status.canonical_reason()
        && let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.as_bytes())
    {
        parts.extensions.insert(reason);
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_head_parses_with_every_field() {
        let parts = parse_response_head(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nset-cookie: a\r\nset-cookie: b\r\n\r\n",
        )
        .expect("valid");
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(parts.version, Version::HTTP_11);
        assert_eq!(parts.headers["content-length"], "5");
        let cookies: Vec<_> = parts.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a", "b"]);
        assert!(parts.extensions.get::<hyper::ext::ReasonPhrase>().is_none());
    }

    #[test]
    fn an_unusual_reason_phrase_is_kept() {
        let parts = parse_response_head(b"HTTP/1.0 404 Nothing Here\r\n\r\n").expect("valid");
        assert_eq!(parts.version, Version::HTTP_10);
        let reason = parts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .expect("kept");
        assert_eq!(reason.as_bytes(), b"Nothing Here");
    }

    #[test]
    fn malformed_heads_are_refused_with_a_reason() {
        let cases: [&[u8]; 7] = [
            b"",
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 200 OK\r\n\r\nbody",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"garbage\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nbad field: x\r\n\r\n",
        ];
        for head in cases {
            assert!(
                parse_response_head(head).is_err(),
                "accepted {:?}",
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
        let err = parse_response_head(&head).expect_err("too many");
        assert!(err.contains("header fields"), "{err}");
    }
}
