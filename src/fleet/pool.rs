//! One worker per Redis target: every fleet limiter of the process on the same Redis
//! (address, database and credentials of its URL(s), and the cluster flag) shares one
//! background thread, one current-thread runtime and one multiplexed connection (per
//! node on a cluster).
//!
//! Each round the worker asks every rule for its due call (`worker.rs`), sends them
//! all in one pipeline (one per slot on a cluster, `pipeline.rs`) and hands each
//! answer back to its rule; it looks again every tick (the shortest of its rules') or
//! as soon as a round ends. Rounds may overlap on the multiplexed connection, a rule
//! having at most one call in flight: a slow round holds up only its own rules. Rules
//! that call at the same moments (heartbeats once per interval, leases near the same
//! window edge) share rounds: round trips per second follow the rules' timings, not
//! their number.
//!
//! The registry holds the workers weakly, and the worker holds its rules weakly: the
//! last limiter of a rule dropped ends its calls; the last rule of a worker dropped
//! stops its thread at once, even in the middle of a round.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::lease::{Call, Vouch};
use super::stop::Stop;
use super::target::{self, TargetCells};
#[cfg(feature = "metrics")]
use super::target::{Gauges, TargetStats};
use super::transport::{Target, Transport};
use super::wire::Leave;
use super::worker::{Member, Planned};

/// What makes two limiters share a worker: what their Redis URL(s) connect to
/// (address, database, credentials, protocol: `transport::target_identity`) and
/// whether they name a cluster; nothing of their windows or timeouts. The connection is
/// built with limits of its own far above any rule's (`transport::CONNECTION_CEILING`):
/// each round is bounded by the timeouts of the rules in it, and a rule whose own bound
/// passed takes its answer as a timeout (`worker.rs`), so no limiter's timeout is
/// replaced by another's, and rules of any windows share one thread and connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    targets: Vec<String>,
    cluster: bool,
}

impl PoolKey {
    pub(crate) fn new(mut targets: Vec<String>, cluster: bool) -> Self {
        // Seed nodes in any order name the same cluster.
        targets.sort();
        targets.dedup();
        Self { targets, cluster }
    }
}

/// A worker: its thread stops when the last of these is dropped.
pub(crate) struct Pool {
    shared: Arc<PoolShared>,
}

/// What the thread and the handles share.
#[derive(Default)]
struct PoolShared {
    stop: Stop,
    /// The target's URL(s) without credentials, for the metrics.
    label: String,
    /// What every rule served has counted (`target.rs`).
    cells: Arc<TargetCells>,
    /// The rules, and how to remove each one's member once it is dropped.
    members: Mutex<Vec<(Weak<dyn Member>, Leave)>>,
    /// Members of rules dropped since the last round, to remove.
    leaving: Mutex<Vec<Leave>>,
    /// Rules registered and not yet dropped.
    rules: AtomicU64,
    /// Rounds sent to Redis (one round trip each; one per slot on a cluster).
    round_trips: AtomicU64,
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.stop();
    }
}

/// A rule's place in a worker; leaving it (on the limiter's drop) unregisters it.
pub(crate) struct Registration {
    pool: Arc<Pool>,
}

impl Registration {
    /// The rules this worker serves, and the round trips it made.
    pub(crate) fn figures(&self) -> (u64, u64) {
        let s = &self.pool.shared;
        // Relaxed (both): display counters.
        (
            s.rules.load(Ordering::Relaxed),
            s.round_trips.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Relaxed: a display counter.
        self.pool.shared.rules.fetch_sub(1, Ordering::Relaxed);
    }
}

type Registry = Mutex<HashMap<PoolKey, Weak<Pool>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn registry() -> &'static Registry {
    static POOLS: OnceLock<Registry> = OnceLock::new();
    POOLS.get_or_init(Registry::default)
}

