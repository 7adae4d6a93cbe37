//! Each policy's exact order on known job sizes and arrival times, simulated on a
//! link that carries one byte per tick with 10-byte chunks.

use super::*;
use gateway_protocol::PUSH_ID_BIT;

const CHUNK: u64 = 10;

#[derive(Clone, Copy)]
struct Arrival {
    at: u64,
    id: RequestId,
    stream: u16,
    class: RequestClass,
    urgency: u8,
    size: u64,
}

fn demand(at: u64, id: RequestId, stream: u16, size: u64) -> Arrival {
    Arrival {
        at,
        id,
        stream,
        class: RequestClass::Demand,
        urgency: 3,
        size,
    }
}

fn prefetch(at: u64, id: RequestId, stream: u16, size: u64) -> Arrival {
    Arrival {
        class: RequestClass::Prefetch,
        urgency: 7,
        ..demand(at, id, stream, size)
    }
}

/// A PRIORITY from the gateway, applied at the first chunk boundary at or after
/// `at`.
#[derive(Clone, Copy)]
struct Promotion {
    at: u64,
    id: RequestId,
    class: RequestClass,
    urgency: u8,
}

fn promote(at: u64, id: RequestId, urgency: u8) -> Promotion {
    Promotion {
        at,
        id,
        class: RequestClass::Demand,
        urgency,
    }
}

/// What the simulation saw: the job of every chunk in order, and completions.
struct Trace {
    chunks: Vec<RequestId>,
    finished: Vec<(RequestId, u64)>,
}

impl Trace {
    fn chunk_string(&self) -> String {
        self.chunks
            .iter()
            .map(|id| char::from(b'A' + (*id as u8 - 1)))
            .collect()
    }

    fn finish_order(&self) -> Vec<RequestId> {
        self.finished.iter().map(|(id, _)| *id).collect()
    }
}

fn simulate(config: ResponseSchedulerConfig, arrivals: Vec<Arrival>) -> Trace {
    simulate_with_promotions(config, arrivals, Vec::new())
}

fn simulate_with_promotions(
    config: ResponseSchedulerConfig,
    mut arrivals: Vec<Arrival>,
    mut promotions: Vec<Promotion>,
) -> Trace {
    arrivals.sort_by_key(|a| a.at);
    promotions.sort_by_key(|p| p.at);
    let mut pending = std::collections::VecDeque::from(arrivals);
    let mut promotions = std::collections::VecDeque::from(promotions);
    let mut remaining = HashMap::new();
    let mut scheduler = ResponseScheduler::new(config);
    let mut trace = Trace {
        chunks: Vec::new(),
        finished: Vec::new(),
    };
    let mut now = 0;
    loop {
        while pending.front().is_some_and(|a| a.at <= now) {
            let Some(a) = pending.pop_front() else { break };
            scheduler.handle_arrival(JobSpec {
                id: a.id,
                stream: a.stream,
                class: a.class,
                urgency: Urgency::new(a.urgency).expect("valid urgency"),
                remaining: Some(a.size),
            });
            scheduler.handle_ready(a.id, true);
            remaining.insert(a.id, a.size);
        }
        while promotions.front().is_some_and(|p| p.at <= now) {
            let Some(p) = promotions.pop_front() else {
                break;
            };
            let urgency = Urgency::new(p.urgency).expect("valid urgency");
            scheduler.handle_reprioritize(p.id, p.class, urgency);
        }
        let Some(id) = scheduler.poll_next() else {
            match pending.front() {
                Some(next) => {
                    now = next.at;
                    continue;
                }
                None => break,
            }
        };
        let left = remaining.get_mut(&id).expect("scheduled job exists");
        let bytes = CHUNK.min(*left);
        *left -= bytes;
        now += bytes;
        scheduler.handle_sent(id, bytes);
        trace.chunks.push(id);
        if *left == 0 {
            scheduler.handle_done(id);
            trace.finished.push((id, now));
        }
    }
    assert!(scheduler.is_empty(), "every job finishes");
    trace
}

/// A demand job on stream `id`, of `remaining` bytes.
fn demand_job(id: RequestId, remaining: Option<u64>) -> JobSpec {
    JobSpec {
        id,
        stream: id as u16,
        class: RequestClass::Demand,
        urgency: Urgency::DEFAULT,
        remaining,
    }
}

fn policy(policy: ResponsePolicyKind) -> ResponseSchedulerConfig {
    ResponseSchedulerConfig {
        policy,
        ..ResponseSchedulerConfig::default()
    }
}

