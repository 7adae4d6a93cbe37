//! Squid as a transparent caching proxy in the router namespace: the page-load
//! benchmark's "what a network operator would deploy instead" alternative to the
//! gateway. Browsers' TCP to port 80 arriving on the LAN interface is steered
//! into Squid with nftables TPROXY (IPv4 and IPv6), exactly as the gateway's own
//! interception does; Squid fetches from the original destination with the
//! client's address as source (tproxy spoofing) and caches what the origin's
//! headers allow.
//!
//! What it installs in the namespace, and removes on drop (also when
//! [`Squid::start`] fails halfway): the nftables table [`SQUID_TABLE`], one
//! `ip rule` per family for [`SQUID_MARK`] and one `local` default route per
//! family in table [`SQUID_ROUTE_TABLE`]. Everything Squid writes (cache,
//! logs, pid file) lives in the directory it is given; it never touches
//! `/var/spool/squid`, `/var/log/squid` or a system Squid's pid file, and its
//! ports are bound inside the namespace only, so a Squid the Debian package
//! started on the host does not collide with it.
//!
//! Where to start: [`Squid::start`], then [`config`] for the settings and why.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::error::{Result, TestbedError, io};
use crate::netns::{exec_in, ip, run};
use crate::process::{NsProcess, wait_until};

/// The Squid binary (Debian's `squid` package, 5.7 on bookworm).
pub const SQUID: &str = "/usr/sbin/squid";

/// The user Squid drops to when started as root (Debian's build default); it
/// must be able to write the state directory.
pub const SQUID_USER: &str = "proxy";

/// The port the TPROXY rules steer intercepted flows to. Not the gateway's
/// (3129), so both can be installed in one namespace.
pub const SQUID_TPROXY_PORT: u16 = 3139;

/// Squid's ordinary forward-proxy port, on the namespace's loopback only: Squid
/// wants one (for its own URLs), and it is what readiness is probed on, since a
/// plain connection to the TPROXY port would be taken for an intercepted one.
pub const SQUID_FORWARD_PORT: u16 = 3128;

/// The nftables table (family `inet`) holding the interception rules.
pub const SQUID_TABLE: &str = "testbed_squid";

/// The firewall mark of packets to deliver locally (intercepted flows and the
/// replies to Squid's spoofed upstream connections). Not the gateway's marks.
pub const SQUID_MARK: u32 = 0x05c7_0011;

/// The routing table holding the `local` default routes for [`SQUID_MARK`].
pub const SQUID_ROUTE_TABLE: u32 = 3139;

/// The `ip rule` priority of the fwmark rules.
pub const SQUID_RULE_PRIORITY: u32 = 3139;

/// The on-disk cache (`cache_dir ufs`), in MB: far more than a benchmark's
/// pages, small enough to create in a moment.
pub const CACHE_DIR_MB: u32 = 256;

/// The memory cache (`cache_mem`), in MB: every page's objects fit, so hits are
/// served from memory, as on a warmed-up production proxy.
pub const CACHE_MEM_MB: u32 = 64;

/// The largest object cached at all (`maximum_object_size`), in MB. Squid's
/// default of 4 MB would leave out the large images and videos a page has.
pub const MAX_OBJECT_MB: u32 = 64;

/// The largest object kept in the memory cache, in KB (Squid's default is 512).
pub const MAX_OBJECT_IN_MEMORY_KB: u32 = 4096;

/// How long Squid gets to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// What Squid logs (at debug level 1, which `-d 1` copies to its stderr) once
/// the TPROXY port listens.
const READY_TPROXY: &str = "Accepting TPROXY intercepted HTTP Socket connections";

/// What it logs once the forward-proxy port listens.
const READY_FORWARD: &str = "Accepting HTTP Socket connections";

/// Log lines that mean Squid will not work although it keeps running: it logs
/// a port it cannot bind and carries on without it.
const START_FAILURES: &[&str] = &["Cannot bind socket", "FATAL:"];

/// How long `squid -z` may take to create the cache directories.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long Squid gets to stop after SIGTERM before it is killed; its own
/// `shutdown_lifetime` is shorter.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The start of every service name: then the process id, `n` and a counter.
const SERVICE_PREFIX: &str = "testbed";

/// Distinguishes the Squids of one process (their service names).
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);

