-- Release one read hold of a read-write lock (protocol §5.3, Redisson >= 3.44 without the unlock
-- latch, which ferrisson does not write).
-- KEYS[1] the lock name N; KEYS[2] its channel redisson_rwlock:T(N); KEYS[3] the holder's
-- timeout prefix TP(F); KEYS[4] KP = T(N), the prefix of every reader's timeout keys.
-- ARGV[1] the publish mode (lib/publish.lua, prepended); ARGV[2] the read field F.
-- Returns nil when F holds no read hold (on a missing lock the message 0 is published anyway,
-- as Redisson >= 3.44 does; <= 3.43 answered 1 there), 0 when the lock stays held (F's other
-- holds, other readers, or the owner's write hold), 1 when the hash was deleted and 0 published.
-- Other holders are judged by their timeout keys, not by the hash's fields, exactly as every
-- Redisson reader's release judges ours (see lua/read_acquire.lua, lib/read_hold_gone.lua).
local name, channel, prefix, kp = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local field = ARGV[2]
local mode = redis.call('hget', name, 'mode')
if mode == false then
  publish(channel, '0', ARGV[1])
  return nil
end
if redis.call('hexists', name, field) == 0 then
  return nil
end
local left = redis.call('hincrby', name, field, '-1')
if left == 0 then
  redis.call('hdel', name, field)
end
redis.call('del', prefix .. ':' .. (left + 1))
if read_hold_gone(name, channel, kp, mode, ARGV[1]) then
  return 0
end
return 1
