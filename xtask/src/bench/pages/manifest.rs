//! What a page-load run was, written beside its CSV when it runs, so that a
//! report rendered later (`--from-csv`) says what ran, not what today's code
//! would run: the command, the commit, the dates, the machine and its load,
//! each sender's congestion controller as read from the running system, the
//! text that describes each alternative, and every daemon's effective
//! configuration.
//!
//! A run from before manifests gets one reconstructed from the report that
//! run wrote: the version of bench/results/{name}.md committed together with
//! its loads.csv. The manifest says so in `source`, and what that report did
//! not record (the controllers, the configurations) stays empty.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::super::common::{command_output, commit, load_average, machine_description};
use super::Alternative;
use crate::cmd::workspace_root;

/// The manifest's file name, beside loads.csv.
pub(super) const FILE: &str = "manifest.toml";

/// How an alternative was run, in the words of the code that ran it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct AlternativeNote {
    /// [`Alternative::letter`] (one letter in runs before (fp)).
    pub letter: String,
    pub label: String,
    pub method: String,
    /// Whether the gateway took the origin's pushes (its `push.enabled`,
    /// read back from the configuration it ran with; false without a
    /// gateway); `None` in runs before push.
    #[serde(default)]
    pub push: Option<bool>,
}

/// A daemon's configuration file as it ran.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct ConfigText {
    /// Which daemon, for which alternatives.
    pub name: String,
    pub text: String,
}

/// See the module documentation. Field order matters to TOML: plain values
/// first, then the arrays of tables.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct Manifest {
    /// Written by the run, or how it was reconstructed.
    pub source: String,
    /// What followed `cargo xtask bench`.
    pub command: String,
    /// The commit the run was built from (`+changes`: with uncommitted edits).
    pub commit: String,
    pub started: String,
    pub finished: String,
    pub machine: String,
    /// 1, 5 and 15 minute load averages before the first load and after the
    /// last.
    pub load_before: String,
    pub load_after: String,
    /// The congestion controller every sender was set to (`--tcp-cc`).
    pub congestion: Option<String>,
    /// Each sender's controller as read back from the running system.
    pub controllers: Vec<String>,
    /// How long the link stayed idle before each "after idle" load, ms.
    pub idle_before_first_load_ms: Option<u64>,
    /// Whether each round carried one unrecorded load per page before the
    /// recorded ones (false for the first interleaved runs: their "after
    /// idle" load was a new association's or connection's first).
    #[serde(default)]
    pub warming_load: bool,
    /// Settings the rows do not show.
    pub notes: Vec<String>,
    pub alternatives: Vec<AlternativeNote>,
    pub configs: Vec<ConfigText>,
}

impl Manifest {
    /// A manifest for a run starting now.
    pub(super) fn starting(command: String, alternatives: &[Alternative]) -> Self {
        Self {
            source: "written by the run".into(),
            command,
            commit: commit(),
            started: now(),
            machine: machine_description(),
            load_before: load_average(),
            alternatives: alternatives
                .iter()
                .map(|a| AlternativeNote {
                    letter: a.letter().to_owned(),
                    label: a.label().to_owned(),
                    method: a.method().to_owned(),
                    push: None,
                })
                .collect(),
            ..Self::default()
        }
    }

    /// Notes the end of the run.
    pub(super) fn finish(&mut self) {
        self.finished = now();
        self.load_after = load_average();
    }

    /// Adds a configuration, once per distinct text.
    pub(super) fn add_config(&mut self, name: String, text: String) {
        match self.configs.iter_mut().find(|c| c.text == text) {
            Some(same) if !same.name.split(", ").any(|n| n == name) => {
                same.name = format!("{}, {name}", same.name);
            }
            Some(_) => {}
            None => self.configs.push(ConfigText { name, text }),
        }
    }

