-- purge: a replica saw entries of other replicas in line for a free permit that they did not take
-- within a grace. It checked their replicas' heartbeats (outside this script: on Redis Cluster
-- they live in other slots), and takes out of the queue every entry of the replicas that are
-- gone, and the given entries that stayed stalled far too long; the callers behind them move up
-- and the free permits are woken again. With nothing to take out, the wake-ups of the callers the
-- free permits go to are repeated, in case theirs was lost. Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:wake      shard channel of the name's wake-ups
-- KEYS[5]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[6]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- ARGV     '<replica>:' (every entry of a replica that is gone) or '<replica>:<n>' (one entry)
-- Reply    how many entries were taken out
local queue, channel = KEYS[3], KEYS[4]
local gone, stalled = {}, {}
for i = 1, #ARGV do
  local replica = string.match(ARGV[i], '^(.-:)$')
  if replica then
    gone[replica] = true
  else
    stalled[ARGV[i]] = true
  end
end

local removed = 0
for _, entry in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  if stalled[entry] or gone[string.match(entry, '^(.-:)') or ''] then
    redis.call('ZREM', queue, entry)
    removed = removed + 1
  end
end

local occupied = occupancy(KEYS[1], KEYS[2], KEYS[5], KEYS[6], redis_now())
if removed > 0 then
  queue_moved(queue, channel, occupied)
else
  wake_first(queue, channel, due_for(queue, occupied))
end
return removed
