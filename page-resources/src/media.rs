//! Media queries and `sizes` evaluated for one imagined browser window, so
//! that `<picture>`, `srcset` and `preload media=` pick what that browser
//! would. No crate evaluates media queries outside a browser engine; this is
//! the subset pages use for images (docs/prefetch.md lists it), tokenized by
//! cssparser. Anything it does not understand is false, as the Media Queries
//! spec has unknown features and invalid queries evaluate.

use cssparser::{ParseError, Parser, Token};

/// Pixels per `em`/`rem`: the browsers' default font size.
const EM_PX: f64 = 16.0;

type Result<T> = std::result::Result<T, ParseError<()>>;

/// The window the gateway imagines: device-pixel-ratio 1, landscape 16:9,
/// light colour scheme, a fine pointer that can hover.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Viewport {
    /// CSS pixels.
    pub(crate) width: f64,
    /// CSS pixels.
    pub(crate) height: f64,
}

impl Viewport {
    /// A 16:9 window `width` CSS pixels wide.
    pub(crate) fn new(width: u32) -> Self {
        let width = f64::from(width);
        Self {
            width,
            height: (width * 9.0 / 16.0).round(),
        }
    }

    /// Device pixels per CSS pixel.
    pub(crate) const DPR: f64 = 1.0;
}

/// Whether a media query list (`media=` of `<source>`, `<link>`) matches.
/// An absent or empty list matches; a list matches when any query does.
pub(crate) fn media_matches(list: &str, viewport: Viewport) -> bool {
    if list.trim().is_empty() {
        return true;
    }
    let mut parser = Parser::new(list);
    parser
        .parse_comma_separated_ignoring_errors(|p| query(p, viewport))
        .into_iter()
        .any(|m| m)
}

/// The image's layout width in CSS pixels from a `sizes` attribute (HTML:
/// "parse a sizes attribute"): the size of the first entry whose condition
/// matches; entries that do not parse are skipped; `100vw` when none applies.
pub(crate) fn source_size(sizes: Option<&str>, viewport: Viewport) -> f64 {
    let Some(sizes) = sizes else {
        return viewport.width;
    };
    let mut parser = Parser::new(sizes);
    parser
        .parse_comma_separated_ignoring_errors(|p| size_entry(p, viewport))
        .into_iter()
        .flatten()
        .next()
        .unwrap_or(viewport.width)
}

/// One `sizes` entry: `Some(px)` when it applies.
fn size_entry<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<Option<f64>> {
    if let Ok(size) = p.try_parse(|p| size_value(p, viewport)) {
        return Ok(Some(size));
    }
    let matches = condition(p, viewport, true)?;
    let size = size_value(p, viewport)?;
    Ok(matches.then_some(size))
}

/// The size part of an entry, which must end it: a non-negative length, or
/// `auto` (layout width, unknown here: the viewport's).
fn size_value<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<f64> {
    let size = if p.try_parse(|p| p.expect_ident_matching("auto")).is_ok() {
        viewport.width
    } else {
        length(p, viewport)?
    };
    p.expect_exhausted()?;
    if size < 0.0 {
        return Err(p.new_error_for_next_token());
    }
    Ok(size)
}

/// `<media-query>`: a condition, or `[not | only]? <type> [and <condition>]?`.
fn query<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<bool> {
    if let Ok(matches) = p.try_parse(|p| {
        let m = condition(p, viewport, true)?;
        p.expect_exhausted()?;
        Ok::<_, ParseError<()>>(m)
    }) {
        return Ok(matches);
    }
    let mut ident = p.expect_ident_cloned()?;
    let mut negate = false;
    if ident.eq_ignore_ascii_case("not") {
        negate = true;
        ident = p.expect_ident_cloned()?;
    } else if ident.eq_ignore_ascii_case("only") {
        ident = p.expect_ident_cloned()?;
    }
    let media_type = ident.to_ascii_lowercase();
    if matches!(media_type.as_str(), "not" | "only" | "and" | "or" | "layer") {
        return Err(p.new_error_for_next_token());
    }
    let mut matches = matches!(media_type.as_str(), "all" | "screen");
    if !p.is_exhausted() {
        p.expect_ident_matching("and")?;
        matches &= condition(p, viewport, false)?;
    }
    p.expect_exhausted()?;
    Ok(matches != negate)
}

