//! Validators, preconditions (RFC 9110 §13) and byte ranges (RFC 9110 §14), as
//! pure functions of the request and the file's metadata.

use http::Method;

use crate::http::RequestHead;

/// Most ranges read from one Range field. The origin serves a single range only
/// (several are answered with the whole representation), so this only bounds the
/// work spent on a hostile field; a longer set is ignored like an invalid one.
pub const MAX_RANGES: usize = 64;

/// The validators of one file version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// The strong entity tag, quotes included: `"<mtime ns>-<size>-<inode>"` in hex.
    pub etag: String,
    /// Modification time, whole seconds since the Unix epoch (what Last-Modified
    /// can express).
    pub last_modified: u64,
}

impl Validators {
    /// Validators from a file's modification time (seconds and nanoseconds since
    /// the epoch), size and inode.
    pub fn new(mtime_secs: i64, mtime_nsec: i64, size: u64, inode: u64) -> Validators {
        let mtime_ns = i128::from(mtime_secs) * 1_000_000_000 + i128::from(mtime_nsec);
        Validators {
            etag: format!("\"{mtime_ns:x}-{size:x}-{inode:x}\""),
            last_modified: u64::try_from(mtime_secs).unwrap_or(0),
        }
    }
}

/// The outcome of the preconditions of a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition, or all true: serve the file.
    Proceed,
    /// If-None-Match or If-Modified-Since said the client's copy is current: 304.
    NotModified,
    /// If-Match or If-Unmodified-Since failed: 412.
    Failed,
}

