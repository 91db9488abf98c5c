-- Release one hold of a reentrant lock (protocol §2.3).
-- KEYS[1] lock name N, KEYS[2] unlock channel redisson_lock__channel:T(N)
-- ARGV[1] lease in ms to re-arm on a partial release, ARGV[2] holder field,
-- ARGV[3] publish mode: PUBLISH, SPUBLISH or BOTH (lib/publish.lua)
-- Returns nil when the field does not hold the lock (nothing changes, nothing is published),
-- 0 after a partial (reentrant) release, 1 after the full release, which deletes the hash
-- and publishes the unlock message 0.
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
publish(KEYS[2], 0, ARGV[3])
return 1
