//! One side of the scheduling benchmarks; `cargo xtask bench scheduler` runs the
//! origin side in one namespace and the gateway side in another over a
//! rate-limited veth, for each policy, and compares.
//!
//! The origin side is the real association driver with the synthetic handler.
//! The gateway side is a load generator speaking the real protocol session:
//!
//! - `zipf`: Poisson arrivals for `--seconds`; sizes 1 KiB·2^k (k = 0..=12, up to
//!   4 MiB) with Zipf popularity (alpha 1, small most popular); the arrival rate
//!   gives `--load` of `--rate-mbit`. Each request on its own stream in turn.
//! - `prefetch`: one bulk prefetch (16 MiB, class prefetch, urgency 7) and demand
//!   objects (50 KiB, class demand) every 200 ms on other streams: demand latency.
//! - `thesis`: 6,000 requests with sizes uniform in 1..=256 KiB, 64 outstanding:
//!   total throughput (the thesis's SCF-vs-RR experiment).
//! - `static`: `--count` requests for `--path`, 64 outstanding, against an origin
//!   serving `--root` with the real file service: requests per second. With
//!   `--seconds`, requests go out for that long instead of `--count` of them
//!   (as wrk's `-d` does), so that the origin and nginx are loaded alike.
//!
//! Each side prints one JSON line. All loops are bounded in count and time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway_protocol::{
    Message, Request, RequestClass, RequestId, Session, SessionConfig, Urgency,
};
use gateway_transport::hello::open_gateway_session;
use gateway_transport::{AssociationConfig, BackendKind, Listener, connect};
use origin::files::{FilesConfig, StaticFiles};
use origin::response_scheduler::{ResponsePolicyKind, ResponseSchedulerConfig};
use origin::server::{DriverConfig, drive};
use origin::service::Service;
use origin::synthetic::SyntheticHandler;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Hard cap on a run, whatever the workload says.
const MAX_RUN: Duration = Duration::from_secs(180);
const STREAMS: u16 = 64;

#[derive(Debug)]
struct Args {
    server: bool,
    addr: SocketAddr,
    backend: BackendKind,
    policy: ResponsePolicyKind,
    workload: String,
    load: f64,
    rate_mbit: f64,
    seconds: f64,
    /// `--seconds` was given (the static workload then runs for a time).
    seconds_given: bool,
    seed: u64,
    root: Option<std::path::PathBuf>,
    path: String,
    count: usize,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        server: false,
        addr: "127.0.0.1:9899".parse()?,
        backend: BackendKind::Userspace,
        policy: ResponsePolicyKind::Scf,
        workload: "zipf".into(),
        load: 0.8,
        rate_mbit: 20.0,
        seconds: 30.0,
        seconds_given: false,
        seed: 1,
        root: None,
        path: "/assets/tile-01.svg".into(),
        count: 20_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => args.server = true,
            "--client" => args.server = false,
            "--addr" => args.addr = value()?.parse()?,
            "--backend" => {
                args.backend = match value()?.as_str() {
                    "userspace" => BackendKind::Userspace,
                    "framed-tcp" => BackendKind::FramedTcp,
                    "kernel" => BackendKind::Kernel,
                    other => bail!("unknown backend {other}"),
                }
            }
            "--policy" => args.policy = value()?.parse().map_err(anyhow::Error::msg)?,
            "--workload" => args.workload = value()?,
            "--load" => args.load = value()?.parse()?,
            "--rate-mbit" => args.rate_mbit = value()?.parse()?,
            "--seconds" => {
                args.seconds = value()?.parse()?;
                args.seconds_given = true;
            }
            "--seed" => args.seed = value()?.parse()?,
            "--root" => args.root = Some(value()?.into()),
            "--path" => args.path = value()?,
            "--count" => args.count = value()?.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

fn transport_config() -> AssociationConfig {
    AssociationConfig {
        streams: STREAMS + 1,
        max_inbound_streams: STREAMS + 1,
        ..AssociationConfig::default()
    }
}

async fn server(args: &Args) -> Result<()> {
    let listener = Listener::bind(args.backend, args.addr, &transport_config()).await?;
    println!("{{\"ready\":true}}");
    let assoc = listener.accept().await?;
    let config = DriverConfig {
        response_scheduler: ResponseSchedulerConfig {
            policy: args.policy,
            ..ResponseSchedulerConfig::default()
        },
        chunk_size: 16 * 1024,
        max_open_requests: 100_000,
        max_request_body: 0,
        stream_queue_limit: transport_config().max_buffered_per_stream as u64,
        egress: None,
        tunnels: None,
    };
    let stats = match &args.root {
        Some(root) => {
            let files = StaticFiles::new(&FilesConfig::new(root.clone()))?;
            drive(assoc, Arc::new(Service::files(files, None, None)), config).await?
        }
        None => drive(assoc, Arc::new(SyntheticHandler::default()), config).await?,
    };
    println!(
        "{{\"side\":\"server\",\"policy\":\"{}\",\"completed\":{},\"body_bytes\":{}}}",
        args.policy, stats.completed, stats.body_bytes
    );
    Ok(())
}

/// Zipf (alpha 1) over 13 sizes, 1 KiB to 4 MiB, smallest most popular.
struct ZipfSizes {
    sizes: Vec<u64>,
    cumulative: Vec<f64>,
    mean: f64,
}

impl ZipfSizes {
    fn new() -> Self {
        let sizes: Vec<u64> = (0..13).map(|k| 1024u64 << k).collect();
        let weights: Vec<f64> = (1..=sizes.len()).map(|r| 1.0 / r as f64).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        let mean = sizes
            .iter()
            .zip(&weights)
            .map(|(s, w)| *s as f64 * w / total)
            .sum();
        Self {
            sizes,
            cumulative,
            mean,
        }
    }

