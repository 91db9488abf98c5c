-- Shared prelude, prepended to every script that announces a release (see src/transport/script.rs).
-- Publishes `message` on `channel` the way the configured mode asks (protocol §1.7, §14.3):
-- PUBLISH, SPUBLISH, or BOTH (the sharded copy tolerated to fail on servers without it).
-- Returns how many subscribers received it: SPUBLISH's count in SPUBLISH mode, otherwise
-- PUBLISH's (in a cluster, either counts only the subscribers of the node that ran the script).
local function publish(channel, message, mode)
  if mode == 'SPUBLISH' then
    return redis.call('spublish', channel, message)
  end
  local receivers = redis.call('publish', channel, message)
  if mode == 'BOTH' then
    redis.pcall('spublish', channel, message)
  end
  return receivers
end
