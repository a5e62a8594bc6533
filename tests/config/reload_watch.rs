//! Hot reload through the file watcher, on the real file system with real symlinks: a
//! good edit swaps the rules, a bad one is reported and keeps the last good rules; a
//! Kubernetes ConfigMap swap done as the kubelet does it, a deploy tool's `current`
//! swap and a replaced directory are followed; a storm of saves gives a handful of
//! reloads. Every wait has a deadline: the tests wait for the watcher's callback, they
//! never sleep and hope.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{
    ConfigError, ConfigErrorKind, ConfigWatcher, ManualClock, RuleBasedSampler, SamplingConfig,
    WatchOptions,
};

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

/// The longest any wait for the watcher lasts before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);

/// A fresh directory under the system's temporary directory, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ors-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn limit(n: u32) -> String {
    format!("[default]\nlimit = {n}\npaced = false\n")
}

/// A sampler built from `path`, watched with a short quiet period, and its outcomes.
struct Followed {
    sampler: RuleBasedSampler<ManualClock>,
    clock: ManualClock,
    outcomes: mpsc::Receiver<Result<(), ConfigError>>,
    _watcher: ConfigWatcher,
}

impl Followed {
    fn new(path: &Path, options: WatchOptions) -> Self {
        let clock = ManualClock::new();
        let config = SamplingConfig::from_path(path).unwrap();
        let sampler = RuleBasedSampler::with_clock(&config, "svc", clock.clone()).unwrap();
        let (tx, outcomes) = mpsc::channel();
        let watcher = sampler
            .watch_with(path, options, move |outcome| {
                let _ = tx.send(outcome);
            })
            .unwrap();
        Followed {
            sampler,
            clock,
            outcomes,
            _watcher: watcher,
        }
    }

    fn quick(path: &Path) -> Self {
        Self::new(
            path,
            WatchOptions::new()
                .debounce(Duration::from_millis(50))
                .poll_interval(Duration::from_millis(500)),
        )
    }

    /// Waits for the next outcome, which must be a successful reload.
    fn reloaded(&self) {
        match self.outcomes.recv_timeout(DEADLINE) {
            Ok(Ok(())) => {}
            other => panic!("expected a reload, got {other:?}"),
        }
    }

    /// Waits for a successful reload, past the errors of a file missing meanwhile (its
    /// directory removed and made again).
    fn reloaded_past_missing(&self) {
        loop {
            match self.outcomes.recv_timeout(DEADLINE) {
                Ok(Ok(())) => return,
                Ok(Err(e)) if e.to_string().contains("cannot read the file") => {}
                other => panic!("expected a reload, got {other:?}"),
            }
        }
    }

    /// The limit in force: what a fresh window keeps.
    fn limit(&self) -> usize {
        self.clock.advance(Duration::from_secs(1));
        kept(&self.sampler, 1000)
    }
}

