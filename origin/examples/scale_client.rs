//! The client side of `cargo xtask bench origin-scale`: many gateways' worth
//! of associations against one real origin (the `origin` binary serving the
//! demo site), each from its own UDP port, speaking the real protocol.
//!
//! - `--role idle --associations N`: opens N associations (each with its
//!   HELLO exchange), prints `{"opened":..}` and holds them, doing nothing but
//!   what the transport does by itself (heartbeats). On the line `check` on
//!   stdin, every association asks once for a small file and the count of
//!   answers is printed (`{"answered":..}`): they were all still open. Stdin
//!   closed ends the process.
//! - `--role load --associations K`: opens K associations, prints
//!   `{"opened":..}`, waits `--idle-first` seconds (printing `{"loading":..}`
//!   when it ends), then each association loads the page under `--site`
//!   (its HTML, then every `href`/`src` it names at once, as a browser over
//!   one multiplexed connection would) every `--page-interval-ms`, for
//!   `--seconds`. Each request's time from send to its RESPONSE_END is
//!   recorded; one JSON line with the counts and percentiles ends the run.
//!
//! - `--role bulk --associations K --path P`: `cargo xtask bench
//!   init-flood`'s established associations. Each downloads `P` again and
//!   again, one request at a time, for `--seconds`; the body bytes of all
//!   are counted per second since `{"loading":..}`, printed as `"bins"`.
//!
//! Everything is bounded: each connect by the transport's time-out, each
//! response by [`RESPONSE_TIMEOUT`], the whole run by [`MAX_RUN`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway_protocol::{
    Message, Request, RequestClass, RequestId, Session, SessionConfig, Urgency,
};
use gateway_transport::hello::open_gateway_session;
use gateway_transport::{Association, AssociationConfig, BackendKind, connect};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::Semaphore;

/// Hard cap on a run, whatever the flags say.
const MAX_RUN: Duration = Duration::from_secs(900);
/// A response not complete within this long fails its page.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once while opening.
const OPENING: usize = 64;
/// Socket buffers of an idle association: it never carries more than a
/// heartbeat and one small response.
const IDLE_SOCKET_BUFFER: usize = 64 * 1024;
/// The small file each idle association asks for on `check`.
const CHECK_PATH: &str = "/assets/tile-01.svg";

#[derive(Debug)]
struct Args {
    role: String,
    addr: SocketAddr,
    associations: usize,
    seconds: f64,
    idle_first: f64,
    page_interval: Duration,
    site: PathBuf,
    path: String,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        role: "load".into(),
        addr: "127.0.0.1:9899".parse()?,
        associations: 1,
        seconds: 30.0,
        idle_first: 0.0,
        page_interval: Duration::from_millis(2000),
        site: "config/demo-site".into(),
        path: "/bulk.bin".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--role" => args.role = value()?,
            "--addr" => args.addr = value()?.parse()?,
            "--associations" => args.associations = value()?.parse()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--idle-first" => args.idle_first = value()?.parse()?,
            "--page-interval-ms" => {
                args.page_interval = Duration::from_millis(value()?.parse()?);
            }
            "--site" => args.site = value()?.into(),
            "--path" => args.path = value()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if !matches!(args.role.as_str(), "idle" | "load" | "bulk") {
        bail!("--role is idle, load or bulk, not {}", args.role);
    }
    Ok(args)
}

/// One association with its protocol session.
struct Peer {
    assoc: Association,
    session: Session,
    next_id: RequestId,
}

impl Peer {
    async fn open(addr: SocketAddr, config: &AssociationConfig) -> Result<Self> {
        let assoc = connect(BackendKind::Userspace, addr, config).await?;
        let session = tokio::time::timeout(
            RESPONSE_TIMEOUT,
            open_gateway_session(&assoc, SessionConfig::default().capabilities),
        )
        .await
        .context("no HELLO from the origin")??;
        Ok(Self {
            assoc,
            session,
            next_id: 1,
        })
    }

