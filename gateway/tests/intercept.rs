//! Interception against the real kernel: every test runs in network namespaces
//! of its own (root needed), which are deleted when the test ends, also on
//! failure.
//!
//! - install, inspect with `nft -j` and `ip -j`, remove, find nothing of ours;
//! - a crashed run's leftovers are replaced, not duplicated; `cleanup` removes
//!   them and then has nothing to do;
//! - the shipped `config/nftables.nft` passes `nft -c`, and loads into the kernel
//!   exactly the table that `install` builds through the JSON API;
//! - TPROXY end to end: a client in one namespace connects to a foreign address
//!   routed through the gateway namespace, and a transparent listener there
//!   accepts it with that address as its local address, IPv4 and IPv6;
//! - the listening port is closed to direct connections from the LAN and the
//!   WAN side, by the table and, without it, by the listener itself.
//! - with `intercept.tls_port`, HTTPS is intercepted for the origins'
//!   destinations only; to any other address it is routed, not proxied.

#[path = "support/netns.rs"]
mod netns;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gateway::config::GatewayConfig;
use gateway::intercept::{CleanupReport, Interception, cleanup, ruleset_text};
use netns::{NetNsGuard, add_address, veth};
use serde_json::Value;
use socket2::{Domain, Protocol, Socket, Type};

/// What of ours a namespace holds.
#[derive(Debug, Default, PartialEq, Eq)]
struct Installed {
    table: bool,
    rules_v4: usize,
    rules_v6: usize,
    routes_v4: usize,
    routes_v6: usize,
}

impl Installed {
    /// Exactly one of everything.
    const ONCE: Installed = Installed {
        table: true,
        rules_v4: 1,
        rules_v6: 1,
        routes_v4: 1,
        routes_v6: 1,
    };
}

fn json(text: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    serde_json::from_str(text).with_context(|| format!("parsing {text}"))
}

/// Reads the namespace's state with the administrator's tools, not ours.
fn installed(ns: &NetNsGuard, config: &GatewayConfig) -> Result<Installed> {
    let i = &config.intercept;
    let tables = json(&ns.exec("nft", &["-j", "list", "tables"])?)?;
    let table = tables["nftables"]
        .as_array()
        .context("nft -j output")?
        .iter()
        .any(|o| o["table"]["family"] == "inet" && o["table"]["name"] == i.table.as_str());
    // `ip -j` prints table ids as strings (they may be names, like "main").
    let route_table = i.route_table.to_string();
    let rules = |family: &str| -> Result<usize> {
        let rules = json(&ns.exec("ip", &["-j", family, "rule", "show"])?)?;
        Ok(rules
            .as_array()
            .context("ip -j rule output")?
            .iter()
            .filter(|r| {
                r["priority"] == i.rule_priority
                    && r["table"] == route_table.as_str()
                    && r["fwmark"] == format!("{:#x}", i.tproxy_mark)
            })
            .count())
    };
    let routes = |family: &str| -> Result<usize> {
        let routes = json(&ns.exec(
            "ip",
            &["-j", family, "route", "show", "table", &route_table],
        )?)?;
        Ok(routes
            .as_array()
            .context("ip -j route output")?
            .iter()
            .filter(|r| r["type"] == "local" && r["dst"] == "default" && r["dev"] == "lo")
            .count())
    };
    Ok(Installed {
        table,
        rules_v4: rules("-4")?,
        rules_v6: rules("-6")?,
        routes_v4: routes("-4")?,
        routes_v6: routes("-6")?,
    })
}

/// `nft -j list table` of our table with handles removed, which differ between
/// loads of the same rules.
fn table_json(ns: &NetNsGuard, table: &str) -> Result<Value> {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("handle");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = json(&ns.exec("nft", &["-j", "list", "table", "inet", table])?)?;
    let objects = value["nftables"].as_array_mut().context("nft -j output")?;
    objects.retain(|o| o.get("metainfo").is_none());
    strip(&mut value);
    Ok(value)
}