/// One line of Squid's access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquidAccess {
    /// The client's address.
    pub client: IpAddr,
    /// Squid's result code: `TCP_MISS`, `TCP_HIT`, `TCP_MEM_HIT`,
    /// `TCP_REFRESH_UNMODIFIED`, ...
    pub result: String,
    /// The status sent to the client.
    pub status: u16,
    /// Bytes sent to the client (headers included).
    pub bytes: u64,
    /// The request method.
    pub method: String,
    /// The URL, `http://203.0.113.10/path`.
    pub url: String,
}

impl SquidAccess {
    /// Whether Squid served the response from its cache without asking the
    /// origin (any `*_HIT` result; a revalidation is not one).
    pub fn is_hit(&self) -> bool {
        self.result.ends_with("_HIT")
    }
}

/// A running Squid with its interception installed; on drop Squid is stopped
/// and the rules and routes it needed are removed. Its cache and logs stay in
/// the directory it was given.
#[derive(Debug)]
pub struct Squid {
    // Field order is drop order: Squid stops before its routes and its shared
    // memory go away.
    process: NsProcess,
    _interception: Interception,
    _shared_memory: SharedMemory,
    dir: PathBuf,
    service: String,
}

impl Squid {
    /// Starts Squid in namespace `ns` (the router) as a transparent cache for
    /// TCP port 80 arriving on `lan_if`, IPv4 and IPv6, with its configuration,
    /// cache, logs and pid file in `dir` (created, and handed to
    /// [`SQUID_USER`]; its parents must be searchable by that user). Creates the
    /// cache directories (`squid -z`), installs the interception, starts Squid
    /// in the foreground and returns once it listens.
    pub fn start(ns: &str, lan_if: &str, dir: &Path) -> Result<Self> {
        if !Path::new(SQUID).is_file() {
            return Err(TestbedError::Spawn {
                command: SQUID.into(),
                hint: " (Debian package squid)",
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let user = system_user(SQUID_USER)?;
        prepare_dir(dir, &user)?;
        let conf = dir.join("squid.conf");
        std::fs::write(&conf, config(dir)).map_err(io(format!("writing {}", conf.display())))?;
        // A service name of its own: Squid derives shared-memory and IPC names
        // from it, which must not meet a system Squid's (or a parallel test's).
        let service = format!(
            "{SERVICE_PREFIX}{}n{}",
            std::process::id(),
            NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        remove_stale_shared_memory();
        let shared_memory = SharedMemory {
            prefix: format!("{service}-"),
        };
        let squid = |extra: &[&str]| {
            let mut command = Command::new(SQUID);
            command
                .args(["-N", "-n", &service, "-f"])
                .arg(&conf)
                .args(extra);
            command
        };

        // `-z` creates the cache directories, then exits. It parses the
        // configuration, which probes TPROXY support, so it runs in `ns` too.
        let mut create =
            NsProcess::spawn(ns, "squid -z", &squid(&["-z"]), &dir.join("squid-z.out"))?;
        let status = create.wait_exit(CREATE_TIMEOUT)?;
        if !status.success() {
            return Err(TestbedError::Exited {
                name: "squid -z".into(),
                status,
                what: "the cache directories".into(),
                log: create.log_path().to_owned(),
                tail: format!("{}\n{}", create.log_tail(), cache_log_tail(dir)),
            });
        }

        let interception = Interception::install(ns, lan_if, dir)?;
        let mut process =
            NsProcess::spawn(ns, "squid", &squid(&["-d", "1"]), &dir.join("squid.out"))?;
        // Squid says when each port listens; a TCP probe alone could be
        // answered by someone else holding the port.
        if let Err(e) = wait_ready(&mut process) {
            return Err(with_logs(e, &process, dir));
        }
        let forward = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), SQUID_FORWARD_PORT);
        if let Err(e) = process.wait_for_tcp(ns, forward, START_TIMEOUT) {
            return Err(with_logs(e, &process, dir));
        }
        Ok(Squid {
            process,
            _interception: interception,
            _shared_memory: shared_memory,
            dir: dir.to_owned(),
            service,
        })
    }

    /// The access log, parsed; lines that do not parse are skipped.
    pub fn access_log(&self) -> Vec<SquidAccess> {
        crate::nginx::read_log(&self.dir.join("access.log"), parse_access_line)
    }

    /// The directory holding the configuration, cache and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process, for its log and signals.
    pub fn process(&mut self) -> &mut NsProcess {
        &mut self.process
    }

    /// Squid's service name (`-n`), unique per instance: the prefix of its
    /// shared-memory segments.
    pub fn service_name(&self) -> &str {
        &self.service
    }

    /// Squid's process id.
    pub fn process_id(&self) -> u32 {
        self.process.pid()
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        // SIGTERM lets Squid close its cache index cleanly; the interception
        // guard removes the rules after this.
        let _ = self.process.stop(STOP_GRACE);
    }
}

/// Squid's shared-memory segments (`/dev/shm/SERVICE-*`, for collapsed
/// forwarding even without workers): it removes them when it stops cleanly,
/// not when it is killed, so this removes whatever is left.
#[derive(Debug)]
struct SharedMemory {
    /// The service name and a dash: the segments' common prefix.
    prefix: String,
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir("/dev/shm") else {
            return;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&self.prefix)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Removes the shared-memory segments of Squids whose testbed process is gone
/// (killed runs run no destructors).
fn remove_stale_shared_memory() {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SERVICE_PREFIX))
            .and_then(|rest| rest.split_once('n'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The nftables table, fwmark rules and local routes that TPROXY needs in one
/// namespace; whatever was installed is removed on drop, in reverse order.
#[derive(Debug)]
struct Interception {
    ns: String,
    /// Commands that undo what was installed, in installation order.
    undo: Vec<Command>,
}

impl Interception {
    fn install(ns: &str, lan_if: &str, dir: &Path) -> Result<Self> {
        let mut installed = Interception {
            ns: ns.to_owned(),
            undo: Vec::new(),
        };
        let rules = dir.join("interception.nft");
        std::fs::write(&rules, ruleset(lan_if))
            .map_err(io(format!("writing {}", rules.display())))?;
        // `nft -f` applies the file atomically: the table exists only if it
        // succeeded.
        let mut load = Command::new("nft");
        load.arg("-f").arg(&rules);
        run(&mut exec_in(ns, &load))?;
        let mut delete = Command::new("nft");
        delete.args(["delete", "table", "inet", SQUID_TABLE]);
        installed.undo.push(exec_in(ns, &delete));

        let (mark, table, priority) = (
            format!("{SQUID_MARK:#x}"),
            SQUID_ROUTE_TABLE.to_string(),
            SQUID_RULE_PRIORITY.to_string(),
        );
        for family in ["-4", "-6"] {
            let rule = ["fwmark", &mark, "lookup", &table, "priority", &priority];
            installed.step(family, "rule", &rule)?;
            let any = if family == "-4" { "0.0.0.0/0" } else { "::/0" };
            let route = ["local", any, "dev", "lo", "table", &table];
            installed.step(family, "route", &route)?;
        }
        Ok(installed)
    }

    /// `ip -n NS FAMILY OBJECT add ARGS`, remembering `... del ARGS`.
    fn step(&mut self, family: &str, object: &str, args: &[&str]) -> Result<()> {
        let ns = self.ns.as_str();
        ip(&[&["-n", ns, family, object, "add"], args].concat())?;
        let mut undo = Command::new("ip");
        undo.args(["-n", ns, family, object, "del"]).args(args);
        self.undo.push(undo);
        Ok(())
    }
}

impl Drop for Interception {
    fn drop(&mut self) {
        for command in self.undo.iter_mut().rev() {
            let _ = run(command);
        }
    }
}

/// The interception rules. Both paths into Squid need the mark that routes
/// them to the local stack:
/// - new flows from the LAN to port 80 get TPROXY'd to Squid's port;
/// - packets of existing transparent sockets: later packets of intercepted
///   flows, and the replies to Squid's upstream connections, which carry the
///   client's address as destination and would otherwise be forwarded to the
///   LAN.
fn ruleset(lan_if: &str) -> String {
    let mark = format!("{SQUID_MARK:#010x}");
    let port = SQUID_TPROXY_PORT;
    let mut text = String::new();
    let _ = write!(
        text,
        "table inet {SQUID_TABLE} {{\n\
         \tchain prerouting {{\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\tmeta l4proto tcp socket transparent 1 meta mark set {mark} accept\n\
         \t\tiifname \"{lan_if}\" meta l4proto tcp th dport 80 tproxy ip to :{port} meta mark set {mark} accept\n\
         \t\tiifname \"{lan_if}\" meta l4proto tcp th dport 80 tproxy ip6 to :{port} meta mark set {mark} accept\n\
         \t}}\n\
         }}\n"
    );
    text
}

/// squid.conf with every path under `dir`. The caching settings are those of a
/// real deployment, so that the benchmark compares with a proxy that caches
/// what it may:
/// - `cache_mem` and `cache_dir` hold every page's objects;
/// - `maximum_object_size` raised from Squid's 4 MB;
/// - Debian's refresh patterns, which honour the origin's Cache-Control,
///   Expires and validators; for responses with only a Last-Modified the
///   heuristic is a tenth of its age, capped at a day, which is what the
///   gateway's cache does (and what RFC 9111 suggests), so neither side gets
///   more freshness than the other.
fn config(dir: &Path) -> String {
    let d = dir.display();
    let tproxy = SQUID_TPROXY_PORT;
    let forward = SQUID_FORWARD_PORT;
    format!(
        "# Generated by testbed (squid.rs); everything Squid writes is under {d}.\n\
         http_port {tproxy} tproxy\n\
         http_port 127.0.0.1:{forward}\n\
         icp_port 0\n\
         htcp_port 0\n\
         # Reached only through the interception on the LAN interface and the\n\
         # namespace's loopback.\n\
         http_access allow all\n\
         cache_effective_user {SQUID_USER}\n\
         visible_hostname testbed-squid\n\
         pid_filename {d}/squid.pid\n\
         cache_log {d}/cache.log\n\
         logformat testbed %ts.%03tu %>a %Ss %>Hs %<st %rm %ru\n\
         access_log stdio:{d}/access.log logformat=testbed\n\
         buffered_logs off\n\
         cache_store_log none\n\
         netdb_filename none\n\
         coredump_dir {d}\n\
         pinger_enable off\n\
         shutdown_lifetime 1 seconds\n\
         cache_mem {CACHE_MEM_MB} MB\n\
         maximum_object_size_in_memory {MAX_OBJECT_IN_MEMORY_KB} KB\n\
         maximum_object_size {MAX_OBJECT_MB} MB\n\
         cache_dir ufs {d}/cache {CACHE_DIR_MB} 16 256\n\
         refresh_pattern ^ftp: 1440 20% 10080\n\
         refresh_pattern -i (/cgi-bin/|\\?) 0 0% 0\n\
         refresh_pattern . 0 10% 1440\n"
    )
}

fn parse_access_line(line: &str) -> Option<SquidAccess> {
    let mut fields = line.split_whitespace();
    let _time = fields.next()?;
    let client: IpAddr = fields.next()?.parse().ok()?;
    Some(SquidAccess {
        // Squid's dual-stack socket reports IPv4 clients as such, but be safe.
        client: client.to_canonical(),
        result: fields.next()?.to_owned(),
        status: fields.next()?.parse().ok()?,
        bytes: fields.next()?.parse().ok()?,
        method: fields.next()?.to_owned(),
        url: fields.next()?.to_owned(),
    })
}

/// A system user's ids.
#[derive(Debug, Clone, Copy)]
struct SystemUser {
    uid: u32,
    gid: u32,
}

/// Looks `name` up in /etc/passwd (no NSS: Debian's system users are there).
fn system_user(name: &str) -> Result<SystemUser> {
    let path = Path::new("/etc/passwd");
    let text = std::fs::read_to_string(path).map_err(io("reading /etc/passwd"))?;
    text.lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [user, _, uid, gid, ..] if *user == name => Some(SystemUser {
                    uid: uid.parse().ok()?,
                    gid: gid.parse().ok()?,
                }),
                _ => None,
            }
        })
        .ok_or_else(|| TestbedError::Config {
            path: path.to_owned(),
            what: format!("no user `{name}`, which Squid runs as (Debian package squid)"),
        })
}

/// Creates `dir` for Squid: owned by its user, and reachable by it.
fn prepare_dir(dir: &Path, user: &SystemUser) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(io(format!("resolving {}", dir.display())))?;
    for parent in dir.ancestors().skip(1) {
        let meta = parent
            .metadata()
            .map_err(io(format!("inspecting {}", parent.display())))?;
        let searchable = meta.permissions().mode() & 0o001 != 0
            || (meta.uid() == user.uid && meta.permissions().mode() & 0o100 != 0)
            || (meta.gid() == user.gid && meta.permissions().mode() & 0o010 != 0);
        if !searchable {
            return Err(TestbedError::Config {
                path: parent.to_owned(),
                what: format!(
                    "not searchable by `{SQUID_USER}`, the user Squid runs as, so it \
                     cannot reach {}; make it mode 0755 or put Squid's directory elsewhere",
                    dir.display()
                ),
            });
        }
    }
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid))
        .map_err(io(format!("handing {} to {SQUID_USER}", dir.display())))
}

