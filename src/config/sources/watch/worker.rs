//! The watcher's thread: notifications in, a quiet period, then one check that
//! re-resolves the path, re-arms the watches and reloads once the contents changed and
//! stayed the same for a settle period (see `snapshot`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::EventKind;

use super::arm::{Arming, Watches};
use super::options::WatchOptions;
use super::resolve::{resolve, Resolved};
use super::snapshot::{stat, Pending, Snapshot, Stat};
use crate::clock::Clock;
use crate::config::error::{ConfigError, ConfigErrorKind};
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
    /// A changed version read a settle period ago is read again.
    Settle,
}

pub(super) struct Worker<C> {
    sampler: RuleBasedSampler<C>,
    path: PathBuf,
    options: WatchOptions,
    on_reload: Callback,
    tx: mpsc::Sender<Message>,
    watches: Watches,
    resolved: Resolved,
    /// The file's metadata as last read: a poll reads it again only if this changed.
    stat: Option<(PathBuf, Stat)>,
    /// A digest of the contents last applied or refused (`None`: unreadable).
    seen: Option<u64>,
    /// A changed version read, not applied until it is read again unchanged a settle
    /// period later; dropped by a write notification on the file.
    pending: Option<Pending>,
    /// The burst of events going on: (first event, last event).
    burst: Option<(Instant, Instant)>,
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
        let first = Snapshot::read(&resolved.file);
        Self {
            sampler,
            path,
            options,
            on_reload,
            tx,
            watches: Watches::default(),
            stat: first.as_ref().map(|s| (resolved.file.clone(), s.stat)),
            seen: first.map(|s| s.digest),
            pending: None,
            burst: None,
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
                Ok(backend) => self.watches.start(backend),
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
        let mut next_poll = Instant::now() + poll;
        loop {
            // Every event already delivered counts before a check is due: a worker
            // descheduled past a quiet period must not take a burst still going on for
            // a quiet one.
            loop {
                match rx.try_recv() {
                    Ok(Message::Event(event)) => self.take(event),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Ok(Message::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            let now = Instant::now();
            let burst_due = self
                .burst
                .map(|(first, last)| (last + debounce).min(first + max_delay));
            if burst_due.is_some_and(|due| now >= due) {
                let quiet = self.burst.is_some_and(|(_, last)| now >= last + debounce);
                self.burst = None;
                self.check(if quiet { Check::Quiet } else { Check::Forced });
                continue;
            }
            let settle_due = self.pending.as_ref().map(|p| p.due(debounce));
            if settle_due.is_some_and(|due| now >= due) {
                self.check(Check::Settle);
                continue;
            }
            if now >= next_poll {
                next_poll = now + poll;
                self.check(Check::Poll);
                continue;
            }
            let wake = [burst_due, settle_due]
                .into_iter()
                .flatten()
                .fold(next_poll, Instant::min);
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(Message::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(Message::Event(event)) => self.take(event),
            }
        }
    }

    /// Takes a notification: one that may change what the path names or holds starts
    /// or extends a burst, and one on the file (or a link to it) drops the version
    /// pending; a failed backend is reported, and the path re-armed and re-read after
    /// the quiet period.
    fn take(&mut self, event: notify::Result<notify::Event>) {
        let now = Instant::now();
        match event {
            Ok(event) if !self.relevant(&event) => return,
            Ok(event) => {
                if matches!(event.kind, EventKind::Create(_) | EventKind::Remove(_)) {
                    event.paths.iter().for_each(|p| self.watches.rearm(p));
                }
                if self.on_the_file(&event) {
                    self.pending = None;
                }
            }
            Err(e) => {
                self.report(format!("the file watcher failed: {e}"));
                self.pending = None;
            }
        }
        self.burst = Some((self.burst.map_or(now, |(first, _)| first), now));
    }

    /// Whether `event` may change what the path names or holds: it touches a path the
    /// lookup went through, or a directory above one (removed, renamed), or it asks for
    /// a rescan. Reads (the watcher's own among them) change nothing.
    fn relevant(&self, event: &notify::Event) -> bool {
        if is_read(event) {
            return false;
        }
        event.need_rescan()
            || event.paths.is_empty()
            || event.paths.iter().any(|p| {
                self.resolved
                    .traversed
                    .iter()
                    .any(|t| t.starts_with(p) || p.starts_with(t))
            })
    }

    /// Whether relevant `event` may have written what the path names: it names the
    /// file, a link the lookup went through or a directory on the way (not another file
    /// beside them), or asks for a rescan.
    fn on_the_file(&self, event: &notify::Event) -> bool {
        event.need_rescan()
            || event.paths.is_empty()
            || event
                .paths
                .iter()
                .any(|p| self.resolved.traversed.contains(p))
    }

    /// Re-resolves the path, re-arms the watches, and reads the file if it may have
    /// changed (on a poll: if its metadata changed, or a version is pending). A changed
    /// version is applied once read unchanged a settle period (the quiet period) after
    /// its first read, with no write notification on the file between (see
    /// `snapshot`). A file that became unreadable counts as a change, reported once.
    /// While a burst goes on, a version that does not load (or an unreadable file) is
    /// left to the check after the burst: it may be half-written.
    fn check(&mut self, kind: Check) {
        let pending = self.pending.take();
        if !self.follow() {
            return;
        }
        let file = self.resolved.file.clone();
        if kind == Check::Poll && pending.is_none() {
            let stat = stat(&file).map(|s| (file.clone(), s));
            if stat.is_some() && stat == self.stat {
                return;
            }
        }
        let in_burst = kind == Check::Forced || self.burst.is_some();
        let now = Instant::now();
        let Some(snapshot) = Snapshot::read(&file) else {
            self.stat = None;
            if self.seen.is_some() && !in_burst {
                self.seen = None;
                let outcome = self.sampler.reload_from_path(&self.path);
                self.conclude(outcome);
            }
            return;
        };
        self.stat = Some((file, snapshot.stat));
        if Some(snapshot.digest) == self.seen {
            return;
        }
        let settle = self.options.debounce_period();
        let settled = match Pending::next(pending, snapshot, now, settle) {
            Ok(settled) => settled,
            Err(pending) => {
                self.pending = Some(pending);
                return;
            }
        };
        let digest = settled.digest;
        let outcome = match self.sampler.load_read_for_reload(&self.path, settled.bytes) {
            Ok(config) => self.sampler.reload(&config),
            Err(_) if in_burst => return,
            Err(e) => {
                self.sampler.count_reload(false);
                Err(e)
            }
        };
        self.seen = Some(digest);
        self.conclude(outcome);
    }

    /// Resolves the path again and re-arms the watches on what it goes through; `false`
    /// (reported) if it cannot be resolved.
    fn follow(&mut self) -> bool {
        match resolve(&self.path) {
            Ok(resolved) => self.resolved = resolved,
            Err(e) => {
                self.report(format!("cannot resolve the path: {e}"));
                return false;
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
                    return false;
                }
            }
        }
        true
    }

    /// Logs a reload's `outcome` and gives it to the callback.
    fn conclude(&mut self, outcome: Result<(), ConfigError>) {
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

    /// Arms the watches on what the path now goes through (see [`Watches::arm`]):
    /// `false` if a directory vanished meanwhile (the lookup is stale); other failures
    /// are reported, and polling covers them.
    fn arm(&mut self) -> bool {
        match self.watches.arm(&self.resolved) {
            Arming::Done => true,
            Arming::Vanished => false,
            Arming::Failed(why) => {
                self.report(format!("{why}; following by polling"));
                true
            }
        }
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

/// Whether `event` only reads: an open, a read, a close without a write (the watcher's
/// own reads among them). A close after a write is a write's end.
fn is_read(event: &notify::Event) -> bool {
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => false,
        EventKind::Access(_) => true,
        _ => false,
    }
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

/// A watcher error about `path`, of kind [`Io`](ConfigErrorKind::Io).
pub(super) fn watch_error(
    path: &Path,
    message: String,
    source: impl std::error::Error + Send + Sync + 'static,
) -> ConfigError {
    ConfigErrorKind::Io
        .error(&path.display().to_string(), message)
        .with_source(source)
}
