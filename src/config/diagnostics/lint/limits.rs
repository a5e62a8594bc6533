//! A service's limits against what runs them: the clock's resolution, the memory
//! their limiters take, and a split across replicas.

use std::num::NonZeroU32;
use std::time::Duration;

use super::finding::Lint;
use super::kind::LintKind;
use crate::config::check::resolution::below_resolution;
use crate::config::diagnostics::summary::EffectiveRules;
use crate::config::model::{LimitOf, ServiceConfig};

/// A service whose limiters take more than this many bytes gets a
/// [`LintKind::LargeMemory`] warning: 16 MiB.
pub const LARGE_MEMORY_BYTES: usize = 16 << 20;

/// Local limits whose window is shorter than the default clock's `resolution`.
pub(super) fn window_below_clock(s: &ServiceConfig, resolution: Duration, out: &mut Vec<Lint>) {
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
}

/// A service whose limiters take more than [`LARGE_MEMORY_BYTES`].
pub(super) fn large_memory(s: &ServiceConfig, effective: &EffectiveRules, out: &mut Vec<Lint>) {
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
}

/// Limits that cannot be divided across `replicas` (fleet-scoped limits are not
/// divided: they already hold for the whole fleet).
pub(super) fn split(effective: &EffectiveRules, replicas: NonZeroU32, out: &mut Vec<Lint>) {
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
    use std::num::NonZeroU32;
    use std::time::Duration;

    use crate::clock::{Clock, MonotonicClock};
    use crate::config::diagnostics::lint::{LintKind, Severity};
    use crate::config::model::SamplingConfig;
    use crate::limit::Limit;

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
