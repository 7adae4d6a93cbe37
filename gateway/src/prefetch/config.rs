//! `[prefetch]`: when the gateway fetches a page's subresources ahead of the
//! browser, and how much.
//!
//! The lead hooks this into `GatewayConfig` as `pub prefetch: PrefetchConfig`;
//! until then it is usable on its own (tests, the I/O-free core).

use page_resources::ExtractConfig;
use serde::{Deserialize, Serialize};

pub use page_resources::{
    DEFAULT_CSS_IMPORT_DEPTH, DEFAULT_MAX_HTML_BYTES, DEFAULT_VIEWPORT_WIDTH,
};

/// Default most prefetches for one page (its HTML and its frames together).
/// A median page asks for about 70 subresources.
pub const DEFAULT_MAX_PER_PAGE: u32 = 128;
/// Default most bytes prefetched for one page: 8 MiB, a heavy page's weight.
pub const DEFAULT_MAX_BYTES_PER_PAGE: u64 = 8 << 20;
/// Default most prefetches in flight to one origin (scheme, host, port).
/// Not a browser's 6: over one association a prefetch costs a stream slot,
/// not a connection, and the origin serves every demand request first; a
/// page's prefetches should all be under way before its browser asks
/// (the e2e test's page has 36 subresources).
pub const DEFAULT_MAX_CONCURRENT_PER_ORIGIN: u32 = 32;
/// Default time a page stays tracked after its HTML started, seconds.
pub const DEFAULT_PAGE_LIFETIME_SECS: u64 = 30;

/// `[prefetch]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PrefetchConfig {
    /// Prefetch for pages from mapped SCTP origins.
    pub enabled_for_origins: bool,
    /// Prefetch for pages from pass-through (direct TCP) hosts.
    pub enabled_for_direct: bool,
    /// Most prefetches started for one page, frames included. Further
    /// subresources are left to the browser.
    pub max_per_page: u32,
    /// Most bytes prefetched for one page, counted by `Content-Length` when
    /// the response announces it and as the body arrives otherwise. A
    /// prefetch that would pass it is cancelled; none starts beyond it.
    pub max_bytes_per_page: u64,
    /// Most prefetches in flight to one origin (scheme, host, port). A
    /// prefetch a browser asked for no longer counts.
    pub max_concurrent_per_origin: u32,
    /// Most bytes of an HTML body scanned for subresources; the rest still
    /// goes to the browser, unscanned.
    pub max_html_bytes: u64,
    /// How deep `@import` chains are followed: 0 scans no imported sheet,
    /// 1 the sheets a page's stylesheets import, and so on.
    pub css_import_depth: u32,
    /// Width in CSS pixels of the window the gateway imagines when it picks
    /// among `srcset` candidates and evaluates `sizes` and `media`
    /// (device-pixel-ratio 1, 16:9).
    pub viewport_width: u32,
    /// How long a page is tracked after its HTML response started, seconds.
    /// Then its queued prefetches are dropped, those in flight that no
    /// browser asked for are cancelled, and prefetched bytes nobody asked
    /// for count as wasted.
    pub page_lifetime_secs: u64,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        Self {
            enabled_for_origins: true,
            enabled_for_direct: false,
            max_per_page: DEFAULT_MAX_PER_PAGE,
            max_bytes_per_page: DEFAULT_MAX_BYTES_PER_PAGE,
            max_concurrent_per_origin: DEFAULT_MAX_CONCURRENT_PER_ORIGIN,
            max_html_bytes: DEFAULT_MAX_HTML_BYTES,
            css_import_depth: DEFAULT_CSS_IMPORT_DEPTH,
            viewport_width: DEFAULT_VIEWPORT_WIDTH,
            page_lifetime_secs: DEFAULT_PAGE_LIFETIME_SECS,
        }
    }
}

