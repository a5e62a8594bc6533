//! One round's calls as pipelines: each clock call one command, the lease calls of a
//! server (or of one slot of a cluster) one command of the lease script, with their
//! replica groups' heartbeats; sent in one round trip, each command's answer handed
//! back to the calls it answers. On a cluster, one pipeline per slot, sent together.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::cluster_async::{ClusterConnection, Connect};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, ScriptInvocation, ServerErrorKind, Value};
use tokio::task::JoinSet;

use super::lease::Call;
use super::script::LeaseRequest;
use super::wire::{add_ages, RuleWire, Scripts};

/// Each call's answer, in the order of the round.
pub(crate) type Answers = Vec<Result<Value, RedisError>>;

/// A call of the round (its index) and its answer.
type Pairs = Vec<(usize, Result<Value, RedisError>)>;

/// Which calls of the round one command answers.
enum Answering {
    /// One clock call.
    One(usize),
    /// The lease calls, in the order of the reply's items.
    Each(Vec<usize>),
}

/// A pipeline of some calls of a round, and what each of its commands answers.
pub(crate) struct Batch {
    pipe: Pipeline,
    answering: Vec<Answering>,
}

impl Batch {
    /// The calls `at` of `round` as one pipeline.
    pub(crate) fn new(round: &[(&RuleWire, Call)], at: &[usize], scripts: &Scripts) -> Self {
        let mut pipe = redis::pipe();
        let mut answering = Vec::new();
        let mut leases = Vec::new();
        for &i in at {
            let (wire, call) = round[i];
            match call {
                Call::Lease(request) => leases.push((i, wire, request)),
                Call::SampleTime => {
                    wire.push_clock(&mut pipe, scripts);
                    answering.push(Answering::One(i));
                }
            }
        }
        if !leases.is_empty() {
            pipe.invoke_script(&lease_invocation(&leases, scripts));
            answering.push(Answering::Each(leases.iter().map(|l| l.0).collect()));
        }
        Self { pipe, answering }
    }

    /// Sends the pipeline; each call's answer.
    pub(crate) async fn send<C: ConnectionLike>(
        self,
        connection: &mut C,
        scripts: &Scripts,
    ) -> Result<Pairs, RedisError> {
        let answers = send(connection, self.pipe, scripts).await?;
        let mut pairs = Vec::new();
        for (answering, answer) in self.answering.into_iter().zip(answers) {
            match (answering, answer) {
                (Answering::One(i), answer) => pairs.push((i, answer)),
                (Answering::Each(at), Ok(Value::Array(items))) if items.len() == at.len() => {
                    pairs.extend(at.into_iter().zip(items.into_iter().map(Ok)));
                }
                (Answering::Each(at), Ok(other)) => {
                    let bad = RedisError::from(io::Error::other(format!(
                        "unexpected reply of the lease script: {other:?}"
                    )));
                    pairs.extend(at.into_iter().map(|i| (i, Err(bad.clone()))));
                }
                (Answering::Each(at), Err(e)) => {
                    pairs.extend(at.into_iter().map(|i| (i, Err(e.clone()))));
                }
            }
        }
        Ok(pairs)
    }
}

/// One call of the lease script for `leases`: their replica groups first (each once,
/// with the oldest time its calls vouch for and the latest send time), then the calls.
fn lease_invocation<'a>(
    leases: &[(usize, &RuleWire, LeaseRequest)],
    scripts: &'a Scripts,
) -> ScriptInvocation<'a> {
    // (a rule of the group, vouched, latest sent)
    let mut groups: Vec<(&RuleWire, u64, u64)> = Vec::new();
    let mut of = Vec::with_capacity(leases.len());
    for (_, wire, request) in leases {
        match groups.iter().position(|g| g.0.group == wire.group) {
            Some(g) => {
                let group = &mut groups[g];
                group.1 = group.1.min(request.vouch_ms);
                group.2 = group.2.max(request.sent_ms);
                of.push(g + 1);
            }
            None => {
                groups.push((wire, request.vouch_ms, request.sent_ms));
                of.push(groups.len());
            }
        }
    }
    let mut invocation = scripts.lease.prepare_invoke();
    add_ages(&mut invocation, groups.len());
    for (wire, vouch, sent) in &groups {
        wire.add_group(&mut invocation, *vouch, *sent);
    }
    for ((_, wire, request), group) in leases.iter().zip(of) {
        wire.add_lease(&mut invocation, *request, group);
    }
    invocation
}

/// The answers of a round of `len` calls in its order; a call without one gets an
/// error.
pub(crate) fn in_order(len: usize, pairs: Pairs) -> Answers {
    let mut answers: Vec<Option<Result<Value, RedisError>>> = vec![None; len];
    for (i, answer) in pairs {
        if let Some(slot) = answers.get_mut(i) {
            *slot = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(io::Error::other("no answer in the pipeline").into())))
        .collect()
}

/// A cluster's round: one pipeline per slot, sent together; a slot's failure fails
/// that slot's calls only.
pub(crate) async fn by_slot<N>(
    connection: &ClusterConnection<N>,
    round: &[(&RuleWire, Call)],
    scripts: Arc<Scripts>,
) -> Result<Answers, RedisError>
where
    // What the redis crate asks of a node's connection (plain, or ours over TLS).
    N: ConnectionLike + Connect + Clone + Send + Sync + Unpin + 'static,
{
    let mut slots: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, (wire, _)) in round.iter().enumerate() {
        slots.entry(wire.slot()).or_default().push(i);
    }
    let mut tasks = JoinSet::new();
    for at in slots.into_values() {
        let batch = Batch::new(round, &at, &scripts);
        let mut c = connection.clone();
        let scripts = Arc::clone(&scripts);
        tasks.spawn(async move { (batch.send(&mut c, &scripts).await, at) });
    }
    let mut pairs = Pairs::new();
    while let Some(done) = tasks.join_next().await {
        let (sent, at) = done.map_err(|e| RedisError::from(io::Error::other(e)))?;
        match sent {
            Ok(sent) => pairs.extend(sent),
            Err(e) => pairs.extend(at.into_iter().map(|i| (i, Err(e.clone())))),
        }
    }
    Ok(in_order(round.len(), pairs))
}

/// Sends `pipe` and reads each command's answer; the commands Redis refused for not
/// knowing the script (a Redis restarted empty, a new connection to a new node) are
/// sent again once the scripts are loaded.
async fn send<C: ConnectionLike>(
    connection: &mut C,
    mut pipe: Pipeline,
    scripts: &Scripts,
) -> Result<Answers, RedisError> {
    pipe.ignore_errors();
    let mut answers: Answers = pipe.query_async(connection).await?;
    let unknown: Vec<usize> = (0..answers.len())
        .filter(|&i| {
            answers[i]
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        })
        .collect();
    if unknown.is_empty() {
        return Ok(answers);
    }
    let mut again = redis::pipe();
    // Each command's answer of its own here too: one call's error (a clock call on a
    // foreign key) must not fail the others sent again with it.
    again.ignore_errors();
    for script in [&scripts.lease, &scripts.clock] {
        again.load_script(script).ignore();
    }
    let commands: Vec<&Cmd> = pipe.cmd_iter().collect();
    for &i in &unknown {
        again.add_command(commands[i].clone());
    }
    let resent: Answers = again.query_async(connection).await?;
    for (i, answer) in unknown.into_iter().zip(resent) {
        answers[i] = answer;
    }
    Ok(answers)
}
