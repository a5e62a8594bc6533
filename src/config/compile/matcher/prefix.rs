//! [`Prefixes`]: the literal texts a chunk's span-name patterns start with (a
//! `prefix*` pattern's whole test, a general glob's first filter), tested together in
//! one tight loop on the name's first word, with no pattern to dispatch on and no
//! pointer to follow: each prefix of up to [`INLINE`] bytes is held in its entry's
//! words.

/// Prefixes up to this long are held whole in an entry's two words.
pub(super) const INLINE: usize = 16;

/// The prefixes of a chunk, each with the rules whose span name must start with it.
#[derive(Default)]
pub(super) struct Prefixes(Box<[(Starts, u64)]>);

/// A prefix of up to [`INLINE`] bytes held in words: the test that a text starts
/// with it is two word comparisons (the span names' filter here, the attribute values'
/// `prefix*` conditions in [`shapes`](super::shapes)).
pub(super) struct Starts {
    /// The prefix's first bytes (up to 8), zero-padded.
    head: u64,
    /// The bytes of `head` that count.
    mask: u64,
    /// Bytes `len - 8..len`, when `len` is over 8.
    tail: u64,
    len: usize,
}

/// The first 8 bytes of `s` from `at`, if it has them.
#[inline(always)]
fn word(s: &[u8], at: usize) -> Option<u64> {
    let bytes = s.get(at..at.checked_add(8)?)?;
    bytes.try_into().ok().map(u64::from_le_bytes)
}

/// The first bytes of `s`, up to 8, zero-padded.
#[inline(always)]
pub(super) fn head(s: &[u8]) -> u64 {
    if let Some(w) = word(s, 0) {
        return w;
    }
    let mut buf = [0u8; 8];
    let n = s.len().min(8);
    buf[..n].copy_from_slice(&s[..n]);
    u64::from_le_bytes(buf)
}

impl Starts {
    /// The test for `text` (at most [`INLINE`] bytes).
    pub(super) fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let len = bytes.len();
        Self {
            head: head(bytes),
            mask: if len >= 8 {
                u64::MAX
            } else {
                (1u64 << (8 * len)) - 1
            },
            tail: if len > 8 {
                word(bytes, len - 8).unwrap_or(0)
            } else {
                0
            },
            len,
        }
    }

    /// Whether `s`, whose [`head`] is `first`, starts with the prefix.
    #[inline(always)]
    pub(super) fn start(&self, s: &[u8], first: u64) -> bool {
        s.len() >= self.len
            && first & self.mask == self.head
            && (self.len <= 8 || word(s, self.len - 8) == Some(self.tail))
    }
}

impl Prefixes {
    /// The prefixes of `groups` (each a text of at most [`INLINE`] bytes, with its
    /// rules).
    pub(super) fn new(groups: Vec<(String, u64)>) -> Self {
        let entries = groups
            .into_iter()
            .map(|(text, rules)| (Starts::new(&text), rules));
        Self(entries.collect())
    }

    /// `left` without the rules of each prefix `name` does not start with.
    #[inline]
    pub(super) fn filter(&self, mut left: u64, name: &str) -> u64 {
        let name = name.as_bytes();
        let first = head(name);
        for (p, rules) in &*self.0 {
            if left & rules != 0 && !p.start(name, first) {
                left &= !rules;
            }
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prefix length from 0 to [`INLINE`] against names around it: the filter
    /// keeps a prefix's rules exactly when the name starts with it.
    #[test]
    fn keeps_exactly_the_rules_whose_prefix_starts_the_name() {
        let text = "GET /orders/{id}/items";
        for len in 0..=INLINE {
            let prefix = &text[..len];
            let prefixes = Prefixes::new(vec![(prefix.to_owned(), 0b10)]);
            for name_len in 0..=text.len() {
                for change in [None, Some(0), Some(len.saturating_sub(1)), Some(len / 2)] {
                    let mut name = text.as_bytes()[..name_len].to_vec();
                    if let Some(at) = change.filter(|&at| at < name_len) {
                        name[at] ^= 0x20;
                    }
                    let name = String::from_utf8(name).unwrap();
                    let want = if name.starts_with(prefix) { 0b11 } else { 0b01 };
                    assert_eq!(prefixes.filter(0b11, &name), want, "{prefix:?} {name:?}");
                }
            }
        }
    }
}
