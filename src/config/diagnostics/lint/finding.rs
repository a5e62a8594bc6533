//! A [`Lint`]: one finding, where (service, rule), what and why.

use std::fmt;

use super::kind::{LintKind, Severity};

/// One finding of
/// [`SamplingConfig::lints`](crate::config::model::SamplingConfig::lints): where (service, rule), what and why.
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
    pub(super) fn new(kind: LintKind, service: &str, rule: Option<&str>, message: String) -> Self {
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

/// The lints of a TOML text as (kind, rule): what the passes' tests compare.
#[cfg(test)]
pub(super) fn lints_of(text: &str) -> Vec<(LintKind, Option<String>)> {
    let config = crate::config::model::SamplingConfig::from_toml_str(text, "t.toml").unwrap();
    config
        .lints(std::num::NonZeroU32::MIN)
        .into_iter()
        .map(|l| (l.kind(), l.rule().map(str::to_owned)))
        .collect()
}
