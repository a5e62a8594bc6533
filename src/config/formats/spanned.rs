//! A value with the byte range it was read from, from TOML or (feature `yaml`) YAML: the
//! raw structs of the rule file are written once and deserialised from either format,
//! so every key, default and check is shared.
//!
//! `toml` and `serde-saphyr` each have their own span wrapper, with its own private
//! protocol between the wrapper and the deserializer, and a `Deserialize` impl cannot
//! ask which deserializer it is given. The loader therefore says which format it reads
//! ([`reading`]) for the duration of one parse, on its own thread, and [`Spanned`]
//! delegates to that format's wrapper. Outside [`reading`], TOML is assumed.

use std::cell::Cell;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Range;

use serde::{Deserialize, Deserializer};

/// The text format a loader is reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Format {
    #[default]
    Toml,
    #[cfg(feature = "yaml")]
    Yaml,
}

thread_local! {
    static FORMAT: Cell<Format> = const { Cell::new(Format::Toml) };
}

/// While the returned guard lives, [`Spanned`] reads `format`'s spans; dropping it (also
/// on a panic) restores the previous format. A guard rather than a callback, so the
/// reader that parses calls down here and is never called back.
#[cfg_attr(not(feature = "yaml"), allow(dead_code))] // only YAML sets a format
#[must_use = "the format is restored when the guard is dropped"]
pub(crate) fn reading(format: Format) -> Reading {
    Reading(FORMAT.with(|f| f.replace(format)))
}

/// The format to restore: see [`reading`].
#[cfg_attr(not(feature = "yaml"), allow(dead_code))]
pub(crate) struct Reading(Format);

impl Drop for Reading {
    fn drop(&mut self) {
        FORMAT.with(|f| f.set(self.0));
    }
}

/// A value and the byte range of the text it was read from. Compared, ordered and
/// hashed by value alone, like `toml::Spanned`.
///
/// The range is kept as two `u32` (offsets past 4 GiB, in a file no loader reads whole,
/// saturate): a file of 200 000 services holds millions of these, and their size is
/// most of what the parse writes.
#[derive(Clone, Debug)]
pub(crate) struct Spanned<T> {
    start: u32,
    end: u32,
    value: T,
}

/// `n` as a `u32`, saturated.
fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl<T> Spanned<T> {
    /// The value.
    pub(crate) fn get_ref(&self) -> &T {
        &self.value
    }

    /// The value changed by `f`, with the same span.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))] // only YAML's key paths use it
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Spanned<U> {
        Spanned {
            start: self.start,
            end: self.end,
            value: f(self.value),
        }
    }

    /// The byte range it was read from.
    pub(crate) fn span(&self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Spanned<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match FORMAT.with(Cell::get) {
            Format::Toml => {
                let s = toml::Spanned::<T>::deserialize(deserializer)?;
                let span = s.span();
                Ok(Self {
                    start: offset(span.start),
                    end: offset(span.end),
                    value: s.into_inner(),
                })
            }
            #[cfg(feature = "yaml")]
            Format::Yaml => {
                let s = serde_saphyr::Spanned::<T>::deserialize(deserializer)?;
                let at = s.referenced.span();
                // Byte offsets are known for text read from a string, as here.
                let start = at.byte_offset().unwrap_or(0);
                let end = start + at.byte_len().unwrap_or(0);
                Ok(Self {
                    start: u32::try_from(start).unwrap_or(u32::MAX),
                    end: u32::try_from(end).unwrap_or(u32::MAX),
                    value: s.value,
                })
            }
        }
    }
}

impl<T: PartialEq> PartialEq for Spanned<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: Eq> Eq for Spanned<T> {}

impl<T: Hash> Hash for Spanned<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.value.hash(state);
    }
}

impl<T: PartialOrd> PartialOrd for Spanned<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        self.value.partial_cmp(&other.value)
    }
}

impl<T: Ord> Ord for Spanned<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.value.cmp(&other.value)
    }
}
