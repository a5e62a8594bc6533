//! Glob patterns on span names and attribute values, with fast paths for the common
//! shapes (a literal, `prefix*`, `*suffix`, `*`) so most rules never run a regex. The
//! rule layer (`config`) writes globset's syntax; the composable samplers
//! (`composable`) the configuration schema's wildcards ([`Pattern::wildcard`]).

use std::fmt::{self, Write as _};

use globset::GlobBuilder;
use opentelemetry::Value;

mod number;
mod shape;

use number::Numbers;
use shape::{literal_parts, Shape, META};

/// A compiled glob (`*` any run of characters, `/` included; `?` one character;
/// `[abc]`, `{a,b}` and `\` escapes as in `globset`).
#[derive(Clone)]
pub(crate) struct Pattern {
    source: Box<str>,
    shape: Shape,
    /// The same test on integer and float values, without writing them as text.
    numbers: Numbers,
}

impl Pattern {
    /// Compiles `glob`; the error says why it does not parse.
    pub(crate) fn glob(glob: &str) -> Result<Self, globset::Error> {
        // Validate every pattern with globset, fast path or not, so the accepted
        // syntax is exactly globset's.
        let matcher = GlobBuilder::new(glob)
            .literal_separator(false)
            .build()?
            .compile_matcher();
        let shape = if glob.chars().all(|c| c == '*') && !glob.is_empty() {
            Shape::Any
        } else if let Some((leading, literal, trailing)) = literal_parts(glob) {
            match (leading, trailing) {
                (false, false) => Shape::Exact(literal.into()),
                (false, true) => Shape::Prefix(literal.into()),
                (true, false) => Shape::Suffix(literal.into()),
                (true, true) => Shape::Contains(Box::new(
                    memchr::memmem::Finder::new(literal.as_bytes()).into_owned(),
                )),
            }
        } else {
            let literal = glob.split(META).next().unwrap_or_default();
            Shape::Glob(literal.into(), Box::new(matcher))
        };
        Ok(Self::new(glob, shape))
    }

    /// Compiles a wildcard pattern of the configuration schema's `attribute_patterns`:
    /// `*` any run of characters (none included, `/` included), `?` one character,
    /// every other character itself (case-sensitive; `[`, `{` and `\` are literal).
    /// Infallible for that syntax: it is translated to an escaped glob.
    #[cfg_attr(not(feature = "composable"), allow(dead_code))]
    pub(crate) fn wildcard(wildcard: &str) -> Result<Self, globset::Error> {
        let mut glob = String::with_capacity(wildcard.len() + 8);
        let mut previous_star = false;
        for c in wildcard.chars() {
            match c {
                // `**` is globset's "any directories": a run of stars is one star here.
                '*' if previous_star => continue,
                '*' | '?' => glob.push(c),
                '[' | ']' | '{' | '}' | '\\' => {
                    glob.push('[');
                    glob.push(c);
                    glob.push(']');
                }
                c => glob.push(c),
            }
            previous_star = c == '*';
        }
        Self::glob(&glob)
    }

    /// A pattern matching `literal` only (a Jaeger operation name).
    pub(crate) fn literal(literal: &str) -> Self {
        Self::new(literal, Shape::Exact(literal.into()))
    }

    fn new(source: &str, shape: Shape) -> Self {
        Self {
            source: source.into(),
            numbers: Numbers::new(&shape),
            shape,
        }
    }

    /// The pattern as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// The one text this pattern matches, if it has no wildcard.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // the rule layer's index
    pub(crate) fn as_exact(&self) -> Option<&str> {
        match &self.shape {
            Shape::Exact(e) => Some(e),
            _ => None,
        }
    }

    /// The literal text every match starts with, if the pattern has one, and whether
    /// starting with it is the whole test (`prefix*`) rather than a first filter (a
    /// general glob). `None` for the other shapes.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // the rule layer's index
    pub(crate) fn prefix(&self) -> Option<(&str, bool)> {
        match &self.shape {
            Shape::Prefix(p) => Some((p, true)),
            Shape::Glob(p, _) if !p.is_empty() => Some((p, false)),
            _ => None,
        }
    }

    /// The text a `*text*` pattern looks for, if it is one.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // the rule layer's index
    pub(crate) fn substring(&self) -> Option<&[u8]> {
        match &self.shape {
            Shape::Contains(finder) => Some(finder.needle()),
            _ => None,
        }
    }

    #[inline(always)]
    pub(crate) fn is_match(&self, s: &str) -> bool {
        match &self.shape {
            Shape::Glob(prefix, m) => starts_with(s.as_bytes(), prefix) && m.is_match(s),
            _ => self.is_match_bytes(s.as_bytes()),
        }
    }

