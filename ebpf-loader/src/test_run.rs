//! `BPF_PROG_TEST_RUN`: runs a loaded XDP or TC program once (or `repeat` times)
//! on a packet supplied by the caller, in the kernel, without any interface, and
//! returns its verdict, the packet as the program left it, and the mean run time.
//! For tests on crafted packets and for per-packet cost figures.
//!
//! aya 0.13 does not expose this command, so this is an FFI file of the
//! crate: a `#[repr(C)]` copy of the `test` member of the kernel's `union
//! bpf_attr` and one `bpf(2)` call.
//!
//! What it never does: attach anything or touch an interface. The program's maps
//! are the live ones: a test run counts into them like real traffic.
//!
//! Where to start: [`run`].

use std::{io, os::fd::AsRawFd as _, os::fd::BorrowedFd};

/// `BPF_PROG_TEST_RUN` (a.k.a. `BPF_PROG_RUN`) in `enum bpf_cmd`.
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// Room the kernel may need beyond the input for the output packet (XDP test
/// runs copy out what the program left, which a pass-through program leaves
/// unchanged; the slack only avoids `ENOSPC` if that ever changes).
const OUTPUT_SLACK: usize = 256;

/// The `test` member of `union bpf_attr` (include/uapi/linux/bpf.h), field for
/// field; `__aligned_u64` pointers as `u64`. The kernel accepts a shorter
/// attribute than its own union and zero-fills the rest.
#[repr(C)]
#[derive(Debug, Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    /// The union is 8-byte aligned; the kernel requires unused tail bytes to be
    /// zero, which this explicit padding guarantees.
    _pad: u32,
}

/// What one test run returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// The program's return value: an `XDP_*` or `TC_ACT_*` verdict.
    pub retval: u32,
    /// The packet after the program ran.
    pub data_out: Vec<u8>,
    /// Mean run time per repetition, in nanoseconds, as the kernel measured it.
    pub duration_ns: u32,
}

/// Runs the program behind `program` on `packet` (a whole Ethernet frame),
/// `repeat` times (0 counts as 1).
///
/// Fails with the kernel's error: `EINVAL` for a frame shorter than an Ethernet
/// header or a program type without test-run support, `EPERM` without
/// `CAP_BPF`/`CAP_SYS_ADMIN`.
pub fn run(program: BorrowedFd<'_>, packet: &[u8], repeat: u32) -> io::Result<TestRunOutput> {
    run_with_context(program, packet, &[], repeat)
}

/// [`run`] with a context for the program: for TC programs the bytes of a
/// `struct __sk_buff` (the kernel reads `mark`, `priority`, `ifindex`, `cb`,
/// `tstamp`, `wire_len`, `gso_segs`, `gso_size` and `hwtstamp` from it and
/// requires every other field to be zero); empty for none.
pub fn run_with_context(
    program: BorrowedFd<'_>,
    packet: &[u8],
    context: &[u8],
    repeat: u32,
) -> io::Result<TestRunOutput> {
    let too_big = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let mut data_out = vec![0_u8; packet.len() + OUTPUT_SLACK];
    let mut attr = TestRunAttr {
        prog_fd: u32::try_from(program.as_raw_fd()).map_err(too_big)?,
        data_size_in: u32::try_from(packet.len()).map_err(too_big)?,
        data_size_out: u32::try_from(data_out.len()).map_err(too_big)?,
        data_in: packet.as_ptr() as u64,
        data_out: data_out.as_mut_ptr() as u64,
        repeat,
        ctx_size_in: u32::try_from(context.len()).map_err(too_big)?,
        ctx_in: if context.is_empty() {
            0
        } else {
            context.as_ptr() as u64
        },
        ..TestRunAttr::default()
    };
    let attr_size = std::mem::size_of::<TestRunAttr>();
    // SAFETY: `attr` is a valid, fully initialised `bpf_attr.test` of
    // `attr_size` bytes that outlives the call; `data_in` points at
    // `data_size_in` readable bytes (`packet`), `data_out` at `data_size_out`
    // writable bytes (`data_out`), `ctx_in` at `ctx_size_in` readable bytes
    // (`context`, or null with size 0), all alive until the call returns, which
    // is when the kernel stops using them. `program` is an open fd for the call's
    // duration.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &raw mut attr,
            attr_size as libc::c_uint,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    let written = usize::try_from(attr.data_size_out).map_err(too_big)?;
    data_out.truncate(written);
    Ok(TestRunOutput {
        retval: attr.retval,
        data_out,
        duration_ns: attr.duration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_matches_the_kernel_layout() {
        // The kernel's `test` member ends with batch_size at byte 72.
        assert_eq!(std::mem::size_of::<TestRunAttr>(), 80);
        assert_eq!(std::mem::offset_of!(TestRunAttr, data_in), 16);
        assert_eq!(std::mem::offset_of!(TestRunAttr, repeat), 32);
        assert_eq!(std::mem::offset_of!(TestRunAttr, ctx_in), 48);
        assert_eq!(std::mem::offset_of!(TestRunAttr, flags), 64);
        assert_eq!(std::mem::offset_of!(TestRunAttr, batch_size), 72);
    }
}
