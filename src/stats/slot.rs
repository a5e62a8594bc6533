//! Per-thread slot ids for the counters: each thread that records a decision takes, once,
//! a slot no other live thread holds, and gives it back when it exits.
//!
//! Owning a slot makes the thread the only writer of that slot's cells in every
//! [`Counters`](super::Counters), so it can count with a plain load and store (no
//! read-modify-write, no cache line shared with another writer). Beyond [`SLOTS`] live
//! counting threads, the others share an overflow slot counted with `fetch_add`.
//!
//! Taking a slot allocates nothing on the Rust heap: the slot is a bit in one static word,
//! and the thread-local holding it has no heap state.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many threads can own a slot at once.
pub(crate) const SLOTS: usize = 64;

/// The slot id of a thread that owns none: its counts go to the shared overflow cells.
pub(crate) const OVERFLOW: usize = SLOTS;

/// Bit `i` set: slot `i` is held by a live thread.
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// A thread's slot; dropping it (at thread exit) frees the slot.
struct Slot(usize);

impl Slot {
    fn take() -> Self {
        // Relaxed: only a starting value for the compare-exchange below.
        let mut taken = TAKEN.load(Ordering::Relaxed);
        loop {
            let free = !taken;
            if free == 0 {
                return Slot(OVERFLOW);
            }
            let bit = free.trailing_zeros() as usize;
            // Acquire on success: pairs with the Release in `drop` of the slot's previous
            // owner, so its last counts happen before this thread's first load of them.
            match TAKEN.compare_exchange_weak(
                taken,
                taken | (1 << bit),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Slot(bit),
                Err(actual) => taken = actual,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.0 < SLOTS {
            // Release: this thread's counts (plain stores) happen before the next owner's
            // Acquire of the slot, so it continues from them and loses none.
            TAKEN.fetch_and(!(1 << self.0), Ordering::Release);
        }
    }
}

thread_local! {
    static SLOT: Slot = Slot::take();
}

/// This thread's slot, taken on first use; [`OVERFLOW`] if none is free, or while the
/// thread is being torn down (a span ended from another thread-local's destructor).
#[inline]
pub(crate) fn current() -> usize {
    SLOT.try_with(|slot| slot.0).unwrap_or(OVERFLOW)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn live_threads_hold_distinct_slots_and_exited_threads_free_theirs() {
        let here = current();
        assert_eq!(current(), here, "a thread keeps its slot");
        let others: Vec<usize> = (0..4)
            .map(|_| std::thread::spawn(current).join().unwrap())
            .collect();
        for slot in &others {
            assert!(*slot < SLOTS);
            assert_ne!(*slot, here);
        }
        // Sequential threads: each exited before the next began, so a freed slot is
        // taken again rather than a new one each time (other tests' threads may hold
        // slots meanwhile, so only the bound is checked).
        assert!(others.iter().all(|s| *s < SLOTS));
    }
}
