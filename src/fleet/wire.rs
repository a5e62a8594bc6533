//! One rule's calls on the wire: its keys and fixed arguments, the command a
//! [`Call`] becomes (an `EVALSHA` of the clock or lease script, to go in a pipeline
//! with other rules' calls) and its reply read back.

use std::time::Duration;

use redis::{Pipeline, RedisError, Script, ScriptInvocation, Value};

use super::lease::{Call, Reply, PRUNE_AFTER_INTERVALS, STALE_AFTER_INTERVALS};
use super::script::{LeaseReply, LeaseRequest};
use super::time::time_to_nanos;
use super::transport::CallError;

/// What a rule's calls need to know, fixed at build time.
#[derive(Debug)]
pub(crate) struct RuleWire {
    /// The hash tag `{prefix:key}` every key starts with.
    pub(crate) tag: String,
    /// `{p}:members`, `{p}:meta`, `{p}:seen`.
    keys: [String; 3],
    pub(crate) instance_id: String,
    pub(crate) permits: u64,
    pub(crate) window_nanos: u64,
    pub(crate) interval: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// Windows after Redis's memory starts in which grants are capped at the shares.
    pub(crate) young_windows: u64,
}

/// The lease, several-rule lease and clock scripts, compiled once per worker.
pub(crate) struct Scripts {
    pub(crate) lease: Script,
    pub(crate) multi: Script,
    pub(crate) clock: Script,
}

impl RuleWire {
    /// The wire settings of a rule, `timings` its interval, response and connect
    /// timeouts; the young windows are set by its worker (`worker.rs`).
    pub(crate) fn new(
        tag: String,
        instance_id: String,
        permits: u64,
        window_nanos: u64,
        timings: [Duration; 3],
    ) -> Self {
        let [interval, response_timeout, connect_timeout] = timings;
        let keys = [
            format!("{tag}:members"),
            format!("{tag}:meta"),
            format!("{tag}:seen"),
        ];
        Self {
            tag,
            keys,
            instance_id,
            permits,
            window_nanos,
            interval,
            response_timeout,
            connect_timeout,
            young_windows: 0,
        }
    }

    /// The longest one of this rule's calls may take: the response and connect
    /// timeouts.
    pub(crate) fn bound(&self) -> Duration {
        self.response_timeout + self.connect_timeout
    }

    /// Adds `call` to `pipe`, as an `EVALSHA` of the clock or lease script.
    pub(crate) fn push(&self, pipe: &mut Pipeline, scripts: &Scripts, call: Call) {
        match call {
            Call::SampleTime => {
                pipe.invoke_script(&scripts.clock.key(&self.keys[1]));
            }
            Call::Lease(request) => {
                let mut invocation = scripts.lease.prepare_invoke();
                self.add_lease(&mut invocation, request);
                pipe.invoke_script(&invocation);
            }
        }
    }

    /// Adds the keys and arguments of a lease call to `invocation` (of the lease
    /// script, or after other calls' in the several-rule script).
    pub(crate) fn add_lease(&self, invocation: &mut ScriptInvocation<'_>, request: LeaseRequest) {
        let interval_ms = u64::try_from(self.interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let window_ms = (self.window_nanos / 1_000_000).max(1);
        invocation
            .key(format!("{}:w:{}", self.tag, request.window))
            .key(&self.keys[0])
            .key(&self.keys[1])
            .key(&self.keys[2])
            .arg(&self.instance_id)
            .arg(request.window)
            .arg(self.permits)
            .arg(request.want)
            .arg(request.held)
            .arg(request.known_instances)
            .arg(request.known_rank)
            .arg(window_ms)
            .arg(self.young_windows)
            .arg(STALE_AFTER_INTERVALS * interval_ms)
            .arg(PRUNE_AFTER_INTERVALS * interval_ms)
            .arg(request.sent_ms)
            .arg(expiry_ms(self.response_timeout));
    }

    /// The cluster slot of every key of this rule (they share its hash tag).
    pub(crate) fn slot(&self) -> u16 {
        let inner = self.tag.trim_start_matches('{').trim_end_matches('}');
        crc16(inner.as_bytes()) % 16384
    }
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
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot decides which calls may share a pipeline in a cluster: it must be
    /// Redis's own (the check value of CRC16/XMODEM, and Redis's slot of `foo`).
    #[test]
    fn slots_are_redis_cluster_slots() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        let wire =
            |tag: &str| RuleWire::new(tag.to_owned(), "i".to_owned(), 1, 1, [Duration::ZERO; 3]);
        assert_eq!(wire("{foo}").slot(), 12182);
        assert_eq!(wire("{otel-rate:a}").slot(), wire("{otel-rate:a}").slot());
    }
}
