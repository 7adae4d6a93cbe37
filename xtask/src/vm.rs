//! Placeholder: runs the kernel-SCTP tests in a virtme-ng VM.
use anyhow::Result;

/// Options for `cargo xtask vm-test`.
#[derive(Debug, clap::Args, Default)]
pub(crate) struct VmOptions {}

pub(crate) fn run(_options: &VmOptions) -> Result<()> {
    anyhow::bail!("not written yet")
}
