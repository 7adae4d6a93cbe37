//! The origin's eBPF input: `tc_sctp` on the egress of the interface toward the
//! gateways, loaded when the kernel SCTP backend runs, so that the scheduler
//! knows how many bytes of each stream still wait in the kernel's send queue
//! (no socket option says it per stream; docs/ebpf.md, "The origin's use of
//! it"). The arithmetic per association is [`crate::egress`]; this module
//! loads, attaches, reads, and says at start how it runs and why.
//!
//! What it never does: fail the origin. Without the object, the interface,
//! the privileges (`CAP_BPF` with `CAP_NET_ADMIN`, or root) or a verifier that
//! takes the program, the origin runs without per-stream depth for kernel SCTP
//! (as before: the kernel's send buffer is the only limit) and says so once.
//! Everything attached is detached when the last [`EgressCounters`] is dropped
//! (nothing is pinned; a killed origin's TCX link goes with its descriptors, a
//! netlink filter on kernels before 6.6 stays until `tc filter del` or the
//! interface goes).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use ebpf_common::{StreamCounters, StreamKey, WalkerStats};
use ebpf_loader::{EbpfError, SctpAccounting, SctpAccountingConfig};
use serde::{Deserialize, Serialize};

use crate::sync::lock;

/// `[ebpf]` of origin.toml: where `tc_sctp` comes from and where it attaches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EbpfConfig {
    /// The `ebpf-programs` object (`cargo xtask build-ebpf`); none: no eBPF.
    pub object: Option<PathBuf>,
    /// The interface the origin's SCTP packets leave on (`tc_sctp` attaches to
    /// its egress).
    pub interface: Option<String>,
}

/// The loaded and attached `tc_sctp`, shared by every association's driver.
#[derive(Debug)]
pub struct EgressCounters {
    accounting: Mutex<SctpAccounting>,
    interface: String,
    /// The latest per-stream depth of every association that has one, by
    /// peer: what the scheduler works with, for operators and tests.
    depths: Mutex<BTreeMap<SocketAddr, Vec<(u16, u64)>>>,
}

/// Why there is no eBPF input, for the start-up line.
#[derive(Debug, thiserror::Error)]
pub enum EgressUnavailable {
    /// The configuration does not ask for it.
    #[error("{0}")]
    NotConfigured(&'static str),
    /// Loading or attaching failed.
    #[error("{what}: {}", chain(source))]
    Failed {
        /// What was tried.
        what: String,
        /// The loader's error (the kernel's reason is in its sources).
        #[source]
        source: EbpfError,
    },
}

impl EgressCounters {
    /// Loads the object and attaches `tc_sctp` to the egress of the configured
    /// interface (in the calling thread's network namespace).
    pub fn start(config: &EbpfConfig) -> Result<Self, EgressUnavailable> {
        let object = config
            .object
            .as_ref()
            .ok_or(EgressUnavailable::NotConfigured("ebpf.object is not set"))?;
        let interface = config
            .interface
            .as_ref()
            .ok_or(EgressUnavailable::NotConfigured(
                "ebpf.interface is not set: no interface toward the gateways for tc_sctp",
            ))?;
        let mut accounting = SctpAccounting::load_file(object, SctpAccountingConfig::default())
            .map_err(|source| EgressUnavailable::Failed {
                what: format!(
                    "loading {} failed (BPF needs root or CAP_BPF with CAP_NET_ADMIN, and a \
                     kernel with BTF)",
                    object.display()
                ),
                source,
            })?;
        accounting
            .attach_egress(interface)
            .map_err(|source| EgressUnavailable::Failed {
                what: format!("attaching tc_sctp to the egress of {interface} failed"),
                source,
            })?;
        Ok(Self {
            accounting: Mutex::new(accounting),
            interface: interface.clone(),
            depths: Mutex::default(),
        })
    }

    /// The interface `tc_sctp` is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Every stream key and its counters (one walk over the map).
    pub fn streams(&self) -> Result<Vec<(StreamKey, StreamCounters)>, EbpfError> {
        let snapshot = self.accounting().snapshot()?;
        Ok(snapshot.streams.into_iter().collect())
    }

    /// One stream key's counters (one lookup).
    pub fn stream(&self, key: &StreamKey) -> Result<Option<StreamCounters>, EbpfError> {
        self.accounting().stream_counters(key)
    }

    /// What `tc_sctp` saw at egress (chunk limits and malformed packets
    /// included: a growing `chunk_limit` means undercounted packets).
    pub fn egress_stats(&self) -> Result<WalkerStats, EbpfError> {
        Ok(self.accounting().walker_stats()?.1)
    }

    /// The latest per-stream send-queue depth of each association (streams
    /// with bytes queued; an association with none queued has an empty list;
    /// one without a figure is absent).
    pub fn depths(&self) -> BTreeMap<SocketAddr, Vec<(u16, u64)>> {
        lock(&self.depths).clone()
    }

    /// A driver's latest figures for the association with `peer`.
    pub(crate) fn publish(&self, peer: SocketAddr, per_stream: &[(u16, u64)]) {
        let mut depths = lock(&self.depths);
        match depths.get_mut(&peer) {
            Some(known) if known.as_slice() == per_stream => {}
            Some(known) => per_stream.clone_into(known),
            None => {
                depths.insert(peer, per_stream.to_vec());
            }
        }
    }

    /// The association with `peer` ended or has no figure any more.
    pub(crate) fn forget(&self, peer: SocketAddr) {
        lock(&self.depths).remove(&peer);
    }

    fn accounting(&self) -> std::sync::MutexGuard<'_, SctpAccounting> {
        lock(&self.accounting)
    }
}

/// An error with its sources, `: ` apart (the kernel's reason is in a source).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
