//! `ComposableAlwaysOn` and `ComposableAlwaysOff`.

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use crate::composable::{ComposableSampler, SamplingIntent, Threshold};

/// Keeps every span (the specification's `ComposableAlwaysOn`): "Always returns a
/// `SamplingIntent` with threshold set to sample all spans (threshold = 0)", "Sets
/// `adjusted_count_reliable` to `true`", "Does not add any attributes". Kept spans carry
/// `th:0`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComposableAlwaysOn;

/// Drops every span (the specification's `ComposableAlwaysOff`): "Always returns a
/// `SamplingIntent` with no threshold, indicating all spans should be dropped", "Sets
/// `adjusted_count_reliable` to `false`", "Does not add any attributes".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComposableAlwaysOff;

impl ComposableSampler for ComposableAlwaysOn {
    #[inline]
    fn sampling_intent(
        &self,
        _: Option<&Context>,
        _: &str,
        _: &SpanKind,
        _: &[KeyValue],
        _: &[Link],
    ) -> SamplingIntent<'_> {
        SamplingIntent::new(Some(Threshold::ALWAYS), true)
    }
}

impl ComposableSampler for ComposableAlwaysOff {
    #[inline]
    fn sampling_intent(
        &self,
        _: Option<&Context>,
        _: &str,
        _: &SpanKind,
        _: &[KeyValue],
        _: &[Link],
    ) -> SamplingIntent<'_> {
        SamplingIntent::NON_SAMPLING
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};

    use super::*;
    use crate::composable::test_support::{decide, intent, parent};

    #[test]
    fn always_on_keeps_everything_with_th_0_reliably() {
        let i = intent(&ComposableAlwaysOn, None, &[]);
        assert_eq!(i.threshold(), Some(Threshold::ALWAYS));
        assert!(i.adjusted_count_reliable() && i.attributes_provider().is_none());
        let r = decide(&ComposableAlwaysOn, None, 0, &[]);
        assert_eq!(
            (r.decision, r.trace_state.header()),
            (RecordAndSample, "ot=th:0".into())
        );
        assert!(r.attributes.is_empty());
        // Even under an unsampled parent: always on is not parent-based.
        let p = parent(false, false, "");
        assert_eq!(
            decide(&ComposableAlwaysOn, Some(&p), 0, &[]).decision,
            RecordAndSample
        );
    }

    #[test]
    fn always_off_drops_everything_without_a_threshold() {
        let i = intent(&ComposableAlwaysOff, None, &[]);
        assert_eq!(i.threshold(), None);
        assert!(!i.adjusted_count_reliable() && i.attributes_provider().is_none());
        let p = parent(true, true, "ot=th:0");
        let r = decide(&ComposableAlwaysOff, Some(&p), (1 << 56) - 1, &[]);
        assert_eq!(r.decision, Drop);
        assert_eq!(r.trace_state.header(), "");
    }
}
