-- Force-release a token lock (`unlock --force`, TokenLock::force_unlock, TokenLock::release_token):
-- DEL, as the peers' own force releases, publishing nothing (the token lock has no channel).
-- KEYS[1]: the lock name. ARGV[1] (optional): the token the key must hold, in lowercase hex (a
-- token may be raw bytes, rslock's): the key is deleted only while it holds that token, so that
-- a key that changed since its caller read it (taken by another holder, or overwritten by a
-- value that is no lock) is left alone.
-- Returns 1 when a token lock was deleted, 0 when none existed or it held another token. A key
-- of another type is refused with WRONGTYPE instead of being deleted, as lua/force_release.lua
-- refuses one.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'string' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if ARGV[1] then
  local value = redis.call('get', KEYS[1])
  local hex = string.gsub(value, '.', function(c) return string.format('%02x', string.byte(c)) end)
  if hex ~= ARGV[1] then
    return 0
  end
end
redis.call('del', KEYS[1])
return 1
