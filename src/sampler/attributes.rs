//! The span attributes the samplers record on the roots they keep, by their own
//! decision, so a backend can tell how each trace was sampled (the Jaeger convention,
//! plus the rule's name).
//!
//! | attribute | value |
//! |---|---|
//! | [`SAMPLER_TYPE`] | [`RATELIMITING`], [`PROBABILISTIC`], [`ADAPTIVE`] or [`LOWERBOUND`] |
//! | [`SAMPLER_PARAM`] | the limit (or an adaptive sampler's cap, or a lower bound) in traces per second, or the probability (`f64`) |
//! | [`SAMPLER_RULE`] | the rule that decided (`default` when none matched); rule-based sampler only |
//! | [`SAMPLER_KEY_PROBABILITY`] | with `fair_by`: the probability the span's key was kept with in its window (`f64`, in `(0, 1]`); the sum of its inverse over kept spans estimates each key's offered count |
//!
//! The rule-based sampler's rule names are kept for the process's life once a rule set
//! naming them is built, so a kept span's [`SAMPLER_RULE`] copies a pointer: at most
//! 64 KiB of names (4096 names) over the whole process, however many rule sets a reload
//! loop builds; past that, a name is shared by reference count.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use opentelemetry::{KeyValue, StringValue, Value};

/// The span attribute that says how a kept root was sampled.
pub const SAMPLER_TYPE: &str = "sampler.type";
/// The span attribute holding the limit in traces per second, or the probability.
pub const SAMPLER_PARAM: &str = "sampler.param";
/// The span attribute naming the rule that kept a root (`default` for the default).
pub const SAMPLER_RULE: &str = "sampler.rule";
/// The span attribute holding, with `fair_by`, the probability with which the span's
/// key was kept in its window: `1 / p` is the number of the key's roots it stands for.
pub const SAMPLER_KEY_PROBABILITY: &str = "sampler.key_probability";
/// The value of [`SAMPLER_TYPE`] for a root kept by a rate limit.
pub const RATELIMITING: &str = "ratelimiting";
/// The value of [`SAMPLER_TYPE`] for a root kept by a probability.
pub const PROBABILISTIC: &str = "probabilistic";
/// The value of [`SAMPLER_TYPE`] for a root kept by an adaptive probability under a cap
/// ([`AdaptiveSampler`](crate::AdaptiveSampler)); its probability is in the `th` of the
/// `ot` trace-state entry.
pub const ADAPTIVE: &str = "adaptive";
/// The value of [`SAMPLER_TYPE`] for a root its rule's probability refused and its lower
/// bound (`at_least`) kept, as Jaeger's guaranteed-throughput sampler names it; the
/// [`SAMPLER_PARAM`] is the lower bound in traces per second, the parameter of the
/// decision that kept it (Jaeger's clients differ here: some write the probability).
pub const LOWERBOUND: &str = "lowerbound";

/// What a root kept under a limit (or probability) of `param` records, built once per
/// limiter so a kept span only clones it.
pub(crate) fn kept(sampler_type: &'static str, param: f64) -> Vec<KeyValue> {
    vec![
        KeyValue::new(SAMPLER_TYPE, sampler_type),
        KeyValue::new(SAMPLER_PARAM, param),
    ]
}

/// What a root kept under a fair limit of `param` records: [`kept`] and its key's
/// `probability`.
pub(crate) fn kept_fair(param: f64, probability: f64) -> Vec<KeyValue> {
    vec![
        KeyValue::new(SAMPLER_TYPE, RATELIMITING),
        KeyValue::new(SAMPLER_PARAM, param),
        KeyValue::new(SAMPLER_KEY_PROBABILITY, probability),
    ]
}

