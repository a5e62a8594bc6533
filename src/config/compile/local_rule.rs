//! A rule's local limit: its limiter, and the excess carried into its current window
//! across reloads (what its window has used beyond what its limiter holds). A changed
//! one is handed over to its replacement by [`handover`](super::handover), which states
//! how.

use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Clock;
use crate::limit::Limit;
use crate::limiter::carry::Carry;
use crate::limiter::{AnyLimiter, RateLimiter};

use super::unseen::alone_from;

/// A local limiter, and the excess carried into its current window (with, once a
/// reload closed it, what it had counted).
pub(crate) struct LocalRule<C> {
    pub(crate) limiter: Arc<AnyLimiter<C>>,
    /// When its lineage began to be decided by it alone (clock nanoseconds): 0 for a
    /// new rule, [`alone_from`] the reload for a replacement.
    began: u64,
    excess: Arc<Mutex<Excess>>,
}

impl<C: Clock> std::fmt::Debug for LocalRule<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRule")
            .field("limit", &self.limiter.limit())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// A local rule is a limiter (an adaptive rule's cap is one): its limiter's permits.
impl<C: Clock> RateLimiter for LocalRule<C> {
    #[inline]
    fn try_acquire(&self) -> bool {
        LocalRule::try_acquire(self)
    }

    #[inline]
    fn acquire_stamped(&self) -> Option<u64> {
        LocalRule::acquire_stamped(self)
    }

    fn limit(&self) -> Limit {
        self.limiter.limit()
    }

    fn count_in_window(&self) -> Option<u64> {
        self.limiter.count_in_window()
    }
}

/// What a limit had used in its window when a reload read it, and when that window
/// ends (clock nanoseconds; for the sliding log, when what it held then has left it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    pub(crate) used: u64,
    until: u64,
    /// A sliding log's admissions numbered when it was read.
    claimed: Option<u64>,
}

/// Admissions counted against a limit that its limiter does not hold, dated (each
/// counted while its date is in the limiter's window: see [`Carry`]), and whether the
/// limiter is closed (what it counted frozen and moved here: it is no longer read).
#[derive(Clone, Default)]
struct Excess {
    carry: Carry,
    closed: bool,
    /// A sliding log's admissions numbered when it was closed.
    closed_claimed: Option<u64>,
}

impl<C> Clone for LocalRule<C> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            began: self.began,
            excess: Arc::clone(&self.excess),
        }
    }
}

impl<C: Clock> LocalRule<C> {
    /// A limiter with nothing carried.
    pub(crate) fn new(limiter: AnyLimiter<C>) -> Self {
        Self {
            limiter: Arc::new(limiter),
            began: 0,
            excess: Arc::default(),
        }
    }

    /// `self`, just built with nothing carried and not yet published, as the next of
    /// its lineage at `now`: decided by it alone from the reload ([`alone_from`]), and
    /// holding the admissions its lineage made before it (`carried`, dated: its
    /// limiter holds the newest it has permits for at their dates, the rest are its
    /// excess, each until its date leaves the window).
    pub(crate) fn succeeding(self, now: u64, carried: &Carry) -> Self {
        let rest = self.limiter.absorb_carried(carried);
        self.lock().carry = rest;
        Self {
            began: alone_from(now),
            ..self
        }
    }

    /// When its lineage began to be decided by it alone (see the field).
    pub(crate) fn began(&self) -> u64 {
        self.began
    }

    /// Closes the limit for good: its limiter refuses every later decision (also one
    /// that reaches it through a thread's cached old rules) and what it counted in its
    /// window at that instant goes into its excess, so [`used`](Self::used) goes on
    /// saying what it used. [`AnyLimiter::close`]: exact (the sliding log's count may be
    /// above by a slot whose newest stamp this thread does not see yet). Closing a
    /// closed limit does nothing.
    pub(crate) fn close(&self) {
        let mut excess = self.lock();
        if excess.closed {
            return;
        }
        let frozen = self.limiter.close_carried();
        excess.carry.retain_from(self.counted_from());
        excess.carry.extend(&frozen);
        excess.closed = true;
        excess.closed_claimed = frozen.claimed;
    }

    /// Whether a reload closed it.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Whether the two are the same limit (clones of one).
    pub(crate) fn same(&self, other: &LocalRule<C>) -> bool {
        Arc::ptr_eq(&self.limiter, &other.limiter)
    }

