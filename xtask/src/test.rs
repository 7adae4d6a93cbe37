//! `cargo xtask test`: the whole suite, cheapest and fastest-failing steps first.
//!
//! 1. set-up (installs what is missing);
//! 2. rustfmt and clippy;
//! 3. the eBPF build;
//! 4. `cargo test` for the workspace: unit, deterministic, namespace, end-to-end
//!    (`gateway/tests/e2e.rs`: the real gateway and origin binaries, nginx and
//!    Chromium in the testbed's namespaces) and eBPF load tests (needs root);
//! 5. the Debian packages: built, installed with dpkg, both `doctor`s run from
//!    the installed paths, removed and purged, nothing left (`cargo xtask deb
//!    --check` alone);
//! 6. the kernel-SCTP tests in a VM;
//! 7. a short fuzz run of every fuzz target (the SCTP ones with inputs up to
//!    a full UDP datagram, and full-size seeds written first: fuzz_seeds.rs).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use crate::cmd::{run_command, workspace_root};
use crate::{deb, ebpf, fuzz_seeds, setup, vm};

/// Options for `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub(crate) struct TestOptions {
    /// Skip the kernel-SCTP VM tests (about a minute under software emulation).
    #[arg(long)]
    pub skip_vm: bool,
    /// Skip the Debian packages' build, install and purge.
    #[arg(long)]
    pub skip_deb: bool,
    /// Skip the fuzz run.
    #[arg(long)]
    pub skip_fuzz: bool,
    /// Seconds each fuzz target runs.
    #[arg(long, default_value_t = 20)]
    pub fuzz_seconds: u32,
    /// Skip `cargo xtask setup` (when you know everything is installed).
    #[arg(long)]
    pub skip_setup: bool,
}

/// The longest input libFuzzer makes for `target`, bytes (its default is
/// 4,096, or the largest seed). Every target sees inputs as large as a UDP
/// datagram over IPv4 carries (65,535 less the IP and UDP headers), which is
/// also more than a RESPONSE_HEAD message or a head read off a socket can
/// be; an input of `sctp_association` is a sequence of operations, room for
/// one such datagram and more.
fn fuzz_max_len(target: &str) -> usize {
    match target {
        "sctp_association" => 2 * (fuzz_seeds::MAX_UDP_PAYLOAD + 29),
        _ => fuzz_seeds::MAX_UDP_PAYLOAD,
    }
}

/// Fuzz targets in fuzz/Cargo.toml, run in this order.
const FUZZ_TARGETS: [&str; 13] = [
    "decode",
    "session",
    "push_pair",
    "sctp_packet",
    "sctp_association",
    "cache_headers",
    "extract",
    "origin_path",
    "learned",
    "framing",
    "front_head",
    "http_semantics",
    "framed_tcp_frames",
];

/// The transport baselines (framed TCP, QUIC), which the product's default
/// build leaves out: the suite tests and lints them too, and the examples
/// that need them.
const BASELINES: &str = "gateway-transport/baselines,gateway/baselines,origin/baselines";

pub(crate) fn run(options: &TestOptions) -> Result<()> {
    let root = &workspace_root();
    let started = Instant::now();
    if !options.skip_setup {
        step("set-up");
        setup::run(&setup::SetupOptions::default())?;
    }

    report_free_disk(root);

    step("rustfmt");
    cargo(root, &["fmt", "--all", "--", "--check"])?;
    step("clippy");
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            BASELINES,
            "--",
            "-D",
            "warnings",
        ],
    )?;
    step("clippy, the product's default build (no baselines)");
    cargo(
        root,
        &[
            "clippy",
            "-p",
            "gateway-transport",
            "-p",
            "gateway",
            "-p",
            "origin",
            "--lib",
            "--bins",
            "--",
            "-D",
            "warnings",
        ],
    )?;

    step("eBPF build");
    let object = ebpf::build(&ebpf::BuildOptions::default())?;

    step("workspace tests (unit, deterministic, namespaces, end to end)");
    cargo(root, &["test", "--workspace", "--features", BASELINES])?;

    step(
        "eBPF load tests (XDP on a veth in a namespace; SCTP and TCP programs on crafted packets and real traffic)",
    );
    ebpf::run_load_test(&object)?;

    if options.skip_deb {
        println!("xtask: Debian packages SKIPPED (--skip-deb)");
    } else {
        step("Debian packages: build, dpkg -i, doctor, remove, purge, nothing left");
        deb::check(&deb::build()?)?;
    }

    if options.skip_vm {
        println!("xtask: kernel-SCTP VM tests SKIPPED (--skip-vm)");
    } else {
        step("kernel-SCTP tests in a VM (with the origin's eBPF depth test)");
        vm::run(&vm::VmOptions::with_ebpf(&object))?;
    }

    if options.skip_fuzz {
        println!("xtask: fuzzing SKIPPED (--skip-fuzz)");
    } else {
        step("full-size fuzz seeds");
        let seeds = fuzz_seeds::write(root)?;
        for target in FUZZ_TARGETS {
            step(&format!("fuzz {target} for {} s", options.fuzz_seconds));
            let mut command = Command::new("cargo");
            command
                .current_dir(root.join("fuzz"))
                .args(["+nightly", "fuzz", "run", target]);
            // Corpus directories given, cargo fuzz reads only those:
            // the committed one first (libFuzzer adds what it finds there),
            // then the generated seeds.
            if let Some((_, dir)) = seeds.iter().find(|(t, _)| *t == target) {
                command.arg(Path::new("corpus").join(target)).arg(dir);
            }
            command
                .arg("--")
                .arg(format!("-max_total_time={}", options.fuzz_seconds));
            command.arg(format!("-max_len={}", fuzz_max_len(target)));
            run_command(&mut command)?;
        }
    }
    println!(
        "xtask: all test steps passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Builds of the whole suite need several GiB; a full disk otherwise shows up
/// as a linker or LLVM I/O error deep in some crate's build. A clean run from
/// a fresh clone (2026-11-26) left 3.9 GB in target/ and 2.3 GB in
/// fuzz/target/; this leaves room for the VM's files and growth.
const SUITE_DISK_GIB: u64 = 12;

/// Says how much disk the target directory's file system has, and warns when it
/// is less than the suite needs.
fn report_free_disk(root: &Path) {
    let output = Command::new("df").args(["-Pk"]).arg(root).output();
    let free_kib = output.ok().and_then(|output| {
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let line = text.lines().nth(1)?.to_owned();
        line.split_whitespace().nth(3)?.parse::<u64>().ok()
    });
    match free_kib {
        Some(kib) if kib < SUITE_DISK_GIB << 20 => println!(
            "xtask: WARNING: {:.1} GiB free under {}; the suite's builds need about {SUITE_DISK_GIB} GiB",
            kib as f64 / f64::from(1 << 20),
            root.display()
        ),
        Some(kib) => println!(
            "xtask: {:.1} GiB free under {}",
            kib as f64 / f64::from(1 << 20),
            root.display()
        ),
        None => println!("xtask: could not read the free disk space (df)"),
    }
}

fn step(name: &str) {
    println!("\n==> xtask test: {name}");
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    run_command(Command::new("cargo").current_dir(root).args(args))
}
