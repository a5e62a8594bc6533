//! [`RuleLimiter`]: the one place that turns a rule's limit into a limiter by its scope,
//! a local [`AnyLimiter`] or (feature `redis`) a [`FleetLimiter`](crate::FleetLimiter),
//! and decides on a reload whether the old one is kept.

use std::error::Error;
use std::fmt;

use crate::clock::Clock;
use crate::config::compile::handover::{replacing, Handover};
use crate::config::compile::local_rule::LocalRule;
use crate::config::compile::permit::{Made, Permit};
use crate::config::error::Pos;
use crate::config::model::{FleetSettings, LimitOf, LimitSpec, Scope};
use crate::limit::{Limit, LimitError};
use crate::limiter::{Algorithm, AnyLimiter, RateLimiter};

/// The limiter of a rule, a floor, a default or a cap's shared pool.
pub(crate) enum RuleLimiter<C> {
    /// Enforced by this process alone.
    Local(LocalRule<C>),
    /// Shared by every replica through Redis.
    #[cfg(feature = "redis")]
    Fleet(FleetRule<C>),
}

/// A fleet limiter and the settings it was built with (to tell on a reload whether it
/// can be kept).
#[cfg(feature = "redis")]
pub(crate) struct FleetRule<C> {
    limiter: crate::fleet::FleetLimiter<C>,
    settings: FleetSettings,
}

impl<C> Clone for RuleLimiter<C> {
    fn clone(&self) -> Self {
        match self {
            RuleLimiter::Local(l) => RuleLimiter::Local(l.clone()),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => RuleLimiter::Fleet(FleetRule {
                limiter: f.limiter.clone(),
                settings: f.settings.clone(),
            }),
        }
    }
}

/// Why a limiter could not be built.
#[derive(Debug)]
pub(crate) enum BuildError {
    /// A local limit out of range: a floor's (`field` "floor") or the cap's shared pool
    /// (`field` empty), `at` the cap's position in the file.
    Limit {
        of: LimitOf,
        field: &'static str,
        at: Pos,
        error: LimitError,
    },
    /// A local limit's window is shorter than the clock's resolution: the limiter would
    /// see time move in steps longer than its window, and enforce another rate.
    WindowBelowResolution {
        of: LimitOf,
        spec: LimitSpec,
        resolution: std::time::Duration,
    },
    /// A fleet limiter refused its options (`key`: the rule's fleet key; `of`: whose
    /// limit, filled in by the rule set; `at`: the limit's position in the file).
    Fleet {
        of: Option<LimitOf>,
        at: Pos,
        key: String,
        source: Box<dyn Error + Send + Sync>,
    },
}

impl BuildError {
    /// The error, saying whose limit it is (`of`) if it does not yet.
    pub(crate) fn of(self, of: impl FnOnce() -> LimitOf) -> Self {
        match self {
            BuildError::Fleet {
                of: None,
                at,
                key,
                source,
            } => BuildError::Fleet {
                of: Some(of()),
                at,
                key,
                source,
            },
            other => other,
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Limit { of, error, .. } => write!(f, "{of}: {error}"),
            BuildError::WindowBelowResolution {
                of,
                spec,
                resolution,
            } => write!(
                f,
                "{of}: window {:?} is shorter than the resolution of the sampler's clock, {resolution:?}: the limiter would see time move in steps of {resolution:?} and enforce another rate than {}; use a window of at least {resolution:?}, or a finer clock (RuleBasedSampler::with_clock with PreciseClock, or a CachedClock with a shorter tick)",
                spec.limit.window(),
                spec.limit
            ),
            BuildError::Fleet { key, source, .. } => {
                write!(f, "the fleet limiter for key {key:?}: {source}")
            }
        }
    }
}

impl Error for BuildError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BuildError::Limit { error, .. } => Some(error),
            BuildError::WindowBelowResolution { .. } => None,
            BuildError::Fleet { source, .. } => Some(source.as_ref()),
        }
    }
}

