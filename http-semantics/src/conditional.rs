//! Validators and conditional requests (RFC 9110, section 13): entity tags
//! and their lists, the two comparisons, the date preconditions and If-Range,
//! as pure functions of the request's fields and the representation's
//! [`Validators`].
//!
//! The origin evaluates every precondition of a GET or HEAD on a file
//! ([`evaluate_preconditions`]); the gateway's cache answers a browser's
//! If-None-Match and If-Modified-Since from a stored response
//! ([`not_modified`]). Both read If-Range with [`if_range_holds`].
//!
//! # A malformed entity-tag list
//!
//! `If-Match` and `If-None-Match` are `"*" / #entity-tag` (sections 13.1.1,
//! 13.1.2), with the list rule of section 5.6.1: elements separated by commas
//! with optional whitespace, and empty elements accepted (5.6.1.2). An
//! `entity-tag` is `[ "W/" ] DQUOTE *etagc DQUOTE` (section 8.8.3), where an
//! `etagc` is `%x21 / %x23-7E / obs-text`: no space, no DQUOTE.
//!
//! A field value that does not match that grammar (`"a", b`, `"x y"`, an
//! unclosed quote, `*` beside a tag) is read as a whole as *malformed*; no
//! element of it is recovered. RFC 9110 lets a recipient try to recover a
//! usable element from an invalid construct (section 2.4: "MAY"), but does not
//! require it, and the safe answer is different for the two fields:
//!
//! - a malformed `If-Match` is false (412): its condition cannot be shown
//!   true, and section 13.1.1 forbids performing the method when it is false;
//! - a malformed `If-None-Match` matches nothing (the full response, 200):
//!   a full response is correct whatever the client's cache holds, whereas a
//!   304 built on a guess at what the client meant may leave it with a
//!   representation it does not have.
//!
//! Both daemons decide the same way, so a browser gets the same answer from
//! the gateway's cache as from the origin (before, the gateway recovered the
//! elements it could read, and answered 304 where the origin answered 200).
//! The exact bytes are in the tests
//! (`malformed_lists_are_read_whole`).
//!
//! The lines of a repeated field are one list (section 5.3); a date field
//! (`If-Modified-Since`, `If-Unmodified-Since`) is read only when it appears
//! once and is a valid HTTP-date, and ignored otherwise (sections 13.1.3,
//! 13.1.4).

use std::borrow::Cow;

use http::header::{IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE};
use http::{HeaderMap, HeaderName, HeaderValue, Method};

/// One entity tag: whether it is weak, and its opaque part (quotes included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl<'a> EntityTag<'a> {
    /// Exactly one `entity-tag` (section 8.8.3), whitespace around it allowed;
    /// `None` when the value is anything else (a list, a bare word).
    pub fn parse(value: &'a [u8]) -> Option<Self> {
        let (tag, rest) = split_tag(value.trim_ascii())?;
        rest.is_empty().then_some(tag)
    }

    /// Whether it is weak (`W/` prefix).
    pub fn is_weak(&self) -> bool {
        self.weak
    }

    /// The opaque tag, quotes included.
    pub fn opaque(&self) -> &'a [u8] {
        self.opaque
    }

    /// Strong comparison (section 8.8.3.2): both strong, same opaque tag.
    pub fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }

    /// Weak comparison (section 8.8.3.2): same opaque tag, either weak or not.
    pub fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }
}

/// The first entity tag at the start of `value`, and what follows it.
fn split_tag(value: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    let (weak, body) = match value.strip_prefix(b"W/") {
        Some(after) => (true, after),
        None => (false, value),
    };
    let inner = body.strip_prefix(b"\"")?;
    let close = inner.iter().position(|&b| b == b'"')?;
    if !inner[..close].iter().all(|&b| is_etagc(b)) {
        return None;
    }
    let opaque = body.get(..close + 2)?;
    Some((EntityTag { weak, opaque }, body.get(close + 2..)?))
}

/// `etagc = %x21 / %x23-7E / obs-text` (section 8.8.3).
fn is_etagc(b: u8) -> bool {
    b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80
}

