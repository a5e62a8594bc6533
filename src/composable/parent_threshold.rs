//! `ComposableParentThreshold`.

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use crate::composable::parent::with_span_context;
use crate::composable::{ComposableSampler, SamplingIntent, Threshold};
use crate::sampler::{parent_threshold, randomness, ParentThreshold};

/// Follows the parent (the specification's `ComposableParentThreshold`): "For spans
/// without a parent context, delegate to the root sampler"; "For spans with a parent
/// context, returns a `SamplingIntent` that propagates the parent's sampling decision";
/// "Returns the parent's threshold if available; otherwise, if the parent's *sampled*
/// flag is set, returns threshold=0; otherwise, if the parent's *sampled* flag is not
/// set, no threshold is returned"; "Sets `adjusted_count_reliable` to match the
/// parent's reliability, which is true if the parent had a threshold":
///
/// | parent | intent |
/// |---|---|
/// | none, or an invalid span context (a root) | the `root` delegate's |
/// | sampled, with a valid `th` its randomness reaches | that threshold, reliable |
/// | sampled, without `th` (or a malformed one, or one above its randomness) | threshold 0, not reliable: kept, `th` erased |
/// | not sampled | no threshold: dropped |
///
/// No attributes of its own. A child therefore keeps its parent's threshold, and a
/// trace stays whole. A sampled parent whose `th` is above its randomness (`rv`, else
/// the low 56 bits of the trace id, both read from the parent's span context: the
/// intent is given no trace id) is apparently inconsistent: as the specification's
/// tracestate handling asks ("a parent-based sampler that receives and propagates a
/// sampled context with threshold should check that the sampled flag matches the
/// expression `rv >= th`, otherwise it should erase the threshold"), the child follows
/// the sampled flag and erases `th` (dropping the child would break the trace, keeping
/// `th` would claim a probability that did not decide it). That check is on the
/// parent's context only: for a consistent parent, the threshold is the parent's
/// whatever the randomness.
///
/// Where the specification is ambiguous, ours: it says both "propagates the parent's
/// sampling decision" and "returns the parent's threshold if available"; a parent that
/// is *not* sampled but carries a `th` (which a conforming sampler erases on a drop)
/// is dropped here, so a child never revives a trace its parent dropped. (Java's
/// incubator returns that `th`.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComposableParentThreshold<R> {
    root: R,
}

impl<R: ComposableSampler> ComposableParentThreshold<R> {
    /// Follows the parent, and asks `root` for spans without one.
    pub const fn new(root: R) -> Self {
        Self { root }
    }

    /// The delegate for roots.
    pub fn root(&self) -> &R {
        &self.root
    }
}

