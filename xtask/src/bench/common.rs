//! What every benchmark shares: building its measuring programs in release mode
//! and the header its report starts with. A leaf: it imports no other benchmark.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

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
/// when, on what, from which commit, and how busy the machine was.
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
    writeln!(report, "- commit: {}", commit())?;
    writeln!(
        report,
        "- load average (1, 5, 15 min) as the report was written: {}",
        load_average()
    )?;
    Ok(report)
}

/// The load average over 1, 5 and 15 minutes, as /proc/loadavg gives it: what
/// else ran while a benchmark measured.
pub(super) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// User plus system CPU seconds of process `pid` so far (0 if unreadable).
pub(super) fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at field 3;
    // utime and stime are fields 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    // SAFETY: sysconf has no memory-safety preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 / per_second as f64
}

pub(super) fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub(super) fn machine_description() -> String {
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

/// A fresh scratch directory under the system's temporary directory.
pub(super) fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The total instruction count of a callgrind output file (its `summary:`
/// or `totals:` line).
pub(super) fn callgrind_total(path: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .with_context(|| format!("no summary in {}", path.display()))
}

/// The `lines` functions of a callgrind output file with the highest
/// inclusive cost, as `callgrind_annotate --inclusive=yes` lists them, each
/// with its share of the total: where the instructions of a path go. A
/// function listed again (inlined into several places) is shown once, and
/// those above 95% (the thread's and the runtime's entry points) not at all.
pub(super) fn callgrind_top(path: &Path, lines: usize) -> Result<String> {
    let out = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(path)
        .output()
        .context("running callgrind_annotate (package valgrind)")?;
    if !out.status.success() {
        anyhow::bail!(
            "callgrind_annotate {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let total = callgrind_total(path)? as f64;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut top = String::new();
    let mut seen = std::collections::HashSet::new();
    let rows = text
        .lines()
        .filter_map(annotate_row)
        .filter(|(count, _)| (*count as f64) < 0.95 * total)
        .filter(|(_, function)| seen.insert(function.clone()));
    for (count, function) in rows.take(lines) {
        writeln!(
            top,
            "| {:.1} | {} |",
            count as f64 / total * 100.0,
            function.replace('|', "\\|")
        )?;
    }
    Ok(top)
}

/// One function row of callgrind_annotate's listing: its count and its
/// name (without the file and object `callgrind_annotate` prefixes).
fn annotate_row(line: &str) -> Option<(u64, String)> {
    let line = line.trim();
    let (count, rest) = line.split_once(' ')?;
    let count: u64 = count.replace(',', "").parse().ok()?;
    let rest = rest.trim();
    // `(12.34%)  file:function [object]` in valgrind 3.19's output.
    let rest = rest
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .map_or(rest, |(_, r)| r.trim());
    let function = rest.split_once(':').map_or(rest, |(_, f)| f);
    let function = function.rsplit_once(" [").map_or(function, |(f, _)| f);
    Some((count, function.trim().to_owned()))
}

/// Starts `perf record` with DWARF call stacks into `out`: of process `pid`
/// for as long as `command` runs, or of `command` itself.
pub(super) fn perf_record(out: &Path, pid: Option<u32>, command: &[&str]) -> Result<Child> {
    let mut perf = Command::new("perf");
    perf.args(["record", "-F", "499", "--call-graph", "dwarf", "-o"])
        .arg(out);
    if let Some(pid) = pid {
        perf.args(["-p", &pid.to_string()]);
    }
    perf.arg("--")
        .args(command)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("running perf record (package linux-perf)")
}

/// Renders `perf_data` as a flame graph at `svg`: `perf script`, then
/// inferno's collapse and flame graph (`cargo install inferno`).
pub(super) fn flamegraph(perf_data: &Path, svg: &Path, title: &str) -> Result<()> {
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(perf_data)
        .stderr(Stdio::null())
        .output()
        .context("running perf script (package linux-perf)")?;
    if !script.status.success() {
        anyhow::bail!("perf script -i {} failed", perf_data.display());
    }
    let folded = filter("inferno-collapse-perf", &[], script.stdout)?;
    let graph = filter("inferno-flamegraph", &["--title", title], folded)?;
    std::fs::write(svg, graph).with_context(|| format!("writing {}", svg.display()))
}

/// `program` with `args`, fed `input`; its output.
fn filter(program: &str, args: &[&str], input: Vec<u8>) -> Result<Vec<u8>> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program} (cargo install inferno)"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    feeder
        .join()
        .map_err(|_| anyhow::anyhow!("feeding {program} panicked"))??;
    if !out.status.success() {
        anyhow::bail!("{program} failed ({})", out.status);
    }
    Ok(out.stdout)
}

/// The resident set of process `pid`, KiB (VmRSS; 0 if unreadable).
pub(super) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The commit the benchmark ran at, with `+changes` when the tree had
/// uncommitted changes.
pub(super) fn commit() -> String {
    let hash = command_output("git", &["rev-parse", "--short=12", "HEAD"]);
    let dirty =
        !command_output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{hash}+changes")
    } else {
        hash
    }
}

/// The lines `child` writes on its stdout (piped), read by a thread and handed
/// over as they come; the channel closes when the child closes its stdout.
pub(super) fn stdout_lines(child: &mut Child) -> Result<std::sync::mpsc::Receiver<String>> {
    use std::io::BufRead as _;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// A number field of a measuring program's JSON line.
pub(super) fn field(line: &str, name: &str) -> Option<f64> {
    let start = line.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// An array-of-numbers field of a measuring program's JSON line (`"bins":[1,2,3]`).
pub(super) fn array_field(line: &str, name: &str) -> Option<Vec<f64>> {
    let start = line.find(&format!("\"{name}\":["))? + name.len() + 4;
    let rest = &line[start..];
    let end = rest.find(']')?;
    rest[..end]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}
