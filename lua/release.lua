-- Release one hold of a reentrant lock (protocol §2.3).
-- KEYS[1] lock name N, KEYS[2] unlock channel redisson_lock__channel:T(N)
-- ARGV[1] lease in ms to re-arm on a partial release, ARGV[2] holder field,
-- ARGV[3] publish mode: PUBLISH, SPUBLISH or BOTH (§1.7, §14.3)
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
local mode = ARGV[3]
if mode ~= 'SPUBLISH' then
  redis.call('publish', KEYS[2], 0)
end
if mode == 'SPUBLISH' then
  redis.call('spublish', KEYS[2], 0)
elseif mode == 'BOTH' then
  -- servers without sharded pub/sub must not abort the release (§14.3 item 9)
  redis.pcall('spublish', KEYS[2], 0)
end
return 1
