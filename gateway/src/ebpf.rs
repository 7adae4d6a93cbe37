//! Loads the gateway's eBPF object (built from `gateway-ebpf` by `cargo xtask
//! build-ebpf`), attaches its XDP counter to an interface and reads the counters.
//!
//! What it never does: build the object, raise rlimits, pin anything in bpffs, or
//! change an interface other than the one it attaches to. Everything it attaches is
//! detached when the [`XdpCounter`] is dropped (aya owns the link), so a crashed
//! gateway leaves no program behind once its file descriptors close.
//!
//! Where to start: [`XdpCounter::load_file`], then [`XdpCounter::attach`] and
//! [`XdpCounter::counters`].
//!
//! Privileges: loading needs `CAP_BPF` (or `CAP_SYS_ADMIN`) and attaching needs
//! `CAP_NET_ADMIN`; without them the load fails with [`EbpfError::Load`] carrying
//! the kernel's `EPERM`. Interfaces are looked up in the network namespace of the
//! calling thread.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    maps::{MapError, PerCpuArray},
    programs::{ProgramError, Xdp, XdpFlags, xdp::XdpLinkId},
};
use gateway_common::PacketCounters;

/// Name of the XDP program that counts packets and bytes (`gateway-ebpf`'s
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
    /// from a different `gateway-ebpf`.
    #[error("eBPF object has no XDP program named {name}")]
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
