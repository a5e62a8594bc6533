//! The run: [`SamplingConfig::lints`] over the file default and each listed service,
//! each pass in turn.

use std::num::NonZeroU32;
use std::time::Duration;

use super::finding::Lint;
use super::{floors, limits, shadowing};
use crate::clock::{Clock, MonotonicClock};
use crate::config::diagnostics::summary::EffectiveRules;
use crate::config::model::{SamplingConfig, ServiceConfig};

/// [`SamplingConfig::lints`]: every pass over the file default and each listed service.
pub(crate) fn lints(config: &SamplingConfig, replicas: NonZeroU32) -> Vec<Lint> {
    let mut lints = Vec::new();
    let resolution = MonotonicClock::new().resolution();
    lint_service(&config.default, false, replicas, resolution, &mut lints);
    for s in &config.services {
        lint_service(&config.listed(s), true, replicas, resolution, &mut lints);
    }
    lints
}
fn lint_service(
    s: &ServiceConfig,
    listed: bool,
    replicas: NonZeroU32,
    resolution: Duration,
    out: &mut Vec<Lint>,
) {
    shadowing::shadowed_rules(s, out);
    let effective = EffectiveRules::of(s, listed);
    limits::window_below_clock(s, resolution, out);
    floors::floors(s, out);
    floors::lower_bounds(s, out);
    limits::large_memory(s, &effective, out);
    if replicas.get() > 1 {
        limits::split(&effective, replicas, out);
    }
}
