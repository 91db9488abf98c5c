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
-- token_key (optional): the heir is a fenced lock's waiter, whose acquire takes the next token
-- of this key (protocol §7, lua/fenced_acquire.lua): the hand-off takes it for the heir.
-- Returns nil when the field does not hold the lock (nothing changes, nothing is published),
-- 0 after a partial (reentrant) release, -1 after a hand-off (the hash now holds only the heir
-- with a fresh lease, the lock was never free, and nothing is published; {-1, token} with a
-- token_key), and after the full
-- release, which deletes the hash and publishes the unlock message 0, 1 + the number of
-- subscribers that received the message (so the releasing client can tell whether waiters of
-- other clients were told, see src/kit/give_way.rs).
-- The steps are §2.3's HEXISTS, HINCRBY -1 and DEL, with the first read as an HGET that also
-- tells a partial release from a full one.
local function release(name, channel, lease, field, mode, heir, heir_lease, own, token_key)
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
  -- `own` is '' when absent in a batch call that names a token key (lua/batch.lua).
  if own == '' then
    own = nil
  end
  -- Only when the field is the hash's one holder: another field (never written by Redisson or
  -- ferrisson) leaves the plain full release below, which deletes the hash as Redisson's does.
  if heir and redis.call('hlen', name) == 1 and not (own and others_listen(channel, own)) then
    local token
    if token_key then
      -- First, so that a token key of another type leaves the plain release below (the heir's
      -- own acquire then reports it) rather than a half-made hand-off.
      local ok, taken = pcall(redis.call, 'incr', token_key)
      if ok then
        token = taken
      else
        heir = nil
      end
    end
    if heir then
      redis.call('hdel', name, field)
      redis.call('hset', name, heir, '1')
      redis.call('pexpire', name, heir_lease)
      if token then
        return {-1, token}
      end
      return -1
    end
  end
  -- §2.3's decrement before the delete, although the delete alone would do: a keyspace
  -- observer (`ferrisson watch`) tells a release from a force unlock (a bare DEL) by it, as it
  -- does for Redisson's own release.
  redis.call('hincrby', name, field, '-1')
  redis.call('del', name)
  return 1 + publish(channel, '0', mode)
end
