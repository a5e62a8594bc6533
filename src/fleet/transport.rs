//! The transport: the Redis target, the connection (made lazily, dropped after a
//! failure so the next call reconnects), and one call bounded by the timeouts, with its
//! failure as a [`CallError`].

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{IntoConnectionInfo, RedisError, Script};

use super::lease::{Call, Reply, PRUNE_AFTER_INTERVALS, STALE_AFTER_INTERVALS};
use super::script::{LeaseReply, LeaseRequest, CLOCK_LUA, LEASE_LUA};
use super::stats::FleetFailure;
use super::stop::Stop;
use super::time::time_to_nanos;

/// Why a call to Redis gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// No connection could be made.
    #[error("could not connect to Redis: {0}")]
    Connect(#[source] RedisError),
    /// Redis refused the credentials: a wrong password or user, or none given to a
    /// server that requires one (Redis then answers `NOAUTH`, or, to a long command,
    /// "unauthenticated multibulk length").
    #[error("Redis refused authentication (check the password and user in the Redis URL): {0}")]
    Auth(#[source] RedisError),
    /// Redis (or the connection) answered with an error.
    #[error("Redis call failed: {0}")]
    Redis(#[source] RedisError),
    /// No answer within the connect and response timeouts.
    #[error("no answer from Redis within {0:?}")]
    Timeout(Duration),
    /// The lease script answered something it never answers.
    #[error("unexpected lease script reply {0:?}")]
    BadReply(Vec<i64>),
}

impl CallError {
    /// The kind counted in the statistics and the metrics.
    pub(crate) fn kind(&self) -> FleetFailure {
        match self {
            Self::Connect(_) => FleetFailure::Connect,
            Self::Auth(_) => FleetFailure::Auth,
            Self::Redis(_) => FleetFailure::Redis,
            Self::Timeout(_) => FleetFailure::Timeout,
            Self::BadReply(_) => FleetFailure::BadReply,
        }
    }

    /// A failed connection attempt: `Auth` if Redis refused the credentials.
    fn connect(error: RedisError) -> Self {
        if is_auth(&error) {
            Self::Auth(error)
        } else {
            Self::Connect(error)
        }
    }

    /// A failed call, by what failed: the credentials (`Auth`), the connection
    /// (`Connect`: refused, reset, closed; the manager connects lazily, inside a call),
    /// the client's response timeout (`Timeout`), else Redis's answer (`Redis`).
    fn redis(error: RedisError, response_timeout: Duration) -> Self {
        if is_auth(&error) {
            Self::Auth(error)
        } else if error.is_timeout() {
            Self::Timeout(response_timeout)
        } else if error.is_connection_refusal()
            || error.is_connection_dropped()
            || error.kind() == redis::ErrorKind::Io
        {
            Self::Connect(error)
        } else {
            Self::Redis(error)
        }
    }
}

/// Whether Redis refused the credentials. The client reports a refused `AUTH` as
/// `AuthenticationFailed`; a server that needs a password and got none answers
/// `NOAUTH` to a command, and closes the connection with "unauthenticated multibulk
/// length" after a long one (the lease script is long).
fn is_auth(error: &RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
        || error.to_string().contains("unauthenticated")
}

/// What the thread and its transport need to know, fixed at build time.
#[derive(Debug)]
pub(crate) struct WorkerConfig {
    pub(crate) target: Target,
    /// The hash tag `{prefix:key}` every key starts with.
    pub(crate) tag: String,
    pub(crate) instance_id: String,
    pub(crate) permits: u64,
    pub(crate) window_nanos: u64,
    pub(crate) interval: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

/// Where Redis is: one server (through a reconnecting `ConnectionManager`) or a cluster.
pub(crate) enum Target {
    Single(redis::Client, ConnectionManagerConfig),
    Cluster(ClusterClient),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(..) => "Single",
            Self::Cluster(..) => "Cluster",
        })
    }
}

impl Target {
    /// Parses the URL(s) without any I/O; `Err((url, reason))` for a bad one.
    pub(crate) fn parse(
        urls: &[String],
        cluster: bool,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, (String, String)> {
        let mut infos = Vec::with_capacity(urls.len());
        for url in urls {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|e| (url.clone(), e.to_string()))?;
            infos.push(info);
        }
        if cluster {
            let client = ClusterClientBuilder::new(infos)
                .connection_timeout(connect_timeout)
                .response_timeout(response_timeout)
                .retries(1)
                .build()
                .map_err(|e| (urls.join(","), e.to_string()))?;
            Ok(Self::Cluster(client))
        } else {
            let info = infos
                .pop()
                .ok_or_else(|| (String::new(), "no URL".to_owned()))?;
            let client = redis::Client::open(info).map_err(|e| (urls[0].clone(), e.to_string()))?;
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(response_timeout))
                .set_connection_timeout(Some(connect_timeout))
                // One attempt per call: the worker paces its own retries (one per
                // sync interval) and makes a fresh manager after a failure.
                .set_number_of_retries(0)
                .set_min_delay(Duration::from_millis(1))
                .set_max_delay(connect_timeout);
            Ok(Self::Single(client, config))
        }
    }
}

enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The connection to Redis and the lease script.
pub(crate) struct Transport {
    config: WorkerConfig,
    /// Windows after Redis's memory starts in which grants are capped at the shares.
    young_windows: u64,
    script: Script,
    clock_script: Script,
    /// `{p}:members`, `{p}:meta`, `{p}:seen`.
    keys: [String; 3],
    connection: Option<Connection>,
}

