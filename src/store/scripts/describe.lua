-- describe: who holds a lease (every permit of a counting lease) and how many wait, on Redis time.
-- Read-only. Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[4]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- KEYS[5]  <prefix>{name}:queue     sorted set: waiting entries
-- Reply    {limit, waiters, shared, holder, token, remaining_ms, expires_at_ms, lock_delay_ms,
--          holder, ...}: one group of five per permit taken (held or in its lock-delay), in no
--          particular order; limit 0 and no group when nobody holds it; shared 1 when the grants
--          are shared ones (permits of limit 1). remaining_ms counts the lock-delay;
--          -1, -1 (and lock_delay_ms 0): no expiry
local now_ms = redis_now()
local waiters = redis.call('ZCARD', KEYS[5])
local exclusive = lease_holder(KEYS[1], KEYS[2], now_ms)
if exclusive then
  return {1, waiters, 0, unpack(exclusive, 2, 6)}
end
local taken = redis.call('ZRANGE', KEYS[3], taken_after(now_ms), '+inf', 'BYSCORE', 'WITHSCORES')
if #taken == 0 then
  return {0, waiters, 0}
end
local limit = tonumber(redis.call('HGET', KEYS[4], 'limit')) or #taken / 2
local reply = {limit, waiters, limit == 1 and 1 or 0}
for i = 1, #taken, 2 do
  local fields = permit_fields(KEYS[4], taken[i], tonumber(taken[i + 1]), now_ms)
  for j = 2, 6 do
    table.insert(reply, fields[j])
  end
end
return reply
