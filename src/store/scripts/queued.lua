-- queued: one replica's entries in a name's queue, whether or not a caller of that replica still
-- owns them; the replica removes those it has no caller for (leave.lua). Read-only; needs nothing
-- of prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}:queue     sorted set: waiting entries '<replica>:<n>' (prelude.lua)
-- ARGV[1]  replica
-- Reply    the replica's entries, in queue order
local mine, prefix = {}, ARGV[1] .. ':'
for _, entry in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(entry, 1, #prefix) == prefix then
    table.insert(mine, entry)
  end
end
return mine
