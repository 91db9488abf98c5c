-- Force-release a reentrant lock whoever holds it (protocol §2.4).
-- KEYS[1] lock name N, KEYS[2] unlock channel; ARGV[1] publish mode (lib/publish.lua).
-- Without KEYS[2] nothing is published: the spin lock's force release (§6), which has no channel.
-- Returns 1 when a lock was deleted (and the unlock message published), 0 when none existed.
-- Unlike Redisson, a key of another type is refused with WRONGTYPE instead of being deleted.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('del', KEYS[1])
if KEYS[2] then
  publish(KEYS[2], '0', ARGV[1])
end
return 1
