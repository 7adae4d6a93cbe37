//! The measuring program of `cargo xtask bench ebpf` (xtask/src/bench/veth.rs).
//!
//! - `ebpf_bench cost OBJECT REPEAT`: loads the object and runs `xdp_sctp` and
//!   `tc_sctp` on crafted frames with `BPF_PROG_TEST_RUN`, `REPEAT` times each,
//!   and prints one JSON line per (program, frame) with the kernel's mean run
//!   time in ns, then one per program with the verifier's instruction count.
//! - `ebpf_bench hold OBJECT INTERFACE [MODE]`: loads the object, attaches `xdp_sctp` (in XDP MODE: auto, generic or driver)
//!   to the ingress and `tc_sctp` to the egress of `INTERFACE` (in the
//!   namespace it runs in), prints `attached`, and detaches when its standard
//!   input closes (or it is killed: nothing is pinned, the links go with the
//!   process).
//!
//! Needs root. The frames are the tests' own (tests/support/frames.rs).

#[path = "../tests/support/frames.rs"]
#[expect(dead_code, reason = "the tests use more of the frame builders")]
mod frames;

use std::io::Read as _;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use frames::*;
use gateway::ebpf::{SctpAccounting, SctpAccountingConfig, SctpHook, XdpMode, test_run};

/// The frames the cost is measured on: name, frame, and for TC the
/// `__sk_buff` context (GSO), empty for none.
fn frames() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let one = ipv4(IPPROTO_SCTP, &sctp(&[data(1, 1, 0, &[0xab; 1200])]));
    let sixteen: Vec<Vec<u8>> = (0..16).map(|i| data(i, i as u16, 0, &[7; 64])).collect();
    let gaps = sack(
        7000,
        65_536,
        &[(2, 3), (5, 9), (12, 12), (20, 30)],
        &[6999, 6998],
    );
    let forty_five: Vec<Vec<u8>> = (0..45).map(|i| data(i, 1, 0, &[9; 40])).collect();
    vec![
        ("1 DATA chunk (1200 B)", one, Vec::new()),
        (
            "1 DATA chunk over UDP (RFC 6951)",
            ipv4(
                IPPROTO_UDP,
                &udp(40_000, RFC6951_PORT, &sctp(&[data(1, 1, 0, &[0xab; 1200])])),
            ),
            Vec::new(),
        ),
        (
            "16 DATA chunks (64 B each)",
            ipv4(IPPROTO_SCTP, &sctp(&sixteen)),
            Vec::new(),
        ),
        (
            "SACK with 4 gap blocks, 2 dup TSNs",
            ipv4(IPPROTO_SCTP, &sctp(&[gaps])),
            Vec::new(),
        ),
        (
            "45 DATA chunks, kernel SCTP GSO (TC only)",
            ipv4(IPPROTO_SCTP, &sctp(&forty_five)),
            sk_buff_with_gso(45, 0xffff),
        ),
    ]
}

fn cost(object: &Path, repeat: u32) -> Result<()> {
    let accounting = SctpAccounting::load_file(object, SctpAccountingConfig::default())
        .with_context(|| format!("loading {}", object.display()))?;
    for hook in [SctpHook::Ingress, SctpHook::Egress] {
        let program = match hook {
            SctpHook::Ingress => "xdp_sctp",
            SctpHook::Egress => "tc_sctp",
        };
        let fd = accounting.program_fd(hook)?;
        for (name, frame, context) in frames() {
            if !context.is_empty() && hook == SctpHook::Ingress {
                continue;
            }
            let out = test_run::run_with_context(fd, &frame, &context, repeat)
                .with_context(|| format!("{program} on {name}"))?;
            println!(
                "{}",
                serde_json::json!({
                    "program": program,
                    "frame": name,
                    "bytes": frame.len(),
                    "repeat": repeat,
                    "ns": out.duration_ns,
                })
            );
        }
        let verified = accounting.verified_instructions(hook)?;
        println!(
            "{}",
            serde_json::json!({ "program": program, "verified_instructions": verified })
        );
    }
    Ok(())
}

fn hold(object: &Path, interface: &str, mode: XdpMode) -> Result<()> {
    let mut accounting = SctpAccounting::load_file(object, SctpAccountingConfig::default())
        .with_context(|| format!("loading {}", object.display()))?;
    accounting.attach_ingress(interface, mode)?;
    accounting.attach_egress(interface)?;
    println!("attached");
    // Until the caller closes our stdin (or kills us).
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    let stats = accounting.walker_stats()?;
    println!(
        "{}",
        serde_json::json!({
            "ingress_sctp_packets": stats.0.sctp_packets,
            "ingress_chunk_limit": stats.0.chunk_limit,
            "egress_sctp_packets": stats.1.sctp_packets,
            "egress_gso_packets": stats.1.gso_packets,
            "egress_gso_partial": stats.1.gso_partial,
        })
    );
    accounting.detach()?;
    Ok(())
}

fn xdp_mode(name: &str) -> Result<XdpMode> {
    match name {
        "auto" => Ok(XdpMode::Auto),
        "generic" => Ok(XdpMode::Generic),
        "driver" => Ok(XdpMode::Driver),
        other => bail!("XDP mode `{other}`: auto, generic or driver"),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["cost", object, repeat] => cost(
            Path::new(object),
            repeat.parse().context("REPEAT: a count")?,
        ),
        ["hold", object, interface] => hold(Path::new(object), interface, XdpMode::Auto),
        ["hold", object, interface, mode] => hold(Path::new(object), interface, xdp_mode(mode)?),
        _ => bail!(
            "usage: ebpf_bench cost OBJECT REPEAT | ebpf_bench hold OBJECT INTERFACE [auto|generic|driver]"
        ),
    }
}
