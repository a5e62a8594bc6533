//! The public face of the crate's OTEP 235 rejection threshold.

use crate::composable::ComposableError;
use crate::sampler::Threshold as Inner;

/// `2^56`: the threshold that keeps nothing, one more than the largest randomness.
const MAX: u64 = 1 << 56;

/// A rejection threshold (OTEP 235, `th`): a span is kept iff the trace's 56-bit
/// randomness is at least the threshold. `0` keeps everything (`th:0`); `2^56` keeps
/// nothing. A lower threshold keeps more: the probability a threshold `T` keeps a span
/// with is `(2^56 − T) / 2^56`.
///
/// The constructors and accessors are ours: the specification describes thresholds as
/// 56-bit integers without naming a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Threshold(pub(crate) Inner);

impl Threshold {
    /// Keeps every span (`th:0`): the threshold of [`ComposableAlwaysOn`](crate::ComposableAlwaysOn).
    pub const ALWAYS: Threshold = Threshold(Inner::ALWAYS);

    /// The threshold with this value, `None` above `2^56`.
    pub fn from_value(value: u64) -> Option<Self> {
        (value <= MAX).then(|| Threshold(Inner::from_value(value)))
    }

    /// The threshold of sampling ratio `ratio`, with the specification's rounding:
    /// `2^56 − round(ratio · 2^56)`.
    ///
    /// # Errors
    ///
    /// [`ComposableError::InvalidRatio`] unless `ratio` is in `[2^-56, 1]` (the
    /// specification's range; a ratio of 0 has no threshold: see
    /// [`ComposableProbability`](crate::ComposableProbability)).
    pub fn from_ratio(ratio: f64) -> Result<Self, ComposableError> {
        if !(MIN_RATIO..=1.0).contains(&ratio) {
            return Err(ComposableError::InvalidRatio { ratio });
        }
        Ok(Threshold(Inner::from_probability(ratio)))
    }

    /// The threshold as a number in `0..=2^56`.
    pub fn value(self) -> u64 {
        self.0.value()
    }

    /// The probability this threshold keeps a span with.
    pub fn probability(self) -> f64 {
        self.0.probability()
    }

    /// Whether a trace with this 56-bit randomness is kept.
    #[inline]
    pub fn keeps(self, randomness: u64) -> bool {
        self.0.keeps(randomness)
    }
}

/// `2^-56`: the smallest ratio the specification accepts other than 0.
pub(crate) const MIN_RATIO: f64 = 1.0 / MAX as f64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_round_as_the_specification_says() {
        assert_eq!(Threshold::from_ratio(1.0).unwrap(), Threshold::ALWAYS);
        assert_eq!(Threshold::from_ratio(0.5).unwrap().value(), 1 << 55);
        assert_eq!(Threshold::from_ratio(0.25).unwrap().value(), 3 << 54);
        // 2^56 − round(0.1 · 2^56) = 0xe6666666666666 (th:e6666666666666).
        assert_eq!(
            Threshold::from_ratio(0.1).unwrap().value(),
            0xe6_6666_6666_6666
        );
        assert_eq!(Threshold::from_ratio(MIN_RATIO).unwrap().value(), MAX - 1);
        for bad in [0.0, MIN_RATIO / 2.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(
                    Threshold::from_ratio(bad),
                    Err(ComposableError::InvalidRatio { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn values_above_two_to_the_56_are_refused() {
        assert_eq!(Threshold::from_value(0), Some(Threshold::ALWAYS));
        assert!(Threshold::from_value(MAX).is_some_and(|t| !t.keeps(MAX - 1)));
        assert_eq!(Threshold::from_value(MAX + 1), None);
        let half = Threshold::from_value(1 << 55).unwrap();
        assert!(half.keeps(1 << 55) && !half.keeps((1 << 55) - 1));
        assert_eq!(half.probability(), 0.5);
    }
}
