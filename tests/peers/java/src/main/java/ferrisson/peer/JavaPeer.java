package ferrisson.peer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.json.JSONArray;
import org.json.JSONObject;
import org.redisson.Redisson;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.BaseMasterSlaveServersConfig;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;
import org.redisson.config.SentinelServersConfig;
import org.redisson.config.SingleServerConfig;

/**
 * A Java Redisson peer for ferrisson's cross-language tests, driven by JSON lines.
 *
 * <pre>
 * java -cp CLASSPATH ferrisson.peer.JavaPeer [--cluster | --sentinel MASTER] [--set KEY=VALUE]... URL [URL...]
 * </pre>
 *
 * One Redisson client per URL (with {@code --cluster}, one client over all the URLs as cluster
 * nodes; with {@code --sentinel MASTER}, one client over all the URLs as the sentinels that
 * monitor {@code MASTER}); the first is the one every command uses but the multi-lock ones, which take a lock of
 * the same name from each. {@code --set lockWatchdogTimeout=3000} calls {@code
 * Config.setLockWatchdogTimeout(3000)}: any setter of {@code Config}, or else of the servers'
 * config ({@code retryAttempts}), that takes one number or boolean, so that keys of later
 * versions are set by name.
 *
 * <p>When its clients are connected it prints {@code {"event":"ready","client_ids":[...],...}}.
 * Then every stdin line is one command, {@code {"id":N,"op":"...",...}}, and every reply one line
 * on stdout with the same id, {@code "ok"}, {@code "t"} (epoch ms when it finished) and the
 * op's fields; a failure has {@code "ok":false}, {@code "error"} and {@code "error_class"} (the
 * simple name of the exception's root cause, e.g. {@code IllegalMonitorStateException}) and
 * {@code "causes"} (the causes beneath it, {@code "Class: message"} each).
 * Commands run concurrently, so replies may come out of order.
 *
 * <p>Owners: a command with an {@code "owner"} runs on that owner's own platform thread (one
 * per owner, made on first use), so Redisson's synchronous API runs as in a Java service and
 * the holder field is {@code <client id>:<that thread's id>}; every such reply carries {@code
 * "thread_id"}. With {@code "api":"async"} and {@code "thread_id":T} the lock commands use the
 * async API with that explicit thread id instead, on a shared pool.
 *
 * <p>Lock kinds ({@code "kind"}, default {@code lock}): lock, fair, spin, read, write, fenced
 * (3.19+), nonreentrant and nonreentrant_fair (4.4+). Ops: lock, try_lock, unlock,
 * force_unlock, is_locked, hold_count, held, remain_ttl, lock_token, try_lock_token, get_token,
 * sem_set, sem_acquire, sem_release, sem_available, sem_add, pes_set, pes_acquire, pes_release,
 * pes_available, latch_set, latch_count_down, latch_await, latch_count, multi_lock,
 * multi_try_lock, multi_unlock, contend, bench_uncontended, bench_hot, bench_alternate
 * ({@link Bench}), thread_id, quit. A missing {@code wait_ms} means the
 * untimed call ({@code lock()}, {@code acquire()}, {@code await()}); a missing {@code lease_ms}
 * means the watchdog (locks) or no lease (permits).
 *
 * <p>Logs go to stderr (slf4j-simple); stdout carries the JSON lines only.
 */
