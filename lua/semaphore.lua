-- The semaphore, Redisson's RSemaphore (protocol §10): KEYS[1] is the semaphore N, a string
-- integer (the permits available, no TTL unless trySetPermits gave one); KEYS[2], where given,
-- its channel redisson_sc:T(N), on which every increase publishes the permits now available.
-- Each Script in src/sync/semaphore.rs is lib/publish.lua, this file, and one line that calls
-- one of these functions with KEYS and ARGV. Numbers go to redis.call as strings (Redis formats
-- Lua numbers with printf).
-- A key that is not a string integer fails every operation with a WRONGTYPE error, before
-- anything was written (GET raises it for other types, `permits` for a string of text).
-- Raised as a string: Redis 6.2's error handler cannot format a table raised with error() (it
-- fails with "attempt to concatenate"), and every server keeps the WRONGTYPE in the message.

-- The permits available (GET N; nil when absent).
local function permits(name)
  local value = redis.call('get', name)
  if not value then
    return nil
  end
  local number = tonumber(value)
  if number == nil or number ~= math.floor(number) then
    error('WRONGTYPE ferrisson: the semaphore key does not hold an integer', 0)
  end
  return number
end

-- tryAcquire(p) (§10.2): DECRBY p when at least p are available. 1 when taken, else 0.
local function try_acquire(name, p)
  local available = permits(name)
  if available ~= nil and available >= tonumber(p) then
    redis.call('decrby', name, p)
    return 1
  end
  return 0
end

-- release(p) (§10.2): INCRBY p, publish the new count. Replies 1 + the number of subscribers the
-- message reached, as lua/release.lua does for a full release (so that the releasing client can
-- give way to other clients' waiters: src/kit/give_way.rs), where Redisson replies nothing.
local function release(name, channel, p, mode)
  permits(name)
  local value = redis.call('incrby', name, p)
  return 1 + publish(channel, tostring(value), mode)
end

-- trySetPermits(p) and, with a TTL in ms, trySetPermits(p, ttl) (3.29.0+) (§10.2): only when
-- the key is absent. 1 when set (and published), else 0.
local function try_set(name, channel, p, mode, ttl)
  if permits(name) ~= nil then
    return 0
  end
  if ttl then
    redis.call('set', name, p, 'px', ttl)
  else
    redis.call('set', name, p)
  end
  publish(channel, p, mode)
  return 1
end

-- addPermits(d), d possibly negative (§10.2): SET N (v + d) (which clears a TTL, as Redisson's
-- does) and publish v + d. Replies v + d.
local function add(name, channel, d, mode)
  local value = string.format('%d', (permits(name) or 0) + tonumber(d))
  redis.call('set', name, value)
  publish(channel, value, mode)
  return tonumber(value)
end

-- drainPermits (§10.2): the permits available, which become 0 (absent: 0, nothing written).
local function drain(name)
  local available = permits(name)
  if available == nil then
    return 0
  end
  redis.call('set', name, '0')
  return available
end

-- delete(): DEL N, 1 when it existed. Unlike Redisson, a key of another type is refused.
local function delete(name)
  permits(name)
  return redis.call('del', name)
end
