//! `cargo xtask install` and `cargo xtask uninstall`: the gateway and the origin
//! as system services.
//!
//! With prefix `/` (the default) both go through the Debian packages:
//! `install` builds `sctp-gateway` and `sctp-origin` with `cargo xtask deb`
//! and installs them with `dpkg -i` (existing configuration kept), `uninstall`
//! removes or purges them ([`crate::deb`]; main.rs picks which by the
//! prefix, so that this module, whose layout and units the packages use,
//! never calls back into them). Only under another `--prefix` (a scratch
//! tree for a look or a test, a host without dpkg) are the files copied, by
//! this module:
//!
//! ```text
//! <prefix>/usr/local/bin/gateway, origin          release binaries
//! <prefix>/etc/sctp-gateway/gateway.toml          configuration (kept if present)
//! <prefix>/etc/sctp-origin/origin.toml            configuration (kept if present)
//! <prefix>/var/lib/sctp-gateway/                  the gateway's state (its cache)
//! <prefix>/var/lib/sctp-origin/www/               the origin's document root (the demo site)
//! <prefix>/etc/systemd/system/sctp-gateway.service, sctp-origin.service
//! ```
//!
//! The units are rendered from one template each, `dist/systemd/*.service.in`,
//! whose `@NAME@` placeholders become a [`Layout`]'s paths, and the
//! configuration from `config/*.toml` with its paths rewritten likewise: the
//! same code renders them for a prefix and for the packages
//! ([`Layout::package`]). With prefix `/` the gateway's state is systemd's
//! `StateDirectory=`; elsewhere it is a `ReadWritePaths=` of the prefix's
//! directory, so a scratch prefix gets units that name its own binaries (and
//! `systemd-analyze verify` can check them).
//!
//! What it never does: enable or start a service, overwrite a configuration
//! file, or run `systemctl` for a prefix other than `/`.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::cmd::{run_command, which, workspace_root};

/// The units, by file name, and their templates under `dist/systemd/`.
pub(crate) const UNITS: [&str; 2] = ["sctp-gateway.service", "sctp-origin.service"];
/// The binaries installed.
const BINARIES: [&str; 2] = ["gateway", "origin"];
/// The gateway's cache path in `config/gateway.toml`, replaced by the state
/// directory's.
const SHIPPED_CACHE_PATH: &str = "path = \"/var/cache/sctp-gateway/cache.redb\"";
/// The origin's document root in `config/origin.toml`, replaced likewise.
const SHIPPED_ORIGIN_ROOT: &str = "root = \"demo-site\"";
/// How the commented-out `ebpf.object` line of `config/gateway.toml` starts;
/// the whole line becomes `object = "<installed object>"` where the eBPF
/// object is installed.
const SHIPPED_EBPF_OBJECT: &str = "# object = ";

/// Options for `cargo xtask install`.
#[derive(Debug, clap::Args)]
pub(crate) struct InstallOptions {
    /// Install under this directory instead of the root, by copying (no
    /// package); the units then name the paths under it.
    #[arg(long, default_value = "/")]
    pub prefix: PathBuf,
    /// Print what would be done, change nothing (and build nothing).
    #[arg(long)]
    pub dry_run: bool,
    /// Take `gateway` and `origin` from this directory instead of building them
    /// (`cargo build --release`); only with a --prefix other than `/`.
    #[arg(long, value_name = "DIR")]
    pub binaries: Option<PathBuf>,
}

/// Options for `cargo xtask uninstall`.
#[derive(Debug, clap::Args)]
pub(crate) struct UninstallOptions {
    /// The prefix given to `install`.
    #[arg(long, default_value = "/")]
    pub prefix: PathBuf,
    /// Print what would be removed, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Keep the configuration and the state (the cache, the document root);
    /// at `/`, `dpkg --remove` instead of `dpkg --purge`.
    #[arg(long)]
    pub keep_data: bool,
}

