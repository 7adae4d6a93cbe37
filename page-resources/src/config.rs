//! The extraction's knobs: the window a browser is imagined in and the bytes
//! read. Each daemon keeps its own configuration keys and converts (the
//! gateway's `[prefetch]` section, the origin's closure settings).

/// Default most bytes of an HTML body scanned: 2 MiB.
pub const DEFAULT_MAX_HTML_BYTES: u64 = 2 << 20;
/// Default most bytes of a stylesheet scanned: 2 MiB. Real stylesheets are
/// rarely above a few hundred KiB.
pub const DEFAULT_MAX_CSS_BYTES: u64 = 2 << 20;
/// Default `@import` chain followed: a stylesheet's imports, and theirs.
pub const DEFAULT_CSS_IMPORT_DEPTH: u32 = 2;
/// Default window width, CSS pixels, for `srcset`, `sizes` and `media`.
pub const DEFAULT_VIEWPORT_WIDTH: u32 = 1280;

/// What the extraction reads and imagines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractConfig {
    /// Width in CSS pixels of the window imagined when picking among
    /// `srcset` candidates and evaluating `sizes` and `media`
    /// (device-pixel-ratio 1, 16:9).
    pub viewport_width: u32,
    /// Most bytes of an HTML body scanned; the rest is not looked at.
    pub max_html_bytes: u64,
    /// Most bytes of a stylesheet scanned; a cut one is scanned up to its
    /// last complete rule.
    pub max_css_bytes: u64,
    /// How deep `@import` chains are followed by whoever fetches the
    /// imported sheets (the extraction reports one sheet's imports; the
    /// caller decides whether to scan them): 0 scans no imported sheet, 1
    /// the sheets a page's stylesheets import, and so on.
    pub css_import_depth: u32,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        Self {
            viewport_width: DEFAULT_VIEWPORT_WIDTH,
            max_html_bytes: DEFAULT_MAX_HTML_BYTES,
            max_css_bytes: DEFAULT_MAX_CSS_BYTES,
            css_import_depth: DEFAULT_CSS_IMPORT_DEPTH,
        }
    }
}