#[test]
fn fcfs_runs_each_job_to_completion_in_arrival_order() {
    let trace = simulate(
        policy(ResponsePolicyKind::Fcfs),
        vec![
            demand(0, 1, 1, 50),
            demand(1, 2, 2, 10),
            demand(2, 3, 3, 20),
        ],
    );
    assert_eq!(trace.chunk_string(), "AAAAABCC");
    assert_eq!(trace.finished, vec![(1, 50), (2, 60), (3, 80)]);
}

#[test]
fn scf_preempts_a_long_job_at_the_next_chunk() {
    let trace = simulate(
        policy(ResponsePolicyKind::Scf),
        vec![
            demand(0, 1, 1, 50),
            demand(1, 2, 2, 10),
            demand(2, 3, 3, 20),
        ],
    );
    // A started alone, then yielded to the shorter B and C.
    assert_eq!(trace.chunk_string(), "ABCCAAAA");
    assert_eq!(trace.finished, vec![(2, 20), (3, 40), (1, 80)]);
}

#[test]
fn scf_mean_completion_beats_fcfs_on_the_same_jobs() {
    let jobs = vec![
        demand(0, 1, 1, 400),
        demand(0, 2, 2, 10),
        demand(5, 3, 3, 30),
        demand(5, 4, 4, 20),
    ];
    let mean = |t: &Trace| t.finished.iter().map(|(_, at)| *at).sum::<u64>() / 4;
    let fcfs = simulate(policy(ResponsePolicyKind::Fcfs), jobs.clone());
    let scf = simulate(policy(ResponsePolicyKind::Scf), jobs);
    assert_eq!(scf.finish_order(), vec![2, 4, 3, 1]);
    assert!(
        mean(&scf) * 3 < mean(&fcfs),
        "{} vs {}",
        mean(&scf),
        mean(&fcfs)
    );
}

#[test]
fn scf_treats_unknown_sizes_as_larger_than_any_known() {
    let mut s = ResponseScheduler::new(policy(ResponsePolicyKind::Scf));
    for (id, remaining) in [(1, None), (2, Some(1 << 40))] {
        s.handle_arrival(demand_job(id, remaining));
        s.handle_ready(id, true);
    }
    assert_eq!(s.poll_next(), Some(2));
    s.handle_size(1, 5);
    assert_eq!(s.poll_next(), Some(1));
}

#[test]
fn round_robin_takes_one_chunk_per_stream_per_turn() {
    let trace = simulate(
        policy(ResponsePolicyKind::Rr),
        vec![
            demand(0, 1, 1, 30),
            demand(0, 2, 2, 30),
            demand(0, 3, 3, 10),
            // Same stream as A: waits for A, as responses on one flow do.
            demand(0, 4, 1, 10),
        ],
    );
    // A finishes before D, the next response on its stream, may start.
    assert_eq!(trace.chunk_string(), "ABCABABD");
}

#[test]
fn priority_serves_demand_before_prefetch_then_by_urgency() {
    let mut urgent = demand(0, 3, 3, 10);
    urgent.urgency = 1;
    let mut relaxed = demand(0, 2, 2, 10);
    relaxed.urgency = 5;
    let trace = simulate(
        policy(ResponsePolicyKind::Priority),
        vec![prefetch(0, 1, 1, 20), relaxed, urgent],
    );
    assert_eq!(trace.chunk_string(), "CBAA");

    // Demand arriving while a prefetch is under way takes the next chunk.
    let trace = simulate(
        policy(ResponsePolicyKind::Priority),
        vec![prefetch(0, 1, 1, 50), demand(15, 2, 2, 10)],
    );
    assert_eq!(trace.chunk_string(), "AABAAA");
}

#[test]
fn wfq_shares_bytes_between_classes_by_weight() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::Wfq,
        demand_weight: 3,
        prefetch_weight: 1,
        ..ResponseSchedulerConfig::default()
    };
    let trace = simulate(config, vec![demand(0, 1, 1, 200), prefetch(0, 2, 2, 200)]);
    assert_eq!(&trace.chunk_string()[..12], "ABAAABAAABAA");
}

#[test]
fn wfq_gives_an_idle_class_no_burst_when_it_returns() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::Wfq,
        demand_weight: 3,
        prefetch_weight: 1,
        ..ResponseSchedulerConfig::default()
    };
    // Prefetch runs alone for 100 bytes; then demand arrives and gets 3 of every 4
    // chunks, not the 30 it would get if its idle time counted as credit.
    let trace = simulate(config, vec![prefetch(0, 1, 1, 300), demand(100, 2, 2, 300)]);
    assert_eq!(&trace.chunk_string()[10..18], "ABBBABBB");
}

