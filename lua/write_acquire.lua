-- Acquire or re-enter the write hold of a read-write lock (protocol §5.4, the same steps as
-- Redisson's RedissonWriteLock in every version).
-- KEYS[1] the lock name N. ARGV[1] the lease in ms; ARGV[2] the write field F:write; ARGV[3] the
-- same owner's read field F (read only for the reply below).
-- A re-entry ADDS the lease to the remaining TTL (Redisson's rule, unlike the reentrant lock).
-- Returns nil when acquired, otherwise the hash's PTTL in ms; or, when the lock is refused
-- while the caller itself holds read holds (an upgrade, which Redisson refuses too, so that
-- waiting would wait for itself), the array {PTTL, 'upgrade'}. The side effects are Redisson's;
-- only that reply, read by ferrisson alone, tells the case apart.
local name, lease, field, read_field = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local mode = redis.call('hget', name, 'mode')
if mode == false then
  redis.call('hset', name, 'mode', 'write')
  redis.call('hset', name, field, '1')
  redis.call('pexpire', name, lease)
  return nil
end
if mode == 'write' and redis.call('hexists', name, field) == 1 then
  redis.call('hincrby', name, field, '1')
  local remaining = redis.call('pttl', name)
  redis.call('pexpire', name, tostring(remaining + tonumber(lease)))
  return nil
end
if mode == 'read' and redis.call('hexists', name, read_field) == 1 then
  return {redis.call('pttl', name), 'upgrade'}
end
return redis.call('pttl', name)