public final class JavaPeer {
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);
    private static final Map<String, ExecutorService> OWNERS = new ConcurrentHashMap<>();
    private static final Map<String, Long> OWNER_THREADS = new ConcurrentHashMap<>();
    private static final ExecutorService SHARED = Executors.newCachedThreadPool(daemon("peer-shared"));
    private static final List<RedissonClient> CLIENTS = new ArrayList<>();

    private JavaPeer() {}

    public static void main(String[] args) throws Exception {
        // Anything a library prints on System.out would break the JSON stream: send it to stderr.
        System.setOut(System.err);
        boolean cluster = false;
        String sentinelMaster = null;
        List<String> settings = new ArrayList<>();
        List<String> urls = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--cluster" -> cluster = true;
                case "--sentinel" -> sentinelMaster = args[++i];
                case "--set" -> settings.add(args[++i]);
                default -> urls.add(args[i]);
            }
        }
        if (urls.isEmpty()) {
            System.err.println(
                    "usage: JavaPeer [--cluster | --sentinel MASTER] [--set KEY=VALUE]... URL [URL...]");
            System.exit(2);
        }
        try {
            if (cluster || sentinelMaster != null) {
                CLIENTS.add(connect(urls, cluster, sentinelMaster, settings));
            } else {
                for (String url : urls) {
                    CLIENTS.add(connect(List.of(url), false, null, settings));
                }
            }
        } catch (Throwable e) {
            JSONObject event = new JSONObject();
            event.put("event", "error");
            event.put("error", String.valueOf(rootCause(e)));
            emit(event);
            System.exit(1);
        }
        JSONObject ready = new JSONObject();
        ready.put("event", "ready");
        ready.put("version", version());
        ready.put("pid", ProcessHandle.current().pid());
        JSONArray ids = new JSONArray();
        for (RedissonClient client : CLIENTS) {
            ids.put(client.getId());
        }
        ready.put("client_ids", ids);
        ready.put("client_id", CLIENTS.get(0).getId());
        emit(ready);

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isBlank()) {
                dispatch(line);
            }
        }
        // The test went away: do not linger.
        quit();
    }

    /** One client: over cluster nodes, over the sentinels of {@code sentinelMaster}, or on one server. */
    private static RedissonClient connect(
            List<String> urls, boolean cluster, String sentinelMaster, List<String> settings) throws Exception {
        Config config = new Config();
        config.setCodec(StringCodec.INSTANCE);
        config.setThreads(4);
        config.setNettyThreads(8);
        Object serversConfig;
        if (cluster) {
            ClusterServersConfig servers = config.useClusterServers();
            serversConfig = servers;
            for (String url : urls) {
                servers.addNodeAddress(url);
            }
            smallPools(servers);
            servers.setScanInterval(1000);
        } else if (sentinelMaster != null) {
            SentinelServersConfig servers = config.useSentinelServers().setMasterName(sentinelMaster);
            serversConfig = servers;
            for (String url : urls) {
                servers.addSentinelAddress(url);
            }
            smallPools(servers);
            servers.setScanInterval(1000);
        } else {
            SingleServerConfig server = config.useSingleServer().setAddress(urls.get(0));
            serversConfig = server;
            server.setConnectionPoolSize(8);
            server.setConnectionMinimumIdleSize(1);
            server.setSubscriptionConnectionPoolSize(4);
            server.setSubscriptionConnectionMinimumIdleSize(1);
            server.setRetryAttempts(1);
            server.setTimeout(3000);
        }
        for (String setting : settings) {
            int eq = setting.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--set needs KEY=VALUE, got " + setting);
            }
            String key = setting.substring(0, eq);
            String value = setting.substring(eq + 1);
            if (!set(config, key, value) && !set(serversConfig, key, value)) {
                throw new IllegalArgumentException("this Redisson (" + version() + ") has no Config or "
                        + serversConfig.getClass().getSimpleName() + " setter for " + key
                        + " taking a number or boolean");
            }
        }
        return Redisson.create(config);
    }

    /** A small pool of each kind: the peer's commands are few at a time. */
    private static void smallPools(BaseMasterSlaveServersConfig<?> servers) {
        servers.setMasterConnectionPoolSize(8);
        servers.setMasterConnectionMinimumIdleSize(1);
        servers.setSlaveConnectionPoolSize(2);
        servers.setSlaveConnectionMinimumIdleSize(1);
        servers.setSubscriptionConnectionPoolSize(4);
        servers.setSubscriptionConnectionMinimumIdleSize(1);
    }

    /**
     * Calls {@code target.setKey(value)} with the one-argument setter of that name taking a number
     * or boolean: whether there is one.
     */
    private static boolean set(Object target, String key, String value) throws Exception {
        String setter = "set" + Character.toUpperCase(key.charAt(0)) + key.substring(1);
        for (Method m : target.getClass().getMethods()) {
            if (!m.getName().equals(setter) || m.getParameterCount() != 1) {
                continue;
            }
            Class<?> type = m.getParameterTypes()[0];
            Object arg;
            if (type == long.class || type == Long.class) {
                arg = Long.parseLong(value);
            } else if (type == int.class || type == Integer.class) {
                arg = Integer.parseInt(value);
            } else if (type == boolean.class || type == Boolean.class) {
                arg = Boolean.parseBoolean(value);
            } else {
                continue;
            }
            m.invoke(target, arg);
            return true;
        }
        return false;
    }

    private static String version() {
        String v = Redisson.class.getPackage().getImplementationVersion();
        return v != null ? v : System.getProperty("redisson.version", "unknown");
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }

    private static void dispatch(String line) {
        JSONObject cmd;
        try {
            cmd = new JSONObject(line);
        } catch (Exception e) {
            JSONObject reply = new JSONObject();
            reply.put("id", JSONObject.NULL);
            reply.put("ok", false);
            reply.put("error", "bad JSON: " + e.getMessage());
            emit(reply);
            return;
        }
        String owner = cmd.optString("owner", "");
        boolean async = "async".equals(cmd.optString("api", ""));
        ExecutorService exec = owner.isEmpty() || async ? SHARED : ownerThread(owner);
        exec.execute(() -> run(cmd, owner, async));
    }

    private static ExecutorService ownerThread(String owner) {
        return OWNERS.computeIfAbsent(owner, o -> Executors.newSingleThreadExecutor(daemon("owner-" + o)));
    }

    private static void run(JSONObject cmd, String owner, boolean async) {
        JSONObject reply = new JSONObject();
        reply.put("id", cmd.has("id") ? cmd.get("id") : JSONObject.NULL);
        if (!owner.isEmpty() && !async) {
            long tid = Thread.currentThread().getId();
            OWNER_THREADS.put(owner, tid);
            reply.put("thread_id", tid);
        }
        try {
            op(cmd, reply, async);
            reply.put("ok", true);
        } catch (Throwable e) {
            Throwable cause = rootCause(e);
            reply.put("ok", false);
            reply.put("error", String.valueOf(cause.getMessage()));
            reply.put("error_class", cause.getClass().getSimpleName());
            // What a wrapping exception (Redisson's "Unexpected exception while processing
            // command") hides: every cause below it.
            JSONArray chain = new JSONArray();
            for (Throwable c = cause.getCause(); c != null && chain.length() < 8; c = c.getCause()) {
                chain.put(c.getClass().getSimpleName() + ": " + c.getMessage());
            }
            reply.put("causes", chain);
        }
        emit(reply);
    }

    private static Throwable rootCause(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof InvocationTargetException
                        || e instanceof java.util.concurrent.CompletionException)
                && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    private static void emit(JSONObject obj) {
        obj.put("t", System.currentTimeMillis());
        String text = obj.toString();
        synchronized (OUT) {
            OUT.println(text);
        }
    }

    private static RedissonClient client() {
        return CLIENTS.get(0);
    }

    static String str(JSONObject cmd, String field) {
        if (!(cmd.opt(field) instanceof String v) || v.isEmpty()) {
            throw new IllegalArgumentException("field \"" + field + "\" must be a non-empty string");
        }
        return v;
    }

    /** A non-negative integer field, or {@code fallback} when absent or null. */
    static long num(JSONObject cmd, String field, long fallback) {
        if (!has(cmd, field)) {
            return fallback;
        }
        if (!(cmd.opt(field) instanceof Number n) || n.longValue() < 0) {
            throw new IllegalArgumentException("field \"" + field + "\" must be a non-negative integer");
        }
        return n.longValue();
    }

    private static boolean has(JSONObject cmd, String field) {
        Object v = cmd.opt(field);
        return v != null && v != JSONObject.NULL;
    }

    /** Calls a method that this version may lack (fenced and non-reentrant locks). */
    private static Object call(Object target, String method, Class<?>[] types, Object... args) throws Throwable {
        Method m;
        try {
            m = target.getClass().getMethod(method, types);
        } catch (NoSuchMethodException e) {
            throw new UnsupportedOperationException("Redisson " + version() + " has no " + method);
        }
        m.setAccessible(true);
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    private static RLock lockOf(JSONObject cmd) throws Throwable {
        String name = str(cmd, "name");
        RedissonClient r = client();
        String kind = cmd.optString("kind", "lock");
        return switch (kind) {
            case "lock" -> r.getLock(name);
            case "fair" -> r.getFairLock(name);
            case "spin" -> r.getSpinLock(name);
            case "read" -> r.getReadWriteLock(name).readLock();
            case "write" -> r.getReadWriteLock(name).writeLock();
            case "fenced" -> (RLock) call(r, "getFencedLock", new Class<?>[] {String.class}, name);
            case "nonreentrant" -> (RLock) call(r, "getNonReentrantLock", new Class<?>[] {String.class}, name);
            case "nonreentrant_fair" ->
                (RLock) call(r, "getNonReentrantFairLock", new Class<?>[] {String.class}, name);
            default -> throw new IllegalArgumentException("unknown kind " + kind);
        };
    }

    private static RLock multiLockOf(JSONObject cmd) {
        String name = str(cmd, "name");
        RLock[] parts = new RLock[CLIENTS.size()];
        for (int i = 0; i < parts.length; i++) {
            parts[i] = CLIENTS.get(i).getLock(name);
        }
        String mode = cmd.optString("mode", "multi");
        return switch (mode) {
            case "multi" -> client().getMultiLock(parts);
            case "red" -> client().getRedLock(parts);
            default -> throw new IllegalArgumentException("unknown multi-lock mode " + mode);
        };
    }

    private static <T> T await(Future<T> future) throws Exception {
        return future.get();
    }

    private static void op(JSONObject cmd, JSONObject reply, boolean async) throws Throwable {
        String op = cmd.optString("op", "");
        long lease = num(cmd, "lease_ms", -1);
        long tid = num(cmd, "thread_id", 0);
        switch (op) {
            case "lock" -> {
                RLock lock = lockOf(cmd);
                if (async) {
                    await(lock.lockAsync(lease, TimeUnit.MILLISECONDS, tid));
                } else if (lease > 0) {
                    lock.lock(lease, TimeUnit.MILLISECONDS);
                } else {
                    lock.lock();
                }
            }
            case "try_lock" -> {
                RLock lock = lockOf(cmd);
                boolean acquired;
                if (!has(cmd, "wait_ms")) {
                    acquired = async ? await(lock.tryLockAsync(tid)) : lock.tryLock();
                } else {
                    long wait = num(cmd, "wait_ms", 0);
                    acquired = async
                            ? await(lock.tryLockAsync(wait, lease, TimeUnit.MILLISECONDS, tid))
                            : lock.tryLock(wait, lease, TimeUnit.MILLISECONDS);
                }
                reply.put("acquired", acquired);
            }
            case "unlock" -> {
                RLock lock = lockOf(cmd);
                if (async) {
                    await(lock.unlockAsync(tid));
                } else {
                    lock.unlock();
                }
            }
            case "force_unlock" -> reply.put("result", lockOf(cmd).forceUnlock());
            case "is_locked" -> reply.put("locked", lockOf(cmd).isLocked());
            case "hold_count" -> reply.put("count", lockOf(cmd).getHoldCount());
            case "held" -> reply.put("held", lockOf(cmd).isHeldByCurrentThread());
            case "remain_ttl" -> reply.put("ttl_ms", lockOf(cmd).remainTimeToLive());
            case "lock_token" -> {
                Object lock = call(client(), "getFencedLock", new Class<?>[] {String.class}, str(cmd, "name"));
                Object token = lease > 0
                        ? call(lock, "lockAndGetToken", new Class<?>[] {long.class, TimeUnit.class}, lease,
                                TimeUnit.MILLISECONDS)
                        : call(lock, "lockAndGetToken", new Class<?>[] {});
                reply.put("token", (Long) token);
            }
            case "try_lock_token" -> {
                Object lock = call(client(), "getFencedLock", new Class<?>[] {String.class}, str(cmd, "name"));
                Object token = call(lock, "tryLockAndGetToken",
                        new Class<?>[] {long.class, long.class, TimeUnit.class}, num(cmd, "wait_ms", 0), lease,
                        TimeUnit.MILLISECONDS);
                if (token == null) {
                    reply.put("token", JSONObject.NULL);
                } else {
                    reply.put("token", (Long) token);
                }
            }
            case "get_token" -> {
                Object lock = call(client(), "getFencedLock", new Class<?>[] {String.class}, str(cmd, "name"));
                Object token = call(lock, "getToken", new Class<?>[] {});
                if (token == null) {
                    reply.put("token", JSONObject.NULL);
                } else {
                    reply.put("token", (Long) token);
                }
            }
            case "sem_set" -> reply.put("result", semaphore(cmd).trySetPermits((int) num(cmd, "permits", 0)));
            case "sem_acquire" -> {
                RSemaphore s = semaphore(cmd);
                int permits = (int) num(cmd, "permits", 1);
                if (has(cmd, "wait_ms")) {
                    reply.put("acquired", s.tryAcquire(permits, num(cmd, "wait_ms", 0), TimeUnit.MILLISECONDS));
                } else {
                    s.acquire(permits);
                    reply.put("acquired", true);
                }
            }
            case "sem_release" -> semaphore(cmd).release((int) num(cmd, "permits", 1));
            case "sem_available" -> reply.put("permits", semaphore(cmd).availablePermits());
            case "sem_add" -> semaphore(cmd).addPermits((int) num(cmd, "permits", 1));
            case "pes_set" -> reply.put("result", permits(cmd).trySetPermits((int) num(cmd, "permits", 0)));
            case "pes_acquire" -> {
                RPermitExpirableSemaphore s = permits(cmd);
                String id;
                if (has(cmd, "wait_ms")) {
                    long wait = num(cmd, "wait_ms", 0);
                    id = lease > 0
                            ? s.tryAcquire(wait, lease, TimeUnit.MILLISECONDS)
                            : s.tryAcquire(wait, TimeUnit.MILLISECONDS);
                } else {
                    id = lease > 0 ? s.acquire(lease, TimeUnit.MILLISECONDS) : s.acquire();
                }
                if (id == null) {
                    reply.put("permit_id", JSONObject.NULL);
                } else {
                    reply.put("permit_id", id);
                }
            }
            case "pes_release" -> reply.put("result", permits(cmd).tryRelease(str(cmd, "permit_id")));
            case "pes_available" -> reply.put("permits", permits(cmd).availablePermits());
            case "latch_set" -> reply.put("result", latch(cmd).trySetCount(num(cmd, "count", 0)));
            case "latch_count_down" -> latch(cmd).countDown();
            case "latch_count" -> reply.put("count", latch(cmd).getCount());
            case "latch_await" -> {
                RCountDownLatch l = latch(cmd);
                if (has(cmd, "wait_ms")) {
                    reply.put("done", l.await(num(cmd, "wait_ms", 0), TimeUnit.MILLISECONDS));
                } else {
                    l.await();
                    reply.put("done", true);
                }
            }
            case "multi_lock" -> {
                RLock lock = multiLockOf(cmd);
                if (lease > 0) {
                    lock.lock(lease, TimeUnit.MILLISECONDS);
                } else {
                    lock.lock();
                }
            }
            case "multi_try_lock" ->
                reply.put("acquired", multiLockOf(cmd).tryLock(num(cmd, "wait_ms", 0), lease, TimeUnit.MILLISECONDS));
            case "multi_unlock" -> multiLockOf(cmd).unlock();
            case "contend" -> reply.put("done", contend(cmd, lease));
            case "bench_uncontended" -> Bench.uncontended(client(), cmd, reply);
            case "bench_hot" -> Bench.hot(client(), cmd, reply);
            case "bench_alternate" -> reply.put("holds", Bench.alternate(lockOf(cmd), cmd));
            case "thread_id" -> {
                // The reply carries it (an owner's command).
            }
            case "quit" -> {
                // After this reply is out.
                SHARED.execute(() -> {
                    try {
                        Thread.sleep(50);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    quit();
                });
            }
            default -> throw new IllegalArgumentException("unknown op \"" + op + "\"");
        }
    }

    private static RSemaphore semaphore(JSONObject cmd) {
        return client().getSemaphore(str(cmd, "name"));
    }

    private static RPermitExpirableSemaphore permits(JSONObject cmd) {
        return client().getPermitExpirableSemaphore(str(cmd, "name"));
    }

    private static RCountDownLatch latch(JSONObject cmd) {
        return client().getCountDownLatch(str(cmd, "name"));
    }

    /**
     * Takes the lock {@code iterations} times (or until {@code duration_ms} has passed), each time
     * logging {@code <tag>:in} and {@code <tag>:out} with RPUSH to {@code log_key} around a hold
     * of {@code hold_ms}, then sleeping {@code gap_ms}. Returns how many holds it made.
     */
    private static long contend(JSONObject cmd, long lease) throws Throwable {
        RLock lock = lockOf(cmd);
        String logKey = str(cmd, "log_key");
        String tag = str(cmd, "tag");
        long iterations = num(cmd, "iterations", Long.MAX_VALUE);
        long until = has(cmd, "duration_ms") ? System.currentTimeMillis() + num(cmd, "duration_ms", 0) : Long.MAX_VALUE;
        long hold = num(cmd, "hold_ms", 0);
        long gap = num(cmd, "gap_ms", 0);
        var log = client().<String>getList(logKey);
        long done = 0;
        while (done < iterations && System.currentTimeMillis() < until) {
            if (lease > 0) {
                lock.lock(lease, TimeUnit.MILLISECONDS);
            } else {
                lock.lock();
            }
            try {
                log.add(tag + ":in");
                if (hold > 0) {
                    Thread.sleep(hold);
                }
                log.add(tag + ":out");
            } finally {
                lock.unlock();
            }
            done++;
            if (gap > 0) {
                Thread.sleep(gap);
            }
        }
        return done;
    }

    private static void quit() {
        for (RedissonClient client : CLIENTS) {
            try {
                client.shutdown(0, 2, TimeUnit.SECONDS);
            } catch (Throwable e) {
                // exiting anyway
            }
        }
        Runtime.getRuntime().halt(0);
    }
}
