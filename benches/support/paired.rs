//! Paired timing, for a machine other processes share: two cases timed in alternation,
//! round by round (A B, then B A), so that a spell of load falls on both alike, and
//! their ratio read per round. Criterion times one case after the other, so load that
//! comes or goes between two cases moves their ratio.

use std::time::Duration;

/// Medians of a paired run: ns per call of each case and the per-round ratio `b / a`.
pub(crate) struct Paired {
    pub(crate) a: f64,
    pub(crate) b: f64,
    pub(crate) ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `rounds` rounds of `a` and `b`, each returning the time of `calls` calls.
pub(crate) fn paired(
    rounds: usize,
    calls: u64,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> Paired {
    let per_call = |d: Duration| d.as_nanos() as f64 / calls as f64;
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        let (x, y) = if round % 2 == 0 {
            let x = a();
            (x, b())
        } else {
            let y = b();
            (a(), y)
        };
        ta.push(per_call(x));
        tb.push(per_call(y));
    }
    let ratio = median(ta.iter().zip(&tb).map(|(x, y)| y / x).collect());
    Paired {
        a: median(ta),
        b: median(tb),
        ratio,
    }
}
