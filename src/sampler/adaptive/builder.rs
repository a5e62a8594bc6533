//! How an [`AdaptiveSampler`] is made: its constructors and its builder.

use super::sampler::AdaptiveSampler;
use crate::clock::{Clock, MonotonicClock};
use crate::limit::{Limit, LimitError};
use crate::limiter::FixedWindow;
use crate::sampler::parent::RemoteParents;

impl AdaptiveSampler {
    /// A builder for an adaptive sampler keeping at most `limit` (about `limit` under
    /// load).
    pub fn builder(limit: Limit) -> AdaptiveSamplerBuilder {
        AdaptiveSamplerBuilder {
            limit,
            clock: MonotonicClock::new(),
            remote_parents: RemoteParents::default(),
        }
    }

    /// An adaptive sampler keeping about, and at most, `rate` traces per second.
    ///
    /// # Errors
    ///
    /// The [`LimitError`] of [`Limit::per_second`].
    pub fn per_second(rate: f64) -> Result<Self, LimitError> {
        Ok(Self::builder(Limit::per_second(rate)?).build())
    }
}

/// Builds an [`AdaptiveSampler`].
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::{AdaptiveSampler, Limit, ManualClock, RemoteParents};
///
/// let sampler = AdaptiveSampler::builder(Limit::per_window(100, Duration::from_secs(1))?)
///     .remote_parents(RemoteParents::Cap)
///     .clock(ManualClock::new())
///     .build();
/// assert_eq!(sampler.probability(), 1.0, "nothing measured yet");
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct AdaptiveSamplerBuilder<C = MonotonicClock> {
    limit: Limit,
    clock: C,
    remote_parents: RemoteParents,
}

impl<C: Clock + Clone> AdaptiveSamplerBuilder<C> {
    /// How spans with a remote parent are treated (default [`RemoteParents::Follow`]).
    pub fn remote_parents(mut self, remote_parents: RemoteParents) -> Self {
        self.remote_parents = remote_parents;
        self
    }

    /// The clock the estimate and the cap read (default [`MonotonicClock`]).
    pub fn clock<C2: Clock>(self, clock: C2) -> AdaptiveSamplerBuilder<C2> {
        AdaptiveSamplerBuilder {
            limit: self.limit,
            clock,
            remote_parents: self.remote_parents,
        }
    }

    /// Builds the sampler.
    pub fn build(self) -> AdaptiveSampler<C> {
        let cap = FixedWindow::with_clock(self.limit, self.clock.clone());
        AdaptiveSampler::with_cap(cap, self.clock, self.remote_parents)
    }
}
