use std::fmt;
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use super::book::Roll;
use super::demand::Demand;
use super::keys::{Keys, MAX_KEYS};
use super::FairError;
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::limiter::{Algorithm, AnyLimiter, RateLimiter};
use crate::sync::AtomicU64;

/// The state word's rolling bit: a roll is under way.
pub(super) const ROLLING: u64 = 1;
/// The state word's learning bit: the window started with nothing to go by, and rolls
/// again a tenth into it (see `roll.rs`); while rolling, this roll is that second one.
pub(super) const LEARNING: u64 = 2;
/// The window's place in the state word.
pub(super) const SHIFT: u32 = 2;

/// The default [`FairLimiter::max_keys`]: 500, as Honeycomb Refinery's `MaxKeys` and the
/// OpenTelemetry Collector's adaptive tail sampler.
pub const DEFAULT_MAX_KEYS: usize = 500;

/// A fair share of one limit per key: at most `N` per window in total, one permit
/// reserved for every key seen in the window before, the rest max-min fair by each
/// key's estimated demand.
///
/// It wraps any of the crate's limiters ([`AnyLimiter`]), which still enforces the
/// total with its own algorithm and pacing; each call names its key (a `u64`, a hash of
/// whatever makes the key: the sampler hashes a span's name and attribute values).
///
/// # Guarantee, per aligned window of the limit's `W` and `N`
///
/// * **Never more than `N`** admissions stamped in the window, whatever the keys do.
/// * **Floor.** At the window's first call, one thread computes the window's
///   allocation (the *roll*): every key offered in the window before holds one reserved
///   permit while those keys are at most the permits the limiter has free then (`N` for
///   the fixed window and the sliding counter; `N` less what the window before still
///   holds for the sliding log and the bucketed window). Such a key offered in this
///   window keeps at least one trace in it, unless each of its calls came while the
///   roll ran (refused: see below). With more such keys than permits, `k = ⌈keys/N⌉`
///   turns: every key of a stable set offered in `k + 1` consecutive windows keeps one in
///   them. A new key keeps one as soon as the limiter has an unreserved permit.
/// * **Max-min shares.** The permits beyond the floors are reserved max-min fair by each
///   key's demand estimate (its offered count in the window before): a key gets
///   `min(estimate, L)` for the largest level `L` that fits, plus one for some. When each key offers as many in a window as in the one
///   before, no key keeps more than one more than a key whose calls it refuses. Paced
///   (the limit's default), a key's share is released over the window on the limit's
///   schedule (its floor at once); the unreserved rest goes first-come to any key
///   through the wrapped limiter, on its own schedule. A share a key leaves unused stays
///   reserved until the window ends; the next window's estimates move it.
/// * **Learning windows.** A window that starts with nothing to go by (the first, or one
///   after windows without a call) is first come, first served until a call a tenth
///   of a window after its first rolls it again (in the same window): each key's
///   demand is then what it was offered so far at that pace, and what the limit has
///   left is reserved over it as above.
/// * **Bounded keys.** At most [`max_keys`](Self::max_keys) keys (default
///   [`DEFAULT_MAX_KEYS`], at most 65 534); keys beyond share one overflow key (counted
///   in [`stats`](Self::stats)); a key not offered in 8 consecutive windows ages out and
///   gives its entry back. Memory: [`heap_bytes`](Self::heap_bytes), about 0.4 KB per
///   key of `max_keys`, allocated once; traffic never grows it.
/// * **Weights.** Each admission carries its key's probability in the window
///   ([`FairAdmission::probability`]): its reserved permits over its demand estimate
///   (in a learning window's second roll, over its demand in the rest of the window), 1
///   when they cover it, or when the key holds none (a new key, a learning window's
///   first tenth). The sum of `1/p` over a key's admissions estimates what it offered,
///   as well as its estimate tracks its demand.
///
/// The sliding guarantees of the sliding log and the bucketed window (any interval of
/// `W`) hold for the unreserved part; the reserved part is counted in the wrapped
/// limiter at the roll.
///
/// # Cost
///
/// A decision reads the clock, the window word, one or two index words, the key's two
/// words, and counts the key's demand in the thread's own row. A refusal writes nothing
/// another thread writes and allocates nothing. A key's first call claims an entry (a
/// compare-exchange). The roll sums the demand rows and computes the allocation,
/// `O(max_keys · log)`, without allocating; calls that meet a roll in progress are
/// refused rather than wait.
pub struct FairLimiter<C = MonotonicClock> {
    /// Shared with the rule layer's handover when a rule file built it (see
    /// [`FairLimiter::over_shared`]).
    pub(super) inner: Arc<AnyLimiter<C>>,
    pub(super) keys: Keys,
    pub(super) demand: Demand,
    /// One per key, the overflow key's last: 24 bytes each, unpadded, so 500 keys'
    /// words stay in the first-level cache; an admission's compare-exchange may share
    /// its line with two other keys' (refusals only read).
    pub(super) entries: Box<[Entry]>,
    /// `window << 2 | learning << 1 | rolling`: the window the entries' allocations are
    /// for, whether it is a learning window, and whether a roll to it is under way.
    pub(super) state: CachePadded<AtomicU64>,
    pub(super) roll: Mutex<Roll>,
    pub(super) window: u64,
    /// The pacing schedule's steps (1: unpaced) and the length of each.
    pub(super) steps: u64,
    pub(super) step_len: u64,
    /// In a learning window: the clock time its second roll is due, a tenth of a window
    /// after its first call.
    pub(super) learn_at: AtomicU64,
}