    /// [`is_match`](Self::is_match) on text given as bytes: the shapes that are not a
    /// general glob compare bytes, so an integer's digits need no UTF-8 check.
    #[inline(always)]
    fn is_match_bytes(&self, s: &[u8]) -> bool {
        match &self.shape {
            Shape::Any => true,
            Shape::Exact(e) => bytes_eq(s, e.as_bytes()),
            Shape::Prefix(p) => starts_with(s, p),
            Shape::Suffix(p) => s
                .len()
                .checked_sub(p.len())
                .is_some_and(|at| bytes_eq(&s[at..], p.as_bytes())),
            Shape::Contains(finder) => contains(s, finder),
            Shape::Glob(..) => std::str::from_utf8(s).is_ok_and(|s| self.is_match(s)),
        }
    }

    /// Whether an attribute value, as text, matches. Strings, booleans, integers and
    /// floats are matched without allocating (integers and floats against an exact or
    /// prefix pattern as numbers, without being written out: [`number`]), and so are
    /// arrays (rare at sampling time) whose text fits a small stack buffer; longer ones
    /// are rendered to a `String`.
    #[inline(always)]
    pub(crate) fn matches_value(&self, value: &Value) -> bool {
        // Strings, then integers, by a branch each (the values rules read most), the
        // other types out of line: a jump table on the type here cost a mispredicted
        // indirect jump per condition of a decision.
        if let Value::String(s) = value {
            return self.is_match(s.as_str());
        }
        if let Value::I64(i) = value {
            return self.matches_int(*i);
        }
        self.matches_other(value)
    }

    /// [`matches_int`](Self::matches_int) when the pattern tests integers as numbers
    /// (an exact or prefix pattern, `*`), `None` when only the integer's text says.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // the rule layer's index
    #[inline(always)]
    pub(crate) fn matches_int_as_number(&self, value: i64) -> Option<bool> {
        self.numbers.int(value)
    }

    /// [`matches_value`](Self::matches_value) on an integer value.
    #[inline(always)]
    pub(crate) fn matches_int(&self, value: i64) -> bool {
        match self.numbers.int(value) {
            Some(matches) => matches,
            None => self.is_match_bytes(format_i64(value, &mut [0; 20])),
        }
    }

    /// [`matches_value`](Self::matches_value) on a value neither a string nor an
    /// integer.
    #[inline(never)]
    fn matches_other(&self, value: &Value) -> bool {
        match value {
            Value::Bool(b) => self.is_match_bytes(if *b { b"true" } else { b"false" }),
            Value::F64(f) => match self.numbers.float(*f) {
                Some(matches) => matches,
                None => self.matches_display(f),
            },
            other => self.matches_display(other),
        }
    }

    fn matches_display(&self, value: &dyn fmt::Display) -> bool {
        let mut buf = StackBuf::default();
        if write!(buf, "{value}").is_ok() {
            self.is_match(buf.as_str())
        } else {
            self.is_match(&value.to_string())
        }
    }
}

/// Whether `needle` (the finder's) occurs in `haystack`: [`short_contains`], else
/// the vectorised searcher. Out of line: inlined, it made the whole rule-based decision
/// slower (its refusal with no rules included), not only the substring test.
#[inline(never)]
fn contains(haystack: &[u8], finder: &memchr::memmem::Finder<'_>) -> bool {
    short_contains(haystack, finder.needle()).unwrap_or_else(|| finder.find(haystack).is_some())
}

/// Whether `needle` occurs in `haystack`, if the haystack is short: span names and
/// attribute values are; below [`SHORT_HAYSTACK`] bytes, a scan of the windows whose
/// first and last bytes are the needle's, with an inline comparison, beats setting up
/// the vectorised searcher. `None` for a longer haystack.
#[inline(always)]
pub(crate) fn short_contains(haystack: &[u8], needle: &[u8]) -> Option<bool> {
    if haystack.len() >= SHORT_HAYSTACK {
        return None;
    }
    let (Some(&first), Some(&last)) = (needle.first(), needle.last()) else {
        return Some(true);
    };
    Some(
        haystack
            .windows(needle.len())
            .any(|w| w[0] == first && w[w.len() - 1] == last && bytes_eq(w, needle)),
    )
}

/// See [`contains`].
const SHORT_HAYSTACK: usize = 64;

/// Byte equality for the short strings of span names and attribute keys, inline:
/// a call into libc's `memcmp` per comparison was a quarter of a 10-rule decision.
/// Compares in 8-byte words (the last one overlapping), then 4-byte, then bytes.
#[inline]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    if n >= 8 {
        let mut at = 0;
        while at + 8 < n {
            if word(a, at) != word(b, at) {
                return false;
            }
            at += 8;
        }
        word(a, n - 8) == word(b, n - 8)
    } else if n >= 4 {
        half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4)
    } else {
        (0..n).all(|i| a[i] == b[i])
    }
}

