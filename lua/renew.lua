-- Batched watchdog renewal (protocol §3.2, LockTask).
-- KEYS[1..k] lock names; ARGV[1] the watchdog timeout in ms, ARGV[i+1] the holder field for KEYS[i].
-- Returns an array: 1 where the field still holds the lock (its TTL is reset to the timeout),
-- 0 where it does not (the caller then reports that lease as lost). A key of another type counts
-- as not held instead of failing the whole batch.
local result = {}
for i = 1, #KEYS do
  local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
  if held == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
