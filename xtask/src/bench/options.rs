//! `cargo xtask bench`'s command line: which benchmark, and the knobs of each.

/// Options for `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchOptions {
    /// Which benchmark.
    #[arg(value_enum)]
    pub which: Which,
    /// Bytes per bulk cell.
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
    /// Also run every cell over a 100 Mbit/s token-bucket link (transport);
    /// also run the throughput rounds over a 1 Gbit/s one (ebpf).
    #[arg(long)]
    pub rate_limited: bool,
    /// Count instructions with callgrind (needs valgrind). transport: also
    /// instructions per payload byte of every backend; cache and static:
    /// only instructions per request of the gateway's cache hit or the
    /// origin's static file, reported in bench/results/{cache,static}-callgrind.md;
    /// init-flood: only instructions per INIT answered and dropped, in
    /// bench/results/init-flood-callgrind.md.
    #[arg(long)]
    pub callgrind: bool,
    /// cache and static: only a flame graph of the path (perf with DWARF
    /// stacks, inferno), bench/results/{cache,static}-flamegraph.svg.
    #[arg(long)]
    pub flamegraph: bool,
    /// Run over the WAN emulator instead of a veth: RTT_MS,LOSS_PERCENT,RATE_MBIT,
    /// e.g. 80,1,100 (transport: timed bulk cells alone and beside a CUBIC TCP
    /// flow, report transport-wan.md; scheduler: the rate-limited sections,
    /// report scheduler-wan.md; slow-consumer: the link, default 80,0,20).
    #[arg(long, value_name = "RTT_MS,LOSS_PERCENT,RATE_MBIT")]
    pub wan: Option<super::link::WanCell>,
    /// Seconds each timed cell runs (transport --wan: 20; coexist: 60;
    /// scheduler: its sections' own, 40 for zipf and 6 for prefetch; load:
    /// the soak, 600; origin-scale: each loading phase, 30; init-flood: the
    /// baseline window and the flood, 30 each).
    /// Shorter runs are for checking the set-up, not for figures.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Run only the sections whose workload is named here (scheduler: zipf,
    /// prefetch, thesis; wan: rtt, loss, rate; papers: hol, model, objects);
    /// all by default.
    #[arg(long)]
    pub only: Vec<String>,
    /// Browser connections held open at once (load).
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// Associations held by the origin at once (origin-scale).
    #[arg(long, default_value_t = super::origin_scale::DEFAULT_ASSOCIATIONS)]
    pub associations: usize,
    /// Round-trip time of the emulated WAN, in ms (prefetch).
    #[arg(long, default_value_t = 80)]
    pub rtt_ms: u64,
    /// Rounds per link (pages): in each, every alternative records one load
    /// per page after idle and one warm.
    #[arg(long, default_value_t = 5)]
    pub loads: usize,
    /// Round-trip times of the links, in ms (pages: 20,80,200 unless given;
    /// coexist: 20,80).
    #[arg(long, value_delimiter = ',')]
    pub rtt: Vec<u64>,
    /// Bottleneck buffers in bandwidth-delay products (coexist: 0.5,1,2,8
    /// unless given).
    #[arg(long, value_delimiter = ',')]
    pub buffers: Vec<f64>,
    /// Which subjects: association, kernel-bbr (coexist: both unless given;
    /// the report says which were left out).
    #[arg(long, value_delimiter = ',')]
    pub subjects: Vec<String>,
    /// Which competitions: cubic1, bbr1, cubic6 (coexist: all unless given).
    #[arg(long, value_delimiter = ',')]
    pub competitions: Vec<String>,
    /// Random loss per direction of the links, in percent (pages).
    #[arg(long, value_delimiter = ',', default_values_t = [0.0, 1.0, 3.0])]
    pub loss: Vec<f64>,
    /// The links themselves, each `RTT/LOSS/RATE` (ms, percent, Mbit/s), in
    /// the order to run (pages): instead of every combination of --rtt,
    /// --loss and --rate.
    #[arg(long, value_delimiter = ',')]
    pub links: Vec<String>,
    /// Bottleneck rates of the links, in Mbit/s (pages: 10,100 unless given;
    /// slow-consumer: one demo each, 20,100 unless given or --wan names one).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<u64>,
    /// Rounds per link rate (slow-consumer: 5).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Which alternatives, by the issues' letters: a-h, q, p (push) and fp
    /// (push and prefetch) (pages).
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = super::pages::Alternative::ALL)]
    pub alternatives: Vec<super::pages::Alternative>,
    /// Which pages (pages): the generated p25, p50, p75; their script-driven
    /// js25, js50, js75 (resources found by import(), fetch() and images
    /// inserted after load); the demo site's `demo`; `handbook`, a chapter
    /// of the Debian Administrator's Handbook as its package installs it.
    #[arg(long, value_delimiter = ',', default_values_t = ["p50".to_owned()])]
    pub pages: Vec<String>,
    /// Load nothing: redraw the report and charts from the last run's
    /// bench/results/{name}/loads.csv (pages).
    #[arg(long)]
    pub from_csv: bool,
    /// The report's name: bench/results/{name}.md and {name}/ (pages).
    #[arg(long, default_value = "pages")]
    pub name: String,
    /// The congestion controller of every sender (pages): the kernel's TCP in
    /// every namespace, our SCTP and quinn; bbr, cubic or reno.
    #[arg(long, default_value = "bbr")]
    pub tcp_cc: String,
    /// The origin offers h2 by ALPN on HTTPS tunnels (`tls.h2`), so (h) runs
    /// HTTP/2 inside one tunnel instead of HTTP/1.1 on six (pages).
    #[arg(long)]
    pub tunnel_h2: bool,
}

