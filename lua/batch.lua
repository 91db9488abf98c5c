-- Several acquire and release calls of one client in one script run (src/dispatch.rs).
-- The operations `acquire` and `release` are lua/acquire.lua and lua/release.lua, each wrapped
-- in a function of (KEYS, ARGV) when this script is assembled (src/script.rs), so each call runs
-- exactly the steps of its own script, in the order the calls were made.
-- KEYS: every call's keys, call after call.
-- ARGV[1] the number of calls; then, per call: its operation ('acquire' or 'release'), its
-- number of keys, its number of arguments, and its arguments.
-- Returns a flat array with two entries per call: 0 and the call's integer reply, 1 and 0 for a
-- nil reply, or 2 and the error message when the call failed. A failed call stops only itself,
-- as it would in a script of its own (every operation checks the key's type before writing).
local operations = { acquire = acquire, release = release }
local replies = {}
local key, arg = 0, 2
for call = 1, tonumber(ARGV[1]) do
  local operation = operations[ARGV[arg]]
  local key_count, arg_count = tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
  arg = arg + 3
  local keys, args = {}, {}
  for i = 1, key_count do
    keys[i] = KEYS[key + i]
  end
  for i = 1, arg_count do
    args[i] = ARGV[arg + i - 1]
  end
  key, arg = key + key_count, arg + arg_count
  local ok, reply = pcall(operation, keys, args)
  local n = #replies
  if not ok then
    replies[n + 1] = 2
    replies[n + 2] = type(reply) == 'table' and reply.err or tostring(reply)
  elseif reply == nil then
    replies[n + 1] = 1
    replies[n + 2] = 0
  else
    replies[n + 1] = 0
    replies[n + 2] = reply
  end
end
return replies
