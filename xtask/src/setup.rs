//! `cargo xtask setup`: installs what the project needs on a Debian machine, so a
//! fresh clone (CI included) needs no manual step.
//!
//! Every step first checks whether its piece is present and says so; only what is
//! missing is installed, so a second run is quick and changes nothing. The steps,
//! in order: Debian packages ([`DEBIAN_PACKAGES`]), virtme-ng, the Rust
//! toolchains and components, bpf-linker, cargo-fuzz, cargo-deb.
//!
//! What it never does: remove or upgrade something that works, touch the source
//! tree, or use `sudo`. Without root it installs what needs no root and stops with
//! an error naming the Debian packages it could not install.
//!
//! Where to start: [`run`]. The bpf-linker step ([`install_bpf_linker`]) is the
//! subtle one; `docs/ebpf-toolchain.md` explains why it is built the way it is.
//! The probes (`bpf_linker_problem`, `rust_src_installed`, ...) are shared with
//! `cargo xtask build-ebpf`, which uses them to say what is missing.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{display, output, probe, run_command, which, workspace_root};

/// Who needs a Debian package: the demo (`cargo xtask run`, which installs
/// only these, so that a first try is quick) or only the tests and
/// benchmarks (`cargo xtask test` and `cargo xtask bench` install all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    Demo,
    Tests,
}

/// Debian packages the project uses, each with who needs it and why. Installed with
/// `--no-install-recommends`, so anything a recommend would have brought that we
/// need is listed here itself.
pub(crate) const DEBIAN_PACKAGES: &[(&str, Need, &str)] = &[
    (
        "build-essential",
        Need::Demo,
        "cc: the linker for host Rust builds, bpf-linker included",
    ),
    (
        "iproute2",
        Need::Demo,
        "ip: network namespaces, veth pairs, XDP inspection in tests and the demo",
    ),
    (
        "kmod",
        Need::Tests,
        "modprobe: loads sctp.ko inside the kernel-SCTP VM",
    ),
    (
        "nftables",
        Need::Demo,
        "nft: the gateway's tproxy interception rules",
    ),
    (
        "lksctp-tools",
        Need::Tests,
        "sctp_test, sctp_darn, checksctp: real kernel-SCTP peers in the VM tests",
    ),
    (
        "linux-image-amd64",
        Need::Tests,
        "Debian's kernel, which has sctp.ko: booted by virtme-ng for SCTP tests",
    ),
    (
        "qemu-system-x86",
        Need::Tests,
        "the emulator virtme-ng boots that kernel in",
    ),
    (
        "busybox-static",
        Need::Tests,
        "virtme-ng's in-guest init helpers",
    ),
    (
        "python3-pip",
        Need::Tests,
        "pip, for installing virtme-ng from PyPI when python3 is Debian's",
    ),
    (
        "nginx-light",
        Need::Demo,
        "a real HTTP server: TCP upstream for demos and benchmarks",
    ),
    (
        "curl",
        Need::Demo,
        "HTTP client in the end-to-end tests and the demo's instructions",
    ),
    (
        "ethtool",
        Need::Tests,
        "turns GRO/GSO/TSO and tx checksumming off on the veths the WAN emulator forwards between",
    ),
    (
        "openssl",
        Need::Demo,
        "openssl: the self-signed certificates of the benchmark's HTTPS (HTTP/2) nginx and of the HTTPS end-to-end tests",
    ),
    (
        "squid",
        Need::Tests,
        "the benchmark's transparent caching proxy (TPROXY) the gateway is compared with",
    ),
    (
        "systemd",
        Need::Tests,
        "systemd-analyze: `cargo xtask install` and its test verify the units it writes",
    ),
    (
        "util-linux",
        Need::Tests,
        "setpriv: the eBPF tests that start the gateway and the origin without CAP_BPF",
    ),
    (
        "valgrind",
        Need::Tests,
        "callgrind: instructions per byte in `bench transport --callgrind`",
    ),
    ("wrk", Need::Tests, "HTTP load generator for the benchmarks"),
    (
        "debian-handbook",
        Need::Tests,
        "a real site served as its files are: the page-load benchmark's `handbook` page",
    ),
    (
        "hyperfine",
        Need::Tests,
        "command timing for the benchmarks",
    ),
    (
        "chromium",
        Need::Demo,
        "headless browser for page-load tests and screenshots",
    ),
    (
        "fonts-dejavu-core",
        Need::Demo,
        "a font, so headless Chromium renders text (recommends are skipped), and the TrueType font the benchmark charts (xtask's plot.rs) set their text in",
    ),
];