impl Transport {
    pub(crate) fn new(config: WorkerConfig, young_windows: u64) -> Self {
        let keys = [
            format!("{}:members", config.tag),
            format!("{}:meta", config.tag),
            format!("{}:seen", config.tag),
        ];
        Self {
            config,
            young_windows,
            script: Script::new(LEASE_LUA),
            clock_script: Script::new(CLOCK_LUA),
            keys,
            connection: None,
        }
    }

    /// The rule's hash tag, for messages.
    pub(crate) fn tag(&self) -> &str {
        &self.config.tag
    }

    /// Makes one call, bounded by the timeouts; `None` if stopped meanwhile. After a
    /// failure the connection is dropped: the next call makes a fresh one (the
    /// manager's own reconnect may be slow).
    pub(crate) async fn call(
        &mut self,
        call: Call,
        stop: &Stop,
    ) -> Option<Result<Reply, CallError>> {
        let bound = self.config.response_timeout + self.config.connect_timeout;
        let result = stop
            .unless_stopped(tokio::time::timeout(bound, self.call_unbounded(call)))
            .await?;
        let result = result.unwrap_or(Err(CallError::Timeout(bound)));
        if result.is_err() {
            self.connection = None;
        }
        Some(result)
    }

    async fn call_unbounded(&mut self, call: Call) -> Result<Reply, CallError> {
        let response_timeout = self.config.response_timeout;
        let connection = connect(&mut self.connection, &self.config.target).await?;
        match call {
            Call::SampleTime => {
                let invocation = self.clock_script.key(&self.keys[1]);
                let (seconds, micros): (u64, u64) = match connection {
                    Connection::Single(c) => invocation.invoke_async(c).await,
                    Connection::Cluster(c) => invocation.invoke_async(c).await,
                }
                .map_err(|e| CallError::redis(e, response_timeout))?;
                Ok(Reply::Time(time_to_nanos(seconds, micros)))
            }
            Call::Lease(request) => {
                let script = Invocation {
                    script: &self.script,
                    config: &self.config,
                    young_windows: self.young_windows,
                    keys: &self.keys,
                    request: &request,
                };
                let values = match connection {
                    Connection::Single(c) => script.invoke(c).await,
                    Connection::Cluster(c) => script.invoke(c).await,
                }
                .map_err(|e| CallError::redis(e, response_timeout))?;
                LeaseReply::from_values(&values)
                    .map(Reply::Lease)
                    .ok_or(CallError::BadReply(values))
            }
        }
    }
}

/// The connection, made (without I/O for one server) when there is none.
async fn connect<'a>(
    connection: &'a mut Option<Connection>,
    target: &Target,
) -> Result<&'a mut Connection, CallError> {
    if let Some(c) = connection {
        return Ok(c);
    }
    let made = match target {
        Target::Single(client, config) => Connection::Single(
            ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                .map_err(CallError::connect)?,
        ),
        Target::Cluster(client) => Connection::Cluster(
            client
                .get_async_connection()
                .await
                .map_err(CallError::connect)?,
        ),
    };
    Ok(connection.insert(made))
}

/// A call the server runs later than this after it was sent is refused by the script.
fn expiry_ms(response_timeout: Duration) -> u64 {
    u64::try_from(response_timeout.as_millis() / 2)
        .unwrap_or(u64::MAX)
        .max(1)
}

/// One run of the lease script.
struct Invocation<'a> {
    script: &'a Script,
    config: &'a WorkerConfig,
    young_windows: u64,
    keys: &'a [String; 3],
    request: &'a LeaseRequest,
}

impl Invocation<'_> {
    async fn invoke<C: ConnectionLike>(&self, connection: &mut C) -> redis::RedisResult<Vec<i64>> {
        let config = self.config;
        let request = self.request;
        let interval_ms = u64::try_from(config.interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let window_ms = (config.window_nanos / 1_000_000).max(1);
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(format!("{}:w:{}", config.tag, request.window))
            .key(&self.keys[0])
            .key(&self.keys[1])
            .key(&self.keys[2])
            .arg(&config.instance_id)
            .arg(request.window)
            .arg(config.permits)
            .arg(request.want)
            .arg(request.held)
            .arg(request.known_instances)
            .arg(request.known_rank)
            .arg(window_ms)
            .arg(self.young_windows)
            .arg(STALE_AFTER_INTERVALS * interval_ms)
            .arg(PRUNE_AFTER_INTERVALS * interval_ms)
            .arg(request.sent_ms)
            .arg(expiry_ms(config.response_timeout));
        invocation.invoke_async(connection).await
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn kind(error: RedisError) -> FleetFailure {
        CallError::redis(error, Duration::from_secs(1)).kind()
    }

    /// A refused password was reported as a generic error (or, by the demo, as no
    /// answer within its timeout): it is its own kind now, whatever its form.
    #[test]
    fn failures_are_classified_by_what_failed() {
        let auth = RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(kind(auth), FleetFailure::Auth);
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(kind(refused), FleetFailure::Connect);
        let reset = RedisError::from(io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(kind(reset), FleetFailure::Connect);
        let slow = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(kind(slow), FleetFailure::Timeout);
        let answer = RedisError::from((redis::ErrorKind::Client, "bad", "detail".to_owned()));
        assert_eq!(kind(answer), FleetFailure::Redis);
        let message = CallError::connect(RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        )));
        assert!(
            message.to_string().contains("refused authentication"),
            "{message}"
        );
    }
}
