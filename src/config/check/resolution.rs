//! Windows shorter than the clock's resolution: such a limiter sees whole windows go by
//! between two readings and enforces another rate (1 per 1 ms on a 4 ms clock kept 251
//! per second), so the rule set refuses them and the lints warn of them.

use std::time::Duration;

use crate::config::model::{LimitOf, LimitSpec, Policy, ServiceConfig};
use crate::limiter::Algorithm;

/// The local limits of `service` (its rules', an adaptive rule's cap and a lower bound
/// included, then its default's, then its cap's) whose window is shorter than
/// `resolution`, in that order. Fleet-scoped limits keep Redis time, not the clock's.
pub(crate) fn below_resolution(
    service: &ServiceConfig,
    resolution: Duration,
) -> impl Iterator<Item = (LimitOf, LimitSpec)> + '_ {
    let spec = |policy: Policy| match policy {
        Policy::Adaptive(limit) => Some(LimitSpec::local(limit, Algorithm::FixedWindow)),
        other => other.limiter(),
    };
    let rules = service
        .rules
        .iter()
        .filter_map(move |r| Some((LimitOf::Rule(r.name.clone()), spec(r.policy)?)));
    let default = service
        .policy
        .and_then(spec)
        .map(|spec| (LimitOf::Default, spec));
    let cap = service.cap.map(|spec| (LimitOf::Cap, spec));
    rules
        .chain(default)
        .chain(cap)
        .filter(move |(_, spec)| !spec.is_fleet() && spec.limit.window() < resolution)
}
