//! Per-window accounting: the limiter's clock, aligned so that its windows start at whole
//! multiples of the window in Unix time, and the report that prints each window once
//! its counts are final and folds it into the summary.
//!
//! **Why aligned.** A window is named in the summary by its start in Unix milliseconds.
//! The wall clock is read once, beside the monotonic clock, when the run starts; the
//! limiter's clock is then shifted so that its window edges fall on multiples of the
//! window in Unix time. Two demo processes with the same window therefore name the same
//! windows alike (to within their hosts' clock sync), and their counts can be summed per
//! window. The price: a run starts and ends inside a window, so its first and last
//! windows are partial, and the headline reports the whole ones.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use otel_rate_sampler::{Clock, MonotonicClock};

use crate::export::ExportTally;
use crate::keys::KeyReport;
use crate::load::{lock, WorkerSlot};

/// [`MonotonicClock`] shifted so that its windows start on multiples of the window in
/// Unix time. Copies share the origin.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AlignedClock {
    inner: MonotonicClock,
    /// Added to the inner clock: the Unix time at the inner clock's origin, modulo the
    /// window.
    phase: u64,
    /// Unix time, in nanoseconds, at this clock's origin (a multiple of the window).
    unix_origin: u128,
}

impl AlignedClock {
    /// A clock whose windows of `window_nanos` start on multiples of it in Unix time.
    pub(crate) fn new(window_nanos: u64) -> Self {
        let inner = MonotonicClock::new();
        // Read beside the monotonic origin, once: the only wall-clock reading of the run.
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_nanos();
        let window = u128::from(window_nanos);
        // Below `window_nanos`, so it fits.
        let phase = (wall % window) as u64;
        Self {
            inner,
            phase,
            unix_origin: wall - u128::from(phase),
        }
    }

    /// The resolution of every `AlignedClock` (its inner clock's, one kernel tick on
    /// Linux), known before one is built: a window shorter than it is refused.
    pub(crate) fn resolution_of_any() -> Duration {
        MonotonicClock::new().resolution()
    }

    /// The Unix window (Unix time divided by `window_nanos`) that is this clock's window
    /// 0. A fleet's window id is its Unix window by Redis `TIME`, so fleet window `w` is
    /// this clock's window `w - first_unix_window`.
    #[cfg(feature = "redis")]
    pub(crate) fn first_unix_window(&self, window_nanos: u64) -> u64 {
        u64::try_from(self.unix_origin / u128::from(window_nanos)).unwrap_or(u64::MAX)
    }

    /// The start of window `k` in Unix milliseconds.
    pub(crate) fn unix_ms_of(&self, k: u64, window_nanos: u64) -> u64 {
        let start = self.unix_origin + u128::from(k) * u128::from(window_nanos);
        u64::try_from(start / 1_000_000).unwrap_or(u64::MAX)
    }
}

impl Clock for AlignedClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.inner.now_nanos().saturating_add(self.phase)
    }

    fn resolution(&self) -> Duration {
        self.inner.resolution()
    }
}

/// Counts of one window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowCounts {
    /// Root spans started while the clock read this window.
    pub(crate) offered: u64,
    /// Roots kept that the limiter counted in this window.
    pub(crate) kept: u64,
    /// Of those, by the tenth of the window the (local) limiter stamped them in.
    pub(crate) kept_per_tenth: [u64; 10],
    /// Whole traces of this window that reached the exporter.
    pub(crate) exported: u64,
}

/// Where a window lies against the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Wholly inside the run.
    Whole,
    /// Cut by the run's start or end.
    Partial,
    /// Wholly after the end: a trace offered just before it, stamped by the limiter
    /// at or after it.
    AfterEnd,
}

/// The per-window report: prints windows as they close and folds them into the summary.
#[derive(Debug)]
pub(crate) struct Report {
    clock: AlignedClock,
    window_nanos: u64,
    permits: u64,
    start: u64,
    end: u64,
    /// How long after a window's close on this clock its counts are final: 0 when this
    /// process's limiter counts by this clock, more when a fleet's clock does.
    pub(crate) settle: u64,
    /// The next window to report.
    pub(crate) next: u64,
    /// Whole traces that reached the exporter, per window start in Unix ms: every window
    /// the run touched.
    pub(crate) per_window: BTreeMap<u64, u64>,
    /// Windows reported that overlap the run.
    pub(crate) windows: u64,
    /// Windows wholly inside the run, and the least and most they kept.
    pub(crate) whole_windows: u64,
    pub(crate) whole_min: Option<u64>,
    pub(crate) whole_max: u64,
    /// Roots the whole windows kept, by the tenth of the window they were stamped in:
    /// how pacing spreads them (local limiters only).
    pub(crate) kept_per_tenth: [u64; 10],
    /// Whole windows offered more than the limit, and the least they kept.
    pub(crate) full_windows: u64,
    pub(crate) min_full_window: Option<u64>,
    /// Windows reported that lie wholly after the run's end.
    pub(crate) after_end: u64,
    /// The most any window kept.
    pub(crate) max_per_window: u64,
    /// Windows whose kept count (by the limiter's stamps) differs from their exported one.
    pub(crate) mismatched_windows: u64,
    /// Counts that arrived for a window already reported (should never happen).
    pub(crate) late: WindowCounts,
    /// `--keys`: the routes' starved pairs.
    pub(crate) keys: Option<KeyReport>,
}

