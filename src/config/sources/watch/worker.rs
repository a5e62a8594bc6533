//! The watcher's thread: notifications in, a quiet period, then one check that
//! re-resolves the path, re-arms the watches and reloads if the contents changed.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use super::resolve::{resolve, Resolved};
use super::{watch_error, WatchOptions};
use crate::clock::Clock;
use crate::config::error::ConfigError;
use crate::config::runtime::rule_based::RuleBasedSampler;

/// What the worker is told.
pub(super) enum Message {
    /// A notification from the backend.
    Event(notify::Result<notify::Event>),
    /// The [`ConfigWatcher`](super::ConfigWatcher) was dropped.
    Stop,
}

/// How many times a check resolves the path again when a directory vanished between
/// resolving and watching it.
const MAX_RESOLVES: usize = 5;

/// A file never quiet is still read every this many quiet periods.
const MAX_DELAY_PERIODS: u32 = 10;

type Callback = Box<dyn Fn(Result<(), ConfigError>) + Send>;

/// Why a check runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// A burst of events has been quiet for the quiet period.
    Quiet,
    /// A burst has lasted [`MAX_DELAY_PERIODS`] quiet periods and goes on.
    Forced,
    /// The polling fallback.
    Poll,
}

/// The file as last seen: cheap metadata (to skip reading on a poll) and a digest of
/// what reading it gave (to reload only on a change).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stat {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    identity: (u64, u64),
}

pub(super) struct Worker<C> {
    sampler: RuleBasedSampler<C>,
    path: PathBuf,
    options: WatchOptions,
    on_reload: Callback,
    tx: mpsc::Sender<Message>,
    backend: Option<RecommendedWatcher>,
    /// The directories watched now, with their identity when they were armed: one
    /// replaced by another of the same path (moved away and recreated) is armed again.
    armed: BTreeMap<PathBuf, Option<DirIdentity>>,
    resolved: Resolved,
    stat: Option<(PathBuf, Stat)>,
    /// A digest of the contents last seen (`None`: unreadable).
    seen: Option<u64>,
    /// The last watcher error reported, not to repeat it on every check.
    last_error: Option<String>,
}

