//! The demo follows a Kubernetes-style ConfigMap swap while it runs: `--config FILE
//! --service NAME --watch`, the swap done as the kubelet does it once two windows have
//! closed under the first limit, one line per reload, the summary counting them, and the windows after
//! the reload kept under the new limit. The demo is a real process; every wait has a
//! deadline.

use std::process::Output;
use std::sync::mpsc;
use std::time::Duration;

use crate::demo_run::{demo_binary, run_demo_with, stderr, summary};
use crate::reload_watch::{kubelet_update, TempDir};

/// How long the demo may take to say it watches, and then to report the reload.
const DEADLINE: Duration = Duration::from_secs(60);

fn shop(limit: u32) -> String {
    format!(
        "[default]\nlimit = 1\nwindow = \"500ms\"\n[[service]]\nname = \"shop\"\nlimit = {limit}\nwindow = \"500ms\"\n"
    )
}

/// The demo run with `--config file --service shop --watch` and `more` on a thread of its
/// own (built first, before any deadline), and the lines of its stderr as they come.
pub(crate) fn spawn_watching(
    file: &std::path::Path,
    more: &str,
) -> (std::thread::JoinHandle<Output>, mpsc::Receiver<String>) {
    demo_binary();
    let (tx, lines) = mpsc::channel::<String>();
    let file = file.display().to_string();
    let args: Vec<String> = ["--config", &file, "--service", "shop", "--watch"]
        .into_iter()
        .chain(more.split_whitespace())
        .map(str::to_owned)
        .collect();
    let demo = std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_demo_with(&args, &[], Duration::from_secs(120), move |line| {
            let _ = tx.send(line.to_owned());
        })
    });
    (demo, lines)
}

#[test]
fn the_demo_follows_a_configmap_swap_while_it_runs() {
    let tmp = TempDir::new("demo-k8s");
    kubelet_update(&tmp.0, 1, &shop(4));
    let file = tmp.0.join("sampling.toml");
    let (demo, lines) = spawn_watching(&file, "--threads 2 --rate 2000 --duration 5s");
    let wait_for = |what: &str| loop {
        match lines.recv_timeout(DEADLINE) {
            Ok(line) if line.contains(what) => break line,
            Ok(_) => {}
            Err(e) => panic!("no line with {what:?} from the demo: {e}"),
        }
    };
    wait_for("watching");
    // Once two windows closed under the first limit.
    wait_for("window 1 @");
    kubelet_update(&tmp.0, 2, &shop(12));
    let reload = wait_for("reload 1:");
    assert!(
        reload.contains("applied") && reload.contains("limit now 12 per 500ms"),
        "{reload}"
    );
    let output = demo.join().unwrap();
    let err = stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(!err.contains("WARNING"), "{err}");
    let s = summary(&output);
    assert_eq!(s["reloads"]["applied"], 1, "{s}");
    assert_eq!(s["reloads"]["failed"], 0, "{s}");
    assert_eq!((&s["service"], &s["limit"]), (&"shop".into(), &4.into()));
    let kept: Vec<u64> = s["per_window"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .collect();
    // The first two windows kept at most the first limit; some later one more than it,
    // and none more than the new one.
    assert!(kept[..2].iter().all(|&k| k <= 4), "{s}");
    assert!(
        kept.iter().any(|&k| k > 4),
        "the new limit never applied: {s}"
    );
    assert!(kept.iter().all(|&k| k <= 12), "{s}");
}
