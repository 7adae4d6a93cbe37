//! `cargo xtask deb`: the Debian packages `sctp-gateway` and `sctp-origin`,
//! built by cargo-deb; with `--check`, installed, inspected, removed and
//! purged again on this host.
//!
//! cargo-deb reads `[package.metadata.deb]` in gateway/Cargo.toml and
//! origin/Cargo.toml. What those name under `dist/debian/stage/` (ignored by
//! git) is written here first ([`stage`]): the units and the configuration
//! rendered for the packages' paths ([`Layout::package`], the same code as
//! `cargo xtask install --prefix`), and the eBPF object as
//! `cargo xtask build-ebpf` left it (its path comes from [`ebpf::build`]
//! alone). The maintainer scripts are in `dist/debian/`; cargo-deb puts its
//! systemd fragments where they say `#DEBHELPER#`.
//!
//! What a package does on the host: installs the files, reloads systemd,
//! creates the gateway's state directory; it never enables or starts a unit
//! (the shipped configuration is the demo's, not this host's). Removal stops
//! the unit, whose `ExecStopPost` removes the gateway's nftables table and
//! policy routes, and runs `gateway cleanup` once more for a gateway started
//! by hand; purge removes the configuration and the state.
//!
//! The check ([`check`]) never starts a daemon and changes nothing of the
//! host's network: the maintainer scripts and both `doctor`s run in a
//! network namespace of their own, where the check also leaves a crashed
//! gateway's table and routes for the removal to clean up. It refuses to run
//! where either package is installed already, and purges both whatever fails.
//!
//! Where to start: [`run`].

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail, ensure};

use crate::cmd::{display, probe, run_command, workspace_root};
use crate::ebpf;
use crate::install::{Layout, UNITS, next_steps, systemd_runs, verify_units};

/// The packages, by the crate that holds each one's metadata.
const PACKAGES: [(&str, &str); 2] = [("gateway", "sctp-gateway"), ("origin", "sctp-origin")];

/// Where the files cargo-deb takes from xtask are written, under the
/// workspace: the `dist/debian/stage/` of the `assets`. Not under
/// `target/release/`: cargo-deb takes whatever is there for a build product
/// of the workspace, and then builds the whole workspace.
const STAGE: &str = "dist/debian/stage";

/// Options for `cargo xtask deb`.
#[derive(Debug, clap::Args)]
pub(crate) struct DebOptions {
    /// Then install both packages with dpkg, run each `doctor` from the
    /// installed paths, remove and purge them, and check that nothing is left
    /// (root; refuses when either package is installed already).
    #[arg(long)]
    pub check: bool,
}

/// The two .deb files.
#[derive(Debug, Clone)]
pub(crate) struct Packages {
    gateway: PathBuf,
    origin: PathBuf,
}

impl Packages {
    fn files(&self) -> [&Path; 2] {
        [&self.gateway, &self.origin]
    }
}

/// `cargo xtask deb`.
pub(crate) fn run(options: &DebOptions) -> Result<()> {
    let packages = build()?;
    if options.check {
        check(&packages)?;
    }
    Ok(())
}

/// Builds the eBPF object and both packages; says where they are.
pub(crate) fn build() -> Result<Packages> {
    if probe(Command::new("cargo").args(["deb", "--version"])).is_none() {
        bail!(
            "`cargo deb` does not run: install cargo-deb with `cargo xtask setup --only cargo-deb`"
        );
    }
    let object = ebpf::build(&ebpf::BuildOptions::default())?;
    stage(&Layout::package(), &object)?;
    let mut built = Vec::new();
    for (krate, package) in PACKAGES {
        println!("[deb] building {package}");
        built.push(cargo_deb(krate)?);
    }
    let [gateway, origin] = <[PathBuf; 2]>::try_from(built)
        .map_err(|_| anyhow::anyhow!("cargo deb built other than two packages"))?;
    println!("[deb] {}", gateway.display());
    println!("[deb] {}", origin.display());
    Ok(Packages { gateway, origin })
}

