//! [`Needle`]: the text of a `*text*` span-name pattern, looked for in a short name
//! eight start positions at a time: the positions whose first and last bytes are the
//! text's are found in two words (a zero-byte test of each word against the byte
//! repeated), and only those are compared whole. A name of 14 bytes against a text of
//! 7 is one step, where a scan of the windows tested each of its 8 starts in turn.

use super::prefix::head;
use crate::pattern::bytes_eq;

/// Names up to this long are searched here (the pattern's own searcher beyond).
pub(super) const SHORT: usize = 64;

const LOW: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// A `*text*` pattern's text (not empty), with its first and last bytes repeated
/// in every byte of a word.
pub(super) struct Needle {
    text: Box<[u8]>,
    first: u64,
    last: u64,
}

/// The high bit of each byte of `x` that is zero; a byte above a zero byte may be
/// flagged too (the borrow of the subtraction), never a zero byte missed. The
/// candidates it gives are all compared whole, so a false one costs a comparison.
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(LOW) & !x & HIGH
}

/// The 8 bytes of `s` from `at` (zero-padded past its end, which the caller masks).
#[inline(always)]
fn word_at(s: &[u8], at: usize) -> u64 {
    s.get(at..).map_or(0, head)
}

impl Needle {
    /// The search for `text`, `None` if it is empty (a `**` pattern matches any name).
    pub(super) fn new(text: &[u8]) -> Option<Self> {
        let (&first, &last) = (text.first()?, text.last()?);
        Some(Self {
            text: text.into(),
            first: LOW * u64::from(first),
            last: LOW * u64::from(last),
        })
    }

    /// Whether the text occurs in `hay`, if `hay` is shorter than [`SHORT`] (`None`
    /// beyond: the caller asks the pattern).
    #[inline(always)]
    pub(super) fn in_short(&self, hay: &[u8]) -> Option<bool> {
        if hay.len() >= SHORT {
            return None;
        }
        let n = self.text.len();
        // The last position the text can start at.
        let Some(last_start) = hay.len().checked_sub(n) else {
            return Some(false);
        };
        let mut base = 0;
        while base <= last_start {
            let starts = zero_bytes(word_at(hay, base) ^ self.first)
                & zero_bytes(word_at(hay, base + n - 1) ^ self.last);
            // Only the starts up to `last_start`: the bytes past the name are padding.
            let room = last_start - base;
            let mut candidates = if room >= 7 {
                starts
            } else {
                starts & ((1u64 << (8 * (room + 1))) - 1)
            };
            while candidates != 0 {
                let at = base + (candidates.trailing_zeros() / 8) as usize;
                if bytes_eq(&hay[at..at + n], &self.text) {
                    return Some(true);
                }
                candidates &= candidates - 1;
            }
            base += 8;
        }
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every needle of up to 9 bytes cut from a text, and altered at each end, against
    /// every prefix of the text up to 63 bytes, with the bytes the subtraction's borrow
    /// confuses (0x00, 0x01 after a match) in it: the answer is `windows().any()`'s.
    #[test]
    fn finds_exactly_what_a_scan_of_the_windows_finds() {
        let mut text: Vec<u8> = b"GET /orders/42/admin/x\x00\x01//a\x01\x00aa/b/admin".to_vec();
        while text.len() < 70 {
            text.extend_from_slice(b"xy/admin/");
        }
        let mut needles: Vec<Vec<u8>> = Vec::new();
        for len in 1..=9 {
            for at in [0, 3, 4, 11, 14, 20, 22, 24, 30] {
                let n: Vec<u8> = text[at..at + len].to_vec();
                let mut first = n.clone();
                first[0] ^= 1;
                let mut last = n.clone();
                last[len - 1] ^= 1;
                needles.extend([n, first, last]);
            }
        }
        needles.push(b"/admin/".to_vec());
        needles.push(b"\x01".to_vec());
        for needle in &needles {
            let search = Needle::new(needle).unwrap();
            for end in 0..SHORT {
                let hay = &text[..end];
                let want = hay.windows(needle.len()).any(|w| w == needle.as_slice());
                assert_eq!(search.in_short(hay), Some(want), "{needle:?} in {hay:?}");
            }
            assert_eq!(search.in_short(&text[..SHORT]), None);
        }
        assert!(Needle::new(b"").is_none());
    }
}
