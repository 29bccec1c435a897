-- release: end a lease, only for its holder, and wake the first in line (only if someone waits).
-- Prepended with queue.lua.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: id, holder, token, ttl, exp
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:replicas  hash: replica -> deadline
-- KEYS[5]  <prefix>{name}:wake      shard channel of the name's wake-ups
-- ARGV[1]  lease_id
-- Reply    {1, first}  released; first: the entry woken (first in line), '' if nobody waits
--          {0}         not the holder (already released, expired, or taken over)
local owner = redis.call('HMGET', KEYS[2], 'id', 'exp')
local current = redis.call('GET', KEYS[1])
if not current or owner[1] ~= ARGV[1] or owner[2] ~= current then
  return {0}
end
redis.call('DEL', KEYS[1], KEYS[2])
local first = first_in_line(KEYS[3])
if first then
  local now_ms = redis_now()
  if purge_dead_replicas(KEYS[3], KEYS[4], now_ms) then
    queue_moved(KEYS[3], KEYS[4], KEYS[5], true)
    first = first_in_line(KEYS[3])
  else
    redis.call('SPUBLISH', KEYS[5], 'w' .. first)
  end
end
return {1, first or ''}
