-- A fair-lock waiter stops waiting (protocol §4.5, Redisson's acquireFailed).
-- KEYS[1]: Q; KEYS[2]: Z. ARGV[1]: the waiter's field F; ARGV[2]: W, the wait time it queued
-- with, in ms.
-- Everyone queued behind F moves up one place (their deadlines drop by W); then F leaves the
-- queue and the timeout set. A field that is not queued changes nothing. Replies nil.
local queue, timeouts, field, wait = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
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
