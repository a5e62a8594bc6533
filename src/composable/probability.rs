//! `ComposableProbability`.

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use crate::composable::{ComposableError, ComposableSampler, SamplingIntent, Threshold};

/// Keeps spans with a fixed probability (the specification's `ComposableProbability`,
/// earlier `ComposableTraceIDRatioBased`): "Returns a `SamplingIntent` with threshold
/// determined by the configured sampling ratio" (`2^56 − round(ratio · 2^56)`), "Sets
/// `adjusted_count_reliable` to `true`", "Does not add any attributes". Two processes with the same
/// ratio keep the same traces; a lower ratio keeps a subset of a higher one's.
///
/// A ratio of 0 is non-probabilistic, and behaves as
/// [`ComposableAlwaysOff`](crate::ComposableAlwaysOff) (no threshold, not reliable) as
/// the specification says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ComposableProbability {
    ratio: f64,
    threshold: Option<Threshold>,
}

impl ComposableProbability {
    /// Keeps spans with probability `ratio`.
    ///
    /// # Errors
    ///
    /// [`ComposableError::InvalidRatio`] unless `ratio` is 0 or in `[2^-56, 1]`.
    pub fn new(ratio: f64) -> Result<Self, ComposableError> {
        let threshold = if ratio == 0.0 {
            None
        } else {
            Some(Threshold::from_ratio(ratio)?)
        };
        Ok(Self { ratio, threshold })
    }

    /// The ratio it was built with.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Its threshold; `None` for a ratio of 0.
    pub fn threshold(&self) -> Option<Threshold> {
        self.threshold
    }
}

impl ComposableSampler for ComposableProbability {
    #[inline]
    fn sampling_intent(
        &self,
        _: Option<&Context>,
        _: &str,
        _: &SpanKind,
        _: &[KeyValue],
        _: &[Link],
    ) -> SamplingIntent<'_> {
        SamplingIntent::new(self.threshold, self.threshold.is_some())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};

    use super::*;
    use crate::composable::test_support::{decide, intent};
    use crate::composable::ComposableAlwaysOff;

    #[test]
    fn the_ratio_becomes_the_specifications_threshold_reliably() {
        let tenth = ComposableProbability::new(0.1).unwrap();
        let i = intent(&tenth, None, &[]);
        assert_eq!(
            i.threshold().map(Threshold::value),
            Some(0xe6_6666_6666_6666)
        );
        assert!(i.adjusted_count_reliable());
        let kept = decide(&tenth, None, 0xe6_6666_6666_6666, &[]);
        assert_eq!(kept.decision, RecordAndSample);
        assert_eq!(kept.trace_state.header(), "ot=th:e6666666666666");
        assert_eq!(
            decide(&tenth, None, 0xe6_6666_6666_6665, &[]).decision,
            Drop
        );
        let quarter = ComposableProbability::new(0.25).unwrap();
        assert_eq!(
            decide(&quarter, None, 3 << 54, &[]).trace_state.header(),
            "ot=th:c"
        );
        let one = ComposableProbability::new(1.0).unwrap();
        assert_eq!(decide(&one, None, 0, &[]).trace_state.header(), "ot=th:0");
    }

    #[test]
    fn zero_is_always_off_and_bad_ratios_are_errors() {
        let zero = ComposableProbability::new(0.0).unwrap();
        let i = intent(&zero, None, &[]);
        let off = intent(&ComposableAlwaysOff, None, &[]);
        assert_eq!(
            (i.threshold(), i.adjusted_count_reliable()),
            (off.threshold(), off.adjusted_count_reliable())
        );
        assert_eq!(decide(&zero, None, (1 << 56) - 1, &[]).decision, Drop);
        for bad in [-0.1, 1.0001, f64::NAN, 1e-20] {
            assert!(
                matches!(
                    ComposableProbability::new(bad),
                    Err(ComposableError::InvalidRatio { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn two_samplers_with_one_ratio_keep_the_same_traces_and_a_lower_ratio_a_subset() {
        let a = ComposableProbability::new(0.3).unwrap();
        let b = ComposableProbability::new(0.3).unwrap();
        let low = ComposableProbability::new(0.1).unwrap();
        let mut kept = 0;
        for i in 0..10_000u64 {
            let r = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8; // spread over 56 bits
            let ka = decide(&a, None, r, &[]).decision == RecordAndSample;
            assert_eq!(ka, decide(&b, None, r, &[]).decision == RecordAndSample);
            let kl = decide(&low, None, r, &[]).decision == RecordAndSample;
            assert!(!kl || ka, "the lower ratio kept what the higher dropped");
            kept += usize::from(ka);
        }
        // 3000 expected; 5 standard deviations (sqrt(10000 · 0.3 · 0.7) ≈ 46).
        assert!((2770..=3230).contains(&kept), "{kept}");
    }
}
