-- Batched watchdog renewal (protocol §3.2, LockTask; and ReadLockTask as of Redisson 4.4.0).
-- KEYS[1..k] lock names; ARGV[1] the watchdog timeout in ms, ARGV[i+1] the holder field for KEYS[i].
-- Returns an array: 1 where the field still holds the lock (its TTL is reset to the timeout),
-- 0 where it does not (the caller then reports that lease as lost). A key of another type counts
-- as not held instead of failing the whole batch.
-- A token lock (lua/token_lock.lua) is a string holding the holder's token: its HEXISTS fails
-- with WRONGTYPE, and it is renewed (compare-and-PEXPIRE) only while GET returns that token.
-- A read hold of a read-write lock (the hash has a `mode` field, and the field is not a writer's
-- `…:write`) also renews its own per-hold timeout keys TP(F):c for c = count..1, as Redisson
-- 4.4.0+ does (only this client's holds; before 4.4.0 Java renewed every reader's keys): a
-- reader's release deletes the hash once no reader's timeout key is alive (read_release in
-- lua/read_write_lock.lua).
-- Those keys are not in KEYS, but they carry the lock's hash tag T(N) (N itself when it has a
-- `{`, else `{N}`, as src/name.rs's `tagged`), so they live in N's slot, on the node this call
-- runs on: Redis Cluster keeps a script's keys to one slot, and these are in it.
local result = {}
for i = 1, #KEYS do
  local name, field = KEYS[i], ARGV[i + 1]
  local held = redis.pcall('hexists', name, field)
  if held == 1 then
    redis.call('pexpire', name, ARGV[1])
    result[i] = 1
    if string.sub(field, -6) ~= ':write' and redis.call('hexists', name, 'mode') == 1 then
      local tag = name
      if not string.find(name, '{', 1, true) then
        tag = '{' .. name .. '}'
      end
      local prefix = tag .. ':' .. field .. ':rwlock_timeout:'
      local holds = tonumber(redis.call('hget', name, field)) or 0
      for c = holds, 1, -1 do
        redis.call('pexpire', prefix .. c, ARGV[1])
      end
    end
  elseif type(held) == 'table' and redis.pcall('get', name) == field then
    redis.call('pexpire', name, ARGV[1])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