    /// A permit, if its limiter has one (a closed limiter has none). A refusal writes
    /// nothing.
    #[inline]
    pub(crate) fn try_acquire(&self) -> bool {
        self.limiter.try_acquire()
    }

    /// [`try_acquire`](Self::try_acquire) with the admission's clock reading.
    #[inline]
    pub(crate) fn acquire_stamped(&self) -> Option<u64> {
        self.limiter.acquire_stamped()
    }

    /// What it has used in its current window, and when that window ends.
    pub(crate) fn snapshot(&self) -> Snapshot {
        self.snapshot_carried().0
    }

    /// [`snapshot`](Self::snapshot), and what it counts in its window dated (its
    /// limiter's, [`AnyLimiter::carried`], and its excess), read once: what a
    /// replacement carries, the snapshot's count being its total.
    pub(crate) fn snapshot_carried(&self) -> (Snapshot, Carry) {
        let now = self.limiter.clock().now_nanos();
        let from = self.counted_from();
        let excess = self.lock().clone();
        let mut carried = if excess.closed {
            Carry::default()
        } else {
            self.limiter.carried()
        };
        let claimed = carried.claimed;
        let mut kept = excess.carry;
        kept.retain_from(from);
        carried.extend(&kept);
        let snapshot = Snapshot {
            used: carried.total(),
            until: self.window_end(now),
            claimed,
        };
        (snapshot, carried)
    }

    /// What it admitted after `snapshot` that its current window still counts: the
    /// difference while the snapshot's window lasts, everything it counts once a new
    /// window began (for the fixed window, exactly what was admitted after the
    /// snapshot; the sliding kinds still count some from before it, which carries more
    /// than needed). The sliding kinds also let some of what they counted leave their
    /// window as time passes (the log an entry, the sliding counter a fraction of the
    /// previous window, the bucketed window a sub-window): what leaves between the
    /// snapshot and the close (the time of the compilation) makes the difference that
    /// much short. A sliding log closed since counts it exactly instead: the admissions it numbered
    /// between the snapshot and the close (each is in the snapshot or after it).
    pub(crate) fn used_since(&self, snapshot: Snapshot) -> u64 {
        let closed_claimed = self.lock().closed_claimed;
        if let (Some(from), Some(to)) = (snapshot.claimed, closed_claimed) {
            return to.saturating_sub(from);
        }
        let now = self.limiter.clock().now_nanos();
        let used = self.used();
        if now < snapshot.until {
            used.saturating_sub(snapshot.used)
        } else {
            used
        }
    }

    /// What this limit has used in its current window: its limiter's count (frozen
    /// into the excess once closed) plus the excess carried into that window.
    pub(crate) fn used(&self) -> u64 {
        let from = self.counted_from();
        let excess = self.lock();
        let counted = if excess.closed {
            0
        } else {
            self.limiter.count_in_window().unwrap_or(0)
        };
        counted + excess.carry.count_from(from)
    }

    /// The permits left in the current window (0 when the excess covers them).
    pub(crate) fn room(&self) -> u64 {
        u64::from(self.limiter.limit().permits()).saturating_sub(self.used())
    }

    /// Takes `count` admissions made elsewhere into this limit's current window: a
    /// permit each while the limiter has some, the rest as excess.
    pub(crate) fn absorb(&self, count: u64) {
        let taken = self.limiter.absorb(count);
        self.add_excess(count - taken);
    }

    /// Removes and returns the excess carried into the current window.
    pub(crate) fn take_excess(&self) -> u64 {
        let from = self.counted_from();
        let mut excess = self.lock();
        let count = excess.carry.count_from(from);
        excess.carry = Carry::default();
        count
    }

    pub(crate) fn add_excess(&self, count: u64) {
        if count == 0 {
            return;
        }
        let now = self.limiter.clock().now_nanos();
        let from = self.counted_from();
        let mut excess = self.lock();
        excess.carry.retain_from(from);
        excess.carry.push(now, count);
    }

    /// Where what its limiter counts now begins: an excess dated before it has left.
    fn counted_from(&self) -> u64 {
        self.limiter.counted_from(self.limiter.clock().now_nanos())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Excess> {
        self.excess.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When what the limiter counts at `now` has left its window (see
    /// [`AnyLimiter::counted_until`]).
    fn window_end(&self, now: u64) -> u64 {
        self.limiter.counted_until(now)
    }
}
