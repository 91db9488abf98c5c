-- Acquire a non-reentrant lock (protocol §8, Redisson 4.5+): the reentrant lock's hash, taken only
-- when it does not exist; a second acquire by the holding field is refused.
-- KEYS[1]: the lock name N; ARGV[1]: the lease in ms; ARGV[2]: the holder
-- "<client uuid>:<owner id>".
-- Returns nil when acquired (the field's count is 1, the TTL the lease), the error reply
-- NON_REENTRANT_REACQUIRE when this field holds the lock already (nothing changes), otherwise the
-- lock's PTTL in ms. Release, renewal and waiting are the reentrant lock's (lua/release.lua).
local name, lease, field = KEYS[1], ARGV[1], ARGV[2]
if redis.call('exists', name) == 0 then
  redis.call('hincrby', name, field, '1')
  redis.call('pexpire', name, lease)
  return nil
end
if redis.call('hexists', name, field) == 1 then
  return redis.error_reply('NON_REENTRANT_REACQUIRE')
end
return redis.call('pttl', name)
