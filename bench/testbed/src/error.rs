//! The one error type of the crate: every failure says which command, process or
//! wait it was, with what the command printed or the end of the process's log.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// What went wrong while building the testbed or driving something in it.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// A program could not be started at all (missing, not executable).
    #[error("cannot start `{command}`: {source}{hint}")]
    Spawn {
        /// The command line.
        command: String,
        /// A hint naming the package that provides it, or empty.
        hint: &'static str,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A command ran and exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A bounded wait ran out.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The bound.
        after: Duration,
    },
    /// A process ended while something still needed it.
    #[error("{name} exited ({status}) while waiting for {what}; end of {}:\n{tail}", log.display())]
    Exited {
        /// The process's name in the testbed.
        name: String,
        /// How it ended.
        status: ExitStatus,
        /// What was awaited.
        what: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// A running process reported in its log that it cannot do what it was
    /// started for (a port it cannot bind, say).
    #[error("{name} failed while waiting for {what}: `{line}`; end of {}:\n{tail}", log.display())]
    Failed {
        /// The process's name in the testbed.
        name: String,
        /// What was awaited.
        what: String,
        /// The log line that says why.
        line: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// A file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A configuration file the testbed reads or generates is not as expected.
    #[error("{}: {what}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A page corpus could not be generated, or a site's page not described
    /// (a referenced file missing, a size that cannot be met).
    #[error("page corpus: {}: {what}", path.display())]
    Corpus {
        /// The file or directory concerned.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The topology lacks what was asked of it (a `wan` namespace, say).
    #[error("topology: {0}")]
    Topology(String),
    /// Chromium's DevTools protocol answered with an error or something unexpected.
    #[error("DevTools: {0}")]
    DevTools(String),
    /// A page load failed as a whole (the navigation itself, not a subresource).
    #[error("loading {url} failed: {reason}")]
    Navigation {
        /// The URL.
        url: String,
        /// Chromium's error text (`net::ERR_...`).
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = TestbedError> = std::result::Result<T, E>;

/// Wraps an I/O error with what was being done.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestbedError {
    let context = context.into();
    move |source| TestbedError::Io { context, source }
}
