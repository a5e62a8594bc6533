//! The transport: the Redis target, the connection a worker's rules share (made
//! lazily, dropped after a failure so the next round reconnects), and one round of
//! calls, every rule's due call in one pipeline (one per slot on a cluster), bounded by
//! the timeouts, with each failure as a
//! [`CallError`].

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Script, Value};

use super::call_error::CallError;
use super::lease::Call;
use super::pipeline::{by_slot, in_order, Answers, Batch};
use super::script::{CLOCK_LUA, LEASE_LUA};
use super::stop::Stop;
use super::tls::{Connector, NodeTls, TlsNode};
use super::wire::{Leave, RuleWire, Scripts};

/// The connection's own connect and response limits: far above any rule's timeouts,
/// only a backstop. The rules of a worker may have any timeouts (their windows set the
/// defaults), so each round is bounded by the longest bound of the rules in it
/// (`Transport::round`), each rule takes an answer later than its own bound as a
/// timeout (`worker.rs`), and a removal of members by theirs (`Transport::leave`).
pub(crate) const CONNECTION_CEILING: Duration = Duration::from_secs(60);

/// Where Redis is: one server (through a reconnecting `ConnectionManager`) or a cluster.
pub(crate) enum Target {
    Single(redis::Client, ConnectionManagerConfig),
    /// One server over TLS, connected by our own handshake (ring named explicitly),
    /// within the connect timeout.
    SingleTls(Arc<Connector>, Duration),
    Cluster(ClusterClient),
    /// A cluster over TLS: each node connected by our own handshake ([`TlsNode`]).
    ClusterTls(ClusterClient, NodeTls),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(..) => "Single",
            Self::SingleTls(..) => "SingleTls",
            Self::Cluster(..) => "Cluster",
            Self::ClusterTls(..) => "ClusterTls",
        })
    }
}

impl Target {
    /// Parses the URL(s) without any I/O; `Err((url, reason))` for a bad one. `tls`
    /// (read from the CA and client certificate files) needs `rediss://` URLs: a
    /// cluster's certificates, or one server's connector.
    pub(crate) fn parse(
        urls: &[String],
        cluster: bool,
        tls: TargetTls,
    ) -> Result<Self, (String, String)> {
        let mut infos = parse_urls(urls)?;
        let node_tls = match tls {
            TargetTls::Single(connector) => {
                return Ok(Self::SingleTls(Arc::new(connector), CONNECTION_CEILING))
            }
            TargetTls::Cluster(node_tls) => Some(node_tls),
            TargetTls::Plain => None,
        };
        if infos
            .iter()
            .any(|i| matches!(i.addr(), ConnectionAddr::TcpTls { .. }))
            && node_tls.is_none()
        {
            // Some URLs TLS, some not (the redis crate's own TLS would also build on
            // the process's default crypto provider).
            return Err((
                urls.join(","),
                "mixes rediss:// and redis:// URLs: all are TLS or none".to_owned(),
            ));
        }
        if cluster {
            // No certificates for the redis crate: a TLS cluster's nodes are connected
            // by `TlsNode`, on `node_tls`.
            let client = ClusterClientBuilder::new(infos)
                .connection_timeout(CONNECTION_CEILING)
                .response_timeout(CONNECTION_CEILING)
                .retries(1)
                .build()
                .map_err(|e| (urls.join(","), e.to_string()))?;
            Ok(match node_tls {
                Some(node_tls) => Self::ClusterTls(client, node_tls),
                None => Self::Cluster(client),
            })
        } else {
            let info = infos
                .pop()
                .ok_or_else(|| (String::new(), "no URL".to_owned()))?;
            let client = redis::Client::open(info).map_err(|e| (urls[0].clone(), e.to_string()))?;
            // No response timeout of its own: the worker bounds each round by the
            // timeouts of the rules in it, which may differ.
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(None)
                .set_connection_timeout(Some(CONNECTION_CEILING))
                // One attempt per call: the worker paces its own retries (one per
                // sync interval) and makes a fresh manager after a failure.
                .set_number_of_retries(0)
                .set_min_delay(Duration::from_millis(1))
                .set_max_delay(Duration::from_millis(1));
            Ok(Self::Single(client, config))
        }
    }
}