/// Writes what the packages' `assets` take from the staging directory.
fn stage(layout: &Layout, object: &Path) -> Result<()> {
    let dir = workspace_root().join(STAGE);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| -> Result<()> {
        let path = dir.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    for unit in UNITS {
        write(unit, layout.unit(unit)?)?;
    }
    write("gateway.toml", layout.gateway_config()?)?;
    write("origin.toml", layout.origin_config()?)?;
    let staged = dir.join("ebpf.o");
    fs::copy(object, &staged)
        .with_context(|| format!("copying {} to {}", object.display(), staged.display()))?;
    Ok(())
}

/// `cargo deb -p KRATE`; returns the .deb it wrote (the last line it prints).
fn cargo_deb(krate: &str) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        .args(["deb", "--locked", "-p", krate]);
    let line = display(&command);
    println!("  $ {line}");
    // The build's progress goes to the terminal; the package's path is stdout.
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!("`{line}` failed ({}): {}", output.status, stdout.trim());
    }
    let deb = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.ends_with(".deb"))
        .map(PathBuf::from)
        .with_context(|| format!("`{line}` printed no .deb path: {}", stdout.trim()))?;
    ensure!(deb.is_file(), "{} is not a file", deb.display());
    Ok(deb)
}

/// `cargo xtask install` at `/`: both packages, installed with dpkg.
pub(crate) fn install(dry_run: bool) -> Result<()> {
    let layout = Layout::package();
    if dry_run {
        println!("install (dry run, nothing changed):");
        println!("  cargo xtask deb   (the eBPF object, then cargo deb -p gateway and -p origin)");
        println!("  dpkg -i --force-confdef --force-confold sctp-gateway_*.deb sctp-origin_*.deb");
        println!("  (existing /etc/sctp-gateway/gateway.toml, /etc/sctp-origin/origin.toml kept)");
        return Ok(());
    }
    let legacy = legacy_files();
    if !legacy.is_empty() {
        println!(
            "warning: an earlier copying `cargo xtask install` left {}; the units in \
             /etc/systemd/system override the package's: remove them",
            legacy
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let packages = build()?;
    run_command(
        Command::new("dpkg")
            .args(["-i", "--force-confdef", "--force-confold"])
            .args(packages.files()),
    )?;
    println!("{}", next_steps(&layout));
    Ok(())
}

/// What the copying installer put at `/` before the packages existed.
fn legacy_files() -> Vec<PathBuf> {
    let old = Layout::new(Path::new("/"));
    let mut files: Vec<PathBuf> = UNITS.iter().map(|u| old.units.join(u)).collect();
    files.extend(["gateway", "origin"].map(|b| old.bin.join(b)));
    files.retain(|f| f.exists());
    files
}

/// `cargo xtask uninstall` at `/`: `dpkg --purge` (or `--remove`, keeping the
/// configuration and the state) of whichever package is installed.
pub(crate) fn uninstall(dry_run: bool, keep_data: bool) -> Result<()> {
    let action = if keep_data { "--remove" } else { "--purge" };
    let installed: Vec<&str> = PACKAGES
        .iter()
        .map(|(_, package)| *package)
        .filter(|package| dpkg_status(package).is_some())
        .collect();
    if installed.is_empty() {
        println!("neither sctp-gateway nor sctp-origin is installed");
        return Ok(());
    }
    if dry_run {
        println!(
            "uninstall (dry run, nothing changed):\n  dpkg {action} {}",
            installed.join(" ")
        );
        return Ok(());
    }
    run_command(Command::new("dpkg").arg(action).args(&installed))
}

/// dpkg's status of `package` (`install ok installed`, `deinstall ok
/// config-files`, ...), `None` when dpkg knows nothing of it.
fn dpkg_status(package: &str) -> Option<String> {
    probe(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && !s.ends_with("not-installed"))
}

// ---------------------------------------------------------------------------
// The check

/// Purges both packages when dropped, so that a failed check leaves the host
/// as it found it. dpkg runs in the check's namespace, so the prerm's
/// `gateway cleanup` cannot touch the host's own rules.
struct PurgeGuard<'a> {
    ns: &'a str,
}

impl Drop for PurgeGuard<'_> {
    fn drop(&mut self) {
        for (_, package) in PACKAGES {
            if dpkg_status(package).is_some() {
                let _ = testbed::exec_in(self.ns, Command::new("dpkg").args(["--purge", package]))
                    .stdin(Stdio::null())
                    .status();
            }
        }
    }
}

