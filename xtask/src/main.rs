//! `cargo xtask`: set up the machine, build the eBPF programs, run the tests, the
//! kernel-SCTP VM tests, the demo topology and the benchmarks, write the
//! generated page corpus, build the Debian packages, and install the daemons as
//! system services.
//!
//! Every subcommand prints what it is doing before long steps, and every step that
//! installs something first checks whether it is already there.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod bench;
mod cmd;
mod corpus;
mod deb;
mod ebpf;
mod fuzz_seeds;
mod install;
mod plot;
mod run;
mod setup;
mod shipped;
mod test;
mod vm;

#[derive(Debug, Parser)]
#[command(about = "Build, test and run the gateway project")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the project needs (Debian packages, nightly rust-src,
    /// bpf-linker, virtme-ng, cargo-fuzz, cargo-deb); skips what is present.
    Setup(setup::SetupOptions),
    /// Build the eBPF programs for bpfel-unknown-none.
    BuildEbpf(ebpf::BuildOptions),
    /// Run the whole test suite: set-up, lints, unit and namespace tests, the
    /// kernel-SCTP VM tests, a short fuzz run.
    Test(test::TestOptions),
    /// Bring up the demo: namespaces, origin, gateway and a demo site; Ctrl-C
    /// tears it down. With --lan-interface and --origin: the gateway on this
    /// host's interfaces instead.
    Run(run::RunOptions),
    /// Run a benchmark and write its report to bench/results/ (after
    /// installing the Debian packages the benchmarks use, if missing).
    Bench(Box<bench::BenchOptions>),
    /// Write the full-size SCTP fuzz seeds under fuzz/target/seeds/ (`test`
    /// does it before its fuzz run) and print how to fuzz with them by hand.
    FuzzSeeds,
    /// Write the generated page corpus (p25, p50, p75 pages) to a directory.
    Corpus(corpus::CorpusOptions),
    /// Run only the kernel-SCTP tests inside a virtme-ng VM with Debian's kernel.
    VmTest(vm::VmOptions),
    /// Build the Debian packages sctp-gateway and sctp-origin (cargo-deb),
    /// the eBPF object first; with --check, install, inspect, remove and purge
    /// them on this host.
    Deb(deb::DebOptions),
    /// Install the gateway and the origin as system services: at `/`, the
    /// Debian packages with dpkg; under --prefix, by copying the release
    /// binaries, configuration, state directories and systemd units. Enables
    /// and starts nothing.
    Install(install::InstallOptions),
    /// Remove what `install` put in place (at `/`: dpkg --purge, or --remove
    /// with --keep-data).
    Uninstall(install::UninstallOptions),
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Setup(options) => setup::run(&options),
        Command::BuildEbpf(options) => ebpf::build(&options).map(|_| ()),
        Command::Test(options) => test::run(&options),
        Command::VmTest(options) => vm::run(&options),
        Command::Bench(options) => {
            // The benchmarks' packages (wrk, Squid, valgrind, ...), which the
            // demo's set-up leaves out; a check when all are there.
            setup::run(&setup::SetupOptions {
                only: vec![setup::Step::Apt],
                ..setup::SetupOptions::default()
            })?;
            bench::run(&options)
        }
        Command::Run(options) => run::run(&options),
        Command::Corpus(options) => corpus::run(&options),
        Command::FuzzSeeds => fuzz_seeds::run(),
        Command::Deb(options) => deb::run(&options),
        Command::Install(options) => install_at(&options),
        Command::Uninstall(options) => uninstall_at(&options),
    }
}

/// `cargo xtask install`: at `/` the Debian packages (built and installed
/// with dpkg), under any other prefix a copy ([`install::install`]).
fn install_at(options: &install::InstallOptions) -> Result<()> {
    if !install::Layout::new(&options.prefix).is_root() {
        return install::install(options);
    }
    if options.binaries.is_some() {
        anyhow::bail!(
            "--binaries is for --prefix installs; at / the packages are built \
             (`cargo xtask deb`) and installed with dpkg. On a build host: \
             `cargo xtask deb`, then `dpkg -i` the two .debs on the target"
        );
    }
    deb::install(options.dry_run)
}

/// `cargo xtask uninstall`: what [`install_at`] put in place.
fn uninstall_at(options: &install::UninstallOptions) -> Result<()> {
    if install::Layout::new(&options.prefix).is_root() {
        deb::uninstall(options.dry_run, options.keep_data)
    } else {
        install::uninstall(options)
    }
}
