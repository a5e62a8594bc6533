//! The Lua source of the scripts (their design: `script.rs`).

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

-- The version of the rule's state this script writes (`v` in its meta); a state of a
-- later version is not this script's to change.
local VERSION = 2
-- An answered call: the vouched time's age, in the oldest reading of any of the
-- group's rule clocks, and how far the replica's mapping runs ahead of them (a call
-- that raised before this point leaves the group as it was).
local function answered(g, sent, now_ms, reply)
  g.age = math.max(g.age, now_ms - g.v)
  g.ahead = math.max(g.ahead, sent - now_ms)
  table.insert(g.answered, {reply, now_ms})
  return reply
end

local function lease(KEYS, ARGV, g)
  local meta = KEYS[3]
  local now_ms, now_s, now_sub_us = fleet_clock(meta)
  local sent = tonumber(ARGV[10])
  if now_ms - sent > tonumber(ARGV[11]) then
    g.expired = true
    return {0, 0, 0, 0, 0, 0, now_s, now_sub_us, 1, 0, 0}
  end
  local id = ARGV[1]
  local w, n, want = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local held, krep, rrep = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  local wms, young_windows = tonumber(ARGV[8]), tonumber(ARGV[9])
  -- Leases only for Redis's own window, the one before or the one after: a replica
  -- whose clock is off by more gets nothing (and corrects its clock from this reply).
  local redis_w = math.floor(now_ms / wms)
  local in_reach = w >= redis_w - 1 and w <= redis_w + 1

  -- The key's shape (N and window): one shape leases at a time (`script.rs`).
  local shape = n .. '/' .. wms
  local st = redis.call('HMGET', meta, 'v', 'shape', 'alive', 'end', 'since', 'from')
  if tonumber(st[1] or '0') > VERSION then
    return answered(g, sent, now_ms, {0, 0, 0, 0, 0, 0, now_s, now_sub_us, 0, 0, 2})
  end
  local since, from = tonumber(st[5]), tonumber(st[6] or '0')
  local alive = tonumber(st[3] or '0')
  if st[2] ~= shape then
    if st[2] and now_ms < alive then
      return answered(g, sent, now_ms, {0, 0, 0, 0, 0, 0, now_s, now_sub_us, 0, 0, 1})
    end
    if st[2] then
      -- Taken over from a shape no replica called for its stale age: `since` in this
      -- window's units, and no grant before the last window the other shape leased
      -- for has ended.
      local old = tonumber(string.match(st[2], '/(%d+)$') or '0')
      if since and old > 0 then since = math.floor(since * old / wms) end
      from = math.ceil(tonumber(st[4] or '0') / wms)
    elseif since and since > redis_w + 1 then
      -- A state of the previous script (no shape) in a shorter window's units: as
      -- after a restart, nothing for this window and the next.
      since = redis_w
    end
    redis.call('HSET', meta, 'v', VERSION, 'shape', shape, 'from', from)
    if since then redis.call('HSET', meta, 'since', since) end
  end
  redis.call('HSET', meta, 'alive', math.max(alive, now_ms + stale_n * g.c.interval))
  local k, rank, stale = membership(KEYS[2], g, g.replica .. ' ' .. id)

  if not since then
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
  if want > 0 and w > since + 1 and w >= from then
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
  if grant > 0 then
    local last_end = (w + 1) * wms
    if last_end > tonumber(st[4] or '0') then redis.call('HSET', meta, 'end', last_end) end
  end
  return answered(g, sent, now_ms,
    {grant, total + grant, k, rank, since, young, now_s, now_sub_us, 0, 0, 0})
end

-- A rule's window hash of another type lost the window's accounting: like a Redis that
-- restarted empty, the rule grants nothing for Redis's window and the next (`since`
-- moves up to Redis's window; it never goes down).
local function restarted(meta, wms)
  local high = tonumber(redis.call('HGET', meta, 'high') or '0')
  if high <= 0 then return end
  local mark = math.floor(high / 1000 / wms)
  if tonumber(redis.call('HGET', meta, 'since') or '0') < mark then
    redis.call('HSET', meta, 'since', mark)
  end
end
-- A call that raised (caught by `pcall`): its answer is Redis's message, naming the
-- rule's keys of another type. WRONGTYPE (a key another program wrote) fails this rule
-- alone; any other error (out of memory) also holds its group's heartbeat back, as
-- the whole script call failing did.
local kinds = {'hash', 'zset', 'hash'}
local function failed(keys, g, e, wms)
  if type(e) == 'table' then e = e.err end
  local msg = tostring(e)
  local foreign = {}
  for j = 1, 3 do
    local kind = redis.call('TYPE', keys[j])
    if type(kind) == 'table' then kind = kind.ok end
    if kind ~= 'none' and kind ~= kinds[j] then
      table.insert(foreign, keys[j] .. ' holds a ' .. kind)
      if j == 1 then pcall(restarted, keys[3], wms) end
    end
  end
  if #foreign > 0 then msg = msg .. ' (' .. table.concat(foreign, '; ') .. ')' end
  if not string.find(msg, 'WRONGTYPE', 1, true) then g.failed = true end
  return msg
end

local out = {}
local first = 3 * ng
local calls = (#KEYS - first) / 3
for i = 0, calls - 1 do
  local keys = {KEYS[first + 3 * i + 1], KEYS[first + 3 * i + 2], KEYS[first + 3 * i + 3]}
  local args = {}
  for j = 1, 12 do args[j] = ARGV[3 + 5 * ng + 12 * i + j] end
  local g = groups[tonumber(args[12])]
  local ok, reply = pcall(lease, keys, args, g)
  if not ok then reply = failed(keys, g, reply, tonumber(args[8])) end
  out[i + 1] = reply
end
-- Each group's heartbeat, once (none if one of its calls expired or failed other than
-- on a key of another type): the vouched time carried into the group's clock as an
-- age, the mapping's lead added; each call told the time written, in its own rule's
-- clock.
for _, g in ipairs(groups) do
  if g.v > 0 and #g.answered > 0 and not g.expired and not g.failed then
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