/// Where everything goes: under a prefix, or as the Debian packages install it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    prefix: PathBuf,
    pub(crate) bin: PathBuf,
    pub(crate) gateway_conf: PathBuf,
    pub(crate) origin_conf: PathBuf,
    pub(crate) gateway_state: PathBuf,
    pub(crate) document_root: PathBuf,
    pub(crate) units: PathBuf,
    /// Where the gateway's eBPF object is installed, which `ebpf.object` then
    /// names; `None`: not installed, `ebpf.object` stays unset.
    pub(crate) ebpf_object: Option<PathBuf>,
}

impl Layout {
    /// A copying installation under `prefix`.
    pub(crate) fn new(prefix: &Path) -> Self {
        Self {
            prefix: prefix.to_owned(),
            bin: prefix.join("usr/local/bin"),
            gateway_conf: prefix.join("etc/sctp-gateway"),
            origin_conf: prefix.join("etc/sctp-origin"),
            gateway_state: prefix.join("var/lib/sctp-gateway"),
            document_root: prefix.join("var/lib/sctp-origin/www"),
            units: prefix.join("etc/systemd/system"),
            ebpf_object: None,
        }
    }

    /// The Debian packages' paths. The files themselves are placed by the
    /// `assets` of `[package.metadata.deb]` in gateway/Cargo.toml and
    /// origin/Cargo.toml, which must agree: `cargo xtask deb --check` installs
    /// the packages and checks that every path named here is there. The demo
    /// site is package data under /usr/share, read-only; an operator points
    /// `files.root` at their own.
    pub(crate) fn package() -> Self {
        Self {
            prefix: PathBuf::from("/"),
            bin: PathBuf::from("/usr/bin"),
            gateway_conf: PathBuf::from("/etc/sctp-gateway"),
            origin_conf: PathBuf::from("/etc/sctp-origin"),
            gateway_state: PathBuf::from("/var/lib/sctp-gateway"),
            document_root: PathBuf::from("/usr/share/sctp-origin/demo-site"),
            units: PathBuf::from("/usr/lib/systemd/system"),
            ebpf_object: Some(PathBuf::from("/usr/lib/sctp-gateway/ebpf.o")),
        }
    }

    pub(crate) fn is_root(&self) -> bool {
        self.prefix == Path::new("/")
    }

    /// The gateway unit's line that makes its state directory writable.
    fn state_directive(&self) -> String {
        if self.is_root() {
            "StateDirectory=sctp-gateway\nStateDirectoryMode=0750".to_owned()
        } else {
            format!("ReadWritePaths={}", self.gateway_state.display())
        }
    }

    /// The configuration directory `unit`'s daemon reads.
    fn conf_of(&self, unit: &str) -> &Path {
        if unit.starts_with("sctp-origin") {
            &self.origin_conf
        } else {
            &self.gateway_conf
        }
    }

    /// `unit` (one of [`UNITS`]) rendered from its template in `dist/systemd/`.
    pub(crate) fn unit(&self, unit: &str) -> Result<String> {
        let template = workspace_root()
            .join("dist/systemd")
            .join(format!("{unit}.in"));
        let text = fs::read_to_string(&template)
            .with_context(|| format!("reading {}", template.display()))?;
        self.render(&text, self.conf_of(unit))
    }

    /// Renders a unit template for a daemon whose configuration is in `conf`:
    /// every `@NAME@` must be known.
    pub(crate) fn render(&self, template: &str, conf: &Path) -> Result<String> {
        let text = template
            .replace("@BINDIR@", &path_text(&self.bin)?)
            .replace("@CONFDIR@", &path_text(conf)?)
            .replace("@STATE_DIRECTORY@", &self.state_directive());
        if let Some(start) = text.find('@')
            && let Some(len) = text[start + 1..].find('@')
            && text[start + 1..start + 1 + len]
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_')
        {
            bail!(
                "unknown placeholder {} in a unit template",
                &text[start..start + len + 2]
            );
        }
        Ok(text)
    }

