//! Network namespaces for the interception tests, on top of the testbed crate: a
//! guard with a unique name per test, and short forms for running a program or a
//! closure inside it.
//!
//! Use from a test file with `#[path = "support/netns.rs"] mod netns;`.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the harness"
)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Result;

static NEXT: AtomicU32 = AtomicU32::new(1);

/// A network namespace deleted on drop (also when the test panics). Deleting it
/// removes everything in it: interfaces (and their veth peers elsewhere),
/// nftables tables, rules, routes.
#[derive(Debug)]
pub(crate) struct NetNsGuard {
    ns: testbed::Netns,
}

impl NetNsGuard {
    /// Creates `<prefix>-<pid>-<n>`: unique within the machine while this process
    /// lives, so parallel tests and test binaries never collide.
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        Ok(Self {
            ns: testbed::Netns::create(&name)?,
        })
    }

    /// The namespace's name, for `ip -n` and `ip netns exec`.
    pub(crate) fn name(&self) -> &str {
        self.ns.name()
    }

    /// Runs `program args` inside the namespace; returns its stdout.
    pub(crate) fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut command = Command::new(program);
        command.args(args);
        Ok(testbed::run(&mut testbed::exec_in(self.name(), &command))?)
    }

    /// Runs `task` on a thread inside the namespace and returns its result.
    pub(crate) fn run<T, F>(&self, task: F) -> Result<T>
    where
        F: FnOnce() -> Result<T> + Send,
        T: Send,
    {
        testbed::in_netns(self.name(), task)?
    }
}

/// Joins `a` and `b` with a veth pair, each end named `ifname` inside its
/// namespace and brought up. Both ends vanish with either namespace.
pub(crate) fn veth(a: &NetNsGuard, b: &NetNsGuard, ifname: &str) -> Result<()> {
    Ok(testbed::veth(a.name(), ifname, b.name(), ifname)?)
}

/// Adds `cidr` to `ifname` in `ns`; IPv6 addresses skip duplicate address
/// detection so they are usable at once.
pub(crate) fn add_address(ns: &NetNsGuard, ifname: &str, cidr: &str) -> Result<()> {
    let mut args = vec!["-n", ns.name(), "addr", "add", cidr, "dev", ifname];
    if cidr.contains(':') {
        args.push("nodad");
    }
    testbed::ip(&args).map(drop).map_err(Into::into)
}
