//! The demo as a user runs it: the built `examples/demo` binary, its exit codes, its one
//! JSON line, and its OTLP export against no collector, a collector that accepts
//! connections and never answers, and a real OTLP receiver.
//!
//! The binary is built (or found up to date) with the `cargo` that runs these tests, in
//! the same profile, so `cargo test --test demo_cli` works on a clean tree. The one time
//! bound below is a hang guard (a run of 1 s with a 1 s export timeout must not take
//! minutes), not a speed claim.

use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::receiver::Receiver;
use serde_json::Value;

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
/// Variables that would change where or how the demo exports.
const OTEL_VARS: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
];

/// The demo binary, built once per test process with this test's profile and features.
/// Its path is the one cargo reports, so a `--target` or `CARGO_TARGET_DIR` layout
/// needs no guessing.
fn demo_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let mut build = Command::new(env!("CARGO"));
        build.args([
            "build",
            "--quiet",
            "--example",
            "demo",
            "--message-format=json",
        ]);
        // This test runs from <target dir>/<profile>/deps/.
        let exe = std::env::current_exe().expect("test executable path");
        let profile = exe
            .parent()
            .and_then(|d| d.parent())
            .and_then(|d| d.file_name());
        if profile.is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        // The features this test was built with, so the library is not built again.
        let features: Vec<&str> = [
            ("config", cfg!(feature = "config")),
            ("reload", cfg!(feature = "reload")),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if !features.is_empty() {
            build.args(["--features", &features.join(",")]);
        }
        let output = build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build --example demo");
        assert!(output.status.success(), "cargo build --example demo failed");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "demo")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the demo executable")
    })
}

/// Runs the demo with `args` and `envs` (the OTLP variables cleared first), killing it if
/// it outlives [`HANG_GUARD`].
fn run_demo(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(demo_binary());
    command.args(args);
    for var in OTEL_VARS {
        command.env_remove(var);
    }
    command.envs(envs.iter().copied());
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let started = Instant::now();
    // Drain both pipes on threads, so a chatty demo never blocks on a full pipe.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the demo") {
            break status;
        }
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the demo {args:?} did not end within {HANG_GUARD:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// The demo's stdout: exactly one line, a JSON object.
fn summary(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stdout, got {stdout:?}");
    let summary: Value = serde_json::from_str(lines[0]).expect("the summary is JSON");
    assert!(summary.is_object(), "{summary}");
    summary
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
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
fn bad_flags_are_one_line_errors_with_exit_code_2() {
    let cases: [&[&str]; 11] = [
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
