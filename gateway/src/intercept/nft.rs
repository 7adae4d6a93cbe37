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
        for feature in [Feature::Tproxy, Feature::Socket, Feature::Fib] {
            if check_text(feature.probe(), "probing kernel support").is_err() {
                return InterceptError::KernelUnsupported {
                    feature: feature.name(),
                };
            }
        }
    }
    InterceptError::Nft { action, message }
}

/// Kernel parts the rules need beyond plain nftables.
#[derive(Debug, Clone, Copy)]
enum Feature {
    Tproxy,
    Socket,
    Fib,
}

impl Feature {
    fn name(self) -> &'static str {
        match self {
            Feature::Tproxy => "tproxy (CONFIG_NFT_TPROXY)",
            Feature::Socket => "socket (CONFIG_NFT_SOCKET)",
            Feature::Fib => "fib (CONFIG_NFT_FIB_INET)",
        }
    }

    /// A throw-away table using only this expression; checked, never applied.
    fn probe(self) -> &'static str {
        match self {
            Feature::Tproxy => {
                "table inet gateway_probe { chain c { type filter hook prerouting priority mangle; meta l4proto tcp tproxy ip to :1 } }"
            }
            Feature::Socket => {
                "table inet gateway_probe { chain c { type filter hook prerouting priority mangle; socket transparent 1 accept } }"
            }
            Feature::Fib => {
                "table inet gateway_probe { chain c { type filter hook prerouting priority mangle; fib daddr type local accept } }"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
