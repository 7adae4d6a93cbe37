//! `wanem`: the WAN emulator's command line. See the library's docs and
//! `wanem --help`.

use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser as _;
use wanem::cli::Cli;
use wanem::units::display_rate;
use wanem::{DirectionConfig, Emulator, LossModel};

/// How often the main thread looks whether a forwarding thread failed when no
/// --stats-every is given.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

fn main() -> Result<()> {
    let cli = Cli::parse();
    let directions = cli.directions()?;
    // Blocked here, before the threads start (they inherit the mask): SIGINT and
    // SIGTERM are then only taken by sigtimedwait below, in this thread.
    let signals = block_stop_signals()?;
    // Also before the threads start: they inherit the policy.
    let scheduling = set_realtime(cli.rt_priority);
    let emulator = Emulator::start(&directions, cli.driver_options())?;
    let started = Instant::now();
    for direction in &directions {
        println!("wanem {}: {}", direction.label(), describe(direction));
    }
    println!("wanem ready (seed {}, {scheduling})", cli.seed);
    std::io::stdout().flush()?;

    let mut next_stats = cli.stats_every.map(|every| started + every);
    let signal = loop {
        let now = Instant::now();
        let wait = next_stats.map_or(WATCH_INTERVAL, |at| {
            at.saturating_duration_since(now).min(WATCH_INTERVAL)
        });
        if let Some(signal) = wait_for_signal(&signals, wait)? {
            break signal;
        }
        if emulator.has_failed() {
            emulator.stop().context("forwarding stopped")?;
            bail!("a forwarding thread ended without an error");
        }
        if let (Some(at), Some(every)) = (next_stats, cli.stats_every)
            && Instant::now() >= at
        {
            print_stats("stats", started, &emulator.stats());
            next_stats = Some(at + every);
        }
    };
    let stats = emulator.stop().context("forwarding stopped")?;
    println!("wanem: signal {signal}, stopping");
    print_stats("final", started, &stats);
    Ok(())
}

fn print_stats(kind: &str, started: Instant, stats: &[(String, wanem::DirectionStats)]) {
    let elapsed = started.elapsed().as_secs_f64();
    for (label, stats) in stats {
        println!("{kind} {label} elapsed_s={elapsed:.3} {stats}");
    }
}

fn describe(direction: &DirectionConfig) -> String {
    let link = &direction.link;
    let loss = match link.loss {
        LossModel::None => "no loss".to_owned(),
        LossModel::Bernoulli(p) => format!("random loss {}%", p * 100.0),
        LossModel::GilbertElliott(ge) => format!(
            "Gilbert-Elliott loss p={}% r={}% h={}% k={}% (expected {:.3}%)",
            ge.p * 100.0,
            ge.r * 100.0,
            ge.h * 100.0,
            ge.k * 100.0,
            ge.stationary_loss() * 100.0
        ),
    };
    let rate = link.rate.map_or("no rate limit".to_owned(), |r| {
        format!("rate {}", display_rate(r))
    });
    let queue = match (link.queue_packets, link.queue_bytes) {
        (Some(p), Some(b)) => format!("queue {p} frames / {b} bytes"),
        (Some(p), None) => format!("queue {p} frames"),
        (None, Some(b)) => format!("queue {b} bytes"),
        (None, None) => "unlimited queue".to_owned(),
    };
    let single_drop = link.drop_nth.map_or(String::new(), |d| {
        format!(
            ", drops frame {} of those of at least {} bytes",
            d.nth, d.min_len
        )
    });
    format!(
        "delay {:?} jitter {:?}{}, {loss}{single_drop}, {rate}, {queue}",
        link.delay,
        link.jitter,
        if link.reorder { " (may reorder)" } else { "" }
    )
}

/// Puts this thread (and so every thread it starts) under SCHED_FIFO with
/// `priority`, unless it is 0. Says what it got; a failure is a warning, not an
/// error, since the emulator works without (less precisely on a busy machine).
fn set_realtime(priority: u8) -> String {
    if priority == 0 {
        return "normal scheduling".to_owned();
    }
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: sched_setscheduler reads one valid sched_param; pid 0 is this
    // thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        return format!("SCHED_FIFO priority {priority}");
    }
    let error = std::io::Error::last_os_error();
    eprintln!(
        "wanem: cannot use SCHED_FIFO ({error}); running with normal scheduling, so departures may be late by a scheduler slice when the machine is busy"
    );
    "normal scheduling (SCHED_FIFO refused)".to_owned()
}

/// SIGINT and SIGTERM, blocked in this thread (and so in every thread started
/// after).
fn block_stop_signals() -> Result<libc::sigset_t> {
    // SAFETY: sigemptyset initialises the set; sigaddset and pthread_sigmask take
    // a valid set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            bail!("blocking SIGINT and SIGTERM: error {rc}");
        }
        Ok(set)
    }
}

/// Waits up to `timeout` for one of `signals`; its number, or `None`.
fn wait_for_signal(signals: &libc::sigset_t, timeout: Duration) -> Result<Option<i32>> {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `signals` is an initialised set; no siginfo is asked for.
    let signal = unsafe { libc::sigtimedwait(signals, std::ptr::null_mut(), &timeout) };
    if signal >= 0 {
        return Ok(Some(signal));
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
        _ => Err(error).context("sigtimedwait"),
    }
}
