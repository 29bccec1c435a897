-- renew: move a lease's (a permit's) expiry forward, only for its holder and only while it holds it
-- (not in its lock-delay). Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner     hash: the fencing counter and the exclusive grant (prelude.lua)
-- KEYS[3]  <prefix>{name}:permits   sorted set: a counting lease's permits
-- KEYS[4]  <prefix>{name}:holders   hash: a counting lease's permit records and limit
-- KEYS[5]  <prefix>{name}:revoked   hash: lease id digest -> '<until_ms> <reason>'
--                                   (revoke.lua); read only when the lease is lost
-- ARGV[1]  lease id digest   ARGV[2] ttl_ms (0: keep the granted TTL)   ARGV[3] keep_ms (the
--          counter keep)   ARGV[4] the caller's principal ('' without access control, or left
--          out; bound_principal() of prelude.lua)
-- Reply    {1, token, ttl_ms, expires_at_ms}   renewed
--          {0, 'expired'}                      nobody holds it (TTL passed, or released)
--          {0, 'taken'}                        someone else holds it
--          {0, 'revoked', reason}              an operator revoked this grant, for this reason
--          {2}                                 the grant is bound to another principal: nothing
--                                              renewed
local lease, owner_key, permits, holders, revoked = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now_ms = redis_now()
local principal = ARGV[4] or ''

-- The answer for a lease that is no longer ARGV[1]'s: revoked, whoever holds it now, if it was.
local function lost(kind)
  local reason = revoked_reason(revoked, ARGV[1])
  if reason then
    return {0, 'revoked', reason}
  end
  return {0, kind}
end

local current = redis.call('GET', lease)
if current then
  local owner = redis.call('HMGET', owner_key, 'i', 't', 'l', 'e', 'd', 'p')
  local current_ms = tonumber(current) -- nil for a key something else wrote
  if current_ms and current_ms <= now_ms then
    return lost('expired') -- in a lock-delay, or a crashed classic lock: nobody holds it
  end
  -- The lease key must still hold the expiry this holder set: anything else is another holder's.
  if owner[1] ~= ARGV[1] or owner[4] ~= current then
    return lost('taken')
  end
  if foreign(bound_principal(owner[6], ARGV[1]), principal) then
    return {2}
  end
  local ttl_ms = tonumber(ARGV[2])
  if ttl_ms == 0 then
    ttl_ms = tonumber(owner[3])
  end
  local delay_ms = tonumber(owner[5]) or 0
  local expires_at_ms = now_ms + ttl_ms
  local expiry = string.format('%d', expires_at_ms)
  redis.call('SET', lease, expiry, 'PX', ttl_ms + delay_ms)
  redis.call('HSET', owner_key, 'l', string.format('%d', ttl_ms), 'e', expiry)
  -- The owner hash outlives the lease by the counter keep, as the grant made it.
  redis.call('PEXPIRE', owner_key, ttl_ms + delay_ms + tonumber(ARGV[3]))
  return {1, tonumber(owner[2]), ttl_ms, expires_at_ms}
end

-- A permit of a counting lease is never someone else's: gone is expired, released or revoked.
local permit = parse_permit(redis.call('HGET', holders, ARGV[1]))
if not permit or permit.exp <= now_ms then
  return lost('expired')
end
if principal ~= '' then
  local _, principal_field = permit_fields_of(ARGV[1])
  if foreign(redis.call('HGET', holders, principal_field), principal) then
    return {2}
  end
end
local ttl_ms = tonumber(ARGV[2])
if ttl_ms == 0 then
  ttl_ms = permit.ttl
end
local expires_at_ms = now_ms + ttl_ms
redis.call('HSET', holders, ARGV[1], permit_record(permit.token, expires_at_ms, ttl_ms, permit.delay, permit.holder))
redis.call('ZADD', permits, expires_at_ms + permit.delay, ARGV[1])
keep_permits(permits, holders, now_ms)
return {1, permit.token, ttl_ms, expires_at_ms}
