//! The shipped config/origin.toml's listener set binds whole: its IPv4 and
//! IPv6 wildcard addresses share one port, and with the backend it chooses
//! both are bound (before IPv6 sockets were made IPv6-only, `[::]:9899` failed
//! with "Address already in use" beside `0.0.0.0:9899` and the origin had no
//! IPv6 listener).
//!
//! The port is an ephemeral one in place of 9899, so that a running origin or
//! a parallel test does not decide the outcome. Skipped, with the reason
//! printed, on a host without IPv6 loopback.

use std::net::{Ipv6Addr, SocketAddr};
use std::path::Path;

use gateway_transport::Listener;
use origin::config::OriginConfig;

#[tokio::test]
async fn the_shipped_listener_set_binds_both_families() {
    if let Err(e) = std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)) {
        println!("SKIPPED: no IPv6 loopback on this host ({e})");
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/origin.toml");
    let text = std::fs::read_to_string(&path).expect("config/origin.toml");
    let config = OriginConfig::from_toml(&text).expect("the shipped config parses");
    let addresses = &config.listen.addresses;
    assert_eq!(
        addresses.len(),
        2,
        "the shipped set is one IPv4 and one IPv6 address: {addresses:?}"
    );
    assert!(addresses.iter().all(|a| a.ip().is_unspecified()));
    assert!(addresses[0].is_ipv4() && addresses[1].is_ipv6());
    assert_eq!(addresses[0].port(), addresses[1].port(), "one shared port");

    let (backend, _) = config.listen.backend.decide();
    let mut port = 0;
    let mut bound = Vec::new();
    for addr in addresses {
        let addr = SocketAddr::new(addr.ip(), port);
        let listener = Listener::bind(backend, addr, &config.transport)
            .await
            .unwrap_or_else(|e| panic!("{backend} cannot listen on {addr}: {e}"));
        port = listener.local_addr().expect("bound").port();
        bound.push(listener);
    }
    let ports: Vec<u16> = bound
        .iter()
        .map(|l| l.local_addr().expect("bound").port())
        .collect();
    assert_eq!(ports, [port, port]);
}
