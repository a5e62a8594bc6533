//! How a [`ConfigWatcher`](super::ConfigWatcher) follows its file.

use std::time::Duration;

/// How a [`ConfigWatcher`](super::ConfigWatcher) follows its file: the quiet period
/// before a change is applied, and the polling that backs up the file system's
/// notifications.
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::WatchOptions;
///
/// let options = WatchOptions::new()
///     .debounce(Duration::from_millis(500))
///     .poll_interval(Duration::from_secs(10));
/// assert_eq!(options.debounce_period(), Duration::from_millis(500));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    debounce: Duration,
    poll: Duration,
    notifications: bool,
}

impl WatchOptions {
    /// The default quiet period: 200 ms.
    pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);
    /// The default polling interval: 2 s.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);

    /// The defaults: [`DEFAULT_DEBOUNCE`](Self::DEFAULT_DEBOUNCE) and
    /// [`DEFAULT_POLL_INTERVAL`](Self::DEFAULT_POLL_INTERVAL).
    pub const fn new() -> Self {
        Self {
            debounce: Self::DEFAULT_DEBOUNCE,
            poll: Self::DEFAULT_POLL_INTERVAL,
            notifications: true,
        }
    }

    /// The quiet period: a change is read once no event has touched the file (or a
    /// link to it) for this long, so a file saved in several writes, or saved many
    /// times in a row, is read once, complete. A file that never stays quiet is still
    /// read every 10 quiet periods. It is also the settle time: a version read is
    /// applied only once read again unchanged (size, modification time, identity and
    /// contents) this long after, with no write notification on the file between, so a
    /// file still being written is not applied (see [`ConfigWatcher`](super::ConfigWatcher)). Zero applies
    /// each event's result at once.
    pub const fn debounce(mut self, period: Duration) -> Self {
        self.debounce = period;
        self
    }

    /// How often the path is resolved and the file checked without any notification:
    /// the fallback that catches what the notifications miss (a directory replaced
    /// before its watch was re-armed, a file system without notifications, a watcher
    /// that could not start). Each check is a `stat` per path component, and a read of
    /// the file only if its size, time or identity changed. Zero is taken as 1 ms.
    pub const fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll = interval;
        self
    }

    /// Whether to use the file system's notifications (inotify, FSEvents, ...; the
    /// default) or only poll: for file systems that send none (NFS and other network
    /// mounts, some FUSE and container overlay setups), where a change is then seen
    /// within a [`poll_interval`](Self::poll_interval).
    pub const fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// The quiet period in force.
    pub const fn debounce_period(&self) -> Duration {
        self.debounce
    }

    /// The polling interval in force.
    pub const fn polling_interval(&self) -> Duration {
        self.poll
    }

    /// Whether the file system's notifications are used.
    pub const fn uses_notifications(&self) -> bool {
        self.notifications
    }
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self::new()
    }
}
