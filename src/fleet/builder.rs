//! [`FleetLimiterBuilder`]: the options of a [`FleetLimiter`], checked once in `build`.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use super::error::{redact, FleetError};
use super::limiter::{FleetLimiter, Inner, DEFAULT_FLEET_PREFIX};
use super::pool::{self, PoolKey};
use super::stats::StatCells;
use super::target::label;
use super::time::TimeMap;
use super::tls;
use super::transport::{all_tls, target_identity, Target, TargetTls};
use super::wire::{Naming, RuleWire};
use super::word::LeaseWord;
use super::worker::{Member, RuleWorker};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::tls_files::TlsFiles;

/// One Redis URL or several (the seed nodes of a cluster), for
/// [`FleetLimiter::builder`]. Implemented for `&str`, `String`, and slices, arrays and
/// vectors of them.
pub trait RedisUrls {
    /// The URLs.
    fn into_urls(self) -> Vec<String>;
}

impl RedisUrls for &str {
    fn into_urls(self) -> Vec<String> {
        vec![self.to_owned()]
    }
}

impl RedisUrls for String {
    fn into_urls(self) -> Vec<String> {
        vec![self]
    }
}

impl<S: AsRef<str>> RedisUrls for &[S] {
    fn into_urls(self) -> Vec<String> {
        self.iter().map(|s| s.as_ref().to_owned()).collect()
    }
}

impl<S: AsRef<str>, const K: usize> RedisUrls for [S; K] {
    fn into_urls(self) -> Vec<String> {
        self.iter().map(|s| s.as_ref().to_owned()).collect()
    }
}

impl<S: AsRef<str>> RedisUrls for Vec<S> {
    fn into_urls(self) -> Vec<String> {
        self.iter().map(|s| s.as_ref().to_owned()).collect()
    }
}

/// Builds a [`FleetLimiter`]; from [`FleetLimiter::builder`].
#[must_use]
pub struct FleetLimiterBuilder<C = MonotonicClock> {
    urls: Vec<String>,
    key: String,
    limit: Limit,
    prefix: String,
    cluster: bool,
    sync_interval: Option<Duration>,
    response_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    instance_id: Option<String>,
    tls: TlsFiles,
    clock: C,
}

