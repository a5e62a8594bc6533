//! [`RuleBasedSampler`]: a service's rules applied as an OpenTelemetry sampler, read
//! per decision from the thread's own cache of the current rule set; replacing the
//! rules is in [`reload`].
//!
//! # How a decision reads the rules
//!
//! The rules in force are an `ArcSwap`; each thread keeps, per sampler (a
//! `ThreadLocal` of the sampler's, so two samplers in a thread never see each other's
//! rules), an `arc_swap::Cache` of them: the `Arc` it last read. A decision checks it
//! against the `ArcSwap`'s pointer with one plain load and decides with it when it is
//! current; only the first decision after a reload reads the new rules with a counted
//! load. So a decision writes no memory another thread reads (the cache's `RefCell`
//! flag is the thread's own, on a cache line of its own), where `ArcSwap::load` took a
//! debt slot with a locked instruction on every decision.
//!
//! A thread that decided with the old rules keeps them in its cache until it decides
//! again (or the sampler is dropped): their memory, not their permits. The reload does
//! not wait for such readers; it closes each replaced limiter by its own atomic state
//! before it publishes the new rules (see `compile::handover`), so a decision that
//! read the old rules just before the swap and reaches a replaced limiter after it is
//! refused: its admission would come after what the handover carried. It is not
//! retried on the new rules: the decision began before the swap and stays on the rules
//! it began with ("the old rules or the new ones, never a mix"), and telling a closed
//! limiter from a full one would add a test to every refusal.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Cache};
use crossbeam_utils::CachePadded;
use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingResult, ShouldSample};

use crate::clock::{Clock, MonotonicClock};
use crate::config::compile::handover::Handover;
use crate::config::compile::rule_limiter::BuildError;
use crate::config::compile::rule_set::RuleSet;
use crate::config::error::{ConfigError, ConfigErrorKind};
#[cfg(all(test, not(loom)))]
use crate::config::model::LimitSpec;
use crate::config::model::SamplingConfig;
use crate::config::vars::FleetEnv;
use crate::sampler::apply_parent_policy;

mod reload;
mod sources;

use crate::stats::{ReloadStats, RuleBasedStats};
pub use reload::ReloadHandle;

/// An OpenTelemetry sampler that applies a [`SamplingConfig`]'s rules for one service:
/// the first matching rule's limit or probability, under the service's cap.
///
/// * The parent policy is [`RateLimitingSampler`](crate::RateLimitingSampler)'s: roots
///   (and, with `remote_parents = "cap"`, sampled remote parents) are decided by the
///   rules; spans with a local parent follow it and spend nothing.
/// * Kept roots are `RecordAndSample` and carry `sampler.type` (`ratelimiting`,
///   `probabilistic` or `adaptive`), `sampler.param` (traces per second, or the
///   probability) and
///   [`sampler.rule`](crate::attributes::SAMPLER_RULE) (the rule's name, `default` for the
///   default). Refusals are `Drop`, and allocate nothing.
/// * Probability rules are consistent (OTEP 235): they decide on the trace's 56 random
///   bits and write `ot=th:<threshold>` on what they keep; limits erase `th` (see
///   [`SamplingConfig`], "Probability rules"). An `adaptive` rule is the
///   [`AdaptiveSampler`](crate::AdaptiveSampler)'s algorithm with its own estimate and
///   cap, counting what that rule is offered.
/// * The rules can be replaced while the sampler runs ([`reload`](Self::reload)):
///   decisions read the current rule set from their thread's cache, checked against
///   an atomic pointer with one load, and never wait; a refusal writes no shared
///   memory.
///
/// Clones share the rules, the limiters and the decision counters
/// ([`stats`](Self::stats)).
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use otel_rate_sampler::{RuleBasedSampler, SamplingConfig};
///
/// let config = SamplingConfig::from_toml_str(r#"
///     [default]
///     rate = 10.0
///     [[service]]
///     name = "checkout"
///     rate = 5.0
/// "#, "inline")?;
/// let sampler = RuleBasedSampler::new(&config, "checkout")?;
/// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
/// # Ok::<(), otel_rate_sampler::ConfigError>(())
/// ```
pub struct RuleBasedSampler<C = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

