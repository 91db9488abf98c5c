-- Force-release a fair lock whoever holds it (protocol §4.7); needs lib/publish.lua and
-- lib/fair_prune.lua before it.
-- KEYS[1]: N; KEYS[2]: Q; KEYS[3]: Z; KEYS[4]: the channel base redisson_lock__channel:T(N).
-- ARGV[1]: NOW (epoch ms); ARGV[2]: the publish mode.
-- Returns 1 when a lock was deleted (and the queue's head told), 0 when none existed.
-- Unlike Redisson, a lock key of another type is refused with WRONGTYPE instead of deleted.
local name, queue, timeouts, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local kind = redis.call('type', name).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
prune(queue, timeouts, ARGV[1])
if redis.call('del', name) == 1 then
  tell_head(queue, channel, ARGV[2])
  return 1
end
return 0
