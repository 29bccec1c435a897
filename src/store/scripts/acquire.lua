-- acquire: grant a lease (a permit of a counting lease) if one is free (or left expired by a crashed
-- client) and nobody ahead in its queue is to take it, with a new fencing token; otherwise answer
-- who holds it and, for a caller that waits, queue it (or keep its place). Uses prelude.lua.
-- The keys, the messages and every script's reply: docs/src/internals/redis-layout.md.
--
-- KEYS[1]  <prefix>{name}           string: the lease's expiry, Unix ms on Redis time; PEXPIREs
--                                   with the lease, lock-delay included
-- KEYS[2]  <prefix>{name}:owner     hash: the name's last fencing token, and the grant of an
--                                   exclusive lease (prelude.lua); kept for the counter keep,
--                                   past the lease
-- KEYS[3]  <prefix>{name}:queue     sorted set: waiting entries (prelude.lua)
-- KEYS[4]  <prefix>{name}:wake      shard channel of the name's wake-ups and changes (prelude.lua);
--                                   a grant publishes 'g...' on it while anyone subscribes
-- KEYS[5]  <prefix>{name}:permits   sorted set: a counting lease's permits (prelude.lua)
-- KEYS[6]  <prefix>{name}:holders   hash: a counting lease's permit records and limit (prelude.lua)
-- KEYS[7]  <prefix>{name}:places    hash: the place in line of each caller that chose its lease
--                                   id: its digest -> '<score> <until_ms> <entry> <replaced>'
--                                   (replaced: the earlier call's entry it took over), so that a
--                                   retry of its wait (a new entry, perhaps of another replica)
--                                   takes the same place until its first wait would have ended;
--                                   expires with the queue
-- KEYS[8]  <prefix>{name}:ended     sorted set: lease ids released lately (prelude.lua), checked
--                                   for a lease id the caller chose
--                                   (KEYS[7] and KEYS[8] only when ARGV[12] is '1': nothing else
--                                   reads them)
-- ARGV[1]  lease id digest   ARGV[2] holder   ARGV[3] ttl_ms   ARGV[4] keep_ms (the counter keep)
-- ARGV[5]  queue entry ('' = try once, never queue)   ARGV[6] wait_ms (how long the caller may
--          still wait: the queue lives at least that long)
-- ARGV[7]  max_waiters (the whole queue, every replica)   ARGV[8] limit (1: exclusive)
-- ARGV[9]  lock_delay_ms   ARGV[10] '1': a shared grant   ARGV[11] the most shared grants at once
-- ARGV[12] '1': the caller chose its lease id (its place in line is kept for a retry)
-- ARGV[13] the caller's principal ('' without access control; bound_principal() of prelude.lua)
--          (ARGV[10] to ARGV[13] may be left out: an exclusive grant of a server-made lease id)
-- Reply    {1, token, ttl_ms, expires_at_ms, again}   granted; again: 1 when ARGV[1] already held
--                    it and this call only answered that grant again (and marked it so), 0 when
--                    this call made it
--          {0, position, taken, limit, held, holder, token, remaining_ms, expires_at_ms,
--           lock_delay_ms, shared, due}
--                    not granted: occupancy() of prelude.lua; held 0 when no permit is taken (the
--                    free one goes to someone ahead in the queue); remaining_ms, expires_at_ms
--                    -1: no expiry. position: the entry's place (1 = next), 0 when not queued.
--                    due: how many of the first in line a grant goes to now (due_in_line()).
--          {2, max_waiters}                    the queue is full
--          {3, limit}                          the holders were granted with this other limit
--          {4, most}                           shared: `most` shared grants hold the name already
--          {5}                                 the caller's own lease id was released lately
--          {6}                                 a retry with the same lease id took this entry's
--                                              place in line: this call is over
--          {7, field, held}                    ARGV[1] holds a grant of the name, of another mode
--                                              ('shared', held 0 or 1) or limit ('limit', held the
--                                              limit): a retry must ask for what it holds
--          {8}                                 ARGV[1] holds a grant made by another principal
--
-- Numbers are stored as strings made with %d. Lua's own tostring and `..` use %.14g, which rounds
-- 16-digit microsecond tokens, and the expiry is compared as a string with the value stored in the
-- lease key and the owner hash, so it must always be spelled the same way.
local lease, owner_key, queue, channel, permits, holders, places =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local lease_id, holder, entry = ARGV[1], ARGV[2], ARGV[5]
local now_ms, now_us = redis_now()
local ttl_ms, limit, delay_ms = tonumber(ARGV[3]), tonumber(ARGV[8]), tonumber(ARGV[9])
local keep_ms = tonumber(ARGV[4])
local shared, own_id = ARGV[10] == '1', ARGV[12] == '1'
local principal = ARGV[13] or ''

-- The answer to a retry of a grant that ARGV[1] holds already (the first reply was lost): the
-- grant again, as it was made (its TTL and expiry stand: renew to change them), if the retry asks
-- for the mode and limit it holds and comes from the principal that made it. Marked as answered
-- again through `mark`, so that the call that made it does not undo it (prelude.lua).
local function answer_again(bound, held_limit, held_shared, token, grant_ttl_ms, expires_at_ms, mark)
  if foreign(bound, principal) then
    return {8}
  end
  if held_shared ~= shared then
    return {7, 'shared', held_shared and 1 or 0}
  end
  if held_limit ~= limit then
    return {7, 'limit', held_limit}
  end
  mark()
  return {1, token, grant_ttl_ms, expires_at_ms, 1}
end

-- Who takes the name now: {taken, limit, held, holder fields...} as occupancy() answers.
local occupied
local takeover = false
local current = redis.call('GET', lease)
if current then
  local owner = redis.call('HMGET', owner_key, 'i', 'h', 't', 'l', 'e', 'd', 'p')
  local current_ms = tonumber(current)
  if owner[1] == lease_id and owner[5] == current and current_ms > now_ms then
    return answer_again(bound_principal(owner[7], lease_id), 1, false, tonumber(owner[3]),
      tonumber(owner[4]), current_ms, function() redis.call('HSET', owner_key, 'a', lease_id) end)
  end
  if redis.call('PTTL', lease) == -1 and current_ms and current_ms < now_ms then
    -- A key with no TTL whose timestamp has passed: the classic SETNX lock left by a crashed client.
    takeover = true
  elseif owner[5] == current then
    occupied = {1, 1, unpack(holder_fields(lease, current, owner[2], owner[3], owner[6], now_ms))}
  else
    -- A key something else wrote: the owner hash's fields are an earlier grant's.
    occupied = {1, 1, unpack(holder_fields(lease, current, nil, nil, nil, now_ms))}
  end
  if occupied then
    table.insert(occupied, 0) -- not shared
  end
end
-- Whether any of the keys that a plain grant finds missing exists: a counting lease's holders, a
-- queue. One call answers the common case, neither; the grant path always sets it here.
local bystanders = true
-- Whether a holders hash existed (a counting lease's permits, or shared grants), and its share of
-- the counter.
local counting = false
if not occupied then
  occupied = nobody()
  bystanders = redis.call('EXISTS', holders, queue) > 0
  counting = bystanders and redis.call('EXISTS', holders) == 1
  if counting then
    local mine = parse_permit(redis.call('HGET', holders, lease_id))
    if mine and mine.exp > now_ms then
      -- Permits of limit 1 are the shared grants of a read-write lease.
      local held_limit = tonumber(redis.call('HGET', holders, 'limit')) or 1
      local _, principal_field, mark_field = permit_fields_of(lease_id)
      return answer_again(redis.call('HGET', holders, principal_field), held_limit, held_limit == 1,
        mine.token, mine.ttl, mine.exp, function() redis.call('HSET', holders, mark_field, '1') end)
    end
    drop_freed_permits(permits, holders, owner_key, now_ms, keep_ms)
    occupied = permits_occupancy(permits, holders, now_ms)
  end
end
-- A lease id its caller chose and then released (it gave up) is granted nothing again: this
-- attempt was on its way when the caller let go.
if own_id then
  local ended_until = redis.call('ZSCORE', KEYS[8], lease_id)
  if ended_until and tonumber(ended_until) > now_ms then
    return {5}
  end
end
if occupied[1] > 0 and occupied[2] ~= limit then
  return {3, occupied[2]}
end

-- Whether this caller may be granted now: the free permits of a counting lease go to the first
-- callers in line (a caller not in line comes after them all); a read-write lease (limit 1) goes
-- to the first in line, or to the run of shared callers at the head of the line, and to a caller
-- not in line only when nobody waits.
local rank = bystanders and entry ~= '' and redis.call('ZRANK', queue, entry) or nil
local granting, due
if limit > 1 then
  due = limit - occupied[1]
  granting = due > 0 and (rank or (bystanders and redis.call('ZCARD', queue) or 0)) < due
else
  local compatible = occupied[1] == 0 or (shared and occupied[9] == 1)
  if compatible and rank then
    due = due_for(queue, occupied)
    granting = rank < due
  elseif compatible then
    granting = not bystanders or redis.call('EXISTS', queue) == 0
    due = granting and 0 or due_for(queue, occupied)
  else
    due, granting = 0, false
  end
end
if granting then
  if shared and occupied[1] >= tonumber(ARGV[11]) then
    return {4, tonumber(ARGV[11])}
  end
  local last = redis.call('HMGET', owner_key, 't', 'd', 'o', 'p', 'a')
  -- While a counting lease or shared grants hold permits, their grants count in the holders hash.
  local counted = counting and redis.call('HGET', holders, 't')
  local token = next_token(math.max(tonumber(last[1]) or 0, tonumber(counted) or 0), now_us)
  local token_text = string.format('%d', token)
  local expires_at_ms = now_ms + ttl_ms
  local expiry = string.format('%d', expires_at_ms)
  if limit == 1 and not shared then
    -- The lease key outlives the TTL by the lock-delay: until it goes, the name is taken.
    if takeover then
      -- Take the expired key over with GETSET, as the classic pattern does. Nothing can write
      -- the key between the GET above and this GETSET inside an atomic script, so the old value
      -- is the expired one we read and the pattern's comparison of the two could never fail.
      redis.call('GETSET', lease, expiry)
      redis.call('PEXPIRE', lease, ttl_ms + delay_ms)
    else
      redis.call('SET', lease, expiry, 'PX', ttl_ms + delay_ms)
    end
    redis.call('HSET', owner_key, 'i', lease_id, 'h', holder, 't', token_text,
      'l', ARGV[3], 'e', expiry)
    if own_id then
      redis.call('HSET', owner_key, 'o', '1')
    elseif last[3] then
      redis.call('HDEL', owner_key, 'o') -- an earlier grant's, which expired
    end
    if own_id and principal ~= '' then
      redis.call('HSET', owner_key, 'p', lease_id .. ' ' .. principal)
    elseif last[4] then
      redis.call('HDEL', owner_key, 'p') -- an earlier grant's, which expired
    end
    if last[5] then
      redis.call('HDEL', owner_key, 'a') -- an earlier grant's, which expired
    end
    if delay_ms > 0 then
      redis.call('HSET', owner_key, 'd', ARGV[9])
    elseif last[2] then
      redis.call('HDEL', owner_key, 'd') -- an earlier grant's, which expired
    end
    -- The counter outlives the grant (lock-delay included) by the keep.
    redis.call('PEXPIRE', owner_key, ttl_ms + delay_ms + keep_ms)
  else
    if takeover then
      -- The expired key of a crashed classic lock: gone, or the next exclusive caller would take
      -- it over beside the shared grant.
      redis.call('DEL', lease)
    end
    redis.call('HSET', holders, lease_id, permit_record(token, expires_at_ms, ttl_ms, delay_ms, holder),
      'limit', ARGV[8], 't', token_text)
    if own_id then
      -- An earlier permit of this id, in its lock-delay, may have left its principal and mark.
      local _, principal_field, mark_field = permit_fields_of(lease_id)
      redis.call('HDEL', holders, mark_field)
      if principal ~= '' then
        redis.call('HSET', holders, principal_field, principal)
      else
        redis.call('HDEL', holders, principal_field)
      end
    end
    redis.call('ZADD', permits, expires_at_ms + delay_ms, lease_id)
    keep_permits(permits, holders, now_ms)
  end
  if rank then
    redis.call('ZREM', queue, entry)
    if own_id then
      redis.call('HDEL', places, lease_id)
    end
    if limit > 1 then
      queue_moved(queue, channel, {occupied[1] + 1, limit, 0, 0, 0, 0, 0, 0, 0})
    else
      queue_moved(queue, channel, {occupied[1] + 1, 1, 0, 0, 0, 0, 0, 0, shared and 1 or 0})
    end
  end
  if listened(channel) then
    if shared then
      redis.call('SPUBLISH', channel, shared_granted_message(token, ttl_ms, expires_at_ms, holder))
    else
      redis.call('SPUBLISH', channel, granted_message(token, limit, ttl_ms, expires_at_ms, holder))
    end
  end
  return {1, token, ttl_ms, expires_at_ms, 0}
end
if due > 0 then
  -- Callers ahead take the free permits. Wake them again in case they missed the release.
  wake_first(queue, channel, due)
end

-- Not granted: the occupancy, then how many of the first in line a grant goes to now.
table.insert(occupied, math.max(due, 0))
if entry == '' then
  return {0, 0, unpack(occupied)}
end

-- Join the queue at its tail, or keep the place already held: this entry's, or for a caller
-- that chose its lease id, the place of its earlier wait (until that wait would have ended).
-- (`rank` was read above whenever a queue or holders existed: without them, there is no queue.)
if not rank then
  local size = redis.call('ZCARD', queue)
  local place = own_id and redis.call('HGET', places, lease_id)
  local score, until_ms, earlier, replaced
  if place then
    score, until_ms, earlier, replaced = string.match(place, '^(%d+) (%d+) (%S+) ?(%S*)$')
    score, until_ms = tonumber(score), tonumber(until_ms)
    if not until_ms or until_ms <= now_ms then
      score, earlier = nil, nil
    elseif replaced == entry then
      -- A retry took this call's place: this call is over (its caller went on with the retry),
      -- and must not take the place back (the two would take it from each other for ever).
      return {6}
    elseif earlier ~= entry and redis.call('ZREM', queue, earlier) == 1 then
      size = size - 1 -- the earlier call's entry, which this one replaces
    else
      earlier = nil
    end
  end
  if size >= tonumber(ARGV[7]) then
    return {2, tonumber(ARGV[7])}
  end
  if not score then
    local tail = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    score, until_ms = (tonumber(tail[2]) or 0) + 1, now_ms + tonumber(ARGV[6])
  end
  redis.call('ZADD', queue, score, entry)
  rank = redis.call('ZRANK', queue, entry)
  if earlier or rank < size then
    -- Back at its earlier place: those behind moved, and the call it took it from learns so.
    redis.call('SPUBLISH', channel, 'm')
  end
  if own_id then
    remember_place(places, queue, lease_id, score, until_ms, entry, earlier, now_ms, tonumber(ARGV[7]))
  end
end
keep_queue(queue, tonumber(ARGV[6]))
if own_id then
  redis.call('PEXPIRE', places, redis.call('PTTL', queue))
end
return {0, rank + 1, unpack(occupied)}
