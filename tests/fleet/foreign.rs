//! A key of one rule that another program wrote (`SET` over its meta or window hash):
//! Redis refuses that rule's calls with `WRONGTYPE`. Before, the whole lease script call
//! of the round failed, so every fleet rule of the process on that server failed with
//! it, and the broken rule held its replica's heartbeat back, so the others reserved
//! its share on every rule of its interval: under-use of all, for as long as the key
//! stayed. Now the broken rule alone fails, admits only what Redis granted it, and the
//! others lease as before.

use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetFailure, FleetLimiter, FleetStats};

use crate::load::{self, assert_capped, drive, heartbeat, PerWindow, INTERVAL, N, WINDOW};
use crate::logs;
use crate::pool::eventually;
use crate::server::Server;

const GOOD: [&str; 2] = ["fk-good1", "fk-good2"];
const BROKEN: &str = "fk-broken";
const REPLICAS: [&str; 2] = ["fk-r0", "fk-r1"];

/// Rule `key` on both replicas (each replica heartbeats all its rules together).
fn rule(server: &Server, key: &str) -> Vec<FleetLimiter> {
    REPLICAS
        .iter()
        .map(|replica| {
            FleetLimiter::builder(server.url(), key, load::limit())
                .sync_interval(INTERVAL)
                .response_timeout(INTERVAL)
                .instance_id(*replica)
                .build()
                .expect("build")
        })
        .collect()
}

/// The two good rules and the broken one on both replicas, and all their limiters,
/// past the first start's windows without grants and its recovery windows.
fn three_rules(server: &Server) -> ([Vec<FleetLimiter>; 3], Vec<FleetLimiter>) {
    let rules = [GOOD[0], GOOD[1], BROKEN].map(|key| rule(server, key));
    let all: Vec<FleetLimiter> = rules.iter().flatten().cloned().collect();
    load::warm_up(&all, 6);
    (rules, all)
}

/// The three rules' admissions per window, each offered twice N per window, while
/// `during` runs.
fn drive_three(
    rules: &[Vec<FleetLimiter>; 3],
    run: Duration,
    during: impl FnOnce(),
) -> [PerWindow; 3] {
    let demand = 2.0 * f64::from(N);
    let (mut second, mut third) = (None, None);
    let (first, ..) = drive(&rules[0], demand, run, || {
        second = Some(
            drive(&rules[1], demand, run, || {
                third = Some(drive(&rules[2], demand, run, during).0);
            })
            .0,
        );
    });
    [first, second.expect("driven"), third.expect("driven")]
}

/// Failures of the kinds a foreign key gave every rule (a timeout on a loaded machine
/// is not one of them).
fn answered_with_errors(stats: &FleetStats) -> u64 {
    stats.failures(FleetFailure::Redis) + stats.failures(FleetFailure::Foreign)
}

fn count(per_window: &PerWindow, w: u64) -> u64 {
    per_window.get(&w).copied().unwrap_or(0)
}

/// What the fleet did while the broken rule's key `{tag}:<suffix>` held a string for 8
/// windows (40 intervals, twice the age at which Redis forgets a silent replica), and
/// after it was removed.
struct Break {
    key: String,
    /// Admissions per window of the two good rules and the broken one.
    counted: [PerWindow; 3],
    /// The window in which it was surely written (read once `SET` returned: the
    /// grants held then are the last it may spend), the last window before its removal
    /// (read before `DEL`: the quiet windows end there at the latest) and the window in
    /// which it was surely removed (read once `DEL` returned: leasing again counts from
    /// there). On a loaded machine `redis-cli` may take a window or more.
    broke: u64,
    removed: u64,
    removed_by: u64,
    /// Every limiter's statistics when it was written and when it was removed.
    before: Vec<FleetStats>,
    after: Vec<FleetStats>,
    /// Each replica's heartbeat in Redis, once per window meanwhile.
    heartbeats: Vec<[String; 2]>,
    broken_for: Duration,
}

fn break_for_eight_windows(suffix: &str) -> Break {
    let server = Server::start();
    let (rules, all) = three_rules(&server);
    let key = format!("{{otel-rate:{BROKEN}}}:{suffix}");
    logs::capture();
    let stats = || -> Vec<FleetStats> { all.iter().map(FleetLimiter::stats).collect() };
    let mut seen = None;
    let mut heartbeats = Vec::new();
    let counted = drive_three(&rules, WINDOW * 17, || {
        thread::sleep(WINDOW * 3);
        let before = stats();
        server.cli(&["SET", &key, "written by another program"]);
        let set_at = Instant::now();
        let broke = rules[2][0].current_window().expect("synced");
        for _ in 0..8 {
            thread::sleep(WINDOW);
            heartbeats.push(REPLICAS.map(|r| heartbeat(&server, r)));
        }
        let removed = rules[2][0].current_window().expect("synced");
        let after = stats();
        server.cli(&["DEL", &key]);
        let removed_by = rules[2][0].current_window().expect("synced");
        seen = Some((broke, removed, removed_by, before, after, set_at.elapsed()));
        // The load goes on through the windows the checks read after the removal (up
        // to `removed_by + 4`), however long the above took.
        thread::sleep(WINDOW * 5);
    });
    let (broke, removed, removed_by, before, after, broken_for) = seen.expect("driven");
    Break {
        key,
        counted,
        broke,
        removed,
        removed_by,
        before,
        after,
        heartbeats,
        broken_for,
    }
}

