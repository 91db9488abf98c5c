-- Release a token lock (lua/token_lock.lua): compare-and-delete, as every peer's release, or a
-- local hand-off. Only a key that still holds this token is touched; a peer's key, a key of
-- another layout (pcall: its GET is a WRONGTYPE error) or a key gone already is left as it is.
-- Needs lib/publish.lua before it.
-- Call: token_release(KEYS[1] the lock name, KEYS[2] its channel redisson_lock__channel:T(N),
-- ARGV[1] the lease in ms (unused: the arguments every release script of
-- src/transport/script.rs gets), ARGV[2] the token, ARGV[3] the publish mode, and for a
-- hand-off ARGV[4] the heir's token, ARGV[5] its lease in ms, ARGV[6] own: as lua/release.lua's,
-- or '' for none).
-- Returns nil when the key does not hold the token; -1 after a hand-off (the key now holds the
-- heir's token with the heir's lease, as the heir's own SET NX PX would write it: it was never
-- free, and nothing is published); otherwise the key is deleted and 0 published on the channel
-- for ferrisson's waiters that poll (the peers listen to nothing; keyspace listeners hear the
-- DEL), and the reply is 1 + the receivers (as lua/release.lua's, for src/kit/give_way.rs).
local function token_release(name, channel, token, publish_mode, heir, heir_lease, own)
  if redis.pcall('get', name) ~= token then
    return nil
  end
  if own == '' then
    own = nil
  end
  if heir and not (own and others_listen(channel, own)) then
    redis.call('set', name, heir, 'PX', heir_lease)
    return -1
  end
  redis.call('del', name)
  return 1 + publish(channel, '0', publish_mode)
end