    /// `config/gateway.toml` with the cache in the state directory and, where
    /// the object is installed, `ebpf.object` set.
    pub(crate) fn gateway_config(&self) -> Result<String> {
        let cache = self.gateway_state.join("cache.redb");
        let mut text = replace_shipped(
            shipped_config("gateway.toml")?,
            SHIPPED_CACHE_PATH,
            &format!("path = \"{}\"", path_text(&cache)?),
        )?;
        if let Some(object) = &self.ebpf_object {
            let line = format!("object = \"{}\"", path_text(object)?);
            let Some(start) = text.find(&format!("\n{SHIPPED_EBPF_OBJECT}")) else {
                bail!(
                    "the shipped configuration no longer has a `{SHIPPED_EBPF_OBJECT}...` line; \
                     update xtask/src/install.rs"
                );
            };
            let end = text[start + 1..]
                .find('\n')
                .map_or(text.len(), |at| start + 1 + at);
            text.replace_range(start + 1..end, &line);
        }
        Ok(text)
    }

    /// `config/origin.toml` serving the installed document root.
    pub(crate) fn origin_config(&self) -> Result<String> {
        replace_shipped(
            shipped_config("origin.toml")?,
            SHIPPED_ORIGIN_ROOT,
            &format!("root = \"{}\"", path_text(&self.document_root)?),
        )
    }
}

/// One of the files in `config/`.
fn shipped_config(name: &str) -> Result<String> {
    let path = workspace_root().join("config").join(name);
    fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// `text` with its first `what` replaced by `with`; an error if `what` is gone.
fn replace_shipped(text: String, what: &str, with: &str) -> Result<String> {
    if !text.contains(what) {
        bail!("the shipped configuration no longer has `{what}`; update xtask/src/install.rs");
    }
    Ok(text.replacen(what, with, 1))
}

/// A path as it may appear in a unit file: absolute, no whitespace (systemd
/// would split it) and valid UTF-8.
fn path_text(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))?;
    if !path.is_absolute() || text.chars().any(char::is_whitespace) {
        bail!("the prefix must be an absolute path without spaces: {text}");
    }
    Ok(text.to_owned())
}

/// One change to the file system.
#[derive(Debug)]
enum Step {
    /// Create a directory (and its parents).
    Dir(PathBuf),
    /// Copy a file, then set its mode.
    Copy {
        from: PathBuf,
        to: PathBuf,
        mode: u32,
    },
    /// Write a file; with `keep`, only when it does not exist yet.
    Write {
        to: PathBuf,
        text: String,
        mode: u32,
        keep: bool,
    },
    /// Copy a directory tree, only when the target does not exist yet.
    Tree { from: PathBuf, to: PathBuf },
}

impl Step {
    fn describe(&self) -> String {
        match self {
            Step::Dir(dir) => format!("mkdir -p {}", dir.display()),
            Step::Copy { from, to, mode } => {
                format!("install -m {mode:o} {} {}", from.display(), to.display())
            }
            Step::Write { to, mode, keep, .. } if *keep && to.exists() => {
                format!(
                    "keep {} (exists; its mode stays, {mode:o} is for new files)",
                    to.display()
                )
            }
            Step::Write { to, mode, .. } => format!("write {} (mode {mode:o})", to.display()),
            Step::Tree { to, .. } if to.exists() => format!("keep {} (exists)", to.display()),
            Step::Tree { from, to } => format!("cp -r {} {}", from.display(), to.display()),
        }
    }

    fn apply(&self) -> Result<()> {
        match self {
            Step::Dir(dir) => {
                fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
            }
            Step::Copy { from, to, mode } => {
                // Through a new file and a rename: a running binary is replaced,
                // not written into.
                let fresh = to.with_extension("new");
                fs::copy(from, &fresh).with_context(|| {
                    format!("copying {} to {}", from.display(), fresh.display())
                })?;
                fs::set_permissions(&fresh, fs::Permissions::from_mode(*mode))?;
                fs::rename(&fresh, to).with_context(|| format!("renaming to {}", to.display()))
            }
            Step::Write { to, keep, .. } if *keep && to.exists() => Ok(()),
            Step::Write { to, text, mode, .. } => {
                fs::write(to, text).with_context(|| format!("writing {}", to.display()))?;
                fs::set_permissions(to, fs::Permissions::from_mode(*mode))
                    .with_context(|| format!("setting the mode of {}", to.display()))
            }
            Step::Tree { to, .. } if to.exists() => Ok(()),
            Step::Tree { from, to } => copy_tree(from, to),
        }
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying to {}", target.display()))?;
        }
    }
    Ok(())
}