impl Break {
    /// No window over N; the good rules without a failure, leasing all along and
    /// filling N (twice N offered; before, half of N or less: each replica reserved the
    /// other's share); each replica's heartbeat moving on (before, held back).
    fn assert_good_rules_unharmed(&self) {
        for (key, per_window) in [GOOD[0], GOOD[1], BROKEN].iter().zip(&self.counted) {
            assert_capped(per_window, key);
        }
        for (i, key) in GOOD.iter().enumerate() {
            let inner: Vec<u64> = (self.broke + 2..self.removed)
                .map(|w| count(&self.counted[i], w))
                .collect();
            println!("{key}: windows {inner:?} with the foreign key");
            let stats = (2 * i..2 * i + 2).map(|l| (&self.before[l], &self.after[l]));
            for (b, a) in stats {
                let errors = answered_with_errors;
                assert_eq!(errors(a), errors(b), "{key}: {a:?}");
                assert!(a.leases > b.leases && !a.fallback_active, "{key}: {a:?}");
            }
            let mean = inner.iter().sum::<u64>() / inner.len() as u64;
            assert!(mean * 10 >= u64::from(N) * 8, "{key} under-used: {inner:?}");
        }
        let heartbeats = &self.heartbeats;
        let moving = |r: usize| heartbeats.windows(2).all(|p| p[0][r] != p[1][r]);
        assert!(
            moving(0) && moving(1),
            "heartbeats held back: {heartbeats:?}"
        );
    }

    /// The broken rule: its failures counted as foreign, no fallback share, nothing
    /// admitted after the grants it held (its window's and a prefetch of the next)
    /// through window `quiet_until`; the message names the key, at most once per
    /// interval per limiter (two here; a call in flight at the removal may add one).
    fn assert_broken_rule_spent_its_grants_only(&self, quiet_until: u64) {
        for (b, a) in self.before[4..].iter().zip(&self.after[4..]) {
            let foreign = |s: &FleetStats| s.failures(FleetFailure::Foreign);
            assert!(foreign(a) > foreign(b), "{a:?}");
            assert_eq!(a.last_failure, Some(FleetFailure::Foreign), "{a:?}");
            assert_eq!(a.permits_fallback, b.permits_fallback, "{a:?}");
            assert!(!a.fallback_active, "{a:?}");
        }
        let quiet: Vec<u64> = (self.broke + 2..=quiet_until)
            .map(|w| count(&self.counted[2], w))
            .collect();
        assert!(
            quiet.iter().all(|&n| n == 0),
            "admitted without grants: {quiet:?}"
        );
        let messages = logs::containing(&format!("{} holds a string", self.key));
        let bound = 2 * (self.broken_for.as_nanos() / INTERVAL.as_nanos() + 2);
        assert!(!messages.is_empty(), "no message names the foreign key");
        let (n, first) = (messages.len(), &messages[0]);
        println!("{n} messages in {:?}, the first:{first}", self.broken_for);
        assert!(n as u128 <= bound, "{n} messages: {messages:?}");
        assert!(first.contains("another program"), "{messages:?}");
    }

    /// The first window from `from` to `to` in which the broken rule admitted again.
    fn leasing_again(&self, from: u64, to: u64) -> Option<u64> {
        let broken = &self.counted[2];
        let tail: Vec<u64> = (self.removed..self.removed + 6)
            .map(|w| count(broken, w))
            .collect();
        println!("{}: {tail:?} from the window it was removed in", self.key);
        (from..=to).find(|&w| count(broken, w) > 0)
    }
}

/// The broken rule's meta overwritten with a string, then removed: a new meta to Redis,
/// which grants nothing for the window of its first call and the next.
#[test]
fn a_foreign_meta_key_fails_its_rule_alone_and_it_leases_again_once_removed() {
    let b = break_for_eight_windows("meta");
    b.assert_good_rules_unharmed();
    b.assert_broken_rule_spent_its_grants_only(b.removed + 1);
    // The first call after the removal comes within an interval (in window `removed_by`
    // or the next), Redis grants from two windows later: by `removed_by + 3`; one window
    // more for a loaded machine.
    let again = b.leasing_again(b.removed + 2, b.removed_by + 4);
    assert!(again.is_some(), "not leasing again after the removal");
}

/// The broken rule's members overwritten with a string, then removed: its window
/// hashes kept their accounting, so it leases again at its next call, joining anew.
#[test]
fn a_foreign_members_key_fails_its_rule_alone_and_it_leases_again_once_removed() {
    let b = break_for_eight_windows("joined");
    b.assert_good_rules_unharmed();
    b.assert_broken_rule_spent_its_grants_only(b.removed - 1);
    // The first call after the removal comes within an interval: in window `removed_by`
    // or the next; one window more for a loaded machine.
    let again = b.leasing_again(b.removed, b.removed_by + 2);
    assert!(again.is_some(), "not leasing again after the removal");
}

