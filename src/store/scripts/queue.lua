-- queue.lua: shared by the scripts that touch a name's wait queue or read its holder, which
-- prepend it.
--
-- The queue is a sorted set (<prefix>{name}:queue): member '<replica>:<n>', score the arrival
-- order (the tail's score + 1). Each replica with waiters on the name keeps a deadline (Unix ms,
-- Redis time) in <prefix>{name}:replicas and renews it while it waits; the entries of a replica
-- whose deadline passed are purged, since nobody is left to take the lease for them. Both keys go
-- when the queue empties. Wake-ups are published on the name's shard channel, and only when someone
-- is queued: 'w<member>' (that entry is first in line and the lease is free) and 'm' (positions or
-- the holder changed). ARCHITECTURE.md, "Fair waiting".

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

-- Removes the entries of replicas whose deadline passed; true if any entry was removed.
local function purge_dead_replicas(queue, replicas, now_ms)
  local deadlines = redis.call('HGETALL', replicas)
  local dead, any_dead = {}, false
  for i = 1, #deadlines, 2 do
    if tonumber(deadlines[i + 1]) < now_ms then
      dead[deadlines[i]] = true
      any_dead = true
      redis.call('HDEL', replicas, deadlines[i])
    end
  end
  if not any_dead then
    return false
  end
  local removed = false
  for _, entry in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
    if dead[string.match(entry, '^(.-):')] then
      redis.call('ZREM', queue, entry)
      removed = true
    end
  end
  return removed
end

-- After entries left the queue: drop the bookkeeping of an empty queue, or tell every replica that
-- positions moved and, if the lease is free, wake the new first in line.
local function queue_moved(queue, replicas, channel, lease_free)
  local first = first_in_line(queue)
  if not first then
    redis.call('DEL', replicas)
    return
  end
  redis.call('SPUBLISH', channel, 'm')
  if lease_free then
    redis.call('SPUBLISH', channel, 'w' .. first)
  end
end

-- Renews this replica's deadline, and lets both keys expire if every replica goes away.
local function keep_alive(queue, replicas, replica, now_ms, replica_ttl_ms)
  redis.call('HSET', replicas, replica, string.format('%d', now_ms + replica_ttl_ms))
  redis.call('PEXPIRE', queue, 2 * replica_ttl_ms)
  redis.call('PEXPIRE', replicas, 2 * replica_ttl_ms)
end

-- Where a free or held lease stands, as the scripts reply: {held, holder, token, remaining_ms,
-- expires_at_ms}; remaining_ms and expires_at_ms -1 for a key without expiry. `current` is the
-- lease key's value, `owner` HMGET owner 'holder', 'token'.
local function holder_fields(lease, current, holder, token, now_ms)
  local pttl = redis.call('PTTL', lease)
  local current_ms = tonumber(current)
  local remaining_ms, expires_at_ms = -1, -1
  if pttl >= 0 then
    -- The value is the expiry leased wrote; a key written by others may hold anything.
    remaining_ms, expires_at_ms = pttl, current_ms or (now_ms + pttl)
  elseif current_ms then
    remaining_ms, expires_at_ms = current_ms - now_ms, current_ms
  end
  return {1, holder or '', tonumber(token) or 0, remaining_ms, expires_at_ms}
end

-- Who holds the lease, as holder_fields answers, or nil when it is free: no key, or the expired
-- key of a crashed classic SETNX lock (which acquire takes over).
local function lease_holder(lease, owner_key, now_ms)
  local current = redis.call('GET', lease)
  if not current then
    return nil
  end
  local current_ms = tonumber(current)
  if redis.call('PTTL', lease) == -1 and current_ms and current_ms < now_ms then
    return nil
  end
  local owner = redis.call('HMGET', owner_key, 'holder', 'token')
  return holder_fields(lease, current, owner[1], owner[2], now_ms)
end
