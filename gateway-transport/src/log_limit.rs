//! Log lines a peer can trigger, rate-limited per call site.
//!
//! A line that network input can cause (a protocol violation, a full accept
//! backlog, a failed upstream) would otherwise let anyone write log lines at
//! will: fill the disk, drown the lines that matter, cost CPU. Each call site
//! of [`warn_limited!`](crate::warn_limited) writes at most
//! [`LINES_PER_INTERVAL`] lines per [`INTERVAL`]; the first line written
//! after some were held back carries `suppressed = N`, the count held back
//! since the last line written.
//!
//! [`LogLimit`] is the I/O-free core (time passed in); the macro gives each
//! call site its own static one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines one call site writes per [`INTERVAL`] at most.
pub const LINES_PER_INTERVAL: u32 = 10;
/// The window [`LINES_PER_INTERVAL`] counts over.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// One call site's budget of lines.
#[derive(Debug)]
pub struct LogLimit {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the current window opened; `None` before the first line.
    window: Option<Instant>,
    /// Lines written in the current window.
    written: u32,
    /// Lines held back since the last one written.
    suppressed: u64,
}

impl LogLimit {
    /// A fresh budget (`const`, for a `static` per call site).
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                window: None,
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether a line may be written at `now`: `Some(n)` if so, `n` being the
    /// lines held back since the last one written (0 if none); `None` if it
    /// is to be held back (and counted).
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let expired = state
            .window
            .is_none_or(|opened| now.saturating_duration_since(opened) >= INTERVAL);
        if expired {
            state.window = Some(now);
            state.written = 0;
        }
        if state.written >= LINES_PER_INTERVAL {
            state.suppressed = state.suppressed.saturating_add(1);
            return None;
        }
        state.written += 1;
        Some(std::mem::take(&mut state.suppressed))
    }
}

impl Default for LogLimit {
    fn default() -> Self {
        Self::new()
    }
}

/// `tracing::warn!` for a line a peer can trigger: the same arguments, at
/// most [`LINES_PER_INTERVAL`] lines per [`INTERVAL`] from this call site, the
/// count of lines held back given as `suppressed` on the next one written.
#[macro_export]
macro_rules! warn_limited {
    ($($arg:tt)+) => {{
        static LIMIT: $crate::log_limit::LogLimit = $crate::log_limit::LogLimit::new();
        match LIMIT.admit(::std::time::Instant::now()) {
            Some(0) => $crate::log_limit::__tracing::warn!($($arg)+),
            Some(suppressed) => $crate::log_limit::__tracing::warn!(suppressed, $($arg)+),
            None => {}
        }
    }};
}

#[doc(hidden)]
pub use tracing as __tracing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_cut_to_the_budget_and_the_rest_counted_on_the_next_line() {
        let limit = LogLimit::new();
        let t0 = Instant::now();
        let admitted: Vec<Option<u64>> = (0..25).map(|_| limit.admit(t0)).collect();
        let budget = LINES_PER_INTERVAL as usize;
        assert_eq!(admitted[..budget], vec![Some(0); budget][..]);
        assert!(admitted[budget..].iter().all(Option::is_none));
        // Still inside the window: held back.
        assert_eq!(limit.admit(t0 + INTERVAL - Duration::from_millis(1)), None);
        // The next window's first line says how many were held back (15 + 1),
        // and the count starts again.
        assert_eq!(limit.admit(t0 + INTERVAL), Some(16));
        assert_eq!(limit.admit(t0 + INTERVAL), Some(0));
    }

    #[test]
    fn a_quiet_site_writes_every_line() {
        let limit = LogLimit::new();
        let t0 = Instant::now();
        for i in 0..100u32 {
            let now = t0 + INTERVAL / LINES_PER_INTERVAL * i;
            assert_eq!(limit.admit(now), Some(0), "line {i}");
        }
    }
}