/// The broken rule's window hash overwritten with a string in the middle of its window,
/// then removed within that window: the grants of the window were lost with it, so
/// Redis must not grant that window again (the script marks the rule as restarted);
/// the later windows' hashes are new, and the rule leases again by itself.
#[test]
fn a_foreign_window_hash_loses_no_grant_of_its_window() {
    let server = Server::start();
    let (rules, _) = three_rules(&server);
    let mut broke = 0;
    let mut foreign_seen = false;
    let good: Vec<&FleetLimiter> = rules[..2].iter().flatten().collect();
    let errors = || -> u64 { good.iter().map(|l| answered_with_errors(&l.stats())).sum() };
    let mut good_errors = (0, 0);
    let counted = drive_three(&rules, WINDOW * 12, || {
        thread::sleep(WINDOW * 3);
        let seen = || -> u64 {
            rules[2]
                .iter()
                .map(|l| l.stats().failures(FleetFailure::Foreign))
                .sum()
        };
        good_errors.0 = errors();
        // The current window's hash, written early in the window so that it is removed
        // within it. If the window ends before a call meets it (the test thread late on
        // a loaded machine: no call touches a past window's hash), it is removed and
        // the next window's tried.
        for attempt in 0.. {
            assert!(attempt < 10, "no call met the foreign hash in 10 windows");
            let start = rules[2][0].current_window().expect("synced");
            eventually("a new window", || {
                rules[2][0].current_window() != Some(start)
            });
            broke = start + 1;
            let hash = format!("{{otel-rate:{BROKEN}}}:w:{broke}");
            let before = seen();
            server.cli(&["SET", &hash, "written by another program"]);
            let refused_or_passed =
                || seen() > before || rules[2][0].current_window().is_some_and(|w| w > broke);
            eventually("a call refused, or the window passed", refused_or_passed);
            let refused = seen() > before;
            foreign_seen = rules[2][0].current_window() == Some(broke);
            server.cli(&["DEL", &hash]);
            if refused {
                break;
            }
        }
        // A round in flight may still have met the foreign hash.
        thread::sleep(INTERVAL * 2);
        good_errors.1 = errors();
        // The load goes on through the windows read below (up to `broke + 5`).
        thread::sleep(WINDOW * 6);
    });
    // The good rules' calls were answered all along, in the same script calls.
    assert_eq!(
        good_errors.0, good_errors.1,
        "the good rules failed with it"
    );
    // Marked as restarted: no grant for the window whose accounting was lost.
    let meta = format!("{{otel-rate:{BROKEN}}}:meta");
    let since: u64 = server
        .cli(&["HGET", &meta, "since"])
        .trim()
        .parse()
        .expect("since");
    assert!(
        since >= broke,
        "since {since}, the foreign hash's window {broke}"
    );
    for (key, per_window) in [GOOD[0], GOOD[1], BROKEN].iter().zip(&counted) {
        assert_capped(per_window, key);
    }
    let broken = &counted[2];
    let around: Vec<u64> = (broke - 1..broke + 6).map(|w| count(broken, w)).collect();
    println!("{BROKEN}: windows {around:?} from the one before the foreign hash (removed in it: {foreign_seen})");
    let again = (broke + 2..broke + 6).find(|&w| count(broken, w) > 0);
    assert!(again.is_some(), "not leasing again: {around:?}");
    for (i, key) in GOOD.iter().enumerate() {
        for l in &rules[i] {
            let s = l.stats();
            assert!(s.leases > 0 && !s.fallback_active, "{key}: {s:?}");
        }
    }
}

/// A rule started on a meta key another program wrote: its clock calls (the clock
/// script, a command of their own) fail as foreign too; it admits nothing, and neither
/// stops its replica's heartbeat (a rule never answered stopped it) nor the other rules.
#[test]
fn a_rule_started_on_a_foreign_meta_fails_its_clock_calls_alone() {
    let server = Server::start();
    server.cli(&[
        "SET",
        "{otel-rate:fk-born}:meta",
        "written by another program",
    ]);
    let good = rule(&server, GOOD[0]);
    let born = rule(&server, "fk-born");
    load::warm_up(&good, 2);
    eventually("clock calls refused as foreign", || {
        born.iter()
            .all(|l| l.stats().failures(FleetFailure::Foreign) > 0)
    });
    for l in &born {
        let s = l.stats();
        assert!(!s.clock_synced && l.acquire_window().is_none(), "{s:?}");
        assert_eq!(s.last_failure, Some(FleetFailure::Foreign), "{s:?}");
    }
    let before = REPLICAS.map(|r| heartbeat(&server, r));
    thread::sleep(INTERVAL * 4);
    let after = REPLICAS.map(|r| heartbeat(&server, r));
    for (b, a) in before.iter().zip(&after) {
        assert!(!a.trim().is_empty() && a != b, "heartbeat {b:?} then {a:?}");
    }
    for l in &good {
        let s = l.stats();
        assert_eq!(answered_with_errors(&s), 0, "{s:?}");
        assert!(s.leases > 0, "{s:?}");
    }
}
