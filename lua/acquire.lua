-- Acquire or re-enter a reentrant lock (protocol §2.2), or, with `once`, take a non-reentrant
-- lock (§8, Redisson 4.5+: the same hash, taken only when it does not exist).
-- As a script of its own: acquire(KEYS[1], ARGV[1], ARGV[2]) (src/transport/script.rs adds that
-- line; src/lock/non_reentrant.rs adds it with `once`).
-- name: the lock name N; lease: in ms; field: the holder "<client uuid>:<owner id>".
-- Returns nil when acquired or re-entered (the TTL is reset to the lease, not extended),
-- otherwise the lock's PTTL in ms so that the caller bounds its wait by it. With `once`, a field
-- that holds the lock already gets the error reply NON_REENTRANT_REACQUIRE (nothing changes).
-- Numbers passed to redis.call are written as strings: Redis would format a Lua number with
-- printf on every call.
-- A function of plain values rather than of (KEYS, ARGV), so that lua/batch.lua calls it
-- without building two tables per call (those took about 15 % of a batch's script time).
local function acquire(name, lease, field, once)
  if redis.call('exists', name) == 0 or (not once and redis.call('hexists', name, field) == 1) then
    redis.call('hincrby', name, field, '1')
    redis.call('pexpire', name, lease)
    return nil
  end
  if once and redis.call('hexists', name, field) == 1 then
    return redis.error_reply('NON_REENTRANT_REACQUIRE')
  end
  return redis.call('pttl', name)
end
