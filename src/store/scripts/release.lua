-- release: end a lease (a permit of a counting lease), only for its holder and only while it holds
-- it (not in its lock-delay), and wake the one caller in line that the freed permit goes to (only
-- if someone waits). Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries
-- KEYS[4]  <prefix>{name}:wake      shard channel of the name's wake-ups and changes ('r...'
--                                   while anyone subscribes)
-- KEYS[5]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[6]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- KEYS[7]  <prefix>{name}:ended     sorted set: lease ids released lately (prelude.lua)
-- ARGV[1]  lease id digest   ARGV[2] keep_ms (the counter keep)
-- ARGV[3]  ended_ms: how long a released lease id stays ended (end_lease_id() of prelude.lua)
-- ARGV[4]  the caller's principal ('' without access control, or left out; bound_principal() of
--          prelude.lua)
-- ARGV[5]  '1': a grant that its replicas did not confirm, released by the call that made it,
--          only if no other call was answered it (left out: '0')
-- Reply    {1, woken...}  released; woken: the entries a grant now goes to (none if nobody waits)
--          {0}         not the holder (already released, expired, revoked, or taken over)
--          {2}         the grant is bound to another principal: nothing released or ended
--          {3}         ARGV[5] and another call was answered this grant: it stays held
local lease, owner_key, queue, channel, permits, holders, ended_ids =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now_ms = redis_now()
local ended_ms = tonumber(ARGV[3])
local principal, unconfirmed = ARGV[4] or '', ARGV[5] == '1'

-- Counting lease: permits free once this one is (the callers at those places in line may take
-- one). Read-write lease: {taken, shared} once this grant has ended.
local free, left
-- The grant that ends, for the watchers: token, expires_at_ms, holder.
local ended
local current = redis.call('GET', lease)
if current then
  local owner = redis.call('HMGET', owner_key, 'i', 'e', 't', 'h', 'o', 'p', 'a')
  -- A lease in its lock-delay has expired: releasing it is too late to end the delay.
  if owner[1] ~= ARGV[1] or owner[2] ~= current or tonumber(current) <= now_ms then
    -- Not held: perhaps not yet, by a caller that gave up while its grant was on its way.
    end_lease_id(ended_ids, ARGV[1], now_ms, ended_ms)
    return {0}
  end
  if foreign(bound_principal(owner[6], ARGV[1]), principal) then
    return {2}
  end
  if unconfirmed and owner[7] == ARGV[1] then
    return {3}
  end
  if owner[5] then
    end_lease_id(ended_ids, ARGV[1], now_ms, ended_ms)
  end
  end_exclusive(lease, owner_key, tonumber(ARGV[2]))
  left = {0, false}
  ended = {tonumber(owner[3]) or 0, tonumber(current), owner[4] or ''}
else
  local record, principal_field, mark_field = permit_fields_of(ARGV[1])
  local permit_and_binding = redis.call('HMGET', holders, record, principal_field, mark_field)
  local permit = parse_permit(permit_and_binding[1])
  if permit and permit.exp > now_ms then
    if foreign(permit_and_binding[2], principal) then
      return {2}
    end
    if unconfirmed and permit_and_binding[3] then
      return {3}
    end
  end
  -- A permit's release always ends its id: permits do not record who chose theirs.
  end_lease_id(ended_ids, ARGV[1], now_ms, ended_ms)
  if not permit or permit.exp <= now_ms then
    return {0}
  end
  local limit = tonumber(redis.call('HGET', holders, 'limit')) or 1
  redis.call('ZREM', permits, ARGV[1])
  redis.call('HDEL', holders, permit_fields_of(ARGV[1]))
  drop_freed_permits(permits, holders, owner_key, now_ms, tonumber(ARGV[2]))
  local taken = redis.call('ZCOUNT', permits, taken_after(now_ms), '+inf')
  if limit > 1 then
    free = limit - taken
  else
    left = {taken, true}
  end
  ended = {permit.token, permit.exp, permit.holder}
end

if listened(channel) then
  redis.call('SPUBLISH', channel, released_message(ended[1], ended[2], ended[3]))
end

local reply = {1}
if left then
  -- A read-write lease: the first in line, or the run of shared callers at the head.
  local due = due_in_line(queue, left[1], 1, left[2])
  if due > 0 then
    for _, entry in ipairs(redis.call('ZRANGE', queue, 0, math.min(due, MAX_WAKE_UPS) - 1)) do
      redis.call('SPUBLISH', channel, 'w' .. entry)
      table.insert(reply, entry)
    end
  end
elseif free > 0 then
  -- The callers ahead of this place had free permits already (and were woken for them).
  local woken = redis.call('ZRANGE', queue, free - 1, free - 1)[1]
  if woken then
    redis.call('SPUBLISH', channel, 'w' .. woken)
    table.insert(reply, woken)
  end
end
return reply
