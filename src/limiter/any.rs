use std::fmt;
use std::str::FromStr;

use super::{FixedWindow, RateLimiter, SlidingLog, SlidingWindowCounter};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::{Limit, LimitError};

/// The limiting algorithms this crate provides, to choose one at run time.
///
/// Parses from (and displays as) `fixed`, `sliding` and `sliding-log`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// [`FixedWindow`]: at most N per aligned window; the cheapest.
    #[default]
    FixedWindow,
    /// [`SlidingWindowCounter`]: at most N per aligned window and fewer than 2N in any
    /// sliding one; O(1) memory.
    SlidingWindow,
    /// [`SlidingLog`]: at most N in any sliding window, exactly; O(N) memory.
    SlidingLog,
}

impl Algorithm {
    /// Every algorithm, in the order of the docs.
    pub const ALL: [Algorithm; 3] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];

    /// The name it parses from: `fixed`, `sliding` or `sliding-log`.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed",
            Algorithm::SlidingWindow => "sliding",
            Algorithm::SlidingLog => "sliding-log",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = ParseAlgorithmError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| ParseAlgorithmError(s.to_owned()))
    }
}

/// The error of parsing an unknown [`Algorithm`] name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?}; expected one of \"fixed\", \"sliding\", \"sliding-log\"")]
pub struct ParseAlgorithmError(String);

/// Any of the crate's limiters, chosen at run time by [`Algorithm`], dispatched without
/// a virtual call.
pub struct AnyLimiter<C = MonotonicClock> {
    inner: Inner<C>,
}

enum Inner<C> {
    Fixed(FixedWindow<C>),
    Sliding(SlidingWindowCounter<C>),
    Log(SlidingLog<C>),
}

impl AnyLimiter {
    /// The `algorithm` limiter for `limit`, on the default [`MonotonicClock`].
    ///
    /// # Errors
    ///
    /// [`LimitError::TooManyPermits`] if the algorithm cannot hold `limit`'s permits.
    pub fn new(algorithm: Algorithm, limit: Limit) -> Result<Self, LimitError> {
        Self::with_clock(algorithm, limit, MonotonicClock::new())
    }
}

impl<C: Clock> AnyLimiter<C> {
    /// The `algorithm` limiter for `limit`, reading `clock`.
    ///
    /// # Errors
    ///
    /// [`LimitError::TooManyPermits`] if the algorithm cannot hold `limit`'s permits.
    pub fn with_clock(algorithm: Algorithm, limit: Limit, clock: C) -> Result<Self, LimitError> {
        let inner = match algorithm {
            Algorithm::FixedWindow => Inner::Fixed(FixedWindow::with_clock(limit, clock)?),
            Algorithm::SlidingWindow => {
                Inner::Sliding(SlidingWindowCounter::with_clock(limit, clock)?)
            }
            Algorithm::SlidingLog => Inner::Log(SlidingLog::with_clock(limit, clock)?),
        };
        Ok(Self { inner })
    }

    /// The algorithm chosen.
    pub fn algorithm(&self) -> Algorithm {
        match self.inner {
            Inner::Fixed(_) => Algorithm::FixedWindow,
            Inner::Sliding(_) => Algorithm::SlidingWindow,
            Inner::Log(_) => Algorithm::SlidingLog,
        }
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        match &self.inner {
            Inner::Fixed(l) => l.clock(),
            Inner::Sliding(l) => l.clock(),
            Inner::Log(l) => l.clock(),
        }
    }
}

impl<C: Clock> RateLimiter for AnyLimiter<C> {
    #[inline]
    fn acquire_stamped(&self) -> Option<u64> {
        match &self.inner {
            Inner::Fixed(l) => l.acquire_stamped(),
            Inner::Sliding(l) => l.acquire_stamped(),
            Inner::Log(l) => l.acquire_stamped(),
        }
    }

    fn limit(&self) -> Limit {
        match &self.inner {
            Inner::Fixed(l) => l.limit(),
            Inner::Sliding(l) => l.limit(),
            Inner::Log(l) => l.limit(),
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for AnyLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Fixed(l) => l.fmt(f),
            Inner::Sliding(l) => l.fmt(f),
            Inner::Log(l) => l.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip_and_unknown_names_say_what_is_accepted() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        let err = "token-bucket".parse::<Algorithm>().unwrap_err().to_string();
        assert!(
            err.contains("token-bucket") && err.contains("sliding-log"),
            "{err}"
        );
    }
}
