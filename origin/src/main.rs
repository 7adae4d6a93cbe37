//! `origin`: serves a document root to gateways over SCTP associations (kernel or
//! userspace), ordering response chunks with a response scheduler.
//!
//! Configuration: config/origin.toml (or `--config`), then command-line
//! overrides, then validation. See `origin --help`. `origin doctor` checks the
//! host for what the configuration needs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gateway_transport::{Association, BackendChoice, BackendKind, Listener, TransportError};
use origin::access::AccessLog;
use origin::closure::ClosureConfig;
use origin::config::{LogFormat, OriginConfig};
use origin::ebpf::{EbpfConfig, EgressCounters};
use origin::files::{FilesConfig, StaticFiles};
use origin::metrics::OriginMetrics;
use origin::proxy::Proxy;
use origin::response_scheduler::ResponsePolicyKind;
use origin::server::{DriverConfig, PushConfig, drive_counted};
use origin::service::Service;
use origin::sync::lock;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// How long associations get to close when the origin stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Parser)]
#[command(about = "SCTP origin server with response schedulers")]
struct Cli {
    /// Configuration file (TOML). Without it, the built-in defaults apply.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    /// Address to listen on (repeatable; replaces `listen.addresses`).
    #[arg(long = "listen", global = true)]
    listen: Vec<SocketAddr>,
    /// Transport: auto, kernel, userspace, framed-tcp or quic.
    #[arg(long, global = true)]
    transport: Option<BackendChoice>,
    /// Streams to offer, counting stream 0.
    #[arg(long, global = true)]
    streams: Option<u16>,
    /// Response scheduler's policy: fcfs, rr, scf, priority, wfq or
    /// queue-aware (replaces `response_scheduler.policy`; `--scheduler`, its
    /// old name, still works).
    #[arg(long, alias = "scheduler", global = true)]
    response_scheduler: Option<ResponsePolicyKind>,
    /// Document root (replaces `files.root`).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Reverse-proxy mode: forward to this TCP HTTP/1.1 upstream (host:port)
    /// instead of serving files.
    #[arg(long, conflicts_with = "root", global = true)]
    upstream: Option<String>,
    /// Body bytes per chunk.
    #[arg(long, global = true)]
    chunk_size: Option<usize>,
    /// Write the access log (target `origin::access`) to this file, appending,
    /// instead of with the rest of the log on stderr.
    #[arg(long, value_name = "FILE", global = true)]
    access_log: Option<PathBuf>,
    /// Log lines as text or as JSON objects (replaces `log.format`).
    #[arg(long, value_name = "text|json", global = true)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve (the default).
    Run,
    /// Check this host for everything the configuration needs (the transport,
    /// the listening addresses, the document root or upstream, the access log)
    /// and print one verdict per item with its fix. Exits 1 when something
    /// required is missing.
    Doctor,
}

fn load_config(cli: &Cli) -> Result<OriginConfig> {
    let mut config = match &cli.config {
        Some(path) => OriginConfig::from_file(path)?,
        None => OriginConfig::default(),
    };
    if !cli.listen.is_empty() {
        config.listen.addresses = cli.listen.clone();
    }
    if let Some(backend) = cli.transport {
        config.listen.backend = backend;
    }
    if let Some(streams) = cli.streams {
        config.transport.streams = streams;
        config.transport.max_inbound_streams = streams;
    }
    if let Some(policy) = cli.response_scheduler {
        config.response_scheduler.policy = policy;
    }
    if let Some(root) = &cli.root {
        match &mut config.files {
            Some(files) => files.root = root.clone(),
            None => config.files = Some(FilesConfig::new(root.clone())),
        }
    }
    if let Some(address) = &cli.upstream {
        config.files = None;
        let mut upstream = config.upstream.take().unwrap_or_default();
        upstream.address = address.clone();
        config.upstream = Some(upstream);
    }
    if let Some(chunk) = cli.chunk_size {
        config.limits.chunk_size = chunk;
    }
    if let Some(format) = cli.log_format {
        config.log.format = format;
    }
    config.validate()?;
    Ok(config)
}

/// Installs the log: `RUST_LOG` (default `info`) decides what is written,
/// `format` how; it goes to stderr, as the gateway's does (stdout stays free),
/// except the access log when `access_log` names a file, which gets the same
/// format. Colour only for a person at a terminal, never in JSON: redirected
/// to a file or journald, escape codes would be noise in every line.
fn init_log(access_log: Option<&Path>, format: LogFormat) -> Result<()> {
    use tracing_subscriber::filter::filter_fn;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};

    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // rustls logs a WARN line for each malformed handshake message a peer
    // sends, so a peer could write log lines at will; errors still show.
    let levels = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,rustls=error".into());
    let stderr = log_lines(format, colour, std::io::stderr);
    let Some(path) = access_log else {
        tracing_subscriber::registry()
            .with(levels)
            .with(stderr)
            .try_init()?;
        return Ok(());
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the access log {}", path.display()))?;
    let is_access = |target: &str| target == origin::access::TARGET;
    tracing_subscriber::registry()
        .with(levels)
        .with(stderr.with_filter(filter_fn(move |m| !is_access(m.target()))))
        .with(
            log_lines(format, false, Mutex::new(file))
                .with_filter(filter_fn(move |m| is_access(m.target()))),
        )
        .try_init()?;
    Ok(())
}

