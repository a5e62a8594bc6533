//! The demo binary as the tests run it: built once per test process with the test's
//! profile and features, run with a hang guard, its one JSON line parsed. Shared by the
//! `otlp` tests (`demo_cli.rs`), the `fleet` tests (`demo.rs`) and the `config` tests
//! (`demo_watch.rs`).

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Variables that would change where or how the demo exports.
const OTEL_VARS: [&str; 7] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_METRIC_EXPORT_INTERVAL",
];

/// The demo binary, built once per test process with this test's profile and features.
/// Its path is the one cargo reports, so a `--target` or `CARGO_TARGET_DIR` layout
/// needs no guessing.
pub(crate) fn demo_binary() -> &'static PathBuf {
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
        // The features this test was built with, so the library is not built again
        // (and the demo has fleet mode when the test has the redis feature, and exports
        // the sampler's metrics when it has the metrics feature).
        let features: Vec<&str> = [
            ("config", cfg!(feature = "config")),
            ("yaml", cfg!(feature = "yaml")),
            ("composable", cfg!(feature = "composable")),
            ("reload", cfg!(feature = "reload")),
            ("cli", cfg!(feature = "cli")),
            ("redis", cfg!(feature = "redis")),
            ("metrics", cfg!(feature = "metrics")),
            ("tracing", cfg!(feature = "tracing")),
            // Not used by the demo, but with it `--all-features` builds the demo from the
            // library `cargo test` built already, instead of the library again.
            ("jaeger-remote", cfg!(feature = "jaeger-remote")),
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
/// it outlives `hang_guard` (far above the run's length: only a hang gets near it).
pub(crate) fn run_demo(args: &[&str], envs: &[(&str, &str)], hang_guard: Duration) -> Output {
    run_demo_with(args, envs, hang_guard, |_| {})
}

/// [`run_demo`], handing each line of the demo's stderr to `on_stderr_line` as it comes
/// (so a test can act while the demo runs).
pub(crate) fn run_demo_with(
    args: &[&str],
    envs: &[(&str, &str)],
    hang_guard: Duration,
    on_stderr_line: impl FnMut(&str) + Send + 'static,
) -> Output {
    spawn_demo(args, envs, on_stderr_line).wait(hang_guard)
}

/// A demo started by [`spawn_demo`], its pipes drained on threads.
pub(crate) struct RunningDemo {
    child: Child,
    args: Vec<String>,
    started: Instant,
    out: thread::JoinHandle<Vec<u8>>,
    err: thread::JoinHandle<Vec<u8>>,
}

/// Starts the demo with `args` and `envs` (the OTLP variables cleared first), handing
/// each line of its stderr to `on_stderr_line` as it comes.
pub(crate) fn spawn_demo(
    args: &[&str],
    envs: &[(&str, &str)],
    mut on_stderr_line: impl FnMut(&str) + Send + 'static,
) -> RunningDemo {
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
    let stderr = child.stderr.take().expect("stderr");
    let out = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = thread::spawn(move || {
        let mut buf = Vec::new();
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            on_stderr_line(&String::from_utf8_lossy(&line));
            buf.append(&mut line);
        }
        buf
    });
    RunningDemo {
        child,
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        started,
        out,
        err,
    }
}

impl RunningDemo {
    /// Waits for the demo to end, killing it (and failing) if it outlives `hang_guard`
    /// (far above the run's length: only a hang gets near it).
    pub(crate) fn wait(mut self, hang_guard: Duration) -> Output {
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the demo") {
                break status;
            }
            if self.started.elapsed() > hang_guard {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the demo {:?} did not end within {hang_guard:?}", self.args);
            }
            thread::sleep(Duration::from_millis(20));
        };
        self.output(status)
    }

    /// Kills the demo (SIGKILL on Unix: it reports nothing more) and returns what it
    /// wrote until then.
    pub(crate) fn kill(mut self) -> Output {
        self.child.kill().expect("kill the demo");
        let status = self.child.wait().expect("wait for the killed demo");
        self.output(status)
    }

    fn output(self, status: ExitStatus) -> Output {
        Output {
            status,
            stdout: self.out.join().expect("stdout reader"),
            stderr: self.err.join().expect("stderr reader"),
        }
    }
}

/// The demo's stdout: exactly one line, a JSON object.
pub(crate) fn summary(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stdout, got {stdout:?}");
    let summary: Value = serde_json::from_str(lines[0]).expect("the summary is JSON");
    assert!(summary.is_object(), "{summary}");
    summary
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