#[test]
fn install_shows_table_rules_and_routes_then_remove_leaves_nothing() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    let config = GatewayConfig::default();
    let interception = ns.run(|| Ok(Interception::install(&config)?))?;
    assert_eq!(installed(&ns, &config)?, Installed::ONCE);

    let table = table_json(&ns, &config.intercept.table)?;
    let objects = table["nftables"].as_array().context("objects")?;
    let chains: Vec<&Value> = objects.iter().filter_map(|o| o.get("chain")).collect();
    let names: Vec<&str> = chains.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["prerouting", "intercept", "input"]);
    assert_eq!(chains[0]["type"], "filter");
    assert_eq!(chains[0]["hook"], "prerouting");
    assert_eq!(chains[0]["prio"], -150, "priority mangle");
    assert_eq!(chains[2]["type"], "filter");
    assert_eq!(chains[2]["hook"], "input");
    assert_eq!(chains[2]["prio"], 0, "priority filter");
    let input = ns.exec("nft", &["list", "chain", "inet", "sctp_gateway", "input"])?;
    assert!(input.contains("tcp dport 3129 counter"), "{input}");
    let mut sets: Vec<&str> = objects
        .iter()
        .filter_map(|o| o["set"]["name"].as_str())
        .collect();
    sets.sort_unstable();
    assert_eq!(
        sets,
        [
            "bypass_clients_v4",
            "bypass_clients_v6",
            "bypass_destinations_v4",
            "bypass_destinations_v6"
        ]
    );
    let rules = ns.exec(
        "nft",
        &["list", "chain", "inet", "sctp_gateway", "intercept"],
    )?;
    for wanted in [
        "meta mark 0x05c70002 return",
        "socket transparent 1 meta mark set 0x05c70001",
        "fib daddr type local return",
        "tproxy ip to :3129 meta mark set 0x05c70001",
        "tproxy ip6 to :3129 meta mark set 0x05c70001",
    ] {
        assert!(rules.contains(wanted), "no `{wanted}` in\n{rules}");
    }

    ns.run(|| Ok(interception.remove()?))?;
    assert_eq!(installed(&ns, &config)?, Installed::default());
    let ruleset = ns.exec("nft", &["list", "ruleset"])?;
    assert!(!ruleset.contains("sctp_gateway"), "{ruleset}");
    Ok(())
}

#[test]
fn drop_removes_what_install_added() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    let config = GatewayConfig::default();
    ns.run(|| {
        let interception = Interception::install(&config)?;
        drop(interception);
        Ok(())
    })?;
    assert_eq!(installed(&ns, &config)?, Installed::default());
    Ok(())
}

#[test]
fn leftovers_of_a_crashed_run_are_replaced_not_duplicated() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    let config = GatewayConfig::default();
    ns.run(|| {
        // A crash: nothing runs the removal.
        std::mem::forget(Interception::install(&config)?);
        Ok(())
    })?;
    assert_eq!(installed(&ns, &config)?, Installed::ONCE);
    let first = table_json(&ns, &config.intercept.table)?;

    let interception = ns.run(|| Ok(Interception::install(&config)?))?;
    assert_eq!(installed(&ns, &config)?, Installed::ONCE);
    assert_eq!(table_json(&ns, &config.intercept.table)?, first);

    ns.run(|| Ok(interception.remove()?))?;
    assert_eq!(installed(&ns, &config)?, Installed::default());
    Ok(())
}

#[test]
fn cleanup_removes_leftovers_and_then_has_nothing_to_do() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    let config = GatewayConfig::default();
    let report = ns.run(|| Ok(cleanup(&config)?))?;
    assert!(report.is_empty(), "{report}");
    assert_eq!(report.to_string(), "nothing to clean up");

    ns.run(|| {
        std::mem::forget(Interception::install(&config)?);
        Ok(())
    })?;
    let report = ns.run(|| Ok(cleanup(&config)?))?;
    assert_eq!(
        report,
        CleanupReport {
            table: Some(config.intercept.table.clone()),
            rules: 2,
            routes: 2,
        }
    );
    assert_eq!(installed(&ns, &config)?, Installed::default());

    let again = ns.run(|| Ok(cleanup(&config)?))?;
    assert!(again.is_empty(), "{again}");
    Ok(())
}

#[test]
fn cleanup_leaves_other_rules_and_tables_alone() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    let config = GatewayConfig::default();
    let i = &config.intercept;
    let (mark, table, priority) = (
        format!("{:#x}", i.tproxy_mark),
        i.route_table.to_string(),
        i.rule_priority.to_string(),
    );
    // Someone else's: same table and priority, other mark; another nft table.
    ns.exec(
        "ip",
        &[
            "rule", "add", "fwmark", "0x99", "lookup", &table, "priority", &priority,
        ],
    )?;
    ns.exec("nft", &["add", "table", "inet", "someone_else"])?;
    ns.run(|| {
        std::mem::forget(Interception::install(&config)?);
        Ok(())
    })?;
    ns.run(|| Ok(cleanup(&config)?))?;
    let rules = ns.exec("ip", &["rule", "show"])?;
    assert!(rules.contains("fwmark 0x99"), "{rules}");
    assert!(!rules.contains(&mark), "{rules}");
    let tables = ns.exec("nft", &["list", "tables"])?;
    assert_eq!(tables.trim(), "table inet someone_else");
    Ok(())
}

