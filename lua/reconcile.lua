-- Settle a holder field whose last lock-changing call had an unknown outcome (src/lease/doubt.rs): the
-- connection failed or the reply timed out after the script may have run, so the server may
-- hold more of this field's holds than the client knows of (an acquire that did run), or keep a
-- hold the client released (a release that did not run), or keep one the client gave up as lost.
-- KEYS[1] the lock name N, KEYS[2] its unlock channel; ARGV[1] the holder field, ARGV[2] how
-- many holds the client knows it has (0 when none), ARGV[3] the publish mode (lib/publish.lua).
-- Brings the field down to the client's count: removing it when that is 0, which frees the lock
-- and publishes the unlock message 0 when it was the only holder (as a full release does).
-- Never adds holds. Returns the count the field had (0 when absent); -1 when it held something
-- that is not a count (overwritten by someone else), which is then settled the same way.
-- Idempotent: running it twice with the same count changes nothing the second time.
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return 0
end
local held = tonumber(count)
local keep = tonumber(ARGV[2])
if held ~= nil and held == math.floor(held) and held <= keep then
  return held
end
if keep > 0 then
  redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
else
  redis.call('hdel', KEYS[1], ARGV[1])
  if redis.call('exists', KEYS[1]) == 0 then
    publish(KEYS[2], '0', ARGV[3])
  end
end
if held == nil or held ~= math.floor(held) then
  return -1
end
return held
