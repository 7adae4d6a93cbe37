//! Placeholder: builds gateway-ebpf.
use std::path::PathBuf;

use anyhow::Result;

/// Options for `cargo xtask build-ebpf`.
#[derive(Debug, clap::Args)]
pub(crate) struct BuildOptions {
    /// Build in release mode (the only mode the verifier reliably accepts).
    #[arg(long, default_value_t = true)]
    pub release: bool,
}

/// Builds the eBPF object and returns its path.
pub(crate) fn build(_options: &BuildOptions) -> Result<PathBuf> {
    anyhow::bail!("not written yet")
}
