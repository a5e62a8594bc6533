//! The demo with `--config`: a `[default]` unpaced limit of 10 per 1 s under a paced
//! cap of 10 per 1 s, offered 20 per second. The cap refuses every other span the rule
//! admitted; before, the rule's permit was spent on each, and every whole window kept
//! 5. The rule now gives back the permit of a span the cap refuses: every whole window
//! keeps 9 or 10 (a window offered its 20 a little late can keep 9), none more than 10.
//! The demo is a real process, on the real clock.

use std::time::Duration;

use crate::demo_run::{run_demo, stderr, summary};
use crate::reload_watch::TempDir;

#[test]
fn an_unpaced_default_under_a_paced_cap_keeps_the_cap_in_every_whole_window() {
    let tmp = TempDir::new("demo-cap");
    let file = tmp.0.join("sampling.toml");
    std::fs::write(
        &file,
        "[default]\nlimit = 10\nwindow = \"1s\"\npaced = false\ncap = { limit = 10, window = \"1s\" }\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let args = [
        "--config",
        &file,
        "--service",
        "shop",
        "--rate",
        "20",
        "--duration",
        "5s",
    ];
    let output = run_demo(&args, &[], Duration::from_secs(120));
    let err = stderr(&output);
    assert!(output.status.success(), "{err}");
    let s = summary(&output);
    assert!(s["max_per_window"].as_u64().unwrap() <= 10, "{s}");
    // Every window offered more than 10 (its 20) and whole in the run.
    assert!(s["full_windows"].as_u64().unwrap() >= 3, "{s}");
    assert!(s["min_full_window"].as_u64().unwrap() >= 9, "{s}");
}
