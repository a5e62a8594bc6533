//! Hot reload through the file watcher: a good edit swaps the rules, a bad one is
//! reported and keeps the last good rules. The test waits for the watcher's callback
//! (with a generous deadline), it does not sleep and hope.

use std::sync::mpsc;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{ConfigErrorKind, ManualClock, RuleBasedSampler, SamplingConfig};

/// Replaces the file the way editors do: write a temporary file, rename it over.
fn save(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn kept(s: &impl ShouldSample, n: usize) -> usize {
    (0..n)
        .filter(|_| {
            s.should_sample(
                None,
                TraceId::from(1u128),
                "op",
                &SpanKind::Server,
                &[],
                &[],
            )
            .decision
                == SamplingDecision::RecordAndSample
        })
        .count()
}

#[test]
fn watched_file_edits_reload_and_bad_edits_keep_the_last_good_rules() {
    let dir = std::env::temp_dir().join(format!("ors-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sampling.toml");
    std::fs::write(&path, "[default]\nlimit = 2\npaced = false\n").unwrap();
    let clock = ManualClock::new();
    let config = SamplingConfig::from_path(&path).unwrap();
    let s = RuleBasedSampler::with_clock(&config, "svc", clock.clone()).unwrap();
    let (tx, rx) = mpsc::channel();
    let _watcher = s
        .watch(&path, move |outcome| {
            let _ = tx.send(outcome.map_err(|e| (e.kind(), e.line(), e.key().to_owned())));
        })
        .unwrap();
    assert_eq!(kept(&s, 1), 1);

    save(&path, "[default]\nlimit = 5\npaced = false\n");
    let deadline = Duration::from_secs(20);
    assert_eq!(rx.recv_timeout(deadline).unwrap(), Ok(()));
    // The changed limit carried its count (1) over: 4 left, not 5.
    assert_eq!(kept(&s, 10), 4);

    save(
        &path,
        "[default]\nlimit = 5\npaced = false\nwindow = \"soon\"\n",
    );
    // A rename can be reported as more than one event: skip the late reports of the
    // previous (good) save.
    let outcome = loop {
        if let Err(e) = rx.recv_timeout(deadline).unwrap() {
            break e;
        }
    };
    let expected = (
        ConfigErrorKind::InvalidLimit,
        4,
        "default.window".to_owned(),
    );
    assert_eq!(outcome, expected);
    clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&s, 10), 5, "the last good rules stay in force");
    std::fs::remove_dir_all(&dir).ok();
}