    /// Sends a GET for each of `paths` at once, each on its own stream in
    /// turn; returns the ids with their send times.
    async fn send(&mut self, paths: &[String]) -> Result<HashMap<RequestId, Instant>> {
        let streams = u32::from(self.session.data_streams());
        let mut sent = HashMap::with_capacity(paths.len());
        for path in paths {
            let id = self.next_id;
            self.next_id += 1;
            let stream = 1 + ((id - 1) % streams) as u16;
            self.session
                .handle_request_sent(id, stream)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            let request = Message::Request(Request {
                id,
                urgency: Urgency::DEFAULT,
                class: RequestClass::Demand,
                end: true,
                head: Bytes::from(format!("GET {path} HTTP/1.1\r\nhost: demo\r\n\r\n")),
            });
            sent.insert(id, Instant::now());
            self.assoc.send(stream, request.to_bytes()).await?;
        }
        Ok(sent)
    }

    /// Reads responses until every request of `sent` has ended; pushes each
    /// one's seconds from send to end onto `times`. A status other than 200,
    /// a reset or [`RESPONSE_TIMEOUT`] without a message fails.
    async fn finish(
        &mut self,
        mut sent: HashMap<RequestId, Instant>,
        times: &mut Vec<f64>,
    ) -> Result<()> {
        while !sent.is_empty() {
            let m = tokio::time::timeout(RESPONSE_TIMEOUT, self.assoc.recv())
                .await
                .context("no response within the time-out")??;
            match self.session.handle_message(m.stream, &m.data) {
                Ok(Message::ResponseHead { head, .. }) => {
                    if !head.starts_with(b"HTTP/1.1 200") {
                        bail!(
                            "status {:?}",
                            String::from_utf8_lossy(&head[..head.len().min(12)])
                        );
                    }
                }
                Ok(Message::ResponseEnd { id, .. }) => {
                    if let Some(at) = sent.remove(&id) {
                        times.push(at.elapsed().as_secs_f64());
                    }
                }
                Ok(Message::Reset { id, code, .. }) => bail!("request {id} reset: {code:?}"),
                Ok(_) => {}
                Err(reaction) => bail!("session refused a message: {reaction:?}"),
            }
        }
        Ok(())
    }
}

/// Opens `count` associations, [`OPENING`] at a time; returns those opened
/// and the first failure's text.
async fn open_all(
    addr: SocketAddr,
    config: &AssociationConfig,
    count: usize,
) -> (Vec<Peer>, usize, Option<String>) {
    let gate = Arc::new(Semaphore::new(OPENING));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        let gate = Arc::clone(&gate);
        let config = config.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            Peer::open(addr, &config).await
        });
    }
    let (mut peers, mut failed, mut first_error) = (Vec::with_capacity(count), 0, None);
    while let Some(outcome) = tasks.join_next().await {
        match outcome {
            Ok(Ok(peer)) => peers.push(peer),
            Ok(Err(e)) => {
                failed += 1;
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| format!("task: {e}"));
            }
        }
    }
    (peers, failed, first_error)
}

fn json_error(error: Option<&String>) -> String {
    error.map_or_else(|| "null".to_owned(), |e| format!("{e:?}"))
}

/// `--role idle`.
async fn idle(args: &Args) -> Result<()> {
    let config = AssociationConfig {
        recv_buffer: Some(IDLE_SOCKET_BUFFER),
        send_buffer: Some(IDLE_SOCKET_BUFFER),
        ..AssociationConfig::default()
    };
    let started = Instant::now();
    let (peers, failed, first_error) = open_all(args.addr, &config, args.associations).await;
    println!(
        "{{\"opened\":{},\"failed\":{failed},\"seconds\":{:.2},\"first_error\":{}}}",
        peers.len(),
        started.elapsed().as_secs_f64(),
        json_error(first_error.as_ref())
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut peers = Some(peers);
    while let Some(line) = lines.next_line().await? {
        if line.trim() != "check" {
            continue;
        }
        let Some(held) = peers.take() else { continue };
        let started = Instant::now();
        let gate = Arc::new(Semaphore::new(OPENING * 4));
        let mut tasks = tokio::task::JoinSet::new();
        for mut peer in held {
            let gate = Arc::clone(&gate);
            tasks.spawn(async move {
                let _permit = gate.acquire_owned().await;
                let mut times = Vec::new();
                let outcome = match peer.send(&[CHECK_PATH.to_owned()]).await {
                    Ok(sent) => peer.finish(sent, &mut times).await,
                    Err(e) => Err(e),
                };
                (peer, outcome)
            });
        }
        let (mut answered, mut failed, mut first_error) = (0, 0, None);
        let mut kept = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((peer, Ok(()))) => {
                    answered += 1;
                    kept.push(peer);
                }
                Ok((peer, Err(e))) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| format!("{e:#}"));
                    kept.push(peer);
                }
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| format!("task: {e}"));
                }
            }
        }
        println!(
            "{{\"answered\":{answered},\"failed\":{failed},\"seconds\":{:.2},\"first_error\":{}}}",
            started.elapsed().as_secs_f64(),
            json_error(first_error.as_ref())
        );
        peers = Some(kept);
    }
    // Stdin closed: leave at once (the origin learns it from the ICMP port
    // unreachable answering its next heartbeat, or from its time-out).
    Ok(())
}

