// The Apache Curator side of the lock benchmark (benches/locks.rs): the same
// workloads as the Rust contenders, on Debian's libcurator-recipes-java, run
// against the same ZooKeeper. Every figure is printed as ONE line
//
//   RESULT kind=<kind> key=value key=value ...
//
// which the Rust harness parses; anything else on stdout/stderr is shown
// only when something goes wrong.
//
// Usage:
//   java -cp <classes>:<curator-recipes.jar>:<slf4j-nop.jar> CuratorBench serve
//        a long-lived process (it stays warm across reps) that reads one command a
//        line on stdin and answers each with ONE line, `RESULT ...` or `FAILED: ...`:
//          connect     <connect> <sessions>            open (and keep) that many sessions
//          uncontended <connect> <path> <cycles>       on the first kept session
//          contended   <connect> <path> <sessions> <tasks> <millis>
//                      <tasks> threads spread over the first <sessions> kept sessions
//          quit
//   java ... CuratorBench memory <connect> <path> <clients> <waiters>
//        one shot, in a fresh JVM (memory is a property of the process)
//
// Exit status 0 = figures printed, anything else = failure (reason on stderr).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    /** No single acquire may take longer than this (the harness bounds the whole run too). */
    private static final long ACQUIRE_TIMEOUT_S = 30;
    /** The same session timeout as every contender (few pings in the request counts). */
    private static final int SESSION_TIMEOUT_MS = 30000;

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("serve")) {
            serve();
            System.exit(0);
        }
        if (args.length < 5 || !args[0].equals("memory")) {
            System.err.println("usage: CuratorBench serve | memory <connect> <path> <clients> <waiters>");
            System.exit(2);
        }
        try {
            memory(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.println("FAILED: " + describe(t));
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);
    }

    private static String describe(Throwable t) {
        Throwable cause = t;
        while (cause.getCause() != null) {
            cause = cause.getCause();
        }
        return t + (cause != t ? " (cause: " + cause + ")" : "");
    }

    /** Kept sessions, by connect string: the JVM and its sessions stay warm across reps. */
    private static final Map<String, List<CuratorFramework>> POOL = new HashMap<>();

    private static List<CuratorFramework> sessions(String connect, int count) throws Exception {
        List<CuratorFramework> pool = POOL.computeIfAbsent(connect, c -> new ArrayList<>());
        while (pool.size() < count) {
            pool.add(client(connect));
        }
        return pool.subList(0, count);
    }

    private static void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("READY");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w.length == 0 || w[0].isEmpty()) {
                continue;
            }
            if (w[0].equals("quit")) {
                break;
            }
            try {
                switch (w[0]) {
                    case "connect":
                        sessions(w[1], Integer.parseInt(w[2]));
                        System.out.println("RESULT kind=connect sessions=" + w[2]);
                        break;
                    case "uncontended":
                        uncontended(sessions(w[1], 1).get(0), w[2], Integer.parseInt(w[3]));
                        break;
                    case "contended":
                        contended(sessions(w[1], Integer.parseInt(w[3])), w[2],
                            Integer.parseInt(w[4]), Long.parseLong(w[5]));
                        break;
                    default:
                        System.out.println("FAILED: unknown command " + w[0]);
                }
            } catch (Throwable t) {
                System.out.println("FAILED: " + describe(t).replace('\n', ' '));
            }
            System.out.flush();
        }
        for (List<CuratorFramework> pool : POOL.values()) {
            for (CuratorFramework client : pool) {
                client.close();
            }
        }
    }

    private static CuratorFramework client(String connect) throws Exception {
        CuratorFramework client =
            CuratorFrameworkFactory.newClient(connect, SESSION_TIMEOUT_MS, 10000, new ExponentialBackoffRetry(100, 5));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("could not connect to " + connect);
        }
        return client;
    }

    private static void acquire(InterProcessMutex mutex) throws Exception {
        if (!mutex.acquire(ACQUIRE_TIMEOUT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("acquire timed out after " + ACQUIRE_TIMEOUT_S + " s");
        }
    }

    /** N acquire+release cycles on one kept session and one path. */
    private static void uncontended(CuratorFramework client, String path, int cycles) throws Exception {
        InterProcessMutex mutex = new InterProcessMutex(client, path);
        long[] samples = new long[cycles];
        long[] acquires = new long[cycles];
        long start = System.nanoTime();
        for (int i = 0; i < cycles; i++) {
            long t0 = System.nanoTime();
            acquire(mutex);
            acquires[i] = System.nanoTime() - t0;
            mutex.release();
            samples[i] = System.nanoTime() - t0;
        }
        double secs = (System.nanoTime() - start) / 1e9;
        Arrays.sort(samples);
        Arrays.sort(acquires);
        System.out.printf(java.util.Locale.ROOT,
            "RESULT kind=uncontended cycles=%d secs=%.6f p50_ms=%.4f p99_ms=%.4f acq_p50_ms=%.4f acq_p99_ms=%.4f%n",
            cycles, secs, percentile(samples, 0.50) / 1e6, percentile(samples, 0.99) / 1e6,
            percentile(acquires, 0.50) / 1e6, percentile(acquires, 0.99) / 1e6);
    }

    /** Nearest-rank percentile of sorted samples. */
    private static long percentile(long[] sorted, double q) {
        int rank = (int) Math.ceil(q * sorted.length);
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))];
    }

    /**
     * T threads spread over the given sessions (thread i on session i % S) loop
     * acquire -> release on ONE path for a fixed time. A hold that starts after
     * the deadline is released and not counted.
     */
    private static void contended(List<CuratorFramework> clients, String path, int tasks, long millis)
            throws Exception {
        AtomicLong handoffs = new AtomicLong();
        AtomicLong releases = new AtomicLong();
        // Holds by another thread than the previous hold's (only the holder writes it).
        AtomicLong switches = new AtomicLong();
        AtomicInteger last = new AtomicInteger(-1);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch go = new CountDownLatch(1);
        long[] deadline = new long[1];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < tasks; i++) {
            int id = i;
            // One mutex per thread: threads sharing one InterProcessMutex share
            // its watcher, whose notifyAll() wakes every one of them (each then
            // lists the children again), a herd the fair use of Curator avoids.
            InterProcessMutex mutex = new InterProcessMutex(clients.get(i % clients.size()), path);
            Thread thread = new Thread(() -> {
                try {
                    go.await();
                    while (true) {
                        acquire(mutex);
                        boolean late = System.nanoTime() >= deadline[0];
                        if (!late) {
                            handoffs.incrementAndGet();
                            if (last.getAndSet(id) != id) {
                                switches.incrementAndGet();
                            }
                        }
                        mutex.release();
                        releases.incrementAndGet();
                        if (late) {
                            break;
                        }
                    }
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                }
            });
            thread.start();
            threads.add(thread);
        }
        long start = System.nanoTime();
        deadline[0] = start + millis * 1_000_000L;
        go.countDown();
        long joinUntil = System.currentTimeMillis() + millis + TimeUnit.SECONDS.toMillis(2 * ACQUIRE_TIMEOUT_S);
        for (Thread thread : threads) {
            thread.join(Math.max(1, joinUntil - System.currentTimeMillis()));
        }
        if (failure.get() != null) {
            throw new IllegalStateException("a contender failed", failure.get());
        }
        for (Thread thread : threads) {
            if (thread.isAlive()) {
                throw new IllegalStateException("a contender did not finish");
            }
        }
        System.out.printf(java.util.Locale.ROOT,
            "RESULT kind=contended sessions=%d tasks=%d handoffs=%d switches=%d releases=%d secs=%.3f%n",
            clients.size(), tasks, handoffs.get(), switches.get(), releases.get(), millis / 1000.0);
    }

    /**
     * Memory per waiting participant: one client holds the lock, `waiters`
     * threads (spread over `clients` sessions) block in acquire() behind it.
     * Reports the growth of the process RSS and of the heap after GC, per waiter.
     */
    private static void memory(String connect, String path, int clientCount, int waiters) throws Exception {
        CuratorFramework holderClient = client(connect);
        InterProcessMutex holder = new InterProcessMutex(holderClient, path);
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < clientCount; i++) {
            clients.add(client(connect));
        }
        acquire(holder);
        // One mutex per waiting thread, made before the baseline: threads sharing
        // one InterProcessMutex share its watcher, whose notifyAll() wakes all of
        // them at every release (each lists the children again), and a queue of
        // 1,000 then drains too slowly for the 30 s acquire bound.
        List<InterProcessMutex> mutexes = new ArrayList<>();
        for (int i = 0; i < waiters; i++) {
            mutexes.add(new InterProcessMutex(clients.get(i % clientCount), path));
        }
        settle();
        long rssBefore = rssKib();
        long heapBefore = heapUsed();

        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < waiters; i++) {
            InterProcessMutex mutex = mutexes.get(i);
            Thread thread = new Thread(() -> {
                try {
                    acquire(mutex);
                    mutex.release();
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                }
            });
            thread.start();
            threads.add(thread);
        }
        long waitUntil = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (holderClient.getChildren().forPath(path).size() < waiters + 1) {
            if (System.nanoTime() > waitUntil || failure.get() != null) {
                throw new IllegalStateException("the waiters did not all queue", failure.get());
            }
            Thread.sleep(20);
        }
        Thread.sleep(300); // let every waiter set its watch and park
        settle();
        long rssAfter = rssKib();
        long heapAfter = heapUsed();

        holder.release();
        for (Thread thread : threads) {
            thread.join(TimeUnit.SECONDS.toMillis(2 * ACQUIRE_TIMEOUT_S));
        }
        if (failure.get() != null) {
            throw new IllegalStateException("a waiter failed", failure.get());
        }
        System.out.printf(java.util.Locale.ROOT,
            "RESULT kind=memory waiters=%d rss_kib_before=%d rss_kib_after=%d heap_bytes_per_waiter=%.0f%n",
            waiters, rssBefore, rssAfter, (double) (heapAfter - heapBefore) / waiters);
        for (CuratorFramework client : clients) {
            client.close();
        }
        holderClient.close();
    }

    private static void settle() throws InterruptedException {
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(50);
        }
    }

    private static long heapUsed() {
        Runtime runtime = Runtime.getRuntime();
        return runtime.totalMemory() - runtime.freeMemory();
    }

    /** VmRSS of this process in KiB, or -1 when /proc is not readable. */
    private static long rssKib() {
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
                if (line.startsWith("VmRSS:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
                }
            }
        } catch (Exception e) {
            // fall through
        }
        return -1;
    }
}