/// The rules in force, shared with every thread's cache of them.
type Rules<C> = Arc<ArcSwap<RuleSet<C>>>;

/// A thread's cache of the rules in force (on a cache line of its own: its `RefCell`
/// flag is written by every decision of the thread, and by no other thread).
type ThreadCache<C> = CachePadded<RefCell<Cache<Rules<C>, Arc<RuleSet<C>>>>>;

/// Each thread's cache of the rules, for one sampler (and its clones) alone: a
/// `ThreadLocal`, behind a trait object only so that the sampler's type needs no
/// `Clock` bound (`ThreadLocal` wants elements known to be `Send`).
trait ThreadCaches<C>: Send + Sync {
    /// This thread's cache, made on its first decision.
    fn mine(&self, rules: &Rules<C>) -> &ThreadCache<C>;
}

impl<C: Clock> ThreadCaches<C> for thread_local::ThreadLocal<ThreadCache<C>> {
    #[inline]
    fn mine(&self, rules: &Rules<C>) -> &ThreadCache<C> {
        self.get_or(|| CachePadded::new(RefCell::new(Cache::new(Arc::clone(rules)))))
    }
}

struct Inner<C> {
    rules: Rules<C>,
    /// Each thread's cache of `rules`.
    caches: Box<dyn ThreadCaches<C>>,
    service: String,
    clock: C,
    /// Reloads that replaced the rules (the generation of the rules in force).
    reloads_succeeded: AtomicU64,
    /// Reloads that failed.
    reloads_failed: AtomicU64,
    /// Held through a reload: reloads (a watcher's, a poller's, the application's) run
    /// one at a time, each carrying over from the rules the previous one published.
    reloading: Mutex<()>,
    /// The Redis URLs from the environment (`OTEL_RATE_SAMPLER_REDIS`) this sampler was
    /// built with, and its TLS files for them, which replace a reloaded file's `[fleet]`
    /// ones too.
    fleet: FleetEnv,
}

impl RuleBasedSampler {
    /// The sampler applying `config`'s rules for `service` (the `service.name` of the
    /// application's resource; a service the file does not list gets the file default).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] if a limiter cannot be built (the loaders have checked every
    /// limit, so only a hand-made configuration can fail here).
    pub fn new(config: &SamplingConfig, service: &str) -> Result<Self, ConfigError> {
        Self::with_clock(config, service, MonotonicClock::new())
    }

    /// [`new`](Self::new), remembering the environment's Redis settings (`fleet`, already
    /// applied to `config`) for [`reload_from_path`](Self::reload_from_path).
    pub(crate) fn from_env_config(
        config: &SamplingConfig,
        service: &str,
        fleet: FleetEnv,
    ) -> Result<Self, ConfigError> {
        Self::build(config, service, MonotonicClock::new(), fleet)
    }
}

impl<C: Clock + Clone> RuleBasedSampler<C> {
    /// Like [`new`](RuleBasedSampler::new), with the limiters reading `clock`.
    ///
    /// # Errors
    ///
    /// As [`new`](RuleBasedSampler::new).
    pub fn with_clock(
        config: &SamplingConfig,
        service: &str,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::build(config, service, clock, FleetEnv::default())
    }

    /// [`from_env_config`](RuleBasedSampler::from_env_config), with the limiters reading
    /// `clock`.
    pub(crate) fn build(
        config: &SamplingConfig,
        service: &str,
        clock: C,
        fleet: FleetEnv,
    ) -> Result<Self, ConfigError> {
        let (rules, _) = compile(config, service, &clock, None)?;
        Ok(Self {
            inner: Arc::new(Inner {
                rules: Arc::new(ArcSwap::from_pointee(rules)),
                caches: Box::new(thread_local::ThreadLocal::<ThreadCache<C>>::new()),
                service: service.to_owned(),
                clock,
                reloads_succeeded: AtomicU64::new(0),
                reloads_failed: AtomicU64::new(0),
                reloading: Mutex::new(()),
                fleet,
            }),
        })
    }

