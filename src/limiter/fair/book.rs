//! The roll's bookkeeping: per key, what it held, its demand total, estimate and idle
//! windows as of the last roll, and the scratch the allocation fills; one set per
//! limiter, behind its lock, sized once.

use super::allocation::{mark_floors, water_fill};
use super::demand::Demand;

/// Windows without an offer after which a key ages out.
pub(super) const AGE_WINDOWS: u64 = 8;

/// The roll's bookkeeping, one value per entry (the overflow key's last).
pub(crate) struct Roll {
    /// The hash each entry held at the last roll (a change: a new key).
    pub(super) seen: Vec<u64>,
    /// Each entry's demand total at the last roll.
    pub(super) last: Vec<u32>,
    pub(super) estimate: Vec<u64>,
    pub(super) idle: Vec<u64>,
    /// Scratch: the totals now, the counts of the window before, floors, demands, shares.
    pub(super) sums: Vec<u32>,
    pub(super) offered: Vec<u64>,
    pub(super) floors: Vec<bool>,
    pub(super) needs: Vec<u64>,
    pub(super) shares: Vec<u64>,
    /// Scratch: a learning pass's extrapolated demands.
    pub(super) spare: Vec<u64>,
    /// What the overflow key was offered up to the last roll.
    pub(super) overflow_offered: u64,
    /// The permits the last roll could reserve (what the wrapped limiter had free).
    pub(super) capacity: u64,
    /// The learning window and how far into it its first call came (its counts cover
    /// the rest).
    pub(super) learning_since: Option<(u64, u64)>,
}

impl Roll {
    pub(super) fn new(entries: usize) -> Self {
        Self {
            seen: vec![0; entries],
            last: vec![0; entries],
            estimate: vec![0; entries],
            idle: vec![0; entries],
            sums: vec![0; entries],
            offered: vec![0; entries],
            floors: vec![false; entries],
            needs: vec![0; entries],
            shares: vec![0; entries],
            spare: vec![0; entries],
            overflow_offered: 0,
            capacity: 0,
            learning_since: None,
        }
    }

    /// What the bookkeeping of `entries` entries holds on the heap.
    pub(super) fn heap_bytes(entries: usize) -> usize {
        entries * (8 * 7 + 4 * 2 + 1)
    }

    /// What the overflow key was offered so far.
    pub(super) fn overflow_offered(&self, demand: &Demand) -> u64 {
        let overflow = self.last.len() - 1;
        let since = demand.total(overflow).wrapping_sub(self.last[overflow]);
        self.overflow_offered + u64::from(since)
    }

    /// The permits the last roll could reserve.
    #[cfg(all(test, not(loom)))]
    pub(super) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Allocates `capacity` over the keys offered in the window before: fills `shares`
    /// with each key's reserved permits (floor and share), returns their sum.
    pub(super) fn allocate(&mut self, capacity: u64, window: u64) -> u64 {
        mark_floors(&self.offered, capacity, window, &mut self.floors);
        for (i, need) in self.needs.iter_mut().enumerate() {
            *need = if self.offered[i] > 0 {
                self.estimate[i]
            } else {
                0
            };
        }
        let start = (window % self.needs.len() as u64) as usize;
        water_fill(&self.needs, &self.floors, capacity, start, &mut self.shares)
    }
}
