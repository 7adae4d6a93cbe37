//! From a request target to a safe list of path segments, without touching the
//! file system.
//!
//! The target's path is split on raw `/`, then each segment is percent-decoded
//! exactly once. Everything that could step outside the root or confuse a later
//! layer is refused here: encoded separators (`%2F`, `%5C`), control characters
//! (`%00`, raw or encoded), raw `\` and `#`, bytes that are not UTF-8 after
//! decoding (which covers overlong forms such as `%C0%AE`), `.` and `..` segments,
//! and hidden segments (a leading `.`, except `.well-known`). Empty segments (`//`)
//! are merged. Symlinks are the file system's business: [`super::StaticFiles`]
//! checks the canonical path against the root.

use http::StatusCode;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// The one hidden name served: RFC 8615's well-known URIs.
const WELL_KNOWN: &str = ".well-known";

/// Characters percent-encoded when a path is written back into a Location field:
/// controls, space, and the characters with a meaning in a URL or a field.
const SEGMENT_ENCODE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}')
    .add(b'/');

/// Why a request target's path cannot name a file. [`PathError::status`] decides
/// the answer: 400 for malformed targets, 404 for paths that are well-formed but
/// name nothing this server shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The target is neither origin-form (`/path`) nor absolute-form (`http://h/path`).
    #[error("request target is not origin-form or absolute-form")]
    NotOriginForm,
    /// A `%` not followed by two hex digits.
    #[error("bad percent escape")]
    BadEscape,
    /// `%2F` or `%5C`: an encoded separator, refused rather than interpreted.
    #[error("encoded path separator")]
    EncodedSeparator,
    /// A control character (NUL included), raw or percent-encoded.
    #[error("control character in path")]
    ControlCharacter,
    /// A raw `\` or `#` in the path.
    #[error("backslash or fragment in path")]
    RawCharacter,
    /// The decoded segment is not UTF-8 (overlong encodings included).
    #[error("path is not UTF-8 after decoding")]
    NotUtf8,
    /// A `.` or `..` segment after decoding.
    #[error("dot segment in path")]
    DotSegment,
    /// A segment starting with `.` (other than `.well-known`): dotfiles are not served.
    #[error("hidden path segment")]
    Hidden,
}

impl PathError {
    /// A short code for the access log's `reason` field.
    pub fn code(&self) -> &'static str {
        match self {
            PathError::NotOriginForm => "not-origin-form",
            PathError::BadEscape => "bad-escape",
            PathError::EncodedSeparator => "encoded-separator",
            PathError::ControlCharacter => "control-character",
            PathError::RawCharacter => "raw-character",
            PathError::NotUtf8 => "not-utf8",
            PathError::DotSegment => "dot-segment",
            PathError::Hidden => "hidden",
        }
    }

    /// The status code a request refused with this error gets.
    pub fn status(&self) -> StatusCode {
        match self {
            PathError::NotOriginForm
            | PathError::BadEscape
            | PathError::EncodedSeparator
            | PathError::ControlCharacter
            | PathError::RawCharacter
            | PathError::NotUtf8 => StatusCode::BAD_REQUEST,
            PathError::DotSegment | PathError::Hidden => StatusCode::NOT_FOUND,
        }
    }
}

/// A decoded, checked URL path: segments that are safe to join under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPath {
    segments: Vec<String>,
    trailing_slash: bool,
}

impl UrlPath {
    /// Splits `target` into its checked path and its raw query (after `?`).
    pub fn from_target(target: &str) -> Result<(UrlPath, Option<&str>), PathError> {
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        let path = origin_path(path)?;
        let mut segments = Vec::new();
        for raw in path.split('/') {
            let segment = decode_segment(raw)?;
            if segment.is_empty() {
                continue;
            }
            if segment == "." || segment == ".." {
                return Err(PathError::DotSegment);
            }
            if is_hidden(&segment) {
                return Err(PathError::Hidden);
            }
            segments.push(segment);
        }
        let trailing_slash = path.ends_with('/');
        Ok((
            UrlPath {
                segments,
                trailing_slash,
            },
            query,
        ))
    }

