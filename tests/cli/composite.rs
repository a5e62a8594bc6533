//! `check` and `simulate` on declarative 1.1 files whose sampler is a
//! `composite/development` one: the tree as the file describes it, errors at their
//! position and key, and the spans a composite keeps.

use std::process::{Command, Output};

use super::{below_the_clock, code, example, run, stderr, stdout, TempFile, BIN};

/// A composite without a rate limiter: server roots at `${RATIO}`, the rest never.
const PROBABILITY_ONLY: &str = "file_format: \"1.1\"
tracer_provider:
  sampler:
    composite/development:
      rule_based:
        rules:
          - span_kinds: [server]
            sampler:
              probability:
                ratio: ${RATIO:-0.25}
          - sampler:
              always_off:
";

/// The table rows of a span-by-span `simulate` run: (offered, kept, kept with `th`).
fn composite_rows(out: &Output) -> Vec<[u64; 3]> {
    stdout(out)
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells.len(), 5, "{l}");
            [1, 2, 3].map(|i| cells[i].parse().unwrap())
        })
        .collect()
}

fn with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs")
}

#[test]
fn check_shows_a_composite_file_as_a_tree_without_rules_to_lint() {
    let file = TempFile::new("composite.yaml", PROBABILITY_ONLY);
    let out = with_env(&["check", file.path()], &[("RATIO", "0.125")]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    assert!(
        text.contains(
            "sampler:
  composite/development(
    rule_based([
      span_kinds [\"server\"] => probability(0.125),
      any span => always_off
    ])
  )
no rule file (a `rate_limiting` sampler): no rules to show or lint
lints: none
"
        ),
        "{text}"
    );
}

#[test]
fn check_shows_the_rate_limiter_of_the_composite_example() {
    let out = with_env(
        &["check", &example("otel-config-composite.yaml")],
        &[("TRACES_PER_SECOND", "7"), ("SAMPLING_RATIO", "0.75")],
    );
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    for want in [
        "url.path in [\"/health\", \"/ready\"] => always_off,",
        "any span => rate_limiting/otel_rate_sampler(\n          limit: 7 per 1s,\n          sampler: probability(0.75)\n        )",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}

#[test]
fn composite_mistakes_exit_1_with_file_line_column_key() {
    let cases = [
        (
            PROBABILITY_ONLY.replace("[server]", "[srv]"),
            ":7:26: tracer_provider.sampler.composite/development.rule_based.rules[0].span_kinds: unknown span kind \"srv\"",
        ),
        (
            PROBABILITY_ONLY.replace("always_off:", "sometimes:"),
            ":12:15: tracer_provider.sampler.composite/development.rule_based.rules[1].sampler.sometimes: unknown variant",
        ),
        (
            PROBABILITY_ONLY.replace(
                "probability:\n                ratio: ${RATIO:-0.25}",
                "rate_limiting/otel_rate_sampler:\n                window: 1s",
            ),
            ":9:15: tracer_provider.sampler.composite/development.rule_based.rules[0].sampler.rate_limiting/otel_rate_sampler.limit: ",
        ),
    ];
    for (text, want) in cases {
        let file = TempFile::new("composite-mistake.yaml", &text);
        for command in ["check", "simulate"] {
            let out = run(&[
                command,
                file.path(),
                "--service",
                "a",
                "--rate",
                "1",
                "--duration",
                "1s",
            ]);
            if command == "check" {
                // `check` takes no --rate: run it alone.
                let out = run(&["check", file.path()]);
                assert_eq!(code(&out), 1, "{}", stdout(&out));
                let err = stderr(&out);
                assert_eq!(err.lines().count(), 1, "{err}");
                assert!(
                    err.starts_with(&format!("{}{want}", file.path())),
                    "{want:?} in {err}"
                );
                continue;
            }
            assert_eq!(code(&out), 1, "{}", stdout(&out));
            assert!(
                stderr(&out).starts_with(&format!("{}{want}", file.path())),
                "{want:?} in {}",
                stderr(&out)
            );
        }
    }
}

#[test]
fn simulate_offers_each_span_to_a_composite_probability() {
    let file = TempFile::new("composite-sim.yaml", PROBABILITY_ONLY);
    let simulate = |kind: &str| {
        run(&[
            "simulate",
            file.path(),
            "--service",
            "a",
            "--rate",
            "1000",
            "--duration",
            "3s",
            "--replicas",
            "2",
            "--kind",
            kind,
        ])
    };
    let out = simulate("server");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows = composite_rows(&out);
    assert_eq!(rows.len(), 3, "{}", stdout(&out));
    let kept: u64 = rows.iter().map(|r| r[1]).sum();
    // Binomial(3000, 0.25): mean 750, standard deviation 23.7; five of them either side.
    assert!((631..=869).contains(&kept), "{}", stdout(&out));
    for [offered, kept, with_th] in rows {
        assert_eq!(offered, 1000);
        // A reliable threshold: every kept span carries `th`.
        assert_eq!(kept, with_th, "{}", stdout(&out));
    }
    assert!(stdout(&out).contains(&format!("total (2 replica(s)): offered 3000, kept {kept}")));
    // Client spans match the second rule: always off.
    let out = simulate("client");
    assert_eq!(
        composite_rows(&out),
        vec![[1000, 0, 0]; 3],
        "{}",
        stdout(&out)
    );
}

#[test]
fn simulate_keeps_at_most_the_composite_rate_limiter_s_limit_each_window() {
    let out = with_env(
        &[
            "simulate",
            &example("otel-config-composite.yaml"),
            "--service",
            "checkout",
            "--rate",
            "2000",
            "--duration",
            "6s",
        ],
        &[("TRACES_PER_SECOND", "40")],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows = composite_rows(&out);
    assert_eq!(rows.len(), 6, "{}", stdout(&out));
    for [offered, kept, _] in &rows {
        // The windows are whole seconds from the clock's origin, as the rows are.
        assert_eq!(*offered, 2000);
        assert!(*kept <= 40, "{}", stdout(&out));
    }
    // The delegate's probability (0.5) alone would keep about 1000 a second; the
    // limiter keeps its limit's worth once it has adapted.
    let kept: u64 = rows.iter().map(|r| r[1]).sum();
    assert!(kept >= 40, "{}", stdout(&out));
    // Health checks: the first rule, always off.
    let out = run(&[
        "simulate",
        &example("otel-config-composite.yaml"),
        "--service",
        "checkout",
        "--rate",
        "100",
        "--duration",
        "2s",
        "--attr",
        "url.path=/health",
    ]);
    assert_eq!(
        composite_rows(&out),
        vec![[100, 0, 0]; 2],
        "{}",
        stdout(&out)
    );
}

#[test]
fn simulate_refuses_a_composite_run_over_the_budget() {
    let file = TempFile::new("composite-budget.yaml", PROBABILITY_ONLY);
    let out = run(&[
        "simulate",
        file.path(),
        "--service",
        "a",
        "--rate",
        "1e9",
        "--duration",
        "1s",
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("over the budget of 50000000"),
        "{}",
        stderr(&out)
    );
}

/// A composite rate limiter's window shorter than the default clock's resolution is
/// refused by `check` and `simulate` alike (exit 1, at the window's key), as a rule
/// file's is: the simulation's manual clock would serve it and show a rate no real
/// sampler gets.
#[test]
fn a_composite_window_below_the_clock_resolution_is_refused_by_check_and_simulate() {
    let Some(window) = below_the_clock() else {
        return;
    };
    let text = std::fs::read_to_string(example("otel-config-composite.yaml"))
        .unwrap()
        .replace(
            "window: 1s",
            &format!("window: {}ms", window.as_secs_f64() * 1e3),
        );
    let file = TempFile::new("composite-fast.yaml", &text);
    let simulate = ["--rate", "100", "--duration", "2s"];
    for (command, more) in [("check", &[][..]), ("simulate", &simulate[..])] {
        let mut args = vec![command, file.path(), "--service", "checkout"];
        args.extend_from_slice(more);
        let out = with_env(&args, &[("TRACES_PER_SECOND", "40")]);
        assert_eq!(code(&out), 1, "{command}: {}{}", stdout(&out), stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("rate_limiting/otel_rate_sampler.window: window ")
                && err.contains("is shorter than the resolution of the sampler's clock"),
            "{command}: {err}"
        );
    }
}
