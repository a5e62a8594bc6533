//! The lease script: one atomic round trip that heartbeats, reports, leases and reads
//! the server's clock.
//!
//! Keys (all under the rule's hash tag `{prefix:key}`, so one Redis Cluster slot):
//!
//! * `{p}:w:<window id>`: a hash, per instance id what that instance holds for the
//!   window (grants plus fallback spending it reported), and `#`, their total. Expires
//!   3 windows after its last write.
//! * `{p}:members`: a sorted set, instance id → server time (ms) of its last call. Gives
//!   `k`, the instance's rank (by id), and who is stale.
//! * `{p}:seen`: the same members scored by the *live clock* (below) at their last call;
//!   a member silent for the prune age of live clock is forgotten (from both sets).
//! * `{p}:meta`: a hash. `since`: the first window id this Redis's memory covers, set
//!   when absent. A Redis that restarted empty (or was flushed) sets it anew, and then
//!   hands out nothing for that window and the next (their accounting was lost:
//!   instances may still hold grants the old Redis made for them, the next one through
//!   a prefetch), and up to window `since + young`, no more than each instance's
//!   fallback share (instances not yet back may be spending theirs). `live` and `last`:
//!   the live clock, Redis time that passed while the fleet was calling (gaps between
//!   calls capped at the stale age), and the time of the last call. An outage or pause
//!   that silences every member barely moves it, so it forgets no one: they may all be
//!   spending fallback shares that must stay reserved.
//!
//!   `shift` and `high`: the fleet clock (below).
//!
//! **The fleet clock.** Both scripts read time as Redis `TIME` plus `shift`
//! (microseconds), never below `high`, the highest fleet time the rule has answered:
//! when Redis `TIME` steps back (an NTP step, a failover to a host whose clock is
//! behind), `shift` grows by the step and the fleet's time goes on from where it was,
//! so no window id is used twice and no replica is left with a lease for a window the
//! fleet has already passed. A step forward is kept (it cannot be told apart from
//! Redis being idle): the fleet skips the windows in between, and the replicas, whose
//! calls are then refused as late, correct their mapping from the refusal's time. Tests
//! step the fleet clock by writing `shift` directly. `CLOCK_LUA` answers the fleet time
//! alone (the replica's first sample and its re-samples).
//!
//! **Reach.** A lease is granted only for Redis's own window, the one before it or the
//! one after it (a prefetch): a replica whose mapping is further off gets nothing and
//! corrects its mapping from the reply, so no replica holds a grant for a window far
//! from the fleet's.
//!
//! Arguments: instance id, window id, N, permits wanted (0: heartbeat and report only),
//! what the instance holds for the window, its last known `k` and rank (0, 0: none),
//! window length (ms), young windows, stale age (ms), prune age (ms), the fleet time
//! (ms) the call was sent at, and the expiry (ms).
//!
//! **Expired calls.** A call the server runs more than the expiry after it was sent
//! (queued behind `DEBUG SLEEP`, `CLIENT PAUSE`, a slow network) changes nothing and
//! answers "expired": its sender has given up on it (the expiry is half the response
//! timeout), and a heartbeat it wrote would make Redis think an instance that is by
//! now spending its fallback share is live, and lease that share to others.
//!
//! The grant is `min(want, N − total − reserved, young cap)` (0 for a window out of
//! reach), where `reserved` is a share `⌈N/k⌉` for every other member whose last call
//! is older than the stale age: it may be in fallback, spending its share unrecorded.
//!
//! Reply: `{granted, total, k, rank, since, young, seconds, microseconds, expired}`,
//! the time being the fleet clock's; a refusal for lateness carries it too.

/// The fleet clock, shared by both scripts: Redis `TIME` plus the rule's `shift`, never
/// below the highest fleet time this rule has answered (`high`). Leaves `now_us`,
/// `now_ms`, `shift` and `high` defined; expects the meta key in `meta`.
macro_rules! fleet_clock_lua {
    () => {
        r#"
local t = redis.call('TIME')
local shift = tonumber(redis.call('HGET', meta, 'shift') or '0')
local high = tonumber(redis.call('HGET', meta, 'high') or '0')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) + shift
if now_us < high then
  shift = shift + high - now_us
  now_us = high
end
high = now_us
redis.call('HSET', meta, 'shift', shift, 'high', high)
if redis.call('PTTL', meta) == -1 then redis.call('PEXPIRE', meta, 3600000) end
local now_ms = math.floor(now_us / 1000)
local now_s = math.floor(now_us / 1000000)
local now_sub_us = now_us - now_s * 1000000
"#
    };
}

/// The clock script: the fleet time alone. `KEYS[1]`: the meta key.
pub(crate) const CLOCK_LUA: &str = concat!(
    "local meta = KEYS[1]\n",
    fleet_clock_lua!(),
    "return {now_s, now_sub_us}\n"
);

