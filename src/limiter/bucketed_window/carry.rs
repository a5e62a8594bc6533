//! What a reload carries out of a bucketed window and into one: its admissions dated
//! by the last instant of the sub-window each was counted in ([`Carry`]), so a
//! replacement counts them in the sub-windows they were made in, until they leave.

use super::BucketedWindow;
use crate::clock::Clock;
use crate::limiter::carry::Carry;
use crate::limiter::packed::{pack, unpack, window_index};
use crate::sync::Ordering;

impl<C: Clock> BucketedWindow<C> {
    /// The admissions counted in the `B` sub-windows ending with the one of `now` (as
    /// [`count_at`](Self::count_at)), each sub-window's dated at its last instant (the
    /// newest one's at `now` when `now` is in it): what a reload carries. Nothing for a
    /// closed limiter.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn carried_at(&self, now: u64) -> Carry {
        // Acquire: as in `count_at`.
        let head = self.head.load(Ordering::Acquire);
        if head == super::super::closed_word(self.permits) {
            return Carry::default();
        }
        self.dated(head, now)
    }

    /// [`close_at`](Self::close_at), with what it counted dated as
    /// [`carried_at`](Self::carried_at) dates it.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_carried_at(&self, now: u64) -> Carry {
        let closed = super::super::closed_word(self.permits);
        // Acquire: as in `close_at`.
        let frozen = self.head.swap(closed, Ordering::Acquire);
        if frozen == closed {
            return Carry::default();
        }
        self.dated(frozen, now)
    }

    /// What head word `head` and the ring count at `now`, dated.
    fn dated(&self, head: u64, now: u64) -> Carry {
        let s = self.sub_window;
        let (j, c) = unpack(head);
        let newest = window_index(now, s).max(j);
        let mut carry = Carry::default();
        if j + self.buckets > newest {
            let start = j.saturating_mul(s);
            carry.push(start.saturating_add(s - 1).min(now.max(start)), c);
        }
        let oldest = (newest + 1).saturating_sub(self.buckets);
        for slot in self.ring.iter() {
            // Relaxed: ordered by the Acquire load (or swap) of the head.
            let (x, count) = unpack(slot.load(Ordering::Relaxed));
            if x >= oldest && x < newest && x != j {
                carry.push(x.saturating_mul(s).saturating_add(s - 1), count);
            }
        }
        carry
    }

    /// Counts the admissions of `carry` still in the `B` sub-windows ending with the
    /// one of `now` in the sub-windows of their dates, the newest `N` (the older ones
    /// leave first: while one of them counts, the `N` counted do too, and it refuses);
    /// returns those it did not count, for the caller to count beside it. On a limiter
    /// that has admitted before (not a fresh replacement), as
    /// [`absorb_at`](Self::absorb_at): in the sub-window of `now`.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_carried_at(&self, now: u64, carry: &Carry) -> Carry {
        let s = self.sub_window;
        let mut rest = carry.clone();
        let now_index = window_index(now, s);
        rest.retain_from(
            (now_index + 1)
                .saturating_sub(self.buckets)
                .saturating_mul(s),
        );
        // Relaxed: a replacement is not published yet; one that is gets `absorb_at`.
        if self.head.load(Ordering::Relaxed) != pack(0, 0) {
            let taken = self.absorb_at(now, rest.total());
            rest.split_newest(taken);
            return rest;
        }
        let newest = rest.split_newest(self.permits);
        // Per sub-window (at most B of them, each in its own ring slot), the newest as
        // the head: the state the limiter would hold had it made them.
        let mut counts: Vec<(u64, u64)> = Vec::new();
        for &(date, count) in newest.groups() {
            let x = window_index(date.min(now), s);
            match counts.last_mut() {
                Some((last, c)) if *last == x => *c += count,
                _ => counts.push((x, count)),
            }
        }
        if let Some((&(j, c), older)) = counts.split_last() {
            for &(x, count) in older {
                // Relaxed: published with the head below.
                self.ring[(x % self.buckets) as usize].store(pack(x, count), Ordering::Relaxed);
            }
            // Release: the ring entries above are read after an Acquire load of it.
            self.head.store(pack(j, c), Ordering::Release);
        }
        rest
    }
}
