//! Running `nft`: apply a JSON batch, delete the table, ask whether it exists.
//!
//! The `nftables` crate builds the batch; this module runs `nft -j -f -` itself
//! rather than through the crate's `apply_ruleset`, which leaves nft's stderr on
//! the daemon's terminal instead of returning it. Here every failure carries nft's
//! own message and is sorted into the [`InterceptError`] variant that tells the
//! operator what to do.

use std::io::Write as _;
use std::process::{Command, Stdio};

use nftables::schema::{NfListObject, NfObject, Nftables};

use super::InterceptError;
use super::ruleset::table_object;

/// The program; found through `PATH` like any administrator's shell would.
const NFT: &str = "nft";

/// Applies `batch` as one transaction (`nft -j -f -`).
pub(crate) fn apply(batch: &Nftables<'_>, action: &'static str) -> Result<(), InterceptError> {
    let json = serde_json::to_string(batch).map_err(InterceptError::NftJson)?;
    run(&["-j", "-f", "-"], Some(&json), action).map(drop)
}

/// Checks nft-syntax `text` against the kernel without applying it (`nft -c`).
pub(crate) fn check_text(text: &str, action: &'static str) -> Result<(), InterceptError> {
    run(&["-c", "-f", "-"], Some(text), action).map(drop)
}

/// Applies nft-syntax `text` (`nft -f -`).
fn apply_text(text: &str, action: &'static str) -> Result<(), InterceptError> {
    run(&["-f", "-"], Some(text), action).map(drop)
}

/// Whether table `inet <name>` exists.
pub(crate) fn table_exists(name: &str) -> Result<bool, InterceptError> {
    let out = run(&["-j", "list", "tables", "inet"], None, "listing tables")?;
    let tables: Nftables<'_> = serde_json::from_str(&out).map_err(InterceptError::NftJson)?;
    Ok(tables
        .objects
        .iter()
        .any(|o| matches!(o, NfObject::ListObject(NfListObject::Table(t)) if t.name == name)))
}

/// Deletes table `inet <name>` if it exists; says whether it did.
pub(crate) fn delete_table(name: &str) -> Result<bool, InterceptError> {
    if !table_exists(name)? {
        return Ok(false);
    }
    let mut batch = nftables::batch::Batch::new();
    batch.delete(NfListObject::Table(table_object(name)));
    apply(&batch.to_nftables(), "deleting the table")?;
    Ok(true)
}

/// Runs nft with `args`, feeding `stdin`; returns its stdout.
fn run(args: &[&str], stdin: Option<&str>, action: &'static str) -> Result<String, InterceptError> {
    let mut child = Command::new(NFT)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => InterceptError::NftNotFound,
            _ => InterceptError::Spawn {
                program: NFT,
                source,
            },
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A write error means nft exited early; its status and stderr say why.
        let _ = pipe.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|source| InterceptError::Spawn {
            program: NFT,
            source,
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if !out.status.success() {
        return Err(classify(action, stderr));
    }
    String::from_utf8(out.stdout).map_err(|_| InterceptError::Nft {
        action,
        message: "nft printed output that is not UTF-8".to_owned(),
    })
}

/// Turns nft's complaint into the error that names the fix.
fn classify(action: &'static str, message: String) -> InterceptError {
    if message.contains("Operation not permitted") || message.contains("Permission denied") {
        return InterceptError::PermissionDenied { what: "nftables" };
    }
    // A missing expression type (module nft_tproxy or nft_socket, or the kernel
    // built without them) surfaces as ENOENT on the rule that uses it. nft does not
    // say which; probing each alone does.
    if message.contains("No such file or directory") && action != "deleting the table" {
        for feature in Feature::ALL {
            if check_text(&feature.probe("gateway_probe", 1), "probing kernel support").is_err() {
                return InterceptError::KernelUnsupported {
                    feature: feature.name(),
                };
            }
        }
    }
    InterceptError::Nft { action, message }
}

/// Kernel parts the rules need beyond plain nftables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// `tproxy`: hands a flow to a transparent socket (nft_tproxy).
    Tproxy,
    /// `socket transparent`: later packets of a handed flow (nft_socket).
    Socket,
    /// `fib daddr type local`: connections to this host itself (nft_fib_inet).
    Fib,
}

impl Feature {
    /// Every part, in the order the rules use them.
    pub const ALL: [Feature; 3] = [Feature::Tproxy, Feature::Socket, Feature::Fib];

    /// The expression and the kernel option that provides it.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Tproxy => "tproxy (CONFIG_NFT_TPROXY)",
            Feature::Socket => "socket (CONFIG_NFT_SOCKET)",
            Feature::Fib => "fib (CONFIG_NFT_FIB_INET)",
        }
    }

    /// A throw-away table `table` using only this expression, in a rule that
    /// only packets carrying `guard_mark` reach. One statement per line:
    /// nft 1.0's parser wants a newline or `;` before each closing brace.
    fn probe(self, table: &str, guard_mark: u32) -> String {
        let expression = match self {
            Feature::Tproxy => "meta l4proto tcp tproxy ip to :1",
            Feature::Socket => "socket transparent 1 accept",
            Feature::Fib => "fib daddr type local accept",
        };
        format!(
            "table inet {table} {{\n\
             \tchain c {{\n\
             \t\ttype filter hook prerouting priority mangle; policy accept;\n\
             \t\tmeta mark {guard_mark:#x} {expression}\n\
             \t}}\n\
             }}\n"
        )
    }
}

/// The name of the scratch table [`probe_in_kernel`] creates: per process, so
/// that two doctors at once do not delete each other's.
fn scratch_table() -> String {
    format!("gateway_doctor_{}", std::process::id())
}

/// Loads `feature` into the kernel in a scratch table, then deletes the table.
///
/// Stronger than `nft -c`: the kernel loads the expression's module and
/// validates the rule at its hook. The rule is guarded by a mark nothing
/// carries (the tproxy mark's complement), so no packet is steered while it
/// exists, even on a router in use.
pub(crate) fn probe_in_kernel(feature: Feature, guard_mark: u32) -> Result<(), InterceptError> {
    let table = scratch_table();
    let applied = apply_text(&feature.probe(&table, guard_mark), "probing kernel support");
    // Removed whether or not the rule went in (the table may have).
    let removed = delete_table(&table);
    applied?;
    removed.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_one_statement_per_line_behind_the_guard_mark() {
        assert_eq!(
            Feature::Socket.probe("t", 0x10),
            "table inet t {\n\tchain c {\n\t\ttype filter hook prerouting priority mangle; \
             policy accept;\n\t\tmeta mark 0x10 socket transparent 1 accept\n\t}\n}\n"
        );
    }

    #[test]
    fn permission_failures_name_the_capability() {
        let error = classify(
            "installing the table",
            "Error: Could not process rule: Operation not permitted".to_owned(),
        );
        assert!(
            matches!(error, InterceptError::PermissionDenied { what: "nftables" }),
            "{error:?}"
        );
    }

    #[test]
    fn other_failures_keep_nft_s_message() {
        let error = classify("installing the table", "Error: syntax error".to_owned());
        assert_eq!(
            error.to_string(),
            "nft failed installing the table: Error: syntax error"
        );
    }
}
