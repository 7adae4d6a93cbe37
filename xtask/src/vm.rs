//! `cargo xtask vm-test`: runs test binaries that need kernel SCTP inside a
//! virtme-ng VM booting Debian's kernel over this host's root filesystem.
//!
//! The host kernel has no SCTP, so the tests are built here (`cargo test --no-run
//! --message-format=json` names the executables), and the VM, booted with
//! `vng --disable-kvm` (software emulation; KVM does not work on these hosts),
//! loads `sctp`, sets `net.sctp.udp_port` to 9899 for RFC 6951 encapsulation
//! and `net.sctp.intl_enable` to 1 so that sockets may offer I-DATA (RFC 8260),
//! makes sure IPv6 is on for the loopback, lowers its MTU to 1500 so messages
//! span many packets, and runs each binary with `--ignored` (the tests that
//! need kernel SCTP are exactly the ignored ones; the rest already ran on the
//! host), in two phases:
//!
//! 1. every selected test whose name does not contain [`LOSSY_MARKER`], on a
//!    clean loopback;
//! 2. `netem loss` ([`GUEST_LOSS`]) is added to the loopback, and the selected
//!    tests whose name contains [`LOSSY_MARKER`] run under it.
//!
//! Phases rather than a guard inside each test: the qdisc is global to the
//! guest, so a test that added it would put every test running beside it under
//! loss. The guest writes its exit
//! status into a directory shared read-write with the host; that file, not vng's
//! own exit code, decides the result (a VM that dies early leaves no file, which
//! fails too).
//!
//! It never changes the host's network or modules, and never leaves a VM behind:
//! vng runs in its own process group, killed as a whole at the time-out.
//!
//! `GATEWAY_EBPF_OBJECT`, when set on the host, is exported in the guest too
//! (origin:kernel_depth loads `tc_sctp` there).
//!
//! Any integration-test target can be run (`--test NAME`, repeatable, and
//! `--package`), so that other kernel-dependent tests can join this runner.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd::{which, workspace_root};

/// UDP port the guest kernel listens on for SCTP over UDP (`net.sctp.udp_port`),
/// the IANA `sctp-tunneling` port the tests expect.
const GUEST_SCTP_UDP_PORT: u16 = 9899;
/// Loopback MTU inside the VM, bytes: Ethernet-sized, so that large messages
/// are fragmented into many DATA chunks as on a real path.
const GUEST_LO_MTU: u32 = 1500;
/// Loss `netem` adds to the guest's loopback in the second phase, in tc's
/// syntax: each packet (either way, as loopback is one interface) is dropped
/// with this probability.
const GUEST_LOSS: &str = "2%";
/// Tests whose name contains this run in the second phase, under
/// [`GUEST_LOSS`], and only there.
const LOSSY_MARKER: &str = "lossy";
/// Exit status the guest script reports when the VM set-up (not a test) failed.
const SETUP_FAILED: i32 = 97;

/// Options for `cargo xtask vm-test`.
#[derive(Debug, clap::Args)]
pub(crate) struct VmOptions {
    /// Kernel image to boot; default: the newest /boot/vmlinuz-* whose modules
    /// include sctp.ko, never the running kernel.
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// Package of the `--test` targets that name none.
    #[arg(long, default_value = "gateway-transport")]
    package: String,
    /// Integration-test target to run, `TEST` (of `--package`) or `PACKAGE:TEST`
    /// (repeatable).
    #[arg(
        long = "test",
        default_values = ["kernel_sctp", "interop_udp", "origin:driver"]
    )]
    tests: Vec<String>,
    /// Run only tests whose name contains this (passed to each test binary).
    filter: Option<String>,
    /// Test threads inside the VM.
    #[arg(long, default_value_t = 2)]
    test_threads: u32,
    /// Guest memory (qemu `-m` syntax).
    #[arg(long, default_value = "2G")]
    memory: String,
    /// Give up (and kill the VM) after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// The eBPF object the guest's tests load; `None`: `GATEWAY_EBPF_OBJECT`
    /// of the host's environment, if set.
    #[arg(skip)]
    pub(crate) ebpf_object: Option<PathBuf>,
}

impl VmOptions {
    /// The defaults plus the tests that load the eBPF object `object` in the
    /// guest: what `cargo xtask test` runs.
    pub(crate) fn with_ebpf(object: &Path) -> Self {
        let mut options = Self::default();
        options.tests.push("origin:kernel_depth".into());
        options.ebpf_object = Some(object.to_owned());
        options
    }
}

impl Default for VmOptions {
    /// The command line's defaults: every kernel test of gateway-transport.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            options: VmOptions,
        }
        <Defaults as clap::Parser>::parse_from(["vm-test"]).options
    }
}