/// Installs `packages`, checks what they put where, runs both `doctor`s,
/// removes and purges them, and checks that nothing is left.
pub(crate) fn check(packages: &Packages) -> Result<()> {
    let uid = crate::cmd::output(Command::new("id").arg("-u"))?;
    ensure!(
        uid.trim() == "0",
        "the package check installs with dpkg: run it as root"
    );
    let layout = Layout::package();
    for (_, package) in PACKAGES {
        if let Some(status) = dpkg_status(package) {
            bail!(
                "{package} is on this host already ({status}); the check installs and purges \
                 it: `dpkg --purge {package}` first if that is what you want"
            );
        }
    }
    for dir in [
        &layout.gateway_conf,
        &layout.origin_conf,
        &layout.gateway_state,
    ] {
        ensure!(
            !dir.exists(),
            "{} exists without the package: the check would purge it",
            dir.display()
        );
    }
    let ns = testbed::Netns::create(&format!("xtask-deb-{}", std::process::id()))?;
    let in_ns = |command: &mut Command| testbed::exec_in(ns.name(), command);

    println!("[deb check] dpkg -i both packages");
    let purge = PurgeGuard { ns: ns.name() };
    run_command(&mut in_ns(
        Command::new("dpkg").arg("-i").args(packages.files()),
    ))?;
    let mut owned = BTreeSet::new();
    for (_, package) in PACKAGES {
        let status = dpkg_status(package).unwrap_or_default();
        ensure!(
            status == "install ok installed",
            "{package}: dpkg says {status:?}"
        );
        owned.extend(installed_files(package)?);
    }
    check_installed(&layout, &owned)?;

    println!(
        "[deb check] doctor from the installed paths (in namespace {})",
        ns.name()
    );
    let gateway_toml = layout.gateway_conf.join("gateway.toml");
    let origin_toml = layout.origin_conf.join("origin.toml");
    doctor(
        &mut in_ns(
            Command::new(layout.bin.join("gateway"))
                .arg("--config")
                .arg(&gateway_toml)
                .arg("doctor"),
        ),
        &[
            "capabilities",
            "interface lan0",
            "policy routing",
            "cache directory",
            "eBPF",
        ],
    )?;
    doctor(
        &mut in_ns(
            Command::new(layout.bin.join("origin"))
                .arg("--config")
                .arg(&origin_toml)
                .arg("doctor"),
        ),
        &["document root"],
    )?;

    println!("[deb check] a crashed gateway's table and routes, then dpkg --remove");
    let leftovers = Leftovers::from_config(&gateway_toml)?;
    leftovers.install(ns.name(), &layout, &gateway_toml)?;
    ensure!(
        leftovers.present(ns.name())?,
        "the crashed gateway's table or routes did not take"
    );
    run_command(&mut in_ns(Command::new("dpkg").args([
        "--remove",
        "sctp-gateway",
        "sctp-origin",
    ])))?;
    ensure!(
        !leftovers.present(ns.name())?,
        "removing sctp-gateway left its nftables table or policy routes"
    );
    ensure!(
        !layout.bin.join("gateway").exists() && !layout.bin.join("origin").exists(),
        "the binaries survived dpkg --remove"
    );
    ensure!(
        gateway_toml.is_file() && origin_toml.is_file(),
        "dpkg --remove took the conffiles (only --purge should)"
    );

    println!("[deb check] dpkg --purge");
    run_command(&mut in_ns(Command::new("dpkg").args([
        "--purge",
        "sctp-gateway",
        "sctp-origin",
    ])))?;
    drop(purge);
    check_nothing_left(&layout, &owned)?;
    println!(
        "[deb check] passed: {} files installed and gone again, no configuration, state or \
         rules left",
        owned.len()
    );
    Ok(())
}

/// The files (not directories) `dpkg -L` lists for `package`.
fn installed_files(package: &str) -> Result<Vec<PathBuf>> {
    let list = crate::cmd::output(Command::new("dpkg").args(["-L", package]))?;
    Ok(list
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && !p.is_dir())
        .collect())
}

