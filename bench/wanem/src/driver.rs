//! The driver: one thread per direction that reads frames from one interface,
//! feeds them to that direction's [`Link`], and sends each out of the other
//! interface when it is due.
//!
//! Timing: the thread waits in `ppoll` on its receive socket until a frame
//! arrives or the next departure is [`DriverOptions::spin`] away, then spins
//! (reading frames without blocking meanwhile) until the departure. With the
//! thread's timer slack at 1 ns, `ppoll` itself wakes within tens of
//! microseconds; the spin takes the rest. Arrival times are read right after
//! each frame is read, from the monotonic clock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::WanemError;
use crate::model::{Link, LinkConfig, Verdict};
use crate::packet::PacketSocket;

/// The longest `ppoll` wait, so a stop request is seen within this time.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Frames read in one go before the thread looks at departures again.
const RECEIVE_BATCH: usize = 64;

/// Room for the largest frame a packet socket can return (64 KiB plus headers);
/// anything longer is reported truncated and dropped as oversize.
const FRAME_BUFFER_BYTES: usize = 65_536 + 64;

/// Ethernet header plus one VLAN tag: the largest frame is the MTU plus this.
const LINK_HEADER_ALLOWANCE: usize = 14 + 4;

/// A frame sent this long after it was due counts as late.
const LATE: Duration = Duration::from_millis(1);

/// How often the kernel's drop counter of the receive socket is read.
const KERNEL_STATS_INTERVAL: Duration = Duration::from_millis(250);

/// How the forwarding threads run.
#[derive(Debug, Clone, Copy)]
pub struct DriverOptions {
    /// Spin (instead of sleeping) for the last stretch before a departure.
    pub spin: Duration,
    /// Seed of both directions' random numbers.
    pub seed: u64,
}

impl Default for DriverOptions {
    fn default() -> Self {
        Self {
            spin: Duration::from_micros(50),
            seed: 1,
        }
    }
}

/// One direction: frames read on `from` leave on `to`.
#[derive(Debug, Clone)]
pub struct DirectionConfig {
    /// The interface frames arrive on.
    pub from: String,
    /// The interface they leave by.
    pub to: String,
    /// What the link does to them.
    pub link: LinkConfig,
}

impl DirectionConfig {
    /// `from->to`, as the stats lines name the direction.
    pub fn label(&self) -> String {
        format!("{}->{}", self.from, self.to)
    }
}

/// Counters of one direction, updated by its thread and read by anyone.
#[derive(Debug, Default)]
struct DirectionCounters {
    received: AtomicU64,
    received_bytes: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_queue: AtomicU64,
    oversize: AtomicU64,
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    send_errors: AtomicU64,
    checksum_not_ready: AtomicU64,
    kernel_drops: AtomicU64,
    pending: AtomicU64,
    late_over_1ms: AtomicU64,
    late_max_ns: AtomicU64,
}

/// A snapshot of one direction's counters.
///
/// Every frame read is, at any time, exactly one of: dropped by loss, dropped
/// by the queue, dropped as oversize, sent, failed to send, or pending:
/// `received = dropped_loss + dropped_queue + oversize + sent + send_errors +
/// pending`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Frames read from the receiving interface.
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Dropped by the loss model.
    pub dropped_loss: u64,
    /// Dropped because the bottleneck queue was full.
    pub dropped_queue: u64,
    /// Dropped because they exceed the sending interface's MTU: a sign of
    /// GRO/TSO/GSO left on somewhere.
    pub oversize: u64,
    /// Sent out of the other interface.
    pub sent: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Frames the kernel refused to send.
    pub send_errors: u64,
    /// Frames (forwarded anyway) whose checksum their sender left to offload:
    /// the receiver behind us will drop them. Turn off tx checksumming there.
    pub checksum_not_ready: u64,
    /// Frames the kernel dropped before we read them (receive buffer full).
    pub kernel_drops: u64,
    /// Frames waiting in the emulated link now.
    pub pending: u64,
    /// Frames sent 1 ms or more after they were due (the thread was not
    /// scheduled in time, or the receive path kept it busy).
    pub late_over_1ms: u64,
    /// The latest any frame was sent after it was due, in microseconds.
    pub late_max_us: u64,
}

