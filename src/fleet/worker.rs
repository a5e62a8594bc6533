//! The background thread: its own current-thread tokio runtime, the Redis connection,
//! and the loop that leases, prefetches, heartbeats and falls back.
//!
//! The loop never holds the limiter across an await: it plans a call while holding a
//! strong reference, drops it, awaits the call (racing the stop signal), then applies
//! the reply. Dropping the last handle therefore stops the thread at once, even in the
//! middle of a slow call.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{IntoConnectionInfo, Script};
use tokio::sync::Notify;

use super::limiter::Inner;
use super::script::{LeaseReply, LeaseRequest, LEASE_LUA};
use super::share::{chunk, low_water, share};
use super::word::Added;
use crate::clock::Clock;

/// Sync intervals without a successful call after which an instance falls back.
pub(crate) const FALLBACK_AFTER_INTERVALS: u64 = 3;
/// Sync intervals after which Redis counts a member as stale (it may be in fallback):
/// below [`FALLBACK_AFTER_INTERVALS`], so Redis reserves a share before it is spent.
const STALE_AFTER_INTERVALS: u64 = 2;
/// Sync intervals after which Redis forgets a member that stopped calling.
const PRUNE_AFTER_INTERVALS: u64 = 20;

/// The stop signal shared by the handles and the thread.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    // Release/Acquire: pairs the store in `stop` with the loads in the thread, so the
    // thread sees the flag once it has seen the notification (or its next tick).
    flag: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub(crate) fn stop(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Runs `f` unless the stop signal comes first.
    async fn unless_stopped<F: Future>(&self, f: F) -> Option<F::Output> {
        let mut notified = pin!(self.notify.notified());
        let mut f = pin!(f);
        if self.is_stopped() {
            return None;
        }
        poll_fn(|cx| {
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            if notified.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }
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

enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// What the thread needs to know, fixed at build time.
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

/// Starts the thread.
pub(crate) fn spawn<C: Clock>(
    inner: Weak<Inner<C>>,
    config: WorkerConfig,
) -> io::Result<JoinHandle<()>> {
    let stop = match inner.upgrade() {
        Some(i) => Arc::clone(&i.stop),
        None => return Err(io::Error::other("the limiter was dropped while building")),
    };
    thread::Builder::new()
        .name("otel-rate-fleet".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(target: "otel_rate_sampler::fleet", error = %e,
                        "could not start the fleet runtime; this instance admits nothing");
                    return;
                }
            };
            runtime.block_on(Worker::new(inner, config, stop).run());
        })
}

#[derive(Clone, Copy, Debug)]
enum Call {
    /// Sample the server's clock (before the first lease: window ids need it).
    Time,
    Lease {
        window: u64,
        want: u64,
    },
}

