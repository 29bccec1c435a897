-- replicas: the replicas with entries in a name's queue, so that a caller who finds the queue
-- full can check which of them are gone (purge.lua). Read-only; needs nothing of prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}:queue     sorted set: waiting entries '<replica>:<n>' (prelude.lua)
-- Reply    each replica once, as '<replica>:', in queue order of its first entry
local seen, replicas = {}, {}
for _, entry in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local replica = string.match(entry, '^(.-:)')
  if replica and not seen[replica] then
    seen[replica] = true
    table.insert(replicas, replica)
  end
end
return replicas
