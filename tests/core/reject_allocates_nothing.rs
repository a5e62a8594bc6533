//! The samplers' reject path allocates nothing: a counting global allocator watches
//! `should_sample` for a root on a saturated sampler, for every algorithm, for the
//! adaptive sampler (by its probability and by its cap), and for the rule-based sampler
//! (feature `config`) against rules with globs and attributes. And a declarative file
//! over the memory budget (feature `yaml`) is refused before its limiters are allocated.
//!
//! The allocator counts only the allocations the current thread makes while it is
//! armed, so other test threads (and the harness) cannot disturb the count. That it
//! counts at all is shown on the same sampler: an admitted root allocates (the vector of
//! the sampler's two attributes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use otel_rate_sampler::{Algorithm, Limit, ManualClock, RateLimitingSampler};

thread_local! {
    // `const` thread-locals without a destructor: reading them never allocates.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static EVENTS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

/// [`System`], counting this thread's allocations, reallocations and frees while armed.
struct Counting;

/// Counts one heap event of `bytes` allocated (0 for a free) on this thread, if armed.
fn note(bytes: usize) {
    // `try_with`: the allocator runs during thread teardown too, after the locals are gone.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            EVENTS.with(|n| n.set(n.get() + 1));
            BYTES.with(|n| n.set(n.get() + bytes as u64));
        }
    });
}

#[allow(unsafe_code)]
// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counting touches only const thread-locals and never
// allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` and `layout` come from this allocator, that is from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(0);
        // SAFETY: `ptr` and `layout` come from this allocator, that is from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// A fleet-scoped rule refuses through its `FleetLimiter` (no lease: nothing listens on
