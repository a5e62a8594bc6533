//! The decision counters: one row of cells per thread slot, each row on its own cache
//! lines, summed only when read.
//!
//! A thread counts into the row of the slot it owns ([`super::slot`]) with a relaxed load
//! and store: no read-modify-write, and no line another thread writes, so counting adds
//! about a nanosecond to a decision and nothing to the contention between threads. A
//! thread without a slot (more than [`SLOTS`] live counting threads) counts into a shared
//! overflow row with `fetch_add`. Nothing here allocates after construction; a set of
//! counters (one per sampler, one per rule) takes 65 rows of 128 bytes, about 8 KiB.
//!
//! Reading sums each cell over the rows: every sum is exact for the decisions that
//! finished before the read, but the cells are not read at one instant.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use super::snapshot::{DecisionStats, DropReason, ParentOrigin, OUTCOMES};
use crate::limiter::slot::{self, SLOTS};

/// Cells per row: the 13 possible (outcome, origin) pairs and a spare one, 128 bytes.
const CELLS: usize = 16;
/// The cell of the pairs that cannot happen (a rate limit refusing a local child).
const NEVER: u8 = (CELLS - 1) as u8;

/// Cell index of each (outcome, origin) pair: outcome 0 is "kept", then the
/// [`DropReason`]s in declaration order; origins root, local, remote.
const INDEX: [[u8; 3]; OUTCOMES] = [
    [0, 1, 2],       // kept
    [3, NEVER, 4],   // rate limit
    [5, NEVER, 6],   // service cap
    [7, NEVER, 8],   // probability
    [9, NEVER, 10],  // no rule
    [NEVER, 11, 12], // parent
];

type Row = [AtomicU64; CELLS];

/// One decision's outcome, as a cell index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event(u8);

impl Event {
    /// A span kept, with a parent of `origin`.
    #[inline]
    pub(crate) const fn kept(origin: ParentOrigin) -> Self {
        Event(INDEX[0][origin as usize])
    }

    /// A span dropped for `reason`, with a parent of `origin`.
    #[inline]
    pub(crate) const fn dropped(reason: DropReason, origin: ParentOrigin) -> Self {
        Event(INDEX[reason as usize + 1][origin as usize])
    }
}

/// Decision counters for one sampler, or one rule.
pub(crate) struct Counters {
    rows: Box<[CachePadded<Row>]>,
    overflow: CachePadded<Row>,
}

impl Counters {
    /// What a set of counters holds on the heap: a row per thread slot (the overflow
    /// row sits in the struct itself), 64 × 128 bytes on x86-64.
    #[cfg_attr(not(all(feature = "composable", feature = "yaml")), allow(dead_code))]
    pub(crate) const HEAP_BYTES: usize = SLOTS * std::mem::size_of::<CachePadded<Row>>();

    pub(crate) fn new() -> Self {
        Self {
            rows: (0..SLOTS)
                .map(|_| CachePadded::new(Row::default()))
                .collect(),
            overflow: CachePadded::new(Row::default()),
        }
    }

    /// Counts one `event`. Allocates nothing (the thread's first call takes its slot, a
    /// bit in a static word).
    #[inline]
    pub(crate) fn record(&self, event: Event) {
        let cell = usize::from(event.0);
        match self.rows.get(slot::current()).and_then(|row| row.get(cell)) {
            // Relaxed load and store: this thread owns the slot, so it is the cell's only
            // writer and the load sees its own last store; readers want each counter's
            // latest value, not an order with any other memory.
            Some(cell) => cell.store(
                cell.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            ),
            None => {
                if let Some(cell) = self.overflow.get(cell) {
                    // Relaxed: a shared counter; the add is atomic, no other memory is
                    // published through it.
                    cell.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The sums of every cell, now.
    pub(crate) fn snapshot(&self) -> DecisionStats {
        let mut sums = [0u64; CELLS];
        for row in self.rows.iter().chain(std::iter::once(&self.overflow)) {
            for (sum, cell) in sums.iter_mut().zip(row.iter()) {
                // Relaxed: each counter is read on its own (see the module docs).
                *sum = sum.wrapping_add(cell.load(Ordering::Relaxed));
            }
        }
        let mut grid = [[0u64; 3]; OUTCOMES];
        for (outcome, cells) in INDEX.iter().enumerate() {
            for (origin, &cell) in cells.iter().enumerate() {
                if cell != NEVER {
                    grid[outcome][origin] = sums[usize::from(cell)];
                }
            }
        }
        DecisionStats::from_grid(grid)
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts `event` if counting is on.
#[inline]
pub(crate) fn record(counters: Option<&Counters>, event: Event) {
    if let Some(counters) = counters {
        counters.record(event);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_possible_pair_has_its_own_cell() {
        let mut seen = std::collections::HashSet::new();
        for row in INDEX {
            for cell in row {
                assert!(usize::from(cell) < CELLS);
                assert!(cell == NEVER || seen.insert(cell), "cell {cell} used twice");
            }
        }
        assert_eq!(seen.len(), 13);
    }

    #[test]
    fn counts_from_many_threads_add_up_exactly() {
        let counters = Counters::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        counters.record(Event::kept(ParentOrigin::Root));
                        counters.record(Event::dropped(DropReason::Parent, ParentOrigin::Local));
                    }
                });
            }
        });
        let stats = counters.snapshot();
        assert_eq!(stats.kept_from(ParentOrigin::Root), 40_000);
        assert_eq!(stats.dropped_for(DropReason::Parent), 40_000);
        assert_eq!(stats.total(), 80_000);
    }

    #[test]
    fn threads_beyond_the_slots_count_exactly_in_the_overflow_row() {
        let _alone = slot::ALL_SLOTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let counters = Counters::new();
        let threads = SLOTS + 6;
        // All alive at once, so at least 6 of them find no free slot.
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..1_000 {
                        counters.record(Event::dropped(DropReason::RateLimit, ParentOrigin::Root));
                    }
                    barrier.wait();
                });
            }
        });
        let overflow = &counters.overflow
            [usize::from(Event::dropped(DropReason::RateLimit, ParentOrigin::Root).0)];
        assert!(overflow.load(Ordering::Relaxed) >= 6_000);
        assert_eq!(
            counters.snapshot().dropped_for(DropReason::RateLimit),
            threads as u64 * 1_000
        );
    }
}
