//! The real `gateway` binary with `--log-format json`: every line it writes on
//! stderr, from its start to `gateway ready`, is one JSON object with tracing's
//! layout (`timestamp`, `level`, `target`, the message under `fields`).
//!
//! Root needed (`IP_TRANSPARENT` on its listener takes CAP_NET_ADMIN), as for
//! the other tests that run the daemon. It touches nothing of the host's: it
//! listens on a free loopback port, installs no rules (`intercept.manage =
//! false`), opens no cache and no admin endpoint, and is killed when the test
//! ends, also on failure.

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// How long the gateway gets to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The gateway process, killed on drop if still running.
struct GatewayProcess(Child);

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines of `child`'s stderr, read by a thread of their own so that the
/// test can wait for them with a deadline.
fn stderr_lines(child: &mut Child) -> Result<Receiver<String>> {
    let stderr = child.stderr.take().context("stderr not piped")?;
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

fn message(line: &Value) -> Option<&str> {
    line.pointer("/fields/message").and_then(Value::as_str)
}

#[test]
fn log_format_json_writes_one_object_a_line() -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    // `[log] format = "text"` in the file: the flag must win over it.
    std::fs::write(
        &config,
        format!(
            "[listen]\nport = {port}\naddresses = [\"127.0.0.1\"]\n\
             [intercept]\nmanage = false\n\
             [cache]\nenabled = false\n\
             [admin]\nenabled = false\n\
             [log]\nformat = \"text\"\n"
        ),
    )?;
    let mut gateway = GatewayProcess(
        Command::new(env!("CARGO_BIN_EXE_gateway"))
            .arg("--config")
            .arg(&config)
            .args(["--log-format", "json", "run"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the gateway binary")?,
    );
    let lines = stderr_lines(&mut gateway.0)?;

    let deadline = Instant::now() + READY_WITHIN;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match lines.recv_timeout(left) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => bail!("not ready in time; seen: {seen:#?}"),
            Err(RecvTimeoutError::Disconnected) => {
                let status = gateway.0.wait()?;
                bail!("the gateway exited ({status}) before it was ready; seen: {seen:#?}")
            }
        };
        let value: Value =
            serde_json::from_str(&line).with_context(|| format!("not a JSON line: {line:?}"))?;
        ensure!(value.is_object(), "not a JSON object: {line}");
        ensure!(value["level"] == "INFO", "{line}");
        let target = value["target"].as_str().context("no target")?;
        ensure!(
            target == "gateway" || target.starts_with("gateway::"),
            "{line}"
        );
        ensure!(value["timestamp"].is_string(), "{line}");
        ensure!(message(&value).is_some(), "no fields.message: {line}");
        let ready = message(&value) == Some("gateway ready");
        seen.push(value);
        if ready {
            break;
        }
    }
    ensure!(
        message(&seen[0]) == Some(format!("transparent listener on 127.0.0.1:{port}").as_str()),
        "first line: {:#}",
        seen[0]
    );
    Ok(())
}
