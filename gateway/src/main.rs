//! `gateway`: the transparent gateway daemon. Intercepts browsers' HTTP with
//! nftables TPROXY and carries mapped flows to SCTP origins, one association per
//! origin with a stream per browser connection; everything else goes straight to
//! its destination.
//!
//! `gateway --config FILE` runs until SIGINT or SIGTERM and removes its rules on
//! the way out; `gateway cleanup` removes the rules a crashed run left behind;
//! `gateway rules` prints the nftables rule set for people who manage their own.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use gateway::config::GatewayConfig;

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
}

fn load_config(cli: &Cli) -> Result<GatewayConfig> {
    let mut config = match &cli.config {
        Some(path) => GatewayConfig::from_file(path)?,
        None => GatewayConfig::default(),
    };
    if !cli.lan_interfaces.is_empty() {
        config.intercept.lan_interfaces = cli.lan_interfaces.clone();
    }
    config.validate()?;
    Ok(config)
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let config = load_config(&cli)?;
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => {
            tokio::runtime::Runtime::new()?.block_on(gateway::daemon::run(config, async {
                if let Err(e) = shutdown_signal().await {
                    tracing::error!("cannot wait for signals: {e}");
                }
            }))
        }
        Command::Cleanup => {
            let report = gateway::intercept::cleanup(&config)?;
            println!("{report}");
            Ok(())
        }
        Command::Rules => {
            print!("{}", gateway::intercept::ruleset_text(&config));
            Ok(())
        }
    }
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