/// An `If-Match` or `If-None-Match` field value that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtagList<'a> {
    /// `*`: any current representation.
    Any,
    /// The listed tags, in order (possibly none: `#` allows an empty list).
    Tags(Vec<EntityTag<'a>>),
}

impl EtagList<'_> {
    /// Whether the list matches a representation whose entity tag is `ours`,
    /// by `compare` (strong for If-Match, weak for If-None-Match).
    fn matches(&self, ours: Option<&EntityTag<'_>>, compare: Compare) -> bool {
        match self {
            EtagList::Any => true,
            EtagList::Tags(tags) => ours.is_some_and(|ours| {
                tags.iter().any(|tag| match compare {
                    Compare::Strong => tag.strong_eq(ours),
                    Compare::Weak => tag.weak_eq(ours),
                })
            }),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Compare {
    Strong,
    Weak,
}

/// Parses `"*" / #entity-tag` (sections 13.1.1, 13.1.2; list rule of section
/// 5.6.1, empty elements allowed). `None` when the value is malformed: see the
/// module docs for what that means.
pub fn parse_etag_list(value: &[u8]) -> Option<EtagList<'_>> {
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
            return Some(EtagList::Tags(tags));
        }
        let (tag, after) = split_tag(rest)?;
        tags.push(tag);
        rest = after.trim_ascii_start();
        if !(rest.is_empty() || rest.starts_with(b",")) {
            return None;
        }
    }
}

/// The validators of the selected representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Validators<'a> {
    /// Its entity tag, if it has a valid one.
    pub etag: Option<EntityTag<'a>>,
    /// Its modification date, whole seconds since the Unix epoch (what an
    /// HTTP-date can express), if known.
    pub last_modified: Option<u64>,
}

/// The outcome of the preconditions of a request (section 13.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition, or all true: perform the method.
    Proceed,
    /// If-None-Match or If-Modified-Since said the client's copy is current:
    /// 304.
    NotModified,
    /// If-Match or If-Unmodified-Since failed, or If-None-Match matched on a
    /// method other than GET or HEAD: 412.
    Failed,
}

/// Evaluates the preconditions of `request` in the order of section 13.2.2,
/// for a resource whose current representation has `validators`.
pub fn evaluate_preconditions(
    method: &Method,
    request: &HeaderMap,
    validators: &Validators<'_>,
) -> Precondition {
    if let Some(value) = field_list(request, &IF_MATCH) {
        let matched = parse_etag_list(&value)
            .is_some_and(|list| list.matches(validators.etag.as_ref(), Compare::Strong));
        if !matched {
            return Precondition::Failed;
        }
    } else if let Some(since) = single_date(request, &IF_UNMODIFIED_SINCE)
        && validators.last_modified.is_some_and(|lm| lm > since)
    {
        return Precondition::Failed;
    }
    let safe = method == Method::GET || method == Method::HEAD;
    match none_match(request, validators) {
        Some(true) if safe => Precondition::NotModified,
        Some(true) => Precondition::Failed,
        Some(false) => Precondition::Proceed,
        None if safe && modified_since_holds(request, validators) => Precondition::NotModified,
        None => Precondition::Proceed,
    }
}

/// Whether a GET or HEAD is answered 304 (steps 3 and 4 of section 13.2.2):
/// If-None-Match by weak comparison when present, else If-Modified-Since.
/// If-Match and If-Unmodified-Since are not read: a cache passes a request
/// with them on rather than answering it.
pub fn not_modified(request: &HeaderMap, validators: &Validators<'_>) -> bool {
    none_match(request, validators).unwrap_or_else(|| modified_since_holds(request, validators))
}

/// `Some(matched)` when If-None-Match is present (a malformed one matches
/// nothing), `None` when it is absent.
fn none_match(request: &HeaderMap, validators: &Validators<'_>) -> Option<bool> {
    let value = field_list(request, &IF_NONE_MATCH)?;
    Some(
        parse_etag_list(&value)
            .is_some_and(|list| list.matches(validators.etag.as_ref(), Compare::Weak)),
    )
}

