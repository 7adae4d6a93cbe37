//! What the gateway's and the origin's configuration files share: the error
//! type every daemon reports ([`ConfigError`]), the loader that reads a TOML
//! file into a daemon's serde structs ([`from_file`]), the `[log]` section both
//! files have alike ([`LogConfig`]); and the report format of both daemons'
//! `doctor` ([`doctor::Report`]), which checks the host a configuration will
//! run on.
//!
//! Each daemon keeps its own structs, defaults and `validate()`; this crate
//! knows none of them. Start reading at [`from_file`].
//!
//! What it never does: decide a daemon's default (the `[log]` section is the
//! same in both), install a log, or look for a file on its own: the caller
//! names the path.

pub mod doctor;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer};

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

/// `[log]`: how a daemon writes its log. Which events are written is
/// `RUST_LOG`'s business (default `info`), not the file's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Text lines for people, or JSON lines for a collector.
    pub format: LogFormat,
}

/// The layout of each log line (`log.format`, `--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// tracing's text lines: time, level, target, message, `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`
    /// (the message under `message`) and the spans the event was in.
    Json,
}

impl LogFormat {
    /// The word in the file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format `{other}` (expected text or json)"
            )),
        }
    }
}

impl<'de> Deserialize<'de> for LogFormat {
    /// Names the key in its error: serde's own message for an unknown variant
    /// says what was expected but not where.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        word.parse()
            .map_err(|why| de::Error::custom(format!("invalid `log.format`: {why}")))
    }
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

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct WithLog {
        #[serde(default)]
        log: LogConfig,
    }

    #[test]
    fn the_log_section_defaults_to_text_and_names_its_key_when_wrong() {
        let parsed: WithLog = from_toml("").expect("empty file");
        assert_eq!(parsed.log.format, LogFormat::Text);
        let parsed: WithLog = from_toml("[log]\nformat = \"json\"\n").expect("json");
        assert_eq!(parsed.log.format, LogFormat::Json);

        let error = from_toml::<WithLog>("[log]\nformat = \"xml\"\n").expect_err("xml");
        let message = error.to_string();
        assert!(message.contains("invalid `log.format`"), "{message}");
        assert!(
            message.contains("`xml` (expected text or json)"),
            "{message}"
        );
        let error = from_toml::<WithLog>("[log]\nformta = \"json\"\n").expect_err("typo");
        assert!(error.to_string().contains("formta"), "{error}");
    }

    #[test]
    fn the_log_format_reads_back_its_own_name() {
        for format in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(format.name().parse::<LogFormat>(), Ok(format));
        }
        assert!("JSON".parse::<LogFormat>().is_err());
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
