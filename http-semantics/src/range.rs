//! Byte ranges (RFC 9110, section 14): the `Range` field's syntax, and
//! whether one range is satisfiable in a representation of a given length.
//!
//! Both daemons serve a single range and answer a request for several with the
//! whole representation (section 14.2 lets a server ignore Range), so the
//! parser counts ranges but resolves only the first.

/// Most ranges read from one Range field. A single range is served (several
/// are answered with the whole representation), so this only bounds the work
/// spent on a hostile field; a longer set is ignored like an invalid one.
pub const MAX_RANGES: usize = 64;

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

/// A byte range outside the representation (RFC 9110, section 14.1.1): the
/// answer is 416.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable;

/// A Range field value read for one representation of `len` bytes:
/// `Some(Ok((start, end)))` for one satisfiable range (`end` exclusive),
/// `Some(Err(Unsatisfiable))` for one that is not, `None` when the field is to
/// be ignored (not a valid `bytes` range set, or several ranges).
pub fn parse_single_range(value: &[u8], len: u64) -> Option<Result<(u64, u64), Unsatisfiable>> {
    match parse_range(value)? {
        // `last < len`, so `last + 1` cannot overflow.
        RangeRequest::Single(spec) => Some(
            spec.resolve(len)
                .map(|(first, last)| (first, last + 1))
                .ok_or(Unsatisfiable),
        ),
        RangeRequest::Multiple(_) => None,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn single_ranges() {
        assert_eq!(parse_single_range(b"bytes=0-0", 1), Some(Ok((0, 1))));
        assert_eq!(parse_single_range(b"bytes=-0", 5), Some(Err(Unsatisfiable)));
        assert_eq!(parse_single_range(b"bytes=3-2", 5), None);
        assert_eq!(parse_single_range(b"bytes=a-2", 5), None);
        assert_eq!(parse_single_range(b"bytes=-9", 5), Some(Ok((0, 5))));
        assert_eq!(parse_single_range(b"bytes=0-", 0), Some(Err(Unsatisfiable)));
        assert_eq!(parse_single_range(b"bytes=5-", 5), Some(Err(Unsatisfiable)));
        assert_eq!(parse_single_range(b"bytes=0-1,4-5", 9), None);
        // Past any end: a number too large for u64 keeps its meaning.
        assert_eq!(
            parse_single_range(b"bytes=0-99999999999999999999999", 9),
            Some(Ok((0, 9)))
        );
        assert_eq!(
            parse_single_range(b"bytes=99999999999999999999999-", 9),
            Some(Err(Unsatisfiable))
        );
    }
}
