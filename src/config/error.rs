//! [`ConfigError`]: what was wrong with a sampling configuration, and where.

use std::error::Error;
use std::fmt;

/// What kind of mistake a [`ConfigError`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read, or (feature `jaeger-remote`) the sampling endpoint
    /// gave no answer in time, an error status or an answer too large.
    Io,
    /// The text is not valid TOML, JSON or YAML, or a value has the wrong type.
    Syntax,
    /// A key the format does not know (a typo is never silently ignored).
    UnknownKey,
    /// A required key is missing.
    MissingKey,
    /// Two keys that exclude each other (say `rate` and `probability`) are both set.
    ConflictingKeys,
    /// A limit or rate that is zero, negative, NaN, infinite or out of range, a bad
    /// window, or rule floors that do not fit in the service cap.
    InvalidLimit,
    /// A probability outside `[0, 1]` or not a number.
    InvalidProbability,
    /// A glob that does not parse.
    BadGlob,
    /// An algorithm name other than `fixed`, `sliding` or `sliding-log`.
    UnknownAlgorithm,
    /// A strategy type other than `probabilistic` or `ratelimiting` (Jaeger files).
    UnknownType,
    /// Any other value outside its accepted set (span kind, parent origin, remote-parent
    /// policy, the `OTEL_TRACES_SAMPLER` value, a declarative file's `file_format` or
    /// sampler key).
    UnknownValue,
    /// A service listed twice.
    DuplicateService,
    /// A rule name used twice in one service (rules are named so a reload can keep
    /// their state).
    DuplicateRule,
    /// A service, rule, operation or attribute name that is empty.
    EmptyName,
    /// The file asks for something this build was compiled without (`scope = "fleet"`
    /// without the `redis` feature).
    MissingFeature,
    /// A service name, rule name or `[fleet]` prefix that cannot be part of the Redis key
    /// of a fleet-scoped limit (empty, or with `{`, `}` or whitespace).
    InvalidFleetKey,
    /// A fleet-scoped limiter could not be built (a bad Redis URL, or its thread could
    /// not start).
    Fleet,
    /// (Feature `jaeger-remote`) the TLS handshake with an `https://` sampling endpoint
    /// failed; the message names the cause: a certificate not signed by a trusted CA,
    /// one that does not name the host, an expired one, or this client's certificate
    /// (or its absence) refused. Never retried over plain HTTP.
    Tls,
    /// A service's limiters would take more memory than the budget
    /// ([`SamplingConfig::DEFAULT_MEMORY_BUDGET`](crate::SamplingConfig::DEFAULT_MEMORY_BUDGET),
    /// or the file's `[limits] memory_budget`).
    MemoryBudget,
    /// A rule, or a service's own policy, that can never decide: it follows a rule with
    /// no condition (which matches every span), in the service's own rules or among
    /// those it inherits.
    UnreachableRule,
    /// A limit's window is shorter than the resolution of the clock the sampler reads,
    /// which would silently enforce a different rate.
    WindowBelowClockResolution,
    /// A [`ReloadHandle`](crate::config::ReloadHandle) was used after its sampler (and
    /// every clone of it) was dropped: there are no rules left to replace.
    SamplerGone,
}

/// A sampling configuration that could not be loaded: the file, the line and column,
/// the key, what was wrong and what is accepted.
///
/// Its `Display` reads `FILE:LINE:COLUMN: KEY: MESSAGE`, the form editors and terminals
/// turn into a link. Line and column count from 1, columns in characters (not bytes), a
/// leading UTF-8 byte order mark not counted; they are 0 where there is no file position
/// (an environment variable, an unreadable file), and `Display` then reads
/// `FILE: KEY: MESSAGE`. Its `Debug` (what `?` in a `main` returning `Result` prints)
/// reads the same; `{:#?}` shows the fields.
///
/// ```
/// use otel_rate_sampler::{ConfigErrorKind, SamplingConfig};
///
/// let err = SamplingConfig::from_toml_str("[default]\nrate = -1\n", "sampling.toml").unwrap_err();
/// assert_eq!(err.kind(), ConfigErrorKind::InvalidLimit);
/// assert_eq!((err.file(), err.line(), err.column(), err.key()), ("sampling.toml", 2, 8, "default.rate"));
/// assert!(err.to_string().starts_with("sampling.toml:2:8: default.rate: "));
/// ```
pub struct ConfigError {
    kind: ConfigErrorKind,
    file: String,
    line: usize,
    column: usize,
    key: String,
    message: String,
    source: Option<Box<dyn Error + Send + Sync + 'static>>,
}

