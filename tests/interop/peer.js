#!/usr/bin/env node
// A node-redisson peer process for ferrisson's interop tests (tests/it/interop_node.rs).
//
// Usage: node peer.js <redis-url> [watchdog-ms]   (redis:// or redis-cluster://)
//
// The process connects one node-redisson client (one Redisson id, with its own command and
// subscriber connections) and is then driven line by line: every stdin line is one JSON command
// with a numeric "id", and every reply is one JSON line on stdout with the same "id". Commands run
// concurrently (a blocked `lock` does not hold up the others), so replies may come out of order.
// Every reply carries "t", the epoch milliseconds when the operation finished.
//
// Replies are flat JSON objects (string, number, boolean or null values only).
//
//   {"id":1,"op":"lock","name":"n","owner":"1","lease_ms":20000}   lease_ms omitted: watchdog
//       -> {"id":1,"ok":true,"t":...}                                when acquired
//   {"id":2,"op":"try_lock","name":"n","owner":"1","wait_ms":0,"lease_ms":20000}
//       -> {"id":2,"ok":true,"acquired":false,"t":...}
//   {"id":3,"op":"unlock","name":"n","owner":"1"}
//       -> {"id":3,"ok":true,"t":...} or {"id":3,"ok":false,"error":"...","t":...}
//   {"id":4,"op":"force_unlock","name":"n"}        -> {"id":4,"ok":true,"result":true,"t":...}
//   {"id":5,"op":"is_locked","name":"n"}           -> {"id":5,"ok":true,"locked":true,"t":...}
//   {"id":6,"op":"contend","name":"n","owner":"1","iterations":30,"hold_ms":2,"gap_ms":2,
//    "log_key":"k","tag":"node"}
//       -> loops lock / RPUSH k "<tag>:in" / sleep hold_ms / RPUSH k "<tag>:out" / unlock /
//          sleep gap_ms, then {"id":6,"ok":true,"done":30,"t":...}
//   {"id":7,"op":"quit"}                           -> {"id":7,"ok":true,...}, then the process exits
//
// Once both connections are ready the process prints
// {"event":"ready","client_id":"<uuid>","connection_name":"node-redisson-peer-<pid>",...};
// both of its Redis connections carry that CLIENT SETNAME name.
// The holder field node-redisson writes is "<client_id>:<owner>" (owner = its per-lock clientId).
//
// Owners: node-redisson's identity is the lock object's `clientId` (a string, by default a random
// UUID per getLock call). The peer passes the command's "owner" as that clientId and caches one
// lock object per (name, owner), so "owner" plays the role of a Java thread id.
'use strict';

const readline = require('node:readline');
const { Redisson } = require('node-redisson');

const url = process.argv[2];
if (!url) {
  process.stderr.write('usage: node peer.js <redis-url> [watchdog-ms]\n');
  process.exit(2);
}
const watchdogMs = process.argv[3] ? BigInt(process.argv[3]) : 30000n;

const CONNECTION_NAME = `node-redisson-peer-${process.pid}`;

function redisOptions(redisUrl) {
  const u = new URL(redisUrl);
  const options = {
    host: u.hostname || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    // Fail commands rather than queue them forever if the server goes away.
    maxRetriesPerRequest: 1,
    // Lets the tests find this peer's connections in CLIENT LIST (e.g. whether its subscriber
    // connection is parked on a channel).
    connectionName: CONNECTION_NAME,
  };
  if (u.username) options.username = decodeURIComponent(u.username);
  if (u.password) options.password = decodeURIComponent(u.password);
  const db = u.pathname.replace(/^\//, '');
  if (db) options.db = Number(db);
  return options;
}

// `redis-cluster://host:port?node=host:port&...` (fred's form): an ioredis Cluster over those
// nodes, as node-redisson supports. node-redisson publishes and subscribes classically there,
// like Java Redisson before 3.22.
function redisConfig(redisUrl) {
  const u = new URL(redisUrl);
  if (u.protocol !== 'redis-cluster:') {
    return { options: redisOptions(redisUrl) };
  }
  const clusters = [{ host: u.hostname || '127.0.0.1', port: Number(u.port || 6379) }];
  for (const node of u.searchParams.getAll('node')) {
    const [host, port] = node.split(':');
    clusters.push({ host, port: Number(port) });
  }
  return {
    clusters,
    options: { redisOptions: { maxRetriesPerRequest: 1, connectionName: CONNECTION_NAME } },
  };
}

const redisson = new Redisson({
  redis: redisConfig(url),
  lockWatchdogTimeout: watchdogMs,
});
const executor = redisson.commandExecutor;

// Workaround for a node-redisson 1.0.4 bug (docs/compatibility.md, "Interop tests with
// node-redisson", item 3): PubSubCommandExecutor.subscribeOnce registers the one-shot listener
// only after the SUBSCRIBE reply has been processed. A message that arrives in the same socket
// read as that reply is emitted before the listener exists and is lost; the waiter then sleeps
// for the holder's whole lease. The tests release only once the server reports the peer
// subscribed, so registering the listener first closes the window. Nothing else is patched.
if (
  typeof executor.subscribeOnce !== 'function' ||
  !executor.eventEmitter ||
  typeof executor.subscribeRedis.subscribe !== 'function'
) {
  throw new Error('node-redisson internals changed: revisit the subscribeOnce workaround in peer.js');
}
executor.subscribeOnce = async function subscribeOnce(eventName, listener) {
  this.eventEmitter.once(eventName, listener);
  await this.subscribeRedis.subscribe(eventName);
};

function emit(obj) {
  process.stdout.write(JSON.stringify({ ...obj, t: Date.now() }) + '\n');
}

const locks = new Map();
function lockOf(name, owner) {
  const key = `${name}\u0000${owner}`;
  let lock = locks.get(key);
  if (!lock) {
    lock = redisson.getLock(name, owner);
    locks.set(key, lock);
  }
  return lock;
}

function str(cmd, field) {
  const v = cmd[field];
  if (typeof v !== 'string' || v.length === 0) {
    throw new Error(`field "${field}" must be a non-empty string`);
  }
  return v;
}

function num(cmd, field) {
  const v = cmd[field];
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new Error(`field "${field}" must be a non-negative number`);
  }
  return v;
}

