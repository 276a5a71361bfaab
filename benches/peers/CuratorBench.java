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
//   java -cp <classes>:<curator-recipes.jar>:<slf4j-nop.jar> CuratorBench \
//        uncontended <connect> <path> <warmup> <cycles>
//        contended   <connect> <path> <sessions> <seconds>
//        memory      <connect> <path> <clients> <waiters>
//
// Exit status 0 = figures printed, anything else = failure (reason on stderr).

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
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

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: CuratorBench uncontended|contended|memory <connect> <path> <a> <b>");
            System.exit(2);
        }
        String mode = args[0];
        String connect = args[1];
        String path = args[2];
        int a = Integer.parseInt(args[3]);
        int b = Integer.parseInt(args[4]);
        try {
            switch (mode) {
                case "uncontended":
                    uncontended(connect, path, a, b);
                    break;
                case "contended":
                    contended(connect, path, a, b);
                    break;
                case "memory":
                    memory(connect, path, a, b);
                    break;
                default:
                    System.err.println("FAILED: unknown mode " + mode);
                    System.exit(2);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            Throwable cause = t;
            while (cause.getCause() != null) {
                cause = cause.getCause();
            }
            System.err.println("FAILED: " + t + (cause != t ? " (cause: " + cause + ")" : ""));
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);
    }

    private static CuratorFramework client(String connect) throws Exception {
        CuratorFramework client =
            CuratorFrameworkFactory.newClient(connect, 10000, 10000, new ExponentialBackoffRetry(100, 5));
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

    /** W warm-up then N acquire+release cycles, one session, one fresh path. */
    private static void uncontended(String connect, String path, int warmup, int cycles) throws Exception {
        CuratorFramework client = client(connect);
        InterProcessMutex mutex = new InterProcessMutex(client, path);
        for (int i = 0; i < warmup; i++) {
            acquire(mutex);
            mutex.release();
        }
        long[] samples = new long[cycles];
        long start = System.nanoTime();
        for (int i = 0; i < cycles; i++) {
            long t0 = System.nanoTime();
            acquire(mutex);
            mutex.release();
            samples[i] = System.nanoTime() - t0;
        }
        double secs = (System.nanoTime() - start) / 1e9;
        Arrays.sort(samples);
        System.out.printf(java.util.Locale.ROOT,
            "RESULT kind=uncontended cycles=%d secs=%.6f p50_ms=%.4f p99_ms=%.4f%n",
            cycles, secs, percentile(samples, 0.50) / 1e6, percentile(samples, 0.99) / 1e6);
        client.close();
    }

    /** Nearest-rank percentile of sorted samples. */
    private static long percentile(long[] sorted, double q) {
        int rank = (int) Math.ceil(q * sorted.length);
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))];
    }

    /**
     * N sessions (N CuratorFramework clients in this one JVM, one thread each)
     * loop acquire -> release on ONE path for a fixed time. A hold that
     * starts after the deadline is released and not counted.
     */
    private static void contended(String connect, String path, int sessions, int seconds) throws Exception {
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            clients.add(client(connect));
        }
        AtomicLong handoffs = new AtomicLong();
        AtomicLong releases = new AtomicLong();
        // Holds by another session than the previous hold's (only the holder writes it).
        AtomicLong switches = new AtomicLong();
        AtomicInteger last = new AtomicInteger(-1);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch go = new CountDownLatch(1);
        long[] deadline = new long[1];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            int id = i;
            InterProcessMutex mutex = new InterProcessMutex(clients.get(i), path);
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
        deadline[0] = start + seconds * 1_000_000_000L;
        go.countDown();
        for (Thread thread : threads) {
            thread.join(TimeUnit.SECONDS.toMillis(seconds + 2 * ACQUIRE_TIMEOUT_S));
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
            "RESULT kind=contended n=%d handoffs=%d switches=%d releases=%d secs=%d%n",
            sessions, handoffs.get(), switches.get(), releases.get(), seconds);
        for (CuratorFramework client : clients) {
            client.close();
        }
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
        // One mutex per client, shared by its waiting threads (Curator's mutex is
        // reentrant per thread, so each thread is its own participant), made
        // before the baseline like the Rust side's.
        List<InterProcessMutex> mutexes = new ArrayList<>();
        for (CuratorFramework client : clients) {
            mutexes.add(new InterProcessMutex(client, path));
        }
        settle();
        long rssBefore = rssKib();
        long heapBefore = heapUsed();

        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < waiters; i++) {
            InterProcessMutex mutex = mutexes.get(i % clientCount);
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