#[test]
fn queue_aware_skips_streams_with_deep_queues() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::QueueAware,
        backlog_window: 1000,
        stream_transport_target: 500,
        ..ResponseSchedulerConfig::default()
    };
    let mut s = ResponseScheduler::new(config);
    for (id, size) in [(1, 10), (2, 20), (3, 30)] {
        s.handle_arrival(demand_job(id, Some(size)));
        s.handle_ready(id, true);
    }
    assert_eq!(s.poll_next(), Some(1), "SCF order when queues are shallow");
    s.handle_gateway_backlog(1, 1001);
    assert_eq!(s.poll_next(), Some(2), "stream 1's browser is slow");
    s.handle_transport_queued(600, &[(2, 600)]);
    assert_eq!(s.poll_next(), Some(3), "stream 2 is deep in the transport");
    s.handle_gateway_backlog(1, 0);
    assert_eq!(s.poll_next(), Some(1), "stream 1 drained");
}

#[test]
fn queue_aware_counts_bytes_sent_since_the_last_report() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::QueueAware,
        backlog_window: 1000,
        ..ResponseSchedulerConfig::default()
    };
    let mut s = ResponseScheduler::new(config);
    s.handle_arrival(demand_job(1, Some(10_000)));
    s.handle_ready(1, true);
    // A gateway without FEEDBACK: nothing is counted.
    s.handle_sent(1, 5000);
    assert_eq!(s.poll_next(), Some(1));
    // One that announced it: from 0, before any report.
    s.handle_gateway_reports();
    s.handle_sent(1, 1000);
    assert_eq!(s.poll_next(), Some(1), "1000 is at the window");
    s.handle_sent(1, 1);
    assert_eq!(s.poll_next(), None, "not reported yet");
    s.handle_gateway_backlog(1, 400);
    s.handle_sent(1, 600);
    assert_eq!(s.poll_next(), Some(1), "400 + 600 is at the window");
    s.handle_sent(1, 1);
    assert_eq!(s.poll_next(), None, "one byte beyond it");
    // The next report replaces the estimate: the browser has read it all.
    s.handle_gateway_backlog(1, 0);
    assert_eq!(s.poll_next(), Some(1), "drained");
}

#[test]
fn nothing_is_handed_out_while_the_transport_is_full() {
    // Every registered policy, so that a new one is held to it too.
    for &kind in ResponsePolicyKind::ALL {
        let mut s = ResponseScheduler::new(ResponseSchedulerConfig {
            transport_target: 100,
            ..policy(kind)
        });
        s.handle_arrival(demand_job(1, Some(10)));
        assert_eq!(s.poll_next(), None, "{kind}: not ready yet");
        s.handle_ready(1, true);
        s.handle_transport_queued(100, &[]);
        assert_eq!(s.poll_next(), None, "{kind}: transport full");
        s.handle_transport_queued(99, &[]);
        assert_eq!(s.poll_next(), Some(1), "{kind}: room again");
        assert_eq!(kind.to_string().parse::<ResponsePolicyKind>(), Ok(kind));
    }
}

#[test]
fn a_full_stream_holds_fcfs_but_other_policies_pass_it() {
    for (kind, expected) in [
        (ResponsePolicyKind::Fcfs, None),
        (ResponsePolicyKind::Priority, Some(2)),
        (ResponsePolicyKind::Scf, Some(2)),
        (ResponsePolicyKind::Rr, Some(2)),
    ] {
        let mut s = ResponseScheduler::new(policy(kind));
        s.set_stream_limit(100);
        for (id, size) in [(1, 1000), (2, 500)] {
            s.handle_arrival(demand_job(id, Some(size)));
            s.handle_ready(id, true);
        }
        s.handle_sent(1, 10);
        s.handle_transport_queued(100, &[(1, 100)]);
        let next = s.poll_next();
        // Priority would pick 1 (it arrived first) if its stream had room;
        // FCFS waits for that room.
        assert_eq!(next, expected, "{kind}");
        s.handle_transport_queued(0, &[(1, 0)]);
        assert!(s.poll_next().is_some(), "{kind}: room again");
    }
}

