//! What a reload carries out of a sliding log and into one: its admissions dated by
//! their slots' stamps ([`Carry`]), so a replacement log holds them as the replaced one
//! did, each until it leaves the window.

use super::{SlidingLog, CLOSED};
use crate::clock::Clock;
use crate::limiter::carry::{in_order, Carry};
use crate::sync::Ordering;

impl<C: Clock> SlidingLog<C> {
    /// The admissions stamped after `now − W`, each dated by its stamp (one still being
    /// written, or whose slot a newer admission took meanwhile, at `now`): what a
    /// reload carries. Nothing for a closed log.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn carried_at(&self, now: u64) -> Carry {
        // Relaxed: a snapshot for a reload; the slots' contents travel by `seq`.
        let claimed = self.next.load(Ordering::Relaxed);
        if claimed == CLOSED {
            return Carry::default();
        }
        self.dated(claimed, now)
    }

    /// [`close_at`](Self::close_at), with what it counted dated as
    /// [`carried_at`](Self::carried_at) dates it.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_carried_at(&self, now: u64) -> Carry {
        // Relaxed: as in `close_at`.
        let claimed = self.next.swap(CLOSED, Ordering::Relaxed);
        if claimed == CLOSED {
            return Carry::default();
        }
        self.dated(claimed, now)
    }

    /// Admissions `claimed − N ..< claimed` still in the window of `now`, dated, and
    /// `claimed`.
    fn dated(&self, claimed: u64, now: u64) -> Carry {
        let stamps = (claimed.saturating_sub(self.permits)..claimed).filter_map(|k| {
            let slot = self.slot(k);
            // Acquire: pairs with the writer's Release store of `seq`, so the stamp read
            // after it is admission k's.
            if slot.seq.load(Ordering::Acquire) != k + 1 {
                return Some(now);
            }
            let stamp = slot.stamp.load(Ordering::Relaxed);
            (stamp.saturating_add(self.window) > now).then_some(stamp)
        });
        let mut carry = in_order(stamps);
        carry.claimed = Some(claimed);
        carry
    }

    /// Records the admissions of `carry` still in the window of `now` at their dates,
    /// the newest `N` (the older ones leave the window first: while one of them is in
    /// it, so are the `N` recorded, and the log refuses); returns those it did not
    /// record, for the caller to count beside it. On a log that has admitted before
    /// (not a fresh replacement), as [`absorb_at`](Self::absorb_at): dated `now`.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_carried_at(&self, now: u64, carry: &Carry) -> Carry {
        let mut rest = carry.clone();
        rest.retain_from((now + 1).saturating_sub(self.window));
        // Relaxed: a replacement is not published yet; a log that is gets `absorb_at`.
        if self.next.load(Ordering::Relaxed) != 0 {
            let taken = self.absorb_at(now, rest.total());
            rest.split_newest(taken);
            return rest;
        }
        let newest = rest.split_newest(self.permits);
        // Fewer than N admissions so far: each claim reads no slot, and its stamp is
        // the carried date (at most `now`).
        let written = newest
            .dates()
            .take_while(|&date| self.admit_at(date.min(now), false, true).is_some())
            .count() as u64;
        let unwritten = newest.total() - written;
        let taken = self.absorb_at(now, unwritten);
        rest.push(now, unwritten - taken);
        rest
    }
}
