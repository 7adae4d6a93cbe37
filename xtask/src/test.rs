//! `cargo xtask test`: the whole suite, in the order that fails fastest.
use anyhow::Result;

/// Options for `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub(crate) struct TestOptions {}

pub(crate) fn run(_options: &TestOptions) -> Result<()> {
    Ok(())
}