#[test]
fn fcfs_waits_for_an_oldest_job_that_has_no_chunk_yet() {
    let mut s = ResponseScheduler::new(policy(ResponsePolicyKind::Fcfs));
    for id in [1, 2] {
        s.handle_arrival(demand_job(id, Some(100)));
    }
    s.handle_ready(2, true);
    assert_eq!(s.poll_next(), None, "job 1 came first and is not ready");
    s.handle_ready(1, true);
    assert_eq!(s.poll_next(), Some(1));
}

#[test]
fn priority_serves_a_promoted_prefetch_before_other_prefetches() {
    let prefetches = vec![
        prefetch(0, 1, 1, 50),
        prefetch(0, 2, 2, 50),
        prefetch(0, 3, 3, 50),
    ];
    let trace = simulate(policy(ResponsePolicyKind::Priority), prefetches.clone());
    assert_eq!(trace.chunk_string(), "AAAAABBBBBCCCCC");
    // C, the last prefetch to arrive, is promoted while A runs: it takes the
    // next chunk and finishes first.
    let trace = simulate_with_promotions(
        policy(ResponsePolicyKind::Priority),
        prefetches,
        vec![promote(15, 3, 3)],
    );
    assert_eq!(trace.chunk_string(), "AACCCCCAAABBBBB");
    assert_eq!(trace.finish_order(), vec![3, 1, 2]);
}

#[test]
fn priority_ranks_a_promoted_prefetch_among_demand_by_its_new_urgency() {
    let jobs = || {
        vec![
            prefetch(0, 1, 1, 50),
            prefetch(0, 2, 2, 50),
            prefetch(0, 3, 3, 50),
            // D: demand at the default urgency 3.
            demand(0, 4, 4, 30),
        ]
    };
    // Promoted at urgency 1, C passes the demand job D as well.
    let trace = simulate_with_promotions(
        policy(ResponsePolicyKind::Priority),
        jobs(),
        vec![promote(5, 3, 1)],
    );
    assert_eq!(trace.chunk_string(), "DCCCCCDDAAAAABBBBB");
    // Promoted at urgency 5, it waits for D but still passes the prefetches.
    let trace = simulate_with_promotions(
        policy(ResponsePolicyKind::Priority),
        jobs(),
        vec![promote(5, 3, 5)],
    );
    assert_eq!(trace.chunk_string(), "DDDCCCCCAAAAABBBBB");
    // Demoted back to prefetch, a job yields to the next demand chunk.
    let trace = simulate_with_promotions(
        policy(ResponsePolicyKind::Priority),
        vec![demand(0, 1, 1, 30), demand(0, 2, 2, 30)],
        vec![Promotion {
            at: 5,
            id: 1,
            class: RequestClass::Prefetch,
            urgency: 3,
        }],
    );
    assert_eq!(trace.chunk_string(), "ABBBAA");
}

#[test]
fn wfq_charges_a_promoted_job_to_demand_from_its_next_chunk() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::Wfq,
        demand_weight: 3,
        prefetch_weight: 1,
        ..ResponseSchedulerConfig::default()
    };
    let jobs = vec![prefetch(0, 1, 1, 300), prefetch(0, 2, 2, 300)];
    // Alone in the prefetch class, A runs first (FCFS inside a class).
    let trace = simulate(config.clone(), jobs.clone());
    assert_eq!(&trace.chunk_string()[..20], "AAAAAAAAAAAAAAAAAAAA");
    // B promoted after 100 bytes: demand, idle until now, starts at prefetch's
    // virtual time (no burst of 30 chunks for B) and then takes 3 chunks of 4.
    let trace = simulate_with_promotions(config.clone(), jobs.clone(), vec![promote(100, 2, 3)]);
    assert_eq!(&trace.chunk_string()[..18], "AAAAAAAAAAABBBABBB");
    // A promoted after sending 100 bytes as prefetch: those bytes stay charged
    // to prefetch, so neither class gets a burst; A now has the demand share.
    let trace = simulate_with_promotions(config, jobs, vec![promote(100, 1, 3)]);
    assert_eq!(&trace.chunk_string()[..20], "AAAAAAAAAAABAAABAAAB");
}

#[test]
fn reprioritizing_an_unknown_or_finished_job_changes_nothing() {
    let mut s = ResponseScheduler::new(policy(ResponsePolicyKind::Priority));
    for (id, class) in [(1, RequestClass::Prefetch), (2, RequestClass::Prefetch)] {
        s.handle_arrival(JobSpec {
            class,
            ..demand_job(id, Some(100))
        });
        s.handle_ready(id, true);
    }
    s.handle_done(2);
    s.handle_reprioritize(2, RequestClass::Demand, Urgency::HIGHEST);
    s.handle_reprioritize(9, RequestClass::Demand, Urgency::HIGHEST);
    assert_eq!(s.len(), 1);
    assert_eq!(s.poll_next(), Some(1));
}

