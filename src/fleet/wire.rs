//! One rule's calls on the wire: its keys and fixed arguments, its replica group's keys
//! (see `script.rs`), the command a clock call becomes, a lease call's keys and
//! arguments in the lease script (with other rules' calls, `pipeline.rs`), and the
//! replies read back.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use redis::{Pipeline, RedisError, Script, ScriptInvocation, Value};

use super::call_error::{failed_call, CallError};
use super::lease::{Call, Reply, PRUNE_AFTER_INTERVALS, STALE_AFTER_INTERVALS};
use super::script::{LeaseReply, LeaseRequest};
use super::time::time_to_nanos;

/// Who a rule's calls come from and where its keys live.
#[derive(Debug)]
pub(crate) struct Naming {
    pub(crate) prefix: String,
    pub(crate) key: String,
    /// The rule's member: its window accounting and share.
    pub(crate) instance_id: String,
    /// The replica heartbeating for it (the process, unless the instance id was set).
    pub(crate) replica_id: String,
    /// On a cluster the group's keys must hash to the rule's slot.
    pub(crate) cluster: bool,
}

/// What a rule's calls need to know, fixed at build time.
#[derive(Debug)]
pub(crate) struct RuleWire {
    /// The hash tag `{prefix:key}` every key starts with.
    pub(crate) tag: String,
    /// `{p}:joined`, `{p}:meta`.
    keys: [String; 2],
    pub(crate) instance_id: String,
    replica_id: String,
    /// The replica group's `hb`, `seen` and `clock` keys.
    group_keys: [String; 3],
    group_tag: String,
    /// The replica group: its keys' base and the replica id (rules with the same one
    /// heartbeat together).
    pub(crate) group: String,
    pub(crate) permits: u64,
    pub(crate) window_nanos: u64,
    pub(crate) interval: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// Windows after Redis's memory starts in which grants are capped at the shares.
    pub(crate) young_windows: u64,
}

/// A rule's member, to remove from the rule's members when its limiter is dropped
/// while its replica lives on (`pool.rs`): its heartbeat goes on, so Redis would never
/// forget it.
#[derive(Clone, Debug)]
pub(crate) struct Leave {
    /// `{p}:joined`.
    pub(crate) key: String,
    /// `<replica> <instance id>`.
    pub(crate) member: String,
    /// How long the removal may take: the rule's call bound.
    pub(crate) bound: Duration,
}

/// The lease and clock scripts, compiled once per worker.
pub(crate) struct Scripts {
    pub(crate) lease: Script,
    pub(crate) clock: Script,
}

impl RuleWire {
    /// The wire settings of a rule, `timings` its interval, response and connect
    /// timeouts; the young windows are set by its worker (`worker.rs`).
    pub(crate) fn new(
        naming: Naming,
        permits: u64,
        window_nanos: u64,
        timings: [Duration; 3],
    ) -> Self {
        let [interval, response_timeout, connect_timeout] = timings;
        let tag = format!("{{{}:{}}}", naming.prefix, naming.key);
        let keys = [format!("{tag}:joined"), format!("{tag}:meta")];
        let group_tag = if naming.cluster {
            slot_group_tag(&naming.prefix, slot_of(&tag))
        } else {
            format!("{{{}:replicas}}", naming.prefix)
        };
        let base = format!("{group_tag}:{}", millis(interval));
        let group_keys = [
            format!("{base}:hb"),
            format!("{base}:seen"),
            format!("{base}:clock"),
        ];
        Self {
            group: format!("{base} {}", naming.replica_id),
            tag,
            keys,
            instance_id: naming.instance_id,
            replica_id: naming.replica_id,
            group_keys,
            group_tag,
            permits,
            window_nanos,
            interval,
            response_timeout,
            connect_timeout,
            young_windows: 0,
        }
    }

    /// How to remove this rule's member once its limiter is dropped.
    pub(crate) fn leave(&self) -> Leave {
        Leave {
            key: self.keys[0].clone(),
            member: format!("{} {}", self.replica_id, self.instance_id),
            bound: self.bound(),
        }
    }

