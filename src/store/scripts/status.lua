-- status: one replica's heartbeat for its waiters of a name: renew its deadline, purge the entries
-- of dead replicas, and read who holds the lease and where each of its entries stands.
-- Prepended with prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:replicas  hash: replica -> deadline
-- KEYS[5]  <prefix>{name}:wake      shard channel of the name's wake-ups
-- KEYS[6]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[7]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- ARGV[1]  replica   ARGV[2] replica_ttl_ms   ARGV[3..] this replica's entries
-- Reply    {taken, limit, held, holder, token, remaining_ms, expires_at_ms, lock_delay_ms,
--          position...}: who takes the name (occupancy() of prelude.lua), then one position per
--          entry (1 = next in line, 0 = not in the queue: join again)
local queue, replicas, channel = KEYS[3], KEYS[4], KEYS[5]
local now_ms = redis_now()

local reply = occupancy(KEYS[1], KEYS[2], KEYS[6], KEYS[7], now_ms)
local free = free_for_queue(reply)

if redis.call('EXISTS', queue) == 0 then
  -- Nothing queued (Redis lost the queue, or every entry here was purged): all join again.
  redis.call('DEL', replicas)
  for _ = 3, #ARGV do
    table.insert(reply, 0)
  end
  return reply
end

keep_alive(queue, replicas, ARGV[1], now_ms, tonumber(ARGV[2]))
if purge_dead_replicas(queue, replicas, now_ms) then
  queue_moved(queue, replicas, channel, free)
end
for i = 3, #ARGV do
  local rank = redis.call('ZRANK', queue, ARGV[i])
  table.insert(reply, rank and rank + 1 or 0)
end
-- A caller on another replica that a free permit goes to may have missed its wake-up: repeat it.
if free > 0 then
  for _, entry in ipairs(redis.call('ZRANGE', queue, 0, math.min(free, MAX_WAKE_UPS) - 1)) do
    if string.match(entry, '^(.-):') ~= ARGV[1] then
      redis.call('SPUBLISH', channel, 'w' .. entry)
    end
  end
end
return reply
