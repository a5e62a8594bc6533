//! The demo as a user runs it: the built `examples/demo` binary, its exit codes, its one
//! JSON line, and its OTLP export against no collector, a collector that accepts
//! connections and never answers, and a real OTLP receiver.
//!
//! The binary is built (or found up to date) with the `cargo` that runs these tests, in
//! the same profile and features, so `cargo test --test otlp` works on a clean tree (see
//! `tests/support/demo_run.rs`; the `fleet` tests run it in fleet mode). The one time
//! bound below is a hang guard (a run of 1 s with a 1 s export timeout must not take
//! minutes), not a speed claim.

use std::net::{TcpListener, TcpStream};
use std::process::Output;
use std::thread;
use std::time::Duration;

use crate::receiver::Receiver;

use crate::demo_run::{self, stderr, summary};

/// Short runs: five 200 ms windows (plus partial ones at the ends).
const RUN: [&str; 8] = [
    "--duration",
    "1s",
    "--window",
    "200ms",
    "--limit",
    "5",
    "--threads",
    "2",
];
/// Far above a 1 s run with a 1 s export timeout; only a hang gets near it.
const HANG_GUARD: Duration = Duration::from_secs(10);

/// Runs the demo, killed if it outlives [`HANG_GUARD`].
fn run_demo(args: &[&str], envs: &[(&str, &str)]) -> Output {
    demo_run::run_demo(args, envs, HANG_GUARD)
}

#[test]
fn a_short_run_keeps_at_most_the_limit_in_every_window() {
    let output = run_demo(&RUN, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    let per_window = summary["per_window"]
        .as_object()
        .expect("per_window is an object");
    // 1 s of 200 ms windows: 5 whole ones, or 4 and two partial ones.
    assert!(per_window.len() >= 5, "{summary}");
    let mut total = 0;
    for (start, kept) in per_window {
        start.parse::<u64>().expect("keys are Unix milliseconds");
        let kept = kept.as_u64().expect("counts are whole numbers");
        assert!(kept <= 5, "window {start} kept {kept} > limit 5: {summary}");
        total += kept;
    }
    assert_eq!(summary["sampled"].as_u64(), Some(total), "{summary}");
    assert_eq!(summary["exported"], summary["sampled"], "{summary}");
    assert!(summary["max_per_window"].as_u64() <= Some(5), "{summary}");
    assert!(
        stderr(&output).contains("per window"),
        "the headline: {}",
        stderr(&output)
    );
}

#[test]
fn adaptive_runs_keep_at_most_the_limit_with_probability_refusals_and_no_warning() {
    let mut args = RUN.to_vec();
    args.push("--adaptive");
    let output = run_demo(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    assert_eq!(summary["sampler"], "adaptive", "{summary}");
    for (start, kept) in summary["per_window"].as_object().expect("per_window") {
        let kept = kept.as_u64().expect("counts are whole numbers");
        assert!(kept <= 5, "window {start} kept {kept} > limit 5: {summary}");
    }
    assert_eq!(summary["exported"], summary["sampled"], "{summary}");
    // After the first window the probability refuses most of the overload.
    let dropped = &summary["decisions"]["dropped"];
    assert!(dropped["probability"].as_u64() > Some(0), "{summary}");
    assert!(!stderr(&output).contains("WARNING"), "{}", stderr(&output));
}

#[test]
fn bad_flags_are_one_line_errors_with_exit_code_2() {
    let cases: [&[&str]; 13] = [
        &["--limit"],
        &["--limit", "0"],
        &["--limit", "lots"],
        &["--rate", "NaN"],
        &["--rate=-1"],
        &["--rate", "1e300"],
        &["--duration", "99years"],
        &["--duration", "0s"],
        &["--window", "1ms", "--duration", "1h"],
        &["--frobnicate"],
        &["--otlp-protocol", "http"],
        &["--redis-key", "demo"],
        &["--algorithm", "sliding", "--redis", "redis://127.0.0.1:1"],
    ];
    for args in cases {
        let output = run_demo(args, &[]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?}: nothing on stdout");
        let err = stderr(&output);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err:?}"
        );
    }
}