/// `<media-condition>`: `not <in-parens>`, or in-parens joined by all `and`
/// or (where allowed) all `or`.
fn condition<'i>(p: &mut Parser<'i>, viewport: Viewport, allow_or: bool) -> Result<bool> {
    if p.try_parse(|p| p.expect_ident_matching("not")).is_ok() {
        return Ok(!in_parens(p, viewport)?);
    }
    let mut result = in_parens(p, viewport)?;
    let mut joiner: Option<bool> = None; // Some(true): and, Some(false): or
    loop {
        let state = p.state();
        let is_and = match p.next() {
            Ok(Token::Ident(word)) if word.eq_ignore_ascii_case("and") => true,
            Ok(Token::Ident(word)) if allow_or && word.eq_ignore_ascii_case("or") => false,
            _ => {
                p.reset(&state);
                return Ok(result);
            }
        };
        if joiner.is_some_and(|j| j != is_and) {
            // `a and b or c` is invalid without parentheses.
            return Err(p.new_error_for_next_token());
        }
        joiner = Some(is_and);
        let next = in_parens(p, viewport)?;
        result = if is_and {
            result && next
        } else {
            result || next
        };
    }
}

/// `( <condition> )`, `( <feature> )`, or anything else in parentheses
/// (general-enclosed: false).
fn in_parens<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<bool> {
    p.expect_parenthesis_block()?;
    p.parse_nested_block(|p| {
        if let Ok(m) = p.try_parse(|p| {
            let m = condition(p, viewport, true)?;
            p.expect_exhausted()?;
            Ok::<_, ParseError<()>>(m)
        }) {
            return Ok(m);
        }
        if let Ok(m) = p.try_parse(|p| {
            let m = feature(p, viewport)?;
            p.expect_exhausted()?;
            Ok::<_, ParseError<()>>(m)
        }) {
            return Ok(m);
        }
        while p.next().is_ok() {}
        Ok(false)
    })
}

/// A feature's value as written.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// A length, in CSS pixels (a unitless 0 included).
    Length(f64),
    /// A plain number.
    Number(f64),
    /// A resolution, in dots per CSS pixel.
    Resolution(f64),
    /// A keyword, lower-case.
    Ident(String),
}

/// `(name)`, `(name: value)`, `(name op value)`, `(value op name)` or
/// `(value op name op value)`.
fn feature<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<bool> {
    if let Ok(name) = p.try_parse(|p| p.expect_ident_cloned()) {
        let name = name.to_ascii_lowercase();
        if p.is_exhausted() {
            return Ok(boolean(&name, viewport));
        }
        if p.try_parse(|p| p.expect_colon()).is_ok() {
            let value = value(p, viewport)?;
            let (name, op) = if let Some(n) = name.strip_prefix("min-") {
                (n, Op::Ge)
            } else if let Some(n) = name.strip_prefix("max-") {
                (n, Op::Le)
            } else {
                (name.as_str(), Op::Eq)
            };
            return Ok(compare(name, op, &value, viewport));
        }
        let op = operator(p)?;
        let value = value(p, viewport)?;
        return Ok(compare(&name, op, &value, viewport));
    }
    let left = value(p, viewport)?;
    let op = operator(p)?;
    let name = p.expect_ident_cloned()?.to_ascii_lowercase();
    let mut matches = compare(&name, op.flip(), &left, viewport);
    if !p.is_exhausted() {
        let op = operator(p)?;
        let right = value(p, viewport)?;
        matches &= compare(&name, op, &right, viewport);
    }
    Ok(matches)
}

/// A range comparison, read as `feature OP value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
}

impl Op {
    /// The operator with its operands swapped (`v < f` is `f > v`).
    fn flip(self) -> Self {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Eq => Op::Eq,
            Op::Ge => Op::Le,
            Op::Gt => Op::Lt,
        }
    }

    fn holds(self, actual: f64, wanted: f64) -> bool {
        match self {
            Op::Lt => actual < wanted,
            Op::Le => actual <= wanted,
            Op::Eq => actual == wanted,
            Op::Ge => actual >= wanted,
            Op::Gt => actual > wanted,
        }
    }
}

fn operator<'i>(p: &mut Parser<'i>) -> Result<Op> {
    let first = match p.next()? {
        Token::Delim(c @ ('<' | '>' | '=')) => *c,
        _ => return Err(p.new_error_for_next_token()),
    };
    if first == '=' {
        return Ok(Op::Eq);
    }
    // `<=` and `>=` are two delimiters with nothing between them.
    let state = p.state();
    let or_equal = matches!(p.next_including_whitespace(), Ok(Token::Delim('=')));
    if !or_equal {
        p.reset(&state);
    }
    Ok(match (first, or_equal) {
        ('<', false) => Op::Lt,
        ('<', true) => Op::Le,
        ('>', false) => Op::Gt,
        _ => Op::Ge,
    })
}