/// One destination's log lines, as text (with colour if `colour`) or JSON.
fn log_lines<S, W>(
    format: LogFormat,
    colour: bool,
    writer: W,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::{Layer, fmt};
    match format {
        LogFormat::Text => fmt::layer().with_ansi(colour).with_writer(writer).boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_ansi(false)
            .with_writer(writer)
            .boxed(),
    }
}

/// The certificates and passthrough names of `[tls]`, loaded and said once;
/// None without `[tls]` (then no tunnels are announced).
fn load_tunnels(config: &OriginConfig) -> Result<Option<origin::tls::Tunnels>> {
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    let tunnels = origin::tls::Tunnels::load(tls)?;
    tracing::info!("TLS tunnels: {tunnels:?}");
    Ok(Some(tunnels))
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    if matches!(cli.command, Some(Command::Doctor)) {
        let config = load_config(&cli)?;
        let report = origin::doctor::run(&config, cli.access_log.as_deref()).await;
        println!("{report}");
        std::process::exit(report.exit_code());
    }
    // A configuration error goes to stderr as it is: the log, whose format
    // the configuration decides, is not installed yet.
    let config = load_config(&cli)?;
    init_log(cli.access_log.as_deref(), config.log.format)?;
    for (old, new) in config.deprecated_keys() {
        tracing::warn!("config: [{old}] is deprecated; write it as [{new}]");
    }
    for (old, new) in config.transport.deprecated_keys().iter() {
        tracing::warn!("config: transport.{old} is deprecated; write it as transport.{new}");
    }
    let (service, source) = match (&config.files, &config.upstream) {
        (Some(files), _) => (
            Service::files(
                StaticFiles::new(files)
                    .with_context(|| format!("opening document root {}", files.root.display()))?,
                (config.push.driver.enabled
                    || config.tls.as_ref().is_some_and(|tls| tls.early_hints))
                .then(ClosureConfig::default),
                (config.push.driver.enabled && config.push.learned.learn)
                    .then(|| config.push.learned.clone()),
            ),
            format!("root {}", files.root.display()),
        ),
        (None, Some(upstream)) => (
            Service::Proxy(Box::new(Proxy::new(upstream.clone())?)),
            format!("upstream {}", upstream.address),
        ),
        (None, None) => bail!("nothing to serve: no [files] and no [upstream]"),
    };
    let service = Arc::new(service);

    let (backend, why) = config.listen.backend.decide();
    tracing::info!(
        "transport: {backend} ({why}); response scheduler: {}; serving {source}",
        config.response_scheduler.policy,
    );
    let mut transport = config.transport.clone();
    transport.listener_limits = gateway_transport::SctpLimits {
        max_associations: config.limits.max_associations,
        max_per_source: config.limits.max_associations_per_source,
        receive_memory: config.limits.receive_memory,
        init_acks_per_second: config.limits.init_acks_per_second,
    };
    let mut listeners = Vec::new();
    for addr in &config.listen.addresses {
        match Listener::bind(backend, *addr, &transport).await {
            Ok(listener) => {
                tracing::info!("listening on {}", listener.local_addr()?);
                if let Some(pin) = listener.quic_cert_sha256() {
                    // Made at start: gateways must be given it after every restart.
                    tracing::info!(
                        "QUIC certificate SHA-256 (the gateway's \
                         transport.quic.server_cert_sha256): {pin}"
                    );
                }
                listeners.push(listener);
            }
            // One family may be missing on a host (no IPv6, say); all missing is fatal.
            Err(e) => tracing::warn!("cannot listen on {addr}: {e}"),
        }
    }
    if listeners.is_empty() {
        bail!("could not listen on any of {:?}", config.listen.addresses);
    }

    let egress = egress_counters(backend, &config.ebpf);
    let tunnels = load_tunnels(&config)?;
    let driver_config = DriverConfig {
        response_scheduler: config.response_scheduler.clone(),
        chunk_size: config.limits.chunk_size,
        max_open_requests: config.limits.max_open_requests,
        max_request_body: config.limits.max_request_body,
        stream_queue_limit: config.transport.max_buffered_per_stream as u64,
        egress,
        tunnels,
    };
    let slots = Arc::new(Semaphore::new(config.limits.max_associations));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let metrics = match &config.metrics {
        Some(m) => {
            let endpoint = tokio::net::TcpListener::bind(m.listen)
                .await
                .with_context(|| format!("metrics.listen: cannot listen on {}", m.listen))?;
            tracing::info!("metrics on http://{}/metrics", endpoint.local_addr()?);
            let metrics = OriginMetrics::for_policy(config.response_scheduler.policy);
            tasks.spawn(origin::metrics::serve(
                endpoint,
                metrics.clone(),
                stop_rx.clone(),
            ));
            Some(metrics)
        }
        None => None,
    };
    let mut accepting = JoinSet::new();
    for listener in listeners {
        accepting.spawn(accept_loop(
            listener,
            Arc::clone(&service),
            driver_config.clone(),
            config.push.driver.clone(),
            metrics.clone(),
            Arc::clone(&slots),
            stop_rx.clone(),
        ));
    }
    // A listener that stops for good stops the origin, with an error, so
    // that its supervisor (systemd's Restart=on-failure) starts it again; a
    // port that is bound but never read would look alive to no one's benefit.
    let outcome = tokio::select! {
        signal = shutdown_signal() => signal,
        Some(ended) = accepting.join_next() => match ended {
            Ok(Ok(())) => Err(anyhow::anyhow!("a listener's accept loop ended")),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(anyhow::anyhow!("a listener's accept loop failed: {e}")),
        },
    };
    if let Err(e) = &outcome {
        tracing::error!("stopping: {e:#}");
    }
    tracing::info!("stopping: closing associations");
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), async {
        while tasks.join_next().await.is_some() {}
        while accepting.join_next().await.is_some() {}
    })
    .await;
    outcome
}