/// Evaluates the preconditions in the order of RFC 9110 §13.2.2 for a resource
/// that exists.
///
/// A malformed If-Match fails (the client's condition cannot be shown true); a
/// malformed If-None-Match matches nothing; an invalid or repeated date field is
/// ignored, as §13.1.3 and §13.1.4 require.
pub fn evaluate_preconditions(request: &RequestHead, validators: &Validators) -> Precondition {
    if let Some(value) = request.header_list("if-match") {
        let matched = match parse_etag_list(&value) {
            Some(EtagList::Any) => true,
            Some(EtagList::Tags(tags)) => tags.iter().any(|t| t.strong_eq(&validators.etag)),
            None => false,
        };
        if !matched {
            return Precondition::Failed;
        }
    } else if let Some(since) = single_date(request, "if-unmodified-since")
        && validators.last_modified > since
    {
        return Precondition::Failed;
    }
    let safe = request.method == Method::GET || request.method == Method::HEAD;
    if let Some(value) = request.header_list("if-none-match") {
        let matched = match parse_etag_list(&value) {
            Some(EtagList::Any) => true,
            Some(EtagList::Tags(tags)) => tags.iter().any(|t| t.weak_eq(&validators.etag)),
            None => false,
        };
        if matched {
            return if safe {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if safe
        && let Some(since) = single_date(request, "if-modified-since")
        && validators.last_modified <= since
    {
        return Precondition::NotModified;
    }
    Precondition::Proceed
}

/// Whether a Range may be honoured under If-Range (RFC 9110 §13.1.5): true when
/// If-Range is absent, or names the current entity tag (strong comparison), or is
/// exactly the current Last-Modified date. Anything else (a weak tag, another
/// date, garbage) means "send the whole representation".
pub fn if_range_allows(request: &RequestHead, validators: &Validators) -> bool {
    let Some(value) = request.header("if-range") else {
        return true;
    };
    if request.header_count("if-range") != 1 {
        return false;
    }
    let value = value.as_bytes();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return match parse_etag_list(value) {
            Some(EtagList::Tags(tags)) if tags.len() == 1 => {
                tags.iter().all(|t| t.strong_eq(&validators.etag))
            }
            _ => false,
        };
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| httpdate::parse_http_date(text).ok())
        .and_then(|date| date.duration_since(std::time::UNIX_EPOCH).ok())
        .is_some_and(|since| since.as_secs() == validators.last_modified)
}

/// A date field that appears once and parses as an HTTP-date (any of the three
/// formats RFC 9110 §5.6.7 makes recipients accept), as seconds since the epoch.
fn single_date(request: &RequestHead, name: &str) -> Option<u64> {
    if request.header_count(name) != 1 {
        return None;
    }
    let text = request.header_str(name)?;
    let time = httpdate::parse_http_date(text).ok()?;
    Some(time.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

/// One entity tag of a list: whether it is weak, and its opaque part (quotes
/// included, so it compares directly with [`Validators::etag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntityTag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl EntityTag<'_> {
    fn strong_eq(&self, ours: &str) -> bool {
        !self.weak && self.opaque == ours.as_bytes()
    }

    fn weak_eq(&self, ours: &str) -> bool {
        self.opaque == ours.as_bytes()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum EtagList<'a> {
    Any,
    Tags(Vec<EntityTag<'a>>),
}

/// Parses `"*"` or `1#entity-tag` (RFC 9110 §8.8.3, list rule of §5.6.1: empty
/// elements allowed). `None` when malformed or empty.
fn parse_etag_list(value: &[u8]) -> Option<EtagList<'_>> {
    let trimmed = value.trim_ascii();
    if trimmed == b"*" {
        return Some(EtagList::Any);
    }
    let mut tags = Vec::new();
    let mut rest = trimmed;
    loop {
        rest = rest.trim_ascii_start();
        if let Some(after) = rest.strip_prefix(b",") {
            rest = after;
            continue;
        }
        if rest.is_empty() {
            break;
        }
        let (weak, body) = match rest.strip_prefix(b"W/") {
            Some(after) => (true, after),
            None => (false, rest),
        };
        let inner = body.strip_prefix(b"\"")?;
        let close = inner.iter().position(|&b| b == b'"')?;
        let (opaque_inner, after) = inner.split_at(close);
        if !opaque_inner
            .iter()
            .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
        {
            return None;
        }
        tags.push(EntityTag {
            weak,
            opaque: body.get(..close + 2)?,
        });
        rest = after.get(1..)?.trim_ascii_start();
        if !(rest.is_empty() || rest.starts_with(b",")) {
            return None;
        }
    }
    if tags.is_empty() {
        None
    } else {
        Some(EtagList::Tags(tags))
    }
}

/// One syntactically valid byte-range-spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last` (inclusive; last ≥ first).
    FromTo(u64, u64),
    /// `first-`: from first to the end.
    From(u64),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

impl RangeSpec {
    /// The inclusive byte range this spec selects in a representation of `len`
    /// bytes, or `None` when unsatisfiable (RFC 9110 §14.1.1: a first position at
    /// or past the end, a zero suffix, or an empty representation).
    pub fn resolve(self, len: u64) -> Option<(u64, u64)> {
        let last = len.checked_sub(1)?;
        match self {
            RangeSpec::FromTo(first, end) if first <= last => Some((first, end.min(last))),
            RangeSpec::From(first) if first <= last => Some((first, last)),
            RangeSpec::Suffix(n) if n > 0 => Some((len - n.min(len), last)),
            _ => None,
        }
    }
}

/// A Range field that parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeRequest {
    /// Exactly one range: served as 206, or 416 when unsatisfiable.
    Single(RangeSpec),
    /// Several ranges (how many): the whole representation is served (200).
    Multiple(usize),
}

/// Parses a Range field value (`bytes=` range-set, RFC 9110 §14.1.2; the unit is
/// case-insensitive). `None` when the field is not a valid `bytes` range set or
/// has more than [`MAX_RANGES`] ranges: the caller then ignores it. Numbers too
/// large for u64 saturate, which keeps their meaning (past any end).
pub fn parse_range(value: &[u8]) -> Option<RangeRequest> {
    let eq = value.iter().position(|&b| b == b'=')?;
    let (unit, set) = value.split_at(eq);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let mut first = None;
    let mut count = 0usize;
    for element in set.get(1..)?.split(|&b| b == b',') {
        let element = element.trim_ascii();
        if element.is_empty() {
            continue;
        }
        let spec = parse_range_spec(element)?;
        count += 1;
        if count > MAX_RANGES {
            return None;
        }
        first.get_or_insert(spec);
    }
    match (first, count) {
        (Some(spec), 1) => Some(RangeRequest::Single(spec)),
        (Some(_), n) => Some(RangeRequest::Multiple(n)),
        (None, _) => None,
    }
}

fn parse_range_spec(element: &[u8]) -> Option<RangeSpec> {
    let dash = element.iter().position(|&b| b == b'-')?;
    let (first, last) = element.split_at(dash);
    let last = last.get(1..)?;
    match (first.is_empty(), last.is_empty()) {
        (true, false) => Some(RangeSpec::Suffix(digits(last)?)),
        (false, true) => Some(RangeSpec::From(digits(first)?)),
        (false, false) => {
            let (first, last) = (digits(first)?, digits(last)?);
            (last >= first).then_some(RangeSpec::FromTo(first, last))
        }
        (true, true) => None,
    }
}

/// `1*DIGIT` as u64, saturating.
fn digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpError;

    const ETAG: &str = "\"abc-10-7\"";
    const LM: u64 = 1_700_000_000; // Tue, 14 Nov 2023 22:13:20 GMT

    fn validators() -> Validators {
        Validators {
            etag: ETAG.into(),
            last_modified: LM,
        }
    }

    fn request(method: &str, fields: &[(&str, &str)]) -> Result<RequestHead, HttpError> {
        let mut text = format!("{method} /f HTTP/1.1\r\nHost: h\r\n");
        for (name, value) in fields {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str("\r\n");
        RequestHead::parse(text.as_bytes())
    }

    fn eval(method: &str, fields: &[(&str, &str)]) -> Result<Precondition, HttpError> {
        Ok(evaluate_preconditions(
            &request(method, fields)?,
            &validators(),
        ))
    }

    #[test]
    fn etag_format() {
        let v = Validators::new(1_700_000_000, 123, 4096, 42);
        assert_eq!(v.etag, "\"17979cfe362a007b-1000-2a\"");
        assert_eq!(v.last_modified, 1_700_000_000);
        assert_eq!(Validators::new(-5, 0, 0, 0).last_modified, 0);
    }

    #[test]
    fn etag_lists() {
        assert_eq!(parse_etag_list(b" * "), Some(EtagList::Any));
        let tags = |v: &'static [u8]| match parse_etag_list(v) {
            Some(EtagList::Tags(t)) => t.iter().map(|t| (t.weak, t.opaque)).collect(),
            _ => Vec::new(),
        };
        assert_eq!(tags(b"\"a\""), vec![(false, &b"\"a\""[..])]);
        assert_eq!(
            tags(b" , W/\"a\" ,,\"\",\"x y\""),
            Vec::<(bool, &[u8])>::new(),
            "space is not an etagc"
        );
        assert_eq!(
            tags(b" , W/\"a\" ,,\"\", \"b\""),
            vec![
                (true, &b"\"a\""[..]),
                (false, &b"\"\""[..]),
                (false, &b"\"b\""[..])
            ]
        );
        for bad in [
            &b""[..],
            b",",
            b"a",
            b"\"a",
            b"\"a\"b",
            b"W/a",
            b"*, \"a\"",
            b"w/\"a\"",
        ] {
            assert_eq!(
                parse_etag_list(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn if_none_match() -> Result<(), HttpError> {
        assert_eq!(eval("GET", &[])?, Precondition::Proceed);
        assert_eq!(
            eval("GET", &[("If-None-Match", ETAG)])?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("HEAD", &[("If-None-Match", "W/\"abc-10-7\"")])?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "\"x\", \"abc-10-7\"")])?,
            Precondition::NotModified
        );
        assert_eq!(
            eval(
                "GET",
                &[("If-None-Match", "\"x\""), ("If-None-Match", ETAG)]
            )?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "*")])?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "\"other\"")])?,
            Precondition::Proceed
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "garbage")])?,
            Precondition::Proceed
        );
        assert_eq!(
            eval("DELETE", &[("If-None-Match", "*")])?,
            Precondition::Failed
        );
        Ok(())
    }

    #[test]
    fn if_modified_since() -> Result<(), HttpError> {
        let at = "Tue, 14 Nov 2023 22:13:20 GMT";
        let before = "Tue, 14 Nov 2023 22:13:19 GMT";
        assert_eq!(
            eval("GET", &[("If-Modified-Since", at)])?,
            Precondition::NotModified
        );
        assert_eq!(
            eval(
                "GET",
                &[("If-Modified-Since", "Wed, 15 Nov 2023 00:00:00 GMT")]
            )?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", before)])?,
            Precondition::Proceed
        );
        // RFC 850 and asctime formats are accepted.
        assert_eq!(
            eval(
                "GET",
                &[("If-Modified-Since", "Tuesday, 14-Nov-23 22:13:20 GMT")]
            )?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", "Tue Nov 14 22:13:20 2023")])?,
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", "yesterday")])?,
            Precondition::Proceed
        );
        assert_eq!(
            eval(
                "GET",
                &[("If-Modified-Since", at), ("If-Modified-Since", at)]
            )?,
            Precondition::Proceed
        );
        // If-None-Match present (even not matching): If-Modified-Since is ignored.
        assert_eq!(
            eval(
                "GET",
                &[("If-None-Match", "\"other\""), ("If-Modified-Since", at)]
            )?,
            Precondition::Proceed
        );
        // Not for other methods.
        assert_eq!(
            eval("POST", &[("If-Modified-Since", at)])?,
            Precondition::Proceed
        );
        Ok(())
    }

    #[test]
    fn if_match_and_unmodified_since() -> Result<(), HttpError> {
        assert_eq!(eval("GET", &[("If-Match", ETAG)])?, Precondition::Proceed);
        assert_eq!(eval("GET", &[("If-Match", "*")])?, Precondition::Proceed);
        assert_eq!(
            eval("GET", &[("If-Match", "W/\"abc-10-7\"")])?,
            Precondition::Failed
        );
        assert_eq!(
            eval("GET", &[("If-Match", "\"other\"")])?,
            Precondition::Failed
        );
        assert_eq!(eval("GET", &[("If-Match", "junk")])?, Precondition::Failed);
        let at = "Tue, 14 Nov 2023 22:13:20 GMT";
        let before = "Tue, 14 Nov 2023 22:13:19 GMT";
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", at)])?,
            Precondition::Proceed
        );
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", before)])?,
            Precondition::Failed
        );
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", "junk")])?,
            Precondition::Proceed
        );
        // If-Match present: If-Unmodified-Since is not evaluated.
        assert_eq!(
            eval(
                "GET",
                &[("If-Match", ETAG), ("If-Unmodified-Since", before)]
            )?,
            Precondition::Proceed
        );
        // If-Match passes, then If-None-Match decides.
        assert_eq!(
            eval("GET", &[("If-Match", ETAG), ("If-None-Match", ETAG)])?,
            Precondition::NotModified
        );
        // A failed If-Match wins over a matching If-None-Match.
        assert_eq!(
            eval("GET", &[("If-Match", "\"x\""), ("If-None-Match", ETAG)])?,
            Precondition::Failed
        );
        Ok(())
    }

    #[test]
    fn if_range() -> Result<(), HttpError> {
        let v = validators();
        let allows = |fields: &[(&str, &str)]| -> Result<bool, HttpError> {
            Ok(if_range_allows(&request("GET", fields)?, &v))
        };
        assert!(allows(&[])?);
        assert!(allows(&[("If-Range", ETAG)])?);
        assert!(!allows(&[("If-Range", "W/\"abc-10-7\"")])?);
        assert!(!allows(&[("If-Range", "\"old\"")])?);
        assert!(!allows(&[("If-Range", "\"a\", \"abc-10-7\"")])?);
        assert!(allows(&[("If-Range", "Tue, 14 Nov 2023 22:13:20 GMT")])?);
        assert!(!allows(&[("If-Range", "Tue, 14 Nov 2023 22:13:21 GMT")])?);
        assert!(!allows(&[("If-Range", "junk")])?);
        assert!(!allows(&[("If-Range", ETAG), ("If-Range", ETAG)])?);
        Ok(())
    }

    #[test]
    fn range_syntax() {
        use RangeRequest::*;
        use RangeSpec::*;
        let ok = [
            (&b"bytes=0-499"[..], Single(FromTo(0, 499))),
            (b"bytes=500-", Single(From(500))),
            (b"bytes=-500", Single(Suffix(500))),
            (b"Bytes=007-7", Single(FromTo(7, 7))),
            (b"bytes= 1-2 ,", Single(FromTo(1, 2))),
            (b"bytes=0-0,-1", Multiple(2)),
            (b"bytes=0-1, 5-6, 9-", Multiple(3)),
            (b"bytes=-0", Single(Suffix(0))),
            (b"bytes=99999999999999999999999-", Single(From(u64::MAX))),
        ];
        for (value, expected) in ok {
            assert_eq!(
                parse_range(value),
                Some(expected),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
        let many = format!("bytes={}", "0-1,".repeat(MAX_RANGES + 1));
        let bad: Vec<&[u8]> = vec![
            b"bytes=5-4",
            b"bytes=-",
            b"bytes=",
            b"bytes=,",
            b"bytes=a-b",
            b"bytes=1-2-3",
            b"bytes=+1-2",
            b"bytes=1 -2",
            b"items=0-1",
            b"bytes 0-1",
            b"0-1",
            b"bytes=0-1,x",
            many.as_bytes(),
        ];
        for value in bad {
            assert_eq!(
                parse_range(value),
                None,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn range_resolution() {
        use RangeSpec::*;
        assert_eq!(FromTo(0, 9).resolve(100), Some((0, 9)));
        assert_eq!(FromTo(90, 200).resolve(100), Some((90, 99)));
        assert_eq!(FromTo(99, 99).resolve(100), Some((99, 99)));
        assert_eq!(FromTo(100, 200).resolve(100), None);
        assert_eq!(From(50).resolve(100), Some((50, 99)));
        assert_eq!(From(100).resolve(100), None);
        assert_eq!(Suffix(10).resolve(100), Some((90, 99)));
        assert_eq!(Suffix(1000).resolve(100), Some((0, 99)));
        assert_eq!(Suffix(0).resolve(100), None);
        assert_eq!(From(0).resolve(0), None);
        assert_eq!(Suffix(5).resolve(0), None);
    }

    /// Random Range values: parsing never panics, and a resolved single range
    /// always lies inside the file.
    #[test]
    fn random_ranges_resolve_inside_the_file() {
        const NUMBERS: &[&str] = &[
            "",
            "0",
            "1",
            "7",
            "12",
            "13",
            "14",
            "007",
            "18446744073709551615",
            "99999999999999999999",
            "x",
            " 3",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut number = move || NUMBERS[(next() % NUMBERS.len() as u64) as usize];
        let mut singles = 0;
        for i in 0..20_000 {
            let mut value = format!("bytes={}-{}", number(), number());
            if i % 4 == 0 {
                value.push_str(&format!(",{}-{}", number(), number()));
            }
            let Some(RangeRequest::Single(spec)) = parse_range(value.as_bytes()) else {
                continue;
            };
            singles += 1;
            for len in [0u64, 1, 13, u64::MAX] {
                if let Some((first, last)) = spec.resolve(len) {
                    assert!(first <= last && last < len, "{value}: {spec:?} in {len}");
                }
            }
        }
        assert!(
            singles > 1_000,
            "the generator produced only {singles} single ranges"
        );
    }
}
