//! One side of the papers' experiments on our transport; `cargo xtask bench
//! papers` runs the server in one namespace and the client in another, with
//! the WAN emulator between them, and turns what the client prints into the
//! report.
//!
//! Modes (`--mode`):
//!
//! - `hol`: the server sends `--flows` paced flows of `--message`-byte messages
//!   for `--seconds`, each flow on its own stream (`--one-stream` off) or all on
//!   stream 1; a flow skips a message while its stream holds more than
//!   [`FLOW_BACKLOG`] unacknowledged bytes per flow. The first payload byte names the flow, so the client can tell
//!   flows apart even when they share a stream. The client prints one line
//!   `d <µs since connect> <flow> <bytes>` per message it receives: what the
//!   application got, and when.
//! - `object`: `--runs` times, a fresh association: the client connects, asks
//!   for one `--object-bytes` object on stream 1 and prints one JSON line with
//!   the time from the start of `connect` to the object's last byte.
//! - `objects`: one association; after a warm-up, for each count of
//!   `--counts` and each size of `--sizes`, `--reps` times: the client asks for
//!   that many objects at once (object i on stream i) and prints one JSON line
//!   with the time until the last one arrived.
//!
//! A request is the object's size as a 4-byte big-endian number; the server
//! answers it with one message of that size on the request's stream. The
//! server of `object` and `objects` serves associations one after the other
//! until it is killed. Every run is capped in time ([`MAX_RUN`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway_transport::{Association, AssociationConfig, BackendKind, Listener, connect};

/// Hard cap on one process's work, whatever the arguments.
const MAX_RUN: Duration = Duration::from_secs(120);

/// Streams of every association, counting stream 0: enough for 64 objects at
/// once on streams 1..=64.
const STREAMS: u16 = 65;

/// The largest object a request may ask for, bytes (requests are input).
const MAX_OBJECT: u32 = 4 * 1024 * 1024;

/// The `hol` server's socket send buffer, bytes (Linux doubles it): above
/// the 1.5 Mbit/s × 240 ms path's 45 KB in flight, far below the default.
const HOL_SEND_BUFFER: usize = 48 * 1024;

/// Unacknowledged bytes per flow above which a `hol` flow skips a message.
const FLOW_BACKLOG: usize = 8 * 1024;

/// Objects fetched once before the `objects` measurements, so that the
/// association's congestion window is past its first slow start.
const WARM_UP_OBJECTS: u16 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hol,
    Object,
    Objects,
}

#[derive(Debug)]
struct Args {
    server: bool,
    backend: BackendKind,
    addr: SocketAddr,
    mode: Mode,
    flows: u8,
    one_stream: bool,
    message: usize,
    flow_bits_per_second: f64,
    seconds: f64,
    object_bytes: u32,
    runs: u32,
    counts: Vec<u16>,
    sizes: Vec<u32>,
    reps: u32,
}

fn list<T: std::str::FromStr>(text: &str) -> Result<Vec<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    text.split(',')
        .map(|v| {
            v.trim()
                .parse::<T>()
                .with_context(|| format!("`{v}` in `{text}`"))
        })
        .collect()
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        server: false,
        backend: BackendKind::Userspace,
        addr: "127.0.0.1:9899".parse()?,
        mode: Mode::Hol,
        flows: 5,
        one_stream: false,
        message: 1400,
        flow_bits_per_second: 240_000.0,
        seconds: 8.0,
        object_bytes: 50 * 1024,
        runs: 3,
        counts: vec![1, 2, 4, 8, 16, 32, 64],
        sizes: vec![10 * 1024],
        reps: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => args.server = true,
            "--client" => args.server = false,
            "--backend" => {
                args.backend = match value()?.as_str() {
                    "userspace" => BackendKind::Userspace,
                    "framed-tcp" => BackendKind::FramedTcp,
                    "kernel" => BackendKind::Kernel,
                    other => bail!("unknown backend {other} (userspace, framed-tcp, kernel)"),
                }
            }
            "--addr" => args.addr = value()?.parse()?,
            "--mode" => {
                args.mode = match value()?.as_str() {
                    "hol" => Mode::Hol,
                    "object" => Mode::Object,
                    "objects" => Mode::Objects,
                    other => bail!("unknown mode {other} (hol, object, objects)"),
                }
            }
            "--flows" => args.flows = value()?.parse()?,
            "--one-stream" => args.one_stream = true,
            "--message" => args.message = value()?.parse()?,
            "--flow-bits-per-second" => args.flow_bits_per_second = value()?.parse()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--object-bytes" => args.object_bytes = value()?.parse()?,
            "--runs" => args.runs = value()?.parse()?,
            "--counts" => args.counts = list(&value()?)?,
            "--sizes" => args.sizes = list(&value()?)?,
            "--reps" => args.reps = value()?.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if args.flows == 0 || u16::from(args.flows) >= STREAMS {
        bail!("--flows must be 1 to {}", STREAMS - 1);
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if args.message == 0 || !positive(args.flow_bits_per_second) || !positive(args.seconds) {
        bail!("--message, --flow-bits-per-second and --seconds must be above zero");
    }
    if args.counts.iter().any(|&n| n == 0 || n >= STREAMS) {
        bail!("--counts must be 1 to {}", STREAMS - 1);
    }
    if args
        .sizes
        .iter()
        .chain([&args.object_bytes])
        .any(|&s| s == 0 || s > MAX_OBJECT)
    {
        bail!("object sizes must be 1 byte to {MAX_OBJECT} bytes");
    }
    Ok(args)
}