/// `tc_sctp` for kernel SCTP, if configured and the kernel allows it; says
/// once how the scheduler learns each stream's transport depth, and why.
fn egress_counters(backend: BackendKind, config: &EbpfConfig) -> Option<Arc<EgressCounters>> {
    if backend != BackendKind::Kernel {
        tracing::info!(
            "per-stream transport depth: from the {backend} transport itself \
             (tc_sctp is for kernel SCTP only)"
        );
        return None;
    }
    match EgressCounters::start(config) {
        Ok(counters) => {
            tracing::info!(
                "per-stream transport depth: eBPF (tc_sctp on the egress of {}): bytes \
                 written per stream minus DATA bytes seen leaving",
                counters.interface()
            );
            Some(Arc::new(counters))
        }
        Err(why) => {
            tracing::info!(
                "per-stream transport depth: unknown for kernel SCTP ({why}); the \
                 kernel's send buffer is the only limit per stream"
            );
            None
        }
    }
}

async fn accept_loop(
    listener: Listener,
    service: Arc<Service>,
    config: DriverConfig,
    push: PushConfig,
    metrics: Option<OriginMetrics>,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut associations: JoinSet<()> = JoinSet::new();
    // Why the loop ended, if not because the origin is stopping.
    let mut stopped = None;
    // The open associations, so that stopping can close them; each removes
    // itself when its driver returns.
    let live: Arc<Mutex<HashMap<u64, Association>>> = Arc::default();
    let mut next_key = 0u64;
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let assoc = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(assoc) => assoc,
                Err(e @ TransportError::ListenerStopped(_)) => {
                    stopped = Some(e);
                    break;
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let peer = assoc.peer_addr();
        tracing::info!(%peer, streams = ?assoc.streams(), "association up");
        let key = next_key;
        next_key += 1;
        lock(&live).insert(key, assoc.clone());
        let handler = Arc::new(AccessLog::new(Arc::clone(&service), peer));
        let (config, push, live, metrics) = (
            config.clone(),
            push.clone(),
            Arc::clone(&live),
            metrics.clone(),
        );
        let transport = assoc.clone();
        associations.spawn(async move {
            match drive_counted(assoc, handler, config, push, metrics).await {
                Ok(stats) => tracing::info!(%peer, ?stats, "association closed"),
                Err(e) => tracing::warn!(%peer, "association ended: {e}"),
            }
            if let Some(sctp) = transport.sctp_stats() {
                tracing::info!(%peer, srtt = ?sctp.srtt, "transport: {}", sctp.counters);
            }
            lock(&live).remove(&key);
            drop(permit);
        });
    }
    // Stopping: close what is open, in parallel, within the grace period.
    let mut closing = JoinSet::new();
    let open: Vec<Association> = lock(&live).values().cloned().collect();
    for assoc in open {
        closing.spawn(async move { assoc.close().await });
    }
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while closing.join_next().await.is_some() {}
    })
    .await;
    associations.abort_all();
    match stopped {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

async fn shutdown_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
