//! `gateway doctor` against the real kernel, the binary run inside network
//! namespaces of its own (root needed), deleted when each test ends, also on
//! failure:
//!
//! - a router with everything in place (forwarding on, its LAN interface, a
//!   reachable origin, a writable cache directory) passes, exit 0, and the
//!   doctor leaves no nftables table and no policy rule behind;
//! - the same host broken on purpose (forwarding off, a missing interface, an
//!   unreachable origin, a file where the cache directory should be, no `nft`)
//!   fails, exit 1, with a FAIL line and its fix for each of them.

#[path = "support/netns.rs"]
mod netns;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use gateway_transport::{AssociationConfig, BackendKind, Listener};
use netns::{NetNsGuard, veth};

/// Runs `gateway doctor --config <config>` in `ns`, with `path` as its PATH.
fn doctor(ns: &NetNsGuard, config: &Path, path: Option<&Path>) -> Result<Output> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gateway"));
    command.args(["doctor", "--config"]).arg(config);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let output = testbed::exec_in(ns.name(), &command)
        .output()
        .context("running gateway doctor")?;
    Ok(output)
}

/// The line of `item` in the report, which must exist.
fn line<'a>(report: &'a str, item: &str) -> Result<&'a str> {
    report
        .lines()
        .find(|l| {
            l.get(6..)
                .is_some_and(|rest| rest.starts_with(&format!("{item}:")))
        })
        .with_context(|| format!("no line for {item} in:\n{report}"))
}

/// The fix printed under `item`'s line.
fn fix<'a>(report: &'a str, item: &str) -> Result<&'a str> {
    let first = line(report, item)?;
    let mut lines = report.lines().skip_while(|l| *l != first).skip(1);
    lines
        .find_map(|l| l.trim_start().strip_prefix("fix: "))
        .with_context(|| format!("no fix under {item} in:\n{report}"))
}

fn config_text(lan: &str, origin: SocketAddr, cache: &Path) -> String {
    format!(
        "[intercept]\n\
         lan_interfaces = [\"{lan}\"]\n\
         [cache]\n\
         path = \"{}\"\n\
         max_bytes = 8388608\n\
         max_object_bytes = 1048576\n\
         memory_bytes = 0\n\
         [[origin]]\n\
         name = \"demo\"\n\
         address = \"{origin}\"\n\
         destinations = [\"203.0.113.0/24\"]\n\
         backend = \"userspace\"\n\
         [origin.transport]\n\
         connect_timeout = 1000\n",
        cache.display()
    )
}

#[test]
fn a_router_with_everything_in_place_passes_and_leaves_nothing_behind() -> Result<()> {
    let gw = NetNsGuard::new("gdoc-ok")?;
    let client = NetNsGuard::new("gdoc-cl")?;
    veth(&gw, &client, "lan0")?;
    testbed::sysctl(gw.name(), "net.ipv4.ip_forward", "1")?;
    testbed::sysctl(gw.name(), "net.ipv6.conf.all.forwarding", "1")?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");

    // The origin: a userspace SCTP listener on the gateway namespace's
    // loopback, accepting until the doctor is done.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let output = std::thread::scope(|scope| -> Result<Output> {
        let origin = scope.spawn(|| {
            gw.run(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async {
                    let listener = Listener::bind(
                        BackendKind::Userspace,
                        SocketAddr::from(([127, 0, 0, 1], 0)),
                        &AssociationConfig::default(),
                    )
                    .await?;
                    let _ = addr_tx.send(listener.local_addr()?);
                    let mut accepted = Vec::new();
                    tokio::pin!(stop_rx);
                    loop {
                        tokio::select! {
                            assoc = listener.accept() => accepted.push(assoc?),
                            _ = &mut stop_rx => break,
                        }
                    }
                    Ok(accepted.len())
                })
            })
        });
        let run = || -> Result<Output> {
            let addr = addr_rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .context("the test origin did not start")?;
            std::fs::write(
                &config,
                config_text("lan0", addr, &dir.path().join("cache/c.redb")),
            )?;
            doctor(&gw, &config, None)
        };
        let output = run();
        let _ = stop_tx.send(());
        let accepted = origin
            .join()
            .map_err(|_| anyhow::anyhow!("the origin thread panicked"))??;
        let output = output?;
        ensure!(
            accepted == 1,
            "the doctor opened {accepted} associations, not 1"
        );
        Ok(output)
    })?;

    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.code() == Some(0),
        "exit {:?}:\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for item in [
        "capabilities",
        "ipv4 forwarding",
        "ipv6 forwarding",
        "interface lan0",
        "nftables",
        "nftables tproxy (CONFIG_NFT_TPROXY)",
        "nftables socket (CONFIG_NFT_SOCKET)",
        "nftables fib (CONFIG_NFT_FIB_INET)",
        "policy routing",
        "origin demo",
        "cache directory",
    ] {
        let line = line(&report, item)?;
        ensure!(line.starts_with("ok "), "{item} is not ok:\n{report}");
    }
    ensure!(line(&report, "eBPF")?.starts_with("skip "), "{report}");
    ensure!(
        !report.contains("FAIL"),
        "a FAIL in a passing report:\n{report}"
    );

    // Nothing left: no scratch table, no policy rule, no scratch file.
    let tables = gw.exec("nft", &["list", "tables"])?;
    ensure!(tables.trim().is_empty(), "tables left behind: {tables}");
    for family in ["-4", "-6"] {
        let rules = gw.exec("ip", &[family, "rule", "show"])?;
        ensure!(
            !rules.contains("3129"),
            "a policy rule left behind: {rules}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    ensure!(left == ["gateway.toml"], "files left behind: {left:?}");
    Ok(())
}

#[test]
fn a_host_broken_on_purpose_fails_with_a_fix_per_item() -> Result<()> {
    // Forwarding is off in a new namespace; lan9 does not exist.
    let gw = NetNsGuard::new("gdoc-bad")?;
    let dir = tempfile::tempdir()?;
    // A file where the cache directory should go.
    std::fs::write(dir.path().join("cache"), "not a directory")?;
    // Nobody listens on this port in the namespace.
    let unreachable = SocketAddr::from(([127, 0, 0, 1], 9));
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        config_text("lan9", unreachable, &dir.path().join("cache/c.redb")),
    )?;
    // A PATH with `ip` (for `ip netns exec`) and no `nft`.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin)?;
    let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("no ip program")?;
    std::os::unix::fs::symlink(ip, bin.join("ip"))?;

    let output = doctor(&gw, &config, Some(&bin))?;
    let report = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.code() == Some(1),
        "exit {:?}:\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for (item, expected_fix) in [
        ("ipv4 forwarding", "sysctl -w net.ipv4.ip_forward=1"),
        ("interface lan9", "correct intercept.lan_interfaces"),
        ("nftables", "apt-get install nftables"),
        (
            "origin demo",
            "is the origin running and listening on 127.0.0.1:9?",
        ),
        ("cache directory", "move cache.path"),
    ] {
        ensure!(
            line(&report, item)?.starts_with("FAIL "),
            "{item} did not fail:\n{report}"
        );
        let fix = fix(&report, item)?;
        ensure!(
            fix.contains(expected_fix),
            "{item}'s fix `{fix}` lacks `{expected_fix}`"
        );
    }
    // What is not broken still passes.
    ensure!(
        line(&report, "policy routing")?.starts_with("ok "),
        "{report}"
    );
    ensure!(
        report
            .lines()
            .last()
            .is_some_and(|l| l.contains("5 failed") && l.contains("something required is missing")),
        "{report}"
    );
    Ok(())
}
