//! Which candidate of a `srcset` a browser fetches (HTML, "select an image
//! source"), for the imagined window of [`Viewport`].
//!
//! The attribute is parsed by `parse-srcset` (the WHATWG algorithm). Each
//! candidate gets a density: its `x`, or its `w` divided by the layout width
//! that `sizes` gives, or 1. The browser's choice is the candidate of the
//! smallest density at least the device-pixel-ratio (1), else the densest
//! one; on a tie, the first. Browsers may refine this (Chromium leans to a
//! slightly smaller image when it is close), never in a way that fetches
//! two candidates.

use std::borrow::Cow;

use crate::media::{Viewport, source_size};

/// The URL (as written) a browser would fetch for an image with these
/// attributes. `src` is the `<img src>` fallback; `<source>` has none.
pub(crate) fn choose<'a>(
    srcset: Option<&'a str>,
    sizes: Option<&str>,
    src: Option<&'a str>,
    viewport: Viewport,
) -> Option<Cow<'a, str>> {
    let parsed = srcset.map(parse_srcset::parse_srcset).unwrap_or_default();
    // A height without a width is not a valid candidate (future-compat-h).
    let parsed: Vec<_> = parsed
        .into_iter()
        .filter(|c| c.height.is_none() || c.width.is_some())
        .collect();
    let any_width = parsed.iter().any(|c| c.width.is_some());
    let layout_width = if any_width {
        source_size(sizes, viewport)
    } else {
        viewport.width
    };
    let mut candidates: Vec<(Cow<'a, str>, f64)> = parsed
        .into_iter()
        .map(|c| {
            let density = match (c.density, c.width) {
                (Some(d), _) => d,
                // Image widths are far below 2^52: exact as f64.
                (None, Some(w)) => w as f64 / layout_width,
                (None, None) => 1.0,
            };
            (Cow::Owned(c.url), density)
        })
        .collect();
    if let Some(src) = src.filter(|s| !s.trim().is_empty())
        && !any_width
        && !candidates.iter().any(|(_, d)| *d == 1.0)
    {
        candidates.push((Cow::Borrowed(src), 1.0));
    }
    let at_least_dpr = candidates.iter().filter(|(_, d)| *d >= Viewport::DPR).fold(
        None::<&(Cow<'a, str>, f64)>,
        |best, c| match best {
            Some(b) if b.1 <= c.1 => Some(b),
            _ => Some(c),
        },
    );
    let chosen = at_least_dpr.or_else(|| {
        candidates.iter().fold(None, |best, c| match best {
            Some(b) if b.1 >= c.1 => Some(b),
            _ => Some(c),
        })
    })?;
    Some(chosen.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VP: Viewport = Viewport {
        width: 1280.0,
        height: 720.0,
    };

    fn pick(srcset: Option<&str>, sizes: Option<&str>, src: Option<&str>) -> Option<String> {
        choose(srcset, sizes, src, VP).map(|c| c.into_owned())
    }

    #[test]
    fn density_descriptors() {
        assert_eq!(
            pick(Some("a.png 1x, b.png 2x"), None, None).as_deref(),
            Some("a.png")
        );
        assert_eq!(
            pick(Some("b.png 2x, a.png 1x"), None, None).as_deref(),
            Some("a.png")
        );
        assert_eq!(
            pick(Some("b.png 2x, c.png 3x"), None, None).as_deref(),
            Some("b.png")
        );
        assert_eq!(
            pick(Some("h.png 0.5x"), None, None).as_deref(),
            Some("h.png")
        );
        // src counts as 1x when no candidate is 1x.
        assert_eq!(
            pick(Some("b.png 2x"), None, Some("s.png")).as_deref(),
            Some("s.png")
        );
        assert_eq!(
            pick(Some("a.png 1x"), None, Some("s.png")).as_deref(),
            Some("a.png")
        );
        assert_eq!(pick(None, None, Some("s.png")).as_deref(), Some("s.png"));
        assert_eq!(
            pick(Some(""), None, Some("s.png")).as_deref(),
            Some("s.png")
        );
        // A bare URL is 1x.
        assert_eq!(
            pick(Some("bare.png, b.png 2x"), None, None).as_deref(),
            Some("bare.png")
        );
        assert_eq!(pick(None, None, Some(" ")), None);
        assert_eq!(pick(Some("a.png 1x 2x"), None, None), None);
    }

    #[test]
    fn width_descriptors() {
        let set = "s.jpg 480w, m.jpg 800w, l.jpg 1600w, xl.jpg 2400w";
        assert_eq!(
            pick(Some(set), None, Some("f.jpg")).as_deref(),
            Some("l.jpg")
        );
        assert_eq!(
            pick(Some(set), Some("50vw"), None).as_deref(),
            Some("m.jpg")
        );
        assert_eq!(
            pick(Some(set), Some("300px"), None).as_deref(),
            Some("s.jpg")
        );
        assert_eq!(
            pick(Some("s.jpg 480w, m.jpg 800w"), None, None).as_deref(),
            Some("m.jpg")
        );
        assert_eq!(
            pick(Some(set), Some("(max-width: 700px) 100vw, 700px"), None).as_deref(),
            Some("m.jpg")
        );
    }
}
