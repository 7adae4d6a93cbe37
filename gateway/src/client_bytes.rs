//! Bytes written to browser connections, per LAN client: the table behind
//! `gateway_client_sent_bytes_total` ([`crate::metrics`] encodes it) and the
//! tally each connection's writes count into ([`ClientTally`], held by
//! [`CountedStream`](crate::browser_socket::CountedStream)).
//!
//! A leaf: it imports nothing of the crate but [`crate::sync`], so the
//! counted browser streams ([`crate::browser_socket`]) can count into it while
//! the metrics read it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Most LAN clients `gateway_client_sent_bytes_total` names. A LAN may have
/// hundreds of clients (and a scan or a guest network thousands of
/// addresses): past this many, the client least recently sent to leaves the
/// metric and its bytes are added to the `client="other"` series, so the sum
/// over every series still counts every byte sent, and the series stay few
/// enough for Prometheus.
pub const MAX_CLIENT_SERIES: usize = 256;

/// The `client` label of the bytes of clients no longer named.
pub const OTHER_CLIENTS: &str = "other";

/// Bytes written to browser connections, per client address, for at most
/// a limited number of clients (least recently sent to evicted first).
///
/// A client that comes back after its eviction starts again at 0: Prometheus'
/// `rate()` and `increase()` read that as a counter reset, as they should.
#[derive(Debug)]
pub struct ClientBytes {
    limit: usize,
    table: Mutex<ClientTable>,
}

#[derive(Debug, Default)]
struct ClientTable {
    clients: HashMap<IpAddr, ClientEntry>,
    /// Ticks at every write: the recency order of the entries.
    tick: u64,
    /// Bytes of the clients evicted so far.
    other: u64,
}

#[derive(Debug, Clone, Copy)]
struct ClientEntry {
    bytes: u64,
    last: u64,
}

impl Default for ClientBytes {
    fn default() -> Self {
        Self::with_limit(MAX_CLIENT_SERIES)
    }
}

impl ClientBytes {
    /// Where a connection of `client` counts the bytes written to it.
    pub fn tally(table: &Arc<Self>, client: IpAddr) -> ClientTally {
        ClientTally {
            table: Arc::clone(table),
            client,
        }
    }

    /// A table that names at most `limit` clients (at least 1).
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            table: Mutex::new(ClientTable::default()),
        }
    }

    /// `bytes` were written to a connection of `client`. An IPv4 client on
    /// an IPv6 socket (`::ffff:a.b.c.d`) counts as its IPv4 address.
    pub fn add(&self, client: IpAddr, bytes: u64) {
        let client = client.to_canonical();
        let mut table = crate::sync::lock(&self.table);
        table.tick += 1;
        let tick = table.tick;
        if let Some(entry) = table.clients.get_mut(&client) {
            entry.bytes += bytes;
            entry.last = tick;
            return;
        }
        if table.clients.len() >= self.limit {
            table.evict_least_recent();
        }
        table
            .clients
            .insert(client, ClientEntry { bytes, last: tick });
    }

    /// The clients named now with their bytes (in no particular order), and
    /// the bytes of those no longer named.
    pub fn snapshot(&self) -> (Vec<(IpAddr, u64)>, u64) {
        let table = crate::sync::lock(&self.table);
        let named = table.clients.iter().map(|(ip, e)| (*ip, e.bytes)).collect();
        (named, table.other)
    }
}

impl ClientTable {
    /// O(clients), only when a new client arrives at a full table.
    fn evict_least_recent(&mut self) {
        let oldest = self
            .clients
            .iter()
            .min_by_key(|(_, e)| e.last)
            .map(|(ip, _)| *ip);
        if let Some(entry) = oldest.and_then(|ip| self.clients.remove(&ip)) {
            self.other += entry.bytes;
        }
    }
}

/// What one browser connection counts its writes into (see
/// [`CountedStream`](crate::browser_socket::CountedStream)).
#[derive(Debug, Clone)]
pub struct ClientTally {
    table: Arc<ClientBytes>,
    client: IpAddr,
}

impl ClientTally {
    /// `bytes` were written to the client.
    pub fn add(&self, bytes: u64) {
        self.table.add(self.client, bytes);
    }
}
