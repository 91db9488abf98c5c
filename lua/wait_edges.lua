-- Write one ferrisson client's wait-for edges (deadlock detection; not part of Redisson's
-- protocol, and never read by it): remove the fields of waits that ended, set those of waits
-- that last, and renew the hash's TTL, which ends the edges of a client that stopped.
-- KEYS[1] ferrisson_waits:{<client uuid>}; ARGV[1] the TTL (ms), also kept in the field `ttl`
-- so that readers can tell a live client's hash (renewed at least every quarter of it) from a stale one;
-- ARGV[2] `replace` (the pairs below are every wait: drop whatever else the hash has) or
-- `update`; ARGV[3] `1` if the client breaks deadlocks (DeadlockDetection::Detect), else `0`,
-- kept in the field `detects` (only such a client's waits are chosen to give way);
-- ARGV[4] n, the number of fields to remove, ARGV[5 .. 4+n] those fields; then field,
-- value pairs to set (`<owner id>:<wait id>`, `<since ms> <asked field> <lock name>`).
-- Returns the number of waits recorded; the hash is deleted when none is left.
local key, ttl, detects, n = KEYS[1], ARGV[1], ARGV[3], tonumber(ARGV[4])
if ARGV[2] == 'replace' then
  redis.call('del', key)
end
-- One HDEL and one HSET per 500 fields (unpack's stack is bounded), not one call per field:
-- a drain removes many at once.
for i = 5, 4 + n, 500 do
  redis.call('hdel', key, unpack(ARGV, i, math.min(i + 499, 4 + n)))
end
for i = 5 + n, #ARGV, 1000 do
  redis.call('hset', key, unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local waits = redis.call('hlen', key) - redis.call('hexists', key, 'ttl')
  - redis.call('hexists', key, 'detects')
if waits == 0 then
  redis.call('del', key)
  return 0
end
redis.call('hset', key, 'ttl', ttl, 'detects', detects)
redis.call('pexpire', key, ttl)
return waits
