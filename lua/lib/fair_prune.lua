-- Shared prelude of the fair lock's scripts (src/lock/fair.rs prepends it to lua/fair_lock.lua
-- with concat!) and of lua/reconcile.lua.
-- Stale-waiter pruning (protocol §4.2), run first by every fair-lock script but give-up: while
-- the queue's head has a deadline (its score in the timeout set) at or before `now` (the
-- client's clock, epoch ms), drop it from both. A head without a score stops the loop: the
-- "score exists" guard of Redisson 3.32.0 and later, where older versions raised a Lua error.
local function prune(queue, timeouts, now)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return
    end
    local deadline = redis.call('zscore', timeouts, head)
    if not deadline or tonumber(deadline) > tonumber(now) then
      return
    end
    redis.call('zrem', timeouts, head)
    redis.call('lpop', queue)
  end
end

-- Tells the queue's head (if any) that the lock is free: `0` on its own channel,
-- channel_base + ':' + head (§4.6). Needs lib/publish.lua before it.
local function tell_head(queue, channel_base, mode)
  local head = redis.call('lindex', queue, 0)
  if head then
    publish(channel_base .. ':' .. head, '0', mode)
  end
end
