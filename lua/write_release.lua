-- Release one write hold of a read-write lock (protocol §5.5, Redisson >= 3.44 without the
-- unlock latch, which ferrisson does not write).
-- KEYS[1] the lock name N; KEYS[2] its channel redisson_rwlock:T(N).
-- ARGV[1] the lease in ms, re-armed on a partial release; ARGV[2] the write field F:write;
-- ARGV[3] the publish mode (lib/publish.lua, prepended).
-- Returns nil when F:write does not hold the lock (on a missing lock the message 1 is published
-- anyway, as Redisson >= 3.44 does; <= 3.43 answered 1 there), 0 after a partial release (no
-- message), 1 after the last write hold: the hash is deleted and 1 published (which wakes every
-- waiter), or, when the owner still holds read holds (the downgrade), the mode becomes `read`
-- with no message and no new TTL.
local name, channel, lease, field, mode_arg = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local mode = redis.call('hget', name, 'mode')
if mode == false then
  publish(channel, '1', mode_arg)
  return nil
end
if mode ~= 'write' or redis.call('hexists', name, field) == 0 then
  return nil
end
if redis.call('hincrby', name, field, '-1') > 0 then
  redis.call('pexpire', name, lease)
  return 0
end
redis.call('hdel', name, field)
if redis.call('hlen', name) == 1 then
  redis.call('del', name)
  publish(channel, '1', mode_arg)
else
  redis.call('hset', name, 'mode', 'read')
end
return 1