impl Report {
    pub(crate) fn new(
        clock: AlignedClock,
        window_nanos: u64,
        permits: u32,
        start: u64,
        end: u64,
    ) -> Self {
        Self {
            clock,
            window_nanos,
            permits: u64::from(permits),
            start,
            end,
            settle: 0,
            next: start / window_nanos,
            per_window: BTreeMap::new(),
            windows: 0,
            whole_windows: 0,
            whole_min: None,
            whole_max: 0,
            kept_per_tenth: [0; 10],
            full_windows: 0,
            min_full_window: None,
            after_end: 0,
            max_per_window: 0,
            mismatched_windows: 0,
            late: WindowCounts::default(),
            keys: None,
        }
    }

    /// The clock time at which window `k` closes.
    pub(crate) fn close_of(&self, k: u64) -> u64 {
        k.saturating_add(1).saturating_mul(self.window_nanos)
    }

    fn place_of(&self, k: u64) -> Place {
        let open = k.saturating_mul(self.window_nanos);
        if open >= self.end {
            Place::AfterEnd
        } else if open >= self.start && self.close_of(k) <= self.end {
            Place::Whole
        } else {
            Place::Partial
        }
    }

    /// Takes the counts of window `self.next` (and any stragglers of older windows) out
    /// of the workers' and the exporter's maps, prints its line, folds it into the summary.
    pub(crate) fn finish_next(&mut self, slots: &[WorkerSlot], tally: &Mutex<ExportTally>) {
        let k = self.next;
        let c = self.take_counts(k, slots, tally);
        let place = self.place_of(k);
        let unix_ms = self.clock.unix_ms_of(k, self.window_nanos);
        eprintln!(
            "window {k} @{unix_ms}: offered {} kept {} exported {}{}",
            c.offered,
            c.kept,
            c.exported,
            match place {
                Place::Whole => "",
                Place::Partial => " (partial)",
                Place::AfterEnd => " (after the end of the run: stamped by the limiter past it)",
            },
        );
        self.per_window.insert(unix_ms, c.exported);
        if let Some(keys) = &mut self.keys {
            keys.take_window(k, place == Place::Whole, slots);
        }
        self.fold(place, c);
        self.next += 1;
    }

    /// Moves window `k`'s counts out of the shared maps; older ones go to `late`.
    fn take_counts(
        &mut self,
        k: u64,
        slots: &[WorkerSlot],
        tally: &Mutex<ExportTally>,
    ) -> WindowCounts {
        let mut c = WindowCounts::default();
        for slot in slots {
            let mut counts = lock(&slot.counts);
            let later = counts.split_off(&(k + 1));
            for (window, n) in std::mem::replace(&mut *counts, later) {
                let into = if window == k { &mut c } else { &mut self.late };
                into.offered += n.offered;
                into.kept += n.kept;
                for (sum, t) in into.kept_per_tenth.iter_mut().zip(n.kept_per_tenth) {
                    *sum += t;
                }
            }
        }
        let mut tally = lock(tally);
        let later = tally.per_window.split_off(&(k + 1));
        for (window, n) in std::mem::replace(&mut tally.per_window, later) {
            if window == k {
                c.exported += n;
            } else {
                self.late.exported += n;
            }
        }
        c
    }

    fn fold(&mut self, place: Place, c: WindowCounts) {
        match place {
            Place::AfterEnd => self.after_end += 1,
            Place::Partial => self.windows += 1,
            Place::Whole => {
                self.windows += 1;
                self.whole_windows += 1;
                self.whole_min = Some(self.whole_min.map_or(c.exported, |m| m.min(c.exported)));
                self.whole_max = self.whole_max.max(c.exported);
                for (sum, t) in self.kept_per_tenth.iter_mut().zip(c.kept_per_tenth) {
                    *sum += t;
                }
                if c.offered > self.permits {
                    self.full_windows += 1;
                    self.min_full_window = Some(
                        self.min_full_window
                            .map_or(c.exported, |m| m.min(c.exported)),
                    );
                }
            }
        }
        self.max_per_window = self.max_per_window.max(c.exported);
        if c.kept != c.exported {
            self.mismatched_windows += 1;
        }
    }
}
