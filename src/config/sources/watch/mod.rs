//! Hot reload: watch a rule file, through every symlink to it, and swap a sampler's
//! rules when what it names changes.

mod arm;
mod options;
mod resolve;
mod snapshot;
mod worker;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::clock::Clock;
use crate::config::error::ConfigError;
use crate::config::runtime::rule_based::RuleBasedSampler;
pub use options::WatchOptions;
use worker::watch_error;

/// Keeps a rule file watched; dropping it stops the watching (it waits for a reload in
/// progress, and so for the callback, to return).
///
/// Made by [`RuleBasedSampler::watch`] and [`RuleBasedSampler::watch_with`].
///
/// # What it follows
///
/// The path is resolved through every symlink in it, component by component, and the
/// directory of each link is watched as well as the file's, and re-resolved on any
/// event there. So all these are seen:
///
/// * an editor's save (write a new file, rename it over the old one), or a write in
///   place;
/// * a Kubernetes ConfigMap update: `sampling.toml -> ..data/sampling.toml`, `..data ->
///   ..2026_11_23_…`, swapped by renaming a new `..data` link over the old one and
///   removing the old directory;
/// * a deploy tool's `current -> releases/N` swap;
/// * the directory removed, renamed or recreated: the watches are re-armed on what
///   exists (the nearest existing ancestor meanwhile), and polling every
///   [`poll_interval`](WatchOptions::poll_interval) catches what notifications miss.
///
/// # What it applies
///
/// After a quiet period ([`debounce`](WatchOptions::debounce)), the file is read; if its
/// contents differ from the last ones seen, they are read again a quiet period later
/// and, only if the size, modification time, identity and contents are the same on both
/// reads and no write notification touched the file between them, loaded and, only if
/// they parse and validate, applied (as [`RuleBasedSampler::reload_from_path`] does,
/// from the bytes read). So a file still being written is never applied, also when the
/// check is forced during a long burst of saves or made by polling: only a state the
/// file kept for a whole quiet period is (a writer that stops that long in the middle
/// of a file cannot be told from one that finished). The bound: once the writes stop,
/// the last version is applied within two quiet periods (a polling interval and a
/// quiet period where no notification comes), plus the time to read and build it.
/// Unchanged contents (a touch, a swap to identical contents, the same file seen twice)
/// cause no reload and no callback. The contents when watching starts are taken as the
/// ones in force.
///
/// # What it reports
///
/// The callback gets each reload's outcome: `Ok(())`, or the file's [`ConfigError`]
/// (the last good rules stay in force); a file that becomes unreadable or missing,
/// once until it changes again; and every error of the watcher itself (a notification
/// backend that failed, a directory that cannot be watched), as a [`ConfigError`] of
/// kind [`Io`](crate::ConfigErrorKind::Io), after which it keeps going by polling.
#[must_use = "dropping the ConfigWatcher stops the watching"]
pub struct ConfigWatcher {
    stop: mpsc::Sender<worker::Message>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigWatcher")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        // The worker may have stopped already (it never does on its own).
        let _ = self.stop.send(worker::Message::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// [`RuleBasedSampler::watch_with`]: watches `path` on a thread of its own, reloading
/// `sampler` each time what it names changes.
pub(crate) fn watch<C: Clock + Clone + Send + Sync + 'static>(
    sampler: &RuleBasedSampler<C>,
    path: &Path,
    options: WatchOptions,
    on_reload: impl Fn(Result<(), ConfigError>) + Send + 'static,
) -> Result<ConfigWatcher, ConfigError> {
    let path = path.to_path_buf();
    let io = |e: std::io::Error| watch_error(&path, format!("cannot watch the file: {e}"), e);
    let resolved = resolve::resolve(&path).map_err(io)?;
    let (tx, rx) = mpsc::channel();
    let worker = worker::Worker::new(
        sampler.clone(),
        path.clone(),
        options,
        Box::new(on_reload),
        tx.clone(),
        resolved,
    );
    let thread = std::thread::Builder::new()
        .name("otel-rate-sampler-watch".into())
        .spawn(move || worker.run(rx))
        .map_err(io)?;
    Ok(ConfigWatcher {
        stop: tx,
        thread: Some(thread),
        path,
    })
}
