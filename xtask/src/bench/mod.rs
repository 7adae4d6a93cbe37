//! `cargo xtask bench WHICH`: the benchmarks, one module each, over a leaf of
//! shared helpers. Every report lands in bench/results/ (bench/README.md).
//!
//! - [`options`]: the command line ([`BenchOptions`], which benchmark).
//! - `veth`: `transport`, `scheduler`, `static` and `ebpf`, between two
//!   namespaces joined by one veth pair (`scheduler --wan`: over the WAN
//!   emulator).
//! - `transport_wan`: `transport --wan`, one association over the WAN
//!   emulator, alone and beside a CUBIC TCP connection.
//! - `coexist`: the association (and kernel BBR TCP for reference) beside
//!   CUBIC and BBR TCP flows on a loss-free shared bottleneck of the WAN
//!   emulator, with the queueing delay they cause.
//! - `cache`, `wan`, `prefetch`, `pages`, `papers`, `slow_consumer`: the benchmarks in the
//!   testbed's demo topology (with the WAN emulator where a link matters).
//! - `origin_scale`: one origin process on loopback holding 10,000
//!   associations; `init_flood`: spoofed INITs against an origin in a
//!   namespace while established associations download.
//! - `common`: release builds of the measuring programs and the report
//!   header; `link`: the path between a benchmark's two processes (a veth
//!   pair or the emulated WAN) and running them across it. Start reading at
//!   [`run`], then the module of the benchmark.
//!
//! Layering: `mod.rs` > each benchmark > `link` > `common`; a benchmark never
//! imports another one.

use anyhow::{Result, bail};

mod cache;
mod coexist;
mod common;
mod init_flood;
mod link;
mod load;
mod options;
mod origin_scale;
mod pages;
mod papers;
mod prefetch;
mod slow_consumer;
mod transport_wan;
mod veth;
mod wan;

pub(crate) use self::options::BenchOptions;
use self::options::Which;

/// Runs the benchmark `options` name.
pub(crate) fn run(options: &BenchOptions) -> Result<()> {
    if !matches!(
        options.which,
        Which::Transport
            | Which::Scheduler
            | Which::SlowConsumer
            | Which::Load
            | Which::OriginScale
            | Which::InitFlood
            | Which::Coexist
    ) && (options.wan.is_some() || options.seconds.is_some())
    {
        bail!(
            "--wan and --seconds are for the transport, scheduler, slow-consumer, load, \
             origin-scale, init-flood and coexist benchmarks"
        );
    }
    if matches!(
        options.which,
        Which::Load | Which::OriginScale | Which::InitFlood | Which::Coexist
    ) && options.wan.is_some()
    {
        bail!("--wan is not for the load, origin-scale, init-flood and coexist benchmarks");
    }
    if !matches!(options.which, Which::Pages | Which::Coexist) && !options.rtt.is_empty() {
        bail!("--rtt is for the pages and coexist benchmarks (prefetch: --rtt-ms)");
    }
    if !matches!(options.which, Which::Pages | Which::SlowConsumer) && !options.rate.is_empty() {
        bail!("--rate is for the pages and slow-consumer benchmarks");
    }
    if !options.links.is_empty()
        && (!matches!(options.which, Which::Pages)
            || !options.rtt.is_empty()
            || !options.rate.is_empty())
    {
        bail!("--links is for the pages benchmark, and replaces --rtt, --loss and --rate");
    }
    if !matches!(options.which, Which::SlowConsumer) && options.rounds.is_some() {
        bail!("--rounds is for the slow-consumer benchmark");
    }
    if !matches!(options.which, Which::Coexist) && !options.buffers.is_empty() {
        bail!("--buffers is for the coexist benchmark");
    }
    match options.which {
        Which::Transport => match options.wan {
            Some(cell) => transport_wan::run(options, cell),
            None => veth::transport(options),
        },
        Which::Scheduler => veth::scheduler(options),
        Which::Static => veth::static_files(options),
        Which::Ebpf => veth::ebpf(options),
        Which::Cache => cache::run(options.callgrind, options.flamegraph),
        Which::Load => load::run(options.connections, options.seconds),
        Which::OriginScale => origin_scale::run(options.associations, options.seconds),
        Which::InitFlood => init_flood::run(options.seconds, options.callgrind),
        Which::Wan => wan::run(&options.only),
        Which::Pages if options.from_csv => pages::rerender(&options.name),
        Which::Pages => pages::run(&pages::PagesBench {
            loads: options.loads,
            rtts_ms: if options.rtt.is_empty() {
                pages::DEFAULT_RTTS_MS.to_vec()
            } else {
                options.rtt.clone()
            },
            losses: options.loss.clone(),
            rates_mbit: if options.rate.is_empty() {
                pages::DEFAULT_RATES_MBIT.to_vec()
            } else {
                options.rate.clone()
            },
            links: options.links.clone(),
            alternatives: options.alternatives.clone(),
            pages: options.pages.clone(),
            name: options.name.clone(),
            tcp_cc: options.tcp_cc.clone(),
            tunnel_h2: options.tunnel_h2,
        }),
        Which::Papers => papers::run(&options.only),
        Which::Prefetch => prefetch::run(prefetch::PrefetchBench {
            rtt_ms: options.rtt_ms,
        }),
        Which::Coexist => coexist::run(&coexist::CoexistBench {
            rtts_ms: options.rtt.clone(),
            buffers_bdp: options.buffers.clone(),
            subjects: options.subjects.clone(),
            competitions: options.competitions.clone(),
            seconds: options.seconds,
        }),
        Which::SlowConsumer => slow_consumer::run(slow_consumer::SlowConsumerBench {
            cell: options.wan.unwrap_or(slow_consumer::DEFAULT_CELL),
            rates: match (&options.rate[..], options.wan) {
                ([], Some(cell)) => vec![cell.rate_mbit],
                ([], None) => slow_consumer::DEFAULT_RATES.to_vec(),
                (rates, _) => rates.to_vec(),
            },
            rounds: options
                .rounds
                .unwrap_or(slow_consumer::DEFAULT_ROUNDS)
                .max(1),
            seconds: options.seconds.unwrap_or(20.0),
        }),
    }
}