/// A `[prefetch]` value that cannot be used: the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `prefetch.{key}`: {reason}")]
pub struct PrefetchConfigError {
    /// The key under `[prefetch]`.
    pub key: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl From<&PrefetchConfig> for ExtractConfig {
    /// The extraction's knobs from `[prefetch]`; a stylesheet's byte limit
    /// has no key and stays the extraction's default.
    fn from(config: &PrefetchConfig) -> Self {
        ExtractConfig {
            viewport_width: config.viewport_width,
            max_html_bytes: config.max_html_bytes,
            css_import_depth: config.css_import_depth,
            ..ExtractConfig::default()
        }
    }
}

impl PrefetchConfig {
    /// The extraction's knobs ([`ExtractConfig`]) from this section.
    pub fn extract_config(&self) -> ExtractConfig {
        ExtractConfig::from(self)
    }

    /// Whether anything is prefetched at all.
    pub fn enabled(&self) -> bool {
        self.enabled_for_origins || self.enabled_for_direct
    }

    /// Rejects values the queue cannot work with, naming the key.
    pub fn validate(&self) -> Result<(), PrefetchConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        let range = |key: &'static str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(PrefetchConfigError {
                    key,
                    reason: format!("must be between {low} and {high}"),
                })
            }
        };
        range("max_per_page", self.max_per_page.into(), 1, 10_000)?;
        range(
            "max_bytes_per_page",
            self.max_bytes_per_page,
            64 << 10,
            1 << 30,
        )?;
        range(
            "max_concurrent_per_origin",
            self.max_concurrent_per_origin.into(),
            1,
            256,
        )?;
        range("max_html_bytes", self.max_html_bytes, 16 << 10, 64 << 20)?;
        range("css_import_depth", self.css_import_depth.into(), 0, 8)?;
        range("viewport_width", self.viewport_width.into(), 200, 8192)?;
        range("page_lifetime_secs", self.page_lifetime_secs, 1, 3600)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_unknown_keys_are_refused() {
        let defaults = PrefetchConfig::default();
        defaults.validate().expect("defaults are valid");
        assert!(defaults.enabled_for_origins && !defaults.enabled_for_direct);
        let parsed: PrefetchConfig =
            toml::from_str("enabled_for_direct = true\nmax_per_page = 20\n").expect("parses");
        assert_eq!(parsed.max_per_page, 20);
        assert!(parsed.enabled_for_direct);
        assert_eq!(parsed.viewport_width, DEFAULT_VIEWPORT_WIDTH);
        assert!(toml::from_str::<PrefetchConfig>("max_prefetches = 1\n").is_err());
    }

    #[test]
    fn the_extraction_gets_the_sections_knobs() {
        assert_eq!(
            PrefetchConfig::default().extract_config(),
            ExtractConfig::default()
        );
        let narrow = PrefetchConfig {
            viewport_width: 400,
            max_html_bytes: 64 << 10,
            css_import_depth: 0,
            ..PrefetchConfig::default()
        };
        let extract = narrow.extract_config();
        assert_eq!(
            (
                extract.viewport_width,
                extract.max_html_bytes,
                extract.css_import_depth
            ),
            (400, 64 << 10, 0)
        );
    }

    #[test]
    fn nonsense_is_refused_with_the_key() {
        let cases: [(PrefetchConfig, &str); 4] = [
            (
                PrefetchConfig {
                    max_per_page: 0,
                    ..PrefetchConfig::default()
                },
                "max_per_page",
            ),
            (
                PrefetchConfig {
                    max_concurrent_per_origin: 0,
                    ..PrefetchConfig::default()
                },
                "max_concurrent_per_origin",
            ),
            (
                PrefetchConfig {
                    max_html_bytes: 100,
                    ..PrefetchConfig::default()
                },
                "max_html_bytes",
            ),
            (
                PrefetchConfig {
                    viewport_width: 10,
                    ..PrefetchConfig::default()
                },
                "viewport_width",
            ),
        ];
        for (config, key) in cases {
            assert_eq!(config.validate().expect_err(key).key, key);
        }
        let off = PrefetchConfig {
            enabled_for_origins: false,
            max_per_page: 0,
            ..PrefetchConfig::default()
        };
        off.validate().expect("nothing to check when off");
    }
}
