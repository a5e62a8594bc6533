//! OTEP 235 consistent probability sampling: a keep decision from the trace's 56 random
//! bits against a rejection threshold, and the `th` sub-key of the `ot` trace-state
//! entry that tells downstream stages and backends the probability a span was kept with.
//!
//! * The **randomness** `R` of a trace is the `rv` sub-key of its `ot` entry when that
//!   holds exactly 14 hex digits, else the low 56 bits of the trace id (a malformed `rv`
//!   falls back to the trace id: the documented fallback, never a panic).
//! * A probability `p` has the **rejection threshold** `T = 2^56 − round(p·2^56)`
//!   (`round((1 − p)·2^56)` computed without losing `p`'s low bits); a span is kept iff
//!   `R ≥ T`. Every sampler with the same `p` therefore keeps exactly the same traces,
//!   in every process, and a lower `p` keeps a subset of what a higher one keeps.
//! * `th` is `T` as 14 hex digits with the trailing zeros removed (`p = 1` is `th:0`,
//!   `p = 1/2` is `th:8`, `p = 1/4` is `th:c`). A kept span carries it, merged with the
//!   other `ot` sub-keys (`rv` stays) and other vendors' entries.
//! * A span deciding on a **sampled remote parent** (a second stage) may raise the
//!   parent's threshold, never lower it: it keeps iff `R ≥ max(T, T_parent)` and writes
//!   that maximum. A parent sampled without a `th` (or with a malformed one) was kept
//!   with an unknown probability: the span is decided with `T` but carries no `th` (a
//!   malformed one is erased), since no probability describes it.

use opentelemetry::trace::{TraceId, TraceState};

/// `2^56`: one more than the largest randomness value.
const MAX: u64 = 1 << 56;
/// The hex digits of a full-precision threshold or randomness value.
const DIGITS: usize = 14;

/// A rejection threshold in `0..=2^56`: keep iff the trace's randomness is at least
/// this. `0` keeps everything (`th:0`); `2^56` keeps nothing (and is never written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Threshold(u64);

impl Threshold {
    /// Keeps every trace (`th:0`).
    pub(crate) const ALWAYS: Threshold = Threshold(0);
    /// Keeps no trace.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // probability rules
    pub(crate) const NEVER: Threshold = Threshold(MAX);

    /// The threshold of probability `p`, clamped to `[0, 1]` (NaN keeps nothing). A
    /// `p > 0` too small to express in 56 bits becomes the smallest nonzero probability
    /// (`2^-56`) rather than zero.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // probability rules
    pub(crate) fn from_probability(p: f64) -> Self {
        if p.is_nan() || p <= 0.0 {
            return Self::NEVER;
        }
        if p >= 1.0 {
            return Self::ALWAYS;
        }
        // Exact scaling by a power of two; `round` then loses at most half a unit.
        let keep = ((p * MAX as f64).round() as u64).clamp(1, MAX);
        Threshold(MAX - keep)
    }

    /// The threshold of the probability `numerator / denominator` (at most 1; a zero
    /// denominator keeps everything), in integer arithmetic: `2^56 −
    /// round(2^56 · numerator / denominator)`, at least the smallest nonzero probability.
    pub(crate) fn from_ratio(numerator: u64, denominator: u64) -> Self {
        if denominator == 0 || numerator >= denominator {
            return Self::ALWAYS;
        }
        let (n, d) = (u128::from(numerator), u128::from(denominator));
        let keep = ((n * u128::from(MAX) + d / 2) / d) as u64; // < 2^56: n < d
        Threshold(MAX - keep.max(u64::from(numerator > 0)))
    }

    /// The threshold as a number in `0..=2^56`.
    pub(crate) const fn value(self) -> u64 {
        self.0
    }

    /// A threshold from [`value`](Self::value) (clamped to `2^56`).
    pub(crate) fn from_value(value: u64) -> Self {
        Threshold(value.min(MAX))
    }

    /// The probability this threshold keeps a trace with, `(2^56 − T) / 2^56`.
    pub(crate) fn probability(self) -> f64 {
        (MAX - self.0) as f64 / MAX as f64
    }

