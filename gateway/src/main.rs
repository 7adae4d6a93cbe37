//! `gateway`: the transparent gateway daemon. Intercepts browsers' HTTP with
//! nftables TPROXY and carries mapped flows to SCTP origins, one association per
//! origin with a stream per browser connection; everything else goes straight to
//! its destination.
//!
//! `gateway --config FILE` runs until SIGINT or SIGTERM and removes its rules on
//! the way out; `gateway cleanup` removes the rules a crashed run left behind;
//! `gateway rules` prints the nftables rule set for people who manage their own;
//! `gateway doctor` checks the host for everything the configuration needs;
//! `gateway cache stats|purge|list` inspect and trim the cache.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gateway::config::{GatewayConfig, LogFormat};

#[derive(Debug, Parser)]
#[command(about = "Transparent HTTP gateway that carries web flows to SCTP origins")]
struct Cli {
    /// Configuration file (TOML). Without it, the built-in defaults apply: no
    /// origins, every request goes straight to its destination.
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    /// Intercept on this LAN interface (repeatable; replaces `intercept.lan_interfaces`).
    #[arg(long = "lan-interface", global = true)]
    lan_interfaces: Vec<String>,
    /// Log lines as text or as JSON objects (replaces `log.format`).
    #[arg(long, value_name = "text|json", global = true)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway (the default).
    Run,
    /// Remove the nftables table and policy routes a crashed run left behind.
    Cleanup,
    /// Print the nftables rule set this configuration installs.
    Rules,
    /// Check this host for everything the configuration needs (forwarding,
    /// nftables TPROXY, policy routing, interfaces, origins, cache, eBPF) and
    /// print one verdict per item with its fix. Exits 1 when something
    /// required is missing. Changes nothing it does not take back.
    Doctor,
    /// Inspect or trim the cache.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
}

#[derive(Debug, Subcommand)]
enum CacheAction {
    /// Print the running gateway's cache figures (from its admin endpoint).
    Stats {
        /// The admin endpoint; `admin.listen` by default.
        #[arg(long)]
        admin: Option<SocketAddr>,
    },
    /// Remove entries from the running gateway's cache.
    Purge {
        /// Every variant of one URL (`http://host[:port]/path?query`).
        #[arg(long, group = "what")]
        url: Option<String>,
        /// Every entry whose URL starts with this.
        #[arg(long, group = "what")]
        prefix: Option<String>,
        /// Every entry of one host (any port).
        #[arg(long, group = "what")]
        host: Option<String>,
        /// The admin endpoint; `admin.listen` by default.
        #[arg(long)]
        admin: Option<SocketAddr>,
    },
    /// List the entries of a cache file, opened read-only (the gateway that
    /// uses it must be stopped: it holds the file exclusively).
    List {
        /// The database; `cache.path` by default.
        #[arg(long)]
        path: Option<PathBuf>,
    },
}

fn load_config(cli: &Cli) -> Result<GatewayConfig> {
    let mut config = match &cli.config {
        Some(path) => GatewayConfig::from_file(path)?,
        None => GatewayConfig::default(),
    };
    if !cli.lan_interfaces.is_empty() {
        config.intercept.lan_interfaces = cli.lan_interfaces.clone();
    }
    if let Some(format) = cli.log_format {
        config.log.format = format;
    }
    config.validate()?;
    Ok(config)
}

/// mimalloc: a cache hit is a handful of short-lived allocations (heads, log
/// lines) on two threads; glibc's malloc showed up at 10 % of a profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Threads the daemon's blocking pool may have (tokio's default is 512). The
/// cache's redb reads and writes run there; each thread gets its own
/// allocator heap, so under a soak of 4,500 requests a second a pool grown to
/// 512 threads held 0.8-1.2 GiB of RSS (bench/results/load.md). Beyond this
/// many, blocking work queues instead.
const MAX_BLOCKING_THREADS: usize = 32;

