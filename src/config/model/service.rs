//! One service's settings, and where fleet-scoped limits are shared.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::model::{LimitSpec, Policy, Rule};
use crate::limit::Limit;
use crate::limiter::Algorithm;
use crate::sampler::RemoteParents;

/// The `[fleet]` table: where fleet-scoped limits are shared. Its `Debug` masks the
/// URLs' credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct FleetSettings {
    /// One URL, or the seed nodes of a Redis Cluster (empty: none given).
    pub(crate) urls: Vec<String>,
    pub(crate) cluster: bool,
    /// The key prefix (`None`: the fleet limiter's default).
    pub(crate) prefix: Option<String>,
    /// Heartbeats and retries (`None`: the fleet limiter's default).
    pub(crate) sync_interval: Option<Duration>,
    /// `rediss://`: the CA file, and the client certificate and key files, as written.
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) tls_client: Option<(PathBuf, PathBuf)>,
}

/// One service's settings (or the file default's, whose name is empty).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ServiceConfig {
    pub(crate) name: String,
    pub(crate) policy: Option<Policy>,
    pub(crate) cap: Option<LimitSpec>,
    pub(crate) remote_parents: RemoteParents,
    pub(crate) rules: Vec<Rule>,
    /// Whether the file default's rules follow this service's own (not for the default).
    pub(crate) inherit_default_rules: bool,
}

impl ServiceConfig {
    /// The built-in default: [`DEFAULT_TRACES_PER_SECOND`](crate::sampler::env::DEFAULT_TRACES_PER_SECOND),
    /// a local fixed window, remote parents followed, no rules, no cap.
    pub(crate) fn builtin_default() -> Self {
        Self::single_rate(BUILTIN_DEFAULT_LIMIT, RemoteParents::default())
    }

    /// One limit for every span, nothing else.
    pub(crate) fn single_rate(limit: Limit, remote_parents: RemoteParents) -> Self {
        Self {
            name: String::new(),
            policy: Some(Policy::Limit(LimitSpec::local(limit, Algorithm::default()))),
            cap: None,
            remote_parents,
            rules: Vec::new(),
            inherit_default_rules: true,
        }
    }
}

/// The built-in default's limit: [`DEFAULT_TRACES_PER_SECOND`](crate::sampler::env::DEFAULT_TRACES_PER_SECOND)
/// per second (checked when the crate compiles).
pub(crate) const BUILTIN_DEFAULT_LIMIT: Limit = match Limit::per_window(
    crate::sampler::env::DEFAULT_TRACES_PER_SECOND as u32,
    Duration::from_secs(1),
) {
    Ok(limit) => limit,
    Err(_) => panic!("the built-in default rate is a valid limit"),
};

impl fmt::Debug for FleetSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `scheme://user:password@host` shows as `scheme://***@host`.
        let masked: Vec<String> = self
            .urls
            .iter()
            .map(|u| match (u.find("://"), u.rfind('@')) {
                (Some(s), Some(at)) if at > s => format!("{}***{}", &u[..s + 3], &u[at..]),
                _ => u.clone(),
            })
            .collect();
        f.debug_struct("FleetSettings")
            .field("urls", &masked)
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("sync_interval", &self.sync_interval)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_client", &self.tls_client)
            .finish()
    }
}
