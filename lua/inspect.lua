-- Read the state of any primitive of the lock family in one atomic step, for status displays
-- (no side effects). Keys of an unexpected type are reported by type, never read as if valid.
-- KEYS[1] name N, KEYS[2] fair queue redisson_lock_queue:T(N), KEYS[3] fair deadlines
-- redisson_lock_timeout:T(N), KEYS[4] fenced token redisson_lock_token:T(N), KEYS[5] permits out
-- T(N):timeout, KEYS[6] T(N) (the read-hold timeout keys are T(N):F:rwlock_timeout:k, built
-- here as Redisson's read release builds them); ARGV[1] the most entries listed per list,
-- ARGV[2] the longest string value read (a longer one is no token or counter: only its length
-- is returned, so that a large cached value is never read whole).
-- Returns { type of N, PTTL of N, HGETALL of N (if a hash), LLEN of the queue (if a list),
--   { field, deadline or '' } per listed queue entry, the token or '', GET N (if a string) or '',
--   ZCARD of the permits (if a zset, else 0), { id, expiry } per listed permit,
--   { { field, PTTL per hold k = 1.. } } per read holder of a read-write lock, STRLEN of N (if a
--   string, else 0) }.
local limit = tonumber(ARGV[1])
local longest = tonumber(ARGV[2])
local kind = redis.call('type', KEYS[1]).ok

local fields = {}
local value = ''
local length = 0
if kind == 'hash' then
  fields = redis.call('hgetall', KEYS[1])
elseif kind == 'string' then
  -- A pcall: a user whose ACL predates STRLEN in the documented rule reads the value whole.
  length = redis.pcall('strlen', KEYS[1])
  if type(length) == 'table' then
    value = redis.call('get', KEYS[1])
    length = #value
    if length > longest then
      value = ''
    end
  elseif length <= longest then
    value = redis.call('get', KEYS[1])
  end
end

local queued = 0
local waiters = {}
if redis.call('type', KEYS[2]).ok == 'list' then
  queued = redis.call('llen', KEYS[2])
  local scored = redis.call('type', KEYS[3]).ok == 'zset'
  for _, field in ipairs(redis.call('lrange', KEYS[2], 0, limit - 1)) do
    local deadline = scored and redis.call('zscore', KEYS[3], field)
    table.insert(waiters, field)
    table.insert(waiters, deadline or '')
  end
end

local token = ''
if redis.call('type', KEYS[4]).ok == 'string' then
  token = redis.call('get', KEYS[4])
end

local permits_out = 0
local permits = {}
if redis.call('type', KEYS[5]).ok == 'zset' then
  permits_out = redis.call('zcard', KEYS[5])
  permits = redis.call('zrange', KEYS[5], 0, limit - 1, 'withscores')
end

-- Read holders' per-hold timeout keys, only in a read-write lock (a `mode` field).
local reads = {}
local is_read_write = false
for i = 1, #fields, 2 do
  if fields[i] == 'mode' then
    is_read_write = true
  end
end
if is_read_write then
  for i = 1, #fields, 2 do
    local field, count = fields[i], tonumber(fields[i + 1])
    if field ~= 'mode' and count ~= nil and string.sub(field, -6) ~= ':write' then
      local holds = { field }
      for k = 1, math.min(count, limit) do
        table.insert(holds, redis.call('pttl', KEYS[6] .. ':' .. field .. ':rwlock_timeout:' .. k))
      end
      table.insert(reads, holds)
    end
  end
end

return { kind, redis.call('pttl', KEYS[1]), fields, queued, waiters, token, value,
  permits_out, permits, reads, length }
