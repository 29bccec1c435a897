-- revoke: an operator ends the grants of a name at once, like releases by their holders (no
-- lock-delay): the grant with one fencing token, or every grant. Only grants that still hold are
-- revoked: one in its lock-delay has expired already. Each revoked holder's renewals answer the
-- reason (renew.lua) for the grant's TTL; the callers in line that the freed permits go to are
-- woken, as release.lua does. Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:wake      shard channel of the name's wake-ups and changes ('v...'
--                                   while anyone subscribes)
-- KEYS[5]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[6]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- KEYS[7]  <prefix>{name}:revoked   hash: lease id digest -> '<until_ms> <reason>'; expires
--                                   with its last entry
-- ARGV[1]  fencing token ('0': every grant that holds the name)   ARGV[2] reason
-- ARGV[3]  keep_ms (the counter keep)
-- Reply    {token, holder, token, holder, ...}: the grants revoked; {} when none matched
local lease, owner_key, queue, channel, permits, holders, revoked =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local only, reason, keep_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local now_ms = redis_now()

-- Whether a grant with this token is one to revoke.
local function chosen(token)
  return only == 0 or token == only
end

-- The grants that end: {id, token, holder, ttl, exp}.
local ended = {}
-- Counting lease: permits free once they have ended (the callers at those places in line may
-- take one). Read-write lease: {taken, shared} once they have ended.
local free, left = 0, nil
local current = redis.call('GET', lease)
local owner = current and redis.call('HMGET', owner_key, 'i', 'h', 't', 'l', 'e')
-- An exclusive lease leased granted (its owner hash matches the key), and not in its lock-delay.
-- A key something else wrote (a classic lock) has no grant to revoke.
if owner and owner[1] and owner[5] == current and tonumber(current) > now_ms then
  if chosen(tonumber(owner[3])) then
    end_exclusive(lease, owner_key, keep_ms)
    table.insert(ended, {id = owner[1], token = tonumber(owner[3]), holder = owner[2] or '',
      ttl = tonumber(owner[4]) or 0, exp = tonumber(current)})
    left = {0, false}
  end
else
  -- At most the limit in force (--max-limit) of permits are taken.
  local limit = tonumber(redis.call('HGET', holders, 'limit')) or 1
  for _, lease_id in ipairs(redis.call('ZRANGE', permits, taken_after(now_ms), '+inf', 'BYSCORE')) do
    local permit = parse_permit(redis.call('HGET', holders, lease_id))
    if permit and permit.exp > now_ms and chosen(permit.token) then
      redis.call('ZREM', permits, lease_id)
      redis.call('HDEL', holders, permit_fields_of(lease_id))
      table.insert(ended, {id = lease_id, token = permit.token, holder = permit.holder,
        ttl = permit.ttl, exp = permit.exp})
    end
  end
  if #ended > 0 then
    drop_freed_permits(permits, holders, owner_key, now_ms, keep_ms)
    local taken = redis.call('ZCOUNT', permits, taken_after(now_ms), '+inf')
    if limit > 1 then
      free = limit - taken
    else
      left = {taken, true}
    end
  end
end
if #ended == 0 then
  return {}
end

-- The revoked holders learn why for their grant's TTL: they renew well within it. Entries past
-- their moment are dropped, so the hash holds only the revokes of the last TTL.
local keep_ms = 0
for _, grant in ipairs(ended) do
  redis.call('HSET', revoked, grant.id, string.format('%d ', now_ms + grant.ttl) .. reason)
  keep_ms = math.max(keep_ms, grant.ttl)
end
local records = redis.call('HGETALL', revoked)
for i = 1, #records, 2 do
  local until_ms = tonumber(string.match(records[i + 1], '^(%d+) '))
  if not until_ms or until_ms < now_ms then
    redis.call('HDEL', revoked, records[i])
  end
end
redis.call('PEXPIRE', revoked, math.max(redis.call('PTTL', revoked), keep_ms, 1))

if listened(channel) then
  for _, grant in ipairs(ended) do
    redis.call('SPUBLISH', channel, revoked_message(grant.token, grant.exp, reason, grant.holder))
  end
end

-- As a release: the free permits go to the first `free` callers in line; those freed here go to
-- the last of them (the ones ahead were woken when theirs freed).
if left then
  -- A read-write lease: the first in line, or the run of shared callers at the head.
  wake_first(queue, channel, due_in_line(queue, left[1], 1, left[2]))
elseif free > 0 and redis.call('EXISTS', queue) == 1 then
  local first = math.max(free - #ended, 0)
  local last = math.min(free, first + MAX_WAKE_UPS) - 1
  for _, entry in ipairs(redis.call('ZRANGE', queue, first, last)) do
    redis.call('SPUBLISH', channel, 'w' .. entry)
  end
end

local reply = {}
for _, grant in ipairs(ended) do
  table.insert(reply, grant.token)
  table.insert(reply, grant.holder)
end
return reply