/// The lease script after its clock and arguments: membership, accounting, the grant.
macro_rules! lease_body_lua {
    () => {
        r#"
-- The live clock: Redis time that passed while the fleet was calling, i.e. with the
-- gaps between calls capped at the stale age. An outage or a pause that silences
-- everyone barely moves it, so nobody is pruned for it: the members may all be
-- spending their fallback shares, and must stay counted and reserved.
local live = tonumber(redis.call('HGET', meta, 'live') or '0')
local last = tonumber(redis.call('HGET', meta, 'last') or tostring(now_ms))
live = live + math.min(math.max(now_ms - last, 0), stale_ms)
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. (live - prune_ms))
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[4], m)
  redis.call('ZREM', KEYS[2], m)
end
local members = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local k = 1
local rank = 0
local stale = 0
for i = 1, #members, 2 do
  local m = members[i]
  if m ~= id then
    k = k + 1
    if m < id then rank = rank + 1 end
    if now_ms - tonumber(members[i + 1]) > stale_ms then stale = stale + 1 end
  end
end
redis.call('ZADD', KEYS[2], now_ms, id)
redis.call('ZADD', KEYS[4], live, id)

local since = redis.call('HGET', meta, 'since')
if since then
  since = tonumber(since)
elseif in_reach then
  since = w
else
  since = redis_w
end
redis.call('HSET', meta, 'since', since, 'live', live, 'last', now_ms)
local keep = math.max(3600000, prune_ms * 2, wms * 4)
redis.call('PEXPIRE', meta, keep)
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('PEXPIRE', KEYS[4], keep)

local mine = tonumber(redis.call('HGET', KEYS[1], id) or '0')
local total = tonumber(redis.call('HGET', KEYS[1], '#') or '0')
if held > mine then
  total = total + held - mine
  mine = held
end
local young = 0
if w <= since + young_windows then young = 1 end
local g = 0
if want > 0 and w > since + 1 then
  local cap = n - total - stale * math.ceil(n / k)
  if young == 1 then
    local kk, rr = krep, rrep
    if kk <= 0 then kk, rr = k, rank end
    local share = math.floor(n / kk)
    if ((w % kk) + (rr % kk)) % kk < (n % kk) then share = share + 1 end
    cap = math.min(cap, share - mine)
  end
  g = math.max(0, math.min(want, cap))
end
mine = mine + g
total = total + g
redis.call('HSET', KEYS[1], id, mine, '#', total)
redis.call('PEXPIRE', KEYS[1], wms * 3)
return {g, total, k, rank, since, young, now_s, now_sub_us, 0}
"#
    };
}

/// One lease call: its keys, arguments, clock and body, ending in its reply.
macro_rules! lease_call_lua {
    () => {
        concat!(
            "local meta = KEYS[3]\n",
            fleet_clock_lua!(),
            r#"
if now_ms - tonumber(ARGV[12]) > tonumber(ARGV[13]) then
  return {0, 0, 0, 0, 0, 0, now_s, now_sub_us, 1}
end
local id = ARGV[1]
local w = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local held = tonumber(ARGV[5])
local krep = tonumber(ARGV[6])
local rrep = tonumber(ARGV[7])
local wms = tonumber(ARGV[8])
local young_windows = tonumber(ARGV[9])
local stale_ms = tonumber(ARGV[10])
local prune_ms = tonumber(ARGV[11])
-- Leases only for Redis's own window, the one before or the one after: a replica
-- whose clock is off by more gets nothing (and corrects its clock from this reply).
local redis_w = math.floor(now_ms / wms)
local in_reach = w >= redis_w - 1 and w <= redis_w + 1
if not in_reach then want = 0 end
"#,
            lease_body_lua!()
        )
    };
}

/// The lease script's source.
pub(crate) const LEASE_LUA: &str = lease_call_lua!();

/// The lease script of several rules at once (one round's lease calls on one server,
/// or in one slot of a cluster): `KEYS` and `ARGV` are those of each call in turn, 4
/// keys and 13 arguments each; the reply is each call's reply in turn. Each call runs
/// exactly as `LEASE_LUA` would alone, in the order given.
pub(crate) const MULTI_LEASE_LUA: &str = concat!(
    "local function lease(KEYS, ARGV)\n",
    lease_call_lua!(),
    r#"end
local out = {}
for i = 0, #KEYS / 4 - 1 do
  local keys = {KEYS[4 * i + 1], KEYS[4 * i + 2], KEYS[4 * i + 3], KEYS[4 * i + 4]}
  local args = {}
  for j = 1, 13 do args[j] = ARGV[13 * i + j] end
  out[i + 1] = lease(keys, args)
end
return out
"#
);

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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_reply_and_refuses_a_bad_one() {
        let r = LeaseReply::from_values(&[3, 10, 2, 1, 99, 0, 1_700_000_000, 5, 0]).unwrap();
        assert_eq!((r.granted, r.total, r.instances, r.rank), (3, 10, 2, 1));
        assert!(!r.young && !r.expired);
        assert_eq!(r.server_unix_nanos, 1_700_000_000_000_005_000);
        assert_eq!(LeaseReply::from_values(&[1, 2]), None);
        assert_eq!(LeaseReply::from_values(&[-1, 0, 0, 0, 0, 0, 0, 0, 0]), None);
    }
}