/// The benchmarks this command knows.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Which {
    /// Bulk throughput and small-message rate of each backend against plain TCP.
    Transport,
    /// The origin's schedulers on the wire: SCF vs RR vs FCFS on Zipf sizes,
    /// demand during a bulk prefetch (FCFS vs priority), the thesis's 6,000 requests.
    Scheduler,
    /// Static-file request rate: the origin against nginx on the same files.
    Static,
    /// A cache hit served by the gateway against nginx (wrk), and the
    /// gateway's memory at 1,000 connections.
    Cache,
    /// The WAN emulator against its tolerances: round-trip time, loss, rate.
    Wan,
    /// Page load in Chromium with the prefetch queue off and on, over an
    /// emulated WAN (--rtt-ms).
    Prefetch,
    /// Page loads in Chromium through every alternative (nginx HTTP/1.1 and
    /// HTTP/2, Squid, the gateway over framed TCP and SCTP, prefetch, warm
    /// cache) over the same emulated links (--rtt, --loss, --rate, --loads,
    /// --alternatives, --pages).
    Pages,
    /// The eBPF programs: ns per packet of xdp_sctp and tc_sctp on crafted
    /// frames (BPF_PROG_TEST_RUN), and userspace SCTP throughput over a veth
    /// with them attached against detached, in alternating rounds.
    Ebpf,
    /// Load: 10,000 concurrent keep-alive browser connections held through
    /// the gateway (RSS and fds against a stated budget), then a soak at
    /// sustained load through the cache and the association (--seconds, 600)
    /// sampling RSS and fds for growth.
    Load,
    /// The papers' experiments on our transport over the WAN emulator:
    /// head-of-line blocking after one drop (hol), cold-start object latency
    /// against the analytical model (model), time per object against object
    /// count (objects).
    Papers,
    /// Coexistence on a loss-free shared bottleneck over the WAN emulator
    /// (50 Mbit/s; --rtt 20,80; --buffers 0.5,1,2,8 BDP; --seconds 60): the
    /// association, and kernel BBR TCP for reference, beside one CUBIC, one
    /// BBR or six CUBIC TCP flows; shares, Jain's index, queueing delay, loss.
    Coexist,
    /// One browser reading at 1 Mbit/s beside three fast downloads through
    /// the gateway and one association over the WAN emulator (--wan, default
    /// 80,0,20; --rate, default 20,100; --rounds, default 5; --seconds per
    /// phase, default 20), FEEDBACK off, on, and on with the eBPF programs.
    SlowConsumer,
    /// One origin holding --associations (10,000) associations on loopback
    /// while 100 load pages: RSS and CPU per idle association, the loaders'
    /// p99 against one association alone (--seconds per loading phase, 30).
    OriginScale,
    /// Spoofed INITs at one core's rate for --seconds (30) against an origin
    /// in a namespace, while 4 associations download from it: their goodput
    /// before and during, INITs answered per second, and the cost of one
    /// INIT through `Endpoint::handle`.
    InitFlood,
}
