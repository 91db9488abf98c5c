-- Shared prelude, prepended to every script that announces a release (see src/script.rs).
-- Publishes `message` on `channel` the way the configured mode asks (protocol §1.7, §14.3):
-- PUBLISH, SPUBLISH, or BOTH (the sharded copy tolerated to fail on servers without it).
local function publish(channel, message, mode)
  if mode ~= 'SPUBLISH' then
    redis.call('publish', channel, message)
  end
  if mode == 'SPUBLISH' then
    redis.call('spublish', channel, message)
  elseif mode == 'BOTH' then
    redis.pcall('spublish', channel, message)
  end
end
