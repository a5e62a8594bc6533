//! The reload's handover under loom: a thread decides through the rules it cached
//! before the reload (it read the rules in force, one load, and decides with what it
//! read) while the reload closes the replaced limiter, carries what it admitted into the
//! replacement, and publishes the new rules. Whatever the interleaving, the window
//! keeps at most `max(old N, new N)`, and the replacement holds exactly what was kept
//! (fixed windows, one window, the clock part-way into it).

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::replacing;
use crate::clock::ManualClock;
use crate::config::compile::local_rule::LocalRule;
use crate::limit::Limit;
use crate::limiter::{Algorithm, AnyLimiter};

/// A fixed window of `n` per second, unpaced, on `clock`.
fn fixed(n: u32, clock: &ManualClock) -> AnyLimiter<ManualClock> {
    let limit = Limit::per_window(n, std::time::Duration::from_secs(1))
        .unwrap()
        .unpaced();
    AnyLimiter::with_clock(Algorithm::FixedWindow, limit, clock.clone())
}

/// One reload from `old_n` to `new_n`, one admission kept before it, a reader making
/// `reads` decisions through its cache meanwhile; then the new rules decide until they
/// refuse.
fn reload_while_a_stale_reader_decides(old_n: u32, new_n: u32, reads: usize) {
    loom::model(move || {
        let clock = ManualClock::new();
        clock.set(7_400_000_000);
        let old = LocalRule::new(fixed(old_n, &clock));
        assert!(old.try_acquire());
        // The new rules, built: the replacement holds what `old` had used.
        let (new, handover) = replacing(fixed(new_n, &clock), &old);
        // The rules in force: the new ones once this is set.
        let published = Arc::new(AtomicBool::new(false));
        let reader = {
            let (old, new, published) = (old.clone(), new.clone(), Arc::clone(&published));
            thread::spawn(move || {
                (0..reads)
                    .filter(|_| {
                        // Acquire: the cache's revalidation, which reads the new rules
                        // only once they are published (whole).
                        let rules = if published.load(Ordering::Acquire) {
                            &new
                        } else {
                            &old
                        };
                        rules.try_acquire()
                    })
                    .count()
            })
        };
        handover.settle();
        // Release: the new rules are published whole, after the handover.
        published.store(true, Ordering::Release);
        let during = reader.join().unwrap();
        let after = (0..new_n + 1).filter(|_| new.try_acquire()).count();
        let kept = 1 + during + after;
        assert!(
            kept <= old_n.max(new_n) as usize,
            "{old_n} -> {new_n}: kept {kept} (1 + {during} + {after})"
        );
        // The carried count is exact: the replacement counts every admission of the
        // window, none twice, and the old limiter refuses for good.
        assert_eq!(new.used(), kept as u64, "{old_n} -> {new_n}");
        assert!(!old.try_acquire());
    });
}

#[test]
fn loom_a_stale_reader_during_a_reload_that_lowers_the_limit() {
    reload_while_a_stale_reader_decides(3, 2, 2);
}

#[test]
fn loom_a_stale_reader_during_a_reload_that_raises_the_limit() {
    reload_while_a_stale_reader_decides(2, 4, 2);
}