/// Every path [`Layout::package`] names is installed, the configuration's
/// paths exist, the conffiles are dpkg's and the units are valid.
fn check_installed(layout: &Layout, owned: &BTreeSet<PathBuf>) -> Result<()> {
    let object = layout
        .ebpf_object
        .clone()
        .context("the package layout has no eBPF object")?;
    let gateway_toml = layout.gateway_conf.join("gateway.toml");
    let origin_toml = layout.origin_conf.join("origin.toml");
    let units: Vec<PathBuf> = UNITS.iter().map(|u| layout.units.join(u)).collect();
    let mut expected = vec![
        layout.bin.join("gateway"),
        layout.bin.join("origin"),
        object.clone(),
        gateway_toml.clone(),
        origin_toml.clone(),
        layout.document_root.join("index.html"),
    ];
    expected.extend(units.iter().cloned());
    for path in &expected {
        ensure!(
            owned.contains(path) && path.is_file(),
            "{} is not installed by the packages",
            path.display()
        );
    }
    for binary in ["gateway", "origin"] {
        let mode = fs::metadata(layout.bin.join(binary))?.permissions().mode();
        ensure!(mode & 0o111 != 0, "{binary} is not executable ({mode:o})");
    }
    let state = fs::metadata(&layout.gateway_state)
        .with_context(|| format!("{} was not created", layout.gateway_state.display()))?;
    ensure!(
        state.is_dir() && state.permissions().mode() & 0o777 == 0o750,
        "{} is not a directory of mode 750",
        layout.gateway_state.display()
    );

    // The configuration names what the packages installed.
    let gateway: toml::Value = toml::from_str(&fs::read_to_string(&gateway_toml)?)?;
    ensure!(
        gateway["ebpf"]["object"].as_str() == object.to_str(),
        "gateway.toml's ebpf.object is not {}",
        object.display()
    );
    let cache = gateway["cache"]["path"]
        .as_str()
        .context("gateway.toml has no cache.path")?;
    ensure!(
        Path::new(cache).parent() == Some(layout.gateway_state.as_path()),
        "cache.path {cache} is not in {}",
        layout.gateway_state.display()
    );
    let origin: toml::Value = toml::from_str(&fs::read_to_string(&origin_toml)?)?;
    ensure!(
        origin["files"]["root"].as_str() == layout.document_root.to_str(),
        "origin.toml's files.root is not {}",
        layout.document_root.display()
    );

    // Upgrades keep the operator's edits: dpkg tracks both as conffiles.
    for (package, conffile) in [
        ("sctp-gateway", &gateway_toml),
        ("sctp-origin", &origin_toml),
    ] {
        let conffiles = crate::cmd::output(Command::new("dpkg-query").args([
            "-W",
            "-f=${Conffiles}",
            package,
        ]))?;
        ensure!(
            conffiles
                .lines()
                .any(|l| l.split_whitespace().next() == conffile.to_str()),
            "{} is not a conffile of {package}: {conffiles}",
            conffile.display()
        );
    }

    if systemd_runs() {
        for unit in UNITS {
            run_command(Command::new("systemctl").args(["cat", unit]))?;
        }
    } else {
        println!("[deb check] systemd does not run here: checking the unit files instead");
    }
    // The binaries they name exist now, so the check is complete.
    verify_units(&units)?;
    println!("[deb check] installed: {} files, units valid", owned.len());
    Ok(())
}

