-- Several acquire and release calls of one client in one script run (src/transport/dispatch.rs).
-- The operations `acquire` and `release` are the functions of lua/acquire.lua and
-- lua/release.lua, placed before this file when the script is assembled (src/transport/script.rs), so
-- each call runs exactly the steps of its own script, in the order the calls were made.
-- `batch(keys, a)` runs the calls: `keys` holds every call's keys, call after call (the script's
-- KEYS on one server; lua/batch_across_slots.lua passes them in ARGV in a cluster), and ARGV[a] is
-- the number of calls; then come, per call, its shape and its arguments, as its own script
-- takes them:
--   acquire  1 key (name)           2 arguments (lease, field)
--   acquire_once  the same, the non-reentrant acquire (`once` in lua/acquire.lua)
--   release  2 keys (name, channel) 3 arguments (lease, field, mode)
--   handoff  2 keys (name, channel) 5 arguments (lease, field, mode, heir, heir lease)
--   handoff_if_alone  the same and a sixth (own: see lua/release.lua)
--   handoff_token  3 keys (name, channel, token key) 6 arguments (lease, field, mode, heir, heir
--                  lease, own or '' for none): a hand-off to a fenced lock's waiter
-- Returns an array with one entry per call: the call's reply (an integer, or handoff_token's
-- {-1, token}), false for a nil reply (sent as nil), or the error message (a string) when the
-- call failed or replied with an error. A failed call stops only itself, as it would in a script
-- of its own (every operation reads its lock's key before writing: in a cluster, a key this node
-- does not serve fails the call at that first read, and the client sends the call again alone).
local function batch(keys, a)
  local replies = {}
  local k, calls = 1, tonumber(ARGV[a])
  a = a + 1
  for call = 1, calls do
    local shape = ARGV[a]
    local ok, reply
    if shape == 'acquire' then
      ok, reply = pcall(acquire, keys[k], ARGV[a + 1], ARGV[a + 2])
      k, a = k + 1, a + 3
    elseif shape == 'acquire_once' then
      ok, reply = pcall(acquire, keys[k], ARGV[a + 1], ARGV[a + 2], true)
      k, a = k + 1, a + 3
    elseif shape == 'release' then
      ok, reply = pcall(release, keys[k], keys[k + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
      k, a = k + 2, a + 4
    elseif shape == 'handoff' then
      ok, reply = pcall(release, keys[k], keys[k + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
        ARGV[a + 4], ARGV[a + 5])
      k, a = k + 2, a + 6
    elseif shape == 'handoff_if_alone' then
      ok, reply = pcall(release, keys[k], keys[k + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
        ARGV[a + 4], ARGV[a + 5], ARGV[a + 6])
      k, a = k + 2, a + 7
    elseif shape == 'handoff_token' then
      ok, reply = pcall(release, keys[k], keys[k + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
        ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], keys[k + 2])
      k, a = k + 3, a + 7
    else
      return redis.error_reply('ERR unknown call shape in a lock batch: ' .. tostring(shape))
    end
    if not ok then
      replies[call] = type(reply) == 'table' and reply.err or tostring(reply)
    elseif type(reply) == 'table' and reply.err then
      replies[call] = reply.err -- an error the operation replied with (acquire_once's refusal)
    elseif reply == nil then
      replies[call] = false
    else
      replies[call] = reply
    end
  end
  return replies
end
