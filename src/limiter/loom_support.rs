//! The loom harness of the limiters' model tests, written once: the window and limit
//! every model uses, the model runner, the workers that call a limiter and return what
//! it admitted, and the checks on those admissions.

use std::collections::BTreeMap;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use crate::limit::Limit;

/// The window of every model: 1 s.
pub(crate) const W: u64 = 1_000_000_000;

/// `permits` per window [`W`], paced or not.
pub(crate) fn limit(permits: u32, paced: bool) -> Limit {
    let limit = Limit::per_window(permits, Duration::from_nanos(W)).unwrap();
    if paced {
        limit
    } else {
        limit.unpaced()
    }
}

/// Runs `f` under loom: exhaustively for up to two workers, with at most two preemptions
/// (or `LOOM_MAX_PREEMPTIONS`) for three or more.
pub(crate) fn model<F: Fn() + Sync + Send + 'static>(workers: usize, f: F) {
    let mut builder = loom::model::Builder::new();
    if workers > 2 && builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Admissions per aligned window of `window` nanoseconds.
pub(crate) fn stamps_in_windows(stamps: &[u64], window: u64) -> BTreeMap<u64, usize> {
    let mut per_window = BTreeMap::new();
    for s in stamps {
        *per_window.entry(s / window).or_insert(0) += 1;
    }
    per_window
}

/// Asserts no window holds more than `permits`.
pub(crate) fn check_per_window(per_window: &BTreeMap<u64, usize>, permits: usize) {
    for (w, n) in per_window {
        assert!(*n <= permits, "window {w} admitted {n} > {permits}");
    }
}

/// Asserts that no interval (t - W, t] holds more than `bound` stamps.
pub(crate) fn check_sliding(stamps: &[u64], bound: usize) {
    for &t in stamps {
        let inside = stamps.iter().filter(|&&s| s + W > t && s <= t).count();
        assert!(
            inside <= bound,
            "{inside} stamps in ({}, {t}]: {stamps:?}",
            t.saturating_sub(W)
        );
    }
}

/// Spawns `workers` loom threads; worker `i` calls `acquire(limiter, t)` for each `t`
/// of `times(i)`. Returns every admission's stamp.
pub(crate) fn stamps_of<L: Send + Sync + 'static>(
    limiter: &Arc<L>,
    workers: u64,
    times: impl Fn(u64) -> Vec<u64>,
    acquire: fn(&L, u64) -> Option<u64>,
) -> Vec<u64> {
    let handles: Vec<_> = (0..workers)
        .map(|i| {
            let l = limiter.clone();
            let times = times(i);
            thread::spawn(move || {
                times
                    .into_iter()
                    .filter_map(|t| acquire(&l, t))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// A permit given back racing other calls (a window roll, a claim of the next slot):
/// worker 0 is admitted at `given` and gives its permit back (`give_back`), worker 1
/// calls at each of `kept_at`. Returns worker 1's stamps: the admissions kept.
pub(crate) fn kept_beside_a_give_back<L: Send + Sync + 'static, A: Send + 'static>(
    limiter: &Arc<L>,
    given: u64,
    kept_at: Vec<u64>,
    admit: fn(&L, u64) -> Option<A>,
    give_back: fn(&L, A),
    stamp: fn(&A) -> u64,
) -> Vec<u64> {
    let l = limiter.clone();
    let giver = thread::spawn(move || {
        if let Some(a) = admit(&l, given) {
            give_back(&l, a);
        }
    });
    let l = limiter.clone();
    let keeper = thread::spawn(move || {
        kept_at
            .into_iter()
            .filter_map(|t| admit(&l, t))
            .map(|a| stamp(&a))
            .collect::<Vec<_>>()
    });
    giver.join().unwrap();
    keeper.join().unwrap()
}
