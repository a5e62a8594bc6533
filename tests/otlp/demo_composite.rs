//! The demo with an OpenTelemetry declarative 1.1 file (`--config FILE --service
//! NAME`): a `composite/development` sampler, `${VAR}` references filled from the
//! environment, with and without the composable rate limiter, exporting to a real OTLP
//! receiver. The summary reports what was offered and kept; the kept traces arrive
//! whole, with the `th` the composite wrote, consistent with the file's probability.

use std::time::Duration;

use crate::demo_run::{self, stderr, summary};
use crate::receiver::{ReceivedSpan, Receiver};

/// Far above a 2 s run; only a hang gets near it.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// The largest limit (`Limit::MAX_PERMITS`): what the demo reports for a composite
/// without a rate limiter.
const NO_LIMIT: u64 = (1 << 22) - 1;

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The `th` of a span's trace state, parsed: its threshold, 56 bits.
fn threshold(span: &ReceivedSpan) -> Option<u64> {
    let ot = span
        .trace_state
        .split(',')
        .find_map(|e| e.strip_prefix("ot="))?;
    let th = ot.split(';').find_map(|f| f.strip_prefix("th:"))?;
    u64::from_str_radix(&format!("{th:0<14}"), 16).ok()
}

/// The probability a threshold keeps with.
fn probability(threshold: u64) -> f64 {
    ((1u64 << 56) - threshold) as f64 / (1u64 << 56) as f64
}

#[test]
fn the_demo_runs_the_composite_example_and_its_kept_roots_carry_th_at_a_real_collector() {
    let receiver = Receiver::start();
    let url = receiver.grpc_endpoint();
    let args = [
        "--config",
        &example("otel-config-composite.yaml"),
        "--service",
        "checkout",
        "--duration",
        "2s",
        "--threads",
        "2",
        "--otlp",
        &url,
    ];
    let env = [("TRACES_PER_SECOND", "20"), ("SAMPLING_RATIO", "0.5")];
    let output = demo_run::run_demo(&args, &env, HANG_GUARD);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    // The limit from ${TRACES_PER_SECOND}, its windows reported, offered and kept.
    assert_eq!(summary["limit"], 20, "{summary}");
    assert_eq!(summary["window_ms"], 1000, "{summary}");
    let offered = summary["offered"].as_u64().unwrap();
    let sampled = summary["sampled"].as_u64().unwrap();
    assert!(sampled > 0 && sampled < offered, "{summary}");
    assert!(
        summary["max_per_window"].as_u64().unwrap() <= 20,
        "{summary}"
    );
    let traces = receiver.traces();
    assert_eq!(Some(traces.len() as u64), summary["exported"].as_u64());
    let mut with_th = 0;
    for (trace_id, spans) in &traces {
        let root = spans
            .iter()
            .find(|s| s.parent_span_id.is_none())
            .expect("a root");
        // Children keep the root's threshold (parent_threshold), whatever it is.
        for span in spans {
            assert_eq!(threshold(span), threshold(root), "{trace_id}");
        }
        if let Some(t) = threshold(root) {
            with_th += 1;
            // The limiter only raises the probability's threshold: at most 1/2.
            assert!(probability(t) <= 0.5, "{trace_id}: {}", root.trace_state);
        }
    }
    // A span kept after the cap bound in a window, before the threshold adapted, loses
    // `th`; once adapted, the kept roots carry it.
    assert!(with_th > 0, "{summary}");
}

#[test]
fn a_composite_without_a_rate_limiter_keeps_its_probability_with_its_th() {
    let receiver = Receiver::start();
    let url = receiver.grpc_endpoint();
    let dir = std::env::temp_dir().join(format!("demo-composite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("otel-config.yaml");
    std::fs::write(
        &file,
        "file_format: \"1.1\"
tracer_provider:
  sampler:
    composite/development:
      probability:
        ratio: ${RATIO}
",
    )
    .unwrap();
    let args = [
        "--config",
        file.to_str().unwrap(),
        "--service",
        "search",
        "--duration",
        "1s",
        "--rate",
        "2000",
        "--threads",
        "2",
        "--otlp",
        &url,
    ];
    let output = demo_run::run_demo(&args, &[("RATIO", "0.25")], HANG_GUARD);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    assert_eq!(summary["limit"], NO_LIMIT, "{summary}");
    let offered = summary["offered"].as_u64().unwrap() as f64;
    let sampled = summary["sampled"].as_u64().unwrap() as f64;
    // Binomial(offered, 1/4): within five standard deviations of a quarter.
    let sd = (offered * 0.25 * 0.75).sqrt();
    assert!(
        (sampled - offered / 4.0).abs() <= 5.0 * sd + 1.0,
        "{summary}"
    );
    let traces = receiver.traces();
    assert_eq!(Some(traces.len() as u64), summary["exported"].as_u64());
    assert!(!traces.is_empty(), "{summary}");
    for (trace_id, spans) in traces {
        for span in spans {
            // th:c is 1/4 exactly, on every span of every kept trace (the children
            // decided by the same probability on the same trace randomness).
            assert_eq!(
                threshold(&span),
                Some(3 << 54),
                "{trace_id}: {}",
                span.trace_state
            );
        }
    }
}
