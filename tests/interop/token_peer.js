#!/usr/bin/env node
// A node `redlock` (v4.2.0, mike-marcacci/node-redlock) peer for ferrisson's token-lock interop
// tests (tests/it/support/token_peers.rs, `NodeRedlockPeer`).
//
// Usage: node token_peer.js <redis-url> [<redis-url> ...]
//
// One ioredis client per URL, one Redlock over all of them (quorum floor(n/2)+1). Driven like
// peer.js: every stdin line is one JSON command with a numeric "id"; every reply is one flat JSON
// line on stdout with the same "id" and "t" (epoch ms when the operation finished). Commands run
// concurrently, so replies may come out of order. Errors never end the process: they come back as
// {"ok":false,"error":"<message>","class":"<error name>"}.
//
//   {"id":1,"op":"lock","resource":"r","ttl_ms":10000,
//    "retry_count":0,"retry_delay_ms":50,"retry_jitter_ms":10,"drift_factor":0.01}
//       (the four settings are optional; absent: redlock's defaults 10, 200, 100, 0.01)
//       -> {"id":1,"ok":true,"acquired":true,"handle":1,"value":"<32 hex>","expiration":<ms>,
//           "attempts":1}
//       -> {"id":1,"ok":true,"acquired":false,"class":"LockError","error":"Exceeded 0 attempts ..."}
//   {"id":2,"op":"unlock","handle":1}
//       -> {"id":2,"ok":true,"released":true}
//       -> {"id":2,"ok":true,"released":false,"class":"LockError","error":"Unable to fully release ..."}
//   {"id":3,"op":"extend","handle":1,"ttl_ms":10000}
//       -> {"id":3,"ok":true,"extended":true,"value":"...","expiration":<ms>}
//       -> {"id":3,"ok":true,"extended":false,"class":"LockError","error":"..."}
//          (v4: a failed extend attempt deletes the lock where the value matches)
//   {"id":4,"op":"get","resource":"r","server_index":0}   raw GET on one server (default 0)
//       -> {"id":4,"ok":true,"value":"<string>"|null}
//   {"id":5,"op":"quit"}  -> {"id":5,"ok":true}, then the process exits
//
// Settings: a Redlock's retryCount/retryDelay/retryJitter/driftFactor are fixed at construction
// (and v4's per-call overrides use `||`, so 0 cannot override), so the peer keeps one Redlock per
// distinct combination, all over the same clients. A lock object keeps its Redlock: its unlock
// and extend use the settings it was acquired with.
//
// Once every client is connected (or has failed its first attempt) the process prints
// {"event":"ready","servers":<n>,"connected":<k>,"redlock":"4.2.0","pid":<pid>}.
// Clients do not queue commands while disconnected (enableOfflineQueue: false), so a command to
// a stopped server fails at once (a vote against) instead of waiting for it to come back.
'use strict';

const readline = require('node:readline');
const Redis = require('ioredis');
const Redlock = require('redlock');

const urls = process.argv.slice(2);
if (urls.length === 0) {
  process.stderr.write('usage: node token_peer.js <redis-url> [<redis-url> ...]\n');
  process.exit(2);
}

const CONNECTION_NAME = `redlock-peer-${process.pid}`;
// Bounds a command to a server that hangs (stopped process): it then counts as a vote against.
const COMMAND_TIMEOUT_MS = 2000;

const clients = urls.map((url) => {
  const client = new Redis(url, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    commandTimeout: COMMAND_TIMEOUT_MS,
    connectionName: CONNECTION_NAME,
  });
  // Without a listener ioredis prints every connection error; the stopped-server tests make many.
  client.on('error', () => {});
  return client;
});

function emit(obj) {
  process.stdout.write(JSON.stringify({ ...obj, t: Date.now() }) + '\n');
}

const redlocks = new Map();
function redlockFor(cmd) {
  const options = {};
  if (cmd.retry_count !== undefined && cmd.retry_count !== null) {
    options.retryCount = int(cmd, 'retry_count', -1);
  }
  if (cmd.retry_delay_ms !== undefined && cmd.retry_delay_ms !== null) {
    options.retryDelay = int(cmd, 'retry_delay_ms', 0);
  }
  if (cmd.retry_jitter_ms !== undefined && cmd.retry_jitter_ms !== null) {
    options.retryJitter = int(cmd, 'retry_jitter_ms', 0);
  }
  if (cmd.drift_factor !== undefined && cmd.drift_factor !== null) {
    const v = cmd.drift_factor;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new Error('field "drift_factor" must be a non-negative number');
    }
    options.driftFactor = v;
  }
  const key = JSON.stringify([
    options.retryCount,
    options.retryDelay,
    options.retryJitter,
    options.driftFactor,
  ]);
  let redlock = redlocks.get(key);
  if (!redlock) {
    redlock = new Redlock(clients, options);
    // Redlock emits each failed server call; nothing to do with it here.
    redlock.on('clientError', () => {});
    redlocks.set(key, redlock);
  }
  return redlock;
}

