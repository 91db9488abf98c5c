-- Release one hold of a fair lock (protocol §4.6); needs lib/publish.lua and
-- lib/fair_prune.lua before it.
-- KEYS[1]: N; KEYS[2]: Q; KEYS[3]: Z; KEYS[4]: the channel base redisson_lock__channel:T(N).
-- ARGV[1]: the lease in ms, re-armed on a partial release; ARGV[2]: the holder field F;
-- ARGV[3]: NOW (epoch ms); ARGV[4]: the publish mode (lib/publish.lua).
-- Only the queue's head is told, on its own channel, and only when the lock is free afterwards.
-- Replies as the reentrant lock's release to the kit: nil when F held nothing, 0 after a partial
-- release, 1 after the last hold. One difference from Redisson, in the reply only: a missing
-- lock is told to the head as Redisson does, but answered nil, not Redisson's 1, so that a
-- guard whose lease ran out reports it (Error::LeaseLost) as every other lock's does.
-- No unlock latch (§1.10, optional for a foreign client): like the reentrant lock's release.
local name, queue, timeouts, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, field, now, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
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
tell_head(queue, channel, mode)
return 1
