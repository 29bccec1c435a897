-- describe: who holds a lease, on Redis time. Read-only. Prepended with queue.lua.
--
-- KEYS[1]  <prefix>{name}        the lease's expiry (Unix ms)
-- KEYS[2]  <prefix>{name}:owner  hash: id, holder, token, ttl, exp
-- Reply    {0}                                             free
--          {1, holder, token, remaining_ms, expires_at_ms}  held; -1, -1: no expiry
return lease_holder(KEYS[1], KEYS[2], redis_now()) or {0}
