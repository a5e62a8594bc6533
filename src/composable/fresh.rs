//! A fresh randomness value for an intent whose adjusted count is not reliable: "a new
//! random 56-bit number" (the specification's `CompositeSampler`).
//!
//! Each thread runs its own splitmix64 stream, seeded once from the standard library's
//! per-process random hash keys and the thread's own stack address, so threads do not
//! share a stream and no shared memory is written.

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};

thread_local! {
    /// The thread's splitmix64 state; 0 until its first draw seeds it.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// The splitmix64 increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// A new random value in `0..2^56`.
#[inline]
pub(crate) fn randomness() -> u64 {
    STATE.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = seed();
        }
        s = s.wrapping_add(GAMMA);
        state.set(s);
        mix(s) >> 8
    })
}

/// A seed for this thread: random keys of the process, hashed with an address on this
/// thread's stack (never 0).
#[cold]
fn seed() -> u64 {
    let here = 0u8;
    let address = std::ptr::addr_of!(here) as usize as u64;
    RandomState::new().hash_one(address) | 1
}

/// splitmix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn values_are_56_bits_and_spread_over_the_range() {
        let mut halves = [0u32; 2];
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let r = randomness();
            assert!(r < 1 << 56, "{r:x}");
            halves[usize::from(r >= 1 << 55)] += 1;
            seen.insert(r);
        }
        assert_eq!(seen.len(), 10_000, "no repeats");
        // 5000 expected in each half; 5 standard deviations (sqrt(10000 / 4) = 50).
        assert!(
            halves.iter().all(|h| (4750..=5250).contains(h)),
            "{halves:?}"
        );
    }

    #[test]
    fn two_threads_draw_different_streams() {
        let a: Vec<u64> = (0..4).map(|_| randomness()).collect();
        let b = std::thread::spawn(|| (0..4).map(|_| randomness()).collect::<Vec<u64>>())
            .join()
            .unwrap();
        assert_ne!(a, b);
    }
}
