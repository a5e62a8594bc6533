//! [`Limit`]: how many admissions per window, validated once.

use std::fmt;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

/// At most `permits` admissions per `window`: the rate a limiter enforces.
///
/// Build one with [`Limit::per_window`] (N per window) or [`Limit::per_second`] (a
/// fractional rate: `0.5` is one admission per two seconds).
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::Limit;
///
/// let half = Limit::per_second(0.5)?;
/// assert_eq!((half.permits(), half.window()), (1, Duration::from_secs(2)));
/// let hundred = Limit::per_window(100, Duration::from_secs(1))?;
/// assert_eq!(hundred.per_second_rate(), 100.0);
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
///
/// # Pacing
///
/// A limit is **paced** by default: its window is cut into `B` sub-windows
/// ([`Limit::DEFAULT_SUB_WINDOWS`] = 10, or `N` when `N` is smaller), and by the end of
/// sub-window `i` (counting from 0) at most `⌈N·(i+1)/B⌉` admissions are counted in the
/// aligned window. Under steady overload the kept traces are then spread evenly across
/// the window instead of all falling in its first instants, and budget that early traffic
/// left unused carries forward: a burst in the last tenth gets everything the window has
/// left. The cap is unchanged (at most `N` per window).
///
/// The two truly sliding limiters ([`SlidingLog`](crate::SlidingLog),
/// [`BucketedWindow`](crate::BucketedWindow)) carry budget forward beyond a sub-window's
/// own share `a(i) − a(i−1)` (`a(i) = ⌈N·(i+1)/B⌉`) only while the previous aligned
/// window and this one hold fewer than `N` together (or the last `W` nothing): the
/// permits a catch-up spends at once come back exactly `W` later, and would otherwise be
/// spent at once again in every window. So under steady overload, whatever the phase of
/// the first call, every sub-window of every window from the second whole one on keeps
/// its share, for every algorithm. The price, for those two only: traffic that comes in
/// part of every window keeps `N` after a quiet window but only its sub-windows' shares
/// after one that kept `N` (see [`SlidingLog`](crate::SlidingLog)'s "Spread").
///
/// The trade-off: a burst confined to the first tenth of an otherwise idle window gets
/// only `⌈N/B⌉`. [`Limit::unpaced`] opts out, for users who want every permit available
/// at once (the front-loaded behaviour of a plain fixed window).
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::Limit;
///
/// let paced = Limit::per_window(100, Duration::from_secs(1))?;
/// assert!(paced.is_paced());
/// assert!(!paced.unpaced().is_paced());
/// assert_eq!(paced.with_sub_windows(20)?.sub_windows(), 20);
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
///
/// A [`BucketedWindow`](crate::BucketedWindow) also uses the `B` sub-windows as its ring
/// of counters, paced or not.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    permits: NonZeroU32,
    window: NonZeroU64,
    /// `B`, in `1..=MAX_SUB_WINDOWS`.
    sub_windows: u8,
    paced: bool,
}

impl Limit {
    /// The most permits per window a limit holds: 4 194 303 (2^22 − 1), what every
    /// limiter of this crate accepts. The lock-free limiters count in 22 bits of one
    /// atomic word; the sliding log then takes 64 MiB.
    pub const MAX_PERMITS: u32 = (1 << 22) - 1;

    /// The shortest window a limit accepts: 1 ms.
    ///
    /// It keeps the packed window index of the lock-free limiters from ever wrapping (42
    /// bits of 1 ms windows last 139 years), and no monotonic clock a limiter reads
    /// cheaply resolves much finer.
    pub const MIN_WINDOW: Duration = Duration::from_millis(1);

    /// The sub-windows a window is cut into unless [`Limit::with_sub_windows`] says
    /// otherwise: 10.
    pub const DEFAULT_SUB_WINDOWS: u32 = 10;

    /// The most sub-windows a window can be cut into: 64.
    pub const MAX_SUB_WINDOWS: u32 = 64;