impl<C: Clock + Clone> RuleLimiter<C> {
    /// The limiter for `spec`, keeping `old` where it can:
    ///
    /// * local: `old` itself if it is local with the same limit and algorithm (no reset,
    ///   no burst), else a new one holding what a local `old` has used in its window,
    ///   with the [`Handover`] (pushed on `handovers`) that closes `old` and settles
    ///   what it admitted since, before the new rules are published;
    /// * fleet: `old` itself if it is a fleet limiter with the same key (`key()`), limit
    ///   and Redis settings; else a new one under `key` that reuses `old`'s instance id
    ///   when the key is the same, so Redis sees the same replica go on: the window's
    ///   grants stay counted there, and the new limiter is granted at most its new N less
    ///   what the fleet already holds in that window. Building never waits for Redis.
    ///
    /// A change of scope starts a new limiter with nothing carried over.
    /// A local limiter of `limit` by `algorithm` replacing `old` (when local): `old`
    /// itself if neither changed, else a new one that takes over its window, with the
    /// handover to settle pushed to `handovers`.
    pub(crate) fn build_local(
        algorithm: Algorithm,
        limit: Limit,
        clock: &C,
        old: Option<&RuleLimiter<C>>,
        handovers: &mut Vec<Handover<C>>,
    ) -> LocalRule<C> {
        let new = AnyLimiter::with_clock(algorithm, limit, clock.clone());
        let Some(old) = old.and_then(RuleLimiter::local) else {
            return LocalRule::new(new);
        };
        // A closed one (an old floor kept aside, closed by the cap's handover) is
        // replaced like a changed one: its frozen count is what it used.
        if old.limiter.limit() == limit && old.limiter.algorithm() == algorithm && !old.is_closed()
        {
            return old.clone();
        }
        let (new, handover) = replacing(new, old);
        handovers.push(handover);
        new
    }

    pub(crate) fn build(
        spec: LimitSpec,
        key: impl FnOnce() -> String,
        fleet: &FleetSettings,
        clock: &C,
        old: Option<&RuleLimiter<C>>,
        handovers: &mut Vec<Handover<C>>,
    ) -> Result<Self, BuildError> {
        match spec.scope {
            Scope::Local => Ok(RuleLimiter::Local(Self::build_local(
                spec.algorithm,
                spec.limit,
                clock,
                old,
                handovers,
            ))),
            #[cfg(feature = "redis")]
            Scope::Fleet => FleetRule::build(spec, key(), fleet, clock, old),
            #[cfg(not(feature = "redis"))]
            Scope::Fleet => {
                // The loaders refuse `scope = "fleet"` without the feature.
                let _ = (fleet, old, handovers);
                Err(BuildError::Fleet {
                    of: None,
                    at: spec.at,
                    key: key(),
                    source: "a fleet-scoped limit needs the `redis` feature".into(),
                })
            }
        }
    }
}

#[cfg(feature = "redis")]
impl<C: Clock + Clone> FleetRule<C> {
    fn build(
        spec: LimitSpec,
        key: String,
        settings: &FleetSettings,
        clock: &C,
        old: Option<&RuleLimiter<C>>,
    ) -> Result<RuleLimiter<C>, BuildError> {
        let limit = spec.limit;
        let old = match old {
            Some(RuleLimiter::Fleet(f)) if f.limiter.key() == key => Some(f),
            _ => None,
        };
        if let Some(old) = old {
            if old.limiter.limit() == limit && old.settings == *settings {
                return Ok(RuleLimiter::Fleet(FleetRule {
                    limiter: old.limiter.clone(),
                    settings: old.settings.clone(),
                }));
            }
        }
        let mut builder = crate::fleet::FleetLimiter::builder(settings.urls.clone(), &*key, limit)
            .cluster(settings.cluster)
            .clock(clock.clone());
        if let Some(prefix) = &settings.prefix {
            builder = builder.prefix(prefix.clone());
        }
        if let Some(interval) = settings.sync_interval {
            builder = builder.sync_interval(interval);
        }
        if let Some(ca) = &settings.tls_ca_file {
            builder = builder.tls_ca_file(ca);
        }
        if let Some((cert, key)) = &settings.tls_client {
            builder = builder.tls_client_cert(cert, key);
        }
        if let Some(old) = old {
            builder = builder.instance_id(old.limiter.instance_id());
        }
        let limiter = builder.build().map_err(|e| BuildError::Fleet {
            of: None,
            at: spec.at,
            key,
            source: Box::new(e),
        })?;
        Ok(RuleLimiter::Fleet(FleetRule {
            limiter,
            settings: settings.clone(),
        }))
    }
}

