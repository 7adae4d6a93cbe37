//! The browser-flow programs on the gateway's LAN side: `tc_tcp_egress`
//! (what was sent toward each browser) and `tc_tcp_ingress` (what each
//! browser acknowledged), both TC classifiers on the same interfaces, one
//! map of [`TcpFlowKey`] → [`TcpFlowCounters`] (docs/ebpf.md, "Browser flows").

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::Path;

use aya::{
    Ebpf,
    maps::{Array, MapError, PerCpuHashMap},
    programs::{SchedClassifier, TcAttachType, tc::SchedClassifierLinkId},
};
use ebpf_common::{TcpConfig, TcpFlowCounters, TcpFlowKey, TcpStats};

use crate::{EbpfError, attach_tc, hook_stats, map_error, per_cpu_hash};

/// Name of the TC classifier that counts what leaves toward browsers.
pub const TC_TCP_EGRESS_PROGRAM: &str = "tc_tcp_egress";
/// Name of the TC classifier that counts browsers' acknowledgements.
pub const TC_TCP_INGRESS_PROGRAM: &str = "tc_tcp_ingress";
/// Per-CPU LRU hash map `TcpFlowKey` → `TcpFlowCounters`.
pub const TCP_FLOWS_MAP: &str = "TCP_FLOWS";
/// Array of one `TcpConfig`.
const TCP_CONFIG_MAP: &str = "TCP_CONFIG";
/// Per-CPU array of two `TcpStats` (ingress, egress).
const TCP_STATS_MAP: &str = "TCP_STATS";

/// Which of the two programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpHook {
    /// `tc_tcp_ingress`: browsers' packets arriving, for their ACKs.
    Ingress,
    /// `tc_tcp_egress`: packets leaving toward browsers.
    Egress,
}

impl TcpHook {
    /// The program's name in the object.
    pub const fn program(self) -> &'static str {
        match self {
            Self::Ingress => TC_TCP_INGRESS_PROGRAM,
            Self::Egress => TC_TCP_EGRESS_PROGRAM,
        }
    }

    const fn attach_type(self) -> TcAttachType {
        match self {
            Self::Ingress => TcAttachType::Ingress,
            Self::Egress => TcAttachType::Egress,
        }
    }
}

/// The loaded browser-flow programs and their maps, attached to any number
/// of interfaces (both hooks each), detached on drop.
#[derive(Debug)]
pub struct TcpFlowAccounting {
    ebpf: Ebpf,
    links: Vec<(String, TcpHook, SchedClassifierLinkId)>,
}

