-- Read one ferrisson client's wait-for edges (deadlock detection), without changing them.
-- KEYS[1] ferrisson_waits:{<client uuid>}.
-- Returns { PTTL of the hash, HGETALL of it } ({ PTTL, {} } for a missing key or one of
-- another type).
local pttl = redis.call('pttl', KEYS[1])
if redis.call('type', KEYS[1]).ok ~= 'hash' then
  return { pttl, {} }
end
return { pttl, redis.call('hgetall', KEYS[1]) }
