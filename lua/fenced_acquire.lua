-- Acquire or re-enter a fenced lock and take its next fencing token (protocol §7).
-- KEYS[1]: the lock name N; KEYS[2]: the token key TK = redisson_lock_token:T(N).
-- ARGV[1]: the lease in ms; ARGV[2]: the holder "<client uuid>:<owner id>".
-- Returns {-1, token} when acquired or re-entered (every acquisition, re-entry included, takes
-- a new token), otherwise {PTTL N, -1}. The same hash as the reentrant lock (lua/acquire.lua),
-- so releases, renewals and waiting are the reentrant lock's.
-- INCR runs first, under pcall: a token key that is not an integer fails the call before
-- anything was written, with a WRONGTYPE error that names the token key (the caller reports it
-- as that key's Error::WrongType).
local name, token_key, lease, field = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if redis.call('exists', name) == 0 or redis.call('hexists', name, field) == 1 then
  local ok, token = pcall(redis.call, 'incr', token_key)
  if not ok then
    return redis.error_reply('WRONGTYPE ferrisson: the fencing token key does not hold an integer')
  end
  redis.call('hincrby', name, field, '1')
  redis.call('pexpire', name, lease)
  return {-1, token}
end
return {redis.call('pttl', name), -1}
