//! The structural checks over a loaded model, each written once: the loaders turn what
//! they return into positioned errors, the lints into warnings, the rule set into a
//! build error.

pub(crate) mod budget;
pub(crate) mod fleet_keys;
pub(crate) mod floors;
pub(crate) mod names;
pub(crate) mod reach;
pub(crate) mod resolution;
