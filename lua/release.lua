-- Whether anyone besides the releasing client's `own` subscriptions may hear `channel`.
local function others_listen(channel, own)
  -- PUBSUB is a non-deterministic command: a script may write after it only under effects
  -- replication (the default from Redis 5 on; from Redis 7 on this call is a no-op returning
  -- true). Before Redis 7 the call returns false once the script has written (in a batch after
  -- other calls): then assume listeners, the safe answer, and release plainly.
  if redis.replicate_commands and not redis.replicate_commands() then
    return true
  end
  local listeners = redis.call('pubsub', 'numsub', channel)[2] + redis.call('pubsub', 'numpat')
  return listeners > tonumber(own)
end

-- Release one hold of a reentrant lock (protocol §2.3), optionally handing the lock straight to
-- a waiter of the same client when it was the last hold (local hand-off, see
-- src/kit/handoff.rs).
-- As a script of its own: release(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
-- ARGV[5], ARGV[6]) (src/transport/script.rs adds that line; needs lib/publish.lua before it).
-- name: the lock name N; channel: its unlock channel redisson_lock__channel:T(N);
-- lease: in ms, re-armed on a partial release; field: the holder; mode: PUBLISH, SPUBLISH or
-- BOTH (lib/publish.lua); heir (optional): the receiving holder field, heir_lease its lease in ms;
-- own (optional, PUBLISH mode): hand over only if the channel has at most this many
-- subscribers (the releasing client's own), counting every pattern subscriber as another
-- listener; otherwise release plainly, so that other clients' waiters get their turn.
-- Returns nil when the field does not hold the lock (nothing changes, nothing is published),
-- 0 after a partial (reentrant) release, -1 after a hand-off (the hash now holds only the heir
-- with a fresh lease, the lock was never free, and nothing is published), and after the full
-- release, which deletes the hash and publishes the unlock message 0, 1 + the number of
-- subscribers that received the message (so the releasing client can tell whether waiters of
-- other clients were told, see src/kit/give_way.rs).
-- The steps are §2.3's HEXISTS, HINCRBY -1 and DEL, with the first two read as one HGET: the
-- outcome is the same, and the common full release runs one command less.
local function release(name, channel, lease, field, mode, heir, heir_lease, own)
  local count = redis.call('hget', name, field)
  if not count then
    return nil
  end
  local holds = tonumber(count)
  if holds == nil or holds > 1 or holds ~= math.floor(holds) then
    -- HINCRBY raises its usual error for a count that is not an integer.
    redis.call('hincrby', name, field, '-1')
    redis.call('pexpire', name, lease)
    return 0
  end
  if heir and not (own and others_listen(channel, own)) then
    redis.call('hdel', name, field)
    if redis.call('hlen', name) == 0 then
      redis.call('hset', name, heir, '1')
      redis.call('pexpire', name, heir_lease)
      return -1
    end
    -- Another field holds too (never written by Redisson or ferrisson): fall through to the
    -- plain full release, which deletes the hash as Redisson's does.
  end
  redis.call('del', name)
  return 1 + publish(channel, '0', mode)
end
