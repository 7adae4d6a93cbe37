//! Headless Chromium started inside a namespace and driven over the DevTools
//! protocol on a pipe (`--remote-debugging-pipe`: commands on the child's fd 3,
//! answers and events on its fd 4, each message JSON ending in a NUL byte), so no
//! port, no websocket and no discovery are involved.
//!
//! [`Browser::launch_in`] starts it, [`Browser::new_page`] opens a tab, and
//! [`Page::load`] navigates and returns what the page load did: every request with
//! its status or error, the load event's time, and the navigation timing entry
//! that page-load benchmarks report. Every wait is bounded; the browser (its whole
//! process group) is killed on drop and its fresh profile removed.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead as _, BufReader, PipeReader, PipeWriter, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::error::{Result, TestbedError, io};
use crate::netns::exec_in;
use crate::process::NsProcess;

/// The Chromium program (Debian's `chromium` package).
pub const CHROMIUM: &str = "chromium";

/// Flags every launch uses: headless as root in a container, and nothing that
/// talks to the network on its own (so the only traffic is the page's). No proxy,
/// and no automatic upgrade of `http://` navigations to HTTPS: the point is what
/// happens to plain HTTP.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,MediaRouter",
    "--no-proxy-server",
    "--hide-scrollbars",
    "--mute-audio",
];

/// How Chromium is started.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// Window (and so screenshot) size in CSS pixels.
    pub window_size: (u32, u32),
    /// More command-line flags.
    pub extra_args: Vec<String>,
    /// Where Chromium's stdout and stderr go; inside the (removed) profile by
    /// default.
    pub log: Option<PathBuf>,
    /// How long Chromium gets to answer its first command.
    pub start_timeout: Duration,
    /// How long any single command may take.
    pub command_timeout: Duration,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        Self {
            window_size: (1280, 800),
            extra_args: Vec::new(),
            log: None,
            start_timeout: Duration::from_secs(30),
            command_timeout: Duration::from_secs(15),
        }
    }
}

/// A running headless Chromium; killed on drop.
#[derive(Debug)]
pub struct Browser {
    devtools: DevTools,
    // Field order is drop order: the process dies before its profile is removed.
    process: NsProcess,
    _profile: tempfile::TempDir,
    version: String,
}

impl Browser {
    /// Starts Chromium in namespace `ns` with the default [`BrowserConfig`].
    pub fn launch_in(ns: &str) -> Result<Self> {
        Self::launch(ns, &BrowserConfig::default())
    }

