-- The permit-expirable semaphore (protocol §11), Redisson's RPermitExpirableSemaphore.
-- Each operation is a local function of plain values; src/sync/permit_semaphore.rs builds one
-- script per operation from lib/publish.lua, this file and one line that calls it with KEYS and
-- ARGV. Keys: `name` N (string integer, the available permits), `timeout` T(N):timeout (sorted
-- set: member = permit id, score = its lease's end in epoch ms from the client's clock, or
-- `never` = 922337203685477), `channel` redisson_sc:T(N). Permit ids are whatever the client
-- sends: the 32-character hex string (Redisson up to 3.16.x) or its raw 16 bytes (3.17.0 on).
-- Numbers given to redis.call are strings (Redis formats Lua numbers with printf).

-- N's value as a number, or a WRONGTYPE error when N is a string that is not an integer (a
-- key of another type fails with WRONGTYPE in GET itself). Raised as a string, as
-- lua/semaphore.lua says why.
local function permits_of(name)
  local value = redis.call('get', name)
  if value == false then
    return nil
  end
  local permits = tonumber(value)
  if permits == nil then
    error('WRONGTYPE ferrisson: the semaphore key does not hold an integer', 0)
  end
  return permits
end

-- The reclaim step that starts most operations: the permits whose lease ended by `now` (at
-- most `limit` of them, -1 = all) go back to N, and the count now available is announced when
-- it is positive. Returns that count, or nil when nothing had expired.
local function reclaim(name, timeout, channel, now, limit, mode)
  local expired = redis.call('zrangebyscore', timeout, '0', now, 'limit', '0', limit)
  if #expired == 0 then
    return nil
  end
  -- In slices: unpack of a very long list would overflow Lua's stack.
  for first = 1, #expired, 1000 do
    redis.call('zrem', timeout, unpack(expired, first, math.min(first + 999, #expired)))
  end
  local value = redis.call('incrby', name, tostring(#expired))
  if value > 0 then
    publish(channel, tostring(value), mode)
  end
  return value
end

-- Take one permit `id` whose lease ends at `deadline`. Replies 'OK' when taken; otherwise
-- ':' .. the lowest lease end in the set, when that permit expires at all (the waiter retries
-- no later than then); otherwise nil (wait for a release message only).
local function acquire(name, timeout, channel, deadline, now, never, mode, id)
  reclaim(name, timeout, channel, now, '1', mode)
  local permits = permits_of(name)
  if permits ~= nil and permits >= 1 then
    redis.call('decrby', name, '1')
    redis.call('zadd', timeout, deadline, id)
    local ttl = redis.call('pttl', name)
    if ttl > 0 then
      redis.call('pexpire', timeout, tostring(ttl))
    end
    return 'OK'
  end
  local first = redis.call('zrange', timeout, '0', '0', 'withscores')
  if first[1] ~= nil and first[2] ~= never then
    return ':' .. first[2]
  end
  return nil
end

-- Return permit `id`: it must still be in the set (ZREM removes it), then N goes up by one and
-- the new count is announced. Replies nil when the id was not there (released already,
-- reclaimed after its lease, or never taken), 0 when it was there but its lease had ended by
-- `now` (returned all the same; Redisson 4 answers false then), 1 when released in time. So
-- the kit reads it as it reads RELEASE: nil = nothing held.
local function release(name, channel, timeout, id, now, mode)
  local expires = redis.call('zscore', timeout, id)
  if redis.call('zrem', timeout, id) ~= 1 then
    return nil
  end
  local value = redis.call('incrby', name, '1')
  publish(channel, tostring(value), mode)
  if tonumber(expires) <= tonumber(now) then
    return 0
  end
  return 1
end

-- Set N to `permits` if it does not exist, announcing the new total. Replies 1 / 0.
local function try_set(name, channel, permits, mode)
  if redis.call('get', name) ~= false then
    return 0
  end
  redis.call('set', name, permits)
  publish(channel, permits, mode)
  return 1
end

-- Add `delta` (possibly negative) to N, creating it; announces `delta` when positive (as
-- Redisson 4). SET, as Redisson's, clears a TTL N had.
local function add(name, channel, delta, mode)
  local permits = permits_of(name) or 0
  redis.call('set', name, tostring(permits + tonumber(delta)))
  if tonumber(delta) > 0 then
    publish(channel, delta, mode)
  end
  return 1
end

-- The available permits after the reclaim step.
local function available(name, timeout, channel, now, mode)
  local value = reclaim(name, timeout, channel, now, '-1', mode)
  if value ~= nil then
    return value
  end
  return permits_of(name) or 0
end

-- After the reclaim step, move the lease end of permit `id` to `deadline` if it is still
-- held. Replies 1 / 0.
local function update_lease(name, timeout, channel, id, deadline, now, mode)
  reclaim(name, timeout, channel, now, '-1', mode)
  if redis.call('zscore', timeout, id) == false then
    return 0
  end
  redis.call('zadd', timeout, deadline, id)
  return 1
end
