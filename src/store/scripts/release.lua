-- release: end a lease, only for its holder, and wake the waiters of every leased replica.
--
-- KEYS[1]  <prefix>{name}        the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner  hash: id, holder, token, ttl, exp
-- ARGV[1]  lease_id   ARGV[2] release channel   ARGV[3] the lease's name (the message)
-- Reply    1 released, 0 not the holder (already released, expired, or taken over)
local owner = redis.call('HMGET', KEYS[2], 'id', 'exp')
local current = redis.call('GET', KEYS[1])
if not current or owner[1] ~= ARGV[1] or owner[2] ~= current then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