/// port 1) and a fleet-scoped cap refuses what the local rule admits: no heap events
/// either way, with the fleet thread running beside.
#[cfg(all(feature = "config", feature = "redis"))]
#[test]
fn a_refused_root_allocates_nothing_against_fleet_scoped_rules() {
    use otel_rate_sampler::{RuleBasedSampler, SamplingConfig};

    let text = r#"
[fleet]
redis = "redis://127.0.0.1:1"
[default]
limit = 1
[[service]]
name = "svc"
cap = { limit = 5, scope = "fleet" }
[[service.rule]]
name = "fleet"
span_name = "GET /fleet"
limit = 5
scope = "fleet"
[[service.rule]]
name = "local"
span_name = "GET /local"
limit = 1000
"#;
    let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
    let s = RuleBasedSampler::with_clock(&config, "svc", ManualClock::new()).unwrap();
    let root = Context::new();
    let decide = |name: &str| {
        s.should_sample(
            Some(&root),
            TraceId::from(9u128),
            name,
            &SpanKind::Server,
            &[],
            &[],
        )
    };
    // Once unwatched: the first decision on a thread sets up the rule set pointer's
    // thread-local slot, as in the test above.
    assert_eq!(decide("GET /fleet").decision, SamplingDecision::Drop);
    let (kept, events) = refuse_both(["GET /fleet", "GET /local"], decide);
    assert_eq!(kept, 0, "a fleet limit without a lease admitted a root");
    assert_eq!(events, 0, "2000 refused roots caused {events} heap events");
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` with the counter armed; returns its result (dropped later, unwatched) and
/// the heap events (allocations, reallocations, frees) it caused on this thread.
fn heap_events<R>(f: impl FnOnce() -> R) -> (R, u64) {
    EVENTS.with(|n| n.set(0));
    BYTES.with(|n| n.set(0));
    ARMED.with(|armed| armed.set(true));
    let result = f();
    ARMED.with(|armed| armed.set(false));
    (result, EVENTS.with(Cell::get))
}

/// A declarative file whose five `rate_limiting` blocks each fit in the memory budget
/// but not together (five sliding logs of 64 MiB) is refused having allocated a few
/// kilobytes on the heap: the sum is checked before any limiter is built. (Before: the
/// five were built, 334 MB resident.)
#[cfg(feature = "yaml")]
#[test]
fn a_declarative_file_over_the_budget_is_refused_before_its_limiters_are_allocated() {
    let block =
        "        rate_limiting:\n          default: { limit: 4194303, algorithm: sliding-log }\n";
    let text = [
        "root",
        "remote_parent_sampled",
        "remote_parent_not_sampled",
        "local_parent_sampled",
        "local_parent_not_sampled",
    ]
    .iter()
    .fold(
        "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    parent_based:\n".to_owned(),
        |text, branch| text + &format!("      {branch}:\n{block}"),
    );
    let (refused, _) = heap_events(|| {
        otel_rate_sampler::DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc").is_err()
    });
    let bytes = BYTES.with(Cell::get);
    assert!(refused);
    // One of the logs alone would be 64 MiB.
    assert!(
        bytes < 1 << 20,
        "{bytes} bytes allocated to refuse the file"
    );
}

/// A 1.1 file whose composite sampler holds `n` rate limiters (a rule each), under the
/// default budget of 128 MiB.
#[cfg(all(feature = "yaml", feature = "composable"))]
fn composite_limiters(n: usize) -> String {
    let rule = "        - sampler: { rate_limiting/otel_rate_sampler: { limit: 10 } }\n";
    format!(
        "file_format: \"1.1\"\ntracer_provider:\n  sampler:\n    composite/development:\n      rule_based:\n        rules:\n{}",
        rule.repeat(n)
    )
}

/// A declarative file whose composite rate limiters are over the memory budget (16,000
/// of them, about 9.5 KiB each, most of it their decision counters: 150 MiB) is refused
/// having allocated a fraction of that: they are counted in the raw tree, before any is
/// built. And the budget counts, to the byte, what building one allocates.
#[cfg(all(feature = "yaml", feature = "composable"))]
#[test]
fn composite_rate_limiters_over_the_budget_are_refused_before_they_are_allocated() {
    use std::sync::Arc;

    use otel_rate_sampler::{
        ComposableAlwaysOn, ComposableRateLimiting, ComposableSampler, DeclarativeSampler,
    };

    let build = |n: usize| {
        let text = composite_limiters(n);
        heap_events(|| DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc")).0
    };
    let (few, more) = (100, 200);
    let sampler = build(few).unwrap();
    let bytes_few = BYTES.with(Cell::get);
    drop(sampler);
    let sampler = build(more).unwrap();
    let per_limiter = (BYTES.with(Cell::get) - bytes_few) / (more - few) as u64;
    drop(sampler);
    let err = build(16_000).unwrap_err();
    let refused = BYTES.with(Cell::get);
    // Reading the file alone (refused after reading for its file_format) allocates
    // about 44 MB (the YAML reader's events and values, 1.1 MB of text).
    let text = composite_limiters(16_000).replace("\"1.1\"", "\"2.0\"");
    let (read_only, _) =
        heap_events(|| DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc"));
    let read = BYTES.with(Cell::get);
    assert_eq!(
        read_only.unwrap_err().kind(),
        otel_rate_sampler::ConfigErrorKind::UnknownValue
    );
    assert_eq!(
        err.kind(),
        otel_rate_sampler::ConfigErrorKind::MemoryBudget,
        "{err}"
    );
    // What the budget counts per limiter, from where it stops: (128 MiB) / fit.
    let fit: u64 = err
        .to_string()
        .split_once("; the first ")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    let counted = (128 << 20) / fit;
    // The budget counts what building one takes, as the file builds it (shared in an
    // `Arc`, on the monotonic clock), to the byte: 128 MiB hold `fit` of them.
    let delegate: Arc<dyn ComposableSampler> = Arc::new(ComposableAlwaysOn);
    let limit = Limit::per_window(10, Duration::from_secs(1)).unwrap();
    let (one, _) = heap_events(|| {
        Arc::new(ComposableRateLimiting::new(delegate, limit.unpaced()))
            as Arc<dyn ComposableSampler>
    });
    let one_bytes = BYTES.with(Cell::get);
    drop(one);
    assert_eq!(fit, (128 << 20) / one_bytes, "{one_bytes} bytes for one");
    // Building from a file allocates that and more (the raw tree, the descriptions).
    assert!(
        (counted..2 * counted).contains(&per_limiter),
        "{per_limiter} bytes allocated per limiter built, {counted} counted"
    );
    // Beyond reading the file, the refusal allocates under an eighth of a limiter per
    // limiter (each one's key): the 16,000 (about 150 MiB) are never built.
    let beyond_reading = refused.saturating_sub(read);
    assert!(
        beyond_reading < 16_000 * counted / 8,
        "{beyond_reading} bytes allocated to refuse the file beyond reading it ({read}); {per_limiter} per limiter built"
    );
}

/// Offers a root of each of `names` 1000 times to `decide`, watching the heap: how
/// many rounds kept either, and the heap events.
#[cfg(feature = "config")]
fn refuse_both(names: [&str; 2], decide: impl Fn(&str) -> SamplingResult) -> (usize, u64) {
    heap_events(|| {
        (0..1_000)
            .filter(|_| {
                names
                    .iter()
                    .any(|name| decide(name).decision != SamplingDecision::Drop)
            })
            .count()
    })
}

fn sample_root(sampler: &impl ShouldSample, parent: Option<&Context>) -> SamplingResult {
    sampler.should_sample(
        parent,
        TraceId::from(0x5eed_u128),
        "root",
        &SpanKind::Server,
        &[],
        &[],
    )
}

#[test]
fn the_counter_sees_an_allocation() {
    let (v, events) = heap_events(|| vec![1u8; 3]);
    assert_eq!(v.len(), 3);
    assert!(
        events >= 1,
        "a Vec allocated and the counter saw {events} events"
    );
}

#[test]
fn a_refused_root_allocates_nothing_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let sampler = RateLimitingSampler::builder(
            Limit::per_window(2, Duration::from_secs(1))
                .unwrap()
                .unpaced(),
        )
        .algorithm(algorithm)
        .clock(ManualClock::new())
        .build();
        // How the SDK asks about a root: a parent context without a span.
        let root_parent = Context::new();

        // An admitted root allocates (its attributes): the counter works here.
        let (kept, events) = heap_events(|| sample_root(&sampler, Some(&root_parent)));
        assert_eq!(
            kept.decision,
            SamplingDecision::RecordAndSample,
            "{algorithm}"
        );
        assert!(
            events >= 1,
            "{algorithm}: an admitted root built its attributes with {events} heap events"
        );
        let kept = sample_root(&sampler, None);
        assert_eq!(
            kept.decision,
            SamplingDecision::RecordAndSample,
            "{algorithm}"
        );

        // Saturated: every further root is refused, without touching the heap.
        let (refused, events) = heap_events(|| {
            (0..1_000)
                .map(|i| {
                    let parent = if i % 2 == 0 { Some(&root_parent) } else { None };
                    sample_root(&sampler, parent).decision
                })
                .filter(|d| *d != SamplingDecision::Drop)
                .count()
        });
        assert_eq!(
            refused, 0,
            "{algorithm}: a saturated sampler admitted a root"
        );
        assert_eq!(
            events, 0,
            "{algorithm}: 1000 refused roots caused {events} heap events"
        );

        // The refusal itself, kept whole (its drop is outside the watch).
        let (result, events) = heap_events(|| sample_root(&sampler, Some(&root_parent)));
        assert_eq!(result.decision, SamplingDecision::Drop);
        assert!(result.attributes.is_empty());
        assert_eq!(
            events, 0,
            "{algorithm}: a refused root caused {events} heap events"
        );
    }
}

/// The adaptive sampler refuses by its probability (p = 1/100 after a window of 100)
/// and by its cap (p = 1, spent), rolling its window in between: no heap events. A
/// probability rule refusing is covered with the rules below.
#[test]
fn a_refused_root_allocates_nothing_in_the_adaptive_sampler() {
    use otel_rate_sampler::AdaptiveSampler;

    let clock = ManualClock::new();
    let sampler = AdaptiveSampler::builder(Limit::per_window(1, Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .build();
    let root = Context::new();
    let decide = |id: u128| {
        sampler
            .should_sample(
                Some(&root),
                TraceId::from(id),
                "root",
                &SpanKind::Server,
                &[],
                &[],
            )
            .decision
    };
    // Window 0, p = 1: the first root takes the permit; the cap refuses the rest.
    assert_eq!(decide(u128::MAX), SamplingDecision::RecordAndSample);
    let (kept, events) = heap_events(|| {
        (2..100u128)
            .filter(|&i| decide(i) != SamplingDecision::Drop)
            .count()
    });
    assert_eq!(kept, 0);
    assert_eq!(
        events, 0,
        "98 roots refused by the cap caused {events} heap events"
    );
    // Window 1 rolls on its first call (p = 1/100 from 100 offered) and refuses low ids.
    clock.advance(Duration::from_secs(1));
    let (kept, events) = heap_events(|| {
        (0..1_000u128)
            .filter(|&i| decide(i) != SamplingDecision::Drop)
            .count()
    });
    assert_eq!(
        kept, 0,
        "ids below 1000 are far under the threshold of 1/100"
    );
    assert_eq!(
        events, 0,
        "a roll and 1000 refused roots caused {events} heap events"
    );
    assert!(sampler.probability() < 0.011, "{}", sampler.probability());
}

#[cfg(feature = "config")]
#[test]
fn a_refused_root_allocates_nothing_against_rules() {
    use opentelemetry::{KeyValue, StringValue, Value};
    use otel_rate_sampler::{RuleBasedSampler, SamplingConfig};

    let text = r#"
[default]
limit = 1
[[default.rule]]
name = "glob"
span_name = "GET /{users,orders}/*"
attributes = { "http.status_code" = "5*", "ratio" = "0.*", "flag" = "true" }
limit = 1
[[default.rule]]
name = "infix"
span_name = "*orders*"
attributes = { "missing" = "x" }
limit = 1
[[default.rule]]
name = "array"
attributes = { "tags" = "nomatch*" }
limit = 1
"#;
    let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
    let s = RuleBasedSampler::with_clock(&config, "svc", ManualClock::new()).unwrap();
    let attrs = [
        KeyValue::new("http.status_code", 503),
        KeyValue::new("ratio", 0.25),
        KeyValue::new("flag", true),
        KeyValue::new("http.method", "GET"),
        // Matched as text, written on the stack like the numbers.
        KeyValue::new(
            "tags",
            Value::Array(vec![StringValue::from("a"), StringValue::from("b")].into()),
        ),
    ];
    let root = Context::new();
    let decide = |name: &str| {
        s.should_sample(
            Some(&root),
            TraceId::from(9u128),
            name,
            &SpanKind::Server,
            &attrs,
            &[],
        )
    };
    // Spend the permits of both the rule and the default.
    assert_eq!(
        decide("GET /orders/1").decision,
        SamplingDecision::RecordAndSample
    );
    assert_eq!(
        decide("POST /x").decision,
        SamplingDecision::RecordAndSample
    );
    // Both permits spent: every further root is refused, without touching the heap.
    let (kept, events) = refuse_both(["GET /orders/1", "POST /x"], decide);
    assert_eq!(kept, 0, "a saturated rule set admitted a root");
    assert_eq!(events, 0, "2000 refused roots caused {events} heap events");
}

#[cfg(feature = "config")]
#[test]
fn a_refused_root_allocates_nothing_against_a_lower_bound() {
    use otel_rate_sampler::{RuleBasedSampler, SamplingConfig};

    // A paced bound of 1 per second admits its one permit in the window's first tenth.
    let text = r#"
[default]
probability = 0.5
at_least = 1.0
[[default.rule]]
name = "never"
span_name = "never"
probability = 0.0
at_least = 1.0
"#;
    let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
    let s = RuleBasedSampler::with_clock(&config, "svc", ManualClock::new()).unwrap();
    let root = Context::new();
    // Random bits 0: every probability below 1 refuses it.
    let refused_id = TraceId::from(1u128 << 64);
    let decide =
        |name: &str| s.should_sample(Some(&root), refused_id, name, &SpanKind::Server, &[], &[]);
    // The lower bounds keep one each, then refuse: the probability refused, and the
    // bound has no permit left.
    assert_eq!(decide("never").decision, SamplingDecision::RecordAndSample);
    assert_eq!(decide("other").decision, SamplingDecision::RecordAndSample);
    let (kept, events) = refuse_both(["never", "other"], decide);
    assert_eq!(kept, 0, "a spent lower bound admitted a root");
    assert_eq!(events, 0, "2000 refused roots caused {events} heap events");
}

/// A thread's first decision takes the thread's counter slot: that allocates nothing
/// either, for the plain sampler and for a parent-followed span.
#[test]
fn a_new_threads_first_refusal_allocates_nothing() {
    let sampler =
        RateLimitingSampler::builder(Limit::per_window(1, Duration::from_secs(1)).unwrap())
            .clock(ManualClock::new())
            .build();
    let root_parent = Context::new();
    assert_eq!(
        sample_root(&sampler, Some(&root_parent)).decision,
        SamplingDecision::RecordAndSample
    );
    for _ in 0..3 {
        let events = std::thread::scope(|s| {
            s.spawn(|| {
                let (result, events) = heap_events(|| sample_root(&sampler, Some(&root_parent)));
                assert_eq!(result.decision, SamplingDecision::Drop);
                events
            })
            .join()
            .unwrap()
        });
        assert_eq!(
            events, 0,
            "a new thread's first refusal caused {events} heap events"
        );
    }
    let stats = sampler.stats();
    assert_eq!((stats.decisions.kept(), stats.decisions.dropped()), (1, 3));
}

/// A `CompositeSampler` over the specification's built-ins (parent threshold, rules
/// with values and patterns, annotating, probability, always off) drops roots without
/// touching the heap, also when nested annotators would chain their attributes.
#[cfg(feature = "composable")]
#[test]
fn a_dropped_root_allocates_nothing_in_a_composite_sampler() {
    use opentelemetry::KeyValue;
    use otel_rate_sampler::{
        ComposableAlwaysOff, ComposableAnnotating, ComposableParentThreshold,
        ComposableProbability, ComposableRuleBased, CompositeSampler, Predicate,
    };

    let annotated = ComposableAnnotating::new(
        [KeyValue::new("outer", 1)],
        ComposableAnnotating::new(
            [KeyValue::new("inner", 1)],
            ComposableProbability::new(0.5).unwrap(),
        ),
    );
    let root = ComposableRuleBased::builder()
        .rule(
            Predicate::new()
                .attribute_patterns("url.path", ["/api/*", "/v?/*"], ["/api/health*"])
                .unwrap(),
            annotated,
        )
        .rule(
            Predicate::new().attribute_values("http.status_code", ["500", "503"]),
            ComposableProbability::new(0.25).unwrap(),
        )
        .rule(Predicate::new(), ComposableAlwaysOff)
        .build();
    let sampler = CompositeSampler::new(ComposableParentThreshold::new(root));
    let root_parent = Context::new();
    let attrs = [
        KeyValue::new("http.status_code", 503),
        KeyValue::new("url.path", "/api/users"),
    ];
    let decide = |id: u128, attrs: &[KeyValue]| {
        sampler.should_sample(
            Some(&root_parent),
            TraceId::from(id),
            "root",
            &SpanKind::Server,
            attrs,
            &[],
        )
    };
    // High randomness is kept by 1/2 with both annotators' attributes: the counter sees it.
    let (kept, events) = heap_events(|| decide(u128::from(u64::MAX), &attrs));
    assert_eq!(kept.decision, SamplingDecision::RecordAndSample);
    assert_eq!(kept.attributes.len(), 2);
    assert!(events >= 1, "a kept root built attributes and th");
    // Randomness below 1/4 is dropped by every rule that matches.
    let (kept, events) = heap_events(|| {
        (0..1_000u128)
            .filter(|&i| {
                decide(i, &attrs).decision != SamplingDecision::Drop
                    || decide(i, &attrs[..1]).decision != SamplingDecision::Drop
                    || decide(i, &[]).decision != SamplingDecision::Drop
            })
            .count()
    });
    assert_eq!(kept, 0);
    assert_eq!(events, 0, "3000 dropped roots caused {events} heap events");
}

/// `ComposableRateLimiting` drops by its threshold and by its cap without touching the
/// heap: window 0 (probability 1) fills the cap, window 1's keep measures the load, and
/// window 2, its cap empty, drops by the adapted threshold.
#[cfg(feature = "composable")]
#[test]
fn a_dropped_root_allocates_nothing_in_the_composable_rate_limiter() {
    use otel_rate_sampler::{ComposableAlwaysOn, ComposableRateLimiting, CompositeSampler};

    let clock = ManualClock::new();
    let limit = Limit::per_window(1, Duration::from_secs(1)).unwrap();
    let sampler = CompositeSampler::new(ComposableRateLimiting::with_clock(
        ComposableAlwaysOn,
        limit,
        clock.clone(),
    ));
    let root_parent = Context::new();
    let decide = |id: u128| sample_with_id(&sampler, &root_parent, id);
    assert_eq!(decide(u128::MAX), SamplingDecision::RecordAndSample);
    let (kept, events) = heap_events(|| {
        (0..100u128)
            .filter(|&i| decide(i << 40) != SamplingDecision::Drop)
            .count()
    });
    assert_eq!(kept, 0, "the cap of 1 admitted a second root");
    assert_eq!(
        events, 0,
        "100 roots refused by the cap caused {events} heap events"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(decide(u128::MAX), SamplingDecision::RecordAndSample);
    clock.advance(Duration::from_secs(1));
    let (kept, events) = heap_events(|| {
        (0..1_000u128)
            .filter(|&i| decide(i) != SamplingDecision::Drop)
            .count()
    });
    assert_eq!(
        kept, 0,
        "ids below 1000 are under the threshold of about 1/102"
    );
    assert_eq!(
        events, 0,
        "1000 roots refused by the threshold caused {events} heap events"
    );
}

#[cfg(feature = "composable")]
fn sample_with_id(sampler: &impl ShouldSample, parent: &Context, id: u128) -> SamplingDecision {
    sampler
        .should_sample(
            Some(parent),
            TraceId::from(id),
            "root",
            &SpanKind::Server,
            &[],
            &[],
        )
        .decision
}