/// What a [`FairLimiter`] holds: its keys, and what the overflow key was offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairStats {
    /// The keys it holds now (the overflow key apart).
    pub keys: usize,
    /// The most keys it holds.
    pub max_keys: usize,
    /// The calls of keys beyond `max_keys` (the overflow key's), since it was built.
    pub overflow_offered: u64,
}

/// One key's words for the current window.
pub(super) struct Entry {
    /// Packed (window, admissions on its reserved permits).
    pub(super) used: AtomicU64,
    /// Packed (window, reserved permits).
    pub(super) reserved: AtomicU64,
    /// The bits of its probability in that window (`f64`).
    pub(super) probability: AtomicU64,
}

impl Default for Entry {
    /// No permit reserved in window 0, probability 1.
    fn default() -> Self {
        Self {
            used: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            probability: AtomicU64::new(1.0f64.to_bits()),
        }
    }
}

/// An admission by a [`FairLimiter`]: when it is counted, and its key's probability.
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use]
pub struct FairAdmission {
    pub(super) stamp: u64,
    pub(super) probability: f64,
}

impl FairAdmission {
    /// The clock time the admission is counted at (see
    /// [`RateLimiter::acquire_stamped`](crate::RateLimiter::acquire_stamped)).
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// Its key's probability of admission in this window, in `(0, 1]`: `1/p` is the
    /// number of the key's calls this admission stands for.
    pub fn probability(&self) -> f64 {
        self.probability
    }
}

impl FairLimiter {
    /// A fair limiter over an `algorithm` limiter for `limit` on the default clock.
    ///
    /// # Errors
    ///
    /// [`FairError::MaxKeys`] when `max_keys` is 0 or above 65 534.
    pub fn new(algorithm: Algorithm, limit: Limit, max_keys: usize) -> Result<Self, FairError> {
        Self::over(AnyLimiter::new(algorithm, limit), max_keys)
    }
}

impl<C: Clock> FairLimiter<C> {
    /// A fair limiter over `inner`, which keeps enforcing the total.
    ///
    /// # Errors
    ///
    /// [`FairError::MaxKeys`] when `max_keys` is 0 or above 65 534.
    pub fn over(inner: AnyLimiter<C>, max_keys: usize) -> Result<Self, FairError> {
        Self::over_shared(Arc::new(inner), max_keys)
    }