// node-redisson: a lease of `true` (or <= 0) means "no lease, use the watchdog".
function leaseOf(cmd) {
  return cmd.lease_ms === undefined || cmd.lease_ms === null ? true : num(cmd, 'lease_ms');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const ops = {
  async lock(cmd) {
    await lockOf(str(cmd, 'name'), str(cmd, 'owner')).lock(leaseOf(cmd));
    return {};
  },
  async try_lock(cmd) {
    const acquired = await lockOf(str(cmd, 'name'), str(cmd, 'owner')).tryLock(
      num(cmd, 'wait_ms'),
      leaseOf(cmd),
    );
    return { acquired };
  },
  async unlock(cmd) {
    await lockOf(str(cmd, 'name'), str(cmd, 'owner')).unlock();
    return {};
  },
  async force_unlock(cmd) {
    // Any lock object works: force unlock ignores ownership.
    const result = await lockOf(str(cmd, 'name'), 'force-unlock').forceUnlock();
    return { result };
  },
  async is_locked(cmd) {
    const locked = await lockOf(str(cmd, 'name'), 'query').isLocked();
    return { locked };
  },
  async contend(cmd) {
    const lock = lockOf(str(cmd, 'name'), str(cmd, 'owner'));
    const logKey = str(cmd, 'log_key');
    const tag = str(cmd, 'tag');
    const iterations = num(cmd, 'iterations');
    const holdMs = num(cmd, 'hold_ms');
    const gapMs = num(cmd, 'gap_ms');
    const lease = leaseOf(cmd);
    let done = 0;
    for (let i = 0; i < iterations; i++) {
      await lock.lock(lease);
      await redisson.redis.rpush(logKey, `${tag}:in`);
      if (holdMs > 0) await sleep(holdMs);
      await redisson.redis.rpush(logKey, `${tag}:out`);
      await lock.unlock();
      done++;
      if (gapMs > 0) await sleep(gapMs);
    }
    return { done };
  },
  async quit() {
    await redisson.quit();
    setTimeout(() => process.exit(0), 10);
    return {};
  },
};

async function handle(line) {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    emit({ id: null, ok: false, error: `bad JSON: ${e.message}` });
    return;
  }
  const id = cmd.id ?? null;
  const op = ops[cmd.op];
  if (!op) {
    emit({ id, ok: false, error: `unknown op ${JSON.stringify(cmd.op)}` });
    return;
  }
  try {
    const result = await op(cmd);
    emit({ id, ok: true, ...result });
  } catch (e) {
    emit({ id, ok: false, error: String((e && e.message) || e) });
  }
}

function whenReady(redis) {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    redis.once('ready', resolve);
    redis.once('end', () => reject(new Error('redis connection ended before ready')));
  });
}

Promise.all([whenReady(executor.redis), whenReady(executor.subscribeRedis)]).then(
  () => {
    emit({
      event: 'ready',
      client_id: executor.id,
      connection_name: CONNECTION_NAME,
      watchdog_ms: Number(watchdogMs),
    });
    const rl = readline.createInterface({ input: process.stdin, terminal: false });
    rl.on('line', (line) => {
      if (line.trim().length > 0) handle(line);
    });
    // The test process went away: do not linger.
    rl.on('close', () => {
      redisson.quit().finally(() => process.exit(0));
    });
  },
  (e) => {
    emit({ event: 'error', error: String((e && e.message) || e) });
    process.exit(1);
  },
);