/// The daemon's multi-threaded runtime: a worker per core, a bounded
/// blocking pool.
fn daemon_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // A configuration error goes to stderr as it is: the log, whose format
    // the configuration decides, is not installed yet.
    let config = load_config(&cli)?;
    let _flush_at_exit = init_log(config.log.format);
    for (index, origin) in config.origins.iter().enumerate() {
        for (old, new) in origin.transport.deprecated_keys().iter() {
            tracing::warn!(
                "config: origin[{index}].transport.{old} is deprecated; write it as \
                 origin[{index}].transport.{new}"
            );
        }
    }
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => daemon_runtime()?.block_on(gateway::daemon::run(config, async {
            if let Err(e) = shutdown_signal().await {
                tracing::error!("cannot wait for signals: {e}");
            }
        })),
        Command::Cleanup => {
            let report = gateway::intercept::cleanup(&config)?;
            println!("{report}");
            Ok(())
        }
        Command::Rules => {
            print!("{}", gateway::intercept::ruleset_text(&config));
            Ok(())
        }
        Command::Doctor => {
            let report = gateway::doctor::run(&config);
            println!("{report}");
            std::process::exit(report.exit_code());
        }
        Command::Cache { action } => cache_command(&config, action),
    }
}

/// Installs the log on stderr: `RUST_LOG` (default `info`) decides what is
/// written, `format` how. Colour only for a person at a terminal, never in
/// JSON.
///
/// Log lines (one per request: the access log) are written by a thread of
/// their own through a buffer flushed whenever the queue runs empty, so a busy
/// gateway makes one write per batch instead of one per line. Not lossy: a full
/// queue slows the request path rather than drop lines. The returned guard
/// flushes at exit.
/// The log filter unless `RUST_LOG` says otherwise. rustls logs a WARN line for
/// each malformed ClientHello it reads (an illegal SNI name, say), which any
/// browser-side host could send at will; such a connection is logged once
/// anyway, by the front's `https` line (`peeked = NoServerName`).
const DEFAULT_LOG_FILTER: &str = "info,rustls=error";

fn init_log(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let stderr = std::io::stderr();
    let colour = std::io::IsTerminal::is_terminal(&stderr);
    let (writer, flush_at_exit) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::BufWriter::new(stderr));
    let log = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG_FILTER.into()),
        )
        .with_writer(writer);
    match format {
        LogFormat::Text => log.with_ansi(colour).init(),
        LogFormat::Json => log.with_ansi(false).json().init(),
    }
    flush_at_exit
}

fn cache_command(config: &GatewayConfig, action: CacheAction) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match action {
        CacheAction::Stats { admin } => {
            let stats = runtime.block_on(gateway::admin::fetch_stats(
                admin.unwrap_or(config.admin.listen),
            ))?;
            println!("{}", serde_json::to_string_pretty(&stats)?);
        }
        CacheAction::Purge {
            url,
            prefix,
            host,
            admin,
        } => {
            use gateway::cache::Purge;
            let purge = match (url, prefix, host) {
                (Some(url), _, _) => Purge::Url(url),
                (_, Some(prefix), _) => Purge::Prefix(prefix),
                (_, _, Some(host)) => Purge::Host(host),
                _ => bail!("say what to purge: --url, --prefix or --host"),
            };
            let removed = runtime.block_on(gateway::admin::request_purge(
                admin.unwrap_or(config.admin.listen),
                &purge,
            ))?;
            println!("removed {removed} entries");
        }
        CacheAction::List { path } => {
            let path = path.unwrap_or_else(|| config.cache.path.clone());
            let store = gateway::cache::store::Store::open_read_only(&path).with_context(|| {
                format!(
                    "opening {} read-only (is a gateway still running with it?)",
                    path.display()
                )
            })?;
            let entries = store.entries()?;
            let mut bytes = 0;
            for (uri, entry) in &entries {
                bytes += entry.response.body_len;
                println!(
                    "{} {:>10} {}",
                    entry.response.status.as_u16(),
                    entry.response.body_len,
                    uri
                );
            }
            println!("{} entries, {bytes} body bytes", entries.len());
        }
    }
    Ok(())
}

async fn shutdown_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