#[test]
fn the_tally_counts_chunks_and_holds_when_they_begin() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::QueueAware,
        backlog_window: 1000,
        stream_transport_target: 500,
        transport_target: 10_000,
        ..ResponseSchedulerConfig::default()
    };
    let mut s = ResponseScheduler::new(config);
    for (id, size) in [(1, 10), (2, 20), (3, 30)] {
        s.handle_arrival(demand_job(id, Some(size)));
        s.handle_ready(id, true);
    }
    assert_eq!(s.poll_next(), Some(1));
    s.handle_sent(1, 10);
    s.handle_gateway_backlog(1, 1001);
    // Asked three times while stream 1 stays over its window: one hold.
    for _ in 0..3 {
        assert_eq!(s.poll_next(), Some(2));
    }
    s.handle_transport_queued(600, &[(2, 600)]);
    assert_eq!(s.poll_next(), Some(3));
    assert_eq!(s.poll_next(), Some(3));
    s.handle_sent(3, 30);
    let tally = s.tally();
    assert_eq!(
        tally,
        ResponseSchedulerTally {
            chunks: 2,
            held_for_backlog: 1,
            held_for_stream_transport: 1,
            held_for_transport: 0,
        }
    );
    // Stream 1 drains, then fills again: a second backlog hold.
    s.handle_gateway_backlog(1, 0);
    assert_eq!(s.poll_next(), Some(1));
    s.handle_gateway_backlog(1, 2000);
    assert_eq!(s.poll_next(), Some(3));
    assert_eq!(s.tally().held_for_backlog, 2);
    // The whole transport full, asked twice: one hold; an unknown job sends
    // nothing and counts no chunk.
    s.handle_transport_queued(10_000, &[]);
    assert_eq!(s.poll_next(), None);
    assert_eq!(s.poll_next(), None);
    s.handle_sent(99, 100);
    assert_eq!(s.tally().held_for_transport, 1);
    assert_eq!(s.tally().chunks, 2);
}

#[test]
fn other_policies_count_no_queue_aware_holds() {
    let mut s = ResponseScheduler::new(ResponseSchedulerConfig {
        backlog_window: 10,
        ..policy(ResponsePolicyKind::Scf)
    });
    s.handle_arrival(demand_job(1, Some(10)));
    s.handle_ready(1, true);
    s.handle_gateway_backlog(1, 1_000_000);
    assert_eq!(s.poll_next(), Some(1), "SCF ignores the backlog");
    s.handle_sent(1, 10);
    assert_eq!(
        s.tally(),
        ResponseSchedulerTally {
            chunks: 1,
            ..ResponseSchedulerTally::default()
        }
    );
}

#[test]
fn a_report_with_the_arrived_bytes_counts_what_is_still_on_its_way() {
    let config = ResponseSchedulerConfig {
        policy: ResponsePolicyKind::QueueAware,
        backlog_window: 1000,
        ..ResponseSchedulerConfig::default()
    };
    let mut s = ResponseScheduler::new(config);
    s.handle_gateway_reports();
    s.handle_arrival(demand_job(1, Some(100_000)));
    s.handle_ready(1, true);
    for _ in 0..3 {
        s.handle_sent(1, 400);
        s.handle_written(1, 400);
    }
    assert_eq!(s.poll_next(), None, "1200 sent, no report yet");
    // Measured when none of it had arrived: a report without the arrived
    // bytes forgets all 1200 of them; one with them keeps counting them.
    s.handle_gateway_backlog(1, 0);
    assert_eq!(s.gateway_backlog(1), Some(0));
    s.handle_gateway_backlog_arrived(1, 0, 0);
    assert_eq!(s.gateway_backlog(1), Some(1200));
    assert_eq!(s.poll_next(), None);
    // 800 arrived and 300 of them are still unread: 300 + 400 on the way.
    s.handle_gateway_backlog_arrived(1, 300, 800);
    assert_eq!(s.gateway_backlog(1), Some(700));
    assert_eq!(s.poll_next(), Some(1));
    // The count is modulo 2^32, as on the wire.
    s.handle_written(1, u64::from(u32::MAX));
    s.handle_gateway_backlog_arrived(1, 0, 1200u32.wrapping_add(u32::MAX) - 100);
    assert_eq!(s.gateway_backlog(1), Some(100));
    // A gateway claiming more than was written: nothing in flight, no
    // endless hold.
    s.handle_gateway_backlog_arrived(1, 10, 1200u32.wrapping_add(u32::MAX) + 5);
    assert_eq!(s.gateway_backlog(1), Some(10));
}

