-- Several acquire and release calls of one client in one script run (src/dispatch.rs).
-- The operations `acquire` and `release` are lua/acquire.lua and lua/release.lua, each wrapped
-- in a function of (KEYS, ARGV) when this script is assembled (src/script.rs), so each call runs
-- exactly the steps of its own script, in the order the calls were made.
-- KEYS: every call's keys, call after call.
-- ARGV[1] the number of calls; then, per call: its shape (below) and its arguments.
-- Returns an array with one entry per call: the call's integer reply, false for a nil reply
-- (sent as nil), or the error message (a string) when the call failed. A failed call stops only
-- itself, as it would in a script of its own (every operation checks the key's type before
-- writing).
local shapes = {
  -- shape = { operation, number of keys, number of arguments }
  acquire = { acquire, 1, 2 },
  release = { release, 2, 3 },
  handoff = { release, 2, 5 },
}
local replies = {}
local key, arg = 0, 2
for call = 1, tonumber(ARGV[1]) do
  local shape = shapes[ARGV[arg]]
  local key_count, arg_count = shape[2], shape[3]
  local keys, args = {}, {}
  for i = 1, key_count do
    keys[i] = KEYS[key + i]
  end
  for i = 1, arg_count do
    args[i] = ARGV[arg + i]
  end
  key, arg = key + key_count, arg + 1 + arg_count
  local ok, reply = pcall(shape[1], keys, args)
  if not ok then
    replies[call] = type(reply) == 'table' and reply.err or tostring(reply)
  elseif reply == nil then
    replies[call] = false
  else
    replies[call] = reply
  end
end
return replies
