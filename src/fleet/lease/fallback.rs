//! The fallback of the lease state machine: when to spend the local share, and
//! installing it.

use std::sync::atomic::Ordering;

use super::{
    LeaseMachine, Notice, Shared, FALLBACK_AFTER_INTERVALS, FALLBACK_MARGIN_INTERVALS,
    PRUNE_AFTER_INTERVALS,
};
use crate::fleet::share::share;
use crate::fleet::word::Added;

impl LeaseMachine {
    /// Enters fallback after [`FALLBACK_AFTER_INTERVALS`] without a successful call (or
    /// a round that wrote its replica's heartbeat while its keys were foreign), unless
    /// the last call failed on a foreign key: no share then (`vouch.rs`). The
    /// share is spent only from the next window on (`current + 1`): Redis starts
    /// reserving this instance's share (its stale age) one interval before this, so
    /// every lease the others got for a window that starts later already left the share
    /// out; in the current window they may not have.
    pub(super) fn update_fallback(&mut self, shared: Shared<'_>, now: u64, current: u64) {
        let fallback_after = FALLBACK_AFTER_INTERVALS * self.settings.interval_nanos;
        // Heard from Redis last: an answer, or the last round its replica's heartbeat
        // went on while its keys were foreign.
        let heard = self.last_success.max(self.free_until);
        let stale = heard.is_none_or(|t| now.saturating_sub(t) >= fallback_after);
        if stale && !self.in_fallback && self.membership_settled && !self.foreign {
            self.in_fallback = true;
            self.fallback_first_window = current + 1;
            // Relaxed: a display value (see `StatCells`).
            shared.stats.fallback.store(true, Ordering::Relaxed);
            let instances = self.membership.map_or(1, |m| m.instances);
            self.notices.push(Notice::FellBack {
                instances,
                cause: self.last_failure,
            });
        }
    }

    /// In fallback, installs this replica's share of window `current`, once, if Redis
    /// still reserves it for the whole window (see [`PRUNE_AFTER_INTERVALS`]).
    pub(super) fn spend_fallback_share(&mut self, shared: Shared<'_>, current: u64) {
        if !(self.in_fallback
            && !self.foreign
            && current == self.window
            && current > self.newest_window_reported
            && current >= self.fallback_first_window
            && self.fallback_spent_for < current)
        {
            return;
        }
        self.fallback_spent_for = current;
        let Some(m) = self.membership else { return };
        if !self.share_reserved_through(shared, current) {
            if !self.share_expired {
                self.share_expired = true;
                self.notices.push(Notice::ShareExpired);
            }
            return;
        }
        let permits = share(self.settings.permits, m.instances, m.rank, current);
        if shared.lease.add(current, permits) == Added::Installed {
            self.held += permits;
            self.fallback_installed_for = current;
            shared.stats.fallback_installed(permits);
        }
    }

    /// Whether Redis still reserves this replica's share when window `window` ends:
    /// it forgets a member no sooner than the prune age after the member's last
    /// heartbeat, which was written after it was sent; less the margin of the clock
    /// uncertainty, which follows the rule's own timeouts ([`FALLBACK_MARGIN_INTERVALS`]).
    fn share_reserved_through(&self, shared: Shared<'_>, window: u64) -> bool {
        let interval = self.settings.interval_nanos;
        let Some(sent) = self.last_heartbeat_sent else {
            return false;
        };
        let margin = (FALLBACK_MARGIN_INTERVALS * interval).max(self.settings.call_bound_nanos);
        let reserved_until = sent
            .saturating_add(PRUNE_AFTER_INTERVALS * interval)
            .saturating_sub(margin);
        let end = (window + 1).saturating_mul(self.settings.window_nanos);
        shared
            .time
            .local_nanos(end)
            .is_some_and(|end| end <= reserved_until)
    }
}