/// The slow-consumer benchmark's loop, simulated in 1 ms steps: a browser
/// reading 125 bytes per ms (1 Mbit/s) on stream 1 beside a fast one on
/// stream 2, one 20 Mbit/s link with 40 ms each way, the gateway reporting
/// every 20 ms. Returns stream 1's largest backlog at the gateway.
fn slow_stream_peak_backlog(arrived_in_reports: bool) -> u64 {
    use std::collections::VecDeque;
    const WINDOW: u64 = 1 << 20;
    const CHUNK: u64 = 16 * 1024;
    const LINK_PER_MS: u64 = 2500;
    const ONE_WAY_MS: u64 = 40;
    const REPORT_EVERY_MS: u64 = 20;
    const SLOW_PER_MS: u64 = 125;
    let header = gateway_protocol::HEADER_LEN as u64;
    let mut s = ResponseScheduler::new(ResponseSchedulerConfig {
        policy: ResponsePolicyKind::QueueAware,
        backlog_window: WINDOW,
        ..ResponseSchedulerConfig::default()
    });
    s.handle_gateway_reports();
    // SCF prefers the slow browser's response whenever it may send.
    for (id, size) in [(1, 1 << 30), (2, 1 << 31)] {
        s.handle_arrival(demand_job(id, Some(size)));
        s.handle_ready(id, true);
    }
    // The origin's send queue (bytes not yet on the link), then the link.
    let mut send_queue: VecDeque<(u16, u64)> = VecDeque::new();
    let mut on_link: VecDeque<(u64, u16, u64)> = VecDeque::new();
    let mut reports: VecDeque<(u64, u64, u64)> = VecDeque::new();
    let (mut backlog, mut arrived, mut peak) = (0u64, [0u64; 3], 0u64);
    for now in 0..10_000u64 {
        // The origin: fill its transport up to the target, chunk by chunk.
        while let Some((at, bytes, seen)) = reports.front().copied() {
            if at > now {
                break;
            }
            reports.pop_front();
            if arrived_in_reports {
                s.handle_gateway_backlog_arrived(1, bytes, seen as u32);
            } else {
                s.handle_gateway_backlog(1, bytes);
            }
        }
        loop {
            let queued: u64 = send_queue.iter().map(|q| q.1).sum();
            s.handle_transport_queued(queued, &[]);
            let Some(id) = s.poll_next() else { break };
            let stream = id as u16;
            s.handle_sent(id, CHUNK);
            s.handle_written(stream, CHUNK + header);
            send_queue.push_back((stream, CHUNK + header));
        }
        // The link: its rate per ms, arriving one way later.
        let mut budget = LINK_PER_MS;
        while budget > 0 {
            let Some(front) = send_queue.front_mut() else {
                break;
            };
            let bytes = front.1.min(budget);
            front.1 -= bytes;
            budget -= bytes;
            on_link.push_back((now + ONE_WAY_MS, front.0, bytes));
            if front.1 == 0 {
                send_queue.pop_front();
            }
        }
        // The gateway: bytes arrive, the slow browser reads its pace.
        while let Some(&(at, stream, bytes)) = on_link.front() {
            if at > now {
                break;
            }
            on_link.pop_front();
            arrived[usize::from(stream)] += bytes;
            if stream == 1 {
                backlog += bytes;
            }
        }
        backlog = backlog.saturating_sub(SLOW_PER_MS);
        peak = peak.max(backlog);
        if now % REPORT_EVERY_MS == 0 {
            reports.push_back((now + ONE_WAY_MS, backlog, arrived[1]));
        }
    }
    peak
}

#[test]
fn the_slow_stream_holds_its_window_only_with_the_arrived_bytes() {
    const WINDOW: u64 = 1 << 20;
    // Without them, every report forgets what was in flight when it was
    // measured, and the slow stream is sent a round trip of the link beyond
    // its window (the benchmark's 1,345 KiB against 1,024).
    let forgetful = slow_stream_peak_backlog(false);
    assert!(
        forgetful > WINDOW + 128 * 1024,
        "expected the overshoot without the arrived bytes: {forgetful}"
    );
    // With them, the origin stops at the window: at most one chunk beyond.
    let exact = slow_stream_peak_backlog(true);
    assert!(
        exact <= WINDOW + 16 * 1024 + 64,
        "the window plus one chunk: {exact}"
    );
}

