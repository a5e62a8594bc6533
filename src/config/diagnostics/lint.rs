//! [`Lint`]s: what a configuration that loads may still get wrong (rules that never
//! decide, floors that do not fit, memory, limits that cannot be split across replicas).

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock};
use crate::config::check;
use crate::config::check::floors::FloorProblem;
use crate::config::check::resolution::below_resolution;
use crate::config::diagnostics::summary::{EffectiveRules, RulePolicy};
use crate::config::model::pattern::Pattern;
use crate::config::model::{LimitOf, LimitSpec, Policy, Rule, SamplingConfig, ServiceConfig};

/// A service whose limiters take more than this many bytes gets a
/// [`LintKind::LargeMemory`] warning: 16 MiB.
pub const LARGE_MEMORY_BYTES: usize = 16 << 20;

/// How serious a [`Lint`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The sampler works as written, but probably not as meant.
    Warning,
    /// Part of the file never takes effect, or cannot: fix it.
    Error,
}

/// What a [`Lint`] found. The severity of each is fixed, and given here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LintKind {
    /// Error: an earlier rule has no condition at all (it matches every span), so this
    /// rule never decides. (The loaders refuse such a file; this catches any other
    /// source of a configuration.)
    Unreachable,
    /// Error: every span this rule matches is matched by an earlier rule first (its
    /// conditions imply this rule's), so this rule never decides.
    Shadowed,
    /// Error: the rules' floors add up to more than the cap's permits; the sampler
    /// cannot be built. (The TOML loader refuses such a file; this catches any other
    /// source of a configuration.)
    FloorsOverCap,
    /// Warning: a rule's floor reserves more of the cap than the rule's own limit lets
    /// through (compared as rates); the excess is held back from the shared pool and
    /// never used.
    FloorOverLimit,
    /// Error: the floors reserve every permit of the cap, so the cap's shared pool is
    /// empty: spans decided by the service's default policy (and by rules without a
    /// floor) are never kept.
    SharedPoolEmpty,
    /// Warning: the cap's shared pool (the cap less the floors) lets through fewer than
    /// the default policy's limit (compared as rates), so spans no rule matches keep at
    /// most the pool, not the default's limit (a cap of 10 with floors of 9 keeps 1 per
    /// window for them).
    SharedPoolBelowDefault,
    /// Warning: a service's limiters take more than [`LARGE_MEMORY_BYTES`].
    LargeMemory,
    /// Error: a local limit's window is shorter than the resolution of the default clock
    /// ([`MonotonicClock`](crate::MonotonicClock), one kernel tick, 4 ms on most Linux
    /// systems), so [`RuleBasedSampler::new`](crate::RuleBasedSampler::new) refuses it
    /// (a limiter that sees time in steps longer than its window enforces another rate).
    /// A finer clock ([`RuleBasedSampler::with_clock`](crate::RuleBasedSampler::with_clock)
    /// with a [`PreciseClock`](crate::PreciseClock)) serves it.
    WindowBelowClock,
    /// Error: a limit divided by the replica count is out of [`Limit::per_second`](crate::Limit::per_second)'s
    /// range, so no per-replica limit expresses it. Fleet-scoped limits are never
    /// divided: they already hold for the whole fleet.
    CannotSplit,
    /// Warning: a lower bound (`at_least`) asks for more traces than the service cap
    /// lets through (compared as rates), so the cap, not the lower bound, decides how
    /// many of that rule's traces are kept when its probability keeps few.
    LowerBoundOverCap,
}

impl LintKind {
    /// The severity of this kind of lint.
    pub fn severity(self) -> Severity {
        match self {
            LintKind::FloorOverLimit
            | LintKind::SharedPoolBelowDefault
            | LintKind::LargeMemory
            | LintKind::LowerBoundOverCap => Severity::Warning,
            LintKind::Unreachable
            | LintKind::Shadowed
            | LintKind::FloorsOverCap
            | LintKind::WindowBelowClock
            | LintKind::SharedPoolEmpty
            | LintKind::CannotSplit => Severity::Error,
        }
    }
}

/// One finding of [`SamplingConfig::lints`]: where (service, rule), what and why.
///
/// Its `Display` reads `SEVERITY: service "NAME": rule "RULE": MESSAGE` (the file
/// default's service is shown as `[default]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Lint {
    kind: LintKind,
    service: String,
    rule: Option<String>,
    message: String,
}

