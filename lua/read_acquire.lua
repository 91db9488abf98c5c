-- Acquire or re-enter a read hold of a read-write lock (protocol §5.2, the same steps as Redisson's
-- RedissonReadLock in every version).
-- KEYS[1] the lock name N; KEYS[2] the holder's timeout prefix TP(F) = T(N):F:rwlock_timeout.
-- ARGV[1] the lease in ms; ARGV[2] the read field F = "<client uuid>:<owner id>"; ARGV[3] the
-- same owner's write field F:write.
-- Every read hold k gets its own key TP(F):k (value 1, TTL = that hold's lease), and the hash's
-- TTL is kept at least as long as the longest hold: a reader's release (ours or Java's,
-- lua/read_release.lua) recomputes the hash's TTL from these keys and deletes the hash when
-- none is alive, so a read hold without its key would be dropped by another reader's release.
-- Refused while another owner writes (a writer may take read holds: the downgrade).
-- Returns nil when acquired, otherwise the hash's PTTL in ms.
local name, prefix, lease, field, write_field = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local mode = redis.call('hget', name, 'mode')
if mode == false then
  redis.call('hset', name, 'mode', 'read')
  redis.call('hset', name, field, '1')
  redis.call('set', prefix .. ':1', '1')
  redis.call('pexpire', prefix .. ':1', lease)
  redis.call('pexpire', name, lease)
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', name, write_field) == 1) then
  local k = redis.call('hincrby', name, field, '1')
  local key = prefix .. ':' .. k
  redis.call('set', key, '1')
  redis.call('pexpire', key, lease)
  local remaining = redis.call('pttl', name)
  redis.call('pexpire', name, tostring(math.max(remaining, tonumber(lease))))
  return nil
end
return redis.call('pttl', name)