impl TcpFlowAccounting {
    /// Loads the object at `path`, verifies both programs into the kernel and
    /// has them count the flows of `server_ports` (the intercepted ports; at
    /// most [`ebpf_common::TCP_CONFIG_PORTS`], none meaning 80), without attaching anything.
    pub fn load_file(path: &Path, server_ports: &[u16]) -> Result<Self, EbpfError> {
        let mut ebpf = Ebpf::load_file(path).map_err(|source| EbpfError::Load {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        for hook in [TcpHook::Egress, TcpHook::Ingress] {
            classifier(&mut ebpf, hook)?
                .load()
                .map_err(|source| EbpfError::Verify {
                    name: hook.program(),
                    source: Box::new(source),
                })?;
        }
        for name in [TCP_FLOWS_MAP, TCP_STATS_MAP, TCP_CONFIG_MAP] {
            if ebpf.map(name).is_none() {
                return Err(EbpfError::MissingMap { name });
            }
        }
        let mut this = Self {
            ebpf,
            links: Vec::new(),
        };
        this.configure(server_ports)?;
        Ok(this)
    }

    /// Writes the server ports to count (the first [`ebpf_common::TCP_CONFIG_PORTS`]);
    /// takes effect with the next packet.
    fn configure(&mut self, server_ports: &[u16]) -> Result<(), EbpfError> {
        let mut config = TcpConfig::default();
        for (slot, port) in config.ports.iter_mut().zip(server_ports) {
            *slot = *port;
        }
        let map = self
            .ebpf
            .map_mut(TCP_CONFIG_MAP)
            .ok_or(EbpfError::MissingMap {
                name: TCP_CONFIG_MAP,
            })?;
        let mut array = Array::<_, TcpConfig>::try_from(map)
            .map_err(|source| map_error(TCP_CONFIG_MAP, source))?;
        array
            .set(0, config, 0)
            .map_err(|source| map_error(TCP_CONFIG_MAP, source))
    }

    /// Attaches both programs to `interface` (the LAN side: egress toward
    /// browsers, ingress from them).
    pub fn attach(&mut self, interface: &str) -> Result<(), EbpfError> {
        for hook in [TcpHook::Egress, TcpHook::Ingress] {
            let program = classifier(&mut self.ebpf, hook)?;
            let link = attach_tc(program, hook.program(), interface, hook.attach_type())?;
            self.links.push((interface.to_owned(), hook, link));
        }
        Ok(())
    }

    /// Detaches everything. Dropping the [`TcpFlowAccounting`] does the same;
    /// this reports the first failure.
    pub fn detach(&mut self) -> Result<(), EbpfError> {
        let mut first_error = None;
        for (interface, hook, link) in std::mem::take(&mut self.links) {
            let detached = classifier(&mut self.ebpf, hook).and_then(|program| {
                program.detach(link).map_err(|source| EbpfError::Detach {
                    name: hook.program(),
                    interface,
                    source: Box::new(source),
                })
            });
            if let Err(error) = detached {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The interfaces the programs are attached to.
    pub fn attached_interfaces(&self) -> Vec<&str> {
        let mut interfaces: Vec<&str> = self.links.iter().map(|(i, _, _)| i.as_str()).collect();
        interfaces.dedup();
        interfaces
    }

    /// The file descriptor of a loaded program, for [`crate::test_run`].
    pub fn program_fd(&self, hook: TcpHook) -> Result<BorrowedFd<'_>, EbpfError> {
        crate::program_fd(&self.ebpf, hook.program())
    }

    /// One flow's counters, folded over CPUs; `None` if the programs have not
    /// seen it (or the LRU map evicted it).
    pub fn flow(&self, key: &TcpFlowKey) -> Result<Option<TcpFlowCounters>, EbpfError> {
        match self.flows_map()?.get(key, 0) {
            Ok(per_cpu) => Ok(Some(fold(per_cpu.iter()))),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(map_error(TCP_FLOWS_MAP, source)),
        }
    }

    /// Every flow the map holds, folded over CPUs.
    pub fn flows(&self) -> Result<BTreeMap<TcpFlowKey, TcpFlowCounters>, EbpfError> {
        let mut flows = BTreeMap::new();
        for entry in self.flows_map()?.iter() {
            let (key, per_cpu) = entry.map_err(|source| map_error(TCP_FLOWS_MAP, source))?;
            flows.insert(key, fold(per_cpu.iter()));
        }
        Ok(flows)
    }

    /// What each program saw, summed over CPUs: (ingress, egress).
    pub fn stats(&self) -> Result<(TcpStats, TcpStats), EbpfError> {
        hook_stats(&self.ebpf, TCP_STATS_MAP, TcpStats::add)
    }

    fn flows_map(
        &self,
    ) -> Result<PerCpuHashMap<&aya::maps::MapData, TcpFlowKey, TcpFlowCounters>, EbpfError> {
        per_cpu_hash(&self.ebpf, TCP_FLOWS_MAP)
    }
}

fn fold<'a>(per_cpu: impl Iterator<Item = &'a TcpFlowCounters>) -> TcpFlowCounters {
    per_cpu.fold(TcpFlowCounters::default(), |sum, cpu| sum.merge(*cpu))
}

/// The program of `hook` in `ebpf`, as a [`SchedClassifier`].
fn classifier(ebpf: &mut Ebpf, hook: TcpHook) -> Result<&mut SchedClassifier, EbpfError> {
    let name = hook.program();
    ebpf.program_mut(name)
        .and_then(|program| <&mut SchedClassifier>::try_from(program).ok())
        .ok_or(EbpfError::MissingProgram { name })
}
