//! A fair limiter's decision: the window (rolling it on the window's first call), the
//! key's entry, its demand, its reserved permits, then the wrapped limiter.
//!
//! # Memory ordering
//!
//! The roll writes every entry's `reserved` and `probability` words, then publishes the
//! window with a Release store of the state word; a decision loads the state word with
//! Acquire, so it reads the words the roll wrote for that window. A decision that still
//! holds an older window finds newer words (their window differs) and takes no reserved
//! permit. A reserved permit is taken by a compare-exchange of the key's `used` word
//! from the exact word it was computed from (`Relaxed`: the word publishes nothing
//! else), so a key never takes more than its reserved permits in a window: they were
//! counted in the wrapped limiter at the roll, which keeps the total within `N`. A
//! refusal loads and compares only (its demand count is the thread's own cell).

use super::keys::hash_of;
use super::limiter::{FairAdmission, FairLimiter, LEARNING, ROLLING, SHIFT};
use crate::clock::Clock;
use crate::limiter::packed::{self, pack, unpack, window_index};
use crate::sync::Ordering;

/// A decision, with why a call was refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Admitted.
    Kept(FairAdmission),
    /// Neither a reserved permit nor the wrapped limiter had one.
    Refused,
    /// Refused because another thread was rolling the window; `counted`: in the
    /// window's demand all the same (the roll was a learning window's second).
    Rolling { counted: bool },
}

impl<C: Clock> FairLimiter<C> {
    /// Admits one call of `key` now, or refuses it.
    #[inline]
    pub fn acquire(&self, key: u64) -> Option<FairAdmission> {
        match self.decide(key) {
            Verdict::Kept(admission) => Some(admission),
            Verdict::Refused | Verdict::Rolling { .. } => None,
        }
    }

    /// The decision for a call of `key`, and why.
    #[inline]
    pub(crate) fn decide(&self, key: u64) -> Verdict {
        let now = self.inner.clock().now_nanos();
        let window = match self.window_for(now) {
            Ok(window) => window,
            Err(learning) => {
                // A learning pass counts the window's demand so far; the next roll
                // counts the whole window's, this call's with it.
                if learning {
                    self.demand.count(self.keys.entry_of(hash_of(key)));
                }
                return Verdict::Rolling { counted: learning };
            }
        };
        let entry_id = self.keys.entry_of(hash_of(key));
        self.demand.count(entry_id);
        let Some(entry) = self.entries.get(entry_id) else {
            return Verdict::Refused;
        };
        // Relaxed (here and below): see the module's "Memory ordering".
        let (reserved_for, reserved) = unpack(entry.reserved.load(Ordering::Relaxed));
        // Read on admission only.
        let probability = || {
            if reserved_for == window {
                f64::from_bits(entry.probability.load(Ordering::Relaxed))
            } else {
                1.0
            }
        };
        if reserved_for == window && reserved > 0 {
            let start = window.saturating_mul(self.window);
            let mut current = entry.used.load(Ordering::Relaxed);
            loop {
                let (used_for, used) = unpack(current);
                let used = match used_for.cmp(&window) {
                    std::cmp::Ordering::Less => 0,
                    std::cmp::Ordering::Equal => used,
                    // A roll passed this call by: no reserved permit of its window left.
                    std::cmp::Ordering::Greater => break,
                };
                if used >= reserved
                    || (used > 0 && used >= self.released(reserved, now.saturating_sub(start)))
                {
                    break;
                }
                match packed::replace(&entry.used, current, pack(window, used + 1)) {
                    Ok(()) => {
                        return Verdict::Kept(FairAdmission {
                            stamp: now.max(start),
                            probability: probability(),
                        })
                    }
                    Err(actual) => current = actual,
                }
            }
        }
        match self.inner.acquire_at(now) {
            Some(stamp) => Verdict::Kept(FairAdmission {
                stamp,
                probability: probability(),
            }),
            None => Verdict::Refused,
        }
    }

    /// How many of `reserved` permits the schedule has released at `offset` into the
    /// window: `⌈reserved·(i+1)/B⌉` in step `i` of `B`, as the limit's pacing releases
    /// the window's permits; all of them unpaced.
    #[inline]
    fn released(&self, reserved: u64, offset: u64) -> u64 {
        if self.steps == 1 {
            return reserved;
        }
        let step = (offset / self.step_len).min(self.steps - 1);
        (reserved * (step + 1)).div_ceil(self.steps)
    }

    /// The window a call at `now` decides in: the newest the allocations are for (a
    /// `now` older than it is counted there, as the limiters do), after rolling to the
    /// window of `now` if it is newer, or rolling a learning window again. While
    /// another thread rolls, `Err(whether it rolls a learning window again)`.
    #[inline]
    fn window_for(&self, now: u64) -> Result<u64, bool> {
        let window = window_index(now, self.window);
        // Acquire: pairs with the Release that publishes a roll (see the module docs).
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            if state & ROLLING != 0 {
                return Err(state & LEARNING != 0);
            }
            let current = state >> SHIFT;
            // Relaxed: written before the Release that published this state.
            let learn = window == current
                && state & LEARNING != 0
                && now >= self.learn_at.load(Ordering::Relaxed);
            if window < current || (window == current && !learn) {
                return Ok(current);
            }
            // The learning bit while rolling: this pass rolls a learning window again.
            let pass = if learn { LEARNING } else { 0 };
            // Acquire both ways: on success this thread reads the entry words the last
            // roll wrote; on failure the state found is read as the load above.
            match self.state.compare_exchange(
                state,
                (window << SHIFT) | pass | ROLLING,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let learning = !learn && self.roll_to(current, window, now);
                    if learn {
                        self.learn(window, now);
                    }
                    let learning = if learning { LEARNING } else { 0 };
                    // Release: publishes every entry word the roll wrote.
                    self.state
                        .store((window << SHIFT) | learning, Ordering::Release);
                    return Ok(window);
                }
                Err(actual) => state = actual,
            }
        }
    }
}
