//! Each key's offered count, counted per thread and summed when the window rolls.
//!
//! A row of cells per thread slot ([`crate::limiter::slot`]) and one shared overflow
//! row, a cell per key in each. A thread counts into its own row with a relaxed load and
//! store: no read-modify-write and no cache line another thread writes, so a refusal
//! writes nothing another thread writes. The cells only grow (wrapping); the roll sums a
//! key's cells and takes the difference from its last sum, so nothing is ever reset
//! under a counting thread. A count made while the roll sums lands in this window's sum
//! or the next one's.
//!
//! Memory: `(SLOTS + 1) × 4` bytes per key (260 bytes), allocated once.

use crossbeam_utils::CachePadded;

// `std`'s atomics even under loom: the counts order nothing (each is read on its own),
// and the roll's thousands of loads would only exhaust a model's branches.
use std::sync::atomic::{AtomicU32, Ordering};

use crate::limiter::slot::{self, SLOTS};

/// Cells per chunk: a chunk is 128 bytes, so rows never share a cache line pair.
const CHUNK: usize = 32;

type Chunk = [AtomicU32; CHUNK];

/// The offered counts of `keys` keys.
pub(super) struct Demand {
    /// `SLOTS + 1` rows of `chunks` chunks each.
    cells: Box<[CachePadded<Chunk>]>,
    chunks: usize,
}

impl Demand {
    pub(super) fn new(keys: usize) -> Self {
        let chunks = keys.div_ceil(CHUNK);
        Self {
            cells: (0..(SLOTS + 1) * chunks)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU32::new(0))))
                .collect(),
            chunks,
        }
    }

    #[inline]
    fn cell(&self, row: usize, key: usize) -> Option<&AtomicU32> {
        self.cells
            .get(row * self.chunks + key / CHUNK)
            .and_then(|chunk| chunk.get(key % CHUNK))
    }

    /// Counts one offer of `key`. Allocates nothing.
    #[inline]
    pub(super) fn count(&self, key: usize) {
        let row = slot::current();
        if row < SLOTS {
            if let Some(cell) = self.cell(row, key) {
                // Relaxed load and store: this thread owns the row (its slot), so it is
                // the cell's only writer; the roll wants each count, not an order with
                // any other memory.
                cell.store(
                    cell.load(Ordering::Relaxed).wrapping_add(1),
                    Ordering::Relaxed,
                );
            }
        } else if let Some(cell) = self.cell(SLOTS, key) {
            // Relaxed: a shared counter; the add is atomic and publishes nothing.
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds each key's count (wrapping, since the start) into `sums`, which the caller
    /// zeroes: row by row, so the read follows memory.
    pub(super) fn sum_into(&self, sums: &mut [u32]) {
        for row in 0..=SLOTS {
            for (key, sum) in sums.iter_mut().enumerate() {
                if let Some(cell) = self.cell(row, key) {
                    // Relaxed: each count on its own (see the module docs).
                    *sum = sum.wrapping_add(cell.load(Ordering::Relaxed));
                }
            }
        }
    }

    /// The count of `key` since the start (wrapping).
    pub(super) fn total(&self, key: usize) -> u32 {
        (0..=SLOTS)
            .filter_map(|row| self.cell(row, key))
            // Relaxed: as `sum_into`.
            .fold(0u32, |sum, cell| {
                sum.wrapping_add(cell.load(Ordering::Relaxed))
            })
    }

    /// What the cells hold on the heap.
    pub(super) fn heap_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<CachePadded<Chunk>>()
    }

    /// What the counts of `keys` keys hold on the heap ([`new`](Self::new)'s sizes).
    pub(super) fn heap_bytes_for(keys: usize) -> usize {
        (SLOTS + 1) * keys.div_ceil(CHUNK) * std::mem::size_of::<CachePadded<Chunk>>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up_per_key() {
        let demand = Demand::new(70);
        std::thread::scope(|s| {
            for t in 0..4 {
                let demand = &demand;
                s.spawn(move || {
                    for i in 0..1000 {
                        demand.count((t * 17 + i) % 70);
                        demand.count(69);
                    }
                });
            }
        });
        let mut sums = vec![0u32; 70];
        demand.sum_into(&mut sums);
        assert_eq!(sums.iter().map(|&s| u64::from(s)).sum::<u64>(), 8000);
        assert!(sums[69] >= 4000);
        assert_eq!(demand.total(69), sums[69]);
    }
}