    /// Starts Chromium in namespace `ns` with a fresh profile and waits until it
    /// answers on the DevTools pipe.
    pub fn launch(ns: &str, config: &BrowserConfig) -> Result<Self> {
        let profile = tempfile::Builder::new()
            .prefix("testbed-chromium-")
            .tempdir()
            .map_err(io("creating a Chromium profile directory"))?;
        let log = config
            .log
            .clone()
            .unwrap_or_else(|| profile.path().join("chromium.log"));

        let (child_in_pipe, to_browser) = std::io::pipe().map_err(io("creating a pipe"))?;
        let (from_browser, child_out_pipe) = std::io::pipe().map_err(io("creating a pipe"))?;
        // Above 4, so that putting one on fd 3 cannot overwrite the other.
        let child_in = dup_above(child_in_pipe.as_raw_fd(), 10)?;
        let child_out = dup_above(child_out_pipe.as_raw_fd(), 10)?;
        drop((child_in_pipe, child_out_pipe));

        let (width, height) = config.window_size;
        let mut chromium = Command::new(CHROMIUM);
        chromium
            .args(CHROMIUM_FLAGS)
            .arg("--remote-debugging-pipe")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--window-size={width},{height}"))
            .args(&config.extra_args)
            .arg("about:blank");
        let mut command = exec_in(ns, &chromium);
        let (in_fd, out_fd) = (child_in.as_raw_fd(), child_out.as_raw_fd());
        // SAFETY: the hook only calls dup2, which is async-signal-safe, on file
        // descriptors that stay open in the parent until after the spawn.
        unsafe {
            command.pre_exec(move || {
                for (from, to) in [(in_fd, 3), (out_fd, 4)] {
                    if libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let process = NsProcess::spawn_wrapped("chromium", command, &log)?;
        // The child has its copies; ours would keep the pipes open after it dies.
        drop((child_in, child_out));

        let mut devtools = DevTools::new(to_browser, from_browser, &log);
        devtools.command_timeout = config.command_timeout;
        let version = devtools.call_until(
            None,
            "Browser.getVersion",
            json!({}),
            Instant::now() + config.start_timeout,
        )?;
        Ok(Browser {
            devtools,
            process,
            _profile: profile,
            version: version["product"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// Chromium's product string, `Chrome/...`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The Chromium process (pid, log).
    pub fn process(&mut self) -> &mut NsProcess {
        &mut self.process
    }

    /// Opens a new tab on `about:blank`.
    pub fn new_page(&mut self) -> Result<Page<'_>> {
        let target =
            self.devtools
                .call(None, "Target.createTarget", json!({ "url": "about:blank" }))?;
        let target_id = string_field(&target, "targetId")?;
        let attached = self.devtools.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        )?;
        let session = string_field(&attached, "sessionId")?;
        for method in ["Page.enable", "Network.enable"] {
            self.devtools.call(Some(&session), method, json!({}))?;
        }
        Ok(Page {
            browser: self,
            session,
        })
    }
}

/// A tab, attached through a flat DevTools session.
#[derive(Debug)]
pub struct Page<'b> {
    browser: &'b mut Browser,
    session: String,
}

/// What one page load did.
#[derive(Debug, Clone)]
pub struct PageLoad {
    /// The URL navigated to.
    pub url: String,
    /// When the load event fired, in ms since navigation start (the navigation
    /// timing entry's `loadEventStart`).
    pub load_event_ms: f64,
    /// Wall time from sending the navigation to the load event, as seen here.
    pub wall: Duration,
    /// The navigation timing entry.
    pub timing: NavigationTiming,
    /// What the user saw, and when: first and largest contentful paint.
    pub paint: PaintTiming,
    /// Every request the page made, the document first, in the order they started.
    pub requests: Vec<RequestRecord>,
    /// The resource timing entries of the subresources, in the order they started.
    pub resources: Vec<ResourceTiming>,
}

impl PageLoad {
    /// Requests that failed, answered with a status of 400 or more, or had not
    /// finished by the end of the load.
    pub fn failures(&self) -> Vec<&RequestRecord> {
        self.requests
            .iter()
            .filter(|r| r.failed || !r.finished || r.status.is_none_or(|s| s >= 400))
            .collect()
    }
}

/// One request of a page load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestRecord {
    /// The URL.
    pub url: String,
    /// The response status, if a response arrived.
    pub status: Option<u16>,
    /// The response's MIME type, if a response arrived.
    pub mime_type: Option<String>,
    /// Whether loading failed (connection error, reset, cancelled, blocked).
    pub failed: bool,
    /// Chromium's reason when it failed (`net::ERR_...`).
    pub error_text: Option<String>,
    /// Whether it finished, successfully or not.
    pub finished: bool,
    /// Bytes received on the wire (headers and body, as encoded), when finished.
    pub encoded_bytes: Option<u64>,
}

/// The document's `PerformanceNavigationTiming`, in ms since navigation start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NavigationTiming {
    /// Connection established (TCP handshake done).
    pub connect_end: f64,
    /// Request sent.
    pub request_start: f64,
    /// First byte of the response (time to first byte).
    pub response_start: f64,
    /// Last byte of the document.
    pub response_end: f64,
    /// The document was parsed.
    pub dom_interactive: f64,
    /// `DOMContentLoaded` handlers done.
    pub dom_content_loaded_event_end: f64,
    /// The load event fired: every subresource is in.
    pub load_event_start: f64,
    /// Load event handlers done.
    pub load_event_end: f64,
    /// Bytes of the document on the wire, headers included.
    pub transfer_size: u64,
    /// Resource timing entries (subresources loaded).
    pub resource_count: u64,
    /// The document's protocol (`http/1.1`, `h2`, ...).
    pub next_hop_protocol: String,
}

impl NavigationTiming {
    fn from_json(v: &Value) -> Self {
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        Self {
            connect_end: f("connectEnd"),
            request_start: f("requestStart"),
            response_start: f("responseStart"),
            response_end: f("responseEnd"),
            dom_interactive: f("domInteractive"),
            dom_content_loaded_event_end: f("domContentLoadedEventEnd"),
            load_event_start: f("loadEventStart"),
            load_event_end: f("loadEventEnd"),
            transfer_size: v["transferSize"].as_u64().unwrap_or(0),
            resource_count: v["resourceCount"].as_u64().unwrap_or(0),
            next_hop_protocol: v["nextHopProtocol"].as_str().unwrap_or_default().to_owned(),
        }
    }
}

/// The paint entries of a load, in ms since navigation start: what people
/// look at, where `loadEventEnd` only says when the last byte of every
/// subresource was in. `None` when the page painted nothing of the kind
/// (an empty page) or the browser does not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PaintTiming {
    /// First contentful paint: the first text or image on screen (the
    /// `paint` entry `first-contentful-paint`).
    pub first_contentful_paint: Option<f64>,
    /// Largest contentful paint: when the largest text block or image in the
    /// viewport was painted, its last candidate by the end of the load (the
    /// `largest-contentful-paint` entries, read through a
    /// `PerformanceObserver` with `buffered`, as web-vitals reads them).
    pub largest_contentful_paint: Option<f64>,
}

impl PaintTiming {
    fn from_json(v: &Value) -> Self {
        Self {
            first_contentful_paint: v["fcp"].as_f64(),
            largest_contentful_paint: v["lcp"].as_f64(),
        }
    }
}

/// One `PerformanceResourceTiming` entry, times in ms since navigation start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceTiming {
    /// The URL.
    pub name: String,
    /// What started the fetch (`link`, `script`, `img`, `css`, ...).
    pub initiator_type: String,
    /// Fetch start.
    pub start_time: f64,
    /// First byte of the response.
    pub response_start: f64,
    /// Last byte of the response.
    pub response_end: f64,
    /// Bytes on the wire, headers included (0 when served from Chromium's cache).
    pub transfer_size: u64,
    /// `http/1.1`, `h2`, ...
    pub next_hop_protocol: String,
}

impl ResourceTiming {
    fn from_json(v: &Value) -> Self {
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        Self {
            name: s("name"),
            initiator_type: s("initiatorType"),
            start_time: f("startTime"),
            response_start: f("responseStart"),
            response_end: f("responseEnd"),
            transfer_size: v["transferSize"].as_u64().unwrap_or(0),
            next_hop_protocol: s("nextHopProtocol"),
        }
    }
}

/// Resource timing entries as JSON (the default buffer of 250 entries holds any
/// page of the benchmark corpus).
const RESOURCE_ENTRIES_JS: &str = "performance.getEntriesByType('resource').map(e => e.toJSON())";

/// First and largest contentful paint, through `PerformanceObserver`s with
/// `buffered` (the entries already recorded come at once, as web-vitals
/// reads them; LCP entries are given to observers only). Just after the load
/// event the first paint may not be in the timeline yet, so this waits until
/// both are known, or 3 s for a page that paints neither.
const PAINT_JS: &str = "new Promise(resolve => { \
    let fcp = null, lcp = null; \
    const done = () => resolve({ fcp, lcp }); \
    const check = () => { if (fcp !== null && lcp !== null) done(); }; \
    new PerformanceObserver(list => { \
      for (const e of list.getEntries()) if (e.name === 'first-contentful-paint') fcp = e.startTime; \
      check(); }).observe({ type: 'paint', buffered: true }); \
    new PerformanceObserver(list => { \
      const e = list.getEntries(); if (e.length) lcp = e[e.length - 1].startTime; \
      check(); }).observe({ type: 'largest-contentful-paint', buffered: true }); \
    setTimeout(done, 3000); })";

const NAVIGATION_ENTRY_JS: &str = "(() => { \
    const n = performance.getEntriesByType('navigation')[0]; \
    return n ? Object.assign(n.toJSON(), \
      { resourceCount: performance.getEntriesByType('resource').length }) : null; })()";

impl Page<'_> {
    /// Navigates to `url` and waits for the load event, then (within what is left
    /// of `timeout`) for requests still in flight. Fails if the navigation itself
    /// fails or the load event does not come within `timeout`; failed
    /// subresources are reported in [`PageLoad::requests`], not as errors.
    pub fn load(&mut self, url: &str, timeout: Duration) -> Result<PageLoad> {
        let deadline = Instant::now() + timeout;
        let devtools = &mut self.browser.devtools;
        devtools.events.clear();
        let started = Instant::now();
        let navigated = devtools.call_until(
            Some(&self.session),
            "Page.navigate",
            json!({ "url": url }),
            deadline,
        )?;
        if let Some(reason) = navigated["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(TestbedError::Navigation {
                url: url.to_owned(),
                reason: reason.to_owned(),
            });
        }
        let mut requests = RequestLog::default();
        let wall = loop {
            let Some(event) = devtools.next_event(deadline)? else {
                return Err(TestbedError::Timeout {
                    what: format!("the load event of {url}"),
                    after: timeout,
                });
            };
            if event["sessionId"].as_str() != Some(self.session.as_str()) {
                continue;
            }
            if event["method"] == "Page.loadEventFired" {
                break started.elapsed();
            }
            requests.record(&event);
        };
        while !requests.all_finished() {
            match devtools.next_event(deadline)? {
                Some(event) if event["sessionId"].as_str() == Some(self.session.as_str()) => {
                    requests.record(&event);
                }
                Some(_) => {}
                None => break,
            }
        }
        // loadEventEnd is set once the load handlers have run, just after the event.
        let mut timing = NavigationTiming::default();
        while Instant::now() < deadline {
            let entry = self.evaluate(NAVIGATION_ENTRY_JS)?;
            timing = NavigationTiming::from_json(&entry);
            if timing.load_event_end > 0.0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let resources = match self.evaluate(RESOURCE_ENTRIES_JS)? {
            Value::Array(entries) => entries.iter().map(ResourceTiming::from_json).collect(),
            _ => Vec::new(),
        };
        let paint = PaintTiming::from_json(&self.evaluate(PAINT_JS)?);
        Ok(PageLoad {
            url: url.to_owned(),
            load_event_ms: timing.load_event_start,
            wall,
            timing,
            paint,
            requests: requests.records,
            resources,
        })
    }

    /// Evaluates `expression` in the page (promises are awaited) and returns its
    /// value as JSON (`null` for `undefined`). A thrown exception is an error.
    pub fn evaluate(&mut self, expression: &str) -> Result<Value> {
        let answer = self.browser.devtools.call(
            Some(&self.session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(exception) = answer.get("exceptionDetails") {
            let text = exception["exception"]["description"]
                .as_str()
                .or(exception["text"].as_str())
                .unwrap_or("exception");
            return Err(TestbedError::DevTools(format!(
                "evaluating `{expression}` threw: {text}"
            )));
        }
        Ok(answer["result"]["value"].clone())
    }

    /// Saves a PNG of the viewport to `path` (parent directories created).
    pub fn screenshot(&mut self, path: &Path) -> Result<()> {
        let shot = self.browser.devtools.call(
            Some(&self.session),
            "Page.captureScreenshot",
            json!({ "format": "png" }),
        )?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(string_field(&shot, "data")?)
            .map_err(|e| TestbedError::DevTools(format!("screenshot is not base64: {e}")))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        }
        std::fs::write(path, png).map_err(io(format!("writing {}", path.display())))
    }

    /// Turns Chromium's HTTP cache off (or on again) for this tab, so that
    /// repeated loads measure the network, not the disk cache.
    pub fn set_cache_disabled(&mut self, disabled: bool) -> Result<()> {
        self.browser.devtools.call(
            Some(&self.session),
            "Network.setCacheDisabled",
            json!({ "cacheDisabled": disabled }),
        )?;
        Ok(())
    }
}

