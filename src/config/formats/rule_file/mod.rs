//! A rule file's wire types (the same for TOML and YAML) and their lowering into the
//! model: the policy keys, the blocks and their rules, the whole file.

mod block;
mod ctx;
mod file;
mod policy;
mod raw;

pub(crate) use ctx::Ctx;
pub(crate) use raw::RawFile;