/// If-Modified-Since is present once, valid, and not older than the
/// representation's modification date.
fn modified_since_holds(request: &HeaderMap, validators: &Validators<'_>) -> bool {
    single_date(request, &IF_MODIFIED_SINCE)
        .zip(validators.last_modified)
        .is_some_and(|(since, lm)| lm <= since)
}

/// Whether a Range may be honoured under If-Range (section 13.1.5): true when
/// If-Range is absent, or names the current entity tag (strong comparison), or
/// is exactly the current modification date. Anything else (a weak tag, a
/// list, another date, a repeated field, garbage) means "send the whole
/// representation".
pub fn if_range_holds(request: &HeaderMap, validators: &Validators<'_>) -> bool {
    let mut lines = request.get_all(IF_RANGE).iter();
    let Some(value) = lines.next() else {
        return true;
    };
    if lines.next().is_some() {
        return false;
    }
    let bytes = value.as_bytes();
    if bytes.starts_with(b"\"") || bytes.starts_with(b"W/") {
        return EntityTag::parse(bytes)
            .zip(validators.etag)
            .is_some_and(|(theirs, ours)| theirs.strong_eq(&ours));
    }
    http_date_secs(value)
        .zip(validators.last_modified)
        .is_some_and(|(date, lm)| date == lm)
}

