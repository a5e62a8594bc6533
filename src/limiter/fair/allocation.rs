//! A window's allocation: which keys hold a reserved permit (their floor), and the
//! max-min fair shares of the rest by estimated demand. Pure functions over slices the
//! roll owns (no allocation: the caller passes its scratch).
//!
//! With `C` permits to reserve and the keys offered in the window before:
//!
//! * **Floors.** While those keys are at most `C`, each holds one. Beyond, they are
//!   ranked (by their place in the keys table) and, with `k = ⌈keys / C⌉`, the keys whose
//!   rank is `≡ window (mod k)` hold one: at most `⌈keys / k⌉ ≤ C` of them, and a key
//!   offered in `k` consecutive windows of a stable set of keys holds one in one of them.
//! * **Shares.** The rest is cut max-min fair by each key's estimated demand `d`, above
//!   the floors: every key gets `max(floor, min(d, L))` for the largest integer level
//!   `L` whose total fits, and what is left after that (less than the number of keys
//!   whose demand passes `L` and who hold `L`) goes one each to such keys, from a place
//!   that turns with the window.
//!
//! So no key gets more than another whose demand it does not meet, plus one.

/// Marks in `floors` the keys that hold a reserved permit this window, from `offered`
/// (each key's count in the window before; 0: not offered) with `capacity` permits to
/// reserve, in `window`. Returns how many are marked (at most `capacity`).
pub(super) fn mark_floors(offered: &[u64], capacity: u64, window: u64, floors: &mut [bool]) -> u64 {
    let active = offered.iter().filter(|&&n| n > 0).count() as u64;
    if active == 0 || capacity == 0 {
        floors.iter_mut().for_each(|f| *f = false);
        return 0;
    }
    let k = active.div_ceil(capacity);
    let turn = window % k;
    let mut rank = 0u64;
    let mut marked = 0u64;
    for (floor, &n) in floors.iter_mut().zip(offered) {
        *floor = n > 0 && rank % k == turn && marked < capacity;
        if n > 0 {
            rank += 1;
        }
        marked += u64::from(*floor);
    }
    marked
}

