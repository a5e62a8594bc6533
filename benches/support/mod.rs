//! The timing harness the limiter benches share (`limiters`, `fleet`): calls timed in
//! chunks on fresh state, and threads started together on one shared state.

use std::hint::{black_box, spin_loop};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Calls per timed chunk, and the permits of the admitting limiters.
pub(crate) const CHUNK: u32 = 1024;

/// Times `iters` calls of `call`, [`CHUNK`] at a time, each chunk on the state `make`
/// returns (called outside the timer), and asserts that every call answered `expect`.
pub(crate) fn chunked<S>(
    iters: u64,
    mut make: impl FnMut() -> S,
    mut call: impl FnMut(&S) -> bool,
    expect: bool,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(u64::from(CHUNK));
        let state = make();
        let mut hits = 0u64;
        let start = Instant::now();
        for _ in 0..n {
            hits += u64::from(call(black_box(&state)));
        }
        total += start.elapsed();
        let expected = if expect { n } else { 0 };
        assert_eq!(hits, expected, "a call that should be {expect} was not");
        left -= n;
    }
    total
}

/// Runs `threads` threads that each make `iters` calls of `call` on one shared `state`,
/// started together; returns the wall time from the first start to the last end and
/// asserts that no call was admitted (the state is a saturated limiter).
///
/// The threads meet by spinning, not at a `std::sync::Barrier`: a barrier parks the
/// first threads and the last one wakes them through the kernel, tens of microseconds
/// on this VM during which the last thread already runs alone, all of it inside the
/// measured span; a spinning thread starts within nanoseconds of the last arrival.
pub(crate) fn concurrent<S: Sync + ?Sized>(
    iters: u64,
    threads: usize,
    state: &S,
    call: impl Fn(&S) -> bool + Sync,
) -> Duration {
    let arrived = AtomicUsize::new(0);
    let spans: Vec<(Instant, Instant)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    // Only the count matters (no data is handed over): any ordering would
                    // do; AcqRel/Acquire keep the start after every arrival all the same.
                    arrived.fetch_add(1, Ordering::AcqRel);
                    while arrived.load(Ordering::Acquire) < threads {
                        spin_loop();
                    }
                    let start = Instant::now();
                    let mut hits = 0u64;
                    for _ in 0..iters {
                        hits += u64::from(call(black_box(state)));
                    }
                    let end = Instant::now();
                    assert_eq!(hits, 0, "a saturated limiter admitted a call");
                    (start, end)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    last - first
}
