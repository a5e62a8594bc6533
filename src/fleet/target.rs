//! What a worker (one Redis target, `pool.rs`) has done for all its rules: the counters
//! every rule's statistics add to as they count (so they go on rising when a reload
//! replaces a rule's limiter), the target's label without its credentials, and the
//! observers of each round's round trip (the metrics' histogram).
//!
//! The worker's thread writes the counters after each call or window roll, never a
//! decision; the metrics read them when they collect (`fleet::targets`).

// Read only by the metrics (feature `metrics`); counted whatever the features.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};

use super::failure::FleetFailure;

/// The counters of one Redis target, over the life of its worker (every rule it served,
/// dropped ones included). All `Relaxed`: display values, nothing is published through
/// them.
#[derive(Debug, Default)]
pub(crate) struct TargetCells {
    calls: AtomicU64,
    failures: [AtomicU64; FleetFailure::ALL.len()],
    permits_leased: AtomicU64,
    permits_fallback: AtomicU64,
    permits_used: AtomicU64,
    permits_unused: AtomicU64,
    shape_conflicts: AtomicU64,
}

/// Which counter of a [`TargetCells`] a rule adds to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Call,
    Failure(FleetFailure),
    Leased,
    Fallback,
    Used,
    Unused,
    ShapeConflict,
}

impl TargetCells {
    pub(crate) fn add(&self, count: Count, n: u64) {
        let cell = match count {
            Count::Call => &self.calls,
            Count::Failure(kind) => &self.failures[kind.index()],
            Count::Leased => &self.permits_leased,
            Count::Fallback => &self.permits_fallback,
            Count::Used => &self.permits_used,
            Count::Unused => &self.permits_unused,
            Count::ShapeConflict => &self.shape_conflicts,
        };
        // Relaxed: a display counter.
        cell.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters now, with the gauges of the rules served (`rules`, the most
    /// replicas one of them saw, those in fallback).
    pub(crate) fn read(&self, label: &str, gauges: Gauges) -> TargetStats {
        // Relaxed (all): display values.
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TargetStats {
            label: label.to_owned(),
            gauges,
            calls: load(&self.calls),
            failures: self.failures.each_ref().map(load),
            permits_leased: load(&self.permits_leased),
            permits_fallback: load(&self.permits_fallback),
            permits_used: load(&self.permits_used),
            permits_unused: load(&self.permits_unused),
            shape_conflicts: load(&self.shape_conflicts),
        }
    }
}

/// The rules a worker serves now, as gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Gauges {
    /// Rules registered and not shut down.
    pub(crate) rules: u64,
    /// The most live replicas one of them last saw in Redis.
    pub(crate) replicas: u64,
    /// Those spending their local fallback share.
    pub(crate) in_fallback: u64,
}

/// One Redis target's figures (`fleet::targets`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TargetStats {
    /// What [`label`] makes of its URL(s): no password.
    pub(crate) label: String,
    pub(crate) gauges: Gauges,
    pub(crate) calls: u64,
    failures: [u64; FleetFailure::ALL.len()],
    pub(crate) permits_leased: u64,
    pub(crate) permits_fallback: u64,
    pub(crate) permits_used: u64,
    pub(crate) permits_unused: u64,
    pub(crate) shape_conflicts: u64,
}

impl TargetStats {
    /// Failed calls of kind `kind`.
    pub(crate) fn failures(&self, kind: FleetFailure) -> u64 {
        self.failures[kind.index()]
    }

    /// Adds `other`'s figures (two workers of one label: the same address reached with
    /// other credentials).
    pub(crate) fn merge(&mut self, other: &Self) {
        let g = &mut self.gauges;
        g.rules += other.gauges.rules;
        g.replicas = g.replicas.max(other.gauges.replicas);
        g.in_fallback += other.gauges.in_fallback;
        self.calls += other.calls;
        for (a, b) in self.failures.iter_mut().zip(other.failures) {
            *a += b;
        }
        self.permits_leased += other.permits_leased;
        self.permits_fallback += other.permits_fallback;
        self.permits_used += other.permits_used;
        self.permits_unused += other.permits_unused;
        self.shape_conflicts += other.shape_conflicts;
    }
}

