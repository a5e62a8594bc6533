//! Which directories the watcher's notifications come from: those a path's lookup goes
//! through, re-armed when the lookup changes or a directory is replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use super::resolve::Resolved;

/// The notification backend (none: following by polling) and what it watches.
#[derive(Default)]
pub(super) struct Watches {
    backend: Option<RecommendedWatcher>,
    /// The directories watched now, with their identity when they were armed: one
    /// replaced by another of the same path (moved away and recreated) is armed again.
    armed: BTreeMap<PathBuf, Option<DirIdentity>>,
}

/// What arming gave.
pub(super) enum Arming {
    /// Every directory wanted is watched (or there is no backend).
    Done,
    /// One vanished between resolving and watching it: the lookup is stale.
    Vanished,
    /// Some could not be watched (why, for each): tried again on the next check.
    Failed(String),
}

impl Watches {
    /// Uses `backend` from now on.
    pub(super) fn start(&mut self, backend: RecommendedWatcher) {
        self.backend = Some(backend);
    }

    /// Forgets the watch on `dir` (a directory was created or removed at that path), so
    /// the next [`arm`](Self::arm) watches what is there again: a directory removed and
    /// another made at once (`rm -rf`, then `mkdir`) can get the old one's inode number,
    /// which its identity cannot tell from the old one.
    pub(super) fn rearm(&mut self, dir: &Path) {
        if self.armed.remove(dir).is_some() {
            if let Some(backend) = self.backend.as_mut() {
                let _ = backend.unwatch(dir);
            }
        }
    }

    /// Watches the directories `resolved`'s lookup depends on (for one that does not
    /// exist, its nearest existing ancestor, to see it come back), and stops watching
    /// the ones it no longer depends on.
    pub(super) fn arm(&mut self, resolved: &Resolved) -> Arming {
        let Some(backend) = self.backend.as_mut() else {
            return Arming::Done;
        };
        let mut wanted: BTreeSet<PathBuf> =
            resolved.dirs.iter().filter_map(|d| existing(d)).collect();
        // The file's directory's parent too: it sees the directory renamed or removed.
        if let Some(parent) = resolved.file.parent().and_then(Path::parent) {
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
            Arming::Vanished
        } else if failed.is_empty() {
            Arming::Done
        } else {
            Arming::Failed(failed.join("; "))
        }
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