/// Registers `member` with the worker for `key`, starting one (on `target`, labelled
/// `label`) if there is none; `cells` is set to the worker's counters before the
/// member's first call.
///
/// # Errors
///
/// When a new worker's thread cannot start.
pub(crate) fn join(
    key: PoolKey,
    (target, label): (Target, String),
    member: Weak<dyn Member>,
    cells: &OnceLock<Arc<TargetCells>>,
) -> io::Result<Registration> {
    let mut pools = registry()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    pools.retain(|_, pool| pool.strong_count() > 0);
    let pool = match pools.get(&key).and_then(Weak::upgrade) {
        Some(pool) => pool,
        None => {
            let pool = Arc::new(Pool {
                shared: Arc::new(PoolShared {
                    label,
                    ..PoolShared::default()
                }),
            });
            spawn(Arc::clone(&pool.shared), target)?;
            pools.insert(key, Arc::downgrade(&pool));
            pool
        }
    };
    drop(pools);
    let shared = &pool.shared;
    let _ = cells.set(Arc::clone(&shared.cells));
    if let Some(leave) = member.upgrade().map(|m| m.wire().leave()) {
        lock(&shared.members).push((member, leave));
    }
    // Relaxed: a display counter.
    shared.rules.fetch_add(1, Ordering::Relaxed);
    Ok(Registration { pool })
}

fn spawn(shared: Arc<PoolShared>, target: Target) -> io::Result<()> {
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
                        "could not start the fleet runtime; its limiters admit nothing");
                    return;
                }
            };
            runtime.block_on(run(shared, Transport::new(target)));
        })
        .map(drop)
}

/// With no rule, how long the worker sleeps between looks.
const IDLE_TICK: Duration = Duration::from_millis(10);

/// The rounds, until the last handle of the worker is dropped: every tick (or as soon
/// as a round ends) the rules' due calls go out as a new round, while earlier rounds
/// may still be in flight on the multiplexed connection (a rule has at most one call
/// in flight): a slow round delays only its own rules.
async fn run(shared: Arc<PoolShared>, transport: Transport) {
    let transport = Arc::new(transport);
    let mut rounds = JoinSet::new();
    while !shared.stop.is_stopped() {
        while rounds.try_join_next().is_some() {}
        let members = shared.live_members();
        let leaving = std::mem::take(&mut *lock(&shared.leaving));
        if !leaving.is_empty() {
            // On the connection after the dropped rules' last calls: they cannot
            // join again behind it.
            let transport = Arc::clone(&transport);
            rounds.spawn(async move { transport.leave(&leaving).await });
        }
        let tick = members.iter().map(|m| m.tick()).min().unwrap_or(IDLE_TICK);
        let mut due: Vec<(Arc<dyn Member>, Planned)> = members
            .iter()
            .filter_map(|m| m.plan(false).map(|p| (Arc::clone(m), p)))
            .collect();
        // Rules gone dormant leave their rule's members (next pass, on the connection
        // after their last calls), so nobody reserves a share for them.
        let dormant: Vec<Leave> = members
            .iter()
            .filter(|m| m.leaving())
            .map(|m| m.wire().leave())
            .collect();
        lock(&shared.leaving).extend(dormant);
        if !due.is_empty() {
            // The heartbeats due within a quarter interval go in this round: rules whose
            // mappings of fleet time differ a little stay in the same rounds.
            let pulled: Vec<_> = members
                .iter()
                .filter_map(|m| m.plan(true).map(|p| (Arc::clone(m), p)))
                .collect();
            due.extend(pulled);
        }
        vouch(&members, &mut due);
        if !due.is_empty() {
            rounds.spawn(round(Arc::clone(&shared), Arc::clone(&transport), due));
        }
        let mut sleep = pin!(tokio::time::sleep(tick));
        let woken = poll_fn(|cx| {
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            // A round that ended: its rules may have a call due at once.
            match rounds.poll_join_next(cx) {
                Poll::Ready(Some(_)) => Poll::Ready(()),
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            }
        });
        if shared.stop.unless_stopped(woken).await.is_none() {
            break;
        }
    }
}

