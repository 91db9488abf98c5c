-- Shared prelude, prepended to every script that announces a release (see src/transport/script.rs):
-- `publish`, and `others_listen` for the releases that may hand the lock to a local waiter.
-- Publishes `message` on `channel` the way the configured mode asks (protocol §1.7, §14.3):
-- PUBLISH, SPUBLISH, or BOTH (the sharded copy tolerated to fail on servers without it).
-- Returns how many subscribers received it: SPUBLISH's count in SPUBLISH mode, otherwise
-- PUBLISH's (in a cluster, either counts only the subscribers of the node that ran the script).
local function publish(channel, message, mode)
  if mode == 'SPUBLISH' then
    return redis.call('spublish', channel, message)
  end
  local receivers = redis.call('publish', channel, message)
  if mode == 'BOTH' then
    redis.pcall('spublish', channel, message)
  end
  return receivers
end

-- PUBSUB is a non-deterministic command: a script may write after it only under effects
-- replication (the default from Redis 5 on; from Redis 7 on this call is a no-op returning
-- true). Before Redis 7 the call answers false once the script has written, even when effects
-- replication is already on, so it is made here, in the prelude, before any write: else every
-- conditional hand-off after the first call of a batch would count as heard (Redis 6.2).
local effects_replicated = not redis.replicate_commands or redis.replicate_commands()

-- Whether anyone besides the releasing client's `own` subscriptions may hear `channel`.
local function others_listen(channel, own)
  -- Without effects replication (a server configured with lua-replicate-commands no), assume
  -- listeners, the safe answer, and release plainly.
  if not effects_replicated then
    return true
  end
  local listeners = redis.call('pubsub', 'numsub', channel)[2] + redis.call('pubsub', 'numpat')
  return listeners > tonumber(own)
end
