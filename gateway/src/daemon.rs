//! The running gateway: listeners, origin links, interception and the order in
//! which they start and stop.
//!
//! Start: bind the transparent listeners first (a busy port fails before any rule
//! exists), start the origin links, then install the interception, so no flow is
//! ever steered to a port nobody listens on. Stop: remove the interception first
//! (new flows are routed normally again, straight to their destinations), then
//! let the requests in progress finish within a grace period, then close the
//! associations.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::accounting::{Accounting, LanSide, StreamCollector};
use crate::cache::Cache;
use crate::config::GatewayConfig;
use crate::front::Front;
use crate::intercept::Interception;
use crate::listener::{self, TransparentListener};
use crate::metrics::{PushCollector, TransportCollector};
use crate::origin_link::OriginLink;
use crate::push::Pushes;
use crate::sync::stopped;

/// How long browser connections get to finish their current request at stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs the gateway until `stop` resolves, then shuts down in order. Interception
/// is installed only if `config.intercept.manage` is set.
pub async fn run(config: GatewayConfig, stop: impl Future<Output = ()>) -> Result<()> {
    let listener = TransparentListener::bind(&config.listen)?;
    for addr in listener.local_addrs() {
        tracing::info!("transparent listener on {addr}");
    }
    let admin = bind_admin(&config).await?;
    let cache = open_cache(&config).await?;
    let pushes = Pushes::start(&config.push, &cache);
    let links = start_links(&config, pushes.as_deref());
    let accounting = start_accounting(&config);
    let interception = install_interception(&config).await?;

    let front = Arc::new(Front::with_pushes(
        &config,
        links.clone(),
        cache.clone(),
        pushes.clone(),
    ));
    let slots = Arc::new(Semaphore::new(config.http.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut accepting = JoinSet::new();
    if let Some(socket) = admin {
        let streams = StreamCollector::new(links.clone(), Arc::clone(&accounting));
        let mut collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(streams),
            Box::new(TransportCollector::new(links.clone())),
            front.metrics().collector(),
        ];
        if let Some(pushes) = &pushes {
            collectors.push(Box::new(PushCollector(Arc::clone(pushes))));
        }
        tokio::spawn(crate::admin::serve_with(
            socket,
            cache.clone(),
            front.prefetcher().cloned(),
            collectors,
            stop_rx.clone(),
        ));
    }
    if let Some(prefetcher) = front.prefetcher() {
        tokio::spawn(Arc::clone(prefetcher).drive(stop_rx.clone()));
    }
    for socket in listener.into_sockets() {
        accepting.spawn(accept_loop(
            socket,
            Arc::clone(&front),
            Arc::clone(&slots),
            stop_rx.clone(),
        ));
    }
    tracing::info!("gateway ready");
    stop.await;

    tracing::info!("stopping: removing interception, finishing requests in progress");
    if let Some(interception) = interception {
        remove_interception(interception).await;
    }
    let _ = stop_tx.send(true);
    while accepting.join_next().await.is_some() {}
    for link in &links {
        link.shutdown().await;
    }
    Ok(())
}

/// Binds the admin endpoint's socket, if `[admin]` enables it.
async fn bind_admin(config: &GatewayConfig) -> Result<Option<TcpListener>> {
    if !config.admin.enabled {
        return Ok(None);
    }
    let socket = TcpListener::bind(config.admin.listen)
        .await
        .with_context(|| {
            format!(
                "binding the admin endpoint {} (`admin.listen`; `admin.enabled = false` turns it off)",
                config.admin.listen
            )
        })?;
    tracing::info!(
        "admin endpoint on http://{}/ (metrics, cache stats, purge)",
        config.admin.listen
    );
    Ok(Some(socket))
}

/// Opens the cache database (or the disabled cache) and logs what it holds.
async fn open_cache(config: &GatewayConfig) -> Result<Cache> {
    let cache = Cache::open(&config.cache).await.with_context(|| {
        format!(
            "opening the cache database {} (set `cache.enabled = false` to run without it)",
            config.cache.path.display()
        )
    })?;
    if cache.is_enabled() {
        let stats = cache.stats();
        tracing::info!(
            "cache {}: {} entries, {} bytes of {} allowed",
            config.cache.path.display(),
            stats.entries,
            stats.bytes,
            config.cache.max_bytes,
        );
    } else {
        tracing::info!("cache disabled");
    }
    Ok(cache)
}

/// Starts one link per `[[origin]]`; each connects in the background.
/// Per-stream accounting for FEEDBACK: userspace always, cross-checked by the
/// eBPF programs where they load; says once which it is and why.
fn start_accounting(config: &GatewayConfig) -> Arc<Accounting> {
    let accounting = Arc::new(if config.origins.iter().any(|o| o.feedback.enabled) {
        let lan = LanSide {
            interfaces: config.intercept.lan_interfaces.clone(),
            ports: config.intercept.ports.clone(),
        };
        Accounting::start(&config.ebpf, &lan)
    } else {
        Accounting::userspace_only("no origin has feedback.enabled; nothing is reported")
    });
    tracing::info!("per-stream accounting: {}", accounting.describe());
    accounting
}

fn start_links(config: &GatewayConfig, pushes: Option<&Pushes>) -> Vec<OriginLink> {
    let links: Vec<OriginLink> = config
        .origins
        .iter()
        .map(|entry| OriginLink::spawn_with_pushes(entry, pushes.map(Pushes::link)))
        .collect();
    for (entry, link) in config.origins.iter().zip(&links) {
        tracing::info!(
            "origin {}: {} for {:?} {:?}{}",
            link.name(),
            entry.address,
            entry.destinations,
            entry.hosts,
            if entry.fail_open { ", fails open" } else { "" },
        );
    }
    links
}

/// Installs the nftables table and policy routes, if `intercept.manage` is set.
async fn install_interception(config: &GatewayConfig) -> Result<Option<Interception>> {
    if !config.intercept.manage {
        tracing::info!("intercept.manage = false: expecting the rules of config/nftables.nft");
        return Ok(None);
    }
    let for_install = config.clone();
    let installed = tokio::task::spawn_blocking(move || Interception::install(&for_install))
        .await
        .context("installing interception")??;
    tracing::info!(
        "intercepting TCP ports {:?} on {} into port {}",
        config.intercept.ports,
        if config.intercept.lan_interfaces.is_empty() {
            "every interface but lo".to_owned()
        } else {
            config.intercept.lan_interfaces.join(", ")
        },
        config.listen.port,
    );
    Ok(Some(installed))
}

/// Removes what [`install_interception`] installed; a failure is logged with
/// the command that cleans up, since the gateway is stopping anyway.
async fn remove_interception(interception: Interception) {
    match tokio::task::spawn_blocking(move || interception.remove()).await {
        Ok(Ok(())) => tracing::info!("interception removed"),
        Ok(Err(e)) => tracing::error!("removing interception: {e}; run `gateway cleanup`"),
        Err(e) => tracing::error!("removing interception: {e}; run `gateway cleanup`"),
    }
}

/// Accepts intercepted flows on one socket; each connection holds a slot of
/// `http.max_connections`. On stop, waits for the connections within the grace.
async fn accept_loop(
    socket: TcpListener,
    front: Arc<Front>,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = stopped(&mut stop) => break,
        };
        let flow = tokio::select! {
            accepted = listener::accept(&socket) => match accepted {
                Ok(flow) => flow,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    gateway_transport::warn_limited!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        tracing::debug!(client = %flow.client, dst = %flow.original_dst, "intercepted");
        let (front, stop) = (Arc::clone(&front), stop.clone());
        connections.spawn(async move {
            front.serve(flow, stop).await;
            drop(permit);
        });
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
    drop(socket);
    if tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!("{} browser connections cut at stop", connections.len());
        connections.abort_all();
    }
}
