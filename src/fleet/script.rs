//! The lease script: one atomic round trip that leases for the rules of a round (on one
//! server, or in one slot of a cluster), heartbeats their replicas once, reports, and
//! reads the server's clock.
//!
//! Keys of a rule (all under its hash tag `{prefix:key}`, so one Redis Cluster slot):
//!
//! * `{p}:w:<window id>`: a hash, per instance id what that instance holds for the
//!   window (grants plus fallback spending it reported), and `#`, their total. Expires
//!   3 windows after its last write.
//! * `{p}:joined`: a sorted set, the rule's members (`<replica> <instance id>`) scored
//!   by their sync interval (ms). Gives `k` and the instance's rank. Written only when a
//!   member joins, leaves (its limiter dropped while its replica lives on: `pool.rs`
//!   removes it) or is forgotten; whether a member is live is read from its replica's
//!   heartbeat (below).
//! * `{p}:meta`: a hash. `v`: the version of the state (2; a script finding a later
//!   one refuses the call: not its state to change). `shape`: `<N>/<window ms>` of the
//!   replicas that lease the key, `alive` (fleet ms) until when that shape counts as
//!   running, `end` (fleet ms) the end of the last window it leased for, `from` the first
//!   window it may lease in (below). `since`: the first window id this Redis's memory covers, set
//!   when absent. A Redis that restarted empty (or was flushed) sets it anew, and then
//!   hands out nothing for that window and the next (their accounting was lost:
//!   instances may still hold grants the old Redis made for them, the next one through
//!   a prefetch), and up to window `since + young`, no more than each instance's
//!   fallback share (instances not yet back may be spending theirs). `shift` and
//!   `high`: the rule's fleet clock (below).
//!
//! Keys of a replica group: the replicas heartbeating rules of one sync interval `I`
//! under one prefix (in a cluster, in one slot), under the group tag `{prefix:replicas}`
//! (`{prefix:replicas:<n>}` in a cluster, `n` chosen so the tag hashes to the slot):
//!
//! * `<g>:<I>:hb`: a sorted set, replica id → the group's fleet time (ms) of its last
//!   heartbeat. A member of a rule whose replica's heartbeat is older than the stale
//!   age (2 `I`) may be in fallback: its share is reserved.
//! * `<g>:<I>:seen`: the same replicas scored by the group's *live clock*; a replica
//!   silent for the prune age (20 `I`) of live clock is forgotten, and with it its
//!   memberships (each rule drops a member whose replica is forgotten at its next call).
//! * `<g>:<I>:clock`: the group's fleet clock (`shift`, `high`) and its live clock:
//!   `live`, Redis time that passed while the group was calling (gaps between calls
//!   capped at the stale age), and `last`, the time of the last call. An outage or pause
//!   that silences every replica barely moves it, so it forgets no one: they may all be
//!   spending fallback shares that must stay reserved.
//!
//! **One heartbeat per replica.** A replica vouches, once per script call and group,
//! for the oldest of its rules' last answered calls in the group (`v`: this call's send
//! time for the rules in it; a rule with a call in flight or failing vouches with its
//! last answered one, so a failing rule holds its replica's heartbeat back and the
//! others reserve its share, never the reverse; a rule failing on a foreign key, below,
//! spends no share and vouches for nothing). The script writes it (`ZADD GT`) only
//! if none of the group's calls in it expired, minus how far the replica's mapping of
//! the fleet clock runs ahead (its send time after the server's time). Each rule's call
//! answers what was written, and the replica counts its share reserved from that, not
//! from its own call. So no member looks live to Redis later than every one of its
//! rules last heard from Redis: per rule, what per-rule heartbeats promised.
//!
//! **What a round writes.** An idle rule's heartbeat writes only its fleet clock (its
//! meta's `shift` and `high`); a replica group one `ZADD` to each of its two sets and
//! two `HSET`s of its clock (fleet and live). At 1 rule or 1000 idle rules on one
//! server: 2 `ZADD`s and 2 `HSET`s of the group per round (per slot holding rules on a
//! cluster), plus one `HSET` of each rule's meta (measured: 8 `ZADD`s per second at
//! 1000 idle rules, 4 rounds; 2 per rule call before, 8154 per second). A rule writes its window's hash only when it leases or reports, and its
//! members only when one joins or is forgotten; expiries are refreshed when half gone.
//!
//! **The fleet clock.** Both scripts read time as Redis `TIME` plus `shift`
//! (microseconds), never below `high`, the highest fleet time the rule (or group) has
//! answered: when Redis `TIME` steps back (an NTP step, a failover to a host whose
//! clock is behind), `shift` grows by the step and the fleet's time goes on from where
//! it was, so no window id is used twice and no replica is left with a lease for a
//! window the fleet has already passed. A step forward is kept (it cannot be told apart
//! from Redis being idle): the fleet skips the windows in between, and the replicas,
//! whose calls are then refused as late, correct their mapping from the refusal's time.
//! Tests step the fleet clock by writing `shift` directly. `CLOCK_LUA` answers the fleet
//! time alone (the replica's first sample and its re-samples). A replica group's
//! heartbeats are in its own fleet clock; a vouched time is carried into it as an age.
//!
//! **Shapes.** Replicas of one key may disagree on `N` or the window (a rolling deploy
//! that changes the limit): window ids, `since` and the grants of one window length
//! mean nothing in another. One shape leases the key at a time. A call of another shape
//! is refused (reply `refused` 1, nothing written, not a member) while `alive` is
//! ahead: every answered call of the leasing shape moves it to its time plus the stale
//! age of its interval. Once that shape has not called for its stale age, the first
//! call of another takes the key over: `since` is carried into the new window's units,
//! and the new shape leases no window before `from`, the first that starts after the
//! last window the old shape leased for ends. So no instant is ever covered by grants
//! of both shapes: every window of the longer shape keeps what one shape allows in it,
//! at most what the faster alone allows. The old shape's members stay until forgotten;
//! while their heartbeats are stale their shares stay reserved (a cut-off old replica
//! may be spending its fallback share, `N_old/k` per old window). A refused replica
//! joins nothing and has no share to fall back to (`lease/reply.rs`). A state without
//! a shape (the previous script's, or a fresh key) is taken as the caller's, unless its
//! `since` is later than the caller's window can be (it was written in a shorter
//! window's units): then it is treated as a restart. The previous script (version 1,
//! kept as `script/fixtures/lease_v1.lua`) writes no shape: a replica of it with the same
//! shape shares the key, accounting the same window hashes; one with another shape
//! is not seen.
//!
//! **Reach.** A lease is granted only for Redis's own window, the one before it or the
//! one after it (a prefetch): a replica whose mapping is further off gets nothing and
//! corrects its mapping from the reply, so no replica holds a grant for a window far
//! from the fleet's.
//!
//! Arguments: the number of groups, the stale and prune ages (in intervals); per group
//! (keys: its `hb`, `seen` and `clock`) its tag, replica id, vouched time (ms, 0: none),
//! latest send time (ms) and interval (ms); per call (keys: window hash, members, meta)
//! its instance id, window id, N, permits wanted (0: heartbeat and report only), what
//! the instance holds for the window, its last known `k` and rank (0, 0: none), window
//! length (ms), young windows, the fleet time (ms) the call was sent at, the expiry (ms)
//! and its group's number.
//!
//! **A call that raises.** Each rule's call runs under `pcall`: a Redis error inside
//! it (`WRONGTYPE`: another program wrote the rule's meta, window hash or members key
//! with another type; out of memory) answers that call alone, with Redis's message and
//! the rule's keys it finds of another type, and the other calls are answered as usual.
//! A call that raised leaves its group as it was (its vouched age is taken only from
//! an answered call) and what it wrote of its own rule before raising can put no window
//! over N: its fleet clock, `since` if absent, its membership and expiries; the window
//! hash is written last, in one `HSET`, and only with a grant. On `WRONGTYPE` the
//! group's heartbeat is written from the answered calls (that rule spends no fallback
//! share, `lease/vouch.rs`); on any other error it is not written, as when the whole
//! script call failed. A window hash of another type lost its window's grants: the
//! rule's `since` moves up to Redis's window (never down), so, as after a restart, it
//! grants nothing for that window (nor the one before or after) again. The clock script,
//! one command per rule, fails alone already; its `WRONGTYPE` is classified the same.
//!
//! **Expired calls.** A call the server runs more than the expiry after it was sent
//! (queued behind `DEBUG SLEEP`, `CLIENT PAUSE`, a slow network) changes nothing and
//! answers "expired", and its group's heartbeat is not written: its sender has given up
//! on it (the expiry is half the response timeout), and a heartbeat would make Redis
//! think an instance that is by now spending its fallback share is live, and lease that
//! share to others.
//!
//! The grant is `min(want, N − total − reserved, young cap)` (0 for a window out of
//! reach), where `reserved` is a share `⌈N/k⌉` for every other member whose replica's
//! heartbeat is older than its stale age: it may be in fallback, spending its share
//! unrecorded.
//!
//! Reply, per call: `{granted, total, k, rank, since, young, seconds, microseconds,
//! expired, vouched, refused}` (`refused`: 0, 1 for another shape, 2 for a later version), the time being the rule's fleet clock's, `vouched` the time (ms,
//! of that clock) its group's heartbeat was written for (0: not written); for a call
//! that raised, Redis's message as a string.
//!
//! The Lua source is in `script/lua.rs`.