    /// The longest one of this rule's calls may take: the response and connect
    /// timeouts.
    pub(crate) fn bound(&self) -> Duration {
        self.response_timeout + self.connect_timeout
    }

    /// Adds a clock call to `pipe`.
    pub(crate) fn push_clock(&self, pipe: &mut Pipeline, scripts: &Scripts) {
        pipe.invoke_script(&scripts.clock.key(&self.keys[1]));
    }

    /// Adds this rule's replica group to `invocation` of the lease script (before any
    /// call): its keys, tag, replica, vouched time, latest send time and interval.
    pub(crate) fn add_group(
        &self,
        invocation: &mut ScriptInvocation<'_>,
        vouch_ms: u64,
        sent_ms: u64,
    ) {
        for key in &self.group_keys {
            invocation.key(key);
        }
        invocation
            .arg(&self.group_tag)
            .arg(&self.replica_id)
            .arg(vouch_ms)
            .arg(sent_ms)
            .arg(millis(self.interval));
    }

    /// Adds the keys and arguments of a lease call to `invocation` (after the groups
    /// and the calls before it), `group` the number of its group there.
    pub(crate) fn add_lease(
        &self,
        invocation: &mut ScriptInvocation<'_>,
        request: LeaseRequest,
        group: usize,
    ) {
        let window_ms = (self.window_nanos / 1_000_000).max(1);
        invocation
            .key(format!("{}:w:{}", self.tag, request.window))
            .key(&self.keys[0])
            .key(&self.keys[1])
            .arg(&self.instance_id)
            .arg(request.window)
            .arg(self.permits)
            .arg(request.want)
            .arg(request.held)
            .arg(request.known_instances)
            .arg(request.known_rank)
            .arg(window_ms)
            .arg(self.young_windows)
            .arg(request.sent_ms)
            .arg(expiry_ms(self.response_timeout))
            .arg(group);
    }

    /// The cluster slot of every key of this rule (they share its hash tag).
    pub(crate) fn slot(&self) -> u16 {
        slot_of(&self.tag)
    }
}

