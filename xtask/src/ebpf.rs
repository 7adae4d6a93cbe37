//! `cargo xtask build-ebpf`: builds `ebpf-programs` for `bpfel-unknown-none` and
//! returns the object's path; with `--load-test`, then proves the object loads,
//! attaches and counts by running `gateway/tests/ebpf_load.rs` (XDP on a veth)
//! and `gateway/tests/ebpf_sctp.rs` (the SCTP programs on crafted packets, through
//! `BPF_PROG_TEST_RUN`) against it.
//!
//! The build is `cargo +nightly build --target bpfel-unknown-none -Z
//! build-std=core` in `ebpf-programs/` (its own workspace, its own target dir);
//! rustc links the object with bpf-linker from PATH.
//!
//! What it never does: install anything. If nightly's rust-src or a usable
//! bpf-linker is missing it stops and says to run `cargo xtask setup`.
//!
//! Where to start: [`build`].

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::{cmd, setup};

/// The target triple the eBPF programs are built for (little-endian BPF).
const BPF_TARGET: &str = "bpfel-unknown-none";

/// The eBPF crate's binary: the object file aya loads.
const OBJECT_NAME: &str = "ebpf-programs";

/// Environment variable the load test reads the object's path from (the same
/// name as `gateway::ebpf::OBJECT_PATH_ENV`).
pub(crate) const OBJECT_PATH_ENV: &str = "GATEWAY_EBPF_OBJECT";

/// Options for `cargo xtask build-ebpf`.
#[derive(Debug, clap::Args)]
pub(crate) struct BuildOptions {
    /// Build with the release profile (the default; `--debug` selects the dev
    /// profile, which ebpf-programs also optimises, since the verifier rejects what
    /// unoptimised code looks like).
    #[arg(long = "debug", action = clap::ArgAction::SetFalse)]
    pub release: bool,
    /// After building, run the userspace load test against the object (needs
    /// root: it creates network namespaces and attaches XDP).
    #[arg(long)]
    pub load_test: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            release: true,
            load_test: false,
        }
    }
}

/// Builds the eBPF object and returns its path; runs the load test if asked.
pub(crate) fn build(options: &BuildOptions) -> Result<PathBuf> {
    check_prerequisites()?;
    let crate_dir = cmd::workspace_root().join("ebpf-programs");
    let target_dir = crate_dir.join("target");
    let profile = if options.release { "release" } else { "dev" };
    println!("[build-ebpf] building ebpf-programs ({profile}) for {BPF_TARGET} with nightly");

    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(&crate_dir)
        .args([
            "+nightly",
            "build",
            "--target",
            BPF_TARGET,
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    if options.release {
        cargo.arg("--release");
    }
    // `cargo xtask` runs under the stable toolchain; keep its choices (and any
    // rustc override) from leaking into the nightly build.
    cargo
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR");
    let started = Instant::now();
    cmd::run_command(&mut cargo).with_context(|| {
        format!(
            "building ebpf-programs failed; if the error is about bpf-linker, rust-src or \
             the {BPF_TARGET} target, run `cargo xtask setup`"
        )
    })?;

    let object = target_dir
        .join(BPF_TARGET)
        .join(if options.release { "release" } else { "debug" })
        .join(OBJECT_NAME);
    let size = object
        .metadata()
        .with_context(|| {
            format!(
                "the build succeeded but left no object at {}",
                object.display()
            )
        })?
        .len();
    println!(
        "[build-ebpf] {} ({size} bytes) in {:.1} s",
        object.display(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "[build-ebpf] to use it: export {OBJECT_PATH_ENV}={}",
        object.display()
    );

    if options.load_test {
        run_load_test(&object)?;
    }
    Ok(object)
}

/// Fails with a pointer to `cargo xtask setup` if the build cannot work.
fn check_prerequisites() -> Result<()> {
    let mut missing = Vec::new();
    if !setup::nightly_installed()? {
        missing.push("the nightly toolchain".to_owned());
    } else {
        if !setup::rust_src_installed()? {
            missing.push("nightly's rust-src component".to_owned());
        }
        // Checking bpf-linker needs nightly: it must use nightly's LLVM.
        if let Some(problem) = setup::bpf_linker_problem(None)? {
            missing.push(format!("a usable bpf-linker ({problem})"));
        }
    }
    if !missing.is_empty() {
        bail!(
            "cannot build ebpf-programs: missing {}.\nRun `cargo xtask setup` (or \
             `cargo xtask setup --only rust --only bpf-linker`) first.",
            missing.join(" and ")
        );
    }
    Ok(())
}

/// The `gateway` test targets that need root and the object; their tests are
/// `#[ignore]`d for plain `cargo test`.
const LOAD_TESTS: [&str; 3] = ["ebpf_load", "ebpf_sctp", "ebpf_tcp"];

/// Runs [`LOAD_TESTS`] against `object`.
pub(crate) fn run_load_test(object: &Path) -> Result<()> {
    println!(
        "[build-ebpf] load tests: xdp_count on a veth in a namespace; xdp_sctp, tc_sctp and \
         the TCP flow programs on crafted packets (BPF_PROG_TEST_RUN) and real traffic"
    );
    let mut args = vec!["test", "--package", "gateway"];
    for test in LOAD_TESTS {
        args.extend(["--test", test]);
    }
    args.extend(["--", "--ignored"]);
    // The cargo running this xtask, so the test builds with the same toolchain.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    cmd::run_command(
        Command::new(cargo)
            .current_dir(cmd::workspace_root())
            .args(&args)
            .env(OBJECT_PATH_ENV, object),
    )
    .context("the eBPF load tests failed (they need root)")
}
