//! The eBPF programs of both daemons, loaded through aya by `ebpf-loader`
//! (for the gateway, `gateway::ebpf`; for the origin, `origin::ebpf`).
//!
//! - `xdp_sctp` (XDP, ingress) and `tc_sctp` (TC classifier, egress): one bounded
//!   SCTP chunk walker ([`sctp`]) over native SCTP and SCTP over UDP (RFC 6951),
//!   counting DATA/I-DATA user bytes per (association, stream) and SACKs per
//!   association: what arrived at the gateway per stream, what left the origin.
//! - `tc_tcp_egress` and `tc_tcp_ingress` (TC classifiers on the gateway's LAN
//!   side): per intercepted browser flow, TCP payload sent toward the browser
//!   and the browser's acknowledgements ([`tcp`]), so userspace knows the bytes
//!   in flight to each browser.
//! - `xdp_count`: counts every frame arriving on its interface (packets and
//!   bytes, per CPU); the load test's probe.
//!
//! What it never does: drop, redirect or modify a packet. A program that cannot
//! account for a packet still returns `XDP_PASS` / `TC_ACT_PIPE`: accounting must
//! never cost traffic.
//!
//! Where to start: [`xdp_sctp`] and [`tc_sctp`], thin entries over
//! [`sctp::try_account`]. Every packet read goes through [`Packet::read`], the
//! view both hooks share: at XDP through [`ptr_at`], the one bounds check the
//! verifier needs to see; at TC through `bpf_skb_load_bytes`, which also reads
//! what lies beyond an skb's linear head (GSO).
//! Map key and value types live in `ebpf-common`, shared with userspace;
//! docs/ebpf.md describes the maps.

#![no_std]
#![no_main]

use core::mem;

use aya_ebpf::{
    bindings::{BPF_NOEXIST, TC_ACT_PIPE, xdp_action},
    helpers::bpf_ktime_get_ns,
    macros::{classifier, map, xdp},
    maps::{LruPerCpuHashMap, PerCpuArray},
    programs::{TcContext, XdpContext},
};
use ebpf_common::{DIRECTION_EGRESS, DIRECTION_INGRESS, PacketCounters};

mod ip;
mod sctp;
mod tcp;

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
    let _ = sctp::try_account(&Skb::new(&ctx), DIRECTION_EGRESS);
    TC_ACT_PIPE as i32
}

/// Accounts a packet toward a browser (TCP payload, sequence end) on the
/// gateway's LAN side and hands it on, whatever happens.
#[classifier]
pub fn tc_tcp_egress(ctx: TcContext) -> i32 {
    let _ = tcp::try_account(&Skb::new(&ctx), DIRECTION_EGRESS);
    TC_ACT_PIPE as i32
}

/// Accounts a browser's acknowledgement on the gateway's LAN side and hands
/// the packet on, whatever happens.
#[classifier]
pub fn tc_tcp_ingress(ctx: TcContext) -> i32 {
    let _ = tcp::try_account(&Skb::new(&ctx), DIRECTION_INGRESS);
    TC_ACT_PIPE as i32
}

/// This CPU's value for `key`, inserted as all zeros if absent; `None` if the
/// insert failed.
#[inline(always)]
fn entry<K, V: Default>(map: &LruPerCpuHashMap<K, V>, key: &K) -> Option<*mut V> {
    if let Some(value) = map.get_ptr_mut(key) {
        return Some(value);
    }
    // NOEXIST: another CPU may have inserted it meanwhile; then this fails with
    // EEXIST and the lookup below finds that entry.
    let _ = map.insert(key, &V::default(), u64::from(BPF_NOEXIST));
    map.get_ptr_mut(key)
}

/// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, the clock of every timestamp in
/// the maps.
#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: bpf_ktime_get_ns takes no arguments and cannot fail.
    unsafe { bpf_ktime_get_ns() }
}

/// The bytes of a packet at either hook: a frame of `len` bytes that starts
/// with the Ethernet header, read `N` bytes at a time at offsets counted from
/// its first byte. Nothing reads it otherwise, and nothing writes to it.
trait Packet {
    /// Chunks the walker looks at per packet (the loop's bound, which is what
    /// the verifier's cost grows with).
    const MAX_CHUNKS: u32;
    /// The frame's full length, in the linear head or not.
    fn len(&self) -> usize;
    /// The `N` bytes at `offset`, or [`ProgramError::OutOfBounds`] if the
    /// frame does not hold them (or they lie beyond what the hook can read).
    fn read<const N: usize>(&self, offset: usize) -> Result<[u8; N], ProgramError>;
    /// Payload bytes per segment of a GSO super-packet (`skb->gso_size`), 0 if
    /// the packet is not one. Always 0 at XDP, whose context does not say: on a
    /// NIC it sees wire frames, but over loopback and a veth a sender's GSO
    /// super-packet arrives whole (docs/ebpf.md, "What we learned").
    fn gso_size(&self) -> usize;
}