fn value<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<Value> {
    if let Ok(px) = p.try_parse(|p| length(p, viewport)) {
        return Ok(Value::Length(px));
    }
    let token = p.next()?.clone();
    match token {
        Token::Number { value, .. } => Ok(Value::Number(f64::from(value))),
        Token::Dimension { value, unit, .. } => {
            let dots = match unit.to_ascii_lowercase().as_str() {
                "dppx" | "x" => 1.0,
                "dpi" => 1.0 / 96.0,
                "dpcm" => 2.54 / 96.0,
                _ => return Err(p.new_error_for_next_token()),
            };
            Ok(Value::Resolution(f64::from(value) * dots))
        }
        Token::Ident(ident) => Ok(Value::Ident(ident.to_ascii_lowercase())),
        _ => Err(p.new_error_for_next_token()),
    }
}

/// `(name)` alone: true when the feature's value is not zero or `none`.
fn boolean(name: &str, viewport: Viewport) -> bool {
    match name {
        "width" | "height" | "device-width" | "device-height" => viewport.width > 0.0,
        "color" | "hover" | "any-hover" | "pointer" | "any-pointer" | "resolution" => true,
        "orientation" | "aspect-ratio" | "display-mode" | "scripting" | "update" => true,
        _ => false,
    }
}

/// Whether the imagined browser satisfies `name op value`.
fn compare(name: &str, op: Op, value: &Value, viewport: Viewport) -> bool {
    match (name, value) {
        ("width" | "device-width", Value::Length(px)) => op.holds(viewport.width, *px),
        ("height" | "device-height", Value::Length(px)) => op.holds(viewport.height, *px),
        ("resolution", Value::Resolution(dppx)) => op.holds(Viewport::DPR, *dppx),
        (
            "-webkit-device-pixel-ratio" | "device-pixel-ratio" | "-moz-device-pixel-ratio",
            Value::Number(ratio),
        ) => op.holds(Viewport::DPR, *ratio),
        ("color", Value::Number(bits)) => op.holds(8.0, *bits),
        ("monochrome" | "grid", Value::Number(n)) => op.holds(0.0, *n),
        (_, Value::Ident(ident)) if op == Op::Eq => matches!(
            (name, ident.as_str()),
            ("orientation", "landscape")
                | ("prefers-color-scheme", "light")
                | ("prefers-reduced-motion", "no-preference")
                | ("prefers-contrast", "no-preference")
                | ("prefers-reduced-data", "no-preference")
                | ("hover" | "any-hover", "hover")
                | ("pointer" | "any-pointer", "fine")
                | ("scripting", "enabled")
                | ("display-mode", "browser")
                | ("update", "fast")
        ),
        _ => false,
    }
}

/// A `<length>` in CSS pixels: a dimension, a unitless 0, or `calc()`,
/// `min()`, `max()`, `clamp()` over lengths.
fn length<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<f64> {
    let token = p.next()?.clone();
    match token {
        Token::Dimension { value, unit, .. } => unit_px(&unit, viewport).map_or_else(
            || Err(p.new_error_for_next_token()),
            |px| Ok(f64::from(value) * px),
        ),
        Token::Number { value: 0.0, .. } => Ok(0.0),
        Token::Function(name) => {
            let name = name.to_ascii_lowercase();
            p.parse_nested_block(|p| math_function(&name, p, viewport))
        }
        _ => Err(p.new_error_for_next_token()),
    }
}

/// CSS pixels in one `unit`.
fn unit_px(unit: &str, viewport: Viewport) -> Option<f64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "px" => 1.0,
        "em" | "rem" => EM_PX,
        "vw" => viewport.width / 100.0,
        "vh" => viewport.height / 100.0,
        "vmin" => viewport.width.min(viewport.height) / 100.0,
        "vmax" => viewport.width.max(viewport.height) / 100.0,
        "in" => 96.0,
        "cm" => 96.0 / 2.54,
        "mm" => 96.0 / 25.4,
        "q" => 96.0 / 101.6,
        "pt" => 96.0 / 72.0,
        "pc" => 16.0,
        _ => return None,
    })
}

fn math_function<'i>(name: &str, p: &mut Parser<'i>, viewport: Viewport) -> Result<f64> {
    match name {
        "calc" => sum(p, viewport),
        "min" | "max" => {
            let args = p.parse_comma_separated(|p| sum(p, viewport))?;
            let pick = if name == "min" { f64::min } else { f64::max };
            args.into_iter()
                .reduce(pick)
                .ok_or_else(|| p.new_error_for_next_token())
        }
        "clamp" => {
            let args = p.parse_comma_separated(|p| sum(p, viewport))?;
            match args[..] {
                [low, wanted, high] => Ok(wanted.min(high).max(low)),
                _ => Err(p.new_error_for_next_token()),
            }
        }
        _ => Err(p.new_error_for_next_token()),
    }
}

