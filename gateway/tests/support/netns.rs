//! Network namespaces for integration tests: a guard that creates a uniquely named
//! namespace and deletes it on drop (also when the test panics), a way to run code
//! inside one, and a veth link between two.
//!
//! Use from a test file with `#[path = "support/netns.rs"] mod netns;`.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the harness"
)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// Runs `program` with `args`; returns stdout, or fails with its stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `ip` (iproute2) with `args`.
pub(crate) fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

static NEXT: AtomicU32 = AtomicU32::new(1);

/// A named network namespace, deleted on drop. Deleting it removes everything in
/// it: interfaces (and their veth peers elsewhere), nftables tables, rules, routes.
#[derive(Debug)]
pub(crate) struct NetNsGuard {
    name: String,
}

impl NetNsGuard {
    /// Creates `<prefix>-<pid>-<n>`: unique within the machine while this process
    /// lives, so parallel tests and test binaries never collide. Keep `prefix`
    /// short: interface-name limits do not apply, but `ip` output stays readable.
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        ip(&["netns", "add", &name])?;
        let guard = NetNsGuard { name };
        guard.exec("ip", &["link", "set", "lo", "up"])?;
        Ok(guard)
    }

    /// The namespace's name, for `ip -n` and `ip netns exec`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Runs `program args` inside the namespace (`ip netns exec`).
    pub(crate) fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["netns", "exec", self.name.as_str(), program];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `task` on a new thread that has entered the namespace and returns its
    /// result. Sockets, netlink handles and child processes it creates live in
    /// the namespace; a panic in `task` is resumed on the caller.
    pub(crate) fn run<T, F>(&self, task: F) -> Result<T>
    where
        F: FnOnce() -> Result<T> + Send,
        T: Send,
    {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|scope| {
            let worker = scope.spawn(move || {
                let file = File::open(&path).with_context(|| format!("opening {path}"))?;
                // SAFETY: setns on a valid namespace fd changes only this thread,
                // which ends with the scope.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!("setns({path}): {}", std::io::Error::last_os_error());
                }
                task()
            });
            match worker.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

impl Drop for NetNsGuard {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("leaving namespace {} behind: {e}", self.name);
        }
    }
}

/// Joins `a` and `b` with a veth pair, each end named `ifname` inside its
/// namespace and brought up. Both ends vanish with either namespace.
pub(crate) fn veth(a: &NetNsGuard, b: &NetNsGuard, ifname: &str) -> Result<()> {
    ip(&[
        "link",
        "add",
        ifname,
        "netns",
        a.name(),
        "type",
        "veth",
        "peer",
        "name",
        ifname,
        "netns",
        b.name(),
    ])?;
    for ns in [a, b] {
        ip(&["-n", ns.name(), "link", "set", ifname, "up"])?;
    }
    Ok(())
}

/// Adds `cidr` to `ifname` in `ns`; IPv6 addresses skip duplicate address
/// detection so they are usable at once.
pub(crate) fn add_address(ns: &NetNsGuard, ifname: &str, cidr: &str) -> Result<()> {
    let mut args = vec!["-n", ns.name(), "addr", "add", cidr, "dev", ifname];
    if cidr.contains(':') {
        args.push("nodad");
    }
    ip(&args).map(drop)
}