/// Runs a `doctor`, which may say FAIL for what this host lacks (exit 1), and
/// checks that it ran: exit 0 or 1, every report line a verdict or its
/// continuation, and each of `items` among the verdicts.
fn doctor(command: &mut Command, items: &[&str]) -> Result<()> {
    let line = display(command);
    println!("  $ {line}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    let report = String::from_utf8_lossy(&output.stdout);
    print!("{report}");
    ensure!(
        matches!(output.status.code(), Some(0 | 1)),
        "`{line}` ended with {} (not a verdict): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let verdicts = verdict_items(&report).with_context(|| format!("`{line}`"))?;
    ensure!(!verdicts.is_empty(), "`{line}` printed no verdict");
    for item in items {
        ensure!(
            verdicts.iter().any(|v| v == item),
            "`{line}` gave no verdict on {item}"
        );
    }
    Ok(())
}

/// The item of every verdict line of a `doctor` report (`ok    cache
/// directory: ...` gives `cache directory`); an error for a line that is
/// neither a verdict, the indented continuation of one, nor the closing
/// count (`10 ok, 1 warnings, 3 failed, 1 skipped: ...`), which must be last.
fn verdict_items(report: &str) -> Result<Vec<String>> {
    let mut items = Vec::new();
    let mut counted = false;
    for text in report.lines().filter(|l| !l.trim().is_empty()) {
        ensure!(!counted, "a line after the closing count: {text:?}");
        if text.starts_with("      ") {
            continue;
        }
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        if word.parse::<usize>().is_ok() && rest.starts_with("ok, ") {
            counted = true;
            continue;
        }
        ensure!(
            ["ok", "warn", "FAIL", "skip"].contains(&word),
            "a line that is not a verdict: {text:?}"
        );
        let item = rest
            .trim_start()
            .split_once(':')
            .map_or("", |(item, _)| item);
        items.push(item.to_owned());
    }
    ensure!(counted, "no closing count");
    Ok(items)
}

/// What a gateway killed where no `ExecStopPost` runs leaves: its nftables
/// table and policy routing, as the installed configuration names them.
#[derive(Debug)]
struct Leftovers {
    table: String,
    mark: String,
    route_table: String,
    priority: String,
}

impl Leftovers {
    fn from_config(path: &Path) -> Result<Self> {
        let config: toml::Value = toml::from_str(&fs::read_to_string(path)?)?;
        let intercept = &config["intercept"];
        let number = |key: &str| -> Result<String> {
            intercept
                .get(key)
                .and_then(toml::Value::as_integer)
                .map(|n| n.to_string())
                .with_context(|| format!("gateway.toml has no intercept.{key}"))
        };
        Ok(Self {
            table: intercept
                .get("table")
                .and_then(toml::Value::as_str)
                .context("gateway.toml has no intercept.table")?
                .to_owned(),
            mark: number("tproxy_mark")?,
            route_table: number("route_table")?,
            priority: number("rule_priority")?,
        })
    }

    /// The table as `gateway rules` prints it, loaded with nft, and the
    /// IPv4 policy rule and local route, all in namespace `ns`.
    fn install(&self, ns: &str, layout: &Layout, config: &Path) -> Result<()> {
        let rules = crate::cmd::output(
            Command::new(layout.bin.join("gateway"))
                .arg("--config")
                .arg(config)
                .arg("rules"),
        )?;
        let mut nft = testbed::exec_in(ns, Command::new("nft").args(["-f", "-"]))
            .stdin(Stdio::piped())
            .spawn()
            .context("starting nft")?;
        {
            use std::io::Write as _;
            let mut stdin = nft.stdin.take().context("nft's stdin")?;
            stdin.write_all(rules.as_bytes())?;
        }
        ensure!(nft.wait()?.success(), "nft -f did not load `gateway rules`");
        testbed::ip(&[
            "-n",
            ns,
            "rule",
            "add",
            "fwmark",
            &self.mark,
            "lookup",
            &self.route_table,
            "priority",
            &self.priority,
        ])?;
        testbed::ip(&[
            "-n",
            ns,
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            &self.route_table,
        ])?;
        Ok(())
    }

    /// Whether any of the table, the rule or the route is in `ns`.
    fn present(&self, ns: &str) -> Result<bool> {
        let table = probe(&mut testbed::exec_in(
            ns,
            Command::new("nft").args(["list", "table", "inet", &self.table]),
        ))
        .is_some();
        let rules = testbed::ip(&["-n", ns, "rule", "list"])?;
        let rule = rules
            .lines()
            .any(|l| l.contains(&format!("lookup {}", self.route_table)));
        let routes = testbed::ip(&["-n", ns, "route", "show", "table", &self.route_table])?;
        Ok(table || rule || !routes.trim().is_empty())
    }
}

/// After the purge: every file the packages had is gone, and so are their
/// directories, the state, and systemd's records of the units.
fn check_nothing_left(layout: &Layout, owned: &BTreeSet<PathBuf>) -> Result<()> {
    for (_, package) in PACKAGES {
        ensure!(
            dpkg_status(package).is_none(),
            "dpkg still knows {package} after the purge"
        );
    }
    let left: Vec<&PathBuf> = owned.iter().filter(|p| p.exists()).collect();
    ensure!(left.is_empty(), "left after the purge: {left:?}");
    let mut dirs = vec![
        layout.gateway_conf.clone(),
        layout.origin_conf.clone(),
        layout.gateway_state.clone(),
        PathBuf::from("/var/lib/sctp-origin"),
        PathBuf::from("/usr/lib/sctp-gateway"),
        PathBuf::from("/usr/share/sctp-origin"),
        PathBuf::from("/usr/share/doc/sctp-gateway"),
        PathBuf::from("/usr/share/doc/sctp-origin"),
    ];
    for unit in UNITS {
        dirs.push(Path::new("/etc/systemd/system").join(unit));
        dirs.push(Path::new("/var/lib/systemd/deb-systemd-helper-masked").join(unit));
        dirs.push(Path::new("/var/lib/systemd/deb-systemd-helper-enabled").join(unit));
    }
    let left: Vec<&PathBuf> = dirs
        .iter()
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    ensure!(left.is_empty(), "left after the purge: {left:?}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_reports_are_read_as_verdicts_and_anything_else_is_refused() -> Result<()> {
        let report = "ok    ipv4 forwarding: net.ipv4.ip_forward = 1\n\
                      FAIL  interface lan0: no such interface in this network namespace\n\
                      \x20     fix: create it, or correct intercept.lan_interfaces\n\
                      skip  eBPF: ebpf.object and ebpf.interface are not both set\n\
                      1 ok, 0 warnings, 1 failed, 1 skipped: something required is missing\n";
        assert_eq!(
            verdict_items(report)?,
            ["ipv4 forwarding", "interface lan0", "eBPF"]
        );
        assert!(verdict_items("thread 'main' panicked at src/main.rs:1:1\n").is_err());
        assert!(verdict_items("").is_err(), "no closing count");
        assert!(verdict_items("0 ok, 0 warnings, 0 failed, 0 skipped: x\nok    a: b\n").is_err());
        Ok(())
    }
}
