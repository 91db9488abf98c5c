-- Acquire, re-enter or queue for a fair lock (protocol §4.3), or try once (§4.4).
-- KEYS[1]: the lock name N; KEYS[2]: the queue Q = redisson_lock_queue:T(N);
-- KEYS[3]: the timeout set Z = redisson_lock_timeout:T(N).
-- ARGV[1]: the lease in ms; ARGV[2]: the holder field F; ARGV[3]: W, the waiter's wait time in
-- ms; ARGV[4]: NOW, the client's clock in epoch ms; ARGV[5]: '1' to try once (never queue).
-- Returns nil when acquired or re-entered. Otherwise: trying once, 1; already queued, the
-- lock's max(0, PTTL) (Redisson 3.32.0 and later); newly queued, the time until the waiter
-- ahead's deadline, or the lock's PTTL when nobody with a deadline is ahead. The last waiter's
-- deadline is used only when it has a score (3.45.0 and later).
local name, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local lease, field, wait, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
prune(queue, timeouts, now)
if redis.call('exists', name) == 0
    and (redis.call('exists', queue) == 0 or redis.call('lindex', queue, 0) == field) then
  redis.call('lpop', queue)
  redis.call('zrem', timeouts, field)
  -- Everyone behind moves up one place: their deadlines were computed behind this one's.
  local waiting = redis.call('zrange', timeouts, 0, -1)
  for i = 1, #waiting do
    redis.call('zincrby', timeouts, -wait, waiting[i])
  end
  redis.call('hset', name, field, '1')
  redis.call('pexpire', name, lease)
  return nil
end
if redis.call('hexists', name, field) == 1 then
  redis.call('hincrby', name, field, '1')
  redis.call('pexpire', name, lease)
  return nil
end
if ARGV[5] == '1' then
  return 1
end
if redis.call('zscore', timeouts, field) then
  return math.max(0, redis.call('pttl', name))
end
local last = redis.call('lindex', queue, -1)
local last_deadline = last and last ~= field and redis.call('zscore', timeouts, last)
local ttl
if last_deadline then
  ttl = tonumber(last_deadline) - now
else
  ttl = redis.call('pttl', name)
end
if redis.call('zadd', timeouts, ttl + wait + now, field) == 1 then
  redis.call('rpush', queue, field)
end
return ttl
