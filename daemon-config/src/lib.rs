//! What the gateway's and the origin's configuration files share: the error
//! type every daemon reports ([`ConfigError`]) and the loader that reads a TOML
//! file into a daemon's serde structs ([`from_file`]); and the report format of
//! both daemons' `doctor` ([`doctor::Report`]), which checks the host a
//! configuration will run on.
//!
//! Each daemon keeps its own structs, defaults and `validate()`; this crate
//! knows none of them. Start reading at [`from_file`].
//!
//! What it never does: decide a default, validate a value, or look for a file
//! on its own: the caller names the path.

pub mod doctor;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this structure (unknown keys included).
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, which names the key and line.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("invalid `{key}`: {reason}")]
    Invalid {
        /// Dotted key, as in the file.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

impl ConfigError {
    /// [`ConfigError::Invalid`] for the dotted `key`, with what is wrong.
    pub fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Reads `path` and parses it as `T`; unknown keys and type mismatches are
/// errors naming the key (with `#[serde(deny_unknown_fields)]` on `T`).
pub fn from_file<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    from_toml(&text).map_err(|source| ConfigError::Parse {
        path: path.to_owned(),
        source,
    })
}

/// Parses TOML text as `T`.
pub fn from_toml<T: DeserializeOwned>(text: &str) -> Result<T, toml::de::Error> {
    toml::from_str(text)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Section {
        port: u16,
    }

    #[test]
    fn a_file_is_read_and_parsed() {
        let dir = std::env::temp_dir().join(format!("daemon-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("ok.toml");
        std::fs::write(&path, "port = 80\n").expect("write");
        let parsed: Section = from_file(&path).expect("parses");
        assert_eq!(parsed, Section { port: 80 });

        std::fs::write(&path, "port = 80\nmystery = 1\n").expect("write");
        let error = from_file::<Section>(&path).expect_err("unknown key");
        assert!(matches!(error, ConfigError::Parse { .. }), "{error}");
        assert!(error.to_string().contains("mystery"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_invalid_value_names_its_key() {
        let error = ConfigError::invalid("listen.port", "must be above 0");
        assert_eq!(error.to_string(), "invalid `listen.port`: must be above 0");
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let error =
            from_file::<Section>(Path::new("/nonexistent/daemon.toml")).expect_err("no such file");
        assert!(matches!(error, ConfigError::Read { .. }));
        assert!(
            error
                .to_string()
                .starts_with("cannot read /nonexistent/daemon.toml")
        );
    }
}
