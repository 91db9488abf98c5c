-- Force-release a token lock whoever holds it (`unlock --force`, TokenLock::force_unlock): DEL,
-- as the peers' own force releases, publishing nothing (the token lock has no channel).
-- KEYS[1]: the lock name.
-- Returns 1 when a token lock was deleted, 0 when none existed. A key of another type is
-- refused with WRONGTYPE instead of being deleted, as lua/force_release.lua refuses one.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'string' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('del', KEYS[1])
return 1
