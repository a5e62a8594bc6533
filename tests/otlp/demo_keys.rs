//! The demo's routes (`--keys`, `--skew`) and fair shares (`--fair-by`): the summary's
//! `per_key` and `keys_starved`, with a plain cap and with `fair_by`.

use std::time::Duration;

use crate::demo_run::{self, stderr, summary};

/// Five 200 ms windows of 20, 6 routes at Zipf 1.2.
const RUN: [&str; 12] = [
    "--duration",
    "1s",
    "--window",
    "200ms",
    "--limit",
    "20",
    "--threads",
    "2",
    "--keys",
    "6",
    "--skew",
    "1.2",
];
/// Only a hang gets near it.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Checks what holds for any sampler, returns `(route, kept, adjusted)` per route.
fn per_key(summary: &serde_json::Value) -> Vec<(String, u64, f64)> {
    let per_key = summary["per_key"].as_object().expect("per_key with --keys");
    assert_eq!(per_key.len(), 6, "{summary}");
    let (mut offered, mut kept) = (0, 0);
    let routes = per_key
        .iter()
        .map(|(route, counts)| {
            let (o, k) = (counts["offered"].as_u64(), counts["kept"].as_u64());
            let adjusted = counts["adjusted"].as_f64().expect("adjusted is a number");
            offered += o.expect("offered");
            kept += k.expect("kept");
            (route.clone(), k.unwrap_or(0), adjusted)
        })
        .collect::<Vec<_>>();
    assert_eq!(Some(offered), summary["offered"].as_u64(), "{summary}");
    assert_eq!(Some(kept), summary["sampled"].as_u64(), "{summary}");
    assert!(summary["max_per_window"].as_u64() <= Some(20), "{summary}");
    // At most every route in every whole window.
    let whole = summary["whole_windows"].as_u64().expect("whole_windows");
    let starved = summary["keys_starved"].as_u64().expect("keys_starved");
    assert!(starved <= 6 * whole, "{summary}");
    let mut names: Vec<&str> = routes.iter().map(|(r, ..)| r.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["/route/0", "/route/1", "/route/2", "/route/3", "/route/4", "/route/5"]
    );
    routes
}

#[test]
fn a_plain_cap_reports_its_routes_and_weighs_each_kept_root_one() {
    let output = demo_run::run_demo(&RUN, &[], HANG_GUARD);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    for (route, kept, adjusted) in per_key(&summary) {
        assert_eq!(adjusted, kept as f64, "{route}: {summary}");
    }
}

/// Kept roots weighed by their route's probability: at most 1, so a route's weight is
/// at least its kept roots; the busiest route offers far more than its share, so it
/// weighs more.
fn assert_weighted_by_probability(summary: &serde_json::Value) {
    let routes = per_key(summary);
    for (route, kept, adjusted) in &routes {
        assert!(*adjusted >= *kept as f64, "{route}: {summary}");
    }
    let busiest = routes
        .iter()
        .find(|(r, ..)| r == "/route/0")
        .expect("route 0");
    assert!(busiest.2 > busiest.1 as f64, "{summary}");
}

#[test]
fn fair_by_weighs_kept_roots_by_their_routes_probability() {
    let mut args = RUN.to_vec();
    args.extend(["--fair-by", "http.route"]);
    let output = demo_run::run_demo(&args, &[], HANG_GUARD);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_weighted_by_probability(&summary(&output));
    assert!(
        stderr(&output).contains("fair shares by [\"http.route\"]"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn keys_needs_the_sdk_path_and_skew_needs_keys() {
    let output = demo_run::run_demo(
        &["--keys", "3", "--via", "tracing", "--plain-layer"],
        &[],
        HANG_GUARD,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--keys"), "{}", stderr(&output));
    let output = demo_run::run_demo(&["--skew", "1.2"], &[], HANG_GUARD);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

/// The same run with `--config`: a rule file's `[default]` with `fair_by`, the path the
/// issue's accuracy figures take. Its kept roots carry their route's probability.
#[test]
fn a_rule_files_fair_by_weighs_kept_roots_by_their_routes_probability() {
    let path = std::env::temp_dir().join(format!(
        "otel-rate-sampler-demo-keys-{}.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        "[default]\nlimit = 20\nwindow = \"200ms\"\nfair_by = [\"http.route\"]\n",
    )
    .unwrap();
    let file = path.display().to_string();
    let args: Vec<&str> = RUN
        .iter()
        .copied()
        .filter(|a| !["--window", "200ms", "--limit", "20"].contains(a))
        .chain(["--config", &file])
        .collect();
    let output = demo_run::run_demo(&args, &[], HANG_GUARD);
    let _ = std::fs::remove_file(&path);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_weighted_by_probability(&summary(&output));
}
