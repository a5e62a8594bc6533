//! What makes a span's key for fair shares ([`FairBy`]), and the key's hash: the span
//! name and the values of the attributes it names, as they are at the span's start.

use opentelemetry::{Array, Key, KeyValue, Value};

/// What tells apart the keys that share a limit fairly (see
/// [`FairLimiter`](crate::FairLimiter)): the span name, the values of some attributes
/// present at the span's start, or both.
///
/// A span without one of the attributes has its own value for it ("missing"): spans
/// missing the attribute form one key of their own.
///
/// ```
/// use otel_rate_sampler::FairBy;
///
/// let by_route = FairBy::attributes(["http.route"]);
/// let by_name_and_method = FairBy::span_name().and_attribute("http.request.method");
/// assert!(!by_route.is_empty() && !by_name_and_method.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FairBy {
    span_name: bool,
    attributes: Vec<Key>,
}

impl FairBy {
    /// Keys by span name.
    pub fn span_name() -> Self {
        Self {
            span_name: true,
            attributes: Vec::new(),
        }
    }

    /// Keys by the values of `keys` (in this order).
    pub fn attributes<K: Into<Key>>(keys: impl IntoIterator<Item = K>) -> Self {
        Self {
            span_name: false,
            attributes: keys.into_iter().map(Into::into).collect(),
        }
    }

    /// The span name as well.
    pub fn and_span_name(mut self) -> Self {
        self.span_name = true;
        self
    }

    /// One attribute's value more.
    pub fn and_attribute(mut self, key: impl Into<Key>) -> Self {
        self.attributes.push(key.into());
        self
    }

    /// Whether it names nothing (every span then has one key).
    pub fn is_empty(&self) -> bool {
        !self.span_name && self.attributes.is_empty()
    }

    /// Whether the span name is part of the key.
    pub fn uses_span_name(&self) -> bool {
        self.span_name
    }

    /// The attributes whose values are part of the key.
    pub fn attribute_keys(&self) -> &[Key] {
        &self.attributes
    }

    /// The key of a span named `name` starting with `attributes`: a hash of the name
    /// (if used) and each named attribute's value, or its absence. Allocates nothing.
    #[inline]
    pub(crate) fn key_of(&self, name: &str, attributes: &[KeyValue]) -> u64 {
        let mut h = KeyHasher(0);
        if self.span_name {
            h.bytes(name.as_bytes());
        }
        for key in &self.attributes {
            let key = key.as_str().as_bytes();
            match attributes
                .iter()
                .find(|kv| same_bytes(kv.key.as_str().as_bytes(), key))
            {
                Some(kv) => h.value(&kv.value),
                None => h.word(MISSING),
            }
        }
        h.0
    }
}

/// Whether `a` and `b` hold the same bytes: for an attribute key of 8 to 16 bytes (most
/// are) two word compares in line, where `==` calls `memcmp`.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&s[at..at + 8]);
            u64::from_le_bytes(w)
        };
        // The first and the last 8 bytes, overlapping below 16.
        word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
    } else {
        a == b
    }
}

/// What a missing attribute adds to the hash (no value's tag is this).
const MISSING: u64 = 0xA5A5_0000_0000_0000;

/// A multiply-rotate hash (FxHash's step) over words: a few nanoseconds for a route;
/// the limiter mixes it further. Not for hostile input: keys collide only by chance
/// (one in 2^64 per pair), and then count as one.
struct KeyHasher(u64);

impl KeyHasher {
    #[inline]
    fn word(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline]
    fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            // Always 8 bytes: `chunks_exact`.
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(u64::from_le_bytes(word));
        }
        // The last 0 to 7 bytes, little-endian, without a call to copy them.
        let last = chunks
            .remainder()
            .iter()
            .rev()
            .fold(0u64, |word, &b| (word << 8) | u64::from(b));
        self.word(last);
        // The length ends the string, so ("ab", "c") and ("a", "bc") differ.
        self.word(bytes.len() as u64);
    }

    #[inline]
    fn value(&mut self, value: &Value) {
        match value {
            Value::Bool(b) => self.word(1 + u64::from(*b)),
            Value::I64(i) => {
                self.word(3);
                self.word(*i as u64);
            }
            Value::F64(f) => {
                self.word(4);
                self.word(f.to_bits());
            }
            Value::String(s) => {
                self.word(5);
                self.bytes(s.as_str().as_bytes());
            }
            Value::Array(array) => {
                self.word(6);
                match array {
                    Array::Bool(v) => v.iter().for_each(|b| self.word(u64::from(*b))),
                    Array::I64(v) => v.iter().for_each(|i| self.word(*i as u64)),
                    Array::F64(v) => v.iter().for_each(|f| self.word(f.to_bits())),
                    Array::String(v) => v.iter().for_each(|s| self.bytes(s.as_str().as_bytes())),
                    // A kind of array added later: its kind alone.
                    _ => self.word(7),
                }
            }
            // A kind of value added later: its kind alone.
            _ => self.word(8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tell_apart_what_they_name_and_nothing_else() {
        let by_route = FairBy::attributes(["http.route"]);
        let route = |r: &str| vec![KeyValue::new("http.route", r.to_owned())];
        let a = by_route.key_of("x", &route("/a"));
        assert_eq!(
            a,
            by_route.key_of("y", &route("/a")),
            "the name is not used"
        );
        assert_ne!(a, by_route.key_of("x", &route("/b")));
        let missing = by_route.key_of("x", &[KeyValue::new("other", 1)]);
        // Keys of the key's length that differ in a middle byte, or in the last, are
        // other keys.
        for other in ["http.rOute", "http.routE", "http.route2"] {
            assert_eq!(by_route.key_of("x", &[KeyValue::new(other, "/a")]), missing);
        }
        assert_eq!(missing, by_route.key_of("y", &[]), "missing is one key");
        assert_ne!(missing, a);
        assert_ne!(missing, by_route.key_of("x", &route("")));

        let both = FairBy::span_name().and_attribute("n");
        let ab_c = both.key_of("ab", &[KeyValue::new("n", "c")]);
        assert_ne!(ab_c, both.key_of("a", &[KeyValue::new("n", "bc")]));
        assert_ne!(
            both.key_of("a", &[KeyValue::new("n", 1)]),
            both.key_of("a", &[KeyValue::new("n", "1")])
        );
        assert_ne!(
            FairBy::span_name().key_of("x", &[]),
            FairBy::span_name().key_of("y", &[])
        );
        assert!(FairBy::default().is_empty());
    }
}
