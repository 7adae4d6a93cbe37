//! The shipped configuration files (config/*.toml), edited for one run: the
//! demo and the benchmarks start the daemons with the file an operator would
//! install, changed only where the run needs it, so that a key renamed or
//! moved in the shipped file fails here, by its name, rather than silently.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::cmd::workspace_root;

/// One shipped file, parsed.
#[derive(Debug)]
pub(crate) struct ShippedConfig {
    /// Its name under config/, for messages.
    name: &'static str,
    table: toml::Table,
}

impl ShippedConfig {
    /// Reads config/`name` (`"origin.toml"`).
    pub(crate) fn read(name: &'static str) -> Result<Self> {
        let path = workspace_root().join("config").join(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let table = text
            .parse()
            .with_context(|| format!("parsing config/{name}"))?;
        Ok(Self { name, table })
    }

    /// The table at `path`, dotted (`"transport.userspace"`), which the
    /// shipped file must have.
    pub(crate) fn table(&mut self, path: &str) -> Result<&mut toml::Table> {
        let name = self.name;
        let mut table = &mut self.table;
        for key in path.split('.') {
            table = table
                .get_mut(key)
                .and_then(toml::Value::as_table_mut)
                .with_context(|| format!("config/{name} has no [{path}]"))?;
        }
        Ok(table)
    }

    /// Writes it to `dir`/`file`, under a comment line saying what `changed`
    /// and for which run; its path.
    pub(crate) fn write(&self, dir: &Path, file: &str, changed: &str) -> Result<PathBuf> {
        let path = dir.join(file);
        let text = format!(
            "# config/{} with {changed}\n\n{}",
            self.name,
            toml::to_string(&self.table)?
        );
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}
