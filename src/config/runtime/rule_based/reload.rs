//! Replacing a [`RuleBasedSampler`]'s rules while it decides: [`RuleBasedSampler::reload`]
//! (where the reload guarantee is stated, once) and the [`ReloadHandle`] that reloads a
//! sampler owned elsewhere.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use super::{compile, Inner, RuleBasedSampler};
use crate::clock::{Clock, MonotonicClock};
use crate::config::compile::handover::Handover;
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::model::SamplingConfig;
use crate::stats::RuleBasedStats;

impl<C: Clock + Clone> RuleBasedSampler<C> {
    /// Replaces the rules with `config`'s, atomically.
    ///
    /// # Reloads never re-open used permits
    ///
    /// Whatever the sequence of reloads, a local limit's window admits at most the
    /// largest limit in force for it during that window (but see the cases below).
    /// Limits are matched by identity, by meaning and not by position: a named rule
    /// by its name, then any other rule by what it matches (span name, kind, parent,
    /// attributes), each previous rule taken over by one new rule at most; a floor by
    /// its rule, the cap's shared pool and the default as themselves. So inserting,
    /// reordering, naming or renaming rules hands out no second N in a window.
    ///
    /// * One whose limit and algorithm did not change keeps its limiter: no reset, no
    ///   burst, an exact bound.
    /// * A changed one gets a new limiter that starts with what the old one used in its
    ///   current window, *including* admissions beyond the new limit: lowering 1000/h
    ///   (1000 used) to 500 and restoring 1000 within the hour admits nothing more
    ///   that hour. Each admission carried keeps its time (the sliding log's stamp,
    ///   the bucketed window's sub-window; the aligned kinds count per window): it is
    ///   counted until it has left the new window and the old one, never longer than to
    ///   the end of the new window of the reload, so a limit changed late in a window
    ///   gives its permits back as its admissions leave (10 kept at 1 ms, changed
    ///   10 → 5 → 10 at 900 ms: 10 again from 1.001 s).
    /// * Decisions running during the swap, and threads whose cached rules are the old
    ///   ones: before it publishes the new rules, the reload *closes* each replaced
    ///   limiter by its own atomic state (one swap of its word, which freezes the count
    ///   it carries and makes every later decision on it refuse, as on a full limiter)
    ///   and moves what it admitted since the carry-over into its replacement. A
    ///   decision that read the old rules before the swap and reaches a closed limiter
    ///   after it is refused, not retried on the new rules: it stays on the rules it
    ///   began with, and the decision path keeps no test for a closed limiter. Nothing
    ///   waits for readers, however long one is descheduled. So the old and the new
    ///   limiter together admit at most `max(old N, new N)` in the window of the
    ///   reload, with no exception; the price is that a changed rule refuses from the
    ///   close to the publication (microseconds), and so do decisions on the old rules
    ///   that reach it after. A swap that straddles a window boundary carries what the
    ///   old limiter counted in the new window. The fixed window's carried count is
    ///   exact, and so is the sliding log's (what it admitted during the swap is
    ///   counted by number); for the sliding counter and the bucketed window, what
    ///   leaves their window while the new rules are compiled is carried short by that
    ///   much (the carry-over is read before compiling).
    /// * A change of window length or of algorithm is a change of limit like any other.
    ///   Where the new window reaches back before what the old limiter counts (a longer
    ///   window, one cut elsewhere, a sliding one after an aligned one), the new limiter
    ///   also counts what the old limit could have let through there (its N per window
    ///   of its own meeting that part; where another limit decided before the old one
    ///   or as it began, as much as fills any limit), whole: what its own permits cannot hold stays
    ///   counted against its window, so a further reload before that window ends gives
    ///   none of it out again. 1 per 1.5 s (1 used) changed to 2 per 1 s at 1.5 s keeps
    ///   2 between 1 s and 2 s. The price: that is a bound, not
    ///   a count, so such a rule may keep less than its limit, at worst nothing (N
    ///   under-used), until what the reload carried has left its window (each admission
    ///   as above; what the old limit could have let through before its own window, when
    ///   that part leaves the new window); the same change with nothing used keeps 1,
    ///   not 2, in [1.5 s, 2 s). Not covered: the new limiter's windows
    ///   that begin before what the old one counted has left its window (a shorter
    ///   window, a fixed window after a sliding one) start empty, as closing them would
    ///   starve the rule; each can add its N to an interval of the old length: 5 per 1 s
    ///   (sliding log, 5 used at 1.56 s) changed then to 1 per 500 ms keeps 1 more in
    ///   [2 s, 2.5 s), 6 between 1.56 s and 2.56 s.
    /// * An `adaptive` rule's cap is a limit like the others: kept with its estimate when
    ///   the limit did not change, else handed over as above (its estimate starts
    ///   again), so lowering and restoring it, renaming it or removing and restoring
    ///   it re-opens nothing of its window.
    /// * A rule removed (or made a probability) and brought back is the same rule: within
    ///   a window it finds what its limiter used (limits whose identity left the rules
    ///   are closed, as a replaced one is, so a decision still on the old rules is
    ///   refused, and kept aside while their window holds admissions: the rule brought
    ///   back carries them, at any reload rate); later, its new limiter goes on from
    ///   what the dropped one was, as a changed limit does (a longer window counts what
    ///   the old limit could have let through before; 1 per 1 s, 1 kept at 0.7 s,
    ///   removed at 1.25 s and brought back at 1.3 s as 2 per 1.5 s keeps 1 more in
    ///   [0, 1.5 s), not 2). That costs a name, conditions and a few words per rule
    ///   forgotten, for the last 256 of them: a rule brought back after 256 other rules
    ///   were forgotten since is a new rule. Meanwhile its spans go to the next rule that
    ///   matches them, or the default, under that one's limit and the cap.
    /// * The cap is carried as a whole: its floors and shared pool together hold what
    ///   the old ones used, so a floor added, removed, resized or moved re-opens nothing.
    /// * Reloads never starve: once they stop, a rule offered more than its limit keeps
    ///   at least ⌈0.9 N⌉ in the first full window of its limit that begins once what the
    ///   reload carried has left the limiter's window (a paced bucketed window: the
    ///   second such window; the first may hold only the shares of its sub-windows, as
    ///   after any start part-way into a window, see [`Limit`](crate::Limit)'s pacing),
    ///   the cap permitting.
    ///
    /// Reloads run one at a time (a watcher's, a poller's and direct calls queue).
    ///
    /// A fleet-scoped limit whose key, limit and `[fleet]` settings did not change keeps
    /// its [`FleetLimiter`](crate::FleetLimiter) and its lease. One whose limit changed
    /// gets a new fleet limiter under the same key and instance id: Redis still counts
    /// what the fleet was granted in the current window, so the fleet keeps at most
    /// `max(old N, new N)` in the window of the reload and the new N from the next one.
    /// This replica then admits nothing for that limit until its new limiter's first
    /// Redis round trip, and what the old one held unspent is not used in that window:
    /// the reload closes every fleet limiter the new rules do not keep (its calls to
    /// Redis stop, and it refuses every decision still reaching it), as dropping it
    /// did. A change of scope starts a new limiter with nothing carried over. Spans
    /// being decided during the swap use the old rules or the new ones, never a mix,
    /// and never wait.
    ///
    /// Each rule's decision counters ([`stats`](Self::stats)) carry over by name too,
    /// changed or not, so its metric series stay monotonic; a removed rule's go with it.
    ///
    /// # Errors
    ///
    /// As [`new`](RuleBasedSampler::new); the old rules then stay in force.
    pub fn reload(&self, config: &SamplingConfig) -> Result<(), ConfigError> {
        let _one_at_a_time = self
            .inner
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self.inner.rules.load_full();
        let (next, handovers) = compile(
            config,
            &self.inner.service,
            &self.inner.clock,
            Some(&current),
        )
        .inspect_err(|_| self.count_reload(false))?;
        // Close the replaced limiters, carrying what they admitted since the new ones
        // were built, then publish: no decision reaches a new limiter before it holds
        // that, and none reaches an old one's permits after.
        handovers.iter().for_each(Handover::settle);
        #[cfg(feature = "redis")]
        current.close_fleet_limiters_not_in(&next);
        drop(current);
        self.inner.rules.store(Arc::new(next));
        self.count_reload(true);
        Ok(())
    }

