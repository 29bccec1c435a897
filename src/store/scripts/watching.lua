-- watching: keep one replica registered as a watcher of a name, or unregister it. While the hash
-- exists, acquire.lua, release.lua and revoke.lua publish the name's changes of holder on its
-- shard channel; with nobody watching they publish nothing. Each replica renews its deadline
-- about every second; a field past its deadline (a replica gone) is dropped here, and the hash
-- lapses by itself when every replica stopped renewing it. Prepended with prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}:watchers  hash: replica -> deadline (Unix ms, Redis time)
-- ARGV[1]  replica   ARGV[2] '1': watching, '0': not any more   ARGV[3] ttl_ms (the deadline and
--          the hash's expiry are now + ttl_ms)
-- Reply    1 if this replica's registration was in place, 0 if not (never made, lapsed, or lost
--          with Redis's data: changes may have gone unpublished)
local watchers, replica = KEYS[1], ARGV[1]
local now_ms = redis_now()
local registered = redis.call('HEXISTS', watchers, replica)

local deadlines = redis.call('HGETALL', watchers)
for i = 1, #deadlines, 2 do
  if deadlines[i] ~= replica and tonumber(deadlines[i + 1]) < now_ms then
    redis.call('HDEL', watchers, deadlines[i])
  end
end

if ARGV[2] == '1' then
  local ttl_ms = tonumber(ARGV[3])
  redis.call('HSET', watchers, replica, string.format('%d', now_ms + ttl_ms))
  redis.call('PEXPIRE', watchers, ttl_ms)
else
  redis.call('HDEL', watchers, replica)
end
return registered
