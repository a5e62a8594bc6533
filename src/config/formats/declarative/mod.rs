//! The OpenTelemetry declarative configuration file (feature `yaml`): a YAML file with
//! `file_format: "1.0"` or `"1.1"` (whose `composite/development` sampler is read in
//! `composite`), named by `OTEL_CONFIG_FILE`, whose `tracer_provider.sampler`
//! is read into a sampler tree that the runtime builds into a `DeclarativeSampler`. This
//! crate's sampler is the plugin key `rate_limiting`, whose value is a rule file in
//! YAML. See `examples/otel-config.yaml`. Scalar values may hold environment variable
//! references (`${NAME}`, `${env:NAME}`, `${NAME:-default}`, `$$`), substituted before
//! the file is read (see `substitution`).

mod blocks;
mod composite;
mod raw;
mod substitution;
mod tree;

use std::cell::RefCell;

use opentelemetry_sdk::trace::Sampler;

use crate::clock::Clock;
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::rule_file::{self, Ctx, RawFile};
use crate::config::formats::spanned::Spanned;
use crate::config::formats::yaml::parse;
use crate::config::model::{values, SamplingConfig};
use crate::config::vars::resolve_service;

pub(crate) use blocks::Block;
use blocks::{check_budget, Composites};
use raw::{FileFormat, RawDocument, RawSampler};
pub(crate) use substitution::Lookup;
pub(crate) use tree::{Branches, Node, PLUGIN_KEY};

/// Reads `file_format` and `tracer_provider.sampler` (`None` when there is no sampler).
fn read(ctx: &Ctx<'_>) -> Result<Option<Spanned<RawSampler>>, ConfigError> {
    let doc: RawDocument = parse(ctx.text, ctx.file).map_err(|e| {
        // serde's words for a sampler mapping without exactly one key.
        let message = e.to_string();
        if message.contains("externally tagged enum") || message.contains("after enum variant") {
            e.with_message(format!("a sampler is a mapping with exactly one key: always_on, always_off, trace_id_ratio_based, parent_based, composite/development or {PLUGIN_KEY}; a composable sampler (under composite/development) one of {}", composite::COMPOSABLE_KEYS))
        } else {
            e
        }
    })?;
    let Some(format) = doc.file_format else {
        return Err(ctx.new_error(
            ConfigErrorKind::MissingKey,
            0..0,
            "file_format",
            "a declarative configuration file starts with `file_format: \"1.0\"`".into(),
        ));
    };
    let text = match format.get_ref() {
        FileFormat::Text(t) => t.trim().to_owned(),
        FileFormat::Number(n) => format!("{n:?}"),
    };
    let major = text.split('.').next().unwrap_or_default();
    if major != "1" || text.split('.').count() > 2 {
        return Err(ctx.new_error(
            ConfigErrorKind::UnknownValue,
            format.span(),
            "file_format",
            format!(
                "file_format {text:?} is not one this crate reads; use \"1.0\" or \"1.1\" (the 1.x schema)"
            ),
        ));
    }
    Ok(doc.tracer_provider.and_then(|t| t.sampler))
}

/// The sampler tree of a declarative configuration file, its variable references
/// resolved through `lookup`, each `rate_limiting` block read into its model (`redis`,
/// from the environment, replacing their `fleet.redis`), and the service it is built
/// for (`service`, or the environment's when empty); `None` when the file has no
/// sampler. The composite samplers' rate limiters are timed by `clock`, and built only
/// once every block and every composite rate limiter is known to fit in the memory
/// budget together, for the service.
pub(crate) fn read_tree<C: Clock + Clone>(
    text: &str,
    file: &str,
    service: &str,
    redis: Option<&[String]>,
    lookup: Lookup<'_>,
    clock: &C,
) -> Result<Option<(Node<Block>, String)>, ConfigError> {
    let text = substitution::substitute(text, file, lookup)?;
    let ctx = Ctx::new(&text, file);
    let Some(sampler) = read(&ctx)? else {
        return Ok(None);
    };
    let service = resolve_service(service, lookup)?;
    let path = "tracer_provider.sampler";
    // The blocks read and the composite rate limiters counted, in document order.
    let mut blocks = Vec::new();
    #[cfg_attr(not(feature = "composable"), allow(unused_mut))]
    let mut composites = Vec::new();
    leaves(&sampler, path, &mut |raw, path| {
        match raw.get_ref() {
            RawSampler::RateLimiting(f) => blocks.push(block(&ctx, f, raw, path, redis)?),
            #[cfg(feature = "composable")]
            RawSampler::Composite(c) => {
                let path = format!("{path}.composite/development");
                blocks::rate_limiters(&ctx, c, &path, &mut composites);
            }
            _ => {}
        }
        Ok(())
    })?;
    let composites = Composites {
        found: composites,
        #[cfg(feature = "composable")]
        each: blocks::rate_limiter_bytes::<C>(),
        #[cfg(not(feature = "composable"))]
        each: 0,
    };
    check_budget(
        &blocks.iter().collect::<Vec<_>>(),
        &composites,
        file,
        &service,
    )?;
    let reader = Reader {
        ctx: &ctx,
        redis,
        clock,
        blocks: RefCell::new(blocks.into_iter()),
    };
    Ok(Some((reader.node(&sampler, path)?, service)))
}

