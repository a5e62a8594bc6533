//! A rule of a block: its conditions, its policy and its floor, lowered and checked.

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::ctx::Ctx;
use crate::config::formats::rule_file::policy::policy;
use crate::config::formats::rule_file::raw::RawRule;
use crate::config::formats::spanned::Spanned;
use crate::config::model::values::{self, Invalid};
use crate::config::model::Rule;
use crate::sampler::RemoteParents;

/// Rule `index` of a block (`unnamed` and its position name it when it has no `name`),
/// its parents followed as `remote_parents` says.
pub(super) fn rule(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawRule>,
    path: KeyPath<'_>,
    index: usize,
    unnamed: &str,
    remote_parents: RemoteParents,
) -> Result<Rule, ConfigError> {
    let span = raw.span();
    let raw = raw.get_ref();
    let key = |k: &'static str| path.key(k);
    let name = match &raw.name {
        Some(n) => {
            ctx.check(n, key("name"), values::name("rule name", n.get_ref()))?;
            n.get_ref().clone()
        }
        None => format!("{unnamed}-{}", index + 1),
    };
    let span_name = match &raw.span_name {
        Some(g) => Some(ctx.check(g, key("span_name"), values::glob(g.get_ref()))?),
        None => None,
    };
    let kind = match &raw.kind {
        Some(k) => Some(ctx.check(k, key("kind"), values::span_kind(k.get_ref()))?),
        None => None,
    };
    let parent = match &raw.parent {
        Some(p) => {
            let origin = ctx.check(p, key("parent"), values::parent(p.get_ref()))?;
            if origin == crate::sampler::Origin::Remote && remote_parents != RemoteParents::Cap {
                return Err(ctx.new_error(
                    ConfigErrorKind::ConflictingKeys,
                    p.span(),
                    key("parent"),
                    "parent = \"remote\" never matches while remote parents are followed; set remote_parents = \"cap\" on the service".into(),
                ));
            }
            Some(origin)
        }
        None => None,
    };
    let mut attributes = Vec::with_capacity(raw.attributes.len());
    for (k, v) in &raw.attributes {
        let attr_key = path.quoted("attributes", k.get_ref());
        ctx.check(k, attr_key, values::name("attribute key", k.get_ref()))?;
        attributes.push((
            k.get_ref().clone(),
            ctx.check(v, attr_key, values::glob(v.get_ref()))?,
        ));
    }
    let policy = policy(ctx, &raw.policy_keys(), path)?.ok_or_else(|| {
        ctx.new_error(
            ConfigErrorKind::MissingKey,
            span.clone(),
            path,
            "a rule needs a `rate`, a `limit` (with `window`), a `probability` (with an optional `at_least`) or `adaptive`"
                .into(),
        )
    })?;
    let floor = floor(ctx, raw, path)?;
    Ok(Rule {
        named: raw.name.is_some(),
        name,
        span_name,
        kind,
        parent,
        attributes,
        policy,
        floor,
        inherited: false,
    })
}

/// A rule's `floor`: permits reserved for it in the service cap.
fn floor(ctx: &Ctx<'_>, raw: &RawRule, path: KeyPath<'_>) -> Result<u32, ConfigError> {
    let key = |k: &'static str| path.key(k);
    Ok(match &raw.floor {
        Some(f) => ctx.check(f, key("floor"), {
            let f = *f.get_ref();
            u32::try_from(f).map_err(|_| {
                Invalid::new(
                    ConfigErrorKind::InvalidLimit,
                    format!("floor {f} is not a permit count; use a whole number from 0 up to the cap's permits"),
                )
            })
        })?,
        None => 0,
    })
}
