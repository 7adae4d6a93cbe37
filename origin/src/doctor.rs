//! `origin doctor`: checks the host for everything this configuration needs
//! (the transport, the listening addresses, what it serves, the access log)
//! and says, per item, what it found and what to do.
//!
//! Each check asks the code that will do the work: the listeners are bound by
//! `gateway_transport::Listener::bind` (and closed again), the document root
//! is opened by `StaticFiles::new`, the upstream is dialled as the proxy would.
//! What it never does: keep a socket or a file it opened, or change the host.

use std::path::Path;
use std::time::Duration;

use daemon_config::doctor::{Check, Report};
use gateway_transport::{BackendKind, Listener, Wire};

use crate::config::OriginConfig;
use crate::files::StaticFiles;

/// Runs every check for `config`; `access_log` is the `--access-log` file, if
/// given.
pub async fn run(config: &OriginConfig, access_log: Option<&Path>) -> Report {
    let mut report = Report::default();
    let ports: Vec<u16> = config.listen.addresses.iter().map(|a| a.port()).collect();
    for check in gateway_transport::doctor::checks(config.listen.backend, &config.transport, &ports)
    {
        report.push(check);
    }
    listeners(&mut report, config).await;
    service(&mut report, config).await;
    if let Some(path) = access_log {
        let existed = path.exists();
        report.push(
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                Ok(_) => {
                    if !existed {
                        // The origin creates it at start; the doctor leaves no trace.
                        let _ = std::fs::remove_file(path);
                    }
                    Check::ok(
                        "access log",
                        format!("{} can be appended to", path.display()),
                    )
                }
                Err(e) => Check::fail(
                    "access log",
                    format!("cannot open {}: {e}", path.display()),
                    "create its directory and make it writable by the origin's user, \
                     or leave the access log on stderr (journald)",
                ),
            },
        );
    }
    report
}

/// Binds every listening address with the configured backend, then closes it.
async fn listeners(report: &mut Report, config: &OriginConfig) {
    let kind = config.listen.backend.resolve();
    let mut bound = 0;
    let mut failed = Vec::new();
    for addr in &config.listen.addresses {
        match Listener::bind(kind, *addr, &config.transport).await {
            Ok(listener) => {
                bound += 1;
                drop(listener);
                report.push(Check::ok(
                    format!("listen {addr}"),
                    format!("{kind} can bind it ({})", protocol(kind)),
                ));
            }
            Err(e) => failed.push((*addr, e)),
        }
    }
    // As at start: one family may be missing on a host; all missing is fatal.
    for (addr, e) in failed {
        let detail = format!("{kind} cannot bind it: {e}");
        let fix = format!(
            "stop what holds {} port {} (ss -lnup / ss -lnp), or listen elsewhere \
             (listen.addresses); an address must be on one of this host's interfaces",
            protocol(kind),
            addr.port()
        );
        report.push(if bound == 0 {
            Check::fail(format!("listen {addr}"), detail, fix)
        } else {
            Check::warn(format!("listen {addr}"), detail, fix)
        });
    }
}

fn protocol(kind: BackendKind) -> &'static str {
    match kind.wire() {
        Wire::Sctp => "SCTP",
        Wire::Tcp => "TCP",
        Wire::Udp => "UDP",
    }
}

async fn service(report: &mut Report, config: &OriginConfig) {
    if let Some(files) = &config.files {
        report.push(match StaticFiles::new(files) {
            Ok(_) => Check::ok("document root", format!("{} opens", files.root.display())),
            Err(e) => Check::fail(
                "document root",
                e.to_string(),
                "create it or correct files.root (relative paths are taken from the \
                 configuration file's directory); the origin's user must be able to read it",
            ),
        });
    }
    if let Some(upstream) = &config.upstream {
        let item = format!("upstream {}", upstream.address);
        let connect = tokio::net::TcpStream::connect(upstream.address.as_str());
        report.push(
            match tokio::time::timeout(
                upstream.connect_timeout.max(Duration::from_millis(1)),
                connect,
            )
            .await
            {
                Ok(Ok(_)) => Check::ok(item, "accepts TCP connections"),
                Ok(Err(e)) => Check::fail(
                    item,
                    format!("cannot connect: {e}"),
                    "start the upstream web server, or correct upstream.address",
                ),
                Err(_) => Check::fail(
                    item,
                    format!("no answer within {:?}", upstream.connect_timeout),
                    "start the upstream web server, or correct upstream.address; \
                     check the firewall between them",
                ),
            },
        );
    }
}
