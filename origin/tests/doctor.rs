//! `origin doctor`, the binary run inside a network namespace of its own (root
//! needed), deleted when the test ends, also on failure:
//!
//! - a configuration whose addresses are free and whose document root exists
//!   passes, exit 0;
//! - one broken on purpose (its port held by another socket, an address not
//!   on the host, a missing document root, an access log in a missing
//!   directory; then an upstream nobody listens on) fails, exit 1, with a FAIL
//!   line and its fix for each.

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, ensure};

static NEXT: AtomicU32 = AtomicU32::new(1);

fn namespace() -> Result<testbed::Netns> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Ok(testbed::Netns::create(&format!(
        "odoc-{}-{n}",
        std::process::id()
    ))?)
}

fn doctor(ns: &testbed::Netns, config: &Path, extra: &[&str]) -> Result<Output> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_origin"));
    command.args(["doctor", "--config"]).arg(config).args(extra);
    testbed::exec_in(ns.name(), &command)
        .output()
        .context("running origin doctor")
}

/// The report line of `item` and the fix under it (empty if none).
fn verdict<'a>(report: &'a str, item: &str) -> Result<(&'a str, &'a str)> {
    let mut lines = report.lines();
    let line = lines
        .find(|l| {
            l.get(6..)
                .is_some_and(|r| r.starts_with(&format!("{item}:")))
        })
        .with_context(|| format!("no line for {item} in:\n{report}"))?;
    let fix = lines
        .next()
        .and_then(|l| l.trim_start().strip_prefix("fix: "))
        .unwrap_or("");
    Ok((line, fix))
}

#[test]
fn free_addresses_and_a_document_root_pass() -> Result<()> {
    let ns = namespace()?;
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("www"))?;
    let config = dir.path().join("origin.toml");
    std::fs::write(
        &config,
        "[listen]\naddresses = [\"127.0.0.1:9899\", \"[::1]:9899\"]\nbackend = \"userspace\"\n\
         [files]\nroot = \"www\"\n",
    )?;
    let log = dir.path().join("access.log");
    let log_arg = log.to_string_lossy().into_owned();
    let output = doctor(&ns, &config, &["--access-log", &log_arg])?;
    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.code() == Some(0),
        "{:?}:\n{report}",
        output.status
    );
    for item in [
        "kernel SCTP",
        "UDP encapsulation",
        "listen 127.0.0.1:9899",
        "listen [::1]:9899",
        "document root",
        "access log",
    ] {
        ensure!(
            verdict(&report, item)?.0.starts_with("ok "),
            "{item}:\n{report}"
        );
    }
    ensure!(!log.exists(), "the doctor left the access log it tried");
    Ok(())
}

#[test]
fn a_held_port_a_foreign_address_and_a_missing_root_fail_with_their_fixes() -> Result<()> {
    let ns = namespace()?;
    // Held by another socket in the namespace while the doctor runs.
    let holder = testbed::in_netns(ns.name(), || UdpSocket::bind("127.0.0.1:9899"))??;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("origin.toml");
    std::fs::write(
        &config,
        "[listen]\naddresses = [\"127.0.0.1:9899\", \"192.0.2.1:9899\"]\nbackend = \"userspace\"\n\
         [files]\nroot = \"missing\"\n",
    )?;
    let log = dir.path().join("no-such-dir/access.log");
    let log_arg = log.to_string_lossy().into_owned();
    let output = doctor(&ns, &config, &["--access-log", &log_arg])?;
    drop(holder);
    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.code() == Some(1),
        "{:?}:\n{report}",
        output.status
    );
    for (item, expected) in [
        ("listen 127.0.0.1:9899", "stop what holds UDP port 9899"),
        ("listen 192.0.2.1:9899", "on one of this host's interfaces"),
        ("document root", "correct files.root"),
        ("access log", "create its directory"),
    ] {
        let (line, fix) = verdict(&report, item)?;
        ensure!(line.starts_with("FAIL "), "{item} did not fail:\n{report}");
        ensure!(
            fix.contains(expected),
            "{item}'s fix `{fix}` lacks `{expected}`"
        );
    }
    Ok(())
}

#[test]
fn an_upstream_nobody_listens_on_fails() -> Result<()> {
    let ns = namespace()?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("origin.toml");
    std::fs::write(
        &config,
        "[listen]\naddresses = [\"127.0.0.1:9899\"]\n\
         [upstream]\naddress = \"127.0.0.1:1\"\nconnect_timeout = 1000\n",
    )?;
    let output = doctor(&ns, &config, &[])?;
    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.code() == Some(1),
        "{:?}:\n{report}",
        output.status
    );
    let (line, fix) = verdict(&report, "upstream 127.0.0.1:1")?;
    ensure!(line.starts_with("FAIL "), "{report}");
    ensure!(fix.contains("start the upstream web server"), "{fix}");
    ensure!(
        verdict(&report, "listen 127.0.0.1:9899")?
            .0
            .starts_with("ok "),
        "{report}"
    );
    Ok(())
}
