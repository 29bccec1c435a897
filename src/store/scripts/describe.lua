-- describe: who holds a lease, on Redis time. Read-only.
--
-- KEYS[1]  <prefix>{name}        the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner  hash: id, holder, token, ttl, exp
-- Reply    {0}                                             free
--          {1, holder, token, remaining_ms, expires_at_ms}  held; -1, -1: no expiry
local current = redis.call('GET', KEYS[1])
if not current then
  return {0}
end
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local pttl = redis.call('PTTL', KEYS[1])
local current_ms = tonumber(current)
local remaining_ms, expires_at_ms = -1, -1
if pttl >= 0 then
  -- The value is the expiry leased wrote; a key written by others may hold anything.
  remaining_ms, expires_at_ms = pttl, current_ms or (now_ms + pttl)
elseif current_ms then
  if current_ms < now_ms then
    -- An expired timestamp with no TTL: free, acquire takes it over.
    return {0}
  end
  remaining_ms, expires_at_ms = current_ms - now_ms, current_ms
end
local owner = redis.call('HMGET', KEYS[2], 'holder', 'token')
return {1, owner[1] or '', tonumber(owner[2]) or 0, remaining_ms, expires_at_ms}
