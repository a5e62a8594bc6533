//! The key of a limit in a service's settings, for the errors found when a sampler is
//! built (`service[1].rule[0].window`).

use std::fmt;

use crate::config::model::SamplingConfig;

/// Whose limit it is, in a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LimitOf {
    /// The rule of this name.
    Rule(String),
    /// The service's default policy.
    Default,
    /// The cap (its floors share its window).
    Cap,
}

impl fmt::Display for LimitOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitOf::Rule(name) => write!(f, "rule {name:?}"),
            LimitOf::Default => f.write_str("the default policy"),
            LimitOf::Cap => f.write_str("the cap"),
        }
    }
}

impl SamplingConfig {
    /// The key of the window of `of` in `service`'s settings (`service[1].rule[0].window`,
    /// `default.rule[2].window` for an inherited rule, `service[1].cap.window`).
    pub(crate) fn window_key(&self, service: &str, of: &LimitOf) -> String {
        self.limit_key(service, of, "window")
    }

    /// The key of `field` of `of`'s limit in `service`'s settings, or of the limit's
    /// table itself when `field` is empty (a rule's or the cap's).
    pub(crate) fn limit_key(&self, service: &str, of: &LimitOf, field: &str) -> String {
        let listed = self.index.get(service).map(|&i| (i, &self.services[i]));
        let in_default = |name: &str| {
            self.default
                .rules
                .iter()
                .position(|r| r.name == name)
                .map(|k| format!("default.rule[{k}]"))
        };
        let table = match (listed, of) {
            (Some((i, s)), LimitOf::Rule(name)) => s
                .rules
                .iter()
                .position(|r| &r.name == name)
                .map(|j| format!("service[{i}].rule[{j}]"))
                .or_else(|| in_default(name)),
            (None, LimitOf::Rule(name)) => in_default(name),
            (Some((i, s)), LimitOf::Default) if s.policy.is_some() => Some(format!("service[{i}]")),
            (_, LimitOf::Default) => Some("default".to_owned()),
            (Some((i, _)), LimitOf::Cap) => Some(format!("service[{i}].cap")),
            (None, LimitOf::Cap) => Some("default.cap".to_owned()),
        };
        match (table, field) {
            (Some(table), "") => table,
            (Some(table), field) => format!("{table}.{field}"),
            (None, _) => String::new(),
        }
    }
}
