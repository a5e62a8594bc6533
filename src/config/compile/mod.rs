//! A service's rules compiled for deciding: the rule set, its matcher, the rule
//! limiters and the handover of their windows to a reloaded rule set.

pub(crate) mod fair_rule;
pub(crate) mod handover;
pub(crate) mod local_rule;
pub(crate) mod matcher;
pub(crate) mod permit;
pub(crate) mod rule_limiter;
pub(crate) mod rule_set;
mod unseen;