fn config() -> AssociationConfig {
    AssociationConfig {
        streams: STREAMS,
        max_inbound_streams: STREAMS,
        ..AssociationConfig::default()
    }
}

/// The `hol` server's settings: a bounded socket send buffer, so that a TCP
/// backlog waits in the framed-TCP write queue, where `buffered` sees it and
/// the flows' gate applies, instead of in a kernel buffer of megabytes that
/// keeps the connection overflowing the bottleneck long after start-up.
/// (UDP, the userspace backend's socket, holds no backlog either way.)
fn hol_server_config() -> AssociationConfig {
    AssociationConfig {
        send_buffer: Some(HOL_SEND_BUFFER),
        ..config()
    }
}

fn request(size: u32) -> Bytes {
    Bytes::copy_from_slice(&size.to_be_bytes())
}

// ---- server ----

async fn server(args: &Args) -> Result<()> {
    let config = if args.mode == Mode::Hol {
        hol_server_config()
    } else {
        config()
    };
    let listener = Listener::bind(args.backend, args.addr, &config).await?;
    println!("{{\"ready\":true}}");
    loop {
        let assoc = listener.accept().await?;
        match args.mode {
            Mode::Hol => return serve_flows(args, &assoc).await,
            Mode::Object | Mode::Objects => {
                // One association's failure ends that association, not the server.
                if let Err(e) = serve_objects(&assoc).await {
                    eprintln!("association ended: {e:#}");
                }
            }
        }
    }
}

/// Answers every request with an object of the size asked for, on the
/// request's stream, until the peer closes.
async fn serve_objects(assoc: &Association) -> Result<()> {
    let mut senders = tokio::task::JoinSet::new();
    loop {
        let message = match assoc.recv().await {
            Ok(m) => m,
            Err(gateway_transport::TransportError::Closed) => break,
            Err(e) => return Err(e.into()),
        };
        let Ok(size) = <[u8; 4]>::try_from(&message.data[..]).map(u32::from_be_bytes) else {
            bail!(
                "a request of {} bytes on stream {}",
                message.data.len(),
                message.stream
            );
        };
        if size == 0 || size > MAX_OBJECT {
            bail!("a request for {size} bytes");
        }
        let assoc = assoc.clone();
        // One task per response, as the origin's sender would have, so that
        // the objects share the association instead of going one after another.
        senders.spawn(async move {
            assoc
                .send(message.stream, Bytes::from(vec![0x5a; size as usize]))
                .await
        });
        while let Some(sent) = senders.try_join_next() {
            sent??;
        }
    }
    Ok(())
}

/// The paced flows of `hol`: each flow sends a message every
/// `message * 8 / rate` seconds for `--seconds`, then the server says `end` on
/// stream 0 and waits for the client's `done`.
async fn serve_flows(args: &Args, assoc: &Association) -> Result<()> {
    let interval = Duration::from_secs_f64(args.message as f64 * 8.0 / args.flow_bits_per_second);
    let until = Instant::now() + Duration::from_secs_f64(args.seconds);
    let flows_per_stream = if args.one_stream { args.flows } else { 1 };
    let gate = FLOW_BACKLOG * usize::from(flows_per_stream);
    let mut senders = tokio::task::JoinSet::new();
    for flow in 0..args.flows {
        let stream = if args.one_stream {
            1
        } else {
            u16::from(flow) + 1
        };
        let mut payload = vec![0x5au8; args.message];
        payload[0] = flow;
        let payload = Bytes::from(payload);
        let assoc = assoc.clone();
        // Flows start a fraction of an interval apart, so their messages
        // interleave on the wire instead of leaving in bursts of five.
        let offset = interval.mul_f64(f64::from(flow) / f64::from(args.flows));
        senders.spawn(async move {
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + offset, interval);
            // A live source: a tick missed while a send waited is not made up
            // for, and a message is skipped while the stream already holds
            // more than its share of unacknowledged bytes, so that the
            // start-up (slow start from a small window) leaves no backlog that
            // takes seconds to drain.
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while Instant::now() < until {
                ticks.tick().await;
                if assoc.buffered(stream).unwrap_or(0) > gate {
                    continue;
                }
                assoc.send(stream, payload.clone()).await?;
            }
            Ok::<_, gateway_transport::TransportError>(())
        });
    }
    while let Some(sent) = senders.join_next().await {
        sent??;
    }
    assoc.send(0, Bytes::from_static(b"end")).await?;
    let done = assoc.recv().await?;
    if done.stream != 0 {
        bail!("expected done on stream 0, got stream {}", done.stream);
    }
    assoc.close().await?;
    Ok(())
}