/// The page under `site`: its index, then every `href="..."` and `src="..."`
/// the index names (relative paths, as the demo site has).
fn page(site: &std::path::Path) -> Result<Vec<String>> {
    let html = std::fs::read_to_string(site.join("index.html"))
        .with_context(|| format!("reading {}/index.html", site.display()))?;
    let mut paths = vec!["/".to_owned()];
    for marker in ["href=\"", "src=\""] {
        let mut rest = html.as_str();
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let Some(end) = rest.find('"') else { break };
            let link = &rest[..end];
            if !link.contains(':') && !link.starts_with('#') && !link.is_empty() {
                let path = format!("/{}", link.trim_start_matches('/'));
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            rest = &rest[end..];
        }
    }
    Ok(paths)
}

/// What one loading association measured.
#[derive(Default)]
struct Loaded {
    times: Vec<f64>,
    pages: usize,
    failed_pages: usize,
    first_error: Option<String>,
}

/// One association loading `paths` every `interval` from `start` (its own
/// phase within the interval) until `end`.
async fn load_one(
    mut peer: Peer,
    paths: Arc<Vec<String>>,
    start: tokio::time::Instant,
    interval: Duration,
    end: tokio::time::Instant,
) -> Loaded {
    let mut loaded = Loaded::default();
    let mut next = start;
    while next < end {
        tokio::time::sleep_until(next).await;
        next += interval;
        let outcome = async {
            let sent = peer.send(&paths[..1]).await?;
            peer.finish(sent, &mut loaded.times).await?;
            let sent = peer.send(&paths[1..]).await?;
            peer.finish(sent, &mut loaded.times).await
        }
        .await;
        match outcome {
            Ok(()) => loaded.pages += 1,
            Err(e) => {
                loaded.failed_pages += 1;
                loaded.first_error.get_or_insert_with(|| format!("{e:#}"));
                // The association's state is unknown after a failure.
                break;
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), peer.assoc.close()).await;
    loaded
}

/// The `q` quantile of sorted `times`, nearest rank.
fn quantile(times: &[f64], q: f64) -> f64 {
    if times.is_empty() {
        return 0.0;
    }
    let rank = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len());
    times[rank - 1]
}

/// `--role load`.
async fn load(args: &Args) -> Result<()> {
    let paths = Arc::new(page(&args.site)?);
    let config = AssociationConfig::default();
    let (peers, failed, first_error) = open_all(args.addr, &config, args.associations).await;
    println!(
        "{{\"opened\":{},\"failed\":{failed},\"first_error\":{}}}",
        peers.len(),
        json_error(first_error.as_ref())
    );
    if peers.is_empty() {
        bail!("no association opened");
    }
    tokio::time::sleep(Duration::from_secs_f64(args.idle_first)).await;
    println!("{{\"loading\":{}}}", peers.len());
    let begin = tokio::time::Instant::now();
    let end = begin + Duration::from_secs_f64(args.seconds);
    let count = peers.len();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, peer) in peers.into_iter().enumerate() {
        // Spread the associations' page loads evenly over the interval.
        let phase = args.page_interval.mul_f64(i as f64 / count as f64);
        tasks.spawn(load_one(
            peer,
            Arc::clone(&paths),
            begin + phase,
            args.page_interval,
            end,
        ));
    }
    let mut all = Loaded::default();
    while let Some(done) = tasks.join_next().await {
        let loaded = done.context("a loading task failed")?;
        all.times.extend(loaded.times);
        all.pages += loaded.pages;
        all.failed_pages += loaded.failed_pages;
        if all.first_error.is_none() {
            all.first_error = loaded.first_error;
        }
    }
    let elapsed = begin.elapsed().as_secs_f64();
    all.times.sort_by(f64::total_cmp);
    let ms = |q: f64| quantile(&all.times, q) * 1e3;
    let mean = all.times.iter().sum::<f64>() / all.times.len().max(1) as f64 * 1e3;
    println!(
        "{{\"associations\":{count},\"objects_per_page\":{},\"pages\":{},\"failed_pages\":{},\"requests\":{},\"seconds\":{elapsed:.2},\"mean_ms\":{mean:.3},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\"first_error\":{}}}",
        paths.len(),
        all.pages,
        all.failed_pages,
        all.times.len(),
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(1.0),
        json_error(all.first_error.as_ref())
    );
    Ok(())
}

