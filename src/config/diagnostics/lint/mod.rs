//! [`Lint`]s: what a configuration that loads may still get wrong (rules that never
//! decide, floors that do not fit, memory, limits that cannot be split across replicas).
//!
//! A file by role: what a lint is ([`LintKind`] and its [`Severity`], the [`Lint`]
//! found), the run over each service, and one file per family of passes (rules that
//! never decide, floors and lower bounds, limits against the clock, memory and
//! replicas). The structural checks the passes share with the loaders live in
//! `config::check`.

mod finding;
mod floors;
mod kind;
mod limits;
mod service;
mod shadowing;

pub use finding::Lint;
pub use kind::{LintKind, Severity};
pub use limits::LARGE_MEMORY_BYTES;
pub(crate) use service::lints;
