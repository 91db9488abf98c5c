-- The count-down latch, Redisson's RCountDownLatch (protocol §12): KEYS[1] is the latch N, a
-- string integer (the remaining count); KEYS[2] its channel
-- redisson_countdownlatch__channel__{N} (braces whatever N holds). Messages: 0 when the count
-- reaches exactly 0, 1 for a new count (trySetCount) and a delete. No WAIT sync (§12.1).
-- Each Script in src/sync/latch.rs is lib/publish.lua, this file, and one line that calls one
-- of these functions with KEYS and ARGV. A key of another type fails with WRONGTYPE before
-- anything was written (raised as a string, as lua/semaphore.lua says why).

-- Refuses a key that is neither absent nor a string integer.
local function check(name)
  local value = redis.call('get', name)
  if value then
    local number = tonumber(value)
    if number == nil or number ~= math.floor(number) then
      error('WRONGTYPE ferrisson: the count-down latch key does not hold an integer', 0)
    end
  end
end

-- trySetCount(c) (§12.2): only when N does not exist. 1 when set (and published), else 0.
local function try_set_count(name, channel, count, mode)
  check(name)
  if redis.call('exists', name) == 1 then
    return 0
  end
  redis.call('set', name, count)
  publish(channel, '1', mode)
  return 1
end

-- countDown() (§12.2): DECR; at 0 or below the key is deleted, at exactly 0 the waiters are
-- told. A missing latch becomes -1 and is deleted at once, with no message. Replies the count
-- after the decrement (Redisson replies nothing).
local function count_down(name, channel, mode)
  check(name)
  local value = redis.call('decr', name)
  if value <= 0 then
    redis.call('del', name)
  end
  if value == 0 then
    publish(channel, '0', mode)
  end
  return value
end

-- delete() (§12.2): DEL N; when it existed, publish 1. 1/0.
local function delete(name, channel, mode)
  check(name)
  if redis.call('del', name) == 1 then
    publish(channel, '1', mode)
    return 1
  end
  return 0
end