    pub(super) fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(FILE);
        let text = toml::to_string(self).context("the manifest as TOML")?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// The manifest of run `name` (bench/results/{name}/); reconstructed and
    /// written first if the run predates manifests.
    pub(super) fn of_run(name: &str) -> Result<Self> {
        let dir = workspace_root().join("bench/results").join(name);
        let path = dir.join(FILE);
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            return toml::from_str(&text).with_context(|| format!("parsing {}", path.display()));
        }
        let manifest = Self::reconstruct(name, &dir)?;
        manifest.write(&dir)?;
        println!("==> {name} had no manifest: reconstructed into bench/results/{name}/{FILE}");
        Ok(manifest)
    }

    /// Rebuilds an older run's manifest from the report it wrote (see the
    /// module documentation).
    fn reconstruct(name: &str, dir: &Path) -> Result<Self> {
        let csv = format!("bench/results/{name}/loads.csv");
        let data_commit = command_output("git", &["log", "-1", "--format=%h", "--", &csv]);
        if data_commit.is_empty() {
            bail!("{csv} is not committed: nothing to reconstruct its manifest from");
        }
        let report_path = format!("{data_commit}:bench/results/{name}.md");
        let out = Command::new("git")
            .args(["show", &report_path])
            .current_dir(workspace_root())
            .output()
            .context("git show")?;
        if !out.status.success() {
            bail!("{report_path}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let report = String::from_utf8_lossy(&out.stdout);
        let header = |key: &str| {
            report
                .lines()
                .find_map(|l| l.strip_prefix(&format!("- {key}: ")))
                .map(str::to_owned)
        };
        let command = header("command")
            .and_then(|c| {
                c.trim_matches('`')
                    .strip_prefix("cargo xtask bench ")
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "pages".into());
        let notes = std::fs::read_to_string(dir.join("notes.txt"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect();
        Ok(Self {
            source: format!(
                "reconstructed on {} from bench/results/{name}.md as committed with its \
                 loads.csv ({data_commit}): the run predates manifests, so its own commit, \
                 loads and controllers were not recorded",
                now()
            ),
            command,
            commit: format!("not recorded (its data was committed in {data_commit})"),
            started: header("date").unwrap_or_default(),
            machine: header("machine").unwrap_or_default(),
            notes,
            alternatives: alternatives_table(&report),
            ..Self::default()
        })
    }

    /// Records whether `letter`'s gateway took pushes, as read back from the
    /// configuration it ran with.
    pub(super) fn note_push(&mut self, letter: &str, push: bool) {
        if let Some(note) = self.alternatives.iter_mut().find(|a| a.letter == letter) {
            note.push = Some(push);
        }
    }

    /// The method text of `alternative` as this run recorded it.
    pub(super) fn alternative(&self, letter: &str) -> Option<&AlternativeNote> {
        self.alternatives.iter().find(|a| a.letter == letter)
    }
}

fn now() -> String {
    command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

/// The rows `| (x) | label | method |` of a report's "Alternatives" table.
fn alternatives_table(report: &str) -> Vec<AlternativeNote> {
    report
        .lines()
        .skip_while(|l| !l.starts_with("## Alternatives"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
            let [letter, label, method, ..] = cells[..] else {
                return None;
            };
            let letter = letter.trim().strip_prefix('(')?.strip_suffix(')')?;
            if letter.is_empty() || !letter.chars().all(|c| c.is_ascii_lowercase()) {
                return None;
            }
            Some(AlternativeNote {
                letter: letter.to_owned(),
                label: label.trim().to_owned(),
                method: method.trim().to_owned(),
                push: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_reads_back_as_written() {
        let mut m = Manifest::starting("pages --loads 5".into(), &[Alternative::A, Alternative::E]);
        m.congestion = Some("bbr".into());
        m.controllers = vec!["origin namespace TCP: bbr".into()];
        m.add_config("gateway (e)".into(), "[cache]\nenabled = true\n".into());
        m.add_config("gateway (f)".into(), "[cache]\nenabled = true\n".into());
        m.finish();
        assert_eq!(m.configs.len(), 1);
        assert_eq!(m.configs[0].name, "gateway (e), gateway (f)");
        let text = toml::to_string(&m).expect("serialize");
        let back: Manifest = toml::from_str(&text).expect("parse");
        assert_eq!(back, m);
        assert_eq!(
            back.alternative("e").map(|a| a.label.as_str()),
            Some("gateway SCTP, cold")
        );
    }

    #[test]
    fn an_old_reports_alternatives_table_is_read() {
        let report = "# Page loads\n\n## Alternatives\n\n| | alternative | how |\n|---|---|---|\n\
            | (a) | nginx HTTP/1.1 | Chromium to nginx; the router only forwards |\n\
            | (q) | gateway QUIC, cold | as (e) over QUIC (quinn, CUBIC; one connection) |\n\n\
            (g) is answered from the router's cache.\n\n## Pages\n\n| page | objects | bytes | levels |\n";
        let table = alternatives_table(report);
        assert_eq!(table.len(), 2, "{table:?}");
        assert_eq!(table[1].letter, "q");
        assert!(table[1].method.contains("CUBIC"));
    }
}
