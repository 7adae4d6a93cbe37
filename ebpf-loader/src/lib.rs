//! The userspace half of `ebpf-programs`: loads the object (built by `cargo
//! xtask build-ebpf`), attaches its programs to interfaces and reads their maps
//! into plain Rust values. Both daemons use it: the gateway counts what arrives
//! (`xdp_sctp` on its WAN side), the origin with kernel SCTP what leaves
//! (`tc_sctp` on its uplink, docs/ebpf.md).
//!
//! - [`SctpAccounting`]: the SCTP chunk walker, `xdp_sctp` on ingress and
//!   `tc_sctp` on egress, with per-stream and per-association counters
//!   ([`SctpSnapshot`] for all of them, [`SctpAccounting::stream_counters`] for
//!   one key; docs/ebpf.md describes the maps);
//! - [`TcpFlowAccounting`]: `tc_tcp_egress` and `tc_tcp_ingress` on the
//!   gateway's LAN side, per browser flow: bytes sent toward the browser and
//!   its acknowledgements (the bytes in flight to each browser);
//! - [`XdpCounter`]: the frame counter `xdp_count` (the load test's probe);
//! - [`monotonic_ns`]: the clock the programs' timestamps are on.
//!
//! What it never does: build the object, raise rlimits, pin anything in bpffs, or
//! change an interface other than the ones it attaches to. Everything it attaches
//! is detached when its owner is dropped (aya owns the links: XDP and TCX links
//! are file descriptors), so a crashed daemon leaves no program behind once its
//! file descriptors close. On kernels before 6.6 (no TCX) the TC program is
//! attached through a `clsact` qdisc, which it adds if missing and leaves in place
//! (empty, it does nothing).
//!
//! Where to start: [`SctpAccounting::load_file`], then
//! [`SctpAccounting::attach_ingress`] / [`SctpAccounting::attach_egress`] and
//! [`SctpAccounting::snapshot`]. [`test_run`] runs a loaded program on a packet
//! in the kernel (`BPF_PROG_TEST_RUN`), for tests and per-packet cost figures.
//!
//! Privileges: loading needs `CAP_BPF` (or `CAP_SYS_ADMIN`) and attaching needs
//! `CAP_NET_ADMIN`; without them the load fails with [`EbpfError::Load`] carrying
//! the kernel's `EPERM`. Interfaces are looked up in the network namespace of the
//! calling thread.

use std::{
    collections::BTreeMap,
    fmt,
    os::fd::{AsFd as _, BorrowedFd},
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    maps::{Array, MapError, PerCpuArray, PerCpuHashMap},
    programs::{
        ProgramError, SchedClassifier, TcAttachType, Xdp, XdpFlags, tc::SchedClassifierLinkId,
        xdp::XdpLinkId,
    },
};
use ebpf_common::{
    AssocCounters, AssocKey, PacketCounters, STATS_EGRESS, STATS_INGRESS, SctpConfig,
    StreamCounters, StreamKey, WalkerStats,
};

pub mod clock;
mod tcp;
pub mod test_run;

pub use clock::monotonic_ns;
pub use tcp::{
    TC_TCP_EGRESS_PROGRAM, TC_TCP_INGRESS_PROGRAM, TCP_FLOWS_MAP, TcpFlowAccounting, TcpHook,
};

/// Name of the XDP program that accounts SCTP chunks arriving on an interface.
pub const XDP_SCTP_PROGRAM: &str = "xdp_sctp";
/// Name of the TC classifier that accounts SCTP chunks leaving an interface.
pub const TC_SCTP_PROGRAM: &str = "tc_sctp";
/// Per-CPU LRU hash map `StreamKey` → `StreamCounters`.
pub const SCTP_STREAMS_MAP: &str = "SCTP_STREAMS";
/// Per-CPU LRU hash map `AssocKey` → `AssocCounters`.
pub const SCTP_ASSOCS_MAP: &str = "SCTP_ASSOCS";
/// Array of one `SctpConfig`.
pub const SCTP_CONFIG_MAP: &str = "SCTP_CONFIG";
/// Per-CPU array of two `WalkerStats` (ingress, egress).
pub const SCTP_STATS_MAP: &str = "SCTP_STATS";

/// Name of the XDP program that counts packets and bytes (`ebpf-programs`'s
/// `xdp_count`).
pub const XDP_COUNT_PROGRAM: &str = "xdp_count";

