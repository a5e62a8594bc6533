//! The lease state machine and time: samples of Redis time, and the window going back.

use super::{LeaseMachine, Notice, Shared, RESAMPLE_AFTER_INTERVALS};
use crate::fleet::time::Verdict;

impl LeaseMachine {
    /// Moves the accounting back to window `current`, older than `window` (the mapping
    /// of Redis time went back), unless the lease word names a newer window than
    /// `current`: it cannot go back, and holds only what was granted for that window.
    pub(super) fn resync(&mut self, shared: Shared<'_>, current: u64) -> bool {
        if shared.lease.snapshot().0 > current {
            return false;
        }
        self.window = current;
        self.held = 0;
        self.spent = 0;
        self.spent_previous = 0;
        self.retry_lease_at = 0;
        true
    }

    /// Maps the local clock onto the server's `TIME` from this call made from local
    /// time `t0` to `t1`, if `SampleFilter` keeps it (always when `forced`).
    pub(super) fn sample_time(
        &mut self,
        shared: Shared<'_>,
        server: u64,
        call: (u64, u64),
        forced: bool,
    ) {
        let max_age = RESAMPLE_AFTER_INTERVALS * self.settings.interval_nanos;
        let verdict = self
            .samples
            .judge(shared.time, server, call, max_age, forced);
        if let Verdict::Step(nanos) = verdict {
            if nanos.unsigned_abs() >= u128::from(self.settings.interval_nanos) {
                self.notices.push(Notice::ClockStep { nanos });
            }
        }
    }
}