/// Updates a ConfigMap volume exactly as the kubelet's atomic writer does: the files
/// in a new timestamped directory, a new `..data_tmp` link to it renamed over `..data`,
/// then the old directory removed. The first call also makes the user-visible link.
pub(crate) fn kubelet_update(dir: &Path, version: u32, text: &str) {
    let stamp = format!("..2026_11_23_19_00_00.{version}");
    std::fs::create_dir(dir.join(&stamp)).unwrap();
    std::fs::write(dir.join(&stamp).join("sampling.toml"), text).unwrap();
    let old = std::fs::read_link(dir.join("..data")).ok();
    symlink(&stamp, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
    if std::fs::symlink_metadata(dir.join("sampling.toml")).is_err() {
        symlink("..data/sampling.toml", dir.join("sampling.toml")).unwrap();
    }
}

#[test]
fn a_kubernetes_configmap_swap_is_followed_swap_after_swap() {
    // On main: the watcher never saw the swap; the old rules stayed.
    let tmp = TempDir::new("k8s");
    kubelet_update(&tmp.0, 1, &limit(3));
    let f = Followed::quick(&tmp.0.join("sampling.toml"));
    assert_eq!(f.limit(), 3);
    for (version, n) in [(2, 7), (3, 11), (4, 2)] {
        kubelet_update(&tmp.0, version, &limit(n));
        f.reloaded();
        assert_eq!(f.limit(), n as usize, "ConfigMap version {version}");
    }
}

#[test]
fn a_deploy_tools_current_link_swap_is_followed() {
    let tmp = TempDir::new("current");
    let release = |n: u32, text: &str| {
        let dir = tmp.0.join(format!("releases/{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("sampling.toml"), text).unwrap();
        // `ln -sfn releases/N current`, atomically: a new link renamed over.
        symlink(format!("releases/{n}"), tmp.0.join("current.new")).unwrap();
        std::fs::rename(tmp.0.join("current.new"), tmp.0.join("current")).unwrap();
    };
    release(1, &limit(4));
    let f = Followed::quick(&tmp.0.join("current/sampling.toml"));
    release(2, &limit(9));
    f.reloaded();
    assert_eq!(f.limit(), 9);
    release(3, &limit(5));
    f.reloaded();
    assert_eq!(f.limit(), 5);
}

/// `tmp/conf/sampling.toml` (a limit of 3), followed with a quiet period long enough
/// to hold a directory's replacement in one burst, and polled every `poll`.
fn followed_in_a_directory(tmp: &TempDir, poll: Duration) -> (PathBuf, Followed) {
    let conf = tmp.0.join("conf");
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(conf.join("sampling.toml"), limit(3)).unwrap();
    let f = Followed::new(
        &conf.join("sampling.toml"),
        WatchOptions::new()
            .debounce(Duration::from_millis(300))
            .poll_interval(poll),
    );
    (conf, f)
}

#[test]
fn a_replaced_or_removed_directory_is_followed_once_it_is_back() {
    // On main: the watcher died silently with its directory.
    let tmp = TempDir::new("replaced");
    let (conf, f) = followed_in_a_directory(&tmp, Duration::from_millis(500));
    // Renamed away, and a new directory in its place.
    std::fs::rename(&conf, tmp.0.join("conf.old")).unwrap();
    let next = tmp.0.join("conf.next");
    std::fs::create_dir(&next).unwrap();
    std::fs::write(next.join("sampling.toml"), limit(8)).unwrap();
    std::fs::rename(&next, &conf).unwrap();
    f.reloaded();
    assert_eq!(f.limit(), 8);
    // Removed: reported once, the rules stay; recreated: followed again.
    std::fs::remove_dir_all(&conf).unwrap();
    match f.outcomes.recv_timeout(DEADLINE) {
        Ok(Err(e)) => assert_eq!(e.kind(), ConfigErrorKind::Io, "{e}"),
        other => panic!("expected the missing file reported, got {other:?}"),
    }
    assert_eq!(f.limit(), 8);
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(conf.join("sampling.toml"), limit(6)).unwrap();
    f.reloaded();
    assert_eq!(f.limit(), 6);
    let stats = f.sampler.stats();
    assert_eq!((stats.reloads.succeeded, stats.reloads.failed), (2, 1));
}

#[test]
fn two_hundred_rapid_saves_give_a_handful_of_reloads_and_no_false_errors() {
    // On main: 200 saves gave 95 false error callbacks and applied half-written files.
    let tmp = TempDir::new("storm");
    let path = tmp.0.join("sampling.toml");
    std::fs::write(&path, limit(1)).unwrap();
    // A quiet period long enough that no pause of a loaded machine between two writes
    // splits the storm.
    let f = Followed::new(
        &path,
        WatchOptions::new()
            .debounce(Duration::from_secs(1))
            .poll_interval(Duration::from_millis(500)),
    );
    for i in 2..=201u32 {
        let text = format!(
            "{}[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\nlimit = 1\n",
            limit(i)
        );
        if i % 2 == 0 {
            save(&path, &text);
        } else {
            // In place, in two writes: a half-written file between them.
            use std::io::Write;
            let mut file = std::fs::File::create(&path).unwrap();
            let (head, tail) = text.split_at(text.len() / 2);
            file.write_all(head.as_bytes()).unwrap();
            file.flush().unwrap();
            file.write_all(tail.as_bytes()).unwrap();
        }
    }
    f.reloaded();
    // Whatever else comes within a few quiet periods and polls.
    let until = Instant::now() + Duration::from_secs(3);
    let mut more = Vec::new();
    while let Ok(outcome) = f
        .outcomes
        .recv_timeout(until.saturating_duration_since(Instant::now()))
    {
        more.push(outcome);
    }
    assert!(more.iter().all(Result::is_ok), "false errors: {more:?}");
    assert!(more.len() <= 4, "{} reloads for one burst", more.len() + 1);
    assert_eq!(f.limit(), 201);
    assert_eq!(f.sampler.stats().reloads.failed, 0);
}

#[test]
fn touching_the_file_or_swapping_in_the_same_contents_reloads_nothing() {
    let tmp = TempDir::new("same");
    let path = tmp.0.join("sampling.toml");
    std::fs::write(&path, limit(3)).unwrap();
    let f = Followed::quick(&path);
    save(&path, &limit(3));
    save(&path, &limit(4));
    f.reloaded();
    assert_eq!(f.sampler.stats().reloads.succeeded, 1);
    assert_eq!(f.limit(), 4);
}

#[test]
fn configmap_swaps_in_a_row_checked_at_once_give_no_false_errors() {
    // With no quiet period every event is checked at once, so checks land between the
    // kubelet's steps, and a directory can vanish between resolving and watching it.
    let tmp = TempDir::new("k8s-storm");
    kubelet_update(&tmp.0, 1, &limit(1));
    let f = Followed::new(
        &tmp.0.join("sampling.toml"),
        WatchOptions::new().debounce(Duration::ZERO),
    );
    for version in 2..=30 {
        kubelet_update(&tmp.0, version, &limit(version));
    }
    let until = Instant::now() + DEADLINE;
    loop {
        match f
            .outcomes
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(Ok(())) if f.limit() == 30 => break,
            Ok(Ok(())) => {}
            other => panic!("expected reloads up to the last version, got {other:?}"),
        }
    }
    assert_eq!(f.sampler.stats().reloads.failed, 0);
}

#[test]
fn polling_alone_follows_a_configmap_swap_and_a_replaced_directory() {
    // The fallback that catches what notifications miss, alone (as on NFS).
    let tmp = TempDir::new("polled");
    kubelet_update(&tmp.0, 1, &limit(2));
    let f = Followed::new(
        &tmp.0.join("sampling.toml"),
        WatchOptions::new()
            .notifications(false)
            .poll_interval(Duration::from_millis(50)),
    );
    kubelet_update(&tmp.0, 2, &limit(9));
    f.reloaded();
    assert_eq!(f.limit(), 9);
    // The whole volume replaced by a new one with its own links.
    let next = TempDir::new("polled-next");
    kubelet_update(&next.0, 3, &limit(4));
    std::fs::rename(&tmp.0, tmp.0.with_extension("old")).unwrap();
    std::fs::rename(&next.0, &tmp.0).unwrap();
    let _ = std::fs::remove_dir_all(tmp.0.with_extension("old"));
    // A poll between the two renames rightly finds no file: that is reported, then the
    // new volume applied.
    loop {
        match f.outcomes.recv_timeout(DEADLINE) {
            Ok(Ok(())) => break,
            Ok(Err(e)) if e.kind() == ConfigErrorKind::Io => {}
            other => panic!("expected the new volume applied, got {other:?}"),
        }
    }
    assert_eq!(f.limit(), 4);
}

#[test]
fn after_a_directory_is_replaced_edits_are_seen_by_notification_again() {
    // On main the new directory was never watched (its path was, as the old one's):
    // edits after a replacement were seen only by the polling fallback. Here polling is
    // an hour away, so only notifications can deliver them.
    let tmp = TempDir::new("replaced-notify");
    let (conf, f) = followed_in_a_directory(&tmp, Duration::from_secs(3600));
    for (round, n) in [(1, 8), (2, 5)] {
        // Moved away, and a new directory in its place.
        let old = tmp.0.join(format!("conf.old{round}"));
        std::fs::rename(&conf, &old).unwrap();
        let next = tmp.0.join("conf.next");
        std::fs::create_dir(&next).unwrap();
        std::fs::write(next.join("sampling.toml"), limit(n)).unwrap();
        std::fs::rename(&next, &conf).unwrap();
        f.reloaded();
        assert_eq!(f.limit(), n as usize, "replacement {round}");
        // Edited in place in the new directory.
        save(&conf.join("sampling.toml"), &limit(n + 1));
        f.reloaded();
        assert_eq!(f.limit(), n as usize + 1, "edit after replacement {round}");
    }
}

#[test]
fn after_a_directory_is_deleted_and_made_again_at_once_edits_are_seen_by_notification() {
    // `rm -rf` then `mkdir`: on ext4 the new directory gets the old one's inode number,
    // so its identity looked unchanged and it was never watched again (the old watch
    // went with the old directory): edits after it came only by polling, an hour away
    // here.
    let tmp = TempDir::new("recreated-notify");
    let (conf, f) = followed_in_a_directory(&tmp, Duration::from_secs(3600));
    for (round, n) in [(1, 8), (2, 5)] {
        std::fs::remove_dir_all(&conf).unwrap();
        std::fs::create_dir(&conf).unwrap();
        std::fs::write(conf.join("sampling.toml"), limit(n)).unwrap();
        f.reloaded_past_missing();
        assert_eq!(f.limit(), n as usize, "recreated {round}");
        save(&conf.join("sampling.toml"), &limit(n + 1));
        f.reloaded();
        assert_eq!(f.limit(), n as usize + 1, "edit after recreation {round}");
    }
}

#[test]
fn a_callback_that_panics_is_caught_and_the_watcher_goes_on() {
    // On main the panic ended the watcher's thread silently: nothing was applied again.
    let tmp = TempDir::new("panicking");
    let path = tmp.0.join("sampling.toml");
    std::fs::write(&path, limit(3)).unwrap();
    let clock = ManualClock::new();
    let config = SamplingConfig::from_path(&path).unwrap();
    let sampler = RuleBasedSampler::with_clock(&config, "svc", clock.clone()).unwrap();
    let (tx, outcomes) = mpsc::channel();
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let _watcher = sampler
        .watch_with(
            &path,
            WatchOptions::new()
                .debounce(Duration::from_millis(50))
                .poll_interval(Duration::from_millis(500)),
            move |outcome| {
                if calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                    panic!("a callback bug");
                }
                let _ = tx.send(outcome);
            },
        )
        .unwrap();
    save(&path, &limit(5));
    // The first reload is applied, then its callback panics.
    let until = Instant::now() + DEADLINE;
    while sampler.stats().reloads.succeeded == 0 {
        assert!(Instant::now() < until, "the first edit was never applied");
        std::thread::sleep(Duration::from_millis(10));
    }
    save(&path, &limit(7));
    match outcomes.recv_timeout(DEADLINE) {
        Ok(Ok(())) => {}
        other => panic!("expected the second edit delivered, got {other:?}"),
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&sampler, 1000), 7);
}