    /// What this sampler (with all its clones) decided so far, per rule, with the
    /// rules' and the cap's current windows, and the reloads.
    ///
    /// A snapshot, cheap to take (it sums each rule's counters and reads its limiters,
    /// writing nothing): exact when no decision runs meanwhile; otherwise each counter
    /// is individually exact but they are not read at one instant (see
    /// [`DecisionStats`](crate::stats::DecisionStats)). A rule's counters carry over reloads as
    /// long as a rule of its name exists.
    ///
    /// ```
    /// use opentelemetry::trace::{SpanKind, TraceId};
    /// use opentelemetry::Context;
    /// use opentelemetry_sdk::trace::ShouldSample;
    /// use otel_rate_sampler::stats::DropReason;
    /// use otel_rate_sampler::{RuleBasedSampler, SamplingConfig};
    ///
    /// let config = SamplingConfig::from_toml_str(r#"
    ///     [default]
    ///     rate = 1.0
    ///     [[default.rule]]
    ///     name = "health"
    ///     span_name = "/health"
    ///     probability = 0.0
    /// "#, "inline")?;
    /// let sampler = RuleBasedSampler::new(&config, "checkout")?;
    /// for name in ["/health", "GET /cart", "GET /cart"] {
    ///     let root = Context::new();
    ///     sampler.should_sample(Some(&root), TraceId::from(1), name, &SpanKind::Server, &[], &[]);
    /// }
    /// let stats = sampler.stats();
    /// let health = stats.rule("health").unwrap();
    /// assert_eq!(health.decisions.dropped_for(DropReason::Probability), 1);
    /// let default = stats.rule("default").unwrap();
    /// assert_eq!((default.decisions.kept(), default.decisions.dropped()), (1, 1));
    /// assert_eq!(stats.total().total(), 3);
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    pub fn stats(&self) -> RuleBasedStats {
        let rules = self.inner.rules.load();
        let (rule_stats, unmatched, cap) = rules.stats();
        // Relaxed: statistics, read on their own.
        let succeeded = self.inner.reloads_succeeded.load(Ordering::Relaxed);
        let failed = self.inner.reloads_failed.load(Ordering::Relaxed);
        RuleBasedStats {
            service: self.inner.service.clone(),
            rules: rule_stats,
            unmatched,
            cap,
            generation: succeeded,
            reloads: ReloadStats { succeeded, failed },
        }
    }

    /// The service whose rules this sampler applies.
    pub fn service(&self) -> &str {
        &self.inner.service
    }

    /// The [`FleetLimiter`](crate::FleetLimiter) behind the fleet-scoped limit `rule` (a
    /// rule's name, `default` for the service's own policy, `cap` for the cap's shared
    /// pool) in the current rules, or `None` if that limit is local or absent.
    ///
    /// For monitoring: its [`stats`](crate::FleetLimiter::stats) (fallback, live
    /// replicas, the current lease) and fleet window ids. The handle shares the rule's
    /// state (a permit it acquires is the rule's), and after a [`reload`](Self::reload)
    /// that changed the rule it names the old limiter, which has stopped: ask again.
    #[cfg(feature = "redis")]
    pub fn fleet_limiter(&self, rule: &str) -> Option<crate::fleet::FleetLimiter<C>> {
        self.inner.rules.load().fleet_limiter(rule).cloned()
    }
}

fn compile<C: Clock + Clone>(
    config: &SamplingConfig,
    service: &str,
    clock: &C,
    previous: Option<&RuleSet<C>>,
) -> Result<(RuleSet<C>, Vec<Handover<C>>), ConfigError> {
    RuleSet::compile(&config.service(service), &config.fleet, clock, previous).map_err(|e| {
        let (kind, at, key) = match &e {
            BuildError::Limit { of, field, at, .. } => (
                ConfigErrorKind::InvalidLimit,
                *at,
                config.limit_key(service, of, field),
            ),
            BuildError::WindowBelowResolution { of, spec, .. } => (
                ConfigErrorKind::WindowBelowClockResolution,
                spec.at,
                config.window_key(service, of),
            ),
            BuildError::Fleet { of, at, .. } => (
                ConfigErrorKind::Fleet,
                *at,
                of.as_ref()
                    .map(|of| config.limit_key(service, of, "scope"))
                    .unwrap_or_default(),
            ),
        };
        kind.error(&config.source, format!("service {service:?}: {e}"))
            .at(at, key)
            .with_source(e)
    })
}