/// Whether `s` starts with `prefix`.
#[inline]
fn starts_with(s: &[u8], prefix: &str) -> bool {
    s.get(..prefix.len())
        .is_some_and(|head| bytes_eq(head, prefix.as_bytes()))
}

/// `value` in decimal, written into `buf` (no formatting machinery, no allocation).
#[inline]
fn format_i64(value: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut n = value.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.source, f)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// A small stack buffer a number is written into, to match it without allocating.
struct StackBuf {
    bytes: [u8; 40],
    len: usize,
}

impl Default for StackBuf {
    fn default() -> Self {
        Self {
            bytes: [0; 40],
            len: 0,
        }
    }
}

impl StackBuf {
    fn as_str(&self) -> &str {
        // Only whole `str`s are ever copied in, so the prefix is valid UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dst = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn fast_shapes_agree_with_globset() {
        let names = [
            "GET /api/users",
            "/health",
            "healthz",
            "",
            "a*b",
            "GET /api",
            "health",
            "health/x",
            "a/health",
            "/health/x",
            "/orders/{id}/items",
            "/orders/{id}/itemsx",
            "a*",
            "ab",
            "x{",
            "x{yz",
        ];
        for glob in [
            "*",
            "GET /api*",
            "*health",
            "/health",
            "*api*",
            "GET /{api,web}/*",
            "?ealthz",
            "**/health",
            "**/health/**",
            "**/",
            "health/**",
            "**",
            r"/orders/\{id\}/items",
            r"a\*",
            "x[{]*",
        ] {
            let p = Pattern::glob(glob).unwrap();
            let g = GlobBuilder::new(glob).build().unwrap().compile_matcher();
            for n in names {
                assert_eq!(p.is_match(n), g.is_match(n), "{glob} on {n}");
            }
        }
    }

    proptest::proptest! {
        /// Escapes and one-character classes read as literal characters agree with
        /// globset, stars around them included; other classes and `?` stay globs.
        #[test]
        fn escaped_literals_agree_with_globset(
            glob in r"[*]{0,2}(a|\\[*?{}\[\]\\]|\[[a{}*?\[\]!^-]\]|\{|\?|/){0,5}[*]{0,2}",
            name in r"[a*?{}\[\]\\/!^-]{0,6}",
        ) {
            if let Ok(g) = GlobBuilder::new(&glob).literal_separator(false).build() {
                let p = Pattern::glob(&glob).unwrap();
                proptest::prop_assert_eq!(p.is_match(&name), g.compile_matcher().is_match(&name));
            }
        }

        /// Every shape (the short-haystack substring scan included, on both sides of
        /// its length threshold) matches what globset matches.
        #[test]
        fn every_shape_agrees_with_globset(
            glob in "[*]{0,3}[ab/]{0,3}[*]{0,2}[ab/]{0,3}[*]{0,3}",
            name in "[ab/]{0,6}|[ab/]{60,80}",
        ) {
            let p = Pattern::glob(&glob).unwrap();
            let g = GlobBuilder::new(&glob).build().unwrap().compile_matcher();
            proptest::prop_assert_eq!(p.is_match(&name), g.is_match(&name));
        }
    }

    #[test]
    fn values_match_as_text() {
        let p = Pattern::glob("5*").unwrap();
        assert!(p.matches_value(&Value::I64(503)));
        assert!(!p.matches_value(&Value::I64(200)));
        assert!(Pattern::glob("true")
            .unwrap()
            .matches_value(&Value::Bool(true)));
        assert!(Pattern::glob("0.5")
            .unwrap()
            .matches_value(&Value::F64(0.5)));
        let long = Value::F64(1e300);
        assert!(Pattern::glob("1000*").unwrap().matches_value(&long));
        // Arrays match their `Display` text, short (on the stack) or long (a String).
        for words in [vec!["a", "b"], vec!["a-rather-long-tag"; 4]] {
            let array = Value::Array(
                words
                    .into_iter()
                    .map(opentelemetry::StringValue::from)
                    .collect::<Vec<_>>()
                    .into(),
            );
            let text = array.to_string();
            assert!(
                Pattern::glob(&globset::escape(&text))
                    .unwrap()
                    .matches_value(&array),
                "{text}"
            );
            assert!(
                !Pattern::glob("x*").unwrap().matches_value(&array),
                "{text}"
            );
        }
    }

