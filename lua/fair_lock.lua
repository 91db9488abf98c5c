-- The fair lock (protocol §4), Redisson's RFairLock: the reentrant lock's hash plus a queue of
-- waiters served in arrival order across every client.
-- Each operation is a local function of plain values; src/lock/fair.rs builds one script per
-- operation from lib/publish.lua, lib/fair_prune.lua (`prune`, §4.2, and `tell_head`, shared
-- with lua/reconcile.lua), this file and one line that calls it with KEYS and ARGV.
-- Keys: `name` N (hash: holder field F -> hold count), `queue` Q = redisson_lock_queue:T(N)
-- (list of waiting fields), `timeouts` Z = redisson_lock_timeout:T(N) (sorted set: waiting
-- field -> its deadline in epoch ms of the client's clock), `channel` the channel base
-- redisson_lock__channel:T(N) (each waiter has its own, base + ':' + its field).
-- `now` is the client's clock in epoch ms.

-- The free lock goes to `field`, the queue's head or, with an empty queue, anyone: its acquire's
-- steps when it takes the lock (§4.3), shared by a release that hands the lock to the head.
local function grant(name, queue, timeouts, lease, field, wait)
  redis.call('lpop', queue)
  redis.call('zrem', timeouts, field)
  -- Everyone behind moves up one place: their deadlines were computed behind this one's.
  local waiting = redis.call('zrange', timeouts, 0, -1)
  for i = 1, #waiting do
    redis.call('zincrby', timeouts, -wait, waiting[i])
  end
  redis.call('hset', name, field, '1')
  redis.call('pexpire', name, lease)
end

-- Acquire, re-enter or queue (§4.3), or try once (§4.4).
-- Call: acquire(KEYS[1] N, KEYS[2] Q, KEYS[3] Z, ARGV[1] the lease in ms, ARGV[2] the holder
-- field F, ARGV[3] W the waiter's wait time in ms, ARGV[4] NOW, ARGV[5] '1' to try once (never
-- queue)).
-- Returns nil when acquired or re-entered. Otherwise: trying once, 1; already queued, the
-- lock's max(0, PTTL) (Redisson 3.32.0 and later); newly queued, the time until the waiter
-- ahead's deadline, or the lock's PTTL when nobody with a deadline is ahead. The last waiter's
-- deadline is used only when it has a score (3.45.0 and later).
local function acquire(name, queue, timeouts, lease, field, wait, now, try_once)
  wait, now = tonumber(wait), tonumber(now)
  prune(queue, timeouts, now)
  if redis.call('exists', name) == 0
      and (redis.call('exists', queue) == 0 or redis.call('lindex', queue, 0) == field) then
    grant(name, queue, timeouts, lease, field, wait)
    return nil
  end
  if redis.call('hexists', name, field) == 1 then
    redis.call('hincrby', name, field, '1')
    redis.call('pexpire', name, lease)
    return nil
  end
  if try_once == '1' then
    return 1
  end
  if redis.call('zscore', timeouts, field) then
    return math.max(0, redis.call('pttl', name))
  end
  local last = redis.call('lindex', queue, -1)
  local last_deadline = last and last ~= field and redis.call('zscore', timeouts, last)
  local ttl
  if last_deadline then
    ttl = tonumber(last_deadline) - now
  else
    ttl = redis.call('pttl', name)
  end
  if redis.call('zadd', timeouts, ttl + wait + now, field) == 1 then
    redis.call('rpush', queue, field)
  end
  return ttl
end

-- Release one hold (§4.6), or hand the lock to a waiter of this client at the queue's head.
-- Call: release(KEYS[1] N, KEYS[2] Q, KEYS[3] Z, KEYS[4] the channel base, ARGV[1] the lease in
-- ms, re-armed on a partial release, ARGV[2] the holder field F, ARGV[3] NOW, ARGV[4] the
-- publish mode (lib/publish.lua); with a hand-off, ARGV[5] the heir's field, ARGV[6] its lease
-- in ms, ARGV[7] its wait time W in ms).
-- Only the queue's head is told, on its own channel, and only when the lock is free afterwards.
-- A hand-off happens only when the heir is the queue's head (after pruning): then the release
-- runs the heir's own acquire steps (`grant`) instead of telling it, and nobody is told. With
-- another head, the release is a plain one.
-- Replies as the reentrant lock's release to the kit: nil when F held nothing, 0 after a partial
-- release, 1 after the last hold, -1 after a hand-off. One difference from Redisson, in the
-- reply only: a missing lock is told to the head as Redisson does, but answered nil, not
-- Redisson's 1, so that a guard whose lease ran out reports it (Error::LeaseLost) as every
-- other lock's does.
-- No unlock latch (§1.10, optional for a foreign client): like the reentrant lock's release.
local function release(name, queue, timeouts, channel, lease, field, now, mode, heir, heir_lease,
                       heir_wait)
  prune(queue, timeouts, now)
  if redis.call('exists', name) == 0 then
    tell_head(queue, channel, mode)
    return nil
  end
  if redis.call('hexists', name, field) == 0 then
    return nil
  end
  if redis.call('hincrby', name, field, '-1') > 0 then
    redis.call('pexpire', name, lease)
    return 0
  end
  redis.call('del', name)
  if heir and redis.call('lindex', queue, 0) == heir then
    grant(name, queue, timeouts, heir_lease, heir, tonumber(heir_wait))
    return -1
  end
  tell_head(queue, channel, mode)
  return 1
end

-- A waiter stops waiting (§4.5, Redisson's acquireFailed).
-- Call: give_up(KEYS[1] Q, KEYS[2] Z, ARGV[1] the waiter's field F, ARGV[2] W, the wait time
-- it queued with, in ms).
-- Everyone queued behind F moves up one place (their deadlines drop by W); then F leaves the
-- queue and the timeout set. A field that is not queued changes nothing. Replies nil.
local function give_up(queue, timeouts, field, wait)
  wait = tonumber(wait)
  local waiting = redis.call('lrange', queue, 0, -1)
  local behind = false
  for i = 1, #waiting do
    if behind then
      redis.call('zincrby', timeouts, -wait, waiting[i])
    elseif waiting[i] == field then
      behind = true
    end
  end
  redis.call('zrem', timeouts, field)
  redis.call('lrem', queue, 0, field)
  return nil
end

-- Force-release the lock whoever holds it (§4.7).
-- Call: force_release(KEYS[1] N, KEYS[2] Q, KEYS[3] Z, KEYS[4] the channel base, ARGV[1] NOW,
-- ARGV[2] the publish mode).
-- Returns 1 when a lock was deleted (and the queue's head told), 0 when none existed.
-- Unlike Redisson, a lock key of another type is refused with WRONGTYPE instead of deleted.
local function force_release(name, queue, timeouts, channel, now, mode)
  local kind = redis.call('type', name).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  prune(queue, timeouts, now)
  if redis.call('del', name) == 1 then
    tell_head(queue, channel, mode)
    return 1
  end
  return 0
end
