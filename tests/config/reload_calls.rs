//! A reload of a ten-rule file, TOML then YAML, for `.ci/reload-calls`: run under
//! callgrind, its call graph shows which source files the load enters, and the script
//! fails if one is entered again after the load left it for another (a bounce). Ignored
//! in the suite: it asserts nothing a plain reload test does not already.

use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};

/// Ten rules of every part a rule can have a reader for: name, span name, attributes,
/// a limit with window and algorithm; a service cap and a default.
fn files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut toml = String::from(
        "[default]\nrate = 10.0\n\n[[service]]\nname = \"svc\"\nlimit = 20\nwindow = \"1s\"\n\
         cap = { rate = 100.0, algorithm = \"sliding\" }\n",
    );
    let mut yaml = String::from(
        "default:\n  rate: 10.0\nservice:\n  - name: svc\n    limit: 20\n    window: 1s\n    \
         cap: { rate: 100.0, algorithm: sliding }\n    rule:\n",
    );
    for i in 0..10 {
        let limit = 5 + i;
        toml.push_str(&format!(
            "\n[[service.rule]]\nname = \"r{i}\"\nspan_name = \"GET /r{i}*\"\n\
             attributes = {{ \"http.route\" = \"/a/{i}/*\" }}\nlimit = {limit}\n\
             window = \"1s\"\nalgorithm = \"sliding-log\"\nfloor = 1\n"
        ));
        yaml.push_str(&format!(
            "      - name: r{i}\n        span_name: \"GET /r{i}*\"\n        \
             attributes: {{ \"http.route\": \"/a/{i}/*\" }}\n        limit: {limit}\n        \
             window: 1s\n        algorithm: sliding-log\n        floor: 1\n"
        ));
    }
    let (t, y) = (dir.join("rules.toml"), dir.join("rules.yaml"));
    std::fs::write(&t, toml).unwrap();
    std::fs::write(&y, yaml).unwrap();
    (t, y)
}

#[test]
#[ignore = "run by .ci/reload-calls under callgrind"]
fn reload_ten_rules_toml_and_yaml() {
    let dir = std::env::temp_dir().join(format!("ors-reload-calls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (toml, yaml) = files(&dir);
    // A manual clock: the monotonic clock's vDSO lookup (rustix) faults under valgrind.
    let config = SamplingConfig::from_path(&toml).unwrap();
    let sampler = RuleBasedSampler::with_clock(&config, "svc", ManualClock::new()).unwrap();
    for _ in 0..2 {
        sampler.reload_from_path(&toml).unwrap();
        sampler.reload_from_path(&yaml).unwrap();
    }
    // The ten rules and the service's default, all from the last file loaded.
    let names: Vec<String> = sampler.stats().rules.into_iter().map(|r| r.name).collect();
    let expected: Vec<String> = (0..10)
        .map(|i| format!("r{i}"))
        .chain(["default".into()])
        .collect();
    assert_eq!(names, expected);
    // Generation 0 at start, one more per reload.
    assert_eq!(sampler.stats().generation, 4);
    std::fs::remove_dir_all(&dir).unwrap();
}