/// Requests of one load, keyed by DevTools request id.
#[derive(Debug, Default)]
struct RequestLog {
    records: Vec<RequestRecord>,
    by_id: HashMap<String, usize>,
}

impl RequestLog {
    fn record(&mut self, event: &Value) {
        let params = &event["params"];
        let Some(id) = params["requestId"].as_str() else {
            return;
        };
        match event["method"].as_str().unwrap_or_default() {
            "Network.requestWillBeSent" => {
                // A redirect reuses the id: the earlier hop ends with its 3xx.
                if let Some(&i) = self.by_id.get(id) {
                    let hop = &mut self.records[i];
                    hop.status = params["redirectResponse"]["status"]
                        .as_u64()
                        .map(|s| s as u16);
                    hop.finished = true;
                }
                self.by_id.insert(id.to_owned(), self.records.len());
                self.records.push(RequestRecord {
                    url: params["request"]["url"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    ..RequestRecord::default()
                });
            }
            "Network.responseReceived" => {
                if let Some(r) = self.get(id) {
                    r.status = params["response"]["status"].as_u64().map(|s| s as u16);
                    r.mime_type = params["response"]["mimeType"].as_str().map(str::to_owned);
                }
            }
            "Network.loadingFinished" => {
                if let Some(r) = self.get(id) {
                    r.finished = true;
                    r.encoded_bytes = params["encodedDataLength"].as_f64().map(|b| b as u64);
                }
            }
            "Network.loadingFailed" => {
                if let Some(r) = self.get(id) {
                    r.finished = true;
                    r.failed = true;
                    r.error_text = params["errorText"].as_str().map(str::to_owned);
                }
            }
            _ => {}
        }
    }

    fn get(&mut self, id: &str) -> Option<&mut RequestRecord> {
        self.by_id.get(id).map(|&i| &mut self.records[i])
    }

    fn all_finished(&self) -> bool {
        self.records.iter().all(|r| r.finished)
    }
}

/// The DevTools connection: commands out, answers and events in (read by a
/// thread, handed over a channel so every wait can be bounded).
#[derive(Debug)]
struct DevTools {
    to_browser: PipeWriter,
    from_browser: Receiver<Value>,
    next_id: u64,
    /// Events that arrived while waiting for an answer, oldest first.
    events: VecDeque<Value>,
    command_timeout: Duration,
    log: PathBuf,
}

impl DevTools {
    fn new(to_browser: PipeWriter, from_browser: PipeReader, log: &Path) -> Self {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(from_browser);
            let mut message = Vec::new();
            loop {
                message.clear();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if message.last() == Some(&0) {
                    message.pop();
                }
                // Chromium sends only JSON; anything else cannot be acted on.
                let Ok(value) = serde_json::from_slice::<Value>(&message) else {
                    continue;
                };
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Self {
            to_browser,
            from_browser: rx,
            next_id: 1,
            events: VecDeque::new(),
            command_timeout: BrowserConfig::default().command_timeout,
            log: log.to_owned(),
        }
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        let deadline = Instant::now() + self.command_timeout;
        self.call_until(session, method, params, deadline)
    }

    /// Sends a command and waits for its answer until `deadline`, keeping the
    /// events that arrive meanwhile.
    fn call_until(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .map_err(|e| self.gone(&format!("sending {method}: {e}")))?;
        loop {
            let message = match self.recv(deadline) {
                Ok(message) => message,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(TestbedError::Timeout {
                        what: format!("Chromium's answer to {method}"),
                        after: deadline.saturating_duration_since(Instant::now()),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.gone(&format!("waiting for the answer to {method}")));
                }
            };
            if message["id"].as_u64() != Some(id) {
                if message.get("method").is_some() {
                    self.events.push_back(message);
                }
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(TestbedError::DevTools(format!("{method} failed: {error}")));
            }
            return Ok(message["result"].clone());
        }
    }

    /// The next event, or `None` once `deadline` has passed.
    fn next_event(&mut self, deadline: Instant) -> Result<Option<Value>> {
        if let Some(event) = self.events.pop_front() {
            return Ok(Some(event));
        }
        loop {
            match self.recv(deadline) {
                Ok(message) if message.get("method").is_some() => return Ok(Some(message)),
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.gone("waiting for events"));
                }
            }
        }
    }

