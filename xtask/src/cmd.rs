//! Running commands: echoed before they run, failing with their command line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, Result, bail};

/// The workspace root (the directory holding the top-level Cargo.toml).
pub(crate) fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_owned()
}

/// `command` as a shell-like line, with the environment it sets, for messages.
pub(crate) use testbed::display;

/// Runs `command` with inherited stdio, echoing it first; fails unless it exits 0.
pub(crate) fn run_command(command: &mut Command) -> Result<()> {
    let line = display(command);
    println!("  $ {line}");
    let status = command
        .status()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs `command` and returns its stdout; fails (with its stderr) unless it exits 0.
pub(crate) fn output(command: &mut Command) -> Result<String> {
    let line = display(command);
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !output.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).with_context(|| format!("`{line}` printed non-UTF-8"))
}

/// Runs `command` quietly; its stdout if it ran and exited 0, `None` otherwise
/// (including when it cannot be started at all).
pub(crate) fn probe(command: &mut Command) -> Option<String> {
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The first `name` on PATH that is a file.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// Set by SIGINT, SIGTERM or SIGHUP; long-running subcommands poll it through
/// [`stop_requested`].
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Turns SIGINT, SIGTERM and SIGHUP into [`STOP`], so that teardown runs in
/// order instead of the process dying with its namespaces still there. The
/// children run in process groups of their own, so a terminal's Ctrl-C reaches
/// only this process, which stops them in order.
pub(crate) fn install_stop_handlers() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: an all-zero sigaction is valid (empty mask, no flags); the
        // handler only stores to an atomic, which is async-signal-safe.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `action` is initialised; the old action is not asked for.
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            bail!(
                "cannot handle signal {signal}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived since [`install_stop_handlers`].
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displayed_commands_quote_what_a_shell_would_split() {
        let mut command = Command::new("apt-get");
        command
            .args(["install", "-f=${Status}", "a b"])
            .env("K", "v");
        assert_eq!(
            display(&command),
            "K=v apt-get install '-f=${Status}' 'a b'"
        );
    }
}