impl Packet for XdpContext {
    const MAX_CHUNKS: u32 = sctp::MAX_WIRE_CHUNKS;
    #[inline(always)]
    fn len(&self) -> usize {
        self.data_end().saturating_sub(self.data())
    }
    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Result<[u8; N], ProgramError> {
        // Frags of multi-buffer XDP are not readable this way; the frame's
        // first buffer is all there is.
        let bytes = ptr_at::<[u8; N]>(self.data(), self.data_end(), offset)?;
        // SAFETY: `ptr_at` checked the N bytes lie inside the packet.
        Ok(unsafe { *bytes })
    }
    #[inline(always)]
    fn gso_size(&self) -> usize {
        0
    }
}

/// A TC skb, read through `bpf_skb_load_bytes`, which reads past the linear
/// head (page frags, and the `frag_list` of kernel SCTP's GSO packets, which
/// keep each segment's chunks in an skb of their own) without changing the
/// skb. Direct reads would serve wire packets a few nanoseconds faster, but a
/// second copy of the walker for them cost more verifier instructions than
/// the 48-chunk bound leaves (docs/ebpf.md, "What we learned").
///
/// Never `bpf_skb_pull_data`: on a GSO skb it broke what software segmentation
/// expects after the qdisc, and Debian's 6.1 crashed in `skb_segment` (NULL
/// dereference) under the origin's VM test (docs/ebpf.md, "What we learned").
struct Skb<'a> {
    ctx: &'a TcContext,
    gso_size: usize,
}

impl<'a> Skb<'a> {
    #[inline(always)]
    fn new(ctx: &'a TcContext) -> Self {
        // SAFETY: `skb` is the context pointer the kernel passed to this program,
        // valid for its whole run; `gso_size` is a readable `__sk_buff` field for
        // TC programs (the verifier rewrites the access).
        let gso_size = unsafe { (*ctx.skb.skb).gso_size } as usize;
        Self { ctx, gso_size }
    }
}

impl Packet for Skb<'_> {
    const MAX_CHUNKS: u32 = sctp::MAX_GSO_CHUNKS;
    #[inline(always)]
    fn len(&self) -> usize {
        self.ctx.skb.len() as usize
    }
    #[inline(always)]
    fn read<const N: usize>(&self, offset: usize) -> Result<[u8; N], ProgramError> {
        if offset > MAX_SKB_OFFSET {
            return Err(ProgramError::OutOfBounds);
        }
        // The helper checks `offset + N` against `skb->len` itself and fails
        // rather than read past it; it needs no bound from the verifier.
        self.ctx
            .load::<[u8; N]>(offset)
            .map_err(|_| ProgramError::OutOfBounds)
    }
    #[inline(always)]
    fn gso_size(&self) -> usize {
        self.gso_size
    }
}

/// The largest offset read through `bpf_skb_load_bytes`, bytes: past the
/// largest IP packet (an IPv4 total length or IPv6 payload length is 16 bits)
/// behind an Ethernet header, a VLAN tag and IPv6's fixed header.
const MAX_SKB_OFFSET: usize = 0x1_0000 + 64;

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

/// Returns a pointer to a `T` at `offset` bytes into the linear packet
/// `[start, end)`, or [`ProgramError::OutOfBounds`] if the packet is too short
/// to hold it or `offset` exceeds [`sctp::MAX_OFFSET`].
///
/// The offset cap gives the verifier a bound on every variable offset, and the
/// comparison against `end` is exactly the shape it needs to prove the later read
/// safe, so every direct packet read goes through here (docs/ebpf.md, "What we
/// learned", says why the cap is hidden from the optimiser). `T` is a byte array: alignment 1,
/// any bit pattern valid.
#[inline(always)]
fn ptr_at<T>(start: usize, end: usize, offset: usize) -> Result<*const T, ProgramError> {
    // Opaque to LLVM, so the cap below stays in the object even where the
    // optimiser can prove it: older verifiers (Linux 6.1) lose the bounds of a
    // register combined with OR, XOR or a shift by a non-constant register, and
    // LLVM rebuilds offsets that way; the compare is what re-bounds them there.
    let offset = core::hint::black_box(offset);
    if offset > sctp::MAX_OFFSET {
        return Err(ProgramError::OutOfBounds);
    }
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