fn shipped_file() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../config/nftables.nft").to_owned()
}

#[test]
fn shipped_nftables_file_passes_nft_check() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    ns.exec("nft", &["-c", "-f", &shipped_file()])?;
    Ok(())
}

/// Loads `config`'s table through nft syntax in one namespace and through
/// `install` (JSON) in another, and compares what the kernel holds.
fn text_and_json_agree(config: &GatewayConfig) -> Result<()> {
    let from_text = NetNsGuard::new("gwi")?;
    let from_json = NetNsGuard::new("gwi")?;
    let path = std::env::temp_dir().join(format!("{}.nft", from_text.name()));
    std::fs::write(&path, ruleset_text(config))?;
    let loaded = from_text.exec("nft", &["-f", path.to_str().context("utf-8 path")?]);
    std::fs::remove_file(&path)?;
    loaded?;
    let interception = from_json.run(|| Ok(Interception::install(config)?))?;
    let table = &config.intercept.table;
    assert_eq!(
        table_json(&from_text, table)?,
        table_json(&from_json, table)?
    );
    from_json.run(|| Ok(interception.remove()?))?;
    Ok(())
}

#[test]
fn shipped_file_and_install_load_the_same_table() -> Result<()> {
    let ns = NetNsGuard::new("gwi")?;
    ns.exec("nft", &["-f", &shipped_file()])?;
    let config = GatewayConfig::default();
    let other = NetNsGuard::new("gwi")?;
    let interception = other.run(|| Ok(Interception::install(&config)?))?;
    assert_eq!(
        table_json(&ns, &config.intercept.table)?,
        table_json(&other, &config.intercept.table)?
    );
    other.run(|| Ok(interception.remove()?))?;
    Ok(())
}

#[test]
fn text_and_json_agree_for_a_configured_table() -> Result<()> {
    let mut config = GatewayConfig::default();
    config.intercept.table = "gw_custom".into();
    config.intercept.lan_interfaces = vec!["lan0".into(), "wlan0".into()];
    config.intercept.ports = vec![80, 8080];
    config.listen.port = 8129;
    config.bypass.destinations = ["10.0.0.0/8", "10.1.0.0/16", "2001:db8::/32", "192.0.2.1/32"]
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    config.bypass.clients = vec!["192.168.1.0/24".parse()?];
    config.validate()?;
    text_and_json_agree(&config)
}

