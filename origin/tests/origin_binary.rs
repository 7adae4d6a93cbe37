//! The real `origin` binary with the shipped config/origin.toml, over userspace
//! SCTP on loopback, driven by a test gateway speaking the real protocol: file
//! bytes, HEAD, conditional and range requests, 404s, a traversal sample,
//! reverse-proxy failure, a clean stop on SIGTERM, the log as text
//! without colour or as JSON lines, and the `[metrics]` endpoint.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gateway_protocol::{RequestClass, RequestId};
use gateway_transport::{AssociationConfig, BackendKind, connect};
use support::TestGateway;

const LIMIT: Duration = Duration::from_secs(30);

/// The origin process, killed on drop if still running.
struct OriginProcess {
    child: Child,
    addr: SocketAddr,
}

impl Drop for OriginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("origin is one level below the workspace")
        .to_owned()
}

fn free_udp_port() -> Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_origin(extra: &[&str]) -> Result<OriginProcess> {
    start_origin_with(extra, Stdio::inherit(), None)
}

/// The origin with its stderr going to `stderr` and `RUST_LOG` set to `filter`
/// (when given).
fn start_origin_with(extra: &[&str], stderr: Stdio, filter: Option<&str>) -> Result<OriginProcess> {
    start_origin_config(
        &workspace().join("config/origin.toml"),
        extra,
        stderr,
        filter,
    )
}

