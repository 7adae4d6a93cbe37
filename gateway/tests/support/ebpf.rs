//! What every eBPF integration test needs before it starts: the built object's
//! path (from `GATEWAY_EBPF_OBJECT`, which `cargo xtask build-ebpf --load-test`
//! sets), root, and readable errors. A test run by hand without them FAILS
//! with a message saying what to do; it never passes vacuously.

use std::error::Error;
use std::path::PathBuf;

use gateway::ebpf::OBJECT_PATH_ENV;

/// The object's path from `GATEWAY_EBPF_OBJECT`; fails the test if it is
/// unset or names no file.
pub(crate) fn object_path() -> PathBuf {
    let Some(path) = std::env::var_os(OBJECT_PATH_ENV) else {
        panic!(
            "{OBJECT_PATH_ENV} is not set. Run `cargo xtask build-ebpf --load-test`, or \
             `cargo xtask build-ebpf`, set {OBJECT_PATH_ENV} to the path it prints and \
             run this test with --ignored."
        );
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{OBJECT_PATH_ENV}={} is not a file; run `cargo xtask build-ebpf`",
        path.display()
    );
    path
}

/// Fails the test unless it runs as root.
pub(crate) fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root: it creates network namespaces, loads BPF programs and \
         attaches them (CAP_SYS_ADMIN, CAP_BPF, CAP_NET_ADMIN)"
    );
}

/// An error with all its sources, one `: ` apart (the kernel's reason for a
/// refused program is in a source).
pub(crate) fn chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A fresh network namespace `{tag}-{pid}` with its loopback up, deleted on
/// drop (also on panic, taking any attachment in it along).
#[allow(
    dead_code,
    reason = "a module of each eBPF test binary; ebpf_load.rs does not use this"
)]
pub(crate) fn namespace_with_loopback(tag: &str) -> testbed::Netns {
    let name = format!("{tag}-{}", std::process::id());
    let netns = testbed::Netns::create(&name).unwrap_or_else(|e| panic!("creating {name}: {e}"));
    testbed::ip(&["-n", netns.name(), "link", "set", "lo", "up"]).unwrap_or_else(|e| panic!("{e}"));
    netns
}
