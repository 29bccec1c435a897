-- prelude.lua: the functions the scripts share. It is the top level of the Redis Functions library
-- (src/store/redis/library.rs), run once at FUNCTION LOAD; each script is a function of the library.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- The queue is a sorted set (<prefix>{name}:queue): member '<replica>:<n>', score the arrival
-- order (the tail's score + 1). Nothing here keeps an entry alive: its replica proves it is alive
-- with one heartbeat key of its own (<prefix>replica:<replica>), which a script on the name's slot
-- cannot read on Redis Cluster, so the replica that notices a stalled entry checks the heartbeat
-- and then calls purge.lua. The queue key expires when the longest wait of the callers that joined
-- it is over, so a queue whose every replica went away lapses by itself. Wake-ups are published
-- on the name's shard channel, and only when someone is queued: 'w<member>' (a free permit goes
-- to that entry: it is first in line and the lease is free, or for a counting lease one of the
-- first k in line with k permits free) and 'm' (positions or the holders changed).
-- docs/src/internals/fair-waiting.md.
--
-- The same channel carries every change of holder: 'g' granted, 'r' released, 'v' revoked (the
-- *_message functions below), published only while some replica subscribes to the channel
-- (listened() asks Redis itself, so watching a name registers nothing and keeps nothing alive;
-- an SPUBLISH nobody hears would still cost the shard's replicas a cluster-bus message each).
-- Numbers are written with %d; the holder comes last, since it may hold spaces.
--
-- It also reads who takes a name: an exclusive lease (the lease key and its owner hash) or the
-- permits of a counting lease (limit > 1). The owner hash, <prefix>{name}:owner, holds the name's
-- fencing counter, 't' (the last token issued; while a counting lease holds permits, its grants
-- count in 't' of the holders hash instead, which goes back to the owner hash when the last permit
-- ends in a script), and while an exclusive lease is held its grant: 'i' the lease id's digest
-- (the server sends Redis only digests of lease ids, never the ids), 'h' the holder, 'l' the TTL
-- (lifetime) in ms, 'e' the expiry (Unix ms) and 'd' the lock-delay in ms (only if any). One
-- letter each: a held lease is two keys, and the hash's field names were a good part of its
-- bytes. The hash outlives the grant by the counter keep (`--redis-counter-keep`, the scripts'
-- keep_ms argument): a name nobody takes again leaves nothing behind once it passes.
-- The grant's fields are the holder's only while the lease key exists and holds the same expiry
-- as 'e': a lease that expired leaves them behind (until the keep passes), and a key that
-- something else wrote (a classic SETNX lock) never matches them. Nothing else is granted on the
-- name while they are, so 't' is then the holder's token.
--   <prefix>{name}:permits  sorted set: lease id digest -> the moment its permit frees (Unix
--                           ms: expiry + lock-delay)
--   <prefix>{name}:holders  hash: lease id digest -> 'token expires_at_ms ttl_ms lock_delay_ms
--                           holder', 'limit' -> the limit they were granted with, and 't' -> the
--                           last token issued (the name's counter while the lease holds permits)
-- Both expire when the last permit frees. A permit whose moment passed is free; the writing
-- scripts drop such records. docs/src/internals/redis-layout.md.
-- The shared grants of a read-write lease are permits too, with 'limit' 1 (a counting lease's
-- limit is always more than 1, and an exclusive grant never is a permit): any number of them,
-- up to the server's cap, and no exclusive grant while one is taken (held or in its lock-delay).
-- A queue entry that waits for a shared grant ends with 's' ('<replica>:<n>s'): the run of
-- shared entries at the head of the queue is granted together, and an entry waiting to be
-- exclusive holds back every shared one behind it.

-- At most this many wake-ups per script: callers past them learn of their free permit from the
-- 'm' published with them (their replica re-reads the queue), a round trip later.
local MAX_WAKE_UPS = 8

-- How far down the queue a run of shared entries is read: the callers past it are granted once
-- those ahead of them are, a round trip later.
local SHARED_RUN_SCAN = 64

-- Whether a queue entry waits for a shared grant: the core ends its id with 's'.
local function is_shared_entry(entry)
  return string.byte(entry, -1) == 115 -- 's'
end

-- Redis time in milliseconds and microseconds.
local function redis_now()
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  return math.floor(now_us / 1000), now_us
end

-- The entry first in line, or nil.
local function first_in_line(queue)
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- Wakes the first `count` entries in line (at most MAX_WAKE_UPS): the free permits are theirs.
local function wake_first(queue, channel, count)
  if count <= 0 then
    return
  end
  for _, entry in ipairs(redis.call('ZRANGE', queue, 0, math.min(count, MAX_WAKE_UPS) - 1)) do
    redis.call('SPUBLISH', channel, 'w' .. entry)
  end
end

-- How many of the first callers in line a grant may go to now, given what is taken: `taken`
-- grants of `limit` (1: an exclusive lease, or shared grants when `shared`). A counting lease's
-- free permits; for a name that is free or held shared, the run of shared entries at the head of
-- the queue (at most SHARED_RUN_SCAN), or an exclusive entry first in line while nothing is
-- taken.
local function due_in_line(queue, taken, limit, shared)
  if taken > 0 and not shared then
    return math.max(limit - taken, 0)
  end
  local head = first_in_line(queue)
  if not head then
    return 0
  end
  if not is_shared_entry(head) then
    return taken == 0 and 1 or 0
  end
  local run = 1
  for _, entry in ipairs(redis.call('ZRANGE', queue, 1, SHARED_RUN_SCAN - 1)) do
    if not is_shared_entry(entry) then
      break
    end
    run = run + 1
  end
  return run
end

-- due_in_line() for what occupancy() answered.
local function due_for(queue, occupied)
  return due_in_line(queue, occupied[1], occupied[2], occupied[9] == 1)
end

-- After entries left the queue: unless it is empty (and so gone), tell every replica that
-- positions moved and wake the callers that a grant now goes to (`occupied`: occupancy()).
local function queue_moved(queue, channel, occupied)
  if not first_in_line(queue) then
    return
  end
  redis.call('SPUBLISH', channel, 'm')
  wake_first(queue, channel, due_for(queue, occupied))
end

-- A caller joined the queue to wait at most `wait_ms`: the queue lives at least that long (and a
-- second more), and no longer than its longest waiter, so that entries whose replicas all went
-- away lapse with it.
local function keep_queue(queue, wait_ms)
  local ttl_ms = wait_ms + 1000
  if redis.call('PTTL', queue) < ttl_ms then
    redis.call('PEXPIRE', queue, ttl_ms)
  end
end

-- Records the place in line of a caller that chose its lease id (acquire.lua, KEYS[7]), and the
-- entry of the earlier call it took the place from (if any). Past `most` records (the queue's
-- bound), drops those whose wait is over or whose entry left the queue, so that callers who join
-- and leave again cannot grow the hash.
local function remember_place(places, queue, lease_id, score, until_ms, entry, replaced, now_ms, most)
  redis.call('HSET', places, lease_id, string.format('%d %d %s %s', score, until_ms, entry, replaced or ''))
  if redis.call('HLEN', places) <= most then
    return
  end
  local records = redis.call('HGETALL', places)
  for i = 1, #records, 2 do
    local kept_until, kept_entry = string.match(records[i + 1], '^%d+ (%d+) (%S+)')
    if not kept_until or tonumber(kept_until) <= now_ms or not redis.call('ZSCORE', queue, kept_entry) then
      redis.call('HDEL', places, records[i])
    end
  end
end

-- At most this many ended lease ids are kept per name (the soonest to lapse go first).
local MAX_ENDED_IDS = 1000

-- A lease id was released, so that an Acquire of it still on its way (a retry, a wait's attempt,
-- a command held up by a stall) grants nothing: <prefix>{name}:ended, a sorted set of lease id
-- digest -> until (Unix ms), checked only for the lease ids callers choose.
local function end_lease_id(ended, lease_id, now_ms, keep_ms)
  -- Zero: a release that must not end the id (a grant undone because no replica confirmed it).
  if keep_ms <= 0 then
    return
  end
  redis.call('ZREMRANGEBYSCORE', ended, '-inf', now_ms)
  redis.call('ZADD', ended, now_ms + keep_ms, lease_id)
  local excess = redis.call('ZCARD', ended) - MAX_ENDED_IDS
  if excess > 0 then
    redis.call('ZREMRANGEBYRANK', ended, 0, excess - 1)
  end
  redis.call('PEXPIRE', ended, keep_ms)
end

-- Where a free or held lease stands, as the scripts reply: {held, holder, token, remaining_ms,
-- expires_at_ms, lock_delay_ms}; remaining_ms (which counts the lock-delay) and expires_at_ms -1
-- for a key without expiry. `current` is the lease key's value; holder, token and delay come from
-- the owner hash.
local function holder_fields(lease, current, holder, token, delay, now_ms)
  local pttl = redis.call('PTTL', lease)
  local current_ms = tonumber(current)
  local remaining_ms, expires_at_ms = -1, -1
  if pttl >= 0 then
    -- The value is the expiry leased wrote; a key written by others may hold anything.
    remaining_ms, expires_at_ms = pttl, current_ms or (now_ms + pttl)
  elseif current_ms then
    remaining_ms, expires_at_ms = current_ms - now_ms, current_ms
  end
  return {1, holder or '', tonumber(token) or 0, remaining_ms, expires_at_ms, tonumber(delay) or 0}
end

-- Who holds the lease, as holder_fields answers, or nil when it is free: no key, or the expired
-- key of a crashed classic SETNX lock (which acquire takes over). A key that leased did not write
-- has no holder, token or delay.
local function lease_holder(lease, owner_key, now_ms)
  local current = redis.call('GET', lease)
  if not current then
    return nil
  end
  local current_ms = tonumber(current)
  if redis.call('PTTL', lease) == -1 and current_ms and current_ms < now_ms then
    return nil
  end
  local owner = redis.call('HMGET', owner_key, 'e', 'h', 't', 'd')
  if owner[1] ~= current then
    return holder_fields(lease, current, nil, nil, nil, now_ms)
  end
  return holder_fields(lease, current, owner[2], owner[3], owner[4], now_ms)
end

-- The fields of an exclusive grant in the owner hash; 't' stays, as the name's counter.
-- 'o' marks a grant whose lease id the caller chose (its release leaves the id ended); 'p' and
-- 'a' are such a grant's principal and answered-again mark (bound_principal() below).
local GRANT_FIELDS = {'i', 'h', 'l', 'e', 'd', 'o', 'p', 'a'}

-- A grant made with a lease id its caller chose remembers the principal that made it, when
-- access control is on (the server sends a digest of the token's name; '' without): only that
-- principal is answered it again, renews it or releases it. An exclusive grant keeps
-- '<lease id digest> <principal>' in 'p' of the owner hash, a permit its principal in
-- '<lease id digest>:p' of the holders hash. The digest in 'p' makes a field that an earlier
-- release left behind (it does not know 'p') match no other grant.
-- A grant answered again to a retry is marked: 'a' of the owner hash holds its lease id digest,
-- '<lease id digest>:a' of the holders hash is '1'. The call that made such a grant never
-- releases it for want of replicas (release.lua's ARGV[5]): another call was answered it.

-- The principal that an exclusive grant of `lease_id` is bound to ('p' of the owner hash), or nil.
local function bound_principal(record, lease_id)
  if not record then
    return nil
  end
  local id, principal = string.match(record, '^(%S+) (%S+)$')
  if id == lease_id then
    return principal
  end
  return nil
end

-- Whether a caller of `principal` ('' without access control) is refused a grant bound to
-- `bound` (nil: bound to nobody).
local function foreign(bound, principal)
  return bound and principal ~= '' and bound ~= principal
end

-- The holders hash's fields of one permit: its record, its principal and its answered-again mark.
local function permit_fields_of(lease_id)
  return lease_id, lease_id .. ':p', lease_id .. ':a'
end

-- Ends an exclusive lease: its key, and its grant's fields in the owner hash, which keeps the
-- counter for keep_ms.
local function end_exclusive(lease, owner_key, keep_ms)
  redis.call('DEL', lease)
  redis.call('HDEL', owner_key, unpack(GRANT_FIELDS))
  redis.call('PEXPIRE', owner_key, math.max(keep_ms, 1))
end

-- A permit's record in the holders hash, or nil.
local function parse_permit(record)
  if not record then
    return nil
  end
  local token, expires_at_ms, ttl_ms, delay_ms, holder = string.match(record, '^(%d+) (%d+) (%d+) (%d+) (.*)$')
  if not token then
    return nil
  end
  return {token = tonumber(token), exp = tonumber(expires_at_ms), ttl = tonumber(ttl_ms),
    delay = tonumber(delay_ms), holder = holder}
end

local function permit_record(token, expires_at_ms, ttl_ms, delay_ms, holder)
  return string.format('%d %d %d %d ', token, expires_at_ms, ttl_ms, delay_ms) .. holder
end

-- The score bound of the permits still taken at now_ms: those that free after it.
local function taken_after(now_ms)
  return string.format('(%d', now_ms)
end

-- Drops the records of freed permits; deletes both keys when none is taken, keeping the counting
-- lease's fencing counter ('t' of the holders hash) in the owner hash for keep_ms.
local function drop_freed_permits(permits, holders, owner_key, now_ms, keep_ms)
  local freed = redis.call('ZRANGE', permits, '-inf', string.format('%d', now_ms), 'BYSCORE', 'LIMIT', 0, 1000)
  if #freed > 0 then
    redis.call('ZREM', permits, unpack(freed))
    local fields = {}
    for _, lease_id in ipairs(freed) do
      for _, field in ipairs({permit_fields_of(lease_id)}) do
        table.insert(fields, field)
      end
    end
    redis.call('HDEL', holders, unpack(fields))
  end
  if redis.call('ZCARD', permits) == 0 then
    local counted = redis.call('HGET', holders, 't')
    if counted then
      redis.call('HSET', owner_key, 't', counted)
      redis.call('PEXPIRE', owner_key, math.max(keep_ms, 1))
    end
    redis.call('DEL', permits, holders)
  end
end

-- Both keys of a counting lease live until its last permit frees.
local function keep_permits(permits, holders, now_ms)
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')[2]
  if last then
    local ttl_ms = math.max(tonumber(last) - now_ms, 1)
    redis.call('PEXPIRE', permits, ttl_ms)
    redis.call('PEXPIRE', holders, ttl_ms)
  end
end

-- The holder fields (as holder_fields) of the permit `lease_id`, whose permit frees at `frees_at`.
local function permit_fields(holders, lease_id, frees_at, now_ms)
  local permit = parse_permit(redis.call('HGET', holders, lease_id))
  if not permit then
    return {1, '', 0, math.max(frees_at - now_ms, 0), frees_at, 0}
  end
  return {1, permit.holder, permit.token, math.max(frees_at - now_ms, 0), permit.exp, permit.delay}
end

-- occupancy() of a name nobody takes.
local function nobody()
  return {0, 0, 0, '', 0, 0, 0, 0, 0}
end

-- occupancy() of a counting lease's permits alone.
local function permits_occupancy(permits, holders, now_ms)
  local soonest = redis.call('ZRANGE', permits, taken_after(now_ms), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if not soonest[1] then
    return nobody()
  end
  local taken = redis.call('ZCOUNT', permits, taken_after(now_ms), '+inf')
  local limit = tonumber(redis.call('HGET', holders, 'limit')) or taken
  local reply = {taken, limit, unpack(permit_fields(holders, soonest[1], tonumber(soonest[2]), now_ms))}
  -- Permits of limit 1 are the shared grants of a read-write lease.
  table.insert(reply, limit == 1 and 1 or 0)
  return reply
end

-- Who takes a name, as the scripts reply: {taken, limit, held, holder, token, remaining_ms,
-- expires_at_ms, lock_delay_ms, shared}: the permits taken (held or in their lock-delay), the
-- limit in force (0 when none is taken), then the holder fields of the permit that frees soonest
-- ({0, '', 0, 0, 0, 0} when none), and 1 if the grants taken are shared ones.
local function occupancy(lease, owner_key, permits, holders, now_ms)
  local exclusive = lease_holder(lease, owner_key, now_ms)
  if exclusive then
    local reply = {1, 1, unpack(exclusive)}
    table.insert(reply, 0)
    return reply
  end
  return permits_occupancy(permits, holders, now_ms)
end

-- The next fencing token of a name, from the last one issued (the owner hash's 't', or the
-- holders hash's while a counting lease holds permits, whichever is larger); the caller writes it
-- back with its grant. Tokens strictly increase per name even when the hash is gone: it lapsed
-- (the counter keep passed after the last grant ended: every token issued before was below Redis
-- time then, so the clock may step back by up to the keep), or Redis lost it (restart without
-- persistence, failover to a lagging replica, FLUSHALL): they never fall below Redis time in
-- microseconds. ARCHITECTURE.md, "Invariants". Lua numbers are doubles, exact for integers
-- below 2^53: microsecond timestamps stay under it until the year 2255.
local function next_token(last, now_us)
  return math.max((tonumber(last) or 0) + 1, now_us)
end

-- Whether any client subscribes to the shard channel on this node (a replica with waiters or
-- watchers of the name): only then are changes of holder published.
local function listened(channel)
  return redis.call('PUBSUB', 'SHARDNUMSUB', channel)[2] > 0
end

-- 'g<token> <limit> <ttl_ms> <expires_at_ms> <holder>': a grant.
local function granted_message(token, limit, ttl_ms, expires_at_ms, holder)
  return string.format('g%d %d %d %d ', token, limit, ttl_ms, expires_at_ms) .. holder
end

-- 's<token> <ttl_ms> <expires_at_ms> <holder>': a shared grant of a read-write lease.
local function shared_granted_message(token, ttl_ms, expires_at_ms, holder)
  return string.format('s%d %d %d ', token, ttl_ms, expires_at_ms) .. holder
end

-- 'r<token> <expires_at_ms> <holder>': a release by the holder.
local function released_message(token, expires_at_ms, holder)
  return string.format('r%d %d ', token, expires_at_ms) .. holder
end

-- 'v<token> <expires_at_ms> <reason bytes> <reason><holder>': a revoke; the reason is
-- length-prefixed, since both texts may hold spaces.
local function revoked_message(token, expires_at_ms, reason, holder)
  return string.format('v%d %d %d ', token, expires_at_ms, #reason) .. reason .. holder
end

-- Why `lease_id`'s grant was revoked (revoke.lua), or nil if it was not, recently:
-- <prefix>{name}:revoked holds lease id digest -> '<until_ms> <reason>'.
local function revoked_reason(revoked, lease_id)
  local record = redis.call('HGET', revoked, lease_id)
  return record and string.match(record, '^%d+ (.*)$')
end
