//! Hot reload: watch a rule file and swap a sampler's rules when it changes.

use std::fmt;
use std::path::{Path, PathBuf};

use notify::{EventKind, RecursiveMode, Watcher};

use super::error::{ConfigError, ConfigErrorKind, Pos};
use super::rule_based::RuleBasedSampler;
use crate::clock::Clock;

/// Keeps a rule file watched; dropping it stops the watching.
///
/// Made by [`RuleBasedSampler::watch`].
pub struct ConfigWatcher {
    // Held for its Drop, which stops the watcher thread.
    _watcher: notify::RecommendedWatcher,
    path: PathBuf,
}

impl fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigWatcher")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone> RuleBasedSampler<C> {
    /// Watches `path` and [`reload`](RuleBasedSampler::reload)s this sampler (and so
    /// every clone of it) each time the file changes, on the watcher's own thread.
    ///
    /// `on_reload` is told the outcome of every reload: `Ok(())`, or the
    /// [`ConfigError`] of a file that failed to load, in which case the last good rules
    /// stay in force. Each outcome is also logged through `tracing` (target
    /// `otel_rate_sampler`: info for a reload, a warning for a failure; the same message
    /// at most once a minute), and counted in [`stats`](RuleBasedSampler::stats). Decisions never wait for a reload: they read the rule set through
    /// an atomic pointer swapped once the new rules are built.
    ///
    /// The file's directory is watched, so editors that save by writing a new file and
    /// renaming it over the old one are seen too.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Io`](ConfigErrorKind::Io) if the watch cannot be set
    /// up.
    pub fn watch(
        &self,
        path: impl AsRef<Path>,
        on_reload: impl Fn(Result<(), ConfigError>) + Send + 'static,
    ) -> Result<ConfigWatcher, ConfigError> {
        let path = path.as_ref().to_path_buf();
        let file = path.display().to_string();
        let io = |e: notify::Error| {
            ConfigError::new(
                ConfigErrorKind::Io,
                &file,
                Pos::default(),
                "",
                format!("cannot watch the file: {e}"),
            )
            .with_source(e)
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().map(|n| n.to_os_string());
        let sampler = self.clone();
        let target = path.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let Ok(event) = event else { return };
                let relevant = matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_))
                    && event
                        .paths
                        .iter()
                        .any(|p| p.file_name().map(|n| n.to_os_string()) == name);
                if relevant {
                    let outcome = sampler.reload_from_path(&target);
                    match &outcome {
                        Ok(()) => super::log::info(&format!(
                            "reloaded the sampling rules from {}",
                            target.display()
                        )),
                        Err(e) => super::log::warn(&format!("{e}; the rules in force stay")),
                    }
                    on_reload(outcome);
                }
            })
            .map_err(io)?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(io)?;
        Ok(ConfigWatcher {
            _watcher: watcher,
            path,
        })
    }
}
