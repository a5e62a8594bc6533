//! What [`SamplingConfig`] tells about itself: its lints, its rules described for people
//! and as values, each a call down into `diagnostics/`, so the type's whole API is read
//! in `model/`.
//!
//! Like `load.rs`, this file sits beside the type but above the rooms it calls: it is the
//! last of the rule layer's rooms (`.ci/imports` holds it to that).

use std::fmt;
use std::num::NonZeroU32;

use crate::config::diagnostics::describe;
use crate::config::diagnostics::lint::{self, Lint};
use crate::config::diagnostics::summary::{self, EffectiveRules};
use crate::config::model::SamplingConfig;

impl SamplingConfig {
    /// What the file may still get wrong although it loads, for the file default and
    /// each listed service, in file order: see [`LintKind`](crate::lint::LintKind) for
    /// each check and its severity. `replicas` is the number of processes the limits are
    /// to be split across (1: no split).
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
        lint::lints(self, replicas)
    }

    /// The effective rules for `service`, in evaluation order, for people to read (what
    /// the `otel-rate-sampler check` command prints).
    pub fn describe(&self, service: &str) -> impl fmt::Display + '_ {
        describe::describe(self, service)
    }

    /// The settings `service`'s sampler applies: its own if the file lists it, else the
    /// file default's (as [`RuleBasedSampler::new`](crate::RuleBasedSampler::new)).
    pub fn effective_rules(&self, service: &str) -> EffectiveRules {
        summary::effective_rules(self, service)
    }
}
