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

    /// The local clock stood still (or crawled) for a sync interval of real time
    /// (`stall.rs`): paced by it, the machine would make no call, and its mapping would
    /// keep the decisions in a window Redis has left. Samples Redis time before the
    /// next call, as after a refusal for lateness, and lets that call go at once.
    pub(crate) fn clock_stalled(&mut self) {
        self.resample_first = true;
        self.failing = false;
    }

    /// Whether a heartbeat is due at local time `now` (fleet time `fleet`), or within
    /// `ahead`: at the point of the fleet's grid of sync intervals nearest an interval
    /// after the last successful call was sent, seen a quarter interval early, and not
    /// within half an interval of the last success (a busy rule's calls are its
    /// heartbeats). The idle rules of one interval thus fall due in the same rounds,
    /// rather than drifting apart by their round trips; a rule calls at most an interval
    /// and a quarter after its last successful call was sent.
    pub(super) fn heartbeat_due(&self, now: u64, fleet: u64, ahead: u64) -> bool {
        let (Some(sent), Some(success)) = (self.last_success_sent, self.last_success) else {
            return true;
        };
        let interval = self.settings.interval_nanos;
        if now.saturating_sub(success) < interval / 2 {
            return false;
        }
        let sent = fleet.saturating_sub(now.saturating_sub(sent));
        // The grid of this replica: the fleet's, shifted by its phase.
        let phase = self.settings.phase_nanos % interval;
        let grid = sent
            .saturating_add(interval + interval / 2)
            .saturating_sub(phase)
            / interval
            * interval
            + phase;
        fleet.saturating_add(interval / 4 + ahead) >= grid
    }

    /// Draws the jitter added to the next retry's interval: up to a quarter interval
    /// (a xorshift of this replica's phase), so replicas that failed together (Redis
    /// down for all) do not retry together.
    pub(super) fn draw_retry_jitter(&mut self) {
        let mut x = self.jitter_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter_state = x;
        self.retry_jitter = x % (self.settings.interval_nanos / 4).max(1);
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

/// The phase of a replica group's heartbeat grid within `interval`: a hash (FNV-1a)
/// of the group (its replica and interval), the same for all its rules, so they still
/// share rounds, and different from another replica's.
pub(crate) fn phase_of(group: &str, interval: u64) -> u64 {
    let hash = group.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    hash % interval.max(1)
}
