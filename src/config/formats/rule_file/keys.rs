//! Which policy key needs or rules out which: one table per place the keys are read,
//! each row checked in order, the first broken one the error.

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::ctx::Ctx;
use crate::config::formats::rule_file::raw::RawPolicy;

/// How a key stands to the keys beside it.
#[derive(Clone, Copy)]
pub(super) enum Beside {
    /// It is an error beside any of these.
    Forbids(&'static [&'static str]),
    /// It is an error unless one of these is beside it.
    Needs(&'static [&'static str]),
}

/// A key, how it stands to the others, and the error when it breaks that.
pub(super) type KeyRule = (&'static str, Beside, ConfigErrorKind, &'static str);

use Beside::{Forbids, Needs};
use ConfigErrorKind::{ConflictingKeys, MissingKey};

const A_LIMIT: &[&str] = &["rate", "limit"];
const A_LIMIT_OR_PROBABILITY: &[&str] = &["rate", "limit", "probability"];

/// The limit's keys, read first: `rate` or `limit` with its `window`, and the keys that
/// need one of them (or a `probability`, which has rules of its own, [`POLICY`]).
#[rustfmt::skip]
pub(super) const LIMIT: &[KeyRule] = &[
    ("limit", Forbids(&["rate"]), ConflictingKeys, "set `rate` (per second, fractional) or `limit` (per `window`), not both"),
    ("window", Forbids(&["rate"]), ConflictingKeys, "`window` goes with `limit`; a `rate` is per second"),
    ("window", Needs(&["limit"]), MissingKey, "`window` needs a `limit` beside it"),
    ("algorithm", Needs(A_LIMIT_OR_PROBABILITY), MissingKey, "`algorithm` needs a `rate` or a `limit` beside it"),
    ("scope", Needs(A_LIMIT_OR_PROBABILITY), MissingKey, "`scope` needs a `rate` or a `limit` beside it"),
    ("paced", Needs(A_LIMIT_OR_PROBABILITY), MissingKey, "`paced` needs a `rate` or a `limit` beside it"),
    ("fair_by", Needs(A_LIMIT), MissingKey, "`fair_by` shares a limit fairly per key: it needs a `rate` or a `limit` beside it (a `probability` keeps no count to share)"),
    ("max_keys", Needs(&["fair_by"]), MissingKey, "`max_keys` bounds the keys of `fair_by`: it needs a `fair_by` beside it"),
];

/// A policy's keys once its limit is read: a `probability` (with its `at_least`) or a
/// limit, not both.
#[rustfmt::skip]
pub(super) const POLICY: &[KeyRule] = &[
    ("at_least", Forbids(A_LIMIT), ConflictingKeys, "`at_least` is the lower bound of a `probability`; a limit (`rate` or `limit`) has none: remove one of the two"),
    ("at_least", Needs(&["probability"]), MissingKey, "`at_least` needs a `probability` beside it: keep with that probability, but at least this many traces per second"),
    ("probability", Forbids(A_LIMIT), ConflictingKeys, "a block sets a limit (`rate` or `limit`) or a `probability`, not both"),
    ("scope", Forbids(&["probability"]), ConflictingKeys, "`scope` applies to a limit; a `probability` is decided on the trace id, the same in every replica"),
    ("algorithm", Forbids(&["probability"]), ConflictingKeys, "`algorithm` applies to a limit; a `probability` has none"),
    ("paced", Forbids(&["probability"]), ConflictingKeys, "`paced` applies to a limit; a `probability` keeps traces whenever they come"),
];

/// The first row of `rules` that `raw` breaks, as the error at its key under `path`.
pub(super) fn check(
    ctx: &Ctx<'_>,
    raw: &RawPolicy<'_>,
    path: KeyPath<'_>,
    rules: &[KeyRule],
) -> Result<(), ConfigError> {
    let spans = raw.spans();
    for &(key, beside, kind, message) in rules {
        let Some(span) = spans.of(key) else {
            continue;
        };
        let broken = match beside {
            Forbids(others) => others.iter().any(|o| spans.of(o).is_some()),
            Needs(others) => others.iter().all(|o| spans.of(o).is_none()),
        };
        if broken {
            return Err(ctx.new_error(kind, span, path.key(key), message.into()));
        }
    }
    Ok(())
}
