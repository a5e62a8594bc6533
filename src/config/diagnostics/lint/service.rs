//! The run: [`SamplingConfig::lints`] over the file default and each listed service,
//! each pass in turn.

use std::num::NonZeroU32;
use std::time::Duration;

use super::finding::Lint;
use super::{floors, limits, shadowing};
use crate::clock::{Clock, MonotonicClock};
use crate::config::diagnostics::summary::EffectiveRules;
use crate::config::model::{SamplingConfig, ServiceConfig};

impl SamplingConfig {
    /// What the file may still get wrong although it loads, for the file default and
    /// each listed service, in file order: see [`LintKind`](super::LintKind) for each check and its
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
