//! What a reload carries out of any limiter and into its replacement, dated
//! ([`Carry`]): the sliding log by its stamps, the bucketed window by its sub-windows,
//! the aligned kinds (which count per aligned window) at the reading of the clock.

use super::{AnyLimiter, Inner};
use crate::clock::Clock;
use crate::limiter::carry::Carry;

impl<C: Clock> AnyLimiter<C> {
    /// What it counts in its window now, dated (see [`Carry`]): what a reload carries
    /// into its replacement. Nothing once closed.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn carried(&self) -> Carry {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Log(l) => l.carried_at(now),
            Inner::Bucketed(l) => l.carried_at(now),
            Inner::Fixed(_) | Inner::Sliding(_) => Carry::at(now, self.count_at(now)),
        }
    }

    /// [`close`](Self::close), with what it counted dated as [`carried`](Self::carried)
    /// dates it.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_carried(&self) -> Carry {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Log(l) => l.close_carried_at(now),
            Inner::Bucketed(l) => l.close_carried_at(now),
            Inner::Fixed(_) | Inner::Sliding(_) => Carry::at(now, self.close()),
        }
    }

    /// Counts, now, the admissions of `carry` that its window still holds at their
    /// dates (the sliding log in slots stamped with them, the bucketed window in their
    /// sub-windows; the aligned kinds in the current window), as many as fit under
    /// the permits whatever the pacing schedule has released, the newest first; returns
    /// those that did not fit. Dated only in a replacement that has decided nothing yet;
    /// in one that has, as [`absorb`](Self::absorb) (dated now).
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_carried(&self, carry: &Carry) -> Carry {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Log(l) => l.absorb_carried_at(now, carry),
            Inner::Bucketed(l) => l.absorb_carried_at(now, carry),
            Inner::Fixed(_) | Inner::Sliding(_) => {
                let mut rest = carry.clone();
                rest.retain_from(self.counted_from(now));
                let taken = self.absorb(rest.total());
                rest.split_newest(taken);
                rest
            }
        }
    }
}
