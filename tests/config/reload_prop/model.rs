//! The files the property test reloads, and which limiter each of their rules holds:
//! rule identity as `RuleBasedSampler::reload` states it (by name, then by what a rule
//! matches; each previous limit taken over by one new rule at most; limits whose rule
//! went away kept aside), written over the model so the checks can follow a limiter
//! through renames, inserts, removals and restores.

use otel_rate_sampler::SamplingConfig;
use proptest::prelude::*;

/// One of the four algorithms, or an adaptive rule (its cap, a fixed window, is the
/// limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Fixed,
    Sliding,
    Log,
    Bucketed,
    Adaptive,
}

/// A rule's limit: `n` per window, the kind, paced or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lim {
    pub(crate) n: u32,
    pub(crate) window_ms: u64,
    pub(crate) kind: Kind,
    pub(crate) paced: bool,
}

impl Lim {
    pub(crate) fn window(self) -> u64 {
        self.window_ms * 1_000_000
    }

    /// The first full window of this limit after a reload at `reloaded`: the first
    /// aligned window that begins after it; for the sliding log, whose window is any
    /// interval, the first that begins once what the reload found counted (stamped at
    /// the latest then) has left its window.
    ///
    /// A paced bucketed window's is the second whole run (aligned window of `B = 10`
    /// sub-windows of `s = W/10`: the default, for the windows of at least 300 ms here)
    /// after the run in which what the reload found counted leaves the ring, at
    /// `(⌊reloaded/s⌋ + B)·s` (`AnyLimiter::counted_until` in `src/limiter/any.rs`).
    /// Until then that count (the limiter's own, or carried into it: up to `N`) can
    /// refuse every call under the hard cap (`≤ N` in any `B` consecutive
    /// sub-windows), so a saturated limiter may admit first only then, at any place of
    /// its run (a catch-up: the last `B` sub-windows hold nothing). The spread
    /// guarantee (`BucketedWindow`'s docs, `tests/core/pacing.rs`) gives every
    /// sub-window its share from the second whole run after that first admission's on,
    /// not in the first: that admission keeps the early sub-windows of the next run
    /// shut under the hard cap, and a run after one that kept `N` gives each sub-window
    /// its own share only. So `N = 2` per 500 ms (shares at places 0 and 5), reloaded at
    /// 2.6 s with 4 carried (2 held), admits first at 3.1 s (place 2) and 3.25 s, keeps
    /// only 3.75 s in [3.5 s, 4 s), and 2 in every window from 4 s on, exactly as a
    /// fresh limiter first called at 3.1 s does
    /// (`a_carried_count_delays_the_first_admission_and_nothing_else` in
    /// `src/limiter/bucketed_window.rs`). The second whole window after the reload
    /// itself, checked before, is one too early when something was counted at it.
    pub(crate) fn first_full_window(self, reloaded: u64) -> u64 {
        let w = self.window();
        match self.kind {
            Kind::Log => (reloaded + w).div_ceil(w) * w,
            Kind::Bucketed if self.paced => {
                const B: u64 = 10;
                let s = w / B;
                let counted_until = (reloaded / s + B) * s;
                (counted_until / w + 2) * w
            }
            _ => (reloaded / w + 1) * w,
        }
    }

    /// What a saturated rule keeps at least in a full window once reloads stopped:
    /// ⌈0.9 N⌉.
    pub(crate) fn unstarved(self) -> usize {
        (self.n * 9).div_ceil(10) as usize
    }

    fn policy(self) -> String {
        let window = format!("window = \"{}ms\"", self.window_ms);
        let algorithm = match self.kind {
            Kind::Adaptive => {
                return format!("adaptive = {{ limit = {}, {window} }}", self.n);
            }
            Kind::Fixed => "fixed",
            Kind::Sliding => "sliding",
            Kind::Log => "sliding-log",
            Kind::Bucketed => "bucketed",
        };
        format!(
            "limit = {}\n{window}\nalgorithm = \"{algorithm}\"\npaced = {}",
            self.n, self.paced
        )
    }
}