impl FleetLimiterBuilder {
    pub(super) fn new(urls: Vec<String>, key: String, limit: Limit) -> Self {
        Self {
            urls,
            key,
            limit,
            prefix: DEFAULT_FLEET_PREFIX.to_owned(),
            cluster: false,
            sync_interval: None,
            response_timeout: None,
            connect_timeout: None,
            instance_id: None,
            tls: TlsFiles::default(),
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> FleetLimiterBuilder<C> {
    /// How often the instance heartbeats and, while Redis fails, retries. Default: a
    /// quarter of the window, between 10 ms and 1 s. Fallback starts after 3 intervals
    /// without a successful call; recovery takes at most one interval plus the response
    /// timeout once Redis answers.
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.sync_interval = Some(interval);
        self
    }

    /// The longest a Redis call may take before it counts as failed. Default: half the
    /// sync interval.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// The longest a connection attempt may take. Default: the response timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// This instance's id among the replicas (unique per process). Default: the process
    /// id, the start time and a counter.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// The key prefix, [`DEFAULT_FLEET_PREFIX`] by default: keys are `{prefix:key}:...`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The PEM file of the CA(s) that signed the server's certificate, for `rediss://`
    /// URLs, trusted instead of the platform's roots. The certificate is always
    /// verified (chain, dates, and the URL's host name): there is no way to turn that
    /// off. A failed handshake shows as a `Tls*` [`FleetFailure`](crate::FleetFailure)
    /// in [`stats`](FleetLimiter::stats), never as a fallback to plain text.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// A client certificate (PEM, the chain from the leaf) and its private key (PEM),
    /// for a server that asks for one (Redis does by default: `tls-auth-clients yes`).
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Treats the URL(s) as seed nodes of a Redis Cluster (implied by several URLs).
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// The local clock the decisions read (windows are still Redis's; this clock carries
    /// Redis `TIME` between samples). Default: [`MonotonicClock`]. It must advance with
    /// real time: the worker maps it onto Redis `TIME` at every call, so a
    /// [`ManualClock`](crate::ManualClock) only makes sense in a test that drives it
    /// in step with the wall clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> FleetLimiterBuilder<C2> {
        FleetLimiterBuilder {
            urls: self.urls,
            key: self.key,
            limit: self.limit,
            prefix: self.prefix,
            cluster: self.cluster,
            sync_interval: self.sync_interval,
            response_timeout: self.response_timeout,
            connect_timeout: self.connect_timeout,
            instance_id: self.instance_id,
            tls: self.tls,
            clock,
        }
    }

    /// Checks the options, joins the background worker of its Redis target (starting
    /// it for the first limiter on that target) and returns at once, without waiting
    /// for Redis.
    ///
    /// # Errors
    ///
    /// [`FleetError::NoUrl`], [`FleetError::InvalidUrl`], [`FleetError::InvalidKey`] (or
    /// a bad prefix),
    /// [`FleetError::InvalidOption`] for a zero interval or timeout, or TLS files with a
    /// URL that is not `rediss://`, [`FleetError::TlsFile`] for a TLS file that cannot
    /// be read or holds no PEM certificate (or key), and [`FleetError::Spawn`] if the
    /// thread cannot start.
    pub fn build(self) -> Result<FleetLimiter<C>, FleetError> {
        if self.urls.is_empty() {
            return Err(FleetError::NoUrl);
        }
        let bad_part =
            |s: &str| s.is_empty() || s.contains(['{', '}']) || s.chars().any(char::is_whitespace);
        if bad_part(&self.key) {
            return Err(FleetError::InvalidKey { key: self.key });
        }
        if bad_part(&self.prefix) {
            return Err(FleetError::InvalidKey { key: self.prefix });
        }
        let window = self.limit.window();
        let interval = self.sync_interval.unwrap_or_else(|| {
            (window / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
        });
        if interval < Duration::from_millis(1) {
            return Err(FleetError::InvalidOption {
                option: "sync_interval",
                reason: "must be at least 1 ms",
            });
        }
        let response_timeout = self.response_timeout.unwrap_or(interval / 2);
        let connect_timeout = self.connect_timeout.unwrap_or(response_timeout);
        if response_timeout.is_zero() || connect_timeout.is_zero() {
            return Err(FleetError::InvalidOption {
                option: "response_timeout / connect_timeout",
                reason: "must be above zero",
            });
        }
        let cluster = self.cluster || self.urls.len() > 1;
        let bad_url = |(url, reason): (String, String)| FleetError::InvalidUrl {
            url: redact(&url),
            reason,
        };
        let tls = if !all_tls(&self.urls).map_err(bad_url)? {
            if !self.tls.is_empty() {
                return Err(FleetError::InvalidOption {
                    option: "tls_ca_file / tls_client_cert",
                    reason: "TLS files need rediss:// URLs (redis:// is plain text)",
                });
            }
            TargetTls::Plain
        } else if cluster {
            let timeout = super::transport::CONNECTION_CEILING;
            TargetTls::Cluster(tls::NodeTls::new(&self.urls[0], &self.tls, timeout)?)
        } else {
            TargetTls::Single(tls::Connector::new(&self.urls[0], &self.tls)?)
        };
        let target = Target::parse(&self.urls, cluster, tls).map_err(bad_url)?;
        let mut identity = target_identity(&self.urls).map_err(bad_url)?;
        identity.push(tls::identity(&self.tls));
        let naming = naming(self.prefix, self.key.clone(), self.instance_id, cluster);
        if bad_part(&naming.instance_id) {
            return Err(FleetError::InvalidOption {
                option: "instance_id",
                reason: "must be non-empty, without '{', '}' or whitespace",
            });
        }
        let instance_id = naming.instance_id.clone();
        let wire = RuleWire::new(
            naming,
            u64::from(self.limit.permits()),
            self.limit.window_nanos(),
            [interval, response_timeout, connect_timeout],
        );
        let inner = Arc::new_cyclic(|weak| Inner {
            lease: LeaseWord::new(),
            time: TimeMap::default(),
            clock: self.clock,
            limit: self.limit,
            stats: StatCells::default(),
            demand: AtomicBool::new(false),
            member: Arc::new(RuleWorker::new(Weak::<Inner<C>>::clone(weak), wire)),
            registration: OnceLock::new(),
            key: self.key,
            instance_id,
            sync_interval: interval,
        });
        let member: Arc<dyn Member> = inner.member.clone();
        let registration = pool::join(
            PoolKey::new(identity, cluster),
            (target, label(&self.urls, cluster)),
            Arc::downgrade(&member),
            &inner.stats.target,
        )
        .map_err(FleetError::Spawn)?;
        let _ = inner.registration.set(registration);
        Ok(FleetLimiter { inner })
    }
}

impl<C: fmt::Debug> fmt::Debug for FleetLimiterBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs with their passwords masked.
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("FleetLimiterBuilder")
            .field("urls", &urls)
            .field("key", &self.key)
            .field("limit", &self.limit)
            .field("prefix", &self.prefix)
            .field("cluster", &self.cluster)
            .field("sync_interval", &self.sync_interval)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("instance_id", &self.instance_id)
            .field("tls", &self.tls)
            .field("clock", &self.clock)
            .finish()
    }
}

/// A rule's names: the replica heartbeating for it is the instance id when one was
/// given, else this process (whose limiters' default ids differ).
fn naming(prefix: String, key: String, given: Option<String>, cluster: bool) -> Naming {
    let (instance_id, replica_id) = match given {
        Some(id) => (id.clone(), id),
        None => default_ids(),
    };
    Naming {
        prefix,
        key,
        instance_id,
        replica_id,
        cluster,
    }
}

/// A default instance id, unique in the process, and the process's replica id, its
/// stem.
fn default_ids() -> (String, String) {
    static REPLICA: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let replica = REPLICA.get_or_init(|| {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        format!("{}-{since_epoch}", std::process::id())
    });
    // Relaxed: a counter for uniqueness within the process.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (format!("{replica}-{n}"), replica.clone())
}

impl FleetLimiter {
    /// A builder for a limiter of `limit` per fleet window, shared by every instance that
    /// uses the same Redis, prefix and `key`.
    ///
    /// `redis` is one URL (`"redis://host:6379"`) or the seed nodes of a Redis Cluster
    /// (several URLs, or one with [`cluster`](FleetLimiterBuilder::cluster)). `key` names
    /// the rule (for example `"checkout:root"`); every instance must pass the same limit
    /// for the same key.
    pub fn builder(
        redis: impl RedisUrls,
        key: impl Into<String>,
        limit: Limit,
    ) -> FleetLimiterBuilder {
        FleetLimiterBuilder::new(redis.into_urls(), key.into(), limit)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// One server over TLS names ring itself: building its limiter and failing to
    /// connect leave the process without a default provider (no other test of this
    /// binary makes a TLS client through the redis crate).
    #[test]
    fn one_server_over_tls_leaves_the_process_default_provider_alone() {
        let limit = crate::Limit::per_second(1.0).unwrap();
        let limiter = FleetLimiter::builder("rediss://127.0.0.1:1", "tls-provider", limit)
            .sync_interval(Duration::from_millis(10))
            .build()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while limiter.stats().lease_errors == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                limiter.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }
}
