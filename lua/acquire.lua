-- Acquire or re-enter a reentrant lock (protocol §2.2).
-- KEYS[1] lock name N
-- ARGV[1] lease in ms, ARGV[2] holder field "<client uuid>:<owner id>"
-- Returns nil when acquired or re-entered (the TTL is reset to the lease, not extended),
-- otherwise the lock's PTTL in ms so that the caller bounds its wait by it.
-- Numbers passed to redis.call are written as strings: Redis would format a Lua number with
-- printf on every call.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], '1')
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
