//! Error types, one per failure domain.

/// A configuration that cannot be meant.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value of one direction is out of range or contradicts another.
    #[error("{direction} {key}: {reason}")]
    Invalid {
        /// The direction (`gw0->origin0`).
        direction: String,
        /// The setting (`jitter`, `loss`, ...), as the command line names it.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// A command-line value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a number where one was expected.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// A rate without a unit, with an unknown unit, or zero.
    #[error(
        "`{0}` is not a rate: write a number and bit, kbit, mbit or gbit (per second, powers of 1000), e.g. 10mbit"
    )]
    Rate(String),
    /// A unit tc reads as bytes per second, which is easy to misread.
    #[error("`{0}`: tc reads bps/kbps/mbps as bytes per second; write kbit, mbit or gbit")]
    AmbiguousRate(String),
    /// A probability not written as a percentage from 0% to 100%.
    #[error("`{0}` is not a percentage from 0% to 100% (write the % sign, e.g. 1%)")]
    Percent(String),
    /// A Gilbert-Elliott setting without two to four comma-separated percentages.
    #[error("`{0}`: write p,r[,h[,k]] as percentages, e.g. 1%,30% or 1%,30%,0%,100%")]
    GilbertElliott(String),
    /// A single drop not written as `N[,MIN_BYTES]` with N at least 1.
    #[error(
        "`{0}`: write N[,MIN_BYTES], N from 1, e.g. 400,1000 (the 400th frame of at least 1000 bytes)"
    )]
    DropNth(String),
    /// A duration humantime does not understand.
    #[error("`{value}` is not a duration ({reason}); write e.g. 40ms, 1.5ms or 250us")]
    Duration {
        /// The text.
        value: String,
        /// humantime's reason.
        reason: String,
    },
}

/// What stops the emulator from running.
#[derive(Debug, thiserror::Error)]
pub enum WanemError {
    /// No interface of that name in this network namespace.
    #[error("no interface `{0}` in this network namespace")]
    NoSuchInterface(String),
    /// A socket call failed.
    #[error("{context}: {source}")]
    Socket {
        /// What was being done, with the interface.
        context: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A forwarding thread could not be started or panicked.
    #[error("forwarding thread {0}: {1}")]
    Thread(String, String),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}
