//! Which rules of earlier sets a reload goes on from: [`pick`] finds a new rule's
//! predecessor, [`aside`] keeps the limits no new rule took (while their windows hold
//! admissions, then forgotten: what a rule brought back needs to go on, the newest
//! [`FORGOTTEN`]), and [`going_on`] starts a new limiter from a forgotten one.

use super::super::compiled::{Aside, Identity, Was};
use super::super::RuleSet;
use crate::clock::Clock;
use crate::config::compile::handover::{Forgotten, Handover};
use crate::config::compile::local_rule::LocalRule;
use crate::config::model::Rule;

/// Of `previous`'s rules (current first, then those kept aside or forgotten in their
/// order, one with a limit first among the current ones), the first not yet `taken`
/// that is the same as `rule` (`None`: the default) by `identity`; it is taken.
pub(super) fn pick<'a, C: Clock>(
    previous: &'a RuleSet<C>,
    taken: &mut Vec<Was<'a, C>>,
    rule: Option<&Rule>,
    identity: Identity,
) -> Option<Was<'a, C>> {
    let free = |c: &Was<'a, C>| {
        c.who().identity(rule) == Some(identity) && !taken.iter().any(|t| t.is(*c))
    };
    let current = previous
        .rules
        .iter()
        .chain(previous.default.as_ref())
        .map(Was::Rule);
    let found = current
        .clone()
        .filter(free)
        .find(|c| c.limits())
        .or_else(|| previous.retired.iter().map(Was::of).find(free))
        .or_else(|| current.clone().find(free))?;
    taken.push(found);
    Some(found)
}

/// The most rules forgotten that a reload keeps what it needs of (the newest): a rule
/// brought back after more than this many others were forgotten since is a new rule.
pub(crate) const FORGOTTEN: usize = 256;

/// The limits of `previous` (and those it kept aside or forgot) that no new rule with a
/// limit went on from (`kept_on`), the first of each identity (by name): kept while
/// their window holds admissions, so a rule removed (or made a probability) and brought
/// back within a window finds its limiter; forgotten after (what their lineage needs,
/// no limiter), the newest [`FORGOTTEN`] of them. A limit set aside by this reload is
/// kept, and closed by a handover pushed on `handovers` (settled before the new rules
/// are published): decisions on the old rules may still reach it until then, so only
/// a closed one is forgotten, once what it counted has left its window.
pub(super) fn aside<C: Clock>(
    previous: &RuleSet<C>,
    kept_on: &[Was<C>],
    handovers: &mut Vec<Handover<C>>,
) -> Vec<Aside<C>> {
    let mut aside: Vec<Aside<C>> = Vec::new();
    let mut forgotten = 0;
    let candidates = previous
        .rules
        .iter()
        .chain(previous.default.as_ref())
        .map(Was::Rule)
        .chain(previous.retired.iter().map(Was::of));
    for c in candidates {
        let kept =
            kept_on.iter().any(|k| k.is(c)) || aside.iter().any(|a| Was::of(a).who().same(c.who()));
        if !c.limits() || kept {
            continue;
        }
        let open = match c {
            Was::Rule(c) => c.open_limit(),
            Was::Forgotten(_) => None,
        };
        let next = match c {
            Was::Rule(c) if open.is_some() || c.holds_window() => {
                handovers.extend(open.map(|l| Handover::Retire(l.clone())));
                Some(Aside::Kept(Box::new(c.clone())))
            }
            Was::Rule(c) => c.forget().map(|t| Aside::Forgotten(Box::new(t))),
            Was::Forgotten(t) => Some(Aside::Forgotten(Box::new(t.clone()))),
        };
        if let Some(next) = next {
            if matches!(next, Aside::Forgotten(_)) {
                if forgotten == FORGOTTEN {
                    continue;
                }
                forgotten += 1;
            }
            aside.push(next);
        }
    }
    aside
}

/// `local`, a limiter just built with nothing to take over, going on from its
/// lineage's limiter dropped since (`forgotten`), if there is one.
pub(super) fn going_on<C: Clock>(
    local: LocalRule<C>,
    forgotten: Option<&Forgotten>,
) -> LocalRule<C> {
    match forgotten {
        Some(f) => f.succeeded_by(local),
        None => local,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::config::model::SamplingConfig;

    /// The rule set of `names`' rules (each 1 per second, matching its own name),
    /// replacing `previous`.
    fn with_rules(
        names: impl Iterator<Item = String>,
        clock: &ManualClock,
        previous: Option<&RuleSet<ManualClock>>,
    ) -> RuleSet<ManualClock> {
        let mut toml = String::from("[default]\nprobability = 1.0\n");
        for name in names {
            toml.push_str(&format!(
                "[[default.rule]]\nname = \"{name}\"\nspan_name = \"{name}\"\nlimit = 1\n"
            ));
        }
        let config = SamplingConfig::from_toml_str(&toml, "t.toml").unwrap();
        let (set, handovers) =
            RuleSet::compile(&config.service("svc"), &config.fleet, clock, previous).unwrap();
        handovers.iter().for_each(Handover::settle);
        set
    }

    fn forgotten(set: &RuleSet<ManualClock>) -> Vec<String> {
        set.retired
            .iter()
            .filter_map(|a| match a {
                Aside::Forgotten(t) => Some(t.name().to_owned()),
                Aside::Kept(_) => None,
            })
            .collect()
    }

    /// The rule set with no rule replacing `previous`, twice: a limit set aside is kept
    /// (and closed) by the first reload, forgotten by the next once its window is empty.
    fn removed(clock: &ManualClock, previous: &RuleSet<ManualClock>) -> RuleSet<ManualClock> {
        let aside = with_rules(std::iter::empty(), clock, Some(previous));
        assert!(forgotten(&aside).len() <= forgotten(previous).len());
        with_rules(std::iter::empty(), clock, Some(&aside))
    }

    /// 257 rules removed with nothing in their windows: what a reload keeps of them is
    /// bounded, the newest first; another 257 removed push the older ones out.
    #[test]
    fn the_rules_forgotten_stay_bounded_and_the_newest_are_kept() {
        let clock = ManualClock::new();
        clock.set(5_000_000_000);
        let batch = |b: usize| (0..=FORGOTTEN).map(move |i| format!("b{b}-{i}"));
        let first = with_rules(batch(0), &clock, None);
        let none = removed(&clock, &first);
        assert_eq!(
            forgotten(&none),
            batch(0).take(FORGOTTEN).collect::<Vec<_>>()
        );
        let second = with_rules(batch(1), &clock, Some(&none));
        assert_eq!(forgotten(&second), forgotten(&none), "carried while away");
        let none = removed(&clock, &second);
        assert_eq!(
            forgotten(&none),
            batch(1).take(FORGOTTEN).collect::<Vec<_>>()
        );
        // One restored goes on from what it left, which is then no longer kept aside.
        let back = with_rules(batch(1).take(1), &clock, Some(&none));
        assert_eq!(forgotten(&back).len(), FORGOTTEN - 1);
        assert!(!forgotten(&back).contains(&"b1-0".to_owned()));
    }
}
