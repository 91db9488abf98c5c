-- The read-write lock (protocol §5), Redisson's RReadWriteLock: many readers or one writer on
-- one hash, with a timeout key per read hold.
-- Each operation is a local function of plain values; src/lock/read_write.rs builds one script
-- per operation from lib/publish.lua, lib/read_hold_gone.lua (the end of a read release, shared
-- with lua/reconcile.lua), this file and one line that calls it with KEYS and ARGV.
-- Keys: `name` N (hash: `mode` -> read | write, each read field F = "<client uuid>:<owner id>"
-- and write field F:write -> its hold count), `channel` redisson_rwlock:T(N), `prefix` a read
-- holder's timeout prefix TP(F) = T(N):F:rwlock_timeout (read hold k has the key TP(F):k), `kp`
-- KP = T(N), the prefix of every reader's timeout keys.
-- Every read hold k gets its own key TP(F):k (value 1, TTL = that hold's lease), and the hash's
-- TTL is kept at least as long as the longest hold: a reader's release (ours or Java's,
-- read_release below) recomputes the hash's TTL from these keys and deletes the hash when none
-- is alive, so a read hold without its key would be dropped by another reader's release.
-- Neither release writes the unlock latch (Redisson >= 3.44's, which ferrisson does not write).

-- Acquire or re-enter a read hold (§5.2, the same steps as Redisson's RedissonReadLock in every
-- version).
-- Call: read_acquire(KEYS[1] N, KEYS[2] TP(F), ARGV[1] the lease in ms, ARGV[2] the read field
-- F, ARGV[3] the same owner's write field F:write).
-- Refused while another owner writes (a writer may take read holds: the downgrade).
-- Returns nil when acquired, otherwise the hash's PTTL in ms.
local function read_acquire(name, prefix, lease, field, write_field)
  local mode = redis.call('hget', name, 'mode')
  if mode == false then
    redis.call('hset', name, 'mode', 'read')
    redis.call('hset', name, field, '1')
    redis.call('set', prefix .. ':1', '1')
    redis.call('pexpire', prefix .. ':1', lease)
    redis.call('pexpire', name, lease)
    return nil
  end
  if mode == 'read' or (mode == 'write' and redis.call('hexists', name, write_field) == 1) then
    local k = redis.call('hincrby', name, field, '1')
    local key = prefix .. ':' .. k
    redis.call('set', key, '1')
    redis.call('pexpire', key, lease)
    local remaining = redis.call('pttl', name)
    redis.call('pexpire', name, tostring(math.max(remaining, tonumber(lease))))
    return nil
  end
  return redis.call('pttl', name)
end

-- Release one read hold (§5.3, Redisson >= 3.44).
-- Call: read_release(KEYS[1] N, KEYS[2] the channel, KEYS[3] TP(F), KEYS[4] KP, ARGV[1] the
-- publish mode (lib/publish.lua), ARGV[2] the read field F).
-- Returns nil when F holds no read hold (on a missing lock the message 0 is published anyway,
-- as Redisson >= 3.44 does; <= 3.43 answered 1 there), 0 when the lock stays held (F's other
-- holds, other readers, or the owner's write hold), 1 when the hash was deleted and 0 published.
-- Other holders are judged by their timeout keys, not by the hash's fields, exactly as every
-- Redisson reader's release judges ours (see read_acquire).
local function read_release(name, channel, prefix, kp, publish_mode, field)
  local mode = redis.call('hget', name, 'mode')
  if mode == false then
    publish(channel, '0', publish_mode)
    return nil
  end
  if redis.call('hexists', name, field) == 0 then
    return nil
  end
  local left = redis.call('hincrby', name, field, '-1')
  if left == 0 then
    redis.call('hdel', name, field)
  end
  redis.call('del', prefix .. ':' .. (left + 1))
  if read_hold_gone(name, channel, kp, mode, publish_mode) then
    return 0
  end
  return 1
end

-- Acquire or re-enter the write hold (§5.4, the same steps as Redisson's RedissonWriteLock in
-- every version).
-- Call: write_acquire(KEYS[1] N, ARGV[1] the lease in ms, ARGV[2] the write field F:write,
-- ARGV[3] the same owner's read field F (read only for the reply below)).
-- A re-entry ADDS the lease to the remaining TTL (Redisson's rule, unlike the reentrant lock).
-- Returns nil when acquired, otherwise the hash's PTTL in ms; or, when the lock is refused
-- while the caller itself holds read holds (an upgrade, which Redisson refuses too, so that
-- waiting would wait for itself), the array {PTTL, 'upgrade'}. The side effects are Redisson's;
-- only that reply, read by ferrisson alone, tells the case apart.
local function write_acquire(name, lease, field, read_field)
  local mode = redis.call('hget', name, 'mode')
  if mode == false then
    redis.call('hset', name, 'mode', 'write')
    redis.call('hset', name, field, '1')
    redis.call('pexpire', name, lease)
    return nil
  end
  if mode == 'write' and redis.call('hexists', name, field) == 1 then
    redis.call('hincrby', name, field, '1')
    local remaining = redis.call('pttl', name)
    redis.call('pexpire', name, tostring(remaining + tonumber(lease)))
    return nil
  end
  if mode == 'read' and redis.call('hexists', name, read_field) == 1 then
    return {redis.call('pttl', name), 'upgrade'}
  end
  return redis.call('pttl', name)
end

-- Release one write hold (§5.5, Redisson >= 3.44), optionally handing the write lock straight to
-- a writer of the same client when it was the last hold (local hand-off, src/kit/handoff.rs).
-- Call: write_release(KEYS[1] N, KEYS[2] the channel, ARGV[1] the lease in ms, re-armed on a
-- partial release, ARGV[2] the write field F:write, ARGV[3] the publish mode, and for a
-- hand-off ARGV[4] the heir's write field, ARGV[5] its lease in ms, ARGV[6] own: as
-- lua/release.lua's, or '' for none).
-- Returns nil when F:write does not hold the lock (on a missing lock the message 1 is published
-- anyway, as Redisson >= 3.44 does; <= 3.43 answered 1 there), 0 after a partial release (no
-- message), -1 after a hand-off (the hash holds `mode` = write and the heir's field with a
-- fresh lease, as the heir's own write_acquire writes it on a free lock; nothing is published),
-- and after the last write hold: when the owner still holds read holds (the downgrade), 1 (the
-- mode becomes `read` with no message and no new TTL), otherwise the hash is deleted and 1
-- published (which wakes every waiter), and the reply is 1 + the number of subscribers the
-- message reached (as lua/release.lua's, for src/kit/give_way.rs).
local function write_release(name, channel, lease, field, publish_mode, heir, heir_lease, own)
  local mode = redis.call('hget', name, 'mode')
  if mode == false then
    publish(channel, '1', publish_mode)
    return nil
  end
  if mode ~= 'write' or redis.call('hexists', name, field) == 0 then
    return nil
  end
  if redis.call('hincrby', name, field, '-1') > 0 then
    redis.call('pexpire', name, lease)
    return 0
  end
  redis.call('hdel', name, field)
  if redis.call('hlen', name) == 1 then
    if own == '' then
      own = nil
    end
    if heir and not (own and others_listen(channel, own)) then
      redis.call('hset', name, heir, '1')
      redis.call('pexpire', name, heir_lease)
      return -1
    end
    redis.call('del', name)
    return 1 + publish(channel, '1', publish_mode)
  end
  redis.call('hset', name, 'mode', 'read')
  return 1
end

-- Force-release one side whoever holds it (§5.6).
-- Call: force_release(KEYS[1] N, KEYS[2] the channel, ARGV[1] the side: `read` or `write`,
-- ARGV[2] the publish mode).
-- Deletes the hash only while it is in that side's mode, and then publishes the side's message
-- (0 for read: one waiter per client retries; 1 for write: all do). Returns 1 when deleted, 0
-- otherwise. The readers' timeout keys are left to expire, as Redisson leaves them.
local function force_release(name, channel, side, publish_mode)
  if redis.call('hget', name, 'mode') ~= side then
    return 0
  end
  redis.call('del', name)
  if side == 'read' then
    publish(channel, '0', publish_mode)
  else
    publish(channel, '1', publish_mode)
  end
  return 1
end

-- Whether the read side counts as locked (§5.6, Redisson >= 3.24's RedissonReadLock.isLocked;
-- <= 3.23 tested only mode = read): 1 in read mode, or in write mode while the writer also
-- holds read holds (more fields than `mode` and the write field), else 0. Read only.
-- Call: read_is_locked(KEYS[1] N).
local function read_is_locked(name)
  local mode = redis.call('hget', name, 'mode')
  if mode == 'read' or (mode == 'write' and redis.call('hlen', name) > 2) then
    return 1
  end
  return 0
end
