-- Acquire a non-reentrant fair lock (Redisson 4.x's RNonReentrantFairLock): the fair lock's
-- keys, queue and acquire (lua/fair_lock.lua, §4.3-§4.4), except that the field holding the lock
-- already is refused rather than re-entering. Built after lua/fair_lock.lua's functions.
-- KEYS[1] N, KEYS[2] Q, KEYS[3] Z; ARGV[1] the lease in ms, ARGV[2] the holder field F,
-- ARGV[3] W the waiter's wait time in ms, ARGV[4] NOW, ARGV[5] '1' to try once.
-- Returns the error reply NON_REENTRANT_REACQUIRE when F holds the lock (nothing changes), else
-- what the fair lock's acquire returns: nil when acquired (F's count is 1), otherwise the wait.
local function acquire_once(name, queue, timeouts, lease, field, wait, now, try_once)
  if redis.call('hexists', name, field) == 1 then
    return redis.error_reply('NON_REENTRANT_REACQUIRE')
  end
  return acquire(name, queue, timeouts, lease, field, wait, now, try_once)
end
return acquire_once(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