    /// At most `permits` admissions per `window`.
    ///
    /// # Errors
    ///
    /// [`LimitError::ZeroPermits`] if `permits` is 0, [`LimitError::TooManyPermits`]
    /// above [`Limit::MAX_PERMITS`], [`LimitError::WindowTooShort`] if `window` is under
    /// [`Limit::MIN_WINDOW`], [`LimitError::WindowTooLong`] if it does not fit in 64 bits
    /// of nanoseconds (584 years).
    pub const fn per_window(permits: u32, window: Duration) -> Result<Self, LimitError> {
        let Some(checked) = NonZeroU32::new(permits) else {
            return Err(LimitError::ZeroPermits);
        };
        if permits > Self::MAX_PERMITS {
            return Err(LimitError::TooManyPermits {
                permits,
                max: Self::MAX_PERMITS,
            });
        }
        let nanos = window.as_nanos();
        if nanos < Self::MIN_WINDOW.as_nanos() {
            return Err(LimitError::WindowTooShort { window });
        }
        if nanos > u64::MAX as u128 {
            return Err(LimitError::WindowTooLong { window });
        }
        // Not zero: at least MIN_WINDOW.
        let Some(nanos) = NonZeroU64::new(nanos as u64) else {
            return Err(LimitError::WindowTooShort { window });
        };
        Ok(Self {
            permits: checked,
            window: nanos,
            sub_windows: Self::DEFAULT_SUB_WINDOWS as u8,
            paced: true,
        })
    }

    /// This limit without pacing: every permit of a window is available from its start,
    /// so a burst at the start of a window gets all `N` (and steady overload keeps them
    /// all in the window's first instants). See "Pacing" on the type.
    #[must_use]
    pub const fn unpaced(self) -> Limit {
        Limit {
            paced: false,
            ..self
        }
    }

    /// Whether admissions are paced across the window (the default). See "Pacing" on the
    /// type.
    pub const fn is_paced(&self) -> bool {
        self.paced
    }

    /// This limit with its window cut into `sub_windows` sub-windows (`B`): the steps of
    /// the pacing, and the ring of a [`BucketedWindow`](crate::BucketedWindow) (whose
    /// sliding accuracy is `W/B`). Pacing uses `min(B, N)` steps.
    ///
    /// # Errors
    ///
    /// [`LimitError::SubWindowsOutOfRange`] unless `1 ≤ sub_windows ≤`
    /// [`Limit::MAX_SUB_WINDOWS`].
    pub const fn with_sub_windows(self, sub_windows: u32) -> Result<Limit, LimitError> {
        if sub_windows == 0 || sub_windows > Self::MAX_SUB_WINDOWS {
            return Err(LimitError::SubWindowsOutOfRange {
                sub_windows,
                max: Self::MAX_SUB_WINDOWS,
            });
        }
        Ok(Limit {
            sub_windows: sub_windows as u8,
            ..self
        })
    }

    /// The sub-windows a window is cut into (`B`, 10 unless set with
    /// [`Limit::with_sub_windows`]).
    pub const fn sub_windows(&self) -> u32 {
        self.sub_windows as u32
    }

    /// `permits` per this limit's window, paced (and cut) as this limit: a limit derived
    /// from another one, such as a cap's floors and shared pool.
    ///
    /// # Errors
    ///
    /// [`Limit::per_window`]'s, for `permits`.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by caps
    pub(crate) const fn with_permits(self, permits: u32) -> Result<Limit, LimitError> {
        match Limit::per_window(permits, self.window()) {
            Ok(l) => Ok(Limit {
                sub_windows: self.sub_windows,
                paced: self.paced,
                ..l
            }),
            Err(e) => Err(e),
        }
    }

    /// The pacing steps of a window: `min(B, N)` when paced, 1 (no pacing) otherwise.
    pub(crate) const fn pacing_steps(&self) -> u32 {
        if !self.paced {
            return 1;
        }
        let b = self.sub_windows as u32;
        let n = self.permits.get();
        if n < b {
            n
        } else {
            b
        }
    }