    /// Whether randomness `r` is kept.
    #[inline]
    pub(crate) fn keeps(self, r: u64) -> bool {
        r >= self.0
    }

    /// The `th` value: 14 hex digits without the trailing zeros (`0` for zero). `None`
    /// for [`NEVER`](Self::NEVER), which no kept span carries.
    #[cfg(all(test, not(loom)))]
    fn encode(self) -> Option<String> {
        let mut out = String::with_capacity(DIGITS);
        self.encode_into(&mut out).then_some(out)
    }

    /// Appends the `th` value to `out` without allocating beyond it; `false` (nothing
    /// written) for [`NEVER`](Self::NEVER).
    fn encode_into(self, out: &mut String) -> bool {
        if self.0 >= MAX {
            return false;
        }
        if self.0 == 0 {
            out.push('0');
            return true;
        }
        // The significant digits: drop the trailing zero nibbles.
        let zeros = (self.0.trailing_zeros() / 4) as usize;
        for i in (zeros..DIGITS).rev() {
            let nibble = ((self.0 >> (4 * i)) & 0xf) as u32;
            out.push(char::from_digit(nibble, 16).unwrap_or('0'));
        }
        true
    }

    /// A `th` value: 1 to 14 hex digits, padded on the right with zeros.
    fn parse(value: &str) -> Option<Self> {
        if value.is_empty() || value.len() > DIGITS || !value.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return None;
        }
        let t = u64::from_str_radix(value, 16).ok()?;
        Some(Threshold(t << (4 * (DIGITS - value.len()))))
    }
}

/// The sub-keys of an `ot` trace-state value (`th:8;rv:0123…`).
fn sub_keys(ot: &str) -> impl Iterator<Item = (&str, &str)> {
    ot.split(';').filter_map(|f| f.split_once(':'))
}

fn ot_value<'a>(state: &'a TraceState, key: &str) -> Option<&'a str> {
    // `TraceState::get` borrows from the state; the iterator borrows `ot`.
    let ot = state.get("ot")?;
    sub_keys(ot).find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// The trace's 56 random bits: `rv` from the `ot` entry of `state` when it is 14 hex
/// digits, else the low 56 bits of `trace_id`.
#[inline]
pub(crate) fn randomness(trace_id: TraceId, state: &TraceState) -> u64 {
    if let Some(rv) = ot_value(state, "rv") {
        if rv.len() == DIGITS && rv.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Ok(r) = u64::from_str_radix(rv, 16) {
                return r;
            }
        }
    }
    (u128::from_be_bytes(trace_id.to_bytes()) as u64) & (MAX - 1)
}

/// What the `th` of a parent's trace state says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParentThreshold {
    /// No `th`: the parent's probability is unknown.
    Absent,
    /// A `th` that is not 1 to 14 hex digits: unknown, and to be erased.
    Malformed,
    Known(Threshold),
}

/// The `th` of `state`'s `ot` entry, parsed.
pub(crate) fn parent_threshold(state: &TraceState) -> ParentThreshold {
    match ot_value(state, "th") {
        None => ParentThreshold::Absent,
        Some(v) => Threshold::parse(v).map_or(ParentThreshold::Malformed, ParentThreshold::Known),
    }
}

/// The outcome of a consistent decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Kept by the threshold; [`Kept::trace_state`] builds what the span carries.
    Keep(Kept),
    /// Refused by the threshold.
    Drop,
}

/// A consistent keep, before its trace state is built (so that a cap checked after the
/// threshold can still refuse without allocating).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The threshold to write, or `None` when the probability is unknown (a second
    /// stage whose parent had no valid `th`): then `th` is erased.
    th: Option<Threshold>,
}

impl Kept {
    /// The kept span's trace state: `parent_state` with `th` written (or erased).
    pub(crate) fn trace_state(self, parent_state: &TraceState) -> TraceState {
        match self.th {
            Some(t) => with_threshold(parent_state, t),
            None => super::trace_state::erase_threshold(parent_state),
        }
    }
}

