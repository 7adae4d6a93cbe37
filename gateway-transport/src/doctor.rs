//! The transport's part of `gateway doctor` and `origin doctor`: whether this
//! host can carry associations with the configured backend (kernel SCTP, or the
//! userspace fallback over UDP) and whether UDP encapsulation is set up.
//!
//! It reads the host (opens one kernel SCTP socket, reads one sysctl) and
//! changes nothing.

use daemon_config::doctor::Check;

use crate::backend::{BackendChoice, BackendKind};
use crate::config::AssociationConfig;

pub use crate::host::kernel_sctp_udp_port;

/// The verdicts on the transport for `choice` with `config`. `local_ports` are
/// the UDP or SCTP ports this daemon listens on (the origin's), empty for a
/// daemon that only connects (the gateway).
pub fn checks(
    choice: BackendChoice,
    config: &AssociationConfig,
    local_ports: &[u16],
) -> Vec<Check> {
    let kind = choice.resolve();
    let kernel = crate::kernel::available();
    let mut checks = Vec::new();
    let sctp = "kernel SCTP";
    checks.push(match (kind, kernel) {
        (BackendKind::Kernel, true) => Check::ok(sctp, "the sctp module is loaded or loadable"),
        (BackendKind::Kernel, false) => Check::fail(
            sctp,
            "backend = \"kernel\" but this kernel cannot open an SCTP socket",
            "modprobe sctp (Debian: the sctp module is in linux-image; some cloud \
             kernels leave it out), or backend = \"auto\" for the userspace SCTP over UDP",
        ),
        (BackendKind::Userspace, true) => Check::ok(
            sctp,
            "present; this configuration uses the userspace SCTP over UDP \
             (backend = \"kernel\" would use the kernel's)",
        ),
        (BackendKind::Userspace, false) => Check::ok(
            sctp,
            "absent; the userspace SCTP over UDP fallback needs nothing from the kernel",
        ),
        #[cfg_attr(
            not(feature = "baselines"),
            expect(unreachable_patterns, reason = "only the baselines use no SCTP")
        )]
        (other, _) => Check::skip(sctp, format!("backend {other} does not use SCTP")),
    });
    let encapsulation = "UDP encapsulation";
    let kernel_port = kernel_sctp_udp_port();
    checks.push(match kind {
        BackendKind::Kernel => match (config.kernel.udp_encapsulation_port, kernel_port) {
            (None, _) => Check::skip(
                encapsulation,
                "native SCTP (IP protocol 132); udp_encapsulation_port is not set",
            ),
            (Some(remote), Some(local)) => Check::ok(
                encapsulation,
                format!("to remote UDP port {remote}, receiving on net.sctp.udp_port = {local}"),
            ),
            (Some(remote), None) => Check::fail(
                encapsulation,
                format!(
                    "udp_encapsulation_port = {remote} but net.sctp.udp_port is 0: the \
                     kernel does not receive encapsulated SCTP"
                ),
                format!("sysctl -w net.sctp.udp_port={remote} (Linux 5.11 or later)"),
            ),
        },
        BackendKind::Userspace => match kernel_port {
            Some(port) if local_ports.contains(&port) => Check::fail(
                encapsulation,
                format!(
                    "the kernel's SCTP already receives UDP-encapsulated SCTP on port {port}, \
                     which this daemon listens on"
                ),
                format!("sysctl -w net.sctp.udp_port=0, or listen on another port than {port}"),
            ),
            _ => Check::ok(
                encapsulation,
                "the userspace SCTP runs over UDP (RFC 6951): the path must pass UDP \
                 to the origin's port",
            ),
        },
        #[cfg_attr(
            not(feature = "baselines"),
            expect(unreachable_patterns, reason = "only the baselines use no SCTP")
        )]
        other => Check::skip(encapsulation, format!("backend {other} does not use SCTP")),
    });
    checks
}

#[cfg(test)]
mod tests {
    use daemon_config::doctor::Verdict;

    use super::*;

    #[test]
    fn other_backends_skip_both_items() {
        let others = BackendKind::ALL
            .iter()
            .filter(|kind| !matches!(kind, BackendKind::Kernel | BackendKind::Userspace));
        for &kind in others {
            let checks = checks(kind.into(), &AssociationConfig::default(), &[]);
            assert!(
                checks.iter().all(|c| c.verdict == Verdict::Skip),
                "{checks:?}"
            );
        }
    }

    #[test]
    fn userspace_never_fails_for_a_missing_kernel_module() {
        let checks = checks(
            BackendKind::Userspace.into(),
            &AssociationConfig::default(),
            &[],
        );
        assert_eq!(checks[0].verdict, Verdict::Ok, "{checks:?}");
    }

    #[test]
    fn kernel_backend_fails_exactly_when_the_kernel_has_no_sctp() {
        let checks = checks(
            BackendKind::Kernel.into(),
            &AssociationConfig::default(),
            &[],
        );
        let expected = if crate::kernel::available() {
            Verdict::Ok
        } else {
            Verdict::Fail
        };
        assert_eq!(checks[0].verdict, expected, "{checks:?}");
    }
}
