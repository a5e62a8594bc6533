//! `fair_by` at the command line: `check` shows a limit's key, and `simulate --keys K
//! --skew S` prints what each route keeps beside a plain cap of the same limit.

use super::{check_prints, code, run, stderr, stdout, TempFile};

const FAIR: &str = r#"
[default]
limit = 20
window = "1s"
fair_by = ["http.route"]
max_keys = 100
[[service]]
name = "shop"
rate = 5.0
cap = { rate = 50.0, fair_by = ["span_name", "http.route"] }
"#;

#[test]
fn check_shows_each_fair_limits_key_and_max_keys() {
    let file = TempFile::new("fair-check.toml", FAIR);
    check_prints(
        &["check", file.path()],
        0,
        &[
            "cap: 50 per 1s (50/s, fixed), fair by key [span_name, http.route] (max 500 keys)",
            "otherwise: keep 20 per 1s (20/s, fixed), fair by key [http.route] (max 100 keys)",
        ],
    );
}

/// Each route's row of a `--keys` run: (offered, kept, adjusted, kept by the plain cap).
fn routes(text: &str) -> Vec<(u64, u64, f64, u64)> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("/route/"))
        .map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
                c[3].parse().unwrap(),
                c[4].parse().unwrap(),
            )
        })
        .collect()
}

fn starved(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.starts_with("starved"))
        .unwrap_or_else(|| panic!("no starved line in\n{text}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[test]
fn simulate_keys_prints_kept_per_route_beside_a_plain_cap() {
    let file = TempFile::new("fair-simulate.toml", FAIR);
    let args = [
        "simulate",
        file.path(),
        "--service",
        "other",
        "--rate",
        "2000",
        "--duration",
        "6s",
        "--keys",
        "10",
        "--skew",
        "1.2",
    ];
    let out = run(&args);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    let rows = routes(&text);
    assert_eq!(rows.len(), 10, "{text}");
    let offered: u64 = rows.iter().map(|r| r.0).sum();
    assert_eq!(offered, 12_000, "{text}");
    // Both keep at most 20 in each of the 6 windows.
    let (kept, plain): (u64, u64) = (
        rows.iter().map(|r| r.1).sum(),
        rows.iter().map(|r| r.3).sum(),
    );
    assert!(kept <= 120 && plain <= 120, "{text}");
    // Fair shares: no route offered in two windows in a row goes without; the plain
    // cap, a uniform draw of 20 in 2000, leaves the rare routes out of some windows.
    let (fair_starved, plain_starved) = starved(&text);
    assert_eq!(fair_starved, 0, "{text}");
    assert!(plain_starved > 0, "{text}");
    // Each route keeps at least one per window after the first; the plain cap's
    // kept roots weigh one each, the fair ones at least one.
    for (offered, kept, adjusted, _) in &rows {
        assert!(*kept >= 5, "{text}");
        assert!(*adjusted >= *kept as f64 && *offered >= *kept, "{text}");
    }
    // The same run twice prints the same thing (seeded draws, a manual clock).
    assert_eq!(stdout(&run(&args)), text);
}

#[test]
fn keys_arguments_are_checked() {
    let file = TempFile::new("fair-args.toml", FAIR);
    let base = [
        "simulate",
        file.path(),
        "--service",
        "x",
        "--rate",
        "10",
        "--duration",
        "1s",
    ];
    for extra in [
        &["--skew", "1.2"][..],
        &["--keys", "0"],
        &["--keys", "10001"],
        &["--keys", "5", "--skew", "-1"],
        &["--keys", "5", "--skew", "inf"],
        &["--keys", "5", "--replicas", "2"],
    ] {
        let out = run(&[&base[..], extra].concat());
        assert_eq!(code(&out), 2, "{extra:?}: {}", stderr(&out));
    }
}
