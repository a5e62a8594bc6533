//! The structural checks over a loaded model, each written once: the loaders turn what
//! they return into positioned errors, the lints into warnings.

pub(crate) mod budget;
