//! What a reload carries from a replaced limiter into its replacement: admissions,
//! each group dated by the latest time it can have been admitted at (never before it,
//! never after the reload), so that the replacement counts each one until it leaves
//! the replacement's window, and no longer.
//!
//! A carried admission dated earlier than it was made would leave the replacement's
//! window too soon and let its permit be given out again inside a window that still
//! holds it; dated at the reload (as before), it stays up to a whole window after it
//! has left, and a limit changed late in a window keeps nothing meanwhile. So each
//! limiter dates what it holds as closely as it knows: the sliding log by its slots'
//! stamps, the bucketed window by the end of each sub-window, the fixed window and the
//! sliding counter (which count per aligned window) at the reading of the clock.

/// At most this many dated groups are kept: past it, neighbours merge into the later
/// date (so a date only moves later, which counts an admission longer, never shorter).
const MAX_GROUPS: usize = 64;

/// Admissions carried across a reload, as (date, count) groups in ascending date order
/// (clock nanoseconds; each date at or after every admission of its group).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Carry {
    groups: Vec<(u64, u64)>,
    /// A sliding log's own carry: the admissions it had numbered when it was read (the
    /// ones numbered from there on were made after, exactly). `None` otherwise.
    pub(crate) claimed: Option<u64>,
}

impl Carry {
    /// `count` admissions dated `at` (none when `count` is 0).
    pub(crate) fn at(at: u64, count: u64) -> Self {
        let mut carry = Carry::default();
        carry.push(at, count);
        carry
    }

    /// Adds `count` admissions dated `at`, in date order.
    pub(crate) fn push(&mut self, at: u64, count: u64) {
        if count == 0 {
            return;
        }
        let i = self.groups.partition_point(|&(d, _)| d < at);
        match self.groups.get_mut(i) {
            Some((d, c)) if *d == at => *c = c.saturating_add(count),
            _ => self.groups.insert(i, (at, count)),
        }
        if self.groups.len() > MAX_GROUPS {
            self.merge();
        }
    }

    /// Adds every group of `other`.
    pub(crate) fn extend(&mut self, other: &Carry) {
        for &(at, count) in &other.groups {
            self.push(at, count);
        }
    }

    /// Moves each date to `later(date)`, which is never earlier and keeps the order
    /// (a non-decreasing function at or after its argument).
    pub(crate) fn raise(&mut self, later: impl Fn(u64) -> u64) {
        let groups = std::mem::take(&mut self.groups);
        for (at, count) in groups {
            let to = later(at);
            debug_assert!(to >= at);
            match self.groups.last_mut() {
                Some((last, c)) if *last == to => *c = c.saturating_add(count),
                _ => self.groups.push((to, count)),
            }
        }
    }

    /// Halves the groups: each pair becomes one group at the later date.
    fn merge(&mut self) {
        let merged = self
            .groups
            .chunks(2)
            .map(|pair| (pair[pair.len() - 1].0, pair.iter().map(|g| g.1).sum()))
            .collect();
        self.groups = merged;
    }

    /// The admissions dated at or after `from`.
    pub(crate) fn count_from(&self, from: u64) -> u64 {
        let i = self.groups.partition_point(|&(d, _)| d < from);
        self.groups[i..].iter().map(|g| g.1).sum()
    }

    /// Forgets the admissions dated before `from` (they have left the window).
    pub(crate) fn retain_from(&mut self, from: u64) {
        let i = self.groups.partition_point(|&(d, _)| d < from);
        self.groups.drain(..i);
    }

    /// Splits off the newest `count` admissions (fewer if it holds fewer), leaving the
    /// older ones in `self`.
    pub(crate) fn split_newest(&mut self, mut count: u64) -> Carry {
        let mut newest = Vec::new();
        while count > 0 {
            let Some(last) = self.groups.last_mut() else {
                break;
            };
            let take = last.1.min(count);
            newest.push((last.0, take));
            last.1 -= take;
            count -= take;
            if last.1 == 0 {
                self.groups.pop();
            }
        }
        newest.reverse();
        Carry {
            groups: newest,
            claimed: None,
        }
    }

    /// Every admission's date, oldest first.
    pub(crate) fn dates(&self) -> impl Iterator<Item = u64> + '_ {
        self.groups
            .iter()
            .flat_map(|&(at, count)| std::iter::repeat_n(at, count as usize))
    }

    /// The groups, oldest first.
    pub(crate) fn groups(&self) -> &[(u64, u64)] {
        &self.groups
    }

    /// All admissions it holds.
    pub(crate) fn total(&self) -> u64 {
        self.groups.iter().map(|g| g.1).sum()
    }
}

/// Dates, in the order a limiter made them, as a carry: each date raised to the latest
/// before it (a date only moves later), so the order is kept without sorting.
pub(crate) fn in_order(dates: impl Iterator<Item = u64>) -> Carry {
    let mut carry = Carry::default();
    let mut latest = 0;
    for date in dates {
        latest = latest.max(date);
        carry.push(latest, 1);
    }
    carry
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn groups_stay_in_date_order_and_merge_only_to_later_dates() {
        let mut c = Carry::default();
        for (at, n) in [(5, 1), (1, 2), (5, 3), (3, 0), (2, 1)] {
            c.push(at, n);
        }
        assert_eq!(c.groups(), &[(1, 2), (2, 1), (5, 4)]);
        assert_eq!((c.total(), c.count_from(2), c.count_from(6)), (7, 5, 0));
        let newest = c.split_newest(5);
        assert_eq!(
            (newest.groups(), c.groups()),
            (&[(2, 1), (5, 4)][..], &[(1, 2)][..])
        );
        let mut many = Carry::default();
        (0..1000).for_each(|t| many.push(t, 1));
        assert!(many.groups().len() <= MAX_GROUPS);
        assert_eq!(many.total(), 1000);
        // Every admission is dated at or after its own time: at least as many from
        // any date on as there were.
        assert!((0..1000).all(|t| many.count_from(t) >= 1000 - t));
        let ordered = in_order([3, 1, 4, 1, 5].into_iter());
        assert_eq!(ordered.groups(), &[(3, 2), (4, 2), (5, 1)]);
    }
}