/// Decides a span against `threshold`.
///
/// `parent_state` is the parent's trace state; with `second_stage` (a sampled remote
/// parent this process decides again) the parent's `th` is honoured as the module docs
/// say. A root (`second_stage == false`) ignores any `th` it is handed and writes its
/// own. Allocates nothing.
#[inline]
pub(crate) fn decide(
    threshold: Threshold,
    trace_id: TraceId,
    parent_state: &TraceState,
    second_stage: bool,
) -> Verdict {
    let r = randomness(trace_id, parent_state);
    let parent = if second_stage {
        parent_threshold(parent_state)
    } else {
        ParentThreshold::Absent
    };
    let effective = match parent {
        ParentThreshold::Known(t) => t.max(threshold),
        _ => threshold,
    };
    if !effective.keeps(r) {
        return Verdict::Drop;
    }
    let known = !second_stage || matches!(parent, ParentThreshold::Known(_));
    Verdict::Keep(Kept {
        th: known.then_some(effective),
    })
}

/// `state` with `th` in its `ot` entry set to `threshold` (first, then the other `ot`
/// sub-keys in their order); other entries are kept. [`Threshold::NEVER`] erases `th`.
pub(crate) fn with_threshold(state: &TraceState, threshold: Threshold) -> TraceState {
    let ot = state.get("ot");
    // One allocation for the value: "th:" + at most 14 digits, then the other sub-keys.
    let mut value = String::with_capacity(3 + DIGITS + ot.map_or(0, |o| o.len() + 1));
    value.push_str("th:");
    if !threshold.encode_into(&mut value) {
        return super::trace_state::erase_threshold(state);
    }
    if let Some(ot) = ot {
        for field in ot
            .split(';')
            .filter(|f| !f.is_empty() && !f.starts_with("th:"))
        {
            value.push(';');
            value.push_str(field);
        }
    }
    // Cannot fail: "ot" is a valid key and the value only adds a valid `th` to a valid
    // one. Should it ever, the sub-key alone is still the truth about this span.
    state
        .insert("ot", value)
        .or_else(|_| {
            let mut alone = String::from("th:");
            threshold.encode_into(&mut alone);
            TraceState::from_key_value([("ot", alone)])
        })
        .unwrap_or_default()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ts(header: &str) -> TraceState {
        header.parse().unwrap()
    }

    /// The trace state a decision gives the span, `None` for a drop.
    fn decide_state(
        t: Threshold,
        id: TraceId,
        parent: &TraceState,
        second: bool,
    ) -> Option<TraceState> {
        match decide(t, id, parent, second) {
            Verdict::Keep(kept) => Some(kept.trace_state(parent)),
            Verdict::Drop => None,
        }
    }

    #[test]
    fn thresholds_encode_as_the_spec_examples() {
        let th = |p: f64| Threshold::from_probability(p).encode();
        assert_eq!(th(1.0).as_deref(), Some("0"));
        assert_eq!(th(0.5).as_deref(), Some("8"));
        assert_eq!(th(0.25).as_deref(), Some("c"));
        assert_eq!(th(0.75).as_deref(), Some("4"));
        assert_eq!(th(0.1).as_deref(), Some("e6666666666666"));
        assert_eq!(th(0.01).as_deref(), Some("fd70a3d70a3d71"));
        assert_eq!(th(2f64.powi(-56)).as_deref(), Some("ffffffffffffff"));
        assert_eq!(th(1e-30).as_deref(), Some("ffffffffffffff"), "never zero");
        assert_eq!(th(0.0), None);
        assert_eq!(th(f64::NAN), None);
        assert_eq!(
            Threshold::from_ratio(1, 4),
            Threshold::from_probability(0.25)
        );
        assert_eq!(
            Threshold::from_ratio(1, 10),
            Threshold::from_probability(0.1)
        );
        assert_eq!(Threshold::from_ratio(5, 3), Threshold::ALWAYS);
        assert_eq!(Threshold::from_ratio(0, 3), Threshold::NEVER);
        assert_eq!(
            Threshold::from_ratio(1, u64::MAX).encode().as_deref(),
            Some("ffffffffffffff")
        );
    }

    #[test]
    fn parse_pads_on_the_right() {
        assert_eq!(Threshold::parse("8"), Some(Threshold(1 << 55)));
        assert_eq!(Threshold::parse("0"), Some(Threshold::ALWAYS));
        for bad in ["", "g", "123456789abcdef", "-1", "+1"] {
            assert_eq!(Threshold::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn randomness_is_rv_or_the_low_56_bits() {
        let id = TraceId::from(0x1234_5678_9abc_def0_ffee_ddcc_bbaa_9988u128);
        assert_eq!(randomness(id, &TraceState::NONE), 0xee_ddcc_bbaa_9988);
        assert_eq!(
            randomness(id, &ts("ot=th:8;rv:0123456789abcd")),
            0x01_2345_6789_abcd
        );
        // Malformed rv: the trace id.
        for bad in [
            "ot=rv:0123",
            "ot=rv:0123456789abcz",
            "ot=rv:0123456789abcde",
        ] {
            assert_eq!(randomness(id, &ts(bad)), 0xee_ddcc_bbaa_9988, "{bad}");
        }
    }

    #[test]
    fn roots_write_th_merged_with_other_sub_keys_and_vendors() {
        let half = Threshold::from_probability(0.5);
        let kept = TraceId::from(0x80_0000_0000_0000u128);
        let refused = TraceId::from(0x7f_ffff_ffff_ffffu128);
        assert_eq!(
            decide(half, refused, &TraceState::NONE, false),
            Verdict::Drop
        );
        assert_eq!(
            decide_state(half, kept, &TraceState::NONE, false),
            Some(ts("ot=th:8"))
        );
        let state = decide_state(half, kept, &ts("a=1,ot=rv:ffffffffffffff;x:y"), false);
        assert_eq!(state.unwrap().header(), "ot=th:8;rv:ffffffffffffff;x:y,a=1");
        assert_eq!(
            with_threshold(&ts("ot=th:4;rv:01"), Threshold::ALWAYS).header(),
            "ot=th:0;rv:01"
        );
    }

    #[test]
    fn a_second_stage_raises_a_parent_threshold_and_never_lowers_it() {
        let quarter = Threshold::from_probability(0.25); // th:c
        let half = Threshold::from_probability(0.5); // th:8
        let r_between = "rv:a0000000000000"; // kept by 1/2, not by 1/4
        let r_high = "rv:f0000000000000";
        let id = TraceId::from(1u128);
        let keep = |t, parent: &str| decide_state(t, id, &ts(parent), true);
        // Parent 1/2, ours 1/4: raised to c.
        assert_eq!(keep(quarter, &format!("ot=th:8;{r_between}")), None);
        assert_eq!(
            keep(quarter, &format!("ot=th:8;{r_high}")),
            Some(ts(&format!("ot=th:c;{r_high}")))
        );
        // Parent 1/4, ours 1/2: the parent's c stays (never lowered).
        assert_eq!(
            keep(half, &format!("ot=th:c;{r_high}")),
            Some(ts(&format!("ot=th:c;{r_high}")))
        );
        assert_eq!(keep(half, &format!("ot=th:c;{r_between}")), None);
        // Parent without th: unknown probability, no th written; a malformed one erased.
        assert_eq!(
            keep(half, &format!("ot={r_high},b=2")),
            Some(ts(&format!("ot={r_high},b=2")))
        );
        assert_eq!(
            keep(half, &format!("ot=th:zz;{r_high}")),
            Some(ts(&format!("ot={r_high}")))
        );
    }

    proptest! {
        #[test]
        fn encode_parse_round_trips_and_lower_probabilities_keep_subsets(
            t in 0u64..MAX,
            r in 0u64..MAX,
            p in 0.0f64..=1.0,
            q in 0.0f64..=1.0,
        ) {
            let th = Threshold(t);
            prop_assert_eq!(Threshold::parse(&th.encode().unwrap()), Some(th));
            let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
            let (lo, hi) = (Threshold::from_probability(lo), Threshold::from_probability(hi));
            prop_assert!(!lo.keeps(r) || hi.keeps(r));
            let got = Threshold::from_probability(p).probability();
            prop_assert!((got - p).abs() <= 2f64.powi(-56), "{} vs {}", got, p);
        }
    }
}
