//! The bound, checked after the fact over what a run admitted: in any window of a limit
//! in force (and, for the sliding log and the bucketed window, in any interval of their
//! window's length, on a sub-window edge for the bucketed one), a limiter never admits
//! more than the most that one of the limits in force on it during that interval lets
//! through in it. For a limit of the interval's own length and kind that is its `N`;
//! a limit of another window counts as `N` per window of its own the interval meets
//! (so 10 per 500 ms lets 40 through in a 2 s window, and the aligned 500 ms windows
//! inside it are checked against 10 each). Where a window length or kind changed, the
//! bound is larger by the windows of the new limit that begin before what the old
//! limiter counted has left its window, `N` each: nothing can close them without
//! starving the rule (`Lineage::window_changes`).

use super::model::{Kind, Lim};

/// A limit in force on a lineage from `start` to `end` (clock nanoseconds, both
/// included: decisions at a reload's instant ran under both files).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Period {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) lim: Lim,
}

/// The sub-windows of a bucketed window (the default).
const BUCKETS: u64 = 10;

impl Period {
    fn meets(&self, from: u64, to: u64) -> bool {
        self.start < to && self.end >= from
    }

    /// What this limit lets through in its windows that begin empty (what its
    /// predecessor carried into it has left them) after `after` and before `before`,
    /// and end after `from`, counting those that begin by `until` (its end, or the
    /// return of its rule).
    fn fresh_windows(&self, after: u64, before: u64, from: u64, until: u64) -> u64 {
        let w = self.lim.window();
        let windows = (0..)
            .map(|i| counted(self.lim, self.start).1 + i * w)
            .take_while(|&begins| begins < before && begins <= until)
            .filter(|&begins| begins > after && begins + w > from)
            .count() as u64;
        windows * u64::from(self.lim.n)
    }

    /// The most this limit alone lets through in `[from, to)`.
    fn most_in(&self, from: u64, to: u64) -> u64 {
        let w = self.lim.window();
        let n = u64::from(self.lim.n);
        let meeting = |len: u64| (to - 1) / len - from / len + 1;
        n * match self.lim.kind {
            Kind::Log => (to - from).div_ceil(w),
            Kind::Bucketed => meeting(w / BUCKETS).div_ceil(BUCKETS),
            Kind::Fixed | Kind::Sliding | Kind::Adaptive => meeting(w),
        }
    }
}

/// What a limiter of `lim` counts at `at` (from, included) and when that has left its
/// window: its aligned window for the window kinds; for the sliding log what it
/// stamped after `at - W`, gone at `at + W`; for the bucketed window its last `B`
/// sub-windows.
fn counted(lim: Lim, at: u64) -> (u64, u64) {
    let w = lim.window();
    match lim.kind {
        Kind::Log => ((at + 1).saturating_sub(w), at + w),
        Kind::Bucketed => {
            let sub = at / (w / BUCKETS) * (w / BUCKETS);
            ((sub + w / BUCKETS).saturating_sub(w), sub + w)
        }
        Kind::Fixed | Kind::Sliding | Kind::Adaptive => (at / w * w, at / w * w + w),
    }
}

/// What a lineage admitted (clock readings) and the limits in force on it.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    pub(crate) periods: Vec<Period>,
    pub(crate) admitted: Vec<u64>,
}

impl Lineage {
    /// The admissions in `[from, to)` (`admitted` is in clock order).
    fn in_interval(&self, from: u64, to: u64) -> u64 {
        let first = self.admitted.partition_point(|&t| t < from);
        let end = self.admitted.partition_point(|&t| t < to);
        end.saturating_sub(first) as u64
    }

    fn bound(&self, from: u64, to: u64) -> u64 {
        let largest = self
            .periods
            .iter()
            .filter(|p| p.meets(from, to))
            .map(|p| p.most_in(from, to))
            .max()
            .unwrap_or(0);
        largest + self.window_changes(from, to)
    }

