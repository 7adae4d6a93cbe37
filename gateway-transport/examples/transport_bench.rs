//! One side of a transport benchmark; `cargo xtask bench transport` runs a server
//! in one namespace and a client in another and compares backends.
//!
//! Modes: `bulk` (messages of `--size` bytes round-robin over `--streams` data
//! streams until `--bytes` are sent) and `small` (64-byte messages, `--count` of
//! them). `--backend tcp` is the baseline: the same bytes written to a plain TCP
//! socket with no framing at all, gathered into writes of up to
//! [`TCP_WRITE_BATCH`] bytes as the other backends gather messages into
//! datagram batches (one `write` per message on a no-delay socket would cost
//! TCP a system call and a segment train each that the others do not pay).
//! Each side prints one JSON line with what it measured and the CPU time its
//! process used.
//!
//! `--seconds S` (both sides) makes a run timed: the client sends for `S`
//! seconds whatever `--bytes` says, and the server's line adds the payload it
//! received per [`BIN`] (`bins`, from `first_unix_ms`, its first payload's
//! wall-clock time), so that `cargo xtask bench transport --wan` can take the
//! goodput of flows that ran side by side over one common window.
//!
//! `--tcp-congestion NAME` (the `tcp` backend): the kernel's congestion
//! controller for the socket, set before it connects (a namespace's default
//! can only name the host's allowed ones; a socket of a privileged process can
//! name any loaded one). The client's line says which one the socket ran
//! (`tcp_congestion`); `congestion` is the flow's controller for every
//! backend: the socket's for TCP, the configured one for an association.
//!
//! `--backend quic`: the server's ready line carries its certificate's SHA-256
//! (`quic_cert_sha256`), which the client takes as `--quic-cert-sha256`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Bytes the `tcp` backend gathers before one `write`: the 64 KiB a UDP
/// backend's GSO batch carries at most.
const TCP_WRITE_BATCH: usize = 64 * 1024;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway_transport::{
    AssociationConfig, BackendKind, Congestion, Listener, QuicConfig, UserspaceConfig, connect,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Hard cap on one run, whatever the byte or message count.
const MAX_RUN: Duration = Duration::from_secs(60);

/// How long either side waits for the association's shutdown once the
/// transfer is complete (the server has printed what it measured, the client
/// has its "done"): on a lossy link the peer may have exited before the last
/// shutdown packet crossed, and nothing measured depends on it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The width of one bin of a timed run's received-payload series.
const BIN: Duration = Duration::from_millis(100);

struct Args {
    server: bool,
    backend: String,
    addr: SocketAddr,
    size: usize,
    streams: u16,
    bytes: u64,
    /// A timed run: send for this long (see the module docs).
    seconds: Option<f64>,
    tcp_congestion: Option<String>,
    quic_cert_sha256: Option<String>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        server: false,
        backend: "userspace".into(),
        addr: "127.0.0.1:9899".parse()?,
        size: 16 * 1024,
        streams: 8,
        bytes: 1 << 30,
        seconds: None,
        tcp_congestion: None,
        quic_cert_sha256: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => args.server = true,
            "--client" => args.server = false,
            "--backend" => args.backend = value()?,
            "--addr" => args.addr = value()?.parse()?,
            "--size" => args.size = value()?.parse()?,
            "--streams" => args.streams = value()?.parse()?,
            "--bytes" => args.bytes = value()?.parse()?,
            "--seconds" => {
                let seconds: f64 = value()?.parse()?;
                if !(seconds > 0.0 && seconds <= MAX_RUN.as_secs_f64()) {
                    bail!("--seconds {seconds}: from above 0 to {}", MAX_RUN.as_secs());
                }
                args.seconds = Some(seconds);
            }
            "--tcp-congestion" => args.tcp_congestion = Some(value()?),
            "--quic-cert-sha256" => args.quic_cert_sha256 = Some(value()?),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage into the pointer we own.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn kind(backend: &str) -> Result<Option<BackendKind>> {
    Ok(match backend {
        "tcp" => None,
        "framed-tcp" => Some(BackendKind::FramedTcp),
        // `userspace-reno`: the userspace backend with RFC 9260's controller
        // instead of the default BBR (the part-1 configuration, a baseline row);
        // `userspace-cubic`: with RFC 9438's.
        "userspace" | "userspace-reno" | "userspace-cubic" => Some(BackendKind::Userspace),
        "kernel" => Some(BackendKind::Kernel),
        // `quic`: quinn's default CUBIC, the anchor; `quic-bbr`: quinn's
        // experimental BBR, the same kind of controller as our default.
        "quic" | "quic-bbr" => Some(BackendKind::Quic),
        other => bail!("unknown backend {other}"),
    })
}

fn config(backend: &str, streams: u16) -> AssociationConfig {
    let defaults = AssociationConfig::default();
    AssociationConfig {
        streams: streams + 1,
        max_inbound_streams: streams + 1,
        userspace: UserspaceConfig {
            congestion: match backend {
                "userspace-reno" => Congestion::Reno,
                "userspace-cubic" => Congestion::Cubic,
                _ => defaults.userspace.congestion,
            },
            ..defaults.userspace.clone()
        },
        quic: QuicConfig {
            congestion: match backend {
                "quic" => Congestion::Cubic,
                "quic-bbr" => Congestion::Bbr,
                _ => defaults.quic.congestion,
            },
            ..defaults.quic.clone()
        },
        ..defaults
    }
}

/// A timed run's received payload per [`BIN`], from its first payload on.
#[derive(Default)]
struct Series {
    /// The first payload's arrival, and its wall-clock time in ms since the
    /// Unix epoch (comparable across processes on one host).
    first: Option<(Instant, u128)>,
    bins: Vec<u64>,
}

impl Series {
    /// Most bins kept: the time cap of a run, and some.
    const MAX_BINS: usize = 2 * (MAX_RUN.as_millis() / BIN.as_millis()) as usize;

    fn record(&mut self, now: Instant, bytes: u64) {
        let (first, _) = *self.first.get_or_insert_with(|| {
            let unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            (now, unix_ms)
        });
        let index =
            usize::try_from((now - first).as_millis() / BIN.as_millis()).unwrap_or(usize::MAX);
        if index >= Self::MAX_BINS {
            return;
        }
        if self.bins.len() <= index {
            self.bins.resize(index + 1, 0);
        }
        self.bins[index] += bytes;
    }

    /// The JSON fields, each after a comma.
    fn fields(&self) -> String {
        let bins: Vec<String> = self.bins.iter().map(u64::to_string).collect();
        format!(
            ",\"first_unix_ms\":{},\"bin_ms\":{},\"bins\":[{}]",
            self.first.map_or(0, |(_, ms)| ms),
            BIN.as_millis(),
            bins.join(",")
        )
    }
}

async fn server(args: &Args) -> Result<()> {
    let mut series = args.seconds.map(|_| Series::default());
    let (bytes, messages, seconds, assoc) = match kind(&args.backend)? {
        None => {
            let listener = tokio::net::TcpListener::bind(args.addr).await?;
            println!("{{\"ready\":true}}");
            let (mut socket, _) = listener.accept().await?;
            if let Some(name) = &args.tcp_congestion {
                socket2::SockRef::from(&socket)
                    .set_tcp_congestion(name.as_bytes())
                    .with_context(|| format!("TCP congestion control {name}"))?;
            }
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            let mut first = None;
            loop {
                let n = socket.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                let now = Instant::now();
                first.get_or_insert(now);
                if let Some(series) = &mut series {
                    series.record(now, n as u64);
                }
                total += n as u64;
            }
            let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
            (total, total / args.size.max(1) as u64, secs, None)
        }
        Some(kind) => {
            let listener =
                Listener::bind(kind, args.addr, &config(&args.backend, args.streams)).await?;
            match listener.quic_cert_sha256() {
                Some(pin) => println!("{{\"ready\":true,\"quic_cert_sha256\":\"{pin}\"}}"),
                None => println!("{{\"ready\":true}}"),
            }
            let assoc = listener.accept().await?;
            let (mut total, mut messages) = (0u64, 0u64);
            let (mut first, mut last) = (None, None);
            // The end message on stream 0 carries how many data messages were
            // sent: with no order across streams (QUIC) it may overtake some.
            let mut expected = None;
            while expected.is_none_or(|n| messages < n) {
                let m = assoc.recv().await?;
                if m.stream == 0 {
                    let count: [u8; 8] = m.data[..].try_into().context("end message")?;
                    expected = Some(u64::from_be_bytes(count));
                    continue;
                }
                let now = Instant::now();
                first.get_or_insert(now);
                last = Some(now);
                if let Some(series) = &mut series {
                    series.record(now, m.data.len() as u64);
                }
                total += m.data.len() as u64;
                messages += 1;
            }
            let secs = match (first, last) {
                (Some(first), Some(last)) => (last - first).as_secs_f64(),
                _ => 0.0,
            };
            assoc.send(0, Bytes::from_static(b"done")).await?;
            (total, messages, secs, Some(assoc))
        }
    };
    println!(
        "{{\"side\":\"server\",\"backend\":\"{}\",\"size\":{},\"bytes\":{bytes},\"messages\":{messages},\"seconds\":{seconds:.6},\"mbit_per_s\":{:.1},\"messages_per_s\":{:.0},\"cpu_seconds\":{:.4}{}}}",
        args.backend,
        args.size,
        bytes as f64 * 8.0 / seconds.max(1e-9) / 1e6,
        messages as f64 / seconds.max(1e-9),
        cpu_seconds(),
        series.as_ref().map(Series::fields).unwrap_or_default()
    );
    if let Some(assoc) = assoc {
        close_after_transfer("server", &assoc).await;
    }
    Ok(())
}

/// Closes `assoc` once the transfer is complete, waiting at most
/// [`CLOSE_GRACE`]; a failure is reported on stderr, not as the run's.
async fn close_after_transfer(side: &str, assoc: &gateway_transport::Association) {
    match tokio::time::timeout(CLOSE_GRACE, assoc.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("{side}: closing the association: {e}"),
        Err(_) => eprintln!("{side}: the association's shutdown took over {CLOSE_GRACE:?}"),
    }
}

async fn client(args: &Args) -> Result<()> {
    let payload = Bytes::from(vec![0x5au8; args.size]);
    let started = Instant::now();
    let mut tcp_congestion = String::new();
    // A timed run sends until its time is up, an untimed one its bytes (and
    // each stops at the cap).
    let (count, send_for) = match args.seconds {
        Some(seconds) => (u64::MAX, Duration::from_secs_f64(seconds)),
        None => (args.bytes / args.size.max(1) as u64, MAX_RUN),
    };
    match kind(&args.backend)? {
        None => {
            let socket = if args.addr.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            if let Some(name) = &args.tcp_congestion {
                socket2::SockRef::from(&socket)
                    .set_tcp_congestion(name.as_bytes())
                    .with_context(|| format!("TCP congestion control {name}"))?;
            }
            let socket = socket.connect(args.addr).await?;
            socket.set_nodelay(true)?;
            let name = socket2::SockRef::from(&socket).tcp_congestion()?;
            tcp_congestion = String::from_utf8_lossy(&name)
                .trim_end_matches('\0')
                .to_owned();
            let mut socket = tokio::io::BufWriter::with_capacity(TCP_WRITE_BATCH, socket);
            for _ in 0..count {
                socket.write_all(&payload).await?;
                if started.elapsed() > send_for {
                    break;
                }
            }
            socket.flush().await?;
            socket.shutdown().await?;
        }
        Some(kind) => {
            let config = AssociationConfig {
                quic: QuicConfig {
                    server_cert_sha256: args.quic_cert_sha256.clone(),
                    ..config(&args.backend, args.streams).quic
                },
                ..config(&args.backend, args.streams)
            };
            let assoc = connect(kind, args.addr, &config).await?;
            let streams = assoc.streams().outbound - 1;
            let mut senders = tokio::task::JoinSet::new();
            // One task per stream, as the origin's sender would have.
            for stream in 1..=streams {
                let (assoc, payload) = (assoc.clone(), payload.clone());
                let share = count / u64::from(streams)
                    + u64::from(u64::from(stream) <= count % u64::from(streams));
                senders.spawn(async move {
                    let mut sent = 0u64;
                    for _ in 0..share {
                        assoc.send(stream, payload.clone()).await?;
                        sent += 1;
                        if started.elapsed() > send_for {
                            break;
                        }
                    }
                    Ok::<_, gateway_transport::TransportError>(sent)
                });
            }
            let mut sent = 0u64;
            while let Some(task) = senders.join_next().await {
                sent += task??;
            }
            assoc
                .send(0, Bytes::copy_from_slice(&sent.to_be_bytes()))
                .await?;
            let done = assoc.recv().await?;
            if done.stream != 0 {
                bail!("unexpected message on stream {}", done.stream);
            }
            close_after_transfer("client", &assoc).await;
        }
    }
    // The controller the flow ran: the TCP socket's as the kernel reports
    // it, or the one the association's configuration names (an unknown name
    // fails the connect).
    let congestion = match kind(&args.backend)? {
        None => tcp_congestion.clone(),
        Some(BackendKind::Quic) => config(&args.backend, args.streams)
            .quic
            .congestion
            .to_string(),
        Some(_) => config(&args.backend, args.streams)
            .userspace
            .congestion
            .to_string(),
    };
    println!(
        "{{\"side\":\"client\",\"backend\":\"{}\",\"tcp_congestion\":\"{tcp_congestion}\",\"congestion\":\"{congestion}\",\"seconds\":{:.6},\"cpu_seconds\":{:.4}}}",
        args.backend,
        started.elapsed().as_secs_f64(),
        cpu_seconds()
    );
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
        tokio::time::timeout(MAX_RUN + Duration::from_secs(30), run)
            .await
            .context("benchmark run exceeded its time cap")?
    })
}
