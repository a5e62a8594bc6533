//! A rule's local limit: its limiter, and the excess carried into its current window
//! across reloads (what its window has used beyond what its limiter holds). A changed
//! one is handed over to its replacement by [`handover`](super::handover), which states
//! how.

use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Clock;
use crate::limit::Limit;
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
}

/// Admissions counted against a limit in the window ending at `until` (clock
/// nanoseconds) that its limiter does not hold, and whether the limiter is closed (its
/// count frozen and moved here: it is no longer read).
#[derive(Clone, Copy, Default)]
struct Excess {
    until: u64,
    count: u64,
    closed: bool,
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
    /// holding `carried` admissions its lineage made before it.
    pub(crate) fn succeeding(self, now: u64, carried: u64) -> Self {
        Self {
            began: alone_from(now),
            ..self
        }
        .with_carried(carried)
    }

    /// When its lineage began to be decided by it alone (see the field).
    pub(crate) fn began(&self) -> u64 {
        self.began
    }

    /// This limit holding `carried` admissions made before it (a permit each while its
    /// limiter has some, the rest as excess).
    fn with_carried(self, carried: u64) -> Self {
        self.absorb(carried);
        self
    }

    /// Closes the limit for good: its limiter refuses every later decision (also one
    /// that reaches it through a thread's cached old rules) and what it counted in its
    /// window at that instant goes into its excess, so [`used`](Self::used) goes on
    /// saying what it used. [`AnyLimiter::close`]: exact (the sliding log's count may be
    /// above by a slot whose newest stamp this thread does not see yet). Closing a
    /// closed limit does nothing.
    pub(crate) fn close(&self) {
        let mut excess = self.excess.lock().unwrap_or_else(PoisonError::into_inner);
        if excess.closed {
            return;
        }
        let frozen = self.limiter.close();
        let now = self.limiter.clock().now_nanos();
        if now >= excess.until {
            *excess = Excess {
                until: self.window_end(now),
                ..Excess::default()
            };
        }
        excess.count = excess.count.saturating_add(frozen);
        excess.closed = true;
    }

    /// Whether a reload closed it.
    pub(crate) fn is_closed(&self) -> bool {
        self.excess
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed
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
        let now = self.limiter.clock().now_nanos();
        Snapshot {
            used: self.used(),
            until: self.window_end(now),
        }
    }

    /// What it admitted after `snapshot` that its current window still counts: the
    /// difference while the snapshot's window lasts, everything it counts once a new
    /// window began (for the fixed window, exactly what was admitted after the
    /// snapshot; the sliding kinds still count some from before it, which carries more
    /// than needed). The sliding kinds also let some of what they counted leave their
    /// window as time passes (the log an entry, the sliding counter a fraction of the
    /// previous window, the bucketed window a sub-window): what leaves between the
    /// snapshot and the close (the time of the compilation) makes the difference that
    /// much short.
    pub(crate) fn used_since(&self, snapshot: Snapshot) -> u64 {
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
        let now = self.limiter.clock().now_nanos();
        let excess = *self.excess.lock().unwrap_or_else(PoisonError::into_inner);
        let counted = if excess.closed {
            0
        } else {
            self.limiter.count_in_window().unwrap_or(0)
        };
        counted + if now < excess.until { excess.count } else { 0 }
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
        let now = self.limiter.clock().now_nanos();
        let mut excess = self.excess.lock().unwrap_or_else(PoisonError::into_inner);
        let count = if now < excess.until { excess.count } else { 0 };
        excess.count = 0;
        count
    }

    pub(crate) fn add_excess(&self, count: u64) {
        if count == 0 {
            return;
        }
        let now = self.limiter.clock().now_nanos();
        let mut excess = self.excess.lock().unwrap_or_else(PoisonError::into_inner);
        if now >= excess.until {
            *excess = Excess {
                until: self.window_end(now),
                ..*excess
            };
            excess.count = 0;
        }
        excess.count = excess.count.saturating_add(count);
    }

    /// When what the limiter counts at `now` has left its window (see
    /// [`AnyLimiter::counted_until`]).
    fn window_end(&self, now: u64) -> u64 {
        self.limiter.counted_until(now)
    }
}