    fn recv(&self, deadline: Instant) -> Result<Value, RecvTimeoutError> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.from_browser.recv_timeout(left)
    }

    fn gone(&self, doing: &str) -> TestbedError {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        TestbedError::DevTools(format!(
            "Chromium closed its DevTools pipe ({doing}); end of {}:\n{}",
            self.log.display(),
            tail.join("\n")
        ))
    }
}

fn string_field(value: &Value, key: &str) -> Result<String> {
    value[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| TestbedError::DevTools(format!("answer without `{key}`: {value}")))
}

/// A close-on-exec duplicate of `fd` numbered `min` or above.
fn dup_above(fd: RawFd, min: RawFd) -> Result<OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an open descriptor has no memory-safety
    // preconditions; on success it returns a new descriptor that we own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(TestbedError::Io {
            context: "duplicating a pipe descriptor".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: `new` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_log_follows_redirects_and_failures() {
        let mut log = RequestLog::default();
        let event = |method: &str, params: Value| json!({ "method": method, "params": params });
        log.record(&event(
            "Network.requestWillBeSent",
            json!({ "requestId": "1", "request": { "url": "http://a/" } }),
        ));
        log.record(&event(
            "Network.requestWillBeSent",
            json!({ "requestId": "1", "request": { "url": "http://a/b" },
                    "redirectResponse": { "status": 301 } }),
        ));
        log.record(&event(
            "Network.responseReceived",
            json!({ "requestId": "1", "response": { "status": 200, "mimeType": "text/html" } }),
        ));
        log.record(&event(
            "Network.loadingFinished",
            json!({ "requestId": "1", "encodedDataLength": 123.0 }),
        ));
        log.record(&event(
            "Network.requestWillBeSent",
            json!({ "requestId": "2", "request": { "url": "http://a/x.svg" } }),
        ));
        assert!(!log.all_finished());
        log.record(&event(
            "Network.loadingFailed",
            json!({ "requestId": "2", "errorText": "net::ERR_CONNECTION_RESET" }),
        ));
        assert!(log.all_finished());
        assert_eq!(log.records.len(), 3);
        assert_eq!(log.records[0].status, Some(301));
        assert_eq!(log.records[1].url, "http://a/b");
        assert_eq!(log.records[1].status, Some(200));
        assert_eq!(log.records[1].encoded_bytes, Some(123));
        assert!(log.records[2].failed);
        let load = PageLoad {
            url: "http://a/".into(),
            load_event_ms: 0.0,
            wall: Duration::ZERO,
            timing: NavigationTiming::default(),
            paint: PaintTiming::default(),
            requests: log.records,
            resources: Vec::new(),
        };
        let failures: Vec<&str> = load.failures().iter().map(|r| r.url.as_str()).collect();
        assert_eq!(failures, ["http://a/x.svg"]);
    }

    #[test]
    fn resource_timing_entries_parse_and_missing_fields_are_zero() {
        let entry = ResourceTiming::from_json(&json!({
            "name": "http://a/s.css", "initiatorType": "link", "startTime": 12.5,
            "responseStart": 90.25, "responseEnd": 101.0, "transferSize": 2048,
            "nextHopProtocol": "h2"
        }));
        assert_eq!(entry.name, "http://a/s.css");
        assert_eq!(entry.initiator_type, "link");
        assert_eq!(
            (entry.start_time, entry.response_start, entry.response_end),
            (12.5, 90.25, 101.0)
        );
        assert_eq!(entry.transfer_size, 2048);
        assert_eq!(entry.next_hop_protocol, "h2");
        assert_eq!(
            ResourceTiming::from_json(&json!({ "name": "x" })),
            ResourceTiming {
                name: "x".into(),
                ..ResourceTiming::default()
            }
        );
    }
}