pub(crate) use lua::{CLOCK_LUA, LEASE_LUA};

/// The arguments of one lease call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseRequest {
    pub(crate) window: u64,
    pub(crate) want: u64,
    pub(crate) held: u64,
    pub(crate) known_instances: u64,
    pub(crate) known_rank: u64,
    /// Fleet Unix milliseconds when the call was planned.
    pub(crate) sent_ms: u64,
    /// The heartbeat its replica's group vouches for (fleet Unix ms, 0: none): the
    /// oldest of its rules' last answered calls, set by the pool (`pool.rs`).
    pub(crate) vouch_ms: u64,
}

/// The reply of one lease call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseReply {
    pub(crate) granted: u64,
    pub(crate) total: u64,
    pub(crate) instances: u64,
    pub(crate) rank: u64,
    pub(crate) since: u64,
    pub(crate) young: bool,
    pub(crate) server_unix_nanos: u64,
    pub(crate) expired: bool,
    /// The time (fleet Unix ms) Redis wrote as its replica's heartbeat (0: none).
    pub(crate) vouched_ms: u64,
    /// Why the call was refused as not this replica's to lease, if it was.
    pub(crate) refused: Option<Refusal>,
}

/// Why the lease script refused a call that reached it in time: the rule's key is
/// leased by replicas of another shape, or holds the state of a later script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Another `N` or window leases the key (a rolling deploy that changes the limit).
    Shape,
    /// The key's state was written by a later version of the script.
    Version,
}

