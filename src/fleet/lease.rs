//! The lease state machine: which call to make next, what a reply or a failure changes,
//! the window roll and the fallback. No I/O and no clock of its own: the transport
//! (`transport.rs`) makes the calls, the worker (`worker.rs`) reads the clock and passes
//! the local time in. What it changes is in memory only: the lease word the decisions
//! spend, the fleet-time mapping and the statistics (`Shared`).
//!
//! # Bounds it keeps (per fleet window id, for this replica)
//!
//! * It installs in the lease word for window `w` only what Redis granted for `w`, plus,
//!   in fallback, its share `N/k` of `w` (rotated, see `share.rs`), at most once per
//!   window and only for a window later than every window it reported to Redis.
//! * While a call is failing it makes one attempt per sync interval (plus a jitter of
//!   up to a quarter interval, drawn at each failure); a refusal for
//!   lateness adds one re-sample of the clock and, once per interval, a lease right
//!   after it: at most 4 calls per interval while every lease is refused as late.
//! * It never asks for a lease of a window older than the one it accounts for.
//! * Idle, it heartbeats on its replica's grid of sync intervals (the fleet's, shifted
//!   by the replica's phase; `lease/clock.rs`), at most an interval and a quarter after
//!   its last successful call was sent, until it goes dormant (`lease/dormant.rs`).
//!
//! # Steps of time (see also the fleet clock in `script.rs`)
//!
//! * **Redis time steps back:** the fleet clock goes on from the highest time it
//!   answered, so replicas see no step at all while the rule is called often (a live
//!   replica calls at least every 1.25 intervals): no window is lost. If
//!   nobody called for a while, the fleet lives again `min(step, time since the last
//!   call)`, never a window id twice.
//! * **Redis time steps forward, or this replica's clock stalls:** its next call is
//!   refused as late; the refusal's time corrects the mapping, one re-sample follows,
//!   and the lease right after it is for the right window: at most one interval and
//!   two round trips after its first call, within one window of under-use. A clock
//!   that stands still makes no call due; the worker notices it against real time
//!   (`stall.rs`) and has the machine sample Redis time once per interval.
//! * **This replica's clock jumps ahead by `D`:** Redis grants no lease further than
//!   one window from its own and its time corrects the mapping at the next reply;
//!   the machine re-syncs to Redis's window at once, unless the lease word already
//!   names a later window (a prefetch, or a fallback share installed while it was
//!   ahead), which it then waits for: at most one window, or `D` of its own fallback
//!   share if the jump came while it was in fallback.
//! * Never a window over its grants plus one fallback share, whatever the steps:
//!   checked by the property test in `lease/tests.rs`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::script::{LeaseReply, LeaseRequest};
use super::share::{chunk, low_water};
use super::stats::{FleetFailure, StatCells};
use super::time::{SampleFilter, TimeMap};
use super::word::LeaseWord;

/// Sync intervals without a successful call after which an instance falls back.
pub(crate) const FALLBACK_AFTER_INTERVALS: u64 = 3;
/// Sync intervals after which Redis counts a member as stale (it may be in fallback):
/// below [`FALLBACK_AFTER_INTERVALS`], so Redis reserves a share before it is spent.
pub(crate) const STALE_AFTER_INTERVALS: u64 = 2;
/// Sync intervals (of Redis's live clock, which never runs faster than real time)
/// after which Redis forgets a member that stopped calling, and with it the share it
/// reserved. One rule for both sides: a replica spends its fallback share only in
/// windows that end before this age, less [`FALLBACK_MARGIN_INTERVALS`], has passed
/// since it sent its last heartbeat that Redis answered.
pub(crate) const PRUNE_AFTER_INTERVALS: u64 = 20;
/// The replica's side of the clock uncertainty in that rule, at least: its mapping of a
/// window end is off by at most half a round trip plus drift, and so is the time of
/// its heartbeat mapped back; a round trip is at most the call's response and connect
/// timeouts, so the margin is the longer of this many intervals and those timeouts
/// ([`Settings::call_bound_nanos`]), whatever timeouts the rule was given.
pub(crate) const FALLBACK_MARGIN_INTERVALS: u64 = 1;
/// A mapping of Redis time older than this many sync intervals takes any sample.
const RESAMPLE_AFTER_INTERVALS: u64 = 10;

/// The in-memory state the machine writes, shared with the decision path.
#[derive(Clone, Copy)]
pub(crate) struct Shared<'a> {
    pub(crate) lease: &'a LeaseWord,
    pub(crate) time: &'a TimeMap,
    pub(crate) stats: &'a StatCells,
    /// Set by a refused decision; the machine takes it to wake a dormant rule.
    pub(crate) demand: &'a AtomicBool,
}