/// The URLs' connection settings; `Err((url, reason))` for a bad one, or for a
/// `rediss://` URL that turns certificate checks off (`#insecure`): there is no way to.
fn parse_urls(urls: &[String]) -> Result<Vec<ConnectionInfo>, (String, String)> {
    urls.iter()
        .map(|url| {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|e| (url.clone(), e.to_string()))?;
            if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
                return Err((
                    url.clone(),
                    "`#insecure` would turn certificate verification off, which this crate \
                     does not do; give the CA that signed the server's certificate instead"
                        .to_owned(),
                ));
            }
            Ok(info)
        })
        .collect()
}

/// Whether every URL is `rediss://` (TLS); `Err((url, reason))` for a bad one.
pub(crate) fn all_tls(urls: &[String]) -> Result<bool, (String, String)> {
    Ok(parse_urls(urls)?
        .iter()
        .all(|i| matches!(i.addr(), ConnectionAddr::TcpTls { .. })))
}

/// What the URL(s) connect to, spelling aside (`redis://h:6379` and `redis://h:6379/0`
/// are one target): address, database, credentials and protocol of each, for the
/// worker registry. `Err((url, reason))` for a bad one.
pub(crate) fn target_identity(urls: &[String]) -> Result<Vec<String>, (String, String)> {
    Ok(parse_urls(urls)?
        .iter()
        .map(|info| {
            let r = info.redis_settings();
            format!(
                "{:?} db={} user={:?} password={:?} {:?}",
                info.addr(),
                r.db(),
                r.username(),
                r.password(),
                r.protocol()
            )
        })
        .collect())
}

/// The TLS part of a [`Target`]: none (`redis://` URLs), one `rediss://` server's
/// connector, or a `rediss://` cluster's node configuration.
pub(crate) enum TargetTls {
    Plain,
    Single(Connector),
    Cluster(NodeTls),
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    SingleTls(MultiplexedConnection),
    Cluster(ClusterConnection),
    ClusterTls(ClusterConnection<TlsNode>),
}

/// The connection to one Redis target, shared by the rules of a worker (and by its
/// rounds in flight: the connection is multiplexed), and the scripts.
pub(crate) struct Transport {
    target: Target,
    scripts: Arc<Scripts>,
    /// Never locked across an await: a round takes a clone of the connection.
    connection: Mutex<Option<Connection>>,
}