impl DirectionStats {
    /// Frames that went missing other than by design (loss model, queue
    /// limit): oversize, send errors, checksum trouble, kernel drops.
    pub fn faults(&self) -> u64 {
        self.oversize + self.send_errors + self.checksum_not_ready + self.kernel_drops
    }

    /// Whether every frame received is accounted for: dropped (by design or
    /// not), sent, failed, or still pending.
    pub fn balanced(&self) -> bool {
        self.received
            == self.dropped_loss
                + self.dropped_queue
                + self.oversize
                + self.sent
                + self.send_errors
                + self.pending
    }

    /// Reads the `key=value` pairs [`Display`](fmt::Display) writes; unknown
    /// keys and values that are not numbers are skipped.
    pub fn parse_fields(fields: &str) -> Self {
        let mut stats = Self::default();
        for (key, value) in fields.split_whitespace().filter_map(|f| f.split_once('=')) {
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            let slot = match key {
                "received" => &mut stats.received,
                "received_bytes" => &mut stats.received_bytes,
                "dropped_loss" => &mut stats.dropped_loss,
                "dropped_queue" => &mut stats.dropped_queue,
                "oversize" => &mut stats.oversize,
                "sent" => &mut stats.sent,
                "sent_bytes" => &mut stats.sent_bytes,
                "send_errors" => &mut stats.send_errors,
                "checksum_not_ready" => &mut stats.checksum_not_ready,
                "kernel_drops" => &mut stats.kernel_drops,
                "pending" => &mut stats.pending,
                "late_over_1ms" => &mut stats.late_over_1ms,
                "late_max_us" => &mut stats.late_max_us,
                _ => continue,
            };
            *slot = value;
        }
        stats
    }
}

impl fmt::Display for DirectionStats {
    /// `key=value` pairs, the format of the stats lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received={} received_bytes={} dropped_loss={} dropped_queue={} oversize={} sent={} sent_bytes={} send_errors={} checksum_not_ready={} kernel_drops={} pending={} late_over_1ms={} late_max_us={}",
            self.received,
            self.received_bytes,
            self.dropped_loss,
            self.dropped_queue,
            self.oversize,
            self.sent,
            self.sent_bytes,
            self.send_errors,
            self.checksum_not_ready,
            self.kernel_drops,
            self.pending,
            self.late_over_1ms,
            self.late_max_us
        )
    }
}