/// A position in a file, counted from 1 (0 where there is none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Pos {
    /// The line and column (in characters) of byte `offset` in `text` (an offset inside
    /// a character counts as that character).
    pub(crate) fn of_offset(text: &str, offset: usize) -> Pos {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

/// The start of each line of a text, to turn many offsets into positions in
/// logarithmic time each (what a loader uses for positions it keeps, not only errors).
#[derive(Debug)]
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1))
            .collect();
        Self { text, starts }
    }

    /// [`Pos::of_offset`], in time logarithmic in the lines and linear in the line.
    pub(crate) fn pos(&self, offset: usize) -> Pos {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        Pos {
            line,
            column: self.text[start..offset].chars().count() + 1,
        }
    }
}

impl ConfigErrorKind {
    /// An error of this kind about `file` as a whole (or the environment variable,
    /// endpoint or handle it names): no position, no key, until [`ConfigError::at`] or
    /// [`ConfigError::on_key`] gives them.
    pub(crate) fn error(self, file: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            kind: self,
            file: file.to_owned(),
            line: 0,
            column: 0,
            key: String::new(),
            message: message.into(),
            source: None,
        }
    }
}

impl ConfigError {
    /// The same error at `pos` in its file, on `key` (a path such as
    /// `service[1].rule[0].rate`).
    pub(crate) fn at(self, pos: Pos, key: impl Into<String>) -> Self {
        Self {
            line: pos.line,
            column: pos.column,
            ..self.on_key(key)
        }
    }

    /// The same error on `key`, with no position (an environment variable's name, say).
    pub(crate) fn on_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// The error of a block nested at `prefix` in a larger file, the block starting at
    /// `start`: its key, relative to the block, becomes `prefix.key`, and a position
    /// before the block (the start of the file, for a missing key) becomes the block's.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))] // declarative files nest rule files
    pub(crate) fn in_block(mut self, prefix: &str, start: Pos) -> Self {
        self.key = match self.key.as_str() {
            "" => prefix.to_owned(),
            key => format!("{prefix}.{key}"),
        };
        if (self.line, self.column) < (start.line, start.column) {
            (self.line, self.column) = (start.line, start.column);
        }
        self
    }

    /// The same error with `message` in place of its own.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))]
    pub(crate) fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub(crate) fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of mistake this is.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// The file (or environment variable) the configuration came from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line, from 1 (0 if there is no position).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column in characters, from 1 (0 if there is no position).
    pub fn column(&self) -> usize {
        self.column
    }

    /// The key, as a path such as `service[1].rule[0].rate` (empty if unknown).
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", self.file)?;
        } else {
            write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

/// The `Display` form, so that `fn main() -> Result<(), ConfigError>` (or a boxed error)
/// prints `Error: FILE:LINE:COLUMN: KEY: MESSAGE`; `{:#?}` shows the fields.
impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return fmt::Display::fmt(self, f);
        }
        f.debug_struct("ConfigError")
            .field("kind", &self.kind)
            .field("file", &self.file)
            .field("line", &self.line)
            .field("column", &self.column)
            .field("key", &self.key)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_character_columns() {
        let text = "a\nbé = 1\n";
        assert_eq!(Pos::of_offset(text, 0), Pos { line: 1, column: 1 });
        assert_eq!(Pos::of_offset(text, 2), Pos { line: 2, column: 1 });
        // "é" is two bytes, one column.
        assert_eq!(Pos::of_offset(text, 6), Pos { line: 2, column: 4 });
        assert_eq!(Pos::of_offset(text, 999), Pos { line: 3, column: 1 });
        // Inside "é": that character.
        assert_eq!(Pos::of_offset(text, 4), Pos { line: 2, column: 2 });
    }

    #[test]
    fn the_line_index_agrees_with_of_offset() {
        let text = "a\nbé = 1\n\nlast";
        let index = LineIndex::new(text);
        for offset in 0..=text.len() + 2 {
            assert_eq!(index.pos(offset), Pos::of_offset(text, offset), "{offset}");
        }
    }

    #[test]
    fn debug_reads_like_display_and_no_position_is_not_printed_as_zeros() {
        let err = ConfigErrorKind::InvalidLimit
            .error("s.toml", "rate -1.0 per second is not positive")
            .at(Pos { line: 2, column: 8 }, "default.rate");
        assert_eq!(format!("{err:?}"), err.to_string());
        assert_eq!(
            err.to_string(),
            "s.toml:2:8: default.rate: rate -1.0 per second is not positive"
        );
        assert!(format!("{err:#?}").contains("InvalidLimit"));
        let err = ConfigErrorKind::Io.error("s.toml", "cannot read the file");
        assert_eq!(err.to_string(), "s.toml: cannot read the file");
    }
}
