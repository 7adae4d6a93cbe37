//! One side of a transport benchmark; `cargo xtask bench transport` runs a server
//! in one namespace and a client in another and compares backends.
//!
//! Modes: `bulk` (messages of `--size` bytes round-robin over `--streams` data
//! streams until `--bytes` are sent) and `small` (64-byte messages, `--count` of
//! them). `--backend tcp` is the baseline: the same bytes written to a plain TCP
//! socket with no framing at all. Each side prints one JSON line with what it
//! measured and the CPU time its process used.
//!
//! `--backend quic`: the server's ready line carries its certificate's SHA-256
//! (`quic_cert_sha256`), which the client takes as `--quic-cert-sha256`.
//!
//! `--backend sctp-proto` (the former userspace backend, a baseline row) exists
//! only when built with `--features sctp-proto-baseline`, as the xtask does.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use gateway_transport::{AssociationConfig, BackendKind, Listener, connect};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Hard cap on one run, whatever the byte or message count.
const MAX_RUN: Duration = Duration::from_secs(60);

struct Args {
    server: bool,
    backend: String,
    addr: SocketAddr,
    size: usize,
    streams: u16,
    bytes: u64,
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
        // instead of the default BBR (the part-1 configuration, a baseline row).
        "userspace" | "userspace-reno" => Some(BackendKind::Userspace),
        "kernel" => Some(BackendKind::Kernel),
        "quic" => Some(BackendKind::Quic),
        #[cfg(feature = "sctp-proto-baseline")]
        "sctp-proto" => Some(BackendKind::SctpProto),
        other => bail!("unknown backend {other}"),
    })
}

fn config(backend: &str, streams: u16) -> AssociationConfig {
    let defaults = AssociationConfig::default();
    AssociationConfig {
        streams: streams + 1,
        max_inbound_streams: streams + 1,
        congestion: if backend == "userspace-reno" {
            "reno".to_owned()
        } else {
            defaults.congestion.clone()
        },
        ..defaults
    }
}

async fn server(args: &Args) -> Result<()> {
    let (bytes, messages, seconds) = match kind(&args.backend)? {
        None => {
            let listener = tokio::net::TcpListener::bind(args.addr).await?;
            println!("{{\"ready\":true}}");
            let (mut socket, _) = listener.accept().await?;
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            let mut first = None;
            loop {
                let n = socket.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                first.get_or_insert_with(Instant::now);
                total += n as u64;
            }
            let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
            (total, total / args.size.max(1) as u64, secs)
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
                total += m.data.len() as u64;
                messages += 1;
            }
            let secs = match (first, last) {
                (Some(first), Some(last)) => (last - first).as_secs_f64(),
                _ => 0.0,
            };
            assoc.send(0, Bytes::from_static(b"done")).await?;
            assoc.close().await?;
            (total, messages, secs)
        }
    };
    println!(
        "{{\"side\":\"server\",\"backend\":\"{}\",\"size\":{},\"bytes\":{bytes},\"messages\":{messages},\"seconds\":{seconds:.6},\"mbit_per_s\":{:.1},\"messages_per_s\":{:.0},\"cpu_seconds\":{:.4}}}",
        args.backend,
        args.size,
        bytes as f64 * 8.0 / seconds.max(1e-9) / 1e6,
        messages as f64 / seconds.max(1e-9),
        cpu_seconds()
    );
    Ok(())
}

async fn client(args: &Args) -> Result<()> {
    let payload = Bytes::from(vec![0x5au8; args.size]);
    let count = args.bytes / args.size as u64;
    let started = Instant::now();
    match kind(&args.backend)? {
        None => {
            let mut socket = tokio::net::TcpStream::connect(args.addr).await?;
            socket.set_nodelay(true)?;
            for _ in 0..count {
                socket.write_all(&payload).await?;
                if started.elapsed() > MAX_RUN {
                    break;
                }
            }
            socket.shutdown().await?;
        }
        Some(kind) => {
            let config = AssociationConfig {
                quic_server_cert_sha256: args.quic_cert_sha256.clone(),
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
                        if started.elapsed() > MAX_RUN {
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
            assoc.close().await?;
        }
    }
    println!(
        "{{\"side\":\"client\",\"backend\":\"{}\",\"seconds\":{:.6},\"cpu_seconds\":{:.4}}}",
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
