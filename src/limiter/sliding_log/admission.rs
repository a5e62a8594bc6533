//! A sliding log's admissions in two steps and given back: what the rule layer's
//! service cap needs of a rule's log ([`AnyLimiter::take`](crate::limiter::AnyLimiter)
//! finds its room, the cap is asked, then the log claims it), and of a cap's log (an
//! admission given back when the rule's own permit is gone).

use super::SlidingLog;
use crate::clock::Clock;
use crate::limiter::Admission;
use crate::sync::Ordering;

impl<C: Clock> SlidingLog<C> {
    /// [`acquire_at`](Self::acquire_at), with the admission's number.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    #[inline]
    pub(crate) fn admission_at(&self, now: u64) -> Option<Admission> {
        self.admit_at(now, true, true)
    }

    /// Whether a call at `now` would be admitted, and as which admission, without
    /// making it: the decision of [`acquire_at`](Self::acquire_at) up to its claim,
    /// which writes nothing. [`claim`](Self::claim) then makes it, or not if another
    /// call took the room meanwhile. Where the rule layer asks its service cap between
    /// the two, so the log's permit is taken only for a span kept: given back instead,
    /// it would stay in the ring's order (see [`give_back`](Self::give_back)).
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    #[inline]
    pub(crate) fn peek_at(&self, now: u64) -> Option<Admission> {
        self.admit_at(now, true, false)
    }

    /// The admission [`peek_at`](Self::peek_at) found, made now: a decision at its
    /// time, which another call may have made impossible since (then `None`).
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    #[inline]
    pub(crate) fn claim(&self, peeked: Admission) -> Option<Admission> {
        self.admit_at(peeked.stamp, true, true)
    }

    /// Gives back the permit of `admission` (one of this log's, made): its slot's stamp
    /// goes back `W`, to `stamp − W` (0 before `W` on the clock), so the slot has left
    /// the window at `stamp` and admission `k + N` may be made from then on. The slot's
    /// stamps stay at least `W` apart (admission `k` was made at least `W` after `k − N`,
    /// so `stamp − W` is not before `k − N`'s), so no interval of `W` holds more than `N`
    /// kept admissions. A compare-exchange from `stamp`: once a newer admission took the
    /// slot (its stamp is at least `stamp + W`), nothing changes.
    ///
    /// Its price: the ring is taken in order, so the slot comes back only when its turn
    /// does; a kept admission made after it may hold the ring up meanwhile. (Moving
    /// `next` back instead would let a claim read before the move succeed on a slot
    /// rewritten since.)
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    pub(crate) fn give_back(&self, admission: Admission) {
        let earlier = admission.stamp.saturating_sub(self.window);
        // Relaxed: the stamp stays admission k's (its `seq` already published it); a
        // reader sees this value or the one before, and either is a stamp at or before
        // the admission's, which the guarantee allows.
        let _ = self.slot(admission.number).stamp.compare_exchange(
            admission.stamp,
            earlier,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}