/// Waits until Squid logs that both ports listen; fails early if it exits or
/// logs one of [`START_FAILURES`].
fn wait_ready(process: &mut NsProcess) -> Result<()> {
    let what = "Squid to listen on its ports";
    wait_until(what, START_TIMEOUT, || {
        let log = process.log();
        if let Some(line) = log
            .lines()
            .find(|l| START_FAILURES.iter().any(|f| l.contains(f)))
        {
            return Err(TestbedError::Failed {
                name: process.name().to_owned(),
                what: what.to_owned(),
                line: line.trim().to_owned(),
                log: process.log_path().to_owned(),
                tail: process.log_tail(),
            });
        }
        if log.contains(READY_TPROXY) && log.contains(READY_FORWARD) {
            return Ok(true);
        }
        process.ensure_running(what)?;
        Ok(false)
    })
}

/// The last lines of Squid's own log, where it says why it stopped.
fn cache_log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("cache.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    format!(
        "end of cache.log:\n{}",
        lines[lines.len().saturating_sub(15)..].join("\n")
    )
}

/// `error` with the end of Squid's logs added, where it can carry them.
fn with_logs(error: TestbedError, process: &NsProcess, dir: &Path) -> TestbedError {
    match error {
        TestbedError::Exited {
            name,
            status,
            what,
            log,
            tail,
        } => TestbedError::Exited {
            name,
            status,
            what,
            log,
            tail: format!("{tail}\n{}", cache_log_tail(dir)),
        },
        TestbedError::Timeout { what, after } => TestbedError::Timeout {
            what: format!(
                "{what}; end of {}:\n{}",
                process.log_path().display(),
                process.log_tail()
            ),
            after,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_lines_parse() {
        let entry = parse_access_line(
            "1732262400.123 192.0.2.2 TCP_MEM_HIT 200 1433 GET http://203.0.113.10/a.css",
        )
        .expect("parses");
        assert_eq!(entry.client, IpAddr::from([192, 0, 2, 2]));
        assert_eq!(entry.result, "TCP_MEM_HIT");
        assert!(entry.is_hit());
        assert_eq!(entry.status, 200);
        assert_eq!(entry.bytes, 1433);
        assert_eq!(entry.method, "GET");
        assert_eq!(entry.url, "http://203.0.113.10/a.css");
        let mapped =
            parse_access_line("1.0 ::ffff:192.0.2.2 TCP_MISS 200 1 GET http://x/").expect("parses");
        assert_eq!(mapped.client, IpAddr::from([192, 0, 2, 2]));
        assert!(!mapped.is_hit());
        assert!(parse_access_line("garbage").is_none());
    }

    #[test]
    fn revalidations_are_not_hits() {
        let entry = SquidAccess {
            client: IpAddr::from([192, 0, 2, 2]),
            result: "TCP_REFRESH_UNMODIFIED".into(),
            status: 200,
            bytes: 1,
            method: "GET".into(),
            url: "http://x/".into(),
        };
        assert!(!entry.is_hit());
    }

    #[test]
    fn ruleset_intercepts_port_80_on_the_lan_for_both_families() {
        let text = ruleset("lan0");
        assert!(text.contains("table inet testbed_squid"), "{text}");
        assert!(
            text.contains(
                "iifname \"lan0\" meta l4proto tcp th dport 80 tproxy ip to :3139 \
                 meta mark set 0x05c70011 accept"
            ),
            "{text}"
        );
        assert!(text.contains("tproxy ip6 to :3139"), "{text}");
        assert!(
            text.contains("socket transparent 1 meta mark set 0x05c70011"),
            "{text}"
        );
    }

    #[test]
    fn config_keeps_every_path_in_the_directory() {
        let text = config(Path::new("/tmp/sq"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            for word in line.split_whitespace() {
                let path = word.trim_start_matches("stdio:");
                if path.starts_with('/') {
                    assert!(Path::new(path).starts_with("/tmp/sq"), "{line}");
                }
            }
        }
        assert!(text.contains("http_port 3139 tproxy"), "{text}");
        assert!(
            text.contains("cache_dir ufs /tmp/sq/cache 256 16 256"),
            "{text}"
        );
    }
}
