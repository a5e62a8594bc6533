//! Integer and float attribute values matched as numbers: when a pattern is compiled,
//! its text test on a number's `Display` text becomes a test on the number itself (an
//! exact decimal: the one integer or float written so; a prefix: the ranges of
//! integers whose decimal text starts with it), so a decision does not write the value
//! out. Each test answers what the text test answers; the shapes it does not cover
//! (suffixes, substrings, globs) keep the text test.

use super::shape::Shape;

/// How a pattern tests numbers, compiled from its shape.
#[derive(Clone)]
pub(super) struct Numbers {
    int: Int,
    float: Float,
}

#[derive(Clone)]
enum Int {
    /// The decimal text, then the text test.
    Text,
    /// Every integer (`*`).
    Any,
    /// Integers of this sign whose magnitude is in one of the ranges (inclusive,
    /// increasing; none: no integer).
    Ranges {
        negative: bool,
        ranges: Box<[(u64, u64)]>,
    },
}

#[derive(Clone)]
enum Float {
    /// The `Display` text, then the text test.
    Text,
    /// Every float (`*`).
    Any,
    /// The one float of these bits (none: no float is written so).
    Bits(Option<u64>),
    /// Every NaN (all are written `NaN`).
    NaN,
}

/// The largest magnitude of an integer of each sign: `i64::MAX`, and `2^63` below 0.
fn max_magnitude(negative: bool) -> u64 {
    if negative {
        i64::MIN.unsigned_abs()
    } else {
        i64::MAX.unsigned_abs()
    }
}

/// `text` as a sign and the rest.
fn sign(text: &str) -> (bool, &str) {
    match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    }
}

/// Whether `digits` are a magnitude as `Display` writes one after the sign (digits, no
/// leading zero; `-0` is not written).
fn magnitude(negative: bool, digits: &str) -> bool {
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (!digits.starts_with('0') || (digits == "0" && !negative))
}

impl Int {
    /// The integers written exactly `text`.
    fn exact(text: &str) -> Self {
        let (negative, digits) = sign(text);
        let value = magnitude(negative, digits)
            .then(|| digits.parse::<u64>().ok())
            .flatten()
            .filter(|m| *m <= max_magnitude(negative))
            .map(|m| (negative, m));
        match value {
            Some((negative, m)) => Int::Ranges {
                negative,
                ranges: Box::new([(m, m)]),
            },
            None => Int::none(),
        }
    }

    /// The integers whose text starts with `prefix`: those of `prefix`'s sign whose
    /// magnitude is `p · 10^j ..= (p + 1) · 10^j - 1` for some `j` (`p` the digits
    /// after the sign, read as a number).
    fn prefix(prefix: &str) -> Self {
        let (negative, digits) = sign(prefix);
        let max = max_magnitude(negative);
        match (negative, digits.is_empty()) {
            // `-*`: every negative integer.
            (true, true) => {
                let ranges = Box::new([(1, max)]);
                return Int::Ranges { negative, ranges };
            }
            (false, true) => return Int::Any,
            _ => {}
        }
        let Some(p) = magnitude(negative, digits)
            .then(|| digits.parse::<u64>().ok())
            .flatten()
        else {
            return Int::none();
        };
        let mut ranges = Vec::new();
        let mut scale = 1u64;
        while let Some(lo) = p.checked_mul(scale).filter(|lo| *lo <= max) {
            let hi = (p + 1)
                .checked_mul(scale)
                .map_or(max, |end| (end - 1).min(max));
            ranges.push((lo, hi));
            // `0` is the only integer written with a leading 0.
            match scale.checked_mul(10).filter(|_| p != 0) {
                Some(next) => scale = next,
                None => break,
            }
        }
        Int::Ranges {
            negative,
            ranges: ranges.into_boxed_slice(),
        }
    }

    fn none() -> Self {
        Int::Ranges {
            negative: false,
            ranges: Box::new([]),
        }
    }

    /// Whether `value` matches, `None` if only its text says.
    #[inline(always)]
    fn matches(&self, value: i64) -> Option<bool> {
        match self {
            Int::Text => None,
            Int::Any => Some(true),
            Int::Ranges { negative, ranges } => {
                let m = value.unsigned_abs();
                Some(
                    (value < 0) == *negative
                        && ranges
                            .iter()
                            .take_while(|(lo, _)| *lo <= m)
                            .any(|(_, hi)| m <= *hi),
                )
            }
        }
    }
}

impl Float {
    /// The float written exactly `text`: `Display` writes the shortest text that reads
    /// back as the same float, so a text it writes reads back to a float written so.
    fn exact(text: &str) -> Self {
        match text.parse::<f64>() {
            Ok(f) if f.to_string() != text => Float::Bits(None),
            Ok(f) if f.is_nan() => Float::NaN,
            Ok(f) => Float::Bits(Some(f.to_bits())),
            Err(_) => Float::Bits(None),
        }
    }

    #[inline(always)]
    fn matches(&self, value: f64) -> Option<bool> {
        match self {
            Float::Text => None,
            Float::Any => Some(true),
            Float::Bits(bits) => Some(*bits == Some(value.to_bits())),
            Float::NaN => Some(value.is_nan()),
        }
    }
}

impl Numbers {
    pub(super) fn new(shape: &Shape) -> Self {
        let (int, float) = match shape {
            Shape::Any => (Int::Any, Float::Any),
            Shape::Exact(text) => (Int::exact(text), Float::exact(text)),
            Shape::Prefix(text) => (Int::prefix(text), Float::Text),
            Shape::Suffix(_) | Shape::Contains(_) | Shape::Glob(..) => (Int::Text, Float::Text),
        };
        Self { int, float }
    }

    /// Whether the integer `value` matches, `None` if only its text says.
    #[inline(always)]
    pub(super) fn int(&self, value: i64) -> Option<bool> {
        self.int.matches(value)
    }

    /// Whether the float `value` matches, `None` if only its text says.
    #[inline(always)]
    pub(super) fn float(&self, value: f64) -> Option<bool> {
        self.float.matches(value)
    }
}