/// The PyPI requirement that provides `vng`.
const VIRTME_NG_REQUIREMENT: &str = "virtme-ng";

/// bpf-linker releases the build is made for; 0.13 supports LLVM 21 to 23.
const BPF_LINKER_VERSION: &str = "0.13";

/// LLVM major versions bpf-linker 0.13 has a feature (`llvm-N`) for.
const BPF_LINKER_LLVM_MAJORS: &[u32] = &[21, 22, 23];

/// Options for `cargo xtask setup`.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct SetupOptions {
    /// Run only these steps (repeatable); all of them by default.
    #[arg(long = "only", value_enum)]
    pub only: Vec<Step>,
    /// Install bpf-linker under this root (`cargo install --root`) instead of
    /// cargo's default. Meant for trying the fresh-machine install without
    /// touching the bpf-linker in use; `build-ebpf` still uses the one on PATH.
    #[arg(long, value_name = "DIR")]
    pub bpf_linker_root: Option<PathBuf>,
    /// Only the Debian packages the demo (`cargo xtask run`) needs, not
    /// those of the tests and benchmarks (the VM's kernel and emulator,
    /// Squid, wrk, valgrind, ...).
    #[arg(long)]
    pub demo: bool,
}

/// One step of `cargo xtask setup`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Step {
    /// Debian packages (needs root if any is missing).
    Apt,
    /// virtme-ng (`vng`) from PyPI.
    VirtmeNg,
    /// Stable clippy/rustfmt, the nightly toolchain and its rust-src.
    Rust,
    /// bpf-linker, built against nightly's own LLVM.
    BpfLinker,
    /// cargo-fuzz.
    CargoFuzz,
    /// cargo-deb, which builds the Debian packages (`cargo xtask deb`).
    CargoDeb,
}

