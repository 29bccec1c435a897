-- status: where a replica's waiters of a name stand: who holds the lease, each entry's place, and
-- the entries that the free permits go to (so that the replica can tell a stalled one). Read-only;
-- a replica calls it when something changed (a wake-up, positions moved, a holder's expiry, a
-- resubscription), never on a timer. Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[5]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- ARGV     this replica's entries
-- Reply    {taken, limit, held, holder, token, remaining_ms, expires_at_ms, lock_delay_ms, shared,
--          position..., due, due entry...}: who takes the name (occupancy() of prelude.lua), one
--          position per entry of ARGV (1 = next in line, 0 = not in the queue: join again), how
--          many of the first in line a grant may go to now (due_in_line()), then those entries
--          (at most MAX_WAKE_UPS)
local queue = KEYS[3]
local reply = occupancy(KEYS[1], KEYS[2], KEYS[4], KEYS[5], redis_now())
for i = 1, #ARGV do
  local rank = redis.call('ZRANK', queue, ARGV[i])
  table.insert(reply, rank and rank + 1 or 0)
end
local due = due_for(queue, reply)
table.insert(reply, due)
if due > 0 then
  for _, entry in ipairs(redis.call('ZRANGE', queue, 0, math.min(due, MAX_WAKE_UPS) - 1)) do
    table.insert(reply, entry)
  end
end
return reply
