//! Each thread's cache of a `RuleBasedSampler`'s rules: per sampler, current after a
//! reload on the thread's next decision, and never a way for a thread that sat idle
//! through a reload to spend the replaced limiters' permits (they are closed by the
//! reload). Counted per window under threads, on a manual clock started part-way into
//! a window and on the real clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

use otel_rate_sampler::{Clock, ManualClock, RuleBasedSampler, SamplingConfig};

use super::reload_caps::keep;

fn config(text: &str) -> SamplingConfig {
    SamplingConfig::from_toml_str(text, "test.toml").unwrap()
}

/// A limit of `n` per `window` for every span.
fn limit(n: u32, window: &str) -> SamplingConfig {
    config(&format!(
        "[default]\nlimit = {n}\nwindow = \"{window}\"\npaced = false\n"
    ))
}

/// Two samplers decided in one thread keep their own rules, before and after either
/// is reloaded: a thread's cache belongs to one sampler (and its clones).
#[test]
fn two_samplers_in_one_thread_never_see_each_others_rules() {
    let none = config("[default]\nprobability = 0.0\n");
    let all = config("[default]\nprobability = 1.0\n");
    let a = RuleBasedSampler::new(&none, "svc").unwrap();
    let b = RuleBasedSampler::new(&all, "svc").unwrap();
    let a_clone = a.clone();
    for _ in 0..3 {
        assert_eq!(keep(&a, "x"), None);
        assert!(keep(&b, "x").is_some());
    }
    a.reload(&all).unwrap();
    b.reload(&none).unwrap();
    assert!(keep(&a, "x").is_some());
    assert!(keep(&a_clone, "x").is_some(), "a clone shares the rules");
    assert_eq!(keep(&b, "x"), None);
}

/// Threads that decided with the old rules and then sat idle through reloads decide
/// with the rules in force when they wake, and the window keeps at most the largest
/// limit in force during it: what they spent before is carried, nothing is given out
/// twice. On a manual clock part-way into an hour's window and on the real clock.
#[test]
fn threads_idle_through_reloads_spend_no_replaced_permits() {
    let manual = ManualClock::new();
    manual.set(3_600_000_000_000 + 1_234_567_890);
    let on_manual = RuleBasedSampler::with_clock(&limit(10, "1h"), "svc", manual).unwrap();
    let on_real = RuleBasedSampler::new(&limit(10, "1h"), "svc").unwrap();
    idle_through_reloads(&on_manual);
    idle_through_reloads(&on_real);
}

fn idle_through_reloads<C: Clock + Clone>(s: &RuleBasedSampler<C>) {
    {
        let before = AtomicUsize::new(0);
        let after = AtomicUsize::new(0);
        let (decided, reloaded) = (Barrier::new(4), Barrier::new(4));
        std::thread::scope(|scope| {
            for _ in 0..3 {
                let (before, after) = (&before, &after);
                let (decided, reloaded) = (&decided, &reloaded);
                scope.spawn(move || {
                    // Relaxed (both counters): read after the threads are joined.
                    let n = (0..3).filter(|_| keep(s, "x").is_some()).count();
                    before.fetch_add(n, Ordering::Relaxed);
                    decided.wait();
                    // Idle, the old rules in this thread's cache, while they change.
                    reloaded.wait();
                    let n = (0..20).filter(|_| keep(s, "x").is_some()).count();
                    after.fetch_add(n, Ordering::Relaxed);
                });
            }
            decided.wait();
            // 10 → 5 → 12 within the window: the 9 spent stay spent.
            s.reload(&limit(5, "1h")).unwrap();
            s.reload(&limit(12, "1h")).unwrap();
            reloaded.wait();
        });
        let (before, after) = (before.into_inner(), after.into_inner());
        assert_eq!(before, 9);
        assert_eq!(before + after, 12, "at most the largest limit, exactly");
    }
}
