//! The response scheduler's policies, one [`ResponsePolicy`] each, and the
//! registration list ([`policies!`] at the end) that names them in
//! origin.toml, on the command line and in `/metrics`.
//!
//! A policy only chooses: the scheduler ([`ResponseScheduler`]) keeps the
//! jobs and every figure a policy reads (arrival order, bytes in the
//! transport, the gateway's backlog, WFQ's virtual time, the stream served
//! last), holds everything back while the transport is at its target, and
//! counts what was decided. A policy is therefore a stateless unit struct:
//! `choose` looks at the scheduler and names the job whose chunk goes next.
//!
//! Adding one (docs/architecture.md, "Adding a response policy"): a unit
//! struct implementing [`ResponsePolicy`] here, one line in the `policies!`
//! list, its exact order in `tests.rs`, its name in docs/origin.md and in
//! config/origin.toml's comment.

use std::fmt;
use std::str::FromStr;

use gateway_protocol::RequestId;
use serde::{Deserialize, Serialize};

use super::{Job, ResponseScheduler, class_index, scf_key};

/// A way to order the responses of one association.
pub(super) trait ResponsePolicy: fmt::Debug + Sync {
    /// The job whose next chunk goes out now, if any may. Only jobs that
    /// [`ResponseScheduler::sendable`] accepts may be chosen.
    fn choose(&self, scheduler: &ResponseScheduler) -> Option<RequestId>;

    /// Whether the policy passes over streams for their queues (the
    /// gateway's backlog, bytes in the transport): then the scheduler counts
    /// when such holds begin, for `/metrics`.
    fn counts_holds(&self) -> bool {
        false
    }
}

/// First come, first served: the earliest arrival runs to completion.
#[derive(Debug)]
struct Fcfs;

impl ResponsePolicy for Fcfs {
    fn choose(&self, s: &ResponseScheduler) -> Option<RequestId> {
        // Strictly in order: while the oldest job has no chunk yet or its
        // stream is full, FCFS waits rather than let a later job pass (that is
        // what makes it the baseline a single transport FIFO would give).
        // Within its tier: pushes wait for no request, and no request for
        // them.
        let oldest = s.tier_jobs().min_by_key(|j| j.seq)?;
        s.sendable(oldest).then_some(oldest.spec.id)
    }
}

/// Round robin over streams, one chunk per stream per turn.
#[derive(Debug)]
struct RoundRobin;

impl ResponsePolicy for RoundRobin {
    fn choose(&self, s: &ResponseScheduler) -> Option<RequestId> {
        let last = s.last_stream;
        // The first stream after the last one served, cyclically; within a
        // stream, the earliest arrival.
        s.sendable_jobs()
            .min_by_key(|j| {
                let after = last.is_none_or(|l| j.spec.stream > l);
                (!after, j.spec.stream, j.seq)
            })
            .map(|j| j.spec.id)
    }
}

/// Shortest remaining bytes first (SRPT at chunk granularity).
#[derive(Debug)]
struct ShortestFirst;

impl ResponsePolicy for ShortestFirst {
    fn choose(&self, s: &ResponseScheduler) -> Option<RequestId> {
        s.sendable_jobs()
            .min_by_key(|j| scf_key(j))
            .map(|j| j.spec.id)
    }
}

/// Demand before prefetch, then RFC 9218 urgency, then arrival.
#[derive(Debug)]
struct Priority;

impl ResponsePolicy for Priority {
    fn choose(&self, s: &ResponseScheduler) -> Option<RequestId> {
        s.sendable_jobs()
            .min_by_key(|j| (j.spec.class, j.spec.urgency, j.seq))
            .map(|j| j.spec.id)
    }
}

/// Weighted fair queueing between demand and prefetch by bytes sent, FCFS
/// inside a class.
#[derive(Debug)]
struct WeightedFair;

impl ResponsePolicy for WeightedFair {
    fn choose(&self, s: &ResponseScheduler) -> Option<RequestId> {
        let virt = s.class_virtual;
        s.sendable_jobs()
            .min_by_key(|j| (virt[class_index(j.spec.class)], j.seq))
            .map(|j| j.spec.id)
    }
}

/// SCF's order, skipping streams whose backlog at the gateway is above
/// `backlog_window`, whose bytes in the transport are at
/// `stream_transport_target`, or that are browser-limited and have a message
/// in the transport (the scheduler's module docs).
#[derive(Debug)]
struct QueueAware;

impl ResponsePolicy for QueueAware {
    fn choose(&self, s: &ResponseScheduler) -> Option<RequestId> {
        let window = s.config.backlog_window;
        let target = s.config.stream_transport_target;
        let shallow = |j: &&Job| {
            s.gateway_backlog(j.spec.stream).is_none_or(|b| b <= window)
                && s.in_transport(j.spec.stream).is_none_or(|t| t < target)
                && s.may_queue_more(j.spec.stream)
        };
        s.sendable_jobs()
            .filter(shallow)
            .min_by_key(|j| scf_key(j))
            .map(|j| j.spec.id)
    }

    fn counts_holds(&self) -> bool {
        true
    }
}

/// The registration list: `Variant = "name" => Policy`, one line a policy.
/// It makes [`ResponsePolicyKind`] (the value of `policy` in origin.toml),
/// its names and the policy object each variant stands for.
macro_rules! policies {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal => $policy:expr, )+) => {
        /// Which policy orders the responses (`response_scheduler.policy`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum ResponsePolicyKind {
            $( $(#[$doc])* #[serde(rename = $name)] $variant, )+
        }

        impl ResponsePolicyKind {
            /// Every policy, in the order of the registration list.
            pub const ALL: &[ResponsePolicyKind] = &[$(ResponsePolicyKind::$variant),+];

            /// Its name in origin.toml (and in the `policy` label of `/metrics`).
            pub fn name(self) -> &'static str {
                match self {
                    $(ResponsePolicyKind::$variant => $name,)+
                }
            }

            /// The policy object.
            pub(super) fn policy(self) -> &'static dyn ResponsePolicy {
                match self {
                    $(ResponsePolicyKind::$variant => &$policy,)+
                }
            }
        }
    };
}

policies! {
    /// First come, first served.
    Fcfs = "fcfs" => Fcfs,
    /// Round robin over streams.
    Rr = "rr" => RoundRobin,
    /// Shortest remaining bytes first.
    Scf = "scf" => ShortestFirst,
    /// Class, then urgency, then arrival.
    Priority = "priority" => Priority,
    /// Weighted fair queueing between demand and prefetch.
    Wfq = "wfq" => WeightedFair,
    /// SCF order, skipping streams whose queues are too deep.
    QueueAware = "queue-aware" => QueueAware,
}

impl FromStr for ResponsePolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let all = || ResponsePolicyKind::ALL.iter().copied();
        all().find(|kind| kind.name() == s).ok_or_else(|| {
            let names: Vec<&str> = all().map(ResponsePolicyKind::name).collect();
            format!(
                "unknown response policy `{s}` (expected one of {})",
                names.join(", ")
            )
        })
    }
}

impl fmt::Display for ResponsePolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
