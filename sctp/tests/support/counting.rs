//! A global allocator that counts the live bytes of each thread, for the
//! test binaries that check what the core holds (`#[path]`-included where
//! wanted; a binary has one global allocator). Per thread: the harness's
//! other threads allocate while a case runs, and the core is sans-I/O, so
//! what a case's thread allocates is what it holds.

#![allow(
    dead_code,
    reason = "each binary that includes it reads a different part"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts live bytes and their peak, per thread.
pub(crate) struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the allocator runs while a thread's locals are torn down.
    let _ = LIVE.try_with(|live| {
        live.set(live.get() + delta);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

/// Bytes this thread allocated and has not freed.
pub(crate) fn live() -> isize {
    LIVE.with(Cell::get)
}

/// The most [`live`] reached since the last [`reset_peak`].
pub(crate) fn peak() -> isize {
    PEAK.with(Cell::get)
}

/// Starts a new peak from the live bytes now; returns them.
pub(crate) fn reset_peak() -> isize {
    let now = live();
    PEAK.with(|peak| peak.set(now));
    now
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counters only add up sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}