impl<R: ComposableSampler> ComposableSampler for ComposableParentThreshold<R> {
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent<'_> {
        let followed = with_span_context(parent, |sc| {
            let sc = sc.filter(|sc| sc.is_valid())?;
            if !sc.is_sampled() {
                return Some(SamplingIntent::NON_SAMPLING);
            }
            Some(match parent_threshold(sc.trace_state()) {
                // Sampled at this threshold only if its randomness reaches it.
                ParentThreshold::Known(t)
                    if t.keeps(randomness(sc.trace_id(), sc.trace_state())) =>
                {
                    SamplingIntent::new(Some(Threshold(t)), true)
                }
                ParentThreshold::Known(_)
                | ParentThreshold::Absent
                | ParentThreshold::Malformed => SamplingIntent::new(Some(Threshold::ALWAYS), false),
            })
        });
        followed.unwrap_or_else(|| {
            self.root
                .sampling_intent(parent, name, kind, attributes, links)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry::trace::{SpanContext, TraceContextExt};
    use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};

    use super::*;
    use crate::composable::test_support::{decide, intent, parent, parent_in};
    use crate::composable::{ComposableAlwaysOff, ComposableAlwaysOn, ComposableProbability};

    #[test]
    fn roots_go_to_the_root_delegate() {
        let on = ComposableParentThreshold::new(ComposableAlwaysOn);
        let off = ComposableParentThreshold::new(ComposableAlwaysOff);
        let invalid = Context::new().with_remote_span_context(SpanContext::empty_context());
        for p in [None, Some(&invalid), Some(&Context::new())] {
            assert_eq!(decide(&on, p, 0, &[]).decision, RecordAndSample);
            assert_eq!(decide(&off, p, (1 << 56) - 1, &[]).decision, Drop);
        }
    }

    #[test]
    fn a_sampled_parent_passes_its_threshold_on_reliably() {
        let s = ComposableParentThreshold::new(ComposableAlwaysOff);
        for remote in [false, true] {
            let p = parent(true, remote, "ot=th:c;rv:f0000000000000,v=1");
            let i = intent(&s, Some(&p), &[]);
            assert_eq!(i.threshold().map(Threshold::value), Some(3 << 54));
            assert!(i.adjusted_count_reliable());
            let r = decide(&s, Some(&p), 0, &[]);
            assert_eq!(r.decision, RecordAndSample, "rv f0.. is above c");
            assert_eq!(r.trace_state.header(), "ot=th:c;rv:f0000000000000,v=1");
        }
        // The child of a 1/4 root keeps the parent's 1/4, not its own root's 1/2; the
        // randomness checked against th is the parent's trace id's.
        let s = ComposableParentThreshold::new(ComposableProbability::new(0.5).unwrap());
        let p = parent_in(3 << 54, true, false, "ot=th:c");
        let i = intent(&s, Some(&p), &[]);
        assert_eq!(i.threshold().map(Threshold::value), Some(3 << 54));
        assert!(i.adjusted_count_reliable());
        assert_eq!(
            decide(&s, Some(&p), 3 << 54, &[]).trace_state.header(),
            "ot=th:c"
        );
    }

    #[test]
    fn a_sampled_parent_without_a_valid_th_is_followed_without_th() {
        let s = ComposableParentThreshold::new(ComposableAlwaysOff);
        for state in ["", "ot=rv:00000000000000", "ot=th:zz", "v=1"] {
            let p = parent(true, true, state);
            let i = intent(&s, Some(&p), &[]);
            assert_eq!(
                (i.threshold(), i.adjusted_count_reliable()),
                (Some(Threshold::ALWAYS), false)
            );
            let r = decide(&s, Some(&p), 0, &[]);
            assert_eq!(r.decision, RecordAndSample, "{state}");
            assert!(!r.trace_state.header().contains("th:"), "{state}");
        }
    }

    #[test]
    fn a_sampled_parent_whose_th_is_above_its_randomness_is_followed_without_th() {
        let s = ComposableParentThreshold::new(ComposableAlwaysOff);
        // rv below th:c; then no rv, the parent's trace id's randomness one below th:c.
        for (state, r) in [
            ("ot=th:c;rv:10000000000000", 1 << 55),
            ("ot=th:c", (3 << 54) - 1),
        ] {
            let p = parent_in(r, true, true, state);
            let i = intent(&s, Some(&p), &[]);
            assert_eq!(
                (i.threshold(), i.adjusted_count_reliable()),
                (Some(Threshold::ALWAYS), false)
            );
            let result = decide(&s, Some(&p), r, &[]);
            assert_eq!(result.decision, RecordAndSample, "{state}");
            assert!(!result.trace_state.header().contains("th:"), "{state}");
        }
    }

    #[test]
    fn an_unsampled_parent_is_dropped_even_with_a_th() {
        let s = ComposableParentThreshold::new(ComposableAlwaysOn);
        for state in ["", "ot=th:0", "ot=th:8;rv:ffffffffffffff"] {
            for remote in [false, true] {
                let p = parent(false, remote, state);
                assert_eq!(intent(&s, Some(&p), &[]).threshold(), None);
                assert_eq!(
                    decide(&s, Some(&p), (1 << 56) - 1, &[]).decision,
                    Drop,
                    "{state}"
                );
            }
        }
    }
}