/// A rule matching the spans named `r`: named by the file, or by its position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RuleV {
    pub(crate) name: Option<&'static str>,
    pub(crate) lim: Lim,
}

/// One file: the rule under test (named `r`, renamed `r2`, unnamed, or removed), a rule
/// inserted above it that matches the same spans (named `ins` or not), the floor of the
/// rule under test in the service cap, and the cap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Version {
    pub(crate) inserted: Option<RuleV>,
    pub(crate) ours: Option<RuleV>,
    pub(crate) floor: u32,
    pub(crate) cap: u32,
}

/// What the inserted rule matches: the spans `r` too, written otherwise, so that it is
/// another rule by its conditions (a rule that matches the same spans with the same
/// conditions is the same rule, by the identity a reload applies, unless both are
/// named otherwise: its limiter would then go to whichever of the two comes first,
/// and which one that is depends on whether a limiter kept aside still held
/// admissions, which the model cannot know).
const INSERTED_SPANS: &str = "r*";

/// The service default's limit: 50 per second. It decides the spans `r` while no rule
/// matches them (its admissions are the default's, under its own limit and the cap).
const DEFAULT_LIMIT: u32 = 50;

impl Version {
    /// The rules in file order, each with the name a kept span records (an unnamed
    /// rule of the `[default]` section is `default-rule-N`) and whether it is the one
    /// inserted above.
    pub(crate) fn rules(self) -> Vec<(String, RuleV, bool)> {
        [(self.inserted, true), (self.ours, false)]
            .into_iter()
            .filter_map(|(r, inserted)| r.map(|r| (r, inserted)))
            .enumerate()
            .map(|(i, (r, inserted))| {
                let name = r
                    .name
                    .map_or_else(|| format!("default-rule-{}", i + 1), str::to_owned);
                (name, r, inserted)
            })
            .collect()
    }

    pub(crate) fn text(self) -> String {
        let mut text = format!(
            "[default]\nlimit = {DEFAULT_LIMIT}\ncap = {{ limit = {} }}\n",
            self.cap
        );
        for (_, r, inserted) in self.rules() {
            text.push_str("[[default.rule]]\n");
            if let Some(name) = r.name {
                text.push_str(&format!("name = \"{name}\"\n"));
            }
            let (span, floor) = if inserted {
                (INSERTED_SPANS, 0)
            } else {
                ("r", self.floor)
            };
            text.push_str(&format!(
                "span_name = \"{span}\"\n{}\nfloor = {floor}\n",
                r.lim.policy()
            ));
        }
        text
    }

    pub(crate) fn config(self) -> SamplingConfig {
        SamplingConfig::from_toml_str(&self.text(), "reload.toml").unwrap()
    }
}

/// The window lengths the property draws: multiples of 500 ms, so that the windows of
/// two limits often share edges.
const WINDOWS_MS: [u64; 4] = [500, 1000, 1500, 2000];

/// Beside those, windows cut elsewhere, whose edges rarely meet theirs.
const CUT_ELSEWHERE_MS: [u64; 3] = [300, 700, 1300];

fn lim_of(
    n: impl Strategy<Value = u32> + Clone,
    windows_ms: Vec<u64>,
) -> impl Strategy<Value = Lim> + Clone {
    (
        n,
        prop::sample::select(windows_ms),
        prop::sample::select(vec![
            Kind::Fixed,
            Kind::Sliding,
            Kind::Log,
            Kind::Bucketed,
            Kind::Adaptive,
        ]),
        any::<bool>(),
    )
        .prop_map(|(n, window_ms, kind, paced)| Lim {
            n,
            window_ms,
            kind,
            paced,
        })
}

fn lim() -> impl Strategy<Value = Lim> + Clone {
    lim_of(1u32..12, WINDOWS_MS.to_vec())
}

