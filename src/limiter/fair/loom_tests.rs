//! loom models of the fair limiter's lock-free parts: a key's reserved permits taken by
//! one compare-exchange each, and the window's roll claimed by one thread while the
//! others refuse without waiting.

use loom::sync::Arc;
use loom::thread;

use super::decide::Verdict;
use super::FairLimiter;
use crate::clock::ManualClock;
use crate::limiter::loom_support::{limit, model, W};
use crate::limiter::{Algorithm, AnyLimiter};

/// A fair limiter of `permits` per window whose window 2 reserves one permit for each of
/// keys 1 and 2 (both offered once in window 1), rolled before the model's threads.
fn rolled(permits: u32) -> (Arc<FairLimiter<ManualClock>>, ManualClock) {
    let clock = ManualClock::new();
    let inner =
        AnyLimiter::with_clock(Algorithm::FixedWindow, limit(permits, false), clock.clone());
    let l = FairLimiter::over(inner, 4).unwrap();
    clock.set(W);
    let _ = (l.acquire(1), l.acquire(2));
    clock.set(2 * W);
    (Arc::new(l), clock)
}

/// Two threads each call key 1 twice in a window reserving it one permit of two: one of
/// their calls is kept, and key 2's reserved permit is still there afterwards.
#[test]
fn a_reserved_permit_is_taken_once() {
    model(2, || {
        let (l, _clock) = rolled(2);
        // The window's first call rolls it, before the threads start.
        assert!(l.acquire(2).is_some());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || (0..2).filter(|_| l.acquire(1).is_some()).count())
            })
            .collect();
        let kept: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(kept, 1);
        assert!(l.acquire(2).is_none(), "key 2 used its permit first");
    });
}

/// Two threads call in a new window at once: one rolls it, the other is refused while
/// it rolls or decides after it; never more than the limit, and a call decided after
/// the roll finds its key's reserved permit.
#[test]
fn one_thread_rolls_and_the_other_does_not_wait() {
    model(2, || {
        let (l, _clock) = rolled(2);
        let handles: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|key| {
                let l = l.clone();
                thread::spawn(move || l.decide(key))
            })
            .collect();
        let verdicts: Vec<Verdict> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let kept = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Kept(_)))
            .count();
        assert!(kept >= 1, "the roller decides: {verdicts:?}");
        for v in &verdicts {
            assert!(
                matches!(v, Verdict::Kept(_) | Verdict::Rolling { counted: false }),
                "{verdicts:?}"
            );
        }
    });
}
