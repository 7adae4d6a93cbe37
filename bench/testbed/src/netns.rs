//! Network namespaces through iproute2: a guard that deletes its namespace (and
//! with it every interface inside) on drop, veth pairs between namespaces, running
//! code or commands inside one, and removing what crashed runs left behind.
//!
//! Everything goes through the `ip` program, as the rest of the workspace does
//! (`xtask bench`, the transport tests): one dependency everyone has, and the
//! commands in error messages can be pasted into a shell.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Result, TestbedError, io};

/// Runs `command` quietly and returns its stdout; fails with its stderr unless it
/// exits 0.
pub fn run(command: &mut Command) -> Result<String> {
    let line = display(command);
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TestbedError::Spawn {
            hint: package_hint(command.get_program()),
            command: line.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(TestbedError::Command {
            command: line,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `ip` with `args`.
pub fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args))
}

/// `command` inside namespace `ns`: `ip netns exec NS PROGRAM ARGS...`, keeping the
/// environment and working directory that `command` sets.
pub fn exec_in(ns: &str, command: &Command) -> Command {
    let mut wrapped = Command::new("ip");
    wrapped
        .args(["netns", "exec", ns])
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// `command` as a shell-like line, for messages.
pub fn display(command: &Command) -> String {
    let mut line = String::new();
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            let _ = write!(line, "{}={} ", key.to_string_lossy(), quote(value));
        }
    }
    line.push_str(&quote(command.get_program()));
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:+,@^%[]".contains(c))
    {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The Debian package that provides `program`, as a hint for "cannot start".
fn package_hint(program: &OsStr) -> &'static str {
    match program.to_str() {
        Some("ip") => " (Debian package iproute2)",
        Some("nft") => " (Debian package nftables)",
        Some("nginx") => " (Debian package nginx-light)",
        Some("chromium") => " (Debian package chromium)",
        Some("curl") => " (Debian package curl)",
        Some("openssl") => " (Debian package openssl)",
        Some("squid") | Some("/usr/sbin/squid") => " (Debian package squid)",
        Some("ethtool") => " (Debian package ethtool)",
        _ => "",
    }
}

/// A network namespace, deleted on drop (also when a test panics). Processes still
/// inside are killed first, so the namespace really goes away.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` with its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        ip(&["netns", "add", name])?;
        // From here on, Drop deletes it whatever fails next.
        let ns = Netns {
            name: name.to_owned(),
        };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        // No duplicate address detection on interfaces made here later: the
        // link-local addresses would otherwise turn valid a second or two after
        // the topology is up, and Chromium takes that address change for a
        // network change and fails its requests in flight (ERR_NETWORK_CHANGED).
        for scope in ["default", "all"] {
            sysctl(name, &format!("net.ipv6.conf.{scope}.accept_dad"), "0")?;
        }
        Ok(ns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        delete_namespace(&self.name);
    }
}

/// Kills whatever runs in `name` and deletes the namespace; errors are ignored
/// (this is the cleanup path).
fn delete_namespace(name: &str) {
    kill_processes_in(name);
    let _ = ip(&["netns", "del", name]);
    // A hosts file given to the namespace ([`NamespaceHosts`]) by a run that
    // was killed before its guard could remove it.
    let _ = std::fs::remove_dir_all(Path::new(NETNS_ETC).join(name));
}

/// Where `ip netns exec` looks for per-namespace files: it bind-mounts
/// `NETNS_ETC/<ns>/<file>` over `/etc/<file>` for the processes it starts.
pub const NETNS_ETC: &str = "/etc/netns";

/// A hosts file for one namespace, `/etc/netns/<ns>/hosts`, which
/// `ip netns exec` mounts over `/etc/hosts` for the processes it starts (the
/// namespaces have no DNS): how the gateway resolves a TLS server name to
/// check it against the address the browser dialled. The machine's
/// `/etc/hosts` is untouched. Removed on drop.
#[derive(Debug)]
pub struct NamespaceHosts {
    dir: PathBuf,
}

impl NamespaceHosts {
    /// Writes `localhost` and `entries` (address, name) as namespace `ns`'s
    /// hosts file. Processes started in `ns` before this call keep the
    /// `/etc/hosts` they saw.
    pub fn write(ns: &str, entries: &[(IpAddr, String)]) -> Result<Self> {
        let dir = Path::new(NETNS_ETC).join(ns);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let guard = NamespaceHosts { dir };
        let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for (ip, name) in entries {
            text.push_str(&format!("{ip} {name}\n"));
        }
        let path = guard.dir.join("hosts");
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        Ok(guard)
    }
}