/// Sets what each lease call of the round vouches for in its replica group's heartbeat
/// (`script.rs`): the oldest of the group's rules' last answered lease calls, a rule
/// with a lease call in the round counting that one; none (0) if one of them was never
/// answered. A rule with a call in flight or failing thus holds the heartbeat back,
/// and Redis never hears a replica later than it heard each of its rules; except a rule
/// whose keys another program wrote, which spends nothing Redis did not grant
/// (`lease/vouch.rs`).
fn vouch(members: &[Arc<dyn Member>], due: &mut [(Arc<dyn Member>, Planned)]) {
    let mut in_round: HashMap<*const (), u64> = HashMap::new();
    let mut groups: HashMap<&str, u64> = HashMap::new();
    for (m, planned) in due.iter() {
        if let Call::Lease(request) = planned.call {
            in_round.insert(Arc::as_ptr(m).cast(), request.sent_ms);
        }
    }
    for m in members {
        if in_round.contains_key(&Arc::as_ptr(m).cast()) {
            groups.insert(m.wire().group.as_str(), u64::MAX);
        }
    }
    for m in members {
        if let Some(oldest) = groups.get_mut(m.wire().group.as_str()) {
            let mine = in_round.get(&Arc::as_ptr(m).cast()).copied();
            if let Vouch::Until(ms) = m.vouch(mine) {
                *oldest = (*oldest).min(ms);
            }
        }
    }
    for (m, planned) in due.iter_mut() {
        if let Call::Lease(request) = &mut planned.call {
            request.vouch_ms = groups.get(m.wire().group.as_str()).copied().unwrap_or(0);
        }
    }
}

/// One round: the due calls sent together, each answer handed to its rule.
async fn round(
    shared: Arc<PoolShared>,
    transport: Arc<Transport>,
    due: Vec<(Arc<dyn Member>, Planned)>,
) {
    let batch: Vec<_> = due.iter().map(|(m, p)| (m.wire(), p.call)).collect();
    // The round trip for the statistics, from the precise monotonic clock.
    let started = Instant::now();
    let Some(answers) = transport.round(&batch, &shared.stop).await else {
        due.iter().for_each(|(m, _)| m.abandon());
        return;
    };
    // Relaxed: a display counter.
    shared.round_trips.fetch_add(1, Ordering::Relaxed);
    let round_trip = started.elapsed();
    target::round_observed(&shared.label, round_trip);
    for ((member, planned), answer) in due.iter().zip(answers) {
        member.apply(*planned, answer, round_trip);
    }
}

/// Every worker of the process now, one entry per label: what it counted over its
/// life and the gauges of the rules it serves.
#[cfg(feature = "metrics")]
pub(crate) fn targets() -> Vec<TargetStats> {
    let pools: Vec<Arc<Pool>> = lock(registry())
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    let mut by_label: Vec<TargetStats> = Vec::new();
    for pool in pools {
        let s = &pool.shared;
        let mut gauges = Gauges::default();
        let members: Vec<Arc<dyn Member>> = lock(&s.members)
            .iter()
            .filter_map(|(m, _)| m.upgrade())
            .filter(|m| !m.stopped())
            .collect();
        for (instances, fallback) in members.iter().filter_map(|m| m.gauges()) {
            gauges.rules += 1;
            gauges.replicas = gauges.replicas.max(instances);
            gauges.in_fallback += u64::from(fallback);
        }
        let stats = s.cells.read(&s.label, gauges);
        match by_label.iter_mut().find(|t| t.label == stats.label) {
            Some(same) => same.merge(&stats),
            None => by_label.push(stats),
        }
    }
    by_label
}