impl<C: Clock> ShouldSample for RuleBasedSampler<C> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let decide = |rules: &RuleSet<C>| {
            apply_parent_policy(
                parent_context,
                rules.remote_parents,
                Some(&rules.unmatched),
                |origin, state| rules.decide(origin, trace_id, name, span_kind, attributes, state),
            )
        };
        match self.inner.caches.mine(&self.inner.rules).try_borrow_mut() {
            // The thread's own copy, revalidated with one load of the pointer.
            Ok(mut cache) => decide(cache.load()),
            // A decision of this sampler inside one of its own on this thread (something
            // the decision logs creating a span through it): the shared read.
            Err(_) => decide(&self.inner.rules.load()),
        }
    }
}

impl<C> Clone for RuleBasedSampler<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Clock> fmt::Debug for RuleBasedSampler<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules = self.inner.rules.load();
        f.debug_struct("RuleBasedSampler")
            .field("service", &self.inner.service)
            .field("rules", &rules.names().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    // The loaders refuse these configurations, so only a configuration changed after
    // loading reaches the errors found when the limiters are built: they still name
    // the file, the position and the key.
    #[test]
    fn errors_found_when_building_limiters_give_a_position_and_a_key() {
        let text = "[[service]]\nname = \"a\"\ncap = { limit = 10, window = \"1s\" }\n[[service.rule]]\nname = \"hot\"\nspan_name = \"x\"\nprobability = 1.0\nfloor = 4\n";
        let mut config = SamplingConfig::from_toml_str(text, "s.toml").unwrap();
        // Floors over the cap leave its shared pool no permit: the cap's key, at its
        // limit's position (the window's).
        config.services[0].rules[0].floor = 11;
        let err = RuleBasedSampler::new(&config, "a").unwrap_err();
        assert_eq!(err.kind(), ConfigErrorKind::InvalidLimit, "{err}");
        assert!(
            err.to_string().starts_with("s.toml:3:30: service[0].cap: "),
            "{err}"
        );
        // A floor beyond any limiter's permits: the floor's key.
        config.services[0].rules[0].floor = crate::limit::Limit::MAX_PERMITS + 1;
        config.services[0].cap = config.services[0].cap.map(|c| LimitSpec {
            limit: c
                .limit
                .with_permits(crate::limit::Limit::MAX_PERMITS)
                .unwrap(),
            ..c
        });
        let err = RuleBasedSampler::new(&config, "a").unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.key()),
            (ConfigErrorKind::InvalidLimit, 3, "service[0].rule[0].floor"),
            "{err}"
        );
    }

    /// A decision that read the rules just before a reload (a thread's cache) and
    /// reaches a replaced limiter after it is refused: the reload closed it, carrying
    /// what it admitted. For every kind of limit a rule has (each algorithm, an adaptive
    /// rule's cap, a lower bound) and the cap's floor and shared pool: the window keeps
    /// exactly the largest limit in force. Before, the reload waited at most half a
    /// second for such a reader, and one that waited longer spent a permit twice.
    #[test]
    fn a_decision_on_stale_rules_reaching_a_replaced_limiter_is_refused() {
        use crate::sampler::Origin;
        use opentelemetry::trace::TraceState;
        let policies = [
            "limit = {n}\nwindow = \"1h\"\npaced = false\nalgorithm = \"fixed\"",
            "limit = {n}\nwindow = \"1h\"\npaced = false\nalgorithm = \"sliding\"",
            "limit = {n}\nwindow = \"1h\"\npaced = false\nalgorithm = \"sliding-log\"",
            "limit = {n}\nwindow = \"1h\"\npaced = false\nalgorithm = \"bucketed\"",
            "adaptive = { limit = {n}, window = \"1h\" }",
            "probability = 0.0\nat_least = {n}.0",
        ];
        for policy in policies {
            for cap in [false, true] {
                let file = |n: u32| {
                    let policy = policy.replace("{n}", &n.to_string());
                    let (cap, floor) = if cap {
                        (
                            format!("cap = {{ limit = {n}, window = \"1h\", paced = false }}\n"),
                            format!("floor = {}\n", n / 2),
                        )
                    } else {
                        (String::new(), String::new())
                    };
                    let text = format!("[default]\nprobability = 0.0\n{cap}[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\n{policy}\n{floor}");
                    SamplingConfig::from_toml_str(&text, "t.toml").unwrap()
                };
                let clock = crate::clock::ManualClock::new();
                // Part-way into the last tenth of an hour's window and of a second's,
                // where a paced limit (the adaptive cap and the lower bound, N per
                // second, are) has released every permit.
                clock.set(7_200_000_000_000 + 3_500_950_456_789);
                let s = RuleBasedSampler::with_clock(&file(10), "svc", clock.clone()).unwrap();
                let decide = |rules: &RuleSet<crate::clock::ManualClock>| {
                    let id = TraceId::from(u128::MAX);
                    rules
                        .decide(
                            Origin::Root,
                            id,
                            "r",
                            &SpanKind::Server,
                            &[],
                            &TraceState::NONE,
                        )
                        .decision
                        == opentelemetry_sdk::trace::SamplingDecision::RecordAndSample
                };
                let kept = |rules: &RuleSet<_>, n| (0..n).filter(|_| decide(rules)).count();
                let stale = s.inner.rules.load_full();
                assert_eq!(kept(&stale, 4), 4, "{policy}");
                s.reload(&file(6)).unwrap();
                let current = s.inner.rules.load_full();
                assert_eq!(kept(&stale, 10), 0, "{policy}, cap {cap}: stale");
                assert_eq!(kept(&current, 10), 2, "{policy}, cap {cap}");
                s.reload(&file(12)).unwrap();
                let back = s.inner.rules.load_full();
                assert_eq!(kept(&current, 10), 0, "{policy}, cap {cap}: stale");
                assert_eq!(kept(&back, 20), 6, "{policy}, cap {cap}");
            }
        }
    }

    /// A reload closes the fleet limiters its rules do not keep (a changed limit's, a
    /// removed rule's), as dropping them did, and only those: a thread's cached old
    /// rules no longer keep one leasing from Redis.
    #[cfg(feature = "redis")]
    #[test]
    fn a_reload_closes_the_fleet_limiters_it_does_not_keep() {
        let file = |shared: u32, other: Option<u32>| {
            let mut text = format!("[fleet]\nredis = \"redis://127.0.0.1:1\"\n[[service]]\nname = \"a\"\n[[service.rule]]\nname = \"shared\"\nspan_name = \"x\"\nrate = {shared}.0\nscope = \"fleet\"\n");
            if let Some(rate) = other {
                text.push_str(&format!("[[service.rule]]\nname = \"other\"\nspan_name = \"y\"\nrate = {rate}.0\nscope = \"fleet\"\n"));
            }
            SamplingConfig::from_toml_str(&text, "s.toml").unwrap()
        };
        let s = RuleBasedSampler::new(&file(5, Some(3)), "a").unwrap();
        let (shared, other) = (
            s.fleet_limiter("shared").unwrap(),
            s.fleet_limiter("other").unwrap(),
        );
        // `other` unchanged: kept, open. `shared` changed: replaced, closed.
        s.reload(&file(6, Some(3))).unwrap();
        assert!(shared.is_stopped() && !other.is_stopped());
        assert!(s.fleet_limiter("other").unwrap().same(&other));
        let replacement = s.fleet_limiter("shared").unwrap();
        assert!(!replacement.same(&shared) && !replacement.is_stopped());
        // `other` removed: closed.
        s.reload(&file(6, None)).unwrap();
        assert!(other.is_stopped() && !replacement.is_stopped());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_fleet_limiter_refused_at_build_names_its_rule() {
        let text = "[fleet]\nredis = \"redis://127.0.0.1:1\"\n[[service]]\nname = \"a\"\n[[service.rule]]\nname = \"shared\"\nspan_name = \"x\"\nrate = 5.0\nscope = \"fleet\"\n";
        let mut config = SamplingConfig::from_toml_str(text, "s.toml").unwrap();
        config.fleet.urls.clear();
        let err = RuleBasedSampler::new(&config, "a").unwrap_err();
        assert_eq!(err.kind(), ConfigErrorKind::Fleet, "{err}");
        assert_eq!(
            (err.line(), err.key()),
            (8, "service[0].rule[0].scope"),
            "{err}"
        );
    }
}