fn push_job(id: RequestId, remaining: u64) -> JobSpec {
    JobSpec {
        id: PUSH_ID_BIT | id,
        stream: 1,
        class: RequestClass::Prefetch,
        urgency: Urgency::LOWEST,
        remaining: Some(remaining),
    }
}

/// Pushes go below every request whatever the policy: small pushes that
/// arrived first wait for a large prefetch and a large demand request (SCF
/// and FCFS would otherwise send them first), and a render-blocking push
/// goes before an earlier, smaller plain one.
#[test]
fn pushes_go_below_every_request_under_every_policy() {
    for &kind in ResponsePolicyKind::ALL {
        let mut s = ResponseScheduler::new(policy(kind));
        s.handle_push_arrival(push_job(1, 10), false);
        s.handle_push_arrival(push_job(2, 20), true);
        s.handle_arrival(JobSpec {
            class: RequestClass::Prefetch,
            urgency: Urgency::LOWEST,
            ..demand_job(3, Some(1000))
        });
        s.handle_arrival(demand_job(4, Some(500)));
        for id in [PUSH_ID_BIT | 1, PUSH_ID_BIT | 2, 3, 4] {
            s.handle_ready(id, true);
        }
        let mut order = Vec::new();
        while let Some(id) = s.poll_next() {
            order.push(id);
            s.handle_done(id);
        }
        assert!(
            order[..2].iter().all(|id| *id == 3 || *id == 4),
            "{kind}: {order:?}"
        );
        assert_eq!(order[2..], [PUSH_ID_BIT | 2, PUSH_ID_BIT | 1], "{kind}");
    }
}

/// A push the gateway promotes (PRIORITY under its push id) competes as a
/// request from then on: before, a large prefetch goes first under every
/// policy; after, the small promoted push does.
#[test]
fn a_promoted_push_competes_as_a_request() {
    for &kind in ResponsePolicyKind::ALL {
        let mut s = ResponseScheduler::new(policy(kind));
        s.handle_push_arrival(push_job(1, 10), false);
        s.handle_arrival(JobSpec {
            class: RequestClass::Prefetch,
            urgency: Urgency::LOWEST,
            ..demand_job(3, Some(1000))
        });
        s.handle_ready(PUSH_ID_BIT | 1, true);
        s.handle_ready(3, true);
        assert_eq!(s.poll_next(), Some(3), "{kind}");
        s.handle_reprioritize(PUSH_ID_BIT | 1, RequestClass::Demand, Urgency::DEFAULT);
        assert_eq!(s.poll_next(), Some(PUSH_ID_BIT | 1), "{kind}");
    }
}

#[test]
fn a_render_blocking_push_goes_before_the_other_pushes() {
    for &kind in ResponsePolicyKind::ALL {
        let mut s = ResponseScheduler::new(policy(kind));
        s.handle_push_arrival(push_job(1, 10), false);
        s.handle_push_arrival(push_job(2, 1000), true);
        s.handle_ready(PUSH_ID_BIT | 1, true);
        s.handle_ready(PUSH_ID_BIT | 2, true);
        assert_eq!(s.poll_next(), Some(PUSH_ID_BIT | 2), "{kind}");
        s.handle_done(PUSH_ID_BIT | 2);
        assert_eq!(s.poll_next(), Some(PUSH_ID_BIT | 1), "{kind}");
    }
}

