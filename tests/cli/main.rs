//! The `otel-rate-sampler` binary, run as a user runs it: `check` on the example files,
//! on a broken file and on files that trip each lint; `simulate` with kept counts known
//! in advance; and hostile arguments, each a one-line error with exit code 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod composite;
mod fair;

const BIN: &str = env!("CARGO_BIN_EXE_otel-rate-sampler");

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A file in the temp directory, unique to this process and test, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "otel-rate-sampler-cli-{}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, text).expect("the temp dir is writable");
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .expect("the binary exits, it is not killed")
}

/// Runs the command, checks its exit code, and that its output holds each of `wants`;
/// returns the output.
fn check_prints(args: &[&str], exit: i32, wants: &[&str]) -> String {
    let out = run(args);
    let text = stdout(&out);
    assert_eq!(code(&out), exit, "{text}{}", stderr(&out));
    for want in wants {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    text
}

/// The table rows of a `simulate` run: (offered, admitted by the rule, refused by the
/// cap, kept), one per row of seconds.
fn rows(out: &Output) -> Vec<[u64; 4]> {
    stdout(out)
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells.len(), 6, "{l}");
            [1, 2, 3, 4].map(|i| cells[i].parse().unwrap())
        })
        .collect()
}

#[test]
fn check_prints_the_effective_rules_of_the_toml_example() {
    check_prints(
        &["check", &example("sampling.toml")],
        0,
        &[
            "sampling.toml: ok",
            "service \"checkout\"",
            "1. rule \"payments\": name ~ \"POST /api/pay*\"",
            "otherwise: keep 20 per 1s",
            "service \"(any other service)\" (not listed: the file default)",
            "memory: 6 limiters",
            "largest: rule \"payments\" (sliding-log, 50 per 1s)",
            // The example reserves 1/s for a rule of 0.5/s: a warning, not an error.
            "warning: service \"checkout\": rule \"admin-users\": floor 1 per cap window",
            "0 error(s), 1 warning(s)",
        ],
    );
}

#[test]
fn check_reads_jaeger_strategies_and_splits_limits_across_replicas() {
    check_prints(
        &["check", &example("strategies.json"), "--replicas", "3"],
        0,
        &[
            "service \"foo\"",
            "2. rule \"op2\": name ~ \"op2\" => keep 1 per 2s",
            "default: 5 per 1s -> 2 per 1.2s each (1.667/s), 5/s together",
            "lints: none",
        ],
    );
    let one = run(&["check", &example("sampling.toml"), "--service", "search"]);
    assert_eq!(code(&one), 0);
    assert!(!stdout(&one).contains("checkout"), "{}", stdout(&one));
}