/// Name of the per-CPU array that `xdp_count` counts into; entry 0 holds the totals.
pub const COUNTERS_MAP: &str = "COUNTERS";

/// Environment variable through which `cargo xtask` hands the object's path to
/// tests and tools.
pub const OBJECT_PATH_ENV: &str = "GATEWAY_EBPF_OBJECT";

/// What failed while loading, attaching or reading the eBPF programs.
#[derive(Debug, thiserror::Error)]
pub enum EbpfError {
    /// The object could not be read or parsed, or the kernel refused one of its
    /// maps (`EPERM` here usually means missing privileges).
    #[error("cannot load eBPF object {}", path.display())]
    Load {
        /// The object file.
        path: PathBuf,
        /// aya's reason (boxed: aya's errors are large and this is the cold path).
        #[source]
        source: Box<aya::EbpfError>,
    },
    /// The object has no program of the expected name or type: it was built
    /// from a different `ebpf-programs`.
    #[error("eBPF object has no program named {name} of the expected type")]
    MissingProgram {
        /// The program looked for.
        name: &'static str,
    },
    /// The object has no map of the expected name.
    #[error("eBPF object has no map named {name}")]
    MissingMap {
        /// The map looked for.
        name: &'static str,
    },
    /// The verifier rejected the program.
    #[error("the kernel rejected program {name}")]
    Verify {
        /// The program.
        name: &'static str,
        /// aya's reason; for a verifier rejection it carries the verifier log.
        #[source]
        source: Box<ProgramError>,
    },
    /// Attaching to the interface failed (unknown interface, mode not supported
    /// by the driver, or another program already attached).
    #[error("cannot attach {name} to {interface} in {mode} mode")]
    Attach {
        /// The program.
        name: &'static str,
        /// The interface, in the calling thread's network namespace.
        interface: String,
        /// The requested mode.
        mode: XdpMode,
        /// aya's reason.
        #[source]
        source: Box<ProgramError>,
    },
    /// Attaching a TC classifier to the interface failed.
    #[error("cannot attach {name} to the {hook} of {interface}")]
    AttachTc {
        /// The program.
        name: &'static str,
        /// The interface, in the calling thread's network namespace.
        interface: String,
        /// `ingress` or `egress`.
        hook: &'static str,
        /// aya's reason.
        #[source]
        source: Box<ProgramError>,
    },
    /// Adding the `clsact` qdisc (needed before TCX, kernels < 6.6) failed.
    #[error("cannot add a clsact qdisc to {interface}")]
    Clsact {
        /// The interface.
        interface: String,
        /// The netlink error.
        #[source]
        source: std::io::Error,
    },
    /// Detaching from the interface failed.
    #[error("cannot detach {name} from {interface}")]
    Detach {
        /// The program.
        name: &'static str,
        /// The interface.
        interface: String,
        /// aya's reason.
        #[source]
        source: Box<ProgramError>,
    },
    /// A map could not be opened or read.
    #[error("cannot read map {name}")]
    Map {
        /// The map.
        name: &'static str,
        /// aya's reason.
        #[source]
        source: Box<MapError>,
    },
}