impl Drop for NamespaceHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SIGKILLs every process in namespace `name` (`ip netns pids`).
fn kill_processes_in(name: &str) {
    let Ok(pids) = ip(&["netns", "pids", name]) else {
        return;
    };
    for pid in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A veth pair: `a_if` in namespace `a`, `b_if` in namespace `b`, both up.
/// Deleting either namespace deletes both ends.
pub fn veth(a: &str, a_if: &str, b: &str, b_if: &str) -> Result<()> {
    ip(&[
        "link", "add", a_if, "netns", a, "type", "veth", "peer", "name", b_if, "netns", b,
    ])?;
    ip(&["-n", a, "link", "set", a_if, "up"])?;
    ip(&["-n", b, "link", "set", b_if, "up"])?;
    Ok(())
}

/// Two namespaces joined by one veth pair (`veth0` on both sides), with an
/// address each: the smallest path between a server and a client, for
/// benchmarks that want nothing else on it. Both are deleted on drop, also on
/// error.
#[derive(Debug)]
pub struct VethPair {
    /// The server's side.
    pub server: Netns,
    /// The client's side.
    pub client: Netns,
}

impl VethPair {
    /// Creates `<tag>-srv` and `<tag>-cli`, joins them and gives `veth0` the
    /// addresses (with prefix length, `10.78.0.1/24`) on each side.
    pub fn create(tag: &str, server_addr: &str, client_addr: &str) -> Result<Self> {
        let pair = VethPair {
            server: Netns::create(&format!("{tag}-srv"))?,
            client: Netns::create(&format!("{tag}-cli"))?,
        };
        veth(pair.server.name(), "veth0", pair.client.name(), "veth0")?;
        for (ns, addr) in [(&pair.server, server_addr), (&pair.client, client_addr)] {
            ip(&["-n", ns.name(), "addr", "add", addr, "dev", "veth0"])?;
        }
        Ok(pair)
    }

    /// Limits both directions to `rate` (tc's notation, `20mbit`) with a token
    /// bucket: 64 kB burst, 100 ms of queue.
    pub fn rate_limit(&self, rate: &str) -> Result<()> {
        for name in [self.server.name(), self.client.name()] {
            run(Command::new("tc").args([
                "-n", name, "qdisc", "replace", "dev", "veth0", "root", "tbf", "rate", rate,
                "burst", "64kb", "latency", "100ms",
            ]))?;
        }
        Ok(())
    }
}

/// Runs `task` on a new thread that has entered namespace `ns` and returns its
/// result: sockets it opens live in `ns`. The thread is scoped, so `task` may
/// borrow from the caller. A panic in `task` is resumed here.
pub fn in_netns<T, F>(ns: &str, task: F) -> Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let path = Path::new("/run/netns").join(ns);
    let file = File::open(&path).map_err(io(format!("opening {}", path.display())))?;
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || -> Result<T> {
            // SAFETY: setns(2) on a valid namespace fd changes only this thread's
            // network namespace; the thread ends with `task`.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(TestbedError::Io {
                    context: format!("setns({})", path.display()),
                    source: std::io::Error::last_os_error(),
                });
            }
            Ok(task())
        });
        match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Writes `value` to the sysctl at `key` (dotted, `net.ipv4.ip_forward`) inside
/// namespace `ns`. Network sysctls are per namespace and resolved through the
/// writing thread's namespace, so no `sysctl` program is needed.
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    let value = value.to_owned();
    let context = format!("writing {} in namespace {ns}", path.display());
    in_netns(ns, move || std::fs::write(path, value))?.map_err(io(context))
}

/// Deletes namespaces named `{prefix}{pid}-...` whose process `pid` no longer
/// exists: what runs that were killed left behind (a killed process runs no
/// destructors). Processes still inside are killed first. Returns the names removed.
pub fn cleanup_stale(prefix: &str) -> Result<Vec<String>> {
    let list = ip(&["netns", "list"])?;
    let mut removed = Vec::new();
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            delete_namespace(name);
            removed.push(name.to_owned());
        }
    }
    Ok(removed)
}

/// Whether `ns` exists.
pub fn exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_in_wraps_program_args_and_env() {
        let mut command = Command::new("curl");
        command
            .args(["-s", "http://[2001:db8::1]/a b"])
            .env("K", "v");
        assert_eq!(
            display(&exec_in("ns1", &command)),
            "K=v ip netns exec ns1 curl -s 'http://[2001:db8::1]/a b'"
        );
    }
}
