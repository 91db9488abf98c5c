-- Whether a read-write lock's read side counts as locked (protocol §5.6, Redisson >= 3.24's
-- RedissonReadLock.isLocked; <= 3.23 tested only mode = read): 1 in read mode, or in write mode
-- while the writer also holds read holds (more fields than `mode` and the write field), else 0.
-- KEYS[1] the lock name N. Read only.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then
  return 1
end
return 0
