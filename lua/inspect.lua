-- Read a lock's state in one atomic step, for status displays (no side effects).
-- KEYS[1] lock name N, KEYS[2] fair-lock queue redisson_lock_queue:T(N)
-- Returns { type of N, PTTL of N, HGETALL of N (empty unless a hash), length of the fair queue }.
local kind = redis.call('type', KEYS[1]).ok
local fields = {}
if kind == 'hash' then
  fields = redis.call('hgetall', KEYS[1])
end
local queued = 0
if redis.call('type', KEYS[2]).ok == 'list' then
  queued = redis.call('llen', KEYS[2])
end
return { kind, redis.call('pttl', KEYS[1]), fields, queued }