/// What a root kept by a rule records: [`kept`] plus the rule's name, held as parts
/// so a keep builds its `Vec` directly (cloning a prepared `Vec<KeyValue>` element by
/// element went through each value's clone and cost a rule-based admit more than the
/// rest of its decision).
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule-based sampler
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RuleAttributes {
    sampler_type: &'static str,
    param: f64,
    /// The rule's name: a `&'static str` from [`intern`] (a keep copies a pointer), or,
    /// past the interner's cap, shared (a keep clones a reference count).
    rule: RuleName,
}

/// A rule's name as [`RuleAttributes`] holds it: the two kinds of [`StringValue`] it
/// makes, whose copy into a kept span's attributes cannot allocate or unwind (a
/// `StringValue`'s clone can, for its owned kind; the unwinding path kept the kept
/// span's `Vec` on the stack, read back in halves of what was written in words).
#[derive(Clone, Debug, PartialEq)]
enum RuleName {
    Interned(&'static str),
    Shared(Arc<str>),
}

/// The most name bytes [`intern`] leaks for the process's life: a reload loop with
/// ever-new rule names cannot grow memory past it (nor past [`INTERN_MAX_NAMES`]).
pub(crate) const INTERN_MAX_BYTES: usize = 64 * 1024;
/// The most names [`intern`] holds.
pub(crate) const INTERN_MAX_NAMES: usize = 4096;

/// The interned rule names and their total bytes.
static INTERNED: Mutex<(BTreeSet<&'static str>, usize)> = Mutex::new((BTreeSet::new(), 0));

/// `name` as a `&'static str` shared by every rule set of the process that names a rule
/// so, leaked once; `None` once the names interned would pass [`INTERN_MAX_BYTES`] or
/// [`INTERN_MAX_NAMES`] (the caller then shares the name by reference count).
fn intern(name: &str) -> Option<&'static str> {
    // A poisoned lock still holds a consistent set: every change is one insert.
    let mut guard = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    let (names, bytes) = &mut *guard;
    if let Some(&interned) = names.get(name) {
        return Some(interned);
    }
    if names.len() >= INTERN_MAX_NAMES || *bytes + name.len() > INTERN_MAX_BYTES {
        return None;
    }
    let leaked: &'static str = Box::leak(name.into());
    names.insert(leaked);
    *bytes += name.len();
    Some(leaked)
}

/// The names interned and their total bytes (for the rule set's test of the cap).
#[cfg(all(test, not(loom), feature = "config"))]
pub(crate) fn interned() -> (usize, usize) {
    let guard = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    (guard.0.len(), guard.1)
}

#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule-based sampler
impl RuleAttributes {
    pub(crate) fn new(sampler_type: &'static str, param: f64, rule: &str) -> Self {
        Self {
            sampler_type,
            param,
            rule: intern(rule).map_or_else(|| RuleName::Shared(rule.into()), RuleName::Interned),
        }
    }

    /// The attributes of a kept span, in the order [`kept`] gives them, then
    /// [`SAMPLER_RULE`].
    #[inline]
    #[allow(clippy::vec_init_then_push)] // `vec!` is the slower form here, see below
    pub(crate) fn to_vec(&self) -> Vec<KeyValue> {
        // Pushed into a `Vec` allocated first, each attribute is written straight into
        // it. Built by `vec!` around the name's clone (a `StringValue` clone may
        // unwind), the three were built on the stack in words and copied into the heap
        // in halves, a store-forwarding stall of ~3 ns per keep; with the name cloned
        // first, it still went through the stack across the allocation (~2 ns).
        let mut kept = Vec::with_capacity(3);
        kept.push(KeyValue::new(SAMPLER_TYPE, self.sampler_type));
        kept.push(KeyValue::new(SAMPLER_PARAM, self.param));
        kept.push(KeyValue::new(
            SAMPLER_RULE,
            Value::String(match &self.rule {
                RuleName::Interned(name) => StringValue::from(*name),
                RuleName::Shared(name) => StringValue::from(Arc::clone(name)),
            }),
        ));
        kept
    }
}