/// The rule's fixed parameters, in nanoseconds of the local clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// `N`, the fleet's permits per window.
    pub(crate) permits: u64,
    pub(crate) window_nanos: u64,
    /// Heartbeats and retries while failing: one per interval.
    pub(crate) interval_nanos: u64,
    /// How often the worker plans when it has nothing to call.
    pub(crate) tick_nanos: u64,
    /// The longest one call may take: its response and connect timeouts. A sample of
    /// Redis time is kept only from a call within it, so the mapping of a window end
    /// is off by at most half of it, and a heartbeat time Redis reports, mapped back,
    /// by as much again: the fallback's margin before Redis forgets the replica is
    /// at least this (`lease/fallback.rs`).
    pub(crate) call_bound_nanos: u64,
    /// This replica's offset of the grid of intervals its idle rules heartbeat on, and
    /// the seed of its retries' jitter (below an interval): replicas spread their
    /// heartbeats and retries over the interval instead of all calling at its start.
    pub(crate) phase_nanos: u64,
}

/// What to ask Redis next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// Sample the server's clock (before the first lease: window ids need it).
    SampleTime,
    /// Run the lease script (a heartbeat and report when `want` is 0).
    Lease(LeaseRequest),
}

/// Redis's answer to a [`Call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The server's `TIME`, in Unix nanoseconds.
    Time(u64),
    Lease(LeaseReply),
}

/// What the replica last learnt from Redis about the fleet: `instances` live members
/// (`k`) and its rank among them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Membership {
    pub(crate) instances: u64,
    pub(crate) rank: u64,
}

/// Changes of state an operator should hear about; the worker logs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notice {
    /// Fell back to spending the local share `N/instances`; `cause` is why the last
    /// call since the last success failed, `None` if no call failed (the replica's
    /// clock jumped ahead, or its worker was stalled).
    FellBack {
        instances: u64,
        cause: Option<FleetFailure>,
    },
    /// Redis answered again: leasing resumed.
    Resumed,
    /// Cut off longer than Redis keeps this replica's share: it admits nothing more
    /// until Redis answers.
    ShareExpired,
    /// Redis refused a lease: the key is leased by another shape (`version`: false) or
    /// holds a later script's state (true).
    Refused { version: bool },
    /// The mapping of Redis time was off by this many nanoseconds (Redis later than
    /// the replica thought when positive): a clock stepped, Redis's or this replica's.
    ClockStep { nanos: i128 },
}

/// The lease state machine of one replica and rule.
#[derive(Debug)]
pub(crate) struct LeaseMachine {
    settings: Settings,
    /// The fleet window the machine accounts for.
    window: u64,
    /// What it installed in the lease word for `window` (grants plus fallback share):
    /// what it reports to Redis as held.
    held: u64,
    /// Of `held`, what the decisions had spent when last looked at.
    spent: u64,
    /// What was spent in the window before `window` (0 if that was not the one before).
    spent_previous: u64,
    /// A lease granted for the window after `window`: (window, permits).
    prefetched: Option<(u64, u64)>,
    /// No lease call for `window` before this local time (Redis was short).
    retry_lease_at: u64,
    last_success: Option<u64>,
    /// When the call of `last_success` was sent.
    last_success_sent: Option<u64>,
    /// Why the last call failed, if one failed since the last success.
    last_failure: Option<FleetFailure>,
    /// The local time of the heartbeat Redis last wrote for this replica, as its reply
    /// said (at most when that call was sent).
    last_heartbeat_sent: Option<u64>,
    /// When (fleet ms) the last lease call Redis answered was sent: what this rule
    /// vouches for in its replica's heartbeat (`pool.rs`).
    last_answered_ms: Option<u64>,
    last_attempt: Option<u64>,
    /// Whether the last call failed (calls are then paced to one per interval).
    failing: bool,
    /// Whether it failed on a key of this rule holding another type (`vouch.rs`).
    foreign: bool,
    /// Until when (local) it let its replica's heartbeat go on while failing so.
    free_until: Option<u64>,
    /// The last window a fallback share was installed in (0: none).
    fallback_installed_for: u64,
    /// The newest window this replica talked to Redis about: the fallback share is
    /// spent only in later windows.
    newest_window_reported: u64,
    /// From the last reply outside a restart's recovery (young) windows.
    membership: Option<Membership>,
    /// Whether `membership` came from a reply outside the young windows. A brand-new
    /// rule's first replies see the instances registered so far, so their views
    /// disagree (1, 2, 3 for three instances starting together) and their shares would
    /// add up to more than N: the fallback spends a share only from a settled view.
    membership_settled: bool,
    in_fallback: bool,
    /// The first window the current fallback may spend in, and the last one it did.
    fallback_first_window: u64,
    fallback_spent_for: u64,
    /// Whether this fallback outlived Redis's reservation of its share (told once).
    share_expired: bool,
    last_round_trip: u64,
    samples: SampleFilter,
    /// Set by a refusal for lateness: sample Redis time before the next call.
    resample_first: bool,
    /// When a re-sample last let the next lease go without waiting its interval.
    last_quick_retry: Option<u64>,
    /// Added to the interval between retries while failing: up to a quarter interval,
    /// drawn anew at each failure (from `jitter_state`), 0 after a success.
    retry_jitter: u64,
    jitter_state: u64,
    /// No traffic: the rule makes no call until a decision is refused (`dormant.rs`).
    dormant: bool,
    /// Since when (local) it has had no traffic.
    idle_since: Option<u64>,
    /// It went dormant since the pool last asked: its member is to leave the rule.
    leave_due: bool,
    notices: Vec<Notice>,
}

