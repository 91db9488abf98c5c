-- Take a token lock: the classic single-key lock of redis-py's `Lock`, Go's redsync, node's
-- `redlock` and rslock (docs/compatibility.md). The key is the lock's name, a string whose value
-- is the holder's token; only `SET NX` ever takes it, so a key of any other layout, or a peer's
-- key with or without a TTL, is simply busy.
-- KEYS[1]: the lock name; ARGV[1]: the lease in ms; ARGV[2]: the token (ferrisson's holder
-- field "<client uuid>:<owner id>", or a RedLock's shared token).
-- Returns nil when taken; the error reply TOKEN_REACQUIRE when the key holds this very token (a
-- token lock is not reentrant: nothing changes); else the key's PTTL in ms (-1: no expiry).
local name, lease, token = KEYS[1], ARGV[1], ARGV[2]
if redis.call('set', name, token, 'NX', 'PX', lease) then
  return nil
end
-- pcall: GET of another layout's key is a WRONGTYPE error, which only means "someone else's".
if redis.pcall('get', name) == token then
  return redis.error_reply('TOKEN_REACQUIRE')
end
return redis.call('pttl', name)
