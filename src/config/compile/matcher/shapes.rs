//! [`Conditions`]: a chunk's attribute conditions grouped by the shape of their
//! pattern, each group tested in its own tight loop with its constants held in its
//! entries, no pattern shape to dispatch on: exact texts of up to 16 bytes (a length
//! and two words), `prefix*` texts of up to 16 bytes (a [`Starts`]), and the rest
//! (longer texts, suffixes, substrings, globs, `*`) through [`Pattern`]'s general
//! test. The order of the conditions does not change the answer: each only clears the
//! rules it fails, and the first match is the lowest rule left. Integers and the other
//! types take the pattern's own test whatever the group
//! ([`Pattern::matches_int_as_number`], [`Pattern::matches_value`]), so what matches is
//! what the pattern says.

use opentelemetry::Value;

use super::prefix::{self, Starts};
use super::table::{words, Values, IN_WORDS};
use crate::pattern::Pattern;

/// The attribute conditions of a chunk.
pub(super) struct Conditions {
    exact: Box<[Exact]>,
    prefix: Box<[Prefix]>,
    general: Box<[General]>,
}

/// An exact text of up to [`IN_WORDS`] bytes: its length and [`words`].
struct Exact {
    key: usize,
    len: usize,
    head: u64,
    tail: u64,
    rules: u64,
    /// For the values that are not strings.
    pattern: Pattern,
}

/// A `prefix*` pattern of up to [`prefix::INLINE`] bytes.
struct Prefix {
    key: usize,
    starts: Starts,
    rules: u64,
    /// For the values that are not strings.
    pattern: Pattern,
}

struct General {
    key: usize,
    rules: u64,
    pattern: Pattern,
}

/// A key's value as a condition reads it: a string's text or an integer, compared
/// directly by the exact and prefix conditions; any other type for the general test.
#[derive(Clone, Copy)]
enum Flat<'a> {
    Absent,
    Text(&'a str),
    Int(i64),
    Other(&'a Value),
}

impl<'a> Flat<'a> {
    /// The view of `value`: strings, then integers, by a branch each (a jump table on
    /// the type cost a mispredicted indirect jump).
    #[inline(always)]
    fn of(value: &'a Value) -> Self {
        if let Value::String(s) = value {
            return Flat::Text(s.as_str());
        }
        if let Value::I64(i) = value {
            return Flat::Int(*i);
        }
        Flat::Other(value)
    }
}

/// [`Pattern::matches_value`] on a value neither a string nor an integer, out of line.
#[inline(never)]
fn other(value: &Value, pattern: &Pattern) -> bool {
    pattern.matches_value(value)
}

/// Whether `pattern` matches `value`: [`Pattern::matches_value`]'s answer on the value
/// the view was decoded from, `false` for an absent key.
#[inline(always)]
fn general(value: Flat<'_>, pattern: &Pattern) -> bool {
    match value {
        Flat::Absent => false,
        Flat::Text(s) => pattern.is_match(s),
        Flat::Int(i) => pattern.matches_int(i),
        Flat::Other(v) => other(v, pattern),
    }
}

impl Conditions {
    /// The conditions of `groups` (the key's number in the table of keys, the value's
    /// pattern, the rules using them; each distinct).
    pub(super) fn new(groups: Vec<(usize, Pattern, u64)>) -> Self {
        let (mut exact, mut prefix, mut general) = (Vec::new(), Vec::new(), Vec::new());
        for (key, pattern, rules) in groups {
            let exact_words = (pattern.as_exact())
                .filter(|t| t.len() <= IN_WORDS)
                .map(|t| (t.len(), words(t.as_bytes())));
            let starts = match pattern.prefix() {
                Some((text, true)) if text.len() <= prefix::INLINE => Some(Starts::new(text)),
                _ => None,
            };
            if let Some((len, (head, tail))) = exact_words {
                exact.push(Exact {
                    key,
                    len,
                    head,
                    tail,
                    rules,
                    pattern,
                });
            } else if let Some(starts) = starts {
                prefix.push(Prefix {
                    key,
                    starts,
                    rules,
                    pattern,
                });
            } else {
                general.push(General {
                    key,
                    rules,
                    pattern,
                });
            }
        }
        Self {
            exact: exact.into_boxed_slice(),
            prefix: prefix.into_boxed_slice(),
            general: general.into_boxed_slice(),
        }
    }

    /// `left` without the rules with a condition the span fails (its key absent, or
    /// its value not matching); a condition none of `left` uses is not tested.
    #[inline]
    pub(super) fn filter(&self, mut left: u64, values: &Values<'_>) -> u64 {
        let value = |key: usize| {
            values
                .get(key)
                .copied()
                .flatten()
                .map_or(Flat::Absent, Flat::of)
        };
        for c in &*self.exact {
            if left & c.rules != 0
                && !by_words(value(c.key), &c.pattern, |s| {
                    s.len() == c.len && words(s) == (c.head, c.tail)
                })
            {
                left &= !c.rules;
            }
        }
        for c in &*self.prefix {
            if left & c.rules != 0
                && !by_words(value(c.key), &c.pattern, |s| {
                    c.starts.start(s, prefix::head(s))
                })
            {
                left &= !c.rules;
            }
        }
        for c in &*self.general {
            if left & c.rules != 0 && !general(value(c.key), &c.pattern) {
                left &= !c.rules;
            }
        }
        left
    }
}

/// An exact or prefix condition on `value`: a string by `text` on its bytes (the
/// words held in the condition), the other types by `pattern`.
#[inline(always)]
fn by_words(value: Flat<'_>, pattern: &Pattern, text: impl FnOnce(&[u8]) -> bool) -> bool {
    match value {
        Flat::Text(s) => text(s.as_bytes()),
        Flat::Int(i) => int(i, pattern),
        Flat::Other(v) => other(v, pattern),
        Flat::Absent => false,
    }
}

/// [`Pattern::matches_int`] for an exact or prefix pattern, which tests integers as
/// numbers: inline, with the text test out of line.
#[inline(always)]
fn int(value: i64, pattern: &Pattern) -> bool {
    pattern
        .matches_int_as_number(value)
        .unwrap_or_else(|| int_as_text(value, pattern))
}

#[inline(never)]
fn int_as_text(value: i64, pattern: &Pattern) -> bool {
    pattern.matches_int(value)
}
