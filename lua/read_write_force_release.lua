-- Force-release one side of a read-write lock whoever holds it (protocol §5.6).
-- KEYS[1] the lock name N; KEYS[2] its channel redisson_rwlock:T(N).
-- ARGV[1] the side: `read` or `write`; ARGV[2] the publish mode (lib/publish.lua, prepended).
-- Deletes the hash only while it is in that side's mode, and then publishes the side's message
-- (0 for read: one waiter per client retries; 1 for write: all do). Returns 1 when deleted, 0
-- otherwise. The readers' timeout keys are left to expire, as Redisson leaves them.
local name, channel, side = KEYS[1], KEYS[2], ARGV[1]
if redis.call('hget', name, 'mode') ~= side then
  return 0
end
redis.call('del', name)
if side == 'read' then
  publish(channel, '0', ARGV[2])
else
  publish(channel, '1', ARGV[2])
end
return 1