/// How the XDP program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Let the kernel choose: native if the driver supports it, else generic.
    #[default]
    Auto,
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`): works on every interface, runs after
    /// the skb is allocated.
    Generic,
    /// Native XDP (`XDP_FLAGS_DRV_MODE`): runs in the driver; fails if the driver
    /// has no XDP support.
    Driver,
}

impl XdpMode {
    fn flags(self) -> XdpFlags {
        match self {
            Self::Auto => XdpFlags::default(),
            Self::Generic => XdpFlags::SKB_MODE,
            Self::Driver => XdpFlags::DRV_MODE,
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Generic => "generic (skb)",
            Self::Driver => "driver (native)",
        })
    }
}

/// The loaded `xdp_count` program and its counters map, attached to at most one
/// interface at a time.
#[derive(Debug)]
pub struct XdpCounter {
    ebpf: Ebpf,
    attachment: Option<(String, XdpLinkId)>,
}

impl XdpCounter {
    /// Loads the object at `path` and verifies `xdp_count` into the kernel,
    /// without attaching it anywhere.
    pub fn load_file(path: &Path) -> Result<Self, EbpfError> {
        let mut ebpf = Ebpf::load_file(path).map_err(|source| EbpfError::Load {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        let program = xdp_program(&mut ebpf)?;
        program.load().map_err(|source| EbpfError::Verify {
            name: XDP_COUNT_PROGRAM,
            source: Box::new(source),
        })?;
        if ebpf.map(COUNTERS_MAP).is_none() {
            return Err(EbpfError::MissingMap { name: COUNTERS_MAP });
        }
        Ok(Self {
            ebpf,
            attachment: None,
        })
    }

    /// Attaches `xdp_count` to `interface` (in the calling thread's network
    /// namespace), detaching it first from wherever it was attached before.
    pub fn attach(&mut self, interface: &str, mode: XdpMode) -> Result<(), EbpfError> {
        self.detach()?;
        let program = xdp_program(&mut self.ebpf)?;
        let link = program
            .attach(interface, mode.flags())
            .map_err(|source| EbpfError::Attach {
                name: XDP_COUNT_PROGRAM,
                interface: interface.to_owned(),
                mode,
                source: Box::new(source),
            })?;
        self.attachment = Some((interface.to_owned(), link));
        Ok(())
    }

    /// Detaches `xdp_count` from its interface, if attached. Dropping the
    /// [`XdpCounter`] does the same; this reports failures.
    pub fn detach(&mut self) -> Result<(), EbpfError> {
        let Some((interface, link)) = self.attachment.take() else {
            return Ok(());
        };
        let program = xdp_program(&mut self.ebpf)?;
        program.detach(link).map_err(|source| EbpfError::Detach {
            name: XDP_COUNT_PROGRAM,
            interface,
            source: Box::new(source),
        })
    }

    /// The interface `xdp_count` is attached to, if any.
    pub fn attached_interface(&self) -> Option<&str> {
        self.attachment
            .as_ref()
            .map(|(interface, _)| interface.as_str())
    }

    /// Reads the counters, summed over all CPUs. They count from the program's
    /// load, across attachments.
    pub fn counters(&self) -> Result<PacketCounters, EbpfError> {
        let map_error = |source| EbpfError::Map {
            name: COUNTERS_MAP,
            source: Box::new(source),
        };
        let map = self
            .ebpf
            .map(COUNTERS_MAP)
            .ok_or(EbpfError::MissingMap { name: COUNTERS_MAP })?;
        let array = PerCpuArray::<_, PacketCounters>::try_from(map).map_err(map_error)?;
        let per_cpu = array.get(&0, 0).map_err(map_error)?;
        Ok(per_cpu
            .iter()
            .fold(PacketCounters::default(), |sum, cpu| PacketCounters {
                packets: sum.packets.wrapping_add(cpu.packets),
                bytes: sum.bytes.wrapping_add(cpu.bytes),
            }))
    }
}

/// The `xdp_count` program of `ebpf`, as an [`Xdp`].
fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp, EbpfError> {
    ebpf.program_mut(XDP_COUNT_PROGRAM)
        .and_then(|program| <&mut Xdp>::try_from(program).ok())
        .ok_or(EbpfError::MissingProgram {
            name: XDP_COUNT_PROGRAM,
        })
}

/// Settings of the SCTP programs, written to their config map at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SctpAccountingConfig {
    /// UDP port marking SCTP over UDP (RFC 6951), as source or destination.
    pub udp_port: u16,
}

impl Default for SctpAccountingConfig {
    fn default() -> Self {
        Self {
            udp_port: ebpf_common::SCTP_UDP_PORT_DEFAULT,
        }
    }
}

/// Which of the SCTP programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SctpHook {
    /// `xdp_sctp`: frames arriving on an interface.
    Ingress,
    /// `tc_sctp`: packets leaving through an interface, ahead of its root qdisc.
    Egress,
}

impl SctpHook {
    /// The program's name in the object.
    pub const fn program(self) -> &'static str {
        match self {
            Self::Ingress => XDP_SCTP_PROGRAM,
            Self::Egress => TC_SCTP_PROGRAM,
        }
    }
}

/// Everything the SCTP programs counted, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SctpSnapshot {
    /// DATA and I-DATA bytes per stream and direction.
    pub streams: BTreeMap<StreamKey, StreamCounters>,
    /// SACKs per association direction.
    pub assocs: BTreeMap<AssocKey, AssocCounters>,
    /// What `xdp_sctp` saw.
    pub ingress: WalkerStats,
    /// What `tc_sctp` saw.
    pub egress: WalkerStats,
}

/// The loaded SCTP programs and their maps; each attached to at most one
/// interface, detached on drop.
#[derive(Debug)]
pub struct SctpAccounting {
    ebpf: Ebpf,
    ingress: Option<(String, XdpLinkId)>,
    egress: Option<(String, SchedClassifierLinkId)>,
}

impl SctpAccounting {
    /// Loads the object at `path`, verifies `xdp_sctp` and `tc_sctp` into the
    /// kernel and writes `config`, without attaching anything.
    pub fn load_file(path: &Path, config: SctpAccountingConfig) -> Result<Self, EbpfError> {
        let mut ebpf = Ebpf::load_file(path).map_err(|source| EbpfError::Load {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        xdp_program_named(&mut ebpf, XDP_SCTP_PROGRAM)?
            .load()
            .map_err(|source| EbpfError::Verify {
                name: XDP_SCTP_PROGRAM,
                source: Box::new(source),
            })?;
        tc_program(&mut ebpf)?
            .load()
            .map_err(|source| EbpfError::Verify {
                name: TC_SCTP_PROGRAM,
                source: Box::new(source),
            })?;
        for name in [SCTP_STREAMS_MAP, SCTP_ASSOCS_MAP, SCTP_STATS_MAP] {
            if ebpf.map(name).is_none() {
                return Err(EbpfError::MissingMap { name });
            }
        }
        let mut this = Self {
            ebpf,
            ingress: None,
            egress: None,
        };
        this.configure(config)?;
        Ok(this)
    }

    /// Writes `config` to the programs' config map; takes effect with the next
    /// packet.
    pub fn configure(&mut self, config: SctpAccountingConfig) -> Result<(), EbpfError> {
        let map_error = |source| EbpfError::Map {
            name: SCTP_CONFIG_MAP,
            source: Box::new(source),
        };
        let map = self
            .ebpf
            .map_mut(SCTP_CONFIG_MAP)
            .ok_or(EbpfError::MissingMap {
                name: SCTP_CONFIG_MAP,
            })?;
        let mut array = Array::<_, SctpConfig>::try_from(map).map_err(map_error)?;
        let value = SctpConfig {
            udp_port: config.udp_port,
            _pad: [0; 6],
        };
        array.set(0, value, 0).map_err(map_error)
    }

    /// Attaches `xdp_sctp` to `interface`, detaching it first from wherever it
    /// was attached before.
    pub fn attach_ingress(&mut self, interface: &str, mode: XdpMode) -> Result<(), EbpfError> {
        self.detach_ingress()?;
        let link = xdp_program_named(&mut self.ebpf, XDP_SCTP_PROGRAM)?
            .attach(interface, mode.flags())
            .map_err(|source| EbpfError::Attach {
                name: XDP_SCTP_PROGRAM,
                interface: interface.to_owned(),
                mode,
                source: Box::new(source),
            })?;
        self.ingress = Some((interface.to_owned(), link));
        Ok(())
    }

    /// Attaches `tc_sctp` to the egress of `interface` (TCX on kernels since
    /// 6.6, else a `clsact` qdisc, added if missing), detaching it first from
    /// wherever it was attached before.
    pub fn attach_egress(&mut self, interface: &str) -> Result<(), EbpfError> {
        self.detach_egress()?;
        let link = attach_tc(
            tc_program(&mut self.ebpf)?,
            TC_SCTP_PROGRAM,
            interface,
            TcAttachType::Egress,
        )?;
        self.egress = Some((interface.to_owned(), link));
        Ok(())
    }

    /// Detaches both programs. Dropping the [`SctpAccounting`] does the same;
    /// this reports failures.
    pub fn detach(&mut self) -> Result<(), EbpfError> {
        let ingress = self.detach_ingress();
        self.detach_egress()?;
        ingress
    }

    /// Detaches `xdp_sctp`, if attached.
    pub fn detach_ingress(&mut self) -> Result<(), EbpfError> {
        let Some((interface, link)) = self.ingress.take() else {
            return Ok(());
        };
        xdp_program_named(&mut self.ebpf, XDP_SCTP_PROGRAM)?
            .detach(link)
            .map_err(|source| EbpfError::Detach {
                name: XDP_SCTP_PROGRAM,
                interface,
                source: Box::new(source),
            })
    }

    /// Detaches `tc_sctp`, if attached.
    pub fn detach_egress(&mut self) -> Result<(), EbpfError> {
        let Some((interface, link)) = self.egress.take() else {
            return Ok(());
        };
        tc_program(&mut self.ebpf)?
            .detach(link)
            .map_err(|source| EbpfError::Detach {
                name: TC_SCTP_PROGRAM,
                interface,
                source: Box::new(source),
            })
    }

    /// The interfaces the programs are attached to: (ingress, egress).
    pub fn attached_interfaces(&self) -> (Option<&str>, Option<&str>) {
        (
            self.ingress
                .as_ref()
                .map(|(interface, _)| interface.as_str()),
            self.egress
                .as_ref()
                .map(|(interface, _)| interface.as_str()),
        )
    }

    /// The file descriptor of a loaded program, for [`test_run`].
    pub fn program_fd(&self, hook: SctpHook) -> Result<BorrowedFd<'_>, EbpfError> {
        program_fd(&self.ebpf, hook.program())
    }

    /// How many instructions the verifier processed to accept a loaded program
    /// (`bpf_prog_info.verified_insns`, Linux 5.16+; `None` before): its
    /// verification cost, against the kernel's limit of 1,000,000.
    pub fn verified_instructions(&self, hook: SctpHook) -> Result<Option<u32>, EbpfError> {
        let name = hook.program();
        let program = self
            .ebpf
            .program(name)
            .ok_or(EbpfError::MissingProgram { name })?;
        let info = program.info().map_err(|source| EbpfError::Verify {
            name,
            source: Box::new(source),
        })?;
        Ok(info.verified_instruction_count())
    }

    /// Reads every map, summing the per-CPU copies (see the `merge` methods of
    /// the value types for how TSNs and windows are folded).
    pub fn snapshot(&self) -> Result<SctpSnapshot, EbpfError> {
        let mut snapshot = SctpSnapshot::default();

        let streams = self.per_cpu_hash::<StreamKey, StreamCounters>(SCTP_STREAMS_MAP)?;
        for entry in streams.iter() {
            let (key, per_cpu) = entry.map_err(|source| map_error(SCTP_STREAMS_MAP, source))?;
            let sum = per_cpu
                .iter()
                .fold(StreamCounters::default(), |sum, cpu| sum.merge(*cpu));
            snapshot.streams.insert(key, sum);
        }

        let assocs = self.per_cpu_hash::<AssocKey, AssocCounters>(SCTP_ASSOCS_MAP)?;
        for entry in assocs.iter() {
            let (key, per_cpu) = entry.map_err(|source| map_error(SCTP_ASSOCS_MAP, source))?;
            let sum = per_cpu
                .iter()
                .fold(AssocCounters::default(), |sum, cpu| sum.merge(*cpu));
            snapshot.assocs.insert(key, sum);
        }

        (snapshot.ingress, snapshot.egress) = self.walker_stats()?;
        Ok(snapshot)
    }

    /// The counters of one stream key, summed over CPUs; `None` if the
    /// programs have not seen it (or the LRU map evicted it). One map lookup,
    /// where [`snapshot`](Self::snapshot) walks every key.
    pub fn stream_counters(&self, key: &StreamKey) -> Result<Option<StreamCounters>, EbpfError> {
        let streams = self.per_cpu_hash::<StreamKey, StreamCounters>(SCTP_STREAMS_MAP)?;
        match streams.get(key, 0) {
            Ok(per_cpu) => Ok(Some(
                per_cpu
                    .iter()
                    .fold(StreamCounters::default(), |sum, cpu| sum.merge(*cpu)),
            )),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(map_error(SCTP_STREAMS_MAP, source)),
        }
    }

    /// What the walker saw at each hook, summed over CPUs (the `ingress` and
    /// `egress` of a [`SctpSnapshot`], without walking the hash maps).
    pub fn walker_stats(&self) -> Result<(WalkerStats, WalkerStats), EbpfError> {
        hook_stats(&self.ebpf, SCTP_STATS_MAP, WalkerStats::add)
    }

    fn per_cpu_hash<K: aya::Pod, V: aya::Pod>(
        &self,
        name: &'static str,
    ) -> Result<PerCpuHashMap<&aya::maps::MapData, K, V>, EbpfError> {
        per_cpu_hash(&self.ebpf, name)
    }
}

/// The file descriptor of `ebpf`'s loaded program `name`.
fn program_fd<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<BorrowedFd<'a>, EbpfError> {
    let program = ebpf
        .program(name)
        .ok_or(EbpfError::MissingProgram { name })?;
    let fd = program.fd().map_err(|source| EbpfError::Verify {
        name,
        source: Box::new(source),
    })?;
    Ok(fd.as_fd())
}

/// The per-CPU hash map `name` of `ebpf`.
fn per_cpu_hash<'a, K: aya::Pod, V: aya::Pod>(
    ebpf: &'a Ebpf,
    name: &'static str,
) -> Result<PerCpuHashMap<&'a aya::maps::MapData, K, V>, EbpfError> {
    let map = ebpf.map(name).ok_or(EbpfError::MissingMap { name })?;
    PerCpuHashMap::try_from(map).map_err(|source| map_error(name, source))
}

/// Entries [`STATS_INGRESS`] and [`STATS_EGRESS`] of the per-CPU array `name`
/// of `ebpf`, each folded over the CPUs with `add`.
fn hook_stats<T: aya::Pod + Default>(
    ebpf: &Ebpf,
    name: &'static str,
    add: fn(T, T) -> T,
) -> Result<(T, T), EbpfError> {
    let map = ebpf.map(name).ok_or(EbpfError::MissingMap { name })?;
    let stats = PerCpuArray::<_, T>::try_from(map).map_err(|source| map_error(name, source))?;
    let sum = |index| -> Result<T, EbpfError> {
        let per_cpu = stats
            .get(&index, 0)
            .map_err(|source| map_error(name, source))?;
        Ok(per_cpu.iter().fold(T::default(), |sum, cpu| add(sum, *cpu)))
    };
    Ok((sum(STATS_INGRESS)?, sum(STATS_EGRESS)?))
}

fn map_error(name: &'static str, source: MapError) -> EbpfError {
    EbpfError::Map {
        name,
        source: Box::new(source),
    }
}

/// The XDP program `name` of `ebpf`.
fn xdp_program_named<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Xdp, EbpfError> {
    ebpf.program_mut(name)
        .and_then(|program| <&mut Xdp>::try_from(program).ok())
        .ok_or(EbpfError::MissingProgram { name })
}

/// Attaches the loaded classifier `program` (named `name`) to `interface` at
/// `hook`: TCX on kernels since 6.6, else through a `clsact` qdisc, added if
/// missing and left in place.
fn attach_tc(
    program: &mut SchedClassifier,
    name: &'static str,
    interface: &str,
    hook: TcAttachType,
) -> Result<SchedClassifierLinkId, EbpfError> {
    let attach_error = |source| EbpfError::AttachTc {
        name,
        interface: interface.to_owned(),
        hook: tc_hook_name(hook),
        source: Box::new(source),
    };
    match program.attach(interface, hook) {
        Ok(link) => Ok(link),
        // Netlink attachment without a clsact qdisc: add one and retry. (TCX
        // needs no qdisc and fails with a syscall error instead.)
        Err(ProgramError::TcError(_)) => {
            if let Err(source) = aya::programs::tc::qdisc_add_clsact(interface)
                && source.kind() != std::io::ErrorKind::AlreadyExists
            {
                return Err(EbpfError::Clsact {
                    interface: interface.to_owned(),
                    source,
                });
            }
            program.attach(interface, hook).map_err(attach_error)
        }
        Err(source) => Err(attach_error(source)),
    }
}

const fn tc_hook_name(hook: TcAttachType) -> &'static str {
    match hook {
        TcAttachType::Ingress => "ingress",
        TcAttachType::Egress => "egress",
        TcAttachType::Custom(_) => "custom hook",
    }
}

/// The `tc_sctp` program of `ebpf`, as a [`SchedClassifier`].
fn tc_program(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, EbpfError> {
    ebpf.program_mut(TC_SCTP_PROGRAM)
        .and_then(|program| <&mut SchedClassifier>::try_from(program).ok())
        .ok_or(EbpfError::MissingProgram {
            name: TC_SCTP_PROGRAM,
        })
}
