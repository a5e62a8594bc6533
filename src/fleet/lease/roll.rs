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
                shared.stats.leased(granted);
                granted
            }
            _ => 0,
        };
        self.window = current;
        self.prefetched = None;
        self.spent = 0;
        self.retry_lease_at = 0;
    }

    /// The rule is closed or dropped: its window counts as closed (what was spent of
    /// it, and what was left), once.
    pub(crate) fn retire(&mut self, shared: Shared<'_>) {
        // A decision may have moved the word on to a prefetched window already.
        let (word_window, _) = shared.lease.snapshot();
        self.roll(shared, word_window);
        self.count_closed_window(shared);
        self.held = 0;
        self.spent = 0;
        self.prefetched = None;
    }

    /// Adds what was spent of `window`, and what was left, to the statistics: read
    /// from the word if it still names `window`, else from what the roll that moved it
    /// on left of it, else (two rolls since the last look) as last looked at.
    fn count_closed_window(&mut self, shared: Shared<'_>) {
        let (word_window, remaining) = shared.lease.snapshot();
        if word_window == self.window {
            self.spent = self.held.saturating_sub(remaining);
        } else if let Some(left) = shared.lease.left_of(self.window) {
            // A decision rolled the word on: what it left of the window.
            self.spent = self.held.saturating_sub(left);
        }
        let unused = self.held.saturating_sub(self.spent);
        shared.stats.rolled(self.spent, unused);
    }
}