let nextHandle = 1;
const locks = new Map();

function str(cmd, field) {
  const v = cmd[field];
  if (typeof v !== 'string' || v.length === 0) {
    throw new Error(`field "${field}" must be a non-empty string`);
  }
  return v;
}

function int(cmd, field, min) {
  const v = cmd[field];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) {
    throw new Error(`field "${field}" must be an integer >= ${min}`);
  }
  return v;
}

function lockOf(cmd) {
  const handle = int(cmd, 'handle', 1);
  const lock = locks.get(handle);
  if (!lock) throw new Error(`unknown handle ${handle}`);
  return lock;
}

function refused(e) {
  return e instanceof Redlock.LockError;
}

function describe(e) {
  return {
    class: String((e && e.name) || 'Error'),
    error: String((e && e.message) || e),
  };
}

const ops = {
  async lock(cmd) {
    const resource = str(cmd, 'resource');
    const ttl = int(cmd, 'ttl_ms', 1);
    const redlock = redlockFor(cmd);
    try {
      const lock = await redlock.lock(resource, ttl);
      const handle = nextHandle++;
      locks.set(handle, lock);
      return {
        acquired: true,
        handle,
        value: lock.value,
        expiration: lock.expiration,
        attempts: lock.attempts,
      };
    } catch (e) {
      if (!refused(e)) throw e;
      return { acquired: false, ...describe(e) };
    }
  },
  async unlock(cmd) {
    const lock = lockOf(cmd);
    try {
      await lock.unlock();
      return { released: true };
    } catch (e) {
      if (!refused(e)) throw e;
      return { released: false, ...describe(e) };
    }
  },
  async extend(cmd) {
    const lock = lockOf(cmd);
    const ttl = int(cmd, 'ttl_ms', 1);
    try {
      await lock.extend(ttl);
      return { extended: true, value: lock.value, expiration: lock.expiration };
    } catch (e) {
      if (!refused(e)) throw e;
      return { extended: false, value: lock.value, expiration: lock.expiration, ...describe(e) };
    }
  },
  async get(cmd) {
    const resource = str(cmd, 'resource');
    const index = cmd.server_index === undefined || cmd.server_index === null
      ? 0
      : int(cmd, 'server_index', 0);
    if (index >= clients.length) {
      throw new Error(`server_index ${index} out of range (${clients.length} servers)`);
    }
    const value = await clients[index].get(resource);
    return { value: value === undefined ? null : value };
  },
  async quit() {
    setTimeout(shutdown, 10);
    return {};
  },
};

async function handle(line) {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    emit({ id: null, ok: false, class: 'SyntaxError', error: `bad JSON: ${e.message}` });
    return;
  }
  const id = cmd.id ?? null;
  const op = Object.prototype.hasOwnProperty.call(ops, cmd.op) ? ops[cmd.op] : undefined;
  if (!op) {
    emit({ id, ok: false, class: 'Error', error: `unknown op ${JSON.stringify(cmd.op)}` });
    return;
  }
  try {
    const result = await op(cmd);
    emit({ id, ok: true, ...result });
  } catch (e) {
    emit({ id, ok: false, ...describe(e) });
  }
}

function shutdown() {
  for (const client of clients) client.disconnect();
  process.exit(0);
}

// Resolves true once the client is ready, false at its first connection error (the server is
// down: the client keeps reconnecting in the background).
function settled(client) {
  if (client.status === 'ready') return Promise.resolve(true);
  return new Promise((resolve) => {
    client.once('ready', () => resolve(true));
    client.once('error', () => resolve(false));
    client.once('end', () => resolve(false));
  });
}

Promise.all(clients.map(settled)).then((states) => {
  emit({
    event: 'ready',
    servers: clients.length,
    connected: states.filter(Boolean).length,
    redlock: require('redlock/package.json').version,
    pid: process.pid,
  });
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  rl.on('line', (line) => {
    if (line.trim().length > 0) handle(line);
  });
  // The test process went away: do not linger.
  rl.on('close', shutdown);
});