// ---- client ----

async fn client(args: &Args) -> Result<()> {
    match args.mode {
        Mode::Hol => client_flows(args).await,
        Mode::Object => {
            for run in 0..args.runs {
                let started = Instant::now();
                let assoc = connect(args.backend, args.addr, &config()).await?;
                let connected = started.elapsed();
                assoc.send(1, request(args.object_bytes)).await?;
                let object = assoc.recv().await?;
                let seconds = started.elapsed().as_secs_f64();
                if object.stream != 1 || object.data.len() != args.object_bytes as usize {
                    bail!(
                        "run {run}: got {} bytes on stream {}",
                        object.data.len(),
                        object.stream
                    );
                }
                assoc.close().await?;
                println!(
                    "{{\"run\":{run},\"bytes\":{},\"connect_s\":{:.6},\"seconds\":{seconds:.6}}}",
                    object.data.len(),
                    connected.as_secs_f64()
                );
                // The previous association's SHUTDOWN exchange and the
                // server's next accept are done before the next INIT.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Ok(())
        }
        Mode::Objects => client_objects(args).await,
    }
}

async fn client_flows(args: &Args) -> Result<()> {
    let assoc = connect(args.backend, args.addr, &config()).await?;
    let started = Instant::now();
    let mut lines = String::new();
    let mut total = 0u64;
    loop {
        let message = assoc.recv().await?;
        if message.stream == 0 {
            break;
        }
        let Some(&flow) = message.data.first() else {
            bail!("an empty message on stream {}", message.stream);
        };
        total += message.data.len() as u64;
        use std::fmt::Write as _;
        writeln!(
            lines,
            "d {} {flow} {}",
            started.elapsed().as_micros(),
            message.data.len()
        )?;
    }
    assoc.send(0, Bytes::from_static(b"done")).await?;
    // The server closes once it has our `done`.
    match assoc.recv().await {
        Ok(_) | Err(gateway_transport::TransportError::Closed) => {}
        Err(e) => return Err(e.into()),
    }
    print!("{lines}");
    println!(
        "{{\"bytes\":{total},\"seconds\":{:.6}}}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Asks for `count` objects of `size` bytes at once (object i on stream i)
/// and waits for all of them.
async fn fetch_batch(assoc: &Association, count: u16, size: u32) -> Result<Duration> {
    let started = Instant::now();
    for stream in 1..=count {
        assoc.send(stream, request(size)).await?;
    }
    let mut pending = count;
    while pending > 0 {
        let object = assoc.recv().await?;
        if object.stream == 0 || object.stream > count || object.data.len() != size as usize {
            bail!(
                "got {} bytes on stream {} while waiting for {count} objects of {size} bytes",
                object.data.len(),
                object.stream
            );
        }
        pending -= 1;
    }
    Ok(started.elapsed())
}

async fn client_objects(args: &Args) -> Result<()> {
    let assoc = connect(args.backend, args.addr, &config()).await?;
    let largest = args.sizes.iter().copied().max().unwrap_or(10 * 1024);
    fetch_batch(&assoc, WARM_UP_OBJECTS, largest).await?;
    for &size in &args.sizes {
        for &count in &args.counts {
            for rep in 0..args.reps {
                let took = fetch_batch(&assoc, count, size).await?;
                println!(
                    "{{\"size\":{size},\"count\":{count},\"rep\":{rep},\"seconds\":{:.6}}}",
                    took.as_secs_f64()
                );
            }
        }
    }
    assoc.close().await?;
    Ok(())
}

fn main() -> Result<()> {
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
        tokio::time::timeout(MAX_RUN, run)
            .await
            .context("the run exceeded its time cap")?
    })
}