/// The steps that install from `binaries` into `layout`.
fn plan(layout: &Layout, binaries: &Path) -> Result<Vec<Step>> {
    let mut steps = vec![
        Step::Dir(layout.bin.clone()),
        Step::Dir(layout.gateway_conf.clone()),
        Step::Dir(layout.origin_conf.clone()),
        Step::Dir(layout.gateway_state.clone()),
        Step::Dir(layout.units.clone()),
    ];
    for binary in BINARIES {
        steps.push(Step::Copy {
            from: binaries.join(binary),
            to: layout.bin.join(binary),
            mode: 0o755,
        });
    }
    steps.push(Step::Write {
        to: layout.gateway_conf.join("gateway.toml"),
        text: layout.gateway_config()?,
        mode: 0o640,
        keep: true,
    });
    steps.push(Step::Write {
        to: layout.origin_conf.join("origin.toml"),
        text: layout.origin_config()?,
        mode: 0o644,
        keep: true,
    });
    steps.push(Step::Tree {
        from: workspace_root().join("config/demo-site"),
        to: layout.document_root.clone(),
    });
    for unit in UNITS {
        steps.push(Step::Write {
            to: layout.units.join(unit),
            text: layout.unit(unit)?,
            mode: 0o644,
            keep: false,
        });
    }
    Ok(steps)
}

/// `cargo xtask install`.
pub(crate) fn install(options: &InstallOptions) -> Result<()> {
    let layout = Layout::new(&options.prefix);
    let binaries = match &options.binaries {
        Some(dir) => dir.clone(),
        None if options.dry_run => release_dir(),
        None => build_release()?,
    };
    let steps = plan(&layout, &binaries)?;
    if options.dry_run {
        println!("install (dry run, nothing changed):");
        for step in &steps {
            println!("  {}", step.describe());
        }
        return Ok(());
    }
    for binary in BINARIES {
        let path = binaries.join(binary);
        if !path.is_file() {
            bail!(
                "{} is missing (build it, or point --binaries at it)",
                path.display()
            );
        }
    }
    for step in &steps {
        println!("  {}", step.describe());
        step.apply()?;
    }
    let units: Vec<PathBuf> = UNITS.iter().map(|u| layout.units.join(u)).collect();
    match verify_units(&units) {
        Ok(()) => println!("systemd-analyze verify: the units are valid"),
        Err(e) => println!("warning: {e:#}"),
    }
    println!("{}", next_steps(&layout));
    Ok(())
}

/// What to do after installing into `layout`.
pub(crate) fn next_steps(layout: &Layout) -> String {
    let mut text = String::from("installed. Next:\n");
    let gateway_conf = layout.gateway_conf.display();
    let origin_conf = layout.origin_conf.display();
    let bin = layout.bin.display();
    let _ = writeln!(
        text,
        "  edit {gateway_conf}/gateway.toml (intercept.lan_interfaces, [[origin]]) or {origin_conf}/origin.toml"
    );
    let _ = writeln!(
        text,
        "  {bin}/gateway --config {gateway_conf}/gateway.toml doctor"
    );
    let _ = writeln!(
        text,
        "  {bin}/origin --config {origin_conf}/origin.toml doctor"
    );
    let _ = write!(
        text,
        "  systemctl enable --now sctp-gateway.service   (or sctp-origin.service on the origin's host)"
    );
    text
}

