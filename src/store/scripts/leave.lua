-- leave: take the entries of callers that stopped waiting (gave up, timed out, cancelled) out of
-- a name's queue. Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:wake      shard channel of the name's wake-ups
-- KEYS[5]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[6]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- ARGV     the entries
-- Reply    how many were in the queue
local removed = redis.call('ZREM', KEYS[3], unpack(ARGV))
if removed > 0 then
  local occupied = occupancy(KEYS[1], KEYS[2], KEYS[5], KEYS[6], redis_now())
  queue_moved(KEYS[3], KEYS[4], occupied)
end
return removed
