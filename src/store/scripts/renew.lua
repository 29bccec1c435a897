-- renew: move a lease's expiry forward, only for its holder.
--
-- KEYS[1]  <prefix>{name}        the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner  hash: id, holder, token, ttl, exp
-- ARGV[1]  lease_id   ARGV[2] ttl_ms (0: keep the granted TTL)
-- Reply    {1, token, ttl_ms, expires_at_ms}   renewed
--          {0, 'expired'}                      nobody holds it (TTL passed, or released)
--          {0, 'taken'}                        someone else holds it
local owner = redis.call('HMGET', KEYS[2], 'id', 'token', 'ttl', 'exp')
local current = redis.call('GET', KEYS[1])
if not current then
  return {0, 'expired'}
end
-- The lease key must still hold the expiry this holder set: anything else is another holder's.
if owner[1] ~= ARGV[1] or owner[4] ~= current then
  return {0, 'taken'}
end

local ttl_ms = tonumber(ARGV[2])
if ttl_ms == 0 then
  ttl_ms = tonumber(owner[3])
end
local time = redis.call('TIME')
local expires_at_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + ttl_ms
local expiry = string.format('%d', expires_at_ms)

redis.call('SET', KEYS[1], expiry, 'PX', ttl_ms)
redis.call('HSET', KEYS[2], 'ttl', string.format('%d', ttl_ms), 'exp', expiry)
redis.call('PEXPIRE', KEYS[2], ttl_ms)
return {1, tonumber(owner[2]), ttl_ms, expires_at_ms}