impl PoolShared {
    /// The rules still there (the others are forgotten, their members to remove).
    fn live_members(&self) -> Vec<Arc<dyn Member>> {
        let mut members = lock(&self.members);
        let mut live = Vec::with_capacity(members.len());
        let mut gone = Vec::new();
        members.retain(|(m, leave)| match m.upgrade() {
            Some(m) if !m.stopped() => {
                live.push(m);
                true
            }
            _ => {
                gone.push(leave.clone());
                false
            }
        });
        drop(members);
        lock(&self.leaving).extend(gone);
        live
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::*;
    use crate::fleet::call_error::CallError;
    use crate::fleet::script::LeaseRequest;
    use crate::fleet::wire::{Naming, RuleWire};

    /// A rule as the pool sees it: its wire, its last answered lease call, and whether
    /// its keys are foreign.
    struct Fake {
        wire: RuleWire,
        answered: Option<u64>,
        foreign: bool,
    }

    impl Member for Fake {
        fn wire(&self) -> &RuleWire {
            &self.wire
        }
        fn tick(&self) -> Duration {
            Duration::from_millis(1)
        }
        fn plan(&self, _pull: bool) -> Option<Planned> {
            None
        }
        fn vouch(&self, in_round: Option<u64>) -> Vouch {
            match (self.foreign, in_round) {
                (true, None) => Vouch::Free,
                _ => Vouch::Until(in_round.or(self.answered).unwrap_or(0)),
            }
        }
        fn apply(&self, _: Planned, _: Result<Value, CallError>, _: Duration) {}
        fn abandon(&self) {}
        fn stopped(&self) -> bool {
            false
        }
    }

    impl Fake {
        /// A rule `key` of replica `replica` (interval 100 ms), last answered at
        /// `answered`.
        fn of(key: &str, replica: &str, answered: Option<u64>) -> Self {
            let naming = Naming {
                prefix: "p".to_owned(),
                key: key.to_owned(),
                instance_id: format!("{replica}-{key}"),
                replica_id: replica.to_owned(),
                cluster: false,
            };
            let interval = Duration::from_millis(100);
            let wire = RuleWire::new(naming, 10, 1_000_000_000, [interval; 3]);
            Self {
                wire,
                answered,
                foreign: false,
            }
        }
    }

    fn rule(key: &str, replica: &str, answered: Option<u64>) -> Arc<dyn Member> {
        Arc::new(Fake::of(key, replica, answered))
    }

    fn lease(sent_ms: u64) -> Planned {
        Planned::at_zero(Call::Lease(LeaseRequest {
            window: 1,
            want: 0,
            held: 0,
            known_instances: 0,
            known_rank: 0,
            sent_ms,
            vouch_ms: 0,
        }))
    }

    fn vouched(due: &[(Arc<dyn Member>, Planned)]) -> Vec<u64> {
        due.iter()
            .map(|(_, p)| match p.call {
                Call::Lease(r) => r.vouch_ms,
                Call::SampleTime => u64::MAX,
            })
            .collect()
    }

    /// A replica's heartbeat vouches for the oldest of its rules' last answered calls
    /// (a rule in the round counting this call), per replica group: a rule that is
    /// failing or has a call in flight holds it back, one never answered stops it.
    #[test]
    fn a_heartbeat_vouches_for_the_oldest_answer_of_its_group() {
        let a1 = rule("a1", "r", Some(500));
        let a2 = rule("a2", "r", Some(900));
        let a3 = rule("a3", "r", Some(700));
        let other = rule("b", "s", Some(100));
        let members = vec![a1.clone(), a2.clone(), a3.clone(), other.clone()];
        let mut due = vec![
            (a1.clone(), lease(1000)),
            (a2.clone(), lease(1000)),
            (a3.clone(), Planned::at_zero(Call::SampleTime)),
            (other.clone(), lease(1000)),
        ];
        vouch(&members, &mut due);
        // a3, not leasing in the round, holds r back to its last answer; s is alone.
        assert_eq!(vouched(&due), vec![700, 700, u64::MAX, 1000]);

        // A rule failing on a foreign key (it spends nothing Redis did not grant) holds
        // nothing back, never answered or not, unless it is in the round.
        let foreign = Arc::new(Fake {
            foreign: true,
            ..Fake::of("f", "r", Some(100))
        });
        let never = Arc::new(Fake {
            foreign: true,
            ..Fake::of("g", "r", None)
        });
        let members = vec![a1.clone(), a2.clone(), foreign, never];
        let mut due = vec![(a1.clone(), lease(1000)), (a2.clone(), lease(900))];
        vouch(&members, &mut due);
        assert_eq!(vouched(&due), vec![900, 900]);

        let fresh = rule("a4", "r", None);
        let members = vec![a1.clone(), fresh];
        let mut due = vec![(a1, lease(1000))];
        vouch(&members, &mut due);
        assert_eq!(
            vouched(&due),
            vec![0],
            "a rule never answered: no heartbeat"
        );
    }
}
