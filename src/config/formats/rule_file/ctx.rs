//! The context of a rule file's lowering: its text and name for the errors (the key path
//! of a value is a borrowed [`KeyPath`](crate::config::formats::key_path::KeyPath),
//! written out only when an error names it).

use std::cell::{OnceCell, RefCell};
use std::fmt;
use std::ops::Range;

use crate::config::error::{ConfigError, ConfigErrorKind, LineIndex, Pos};
use crate::config::formats::spanned::Spanned;
use crate::config::model::values::Invalid;

/// How service `i` opts out of `[default]`'s rules, written out when an error says so.
#[derive(Clone, Copy)]
pub(super) struct OptOut(pub(super) usize);

impl fmt::Display for OptOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "service[{}].inherit_default_rules = false", self.0)
    }
}

/// A rule file being lowered: its text and name, for the positions of its errors.
pub(crate) struct Ctx<'a> {
    pub(crate) text: &'a str,
    pub(crate) file: &'a str,
    /// Line starts, built on the first position asked for.
    lines: OnceCell<LineIndex<'a>>,
    /// The first `scope = "fleet"` (its span and key), for the Redis URL check.
    pub(super) first_fleet: RefCell<Option<(Range<usize>, String)>>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn pos(&self, span: Range<usize>) -> Pos {
        // Each limit keeps the position of its window: one scan of the text in all.
        self.lines
            .get_or_init(|| LineIndex::new(self.text))
            .pos(span.start)
    }

    pub(super) fn err(
        &self,
        invalid: Invalid,
        span: Range<usize>,
        key: impl fmt::Display,
    ) -> ConfigError {
        invalid.at(self.file, self.pos(span), &key.to_string())
    }

    /// The `verdict` of a check on `value`; on an error, the error at `value`'s position
    /// under `key` (written out only then: loading a large file checks millions of
    /// values). The caller runs the check itself, so a load only ever calls down here.
    pub(crate) fn check<T, U>(
        &self,
        value: &Spanned<T>,
        key: impl fmt::Display,
        verdict: Result<U, Invalid>,
    ) -> Result<U, ConfigError> {
        verdict.map_err(|e| self.err(e, value.span(), key))
    }

    pub(crate) fn new_error(
        &self,
        kind: ConfigErrorKind,
        span: Range<usize>,
        key: impl fmt::Display,
        message: String,
    ) -> ConfigError {
        Invalid::new(kind, message).at(self.file, self.pos(span), &key.to_string())
    }

    /// A context for the errors of `text`, read from `file`.
    pub(crate) fn new(text: &'a str, file: &'a str) -> Self {
        Ctx {
            text,
            file,
            lines: OnceCell::new(),
            first_fleet: RefCell::new(None),
        }
    }
}
