#!/usr/bin/env python3
"""A redis-py `redis.lock.Lock` peer for ferrisson's token-lock interop tests
(tests/it/support/token_peers.rs, `PyLockPeer`).

Usage: python3 token_peer.py <redis-url>

The Rust driver runs it with PYTHONPATH naming the pinned redis-py wheel (and async-timeout,
which redis-py imports on Python < 3.11.3), fetched with `pip download` into target/py-peers.

One `redis.Redis` client (a thread-safe connection pool). Driven like tests/interop/peer.js:
every stdin line is one JSON command with a numeric "id"; every reply is one flat JSON line on
stdout with the same "id" and "t" (epoch ms when the operation finished). Each command runs on
a thread of its own (a blocking acquire does not hold up the others), so replies may come out of
order. Lock objects are made with thread_local=False, as different threads use one object.

Errors never end the process. An exception comes back as "error" (its class name, e.g.
"LockNotOwnedError", "LockError", "ConnectionError") and "message": exceptions of the redis-py
lock family (LockError and subclasses) in an ok:true reply whose outcome field is false, any
other exception (and a bad command or unknown handle) as ok:false.

  {"id":1,"op":"acquire","name":"n","timeout_s":10.0,"blocking":false,
   "blocking_timeout_s":null,"sleep_s":0.1,"token":null}
      timeout_s null: no TTL (redis-py's default); sleep_s, blocking_timeout_s, token optional
      -> {"id":1,"ok":true,"acquired":true,"handle":1,"token":"<32 hex>"}
      -> {"id":1,"ok":true,"acquired":false,"handle":1,"token":null}
  {"id":2,"op":"release","handle":1}
      -> {"id":2,"ok":true,"released":true}
      -> {"id":2,"ok":true,"released":false,"error":"LockNotOwnedError","message":"..."}
  {"id":3,"op":"extend","handle":1,"additional_s":5.0,"replace_ttl":false}
      -> {"id":3,"ok":true,"extended":true} | {..."extended":false,"error":...,"message":...}
  {"id":4,"op":"reacquire","handle":1}
      -> {"id":4,"ok":true,"reacquired":true} | {..."reacquired":false,"error":...,"message":...}
  {"id":5,"op":"owned","handle":1}      -> {"id":5,"ok":true,"owned":true}
  {"id":6,"op":"locked","name":"n"}     -> {"id":6,"ok":true,"locked":true}
  {"id":7,"op":"quit"}                  -> {"id":7,"ok":true}, then the process exits

Once the client answers PING the process prints
{"event":"ready","redis_py":"<version>","python":"<version>","pid":<pid>}.
"""

import json
import os
import platform
import sys
import threading
import time

try:
    import redis
    from redis.exceptions import LockError
except ImportError as e:  # the driver reports this line
    sys.stdout.write(
        json.dumps({"event": "error", "error": "cannot import redis-py: %s" % e}) + "\n"
    )
    sys.stdout.flush()
    sys.exit(1)

_out = threading.Lock()


def emit(obj):
    obj = dict(obj)
    obj["t"] = int(time.time() * 1000)
    line = json.dumps(obj) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def text(value):
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


class BadCommand(Exception):
    pass


def field(cmd, name, kind, optional=False):
    value = cmd.get(name)
    if value is None:
        if optional:
            return None
        raise BadCommand('field "%s" is required' % name)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise BadCommand('field "%s" must be a non-negative number' % name)
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadCommand('field "%s" must be a positive integer' % name)
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise BadCommand('field "%s" must be a boolean' % name)
        return value
    if not isinstance(value, str) or not value:
        raise BadCommand('field "%s" must be a non-empty string' % name)
    return value


url = sys.argv[1] if len(sys.argv) > 1 else None
if not url:
    sys.stderr.write("usage: python3 token_peer.py <redis-url>\n")
    sys.exit(2)

client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

_locks = {}
_locks_guard = threading.Lock()
_next_handle = [1]


def new_handle(lock):
    with _locks_guard:
        handle = _next_handle[0]
        _next_handle[0] += 1
        _locks[handle] = lock
    return handle


