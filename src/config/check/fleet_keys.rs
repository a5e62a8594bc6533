//! Fleet keys: a fleet-scoped limit is shared through Redis under a key made of the
//! service's and the rule's names, and the service's own fleet-scoped default and cap
//! take the keys of the rule names `default` and `cap`.

use crate::config::model::{LimitSpec, Policy, Rule};

/// Whether any of a service's limits (its policy, its cap, its rules, or a floor in a
/// fleet-scoped cap) is shared through Redis, so that its names must be valid key parts.
pub(crate) fn any_fleet<'a>(
    policy: Option<&Policy>,
    cap: Option<&LimitSpec>,
    mut rules: impl Iterator<Item = &'a Rule>,
) -> bool {
    let cap_fleet = cap.is_some_and(LimitSpec::is_fleet);
    cap_fleet || policy.is_some_and(Policy::is_fleet) || rules.any(|r| in_fleet(r, cap))
}

/// Whether `rule` takes a fleet key: its own limit is fleet-scoped, or its floor is in a
/// fleet-scoped cap.
pub(crate) fn in_fleet(rule: &Rule, cap: Option<&LimitSpec>) -> bool {
    rule.policy.is_fleet() || rule.floor > 0 && cap.is_some_and(LimitSpec::is_fleet)
}

/// The Redis key a fleet-scoped `rule` would share with the service's own fleet-scoped
/// default or cap (`None`: no clash).
pub(crate) fn clash(
    rule: &Rule,
    policy: Option<&Policy>,
    cap: Option<&LimitSpec>,
) -> Option<&'static str> {
    if !rule.policy.is_fleet() {
        return None;
    }
    match rule.name.as_str() {
        "cap" if cap.is_some_and(LimitSpec::is_fleet) => Some("cap"),
        "default" if policy.is_some_and(Policy::is_fleet) => Some("default"),
        _ => None,
    }
}
