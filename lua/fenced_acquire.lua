-- Acquire or re-enter a fenced lock and take its next fencing token (protocol §7).
-- KEYS[1]: the lock name N; KEYS[2]: the token key TK = redisson_lock_token:T(N).
-- ARGV[1]: the lease in ms; ARGV[2]: the holder "<client uuid>:<owner id>".
-- Returns {-1, token} when acquired or re-entered (every acquisition, re-entry included, takes
-- a new token), otherwise {PTTL N, -1}. The same hash as the reentrant lock (lua/acquire.lua),
-- so releases, renewals and waiting are the reentrant lock's.
-- INCR runs first, under pcall: a token key that is not an integer fails the call before
-- anything was written, with a WRONGTYPE error that names the token key (the caller reports it
-- as that key's Error::WrongType); any other failure of INCR (NOPERM) is returned as it is.
local name, token_key, lease, field = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if redis.call('exists', name) == 0 or redis.call('hexists', name, field) == 1 then
  local ok, token = pcall(redis.call, 'incr', token_key)
  if not ok then
    local message = type(token) == 'table' and token.err or tostring(token)
    -- Only a token key of another type or value is this key's WRONGTYPE; any other error (an
    -- ACL refusal, NOPERM) is returned as it is.
    if not (string.find(message, 'WRONGTYPE', 1, true) or string.find(message, 'not an integer', 1, true)) then
      return redis.error_reply(message)
    end
    return redis.error_reply('WRONGTYPE ferrisson: the fencing token key does not hold an integer')
  end
  redis.call('hincrby', name, field, '1')
  redis.call('pexpire', name, lease)
  return {-1, token}
end
return {redis.call('pttl', name), -1}
