//! Pure arithmetic of the lease: fallback shares and chunk sizes.

/// Instance `rank`'s share of `permits` in fleet window `window` when the fleet has
/// `instances` members: `⌊N/k⌋`, plus one for `N mod k` of the ranks, rotating with the
/// window so that each instance gets `N/k` on average (a fractional share is carried
/// across windows) while the shares of one window add up to exactly `N`.
pub(crate) fn share(permits: u64, instances: u64, rank: u64, window: u64) -> u64 {
    let k = instances.max(1);
    let base = permits / k;
    let extra = permits % k;
    let slot = (window % k + rank % k) % k;
    base + u64::from(slot < extra)
}

/// The permits to ask for in one lease call: a quarter of what this instance spent in
/// the previous window, or half of what it has spent so far in this one (so demand that
/// ramps up within a window doubles the chunk at each call), at least 1, at most `N`.
///
/// The worker asks again when the lease falls to half a chunk (the low-water mark), so
/// one instance holds at most `1.5 × chunk` unspent: an idle instance (chunk 1) hoards
/// at most 1 permit, and the fleet leaves at most `Σ 1.5 × chunkᵢ` of `N` unused in a
/// window where demand fell.
pub(crate) fn chunk(permits: u64, spent_previous: u64, spent_now: u64) -> u64 {
    (spent_previous / 4)
        .max(spent_now / 2)
        .clamp(1, permits.max(1))
}

/// The low-water mark of a chunk: ask for more when the lease holds this or less.
pub(crate) fn low_water(chunk: u64) -> u64 {
    chunk / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_one_window_add_up_to_n_and_average_n_over_k() {
        for permits in [1u64, 2, 7, 10, 100, 1001] {
            for k in 1u64..10 {
                let mut per_rank = vec![0u64; k as usize];
                for window in 1000..1000 + 10 * k {
                    let total: u64 = (0..k).map(|r| share(permits, k, r, window)).sum();
                    assert_eq!(total, permits, "N={permits} k={k} w={window}");
                    for r in 0..k {
                        per_rank[r as usize] += share(permits, k, r, window);
                    }
                }
                for got in per_rank {
                    assert_eq!(got, permits * 10, "N={permits} k={k}: 10 windows of N/k");
                }
            }
        }
        assert_eq!(share(5, 0, 3, 9), 5);
    }

    #[test]
    fn chunk_follows_demand_within_bounds() {
        assert_eq!(chunk(100, 0, 0), 1);
        assert_eq!(chunk(100, 80, 0), 20);
        assert_eq!(chunk(100, 0, 30), 15);
        assert_eq!(chunk(100, 10_000, 0), 100);
        assert_eq!(low_water(1), 0);
    }
}
