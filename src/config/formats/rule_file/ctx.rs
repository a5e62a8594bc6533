//! The context of a rule file's lowering: its text and name for the errors, and the key
//! path of a value, written out only when an error names it.

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

/// The key path of a table or value (e.g. `service[3].rule[0].rate`), written out only
/// when an error names it: a large file has millions of keys and few errors.
#[derive(Clone, Copy)]
pub(super) enum Path<'a> {
    /// `default`.
    Default,
    /// `service[i]`.
    Service(usize),
    /// `<parent>.rule[i]`.
    Rule(&'a Path<'a>, usize),
    /// `<parent>.<key>`.
    Key(&'a Path<'a>, &'static str),
    /// `<parent>.attributes."<name>"`.
    Attribute(&'a Path<'a>, &'a str),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Default => f.write_str("default"),
            Path::Service(i) => write!(f, "service[{i}]"),
            Path::Rule(parent, i) => write!(f, "{parent}.rule[{i}]"),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Attribute(parent, name) => write!(f, "{parent}.attributes.{name:?}"),
        }
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

    /// `f`'s verdict on `value`; on an error, the error at `value`'s position under
    /// `key` (written out only then: loading a large file checks millions of values).
    pub(crate) fn check<T, U>(
        &self,
        value: &Spanned<T>,
        key: impl fmt::Display,
        f: impl FnOnce(&T) -> Result<U, Invalid>,
    ) -> Result<U, ConfigError> {
        f(value.get_ref()).map_err(|e| self.err(e, value.span(), key))
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
