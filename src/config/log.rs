//! The library's own messages (a lossy environment fallback, reload outcomes): through
//! `tracing`, target `otel_rate_sampler`, never from a sampling decision. A message
//! repeated within [`INTERVAL`] is logged once; the next one after the interval says how
//! many were held back (field `held_back`).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most one copy of the same message per this interval.
pub(crate) const INTERVAL: Duration = Duration::from_secs(60);

/// Which messages were logged when, and how many copies were held back since.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    seen: BTreeMap<String, (Instant, u64)>,
}

impl Repeats {
    pub(crate) const fn new() -> Self {
        Self {
            seen: BTreeMap::new(),
        }
    }

    /// `Some(copies held back since the last one logged)` if `message` is to be logged
    /// at `now`, `None` if it was logged less than [`INTERVAL`] ago.
    pub(crate) fn admit(&mut self, message: &str, now: Instant) -> Option<u64> {
        if let Some((last, held_back)) = self.seen.get_mut(message) {
            if now.saturating_duration_since(*last) < INTERVAL {
                *held_back += 1;
                return None;
            }
            let count = *held_back;
            (*last, *held_back) = (now, 0);
            return Some(count);
        }
        // Forget messages quiet for two intervals, so the map stays small.
        self.seen
            .retain(|_, (last, _)| now.saturating_duration_since(*last) < 2 * INTERVAL);
        self.seen.insert(message.to_owned(), (now, 0));
        Some(0)
    }
}

static REPEATS: Mutex<Repeats> = Mutex::new(Repeats::new());

fn admit(message: &str) -> Option<u64> {
    REPEATS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .admit(message, Instant::now())
}

/// Logs `message` as a warning, unless it was logged less than [`INTERVAL`] ago.
pub(crate) fn warn(message: &str) {
    if let Some(held_back) = admit(message) {
        tracing::warn!(target: "otel_rate_sampler", held_back, "{message}");
    }
}

/// Logs `message` at info level, unless it was logged less than [`INTERVAL`] ago.
#[cfg_attr(
    not(any(feature = "reload", feature = "jaeger-remote")),
    allow(dead_code)
)] // reload and remote sampling outcomes
pub(crate) fn info(message: &str) {
    if let Some(held_back) = admit(message) {
        tracing::info!(target: "otel_rate_sampler", held_back, "{message}");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_same_message_is_logged_once_per_interval() {
        let mut repeats = Repeats::new();
        let t0 = Instant::now();
        assert_eq!(repeats.admit("bad rate", t0), Some(0));
        assert_eq!(repeats.admit("bad rate", t0 + Duration::from_secs(1)), None);
        assert_eq!(repeats.admit("other", t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(
            repeats.admit("bad rate", t0 + INTERVAL - Duration::from_millis(1)),
            None
        );
        // After the interval: logged again, saying two copies were held back.
        assert_eq!(repeats.admit("bad rate", t0 + INTERVAL), Some(2));
        assert_eq!(repeats.admit("bad rate", t0 + INTERVAL), None);
    }
}
