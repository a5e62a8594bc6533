//! Floors: permits a rule reserves in each window of its service's cap. A floor needs
//! a cap, and the floors together must fit in it.

use crate::config::model::{LimitSpec, Rule};

/// Floors that cannot be reserved.
#[derive(Debug)]
pub(crate) enum FloorProblem {
    /// Rule `rule` has a floor and the service no cap.
    NoCap { rule: usize },
    /// The floors add up to `total`, over the cap's `permits`; rule `rule`'s is the
    /// first that does not fit.
    OverCap {
        rule: usize,
        total: u64,
        permits: u32,
    },
}

/// The total of `rules`' floors, checked against `cap`.
pub(crate) fn floors<'a>(
    rules: impl IntoIterator<Item = &'a Rule>,
    cap: Option<&LimitSpec>,
) -> Result<u64, FloorProblem> {
    let (mut total, mut first_over) = (0u64, None);
    for (i, rule) in rules.into_iter().enumerate().filter(|(_, r)| r.floor > 0) {
        let Some(cap) = cap else {
            return Err(FloorProblem::NoCap { rule: i });
        };
        total += u64::from(rule.floor);
        if total > u64::from(cap.limit.permits()) {
            first_over.get_or_insert(i);
        }
    }
    match (first_over, cap) {
        (Some(rule), Some(cap)) => Err(FloorProblem::OverCap {
            rule,
            total,
            permits: cap.limit.permits(),
        }),
        _ => Ok(total),
    }
}
