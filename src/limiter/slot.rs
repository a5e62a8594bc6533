//! Per-thread slot ids for the per-thread counters (the samplers' decision counters, the
//! fair limiter's demand): each thread that counts takes, once, a slot no other live
//! thread holds, and gives it back when it exits.
//!
//! Owning a slot makes the thread the only writer of that slot's cells in every set of
//! counters (`stats::Counters`, `fair::Demand`), so it can count with a plain load and store (no
//! read-modify-write, no cache line shared with another writer). Beyond [`SLOTS`] live
//! counting threads, the others share an overflow slot counted with `fetch_add`.
//!
//! Taking a slot allocates nothing on the Rust heap: the slot is a bit in one static word,
//! and the thread-local holding it has no heap state.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many threads can own a slot at once.
pub(crate) const SLOTS: usize = 64;

/// The slot id of a thread that owns none: its counts go to the shared overflow cells.
pub(crate) const OVERFLOW: usize = SLOTS;

/// A thread's slot before its first count.
const UNASSIGNED: usize = usize::MAX;

/// Bit `i` set: slot `i` is held by a live thread.
static TAKEN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // `const` and without a destructor: reading it is one thread-local load, no lazy
    // initialisation, and it stays readable while the thread is torn down.
    static SLOT: Cell<usize> = const { Cell::new(UNASSIGNED) };
    // Registered on the thread's first count; frees the slot when the thread exits.
    static RELEASE: Release = const { Release };
}

/// Frees this thread's slot at thread exit.
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        // Counts after this point (from other thread-locals' destructors) go to the
        // overflow row: the slot may belong to another thread by then.
        let slot = SLOT.with(|s| s.replace(OVERFLOW));
        if slot < SLOTS {
            // Release: this thread's counts (plain stores) happen before the next owner's
            // Acquire of the slot, so it continues from them and loses none.
            TAKEN.fetch_and(!(1 << slot), Ordering::Release);
        }
    }
}

/// Takes a free slot, or [`OVERFLOW`] if none is free.
fn take() -> usize {
    // Relaxed: only a starting value for the compare-exchange below.
    let mut taken = TAKEN.load(Ordering::Relaxed);
    loop {
        let free = !taken;
        if free == 0 {
            return OVERFLOW;
        }
        let bit = free.trailing_zeros() as usize;
        // Acquire on success: pairs with the Release in `Release::drop` of the slot's
        // previous owner, so its last counts happen before this thread's first load of
        // them.
        match TAKEN.compare_exchange_weak(
            taken,
            taken | (1 << bit),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return bit,
            Err(actual) => taken = actual,
        }
    }
}

/// This thread's slot, taken on its first count; [`OVERFLOW`] if none is free, or if the
/// thread is already being torn down (a span ended from another thread-local's
/// destructor).
#[inline]
pub(crate) fn current() -> usize {
    let slot = SLOT.with(Cell::get);
    if slot != UNASSIGNED {
        slot
    } else {
        assign()
    }
}

#[cold]
fn assign() -> usize {
    // Register the release first: a thread that cannot (it is being torn down) must not
    // hold a slot it would never give back.
    let slot = match RELEASE.try_with(|_| ()) {
        Ok(()) => take(),
        Err(_) => OVERFLOW,
    };
    SLOT.with(|s| s.set(slot));
    slot
}
/// Held by the tests that need the slots to themselves: one takes every slot on
/// purpose (`threads_beyond_the_slots_count_exactly_in_the_overflow_row`), and another
/// running meanwhile would find none free (a CI run saw it).
#[cfg(all(test, not(loom)))]
pub(crate) static ALL_SLOTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn live_threads_hold_distinct_slots_and_exited_threads_free_theirs() {
        let _alone = ALL_SLOTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
