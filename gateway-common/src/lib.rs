//! Map key and value types shared by the eBPF programs (`gateway-ebpf`) and
//! userspace. `#![no_std]`, `#[repr(C)]`, no padding surprises: both sides read
//! the same bytes. With the `user` feature the types implement `aya::Pod`.
//!
//! Nothing here allocates or has behaviour beyond plain data.

#![no_std]

/// Per-interface packet and byte counters kept by the minimal XDP program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketCounters {
    /// Frames seen.
    pub packets: u64,
    /// Bytes seen, including link-layer headers.
    pub bytes: u64,
}

#[cfg(feature = "user")]
// SAFETY: `PacketCounters` is `repr(C)`, has no padding (two u64) and is valid for
// any bit pattern.
unsafe impl aya::Pod for PacketCounters {}