/// `calc()` arithmetic over lengths and numbers: `a + b - c`, with `*` and
/// `/` by numbers. Types are not checked beyond that: the result is used as
/// a width, nothing more.
fn sum<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<f64> {
    let mut total = product(p, viewport)?;
    loop {
        let state = p.state();
        match p.next() {
            Ok(Token::Delim('+')) => total += product(p, viewport)?,
            Ok(Token::Delim('-')) => total -= product(p, viewport)?,
            _ => {
                p.reset(&state);
                return Ok(total);
            }
        }
    }
}

fn product<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<f64> {
    let mut total = factor(p, viewport)?;
    loop {
        let state = p.state();
        match p.next() {
            Ok(Token::Delim('*')) => total *= factor(p, viewport)?,
            Ok(Token::Delim('/')) => {
                let divisor = factor(p, viewport)?;
                if divisor == 0.0 {
                    return Err(p.new_error_for_next_token());
                }
                total /= divisor;
            }
            _ => {
                p.reset(&state);
                return Ok(total);
            }
        }
    }
}

fn factor<'i>(p: &mut Parser<'i>, viewport: Viewport) -> Result<f64> {
    if let Ok(px) = p.try_parse(|p| length(p, viewport)) {
        return Ok(px);
    }
    let token = p.next()?.clone();
    match token {
        Token::Number { value, .. } => Ok(f64::from(value)),
        Token::ParenthesisBlock => p.parse_nested_block(|p| sum(p, viewport)),
        _ => Err(p.new_error_for_next_token()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VP: Viewport = Viewport {
        width: 1280.0,
        height: 720.0,
    };

    #[test]
    fn media_queries() {
        let cases = [
            ("", true),
            ("all", true),
            ("screen", true),
            ("print", false),
            ("not print", true),
            ("only screen and (min-width: 1024px)", true),
            ("screen and (max-width: 600px)", false),
            ("(min-width: 80em)", true),
            ("(min-width: 81em)", false),
            ("(max-width: 1280px)", true),
            ("(width >= 1281px)", false),
            ("(width >= 1280px)", true),
            ("(600px < width <= 1280px)", true),
            ("(1300px < width)", false),
            ("(orientation: portrait)", false),
            ("(orientation: landscape) and (min-height: 700px)", true),
            ("(prefers-color-scheme: dark)", false),
            ("(min-resolution: 2dppx)", false),
            ("(-webkit-min-device-pixel-ratio: 1.5)", false),
            ("(max-resolution: 96dpi)", true),
            ("(hover)", true),
            ("(prefers-reduced-motion)", false),
            ("not (min-width: 2000px)", true),
            ("(max-width: 500px), (min-width: 1200px)", true),
            ("(max-width: 500px) or (min-width: 1200px)", true),
            ("(unknown-feature: 3)", false),
            (
                "(max-width: 500px) and (min-width: 100px) or (color)",
                false,
            ),
            ("garbage !!", false),
            ("tv, screen", true),
        ];
        for (query, expected) in cases {
            assert_eq!(media_matches(query, VP), expected, "{query:?}");
        }
    }

    #[test]
    fn sizes() {
        let cases = [
            (None, 1280.0),
            (Some("50vw"), 640.0),
            (Some("(max-width: 600px) 100vw, 50vw"), 640.0),
            (Some("(min-width: 1200px) 33vw, 100vw"), 1280.0 * 0.33),
            (Some("(min-width: 1000px) 300px, 100vw"), 300.0),
            (Some("calc(100vw - 2rem)"), 1248.0),
            (
                Some("(min-width: 1024px) calc((100vw - 64px) / 3), 100vw"),
                405.3333,
            ),
            (Some("min(100vw, 1200px)"), 1200.0),
            (Some("clamp(200px, 50vw, 500px)"), 500.0),
            (Some("auto"), 1280.0),
            (Some("bogus, 20em"), 320.0),
            (Some("-10px, 100px"), 100.0),
            (Some("(max-width: 100px) 10px"), 1280.0),
        ];
        for (sizes, expected) in cases {
            let got = source_size(sizes, VP);
            assert!((got - expected).abs() < 0.01, "{sizes:?}: {got}");
        }
    }
}
