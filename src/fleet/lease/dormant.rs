//! A rule without traffic makes no Redis call.
//!
//! Once a rule has spent nothing, and no decision was refused, for
//! [`DORMANT_AFTER_WINDOWS`] windows and [`DORMANT_AFTER_INTERVALS`] sync intervals
//! (whichever is longer), its calls being answered (not failing, not in fallback), it
//! goes *dormant*: it plans no call at all, no heartbeat, no prefetch, and its member
//! leaves the rule (`pool.rs` removes it, as for a dropped limiter), so the replicas
//! that go on leasing reserve no share for it. What it holds of its last lease stays
//! spendable: Redis granted and counted it. It has no share to fall back to (its view
//! of the fleet is dropped, as after a refusal) and vouches for nothing in its
//! replica's heartbeat (`vouch.rs`): it spends nothing Redis did not grant.
//!
//! The first decision refused for want of a lease sets the limiter's demand flag
//! (`Inner::wanted`, one relaxed store, then plain loads while it stays set); at the
//! worker's next tick the rule wakes and asks for a fresh lease of its current window,
//! joining the rule again. Idle rules thus cost Redis nothing, whatever their number:
//! a replica's idle cost is its busy rules' calls (their heartbeats are its own).

use super::LeaseMachine;

/// Windows without traffic before a rule goes dormant.
pub(crate) const DORMANT_AFTER_WINDOWS: u64 = 4;
/// Sync intervals without traffic before a rule goes dormant.
pub(crate) const DORMANT_AFTER_INTERVALS: u64 = 40;

impl LeaseMachine {
    /// Whether the rule sleeps at local time `now`, given whether a decision was
    /// refused since the last look (`wanted`): it wakes on one, and falls asleep when
    /// idle long enough.
    pub(super) fn sleeps(&mut self, wanted: bool, now: u64) -> bool {
        if self.dormant {
            if !wanted {
                return true;
            }
            self.dormant = false;
            self.retry_lease_at = 0;
            return false;
        }
        let idle = !wanted && self.spent == 0 && self.spent_previous == 0;
        if !idle {
            self.idle_since = None;
            return false;
        }
        let since = *self.idle_since.get_or_insert(now);
        let horizon = (DORMANT_AFTER_WINDOWS * self.settings.window_nanos)
            .max(DORMANT_AFTER_INTERVALS * self.settings.interval_nanos);
        if now.saturating_sub(since) >= horizon
            && self.last_success.is_some()
            && self.prefetched.is_none()
        {
            self.idle_since = None;
            self.dormant = true;
            self.leave_due = true;
            self.membership = None;
            self.membership_settled = false;
            return true;
        }
        false
    }

    /// Whether the rule went dormant since the last ask (its member is to leave).
    pub(crate) fn take_leave_due(&mut self) -> bool {
        std::mem::take(&mut self.leave_due)
    }

    /// Whether the rule is dormant.
    pub(crate) fn dormant(&self) -> bool {
        self.dormant
    }
}