impl LeaseMachine {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            settings,
            window: 0,
            held: 0,
            spent: 0,
            spent_previous: 0,
            prefetched: None,
            retry_lease_at: 0,
            last_success: None,
            last_success_sent: None,
            last_failure: None,
            last_heartbeat_sent: None,
            last_answered_ms: None,
            last_attempt: None,
            failing: false,
            foreign: false,
            free_until: None,
            fallback_installed_for: 0,
            newest_window_reported: 0,
            membership: None,
            membership_settled: false,
            in_fallback: false,
            fallback_first_window: u64::MAX,
            fallback_spent_for: 0,
            share_expired: false,
            last_round_trip: 0,
            samples: SampleFilter::new(),
            resample_first: false,
            last_quick_retry: None,
            retry_jitter: 0,
            jitter_state: settings.phase_nanos | 1,
            dormant: false,
            idle_since: None,
            leave_due: false,
            notices: Vec::new(),
        }
    }

    /// Whether the replica spends its fallback share.
    #[cfg(test)]
    pub(crate) fn in_fallback(&self) -> bool {
        self.in_fallback
    }

    /// The notices since the last call.
    pub(crate) fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// Whether an interval, plus the retry jitter while failing, has passed since `last`.
    fn paced(&self, last: Option<u64>, now: u64) -> bool {
        let wait = self.settings.interval_nanos + self.retry_jitter;
        last.is_none_or(|t| now.saturating_sub(t) >= wait)
    }

    /// Window bookkeeping and fallback at local time `now`; returns the call to make
    /// now, if any.
    #[cfg(test)]
    pub(crate) fn plan(&mut self, shared: Shared<'_>, now: u64) -> Option<Call> {
        self.plan_within(shared, now, 0)
    }

    /// As `plan`, a heartbeat also when it falls due within `ahead`: the
    /// pool's rounds take every rule's heartbeat due soon (`pool.rs`).
    pub(crate) fn plan_within(&mut self, shared: Shared<'_>, now: u64, ahead: u64) -> Option<Call> {
        if self.resample_first {
            return Some(Call::SampleTime);
        }
        if self.failing && !self.paced(self.last_attempt, now) {
            // While failing, one attempt per sync interval.
            if let Some(fleet) = shared.time.fleet_nanos(now) {
                self.advance(shared, now, fleet / self.settings.window_nanos);
            }
            return None;
        }
        let Some(fleet) = shared.time.fleet_nanos(now) else {
            return self
                .paced(self.last_attempt, now)
                .then_some(Call::SampleTime);
        };
        let current = fleet / self.settings.window_nanos;
        let sent_ms = fleet / 1_000_000;
        if current < self.window && !self.resync(shared, current) {
            // The lease word names a window the fleet has not reached (this replica's
            // clock ran ahead): no lease for an older one, a heartbeat per interval.
            let due = self.paced(self.last_attempt, now);
            return due.then(|| Call::Lease(self.request(current, 0, sent_ms)));
        }
        self.advance(shared, now, current);
        let remaining = self.look_at_word(shared);
        if self.failing || self.in_fallback {
            // Paced above: one attempt per interval, a heartbeat that also reports.
            return Some(Call::Lease(self.request(current, 0, sent_ms)));
        }
        // Relaxed: a hint (see `Inner::wanted`).
        let wanted = shared.demand.swap(false, Ordering::Relaxed);
        if self.sleeps(wanted, now) {
            return None;
        }
        let lease = |window, want| Some(Call::Lease(self.request(window, want, sent_ms)));
        let wanted = chunk(self.settings.permits, self.spent_previous, self.spent);
        if remaining <= low_water(wanted) && now >= self.retry_lease_at {
            return lease(current, wanted);
        }
        let to_edge = (current + 1)
            .saturating_mul(self.settings.window_nanos)
            .saturating_sub(fleet);
        let lead = (4 * self.last_round_trip).max(2 * self.settings.tick_nanos);
        let prefetch = self.prefetched.is_none_or(|(w, _)| w != current + 1);
        let due = self.heartbeat_due(now, fleet, ahead);
        // A heartbeat due before the prefetch's lead is the prefetch (which heartbeats
        // too), so idle rules make it in their grid's rounds, not each at its own lead.
        if prefetch && (to_edge <= lead || due && to_edge <= self.settings.interval_nanos + lead) {
            return lease(current + 1, chunk(self.settings.permits, self.spent, 0));
        }
        if due {
            return lease(current, 0);
        }
        None
    }

    /// Falls back if due, rolls to window `current` and installs a fallback share.
    fn advance(&mut self, shared: Shared<'_>, now: u64, current: u64) {
        self.update_fallback(shared, now, current);
        self.roll(shared, current);
        self.spend_fallback_share(shared, current);
    }
}

mod clock;
mod dormant;
mod fallback;
mod reply;
mod roll;
mod vouch;

pub(crate) use clock::phase_of;
pub(crate) use vouch::Vouch;
#[cfg(test)]
mod tests;
