//! Placeholder: installs the project's prerequisites.
use anyhow::Result;

pub(crate) fn run() -> Result<()> {
    Ok(())
}