/// `--role bulk`.
async fn bulk(args: &Args) -> Result<()> {
    let (peers, failed, first_error) =
        open_all(args.addr, &AssociationConfig::default(), args.associations).await;
    println!(
        "{{\"opened\":{},\"failed\":{failed},\"first_error\":{}}}",
        peers.len(),
        json_error(first_error.as_ref())
    );
    if peers.is_empty() {
        bail!("no association opened");
    }
    println!("{{\"loading\":{}}}", peers.len());
    let begin = Instant::now();
    let seconds = args.seconds.ceil() as usize;
    let bins: Arc<Vec<AtomicU64>> = Arc::new((0..seconds).map(|_| AtomicU64::new(0)).collect());
    let end = tokio::time::Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for peer in peers {
        let bins = Arc::clone(&bins);
        let path = args.path.clone();
        tasks.spawn(download(peer, path, begin, end, bins));
    }
    let (mut files, mut first_error) = (0u64, None);
    while let Some(done) = tasks.join_next().await {
        match done.context("a download task failed")? {
            Ok(n) => files += n,
            Err(e) => {
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    let bins: Vec<String> = bins
        .iter()
        .map(|b| b.load(Ordering::Relaxed).to_string())
        .collect();
    println!(
        "{{\"files\":{files},\"bin_ms\":1000,\"bins\":[{}],\"first_error\":{}}}",
        bins.join(","),
        json_error(first_error.as_ref())
    );
    Ok(())
}

/// One association downloading `path` again and again until `end`,
/// counting body bytes into `bins` (one per second since `begin`); returns
/// the files completed.
async fn download(
    mut peer: Peer,
    path: String,
    begin: Instant,
    end: tokio::time::Instant,
    bins: Arc<Vec<AtomicU64>>,
) -> Result<u64> {
    let mut files = 0;
    'files: while tokio::time::Instant::now() < end {
        let mut sent = peer.send(std::slice::from_ref(&path)).await?;
        while !sent.is_empty() {
            let m = match tokio::time::timeout_at(end, peer.assoc.recv()).await {
                Ok(m) => m?,
                Err(_) => break 'files,
            };
            match peer.session.handle_message(m.stream, &m.data) {
                Ok(Message::ResponseBody { data, .. }) => {
                    let bin = begin.elapsed().as_secs() as usize;
                    if let Some(b) = bins.get(bin) {
                        b.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                }
                Ok(Message::ResponseEnd { id, .. }) => {
                    sent.remove(&id);
                    files += 1;
                }
                Ok(Message::Reset { id, code, .. }) => bail!("request {id} reset: {code:?}"),
                Ok(_) => {}
                Err(reaction) => bail!("session refused a message: {reaction:?}"),
            }
        }
    }
    peer.assoc.abort();
    Ok(files)
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = parse_args()?;
    // One thread: the client's share of the machine stays one core, and
    // the origin's figures are what changes between phases.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let run = async {
            match args.role.as_str() {
                "idle" => idle(&args).await,
                "bulk" => bulk(&args).await,
                _ => load(&args).await,
            }
        };
        tokio::time::timeout(MAX_RUN, run)
            .await
            .context("the run exceeded its time cap")?
    })
}
