//! `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns()`, hence of
//! every `last_seen_ns` in the maps. `std::time::Instant` reads the same clock
//! on Linux but does not expose its value, so a daemon that compares its own
//! moments with the programs' timestamps reads it here.
//!
//! FFI file: one `clock_gettime(2)` call.

/// Now on `CLOCK_MONOTONIC`, in nanoseconds (0 if the clock cannot be read,
/// which Linux never does for this clock).
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the call;
    // clock_gettime writes only into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}