    /// The decoded segments, none empty, `.`, `..` or hidden.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether the path names a directory (ends in `/`, or is the root).
    pub fn is_directory_form(&self) -> bool {
        self.trailing_slash || self.segments.is_empty()
    }

    /// The decoded path with single slashes, as matched by Cache-Control patterns
    /// (`/a/b.html`, `/dir/`).
    pub fn decoded(&self) -> String {
        let mut out = String::from("/");
        out.push_str(&self.segments.join("/"));
        if self.trailing_slash && !self.segments.is_empty() {
            out.push('/');
        }
        out
    }

    /// The Location of the redirect from `/dir` to `/dir/`: rebuilt from the
    /// decoded segments (re-encoded), so it always starts with a single `/` and can
    /// never become a scheme-relative `//host` URL.
    pub fn directory_location(&self, query: Option<&str>) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            out.push('/');
            out.extend(utf8_percent_encode(segment, SEGMENT_ENCODE));
        }
        out.push('/');
        if let Some(query) = query {
            out.push('?');
            out.push_str(query);
        }
        out
    }
}

/// Whether a decoded segment is a dotfile name this server hides.
pub(crate) fn is_hidden(segment: &str) -> bool {
    segment.starts_with('.') && segment != WELL_KNOWN
}

/// The path of an origin-form or absolute-form target.
fn origin_path(path: &str) -> Result<&str, PathError> {
    if path.starts_with('/') {
        return Ok(path);
    }
    let (scheme, rest) = path.split_once("://").ok_or(PathError::NotOriginForm)?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return Err(PathError::NotOriginForm);
    }
    // The authority ends at the first '/'; an absolute-form target without a path
    // means "/".
    Ok(rest.find('/').map_or("/", |i| &rest[i..]))
}

