//! Processes inside namespaces: started with `ip netns exec`, their stdout and
//! stderr in a log file, in a process group of their own (so a terminal's Ctrl-C
//! reaches only the program that owns them, which then stops them in order), and
//! killed with their whole group and reaped on drop.
//!
//! And the bounded waits that go with them: for a TCP port, for a log line, for
//! any condition.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Result, TestbedError, io};
use crate::netns::{display, exec_in, in_netns};

/// How often the waits below look again.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Lines of a log shown in errors.
const LOG_TAIL_LINES: usize = 30;

/// A signal to send to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT, what a terminal's Ctrl-C sends.
    Interrupt,
    /// SIGTERM, the polite stop.
    Terminate,
    /// SIGKILL: no cleanup runs.
    Kill,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Interrupt => libc::SIGINT,
            Signal::Terminate => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }
}

/// A process started in a namespace; killed (with its process group) and reaped
/// on drop.
#[derive(Debug)]
pub struct NsProcess {
    name: String,
    child: Child,
    log: PathBuf,
    /// Set once the child is reaped; its process group may then be gone.
    status: Option<ExitStatus>,
}

impl NsProcess {
    /// Starts `command` inside namespace `ns` as `ip netns exec NS ...`, with stdout
    /// and stderr appended to `log` (created or truncated). `name` labels it in
    /// errors.
    pub fn spawn(ns: &str, name: &str, command: &Command, log: &Path) -> Result<Self> {
        Self::spawn_wrapped(name, exec_in(ns, command), log)
    }

    /// Starts an already wrapped command (`ip netns exec ...`, possibly with
    /// `pre_exec` hooks of the caller).
    pub(crate) fn spawn_wrapped(name: &str, mut command: Command, log: &Path) -> Result<Self> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        }
        let out = File::create(log).map_err(io(format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io(format!("duplicating {}", log.display())))?;
        let line = display(&command);
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|source| TestbedError::Spawn {
                command: line,
                hint: " (Debian package iproute2)",
                source,
            })?;
        Ok(NsProcess {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
            status: None,
        })
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id (`ip netns exec` execs the program, so this is the program's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far (lossy UTF-8, terminal colour codes removed).
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
            .unwrap_or_default()
    }

    /// The last lines of the log.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// Sends `signal` to the process itself (not its group).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory-safety preconditions; the child is not
        // reaped yet, so `pid` is still ours.
        if unsafe { libc::kill(pid, signal.number()) } != 0 {
            return Err(TestbedError::Io {
                context: format!("sending {signal:?} to {} ({pid})", self.name),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// How the process ended, if it has; the rest of its group is killed then.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        if !self.has_exited()? {
            return Ok(None);
        }
        self.reap().map(Some)
    }

    /// Whether the child has exited, without reaping it (waitid with WNOWAIT).
    fn has_exited(&self) -> Result<bool> {
        // SAFETY: an all-zero siginfo_t is valid; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc != 0 {
            return Err(TestbedError::Io {
                context: format!("waitid on {}", self.name),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: waitid succeeded, so si_pid is set (0 when nothing has exited).
        Ok(unsafe { info.si_pid() } != 0)
    }

    /// Waits up to `timeout` for the process to end by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let what = format!("{} to exit", self.name);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(TestbedError::Timeout {
                    what,
                    after: timeout,
                });
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// SIGTERM, then up to `grace` for a clean exit; SIGKILL after that. Returns
    /// how it ended and whether it needed the SIGKILL.
    pub fn stop(&mut self, grace: Duration) -> Result<(ExitStatus, bool)> {
        self.signal(Signal::Terminate)?;
        match self.wait_exit(grace) {
            Ok(status) => Ok((status, false)),
            Err(TestbedError::Timeout { .. }) => Ok((self.kill()?, true)),
            Err(e) => Err(e),
        }
    }

    /// SIGKILLs the process group and reaps the process.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        self.reap()
    }

    /// Kills the rest of the group, then reaps the leader. The leader is a zombie
    /// until reaped, so its group id cannot have been reused yet.
    fn reap(&mut self) -> Result<ExitStatus> {
        self.kill_group();
        let status = self
            .child
            .wait()
            .map_err(io(format!("reaping {}", self.name)))?;
        self.status = Some(status);
        Ok(status)
    }

    fn kill_group(&self) {
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory-safety preconditions. The group leader is
        // not reaped (callers guarantee it), so the group id is still ours.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }

    /// Fails with the end of the log if the process has exited.
    pub fn ensure_running(&mut self, what: &str) -> Result<()> {
        match self.try_status()? {
            None => Ok(()),
            Some(status) => Err(self.exited(status, what)),
        }
    }

    fn exited(&self, status: ExitStatus, what: &str) -> TestbedError {
        TestbedError::Exited {
            name: self.name.clone(),
            status,
            what: what.to_owned(),
            log: self.log.clone(),
            tail: self.log_tail(),
        }
    }

    /// Waits until the log contains `needle`; fails early if the process exits.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        let what = format!("`{needle}` in the log of {}", self.name);
        wait_until(&what, timeout, || {
            if self.log().contains(needle) {
                return Ok(true);
            }
            self.ensure_running(&what)?;
            Ok(false)
        })
    }

    /// Waits until something accepts TCP connections on `addr` inside `ns`; fails
    /// early if the process exits.
    pub fn wait_for_tcp(&mut self, ns: &str, addr: SocketAddr, timeout: Duration) -> Result<()> {
        let what = format!("{} to accept TCP on {addr} in {ns}", self.name);
        wait_until(&what, timeout, || {
            if tcp_accepts(ns, addr)? {
                return Ok(true);
            }
            self.ensure_running(&what)?;
            Ok(false)
        })
    }

    /// Whether the process was ended by `signal` (false while it runs).
    pub fn killed_by(&self, signal: Signal) -> bool {
        self.status.and_then(|s| s.signal()) == Some(signal.number())
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Calls `probe` every [`POLL_INTERVAL`] until it returns true, fails, or
/// `timeout` passes.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if probe()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestbedError::Timeout {
                what: what.to_owned(),
                after: timeout,
            });
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Whether a TCP connection to `addr` from inside `ns` succeeds now.
pub fn tcp_accepts(ns: &str, addr: SocketAddr) -> Result<bool> {
    in_netns(ns, move || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    })
}

/// Waits until a TCP connection to `addr` from inside `ns` succeeds.
pub fn wait_for_tcp(ns: &str, addr: SocketAddr, timeout: Duration) -> Result<()> {
    wait_until(&format!("TCP on {addr} in {ns}"), timeout, || {
        tcp_accepts(ns, addr)
    })
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`), which loggers add
/// for terminals and which would split `key=value` pairs.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_codes_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[2mstream\u{1b}[0m\u{1b}[2m=\u{1b}[0m3 ok"),
            "stream=3 ok"
        );
    }
}