/// [`start_origin_with`], with the configuration file `config`.
fn start_origin_config(
    config: &Path,
    extra: &[&str],
    stderr: Stdio,
    filter: Option<&str>,
) -> Result<OriginProcess> {
    let port = free_udp_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut command = Command::new(env!("CARGO_BIN_EXE_origin"));
    command
        .arg("--config")
        .arg(config)
        .args(["--listen", &addr.to_string(), "--transport", "userspace"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(stderr);
    if let Some(filter) = filter {
        command.env("RUST_LOG", filter);
    }
    let child = command.spawn().context("starting the origin binary")?;
    Ok(OriginProcess { child, addr })
}

/// The text of `path` once `done` holds for it, or an error with the text as
/// it was at the deadline. The origin writes its log as it goes; a line can
/// reach the file after the response reached the test.
async fn log_when(path: &Path, done: impl Fn(&str) -> bool) -> Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let bytes = std::fs::read(path)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if done(&text) {
            return Ok(text);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("log never showed what was expected:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn gateway(origin: &OriginProcess) -> Result<TestGateway> {
    let config = AssociationConfig {
        connect_timeout: Duration::from_millis(500),
        ..AssociationConfig::default()
    };
    // The process needs a moment to bind; retry until it answers.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match connect(BackendKind::Userspace, origin.addr, &config).await {
            Ok(assoc) => return TestGateway::open(assoc).await,
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(e).context("origin never answered");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn status(gw: &TestGateway, id: RequestId) -> Result<u16> {
    let head = gw.seen[&id].head.as_ref().context("no response head")?;
    let line = std::str::from_utf8(head)?
        .lines()
        .next()
        .unwrap_or_default();
    line.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {line:?}"))
}

fn field(gw: &TestGateway, id: RequestId, name: &str) -> Option<String> {
    let head = std::str::from_utf8(gw.seen[&id].head.as_ref()?).ok()?;
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

async fn get(gw: &mut TestGateway, stream: u16, head: String) -> Result<RequestId> {
    let id = gw.request_head(stream, head, RequestClass::Demand).await?;
    let done = gw.finished.len() + 1;
    gw.until_finished(done).await?;
    Ok(id)
}

fn simple(method: &str, path: &str, extra: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: demo\r\n{extra}\r\n")
}

#[tokio::test]
async fn serves_the_demo_site_byte_for_byte() -> Result<()> {
    let origin = start_origin(&[])?;
    tokio::time::timeout(LIMIT, async {
        let mut gw = gateway(&origin).await?;
        let site = workspace().join("config/demo-site");

        let index = get(&mut gw, 1, simple("GET", "/", "")).await?;
        ensure!(status(&gw, index)? == 200);
        ensure!(
            gw.seen[&index].body == std::fs::read(site.join("index.html"))?,
            "index differs"
        );
        ensure!(field(&gw, index, "cache-control").as_deref() == Some("no-cache"));

        let tile = get(&mut gw, 2, simple("GET", "/assets/tile-07.svg", "")).await?;
        ensure!(gw.seen[&tile].body == std::fs::read(site.join("assets/tile-07.svg"))?);
        ensure!(field(&gw, tile, "content-type").is_some_and(|t| t.starts_with("image/svg+xml")));

        let head = get(&mut gw, 3, simple("HEAD", "/assets/site.css", "")).await?;
        let len = std::fs::metadata(site.join("assets/site.css"))?.len();
        ensure!(status(&gw, head)? == 200 && gw.seen[&head].body.is_empty());
        ensure!(field(&gw, head, "content-length") == Some(len.to_string()));

        let etag = field(&gw, index, "etag").context("no ETag")?;
        let cond = get(
            &mut gw,
            4,
            simple("GET", "/", &format!("If-None-Match: {etag}\r\n")),
        )
        .await?;
        ensure!(status(&gw, cond)? == 304 && gw.seen[&cond].body.is_empty());

        let range = get(
            &mut gw,
            5,
            simple("GET", "/index.html", "Range: bytes=10-109\r\n"),
        )
        .await?;
        ensure!(status(&gw, range)? == 206);
        ensure!(gw.seen[&range].body == std::fs::read(site.join("index.html"))?[10..110]);

        let missing = get(&mut gw, 6, simple("GET", "/nope.html", "")).await?;
        ensure!(status(&gw, missing)? == 404);

        for (i, path) in [
            "/../origin.toml",
            "/%2e%2e/origin.toml",
            "/assets/..%2f..%2forigin.toml",
            "/%00",
        ]
        .into_iter()
        .enumerate()
        {
            let id = get(&mut gw, 7 + i as u16 % 8, simple("GET", path, "")).await?;
            let code = status(&gw, id)?;
            ensure!(matches!(code, 400 | 403 | 404), "{path} answered {code}");
            ensure!(
                !String::from_utf8_lossy(&gw.seen[&id].body).contains("[listen]"),
                "{path} leaked the config file"
            );
        }
        Ok(())
    })
    .await
    .context("test timed out")?
}

#[tokio::test]
async fn reverse_proxy_to_a_dead_upstream_answers_502() -> Result<()> {
    // A port nothing listens on: bind, note, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let origin = start_origin(&["--upstream", &dead.to_string()])?;
    tokio::time::timeout(LIMIT, async {
        let mut gw = gateway(&origin).await?;
        let id = get(&mut gw, 1, simple("GET", "/", "")).await?;
        ensure!(status(&gw, id)? == 502, "got {}", status(&gw, id)?);
        Ok(())
    })
    .await
    .context("test timed out")?
}

#[tokio::test]
async fn sigterm_stops_the_origin_cleanly() -> Result<()> {
    let mut origin = start_origin(&[])?;
    tokio::time::timeout(LIMIT, async {
        let _gw = gateway(&origin).await?;
        let pid = i32::try_from(origin.child.id())?;
        // SAFETY: kill(2) on our own child's pid.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            bail!("kill: {}", std::io::Error::last_os_error());
        }
        for _ in 0..100 {
            if let Some(status) = origin.child.try_wait()? {
                ensure!(status.success(), "origin exited with {status}");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("origin still running 10 s after SIGTERM")
    })
    .await
    .context("test timed out")?
}

#[test]
fn a_config_with_an_unknown_key_is_refused_with_its_name() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("origin.toml");
    std::fs::write(
        &path,
        "[files]\nroot = \".\"\n[response_scheduler]\npolicy = \"scf\"\nweigth = 2\n",
    )?;
    let out = Command::new(env!("CARGO_BIN_EXE_origin"))
        .arg("--config")
        .arg(&path)
        .output()?;
    ensure!(!out.status.success(), "origin accepted the config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        stderr.contains("weigth"),
        "error does not name the key: {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn a_redirected_log_has_no_colour_codes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("origin.log");
    let file = std::fs::File::create(&path)?;
    // debug: the per-request lines carry fields, which colour would italicise.
    let origin = start_origin_with(&[], Stdio::from(file), Some("debug"))?;
    tokio::time::timeout(LIMIT, async {
        let mut gw = gateway(&origin).await?;
        let id = get(&mut gw, 1, simple("GET", "/nope.html", "")).await?;
        ensure!(status(&gw, id)? == 404);
        let log = log_when(&path, |log| {
            log.lines()
                .any(|l| l.contains("origin::service") && l.contains("status=404"))
        })
        .await?;
        ensure!(
            !log.as_bytes().contains(&0x1b),
            "escape bytes in the log file:\n{log:?}"
        );
        Ok(())
    })
    .await
    .context("test timed out")?
}

/// Log lines read from a child's stderr by a thread of their own, so that the
/// test can wait for them with a deadline.
struct LogLines(std::sync::mpsc::Receiver<String>);

impl LogLines {
    fn of(origin: &mut OriginProcess) -> Result<Self> {
        let stderr = origin.child.stderr.take().context("stderr not piped")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self(rx))
    }

    /// Lines parsed as JSON objects up to the first for which `done` holds,
    /// that one included; an error for a line that is no JSON object, for
    /// the end of the log, or at the deadline.
    async fn json_until(
        &self,
        deadline: tokio::time::Instant,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<Vec<serde_json::Value>> {
        let mut seen = Vec::new();
        loop {
            match self.0.try_recv() {
                Ok(line) => {
                    let value: serde_json::Value = serde_json::from_str(&line)
                        .with_context(|| format!("not a JSON line: {line:?}"))?;
                    ensure!(value.is_object(), "not a JSON object: {line}");
                    let last = done(&value);
                    seen.push(value);
                    if last {
                        return Ok(seen);
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    bail!("the log ended after {seen:#?}")
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if tokio::time::Instant::now() >= deadline {
                        bail!("the line waited for never came; seen: {seen:#?}");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// The string at `pointer` (`/fields/message`) in `line`, if there is one.
fn json_str<'a>(line: &'a serde_json::Value, pointer: &str) -> Option<&'a str> {
    line.pointer(pointer).and_then(serde_json::Value::as_str)
}

#[tokio::test]
async fn log_format_json_writes_one_object_a_line_access_log_included() -> Result<()> {
    let mut origin = start_origin_with(&["--log-format", "json"], Stdio::piped(), Some("info"))?;
    let log = LogLines::of(&mut origin)?;
    tokio::time::timeout(LIMIT, async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let start = log
            .json_until(deadline, |l| {
                json_str(l, "/fields/message").is_some_and(|m| m.starts_with("listening on"))
            })
            .await?;
        for line in &start {
            ensure!(json_str(line, "/level") == Some("INFO"), "{line}");
            ensure!(json_str(line, "/target") == Some("origin"), "{line}");
            ensure!(json_str(line, "/timestamp").is_some(), "{line}");
        }
        let first = json_str(&start[0], "/fields/message").unwrap_or_default();
        ensure!(first.starts_with("transport: userspace"), "{first}");

        let mut gw = gateway(&origin).await?;
        let id = get(&mut gw, 1, simple("GET", "/nope.html", "")).await?;
        ensure!(status(&gw, id)? == 404);
        let lines = log
            .json_until(deadline, |l| {
                json_str(l, "/target") == Some(origin::access::TARGET)
            })
            .await?;
        let access = lines.last().context("no lines")?;
        ensure!(json_str(access, "/level") == Some("INFO"), "{access}");
        let fields = access.get("fields").context("no fields")?;
        ensure!(
            fields["method"] == "GET" && fields["target"] == "/nope.html",
            "{access}"
        );
        // Numbers stay numbers; `status` is a string, `-` when there was none.
        ensure!(
            fields["status"] == "404" && fields["stream"] == 1,
            "{access}"
        );
        ensure!(fields["id"] == id && fields["bytes"].is_u64(), "{access}");
        ensure!(fields["outcome"] == "complete", "{access}");
        Ok(())
    })
    .await
    .context("test timed out")?
}

/// The access-log lines of `log` (target `origin::access`), each as its
/// `key=value` fields in order.
fn access_lines(log: &str) -> Vec<Vec<(String, String)>> {
    log.lines()
        .filter_map(|l| l.split_once(" origin::access: "))
        .map(|(_, fields)| {
            fields
                .split(' ')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// A document root with an index and, as Debian's Python docs have, a
/// `_static/jquery.js` symlinked out of it.
fn site_with_a_link_out(dir: &Path) -> Result<PathBuf> {
    let root = dir.join("html");
    std::fs::create_dir_all(root.join("_static"))?;
    std::fs::create_dir_all(dir.join("javascript"))?;
    std::fs::write(dir.join("javascript/jquery.js"), "/* jquery */\n")?;
    std::fs::write(root.join("index.html"), "<h1>docs</h1>\n")?;
    std::os::unix::fs::symlink("../../javascript/jquery.js", root.join("_static/jquery.js"))?;
    Ok(root)
}

/// What an access line should say.
struct Expected<'a> {
    id: RequestId,
    stream: u16,
    method: &'a str,
    target: &'a str,
    status: u16,
    bytes: usize,
    reason: &'a str,
}

/// Checks one access line: the fields, in order, with the expected values
/// (`peer` by its address, `ms` by being a number).
fn check_access_line(line: &[(String, String)], expected: &Expected<'_>) -> Result<()> {
    let keys: Vec<&str> = line.iter().map(|(k, _)| k.as_str()).collect();
    ensure!(
        keys == [
            "peer", "id", "stream", "method", "target", "status", "bytes", "ms", "outcome",
            "reason", "via"
        ],
        "fields {keys:?}"
    );
    let value = |i: usize| line[i].1.as_str();
    ensure!(value(0).starts_with("127.0.0.1:"), "{line:?}");
    ensure!(value(7).parse::<u64>().is_ok(), "{line:?}");
    let values = [
        expected.id.to_string(),
        expected.stream.to_string(),
        expected.method.to_owned(),
        expected.target.to_owned(),
        expected.status.to_string(),
        expected.bytes.to_string(),
    ];
    ensure!(
        line[1..7].iter().map(|(_, v)| v).eq(values.iter()),
        "{line:?}"
    );
    ensure!(
        value(8) == "complete" && value(9) == expected.reason && value(10) == "request",
        "{line:?}"
    );
    Ok(())
}

#[tokio::test]
async fn one_access_line_per_request_with_the_reason_for_refusals() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = site_with_a_link_out(dir.path())?;
    let path = dir.path().join("origin.log");
    let file = std::fs::File::create(&path)?;
    let root_arg = root.to_string_lossy().into_owned();
    let origin = start_origin_with(&["--root", &root_arg], Stdio::from(file), Some("info"))?;
    tokio::time::timeout(LIMIT, async {
        let mut gw = gateway(&origin).await?;
        let index = get(&mut gw, 1, simple("GET", "/", "")).await?;
        ensure!(status(&gw, index)? == 200);
        let jquery = get(&mut gw, 2, simple("GET", "/_static/jquery.js", "")).await?;
        ensure!(status(&gw, jquery)? == 403);
        let head = get(&mut gw, 3, simple("HEAD", "/index.html", "")).await?;
        ensure!(status(&gw, head)? == 200);

        let log = log_when(&path, |log| access_lines(log).len() >= 3).await?;
        let lines = access_lines(&log);
        ensure!(lines.len() == 3, "{log}");
        let len = "<h1>docs</h1>\n".len();
        check_access_line(
            &lines[0],
            &Expected {
                id: index,
                stream: 1,
                method: "GET",
                target: "/",
                status: 200,
                bytes: len,
                reason: "-",
            },
        )?;
        let forbidden = "403 Forbidden\n".len();
        check_access_line(
            &lines[1],
            &Expected {
                id: jquery,
                stream: 2,
                method: "GET",
                target: "/_static/jquery.js",
                status: 403,
                bytes: forbidden,
                reason: "symlink-out-of-root",
            },
        )?;
        check_access_line(
            &lines[2],
            &Expected {
                id: head,
                stream: 3,
                method: "HEAD",
                target: "/index.html",
                status: 200,
                bytes: 0,
                reason: "-",
            },
        )?;
        // The refusal's sentence, at info, names where the link leads.
        let outside = std::fs::canonicalize(dir.path().join("javascript/jquery.js"))?;
        ensure!(
            log.lines()
                .any(|l| l.contains(" INFO origin::files: refused: ")
                    && l.contains(&format!("{outside:?}"))
                    && l.contains("target=/_static/jquery.js")),
            "{log}"
        );
        ensure!(!log.as_bytes().contains(&0x1b), "escape bytes: {log:?}");
        Ok(())
    })
    .await
    .context("test timed out")?
}

#[tokio::test]
async fn access_log_to_a_file_of_its_own() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let access = dir.path().join("access.log");
    let path = dir.path().join("origin.log");
    let file = std::fs::File::create(&path)?;
    let access_arg = access.to_string_lossy().into_owned();
    let origin = start_origin_with(
        &["--access-log", &access_arg],
        Stdio::from(file),
        Some("info"),
    )?;
    tokio::time::timeout(LIMIT, async {
        let mut gw = gateway(&origin).await?;
        let missing = get(&mut gw, 1, simple("GET", "/nope.html", "")).await?;
        ensure!(status(&gw, missing)? == 404);
        let text = log_when(&access, |log| !access_lines(log).is_empty()).await?;
        let lines = access_lines(&text);
        ensure!(lines.len() == 1, "{text}");
        let body = "404 Not Found\n".len();
        check_access_line(
            &lines[0],
            &Expected {
                id: missing,
                stream: 1,
                method: "GET",
                target: "/nope.html",
                status: 404,
                bytes: body,
                reason: "not-found",
            },
        )?;
        ensure!(!text.as_bytes().contains(&0x1b), "escape bytes: {text:?}");
        // The rest of the log stays on stderr, without the access lines.
        let log = log_when(&path, |log| log.contains("listening on")).await?;
        ensure!(access_lines(&log).is_empty(), "{log}");
        Ok(())
    })
    .await
    .context("test timed out")?
}

/// `method path` over a new TCP connection to `addr`: the status code and
/// the body (the connection is closed after one answer).
async fn http_get(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("{method} {path} HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8(answer)?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("no end of head in {answer:?}"))?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line in {head:?}"))?;
    Ok((code, body.to_owned()))
}

#[tokio::test]
async fn the_metrics_endpoint_counts_requests_over_associations() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let config = dir.path().join("origin.toml");
    std::fs::write(
        &config,
        format!(
            "[files]\nroot = {:?}\n\n[metrics]\nlisten = \"{metrics}\"\n",
            workspace().join("config/demo-site")
        ),
    )?;
    let origin = start_origin_config(&config, &[], Stdio::inherit(), None)?;
    tokio::time::timeout(LIMIT, async {
        let mut gw = gateway(&origin).await?;
        let index = get(&mut gw, 1, simple("GET", "/", "")).await?;
        ensure!(status(&gw, index)? == 200);
        let length = gw.seen[&index].body.len();

        // The driver counts as it goes; the scrape may still race the count.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let text = loop {
            let (code, text) = http_get(metrics, "GET", "/metrics").await?;
            ensure!(code == 200, "/metrics answered {code}: {text}");
            if text.contains("origin_requests_total 1\n")
                && text.contains("origin_responses_completed_total 1\n")
            {
                break text;
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the request was never counted:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        for line in [
            "origin_associations_open 1\n".to_owned(),
            "origin_associations_total 1\n".to_owned(),
            "origin_responses_cancelled_total 0\n".to_owned(),
            "origin_responses_reset_total 0\n".to_owned(),
            format!("origin_body_bytes_total {length}\n"),
            // The head, the body in 16 KiB chunks (limits.chunk_size), the end;
            // counted before the response is, so final by now.
            format!(
                "origin_scheduler_chunks_total{{policy=\"scf\"}} {}\n",
                2 + length.div_ceil(16384)
            ),
            "origin_scheduler_holds_total{policy=\"scf\",reason=\"transport\"} 0\n".to_owned(),
        ] {
            ensure!(text.contains(&line), "{line:?} missing from\n{text}");
        }
        ensure!(text.ends_with("# EOF\n"), "not OpenMetrics:\n{text}");

        ensure!(http_get(metrics, "GET", "/").await?.0 == 404);
        ensure!(http_get(metrics, "POST", "/metrics").await?.0 == 405);
        Ok(())
    })
    .await?
}