    pub(crate) fn count_reload(&self, succeeded: bool) {
        let counter = if succeeded {
            &self.inner.reloads_succeeded
        } else {
            &self.inner.reloads_failed
        };
        // Relaxed: a statistic; it publishes nothing (the rules go through the ArcSwap).
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A handle that reloads this sampler's rules without being the sampler (as
    /// `tracing-subscriber`'s `reload::Handle` does for a layer): give the sampler to
    /// the tracer provider and keep the handle where configuration changes arrive.
    /// It does not keep the sampler alive.
    ///
    /// ```
    /// use opentelemetry_sdk::trace::SdkTracerProvider;
    /// use otel_rate_sampler::{ConfigErrorKind, RuleBasedSampler, SamplingConfig};
    ///
    /// let v1 = SamplingConfig::from_toml_str("[default]\nrate = 10.0\n", "v1.toml")?;
    /// let sampler = RuleBasedSampler::new(&v1, "checkout")?;
    /// let handle = sampler.reload_handle();
    /// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
    ///
    /// let v2 = SamplingConfig::from_toml_str("[default]\nrate = 5.0\n", "v2.toml")?;
    /// handle.reload(&v2)?;
    /// assert_eq!(handle.stats().unwrap().generation, 1);
    ///
    /// drop(provider); // and with it the sampler
    /// let err = handle.reload(&v2).unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::SamplerGone);
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    pub fn reload_handle(&self) -> ReloadHandle<C> {
        ReloadHandle {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Loads `path` ([`SamplingConfig::from_path`]) and [`reload`](Self::reload)s it.
    /// A sampler built by [`from_env`](Self::from_env) with
    /// [`OTEL_RATE_SAMPLER_REDIS`](crate::env::OTEL_RATE_SAMPLER_REDIS) set keeps that
    /// Redis for the reloaded file's fleet-scoped limits.
    ///
    /// # Errors
    ///
    /// The file's [`ConfigError`]; the old rules then stay in force.
    pub fn reload_from_path(&self, path: impl AsRef<std::path::Path>) -> Result<(), ConfigError> {
        let config = self
            .load_for_reload(path.as_ref())
            .inspect_err(|_| self.count_reload(false))?;
        self.reload(&config)
    }

    /// Loads `path` as [`reload_from_path`](Self::reload_from_path) does, without
    /// applying it or counting a failure.
    pub(crate) fn load_for_reload(
        &self,
        path: &std::path::Path,
    ) -> Result<SamplingConfig, ConfigError> {
        let fleet = &self.inner.fleet;
        SamplingConfig::from_path_with(path, fleet.urls.as_deref()).map(|c| c.with_fleet_env(fleet))
    }

    /// Loads `bytes`, read from `path`, as [`load_for_reload`](Self::load_for_reload)
    /// loads the file.
    #[cfg(feature = "reload")]
    pub(crate) fn load_read_for_reload(
        &self,
        path: &std::path::Path,
        bytes: Vec<u8>,
    ) -> Result<SamplingConfig, ConfigError> {
        let text = String::from_utf8(bytes).map_err(|e| {
            let e = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            crate::config::formats::unreadable(&path.display().to_string(), e)
        })?;
        let fleet = &self.inner.fleet;
        SamplingConfig::from_file_text(path, &text, fleet.urls.as_deref())
            .map(|c| c.with_fleet_env(fleet))
    }
}

/// Reloads a [`RuleBasedSampler`]'s rules from elsewhere than the sampler
/// ([`RuleBasedSampler::reload_handle`]). Cheap to clone; it does not keep the sampler
/// alive: once the sampler and its clones are dropped (with the tracer provider that
/// holds it), its methods return a [`SamplerGone`](ConfigErrorKind::SamplerGone) error
/// or `None`.
pub struct ReloadHandle<C = MonotonicClock> {
    inner: Weak<Inner<C>>,
}

impl<C: Clock + Clone> ReloadHandle<C> {
    /// The sampler, while it lives.
    fn sampler(&self) -> Option<RuleBasedSampler<C>> {
        self.inner.upgrade().map(|inner| RuleBasedSampler { inner })
    }

    fn gone(&self, source: &str) -> ConfigError {
        ConfigErrorKind::SamplerGone.error(source, "the sampler this handle reloads has been dropped (with its tracer provider); nothing was reloaded".to_owned())
    }

    /// [`RuleBasedSampler::reload`] on the sampler.
    ///
    /// # Errors
    ///
    /// As [`RuleBasedSampler::reload`], or [`SamplerGone`](ConfigErrorKind::SamplerGone).
    pub fn reload(&self, config: &SamplingConfig) -> Result<(), ConfigError> {
        match self.sampler() {
            Some(sampler) => sampler.reload(config),
            None => Err(self.gone(&config.source)),
        }
    }

    /// [`RuleBasedSampler::reload_from_path`] on the sampler.
    ///
    /// # Errors
    ///
    /// As [`RuleBasedSampler::reload_from_path`], or
    /// [`SamplerGone`](ConfigErrorKind::SamplerGone) (the file is then not read).
    pub fn reload_from_path(&self, path: impl AsRef<std::path::Path>) -> Result<(), ConfigError> {
        match self.sampler() {
            Some(sampler) => sampler.reload_from_path(path),
            None => Err(self.gone(&path.as_ref().display().to_string())),
        }
    }

    /// [`RuleBasedSampler::stats`] of the sampler, `None` once it is gone.
    pub fn stats(&self) -> Option<RuleBasedStats> {
        self.sampler().map(|s| s.stats())
    }

    /// Whether the sampler still lives.
    pub fn is_alive(&self) -> bool {
        self.inner.strong_count() > 0
    }
}

impl<C> Clone for ReloadHandle<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Weak::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for ReloadHandle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadHandle")
            .field("alive", &(self.inner.strong_count() > 0))
            .finish()
    }
}
