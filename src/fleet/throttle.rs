//! Logging at most once per sync interval: a kind of event counted, and logged with
//! the count of those not logged since.

/// A kind of event logged at most once per sync interval, with the count since.
#[derive(Default)]
pub(crate) struct Throttle {
    last: Option<u64>,
    pending: u64,
}

impl Throttle {
    /// Counts an event at `now`; the events to log (this one and those not logged
    /// since), if none was logged within `interval`.
    pub(crate) fn due(&mut self, now: u64, interval: u64) -> Option<u64> {
        self.pending += 1;
        if self.last.is_some_and(|t| now.saturating_sub(t) < interval) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}
