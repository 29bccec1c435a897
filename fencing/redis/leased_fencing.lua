#!lua name=leased_fencing
-- leased fencing for Redis as the resource (Redis 7 Functions). Load it once per Redis (each
-- primary of a Cluster), and again after an upgrade of leased:
--   redis-cli -x FUNCTION LOAD REPLACE < leased_fencing.lua
-- Functions are persisted with the data (RDB and AOF) and replicated.
--
-- Each write names a mark key first: a string holding the largest fencing token accepted for the
-- resource it guards (one mark per resource, e.g. `fence:{orders}` for the keys `{orders}:*`). A
-- token smaller than the mark is refused and nothing is written; otherwise the token becomes the
-- mark (a token equal to it passes: one holder writes many times) and the write is done, in the
-- same atomic call. In a Cluster the mark and the keys must share a hash slot: give them one hash
-- tag, as above.
--
--   FCALL leased_fence 1 <mark> <token>                         -> the mark (check and record only)
--   FCALL leased_set   2 <mark> <key> <token> <value> [SET options, e.g. PX 5000] -> SET's reply
--   FCALL leased_hset  2 <mark> <key> <token> <field> <value> [<field> <value> ...] -> HSET's reply
--   FCALL leased_del   N <mark> <key> [<key> ...] <token>        -> DEL's reply
--
-- Errors (the first word is the code):
--   STALETOKEN stale fencing token <t> for <mark>: the highest seen is <mark's token>
--   BADTOKEN   token must be a fencing token from 1 to 9223372036854775807, not '<arg>'
--   ERR        a wrong number of keys or arguments (the message says which)
--
-- Tokens are compared as decimal strings, exactly, for every 64-bit token (Lua numbers are
-- doubles, exact only below 2^53); leased's are floored at Unix microseconds, about 1.8e15 in 2026.
-- The marks are as durable as this Redis's data: with no persistence, a restart forgets them.

local MAX_TOKEN = '9223372036854775807'

-- The token as a canonical decimal string, or nil: 1 to 9223372036854775807, no sign, no leading
-- zero, no spaces.
local function canonical_token(arg)
  if type(arg) ~= 'string' or not string.match(arg, '^[1-9][0-9]*$') then
    return nil
  end
  if #arg > #MAX_TOKEN or (#arg == #MAX_TOKEN and arg > MAX_TOKEN) then
    return nil
  end
  return arg
end

-- a < b for canonical tokens: a shorter one is smaller; of equal length, the string order is the
-- numeric order.
local function token_less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- Checks `token_arg` against the mark and records it; returns the token, or raises the error.
local function check_and_record(mark_key, token_arg)
  local token = canonical_token(token_arg)
  if not token then
    return nil, redis.error_reply(
      "BADTOKEN token must be a fencing token from 1 to 9223372036854775807, not '"
        .. tostring(token_arg) .. "'")
  end
  local mark = redis.call('GET', mark_key)
  if mark then
    local seen = canonical_token(mark)
    if not seen then
      return nil, redis.error_reply('ERR the mark ' .. mark_key .. ' holds ' .. mark
        .. ', which is not a fencing token: is it a mark key?')
    end
    if token_less(token, seen) then
      return nil, redis.error_reply('STALETOKEN stale fencing token ' .. token .. ' for '
        .. mark_key .. ': the highest seen is ' .. seen)
    end
    if seen == token then
      return token
    end
  end
  redis.call('SET', mark_key, token)
  return token
end

local function fence(keys, args)
  if #keys ~= 1 or #args ~= 1 then
    return redis.error_reply('ERR leased_fence takes 1 key (the mark) and 1 argument (the token)')
  end
  local token, err = check_and_record(keys[1], args[1])
  if err then
    return err
  end
  return token
end

local function fenced_set(keys, args)
  if #keys ~= 2 or #args < 2 then
    return redis.error_reply('ERR leased_set takes 2 keys (the mark, the key) and the token, the value'
      .. ' and SET options')
  end
  local _, err = check_and_record(keys[1], args[1])
  if err then
    return err
  end
  return redis.call('SET', keys[2], unpack(args, 2))
end

local function fenced_hset(keys, args)
  if #keys ~= 2 or #args < 3 or #args % 2 ~= 1 then
    return redis.error_reply('ERR leased_hset takes 2 keys (the mark, the key) and the token and'
      .. ' field value pairs')
  end
  local _, err = check_and_record(keys[1], args[1])
  if err then
    return err
  end
  return redis.call('HSET', keys[2], unpack(args, 2))
end

local function fenced_del(keys, args)
  if #keys < 2 or #args ~= 1 then
    return redis.error_reply('ERR leased_del takes the mark and 1 or more keys, and the token')
  end
  local _, err = check_and_record(keys[1], args[1])
  if err then
    return err
  end
  return redis.call('DEL', unpack(keys, 2))
end

redis.register_function('leased_fence', fence)
redis.register_function('leased_set', fenced_set)
redis.register_function('leased_hset', fenced_hset)
redis.register_function('leased_del', fenced_del)