    /// A fractional rate of `rate` admissions per second.
    ///
    /// A whole rate `r` becomes `r` per second; a rate below one becomes one per `1/r`
    /// seconds (0.5 → 1 per 2 s); any other rate becomes `ceil(r)` per `ceil(r)/r`
    /// seconds (2.5 → 3 per 1.2 s). The window is rounded up to the nanosecond, so the
    /// enforced rate never exceeds `rate`.
    ///
    /// # Errors
    ///
    /// [`LimitError::RateNotFinite`] for NaN or infinity, [`LimitError::RateNotPositive`]
    /// for zero or a negative rate, [`LimitError::RateOutOfRange`] for a rate whose
    /// window would not fit in 64 bits of nanoseconds or whose permits would pass
    /// [`Limit::MAX_PERMITS`].
    pub fn per_second(rate: f64) -> Result<Self, LimitError> {
        if !rate.is_finite() {
            return Err(LimitError::RateNotFinite { rate });
        }
        if rate <= 0.0 {
            return Err(LimitError::RateNotPositive { rate });
        }
        let out_of_range = LimitError::RateOutOfRange { rate };
        let permits = if rate < 1.0 { 1.0 } else { rate.ceil() };
        if permits > f64::from(Self::MAX_PERMITS) {
            return Err(out_of_range);
        }
        // Exact: `permits` is a whole number below 2^32.
        let permits = permits as u32;
        let window_nanos = ceil_window_nanos(permits, rate).ok_or(out_of_range.clone())?;
        Self::per_window(permits, Duration::from_nanos(window_nanos)).map_err(|_| out_of_range)
    }

    /// The admissions allowed per window (at least 1).
    pub const fn permits(&self) -> u32 {
        self.permits.get()
    }

    /// The window's length (at least [`Limit::MIN_WINDOW`]).
    pub const fn window(&self) -> Duration {
        Duration::from_nanos(self.window.get())
    }

    /// The window's length in nanoseconds.
    pub const fn window_nanos(&self) -> u64 {
        self.window.get()
    }

    /// This limit divided across `replicas` processes: the rate
    /// `per_second_rate() / replicas` through [`Limit::per_second`]'s arithmetic, so the
    /// replicas together never enforce more than this limit (50/s across 3 is 17 per
    /// 1.02 s each).
    ///
    /// # Errors
    ///
    /// [`Limit::per_second`]'s, when the divided rate is out of its range.
    pub fn per_replica(self, replicas: NonZeroU32) -> Result<Limit, LimitError> {
        let divided = Limit::per_second(self.per_second_rate() / f64::from(replicas.get()))?;
        Ok(Limit {
            sub_windows: self.sub_windows,
            paced: self.paced,
            ..divided
        })
    }

    /// The limit as a rate per second, `permits / window` (the `sampler.param` value).
    pub fn per_second_rate(&self) -> f64 {
        f64::from(self.permits.get()) * 1e9 / self.window.get() as f64
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("permits", &self.permits.get())
            .field("window", &self.window())
            .field("sub_windows", &self.sub_windows)
            .field("paced", &self.paced)
            .finish()
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?}", self.permits.get(), self.window())
    }
}

/// The smallest whole number of nanoseconds `w` with `permits / w ≤ rate` per nanosecond
/// (that is, `permits · 10⁹ ≤ rate · w`), computed exactly on the binary value of `rate`;
/// `None` if it does not fit in 64 bits. `rate` is positive, finite and at most 2^32.
fn ceil_window_nanos(permits: u32, rate: f64) -> Option<u64> {
    // rate = mantissa · 2^exponent exactly.
    let bits = rate.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = u128::from(bits & ((1 << 52) - 1));
    let (mantissa, exponent) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | 1 << 52, biased - 1075)
    };
    let need = u128::from(permits) * 1_000_000_000;
    // w ≥ need / rate = need · 2^-exponent / mantissa.
    let numerator = if exponent <= 0 {
        let shift = u32::try_from(-exponent).ok()?;
        if shift >= 128 || need.leading_zeros() < shift {
            return None;
        }
        need << shift
    } else {
        // rate ≥ 2^52 here, far beyond the permits check: only reachable in theory.
        return Some(1);
    };
    u64::try_from(numerator.div_ceil(mantissa)).ok()
}

