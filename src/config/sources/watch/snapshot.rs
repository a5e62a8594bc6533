//! What the watcher reads of the file, and when a version read is stable enough to
//! apply: a file still being written is never applied.
//!
//! A version is applied only once two reads at least a settle period apart found the
//! same size, modification time, identity and contents, with no write notification on
//! the file between them ([`Pending`]). A file being written changes between two such
//! reads unless the writer itself stopped for the whole settle period, which a reader
//! cannot tell from a finished file.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// The file's cheap metadata: what a poll compares before reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stat {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    identity: (u64, u64),
}

/// The file's metadata, or `None` if it is missing or unreadable.
pub(super) fn stat(file: &Path) -> Option<Stat> {
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

/// One read of the file: its metadata, a digest of its contents and the contents
/// themselves (what is applied is what was read, never a third read).
#[derive(Debug)]
pub(super) struct Snapshot {
    pub(super) stat: Stat,
    pub(super) digest: u64,
    pub(super) bytes: Vec<u8>,
    /// The file changed during the read: this read confirms nothing.
    torn: bool,
}

impl Snapshot {
    /// Reads `file`: `None` if it cannot be read. The metadata is taken on both sides
    /// of the read: a read during which it changed confirms no version.
    pub(super) fn read(file: &Path) -> Option<Self> {
        let before = stat(file)?;
        let bytes = std::fs::read(file).ok()?;
        let after = stat(file)?;
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        Some(Self {
            stat: after,
            digest: hasher.finish(),
            bytes,
            torn: before != after,
        })
    }

    /// The same version: same metadata and contents.
    fn same(&self, other: &Snapshot) -> bool {
        !self.torn && !other.torn && self.stat == other.stat && self.digest == other.digest
    }
}

/// A version read but not applied yet, and when it was first read.
#[derive(Debug)]
pub(super) struct Pending {
    snapshot: Snapshot,
    since: Instant,
}

impl Pending {
    /// When this version, unchanged, may be applied.
    pub(super) fn due(&self, settle: Duration) -> Instant {
        self.since + settle
    }

    /// Given a new read `now`: the version to apply if `pending` (read first, with no
    /// write notification since) is the same and was read at least `settle` ago, else
    /// what is pending now (the new read, or the earlier one if the same).
    pub(super) fn next(
        pending: Option<Pending>,
        snapshot: Snapshot,
        now: Instant,
        settle: Duration,
    ) -> Result<Snapshot, Pending> {
        let pending = match pending {
            Some(p) if p.snapshot.same(&snapshot) => p,
            _ => Pending {
                snapshot,
                since: now,
            },
        };
        if now >= pending.due(settle) {
            Ok(pending.snapshot)
        } else {
            Err(pending)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(len: u64, digest: u64) -> Snapshot {
        Snapshot {
            stat: Stat {
                len,
                modified: Some(SystemTime::UNIX_EPOCH),
                #[cfg(unix)]
                identity: (1, 1),
            },
            digest,
            bytes: Vec::new(),
            torn: false,
        }
    }

    #[test]
    fn a_version_is_applied_only_when_read_unchanged_a_settle_period_after_its_first_read() {
        let settle = Duration::from_millis(100);
        let t0 = Instant::now();
        let first = Pending::next(None, snapshot(10, 1), t0, settle).unwrap_err();
        // Read again too early: still pending, from the first read.
        let again = Pending::next(Some(first), snapshot(10, 1), t0 + settle / 2, settle);
        let again = again.unwrap_err();
        assert_eq!(again.due(settle), t0 + settle);
        // Changed meanwhile: pending again, from this read.
        let changed = Pending::next(Some(again), snapshot(20, 2), t0 + settle, settle);
        let changed = changed.unwrap_err();
        assert_eq!(changed.due(settle), t0 + 2 * settle);
        let applied = Pending::next(Some(changed), snapshot(20, 2), t0 + 2 * settle, settle);
        assert_eq!(applied.unwrap().digest, 2);
        // A zero settle period applies each read at once.
        assert!(Pending::next(None, snapshot(1, 1), t0, Duration::ZERO).is_ok());
    }

    #[test]
    fn a_read_during_a_write_confirms_nothing() {
        let settle = Duration::from_millis(100);
        let torn = || Snapshot {
            torn: true,
            ..snapshot(10, 1)
        };
        let t0 = Instant::now();
        let first = Pending::next(None, torn(), t0, settle).unwrap_err();
        let again = Pending::next(Some(first), torn(), t0 + 2 * settle, settle);
        assert_eq!(again.unwrap_err().due(settle), t0 + 3 * settle);
        // And a clean read after a torn one starts over too.
        let first = Pending::next(None, torn(), t0, settle).unwrap_err();
        let clean = Pending::next(Some(first), snapshot(10, 1), t0 + 2 * settle, settle);
        assert_eq!(clean.unwrap_err().due(settle), t0 + 3 * settle);
    }
}