    fn sample(&self, rng: &mut StdRng) -> u64 {
        let u: f64 = rng.random();
        let i = self.cumulative.iter().position(|c| u <= *c);
        self.sizes[i.unwrap_or(self.sizes.len() - 1)]
    }
}

/// A planned request: when (from the start), how big, which class.
#[derive(Debug, Clone, Copy)]
struct Planned {
    at: Duration,
    size: u64,
    class: RequestClass,
    urgency: u8,
}

fn plan(args: &Args) -> Result<(Vec<Planned>, usize)> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    Ok(match args.workload.as_str() {
        "zipf" => {
            let zipf = ZipfSizes::new();
            let bytes_per_s = args.rate_mbit * 1e6 / 8.0 * args.load;
            let lambda = bytes_per_s / zipf.mean;
            let mut t = 0.0;
            let mut plan = Vec::new();
            while t < args.seconds {
                let u: f64 = rng.random::<f64>().max(1e-12);
                t += -u.ln() / lambda;
                plan.push(Planned {
                    at: Duration::from_secs_f64(t),
                    size: zipf.sample(&mut rng),
                    class: RequestClass::Demand,
                    urgency: 3,
                });
            }
            (plan, usize::MAX)
        }
        "prefetch" => {
            let mut plan = vec![Planned {
                at: Duration::ZERO,
                size: 16 << 20,
                class: RequestClass::Prefetch,
                urgency: 7,
            }];
            let demands = (args.seconds / 0.2) as u32;
            plan.extend((1..=demands).map(|i| Planned {
                at: Duration::from_millis(u64::from(i) * 200),
                size: 50 * 1024,
                class: RequestClass::Demand,
                urgency: 3,
            }));
            (plan, usize::MAX)
        }
        "thesis" => {
            let plan = (0..6000)
                .map(|_| Planned {
                    at: Duration::ZERO,
                    size: rng.random_range(1024..=256 * 1024),
                    class: RequestClass::Demand,
                    urgency: 3,
                })
                .collect();
            (plan, 64)
        }
        "static" => {
            if args.seconds_given && !(0.0..MAX_RUN.as_secs_f64() - 10.0).contains(&args.seconds) {
                bail!(
                    "--seconds {}: at most {} s",
                    args.seconds,
                    MAX_RUN.as_secs() - 10
                );
            }
            // Timed: one request, repeated until `--seconds` have passed.
            let count = if args.seconds_given { 1 } else { args.count };
            let plan = (0..count)
                .map(|_| Planned {
                    at: Duration::ZERO,
                    size: 0,
                    class: RequestClass::Demand,
                    urgency: 3,
                })
                .collect();
            (plan, 64)
        }
        other => bail!("unknown workload {other}"),
    })
}

