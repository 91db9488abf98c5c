-- Release one hold of a reentrant lock and, if that was the last hold, hand the lock straight to
-- a waiter of the same client (local hand-off). The lock never becomes free on the way, so no
-- unlock message is published: to every other client the lock simply stays held (by a new field,
-- with a fresh lease), a state Redisson itself produces when a holder releases and another
-- acquires.
-- KEYS[1] lock name N, KEYS[2] unlock channel (unused: kept so that the script's keys match
-- release.lua and route to the same slot)
-- ARGV[1] lease in ms to re-arm on a partial release, ARGV[2] releasing holder field,
-- ARGV[3] publish mode (unused), ARGV[4] receiving holder field, ARGV[5] its lease in ms
-- Returns nil when ARGV[2] does not hold the lock (nothing changes), 0 after a partial release
-- (still held by ARGV[2]; no hand-off), 1 when released but another field still holds (no
-- hand-off), 2 when the lock now belongs to ARGV[4].
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[2])
if redis.call('hlen', KEYS[1]) > 0 then
  -- Another field holds too (never written by Redisson or ferrisson): leave it be, no hand-off.
  return 1
end
redis.call('hset', KEYS[1], ARGV[4], 1)
redis.call('pexpire', KEYS[1], ARGV[5])
return 2
