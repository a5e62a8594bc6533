//! The window roll of the lease state machine: what the lease word holds for the
//! window it accounts for, and moving on to a newer window.

use std::sync::atomic::Ordering;

use super::{LeaseMachine, Shared};

impl LeaseMachine {
    /// What remains in the lease word for `window` (0 if it names another window), and
    /// the statistics of the window.
    pub(super) fn look_at_word(&mut self, shared: Shared<'_>) -> u64 {
        let (word_window, remaining) = shared.lease.snapshot();
        let remaining = if word_window == self.window {
            self.spent = self.held.saturating_sub(remaining);
            remaining
        } else {
            0
        };
        // Relaxed: display values (see `StatCells`).
        shared.stats.window.store(self.window, Ordering::Relaxed);
        shared.stats.granted.store(self.held, Ordering::Relaxed);
        remaining
    }

    /// Moves the accounting to window `current` if it is newer.
    pub(super) fn roll(&mut self, shared: Shared<'_>, current: u64) {
        if current <= self.window {
            return;
        }
        self.count_closed_window(shared);
        self.spent_previous = if self.window + 1 == current {
            self.spent
        } else {
            0
        };
        self.held = match self.prefetched {
            Some((window, granted)) if window == current => {
                // Installed by a decision already, or now by us: at most once either way.
                shared.lease.roll_to(current, granted);
                // Relaxed (stats): a display counter.
                let leased = &shared.stats.permits_leased;
                leased.fetch_add(granted, Ordering::Relaxed);
                granted
            }
            _ => 0,
        };
        self.window = current;
        self.prefetched = None;
        self.spent = 0;
        self.retry_lease_at = 0;
    }

    /// Adds what was spent of `window`, and what was left, to the statistics: read
    /// from the word if it still names `window`, else as last looked at.
    fn count_closed_window(&mut self, shared: Shared<'_>) {
        let (word_window, remaining) = shared.lease.snapshot();
        if word_window == self.window {
            self.spent = self.held.saturating_sub(remaining);
        }
        // Relaxed (stats): display counters.
        let stats = shared.stats;
        stats.permits_used.fetch_add(self.spent, Ordering::Relaxed);
        let unused = self.held.saturating_sub(self.spent);
        stats.permits_unused.fetch_add(unused, Ordering::Relaxed);
    }
}