impl Transport {
    pub(crate) fn new(target: Target) -> Self {
        Self {
            target,
            scripts: Arc::new(Scripts {
                lease: Script::new(LEASE_LUA),
                clock: Script::new(CLOCK_LUA),
            }),
            connection: Mutex::new(None),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<Connection>> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends every call of `batch` in one round trip (one per slot on a cluster),
    /// bounded by the longest of the rules' timeouts; `None` if stopped meanwhile. A
    /// failure of the connection or the round fails every call; after one, the
    /// connection is dropped and the next round makes a fresh one (the manager's own
    /// reconnect may be slow).
    pub(crate) async fn round(
        &self,
        batch: &[(&RuleWire, Call)],
        stop: &Stop,
    ) -> Option<Vec<Result<Value, CallError>>> {
        let bound = batch.iter().map(|(w, _)| w.bound()).max()?;
        let response_timeout = batch.iter().map(|(w, _)| w.response_timeout).max()?;
        let sent = stop
            .unless_stopped(tokio::time::timeout(bound, self.round_unbounded(batch)))
            .await?;
        let answers = match sent {
            Ok(Ok(answers)) => answers,
            Ok(Err(error)) => {
                *self.slot() = None;
                return Some(batch.iter().map(|_| Err(error.clone())).collect());
            }
            Err(_) => {
                *self.slot() = None;
                let timeout = || Err(CallError::Timeout(bound));
                return Some(batch.iter().map(|_| timeout()).collect());
            }
        };
        let answers: Vec<_> = answers
            .into_iter()
            .map(|a| a.map_err(|e| CallError::redis(e, response_timeout)))
            .collect();
        if answers
            .iter()
            .any(|a| a.as_ref().is_err_and(CallError::is_connection))
        {
            *self.slot() = None;
        }
        Some(answers)
    }

    /// Removes the members of dropped limiters from their rules' members, each within
    /// its bound; a failure leaves the member to be forgotten with its replica.
    pub(crate) async fn leave(&self, leaves: &[Leave]) {
        let Some(bound) = leaves.iter().map(|l| l.bound).max() else {
            return;
        };
        let Ok(Ok(connection)) = tokio::time::timeout(bound, self.connect()).await else {
            return;
        };
        for leave in leaves {
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(&leave.key).arg(&leave.member);
            let sent = match connection.clone() {
                Connection::Single(mut c) => {
                    tokio::time::timeout(leave.bound, zrem.query_async::<()>(&mut c)).await
                }
                Connection::SingleTls(mut c) => {
                    tokio::time::timeout(leave.bound, zrem.query_async::<()>(&mut c)).await
                }
                Connection::Cluster(mut c) => {
                    tokio::time::timeout(leave.bound, zrem.query_async::<()>(&mut c)).await
                }
                Connection::ClusterTls(mut c) => {
                    tokio::time::timeout(leave.bound, zrem.query_async::<()>(&mut c)).await
                }
            };
            if !matches!(sent, Ok(Ok(()))) {
                return;
            }
        }
    }

    /// The connection, made (without I/O for one server) when there is none.
    async fn connect(&self) -> Result<Connection, CallError> {
        if let Some(c) = self.slot().as_ref() {
            return Ok(c.clone());
        }
        let made = match &self.target {
            Target::Single(client, config) => Connection::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                    .map_err(CallError::connect)?,
            ),
            Target::SingleTls(connector, timeout) => {
                Connection::SingleTls(connector.connect(*timeout).await.map_err(|e| {
                    if e.is_timeout() {
                        CallError::Timeout(*timeout)
                    } else {
                        CallError::connect(e)
                    }
                })?)
            }
            Target::Cluster(client) => Connection::Cluster(
                client
                    .get_async_connection()
                    .await
                    .map_err(CallError::connect)?,
            ),
            Target::ClusterTls(client, node_tls) => {
                // This thread's node connections (the cluster's own, later ones
                // included: they run on this worker's current-thread runtime).
                node_tls.enter();
                Connection::ClusterTls(
                    client
                        .get_async_generic_connection::<TlsNode>()
                        .await
                        .map_err(CallError::connect)?,
                )
            }
        };
        Ok(self.slot().get_or_insert(made).clone())
    }

    async fn round_unbounded(&self, batch: &[(&RuleWire, Call)]) -> Result<Answers, CallError> {
        let response_timeout = batch.iter().map(|(w, _)| w.response_timeout).max();
        let failed = |e| CallError::redis(e, response_timeout.unwrap_or_default());
        let scripts = Arc::clone(&self.scripts);
        match self.connect().await? {
            Connection::Single(mut c) => one_server(&mut c, batch, &scripts).await.map_err(failed),
            Connection::SingleTls(mut c) => {
                one_server(&mut c, batch, &scripts).await.map_err(failed)
            }
            Connection::Cluster(c) => by_slot(&c, batch, scripts).await.map_err(failed),
            Connection::ClusterTls(c) => by_slot(&c, batch, scripts).await.map_err(failed),
        }
    }
}

/// A round to one server: every call in one pipeline, the answers in the batch's order.
async fn one_server<C: redis::aio::ConnectionLike>(
    connection: &mut C,
    batch: &[(&RuleWire, Call)],
    scripts: &Scripts,
) -> Result<Answers, redis::RedisError> {
    let all: Vec<usize> = (0..batch.len()).collect();
    let pairs = Batch::new(batch, &all, scripts)
        .send(connection, scripts)
        .await?;
    Ok(in_order(batch.len(), pairs))
}
