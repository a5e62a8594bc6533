//! Bad inputs never panic: every rate, permit count and window is either a [`Limit`] or
//! a typed [`LimitError`] whose message names the bad value, and no limiter panics at
//! any clock reading (the `RateLimiter` contract: "never block, and never panic").

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use std::time::Duration;

use otel_rate_sampler::{
    Algorithm, AnyLimiter, Limit, LimitError, ManualClock, RateLimiter, RateLimitingSampler,
};

const MIN_WINDOW: Duration = Limit::MIN_WINDOW;
use proptest::prelude::*;

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`; a panic in it comes back as `Err` with its message and location instead of
/// being printed (a proptest would print one for every shrinking step). Panics on other
/// threads print as usual.
fn quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                CAUGHT.with(|caught| *caught.borrow_mut() = Some(info.to_string()));
            } else {
                previous(info);
            }
        }));
    });
    QUIET.with(|quiet| quiet.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|quiet| quiet.set(false));
    result.map_err(|_| {
        CAUGHT
            .with(|caught| caught.borrow_mut().take())
            .unwrap_or_default()
    })
}

/// The variant of a rate error, and the rate it carries.
fn rate_error(err: &LimitError) -> (&'static str, f64) {
    match *err {
        LimitError::RateNotFinite { rate } => ("not finite", rate),
        LimitError::RateNotPositive { rate } => ("not positive", rate),
        LimitError::RateOutOfRange { rate } => ("out of range", rate),
        ref other => panic!("a rate gave a non-rate error: {other:?}"),
    }
}

fn same_f64(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Checks that `rate` is refused as `kind`, without a panic, by [`Limit::per_second`]
/// and by the sampler's shortcut, with a message that names it.
fn assert_rate_refused(rate: f64, kind: &str) {
    let result = quietly(|| Limit::per_second(rate));
    let err = result
        .unwrap_or_else(|panic| panic!("Limit::per_second({rate:?}) {panic}"))
        .expect_err(&format!("Limit::per_second({rate:?}) was accepted"));
    let (got_kind, carried) = rate_error(&err);
    assert_eq!(got_kind, kind, "Limit::per_second({rate:?}): {err:?}");
    assert!(
        same_f64(carried, rate),
        "{err:?} carries {carried:?}, not {rate:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{rate:?}")),
        "{rate:?}: the message does not name it: {msg}"
    );
    let sampler = quietly(|| RateLimitingSampler::per_second(rate).map(|_| ()));
    let sampler_err = sampler
        .unwrap_or_else(|panic| panic!("RateLimitingSampler::per_second({rate:?}) {panic}"))
        .expect_err(&format!(
            "RateLimitingSampler::per_second({rate:?}) was accepted"
        ));
    // Compared by variant and bits: NaN is not equal to itself.
    let (sampler_kind, sampler_rate) = rate_error(&sampler_err);
    assert_eq!(sampler_kind, kind, "{sampler_err:?}");
    assert!(same_f64(sampler_rate, rate), "{sampler_err:?}");
}

#[test]
fn bad_rates_are_typed_errors_naming_the_value() {
    assert_rate_refused(f64::NAN, "not finite");
    assert_rate_refused(-f64::NAN, "not finite");
    assert_rate_refused(f64::INFINITY, "not finite");
    assert_rate_refused(f64::NEG_INFINITY, "not finite");
    assert_rate_refused(0.0, "not positive");
    assert_rate_refused(-0.0, "not positive");
    assert_rate_refused(-1.0, "not positive");
    assert_rate_refused(-2.5, "not positive");
    assert_rate_refused(f64::MIN, "not positive");
    assert_rate_refused(1e-300, "out of range");
    assert_rate_refused(1e300, "out of range");
    assert_rate_refused(f64::MAX, "out of range");
    assert_rate_refused(f64::MIN_POSITIVE, "out of range");
    assert_rate_refused(5e-324, "out of range"); // the smallest subnormal
    assert_rate_refused(4_194_304.0, "out of range"); // one permit past Limit::MAX_PERMITS
    assert_rate_refused(4_294_967_296.0, "out of range"); // 2^32 permits per second
    assert_rate_refused(5e-11, "out of range"); // a window of 2·10^19 ns > 2^64
}

#[test]
fn the_ends_of_the_rate_range_are_accepted() {
    let top = Limit::per_second(4_194_303.0).unwrap();
    assert_eq!(
        (top.permits(), top.window()),
        (Limit::MAX_PERMITS, Duration::from_secs(1))
    );
    let bottom = Limit::per_second(5.5e-11).unwrap();
    assert_eq!(bottom.permits(), 1);
    assert!(bottom.window() > Duration::from_secs(18_000_000_000));
}

#[test]
fn bad_permits_and_windows_are_typed_errors_naming_the_value() {
    let second = Duration::from_secs(1);
    let no_panic = |permits: u32, window: Duration| {
        quietly(|| Limit::per_window(permits, window))
            .unwrap_or_else(|panic| panic!("Limit::per_window({permits}, {window:?}) {panic}"))
    };

    let err = no_panic(0, second).unwrap_err();
    assert_eq!(err, LimitError::ZeroPermits);
    assert!(err.to_string().contains("got 0"), "{err}");

    for window in [
        Duration::ZERO,
        Duration::from_nanos(1),
        MIN_WINDOW - Duration::from_nanos(1),
    ] {
        let err = no_panic(1, window).unwrap_err();
        assert_eq!(err, LimitError::WindowTooShort { window });
        let msg = err.to_string();
        assert!(msg.contains(&format!("{window:?}")), "{window:?}: {msg}");
        assert!(
            msg.contains("1ms"),
            "the message says what is accepted: {msg}"
        );
    }

    let longest = Duration::from_nanos(u64::MAX);
    for window in [
        Duration::MAX,
        longest + Duration::from_nanos(1),
        Duration::from_secs(u64::MAX),
    ] {
        let err = no_panic(1, window).unwrap_err();
        assert_eq!(err, LimitError::WindowTooLong { window });
        let msg = err.to_string();
        assert!(msg.contains(&format!("{window:?}")), "{window:?}: {msg}");
    }

    // Both bad: refused, whichever it names.
    assert!(no_panic(0, Duration::ZERO).is_err());
    assert!(no_panic(0, Duration::MAX).is_err());

    // The edges themselves are accepted.
    let l = no_panic(1, MIN_WINDOW).unwrap();
    assert_eq!((l.permits(), l.window()), (1, MIN_WINDOW));
    let l = no_panic(Limit::MAX_PERMITS, longest).unwrap();
    assert_eq!(
        (l.permits(), l.window_nanos()),
        (Limit::MAX_PERMITS, u64::MAX)
    );
    let err = no_panic(Limit::MAX_PERMITS + 1, second).unwrap_err();
    assert!(
        matches!(err, LimitError::TooManyPermits { permits, .. } if permits == Limit::MAX_PERMITS + 1)
    );
    assert!(err.to_string().contains("4194303"), "{err}");
}

/// `x` as `m · 2^e` exactly (finite, non-negative `x`).
fn decompose(x: f64) -> (u128, i32) {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = u128::from(bits & ((1 << 52) - 1));
    if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), exponent - 1075)
    }
}

/// Whether `permits` per `window` is at most `rate` per second, exactly: compares
/// `permits · 10^9` with `rate · window_nanos` in integers, no rounding.
fn enforced_rate_at_most(limit: Limit, rate: f64) -> bool {
    let lhs = u128::from(limit.permits()) * 1_000_000_000; // < 2^62
    let window = u128::from(limit.window_nanos()); // < 2^64
    let (m, e) = decompose(rate); // m < 2^53
    if e >= 0 {
        // rate ≥ m: lhs ≤ m · window · 2^e, or the right side is past 2^128 > lhs.
        1u128
            .checked_shl(e as u32)
            .and_then(|power| (m * window).checked_mul(power))
            .is_none_or(|rhs| lhs <= rhs)
    } else {
        // lhs · 2^-e ≤ m · window (< 2^117); a left side past 2^128 is larger.
        (-e < 128)
            .then(|| lhs.checked_mul(1 << -e))
            .flatten()
            .is_some_and(|l| l <= m * window)
    }
}

/// `Limit::per_second` documents: "The window is rounded up to the nanosecond, so the
/// enforced rate never exceeds `rate`." Checked exactly, in integers.
#[test]
fn per_second_never_enforces_more_than_the_rate_asked_one_third() {
    // 1.0 / 3.0 is a little under 1/3; 10^9 / it is 3_000_000_000.000000017 ns, so the
    // window must be 3_000_000_001 ns: a 3 s window enforces 1/3 per second.
    let rate = 1.0 / 3.0;
    let limit = Limit::per_second(rate).unwrap();
    assert!(
        enforced_rate_at_most(limit, rate),
        "Limit::per_second({rate:?}) = {limit:?} ({} ns) enforces {} per {} ns, more than {rate:?}/s",
        limit.window_nanos(),
        limit.permits(),
        limit.window_nanos()
    );
}

/// A reading at or past `2^42 · W` saturates the packed window index of the window
/// limiters; the documented behaviour ("the limiter then keeps counting into its last
/// window and admits nothing more, it never wraps") is not a panic.
#[test]
fn window_limiters_survive_a_clock_past_their_last_window_index() {
    let w = MIN_WINDOW.as_nanos() as u64;
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        for now in [(w << 42) + 1, u64::MAX] {
            let clock = ManualClock::new();
            let limit = Limit::per_window(1, MIN_WINDOW).unwrap();
            let limiter = AnyLimiter::with_clock(algorithm, limit, clock.clone());
            clock.set(now);
            let first = quietly(|| limiter.try_acquire());
            let second = quietly(|| limiter.try_acquire());
            assert!(
                first.is_ok() && second.is_ok(),
                "{algorithm}, clock at {now} ns: {}",
                first.err().or(second.err()).unwrap_or_default()
            );
        }
    }
}

/// Rates from across the accepted range, log-uniform, and some round ones.
fn accepted_rates() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-10.25f64..6.62).prop_map(|exp| 10f64.powf(exp)),
        (1u32..1_000_000).prop_map(f64::from),
        (1u32..1_000, 1u32..1_000).prop_map(|(a, b)| f64::from(a) / f64::from(b)),
    ]
}

/// Clock readings that reach the ends of the u64 range and of the window index range.
fn readings(window: u64) -> impl Strategy<Value = u64> {
    let saturated = window.saturating_mul(1 << 42);
    prop_oneof![
        any::<u64>(),
        (0u64..1_000).prop_map(|d| u64::MAX - d),
        (0u64..3 * window.min(1 << 40))
            .prop_map(move |d| saturated.saturating_sub(window).saturating_add(d)),
        0u64..10 * window.min(1 << 40),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Keep failures in the report, not in files beside the tests.
        failure_persistence: None,
        ..crate::cases::cases(512)
    })]

    /// Any f64 at all: a limit within the documented ranges, or a typed error naming it.
    #[test]
    fn any_rate_is_a_limit_or_a_typed_error(rate in prop_oneof![any::<f64>(), accepted_rates()]) {
        match quietly(|| Limit::per_second(rate)) {
            Err(panic) => prop_assert!(false, "Limit::per_second({:?}) {}", rate, panic),
            Ok(Ok(limit)) => {
                prop_assert!(rate.is_finite() && rate > 0.0);
                prop_assert!(limit.permits() >= 1);
                prop_assert!(limit.window() >= MIN_WINDOW);
                prop_assert!(f64::from(limit.permits()) <= rate.ceil().max(1.0));
            }
            Ok(Err(err)) => {
                let (_, carried) = rate_error(&err);
                prop_assert!(same_f64(carried, rate));
                let msg = err.to_string();
                prop_assert!(msg.contains(&format!("{rate:?}")), "{}", msg);
            }
        }
    }

    /// Any permit count and window: a limit exactly when both are in range.
    #[test]
    fn any_window_is_a_limit_or_a_typed_error(
        permits in prop_oneof![Just(0u32), any::<u32>()],
        secs in prop_oneof![Just(0u64), 0u64..20_000_000_000, any::<u64>()],
        nanos in 0u32..1_000_000_000,
    ) {
        let window = Duration::new(secs, nanos);
        let result = quietly(|| Limit::per_window(permits, window));
        if let Err(panic) = &result {
            prop_assert!(false, "Limit::per_window({}, {:?}) {}", permits, window, panic);
        }
        let fits = window.as_nanos() <= u128::from(u64::MAX);
        match result.unwrap() {
            Ok(limit) => {
                prop_assert!(permits > 0 && permits <= Limit::MAX_PERMITS);
                prop_assert!(window >= MIN_WINDOW && fits);
                prop_assert_eq!((limit.permits(), limit.window()), (permits, window));
            }
            Err(LimitError::ZeroPermits) => prop_assert_eq!(permits, 0),
            Err(LimitError::TooManyPermits { permits: p, max }) => {
                prop_assert_eq!((p, max), (permits, Limit::MAX_PERMITS));
                prop_assert!(permits > Limit::MAX_PERMITS);
            }
            Err(err @ LimitError::WindowTooShort { .. }) => {
                prop_assert!(permits > 0 && window < MIN_WINDOW);
                let named = format!("{window:?}");
                prop_assert!(err.to_string().contains(&named), "{}", err);
            }
            Err(err @ LimitError::WindowTooLong { .. }) => {
                prop_assert!(permits > 0 && !fits);
                let named = format!("{window:?}");
                prop_assert!(err.to_string().contains(&named), "{}", err);
            }
            Err(other) => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    /// The documented rounding, over the accepted range, in exact arithmetic.
    #[test]
    fn per_second_never_enforces_more_than_the_rate_asked(rate in accepted_rates()) {
        let limit = Limit::per_second(rate).unwrap();
        prop_assert!(
            enforced_rate_at_most(limit, rate),
            "Limit::per_second({:?}) = {:?} ({} ns) enforces more than the rate",
            rate, limit, limit.window_nanos()
        );
    }

    /// No limiter panics at any clock reading, forwards, backwards or at the very end of
    /// the clock's range.
    #[test]
    fn no_limiter_panics_at_any_clock_reading(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        permits in 1u32..4,
        window in prop_oneof![
            Just(MIN_WINDOW.as_nanos() as u64),
            1_000_000u64..10_000_000_000,
            Just(u64::MAX),
        ],
        steps in prop::collection::vec(
            (any::<prop::sample::Index>(), 1usize..4),
            1..40,
        ),
        pool in prop::collection::vec(readings(1_000_000), 8),
    ) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(permits, Duration::from_nanos(window)).unwrap();
        let limiter = AnyLimiter::with_clock(algorithm, limit, clock.clone());
        // The edges of the first window, the first reading past the last window index
        // (2^42 windows), and the end of the clock.
        let extra = [
            0,
            window - 1,
            window,
            window.saturating_mul(1 << 42).saturating_add(1),
            u64::MAX,
        ];
        for (pick, calls) in steps {
            let now = *pick.get(&[pool.as_slice(), &extra].concat());
            clock.set(now);
            for _ in 0..calls {
                let got = quietly(|| limiter.acquire_stamped());
                if let Err(panic) = got {
                    prop_assert!(false, "{:?}, clock at {} ns: {}", limiter, now, panic);
                }
            }
        }
    }
}