/// Calls `visit` on every sampler under `raw` (at `path`) that is not a `parent_based`,
/// with its path, in document order (`root` before the other branches), up to its first
/// error.
fn leaves<'a, E>(
    raw: &'a Spanned<RawSampler>,
    path: &str,
    visit: &mut impl FnMut(&'a Spanned<RawSampler>, &str) -> Result<(), E>,
) -> Result<(), E> {
    match raw.get_ref() {
        RawSampler::ParentBased(p) => {
            for (branch, name) in [
                (&p.root, "root"),
                (&p.remote_parent_sampled, "remote_parent_sampled"),
                (&p.remote_parent_not_sampled, "remote_parent_not_sampled"),
                (&p.local_parent_sampled, "local_parent_sampled"),
                (&p.local_parent_not_sampled, "local_parent_not_sampled"),
            ] {
                if let Some(branch) = branch {
                    leaves(branch, &format!("{path}.parent_based.{name}"), visit)?;
                }
            }
            Ok(())
        }
        _ => visit(raw, path),
    }
}

/// The `rate_limiting` block `file` (the sampler `raw`, at `path`) read into its model.
fn block(
    ctx: &Ctx<'_>,
    file: &RawFile,
    raw: &Spanned<RawSampler>,
    path: &str,
    redis: Option<&[String]>,
) -> Result<Block, ConfigError> {
    let (key, at) = (format!("{path}.{PLUGIN_KEY}"), ctx.pos(raw.span()));
    let config = rule_file::config(ctx, file, redis).map_err(|e| e.in_block(&key, at))?;
    Ok(Block::new(config, key, at))
}

/// Lowers sampler trees, with the file's context for errors.
struct Reader<'a, C> {
    ctx: &'a Ctx<'a>,
    /// [`OTEL_RATE_SAMPLER_REDIS`](crate::env::OTEL_RATE_SAMPLER_REDIS), replacing the
    /// rule files' `fleet.redis`.
    redis: Option<&'a [String]>,
    /// What the composite samplers' rate limiters read.
    #[cfg_attr(not(feature = "composable"), allow(dead_code))]
    clock: &'a C,
    /// The `rate_limiting` blocks, read before the tree is built, in document order.
    blocks: RefCell<std::vec::IntoIter<Block>>,
}