    #[test]
    fn wildcards_have_only_star_and_question_mark() {
        let m = |w: &str, s: &str| Pattern::wildcard(w).unwrap().is_match(s);
        assert!(m("/api/*", "/api/users/1"));
        assert!(m("/api/*", "/api/"));
        assert!(!m("/api/*", "/apix"));
        assert!(m("/api/health?", "/api/healthz"));
        assert!(!m("/api/health?", "/api/health"));
        // `**` is `*`: no directory magic ("**/health" does not match "health").
        assert!(!m("**/health", "health"));
        assert!(m("**/health", "a/b/health"));
        // Glob syntax is literal.
        for literal in ["[ab]", "{a,b}", r"a\b", "a]b", "x{"] {
            assert!(m(literal, literal), "{literal}");
        }
        assert!(!m("[ab]", "a"));
        assert!(!m("{a,b}", "a"));
        assert!(!m("GET", "get"), "case-sensitive");
        assert!(m("", ""));
        assert!(!m("", "x"));
    }

    #[test]
    fn bytes_eq_agrees_with_slice_equality() {
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "http.method",
            "http.methoe",
            "region",
            "regioN",
            "http.status_code",
            "http.status_codf",
            "0123456789abcdefX",
            "0123456789abcdefY",
        ];
        for a in words {
            for b in words {
                assert_eq!(bytes_eq(a.as_bytes(), b.as_bytes()), a == b, "{a:?} {b:?}");
            }
        }
        for n in 0..40 {
            let a: Vec<u8> = (0..n).map(|i| i as u8).collect();
            for flip in 0..n {
                let mut b = a.clone();
                b[flip] ^= 1;
                assert!(!bytes_eq(&a, &b), "{n} {flip}");
            }
            assert!(bytes_eq(&a, &a.clone()));
        }
    }

    #[test]
    fn integers_format_like_display() {
        for i in [0, 7, -7, 503, i64::MAX, i64::MIN] {
            assert_eq!(format_i64(i, &mut [0; 20]), i.to_string().as_bytes());
        }
    }

    #[test]
    fn bad_globs_are_errors() {
        assert!(Pattern::glob("GET /[api").is_err());
        assert!(Pattern::glob("{a,b").is_err());
    }

    // Numbers matched as numbers (`number.rs`): the same answers as their text.
    /// Integers at the edges of the ranges a prefix compiles to, and random ones.
    fn integers() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            -1_000i64..1_000,
            prop::sample::select(vec![
                0,
                i64::MAX,
                i64::MIN,
                i64::MIN + 1,
                922_337_203_685_477_580,
                -922_337_203_685_477_580,
                1_999_999_999,
                2_000_000_000,
            ]),
        ]
    }

    fn floats() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            prop::sample::select(vec![
                0.0,
                -0.0,
                1.5,
                -1.5,
                0.25,
                1e300,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                5.0,
            ]),
            (-100i32..100).prop_map(|i| f64::from(i) / 4.0),
        ]
    }

    /// Globs of the shapes numbers are compiled for (exact, prefix, `*`), and others.
    fn globs() -> impl Strategy<Value = String> {
        prop_oneof![
            "-?[0-9]{0,3}[*]?",
            "-?(0|[1-9][0-9]{17,19})[*]?",
            "(9223372036854775807|9223372036854775808|-9223372036854775808)[*]?",
            "-?[0-9]{1,2}[.][0-9]{0,2}[*]?",
            prop::sample::select(vec![
                "NaN", "inf", "-inf", "-0", "+1", "1.50", "1e3", "*", "-*", "*0", "*.5", "1?",
            ])
            .prop_map(String::from),
        ]
    }

    proptest! {
        /// An integer or a float matches as a number what its `Display` text matches.
        #[test]
        fn numbers_match_what_their_text_matches(
            glob in globs(),
            int in integers(),
            float in floats(),
        ) {
            let p = Pattern::glob(&glob).unwrap();
            prop_assert_eq!(p.matches_value(&Value::I64(int)), p.is_match(&int.to_string()));
            prop_assert_eq!(
                p.matches_value(&Value::F64(float)),
                p.is_match(&float.to_string())
            );
        }

        /// The same for a value written by the pattern itself (so the match is often
        /// true), and for its neighbours.
        #[test]
        fn numbers_written_as_the_pattern_match(glob in globs(), step in -2i64..=2) {
            let p = Pattern::glob(&glob).unwrap();
            let text = glob.trim_end_matches('*');
            if let Ok(int) = text.parse::<i64>() {
                for v in [int.saturating_add(step), int.saturating_mul(10), int.saturating_mul(100).saturating_add(step)] {
                    prop_assert_eq!(p.matches_value(&Value::I64(v)), p.is_match(&v.to_string()), "{}", v);
                }
            }
            if let Ok(float) = text.parse::<f64>() {
                prop_assert_eq!(p.matches_value(&Value::F64(float)), p.is_match(&float.to_string()));
            }
        }
    }
}
