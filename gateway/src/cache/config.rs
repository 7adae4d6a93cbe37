//! `[cache]`: where the database lives and how large it may grow.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default database budget: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default memory tier: 64 MiB.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
/// Default largest single response body stored: 64 MiB.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 64 << 20;
/// The smallest budget accepted: redb's fixed overhead (a few pages per table,
/// the region headers) is a few hundred KiB, so less leaves no room for entries.
pub const MIN_MAX_BYTES: u64 = 4 << 20;

/// `[cache]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Store responses at all. `false` forwards everything uncached (and never
    /// opens the database).
    pub enabled: bool,
    /// The redb database file. Its directory must exist.
    pub path: PathBuf,
    /// Budget of the database file, in bytes. Eviction keeps the stored data
    /// well below it so that the file (data plus redb's pages and free space)
    /// stays within it.
    pub max_bytes: u64,
    /// Largest response body stored, in bytes; larger ones pass uncached.
    /// A response that announces more (`Content-Length`) is not even tried.
    pub max_object_bytes: u64,
    /// Memory for hot small entries (bodies up to 256 KiB) in front of the
    /// database, in bytes; 0 turns the memory tier off.
    pub memory_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: PathBuf::from("/var/cache/sctp-gateway/cache.redb"),
            max_bytes: DEFAULT_MAX_BYTES,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            memory_bytes: DEFAULT_MEMORY_BYTES,
        }
    }
}

/// A `[cache]` value that cannot be used: the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `cache.{key}`: {reason}")]
pub struct CacheConfigError {
    /// The key under `[cache]`.
    pub key: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl CacheConfig {
    /// Rejects values the cache cannot work with, naming the key.
    pub fn validate(&self) -> Result<(), CacheConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.path.as_os_str().is_empty() {
            return Err(CacheConfigError {
                key: "path",
                reason: "must name a file".to_owned(),
            });
        }
        if self.max_bytes < MIN_MAX_BYTES {
            return Err(CacheConfigError {
                key: "max_bytes",
                reason: format!("must be at least {MIN_MAX_BYTES} bytes"),
            });
        }
        if self.max_object_bytes == 0 || self.max_object_bytes > self.max_bytes / 4 {
            return Err(CacheConfigError {
                key: "max_object_bytes",
                reason: format!(
                    "must be between 1 and a quarter of `cache.max_bytes` ({})",
                    self.max_bytes / 4
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_unknown_keys_are_refused() {
        CacheConfig::default()
            .validate()
            .expect("defaults are valid");
        let parsed: CacheConfig =
            toml::from_str("path = \"c.redb\"\nmax_bytes = 16777216\n").expect("parses");
        assert_eq!(parsed.max_bytes, 16 << 20);
        assert!(toml::from_str::<CacheConfig>("max_size = 1\n").is_err());
    }

    #[test]
    fn nonsense_is_refused_with_the_key() {
        let small = CacheConfig {
            max_bytes: 1024,
            ..CacheConfig::default()
        };
        assert_eq!(small.validate().expect_err("too small").key, "max_bytes");
        let huge_object = CacheConfig {
            max_object_bytes: DEFAULT_MAX_BYTES,
            ..CacheConfig::default()
        };
        assert_eq!(
            huge_object.validate().expect_err("too large").key,
            "max_object_bytes"
        );
    }
}
