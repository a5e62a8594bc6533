//! The roll: at a window's first call, one thread turns the last window's demand into
//! this window's allocation and counts it in the wrapped limiter.
//!
//! 1. Sum each key's demand cells; what grew since the last roll is what the key was
//!    offered in the window before (nothing, when windows passed without a call).
//! 2. Update each key's estimate (its count in the window before; after a learning
//!    window, at its pace for the whole window) and its idle windows; a key idle for [`AGE_WINDOWS`] gives
//!    its entry back (and the index is rebuilt).
//! 3. Allocate `N`: floors, then max-min shares of the rest (`allocation.rs`).
//! 4. Count the reserved permits in the wrapped limiter (`absorb`). When it takes fewer
//!    (a sliding limiter still holding the window before), allocate again within what
//!    it took, so reserved permits never pass what it counted.
//! 5. Write every entry's reserved permits and probability for the window.
//!
//! A window that starts with no key offered in the window before (the first, or one
//! after idle windows) is a *learning* window: first come, first served, until a call a
//! tenth of a window after its first rolls it again (`learn`), with each key's demand
//! extrapolated from what it was offered so far, over what the limiter has left.
//!
//! No allocation: the bookkeeping's vectors are sized once.

use super::book::AGE_WINDOWS;
use super::limiter::FairLimiter;
use crate::clock::Clock;
use crate::limiter::packed::pack;
use crate::limiter::RateLimiter;
use crate::sync::Ordering;

impl<C: Clock> FairLimiter<C> {
    /// Rolls from window `from` to `to` (`to > from`); returns whether `to` starts with
    /// nothing to go by (no key offered in the window before): a *learning* window,
    /// which [`learn`](Self::learn) rolls again a tenth into it. Called by the one
    /// thread that set the state word's rolling bit.
    pub(super) fn roll_to(&self, from: u64, to: u64, now: u64) -> bool {
        let mut guard = self.lock_roll();
        let roll = &mut *guard;
        // A learning window counted from its first call on: its counts stand for the
        // part of the window after it.
        let counted_for = match roll.learning_since.take() {
            Some((window, since)) if window == from => self.window.saturating_sub(since).max(1),
            _ => self.window,
        };
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
                let whole = u128::from(offered) * u128::from(self.window);
                let rate =
                    u64::try_from(whole.div_ceil(u128::from(counted_for))).unwrap_or(u64::MAX);
                roll.estimate[entry] = rate;
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
        let learning = roll.offered.iter().all(|&n| n == 0);
        if learning {
            let since = now.saturating_sub(to.saturating_mul(self.window));
            roll.learning_since = Some((to, since.min(self.window - 1)));
            // Relaxed: published by the Release store of the state word.
            self.learn_at
                .store(now.saturating_add(self.window / 10), Ordering::Relaxed);
        }
        self.reserve(roll, to, |estimate| estimate);
        if aged {
            self.keys.rebuild();
        }
        learning
    }

    /// Rolls learning window `window` again at `now` (a tenth of a window after its
    /// first call, or later): each
    /// key's demand is what it was offered so far, at that pace for the whole window;
    /// what the limiter has left is allocated over it, each admission's probability
    /// that of the rest of the window.
    pub(super) fn learn(&self, window: u64, now: u64) {
        let mut guard = self.lock_roll();
        let roll = &mut *guard;
        roll.sums.iter_mut().for_each(|s| *s = 0);
        self.demand.sum_into(&mut roll.sums);
        let start = window.saturating_mul(self.window);
        let since = roll.learning_since.map_or(0, |(_, since)| since);
        // Counted from the window's first call on.
        let elapsed = now.saturating_sub(start + since).max(1);
        for entry in 0..self.entries.len() {
            // Not stored: the next roll counts the whole window.
            let counted = u64::from(roll.sums[entry].wrapping_sub(roll.last[entry]));
            roll.offered[entry] = counted;
            let whole = u128::from(counted) * u128::from(self.window);
            roll.spare[entry] =
                u64::try_from(whole.div_ceil(u128::from(elapsed))).unwrap_or(u64::MAX);
        }
        let left = (start + self.window).saturating_sub(now) as f64 / self.window as f64;
        // The extrapolations stand in for the estimates for this allocation only.
        std::mem::swap(&mut roll.estimate, &mut roll.spare);
        self.reserve(roll, window, |estimate| {
            (estimate as f64 * left).ceil() as u64
        });
        std::mem::swap(&mut roll.estimate, &mut roll.spare);
    }

    /// Allocates the limit over the keys `roll` says were offered, counts the
    /// reservations in the wrapped limiter (allocating again within what it took when
    /// it took fewer), and writes every entry's words for `window`; a key's probability
    /// is its reserved permits over `demand(estimate)`, at most 1.
    fn reserve(&self, roll: &mut super::book::Roll, window: u64, demand: impl Fn(u64) -> u64) {
        let permits = u64::from(self.inner.limit().permits());
        let mut reserved = roll.allocate(permits, window);
        roll.capacity = permits;
        let counted = self.inner.absorb(reserved);
        if counted < reserved {
            roll.capacity = counted;
            reserved = roll.allocate(counted, window);
            debug_assert!(reserved <= counted);
        }
        for (entry, words) in self.entries.iter().enumerate() {
            let share = roll.shares[entry];
            let demand = demand(roll.estimate[entry]);
            let probability = if share > 0 && share < demand {
                share as f64 / demand as f64
            } else {
                1.0
            };
            // Relaxed: published by the Release store of the state word (see
            // `decide.rs`, "Memory ordering").
            words
                .probability
                .store(probability.to_bits(), Ordering::Relaxed);
            words.reserved.store(pack(window, share), Ordering::Relaxed);
        }
    }
}