struct InFlight {
    sent: Instant,
    size: u64,
    class: RequestClass,
}

/// Sends the planned requests as they fall due, at most `max_outstanding` at
/// once, reads the responses, and prints the client's JSON line.
async fn client(args: &Args) -> Result<()> {
    let (plan, max_outstanding) = plan(args)?;
    let assoc = connect(args.backend, args.addr, &transport_config()).await?;
    let mut session = open_gateway_session(&assoc, SessionConfig::default().capabilities).await?;
    let data_streams = session.data_streams();

    // The static workload with `--seconds` repeats its request until then.
    let send_for = (args.workload == "static" && args.seconds_given)
        .then(|| Duration::from_secs_f64(args.seconds));
    let more = |next: usize, elapsed: Duration| match send_for {
        Some(limit) => elapsed < limit,
        None => next < plan.len(),
    };

    let started = Instant::now();
    let mut next = 0usize;
    let mut next_id: RequestId = 1;
    let mut tally = Tally::default();
    while (more(next, started.elapsed()) || !tally.in_flight.is_empty())
        && started.elapsed() < MAX_RUN
    {
        let can_send = more(next, started.elapsed()) && tally.in_flight.len() < max_outstanding;
        let wait = if can_send {
            plan[next % plan.len()].at.saturating_sub(started.elapsed())
        } else {
            MAX_RUN
        };
        // A request already due goes out now: tokio rounds timer deadlines up to
        // the next millisecond, so sleeping even for zero would cap the rate at
        // about 1,000 requests per second.
        let send_now = (can_send && wait.is_zero())
            || tokio::select! {
                () = tokio::time::sleep(wait), if can_send => true,
            m = tokio::time::timeout(Duration::from_secs(5), assoc.recv()) => {
                let Ok(m) = m else {
                    let waiting = tally.waiting();
                    tracing::warn!(?waiting, sent = next, "nothing received for 5 s");
                    continue;
                };
                let m = m?;
                tally.handle_message(&mut session, m.stream, &m.data)?;
                false
            }
            };
        if send_now {
            let p = plan[next % plan.len()];
            next += 1;
            let id = next_id;
            next_id += 1;
            let stream = 1 + ((id - 1) % u32::from(data_streams)) as u16;
            session
                .handle_request_sent(id, stream)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            assoc.send(stream, request(args, &p, id).to_bytes()).await?;
            tally.in_flight.insert(
                id,
                InFlight {
                    sent: Instant::now(),
                    size: p.size,
                    class: p.class,
                },
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let unfinished = tally.in_flight.len();
    assoc.close().await?;
    print_client_result(args, &tally, elapsed, unfinished);
    if unfinished > 0 {
        bail!("{unfinished} requests unfinished at the time cap");
    }
    Ok(())
}

/// The request message for planned request `p`: the file under test for the
/// static workload, else `p.size` bytes of the synthetic handler.
fn request(args: &Args, p: &Planned, id: RequestId) -> Message {
    Message::Request(Request {
        id,
        urgency: Urgency::new(p.urgency).unwrap_or_default(),
        class: p.class,
        end: true,
        head: Bytes::from(if args.workload == "static" {
            format!("GET {} HTTP/1.1\r\nhost: bench\r\n\r\n", args.path)
        } else {
            format!("GET /bytes/{} HTTP/1.1\r\nhost: bench\r\n\r\n", p.size)
        }),
    })
}

/// What the client has seen of its requests.
#[derive(Default)]
struct Tally {
    /// Requests sent and not yet finished.
    in_flight: HashMap<RequestId, InFlight>,
    /// Each finished request: size, class, seconds from send to end.
    done: Vec<(u64, RequestClass, f64)>,
    /// Response body bytes received.
    body_bytes: u64,
}

impl Tally {
    /// Passes one received message through the session and counts it; a
    /// reset or a message the session refuses fails the run.
    fn handle_message(
        &mut self,
        session: &mut Session,
        stream: u16,
        message: &Bytes,
    ) -> Result<()> {
        match session.handle_message(stream, message) {
            Ok(Message::ResponseBody { data, .. }) => self.body_bytes += data.len() as u64,
            Ok(Message::ResponseEnd { id, .. }) => {
                if let Some(f) = self.in_flight.remove(&id) {
                    self.done
                        .push((f.size, f.class, f.sent.elapsed().as_secs_f64()));
                }
            }
            Ok(Message::Reset { id, code, .. }) => bail!("request {id} reset: {code:?}"),
            Ok(_) => {}
            Err(reaction) => bail!("session refused a message: {reaction:?}"),
        }
        Ok(())
    }

    /// The requests in flight, (id, size) in id order, for the stall warning.
    fn waiting(&self) -> Vec<(RequestId, u64)> {
        let mut waiting: Vec<(RequestId, u64)> =
            self.in_flight.iter().map(|(id, f)| (*id, f.size)).collect();
        waiting.sort_unstable();
        waiting
    }

    /// Of the finished requests that `filter` keeps (by size and class): how
    /// many, their mean time and their 95th percentile time, seconds.
    fn latencies(&self, filter: &dyn Fn(u64, RequestClass) -> bool) -> (usize, f64, f64) {
        let mut times: Vec<f64> = self
            .done
            .iter()
            .filter(|(s, c, _)| filter(*s, *c))
            .map(|(_, _, t)| *t)
            .collect();
        times.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
        let p95 = times
            .get(((times.len() as f64 * 0.95) as usize).min(times.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0);
        (times.len(), mean, p95)
    }
}

/// Prints the client's JSON line: completions, latencies (all, small
/// objects, demand), request and byte rates over `elapsed` seconds.
fn print_client_result(args: &Args, tally: &Tally, elapsed: f64, unfinished: usize) {
    let (n, mean, p95) = tally.latencies(&|_, _| true);
    let (n_small, mean_small, _) = tally.latencies(&|s, _| s <= 64 * 1024);
    let (n_demand, mean_demand, p95_demand) = tally.latencies(&|_, c| c == RequestClass::Demand);
    println!(
        "{{\"side\":\"client\",\"policy\":\"{}\",\"workload\":\"{}\",\"load\":{},\"completed\":{n},\"unfinished\":{unfinished},\"mean_s\":{mean:.4},\"p95_s\":{p95:.4},\"small_completed\":{n_small},\"small_mean_s\":{mean_small:.4},\"demand_completed\":{n_demand},\"demand_mean_s\":{mean_demand:.4},\"demand_p95_s\":{p95_demand:.4},\"seconds\":{elapsed:.3},\"requests_per_s\":{:.0},\"mbit_per_s\":{:.2}}}",
        args.policy,
        args.workload,
        args.load,
        n as f64 / elapsed,
        tally.body_bytes as f64 * 8.0 / elapsed / 1e6
    );
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = parse_args()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let run = async {
            if args.server {
                server(&args).await
            } else {
                client(&args).await
            }
        };
        tokio::time::timeout(MAX_RUN + Duration::from_secs(30), run)
            .await
            .context("benchmark run exceeded its time cap")?
    })
}
