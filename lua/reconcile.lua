-- Settle a holder field whose last lock-changing call had an unknown outcome (given by
-- src/lock/upkeep.rs to the reconciler of src/lease/doubt.rs): the connection failed or the
-- reply timed out after the script may have run, so the server may
-- hold more of this field's holds than the client knows of (an acquire that did run), or keep a
-- hold the client released (a release that did not run), or keep one the client gave up as lost.
-- Needs lib/publish.lua, lib/fair_prune.lua and lib/read_hold_gone.lua before it.
-- KEYS[1] the lock name N; KEYS[2] the reentrant lock's channel redisson_lock__channel:T(N), also
-- the base of a fair waiter's own channel.
-- ARGV[1] the holder field, ARGV[2] how many holds the client knows it has (0 when none),
-- ARGV[3] the publish mode (lib/publish.lua), ARGV[4] NOW (the client's clock, epoch ms; the
-- fair queue's deadlines are client time), ARGV[5] the read-write lock's channel
-- redisson_rwlock:T(N), ARGV[6] the fair queue Q, ARGV[7] the fair timeout set Z, ARGV[8] T(N),
-- the prefix of every reader's timeout keys.
-- The other layouts' keys are arguments, not KEYS, so that a user whose ACL allows only the
-- reentrant lock's keys (docs/reliability.md) may still run this on its locks; they carry N's
-- hash tag, so they live in N's slot, on the node this call runs on (as lua/renew.lua's).
-- Such a user may not read the fair queue: that check is a pcall, and a denied one counts as no
-- queue (a user that cannot read it has no fair waiter of its own to tell).
-- Brings the field down to the client's count, removing it when that is 0, and announces a lock
-- it frees the way the layout it finds announces a full release (the reconciler only knows the
-- name and the field, and the server's layout is what the waiters listen by):
-- * a hash with `mode`: a read-write lock (read_release and write_release in lua/read_write_lock.lua). A read
--   field brought from c to k loses its timeout keys k+1..c and the hash's TTL is recomputed from
--   the readers' timeout keys; a hash left with no live holder is deleted (one holding only `mode`
--   would block everyone until its TTL) and `0` (read side) or `1` (write side, the field ends in
--   `:write`) published on KEYS[3]; a writer removed while its owner still reads leaves `mode`
--   `read` (the downgrade);
-- * otherwise the reentrant hash; freed, it is told, as its release tells it, to the fair queue's
--   head on its own channel (release in lua/fair_lock.lua) when a fair queue exists, else with `0` on
--   KEYS[2].
-- Never adds holds. Returns the count the field had (0 when absent); -1 when it held something
-- that is not a count (overwritten by someone else), which is then settled the same way.
-- Idempotent: running it twice with the same count changes nothing the second time.
local name, lock_channel = KEYS[1], KEYS[2]
local field, keep, mode_arg, now = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local rw_channel, queue, timeouts, kp = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local count = redis.pcall('hget', name, field)
-- HGET of a string is a WRONGTYPE error: a token lock (lua/token_lock.lua), a string holding one
-- holder's token. It holds once or not at all, and freeing it is a compare-and-delete with
-- nothing to publish (its waiters hear the DEL as a keyspace event, or poll). (A pcall rather
-- than TYPE, so that a user allowed only the hash layout's commands still settles its locks.)
if type(count) == 'table' and count.err then
  if redis.pcall('get', name) ~= field then
    return 0
  end
  if keep == 0 then
    redis.call('del', name)
  end
  return 1
end
if not count then
  return 0
end
local held = tonumber(count)
local counted = held ~= nil and held == math.floor(held)
if counted and held <= keep then
  return held
end
local reply = counted and held or -1

if keep > 0 then
  redis.call('hset', name, field, ARGV[2])
else
  redis.call('hdel', name, field)
end

local rw_mode = redis.call('hget', name, 'mode')
if rw_mode == false then
  if keep == 0 and redis.call('exists', name) == 0 then
    if redis.pcall('exists', queue) == 1 then
      prune(queue, timeouts, now)
      tell_head(queue, lock_channel, mode_arg)
    else
      publish(lock_channel, '0', mode_arg)
    end
  end
  return reply
end

if string.sub(field, -6) == ':write' then
  -- As write_release in lua/read_write_lock.lua after the last write hold (a partial one keeps the TTL).
  if keep == 0 then
    if redis.call('hlen', name) == 1 then
      redis.call('del', name)
      publish(rw_channel, '1', mode_arg)
    elseif rw_mode == 'write' then
      redis.call('hset', name, 'mode', 'read')
    end
  end
  return reply
end

-- A read field: its holds above the client's count lose their timeout keys, then the hash's TTL
-- is recomputed, or the hash deleted, as read_release in lua/read_write_lock.lua does.
if counted then
  for k = keep + 1, held do
    redis.call('del', kp .. ':' .. field .. ':rwlock_timeout:' .. k)
  end
end
read_hold_gone(name, rw_channel, kp, rw_mode, mode_arg)
return reply
