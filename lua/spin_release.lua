-- Release one hold of a spin lock (protocol §6): the reentrant lock's release (§2.3) without any
-- publish, since a spin lock has no channel (its waiters poll with back-off).
-- KEYS[1]: the lock name N; ARGV[1]: the lease in ms, re-armed on a partial release;
-- ARGV[2]: the holder "<client uuid>:<owner id>".
-- Returns nil when the field does not hold the lock (nothing changes), 0 after a partial
-- (reentrant) release, 1 after the last hold's release, which deletes the hash: the replies the
-- kit reads from every release script (src/transport/script.rs, ReleaseScript).
local name, lease, field = KEYS[1], ARGV[1], ARGV[2]
if redis.call('hexists', name, field) == 0 then
  return nil
end
if redis.call('hincrby', name, field, '-1') > 0 then
  redis.call('pexpire', name, lease)
  return 0
end
redis.call('del', name)
return 1