/// Fills `shares` with the max-min fair cut of `capacity` over `demands` above the
/// `floors` (see the module docs): each key gets `max(floor, min(demand, L))` for the
/// largest level `L` whose total fits, and what is left goes one each to keys whose
/// demand passes the level and who hold no more than it, from index `start` on
/// (wrapping). The floors must fit in `capacity`. Returns the total given.
pub(super) fn water_fill(
    demands: &[u64],
    floors: &[bool],
    capacity: u64,
    start: usize,
    shares: &mut [u64],
) -> u64 {
    let at = |level: u64| -> u64 {
        demands
            .iter()
            .zip(floors)
            .map(|(&d, &f)| d.min(level).max(u64::from(f)))
            .sum()
    };
    // The largest level in [0, max demand] whose total fits (0 always does).
    let (mut low, mut high) = (0u64, demands.iter().copied().max().unwrap_or(0));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if at(mid) <= capacity {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let level = low;
    let mut given = 0u64;
    for ((share, &d), &f) in shares.iter_mut().zip(demands).zip(floors) {
        *share = d.min(level).max(u64::from(f));
        given += *share;
    }
    let n = demands.len();
    for i in (0..n).map(|i| (i + start) % n) {
        if given >= capacity {
            break;
        }
        if demands[i] > level && shares[i] <= level {
            shares[i] += 1;
            given += 1;
        }
    }
    given
}

#[cfg(all(test, not(loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn fill(needs: &[u64], capacity: u64, start: usize) -> Vec<u64> {
        fill_above(needs, &vec![false; needs.len()], capacity, start)
    }

    fn fill_above(needs: &[u64], floors: &[bool], capacity: u64, start: usize) -> Vec<u64> {
        let mut shares = vec![0; needs.len()];
        let given = water_fill(needs, floors, capacity, start, &mut shares);
        assert_eq!(given, shares.iter().sum::<u64>());
        shares
    }

    #[test]
    fn water_fill_meets_small_needs_and_levels_the_rest() {
        assert_eq!(fill(&[1, 2, 100, 100], 50, 0), vec![1, 2, 24, 23]);
        assert_eq!(fill(&[1, 2, 100, 100], 50, 3), vec![1, 2, 23, 24]);
        assert_eq!(fill(&[1, 2, 3], 50, 0), vec![1, 2, 3]);
        assert_eq!(fill(&[5, 5, 5], 2, 1), vec![0, 1, 1]);
        assert_eq!(fill(&[], 9, 0), Vec::<u64>::new());
        // A floor counts in its key's share: the unit left goes to a key with none.
        assert_eq!(
            fill_above(&[3, 1, 2], &[true, false, false], 2, 0),
            vec![1, 1, 0]
        );
        assert_eq!(
            fill_above(&[9, 9, 2], &[true, true, true], 7, 0),
            vec![3, 2, 2]
        );
    }

    #[test]
    fn floors_rotate_when_keys_outnumber_the_permits() {
        let offered = [3, 0, 1, 1, 7];
        let mut floors = [false; 5];
        assert_eq!(mark_floors(&offered, 4, 0, &mut floors), 4);
        assert_eq!(floors, [true, false, true, true, true]);
        // 4 active keys, 2 permits: k = 2, ranks 0 and 2 in even windows.
        assert_eq!(mark_floors(&offered, 2, 6, &mut floors), 2);
        assert_eq!(floors, [true, false, false, true, false]);
        assert_eq!(mark_floors(&offered, 2, 7, &mut floors), 2);
        assert_eq!(floors, [false, false, true, false, true]);
        assert_eq!(mark_floors(&offered, 0, 7, &mut floors), 0);
    }

    proptest! {
        /// Max-min: nothing above the capacity, every need met when they all fit, and a
        /// key whose need is not met gets at least what any other gets, less one.
        #[test]
        fn water_fill_is_max_min_fair(
            keys in prop::collection::vec((0u64..50, any::<bool>()), 0..40),
            capacity in 0u64..500,
            start in 0usize..40,
        ) {
            // Floors only on keys with a demand, and no more than the capacity.
            let mut floored = 0;
            let floors: Vec<bool> = keys.iter().map(|&(d, f)| {
                let f = f && d > 0 && floored < capacity;
                floored += u64::from(f);
                f
            }).collect();
            let needs: Vec<u64> = keys.iter().map(|&(d, _)| d).collect();
            let shares = fill_above(&needs, &floors, capacity, start);
            let total: u64 = shares.iter().sum();
            prop_assert_eq!(total, capacity.min(needs.iter().sum()));
            for (i, (&s, &need)) in shares.iter().zip(&needs).enumerate() {
                prop_assert!(s <= need && s >= u64::from(floors[i]));
                if s < need {
                    for (j, &other) in shares.iter().enumerate() {
                        prop_assert!(other <= s + 1, "key {} gets {} while {} gets {}", j, other, i, s);
                    }
                }
            }
        }

        /// Every key offered in `k` consecutive windows holds a floor in one of them,
        /// and no window reserves more floors than its capacity.
        #[test]
        fn rotation_reaches_every_key_within_k_windows(
            offered in prop::collection::vec(0u64..3, 1..60),
            capacity in 1u64..20,
            first in 0u64..1000,
        ) {
            let active = offered.iter().filter(|&&n| n > 0).count() as u64;
            let k = active.div_ceil(capacity).max(1);
            let mut held = vec![false; offered.len()];
            let mut floors = vec![false; offered.len()];
            for window in first..first + k {
                let marked = mark_floors(&offered, capacity, window, &mut floors);
                prop_assert!(marked <= capacity);
                for (h, f) in held.iter_mut().zip(&floors) {
                    *h |= *f;
                }
            }
            for (i, (&h, &n)) in held.iter().zip(&offered).enumerate() {
                prop_assert_eq!(h, n > 0, "key {}", i);
            }
        }
    }
}
