#!/usr/bin/env node
// The node-redisson peer of ferrisson's scenario benchmark (benches/scenarios/peers.rs,
// `node_uncontended`). It shares tests/interop's node_modules (pinned by package-lock.json) with
// the interop peer (peer.js).
//
// Usage: node bench.js <redis-url> <tasks> <duration-ms> <warmup-ms> [key-prefix] [lease-ms]
//
// Runs <tasks> concurrent async workers in this one process, on one node-redisson client (one
// ioredis command connection, plus its subscriber connection, unused here). Worker i loops on its
// own lock "<key-prefix>:<i>": lock(lease) then unlock(), for <warmup-ms> (not measured: JIT,
// connection buffers) and then <duration-ms>. A lease is always given (default 30000 ms), so
// node-redisson starts no watchdog timer: the loop measures the acquire and release scripts
// only. The rules are those of the Rust scenarios: a pair counts when it started after the
// warm-up and ended within the window, pairs/s = counted pairs / duration, and the latency is
// one lock() call (process.hrtime) from the call to its resolution.
//
// Prints one JSON line on stdout when done:
//   {"pairs_per_s":..,"p50_us":..,"p99_us":..,"pairs":..}
// and exits 0; on any error it prints the message on stderr and exits 1.
'use strict';

const { Redisson } = require('node-redisson');

const [url, tasksArg, durationArg, warmupArg, prefixArg, leaseArg] = process.argv.slice(2);
const tasks = Number(tasksArg);
const durationMs = Number(durationArg);
const warmupMs = Number(warmupArg);
const prefix = prefixArg || `bench:node:${process.pid}`;
const leaseMs = leaseArg ? Number(leaseArg) : 30000;
if (!url || !(tasks >= 1) || !(durationMs > 0) || !(warmupMs >= 0) || !(leaseMs > 0)) {
  process.stderr.write(
    'usage: node bench.js <redis-url> <tasks> <duration-ms> <warmup-ms> [key-prefix] [lease-ms]\n',
  );
  process.exit(2);
}

function redisOptions(redisUrl) {
  const u = new URL(redisUrl);
  const options = {
    host: u.hostname || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    maxRetriesPerRequest: 1,
    connectionName: `node-redisson-bench-${process.pid}`,
  };
  if (u.username) options.username = decodeURIComponent(u.username);
  if (u.password) options.password = decodeURIComponent(u.password);
  const db = u.pathname.replace(/^\//, '');
  if (db) options.db = Number(db);
  return options;
}

function whenReady(redis) {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    redis.once('ready', resolve);
    redis.once('end', () => reject(new Error('redis connection ended before ready')));
  });
}

// The value at quantile q of an ascending array (the smallest value with at least q of the
// samples at or below it).
function quantile(sorted, q) {
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[index];
}

async function main() {
  const redisson = new Redisson({ redis: { options: redisOptions(url) } });
  const executor = redisson.commandExecutor;
  await Promise.all([whenReady(executor.redis), whenReady(executor.subscribeRedis)]);

  const latencies = [];
  let pairs = 0;
  const warmEnd = process.hrtime.bigint() + BigInt(Math.round(warmupMs * 1e6));
  const deadline = warmEnd + BigInt(Math.round(durationMs * 1e6));

  async function worker(i) {
    const lock = redisson.getLock(`${prefix}:${i}`, `bench-worker-${i}`);
    for (;;) {
      const started = process.hrtime.bigint();
      if (started >= deadline) return;
      await lock.lock(leaseMs);
      const acquired = process.hrtime.bigint();
      await lock.unlock();
      if (started >= warmEnd && process.hrtime.bigint() <= deadline) {
        latencies.push(Number(acquired - started) / 1000);
        pairs++;
      }
    }
  }

  await Promise.all(Array.from({ length: tasks }, (_, i) => worker(i)));
  latencies.sort((a, b) => a - b);
  process.stdout.write(
    JSON.stringify({
      pairs_per_s: pairs / (durationMs / 1000),
      p50_us: quantile(latencies, 0.5),
      p99_us: quantile(latencies, 0.99),
      pairs,
    }) + '\n',
  );
  await redisson.quit();
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`bench.js: ${(e && e.stack) || e}\n`);
    process.exit(1);
  },
);