/// `cargo xtask uninstall`.
pub(crate) fn uninstall(options: &UninstallOptions) -> Result<()> {
    let layout = Layout::new(&options.prefix);
    let mut files: Vec<PathBuf> = UNITS.iter().map(|u| layout.units.join(u)).collect();
    files.extend(BINARIES.iter().map(|b| layout.bin.join(b)));
    let mut trees = Vec::new();
    if !options.keep_data {
        files.push(layout.gateway_conf.join("gateway.toml"));
        files.push(layout.origin_conf.join("origin.toml"));
        trees.push(layout.gateway_state.clone());
        trees.push(layout.document_root.clone());
    }
    if options.dry_run {
        println!("uninstall (dry run, nothing changed):");
        for file in files.iter().filter(|f| f.exists()) {
            println!("  rm {}", file.display());
        }
        for tree in trees.iter().filter(|t| t.exists()) {
            println!("  rm -r {}", tree.display());
        }
        return Ok(());
    }
    for file in &files {
        match fs::remove_file(file) {
            Ok(()) => println!("  rm {}", file.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", file.display())),
        }
    }
    for tree in &trees {
        match fs::remove_dir_all(tree) {
            Ok(()) => println!("  rm -r {}", tree.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", tree.display())),
        }
    }
    if !options.keep_data {
        // Only if empty: someone else's files stay.
        for dir in [
            layout.gateway_conf.clone(),
            layout.origin_conf.clone(),
            layout
                .document_root
                .parent()
                .map(Path::to_owned)
                .unwrap_or_default(),
        ] {
            let _ = fs::remove_dir(dir);
        }
    }
    println!("uninstalled");
    Ok(())
}

/// Whether systemd is the running init (sd_booted's test).
pub(crate) fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// `systemd-analyze verify` on `units`; an error names what it said.
pub(crate) fn verify_units(units: &[PathBuf]) -> Result<()> {
    let Some(analyze) = which("systemd-analyze") else {
        bail!("systemd-analyze not found: the units were not verified (Debian package systemd)");
    };
    let output = Command::new(analyze)
        .args(["verify", "--man=no"])
        .args(units)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .context("running systemd-analyze verify")?;
    let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if !output.status.success() || !said.is_empty() {
        bail!("systemd-analyze verify ({}): {said}", output.status);
    }
    Ok(())
}

/// Where `cargo build --release` puts the binaries.
pub(crate) fn release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release")
}

fn build_release() -> Result<PathBuf> {
    println!("building the release binaries");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_command(Command::new(cargo).current_dir(workspace_root()).args([
        "build",
        "--release",
        "-p",
        "gateway",
        "-p",
        "origin",
    ]))?;
    Ok(release_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with executable stand-ins for the binaries: the units are
    /// verified against the paths they name, not against what the binaries do.
    fn stub_binaries(dir: &Path) -> Result<()> {
        for binary in BINARIES {
            let path = dir.join(binary);
            fs::write(&path, "#!/bin/sh\nexit 0\n")?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    }

    fn files_under(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let Ok(entries) = fs::read_dir(dir) else {
            return found;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(files_under(&path));
            } else {
                found.push(path);
            }
        }
        found
    }

    #[test]
    fn a_scratch_prefix_gets_verified_units_that_name_its_paths_and_uninstall_removes_it_all()
    -> Result<()> {
        let scratch = tempfile::tempdir()?;
        let prefix = scratch.path().join("root");
        let stubs = scratch.path().join("stubs");
        fs::create_dir_all(&stubs)?;
        stub_binaries(&stubs)?;

        let dry = InstallOptions {
            prefix: prefix.clone(),
            dry_run: true,
            binaries: Some(stubs.clone()),
        };
        install(&dry)?;
        assert!(!prefix.exists(), "a dry run wrote under the prefix");

        let options = InstallOptions {
            dry_run: false,
            ..dry
        };
        install(&options)?;
        let layout = Layout::new(&prefix);
        let gateway = fs::read_to_string(layout.units.join("sctp-gateway.service"))?;
        let bin = layout.bin.display();
        let conf = layout.gateway_conf.display();
        assert!(
            gateway.contains(&format!(
                "ExecStart={bin}/gateway --config {conf}/gateway.toml run\n"
            )),
            "{gateway}"
        );
        assert!(
            gateway.contains(&format!(
                "ExecStopPost={bin}/gateway --config {conf}/gateway.toml cleanup\n"
            )),
            "{gateway}"
        );
        assert!(
            gateway.contains(&format!(
                "ReadWritePaths={}\n",
                layout.gateway_state.display()
            )),
            "{gateway}"
        );
        assert!(
            gateway
                .contains("CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_BPF CAP_PERFMON\n")
        );
        let origin = fs::read_to_string(layout.units.join("sctp-origin.service"))?;
        assert!(
            origin.contains("DynamicUser=yes\n") && origin.contains("CapabilityBoundingSet=\n")
        );
        assert!(
            origin.contains(&format!(
                "ExecStart={bin}/origin --config {}/origin.toml run\n",
                layout.origin_conf.display()
            )),
            "{origin}"
        );
        // The units as installed pass systemd's own check.
        let units: Vec<PathBuf> = UNITS.iter().map(|u| layout.units.join(u)).collect();
        verify_units(&units)?;

        // The configuration points at the state, and is kept when edited.
        let config = layout.gateway_conf.join("gateway.toml");
        let text = fs::read_to_string(&config)?;
        let cache = layout.gateway_state.join("cache.redb");
        assert!(text.contains(&format!("path = \"{}\"", cache.display())));
        // No object under a prefix: ebpf.object stays commented out.
        assert!(text.contains(&format!("\n{SHIPPED_EBPF_OBJECT}")));
        fs::write(&config, "# edited\n")?;
        install(&options)?;
        assert_eq!(fs::read_to_string(&config)?, "# edited\n");
        let origin_toml = fs::read_to_string(layout.origin_conf.join("origin.toml"))?;
        assert!(origin_toml.contains(&format!("root = \"{}\"", layout.document_root.display())));
        assert!(layout.document_root.join("index.html").is_file());
        assert_eq!(
            fs::metadata(layout.bin.join("gateway"))?
                .permissions()
                .mode()
                & 0o777,
            0o755
        );

        uninstall(&UninstallOptions {
            prefix: prefix.clone(),
            dry_run: false,
            keep_data: false,
        })?;
        let left = files_under(&prefix);
        assert!(left.is_empty(), "left behind: {left:?}");
        Ok(())
    }

    #[test]
    fn the_root_prefix_uses_systemd_s_state_directory() -> Result<()> {
        let layout = Layout::new(Path::new("/"));
        let template =
            "ExecStart=@BINDIR@/gateway --config @CONFDIR@/gateway.toml\n@STATE_DIRECTORY@\n";
        assert_eq!(
            layout.render(template, &layout.gateway_conf)?,
            "ExecStart=/usr/local/bin/gateway --config /etc/sctp-gateway/gateway.toml\n\
             StateDirectory=sctp-gateway\nStateDirectoryMode=0750\n"
        );
        assert!(
            layout
                .render("@NOT_A_PLACEHOLDER@", &layout.gateway_conf)
                .is_err()
        );
        let spaced = Layout::new(Path::new("/with space"));
        assert!(spaced.render("@BINDIR@", &spaced.gateway_conf).is_err());
        Ok(())
    }

    #[test]
    fn the_package_layout_names_usr_bin_its_own_conf_dirs_and_the_ebpf_object() -> Result<()> {
        let layout = Layout::package();
        let origin = layout.unit("sctp-origin.service")?;
        assert!(
            origin
                .contains("ExecStart=/usr/bin/origin --config /etc/sctp-origin/origin.toml run\n"),
            "{origin}"
        );
        let gateway = layout.unit("sctp-gateway.service")?;
        assert!(gateway.contains(
            "ExecStopPost=/usr/bin/gateway --config /etc/sctp-gateway/gateway.toml cleanup\n"
        ));
        assert!(gateway.contains("StateDirectory=sctp-gateway\n"));

        let config: toml::Value = toml::from_str(&layout.gateway_config()?)?;
        assert_eq!(
            config["ebpf"]["object"].as_str(),
            Some("/usr/lib/sctp-gateway/ebpf.o")
        );
        assert_eq!(
            config["cache"]["path"].as_str(),
            Some("/var/lib/sctp-gateway/cache.redb")
        );
        let config: toml::Value = toml::from_str(&layout.origin_config()?)?;
        assert_eq!(
            config["files"]["root"].as_str(),
            Some("/usr/share/sctp-origin/demo-site")
        );
        Ok(())
    }
}