impl<C: Clock + Clone> Reader<'_, C> {
    fn node(&self, raw: &Spanned<RawSampler>, path: &str) -> Result<Node<Block>, ConfigError> {
        Ok(match raw.get_ref() {
            RawSampler::AlwaysOn(_) => Node::Sdk(Sampler::AlwaysOn),
            RawSampler::AlwaysOff(_) => Node::Sdk(Sampler::AlwaysOff),
            RawSampler::TraceIdRatioBased(r) => {
                let ratio = match r.as_ref().and_then(|r| r.ratio.as_ref()) {
                    Some(ratio) => self.ctx.check(
                        ratio,
                        format!("{path}.trace_id_ratio_based.ratio"),
                        values::probability(*ratio.get_ref()),
                    )?,
                    None => 1.0,
                };
                Node::Sdk(Sampler::TraceIdRatioBased(ratio))
            }
            RawSampler::ParentBased(p) => {
                let path = format!("{path}.parent_based");
                let branch =
                    |raw: &Option<Spanned<RawSampler>>, name: &str, default: Node<Block>| {
                        raw.as_ref()
                            .map_or(Ok(default), |raw| self.node(raw, &format!("{path}.{name}")))
                    };
                let defaults = Branches::with_root(Node::Sdk(Sampler::AlwaysOn));
                Node::ParentBased(Box::new(Branches {
                    root: branch(&p.root, "root", defaults.root)?,
                    remote_parent_sampled: branch(
                        &p.remote_parent_sampled,
                        "remote_parent_sampled",
                        defaults.remote_parent_sampled,
                    )?,
                    remote_parent_not_sampled: branch(
                        &p.remote_parent_not_sampled,
                        "remote_parent_not_sampled",
                        defaults.remote_parent_not_sampled,
                    )?,
                    local_parent_sampled: branch(
                        &p.local_parent_sampled,
                        "local_parent_sampled",
                        defaults.local_parent_sampled,
                    )?,
                    local_parent_not_sampled: branch(
                        &p.local_parent_not_sampled,
                        "local_parent_not_sampled",
                        defaults.local_parent_not_sampled,
                    )?,
                }))
            }
            RawSampler::Composite(raw) => {
                let path = format!("{path}.composite/development");
                #[cfg(feature = "composable")]
                {
                    Node::Composite(Box::new(composite::build(
                        self.ctx, raw, &path, self.clock,
                    )?))
                }
                #[cfg(not(feature = "composable"))]
                {
                    return Err(composite::missing_feature(self.ctx, raw, &path));
                }
            }
            RawSampler::RateLimiting(file) => {
                // Read ahead in the same order; a block not read ahead is read here.
                let ahead = self.blocks.borrow_mut().next();
                let block = ahead.map_or_else(|| block(self.ctx, file, raw, path, self.redis), Ok);
                Node::RateLimiting(block?)
            }
        })
    }
}

/// The `rate_limiting` rule file of a declarative configuration, for
/// [`SamplingConfig::from_path`]: the first in document order (`root` before the other
/// `parent_based` branches), its variable references resolved from the process
/// environment.
pub(crate) fn rate_limiting_config(
    text: &str,
    file: &str,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    rate_limiting_config_with(text, file, redis, &|name| std::env::var(name).ok())
}

/// [`rate_limiting_config`], reading variables through `lookup`.
pub(crate) fn rate_limiting_config_with(
    text: &str,
    file: &str,
    redis: Option<&[String]>,
    lookup: Lookup<'_>,
) -> Result<SamplingConfig, ConfigError> {
    let text = substitution::substitute(text, file, lookup)?;
    let ctx = Ctx::new(&text, file);
    let sampler = read(&ctx)?;
    // The first `rate_limiting` block: the block, its path and its span.
    let mut first = None;
    if let Some(s) = &sampler {
        leaves(s, "tracer_provider.sampler", &mut |raw, path| {
            match raw.get_ref() {
                RawSampler::RateLimiting(f) if first.is_none() => {
                    first = Some((f, format!("{path}.{PLUGIN_KEY}"), raw.span()));
                }
                _ => {}
            }
            Ok::<_, std::convert::Infallible>(())
        })
        .unwrap_or_else(|never| match never {});
    }
    match first {
        Some((raw, path, span)) => rule_file::config(&ctx, raw, redis)
            .map_err(|e| e.in_block(&path, ctx.pos(span))),
        None => Err(ctx.new_error(
            ConfigErrorKind::MissingKey,
            sampler.map_or(0..0, |s| s.span()),
            "tracer_provider.sampler",
            format!("the file's sampler has no `{PLUGIN_KEY}` sampler, so no rules to read; put one under tracer_provider.sampler (or a parent_based branch of it)"),
        )),
    }
}

/// Whether YAML `text` is a declarative configuration file: it has a top-level
/// `file_format` key.
pub(crate) fn is_declarative(text: &str) -> bool {
    text.lines().any(|line| {
        // A UTF-8 byte order mark may open the first line.
        line.trim_start_matches('\u{feff}')
            .strip_prefix("file_format")
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarative_files_are_recognised_by_file_format() {
        assert!(is_declarative("# c\nfile_format: \"1.0\"\n"));
        assert!(is_declarative("file_format : 1.0\n"));
        assert!(!is_declarative("default:\n  rate: 1\n  # file_format: x\n"));
        assert!(!is_declarative("  file_format: 1\n"));
        assert!(is_declarative("\u{feff}file_format: \"1.0\"\n"));
    }
}