/// The slow-consumer benchmark's failing rounds, simulated in 1 ms steps: a
/// 20 Mbit/s link with 40 ms each way, the gateway reporting every 20 ms,
/// 16 KiB chunks and the shipped transport targets (128 KiB in total, 64 KiB
/// a stream). Stream 1's browser reads like curl's `--limit-rate`: nothing
/// until its stream is held at the window, then at 2.6 s everything at once,
/// after which its socket takes `absorbed` bytes without their counting at
/// the gateway (acknowledged), and then nothing. Two fast downloads on
/// streams 2 and 3 start at 3 s. Returns the bytes of the fast downloads
/// that arrived from 3 s to 6 s.
fn fast_bytes_beside_a_bursty_reader(absorbed: u64) -> u64 {
    use std::collections::VecDeque;
    const WINDOW: u64 = 1 << 20;
    const CHUNK: u64 = 16 * 1024;
    const LINK_PER_MS: u64 = 2500;
    const ONE_WAY_MS: u64 = 40;
    const REPORT_EVERY_MS: u64 = 20;
    const BURST_AT: u64 = 2600;
    const FAST_AT: u64 = 3000;
    const UNTIL: u64 = 6000;
    let header = gateway_protocol::HEADER_LEN as u64;
    let mut s = ResponseScheduler::new(ResponseSchedulerConfig {
        policy: ResponsePolicyKind::QueueAware,
        backlog_window: WINDOW,
        ..ResponseSchedulerConfig::default()
    });
    s.handle_gateway_reports();
    // The slow browser's response began first, so SCF ranks it first.
    s.handle_arrival(demand_job(1, Some(1 << 30)));
    s.handle_ready(1, true);
    let mut send_queue: VecDeque<(u16, u64)> = VecDeque::new();
    let mut on_link: VecDeque<(u64, u16, u64)> = VecDeque::new();
    // (when it reaches the origin, [(stream, backlog, arrived)]).
    type Report = (u64, [(u16, u64, u64); 3]);
    let mut reports: VecDeque<Report> = VecDeque::new();
    let mut backlog = [0u64; 4];
    let mut arrived = [0u64; 4];
    let mut room = 0u64;
    let mut fast = 0u64;
    let mut held_at_window = false;
    for now in 0..UNTIL {
        if now == FAST_AT {
            for id in [2, 3] {
                s.handle_arrival(demand_job(id, Some(1 << 31)));
                s.handle_ready(id, true);
            }
        }
        while let Some((at, entries)) = reports.front().copied() {
            if at > now {
                break;
            }
            reports.pop_front();
            for (stream, bytes, seen) in entries {
                s.handle_gateway_backlog_arrived(stream, bytes, seen as u32);
            }
        }
        loop {
            let queued: u64 = send_queue.iter().map(|q| q.1).sum();
            let per_stream: Vec<(u16, u64)> = (1..=3)
                .map(|stream| {
                    let bytes = send_queue.iter().filter(|q| q.0 == stream).map(|q| q.1);
                    (stream, bytes.sum())
                })
                .collect();
            s.handle_transport_queued(queued, &per_stream);
            let Some(id) = s.poll_next() else { break };
            let stream = id as u16;
            s.handle_sent(id, CHUNK);
            s.handle_written(stream, CHUNK + header);
            send_queue.push_back((stream, CHUNK + header));
        }
        let mut budget = LINK_PER_MS;
        while budget > 0 {
            let Some(front) = send_queue.front_mut() else {
                break;
            };
            let bytes = front.1.min(budget);
            front.1 -= bytes;
            budget -= bytes;
            on_link.push_back((now + ONE_WAY_MS, front.0, bytes));
            if front.1 == 0 {
                send_queue.pop_front();
            }
        }
        while let Some(&(at, stream, bytes)) = on_link.front() {
            if at > now {
                break;
            }
            on_link.pop_front();
            let i = usize::from(stream);
            arrived[i] += bytes;
            if stream == 1 {
                backlog[1] += bytes;
            } else if now >= FAST_AT {
                // The fast browsers read at once.
                fast += bytes;
            }
        }
        held_at_window |= backlog[1] >= WINDOW;
        if now == BURST_AT {
            assert!(held_at_window, "the slow stream never filled its window");
            backlog[1] = 0;
            room = absorbed;
        }
        let taken = backlog[1].min(room);
        backlog[1] -= taken;
        room -= taken;
        if now % REPORT_EVERY_MS == 0 {
            let entry = |stream: u16| {
                let i = usize::from(stream);
                (stream, backlog[i], arrived[i])
            };
            reports.push_back((now + ONE_WAY_MS, [entry(1), entry(2), entry(3)]));
        }
    }
    fast
}

#[test]
fn a_bursty_slow_reader_refills_beside_the_fast_downloads_not_instead_of_them() {
    const LINK_PER_MS: u64 = 2500;
    // 3 s of the link, less the round trip before the first fast bytes arrive.
    let link = (3000 - 80) * LINK_PER_MS;
    for absorbed in [0, 1 << 20, 3 << 20] {
        let fast = fast_bytes_beside_a_bursty_reader(absorbed);
        // Before the rule, the slow stream took one of the two streams' worth
        // of the transport, half the link, until it had refilled: the fast
        // downloads got 0.99, 0.85 and 0.56 of the link; with it 0.99, 0.90
        // and 0.90.
        assert!(
            fast * 100 >= link * 88,
            "{absorbed} bytes absorbed: the fast downloads got {:.2} of the link",
            fast as f64 / link as f64
        );
    }
}