#[test]
fn a_file_that_does_not_load_exits_1_with_file_line_column_key_message() {
    let file = TempFile::new("broken.toml", "[default]\nrate = -1\n");
    for command in ["check", "simulate"] {
        let mut args = vec![command, file.path()];
        if command == "simulate" {
            args.extend(["--service", "s", "--rate", "1", "--duration", "1s"]);
        }
        let out = run(&args);
        assert_eq!(code(&out), 1, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("{}:2:8: default.rate: ", file.path())),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let missing = run(&["check", "/nonexistent/sampling.toml"]);
    assert_eq!(code(&missing), 1);
    assert!(stderr(&missing).starts_with("/nonexistent/sampling.toml: "));
}

#[test]
fn rules_that_never_decide_are_errors() {
    let file = TempFile::new(
        "dead.toml",
        r#"
[default]
rate = 1.0
paced = false
[[service]]
name = "s"
[[service.rule]]
name = "api"
span_name = "GET /api/*"
rate = 5.0
paced = false
[[service.rule]]
name = "orders"
span_name = "GET /api/orders"
rate = 1.0
paced = false
"#,
    );
    check_prints(&["check", file.path()], 1, &[
        "error: service \"s\": rule \"orders\": rule 2 never decides: rule 1 \"api\" before it matches every span this rule matches",
        "1 error(s), 0 warning(s)",
    ]);
    // A rule with no condition before another does not even load: the sampler would
    // never reach the later rule.
    let all = TempFile::new(
        "all.toml",
        "[[service]]\nname = \"s\"\n[[service.rule]]\nname = \"all\"\nrate = 2.0\n[[service.rule]]\nname = \"late\"\nkind = \"client\"\nrate = 3.0\n",
    );
    let out = run(&["check", all.path()]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(
        err.contains(":3:1: service[0].rule[0]: rule \"all\" has no condition")
            && err.contains("rule \"late\" after it never decides"),
        "{err}"
    );
    // Checking one service lints only that one.
    let other = run(&["check", file.path(), "--service", "other"]);
    assert_eq!(code(&other), 0, "{}", stdout(&other));
}

#[test]
fn floors_over_limits_and_big_sliding_logs_warn_and_unsplittable_limits_fail() {
    let file = TempFile::new(
        "warn.toml",
        r#"
[default]
limit = 2000000
paced = false
window = "1s"
algorithm = "sliding-log"
[[service]]
name = "s"
rate = 1.0
paced = false
cap = { limit = 100, window = "1s" }
[[service.rule]]
name = "greedy"
span_name = "a"
limit = 5
paced = false
window = "1s"
floor = 10
"#,
    );
    check_prints(&["check", file.path()], 0, &[
        "warning: service \"s\": rule \"greedy\": floor 10 per cap window (10/s) is more than the rule's own limit of 5 per 1s (5/s)",
        "warning: [default]: its limiters take 30 MiB (over 16 MiB)",
        "0 error(s), 2 warning(s)",
    ]);
    let rare = TempFile::new("rare.toml", "[default]\nlimit = 1\nwindow = \"4000000h\"\n");
    let out = run(&["check", rare.path(), "--replicas", "3"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stdout(&out).contains(
            "error: [default]: rule \"default\": 1 per 14400000000s split across 3 replicas: rate"
        ),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_limit_rule_keeps_exactly_its_limit_each_second() {
    // search's "GET /search" rule: 5 per second, offered 50 per second.
    let out = run(&[
        "simulate",
        &example("sampling.toml"),
        "--service",
        "search",
        "--span",
        "GET /search",
        "--rate",
        "50",
        "--duration",
        "5s",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("decided by: rule \"rule-1\", keep 5 per 1s (fixed)"));
    assert!(stdout(&out).contains("exact:"));
    assert_eq!(rows(&out), vec![[50, 5, 0, 5]; 5], "{}", stdout(&out));
    // checkout's payments: 50 per sliding second under a cap of 100.
    let out = run(&[
        "simulate",
        &example("sampling.toml"),
        "--service",
        "checkout",
        "--span",
        "POST /api/pay",
        "--kind",
        "server",
        "--rate",
        "500",
        "--duration",
        "3s",
    ]);
    assert_eq!(rows(&out), vec![[500, 50, 0, 50]; 3], "{}", stdout(&out));
    // Attributes: checkout's admin-users rule.
    let out = run(&[
        "simulate",
        &example("sampling.toml"),
        "--service",
        "checkout",
        "--rate",
        "0.5",
        "--duration",
        "4s",
        "--attr",
        "http.route=/admin/x",
        "--attr",
        "user.tier=gold",
    ]);
    // One per two seconds, offered one per two seconds.
    assert!(
        stdout(&out).contains("rule \"admin-users\""),
        "{}",
        stdout(&out)
    );
    assert_eq!(rows(&out), [[1, 1, 0, 1], [0; 4], [1, 1, 0, 1], [0; 4]]);
}

#[test]
fn permits_a_rule_takes_for_spans_the_cap_refuses_are_given_back() {
    let file = TempFile::new(
        "capped.toml",
        r#"
[default]
rate = 1.0
paced = false
[[service]]
name = "s"
cap = { limit = 1, window = "1s" }
[[service.rule]]
name = "slow"
span_name = "a"
limit = 10
paced = false
window = "10s"
"#,
    );
    let out = run(&[
        "simulate",
        file.path(),
        "--service",
        "s",
        "--span",
        "a",
        "--rate",
        "100",
        "--duration",
        "20s",
    ]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 20, "{}", stdout(&out));
    for (second, row) in rows.iter().enumerate() {
        // The rule admits every span while it has a permit; the cap keeps one a
        // second, and the 99 it refuses give the rule's permit back: the rule's 10 per
        // 10 s last the 10 s; in the tenth the first span takes the last one and the
        // rule refuses the rest. (Before, the rule spent its 10 in the first second
        // and kept nothing in the next nine.)
        let want = if second % 10 == 9 {
            [100, 1, 0, 1]
        } else {
            [100, 100, 99, 1]
        };
        assert_eq!(*row, want, "second {second}");
    }
}

#[test]
fn a_probability_keeps_its_expected_share_and_says_it_is_an_estimate() {
    // search's default: probability 0.01, no cap.
    let out = run(&[
        "simulate",
        &example("sampling.toml"),
        "--service",
        "search",
        "--rate",
        "1000",
        "--duration",
        "3s",
    ]);
    assert!(stdout(&out).contains("estimated:"), "{}", stdout(&out));
    assert_eq!(rows(&out), vec![[1000, 10, 0, 10]; 3], "{}", stdout(&out));
}

#[test]
fn replicas_each_have_their_own_sampler() {
    let out = run(&[
        "simulate",
        &example("sampling.toml"),
        "--service",
        "search",
        "--span",
        "GET /search",
        "--rate",
        "60",
        "--duration",
        "5s",
        "--replicas",
        "3",
    ]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(rows(&out), vec![[60, 15, 0, 15]; 5], "{text}");
    for want in [
        "replica 1: offered 100, kept 25 (5.0/s)",
        "replica 3: offered 100, kept 25 (5.0/s)",
        "total (3 replica(s)): offered 300, kept 75 (15.0/s)",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
}

#[test]
fn a_huge_rate_over_an_hour_finishes() {
    // A hang guard: no step per offered trace. No speed is asserted.
    for span in ["simulated", "POST /api/pay"] {
        let out = run(&[
            "simulate",
            &example("sampling.toml"),
            "--service",
            "checkout",
            "--span",
            span,
            "--rate",
            "1e12",
            "--duration",
            "1h",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("offered 3600000000000000,"),
            "{}",
            stdout(&out)
        );
    }
}

#[test]
fn a_simulation_over_the_memory_budget_is_refused_before_it_starts() {
    // A 64 MiB sliding log: two replicas, their twins and the probe take 320 MiB.
    let file = TempFile::new(
        "huge.toml",
        "[default]\nlimit = 4194303\nwindow = \"1h\"\nalgorithm = \"sliding-log\"\n",
    );
    let two = run(&[
        "simulate",
        file.path(),
        "--service",
        "s",
        "--rate",
        "10",
        "--duration",
        "1s",
        "--replicas",
        "2",
    ]);
    assert_eq!(code(&two), 2);
    let err = stderr(&two);
    assert!(
        err.contains("MiB of limiters, over the budget of 256 MiB"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn hostile_arguments_are_one_line_errors_with_exit_code_2() {
    let file = example("sampling.toml");
    let base = ["simulate", &file, "--service", "checkout"];
    let mut cases: Vec<Vec<&str>> = Vec::new();
    for rate in [
        "18446744073709551615",
        "1e300",
        "-5",
        "NaN",
        "inf",
        "-inf",
        "0",
        "",
        "x",
    ] {
        cases.push([&base[..], &["--rate", rate, "--duration", "10s"]].concat());
    }
    for duration in [
        "18446744073709551615s",
        "1e300",
        "-1s",
        "0s",
        "",
        "10",
        "100000h",
    ] {
        cases.push([&base[..], &["--rate", "10", "--duration", duration]].concat());
    }
    let ok = ["--rate", "10", "--duration", "1s"];
    for replicas in ["0", "-1", "18446744073709551615", "1e300", "NaN", "1001"] {
        cases.push([&base[..], &ok, &["--replicas", replicas]].concat());
        cases.push(vec!["check", &file, "--replicas", replicas]);
    }
    for extra in [
        &["--kind", "bogus"][..],
        &["--attr", "novalue"],
        &["--attr", "=x"],
        &["--span"],
        &["--replicas"],
        &["--bogus"],
    ] {
        cases.push([&base[..], &ok, extra].concat());
    }
    cases.push([&base[..], &["--rate", "--duration", "1s"]].concat());
    cases.push(vec!["simulate", &file, "--rate", "1", "--duration", "1s"]);
    cases.push(vec!["check"]);
    cases.push(vec![]);
    cases.push(vec!["frobnicate"]);
    for args in &cases {
        let out = run(args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("otel-rate-sampler: error: "),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
    }
}

/// Issue 17: `--rate -inf` was reported as an unknown argument `-i` (clap took the
/// value for flags); every negative-looking value now reaches its own check.
#[test]
fn negative_looking_values_are_refused_by_their_own_check_not_read_as_flags() {
    let file = example("sampling.toml");
    let base = ["simulate", &file, "--service", "checkout"];
    let ok = ["--rate", "10", "--duration", "1s"];
    let mut cases: Vec<(Vec<&str>, &str, &str)> = Vec::new();
    for rate in ["-inf", "-infinity", "-NaN", "-.5", "-1e-3", "-5", "-x"] {
        let args = [&base[..], &["--rate", rate, "--duration", "1s"]].concat();
        cases.push((args, rate, "for '--rate <R>'"));
    }
    for replicas in ["-inf", "-1", "-x"] {
        let args = [&base[..], &ok, &["--replicas", replicas]].concat();
        cases.push((args, replicas, "for '--replicas <K>'"));
        let args = vec!["check", &file, "--replicas", replicas];
        cases.push((args, replicas, "for '--replicas <K>'"));
    }
    for (args, value, option) in &cases {
        let out = run(args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("invalid value '{value}' {option}")),
            "{args:?}: the value is refused by its own check: {err}"
        );
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

/// Issue 17: `--rate 1e-300` printed a rate of 300 digits. Rates print in a few
/// characters, in `simulate` as in `check`.
#[test]
fn extreme_rates_print_in_a_few_characters() {
    let file = example("sampling.toml");
    let out = run(&[
        "simulate",
        &file,
        "--service",
        "checkout",
        "--rate",
        "1e-300",
        "--duration",
        "1s",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(", 1e-300 per second for 1s,"), "{text}");
    assert!(text.lines().all(|l| l.len() < 200), "{text}");
    // The same numbers as check: 1 per 1h across 1000 replicas is not "0.000/s".
    let hourly = TempFile::new("hourly.toml", "[default]\nlimit = 1000\nwindow = \"1h\"\n");
    check_prints(
        &["check", hourly.path(), "--replicas", "1000"],
        0,
        &["(0.0002778/s), 0.2778/s together"],
    );
}

/// Half the default clock's resolution: a window a real sampler
/// refuses; `None` (the test is skipped, and says so) on a clock that serves every
/// window.
pub(crate) fn below_the_clock() -> Option<std::time::Duration> {
    use otel_rate_sampler::{Clock, MonotonicClock};

    let resolution = MonotonicClock::new().resolution();
    let window = resolution / 2;
    if window < std::time::Duration::from_micros(1) {
        eprintln!("skipped: this clock ({resolution:?}) serves every window");
        return None;
    }
    Some(window)
}

/// Issue 17: `simulate` showed 1000 kept per second for a window of 1 ms that `check`
/// calls an error on a 4 ms clock (and `RuleBasedSampler::new` refuses). It now stops
/// with `check`'s own lint, exit 1, before simulating anything.
#[test]
fn simulate_refuses_a_window_below_the_clock_resolution_as_check_does() {
    let Some(window) = below_the_clock() else {
        return;
    };
    let text = format!(
        "[[service]]\nname = \"s\"\n[[service.rule]]\nname = \"fast\"\nspan_name = \"x\"\nlimit = 1\nwindow = \"{}ms\"\n",
        window.as_secs_f64() * 1e3
    );
    let file = TempFile::new("fast.toml", &text);
    let checked = check_prints(&["check", file.path()], 1, &["1 error(s)"]);
    let lint = checked
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("error: service \"s\": rule \"fast\": window "))
        .unwrap_or_else(|| panic!("check reports the window: {checked}"));
    for span in ["x", "other"] {
        let out = run(&[
            "simulate",
            file.path(),
            "--service",
            "s",
            "--span",
            span,
            "--rate",
            "1000",
            "--duration",
            "1s",
        ]);
        let err = stderr(&out);
        assert_eq!(code(&out), 1, "{err}{}", stdout(&out));
        assert!(out.stdout.is_empty(), "nothing simulated: {}", stdout(&out));
        assert!(err.contains("not simulated"), "{err}");
        assert!(err.contains(lint), "check's own lint {lint:?} in {err}");
    }
    // Another service of the file is not affected.
    let other = run(&[
        "simulate",
        file.path(),
        "--service",
        "t",
        "--rate",
        "10",
        "--duration",
        "1s",
    ]);
    assert_eq!(code(&other), 0, "{}", stderr(&other));
}

#[test]
fn help_and_version_exit_0() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["check", "--help"],
        &["simulate", "-h"],
    ] {
        let out = run(args);
        assert_eq!(code(&out), 0, "{args:?}");
        assert!(!out.stdout.is_empty());
    }
    assert!(Path::new(BIN).exists());
}

#[test]
fn check_reads_the_yaml_example_as_it_reads_the_toml_one() {
    let toml = run(&["check", &example("sampling.toml")]);
    let yaml = run(&["check", &example("sampling.yaml")]);
    assert_eq!((code(&toml), code(&yaml)), (0, 0), "{}", stderr(&yaml));
    // Everything after the "FILE: ok" line is the same.
    let body = |out: &Output| stdout(out).lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&toml), body(&yaml));
    assert!(stdout(&yaml).starts_with(&format!("{}: ok\n", example("sampling.yaml"))));
}

#[test]
fn check_shows_the_sampler_tree_and_rules_of_a_declarative_file() {
    let out = run(&["check", &example("otel-config.yaml")]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    for want in [
        "otel-config.yaml: ok",
        "sampler:\n  parent_based(\n    root: rate_limiting,\n    remote_parent_sampled: always_on,\n    remote_parent_not_sampled: trace_id_ratio_based(0.1),\n    local_parent_sampled: always_on,\n    local_parent_not_sampled: always_off\n  )\n",
        "rules of the first rate_limiting sampler:",
        "service \"checkout\"",
        "rule \"payments\": name ~ \"POST /api/pay*\" => keep",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}

#[test]
fn yaml_and_declarative_files_that_do_not_load_exit_1_with_their_position() {
    let cases = [
        (
            "typo.yaml",
            "default:\n  rate: 1\n  probabilty: 0.5\n",
            ":3:3: default.probabilty: unknown field",
        ),
        (
            "bad-limit.yml",
            "default:\n  rate: 1\nservice:\n  - name: a\n    limit: 0\n",
            ":5:12: service[0].limit: ",
        ),
        (
            "unknown-sampler.yaml",
            "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    parent_based:\n      root:\n        xray: {}\n",
            ":6:9: tracer_provider.sampler.parent_based.root.xray: unknown variant",
        ),
        (
            "format.yaml",
            "file_format: \"0.3\"\ntracer_provider:\n  sampler:\n    always_on:\n",
            ":1:14: file_format: ",
        ),
        (
            "composite-ratio.yaml",
            "file_format: \"1.1\"\ntracer_provider:\n  sampler:\n    composite/development:\n      probability:\n        ratio: 2\n",
            ":6:16: tracer_provider.sampler.composite/development.probability.ratio: ",
        ),
    ];
    for (name, text, want) in cases {
        let file = TempFile::new(name, text);
        let out = run(&["check", file.path()]);
        assert_eq!(code(&out), 1, "{name}: {}", stdout(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            err.starts_with(&format!("{}{want}", file.path())),
            "{name}: {want:?} in {err}"
        );
    }
}

#[test]
fn simulate_reads_yaml_and_declarative_files() {
    let args = |file: &str| {
        run(&[
            "simulate",
            file,
            "--service",
            "search",
            "--span",
            "GET /search",
            "--rate",
            "50",
            "--duration",
            "3s",
        ])
    };
    let toml = args(&example("sampling.toml"));
    let yaml = args(&example("sampling.yaml"));
    assert_eq!(code(&yaml), 0, "{}", stderr(&yaml));
    assert_eq!(rows(&yaml), rows(&toml));
    assert_eq!(rows(&yaml), vec![[50, 5, 0, 5]; 3], "{}", stdout(&yaml));
    // The declarative example: checkout's payments rule, 5 per second.
    let out = run(&[
        "simulate",
        &example("otel-config.yaml"),
        "--service",
        "checkout",
        "--span",
        "POST /api/pay",
        "--rate",
        "100",
        "--duration",
        "2s",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("rule \"payments\""),
        "{}",
        stdout(&out)
    );
    assert_eq!(rows(&out), vec![[100, 5, 0, 5]; 2], "{}", stdout(&out));
}

#[test]
fn a_lower_bound_is_checked_and_simulated_under_a_cap() {
    let file = TempFile::new(
        "at-least.toml",
        r#"
[[service]]
name = "s"
probability = 0.0
at_least = 3.0
cap = { rate = 2.0 }
[[service.rule]]
name = "health"
span_name = "GET /health"
probability = 0.0
at_least = 2.0
"#,
    );
    check_prints(&["check", file.path()], 0, &[
        "1. rule \"health\": name ~ \"GET /health\" => keep with probability 0, and at least 2 per 1s (2/s, fixed)",
        "otherwise: keep with probability 0, and at least 3 per 1s (3/s, fixed)",
        "warning: service \"s\": rule \"default\": lower bound (at_least) 3/s is more than the service cap lets through, 2/s",
    ]);
    // Probability 0: the lower bound alone keeps, exactly 2 per second.
    let simulate = |span: &str| {
        run(&[
            "simulate",
            file.path(),
            "--service",
            "s",
            "--span",
            span,
            "--rate",
            "1000",
            "--duration",
            "5s",
        ])
    };
    let out = simulate("GET /health");
    assert!(
        stdout(&out).contains("and at least 2 per 1s"),
        "{}",
        stdout(&out)
    );
    assert_eq!(rows(&out), vec![[1000, 2, 0, 2]; 5], "{}", stdout(&out));
    // The default's bound admits 3 a second, and the cap keeps 2 of them.
    let out = simulate("GET /other");
    assert_eq!(rows(&out), vec![[1000, 3, 1, 2]; 5], "{}", stdout(&out));
}

#[test]
fn check_substitutes_variables_in_declarative_files() {
    let text = "file_format: \"1.1\"
tracer_provider:
  sampler:
    parent_based:
      root:
        rate_limiting:
          default:
            limit: ${LIMIT}
            window: ${WINDOW:-2s}
      remote_parent_sampled:
        composite/development:
          probability:
            ratio: ${env:RATIO}
";
    let file = TempFile::new("substitution.yaml", text);
    let out = Command::new(BIN)
        .args(["check", file.path()])
        .env("LIMIT", "7")
        .env("RATIO", "0.25")
        .output()
        .expect("the binary runs");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("remote_parent_sampled: composite/development(probability(0.25))"),
        "{printed}"
    );
    assert!(printed.contains("7 per 2s"), "{printed}");
    // An invalid reference: one line, with its position and key.
    let file = TempFile::new(
        "bad-reference.yaml",
        &text.replace("${env:RATIO}", "${RATIO:?unset}"),
    );
    let out = Command::new(BIN)
        .args(["check", file.path()])
        .env("LIMIT", "7")
        .output()
        .expect("the binary runs");
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "{}:13:20: tracer_provider.sampler.parent_based.remote_parent_sampled.composite/development.probability.ratio: `${{RATIO:?unset}}`",
            file.path()
        )),
        "{err}"
    );
}