/// Why a [`Limit`] or a limiter could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// The permit count was 0; a limit admits at least one per window.
    #[error("a limit needs at least 1 permit per window, got 0")]
    ZeroPermits,
    /// The window was shorter than [`Limit::MIN_WINDOW`].
    #[error(
        "window {window:?} is shorter than the minimum of {:?}",
        Limit::MIN_WINDOW
    )]
    WindowTooShort {
        /// The window given.
        window: Duration,
    },
    /// The window does not fit in 64 bits of nanoseconds.
    #[error("window {window:?} is longer than the maximum of 2^64-1 ns (584 years)")]
    WindowTooLong {
        /// The window given.
        window: Duration,
    },
    /// The rate was NaN or infinite.
    #[error("rate {rate:?} per second is not a finite number")]
    RateNotFinite {
        /// The rate given.
        rate: f64,
    },
    /// The rate was zero or negative.
    #[error("rate {rate:?} per second is not positive; use a positive rate such as 0.5")]
    RateNotPositive {
        /// The rate given.
        rate: f64,
    },
    /// The rate is positive and finite but cannot be represented.
    #[error(
        "rate {rate:?} per second is out of range (from {:.3e}, one per 2^64-1 ns, to {} per second)",
        1e9 / u64::MAX as f64,
        Limit::MAX_PERMITS
    )]
    RateOutOfRange {
        /// The rate given.
        rate: f64,
    },
    /// The permit count is over [`Limit::MAX_PERMITS`].
    #[error("{permits} permits per window is more than a limit holds (at most {max}); use a shorter window")]
    TooManyPermits {
        /// The permits asked for.
        permits: u32,
        /// The most a limit holds: [`Limit::MAX_PERMITS`].
        max: u32,
    },
    /// The sub-window count is 0 or over [`Limit::MAX_SUB_WINDOWS`].
    #[error("{sub_windows} sub-windows is out of range: a window is cut into 1 to {max}")]
    SubWindowsOutOfRange {
        /// The sub-windows asked for.
        sub_windows: u32,
        /// The most a window is cut into: [`Limit::MAX_SUB_WINDOWS`].
        max: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractional_rates_become_whole_permits_over_longer_windows() {
        let l = Limit::per_second(0.5).unwrap();
        assert_eq!((l.permits(), l.window()), (1, Duration::from_secs(2)));
        let l = Limit::per_second(2.5).unwrap();
        assert_eq!((l.permits(), l.window()), (3, Duration::from_millis(1200)));
        let l = Limit::per_second(100.0).unwrap();
        assert_eq!((l.permits(), l.window()), (100, Duration::from_secs(1)));
        let third = Limit::per_second(1.0 / 3.0).unwrap();
        // 10^9 / 0.333…33 (the nearest f64 to 1/3) is 3 000 000 000.00000002 ns.
        assert_eq!(third.window_nanos(), 3_000_000_001);
        // Rounding the window up keeps the enforced rate at or under the asked one.
        for rate in [0.3, 1.7, 3.3, 1000.1, 0.001, 12345.678] {
            let l = Limit::per_second(rate).unwrap();
            assert!(l.per_second_rate() <= rate, "{rate} -> {l}");
            assert!(l.per_second_rate() > rate * 0.999_999, "{rate} -> {l}");
        }
    }

    #[test]
    fn bad_rates_are_typed_errors() {
        assert!(matches!(
            Limit::per_second(f64::NAN),
            Err(LimitError::RateNotFinite { .. })
        ));
        assert!(matches!(
            Limit::per_second(f64::INFINITY),
            Err(LimitError::RateNotFinite { .. })
        ));
        assert!(matches!(
            Limit::per_second(0.0),
            Err(LimitError::RateNotPositive { .. })
        ));
        assert!(matches!(
            Limit::per_second(-1.0),
            Err(LimitError::RateNotPositive { .. })
        ));
        assert!(matches!(
            Limit::per_second(1e-12),
            Err(LimitError::RateOutOfRange { .. })
        ));
        assert!(matches!(
            Limit::per_second(1e12),
            Err(LimitError::RateOutOfRange { .. })
        ));
        assert_eq!(
            Limit::per_window(0, Duration::from_secs(1)),
            Err(LimitError::ZeroPermits)
        );
        assert!(matches!(
            Limit::per_window(1, Duration::from_micros(999)),
            Err(LimitError::WindowTooShort { .. })
        ));
        assert!(matches!(
            Limit::per_window(1, Duration::MAX),
            Err(LimitError::WindowTooLong { .. })
        ));
        assert_eq!(
            Limit::per_window(Limit::MAX_PERMITS + 1, Duration::from_secs(1)),
            Err(LimitError::TooManyPermits {
                permits: Limit::MAX_PERMITS + 1,
                max: Limit::MAX_PERMITS
            })
        );
        assert!(Limit::per_window(Limit::MAX_PERMITS, Duration::from_secs(1)).is_ok());
        assert!(matches!(
            Limit::per_second(f64::from(Limit::MAX_PERMITS) + 0.5),
            Err(LimitError::RateOutOfRange { .. })
        ));
    }

    #[test]
    fn limits_are_const() {
        const HUNDRED: Result<Limit, LimitError> = Limit::per_window(100, Duration::from_secs(1));
        assert!(matches!(HUNDRED, Ok(l) if l.permits() == 100));
    }

    #[test]
    fn the_range_in_messages_is_the_one_the_type_enforces() {
        let msg = Limit::per_second(1e12).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("to {} per second", Limit::MAX_PERMITS)),
            "{msg}"
        );
        assert!(msg.contains("5.421e-11"), "{msg}");
        // The smallest rate the message states is accepted; a hair below is not.
        assert!(Limit::per_second(5.422e-11).is_ok());
        assert!(Limit::per_second(5.420e-11).is_err());
        let msg = Limit::per_window(1, Duration::from_micros(10))
            .unwrap_err()
            .to_string();
        assert!(msg.ends_with("minimum of 1ms"), "{msg}");
    }

    #[test]
    fn pacing_is_on_by_default_and_travels_with_the_limit() {
        let l = Limit::per_window(100, Duration::from_secs(1)).unwrap();
        assert!(l.is_paced());
        assert_eq!((l.sub_windows(), l.pacing_steps()), (10, 10));
        let u = l.unpaced();
        assert!(!u.is_paced() && u != l);
        assert_eq!(u.pacing_steps(), 1);
        // Fewer steps than permits: one step per permit.
        let three = Limit::per_window(3, Duration::from_secs(1)).unwrap();
        assert_eq!(three.pacing_steps(), 3);
        // Dividing across replicas keeps the setting.
        let r = u.with_sub_windows(4).unwrap();
        let r = r.per_replica(NonZeroU32::new(3).unwrap()).unwrap();
        assert_eq!((r.is_paced(), r.sub_windows()), (false, 4));
        assert_eq!(
            l.with_sub_windows(0),
            Err(LimitError::SubWindowsOutOfRange {
                sub_windows: 0,
                max: 64
            })
        );
        assert!(l.with_sub_windows(65).is_err());
        assert_eq!(l.with_sub_windows(64).unwrap().sub_windows(), 64);
        const UNPACED: Result<Limit, LimitError> =
            match Limit::per_window(1, Duration::from_secs(1)) {
                Ok(l) => Ok(l.unpaced()),
                Err(e) => Err(e),
            };
        assert!(matches!(UNPACED, Ok(l) if !l.is_paced()));
    }

    #[test]
    fn errors_say_what_is_accepted() {
        let msg = Limit::per_second(-2.0).unwrap_err().to_string();
        assert!(msg.contains("-2") && msg.contains("positive"), "{msg}");
    }
}