/// Percent-decodes one raw segment, once, refusing what [`PathError`] lists.
fn decode_segment(raw: &str) -> Result<String, PathError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let decoded = if b == b'%' {
            let hi = bytes.get(i + 1).and_then(|&c| hex(c));
            let lo = bytes.get(i + 2).and_then(|&c| hex(c));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathError::BadEscape);
            };
            i += 3;
            let d = hi << 4 | lo;
            if d == b'/' || d == b'\\' {
                return Err(PathError::EncodedSeparator);
            }
            d
        } else {
            if b == b'\\' || b == b'#' {
                return Err(PathError::RawCharacter);
            }
            i += 1;
            b
        };
        if decoded < 0x20 || decoded == 0x7f {
            return Err(PathError::ControlCharacter);
        }
        out.push(decoded);
    }
    String::from_utf8(out).map_err(|_| PathError::NotUtf8)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(target: &str) -> Result<Vec<String>, PathError> {
        UrlPath::from_target(target).map(|(p, _)| p.segments().to_vec())
    }

    #[test]
    fn decodes_once_and_merges_slashes() {
        assert_eq!(segments("/"), Ok(vec![]));
        assert_eq!(segments("//a///b%20c/"), Ok(vec!["a".into(), "b c".into()]));
        assert_eq!(
            segments("/%252e%252e/x"),
            Ok(vec!["%2e%2e".into(), "x".into()])
        );
        assert_eq!(segments("/caf%C3%A9"), Ok(vec!["café".into()]));
        assert_eq!(segments("/a?b/../c"), Ok(vec!["a".into()]));
        assert_eq!(
            segments("/.well-known/x"),
            Ok(vec![".well-known".into(), "x".into()])
        );
    }

    #[test]
    fn absolute_form() {
        assert_eq!(segments("http://h/a/b"), Ok(vec!["a".into(), "b".into()]));
        assert_eq!(segments("HTTPS://h"), Ok(vec![]));
        assert_eq!(segments("ftp://h/a"), Err(PathError::NotOriginForm));
        assert_eq!(segments("*"), Err(PathError::NotOriginForm));
        assert_eq!(segments("a/b"), Err(PathError::NotOriginForm));
    }

    #[test]
    fn refusals() {
        let cases = [
            ("/../etc/passwd", PathError::DotSegment),
            ("/a/./b", PathError::DotSegment),
            ("/%2e%2e/%2e%2e/etc/passwd", PathError::DotSegment),
            ("/%2E/x", PathError::DotSegment),
            ("/..%2fetc", PathError::EncodedSeparator),
            ("/a%2Fb", PathError::EncodedSeparator),
            ("/%2e%2e%5c..", PathError::EncodedSeparator),
            ("/a\\..\\b", PathError::RawCharacter),
            ("/a#frag", PathError::RawCharacter),
            ("/%00", PathError::ControlCharacter),
            ("/foo%00.html", PathError::ControlCharacter),
            ("/a%0d%0aSet-Cookie:x", PathError::ControlCharacter),
            ("/%7f", PathError::ControlCharacter),
            ("/%c0%ae%c0%ae/", PathError::NotUtf8),
            ("/%ff", PathError::NotUtf8),
            ("/%", PathError::BadEscape),
            ("/%2", PathError::BadEscape),
            ("/%zz", PathError::BadEscape),
            ("/.env", PathError::Hidden),
            ("/a/.git/config", PathError::Hidden),
            ("/%2egit", PathError::Hidden),
        ];
        for (target, error) in cases {
            assert_eq!(segments(target), Err(error), "{target}");
        }
        assert_eq!(PathError::DotSegment.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            PathError::EncodedSeparator.status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn directory_form_and_location() -> Result<(), PathError> {
        let (path, query) = UrlPath::from_target("//a%20b//c?x=1&y=%2F")?;
        assert!(!path.is_directory_form());
        assert_eq!(path.decoded(), "/a b/c");
        assert_eq!(path.directory_location(query), "/a%20b/c/?x=1&y=%2F");
        let (path, query) = UrlPath::from_target("/d/")?;
        assert!(path.is_directory_form());
        assert_eq!(path.decoded(), "/d/");
        assert_eq!(path.directory_location(query), "/d/");
        assert!(UrlPath::from_target("/")?.0.is_directory_form());
        let (path, _) = UrlPath::from_target("/q%3F%23")?;
        assert_eq!(path.directory_location(None), "/q%3F%23/");
        Ok(())
    }

    /// Random targets over an alphabet of the characters that matter: whatever is
    /// accepted has only segments that are safe to join under a root.
    #[test]
    fn accepted_segments_are_always_safe() {
        const ALPHABET: &[&str] = &[
            "/",
            ".",
            "..",
            "%",
            "2",
            "e",
            "E",
            "f",
            "F",
            "5",
            "c",
            "C",
            "0",
            "a",
            "\\",
            "#",
            "?",
            "%2e",
            "%2f",
            "%5c",
            "%00",
            "%c0%ae",
            "%25",
            "well-known",
            "x",
            "\u{e9}",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for _ in 0..20_000 {
            let len = next() % 12;
            let mut target = String::from("/");
            for _ in 0..len {
                target.push_str(ALPHABET[(next() % ALPHABET.len() as u64) as usize]);
            }
            let Ok((path, _)) = UrlPath::from_target(&target) else {
                continue;
            };
            accepted += 1;
            for segment in path.segments() {
                assert!(!segment.is_empty(), "{target}");
                assert!(segment != "." && segment != "..", "{target}");
                assert!(!segment.contains(['/', '\\', '\0']), "{target}");
                assert!(!is_hidden(segment), "{target}");
                assert!(!segment.chars().any(char::is_control), "{target}");
            }
            let location = path.directory_location(None);
            assert!(
                location.starts_with('/') && !location.starts_with("//"),
                "{target}"
            );
        }
        assert!(
            accepted > 1_000,
            "the generator should produce valid paths too"
        );
    }
}