impl<C: Clock + Clone + Send + Sync + 'static> Worker<C> {
    pub(super) fn new(
        sampler: RuleBasedSampler<C>,
        path: PathBuf,
        options: WatchOptions,
        on_reload: Callback,
        tx: mpsc::Sender<Message>,
        resolved: Resolved,
    ) -> Self {
        let first = read(&resolved.file);
        Self {
            sampler,
            path,
            options,
            on_reload,
            tx,
            backend: None,
            armed: BTreeMap::new(),
            stat: first.map(|(stat, _)| (resolved.file.clone(), stat)),
            seen: first.map(|(_, digest)| digest),
            resolved,
            last_error: None,
        }
    }

    pub(super) fn run(mut self, rx: mpsc::Receiver<Message>) {
        let tx = self.tx.clone();
        if self.options.uses_notifications() {
            match notify::recommended_watcher(move |event| {
                // The worker is gone only once the ConfigWatcher is dropped.
                let _ = tx.send(Message::Event(event));
            }) {
                Ok(backend) => self.backend = Some(backend),
                Err(e) => self.report(format!(
                    "cannot start file notifications ({e}); following the file by polling"
                )),
            }
        }
        self.arm();
        // What changed between the first read (when the watch was asked for) and the
        // watches being armed sent no event: look once now.
        self.check(Check::Poll);
        let debounce = self.options.debounce_period();
        let poll = self
            .options
            .polling_interval()
            .max(Duration::from_millis(1));
        let max_delay = debounce.saturating_mul(MAX_DELAY_PERIODS);
        // (first event of the burst, last event): a check is due after the quiet period.
        let mut burst: Option<(Instant, Instant)> = None;
        let mut next_poll = Instant::now() + poll;
        loop {
            let now = Instant::now();
            let due = burst.map(|(first, last)| (last + debounce).min(first + max_delay));
            if due.is_some_and(|due| now >= due) {
                let quiet = burst.is_some_and(|(_, last)| now >= last + debounce);
                burst = None;
                self.check(if quiet { Check::Quiet } else { Check::Forced });
                continue;
            }
            if now >= next_poll {
                next_poll = now + poll;
                self.check(Check::Poll);
                continue;
            }
            let wake = due.map_or(next_poll, |due| due.min(next_poll));
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(Message::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(Message::Event(Ok(event))) => {
                    if self.relevant(&event) {
                        let now = Instant::now();
                        burst = Some((burst.map_or(now, |(first, _)| first), now));
                    }
                }
                Ok(Message::Event(Err(e))) => {
                    self.report(format!("the file watcher failed: {e}"));
                    // Re-arm and re-read after the quiet period.
                    let now = Instant::now();
                    burst = Some((burst.map_or(now, |(first, _)| first), now));
                }
            }
        }
    }

    /// Whether `event` may change what the path names or holds: it touches a path the
    /// lookup went through, or a directory above one (removed, renamed), or it asks for
    /// a rescan.
    fn relevant(&self, event: &notify::Event) -> bool {
        event.need_rescan()
            || event.paths.is_empty()
            || event.paths.iter().any(|p| {
                self.resolved
                    .traversed
                    .iter()
                    .any(|t| t.starts_with(p) || p.starts_with(t))
            })
    }

    /// Re-resolves the path, re-arms the watches, and reloads if the file's contents
    /// changed (a file that became unreadable counts as a change, reported once). A poll
    /// reads the file only if its metadata changed; a check forced in the middle of a
    /// burst applies the file only if it loads, and otherwise leaves it to the burst's
    /// quiet check (it may be half-written).
    fn check(&mut self, kind: Check) {
        match resolve(&self.path) {
            Ok(resolved) => self.resolved = resolved,
            Err(e) => {
                self.report(format!("cannot resolve the path: {e}"));
                return;
            }
        }
        // A directory can vanish between resolving and watching (the kubelet removes
        // the old `..2026_…` directory right after the swap): resolve again.
        for _ in 0..MAX_RESOLVES {
            if self.arm() {
                break;
            }
            match resolve(&self.path) {
                Ok(resolved) => self.resolved = resolved,
                Err(e) => {
                    self.report(format!("cannot resolve the path: {e}"));
                    return;
                }
            }
        }
        let file = self.resolved.file.clone();
        if kind == Check::Poll {
            let stat = stat(&file).map(|s| (file.clone(), s));
            if stat.is_some() && stat == self.stat {
                return;
            }
        }
        let seen = read(&file);
        self.stat = seen.map(|(stat, _)| (file, stat));
        let digest = seen.map(|(_, digest)| digest);
        if digest == self.seen {
            return;
        }
        let outcome = match kind {
            Check::Forced => match self.sampler.load_for_reload(&self.path) {
                Ok(config) => self.sampler.reload(&config),
                Err(_) => return,
            },
            Check::Quiet | Check::Poll => self.sampler.reload_from_path(&self.path),
        };
        self.seen = digest;
        match &outcome {
            Ok(()) => {
                self.last_error = None;
                crate::config::log::info(&format!(
                    "reloaded the sampling rules from {}",
                    self.path.display()
                ));
            }
            Err(e) => {
                self.last_error = Some(e.to_string());
                crate::config::log::warn(&format!("{e}; the rules in force stay"));
            }
        }
        self.deliver(outcome);
    }

    /// Gives `outcome` to the callback. A callback that panics is reported through
    /// `tracing` and the watcher goes on: the next change is applied and delivered.
    fn deliver(&self, outcome: Result<(), ConfigError>) {
        let called = catch_unwind(AssertUnwindSafe(|| (self.on_reload)(outcome)));
        if let Err(panic) = called {
            let why = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic");
            crate::config::log::warn(&format!(
                "the reload callback for {} panicked ({why}); the watcher goes on",
                self.path.display()
            ));
        }
    }

    /// Watches the directories the path's lookup depends on (for one that does not
    /// exist, its nearest existing ancestor, to see it come back), and stops watching
    /// the ones it no longer depends on. Returns `false` if one vanished meanwhile (the
    /// lookup is stale); other failures are reported, and polling covers them.
    fn arm(&mut self) -> bool {
        let Some(backend) = self.backend.as_mut() else {
            return true;
        };
        let mut wanted: BTreeSet<PathBuf> = self
            .resolved
            .dirs
            .iter()
            .filter_map(|d| existing(d))
            .collect();
        // The file's directory's parent too: it sees the directory renamed or removed.
        if let Some(parent) = self.resolved.file.parent().and_then(Path::parent) {
            wanted.extend(existing(parent));
        }
        let mut armed = BTreeMap::new();
        for (dir, identity) in std::mem::take(&mut self.armed) {
            let same = identity == dir_identity(&dir);
            if same && wanted.contains(&dir) {
                armed.insert(dir, identity);
            } else {
                // Gone, or replaced: a watch follows the directory it was set on, not
                // the path. It may have been removed with its directory already.
                let _ = backend.unwatch(&dir);
            }
        }
        let mut failed = Vec::new();
        let mut vanished = false;
        for dir in wanted {
            if armed.contains_key(&dir) {
                continue;
            }
            let identity = dir_identity(&dir);
            match backend.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    armed.insert(dir, identity);
                }
                Err(_) if !dir.is_dir() => vanished = true,
                // Tried again on the next check.
                Err(e) => failed.push(format!("cannot watch {}: {e}", dir.display())),
            }
        }
        self.armed = armed;
        if vanished {
            return false;
        }
        if !failed.is_empty() {
            self.report(format!("{}; following by polling", failed.join("; ")));
        }
        true
    }

    /// Reports a watcher error to the callback and the log, unless it is the last one
    /// reported.
    fn report(&mut self, message: String) {
        if self.last_error.as_deref() == Some(message.as_str()) {
            return;
        }
        let error = watch_error(&self.path, message.clone(), WatchFailure(message.clone()));
        crate::config::log::warn(&error.to_string());
        self.last_error = Some(message);
        self.deliver(Err(error));
    }
}

/// `dir`, or its nearest existing ancestor.
fn existing(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| d.is_dir()).map(Path::to_path_buf)
}

/// What tells a directory from another at the same path (device and inode on Unix).
type DirIdentity = (u64, u64);

/// The identity of the directory `dir` (`None` where the platform has none to give: a
/// directory there is armed once per path).
fn dir_identity(dir: &Path) -> Option<DirIdentity> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

fn stat(file: &Path) -> Option<Stat> {
    let meta = std::fs::metadata(file).ok()?;
    #[cfg(unix)]
    let identity = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    Some(Stat {
        len: meta.len(),
        modified: meta.modified().ok(),
        #[cfg(unix)]
        identity,
    })
}

/// The file's metadata and a digest of its contents, or `None` if it cannot be read.
fn read(file: &Path) -> Option<(Stat, u64)> {
    let stat = stat(file)?;
    let bytes = std::fs::read(file).ok()?;
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some((stat, hasher.finish()))
}

/// The source of a watcher error.
#[derive(Debug)]
struct WatchFailure(String);

impl std::fmt::Display for WatchFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WatchFailure {}