/// A field value as an HTTP-date (any of the three formats section 5.6.7
/// makes recipients accept), whole seconds since the Unix epoch.
pub fn http_date_secs(value: &HeaderValue) -> Option<u64> {
    let text = value.to_str().ok()?;
    let time = httpdate::parse_http_date(text.trim()).ok()?;
    Some(time.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

/// A date field that appears once and parses, as seconds since the epoch.
fn single_date(request: &HeaderMap, name: &HeaderName) -> Option<u64> {
    let mut lines = request.get_all(name).iter();
    let value = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    http_date_secs(value)
}

/// All lines of a list-valued field as one value (section 5.3: joined with
/// `", "`); `None` when the field is absent. Borrowed when there is one line.
fn field_list<'a>(request: &'a HeaderMap, name: &HeaderName) -> Option<Cow<'a, [u8]>> {
    let mut lines = request.get_all(name).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(Cow::Borrowed(first.as_bytes()));
    };
    let mut combined = first.as_bytes().to_vec();
    for value in std::iter::once(second).chain(lines) {
        combined.extend_from_slice(b", ");
        combined.extend_from_slice(value.as_bytes());
    }
    Some(Cow::Owned(combined))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &str = "\"abc-10-7\"";
    const LM: u64 = 1_700_000_000; // Tue, 14 Nov 2023 22:13:20 GMT

    fn validators() -> Validators<'static> {
        Validators {
            etag: EntityTag::parse(ETAG.as_bytes()),
            last_modified: Some(LM),
        }
    }

    fn fields(fields: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("a field name"),
                HeaderValue::from_bytes(value).expect("a field value"),
            );
        }
        map
    }

    fn eval(method: &str, request: &[(&str, &str)]) -> Precondition {
        let request: Vec<(&str, &[u8])> = request.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        evaluate_preconditions(&method, &fields(&request), &validators())
    }

    #[test]
    fn entity_tags() {
        let tag = EntityTag::parse(b" W/\"a\" ").expect("a weak tag");
        assert!(tag.is_weak());
        assert_eq!(tag.opaque(), b"\"a\"");
        let strong = EntityTag::parse(b"\"a\"").expect("a strong tag");
        assert!(tag.weak_eq(&strong) && strong.weak_eq(&tag));
        assert!(!tag.strong_eq(&strong) && !strong.strong_eq(&tag));
        assert!(strong.strong_eq(&strong));
        for bad in [
            &b""[..],
            b"a",
            b"\"a",
            b"\"a\" \"b\"",
            b"\"a\", \"b\"",
            b"w/\"a\"",
            b"\"x y\"",
        ] {
            assert_eq!(
                EntityTag::parse(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn etag_lists() {
        assert_eq!(parse_etag_list(b" * "), Some(EtagList::Any));
        let tags = |v: &'static [u8]| match parse_etag_list(v) {
            Some(EtagList::Tags(t)) => Some(t.iter().map(|t| (t.weak, t.opaque)).collect()),
            _ => None,
        };
        assert_eq!(tags(b"\"a\""), Some(vec![(false, &b"\"a\""[..])]));
        assert_eq!(
            tags(b" , W/\"a\" ,,\"\", \"b\""),
            Some(vec![
                (true, &b"\"a\""[..]),
                (false, &b"\"\""[..]),
                (false, &b"\"b\""[..])
            ])
        );
        // `#entity-tag` allows an empty list; it matches nothing.
        assert_eq!(tags(b""), Some(Vec::new()));
        assert_eq!(tags(b" , ,"), Some(Vec::new()));
        for bad in [
            &b"a"[..],
            b"\"a",
            b"\"a\"b",
            b"W/a",
            b"*, \"a\"",
            b"w/\"a\"",
            b" , W/\"a\" ,,\"\",\"x y\"",
        ] {
            assert_eq!(
                parse_etag_list(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// The case the two daemons once decided apart (module docs): a list
    /// with a valid tag that matches and an element that is not an
    /// entity-tag. Read whole as malformed: If-None-Match then matches
    /// nothing (200, never 304) and If-Match is false (412), for the origin's
    /// full evaluation and the cache's `not_modified` alike.
    #[test]
    fn malformed_lists_are_read_whole() {
        let v = validators();
        for value in [
            &b"\"abc-10-7\", garbage"[..],
            b"garbage, \"abc-10-7\"",
            b"\"abc-10-7\" \"x\"",
            b"\"abc-10-7\", \"x y\"",
            b"\"abc-10-7\", *",
            b"\"abc-10-7\", \"unclosed",
        ] {
            let shown = String::from_utf8_lossy(value);
            let none_match = fields(&[("if-none-match", value)]);
            assert!(!not_modified(&none_match, &v), "{shown}");
            assert_eq!(
                evaluate_preconditions(&Method::GET, &none_match, &v),
                Precondition::Proceed,
                "{shown}"
            );
            let if_match = fields(&[("if-match", value)]);
            assert_eq!(
                evaluate_preconditions(&Method::GET, &if_match, &v),
                Precondition::Failed,
                "{shown}"
            );
        }
        // The same tag in a well-formed list matches.
        let valid = fields(&[("if-none-match", b" , \"x\",, \"abc-10-7\" ")]);
        assert!(not_modified(&valid, &v));
        // A malformed line spoils the lines around it: they are one list.
        let lines = fields(&[
            ("if-none-match", b"\"abc-10-7\""),
            ("if-none-match", b"junk"),
        ]);
        assert!(!not_modified(&lines, &v));
    }

    #[test]
    fn if_none_match() {
        assert_eq!(eval("GET", &[]), Precondition::Proceed);
        assert_eq!(
            eval("GET", &[("If-None-Match", ETAG)]),
            Precondition::NotModified
        );
        assert_eq!(
            eval("HEAD", &[("If-None-Match", "W/\"abc-10-7\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "\"x\", \"abc-10-7\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(
                "GET",
                &[("If-None-Match", "\"x\""), ("If-None-Match", ETAG)]
            ),
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "*")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "\"other\"")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval("GET", &[("If-None-Match", "garbage")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval("DELETE", &[("If-None-Match", "*")]),
            Precondition::Failed
        );
        // A representation without an entity tag matches only `*`.
        let untagged = Validators {
            etag: None,
            last_modified: Some(LM),
        };
        assert!(!not_modified(
            &fields(&[("if-none-match", ETAG.as_bytes())]),
            &untagged
        ));
        assert!(not_modified(&fields(&[("if-none-match", b"*")]), &untagged));
    }

    #[test]
    fn if_modified_since() {
        let at = "Tue, 14 Nov 2023 22:13:20 GMT";
        let before = "Tue, 14 Nov 2023 22:13:19 GMT";
        assert_eq!(
            eval("GET", &[("If-Modified-Since", at)]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(
                "GET",
                &[("If-Modified-Since", "Wed, 15 Nov 2023 00:00:00 GMT")]
            ),
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", before)]),
            Precondition::Proceed
        );
        // RFC 850 and asctime formats are accepted.
        assert_eq!(
            eval(
                "GET",
                &[("If-Modified-Since", "Tuesday, 14-Nov-23 22:13:20 GMT")]
            ),
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", "Tue Nov 14 22:13:20 2023")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval("GET", &[("If-Modified-Since", "yesterday")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(
                "GET",
                &[("If-Modified-Since", at), ("If-Modified-Since", at)]
            ),
            Precondition::Proceed
        );
        // If-None-Match present (even not matching): If-Modified-Since is ignored.
        assert_eq!(
            eval(
                "GET",
                &[("If-None-Match", "\"other\""), ("If-Modified-Since", at)]
            ),
            Precondition::Proceed
        );
        // Not for other methods.
        assert_eq!(
            eval("POST", &[("If-Modified-Since", at)]),
            Precondition::Proceed
        );
        // Without a modification date, nothing to compare with.
        let undated = Validators {
            etag: None,
            last_modified: None,
        };
        assert!(!not_modified(
            &fields(&[("if-modified-since", at.as_bytes())]),
            &undated
        ));
    }

    #[test]
    fn if_match_and_unmodified_since() {
        assert_eq!(eval("GET", &[("If-Match", ETAG)]), Precondition::Proceed);
        assert_eq!(eval("GET", &[("If-Match", "*")]), Precondition::Proceed);
        assert_eq!(
            eval("GET", &[("If-Match", "W/\"abc-10-7\"")]),
            Precondition::Failed
        );
        assert_eq!(
            eval("GET", &[("If-Match", "\"other\"")]),
            Precondition::Failed
        );
        assert_eq!(eval("GET", &[("If-Match", "junk")]), Precondition::Failed);
        let at = "Tue, 14 Nov 2023 22:13:20 GMT";
        let before = "Tue, 14 Nov 2023 22:13:19 GMT";
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", at)]),
            Precondition::Proceed
        );
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", before)]),
            Precondition::Failed
        );
        assert_eq!(
            eval("GET", &[("If-Unmodified-Since", "junk")]),
            Precondition::Proceed
        );
        // If-Match present: If-Unmodified-Since is not evaluated.
        assert_eq!(
            eval(
                "GET",
                &[("If-Match", ETAG), ("If-Unmodified-Since", before)]
            ),
            Precondition::Proceed
        );
        // If-Match passes, then If-None-Match decides.
        assert_eq!(
            eval("GET", &[("If-Match", ETAG), ("If-None-Match", ETAG)]),
            Precondition::NotModified
        );
        // A failed If-Match wins over a matching If-None-Match.
        assert_eq!(
            eval("GET", &[("If-Match", "\"x\""), ("If-None-Match", ETAG)]),
            Precondition::Failed
        );
    }

    #[test]
    fn if_range() {
        let v = validators();
        let holds = |request: &[(&str, &[u8])]| if_range_holds(&fields(request), &v);
        assert!(holds(&[]));
        assert!(holds(&[("If-Range", ETAG.as_bytes())]));
        assert!(!holds(&[("If-Range", b"W/\"abc-10-7\"")]));
        assert!(!holds(&[("If-Range", b"\"old\"")]));
        assert!(!holds(&[("If-Range", b"\"a\", \"abc-10-7\"")]));
        assert!(holds(&[("If-Range", b"Tue, 14 Nov 2023 22:13:20 GMT")]));
        assert!(!holds(&[("If-Range", b"Tue, 14 Nov 2023 22:13:21 GMT")]));
        assert!(!holds(&[("If-Range", b"junk")]));
        assert!(!holds(&[
            ("If-Range", ETAG.as_bytes()),
            ("If-Range", ETAG.as_bytes())
        ]));
        // A weak current tag never lets a range through.
        let weak = Validators {
            etag: EntityTag::parse(b"W/\"abc-10-7\""),
            last_modified: None,
        };
        assert!(!if_range_holds(
            &fields(&[("If-Range", ETAG.as_bytes())]),
            &weak
        ));
        assert!(!if_range_holds(
            &fields(&[("If-Range", b"W/\"abc-10-7\"")]),
            &weak
        ));
    }
}
