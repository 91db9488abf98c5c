-- Release a token lock (lua/token_lock.lua): compare-and-delete, as every peer's release. Only a
-- key that still holds this token is deleted; a peer's key, a key of another layout (pcall: its
-- GET is a WRONGTYPE error) or a key gone already is left as it is. Nothing is published: the
-- peers listen to nothing, and ferrisson's own waiters hear the DEL as a keyspace event or poll.
-- KEYS[1]: the lock name; ARGV[1]: the lease in ms (unused: the arguments every release script of
-- src/transport/script.rs gets); ARGV[2]: the token.
-- Returns nil when the key does not hold the token, 1 when it was deleted: the replies the kit
-- reads from every release script (ReleaseScript).
local name, token = KEYS[1], ARGV[2]
if redis.pcall('get', name) ~= token then
  return nil
end
redis.call('del', name)
return 1
