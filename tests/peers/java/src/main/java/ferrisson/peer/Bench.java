package ferrisson.peer;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.json.JSONArray;
import org.json.JSONObject;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * The benchmark loops of Java Redisson's rows beside ferrisson's (benches/scenarios/java.rs),
 * each the same loop as ferrisson's own scenario, on platform threads: a service's
 * synchronous {@code RLock} calls.
 *
 * <ul>
 *   <li>{@code bench_uncontended}: {@code tasks} threads, each {@code lock()} and {@code unlock()}
 *       of its own lock {@code <prefix>:<i>} in a loop; pairs/s and acquire p50/p99 over the window
 *       after {@code warmup_ms}.
 *   <li>{@code bench_hot}: {@code tasks} threads on one lock {@code name}; acq/s, acquire p50,
 *       p99 and max, hand-off p50/p99 (release started by one thread → acquired by another), the
 *       fewest and most acquisitions of a thread.
 *   <li>{@code bench_alternate}: one owner takes {@code name} for {@code duration_ms}, holding
 *       it {@code hold_us} each time and pausing {@code gap_us} after each release so that a
 *       waiter of another side gets it: each hold's acquire and release instants in epoch µs,
 *       for the cross-language hand-off.
 * </ul>
 *
 * Every {@code lock()} takes the watchdog lease, as ferrisson's {@code lock()} does.
 */
final class Bench {
    private Bench() {}

    private static final class Recorder {
        long[] samples = new long[1 << 14];
        int count;

        void add(long micros) {
            if (count == samples.length) {
                samples = Arrays.copyOf(samples, count * 2);
            }
            samples[count++] = micros;
        }
    }

    /** The p-th percentile (0..100) of all samples in µs; 0 for none. */
    private static double percentile(List<Recorder> recorders, double p) {
        int total = recorders.stream().mapToInt(r -> r.count).sum();
        if (total == 0) {
            return 0;
        }
        long[] all = new long[total];
        int at = 0;
        for (Recorder r : recorders) {
            System.arraycopy(r.samples, 0, all, at, r.count);
            at += r.count;
        }
        Arrays.sort(all);
        int index = (int) Math.min(total - 1, Math.ceil(p / 100.0 * total) - 1);
        return all[Math.max(0, index)];
    }

    /** One task's loop, run on a platform thread of its own. */
    private interface Loop {
        void run(int task) throws Exception;
    }

    /** Runs {@code loop} for tasks 0..tasks-1 on a platform thread each; rethrows a failure. */
    private static void onThreads(String what, int tasks, Loop loop) throws Exception {
        Throwable[] failure = new Throwable[1];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < tasks; i++) {
            int task = i;
            Thread thread = new Thread(() -> {
                try {
                    loop.run(task);
                } catch (Throwable e) {
                    failure[0] = e;
                }
            }, what);
            thread.setDaemon(true);
            thread.start();
            threads.add(thread);
        }
        for (Thread t : threads) {
            t.join();
        }
        if (failure[0] != null) {
            throw new IllegalStateException(what + ": " + failure[0], failure[0]);
        }
    }

    static void uncontended(RedissonClient client, JSONObject cmd, JSONObject reply) throws Exception {
        int tasks = (int) JavaPeer.num(cmd, "tasks", 1);
        long warmup = JavaPeer.num(cmd, "warmup_ms", 0) * 1_000_000L;
        long duration = JavaPeer.num(cmd, "duration_ms", 1000) * 1_000_000L;
        String prefix = JavaPeer.str(cmd, "prefix");
        long start = System.nanoTime();
        long warmEnd = start + warmup;
        long deadline = warmEnd + duration;
        List<Recorder> recorders = new ArrayList<>();
        long[] pairs = new long[tasks];
        for (int i = 0; i < tasks; i++) {
            recorders.add(new Recorder());
        }
        onThreads("bench_uncontended", tasks, me -> {
            RLock lock = client.getLock(prefix + ":" + me);
            while (true) {
                long started = System.nanoTime();
                if (started >= deadline) {
                    break;
                }
                lock.lock();
                long acquired = System.nanoTime();
                lock.unlock();
                if (started >= warmEnd && System.nanoTime() <= deadline) {
                    pairs[me]++;
                    recorders.get(me).add((acquired - started) / 1_000);
                }
            }
        });
        long total = Arrays.stream(pairs).sum();
        reply.put("pairs_per_s", total / (duration / 1e9));
        reply.put("p50_us", percentile(recorders, 50));
        reply.put("p99_us", percentile(recorders, 99));
    }

    static void hot(RedissonClient client, JSONObject cmd, JSONObject reply) throws Exception {
        int tasks = (int) JavaPeer.num(cmd, "tasks", 2);
        long warmup = JavaPeer.num(cmd, "warmup_ms", 0) * 1_000_000L;
        long duration = JavaPeer.num(cmd, "duration_ms", 1000) * 1_000_000L;
        RLock lock = client.getLock(JavaPeer.str(cmd, "name"));
        long start = System.nanoTime();
        long warmEnd = start + warmup;
        long deadline = warmEnd + duration;
        AtomicLong releaseStarted = new AtomicLong();
        AtomicLong lastHolder = new AtomicLong(-1);
        List<Recorder> acquires = new ArrayList<>();
        List<Recorder> handoffs = new ArrayList<>();
        long[] counts = new long[tasks];
        for (int i = 0; i < tasks; i++) {
            acquires.add(new Recorder());
            handoffs.add(new Recorder());
        }
        onThreads("bench_hot", tasks, me -> {
            while (true) {
                long started = System.nanoTime();
                if (started >= deadline) {
                    break;
                }
                lock.lock();
                long acquired = System.nanoTime();
                long previous = lastHolder.getAndSet(me);
                if (started >= warmEnd) {
                    if (acquired <= deadline) {
                        counts[me]++;
                    }
                    acquires.get(me).add((acquired - started) / 1_000);
                    if (previous >= 0 && previous != me) {
                        handoffs.get(me).add(Math.max(0, acquired - releaseStarted.get()) / 1_000);
                    }
                }
                releaseStarted.set(System.nanoTime());
                lock.unlock();
            }
        });
        reply.put("acq_per_s", Arrays.stream(counts).sum() / (duration / 1e9));
        reply.put("p50_us", percentile(acquires, 50));
        reply.put("p99_us", percentile(acquires, 99));
        reply.put("max_us", percentile(acquires, 100));
        reply.put("handoff_p50_us", percentile(handoffs, 50));
        reply.put("handoff_p99_us", percentile(handoffs, 99));
        reply.put("min_per_task", Arrays.stream(counts).min().orElse(0));
        reply.put("max_per_task", Arrays.stream(counts).max().orElse(0));
    }

    private static long epochMicros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    static JSONArray alternate(RLock lock, JSONObject cmd) {
        long deadline = System.nanoTime() + JavaPeer.num(cmd, "duration_ms", 1000) * 1_000_000L;
        long gap = JavaPeer.num(cmd, "gap_us", 1000) * 1_000L;
        long hold = JavaPeer.num(cmd, "hold_us", 0) * 1_000L;
        JSONArray holds = new JSONArray();
        while (System.nanoTime() < deadline) {
            lock.lock();
            long acquired = epochMicros();
            LockSupport.parkNanos(hold);
            long released = epochMicros();
            lock.unlock();
            holds.put(new JSONArray().put(acquired).put(released));
            LockSupport.parkNanos(gap);
        }
        return holds;
    }
}