struct Worker<C> {
    inner: Weak<Inner<C>>,
    stop: Arc<Stop>,
    cfg: WorkerConfig,
    script: Script,
    keys: [String; 3],
    conn: Option<Conn>,
    interval: u64,
    tick: Duration,
    young_windows: u64,
    // The window the worker accounts for, and what it installed for it (grants plus
    // fallback shares): what it reports to Redis as held.
    cur: u64,
    installed_cur: u64,
    spent_seen: u64,
    spent_prev: u64,
    // The prefetched lease for `cur + 1`, if any.
    next_w: u64,
    installed_next: u64,
    lease_retry_at: u64,
    last_ok: Option<u64>,
    last_attempt: Option<u64>,
    last_failed: bool,
    // The newest window this instance talked to Redis about: fallback only spends in
    // later windows.
    leased_upto: u64,
    // (k, rank) from the last reply outside a restart's recovery windows.
    view: Option<(u64, u64)>,
    // Whether `view` came from a reply outside the young windows. A brand-new rule's
    // first replies see the instances that have registered so far, so views taken
    // then disagree (1, 2, 3 for three instances starting together): their shares
    // would add up to more than N. Fallback spends a share only from a settled view.
    view_settled: bool,
    fallback: bool,
    // The first window the current fallback may spend in, and the last one it did.
    fallback_from: u64,
    fallback_for: u64,
    last_warn: Option<u64>,
    errors_since_warn: u64,
    rtt: u64,
    // The fastest recent round trip, and when the clock mapping was last sampled.
    best_rtt: u64,
    last_sample: Option<u64>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<C: Clock> Worker<C> {
    fn new(inner: Weak<Inner<C>>, cfg: WorkerConfig, stop: Arc<Stop>) -> Self {
        let interval = nanos(cfg.interval).max(1);
        let tick = Duration::from_nanos((cfg.window_nanos / 40).min(interval / 4))
            .max(Duration::from_millis(1));
        // Recovery windows after Redis's memory starts: enough for every instance to
        // have retried (one interval plus the call's timeouts), plus one.
        let recovery = FALLBACK_AFTER_INTERVALS * interval
            + nanos(cfg.response_timeout)
            + nanos(cfg.connect_timeout);
        let young_windows = recovery.div_ceil(cfg.window_nanos) + 2;
        let keys = [
            format!("{}:members", cfg.tag),
            format!("{}:meta", cfg.tag),
            format!("{}:seen", cfg.tag),
        ];
        Self {
            inner,
            stop,
            script: Script::new(LEASE_LUA),
            keys,
            conn: None,
            interval,
            tick,
            young_windows,
            cur: 0,
            installed_cur: 0,
            spent_seen: 0,
            spent_prev: 0,
            next_w: 0,
            installed_next: 0,
            lease_retry_at: 0,
            last_ok: None,
            last_attempt: None,
            last_failed: false,
            leased_upto: 0,
            view: None,
            view_settled: false,
            fallback: false,
            fallback_from: u64::MAX,
            fallback_for: 0,
            last_warn: None,
            errors_since_warn: 0,
            rtt: 0,
            best_rtt: u64::MAX,
            last_sample: None,
            cfg,
        }
    }

    async fn run(mut self) {
        loop {
            if self.stop.is_stopped() {
                break;
            }
            let planned = {
                let Some(inner) = self.inner.upgrade() else {
                    break;
                };
                let now = inner.clock.now_nanos();
                let sent_ms = inner.time.fleet_nanos(now).unwrap_or(0) / 1_000_000;
                self.plan(&inner, now)
                    .map(|call| (call, self.request(call, sent_ms), now))
            };
            if let Some((call, request, t0)) = planned {
                let result = self.call(call, request.as_ref()).await;
                let Some(result) = result else { break };
                let Some(inner) = self.inner.upgrade() else {
                    break;
                };
                let t1 = inner.clock.now_nanos();
                self.last_attempt = Some(t0);
                self.apply(&inner, call, request.as_ref(), result, t0, t1);
                continue;
            }
            if self
                .stop
                .unless_stopped(tokio::time::sleep(self.tick))
                .await
                .is_none()
            {
                break;
            }
        }
        if let Some(inner) = self.inner.upgrade() {
            inner.stats.fallback.store(false, Ordering::Relaxed);
        }
    }

    /// Window bookkeeping and fallback; returns the call to make now, if any.
    fn plan(&mut self, inner: &Inner<C>, now: u64) -> Option<Call> {
        let interval = self.interval;
        let paced = |last: Option<u64>| last.is_none_or(|t| now.saturating_sub(t) >= interval);
        if self.last_failed && !paced(self.last_attempt) {
            // While failing, one attempt per sync interval.
            if let Some(fleet) = inner.time.fleet_nanos(now) {
                let cw = fleet / self.cfg.window_nanos;
                self.update_fallback(inner, now, cw);
                self.roll_and_fall_back(inner, cw);
            }
            return None;
        }
        let Some(fleet) = inner.time.fleet_nanos(now) else {
            return paced(self.last_attempt).then_some(Call::Time);
        };
        let cw = fleet / self.cfg.window_nanos;
        self.update_fallback(inner, now, cw);
        self.roll_and_fall_back(inner, cw);
        let (ww, remaining) = inner.lease.snapshot();
        let remaining = if ww == self.cur { remaining } else { 0 };
        if ww == self.cur {
            self.spent_seen = self.installed_cur.saturating_sub(remaining);
        }
        // Relaxed: display values (see `StatCells`).
        inner.stats.window.store(self.cur, Ordering::Relaxed);
        inner
            .stats
            .granted
            .store(self.installed_cur, Ordering::Relaxed);

        if self.last_failed || self.fallback {
            // Paced above: one attempt per interval, a heartbeat that also reports.
            return Some(Call::Lease {
                window: cw,
                want: 0,
            });
        }
        let c = chunk(self.cfg.permits, self.spent_prev, self.spent_seen);
        if remaining <= low_water(c) && now >= self.lease_retry_at {
            return Some(Call::Lease {
                window: cw,
                want: c,
            });
        }
        let to_edge = (cw + 1)
            .saturating_mul(self.cfg.window_nanos)
            .saturating_sub(fleet);
        let lead = (4 * self.rtt).max(2 * nanos(self.tick));
        if to_edge <= lead && self.next_w != cw + 1 {
            return Some(Call::Lease {
                window: cw + 1,
                want: chunk(self.cfg.permits, self.spent_seen, 0),
            });
        }
        paced(self.last_ok).then_some(Call::Lease {
            window: cw,
            want: 0,
        })
    }

    /// Enters fallback after [`FALLBACK_AFTER_INTERVALS`] without a successful call. The
    /// share is spent only from the next window on (`cw + 1`): Redis starts reserving
    /// this instance's share [`STALE_AFTER_INTERVALS`] after its last call, one interval
    /// before this, so every lease the others got for a window that starts later
    /// already left the share out; in the current window they may not have.
    fn update_fallback(&mut self, inner: &Inner<C>, now: u64, cw: u64) {
        let stale = self
            .last_ok
            .is_none_or(|t| now.saturating_sub(t) >= FALLBACK_AFTER_INTERVALS * self.interval);
        if stale && !self.fallback && self.view_settled {
            self.fallback = true;
            self.fallback_from = cw + 1;
            inner.stats.fallback.store(true, Ordering::Relaxed);
            let (k, _) = self.view.unwrap_or((1, 0));
            tracing::warn!(target: "otel_rate_sampler::fleet", key = %self.cfg.tag,
                instances = k,
                "no successful Redis call for {} sync intervals: spending the local share N/{k}",
                FALLBACK_AFTER_INTERVALS);
        }
    }

    /// Moves the accounting to window `cw` and, in fallback, installs its share.
    fn roll_and_fall_back(&mut self, inner: &Inner<C>, cw: u64) {
        if cw > self.cur {
            self.spent_prev = if self.cur + 1 == cw {
                self.spent_seen
            } else {
                0
            };
            if self.next_w == cw {
                // Installed by a decision already, or now by us: at most once either way.
                inner.lease.roll_to(cw, self.installed_next);
                self.installed_cur = self.installed_next;
            } else {
                self.installed_cur = 0;
            }
            self.cur = cw;
            self.next_w = 0;
            self.installed_next = 0;
            self.spent_seen = 0;
            self.lease_retry_at = 0;
        }
        if self.fallback
            && cw == self.cur
            && cw > self.leased_upto
            && cw >= self.fallback_from
            && self.fallback_for < cw
        {
            if let Some((k, rank)) = self.view {
                let s = share(self.cfg.permits, k, rank, cw);
                if inner.lease.add(cw, s) == Added::Installed {
                    self.installed_cur += s;
                }
            }
            self.fallback_for = cw;
        }
    }

    fn request(&self, call: Call, sent_ms: u64) -> Option<LeaseRequest> {
        match call {
            Call::Time => None,
            Call::Lease { window, want } => {
                let held = if window == self.cur {
                    self.installed_cur
                } else if window == self.next_w {
                    self.installed_next
                } else {
                    0
                };
                let (k, rank) = self.view.unwrap_or((0, 0));
                Some(LeaseRequest {
                    window,
                    want,
                    held,
                    known_instances: k,
                    known_rank: rank,
                    sent_ms,
                })
            }
        }
    }

    /// Makes one call, bounded by the timeouts; `None` if stopped meanwhile.
    async fn call(
        &mut self,
        call: Call,
        request: Option<&LeaseRequest>,
    ) -> Option<Result<Reply, String>> {
        let bound = self.cfg.response_timeout + self.cfg.connect_timeout;
        let stop = Arc::clone(&self.stop);
        let fut = async {
            let conn = connect(&mut self.conn, &self.cfg.target).await?;
            match (call, request) {
                (Call::Time, _) => {
                    let (s, us): (u64, u64) = match conn {
                        Conn::Single(c) => redis::cmd("TIME").query_async(c).await,
                        Conn::Cluster(c) => redis::cmd("TIME").query_async(c).await,
                    }
                    .map_err(|e| e.to_string())?;
                    Ok(Reply::Time(super::time::time_to_nanos(s, us)))
                }
                (Call::Lease { .. }, Some(req)) => {
                    let values = match conn {
                        Conn::Single(c) => {
                            invoke(
                                &self.script,
                                &self.cfg,
                                &self.keys,
                                self.young_windows,
                                req,
                                c,
                            )
                            .await
                        }
                        Conn::Cluster(c) => {
                            invoke(
                                &self.script,
                                &self.cfg,
                                &self.keys,
                                self.young_windows,
                                req,
                                c,
                            )
                            .await
                        }
                    }
                    .map_err(|e| e.to_string())?;
                    match LeaseReply::from_values(&values) {
                        Some(reply) if reply.expired => {
                            Err("the call reached Redis too late and was refused".to_owned())
                        }
                        Some(reply) => Ok(Reply::Lease(reply)),
                        None => Err(format!("unexpected lease script reply {values:?}")),
                    }
                }
                (Call::Lease { .. }, None) => Err("no request".to_owned()),
            }
        };
        let result = stop
            .unless_stopped(tokio::time::timeout(bound, fut))
            .await?;
        Some(match result {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {bound:?}")),
        })
    }

    fn apply(
        &mut self,
        inner: &Inner<C>,
        call: Call,
        request: Option<&LeaseRequest>,
        result: Result<Reply, String>,
        t0: u64,
        t1: u64,
    ) {
        // Relaxed (stats): display counters.
        inner.stats.redis_calls.fetch_add(1, Ordering::Relaxed);
        let reply = match result {
            Ok(reply) => reply,
            Err(error) => {
                inner.stats.lease_errors.fetch_add(1, Ordering::Relaxed);
                self.last_failed = true;
                // A fresh connection next time: the manager's own reconnect may be slow.
                self.conn = None;
                self.errors_since_warn += 1;
                if self
                    .last_warn
                    .is_none_or(|t| t1.saturating_sub(t) >= self.interval)
                {
                    tracing::warn!(target: "otel_rate_sampler::fleet", key = %self.cfg.tag,
                        errors = self.errors_since_warn, ?call, %error, "Redis call failed");
                    self.last_warn = Some(t1);
                    self.errors_since_warn = 0;
                }
                return;
            }
        };
        self.last_failed = false;
        self.last_ok = Some(t1);
        self.rtt = t1.saturating_sub(t0);
        let reply = match reply {
            Reply::Time(server) => {
                self.sample_time(inner, server, t0, t1);
                return;
            }
            Reply::Lease(reply) => reply,
        };
        self.sample_time(inner, reply.server_unix_nanos, t0, t1);
        if self.fallback {
            self.fallback = false;
            inner.stats.fallback.store(false, Ordering::Relaxed);
            tracing::warn!(target: "otel_rate_sampler::fleet", key = %self.cfg.tag,
                "Redis answers again: leasing resumed");
        }
        inner
            .stats
            .instances
            .store(reply.instances, Ordering::Relaxed);
        if !reply.young || self.view.is_none() {
            self.view = Some((reply.instances, reply.rank));
            self.view_settled |= !reply.young;
        }
        let Some(req) = request else { return };
        self.leased_upto = self.leased_upto.max(req.window);
        if reply.granted > 0 {
            inner.stats.leases.fetch_add(1, Ordering::Relaxed);
        }
        if req.window == self.cur {
            if reply.granted > 0 && inner.lease.add(self.cur, reply.granted) == Added::Installed {
                self.installed_cur += reply.granted;
            }
            if req.want > reply.granted {
                // Short: the window is spent (wait for the next) or held back for
                // members that may be in fallback (ask again in an interval).
                self.lease_retry_at = if reply.total >= self.cfg.permits {
                    u64::MAX
                } else {
                    t1.saturating_add(self.interval)
                };
            }
        } else if req.window == self.cur + 1 && self.next_w != req.window {
            self.next_w = req.window;
            self.installed_next = reply.granted;
            inner.lease.publish_next(req.window, reply.granted);
        }
    }
}

/// The connection, made (without I/O for one server) when there is none.
async fn connect<'a>(conn: &'a mut Option<Conn>, target: &Target) -> Result<&'a mut Conn, String> {
    if conn.is_none() {
        *conn = Some(match target {
            Target::Single(client, config) => Conn::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                    .map_err(|e| e.to_string())?,
            ),
            Target::Cluster(client) => Conn::Cluster(
                client
                    .get_async_connection()
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        });
    }
    conn.as_mut().ok_or_else(|| "no connection".to_owned())
}

