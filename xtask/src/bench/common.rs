//! What every benchmark shares: building its measuring programs in release mode
//! and the header its report starts with. A leaf: it imports no other benchmark.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;

use crate::cmd::{run_command, workspace_root};

/// Builds `example` of `package` in release mode; returns the executable's path.
pub(super) fn build_example(package: &str, example: &str) -> Result<PathBuf> {
    build_example_with(package, example, &[])
}

/// Builds `example` of `package` in release mode with `features` of that
/// package; returns the executable's path.
pub(super) fn build_example_with(
    package: &str,
    example: &str,
    features: &[&str],
) -> Result<PathBuf> {
    println!("==> building {example} (release)");
    let root = workspace_root();
    let mut command = Command::new("cargo");
    command
        .current_dir(&root)
        .args(["build", "--release", "-p", package, "--example", example]);
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    run_command(&mut command)?;
    Ok(testbed::target_dir().join("release/examples").join(example))
}

/// A report's title and the lines every report starts with: how to reproduce it,
/// when, and on what.
pub(super) fn report_header(title: &str, subcommand: &str) -> Result<String> {
    let mut report = String::new();
    writeln!(report, "# {title}\n")?;
    writeln!(report, "- command: `cargo xtask bench {subcommand}`")?;
    writeln!(
        report,
        "- date: {}",
        command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    )?;
    writeln!(report, "- machine: {}", machine_description())?;
    Ok(report)
}

/// The load average over 1, 5 and 15 minutes, as /proc/loadavg gives it: what
/// else ran while a benchmark measured.
pub(super) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn machine_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "{} cores ({cpu}), Linux {}",
        command_output("nproc", &[]),
        command_output("uname", &["-r"])
    )
}

/// Builds the WAN emulator (bench/wanem) in release mode; returns its path.
pub(super) fn build_wanem() -> Result<PathBuf> {
    println!("==> building wanem (release)");
    run_command(Command::new("cargo").current_dir(workspace_root()).args([
        "build",
        "--release",
        "-p",
        "wanem",
        "--bin",
        "wanem",
    ]))?;
    Ok(testbed::target_dir().join("release/wanem"))
}
