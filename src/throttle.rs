//! Log lines that could repeat at the rate of requests or connections (Redis down, a flood of
//! connections, `accept` failing) are written at most once per interval, each with the number of
//! lines suppressed since the previous one. An operator still learns that it happens and how
//! often; the disk and the hot path do not pay for every occurrence.
//!
//! ```ignore
//! static STORE_DOWN: Throttle = Throttle::new(Duration::from_secs(10));
//! if let Some(suppressed) = STORE_DOWN.admit() {
//!     tracing::warn!(suppressed, "store unavailable");
//! }
//! ```

use std::{sync::Mutex, time::Duration};

use tokio::time::Instant;

/// How often a throttled line may be written, unless a site says otherwise.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Admits one occurrence per interval; counts the rest.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the next line may be written (`None`: now).
    next_at: Option<Instant>,
    /// Occurrences not written since the last line.
    suppressed: u64,
}

impl Throttle {
    /// At most one line per `interval`; usable in a `static`.
    pub const fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            state: Mutex::new(State {
                next_at: None,
                suppressed: 0,
            }),
        }
    }

    /// Records one occurrence. `Some(suppressed)` means: write the line now, saying that
    /// `suppressed` earlier occurrences were not written; `None` means: skip it (it is counted).
    pub fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match state.next_at {
            Some(next_at) if now < next_at => {
                state.suppressed += 1;
                None
            }
            _ => {
                state.next_at = Some(now + self.interval);
                Some(std::mem::take(&mut state.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first occurrence is written; the rest of the interval is counted, and the count is
    /// handed to the next line written after the interval.
    #[tokio::test(start_paused = true)]
    async fn one_line_per_interval_with_the_count_of_the_rest() {
        let throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.admit(), Some(0));
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(throttle.admit(), None);
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(throttle.admit(), Some(5));
        assert_eq!(throttle.admit(), None);
        // A quiet spell: the next occurrence is written at once, with nothing suppressed since.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(throttle.admit(), Some(1));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(throttle.admit(), Some(0));
    }
}