/// The label of a target: each URL as `scheme://[user@]host:port/db` (`unix:path/db`),
/// seeds sorted and joined by `,`, `cluster:` before a cluster's. Never a password:
/// the URL's is dropped with everything else but the address, user and database.
pub(crate) fn label(urls: &[String], cluster: bool) -> String {
    let mut parts: Vec<String> = urls
        .iter()
        .map(|url| match url.as_str().into_connection_info() {
            Ok(info) => {
                let r = info.redis_settings();
                let user = r.username().map(|u| format!("{u}@")).unwrap_or_default();
                let db = r.db();
                match info.addr() {
                    ConnectionAddr::Tcp(host, port) => format!("redis://{user}{host}:{port}/{db}"),
                    ConnectionAddr::TcpTls { host, port, .. } => {
                        format!("rediss://{user}{host}:{port}/{db}")
                    }
                    ConnectionAddr::Unix(path) => format!("unix:{}/{db}", path.display()),
                    _ => "redis".to_owned(),
                }
            }
            // Built limiters' URLs parse; nothing of a bad one is shown.
            Err(_) => "redis".to_owned(),
        })
        .collect();
    parts.sort();
    parts.dedup();
    let joined = parts.join(",");
    if cluster {
        format!("cluster:{joined}")
    } else {
        joined
    }
}

/// Told each round trip a worker makes (the metrics' latency histogram). Called on the
/// worker's thread after each round: it must not block.
pub(crate) trait RoundObserver: Send + Sync {
    /// A round to the target labelled `label` took `round_trip`.
    fn round_trip(&self, label: &str, round_trip: Duration);
}

type Observers = RwLock<Vec<Arc<dyn RoundObserver>>>;

static OBSERVERS: Observers = RwLock::new(Vec::new());

/// Adds `observer` for every worker's rounds, from now on, for the process's life.
pub(crate) fn observe_rounds(observer: Arc<dyn RoundObserver>) {
    OBSERVERS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(observer);
}

/// Tells the observers of a round to `label`.
pub(crate) fn round_observed(label: &str, round_trip: Duration) {
    let observers = OBSERVERS.read().unwrap_or_else(PoisonError::into_inner);
    for o in observers.iter() {
        o.round_trip(label, round_trip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_names_address_user_and_database_never_the_password() {
        let urls = |u: &[&str]| u.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            label(&urls(&["redis://:hunter2@10.0.0.1:6380/2"]), false),
            "redis://10.0.0.1:6380/2"
        );
        assert_eq!(
            label(&urls(&["rediss://app:hunter2@cache.internal:6390"]), false),
            "rediss://app@cache.internal:6390/0"
        );
        let seeds = label(
            &urls(&["redis://:pw@127.0.0.1:7001", "redis://:pw@127.0.0.1:7000"]),
            true,
        );
        assert_eq!(
            seeds,
            "cluster:redis://127.0.0.1:7000/0,redis://127.0.0.1:7001/0"
        );
        assert!(!seeds.contains("pw"));
    }

    #[test]
    fn counters_add_by_kind_and_merge_by_label() {
        let cells = TargetCells::default();
        cells.add(Count::Call, 3);
        cells.add(Count::Failure(FleetFailure::Timeout), 2);
        cells.add(Count::Leased, 10);
        cells.add(Count::Used, 7);
        let gauges = Gauges {
            rules: 2,
            replicas: 3,
            in_fallback: 1,
        };
        let mut a = cells.read("t", gauges);
        assert_eq!((a.calls, a.permits_leased, a.permits_used), (3, 10, 7));
        assert_eq!(a.failures(FleetFailure::Timeout), 2);
        assert_eq!(a.failures(FleetFailure::Connect), 0);
        let b = a.clone();
        a.merge(&b);
        assert_eq!(a.gauges.rules, 4);
        assert_eq!(a.gauges.replicas, 3, "the most seen, not a sum");
        assert_eq!(a.failures(FleetFailure::Timeout), 4);
    }
}
