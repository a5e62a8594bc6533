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
//! * `{p}:meta`: a hash. `since`: the first window id this Redis's memory covers, set
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
//! others reserve its share, never the reverse). The script writes it (`ZADD GT`) only
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
//! expired, vouched}`, the time being the rule's fleet clock's, `vouched` the time (ms,
//! of that clock) its group's heartbeat was written for (0: not written).

/// The fleet clock, shared by both scripts: Redis `TIME` plus the rule's `shift`, never
/// below the highest fleet time this rule has answered (`high`). Leaves `now_us`,
/// `now_ms`, `shift` and `high` defined; expects the meta key in `meta` and Redis `TIME`
/// in `t`, read once per script call: every rule of a round maps the same instant, so
/// their mappings of fleet time agree (read per call, they were apart by the script's
/// run time, tens of ms at 1000 rules, and their heartbeats fell in different rounds).
macro_rules! fleet_clock_lua {
    () => {
        r#"
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
    "local meta = KEYS[1]\nlocal t = redis.call('TIME')\n",
    fleet_clock_lua!(),
    "return {now_s, now_sub_us}\n"
);

/// The lease script: the replica groups opened (their fleet clocks read, the live
/// clocks advanced, replicas silent for the prune age forgotten), each rule's call,
/// then each group's heartbeat written once.
pub(crate) const LEASE_LUA: &str = concat!(
    "local t = redis.call('TIME')\nlocal function fleet_clock(meta)\n",
    fleet_clock_lua!(),
    "return now_ms, now_s, now_sub_us\nend\n",
    r#"
local stale_n = tonumber(ARGV[2])
local prune_n = tonumber(ARGV[3])
-- Refreshes a key's expiry once half of it is gone: a write every half life.
local function refresh(key, keep)
  if redis.call('PTTL', key) < keep / 2 then redis.call('PEXPIRE', key, keep) end
end
-- A group's keys and clocks (its fleet clock read once per script call).
local opened = {}
local function open(tag, interval)
  local base = tag .. ':' .. interval
  local c = opened[base]
  if c then return c end
  c = {tag = tag, interval = interval, hb = base .. ':hb', seen = base .. ':seen',
       clock = base .. ':clock'}
  c.now = fleet_clock(c.clock)
  c.live = tonumber(redis.call('HGET', c.clock, 'live') or '0')
  c.stale, c.prune = stale_n * interval, prune_n * interval
  c.keep = math.max(3600000, c.prune * 2)
  opened[base] = c
  return c
end
-- The live clock: Redis time that passed while the group was calling, i.e. with the
-- gaps between calls capped at the stale age. An outage or a pause that silences
-- everyone barely moves it, so nobody is forgotten for it: the replicas may all be
-- spending their fallback shares, which must stay reserved.
local function advance(c)
  if c.advanced then return end
  c.advanced = true
  local last = tonumber(redis.call('HGET', c.clock, 'last') or tostring(c.now))
  c.live = c.live + math.min(math.max(c.now - last, 0), c.stale)
  redis.call('HSET', c.clock, 'live', c.live, 'last', c.now)
  local gone = redis.call('ZRANGEBYSCORE', c.seen, '-inf', '(' .. (c.live - c.prune))
  for _, r in ipairs(gone) do
    redis.call('ZREM', c.seen, r)
    redis.call('ZREM', c.hb, r)
  end
  refresh(c.clock, c.keep)
end
local ng = tonumber(ARGV[1])
local groups = {}
for i = 1, ng do
  local a = 3 + 5 * (i - 1)
  local c = open(ARGV[a + 1], tonumber(ARGV[a + 5]))
  advance(c)
  groups[i] = {c = c, replica = ARGV[a + 2], v = tonumber(ARGV[a + 3]), age = 0,
               ahead = 0, answered = {}}
end

-- A rule's members: k, the rank of `me`, the members that may be in fallback
-- (their replica's heartbeat older than their stale age); those whose replica was
-- forgotten are dropped, and `me` joins if it is not there.
local function membership(key, g, me)
  local members = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local k, rank, stale, joined = 1, 0, 0, false
  for i = 1, #members, 2 do
    local m, iv = members[i], tonumber(members[i + 1])
    if m == me then
      joined = iv == g.c.interval
    else
      local r = string.match(m, '^(%S+) ')
      local o = r and open(g.c.tag, iv)
      -- Another interval's group: its live clock moves while this one calls too.
      if o then advance(o) end
      local seen = o and redis.call('ZSCORE', o.seen, r)
      if not seen or o.live - tonumber(seen) > prune_n * iv then
        redis.call('ZREM', key, m)
      else
        k = k + 1
        if m < me then rank = rank + 1 end
        local hb = redis.call('ZSCORE', o.hb, r)
        if not hb or o.now - tonumber(hb) > stale_n * iv then stale = stale + 1 end
      end
    end
  end
  if not joined then
    redis.call('ZADD', key, g.c.interval, me)
    redis.call('ZADD', g.c.seen, 'NX', g.c.live, g.replica)
  end
  refresh(key, g.c.keep)
  return k, rank, stale
end

local function lease(KEYS, ARGV, g)
  local meta = KEYS[3]
  local now_ms, now_s, now_sub_us = fleet_clock(meta)
  if now_ms - tonumber(ARGV[10]) > tonumber(ARGV[11]) then
    g.expired = true
    return {0, 0, 0, 0, 0, 0, now_s, now_sub_us, 1, 0}
  end
  -- The vouched time's age, in the oldest reading of any of the group's rule clocks,
  -- and how far the replica's mapping runs ahead of them.
  g.age = math.max(g.age, now_ms - g.v)
  g.ahead = math.max(g.ahead, tonumber(ARGV[10]) - now_ms)
  local id = ARGV[1]
  local w, n, want = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local held, krep, rrep = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  local wms, young_windows = tonumber(ARGV[8]), tonumber(ARGV[9])
  -- Leases only for Redis's own window, the one before or the one after: a replica
  -- whose clock is off by more gets nothing (and corrects its clock from this reply).
  local redis_w = math.floor(now_ms / wms)
  local in_reach = w >= redis_w - 1 and w <= redis_w + 1
  if not in_reach then want = 0 end
  local k, rank, stale = membership(KEYS[2], g, g.replica .. ' ' .. id)

  local since = redis.call('HGET', meta, 'since')
  if since then
    since = tonumber(since)
  else
    if in_reach then since = w else since = redis_w end
    redis.call('HSET', meta, 'since', since)
  end
  refresh(meta, math.max(g.c.keep, wms * 4))

  local mine = tonumber(redis.call('HGET', KEYS[1], id) or '0')
  local total = tonumber(redis.call('HGET', KEYS[1], '#') or '0')
  local changed = false
  if held > mine then
    total = total + held - mine
    mine = held
    changed = true
  end
  local young = 0
  if w <= since + young_windows then young = 1 end
  local grant = 0
  if want > 0 and w > since + 1 then
    local cap = n - total - stale * math.ceil(n / k)
    if young == 1 then
      local kk, rr = krep, rrep
      if kk <= 0 then kk, rr = k, rank end
      local share = math.floor(n / kk)
      if ((w % kk) + (rr % kk)) % kk < (n % kk) then share = share + 1 end
      cap = math.min(cap, share - mine)
    end
    grant = math.max(0, math.min(want, cap))
  end
  if grant > 0 or changed then
    redis.call('HSET', KEYS[1], id, mine + grant, '#', total + grant)
    redis.call('PEXPIRE', KEYS[1], wms * 3)
  end
  local reply = {grant, total + grant, k, rank, since, young, now_s, now_sub_us, 0, 0}
  table.insert(g.answered, {reply, now_ms})
  return reply
end

local out = {}
local first = 3 * ng
local calls = (#KEYS - first) / 3
for i = 0, calls - 1 do
  local keys = {KEYS[first + 3 * i + 1], KEYS[first + 3 * i + 2], KEYS[first + 3 * i + 3]}
  local args = {}
  for j = 1, 12 do args[j] = ARGV[3 + 5 * ng + 12 * i + j] end
  out[i + 1] = lease(keys, args, groups[tonumber(args[12])])
end
-- Each group's heartbeat, once (none if one of its calls expired): the vouched time
-- carried into the group's clock as an age, the mapping's lead added; each call told
-- the time written, in its own rule's clock.
for _, g in ipairs(groups) do
  if g.v > 0 and #g.answered > 0 and not g.expired then
    local age = math.max(0, g.age) + g.ahead
    redis.call('ZADD', g.c.hb, 'GT', g.c.now - age, g.replica)
    redis.call('ZADD', g.c.seen, 'GT', g.c.live - age, g.replica)
    refresh(g.c.hb, g.c.keep)
    refresh(g.c.seen, g.c.keep)
    for _, a in ipairs(g.answered) do a[1][10] = math.max(0, a[2] - age) end
  end
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_reply_and_refuses_a_bad_one() {
        let r = LeaseReply::from_values(&[3, 10, 2, 1, 99, 0, 1_700_000_000, 5, 0, 7]).unwrap();
        assert_eq!((r.granted, r.total, r.instances, r.rank), (3, 10, 2, 1));
        assert!(!r.young && !r.expired);
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