/// The lease script's leading arguments: the number of groups, the stale and prune
/// ages in intervals.
pub(crate) fn add_ages(invocation: &mut ScriptInvocation<'_>, groups: usize) {
    invocation
        .arg(groups)
        .arg(STALE_AFTER_INTERVALS)
        .arg(PRUNE_AFTER_INTERVALS);
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The cluster slot of a key whose hash tag is all of `tag` (`{...}`).
fn slot_of(tag: &str) -> u16 {
    let inner = tag.trim_start_matches('{').trim_end_matches('}');
    Crc16::calculate(inner.as_bytes()) % 16384
}

/// The replica group tag of `prefix` in cluster slot `slot`: `{prefix:replicas:<n>}`,
/// `n` the least number whose tag hashes to the slot. The numbers of a prefix are
/// found once per process, every slot at a time.
fn slot_group_tag(prefix: &str, slot: u16) -> String {
    static TABLES: OnceLock<Mutex<HashMap<String, Vec<u32>>>> = OnceLock::new();
    let mut tables = TABLES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let table = tables.entry(prefix.to_owned()).or_insert_with(|| {
        let stem = format!("{prefix}:replicas:");
        let mut start = Crc16::new();
        start.update(stem.as_bytes());
        let mut table = vec![u32::MAX; 16384];
        let mut left = table.len();
        let mut n: u32 = 0;
        while left > 0 {
            let mut crc = start;
            crc.update(n.to_string().as_bytes());
            let s = usize::from(crc.get() % 16384);
            if table[s] == u32::MAX {
                table[s] = n;
                left -= 1;
            }
            n += 1;
        }
        table
    });
    format!("{{{prefix}:replicas:{}}}", table[usize::from(slot)])
}

/// Reads Redis's answer to `call`.
pub(crate) fn read_reply(
    call: Call,
    value: Value,
    response_timeout: Duration,
) -> Result<Reply, CallError> {
    let parse = |e: redis::ParsingError| CallError::redis(RedisError::from(e), response_timeout);
    match call {
        Call::SampleTime => {
            let (seconds, micros): (u64, u64) = redis::from_redis_value(value).map_err(parse)?;
            Ok(Reply::Time(time_to_nanos(seconds, micros)))
        }
        Call::Lease(_) => {
            if let Value::BulkString(message) = &value {
                // The script caught an error of this call alone (`script.rs`).
                return Err(failed_call(String::from_utf8_lossy(message).into_owned()));
            }
            let values: Vec<i64> = redis::from_redis_value(value).map_err(parse)?;
            LeaseReply::from_values(&values)
                .map(Reply::Lease)
                .ok_or(CallError::BadReply(values))
        }
    }
}

/// A call the server runs later than this after it was sent is refused by the script.
fn expiry_ms(response_timeout: Duration) -> u64 {
    u64::try_from(response_timeout.as_millis() / 2)
        .unwrap_or(u64::MAX)
        .max(1)
}

/// CRC16/XMODEM, the hash of Redis Cluster's key slots.
type Crc16 = crc16::State<crc16::XMODEM>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::stats::FleetFailure;

    fn wire(prefix: &str, key: &str, cluster: bool) -> RuleWire {
        let naming = Naming {
            prefix: prefix.to_owned(),
            key: key.to_owned(),
            instance_id: "i".to_owned(),
            replica_id: "r".to_owned(),
            cluster,
        };
        RuleWire::new(naming, 1, 1, [Duration::ZERO; 3])
    }

    /// A call the lease script caught an error of answers Redis's message: a typed
    /// error of that call, `Foreign` for `WRONGTYPE`, naming the key the script found.
    #[test]
    fn a_caught_error_is_the_calls_own_typed_error() {
        let call = Call::Lease(LeaseRequest {
            window: 1,
            want: 1,
            held: 0,
            known_instances: 0,
            known_rank: 0,
            sent_ms: 1,
            vouch_ms: 0,
        });
        let read = |m: &str| read_reply(call, Value::BulkString(m.into()), Duration::ZERO);
        let wrong = "WRONGTYPE Operation against a key ({p:k}:meta holds a string)";
        let error = read(wrong).expect_err("an error");
        assert_eq!(error.kind(), FleetFailure::Foreign);
        assert!(
            error.to_string().contains("{p:k}:meta holds a string"),
            "{error}"
        );
        let oom = read("OOM command not allowed").expect_err("an error");
        assert_eq!(oom.kind(), FleetFailure::Redis);
    }

    /// The slot decides which calls may share a pipeline in a cluster: it must be
    /// Redis's own (the check value of CRC16/XMODEM, and Redis's slot of `foo`).
    #[test]
    fn slots_are_redis_cluster_slots() {
        assert_eq!(Crc16::calculate(b"123456789"), 0x31C3);
        assert_eq!(slot_of("{foo}"), 12182);
        assert_eq!(
            wire("otel-rate", "a", true).slot(),
            slot_of("{otel-rate:a}")
        );
    }

    /// A script may only touch keys of one slot on a cluster: a rule's replica group
    /// keys hash to the rule's own slot, and rules of one slot share them; on one
    /// server every rule of a prefix shares them.
    #[test]
    fn replica_groups_are_in_the_rules_slot() {
        for key in ["a", "b", "checkout:root", "rule999"] {
            let w = wire("otel-rate", key, true);
            assert_eq!(slot_of(&w.group_tag), w.slot(), "{key}");
            assert!(w.group_keys.iter().all(|k| k.starts_with(&w.group_tag)));
        }
        let (a, b) = (wire("p", "a", false), wire("p", "b", false));
        assert_eq!(
            (a.group.as_str(), &a.group_keys),
            (b.group.as_str(), &b.group_keys)
        );
        assert_ne!(a.group, wire("q", "a", false).group);
    }
}