pub(crate) fn run(options: &VmOptions) -> Result<()> {
    let workspace = workspace_root();
    let vng =
        which("vng").context("virtme-ng (`vng`) is not installed: run `cargo xtask setup`")?;
    let kernel = match &options.kernel {
        Some(path) => path.clone(),
        None => find_sctp_kernel()?,
    };
    let release = kernel_release(&kernel)?;

    println!(
        "building test binaries: {} --test {}",
        options.package,
        options.tests.join(" --test ")
    );
    let mut binaries = Vec::new();
    for (package, tests) in group_by_package(&options.package, &options.tests) {
        binaries.extend(build_tests(&workspace, &package, &tests)?);
    }

    let files = SharedFiles::new(workspace.join("target").join("vm-test"));
    fs::create_dir_all(&files.dir).with_context(|| format!("create {}", files.dir.display()))?;
    let _ = fs::remove_file(&files.status);
    fs::write(&files.log, "").with_context(|| format!("create {}", files.log.display()))?;
    // Tests that load the eBPF object inside the guest (origin:kernel_depth)
    // find it where the host's `cargo xtask build-ebpf` left it.
    let ebpf_object = options
        .ebpf_object
        .clone()
        .or_else(|| std::env::var_os(crate::ebpf::OBJECT_PATH_ENV).map(PathBuf::from));
    fs::write(
        &files.script,
        guest_script(
            options,
            &binaries,
            &files.status,
            &files.log,
            ebpf_object.as_deref(),
        ),
    )
    .with_context(|| format!("write {}", files.script.display()))?;

    println!("booting Debian kernel {release} in a VM (software emulation, ~30-60 s to boot)…");
    let started = Instant::now();
    let vng_status = boot(&vng, &kernel, options, &workspace, &files)?;
    let elapsed = started.elapsed();

    let Ok(status) = fs::read_to_string(&files.status) else {
        let console = fs::read(&files.console).unwrap_or_default();
        let tail = &console[console.len().saturating_sub(4000)..];
        eprintln!(
            "--- VM console (last lines) ---\n{}",
            String::from_utf8_lossy(tail)
        );
        bail!(
            "the VM ended ({vng_status}) without reporting a result: the guest did not get to run the tests"
        );
    };
    let code: i32 = status
        .trim()
        .parse()
        .with_context(|| format!("unreadable guest status {status:?}"))?;
    println!(
        "VM finished in {:.0} s (boot included)",
        elapsed.as_secs_f64()
    );
    match code {
        0 => {
            println!("kernel SCTP tests passed inside the VM ({release})");
            Ok(())
        }
        SETUP_FAILED => bail!("setting up the VM failed (see the output above)"),
        code => bail!("tests failed inside the VM (exit status {code})"),
    }
}

/// The files the host and the guest share (the guest's one writable folder).
struct SharedFiles {
    dir: PathBuf,
    /// The guest's exit status, written last.
    status: PathBuf,
    /// The guest's output, followed by the host as it grows.
    log: PathBuf,
    /// What the guest runs ([`guest_script`]).
    script: PathBuf,
    /// The VM console (kernel messages, terminal control codes), shown only if
    /// the guest never reports a result.
    console: PathBuf,
}

impl SharedFiles {
    fn new(dir: PathBuf) -> Self {
        Self {
            status: dir.join("status"),
            log: dir.join("log"),
            script: dir.join("run.sh"),
            console: dir.join("console"),
            dir,
        }
    }
}