/// A limit of any of the windows, those cut elsewhere included, and up to 40 permits.
fn wide_lim() -> impl Strategy<Value = Lim> + Clone {
    lim_of(
        prop_oneof![1u32..12, 1u32..40],
        [WINDOWS_MS.as_slice(), CUT_ELSEWHERE_MS.as_slice()].concat(),
    )
}

fn version_of(lim: impl Strategy<Value = Lim> + Clone) -> impl Strategy<Value = Version> {
    let ours = prop::option::weighted(
        0.8,
        (
            prop::sample::select(vec![Some("r"), Some("r2"), None]),
            lim.clone(),
        )
            .prop_map(|(name, lim)| RuleV { name, lim }),
    );
    let inserted = prop::option::weighted(
        0.25,
        (prop::sample::select(vec![Some("ins"), None]), lim)
            .prop_map(|(name, lim)| RuleV { name, lim }),
    );
    (inserted, ours, 0u32..4, 4u32..16).prop_map(|(inserted, ours, floor, cap)| Version {
        inserted,
        ours,
        floor,
        cap,
    })
}

pub(crate) fn version() -> impl Strategy<Value = Version> {
    version_of(lim())
}

/// A file whose limits are drawn by [`wide_lim`].
pub(crate) fn wide_version() -> impl Strategy<Value = Version> {
    version_of(wide_lim())
}

/// A limit of the model: the name it was last held under (as the file gave it, and as
/// spans record it) and its lineage (the limiter, through its replacements).
#[derive(Clone, Debug)]
struct Held {
    named: Option<&'static str>,
    inserted: bool,
    name: String,
    lineage: usize,
}

/// Which lineage each rule holds, across reloads.
#[derive(Debug, Default)]
pub(crate) struct Lineages {
    current: Vec<Held>,
    /// Limits whose rule went away, the first of each name, in the order the sampler
    /// keeps them aside (it keeps a limiter while its window holds something, then
    /// what the lineage needs to go on: either way the rule brought back is the same
    /// lineage, for the last 256 rules forgotten, far more than a run has).
    retired: Vec<Held>,
    count: usize,
}

impl Lineages {
    /// The lineages `v`'s rules hold after it is loaded, in file order: a rule removed
    /// and brought back is the same lineage, as the reload's docs say.
    pub(crate) fn load(&mut self, v: Version) -> Vec<usize> {
        let rules = v.rules();
        let candidates: Vec<Held> = self.current.iter().chain(&self.retired).cloned().collect();
        let mut taken = vec![false; candidates.len()];
        let mut found: Vec<Option<usize>> = vec![None; rules.len()];
        // By name first, then by what they match.
        for by_name in [true, false] {
            for ((_, rule, inserted), found) in rules.iter().zip(found.iter_mut()) {
                if found.is_some() {
                    continue;
                }
                let same_name = |c: &Held| rule.name.is_some() && c.named == rule.name;
                *found = candidates
                    .iter()
                    .zip(taken.iter_mut())
                    .find(|(c, t)| {
                        let same = if by_name {
                            same_name(c)
                        } else {
                            !same_name(c) && c.inserted == *inserted
                        };
                        !**t && same
                    })
                    .map(|(c, t)| {
                        *t = true;
                        c.lineage
                    });
            }
        }
        let lineages: Vec<usize> = found
            .into_iter()
            .map(|f| {
                f.unwrap_or_else(|| {
                    self.count += 1;
                    self.count - 1
                })
            })
            .collect();
        // The sampler keeps aside the first of a name of those no rule took.
        let mut retired: Vec<Held> = Vec::new();
        for (c, taken) in candidates.into_iter().zip(taken) {
            if !taken && !retired.iter().any(|r| r.name == c.name) {
                retired.push(c);
            }
        }
        self.retired = retired;
        self.current = rules
            .iter()
            .zip(&lineages)
            .map(|((name, rule, inserted), &lineage)| Held {
                named: rule.name,
                inserted: *inserted,
                name: name.clone(),
                lineage,
            })
            .collect();
        lineages
    }
}
