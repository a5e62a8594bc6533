//! A pattern's shape: the fast paths for the common globs (a literal, `prefix*`,
//! `*suffix`, `*text*`, `*`) and the general glob, which the pattern's text test and
//! its number test (`number.rs`) both read.

use globset::GlobMatcher;

#[derive(Clone)]
pub(super) enum Shape {
    Any,
    Exact(Box<str>),
    Prefix(Box<str>),
    Suffix(Box<str>),
    /// A substring, with its searcher built once (boxed, like the matcher below, to
    /// keep a pattern small: the rules are scanned in a row on every decision).
    Contains(Box<memchr::memmem::Finder<'static>>),
    /// A general glob, and the literal text it must start with (checked first: most
    /// names are rejected without running the matcher).
    Glob(Box<str>, Box<GlobMatcher>),
}

pub(super) const META: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

/// `glob` as a literal text, with whether a `*` comes before it and after it, if it
/// has no other wildcard: an escape (`\{`) or a class of one character (`[{]`, as
/// [`Pattern::wildcard`](super::Pattern::wildcard) writes) is that character. `None` for any other glob, and for
/// `**` anywhere (next to a `/` it is globset's "any directories, none included":
/// `**/health` matches `health`), which no fast shape says.
pub(super) fn literal_parts(glob: &str) -> Option<(bool, String, bool)> {
    if glob.contains("**") {
        return None;
    }
    let mut chars = glob.chars();
    let leading = glob.starts_with('*');
    if leading {
        chars.next();
    }
    let mut literal = String::with_capacity(glob.len());
    while let Some(c) = chars.next() {
        match c {
            '\\' => literal.push(chars.next()?),
            '[' => match (chars.next()?, chars.next()?) {
                // `[!a]`, `[^a]` negate; a backslash in a class is left to globset.
                (c, ']') if !matches!(c, '!' | '^' | '\\') => literal.push(c),
                _ => return None,
            },
            '*' => return chars.next().is_none().then_some((leading, literal, true)),
            '?' | ']' | '{' | '}' => return None,
            c => literal.push(c),
        }
    }
    Some((leading, literal, false))
}
