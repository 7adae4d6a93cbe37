//! The gateway's eBPF programs, loaded by `gateway::ebpf` through aya.
//!
//! - `xdp_sctp` (XDP, ingress) and `tc_sctp` (TC classifier, egress): one bounded
//!   SCTP chunk walker ([`sctp`]) over native SCTP and SCTP over UDP (RFC 6951),
//!   counting DATA/I-DATA user bytes per (association, stream) and SACKs per
//!   association: what arrived at the gateway per stream, what left the origin.
//! - `xdp_count`: counts every frame arriving on its interface (packets and
//!   bytes, per CPU); the load test's probe.
//!
//! What it never does: drop, redirect or modify a packet. A program that cannot
//! account for a packet still returns `XDP_PASS` / `TC_ACT_PIPE`: accounting must
//! never cost traffic.
//!
//! Where to start: [`xdp_sctp`] and [`tc_sctp`], thin entries over
//! [`sctp::try_account`]. Every packet read goes through [`ptr_at`], the one bounds
//! check the verifier needs to see, over the [`Packet`] view both hooks share.
//! Map key and value types live in `gateway-common`, shared with userspace;
//! docs/ebpf.md describes the maps.

#![no_std]
#![no_main]

use core::mem;

use aya_ebpf::{
    bindings::{TC_ACT_PIPE, xdp_action},
    macros::{classifier, map, xdp},
    maps::PerCpuArray,
    programs::{TcContext, XdpContext},
};
use gateway_common::{DIRECTION_EGRESS, DIRECTION_INGRESS, PacketCounters};

mod sctp;

/// Why a program could not account for a packet. Never visible outside the
/// program: the entry points map every error to their pass-through verdict.
#[derive(Clone, Copy)]
enum ProgramError {
    /// A read would go past `data_end`: the packet is shorter than the header.
    OutOfBounds,
    /// A map lookup that cannot fail by construction failed.
    MapLookup,
    /// A chunk's fields contradict its length.
    Malformed,
}

/// Accounts an arriving frame's SCTP chunks and passes it on, whatever happens.
#[xdp]
pub fn xdp_sctp(ctx: XdpContext) -> u32 {
    // Every outcome, error or not, is the same verdict: pass unchanged.
    let _ = sctp::try_account(&ctx, DIRECTION_INGRESS);
    xdp_action::XDP_PASS
}

/// Accounts a leaving packet's SCTP chunks and hands it on to the next
/// classifier, or out, whatever happens.
#[classifier]
pub fn tc_sctp(ctx: TcContext) -> i32 {
    let _ = sctp::try_account(&ctx, DIRECTION_EGRESS);
    TC_ACT_PIPE as i32
}

/// The bytes of a packet at either hook: a linear window `[start, end)` of a
/// frame of `len` bytes that starts with the Ethernet header.
trait Packet {
    /// Address of the frame's first byte.
    fn start(&self) -> usize;
    /// Address one past the last directly readable byte.
    fn end(&self) -> usize;
    /// The frame's full length, readable or not.
    fn len(&self) -> usize;
    /// Makes the first `len` bytes directly readable if they are not (TC: pulls
    /// non-linear data into the head), best effort; never changes a byte. Moves
    /// `start` and `end`, so no pointer may be kept across it.
    fn pull(&self, len: usize);
    /// Payload bytes per segment of a GSO super-packet (`skb->gso_size`), 0 if
    /// the packet is not one. Always 0 at XDP, whose context does not say: on a
    /// NIC it sees wire frames, but over loopback and a veth a sender's GSO
    /// super-packet arrives whole (docs/ebpf.md, "What we learned").
    fn gso_size(&self) -> usize;
}

impl Packet for XdpContext {
    #[inline(always)]
    fn start(&self) -> usize {
        self.data()
    }
    #[inline(always)]
    fn end(&self) -> usize {
        self.data_end()
    }
    #[inline(always)]
    fn len(&self) -> usize {
        self.data_end().saturating_sub(self.data())
    }
    #[inline(always)]
    fn pull(&self, _len: usize) {
        // Frags of multi-buffer XDP are not readable this way; the frame's
        // first buffer is all there is.
    }
    #[inline(always)]
    fn gso_size(&self) -> usize {
        0
    }
}

impl Packet for TcContext {
    #[inline(always)]
    fn start(&self) -> usize {
        self.data()
    }
    #[inline(always)]
    fn end(&self) -> usize {
        self.data_end()
    }
    #[inline(always)]
    fn len(&self) -> usize {
        self.skb.len() as usize
    }
    #[inline(always)]
    fn pull(&self, len: usize) {
        // Never a GSO skb: kernel SCTP's GSO packets keep each segment's
        // chunks in a frag_list skb (GSO_BY_FRAGS), and pulling them into the
        // head breaks what software segmentation expects after the qdisc:
        // Debian's 6.1 crashed in skb_segment (NULL dereference) under the
        // origin's VM test (docs/ebpf.md). Such a packet is walked as far as
        // its linear part goes and counted as malformed.
        if self.gso_size() != 0 {
            return;
        }
        let linear = self.data_end().saturating_sub(self.data());
        if linear < len {
            let len = if len > sctp::MAX_OFFSET {
                sctp::MAX_OFFSET
            } else {
                len
            };
            // Failure leaves the skb as it was; the walk then stops at the end
            // of the linear part.
            let _ = self.pull_data(len as u32);
        }
    }
    #[inline(always)]
    fn gso_size(&self) -> usize {
        // SAFETY: `skb` is the context pointer the kernel passed to this program,
        // valid for its whole run; `gso_size` is a readable `__sk_buff` field for
        // TC programs (the verifier rewrites the access).
        unsafe { (*self.skb.skb).gso_size as usize }
    }
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
        Err(ProgramError::OutOfBounds | ProgramError::MapLookup | ProgramError::Malformed) => {
            xdp_action::XDP_PASS
        }
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
/// [`ProgramError::OutOfBounds`] if the packet is too short to hold it or
/// `offset` exceeds [`sctp::MAX_OFFSET`].
///
/// The offset cap gives the verifier a bound on every variable offset, and the
/// comparison against `end` is exactly the shape it needs to prove the later read
/// safe, so every packet read goes through here (docs/ebpf.md, "What we
/// learned", says why the cap is hidden from the optimiser). `T` is a byte array: alignment 1,
/// any bit pattern valid.
#[inline(always)]
fn ptr_at<P: Packet, T>(pkt: &P, offset: usize) -> Result<*const T, ProgramError> {
    // Opaque to LLVM, so the cap below stays in the object even where the
    // optimiser can prove it: older verifiers (Linux 6.1) lose the bounds of a
    // register combined with OR, XOR or a shift by a non-constant register, and
    // LLVM rebuilds offsets that way; the compare is what re-bounds them there.
    let offset = core::hint::black_box(offset);
    if offset > sctp::MAX_OFFSET {
        return Err(ProgramError::OutOfBounds);
    }
    let start = pkt.start();
    let end = pkt.end();
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