impl<C: Clock> RuleLimiter<C> {
    /// The local limiter, if this limit is local.
    pub(crate) fn local(&self) -> Option<&LocalRule<C>> {
        match self {
            RuleLimiter::Local(l) => Some(l),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(_) => None,
        }
    }

    /// The fleet limiter, if this limit is fleet-scoped.
    #[cfg(feature = "redis")]
    pub(crate) fn fleet(&self) -> Option<&crate::fleet::FleetLimiter<C>> {
        match self {
            RuleLimiter::Local(_) => None,
            RuleLimiter::Fleet(f) => Some(&f.limiter),
        }
    }
}

impl<C: Clock> RuleLimiter<C> {
    /// A permit to confirm ([`Permit::take`]), if the limiter has one.
    #[inline]
    pub(crate) fn take(&self) -> Option<Permit<'_, C>> {
        match self {
            RuleLimiter::Local(l) => Permit::take(l),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => f.limiter.try_acquire().then(Permit::none),
        }
    }

    /// A permit made at once (the service cap's), if the limiter has one.
    #[inline]
    pub(crate) fn admit(&self) -> Option<Made<'_, C>> {
        match self {
            RuleLimiter::Local(l) => l.limiter.admit().map(|a| Made(Some((l, a)))),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => f.limiter.try_acquire().then_some(Made(None)),
        }
    }
}

impl<C: Clock> RateLimiter for RuleLimiter<C> {
    #[inline]
    fn try_acquire(&self) -> bool {
        match self {
            RuleLimiter::Local(l) => l.try_acquire(),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => f.limiter.try_acquire(),
        }
    }

    #[inline]
    fn acquire_stamped(&self) -> Option<u64> {
        match self {
            RuleLimiter::Local(l) => l.acquire_stamped(),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => f.limiter.acquire_stamped(),
        }
    }

    fn limit(&self) -> Limit {
        match self {
            RuleLimiter::Local(l) => l.limiter.limit(),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => f.limiter.limit(),
        }
    }

    fn count_in_window(&self) -> Option<u64> {
        match self {
            RuleLimiter::Local(l) => l.limiter.count_in_window(),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(f) => f.limiter.count_in_window(),
        }
    }
}

impl<C: Clock> fmt::Debug for RuleLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleLimiter::Local(l) => f.debug_tuple("Local").field(&l.limiter).finish(),
            #[cfg(feature = "redis")]
            RuleLimiter::Fleet(r) => f.debug_tuple("Fleet").field(&r.limiter).finish(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;

    /// A closed limit of the same limit is not kept by a later reload (an old floor kept
    /// aside and closed by the cap's handover, its rule brought back): it is replaced,
    /// carrying its frozen count. Kept, the rule would refuse for good.
    #[test]
    fn a_closed_limit_is_replaced_not_kept_and_carries_its_frozen_count() {
        let clock = ManualClock::new();
        clock.set(10);
        let limit = Limit::per_window(10, Duration::from_secs(3600))
            .unwrap()
            .unpaced();
        let old = LocalRule::new(AnyLimiter::with_clock(
            Algorithm::FixedWindow,
            limit,
            clock.clone(),
        ));
        assert_eq!((0..6).filter(|_| old.try_acquire()).count(), 6);
        old.close();
        let mut handovers = Vec::new();
        let back = RuleLimiter::build_local(
            Algorithm::FixedWindow,
            limit,
            &clock,
            Some(&RuleLimiter::Local(old.clone())),
            &mut handovers,
        );
        handovers.iter().for_each(Handover::settle);
        assert!(!back.same(&old));
        assert_eq!((0..10).filter(|_| back.try_acquire()).count(), 4);
    }
}