/// Boots `kernel` with the guest script, prints the guest's log as it grows
/// and returns vng's exit status; kills the VM past `options.timeout`.
fn boot(
    vng: &Path,
    kernel: &Path,
    options: &VmOptions,
    workspace: &Path,
    files: &SharedFiles,
) -> Result<ExitStatus> {
    let console = fs::File::create(&files.console)
        .with_context(|| format!("create {}", files.console.display()))?;
    let started = Instant::now();
    let mut child = Command::new(vng)
        .arg("--disable-kvm")
        .args(["--memory", &options.memory, "--cpus", "2"])
        .arg("-r")
        .arg(kernel)
        .arg(format!("--rwdir={}", files.dir.display()))
        .arg("--cwd")
        .arg(workspace)
        .arg("--exec")
        .arg(format!("bash {}", files.script.display()))
        .stdin(Stdio::null())
        .stdout(console.try_clone()?)
        .stderr(console)
        .process_group(0)
        .spawn()
        .with_context(|| format!("start {}", vng.display()))?;
    let limit = Duration::from_secs(options.timeout);
    // The guest writes its output to the shared log, which is followed here: the
    // VM's console drops output when the guest powers off right after writing.
    let mut log = LogFollower::new(&files.log);
    loop {
        log.print_new();
        if let Some(status) = child.try_wait()? {
            log.print_new();
            return Ok(status);
        }
        if started.elapsed() > limit {
            // The whole group: vng, qemu and anything they started. The child
            // leads its own group (`process_group(0)`), and is not reaped yet.
            if let Ok(group) = libc::pid_t::try_from(child.id()) {
                // SAFETY: killpg has no memory-safety preconditions.
                unsafe { libc::killpg(group, libc::SIGKILL) };
            }
            let _ = child.wait();
            bail!("the VM did not finish within {limit:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prints what is appended to a file, as it grows.
#[derive(Debug)]
struct LogFollower {
    path: PathBuf,
    printed: usize,
}

impl LogFollower {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            printed: 0,
        }
    }

    /// Prints the complete lines added since the last call.
    fn print_new(&mut self) {
        let Ok(bytes) = fs::read(&self.path) else {
            return;
        };
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        if end + 1 > self.printed {
            print!("{}", String::from_utf8_lossy(&bytes[self.printed..=end]));
            self.printed = end + 1;
        }
    }
}

/// The shell script the guest runs: set-up, each binary's clean tests, the
/// loss, each binary's lossy tests, then the status file.
fn guest_script(
    options: &VmOptions,
    binaries: &[PathBuf],
    status_file: &Path,
    log_file: &Path,
    ebpf_object: Option<&Path>,
) -> String {
    let ebpf = ebpf_object
        .map(|path| {
            format!(
                "export {}={}\n",
                crate::ebpf::OBJECT_PATH_ENV,
                quote(&path.to_string_lossy())
            )
        })
        .unwrap_or_default();
    let filter = options.filter.as_deref().map(quote);
    let mut clean = String::new();
    let mut lossy = String::new();
    for binary in binaries {
        let name = binary
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default();
        let bin = quote(&binary.to_string_lossy());
        let threads = options.test_threads;
        let marker = quote(LOSSY_MARKER);
        clean.push_str(&format!(
            "echo \"== {name}\" >>\"$log\"\n\
             {bin} --ignored --test-threads {threads} --skip {marker}{filter} >>\"$log\" 2>&1 || rc=$?\n",
            filter = filter.as_ref().map(|f| format!(" {f}")).unwrap_or_default(),
        ));
        // libtest ORs its name filters, so "lossy and the user's filter" is
        // the list of ignored tests narrowed by both, run with `--exact`.
        lossy.push_str(&format!(
            "tests=$({bin} --ignored --list 2>>\"$log\" | sed -n 's/: test$//p' | grep -F {marker}{narrow})\n\
             if [ -n \"$tests\" ]; then\n\
             \x20 echo \"== {name} (netem loss {loss} on lo)\" >>\"$log\"\n\
             \x20 {bin} --ignored --test-threads {threads} --exact $tests >>\"$log\" 2>&1 || rc=$?\n\
             fi\n",
            narrow = filter
                .as_ref()
                .map(|f| format!(" | grep -F -- {f}"))
                .unwrap_or_default(),
            loss = GUEST_LOSS,
        ));
    }
    format!(
        r#"# Written by `cargo xtask vm-test`; runs inside the VM.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Panics show where; anyhow errors stay short.
export RUST_BACKTRACE=1 RUST_LIB_BACKTRACE=0
{ebpf}status={status}
log={log}
fail() {{ echo "vm-test set-up: $*" >>"$log"; echo {setup_failed} > "$status"; exit {setup_failed}; }}
echo "guest kernel $(uname -r), $(nproc) CPUs, up $(cut -d' ' -f1 /proc/uptime) s" >>"$log"
modprobe sctp >>"$log" 2>&1 || fail "modprobe sctp"
sysctl -qw net.sctp.udp_port={udp_port} >>"$log" 2>&1 || fail "sysctl net.sctp.udp_port"
sysctl -qw net.sctp.intl_enable=1 >>"$log" 2>&1 || fail "sysctl net.sctp.intl_enable"
sysctl -qw net.ipv6.conf.lo.disable_ipv6=0 >>"$log" 2>&1 || fail "sysctl net.ipv6.conf.lo.disable_ipv6"
ip link set lo up >>"$log" 2>&1 || fail "loopback up"
ip link set lo mtu {mtu} >>"$log" 2>&1 || fail "loopback mtu"
ip -6 addr show dev lo | grep -q '::1/128' || fail "no ::1 on the loopback"
rc=0
# Phase 1: clean loopback, every selected test but the lossy ones.
{clean}# Phase 2: loss on the loopback, the selected lossy tests only.
modprobe sch_netem >>"$log" 2>&1 || fail "modprobe sch_netem"
tc qdisc add dev lo root netem loss {loss} >>"$log" 2>&1 || fail "tc qdisc add netem"
{lossy}tc qdisc del dev lo root >>"$log" 2>&1
echo "$rc" > "$status"
exit "$rc"
"#,
        status = quote(&status_file.to_string_lossy()),
        log = quote(&log_file.to_string_lossy()),
        setup_failed = SETUP_FAILED,
        udp_port = GUEST_SCTP_UDP_PORT,
        mtu = GUEST_LO_MTU,
        loss = GUEST_LOSS,
    )
}

/// Single-quotes `s` for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Builds the test targets and returns their executables, in order.
/// `TEST` and `PACKAGE:TEST` entries, grouped by package in first-seen order.
fn group_by_package(default: &str, tests: &[String]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for entry in tests {
        let (package, test) = entry.split_once(':').unwrap_or((default, entry));
        match groups.iter_mut().find(|(p, _)| p == package) {
            Some((_, list)) => list.push(test.to_owned()),
            None => groups.push((package.to_owned(), vec![test.to_owned()])),
        }
    }
    groups
}

fn build_tests(workspace: &Path, package: &str, tests: &[String]) -> Result<Vec<PathBuf>> {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(workspace)
        .args(["test", "-p", package, "--no-run", "--message-format=json"]);
    for test in tests {
        cargo.args(["--test", test]);
    }
    let output = cargo
        .stderr(Stdio::inherit())
        .output()
        .context("run cargo test --no-run")?;
    if !output.status.success() {
        bail!("building the tests failed ({})", output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    tests
        .iter()
        .map(|test| {
            stdout
                .lines()
                .filter(|l| l.contains(r#""reason":"compiler-artifact""#))
                .filter(|l| {
                    l.contains(&format!(
                        r#""kind":["test"],"crate_types":["bin"],"name":"{test}""#
                    ))
                })
                .find_map(|l| json_string_field(l, "executable"))
                .map(PathBuf::from)
                .with_context(|| format!("cargo named no executable for test target `{test}`"))
        })
        .collect()
}

/// The value of `"field":"..."` in one line of cargo's JSON (paths only: handles
/// the escapes cargo emits for them).
fn json_string_field(line: &str, field: &str) -> Option<String> {
    let start = line.find(&format!(r#""{field}":""#))? + field.len() + 4;
    let mut value = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.push(match chars.next()? {
                'n' => '\n',
                't' => '\t',
                other => other,
            }),
            c => value.push(c),
        }
    }
    None
}

/// The newest /boot/vmlinuz-* with sctp.ko among its modules, except the running
/// kernel (which, on these hosts, has no SCTP).
fn find_sctp_kernel() -> Result<PathBuf> {
    let running = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut candidates: Vec<(String, PathBuf)> = fs::read_dir("/boot")
        .context("read /boot")?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let release = path
                .file_name()?
                .to_str()?
                .strip_prefix("vmlinuz-")?
                .to_owned();
            (release != running.trim() && has_sctp_module(&release)).then_some((release, path))
        })
        .collect();
    candidates.sort();
    candidates.pop().map(|(_, path)| path).context(
        "no /boot/vmlinuz-* with sctp.ko in /lib/modules (install Debian's linux-image-amd64: `cargo xtask setup`)",
    )
}

fn has_sctp_module(release: &str) -> bool {
    let dir = Path::new("/lib/modules")
        .join(release)
        .join("kernel/net/sctp");
    fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n == "sctp.ko" || n.starts_with("sctp.ko."))
        })
    })
}

