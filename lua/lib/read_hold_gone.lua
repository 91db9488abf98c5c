-- Shared tail of the scripts that take read holds of a read-write lock away (read_release in
-- lua/read_write_lock.lua, and lua/reconcile.lua), prepended with concat! after lib/publish.lua.
-- After a read hold went (its field and timeout key updated), the hash lives as long as the
-- longest read hold left, judged by every reader's timeout keys (T(N) + ':' + field +
-- ':rwlock_timeout:' + k, KP = T(N)) as every Redisson reader's release judges ours (protocol
-- §5.3); a writer keeps it as it is. Otherwise the hash is deleted (one holding only `mode` would
-- block everyone until its TTL) and `0` published on the lock's channel.
-- Returns true when the lock stays held, false when it was deleted.
local function read_hold_gone(name, channel, kp, mode, publish_mode)
  if redis.call('hlen', name) > 1 then
    local longest = -3
    for _, holder in ipairs(redis.call('hkeys', name)) do
      local holds = tonumber(redis.call('hget', name, holder))
      if type(holds) == 'number' then
        for i = holds, 1, -1 do
          local ttl = redis.call('pttl', kp .. ':' .. holder .. ':rwlock_timeout:' .. i)
          longest = math.max(longest, ttl)
        end
      end
    end
    if longest > 0 then
      redis.call('pexpire', name, tostring(longest))
      return true
    end
    if mode == 'write' then
      return true
    end
  end
  redis.call('del', name)
  publish(channel, '0', publish_mode)
  return false
end