/// Issue 17: the demo ran a 1 ms window on a 4 ms clock (and reported 251 kept per
/// second where it promised 1 per 1 ms); the sampler refuses such a window, and now so
/// does the demo, as a bad argument.
#[test]
fn a_window_below_the_clock_resolution_is_a_bad_argument() {
    use otel_rate_sampler::{Clock, MonotonicClock};

    let resolution = MonotonicClock::new().resolution();
    let window = resolution / 2;
    if window < Duration::from_micros(1) {
        eprintln!("skipped: this clock ({resolution:?}) serves every window");
        return;
    }
    let window = format!("{}us", window.as_micros());
    for extra in [&[][..], &["--adaptive"], &["--algorithm", "sliding-log"]] {
        let args = [
            &["--window", &window, "--limit", "1", "--duration", "1s"][..],
            extra,
        ]
        .concat();
        let output = run_demo(&args, &[]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(output.stdout.is_empty(), "{args:?}: nothing on stdout");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
        assert!(
            err.contains("is shorter than the clock's resolution"),
            "{args:?}: {err}"
        );
    }
    // A window of the clock's resolution runs.
    let exact = format!("{}us", resolution.as_micros());
    let output = run_demo(
        &["--window", &exact, "--limit", "1", "--duration", "100ms"],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn redis_without_the_feature_says_how_to_get_it() {
    if cfg!(feature = "redis") {
        return; // the demo has fleet mode: the fleet tests run it
    }
    let output = run_demo(&["--redis", "redis://127.0.0.1:1"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got {err:?}");
    assert!(err.contains("--features redis"), "{err}");
}

#[test]
fn no_collector_listening_ends_the_run_and_says_so() {
    // A port nothing listens on: bind one, then let it go.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let args = [&RUN[..], &["--otlp", &url]].concat();
    let output = run_demo(&args, &[("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no OTLP collector answered"),
        "{}",
        stderr(&output)
    );
    assert_eq!(summary(&output)["exported"], 0);
}

/// A listener that accepts every connection and never reads or answers.
fn silent_collector() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    url
}

#[test]
fn a_collector_that_never_answers_cannot_hang_the_run() {
    for protocol in ["grpc", "http"] {
        let url = silent_collector();
        let args = [&RUN[..], &["--otlp", &url, "--otlp-protocol", protocol]].concat();
        let output = run_demo(&args, &[("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")]);
        assert!(output.status.success(), "{protocol}: {}", stderr(&output));
        let err = stderr(&output);
        assert!(
            err.contains("no OTLP collector answered"),
            "{protocol}: {err}"
        );
        // The metrics' last export is bounded by the same deadline, and says so.
        if cfg!(feature = "metrics") {
            assert!(err.contains("demo: metrics: "), "{protocol}: {err}");
        }
        let summary = summary(&output);
        assert_eq!(summary["exported"], 0, "{protocol}: {summary}");
    }
}

#[test]
fn a_real_collector_acknowledges_every_sampled_trace() {
    let receiver = Receiver::start();
    for (protocol, url) in [
        ("grpc", receiver.grpc_endpoint()),
        ("http", receiver.http_endpoint()),
    ] {
        let before = receiver.traces().len() as u64;
        let args = [&RUN[..], &["--otlp", &url, "--otlp-protocol", protocol]].concat();
        let output = run_demo(&args, &[]);
        assert!(output.status.success(), "{protocol}: {}", stderr(&output));
        let summary = summary(&output);
        let exported = summary["exported"].as_u64().expect("exported");
        assert_eq!(
            summary["exported"], summary["sampled"],
            "{protocol}: {summary}"
        );
        assert_eq!(
            receiver.traces().len() as u64 - before,
            exported,
            "{protocol}: the receiver got what the demo says was acknowledged"
        );
    }
}

#[test]
fn adaptive_runs_export_every_span_with_its_th_to_a_real_collector() {
    let receiver = Receiver::start();
    let url = receiver.grpc_endpoint();
    let args = [&RUN[..], &["--adaptive", "--otlp", &url]].concat();
    let output = run_demo(&args, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    let traces = receiver.traces();
    assert_eq!(
        Some(traces.len() as u64),
        summary["exported"].as_u64(),
        "{summary}"
    );
    assert!(!traces.is_empty(), "{summary}");
    for (trace_id, spans) in traces {
        for span in spans {
            // Root and children alike: the children inherit the root's trace state.
            assert!(
                span.trace_state.starts_with("ot=th:"),
                "{trace_id}: {:?}",
                span.trace_state
            );
            if span.parent_span_id.is_none() {
                assert!(
                    matches!(
                        span.attr("sampler.type"),
                        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(t)) if t == "adaptive"
                    ),
                    "{trace_id}: {:?}",
                    span.attributes
                );
            }
        }
    }
}

/// The `otel_rate_sampler.decisions` points of roots (origin `none`) with sampling result
/// `result`, summed, in the last export in `requests` that has the metric (the counts
/// are cumulative: the last export holds the run's totals).
#[cfg(feature = "metrics")]
fn root_decisions(
    requests: &[opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest],
    result: &str,
) -> u64 {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
    use otel_rate_sampler::SamplerMetrics;

    let metric = requests
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .rfind(|m| m.name == SamplerMetrics::DECISIONS)
        .expect("the demo exported otel_rate_sampler.decisions");
    let Some(Data::Sum(sum)) = &metric.data else {
        panic!("{} is not a sum", metric.name);
    };
    let has = |attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key, want: &str| {
        attrs.iter().any(|kv| {
            kv.key == key
                && matches!(kv.value.as_ref().and_then(|v| v.value.as_ref()),
                            Some(Value::StringValue(s)) if s == want)
        })
    };
    sum.data_points
        .iter()
        .filter(|p| has(&p.attributes, SamplerMetrics::SAMPLING_RESULT, result))
        .filter(|p| has(&p.attributes, SamplerMetrics::PARENT_ORIGIN, "none"))
        .map(|p| match p.value {
            Some(Number::AsInt(n)) => u64::try_from(n).expect("a count"),
            other => panic!("not an integer point: {other:?}"),
        })
        .sum()
}

/// What the design guarantees: the demo's last metrics export is collected after every
/// decision, so when the demo says it was acknowledged, the last export the collector
/// took holds the summary's counts. Issue 17: once, on a loaded machine, the last point
/// held 24 of 29 kept roots. The demo let its gRPC runtime go as soon as the traces'
/// shutdown ended, while the metrics' shutdown (the same runtime) was still waiting on
/// a periodic export: the last export then failed, and the test, which did not look at
/// whether it was acknowledged, compared an earlier snapshot. A collector that takes
/// 300 ms per metrics request (longer than the 200 ms interval) makes that order
/// certain.
#[cfg(feature = "metrics")]
#[test]
fn the_sampler_metrics_reach_a_real_collector_and_match_the_summary() {
    let receiver = Receiver::start_with_metrics_delay(Duration::from_millis(300));
    for (protocol, url) in [
        ("grpc", receiver.grpc_endpoint()),
        ("http", receiver.http_endpoint()),
    ] {
        let before = receiver.metrics().len();
        let args = [&RUN[..], &["--otlp", &url, "--otlp-protocol", protocol]].concat();
        let output = run_demo(&args, &[("OTEL_METRIC_EXPORT_INTERVAL", "200")]);
        assert!(output.status.success(), "{protocol}: {}", stderr(&output));
        let summary = summary(&output);
        let offered = summary["offered"].as_u64().expect("offered");
        let kept = summary["sampled"].as_u64().expect("sampled");
        let decisions = &summary["decisions"];
        assert_eq!(decisions["kept"]["none"].as_u64(), Some(kept), "{summary}");
        assert_eq!(
            decisions["dropped"]["rate_limit"].as_u64(),
            Some(offered - kept),
            "{protocol}: every dropped root was refused by the limiter: {summary}"
        );
        let err = stderr(&output);
        assert!(
            err.contains("metrics: exported every 200ms")
                && err.contains("the last export was acknowledged"),
            "{protocol}: {err}"
        );

        let metrics = receiver.metrics();
        let run = &metrics[before..];
        assert_eq!(
            root_decisions(run, "RECORD_AND_SAMPLE"),
            kept,
            "{protocol}: {summary}"
        );
        assert_eq!(
            root_decisions(run, "DROP"),
            offered - kept,
            "{protocol}: {summary}"
        );
    }
}

#[test]
fn the_summary_counts_the_sampler_decisions() {
    let output = run_demo(&RUN, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let summary = summary(&output);
    let decisions = &summary["decisions"];
    let (offered, sampled) = (&summary["offered"], &summary["sampled"]);
    assert_eq!(decisions["kept"]["none"], *sampled, "{summary}");
    assert_eq!(
        decisions["dropped"]["rate_limit"].as_u64(),
        offered.as_u64().zip(sampled.as_u64()).map(|(o, s)| o - s),
        "{summary}"
    );
    // Each kept root has 3 children, each kept by its parent's decision.
    assert_eq!(
        decisions["kept"]["local"].as_u64(),
        sampled.as_u64().map(|s| 3 * s),
        "{summary}"
    );
    assert!(
        stderr(&output).contains("sampler decisions: kept"),
        "{}",
        stderr(&output)
    );
}

/// The kept traces of the whole windows, by tenth of the window (`kept_per_tenth`).
fn per_tenth(summary: &serde_json::Value) -> Vec<u64> {
    summary["kept_per_tenth"]
        .as_array()
        .unwrap_or_else(|| panic!("kept_per_tenth is an array: {summary}"))
        .iter()
        .map(|n| n.as_u64().expect("counts are whole numbers"))
        .collect()
}

/// The default sampler spreads what it keeps across the window: 50 per 500 ms offered
/// as fast as possible, by the end of tenth `i` of every whole window at most
/// `a(i) = 5·(i + 1)` are kept (the pacing schedule), so the whole windows' tenths hold
/// at most that many times the windows, plus one share for the demo's coarse clock
/// moving a stamp across a tenth's edge. That is what pacing guarantees whatever the
/// machine's load (a demo thread descheduled for a tenth catches up later, never
/// earlier); an even 10 % per tenth is what a quiet run shows, not a guarantee, and the
/// limiters' exact shares are tested on a manual clock (`tests/core/pacing.rs`).
/// `--unpaced` front-loads: most of what it keeps is in the first tenth.
#[test]
fn the_default_run_spreads_kept_traces_and_unpaced_front_loads_them() {
    let run = [
        "--duration",
        "2s",
        "--window",
        "500ms",
        "--limit",
        "50",
        "--threads",
        "2",
    ];
    let output = run_demo(&run, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let paced = summary(&output);
    assert_eq!(paced["paced"], true, "{paced}");
    let whole = paced["whole_windows"].as_u64().expect("whole_windows");
    assert!(whole >= 1, "{paced}");
    let tenths = per_tenth(&paced);
    let kept: u64 = tenths.iter().sum();
    assert!(kept >= 50, "{paced}");
    let mut by_then = 0;
    for (i, &t) in tenths.iter().enumerate() {
        by_then += t;
        let schedule = whole * (5 * (i as u64 + 1) + 5);
        assert!(
            by_then <= schedule,
            "ahead of the schedule at tenth {i} ({whole} whole windows): {tenths:?}"
        );
    }

    let mut unpaced_run = run.to_vec();
    unpaced_run.push("--unpaced");
    let output = run_demo(&unpaced_run, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let unpaced = summary(&output);
    assert_eq!(unpaced["paced"], false, "{unpaced}");
    let tenths = per_tenth(&unpaced);
    let kept: u64 = tenths.iter().sum();
    // Unpaced, a window's permits all go to the first calls in it; a window whose first
    // tenth both threads spent descheduled is the exception, not the rule.
    assert!(kept >= 50 && 2 * tenths[0] >= kept, "{unpaced}");
}

/// What the demo's clock can move across a tenth's edge at 100 per 1 s: a tenth's share
/// (one burst), and 2 roots.
const SHIFT: u64 = 12;

/// Kept roots per tenth of each 1 s window (Unix time), from the spans a receiver got.
fn roots_per_tenth(receiver: &Receiver) -> Vec<(u64, [u64; 10])> {
    let mut per_window: std::collections::BTreeMap<u64, [u64; 10]> = Default::default();
    for span in receiver
        .spans()
        .iter()
        .filter(|s| s.parent_span_id.is_none())
    {
        let (window, offset) = (
            span.start_unix_nanos / 1_000_000_000,
            span.start_unix_nanos % 1_000_000_000,
        );
        per_window.entry(window).or_default()[(offset / 100_000_000) as usize] += 1;
    }
    per_window.into_iter().collect()
}

/// The "done when", seen by a collector, for every algorithm: through `tracing`
/// and OTLP, each whole 1 s window of 100 keeps its roots on the schedule, and the
/// sliding kinds never replay a catch-up burst (the demo starts at whatever phase of a
/// window the clock is at; its windows are aligned on Unix time, as the spans' start
/// times are).
///
/// The bounds allow one tenth's share and 2 for the clocks ([`SHIFT`]): a span's start
/// time is the wall clock, read when `tracing` opens the span; its limiter's reading is
/// the demo's clock (monotonic, 4 ms resolution here, its origin mapped to Unix time at
/// start-up), read when the sampler decides. Under overload a tenth's share goes in a
/// burst at its first reading, which those few milliseconds can move into the tenth
/// (or window) before: a fixed window was seen as [20, 0, 10, ..]. A stalled run may
/// keep fewer and catch up later (CI saw [.., 1, 19, ..] once the demo was descheduled
/// for a tenth), as the design allows; it never gets ahead of the schedule, and a
/// sliding kind's tenth takes more than its 10 only while the window before and this
/// one hold at most 100. The replay this guards against keeps, after a window of 100,
/// the catch-up of a start past the first quarter of a window in one tenth (30 to 100)
/// in every window, beyond the slack; a start in the first fifth (about 20) or one that
/// kept little before its window ended is within it, left to the core tests' manual
/// clock.
#[test]
fn a_real_collector_sees_kept_traces_spread_across_each_window() {
    for algorithm in ["fixed", "sliding", "sliding-log", "bucketed"] {
        let receiver = Receiver::start();
        let url = receiver.grpc_endpoint();
        let args = [
            "--duration",
            "4s",
            "--window",
            "1s",
            "--limit",
            "100",
            "--threads",
            "2",
            "--algorithm",
            algorithm,
            "--via",
            "tracing",
            "--otlp",
            &url,
        ];
        let output = demo_run::run_demo(&args, &[], Duration::from_secs(30));
        assert!(output.status.success(), "{algorithm}: {}", stderr(&output));
        let summary = summary(&output);
        assert_eq!(summary["exported"], summary["sampled"], "{summary}");
        let windows = roots_per_tenth(&receiver);
        let sliding = matches!(algorithm, "sliding-log" | "bucketed");
        // The first and last windows are cut by the run's start and end; the sliding
        // kinds may keep less in the first whole one (after a catch-up at the start).
        let whole = &windows[1..windows.len().saturating_sub(1).max(1)];
        assert!(whole.len() >= 2, "{algorithm}: {windows:?}");
        let mut kept_from_second = 0;
        for (at, (window, tenths)) in whole.iter().enumerate() {
            let before: u64 = windows[at].1.iter().sum();
            let mut by_then = 0;
            for (i, t) in tenths.iter().enumerate() {
                by_then += t;
                assert!(
                    by_then <= 10 * (i as u64 + 1) + SHIFT,
                    "{algorithm}: window {window}: {tenths:?} is ahead of the schedule \
                     at tenth {i}"
                );
                assert!(
                    !sliding || *t <= 10 + SHIFT || before + by_then <= 100 + 2 * SHIFT,
                    "{algorithm}: window {window}: {tenths:?} caught up at tenth {i} \
                     after a window that kept {before}"
                );
            }
            if at > 0 {
                kept_from_second += by_then;
            }
        }
        // And the permits are used: 100 per window offered far more (the exact count is
        // the core tests'; here a stalled machine may leave some unused).
        let counted = whole.len() as u64 - 1;
        assert!(
            kept_from_second >= 80 * counted,
            "{algorithm}: {kept_from_second} kept in {counted} windows: {windows:?}"
        );
    }
}

/// `--via tracing` goes through `SkipDropped` and says so on its first line;
/// `--plain-layer` keeps the OpenTelemetry layer alone; both report the CPU time per
/// offered trace, and a real collector gets exactly the kept traces either way.
#[cfg(feature = "tracing")]
#[test]
fn via_tracing_goes_through_skip_dropped_and_says_so() {
    for (plain, says) in [
        (false, "through SkipDropped"),
        (true, "plain OpenTelemetry layer"),
    ] {
        let receiver = Receiver::start();
        let url = receiver.grpc_endpoint();
        let mut args = vec![
            "--duration",
            "2s",
            "--window",
            "1s",
            "--limit",
            "20",
            "--threads",
            "2",
            "--via",
            "tracing",
            "--otlp",
            &url,
        ];
        if plain {
            args.push("--plain-layer");
        }
        let output = demo_run::run_demo(&args, &[], Duration::from_secs(30));
        let err = stderr(&output);
        assert!(output.status.success(), "{err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(first.contains(says), "{first}");
        let summary = summary(&output);
        assert_eq!(summary["exported"], summary["sampled"], "{summary}");
        assert!(
            summary["cpu_ns_per_offered_trace"]
                .as_f64()
                .is_some_and(|ns| ns > 0.0),
            "{summary}"
        );
        let spans = receiver.spans();
        let roots = spans.iter().filter(|s| s.parent_span_id.is_none()).count();
        assert_eq!(Some(roots as u64), summary["sampled"].as_u64(), "{summary}");
    }
}

#[test]
fn plain_layer_applies_to_via_tracing_only() {
    let output = demo_run::run_demo(&["--plain-layer"], &[], Duration::from_secs(30));
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--plain-layer applies to --via tracing"));
}
