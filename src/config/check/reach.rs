//! Rules that can never decide: a rule with no condition matches every span, so a rule
//! after it, or the service's own policy behind it, is never reached.

use crate::config::model::Rule;

/// The first rule of `rules` (in evaluation order) that matches every span and is
/// followed by another rule, which it hides.
pub(crate) fn hiding_catch_all<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Option<usize> {
    let mut rules = rules.into_iter().enumerate().peekable();
    while let Some((i, rule)) = rules.next() {
        if rule.matches_everything() && rules.peek().is_some() {
            return Some(i);
        }
    }
    None
}

/// The last rule of `rules` if it matches every span, so that no policy behind it (the
/// service's own, or rules inherited after it) ever decides.
pub(crate) fn last_catch_all<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Option<&'a Rule> {
    rules.into_iter().last().filter(|r| r.matches_everything())
}