/// Runs the selected steps (all by default) in order; stops at the first that fails.
pub(crate) fn run(options: &SetupOptions) -> Result<()> {
    let started = Instant::now();
    let wanted = |step| options.only.is_empty() || options.only.contains(&step);
    if wanted(Step::Apt) {
        apt_packages(if options.demo { Some(Need::Demo) } else { None })?;
    }
    if wanted(Step::VirtmeNg) {
        virtme_ng()?;
    }
    if wanted(Step::Rust) {
        rust_toolchains()?;
    }
    if wanted(Step::BpfLinker) {
        bpf_linker(options.bpf_linker_root.as_deref())?;
    }
    if wanted(Step::CargoFuzz) {
        cargo_fuzz()?;
    }
    if wanted(Step::CargoDeb) {
        cargo_deb()?;
    }
    println!("[setup] done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

// ---------------------------------------------------------------------------
// Debian packages

/// Installs the missing packages of [`DEBIAN_PACKAGES`]: all, or those of
/// `only`.
fn apt_packages(only: Option<Need>) -> Result<()> {
    let wanted: Vec<&(&str, Need, &str)> = DEBIAN_PACKAGES
        .iter()
        .filter(|(_, need, _)| only.is_none_or(|only| only == *need))
        .collect();
    let mut missing = Vec::new();
    for &&(package, _, _) in &wanted {
        if !debian_package_installed(package)? {
            missing.push(package);
        }
    }
    let which = if only == Some(Need::Demo) {
        "the demo's"
    } else {
        "all"
    };
    if missing.is_empty() {
        println!("[setup] Debian packages: {which} {} present", wanted.len());
        return Ok(());
    }
    println!(
        "[setup] Debian packages missing ({which} {}):",
        wanted.len()
    );
    for &&(package, _, why) in wanted.iter().filter(|(p, _, _)| missing.contains(p)) {
        println!("          {package:<20} {why}");
    }
    if !is_root()? {
        bail!(
            "not running as root, so cannot install the Debian packages {}.\n\
             Run `apt-get install -y --no-install-recommends {}` as root, or run \
             `cargo xtask setup` as root.",
            missing.join(", "),
            missing.join(" ")
        );
    }
    run_command(
        Command::new("apt-get")
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    run_command(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(())
}

/// Whether dpkg reports `package` as fully installed.
fn debian_package_installed(package: &str) -> Result<bool> {
    let mut command = Command::new("dpkg-query");
    command.args(["-W", "-f=${Status}", package]);
    let output = command
        .output()
        .with_context(|| format!("running `{}` (is this Debian?)", display(&command)))?;
    // Exit status 1 with "no packages found" means not installed, not an error.
    Ok(output.status.success() && output.stdout.ends_with(b"install ok installed"))
}

fn is_root() -> Result<bool> {
    let uid = output(Command::new("id").arg("-u"))?;
    Ok(uid.trim() == "0")
}

// ---------------------------------------------------------------------------
// virtme-ng

fn virtme_ng() -> Result<()> {
    if let Some(version) = probe(Command::new("vng").arg("--version")) {
        println!("[setup] virtme-ng: present ({})", version.trim());
        return Ok(());
    }
    println!("[setup] virtme-ng: missing, installing {VIRTME_NG_REQUIREMENT} with pip");
    if probe(Command::new("python3").args(["-m", "pip", "--version"])).is_none() {
        bail!(
            "`python3 -m pip` does not work: install the Debian package python3-pip \
             (`cargo xtask setup --only apt`) or a Python with pip"
        );
    }
    let mut install = Command::new("python3");
    install.args(["-m", "pip", "install", "--disable-pip-version-check"]);
    // Debian's own python3 refuses system-wide pip installs (PEP 668) unless told;
    // a pyenv or venv python has no such marker and needs no flag.
    if python_is_externally_managed()? {
        install.arg("--break-system-packages");
    }
    run_command(install.arg(VIRTME_NG_REQUIREMENT))?;
    if probe(Command::new("vng").arg("--version")).is_none()
        && probe(Command::new("pyenv").arg("--version")).is_some()
    {
        // pyenv finds new console scripts only after a rehash of its shims.
        run_command(Command::new("pyenv").arg("rehash"))?;
    }
    match probe(Command::new("vng").arg("--version")) {
        Some(version) => {
            println!("[setup] virtme-ng: installed ({})", version.trim());
            Ok(())
        }
        None => {
            let scripts = output(Command::new("python3").args([
                "-c",
                "import sysconfig; print(sysconfig.get_path('scripts'))",
            ]))?;
            bail!(
                "pip installed {VIRTME_NG_REQUIREMENT} but `vng` is not on PATH; add {} to PATH",
                scripts.trim()
            )
        }
    }
}

/// Whether python3 carries the PEP 668 `EXTERNALLY-MANAGED` marker.
fn python_is_externally_managed() -> Result<bool> {
    let answer = output(Command::new("python3").args([
        "-c",
        "import os, sys, sysconfig; \
         print(sys.prefix == sys.base_prefix and os.path.isfile(\
         os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))",
    ]))?;
    Ok(answer.trim() == "True")
}

// ---------------------------------------------------------------------------
// Rust toolchains and components

fn rust_toolchains() -> Result<()> {
    let stable_components = ["clippy", "rustfmt"];
    let installed = installed_components("stable")?;
    let missing: Vec<&str> = stable_components
        .into_iter()
        .filter(|c| !has_component(&installed, c))
        .collect();
    if missing.is_empty() {
        println!("[setup] stable clippy, rustfmt: present");
    } else {
        println!("[setup] stable components missing: {}", missing.join(", "));
        run_command(
            Command::new("rustup")
                .args(["component", "add", "--toolchain", "stable"])
                .args(&missing),
        )?;
    }

    if nightly_installed()? {
        println!(
            "[setup] nightly toolchain: present ({})",
            nightly_version()?
        );
    } else {
        println!("[setup] nightly toolchain: missing, installing");
        run_command(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }

    if rust_src_installed()? {
        println!("[setup] nightly rust-src: present");
    } else {
        println!("[setup] nightly rust-src: missing, installing (needed by -Z build-std=core)");
        run_command(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

fn installed_components(toolchain: &str) -> Result<String> {
    output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        toolchain,
    ]))
}

/// Whether rustup's list holds `component` (listed as `rust-src`, or with the host
/// appended: `clippy-x86_64-unknown-linux-gnu`).
fn has_component(list: &str, component: &str) -> bool {
    list.lines().any(|line| {
        line == component
            || line
                .strip_prefix(component)
                .is_some_and(|host| host.starts_with('-'))
    })
}

/// Whether rustup has a toolchain called `nightly`.
pub(crate) fn nightly_installed() -> Result<bool> {
    let list = output(Command::new("rustup").args(["toolchain", "list"]))?;
    Ok(list
        .lines()
        .any(|line| line.starts_with("nightly-") || line.starts_with("nightly ")))
}

/// Whether the nightly toolchain has the standard library's source, which
/// `-Z build-std=core` compiles.
pub(crate) fn rust_src_installed() -> Result<bool> {
    Ok(nightly_installed()? && has_component(&installed_components("nightly")?, "rust-src"))
}

/// `rustc +nightly --version`, trimmed.
fn nightly_version() -> Result<String> {
    Ok(
        output(Command::new("rustc").args(["+nightly", "--version"]))?
            .trim()
            .to_owned(),
    )
}

// ---------------------------------------------------------------------------
// bpf-linker

/// Nightly's LLVM as bpf-linker needs to see it.
#[derive(Debug)]
struct NightlyLlvm {
    /// The shared library file in the toolchain's `lib/`, e.g.
    /// `libLLVM.so.22.1-rust-1.97.0-nightly`.
    library: PathBuf,
    /// LLVM's major version, from `rustc -vV`; selects bpf-linker's `llvm-N` feature.
    major: u32,
}

fn nightly_llvm() -> Result<NightlyLlvm> {
    let sysroot = PathBuf::from(
        output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?.trim(),
    );
    let lib = sysroot.join("lib");
    let mut candidates = Vec::new();
    for entry in fs::read_dir(&lib).with_context(|| format!("reading {}", lib.display()))? {
        let entry = entry.with_context(|| format!("reading {}", lib.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // The real library is `libLLVM.so.<major>.<minor>-rust-<version>`; the
        // `libLLVM-<major>-rust-<version>.so` beside it is a linker script.
        if name.starts_with("libLLVM.so.") && name.contains("-rust-") {
            candidates.push(entry.path());
        }
    }
    let library = match candidates.as_slice() {
        [one] => one.clone(),
        [] => bail!(
            "no libLLVM.so.*-rust-* in {}: is the nightly toolchain complete?",
            lib.display()
        ),
        many => bail!("several LLVM libraries in {}: {many:?}", lib.display()),
    };

    let verbose = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = verbose
        .lines()
        .find_map(|line| line.strip_prefix("LLVM version: "))
        .and_then(|version| version.split('.').next())
        .and_then(|major| major.trim().parse().ok())
        .context("`rustc +nightly -vV` printed no `LLVM version: N...` line")?;
    Ok(NightlyLlvm { library, major })
}

/// Why the bpf-linker at `binary` (or on PATH, if `None`) is not usable with the
/// current nightly, or `None` if it is.
pub(crate) fn bpf_linker_problem(binary: Option<&Path>) -> Result<Option<String>> {
    let program = binary.map_or_else(|| PathBuf::from("bpf-linker"), Path::to_owned);
    let Some(version) = probe(Command::new(&program).arg("--version")) else {
        return Ok(Some(format!(
            "`{} --version` does not run (missing, or its LLVM library is gone)",
            program.display()
        )));
    };
    let version = version.trim();
    let wanted = format!("bpf-linker {BPF_LINKER_VERSION}.");
    if !version.starts_with(&wanted) {
        return Ok(Some(format!(
            "found {version}, want {BPF_LINKER_VERSION}.x"
        )));
    }
    // A bpf-linker that loads an LLVM dynamically must load nightly's: rustc hands it
    // bitcode in nightly's LLVM format. (A statically linked one has no libLLVM
    // dependency and is accepted as is.)
    let path = match binary {
        Some(path) => path.to_owned(),
        None => match which("bpf-linker") {
            Some(path) => path,
            None => return Ok(Some("bpf-linker is not on PATH".to_owned())),
        },
    };
    let libraries = output(Command::new("ldd").arg(&path))?;
    let Some(loaded) = libraries
        .lines()
        .filter(|line| line.trim_start().starts_with("libLLVM"))
        .find_map(|line| line.split("=>").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
    else {
        return Ok(None);
    };
    let llvm = nightly_llvm()?;
    let same = fs::canonicalize(loaded).ok() == fs::canonicalize(&llvm.library).ok();
    Ok((!same).then(|| {
        format!(
            "it loads {loaded}, not nightly's {}",
            llvm.library.display()
        )
    }))
}

fn bpf_linker(root: Option<&Path>) -> Result<()> {
    let binary = root.map(|root| root.join("bin").join("bpf-linker"));
    match bpf_linker_problem(binary.as_deref())? {
        None => {
            println!("[setup] bpf-linker: present and built against nightly's LLVM");
            Ok(())
        }
        Some(problem) => {
            println!("[setup] bpf-linker: needs (re)installing: {problem}");
            install_bpf_linker(root)
        }
    }
}

/// Builds bpf-linker against the nightly toolchain's own LLVM.
///
/// bpf-linker's build script links `-lLLVM` from `$LLVM_PREFIX/lib` and records that
/// directory as the binary's rpath. The toolchain ships the library only under its
/// versioned name, so we point `LLVM_PREFIX` at a directory of symlinks (`libLLVM.so`
/// for the link, the versioned name for the loader) under the workspace's target
/// dir, and add the toolchain's own `lib/` as a second rpath so the binary keeps
/// working after `cargo clean` removes the symlinks.
pub(crate) fn install_bpf_linker(root: Option<&Path>) -> Result<()> {
    let llvm = nightly_llvm()?;
    if !BPF_LINKER_LLVM_MAJORS.contains(&llvm.major) {
        bail!(
            "nightly uses LLVM {}, but bpf-linker {BPF_LINKER_VERSION} supports only LLVM \
             {BPF_LINKER_LLVM_MAJORS:?}; pick a matching bpf-linker release in setup.rs",
            llvm.major
        );
    }
    let library_name = llvm
        .library
        .file_name()
        .context("LLVM library path has no file name")?;
    let toolchain_lib = llvm
        .library
        .parent()
        .context("LLVM library path has no parent")?;

    let prefix = workspace_root().join("target").join("bpf-linker-llvm");
    let prefix_lib = prefix.join("lib");
    if prefix.exists() {
        fs::remove_dir_all(&prefix).with_context(|| format!("removing {}", prefix.display()))?;
    }
    fs::create_dir_all(&prefix_lib)
        .with_context(|| format!("creating {}", prefix_lib.display()))?;
    for link in [OsStr::new("libLLVM.so"), library_name] {
        let link = prefix_lib.join(link);
        std::os::unix::fs::symlink(&llvm.library, &link).with_context(|| {
            format!(
                "symlinking {} -> {}",
                link.display(),
                llvm.library.display()
            )
        })?;
    }

    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        rustflags.push(' ');
    }
    write!(
        rustflags,
        "-C link-arg=-Wl,-rpath,{}",
        toolchain_lib.display()
    )?;

    let mut install = Command::new("cargo");
    install
        .args(["+nightly", "install", "bpf-linker", "--locked", "--force"])
        .args(["--version", &format!("^{BPF_LINKER_VERSION}")])
        .args([
            "--no-default-features",
            "--features",
            &format!("llvm-{}", llvm.major),
        ])
        .env("LLVM_PREFIX", &prefix)
        .env("RUSTFLAGS", rustflags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC")
        .env_remove("RUSTUP_TOOLCHAIN");
    if let Some(root) = root {
        install.arg("--root").arg(root);
    }
    println!(
        "[setup] building bpf-linker {BPF_LINKER_VERSION} against {} (takes a few minutes)",
        llvm.library.display()
    );
    let started = Instant::now();
    run_command(&mut install)?;
    println!(
        "[setup] bpf-linker built in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let binary = root.map(|root| root.join("bin").join("bpf-linker"));
    if let Some(problem) = bpf_linker_problem(binary.as_deref())? {
        bail!("bpf-linker was installed but is still not usable: {problem}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// cargo-fuzz

fn cargo_fuzz() -> Result<()> {
    if let Some(version) = probe(Command::new("cargo").args(["fuzz", "--version"])) {
        println!("[setup] cargo-fuzz: present ({})", version.trim());
        return Ok(());
    }
    println!("[setup] cargo-fuzz: missing, installing (takes a few minutes)");
    run_command(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

// ---------------------------------------------------------------------------
// cargo-deb

fn cargo_deb() -> Result<()> {
    if let Some(version) = probe(Command::new("cargo").args(["deb", "--version"])) {
        println!("[setup] cargo-deb: present ({})", version.trim());
        return Ok(());
    }
    println!("[setup] cargo-deb: missing, installing (takes a few minutes)");
    run_command(Command::new("cargo").args(["install", "cargo-deb", "--locked"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names_match_rustup_lists() {
        let list = "cargo-x86_64-unknown-linux-gnu\nclippy-x86_64-unknown-linux-gnu\nrust-src\n";
        assert!(has_component(list, "clippy"));
        assert!(has_component(list, "rust-src"));
        assert!(!has_component(list, "rustfmt"));
        assert!(!has_component(
            "rustfmt2-x86_64-unknown-linux-gnu\n",
            "rustfmt"
        ));
    }
}
