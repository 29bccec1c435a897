-- acquire: grant a lease if it is free (or left expired by a crashed client) and nobody is ahead
-- in its queue, with a new fencing token; otherwise answer who holds it and, for a caller that
-- waits, queue it (or keep its place). Prepended with queue.lua.
--
-- KEYS[1]  <prefix>{name}           string: the lease's expiry, Unix ms on Redis time; PEXPIREs with the lease
-- KEYS[2]  <prefix>{name}:owner     hash: id, holder, token, ttl, exp; same expiry
-- KEYS[3]  <prefix>{name}:fence     string: the last fencing token issued; outlives the lease
-- KEYS[4]  <prefix>{name}:queue     sorted set: waiting entries (queue.lua)
-- KEYS[5]  <prefix>{name}:replicas  hash: replica -> deadline (queue.lua)
-- KEYS[6]  <prefix>{name}:wake      shard channel of the name's wake-ups
-- ARGV[1]  lease_id   ARGV[2] holder   ARGV[3] ttl_ms   ARGV[4] fence_ttl_ms
-- ARGV[5]  queue entry ('' = try once, never queue)   ARGV[6] replica   ARGV[7] replica_ttl_ms
-- ARGV[8]  max_waiters (the whole queue, every replica)
-- Reply    {1, token, ttl_ms, expires_at_ms}                                   granted (also when ARGV[1] already holds it)
--          {0, position, 1, holder, token, remaining_ms, expires_at_ms}        busy; remaining_ms, expires_at_ms -1: no expiry
--          {0, position, 0}                                                    free, but someone ahead in the queue gets it
--          {2, max_waiters}                                                    the queue is full
--          position: the entry's place in the queue (1 = next), 0 when not queued.
--
-- Numbers are stored as strings made with %d. Lua's own tostring and `..` use %.14g, which rounds
-- 16-digit microsecond tokens, and the expiry is compared as a string with the value stored in the
-- lease key and the owner hash, so it must always be spelled the same way.
local lease, owner_key, fence, queue, replicas, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lease_id, entry = ARGV[1], ARGV[5]
local now_ms, now_us = redis_now()
local ttl_ms = tonumber(ARGV[3])

local busy -- the holder fields of the reply when the lease is held
local takeover = false
local current = redis.call('GET', lease)
if current then
  local owner = redis.call('HMGET', owner_key, 'id', 'holder', 'token', 'ttl', 'exp')
  if owner[1] == lease_id and owner[5] == current then
    -- A retry of this very grant (the first reply was lost): answer it again.
    return {1, tonumber(owner[3]), tonumber(owner[4]), tonumber(owner[5])}
  end
  local current_ms = tonumber(current)
  if redis.call('PTTL', lease) == -1 and current_ms and current_ms < now_ms then
    -- A key with no TTL whose timestamp has passed: the classic SETNX lock left by a crashed client.
    takeover = true
  else
    busy = holder_fields(lease, current, owner[2], owner[3], now_ms)
  end
end

if not busy then
  -- Free: granted only to the first in line, or to anyone if nobody waits.
  local first = first_in_line(queue)
  if first and first ~= entry and purge_dead_replicas(queue, replicas, now_ms) then
    queue_moved(queue, replicas, channel, false)
    first = first_in_line(queue)
  end
  if not first or first == entry then
    local expires_at_ms = now_ms + ttl_ms
    local expiry = string.format('%d', expires_at_ms)
    if takeover then
      -- Take the expired key over with GETSET, as the classic pattern does. Nothing can write the
      -- key between the GET above and this GETSET inside an atomic script, so the old value is the
      -- expired one we read and the pattern's comparison of the two could never fail: it is left out.
      redis.call('GETSET', lease, expiry)
      redis.call('PEXPIRE', lease, ttl_ms)
    else
      redis.call('SET', lease, expiry, 'PX', ttl_ms)
    end

    -- Tokens strictly increase per name even if Redis lost the counter (restart without persistence,
    -- failover to a lagging replica, FLUSHALL): the counter never falls below Redis time in
    -- microseconds. ARCHITECTURE.md, "Invariants".
    local token = redis.call('INCR', fence)
    if token < now_us then
      token = now_us
      redis.call('SET', fence, string.format('%d', token), 'PX', ARGV[4])
    else
      redis.call('PEXPIRE', fence, ARGV[4])
    end

    redis.call('HSET', owner_key, 'id', lease_id, 'holder', ARGV[2], 'token', string.format('%d', token),
      'ttl', ARGV[3], 'exp', expiry)
    redis.call('PEXPIRE', owner_key, ttl_ms)
    if first then
      redis.call('ZREM', queue, entry)
      queue_moved(queue, replicas, channel, false)
    end
    return {1, token, ttl_ms, expires_at_ms}
  end
  -- Someone else is first in line: it takes the lease. Wake it again in case it missed the release.
  redis.call('SPUBLISH', channel, 'w' .. first)
  busy = {0}
end

if entry == '' then
  return {0, 0, unpack(busy)}
end

-- Join the queue at its tail, or keep the place already held.
local rank = redis.call('ZRANK', queue, entry)
if not rank then
  local size = redis.call('ZCARD', queue)
  if size >= tonumber(ARGV[8]) and purge_dead_replicas(queue, replicas, now_ms) then
    queue_moved(queue, replicas, channel, busy[1] == 0)
    size = redis.call('ZCARD', queue)
  end
  if size >= tonumber(ARGV[8]) then
    return {2, tonumber(ARGV[8])}
  end
  local tail = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  redis.call('ZADD', queue, (tonumber(tail[2]) or 0) + 1, entry)
  rank = size
end
keep_alive(queue, replicas, ARGV[6], now_ms, tonumber(ARGV[7]))
return {0, rank + 1, unpack(busy)}