fn kernel_release(kernel: &Path) -> Result<String> {
    let name = kernel
        .file_name()
        .and_then(OsStr::to_str)
        .with_context(|| format!("not a kernel image path: {}", kernel.display()))?;
    if !kernel.exists() {
        bail!("no kernel image at {}", kernel.display());
    }
    Ok(name.strip_prefix("vmlinuz-").unwrap_or(name).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_tests_run_only_after_the_loss_is_added() -> Result<()> {
        let options = VmOptions {
            filter: Some("ipv6".to_owned()),
            ..VmOptions::default()
        };
        let script = guest_script(
            &options,
            &[PathBuf::from("/t/interop_udp-1")],
            Path::new("/s/status"),
            Path::new("/s/log"),
            None,
        );
        let at = |needle: &str| {
            script
                .find(needle)
                .with_context(|| format!("{needle:?} missing from:\n{script}"))
        };
        let clean = at("--skip 'lossy' 'ipv6'")?;
        let netem = at("netem loss 2%")?;
        let lossy = at("grep -F 'lossy' | grep -F -- 'ipv6'")?;
        assert!(clean < netem && netem < lossy, "{script}");
        let check = Command::new("bash").args(["-n", "-c", &script]).status()?;
        assert!(check.success(), "not valid sh:\n{script}");
        Ok(())
    }
}
