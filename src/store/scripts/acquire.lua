-- acquire: grant a lease if it is free (or left expired by a crashed client), with a new fencing token.
--
-- KEYS[1]  <prefix>{name}        string: the lease's expiry, Unix ms on Redis time; PEXPIREs with the lease
-- KEYS[2]  <prefix>{name}:owner  hash: id, holder, token, ttl, exp; same expiry
-- KEYS[3]  <prefix>{name}:fence  string: the last fencing token issued; outlives the lease
-- ARGV[1]  lease_id   ARGV[2] holder   ARGV[3] ttl_ms   ARGV[4] fence_ttl_ms
-- Reply    {1, token, ttl_ms, expires_at_ms}                    granted (also when ARGV[1] already holds it)
--          {0, holder, token, remaining_ms, expires_at_ms}      busy; remaining_ms and expires_at_ms -1: no expiry
--
-- Numbers are stored as strings made with %d. Lua's own tostring and `..` use %.14g, which rounds
-- 16-digit microsecond tokens, and the expiry is compared as a string with the value stored in the
-- lease key and the owner hash, so it must always be spelled the same way.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)
local ttl_ms = tonumber(ARGV[3])
local expires_at_ms = now_ms + ttl_ms
local expiry = string.format('%d', expires_at_ms)

-- SETNX and EXPIRE in one atomic step.
if not redis.call('SET', KEYS[1], expiry, 'NX', 'PX', ttl_ms) then
  local current = redis.call('GET', KEYS[1])
  local owner = redis.call('HMGET', KEYS[2], 'id', 'holder', 'token', 'ttl', 'exp')
  if owner[1] == ARGV[1] and owner[5] == current then
    -- A retry of this very grant (the first reply was lost): answer it again.
    return {1, tonumber(owner[3]), tonumber(owner[4]), tonumber(owner[5])}
  end
  local current_ms = tonumber(current)
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl == -1 and current_ms and current_ms < now_ms then
    -- A key with no TTL whose timestamp has passed: the classic SETNX lock left by a crashed client.
    -- Take it over with GETSET, as the classic pattern does. Nothing can write the key between the
    -- GET above and this GETSET inside an atomic script, so the old value is the expired one we
    -- read and the pattern's comparison of the two could never fail: it is left out.
    redis.call('GETSET', KEYS[1], expiry)
    redis.call('PEXPIRE', KEYS[1], ttl_ms)
  else
    local remaining_ms, holder_expires_at_ms = -1, -1
    if pttl >= 0 then
      -- The value is the expiry leased wrote; a key written by others may hold anything.
      remaining_ms, holder_expires_at_ms = pttl, current_ms or (now_ms + pttl)
    elseif current_ms then
      remaining_ms, holder_expires_at_ms = current_ms - now_ms, current_ms
    end
    return {0, owner[2] or '', tonumber(owner[3]) or 0, remaining_ms, holder_expires_at_ms}
  end
end

-- Tokens strictly increase per name even if Redis lost the counter (restart without persistence,
-- failover to a lagging replica, FLUSHALL): the counter never falls below Redis time in
-- microseconds. ARCHITECTURE.md, "Invariants".
local token = redis.call('INCR', KEYS[3])
if token < now_us then
  token = now_us
  redis.call('SET', KEYS[3], string.format('%d', token), 'PX', ARGV[4])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end

redis.call('HSET', KEYS[2], 'id', ARGV[1], 'holder', ARGV[2], 'token', string.format('%d', token),
  'ttl', ARGV[3], 'exp', expiry)
redis.call('PEXPIRE', KEYS[2], ttl_ms)
return {1, token, ttl_ms, expires_at_ms}