impl Lint {
    fn new(kind: LintKind, service: &str, rule: Option<&str>, message: String) -> Self {
        Self {
            kind,
            service: service.to_owned(),
            rule: rule.map(str::to_owned),
            message,
        }
    }

    /// What was found.
    pub fn kind(&self) -> LintKind {
        self.kind
    }

    /// How serious it is ([`LintKind::severity`]).
    pub fn severity(&self) -> Severity {
        self.kind.severity()
    }

    /// The service, empty for the file default.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The rule, if the lint is about one (`default` for a service's default policy,
    /// `cap` for its cap).
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }
}

impl fmt::Display for Lint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity() {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        if self.service.is_empty() {
            write!(f, "{severity}: [default]: ")?;
        } else {
            write!(f, "{severity}: service {:?}: ", self.service)?;
        }
        if let Some(rule) = &self.rule {
            write!(f, "rule {rule:?}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl SamplingConfig {
    /// What the file may still get wrong although it loads, for the file default and
    /// each listed service, in file order: see [`LintKind`] for each check and its
    /// severity. `replicas` is the number of processes the limits are to be split
    /// across (1: no split).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use otel_rate_sampler::lint::LintKind;
    /// use otel_rate_sampler::SamplingConfig;
    ///
    /// let config = SamplingConfig::from_toml_str(r#"
    ///     [default]
    ///     rate = 10.0
    ///     [[default.rule]]
    ///     name = "all-gets"
    ///     span_name = "GET *"
    ///     rate = 1.0
    ///     [[default.rule]]
    ///     name = "never"
    ///     span_name = "GET /"
    ///     rate = 5.0
    /// "#, "inline")?;
    /// let lints = config.lints(NonZeroU32::MIN);
    /// assert_eq!(lints.len(), 1);
    /// assert_eq!(lints[0].kind(), LintKind::Shadowed);
    /// assert_eq!(lints[0].rule(), Some("never"));
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    pub fn lints(&self, replicas: NonZeroU32) -> Vec<Lint> {
        let mut lints = Vec::new();
        let resolution = MonotonicClock::new().resolution();
        lint_service(&self.default, false, replicas, resolution, &mut lints);
        for s in &self.services {
            lint_service(&self.listed(s), true, replicas, resolution, &mut lints);
        }
        lints
    }
}

fn lint_service(
    s: &ServiceConfig,
    listed: bool,
    replicas: NonZeroU32,
    resolution: Duration,
    out: &mut Vec<Lint>,
) {
    shadowed_rules(s, out);
    let effective = EffectiveRules::of(s, listed);
    for (of, spec) in below_resolution(s, resolution) {
        let name = match &of {
            LimitOf::Rule(name) => name.as_str(),
            LimitOf::Default => "default",
            LimitOf::Cap => "cap",
        };
        out.push(Lint::new(
            LintKind::WindowBelowClock,
            &s.name,
            Some(name),
            format!(
                "window {:?} is shorter than the default clock's resolution ({resolution:?} here), so RuleBasedSampler::new refuses it; use a window of at least {resolution:?}, or build the sampler with a finer clock (with_clock and PreciseClock)",
                spec.limit.window()
            ),
        ));
    }
    floors(s, out);
    lower_bounds(s, out);
    let bytes: usize = effective.limiters().iter().map(|l| l.bytes()).sum();
    if bytes > LARGE_MEMORY_BYTES {
        out.push(Lint::new(
            LintKind::LargeMemory,
            &s.name,
            None,
            format!(
                "its limiters take {} MiB (over {} MiB); a sliding log keeps 16 bytes per permit: use \"bucketed\" (a sliding cap in O(sub-windows) memory), \"sliding\" or fewer permits per window",
                bytes >> 20,
                LARGE_MEMORY_BYTES >> 20
            ),
        ));
    }
    if replicas.get() > 1 {
        split(&effective, replicas, out);
    }
}

/// Rules that an earlier rule always matches first.
fn shadowed_rules(s: &ServiceConfig, out: &mut Vec<Lint>) {
    for (j, later) in s.rules.iter().enumerate() {
        let Some((i, earlier)) = s.rules[..j]
            .iter()
            .enumerate()
            .find(|(_, earlier)| covers(earlier, later))
        else {
            continue;
        };
        let (kind, why) = if earlier.matches_everything() {
            (LintKind::Unreachable, "matches every span")
        } else {
            (
                LintKind::Shadowed,
                "matches every span this rule matches (its conditions imply this rule's)",
            )
        };
        let fix = if later.inherited {
            "it is inherited from [default]: narrow the earlier rule, or set inherit_default_rules = false on the service"
        } else {
            "move it up or narrow the earlier rule"
        };
        out.push(Lint::new(
            kind,
            &s.name,
            Some(&later.name),
            format!(
                "rule {} never decides: rule {} {:?} before it {why}; {fix}",
                j + 1,
                i + 1,
                earlier.name
            ),
        ));
    }
}

/// Whether every span `b` matches is matched by `a` (conservative: `false` when unsure).
fn covers(a: &Rule, b: &Rule) -> bool {
    a.parent.is_none_or(|p| b.parent == Some(p))
        && a.kind.as_ref().is_none_or(|k| b.kind.as_ref() == Some(k))
        && a.span_name
            .as_ref()
            .is_none_or(|pa| b.span_name.as_ref().is_some_and(|pb| implies(pb, pa)))
        && a.attributes.iter().all(|(key, pa)| {
            b.attributes
                .iter()
                .any(|(kb, pb)| kb == key && implies(pb, pa))
        })
}

const META: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

/// Whether every text `narrow` matches is matched by `wide` (conservative).
fn implies(narrow: &Pattern, wide: &Pattern) -> bool {
    let (n, w) = (narrow.as_str(), wide.as_str());
    if n == w {
        return true;
    }
    if !n.contains(META) {
        // A literal: the one text it matches.
        return wide.is_match(n);
    }
    // Beyond literals, only `*` and `pre*` under a shorter `p*`. Each is checked against
    // the pattern itself, so that a literal with a `*` in it (a Jaeger operation name)
    // is never taken for a glob.
    let any = !w.is_empty() && w.chars().all(|c| c == '*') && wide.is_match("");
    any || match (plain_prefix(n), plain_prefix(w)) {
        (Some(n), Some(w)) => n.starts_with(w) && wide.is_match(n),
        _ => false,
    }
}

/// `p` for a glob `p*` whose `p` has no glob syntax.
fn plain_prefix(glob: &str) -> Option<&str> {
    glob.strip_suffix('*').filter(|p| !p.contains(META))
}

/// Floors over the cap, and floors over their rule's own limit.
fn floors(s: &ServiceConfig, out: &mut Vec<Lint>) {
    let Some(cap) = s.cap else { return };
    match check::floors::floors(&s.rules, Some(&cap)) {
        Err(FloorProblem::OverCap { total, permits, .. }) => out.push(Lint::new(
            LintKind::FloorsOverCap,
            &s.name,
            None,
            format!(
                "the rules' floors add up to {total}, more than the cap's {permits} permits per {:?}; lower the floors or raise the cap",
                cap.limit.window()
            ),
        )),
        Ok(total) => shared_pool(s, &cap, total, out),
        Err(FloorProblem::NoCap { .. }) => {}
    }
    for rule in s.rules.iter().filter(|r| r.floor > 0) {
        let RulePolicy::Limit { limit, .. } = rule.policy.into() else {
            continue;
        };
        // floor / cap window > permits / rule window, in whole numbers.
        let reserved = u128::from(rule.floor) * u128::from(limit.window_nanos());
        let allowed = u128::from(limit.permits()) * u128::from(cap.limit.window_nanos());
        if reserved > allowed {
            out.push(Lint::new(
                LintKind::FloorOverLimit,
                &s.name,
                Some(&rule.name),
                format!(
                    "floor {} per cap window ({}/s) is more than the rule's own limit of {limit} ({}/s) lets through; the excess is held back from the shared pool and never used",
                    rule.floor,
                    f64::from(rule.floor) * 1e9 / cap.limit.window_nanos() as f64,
                    limit.per_second_rate()
                ),
            ));
        }
    }
}

/// Lower bounds (`at_least`) over the service cap.
fn lower_bounds(s: &ServiceConfig, out: &mut Vec<Lint>) {
    let Some(cap) = s.cap else { return };
    let own = s.rules.iter().map(|r| (r.name.as_str(), r.policy));
    for (name, policy) in own.chain(s.policy.map(|p| ("default", p))) {
        let Policy::AtLeast { lower_bound, .. } = policy else {
            continue;
        };
        let bound = lower_bound.limit;
        // bound / its window > cap / cap window, in whole numbers.
        let asked = u128::from(bound.permits()) * u128::from(cap.limit.window_nanos());
        let allowed = u128::from(cap.limit.permits()) * u128::from(bound.window_nanos());
        if asked > allowed {
            out.push(Lint::new(
                LintKind::LowerBoundOverCap,
                &s.name,
                Some(name),
                format!(
                    "lower bound (at_least) {}/s is more than the service cap lets through, {}/s: the cap keeps fewer than the lower bound asks; lower `at_least` or raise the cap",
                    bound.per_second_rate(),
                    cap.limit.per_second_rate()
                ),
            ));
        }
    }
}

/// A shared pool the floors leave empty, or smaller than the default policy's limit.
fn shared_pool(s: &ServiceConfig, cap: &LimitSpec, floors: u64, out: &mut Vec<Lint>) {
    let Some(default) = s.policy else { return };
    let pool = u64::from(cap.limit.permits()).saturating_sub(floors);
    if floors == 0 {
        return;
    }
    if pool == 0 {
        out.push(Lint::new(
            LintKind::SharedPoolEmpty,
            &s.name,
            Some("default"),
            format!(
                "the floors ({floors}) reserve all of the cap's {} permits per {:?}, so the shared pool is empty and spans no rule matches are never kept (nor those of rules without a floor); lower the floors or raise the cap",
                cap.limit.permits(),
                cap.limit.window()
            ),
        ));
        return;
    }
    let RulePolicy::Limit { limit, .. } = default.into() else {
        return;
    };
    // pool / cap window < permits / default window, in whole numbers.
    let pool_rate = u128::from(pool) * u128::from(limit.window_nanos());
    let default_rate = u128::from(limit.permits()) * u128::from(cap.limit.window_nanos());
    if pool_rate < default_rate {
        out.push(Lint::new(
            LintKind::SharedPoolBelowDefault,
            &s.name,
            Some("default"),
            format!(
                "the cap's shared pool is {pool} per {:?} (the cap's {} less the floors' {floors}), less than the default policy's {limit}: spans no rule matches keep at most {pool} per cap window; lower the floors or raise the cap",
                cap.limit.window(),
                cap.limit.permits()
            ),
        ));
    }
}

/// Limits that cannot be divided across `replicas` (fleet-scoped limits are not
/// divided: they already hold for the whole fleet).
fn split(effective: &EffectiveRules, replicas: NonZeroU32, out: &mut Vec<Lint>) {
    for (name, limit) in effective.local_limits() {
        if let Err(e) = limit.per_replica(replicas) {
            out.push(Lint::new(
                LintKind::CannotSplit,
                effective.service(),
                Some(name),
                format!("{limit} split across {replicas} replicas: {e}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Limit;

    fn lints_of(text: &str) -> Vec<(LintKind, Option<String>)> {
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        config
            .lints(NonZeroU32::MIN)
            .into_iter()
            .map(|l| (l.kind(), l.rule().map(str::to_owned)))
            .collect()
    }

    #[test]
    fn a_rule_after_a_catch_all_is_unreachable_whatever_loaded_it() {
        // The loaders refuse this; a configuration made another way is still linted.
        let mut config = SamplingConfig::from_toml_str(
            "[default]\nrate = 1.0\n[[default.rule]]\nname = \"all\"\nkind = \"client\"\nprobability = 0.5\n[[default.rule]]\nname = \"late\"\nkind = \"server\"\nrate = 2.0\n",
            "t.toml",
        )
        .unwrap();
        config.default.rules[0].kind = None;
        let lints: Vec<_> = config
            .lints(NonZeroU32::MIN)
            .into_iter()
            .map(|l| (l.kind(), l.rule().map(str::to_owned)))
            .collect();
        assert_eq!(lints, [(LintKind::Unreachable, Some("late".into()))]);
    }

    #[test]
    fn a_rule_implied_by_an_earlier_one_is_shadowed_and_a_narrower_one_is_not() {
        let lints = lints_of(
            r#"
[default]
rate = 1.0
[[service]]
name = "s"
[[service.rule]]
name = "api"
span_name = "GET /api/*"
rate = 1.0
[[service.rule]]
name = "orders"
span_name = "GET /api/orders*"
kind = "server"
rate = 2.0
[[service.rule]]
name = "exact"
span_name = "GET /api/x"
attributes = { "tier" = "gold" }
rate = 3.0
[[service.rule]]
name = "other"
span_name = "GET /*"
rate = 4.0
[[service.rule]]
name = "gold"
attributes = { "tier" = "{gold,platinum}" }
rate = 5.0
[[service.rule]]
name = "gold-only"
span_name = "POST /"
attributes = { "tier" = "gold", "region" = "eu" }
rate = 6.0
"#,
        );
        assert_eq!(
            lints,
            [
                (LintKind::Shadowed, Some("orders".into())),
                (LintKind::Shadowed, Some("exact".into())),
                (LintKind::Shadowed, Some("gold-only".into())),
            ]
        );
    }

    #[test]
    fn different_kinds_parents_or_attributes_do_not_shadow() {
        let lints = lints_of(
            r#"
[default]
rate = 1.0
remote_parents = "cap"
[[default.rule]]
kind = "client"
rate = 1.0
[[default.rule]]
parent = "remote"
rate = 1.0
[[default.rule]]
attributes = { "a" = "x" }
rate = 1.0
[[default.rule]]
span_name = "x*"
attributes = { "b" = "x" }
rate = 1.0
[[default.rule]]
span_name = "x?"
rate = 1.0
"#,
        );
        assert_eq!(lints, []);
    }

    #[test]
    fn literal_operation_names_with_a_star_are_not_globs() {
        let json = r#"{"default_strategy": {"type": "probabilistic", "param": 0.5,
            "operation_strategies": [
                {"operation": "*", "type": "probabilistic", "param": 0.1},
                {"operation": "a*", "type": "probabilistic", "param": 0.1},
                {"operation": "ab*", "type": "probabilistic", "param": 0.1},
                {"operation": "b", "type": "probabilistic", "param": 0.1}]}}"#;
        let config = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap();
        assert_eq!(config.lints(NonZeroU32::MIN), []);
    }

    #[test]
    fn windows_below_the_default_clock_resolution_are_errors() {
        let config = SamplingConfig::from_toml_str(
            "[default]\nlimit = 1\nwindow = \"1ms\"\n[[service]]\nname = \"s\"\nlimit = 1\nwindow = \"1s\"\n",
            "t.toml",
        )
        .unwrap();
        let resolution = MonotonicClock::new().resolution();
        let lints = config.lints(NonZeroU32::MIN);
        let below: Vec<_> = lints
            .iter()
            .filter(|l| l.kind() == LintKind::WindowBelowClock)
            .map(|l| (l.service().to_owned(), l.rule().map(str::to_owned)))
            .collect();
        // The service "s" inherits the default's policy only when it has none.
        if resolution > Duration::from_millis(1) {
            assert_eq!(
                below,
                [(String::new(), Some("default".into()))],
                "{lints:?}"
            );
            assert_eq!(LintKind::WindowBelowClock.severity(), Severity::Error);
        } else {
            assert_eq!(below, [], "{lints:?}");
        }
    }

    #[test]
    fn floors_that_starve_the_default_are_linted_as_the_sampler_applies_them() {
        // A cap of 10 with floors of 9 keeps 1 per window for spans no rule matches.
        let text = |floor: u32| {
            format!(
                "[[service]]\nname = \"s\"\nlimit = 5\ncap = {{ limit = 10 }}\n[[service.rule]]\nname = \"pay\"\nspan_name = \"POST /pay\"\nrate = 9.0\nfloor = {floor}\n"
            )
        };
        let kinds = |floor| {
            let config = SamplingConfig::from_toml_str(&text(floor), "t.toml").unwrap();
            config
                .lints(NonZeroU32::MIN)
                .into_iter()
                .map(|l| {
                    (
                        l.kind(),
                        l.service().to_owned(),
                        l.rule().map(str::to_owned),
                    )
                })
                .collect::<Vec<_>>()
        };
        let s = |kind| (kind, "s".to_owned(), Some("default".to_owned()));
        assert_eq!(kinds(9), [s(LintKind::SharedPoolBelowDefault)]);
        assert_eq!(kinds(5), []);
        // The sampler keeps nothing for the default when the floors take the whole cap.
        let config = SamplingConfig::from_toml_str(
            &text(9)
                .replace("rate = 9.0", "rate = 10.0")
                .replace("floor = 9", "floor = 10"),
            "t.toml",
        )
        .unwrap();
        let lints = config.lints(NonZeroU32::MIN);
        assert_eq!(lints.len(), 1, "{lints:?}");
        assert_eq!(lints[0].kind(), LintKind::SharedPoolEmpty);
        assert_eq!(lints[0].severity(), Severity::Error);
    }

    #[test]
    fn a_floor_over_its_rules_limit_is_a_warning() {
        let text = r#"
[default]
rate = 1.0
cap = { rate = 100.0 }
[[default.rule]]
name = "slow"
span_name = "a"
limit = 5
window = "1s"
floor = 6
[[default.rule]]
name = "fine"
span_name = "b"
limit = 60
window = "1m"
floor = 1
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let lints = config.lints(NonZeroU32::MIN);
        assert_eq!(lints.len(), 1, "{lints:?}");
        assert_eq!(lints[0].kind(), LintKind::FloorOverLimit);
        assert_eq!(lints[0].severity(), Severity::Warning);
        assert!(
            lints[0]
                .to_string()
                .starts_with("warning: [default]: rule \"slow\": floor 6"),
            "{}",
            lints[0]
        );
    }

    #[test]
    fn a_lower_bound_over_the_cap_is_a_warning() {
        let text = r#"
[default]
probability = 0.1
at_least = 20.0
cap = { rate = 10.0 }
[[default.rule]]
name = "within"
span_name = "a"
probability = 0.0
at_least = 10.0
[[default.rule]]
name = "over"
span_name = "b"
probability = 0.0
at_least = 11.0
"#;
        let lints = lints_of(text);
        assert_eq!(
            lints,
            [
                (LintKind::LowerBoundOverCap, Some("over".to_owned())),
                (LintKind::LowerBoundOverCap, Some("default".to_owned())),
            ]
        );
        assert_eq!(LintKind::LowerBoundOverCap.severity(), Severity::Warning);
    }

    #[test]
    fn floors_over_the_cap_are_an_error_whatever_loaded_them() {
        let config = SamplingConfig::from_toml_str(
            "[default]\nrate = 1.0\ncap = { limit = 10, window = \"1s\" }\n[[default.rule]]\nspan_name = \"a\"\nprobability = 1.0\nfloor = 10\n",
            "t.toml",
        )
        .unwrap();
        let mut s = config.default.clone();
        s.rules.push(Rule {
            name: "b".into(),
            ..s.rules[0].clone()
        });
        let mut out = Vec::new();
        floors(&s, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind(), LintKind::FloorsOverCap);
        assert_eq!(out[0].severity(), Severity::Error);
    }

    #[test]
    fn large_sliding_logs_warn_and_unsplittable_limits_are_errors() {
        let text = r#"
[default]
limit = 2000000
window = "1s"
algorithm = "sliding-log"
[[service]]
name = "rare"
limit = 1
window = "4000000h"
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let kinds: Vec<_> = config
            .lints(NonZeroU32::new(3).unwrap())
            .iter()
            .map(|l| (l.kind(), l.service().to_owned()))
            .collect();
        assert_eq!(
            kinds,
            [
                (LintKind::LargeMemory, String::new()),
                (LintKind::CannotSplit, "rare".into())
            ]
        );
        assert!(config.lints(NonZeroU32::MIN).len() == 1);
    }

    #[cfg(feature = "redis")]
    #[test]
    fn fleet_scoped_limits_are_not_split_across_replicas() {
        let text = r#"
[fleet]
redis = "redis://127.0.0.1:6379"
[default]
limit = 1
window = "4000000h"
scope = "fleet"
[[service]]
name = "rare"
limit = 1
window = "4000000h"
cap = { limit = 1, window = "4000000h", scope = "fleet" }
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let lints: Vec<_> = config
            .lints(NonZeroU32::new(3).unwrap())
            .iter()
            .map(|l| {
                (
                    l.kind(),
                    l.service().to_owned(),
                    l.rule().map(str::to_owned),
                )
            })
            .collect();
        // Only the service's own default is local, and it cannot be split.
        assert_eq!(
            lints,
            [(LintKind::CannotSplit, "rare".into(), Some("default".into()))]
        );
    }

    #[test]
    fn a_split_uses_the_fractional_rate_arithmetic() {
        let limit = Limit::per_window(50, std::time::Duration::from_secs(1)).unwrap();
        let third = limit.per_replica(NonZeroU32::new(3).unwrap()).unwrap();
        assert_eq!(third, Limit::per_second(50.0 / 3.0).unwrap());
        assert_eq!(third.permits(), 17);
        assert!(third.per_second_rate() * 3.0 <= 50.0);
    }
}