/// A call the server runs later than this after it was sent is refused by the script.
fn expiry_ms(response_timeout: Duration) -> u64 {
    u64::try_from(response_timeout.as_millis() / 2)
        .unwrap_or(u64::MAX)
        .max(1)
}

impl<C: Clock> Worker<C> {
    /// Maps the local clock onto the server's `TIME` from this call, if its round trip
    /// is close to the fastest recent one (a call slowed by a pause or a queue would
    /// move the mapping by half its round trip), or the mapping is 10 intervals old.
    fn sample_time(&mut self, inner: &Inner<C>, server: u64, t0: u64, t1: u64) {
        let rtt = t1.saturating_sub(t0);
        let old = self
            .last_sample
            .is_none_or(|t| t1.saturating_sub(t) >= 10 * self.interval);
        if old || rtt <= self.best_rtt.saturating_mul(2).saturating_add(1_000_000) {
            inner.time.sample(server, t0, t1);
            self.best_rtt = if old { rtt } else { self.best_rtt.min(rtt) };
            self.last_sample = Some(t1);
        }
    }
}

enum Reply {
    Time(u64),
    Lease(LeaseReply),
}

async fn invoke<Con: ConnectionLike>(
    script: &Script,
    cfg: &WorkerConfig,
    keys: &[String; 3],
    young: u64,
    req: &LeaseRequest,
    con: &mut Con,
) -> redis::RedisResult<Vec<i64>> {
    let interval_ms = u64::try_from(cfg.interval.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let window_ms = (cfg.window_nanos / 1_000_000).max(1);
    let mut inv = script.prepare_invoke();
    inv.key(format!("{}:w:{}", cfg.tag, req.window))
        .key(&keys[0])
        .key(&keys[1])
        .key(&keys[2])
        .arg(&cfg.instance_id)
        .arg(req.window)
        .arg(cfg.permits)
        .arg(req.want)
        .arg(req.held)
        .arg(req.known_instances)
        .arg(req.known_rank)
        .arg(window_ms)
        .arg(young)
        .arg(STALE_AFTER_INTERVALS * interval_ms)
        .arg(PRUNE_AFTER_INTERVALS * interval_ms)
        .arg(req.sent_ms)
        .arg(expiry_ms(cfg.response_timeout));
    inv.invoke_async(con).await
}