/// A listening socket with `IP_TRANSPARENT`/`IPV6_TRANSPARENT`, as the gateway's
/// listener makes them.
fn transparent_listener(addr: SocketAddr) -> Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
        socket.set_ip_transparent_v6(true)?;
    } else {
        socket.set_ip_transparent_v4(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(16)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Accepts one connection, waiting at most a few seconds.
fn accept_within(listener: &TcpListener, limit: Duration) -> Result<Option<TcpStream>> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(Some(stream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if std::time::Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[test]
fn tproxy_hands_foreign_destinations_to_the_transparent_listener() -> Result<()> {
    let client = NetNsGuard::new("gwc")?;
    let gateway = NetNsGuard::new("gwg")?;
    veth(&client, &gateway, "veth0")?;
    add_address(&gateway, "veth0", "10.99.0.1/24")?;
    add_address(&gateway, "veth0", "fd99::1/64")?;
    add_address(&client, "veth0", "10.99.0.2/24")?;
    add_address(&client, "veth0", "fd99::2/64")?;
    client.exec("ip", &["route", "add", "default", "via", "10.99.0.1"])?;
    client.exec("ip", &["-6", "route", "add", "default", "via", "fd99::1"])?;

    let config = GatewayConfig::default();
    let port = config.listen.port;
    let (interception, v4, v6) = gateway.run(|| {
        let interception = Interception::install(&config)?;
        let v4 = transparent_listener(SocketAddr::from(([0, 0, 0, 0], port)))?;
        let v6 = transparent_listener(SocketAddr::from(([0u16; 8], port)))?;
        Ok((interception, v4, v6))
    })?;

    let cases: [(&TcpListener, SocketAddr); 2] = [
        (&v4, "203.0.113.7:80".parse()?),
        (&v6, "[2001:db8::7]:80".parse()?),
    ];
    for (listener, destination) in cases {
        let mut browser = client
            .run(|| {
                Ok(TcpStream::connect_timeout(
                    &destination,
                    Duration::from_secs(5),
                )?)
            })
            .with_context(|| format!("connecting to {destination}"))?;
        let mut accepted = accept_within(listener, Duration::from_secs(5))?
            .with_context(|| format!("the listener accepted nothing for {destination}"))?;
        assert_eq!(
            accepted.local_addr()?,
            destination,
            "the original destination"
        );
        assert_eq!(accepted.peer_addr()?, browser.local_addr()?);

        // Later packets of the flow (the socket rule) reach the same socket.
        browser.write_all(b"GET / HTTP/1.1\r\n\r\n")?;
        let mut request = [0; 18];
        accepted.set_read_timeout(Some(Duration::from_secs(5)))?;
        accepted.read_exact(&mut request)?;
        assert_eq!(&request, b"GET / HTTP/1.1\r\n\r\n");
        accepted.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")?;
        let mut response = [0; 27];
        browser.set_read_timeout(Some(Duration::from_secs(5)))?;
        browser.read_exact(&mut response)?;
        assert_eq!(&response, b"HTTP/1.1 204 No Content\r\n\r\n");
    }

    // HTTPS is not intercepted: with nothing beyond the gateway, it goes nowhere.
    let https: SocketAddr = "203.0.113.7:443".parse()?;
    let outcome = client
        .run(|| Ok(TcpStream::connect_timeout(&https, Duration::from_millis(500)).is_ok()))?;
    ensure!(!outcome, "a connection to port 443 succeeded");
    ensure!(
        accept_within(&v4, Duration::from_millis(100))?.is_none(),
        "port 443 reached the listener"
    );

    gateway.run(|| Ok(interception.remove()?))?;
    Ok(())
}

/// The hostile-input review's loop: port 3129 accepted plain connections to the
/// gateway's own addresses from the LAN and the WAN side, and the gateway then
/// forwarded each request to itself. A LAN and a WAN namespace around the
/// gateway's; the gateway's real listener and accept function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listening_port_is_closed_to_direct_connections_from_every_side() -> Result<()> {
    let lan = NetNsGuard::new("gwc")?;
    let gateway = NetNsGuard::new("gwg")?;
    let wan = NetNsGuard::new("gww")?;
    veth(&lan, &gateway, "lan0")?;
    veth(&wan, &gateway, "wan0")?;
    for (ns, ifname, cidrs) in [
        (&gateway, "lan0", ["10.99.0.1/24", "fd99::1/64"]),
        (&lan, "lan0", ["10.99.0.2/24", "fd99::2/64"]),
        (&gateway, "wan0", ["10.98.0.1/24", "fd98::1/64"]),
        (&wan, "wan0", ["10.98.0.2/24", "fd98::2/64"]),
    ] {
        for cidr in cidrs {
            add_address(ns, ifname, cidr)?;
        }
    }
    lan.exec("ip", &["route", "add", "default", "via", "10.99.0.1"])?;
    lan.exec("ip", &["-6", "route", "add", "default", "via", "fd99::1"])?;

    let config = GatewayConfig::default();
    let runtime = tokio::runtime::Handle::current();
    let (interception, sockets) = gateway.run(|| {
        let _reactor = runtime.enter();
        let interception = Interception::install(&config)?;
        let listener = gateway::listener::TransparentListener::bind(&config.listen)?;
        Ok((interception, listener.into_sockets()))
    })?;
    let (flows, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    for socket in sockets {
        let flows = flows.clone();
        tokio::spawn(async move {
            while let Ok(flow) = gateway::listener::accept(&socket).await {
                let _ = flows.send(flow.original_dst);
            }
        });
    }

    let port = config.listen.port;
    let direct: [(&NetNsGuard, SocketAddr); 4] = [
        (&lan, SocketAddr::from(([10, 99, 0, 1], port))),
        (&lan, SocketAddr::new("fd99::1".parse()?, port)),
        (&wan, SocketAddr::from(([10, 98, 0, 1], port))),
        (&wan, SocketAddr::new("fd98::1".parse()?, port)),
    ];
    // The table drops them: the SYN is never answered.
    for (ns, target) in direct {
        let outcome = ns.run(move || {
            Ok(TcpStream::connect_timeout(&target, Duration::from_secs(1)).map_err(|e| e.kind()))
        })?;
        assert_eq!(
            outcome.err(),
            Some(std::io::ErrorKind::TimedOut),
            "a direct connection to {target} was not dropped"
        );
    }
    // Interception still delivers browsers' flows.
    let foreign: SocketAddr = "203.0.113.7:80".parse()?;
    let _browser = lan.run(move || {
        Ok(TcpStream::connect_timeout(
            &foreign,
            Duration::from_secs(5),
        )?)
    })?;
    let delivered = tokio::time::timeout(Duration::from_secs(5), accepted.recv()).await;
    assert_eq!(delivered.ok().flatten(), Some(foreign));

    // Without the table's rule (someone else's rules, `intercept.manage =
    // false`), the listener resets them itself and never serves them.
    gateway.exec(
        "nft",
        &["delete", "chain", "inet", &config.intercept.table, "input"],
    )?;
    for (ns, target) in direct {
        let outcome = ns.run(move || {
            let mut answer = Vec::new();
            let exchanged = TcpStream::connect_timeout(&target, Duration::from_secs(5)).and_then(
                |mut stream| {
                    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                    stream.write_all(b"GET /loop HTTP/1.1\r\nHost: loop.example\r\n\r\n")?;
                    stream.read_to_end(&mut answer)
                },
            );
            Ok((exchanged.map_err(|e| e.kind()), answer))
        })?;
        // The handshake completes in the kernel before the listener sees the
        // connection, so the reset may arrive while connecting, writing or
        // reading; never an answer.
        assert!(
            matches!(
                outcome,
                (Err(std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe), ref answer) if answer.is_empty()
            ),
            "the listener did not reset a direct connection to {target}: {outcome:?}"
        );
    }
    assert!(
        accepted.try_recv().is_err(),
        "accept returned a direct connection"
    );
    gateway.run(|| Ok(interception.remove()?))?;
    Ok(())
}

/// `config` with `intercept.tls_port = 443` and one origin serving
/// 203.0.113.0/24 and 2001:db8:203::/48.
fn tls_config() -> Result<GatewayConfig> {
    let config: GatewayConfig = toml::from_str(
        r#"
        [intercept]
        ports = [80, 443]
        tls_port = 443
        [[origin]]
        name = "demo"
        address = "127.0.0.1:9000"
        destinations = ["203.0.113.0/24", "2001:db8:203::/48"]
        "#,
    )?;
    config.validate()?;
    Ok(config)
}

#[test]
fn text_and_json_agree_with_a_tls_port() -> Result<()> {
    text_and_json_agree(&tls_config()?)
}

/// Packets counted by the IPv4 and the IPv6 TPROXY rule: each flow the gateway
/// takes passes exactly one of them (its first packet).
fn tproxy_counters(ns: &NetNsGuard, table: &str) -> Result<(u64, u64)> {
    let chain = json(&ns.exec("nft", &["-j", "list", "chain", "inet", table, "intercept"])?)?;
    let mut counts = (None, None);
    for object in chain["nftables"].as_array().context("nft -j output")? {
        let Some(expr) = object["rule"]["expr"].as_array() else {
            continue;
        };
        let family = expr.iter().find_map(|e| e["tproxy"]["family"].as_str());
        let packets = expr.iter().find_map(|e| e["counter"]["packets"].as_u64());
        match (family, packets) {
            (Some("ip"), Some(n)) => counts.0 = Some(n),
            (Some("ip6"), Some(n)) => counts.1 = Some(n),
            _ => {}
        }
    }
    Ok((
        counts.0.context("no IPv4 TPROXY counter")?,
        counts.1.context("no IPv6 TPROXY counter")?,
    ))
}

/// Issue 19: with `intercept.tls_port`, TCP to 443 is intercepted for the
/// origins' destinations only. A client namespace routes through the gateway's
/// to a server namespace holding an unmapped address per family: HTTPS to it
/// reaches the server from the client's own address (routed, not proxied), the
/// transparent listener sees nothing and the TPROXY counters stay at zero;
/// HTTPS to an origin's destination lands on the listener and counts.
/// Client, gateway and server namespaces, the gateway routing between the
/// other two; the server holds the unmapped 198.51.100.9 and 2001:db8:51::9.
fn client_gateway_server() -> Result<[NetNsGuard; 3]> {
    let client = NetNsGuard::new("gwc")?;
    let gateway = NetNsGuard::new("gwg")?;
    let server = NetNsGuard::new("gws")?;
    veth(&client, &gateway, "lan0")?;
    veth(&server, &gateway, "wan0")?;
    for (ns, ifname, cidr) in [
        (&gateway, "lan0", "10.99.0.1/24"),
        (&gateway, "lan0", "fd99::1/64"),
        (&client, "lan0", "10.99.0.2/24"),
        (&client, "lan0", "fd99::2/64"),
        (&gateway, "wan0", "10.98.0.1/24"),
        (&gateway, "wan0", "fd98::1/64"),
        (&server, "wan0", "10.98.0.2/24"),
        (&server, "wan0", "fd98::2/64"),
        (&server, "lo", "198.51.100.9/32"),
        (&server, "lo", "2001:db8:51::9/128"),
    ] {
        add_address(ns, ifname, cidr)?;
    }
    client.exec("ip", &["route", "add", "default", "via", "10.99.0.1"])?;
    client.exec("ip", &["-6", "route", "add", "default", "via", "fd99::1"])?;
    server.exec("ip", &["route", "add", "default", "via", "10.98.0.1"])?;
    server.exec("ip", &["-6", "route", "add", "default", "via", "fd98::1"])?;
    gateway.exec(
        "ip",
        &["route", "add", "198.51.100.9/32", "via", "10.98.0.2"],
    )?;
    gateway.exec(
        "ip",
        &["-6", "route", "add", "2001:db8:51::9/128", "via", "fd98::2"],
    )?;
    gateway.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    gateway.exec("sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"])?;

    Ok([client, gateway, server])
}

#[test]
fn https_is_intercepted_only_for_the_origins_destinations() -> Result<()> {
    let [client, gateway, server] = client_gateway_server()?;
    let config = tls_config()?;
    let table = config.intercept.table.clone();
    let port = config.listen.port;
    let (interception, v4, v6) = gateway.run(|| {
        let interception = Interception::install(&config)?;
        let v4 = transparent_listener(SocketAddr::from(([0, 0, 0, 0], port)))?;
        let v6 = transparent_listener(SocketAddr::from(([0u16; 8], port)))?;
        Ok((interception, v4, v6))
    })?;
    let unmapped: [(SocketAddr, SocketAddr); 2] = [
        ("198.51.100.9:443".parse()?, "10.99.0.2:0".parse()?),
        ("[2001:db8:51::9]:443".parse()?, "[fd99::2]:0".parse()?),
    ];
    for (destination, client_address) in unmapped {
        let server_listener = server.run(move || Ok(TcpListener::bind(destination)?))?;
        server_listener.set_nonblocking(true)?;
        let browser = client
            .run(|| {
                Ok(TcpStream::connect_timeout(
                    &destination,
                    Duration::from_secs(5),
                )?)
            })
            .with_context(|| format!("connecting to unmapped {destination}"))?;
        let reached = accept_within(&server_listener, Duration::from_secs(5))?
            .with_context(|| format!("the server never saw the flow to {destination}"))?;
        assert_eq!(reached.local_addr()?, destination);
        assert_eq!(
            reached.peer_addr()?.ip(),
            client_address.ip(),
            "the flow to {destination} was proxied, not routed"
        );
        assert_eq!(browser.peer_addr()?, destination);
    }
    ensure!(
        accept_within(&v4, Duration::from_millis(100))?.is_none()
            && accept_within(&v6, Duration::from_millis(100))?.is_none(),
        "unmapped HTTPS reached the transparent listener"
    );
    assert_eq!(tproxy_counters(&gateway, &table)?, (0, 0));

    let mapped: [(&TcpListener, SocketAddr); 2] = [
        (&v4, "203.0.113.7:443".parse()?),
        (&v6, "[2001:db8:203::7]:443".parse()?),
    ];
    for (listener, destination) in mapped {
        let _browser = client
            .run(|| {
                Ok(TcpStream::connect_timeout(
                    &destination,
                    Duration::from_secs(5),
                )?)
            })
            .with_context(|| format!("connecting to mapped {destination}"))?;
        let accepted = accept_within(listener, Duration::from_secs(5))?
            .with_context(|| format!("the listener accepted nothing for {destination}"))?;
        assert_eq!(accepted.local_addr()?, destination);
    }
    let (counted_v4, counted_v6) = tproxy_counters(&gateway, &table)?;
    ensure!(
        counted_v4 >= 1 && counted_v6 >= 1,
        "the origins' HTTPS was not counted: {counted_v4} IPv4, {counted_v6} IPv6 packets"
    );
    gateway.run(|| Ok(interception.remove()?))?;
    Ok(())
}
