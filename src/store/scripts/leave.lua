-- leave: take the entries of callers that stopped waiting (gave up, timed out, cancelled) out of
-- a name's queue. Prepended with queue.lua.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[3]  <prefix>{name}:replicas  hash: replica -> deadline
-- KEYS[4]  <prefix>{name}:wake      shard channel of the name's wake-ups
-- ARGV     the entries
-- Reply    how many were in the queue
local removed = redis.call('ZREM', KEYS[2], unpack(ARGV))
if removed > 0 then
  queue_moved(KEYS[2], KEYS[3], KEYS[4], redis.call('EXISTS', KEYS[1]) == 0)
end
return removed
