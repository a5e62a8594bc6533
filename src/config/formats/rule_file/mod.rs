//! A rule file's wire types (the same for TOML and YAML) and their lowering into the
//! model, as functions taking the file's context, one direction down: the whole file
//! ([`config`]), a block, a rule, the policy keys.

mod block;
mod ctx;
mod file;
mod keys;
mod policy;
mod raw;
mod rule;

pub(crate) use ctx::Ctx;
pub(crate) use file::config;
pub(crate) use raw::RawFile;
