-- lua/batch.lua's calls in a cluster, where they may be of several hash slots of this node
-- (src/transport/dispatch.rs). A script may only declare keys of one slot, so KEYS holds only
-- the first call's lock name, which routes the run to its node; ARGV[1] is the number of keys,
-- ARGV[2 ..] every call's keys as lua/batch.lua takes them, then the calls as there.
-- No shebang: scripts of the classic form may reach keys of several slots that their node
-- serves (Redis 7 forbids that to scripts declared with flags unless they ask for
-- `allow-cross-slot-keys`; Redis 6.2 does not check). A key of a slot the node does not serve
-- fails its call alone (see lua/batch.lua).
local keys, count = {}, tonumber(ARGV[1])
for i = 1, count do
  keys[i] = ARGV[1 + i]
end
return batch(keys, count + 2)
