//! The report `gateway doctor` and `origin doctor` print: one verdict per host
//! item, each with what was found and, when it is not fine, the fix.
//!
//! The checks themselves live with the code they check (the gateway's
//! interception, its eBPF loader, the transport); this module only collects
//! their verdicts and decides the exit status. What it never does: probe the
//! host itself.
//!
//! ```text
//! ok    ipv4 forwarding: net.ipv4.ip_forward = 1
//! FAIL  interface lan9: no such interface in this network namespace
//!       fix: create it, or correct intercept.lan_interfaces
//! warn  rp_filter on lan0: strict (1)
//!       fix: sysctl -w net.ipv4.conf.lan0.rp_filter=2
//! skip  eBPF: ebpf.object is not set (per-stream accounting runs in userspace)
//! ```

use std::fmt;

/// How one item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Not needed with this configuration.
    Skip,
    /// Present and usable.
    Ok,
    /// Works, but not as well as it could, or only for part of the traffic.
    Warn,
    /// Something required is missing: the daemon will not work as configured.
    Fail,
}

impl Verdict {
    /// The word in the report's first column.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Skip => "skip",
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One item's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, short (`ipv4 forwarding`, `interface lan0`).
    pub item: String,
    /// How it stands.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do about it; empty when nothing is to be done.
    pub fix: String,
}

impl Check {
    /// A fine item.
    pub fn ok(item: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(item, Verdict::Ok, detail, "")
    }

    /// An item not needed here, and why.
    pub fn skip(item: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(item, Verdict::Skip, detail, "")
    }

    /// An item that works but not fully, with the fix.
    pub fn warn(
        item: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(item, Verdict::Warn, detail, fix)
    }

    /// A required item that is missing, with the fix.
    pub fn fail(
        item: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(item, Verdict::Fail, detail, fix)
    }

    fn new(
        item: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            item: item.into(),
            verdict,
            detail: detail.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A multi-line detail (a tool's own message) stays under its item.
        let indent = |text: &str| text.trim_end().replace('\n', "\n      ");
        write!(
            f,
            "{:<5} {}: {}",
            self.verdict.word(),
            self.item,
            indent(&self.detail)
        )?;
        if !self.fix.is_empty() {
            write!(f, "\n      fix: {}", indent(&self.fix))?;
        }
        Ok(())
    }
}

/// Every item's verdict, in the order checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The verdicts.
    pub checks: Vec<Check>,
}

impl Report {
    /// Adds one verdict.
    pub fn push(&mut self, check: Check) {
        self.checks.push(check);
    }

    /// Whether something required is missing.
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.verdict == Verdict::Fail)
    }

    /// The process exit status: 0 when nothing required is missing, else 1.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.failed())
    }

    /// The verdict of the first item named `item`, if checked.
    pub fn verdict(&self, item: &str) -> Option<Verdict> {
        self.checks
            .iter()
            .find(|c| c.item == item)
            .map(|c| c.verdict)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.checks {
            writeln!(f, "{check}")?;
        }
        let count = |v: Verdict| self.checks.iter().filter(|c| c.verdict == v).count();
        write!(
            f,
            "{} ok, {} warnings, {} failed, {} skipped: ",
            count(Verdict::Ok),
            count(Verdict::Warn),
            count(Verdict::Fail),
            count(Verdict::Skip),
        )?;
        f.write_str(if self.failed() {
            "something required is missing (see FAIL above)"
        } else {
            "nothing required is missing"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_verdict_is_one_line_and_the_fix_is_indented_under_it() {
        let mut report = Report::default();
        report.push(Check::ok("ipv4 forwarding", "net.ipv4.ip_forward = 1"));
        report.push(Check::fail(
            "interface lan9",
            "no such interface",
            "correct intercept.lan_interfaces",
        ));
        assert_eq!(
            report.to_string(),
            "ok    ipv4 forwarding: net.ipv4.ip_forward = 1\n\
             FAIL  interface lan9: no such interface\n      \
             fix: correct intercept.lan_interfaces\n\
             1 ok, 0 warnings, 1 failed, 0 skipped: something required is missing (see FAIL above)"
        );
        assert_eq!(report.exit_code(), 1);
        assert_eq!(report.verdict("interface lan9"), Some(Verdict::Fail));
    }

    #[test]
    fn warnings_and_skips_do_not_fail() {
        let mut report = Report::default();
        report.push(Check::warn("rp_filter", "strict", "loosen it"));
        report.push(Check::skip("eBPF", "not configured"));
        assert!(!report.failed());
        assert_eq!(report.exit_code(), 0);
    }
}
