-- Release one hold of a reentrant lock (protocol §2.3), optionally handing the lock straight to
-- a waiter of the same client when it was the last hold (local hand-off, see
-- src/lock/handoff.rs).
-- KEYS[1] lock name N, KEYS[2] unlock channel redisson_lock__channel:T(N)
-- ARGV[1] lease in ms to re-arm on a partial release, ARGV[2] holder field,
-- ARGV[3] publish mode: PUBLISH, SPUBLISH or BOTH (lib/publish.lua),
-- ARGV[4] (optional) the receiving holder field, ARGV[5] its lease in ms
-- Returns nil when the field does not hold the lock (nothing changes, nothing is published),
-- 0 after a partial (reentrant) release, -1 after a hand-off (the hash now holds only ARGV[4]
-- with a fresh lease, the lock was never free, and nothing is published), and after the full
-- release, which deletes the hash and publishes the unlock message 0, 1 + the number of
-- subscribers that received the message (so the releasing client can tell whether waiters of
-- other clients were told, see src/lock/give_way.rs).
-- The steps are §2.3's HEXISTS, HINCRBY -1 and DEL, with the first two read as one HGET: the
-- outcome is the same, and the common full release runs one command less.
local count = redis.call('hget', KEYS[1], ARGV[2])
if not count then
  return nil
end
local holds = tonumber(count)
if holds == nil or holds > 1 or holds ~= math.floor(holds) then
  -- HINCRBY raises its usual error for a count that is not an integer.
  redis.call('hincrby', KEYS[1], ARGV[2], '-1')
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
if ARGV[4] then
  redis.call('hdel', KEYS[1], ARGV[2])
  if redis.call('hlen', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], ARGV[4], '1')
    redis.call('pexpire', KEYS[1], ARGV[5])
    return -1
  end
  -- Another field holds too (never written by Redisson or ferrisson): fall through to the
  -- plain full release, which deletes the hash as Redisson's does.
end
redis.call('del', KEYS[1])
return 1 + publish(KEYS[2], '0', ARGV[3])
