//! The gateway's eBPF programs, loaded by `gateway::ebpf` through aya.
//!
//! Today: `xdp_count`, an XDP program that counts every frame arriving on the
//! interface it is attached to (packets and bytes, per CPU) and passes it on.
//! Next: the bounded SCTP chunk parser (native and UDP-encapsulated, RFC 6951) that
//! counts bytes per stream at the origin's TC egress and the gateway's XDP ingress.
//!
//! What it never does: drop, redirect or modify a packet. A program that cannot
//! account for a packet still returns `XDP_PASS`: accounting must never cost traffic.
//!
//! Where to start: [`xdp_count`], a thin entry over the fallible [`try_xdp_count`].
//! Every packet read goes through [`ptr_at`], the one bounds check the verifier needs
//! to see. Map value types live in `gateway-common`, shared with userspace.

#![no_std]
#![no_main]

use core::mem;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::PerCpuArray,
    programs::XdpContext,
};
use gateway_common::PacketCounters;

/// Why a program could not account for a packet. Never visible outside the
/// program: the entry points map every error to their pass-through verdict.
#[derive(Clone, Copy)]
enum ProgramError {
    /// A read would go past `data_end`: the packet is shorter than the header.
    OutOfBounds,
    /// A map lookup that cannot fail by construction failed.
    MapLookup,
}

/// Packet and byte counters for the interface `xdp_count` is attached to: one
/// entry (index 0), one copy per CPU so no update needs an atomic. Userspace sums
/// the per-CPU copies.
#[map]
static COUNTERS: PerCpuArray<PacketCounters> = PerCpuArray::with_max_entries(1, 0);

/// Counts the frame into [`COUNTERS`] and passes it on, whatever happens.
#[xdp]
pub fn xdp_count(ctx: XdpContext) -> u32 {
    match try_xdp_count(&ctx) {
        Ok(action) => action,
        Err(ProgramError::OutOfBounds | ProgramError::MapLookup) => xdp_action::XDP_PASS,
    }
}

/// The fallible body of [`xdp_count`].
#[inline(always)]
fn try_xdp_count(ctx: &XdpContext) -> Result<u32, ProgramError> {
    // data_end - data is the frame length including the link-layer header, as the
    // driver handed it over (no FCS).
    let len = ctx.data_end().saturating_sub(ctx.data()) as u64;
    let counters = COUNTERS.get_ptr_mut(0).ok_or(ProgramError::MapLookup)?;
    // SAFETY: `get_ptr_mut` returned a non-null pointer to this CPU's copy of entry 0,
    // which lives as long as the map; no other program invocation runs on this CPU
    // at the same time (XDP runs with preemption disabled), so the access is exclusive.
    unsafe {
        (*counters).packets += 1;
        (*counters).bytes += len;
    }
    Ok(xdp_action::XDP_PASS)
}

/// Returns a pointer to a `T` at `offset` bytes into the packet, or
/// [`ProgramError::OutOfBounds`] if the packet is too short to hold it.
///
/// The comparison against `data_end` is exactly the shape the verifier needs to
/// prove the later read safe, so every packet read goes through here.
#[expect(dead_code, reason = "the SCTP chunk parser is the first reader of packet bytes")]
#[inline(always)]
fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Result<*const T, ProgramError> {
    let start = ctx.data();
    let end = ctx.data_end();
    let len = mem::size_of::<T>();
    if start + offset + len > end {
        return Err(ProgramError::OutOfBounds);
    }
    Ok((start + offset) as *const T)
}

/// Program licence, read by the kernel. GPL-compatible so every helper is usable.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // The verifier rejects any path that could reach here (no unbounded loops), so
    // a reachable panic is a build-time error, not a run-time one.
    loop {}
}
