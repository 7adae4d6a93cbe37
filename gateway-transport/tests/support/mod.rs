//! Test hosts in network namespaces: two namespaces joined by a veth pair, with
//! IPv4 and IPv6 addresses, removed on drop (also when a test panics).

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the harness"
)]

use std::fs::File;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

pub(crate) mod loopback;

/// Runs `ip` with `args`, failing with its stderr.
pub(crate) fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (package iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Two namespaces, `a` and `b`, joined by one veth link.
///
/// `a` has 10.77.<n>.1/24 and fd77::<n>:1/64, `b` has .2 and :2, where n is unique
/// within this process. Names carry the process id, so parallel test binaries do
/// not collide.
pub(crate) struct NetnsPair {
    pub(crate) a: String,
    pub(crate) b: String,
    pub(crate) a_v4: Ipv4Addr,
    pub(crate) b_v4: Ipv4Addr,
    pub(crate) a_v6: Ipv6Addr,
    pub(crate) b_v6: Ipv6Addr,
}

static NEXT: AtomicU32 = AtomicU32::new(1);

impl NetnsPair {
    pub(crate) fn new() -> Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}-{n}", std::process::id());
        let pair = NetnsPair {
            a: format!("gwt-a-{tag}"),
            b: format!("gwt-b-{tag}"),
            a_v4: Ipv4Addr::new(10, 77, n as u8, 1),
            b_v4: Ipv4Addr::new(10, 77, n as u8, 2),
            a_v6: format!("fd77::{n:x}:1").parse()?,
            b_v6: format!("fd77::{n:x}:2").parse()?,
        };
        // From here on, Drop cleans up whatever part got created.
        pair.build()
            .with_context(|| format!("creating namespaces {}", pair.a))?;
        Ok(pair)
    }

    fn build(&self) -> Result<()> {
        let (a, b) = (self.a.as_str(), self.b.as_str());
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&[
            "link", "add", "veth0", "netns", a, "type", "veth", "peer", "name", "veth0", "netns", b,
        ])?;
        for (ns, v4, v6) in [(a, self.a_v4, self.a_v6), (b, self.b_v4, self.b_v6)] {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", "veth0"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                "veth0",
                "nodad",
            ])?;
            ip(&["-n", ns, "link", "set", "veth0", "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    pub(crate) fn addrs(&self, v6: bool) -> (IpAddr, IpAddr) {
        if v6 {
            (self.a_v6.into(), self.b_v6.into())
        } else {
            (self.a_v4.into(), self.b_v4.into())
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it the peer.
        for ns in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Runs `task` on a new thread that has entered namespace `ns`, on a
/// single-threaded tokio runtime of its own. Sockets it creates live in `ns`.
pub(crate) fn spawn_in<F, Fut, T>(ns: &str, task: F) -> std::thread::JoinHandle<Result<T>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T>>,
    T: Send + 'static,
{
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).with_context(|| format!("opening {path}"))?;
        // SAFETY: setns on a valid namespace fd affects only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns({path}): {}", std::io::Error::last_os_error());
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(task())
    })
}

/// Joins a thread from [`spawn_in`], turning a panic into an error.
pub(crate) fn join<T>(handle: std::thread::JoinHandle<Result<T>>) -> Result<T> {
    match handle.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