def lock_of(cmd):
    handle = field(cmd, "handle", int)
    with _locks_guard:
        lock = _locks.get(handle)
    if lock is None:
        raise BadCommand("unknown handle %d" % handle)
    return lock


def refusal(outcome, e):
    return {outcome: False, "error": type(e).__name__, "message": str(e)}


def op_acquire(cmd):
    name = field(cmd, "name", str)
    timeout = field(cmd, "timeout_s", float, optional=True)
    blocking = field(cmd, "blocking", bool)
    blocking_timeout = field(cmd, "blocking_timeout_s", float, optional=True)
    sleep = field(cmd, "sleep_s", float, optional=True)
    token = field(cmd, "token", str, optional=True)
    kwargs = {"timeout": timeout, "blocking": blocking, "thread_local": False}
    if sleep is not None:
        kwargs["sleep"] = sleep
    if blocking_timeout is not None:
        kwargs["blocking_timeout"] = blocking_timeout
    lock = client.lock(name, **kwargs)
    handle = new_handle(lock)
    acquired = lock.acquire(token=token)
    return {
        "acquired": bool(acquired),
        "handle": handle,
        "token": text(lock.local.token) if acquired else None,
    }


def op_release(cmd):
    lock = lock_of(cmd)
    try:
        lock.release()
    except LockError as e:
        return refusal("released", e)
    return {"released": True}


def op_extend(cmd):
    lock = lock_of(cmd)
    additional = field(cmd, "additional_s", float)
    replace_ttl = field(cmd, "replace_ttl", bool, optional=True) or False
    try:
        lock.extend(additional, replace_ttl=replace_ttl)
    except LockError as e:
        return refusal("extended", e)
    return {"extended": True}


def op_reacquire(cmd):
    lock = lock_of(cmd)
    try:
        lock.reacquire()
    except LockError as e:
        return refusal("reacquired", e)
    return {"reacquired": True}


def op_owned(cmd):
    return {"owned": bool(lock_of(cmd).owned())}


def op_locked(cmd):
    return {"locked": bool(client.lock(field(cmd, "name", str), thread_local=False).locked())}


def op_quit(cmd):
    def stop():
        time.sleep(0.01)
        os._exit(0)

    threading.Thread(target=stop, daemon=True).start()
    return {}


OPS = {
    "acquire": op_acquire,
    "release": op_release,
    "extend": op_extend,
    "reacquire": op_reacquire,
    "owned": op_owned,
    "locked": op_locked,
    "quit": op_quit,
}


def run(cmd):
    cid = cmd.get("id")
    op = OPS.get(cmd.get("op"))
    if op is None:
        emit({"id": cid, "ok": False, "error": "BadCommand",
              "message": "unknown op %s" % json.dumps(cmd.get("op"))})
        return
    try:
        reply = op(cmd)
    except Exception as e:  # noqa: BLE001 - every error goes back to the driver
        emit({"id": cid, "ok": False, "error": type(e).__name__, "message": str(e)})
        return
    reply = dict(reply)
    reply["id"] = cid
    reply["ok"] = True
    emit(reply)


def handle(line):
    try:
        cmd = json.loads(line)
        if not isinstance(cmd, dict):
            raise ValueError("not an object")
    except ValueError as e:
        emit({"id": None, "ok": False, "error": "BadCommand", "message": "bad JSON: %s" % e})
        return
    threading.Thread(target=run, args=(cmd,), daemon=True).start()


def main():
    try:
        client.ping()
    except Exception as e:  # noqa: BLE001
        emit({"event": "error", "error": "%s: %s" % (type(e).__name__, e)})
        sys.exit(1)
    emit({
        "event": "ready",
        "redis_py": redis.__version__,
        "python": platform.python_version(),
        "pid": os.getpid(),
    })
    while True:
        line = sys.stdin.readline()
        if not line:
            break  # the test process went away: do not linger
        if line.strip():
            handle(line)
    os._exit(0)


main()
