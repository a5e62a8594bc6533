//! The roll: at a window's first call, one thread turns the last window's demand into
//! this window's allocation and counts it in the wrapped limiter.
//!
//! 1. Sum each key's demand cells; what grew since the last roll is what the key was
//!    offered in the window before (nothing, when windows passed without a call).
//! 2. Update each key's estimate (half the last count, half the estimate before; the
//!    first count as it is) and its idle windows; a key idle for [`AGE_WINDOWS`] gives
//!    its entry back (and the index is rebuilt).
//! 3. Allocate `N`: floors, then max-min shares of the rest (`allocation.rs`).
//! 4. Count the reserved permits in the wrapped limiter (`absorb`). When it takes fewer
//!    (a sliding limiter still holding the window before), allocate again within what
//!    it took, so reserved permits never pass what it counted.
//! 5. Write every entry's reserved permits and probability for the window.
//!
//! No allocation: the bookkeeping's vectors are sized once.

use super::book::AGE_WINDOWS;
use super::limiter::FairLimiter;
use crate::clock::Clock;
use crate::limiter::packed::pack;
use crate::limiter::RateLimiter;
use crate::sync::Ordering;

impl<C: Clock> FairLimiter<C> {
    /// Rolls from window `from` to `to` (`to > from`). Called by the one thread that set
    /// the state word's rolling bit.
    pub(super) fn roll_to(&self, from: u64, to: u64) {
        let mut guard = self.lock_roll();
        let roll = &mut *guard;
        let overflow = self.entries.len() - 1;
        roll.sums.iter_mut().for_each(|s| *s = 0);
        self.demand.sum_into(&mut roll.sums);
        let mut aged = false;
        for entry in 0..self.entries.len() {
            let hash = self.keys.hash(entry);
            if hash != roll.seen[entry] {
                roll.seen[entry] = hash;
                roll.estimate[entry] = 0;
                roll.idle[entry] = 0;
            }
            let counted = u64::from(roll.sums[entry].wrapping_sub(roll.last[entry]));
            roll.last[entry] = roll.sums[entry];
            if entry == overflow {
                roll.overflow_offered += counted;
            }
            // What it counted was offered in `from`: the window before `to` only when
            // `to` follows it.
            let offered = if to == from + 1 { counted } else { 0 };
            roll.offered[entry] = offered;
            if offered > 0 {
                roll.estimate[entry] = match roll.estimate[entry] {
                    0 => offered,
                    before => (before + offered).div_ceil(2),
                };
                roll.idle[entry] = 0;
            } else {
                roll.estimate[entry] /= 2;
                roll.idle[entry] = roll.idle[entry].saturating_add(to - from);
                if roll.idle[entry] >= AGE_WINDOWS && entry != overflow && hash != 0 {
                    self.keys.free(entry);
                    roll.seen[entry] = 0;
                    roll.estimate[entry] = 0;
                    aged = true;
                }
            }
        }
        let permits = u64::from(self.inner.limit().permits());
        let mut reserved = roll.allocate(permits, to);
        roll.capacity = permits;
        let counted = self.inner.absorb(reserved);
        if counted < reserved {
            roll.capacity = counted;
            reserved = roll.allocate(counted, to);
            debug_assert!(reserved <= counted);
        }
        for (entry, words) in self.entries.iter().enumerate() {
            let share = roll.shares[entry];
            let estimate = roll.estimate[entry];
            let probability = if share > 0 && share < estimate {
                share as f64 / estimate as f64
            } else {
                1.0
            };
            // Relaxed: published by the Release store of the state word (see
            // `decide.rs`, "Memory ordering").
            words
                .probability
                .store(probability.to_bits(), Ordering::Relaxed);
            words.reserved.store(pack(to, share), Ordering::Relaxed);
        }
        if aged {
            self.keys.rebuild();
        }
    }
}