impl DirectionCounters {
    fn snapshot(&self) -> DirectionStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirectionStats {
            received: get(&self.received),
            received_bytes: get(&self.received_bytes),
            dropped_loss: get(&self.dropped_loss),
            dropped_queue: get(&self.dropped_queue),
            oversize: get(&self.oversize),
            sent: get(&self.sent),
            sent_bytes: get(&self.sent_bytes),
            send_errors: get(&self.send_errors),
            checksum_not_ready: get(&self.checksum_not_ready),
            kernel_drops: get(&self.kernel_drops),
            pending: get(&self.pending),
            late_over_1ms: get(&self.late_over_1ms),
            late_max_us: get(&self.late_max_ns) / 1000,
        }
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// One running direction.
#[derive(Debug)]
struct Running {
    label: String,
    counters: Arc<DirectionCounters>,
    thread: Option<JoinHandle<Result<(), WanemError>>>,
}

/// The running emulator: two forwarding threads. [`stop`](Self::stop) ends them;
/// dropping it does too.
#[derive(Debug)]
pub struct Emulator {
    stop: Arc<AtomicBool>,
    directions: Vec<Running>,
}

impl Emulator {
    /// Opens every socket (so a wrong interface name fails here, before any
    /// thread runs), then starts one thread per direction. Direction `i` of
    /// `directions` draws random stream `i` of `options.seed`.
    pub fn start(
        directions: &[DirectionConfig],
        options: DriverOptions,
    ) -> Result<Self, WanemError> {
        let mut prepared = Vec::new();
        for (index, direction) in directions.iter().enumerate() {
            let label = direction.label();
            direction.link.validate(&label)?;
            let receiver = PacketSocket::receiver(&direction.from)?;
            let sender = PacketSocket::sender(&direction.to)?;
            let max_frame = sender.mtu()? as usize + LINK_HEADER_ALLOWANCE;
            let link = Link::new(direction.link, options.seed, index as u64);
            prepared.push((label, receiver, sender, max_frame, link));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut emulator = Emulator {
            stop: Arc::clone(&stop),
            directions: Vec::new(),
        };
        for (label, receiver, sender, max_frame, link) in prepared {
            let counters = Arc::new(DirectionCounters::default());
            let forwarder = Forwarder {
                label: label.clone(),
                receiver,
                sender,
                max_frame,
                link,
                counters: Arc::clone(&counters),
                stop: Arc::clone(&stop),
                spin: options.spin,
                warned_oversize: false,
                warned_checksum: false,
                warned_send: false,
            };
            let thread = std::thread::Builder::new()
                .name(format!("wanem {label}"))
                .spawn(move || forwarder.run())
                .map_err(|e| WanemError::Thread(label.clone(), e.to_string()))?;
            emulator.directions.push(Running {
                label,
                counters,
                thread: Some(thread),
            });
        }
        Ok(emulator)
    }

    /// Each direction's label and counters now.
    pub fn stats(&self) -> Vec<(String, DirectionStats)> {
        self.directions
            .iter()
            .map(|d| (d.label.clone(), d.counters.snapshot()))
            .collect()
    }

    /// Whether a forwarding thread has ended (it only does on an error).
    pub fn has_failed(&self) -> bool {
        self.directions
            .iter()
            .any(|d| d.thread.as_ref().is_none_or(JoinHandle::is_finished))
    }

    /// Stops both threads and returns the final counters, or the first thread's
    /// error.
    pub fn stop(mut self) -> Result<Vec<(String, DirectionStats)>, WanemError> {
        self.join()?;
        Ok(self.stats())
    }

    fn join(&mut self) -> Result<(), WanemError> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first_error = Ok(());
        for direction in &mut self.directions {
            let Some(thread) = direction.thread.take() else {
                continue;
            };
            let result = match thread.join() {
                Ok(result) => result,
                Err(_) => Err(WanemError::Thread(
                    direction.label.clone(),
                    "panicked".into(),
                )),
            };
            if first_error.is_ok() {
                first_error = result;
            }
        }
        first_error
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// One direction's thread state.
struct Forwarder {
    label: String,
    receiver: PacketSocket,
    sender: PacketSocket,
    max_frame: usize,
    link: Link<Vec<u8>>,
    counters: Arc<DirectionCounters>,
    stop: Arc<AtomicBool>,
    spin: Duration,
    warned_oversize: bool,
    warned_checksum: bool,
    warned_send: bool,
}

impl Forwarder {
    fn run(mut self) -> Result<(), WanemError> {
        set_fine_timer_slack();
        let mut buffer = vec![0u8; FRAME_BUFFER_BYTES];
        let mut next_kernel_stats = Instant::now() + KERNEL_STATS_INTERVAL;
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            self.transmit_due(now);
            if now >= next_kernel_stats {
                bump(
                    &self.counters.kernel_drops,
                    self.receiver.take_kernel_drops()?,
                );
                next_kernel_stats = now + KERNEL_STATS_INTERVAL;
            }
            let wait = self
                .link
                .poll_timeout()
                .map_or(IDLE_WAIT, |due| due.saturating_duration_since(now));
            if wait > self.spin {
                self.receiver
                    .wait_readable((wait - self.spin).min(IDLE_WAIT))
                    .map_err(|source| WanemError::Socket {
                        context: format!("waiting for frames on {}", self.receiver.interface()),
                        source,
                    })?;
            }
            let received = self.receive_batch(&mut buffer)?;
            if received == 0 && wait <= self.spin {
                std::hint::spin_loop();
            }
        }
        bump(
            &self.counters.kernel_drops,
            self.receiver.take_kernel_drops()?,
        );
        self.counters
            .pending
            .store(self.link.pending() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Sends every frame due by `now`.
    fn transmit_due(&mut self, now: Instant) {
        while let Some((due, frame)) = self.link.poll_transmit(now) {
            match self.sender.send(&frame) {
                Ok(()) => {
                    bump(&self.counters.sent, 1);
                    bump(&self.counters.sent_bytes, frame.len() as u64);
                    let late = Instant::now().saturating_duration_since(due);
                    if late >= LATE {
                        bump(&self.counters.late_over_1ms, 1);
                    }
                    self.counters
                        .late_max_ns
                        .fetch_max(late.as_nanos() as u64, Ordering::Relaxed);
                }
                Err(error) => {
                    bump(&self.counters.send_errors, 1);
                    if !std::mem::replace(&mut self.warned_send, true) {
                        eprintln!(
                            "wanem {}: sending a {}-byte frame on {} failed: {error} (counted in send_errors; reported once)",
                            self.label,
                            frame.len(),
                            self.sender.interface()
                        );
                    }
                }
            }
        }
        self.counters
            .pending
            .store(self.link.pending() as u64, Ordering::Relaxed);
    }

    /// Reads up to [`RECEIVE_BATCH`] frames without blocking; returns how many.
    fn receive_batch(&mut self, buffer: &mut [u8]) -> Result<usize, WanemError> {
        let mut count = 0;
        while count < RECEIVE_BATCH {
            let Some(received) =
                self.receiver
                    .recv(buffer)
                    .map_err(|source| WanemError::Socket {
                        context: format!("reading a frame on {}", self.receiver.interface()),
                        source,
                    })?
            else {
                break;
            };
            let now = Instant::now();
            if received.outgoing {
                continue;
            }
            count += 1;
            bump(&self.counters.received, 1);
            bump(&self.counters.received_bytes, received.len as u64);
            if received.len > buffer.len() || received.len > self.max_frame {
                bump(&self.counters.oversize, 1);
                if !std::mem::replace(&mut self.warned_oversize, true) {
                    eprintln!(
                        "wanem {}: dropped a {}-byte frame, larger than {}'s MTU allows ({} bytes with headers): GRO, TSO or GSO is on somewhere (counted in oversize; reported once)",
                        self.label,
                        received.len,
                        self.sender.interface(),
                        self.max_frame
                    );
                }
                continue;
            }
            if received.checksum_not_ready {
                bump(&self.counters.checksum_not_ready, 1);
                if !std::mem::replace(&mut self.warned_checksum, true) {
                    eprintln!(
                        "wanem {}: a frame arrived on {} with its checksum left to offload; the receiver will drop it: turn off tx checksumming on the sender's interface (counted in checksum_not_ready; reported once)",
                        self.label,
                        self.receiver.interface()
                    );
                }
            }
            let frame = buffer[..received.len].to_vec();
            match self.link.handle_arrival(now, received.len, frame) {
                Verdict::Scheduled { .. } => {}
                Verdict::Lost => bump(&self.counters.dropped_loss, 1),
                Verdict::QueueFull => bump(&self.counters.dropped_queue, 1),
            }
        }
        Ok(count)
    }
}

/// Timer slack 1 ns for this thread: sleeps end when asked, not up to 50 µs
/// later (the default slack).
fn set_fine_timer_slack() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_lines_read_back_as_written() {
        let stats = DirectionStats {
            received: 10,
            received_bytes: 15_000,
            dropped_loss: 1,
            dropped_queue: 2,
            oversize: 0,
            sent: 6,
            sent_bytes: 9_000,
            send_errors: 0,
            checksum_not_ready: 3,
            kernel_drops: 4,
            pending: 1,
            late_over_1ms: 5,
            late_max_us: 1234,
        };
        assert_eq!(DirectionStats::parse_fields(&stats.to_string()), stats);
        assert!(stats.balanced());
        assert_eq!(stats.faults(), 7);
    }
}