    /// A fair limiter over `inner`, which others may also hold: the rule layer's
    /// handover reads, closes and carries counts into it, as into any rule's limiter.
    /// Whatever else admits through `inner` counts in the total, and its reserved
    /// permits are counted in it at each roll.
    pub(crate) fn over_shared(
        inner: Arc<AnyLimiter<C>>,
        max_keys: usize,
    ) -> Result<Self, FairError> {
        if max_keys == 0 || max_keys > MAX_KEYS {
            return Err(FairError::MaxKeys { max_keys });
        }
        let limit = inner.limit();
        let steps = u64::from(limit.pacing_steps().clamp(1, limit.permits()));
        let mut roll = Roll::new(max_keys + 1);
        // Window 0 learns from now on (the first roll of a later window sets its own).
        let now = inner.clock().now_nanos();
        if now < limit.window_nanos() {
            roll.learning_since = Some((0, now));
        }
        let learn_at = AtomicU64::new(now.saturating_add(limit.window_nanos() / 10));
        Ok(Self {
            keys: Keys::new(max_keys),
            demand: Demand::new(max_keys + 1),
            entries: (0..=max_keys).map(|_| Entry::default()).collect(),
            state: CachePadded::new(AtomicU64::new(LEARNING)),
            roll: Mutex::new(roll),
            window: limit.window_nanos(),
            steps,
            step_len: limit.window_nanos() / steps,
            learn_at,
            inner,
        })
    }

    /// The wrapped limiter, which enforces the total.
    pub fn inner(&self) -> &AnyLimiter<C> {
        &self.inner
    }

    /// Whether `inner` is the limiter it wraps (the same one, not an equal one).
    #[cfg(feature = "config")]
    pub(crate) fn is_over(&self, inner: &Arc<AnyLimiter<C>>) -> bool {
        Arc::ptr_eq(&self.inner, inner)
    }

    /// The limit of the total.
    pub fn limit(&self) -> Limit {
        self.inner.limit()
    }

    /// The most keys it tells apart; the others share the overflow key.
    pub fn max_keys(&self) -> usize {
        self.entries.len() - 1
    }

    /// The keys it holds now, and what the overflow key was offered so far.
    pub fn stats(&self) -> FairStats {
        FairStats {
            keys: self.keys.len(),
            max_keys: self.max_keys(),
            overflow_offered: self.lock_roll().overflow_offered(&self.demand),
        }
    }

    pub(super) fn lock_roll(&self) -> std::sync::MutexGuard<'_, Roll> {
        // A poisoned lock still holds whole bookkeeping: the roll only writes its own
        // vectors, element by element, and never panics on purpose.
        self.roll
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The permits the last roll could reserve: the floors' precondition (tests).
    #[cfg(all(test, not(loom)))]
    pub(super) fn reserved_capacity(&self) -> u64 {
        self.lock_roll().capacity()
    }

    /// What it holds on the heap, wrapped limiter apart: fixed at construction.
    pub fn heap_bytes(&self) -> usize {
        debug_assert_eq!(
            self.keys.heap_bytes() + self.demand.heap_bytes(),
            Keys::heap_bytes_for(self.max_keys()) + Demand::heap_bytes_for(self.entries.len())
        );
        Self::heap_bytes_for(self.max_keys())
    }

    /// What a fair limiter of `max_keys` holds on the heap, wrapped limiter apart, before
    /// it is built (the rule layer's memory budget).
    pub(crate) fn heap_bytes_for(max_keys: usize) -> usize {
        let entries = max_keys + 1;
        Keys::heap_bytes_for(max_keys)
            + Demand::heap_bytes_for(entries)
            + entries * std::mem::size_of::<Entry>()
            + Roll::heap_bytes(entries)
    }
}

/// Calls without a key are the calls of key 0 (the sampler always names a key).
impl<C: Clock> RateLimiter for FairLimiter<C> {
    #[inline]
    fn acquire_stamped(&self) -> Option<u64> {
        self.acquire(0).map(|admission| admission.stamp)
    }

    fn limit(&self) -> Limit {
        self.inner.limit()
    }

    fn count_in_window(&self) -> Option<u64> {
        self.inner.count_in_window()
    }
}

impl<C: fmt::Debug> fmt::Debug for FairLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLimiter")
            .field("inner", &self.inner)
            .field("max_keys", &(self.entries.len() - 1))
            .field("keys", &self.keys.len())
            .finish()
    }
}