impl LeaseReply {
    /// Parses the script's reply (integers); `None` if it has the wrong shape.
    pub(crate) fn from_values(v: &[i64]) -> Option<Self> {
        let u = |i: usize| v.get(i).and_then(|&x| u64::try_from(x).ok());
        Some(Self {
            granted: u(0)?,
            total: u(1)?,
            instances: u(2)?.max(1),
            rank: u(3)?,
            since: u(4)?,
            young: u(5)? == 1,
            server_unix_nanos: super::time::time_to_nanos(u(6)?, u(7)?),
            expired: u(8)? == 1,
            vouched_ms: u(9)?,
            refused: match v.get(10) {
                None | Some(0) => None,
                Some(1) => Some(Refusal::Shape),
                Some(2) => Some(Refusal::Version),
                Some(_) => return None,
            },
        })
    }
}

mod lua;
#[cfg(test)]
mod state_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_reply_and_refuses_a_bad_one() {
        let r = LeaseReply::from_values(&[3, 10, 2, 1, 99, 0, 1_700_000_000, 5, 0, 7, 0]).unwrap();
        assert_eq!((r.granted, r.total, r.instances, r.rank), (3, 10, 2, 1));
        assert!(!r.young && !r.expired && r.refused.is_none());
        let refused = |code| LeaseReply::from_values(&[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, code]);
        assert_eq!(refused(1).unwrap().refused, Some(Refusal::Shape));
        assert_eq!(refused(2).unwrap().refused, Some(Refusal::Version));
        assert_eq!(refused(3), None);
        assert_eq!(r.vouched_ms, 7);
        assert_eq!(r.server_unix_nanos, 1_700_000_000_000_005_000);
        assert_eq!(LeaseReply::from_values(&[1, 2]), None);
        assert_eq!(
            LeaseReply::from_values(&[-1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            None
        );
        assert_eq!(LeaseReply::from_values(&[0; 9]), None);
    }
}