    /// What a change of window length or kind lets `[from, to)` hold beyond its largest
    /// limit: the windows of the limits in force after it that begin after the change
    /// but before what the old limiter counted at it has left its window (a shorter
    /// window, a fixed window after a sliding one), `N` each. What the new look-back
    /// reaches before the old one counted is carried (`unseen` in `src/config/compile/`),
    /// so that needs no term; these windows cannot be: a carry dated at the reload is
    /// not in them, and one that closed them would starve the rule. 5 per 1 s (sliding
    /// log, 5 kept at 1.56 s) changed at 1.56 s to 1 per 500 ms, the reloads stopping
    /// there: the cap allows nothing more in [1.56 s, 2.56 s), the no-starvation check 1
    /// in [2 s, 2.5 s), the first full window of the new limit
    /// (`a_shorter_window_after_a_saturated_longer_one_opens_its_next_window`). A rule
    /// removed and brought back goes on from its dropped limit as that limit changed at
    /// its return would, so a period its rule left counts its windows up to that return
    /// (`a_rule_removed_after_a_window_change_goes_on_as_that_limit_changed_at_its_return`).
    fn window_changes(&self, from: u64, to: u64) -> u64 {
        self.periods
            .windows(2)
            .filter(|pair| pair[0].lim != pair[1].lim && pair[1].start < to)
            .map(|pair| {
                let (old, at) = (pair[0].lim, pair[1].start);
                let counted_to = counted(old, at).1;
                self.periods
                    .iter()
                    .zip(self.periods.iter().skip(1).map(Some).chain([None]))
                    .filter(|(q, _)| q.start >= at)
                    .map(|(q, next)| {
                        let until = next.map_or(q.end, |next| next.start.max(q.end));
                        q.fresh_windows(at, counted_to.min(to), from, until)
                    })
                    .sum::<u64>()
            })
            .sum()
    }

    /// The intervals to check for a period: the aligned windows of its limit that hold
    /// an admission, and for the sliding log (any interval) and the bucketed window (on
    /// a sub-window edge) the interval of its window's length from each admission (or
    /// the edge before it), which together hold the most any such interval holds.
    fn intervals(&self, p: &Period) -> impl Iterator<Item = (u64, u64)> + '_ {
        let w = p.lim.window();
        let kind = p.lim.kind;
        let mut admitted = self.admitted.clone();
        admitted.dedup();
        admitted.into_iter().flat_map(move |t| {
            let aligned = t / w * w;
            let sliding = match kind {
                Kind::Log => Some(t),
                Kind::Bucketed => Some(t / (w / BUCKETS) * (w / BUCKETS)),
                _ => None,
            };
            std::iter::once(aligned)
                .chain(sliding)
                .map(move |from| (from, from + w))
        })
    }

    /// The first interval that admitted more than its bound, with both.
    pub(crate) fn breach(&self) -> Option<(u64, u64, u64, u64)> {
        let mut intervals: Vec<(u64, u64)> = self
            .periods
            .iter()
            .flat_map(|p| {
                self.intervals(p)
                    .filter(move |&(from, to)| p.meets(from, to))
            })
            .collect();
        intervals.sort_unstable();
        intervals.dedup();
        intervals
            .into_iter()
            .map(|(from, to)| (from, to, self.in_interval(from, to)))
            .find_map(|(from, to, kept)| {
                let bound = self.bound(from, to);
                (kept > bound).then_some((from, to, kept, bound))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn lineage(periods: &[(u64, u64, u32, u64, Kind)], admitted: &[u64]) -> Lineage {
        Lineage {
            periods: periods
                .iter()
                .map(|&(start, end, n, window_ms, kind)| Period {
                    start: start * MS,
                    end: end * MS,
                    lim: Lim {
                        n,
                        window_ms,
                        kind,
                        paced: false,
                    },
                })
                .collect(),
            admitted: admitted.iter().map(|t| t * MS).collect(),
        }
    }

    /// The checker is not vacuous: a second N in a window, in any interval of the log's
    /// window, or in a 500 ms window inside a 2 s one, is a breach.
    #[test]
    fn the_checker_finds_a_second_n() {
        let fixed = [(0, 5000, 2, 1000, Kind::Fixed)];
        assert!(lineage(&fixed, &[100, 900, 1100, 1900]).breach().is_none());
        assert!(lineage(&fixed, &[100, 900, 950]).breach().is_some());
        let log = [(0, 5000, 2, 1000, Kind::Log)];
        assert!(lineage(&log, &[100, 1100, 2100]).breach().is_none());
        assert!(lineage(&log, &[800, 900, 1100]).breach().is_some());
        let changed = [
            (0, 600, 2, 500, Kind::Fixed),
            (600, 5000, 2, 2000, Kind::Fixed),
        ];
        assert!(lineage(&changed, &[100, 200, 1000]).breach().is_none());
        assert!(lineage(&changed, &[100, 200, 300]).breach().is_some());
    }
}
