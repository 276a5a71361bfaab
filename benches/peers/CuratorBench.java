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
//          connect     <connect> <sessions>            open (and keep) that many sessions;
//                      answers with secure=<bool>, how the first one's client is configured
//          close       <connect>                       closes the kept sessions to <connect>
//          tls         <trust-pem> <key-pem>           the TLS material of `tcp+tls://` connect
//                      strings: the authorities to trust, and the client's key and
//                      certificate in one PEM file (ZooKeeper's PEM key store)
//          uncontended <connect> <path> <cycles>       on the first kept session
//          contended   <connect> <path> <sessions> <tasks> <millis>
//                      <tasks> threads spread over the first <sessions> kept sessions
//          entities    <connect> <base> <tasks> <millis>
//                      <tasks> threads on the first kept session, thread i on <base>/e<i>
//                      (one lock per entity), each looping acquire -> release on its own path
//          latch-start <path> <connect> [<connect> ...]
//                      an election: a NEW session per connect string (one participant each),
//                      a LeaderLatch on each, all on <path>; answers once one of them leads
//          latch-warm  <path> <cycles>
//                      hand-overs between two latches on the election's first two sessions
//                      (the leader closes, the waiting one leads, a new latch queues behind)
//          latch-arm   <millis>
//                      finds the leader, starts a thread in await() on every other latch, and
//                      answers with the leader's session id (the bench then closes that
//                      session on the server)
//          latch-next  <millis>
//                      waits for the first of those await() calls to return: which latch, and
//                      when (microseconds of the wall clock, which the bench shares)
//          latch-stop  closes the election's latches and sessions
//          quit
//   java ... CuratorBench memory <connect> <path> <clients> <waiters>
//        one shot, in a fresh JVM (memory is a property of the process)
//
// A connect string `tcp+tls://host:port` (zk-curator's form) means the same server over
// TLS: the scheme is stripped, and the session's ZooKeeper client gets a ZKClientConfig of
// its own (secure, the Netty socket, the `tls` command's PEM files), so that plaintext and
// TLS sessions live side by side in one JVM. Its classpath needs netty-codec and
// netty-resolver (zookeeper.jar's manifest lists neither).
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
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.ZKClientConfig;

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
                        List<CuratorFramework> opened = sessions(w[1], Integer.parseInt(w[2]));
                        boolean secure = opened.get(0).getZookeeperClient().getZooKeeper()
                            .getClientConfig().getBoolean(ZKClientConfig.SECURE_CLIENT);
                        System.out.println("RESULT kind=connect sessions=" + w[2] + " secure=" + secure);
                        break;
                    case "close":
                        List<CuratorFramework> closing = POOL.remove(w[1]);
                        if (closing != null) {
                            for (CuratorFramework client : closing) {
                                client.close();
                            }
                        }
                        System.out.println("RESULT kind=close");
                        break;
                    case "tls":
                        tlsTrustStore = w[1];
                        tlsKeyStore = w[2];
                        System.out.println("RESULT kind=tls");
                        break;
                    case "uncontended":
                        uncontended(sessions(w[1], 1).get(0), w[2], Integer.parseInt(w[3]));
                        break;
                    case "contended":
                        contended(sessions(w[1], Integer.parseInt(w[3])), w[2],
                            Integer.parseInt(w[4]), Long.parseLong(w[5]));
                        break;
                    case "entities":
                        entities(sessions(w[1], 1).get(0), w[2], Integer.parseInt(w[3]),
                            Long.parseLong(w[4]));
                        break;
                    case "latch-start":
                        latchStart(w[1], Arrays.asList(w).subList(2, w.length));
                        break;
                    case "latch-warm":
                        latchWarm(w[1], Integer.parseInt(w[2]));
                        break;
                    case "latch-arm":
                        latchArm(Long.parseLong(w[1]));
                        break;
                    case "latch-next":
                        latchNext(Long.parseLong(w[1]));
                        break;
                    case "latch-stop":
                        latchStop();
                        System.out.println("RESULT kind=latch-stop");
                        break;
                    default:
                        System.out.println("FAILED: unknown command " + w[0]);
                }
            } catch (Throwable t) {
                System.out.println("FAILED: " + describe(t).replace('\n', ' '));
            }
            System.out.flush();
        }
        latchStop();
        for (List<CuratorFramework> pool : POOL.values()) {
            for (CuratorFramework client : pool) {
                client.close();
            }
        }
    }

    // ------------------------------------------------------------------
    // Leader election: the failover workload
    // ------------------------------------------------------------------

    /** The election's own sessions (one per participant) and their latches, by index. */
    private static final List<CuratorFramework> ELECTION_CLIENTS = new ArrayList<>();
    private static final List<LeaderLatch> LATCHES = new ArrayList<>();
    /** The threads in await() since the last latch-arm, and the first to return: {index, micros}. */
    private static final List<Thread> WAITERS = new ArrayList<>();
    private static AtomicReference<long[]> firstLeader = new AtomicReference<>();
    private static CountDownLatch firstLed = new CountDownLatch(1);

    private static void latchStart(String path, List<String> connects) throws Exception {
        latchStop();
        int participants = connects.size();
        for (String connect : connects) {
            ELECTION_CLIENTS.add(client(connect));
        }
        for (int i = 0; i < participants; i++) {
            LeaderLatch latch = new LeaderLatch(ELECTION_CLIENTS.get(i), path, "curator-" + i);
            latch.start();
            LATCHES.add(latch);
        }
        int leader = oneLeader(TimeUnit.SECONDS.toMillis(ACQUIRE_TIMEOUT_S));
        System.out.println("RESULT kind=latch-start participants=" + participants + " leader=" + leader);
    }

    /**
     * Warms the code of a hand-over (a watch fires, the children are listed, await()
     * returns) without killing sessions: two latches on the first two election sessions
     * take turns on their own path, the leader closing and a new latch queueing behind.
     */
    private static void latchWarm(String path, int cycles) throws Exception {
        if (ELECTION_CLIENTS.size() < 2) {
            throw new IllegalStateException("latch-warm needs a started election of two or more");
        }
        long start = System.nanoTime();
        LeaderLatch leader = new LeaderLatch(ELECTION_CLIENTS.get(0), path, "warm-0");
        leader.start();
        awaitLeadership(leader);
        int leaderClient = 0;
        LeaderLatch waiter = new LeaderLatch(ELECTION_CLIENTS.get(1), path, "warm-1");
        waiter.start();
        for (int i = 0; i < cycles; i++) {
            leader.close();
            awaitLeadership(waiter);
            LeaderLatch next = new LeaderLatch(ELECTION_CLIENTS.get(leaderClient), path, "warm-" + leaderClient);
            next.start();
            leaderClient = 1 - leaderClient;
            leader = waiter;
            waiter = next;
        }
        leader.close();
        waiter.close();
        System.out.printf(java.util.Locale.ROOT, "RESULT kind=latch-warm cycles=%d secs=%.3f%n",
            cycles, (System.nanoTime() - start) / 1e9);
    }

    private static void awaitLeadership(LeaderLatch latch) throws Exception {
        if (!latch.await(ACQUIRE_TIMEOUT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no leadership within " + ACQUIRE_TIMEOUT_S + " s");
        }
    }

    /** The index of the one latch that leads, waiting at most `millis` for there to be exactly one. */
    private static int oneLeader(long millis) throws Exception {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        while (true) {
            int leader = -1;
            int leaders = 0;
            for (int i = 0; i < LATCHES.size(); i++) {
                if (LATCHES.get(i).hasLeadership()) {
                    leader = i;
                    leaders++;
                }
            }
            if (leaders == 1) {
                return leader;
            }
            if (System.nanoTime() > until) {
                throw new IllegalStateException(leaders + " leaders after " + millis + " ms");
            }
            Thread.sleep(2);
        }
    }

    /** Microseconds since the epoch, on the wall clock the bench reads too. */
    private static long wallMicros() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    private static void latchArm(long millis) throws Exception {
        stopWaiters();
        int leader = oneLeader(millis);
        long session = ELECTION_CLIENTS.get(leader).getZookeeperClient().getZooKeeper().getSessionId();
        AtomicReference<long[]> first = new AtomicReference<>();
        CountDownLatch led = new CountDownLatch(1);
        firstLeader = first;
        firstLed = led;
        for (int i = 0; i < LATCHES.size(); i++) {
            if (i == leader) {
                continue;
            }
            int index = i;
            LeaderLatch latch = LATCHES.get(i);
            Thread thread = new Thread(() -> {
                try {
                    if (latch.await(millis, TimeUnit.MILLISECONDS)) {
                        long at = wallMicros();
                        if (first.compareAndSet(null, new long[] {index, at})) {
                            led.countDown();
                        }
                    }
                } catch (InterruptedException e) {
                    // latch-next or latch-stop is done with this waiter
                }
            });
            thread.start();
            WAITERS.add(thread);
        }
        System.out.println("RESULT kind=latch-arm leader=" + leader + " session=" + Long.toHexString(session));
    }

    private static void latchNext(long millis) throws Exception {
        try {
            if (!firstLed.await(millis, TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException("no other latch led within " + millis + " ms");
            }
            long[] first = firstLeader.get();
            System.out.println("RESULT kind=latch-next leader=" + first[0] + " at_us=" + first[1]);
        } finally {
            stopWaiters();
        }
    }

    private static void stopWaiters() throws InterruptedException {
        for (Thread thread : WAITERS) {
            thread.interrupt();
        }
        for (Thread thread : WAITERS) {
            thread.join(TimeUnit.SECONDS.toMillis(10));
        }
        WAITERS.clear();
    }

    private static void latchStop() {
        try {
            stopWaiters();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (LeaderLatch latch : LATCHES) {
            try {
                latch.close();
            } catch (Exception e) {
                // closed already, or its session is gone: nothing to give back
            }
        }
        LATCHES.clear();
        for (CuratorFramework client : ELECTION_CLIENTS) {
            client.close();
        }
        ELECTION_CLIENTS.clear();
    }

    /** The scheme of a connect string to reach over TLS. */
    private static final String TLS_SCHEME = "tcp+tls://";
    /** The PEM files of TLS sessions (the `tls` command). */
    private static String tlsTrustStore;
    private static String tlsKeyStore;

    private static CuratorFramework client(String connect) throws Exception {
        CuratorFramework client;
        if (connect.startsWith(TLS_SCHEME)) {
            ZKClientConfig config = tlsConfig();
            client = CuratorFrameworkFactory.builder()
                .connectString(connect.substring(TLS_SCHEME.length()))
                .sessionTimeoutMs(SESSION_TIMEOUT_MS)
                .connectionTimeoutMs(10000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .zookeeperFactory((hosts, timeout, watcher, readOnly) ->
                    new ZooKeeper(hosts, timeout, watcher, readOnly, config))
                .build();
        } else {
            client = CuratorFrameworkFactory.newClient(
                connect, SESSION_TIMEOUT_MS, 10000, new ExponentialBackoffRetry(100, 5));
        }
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("could not connect to " + connect);
        }
        return client;
    }

    /** A ZooKeeper client configuration for TLS (the properties of ZKClientConfig and ClientX509Util). */
    private static ZKClientConfig tlsConfig() {
        if (tlsTrustStore == null || tlsKeyStore == null) {
            throw new IllegalStateException("a tcp+tls:// connect string before the tls command");
        }
        ZKClientConfig config = new ZKClientConfig();
        config.setProperty(ZKClientConfig.SECURE_CLIENT, "true");
        config.setProperty(ZKClientConfig.ZOOKEEPER_CLIENT_CNXN_SOCKET,
            "org.apache.zookeeper.ClientCnxnSocketNetty");
        config.setProperty("zookeeper.ssl.keyStore.location", tlsKeyStore);
        config.setProperty("zookeeper.ssl.keyStore.type", "PEM");
        config.setProperty("zookeeper.ssl.trustStore.location", tlsTrustStore);
        config.setProperty("zookeeper.ssl.trustStore.type", "PEM");
        return config;
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
        // When the last holder began its release (System.nanoTime(), 0: none yet); the
        // next acquire to return measures the hand-off from there (holds in the window).
        AtomicLong released = new AtomicLong();
        List<long[]> gaps = new ArrayList<>();
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
            // This thread's hand-off latencies (ns), growing as needed: [count, values...].
            long[][] mine = {new long[64]};
            int[] count = {0};
            Thread thread = new Thread(() -> {
                try {
                    go.await();
                    while (true) {
                        acquire(mutex);
                        long now = System.nanoTime();
                        boolean late = now >= deadline[0];
                        if (!late) {
                            handoffs.incrementAndGet();
                            if (last.getAndSet(id) != id) {
                                switches.incrementAndGet();
                            }
                            long since = released.get();
                            if (since != 0) {
                                if (count[0] == mine[0].length) {
                                    mine[0] = Arrays.copyOf(mine[0], 2 * count[0]);
                                }
                                mine[0][count[0]++] = now - since;
                            }
                        }
                        released.set(System.nanoTime());
                        mutex.release();
                        releases.incrementAndGet();
                        if (late) {
                            break;
                        }
                    }
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                }
                synchronized (gaps) {
                    gaps.add(Arrays.copyOf(mine[0], count[0]));
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
        long[] all;
        synchronized (gaps) {
            all = gaps.stream().flatMapToLong(Arrays::stream).sorted().toArray();
        }
        String gap = "";
        if (all.length > 0) {
            gap = String.format(java.util.Locale.ROOT, " handoff_p50_ms=%.3f handoff_p99_ms=%.3f",
                percentile(all, 0.50) / 1e6, percentile(all, 0.99) / 1e6);
        }
        System.out.printf(java.util.Locale.ROOT,
            "RESULT kind=contended sessions=%d tasks=%d handoffs=%d switches=%d releases=%d secs=%.3f%s%n",
            clients.size(), tasks, handoffs.get(), switches.get(), releases.get(), millis / 1000.0, gap);
    }

    /**
     * T threads on ONE session, thread i on a path of its own (<base>/e<i>): one lock
     * per entity, as services take locks. Each loops acquire -> release for a fixed
     * time; no thread waits for another. A hold that starts after the deadline is
     * released and not counted.
     */
    private static void entities(CuratorFramework client, String base, int tasks, long millis)
            throws Exception {
        AtomicLong holds = new AtomicLong();
        AtomicLong releases = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch go = new CountDownLatch(1);
        long[] deadline = new long[1];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < tasks; i++) {
            InterProcessMutex mutex = new InterProcessMutex(client, base + "/e" + i);
            Thread thread = new Thread(() -> {
                try {
                    go.await();
                    while (true) {
                        acquire(mutex);
                        boolean late = System.nanoTime() >= deadline[0];
                        if (!late) {
                            holds.incrementAndGet();
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
        deadline[0] = System.nanoTime() + millis * 1_000_000L;
        go.countDown();
        long joinUntil = System.currentTimeMillis() + millis + TimeUnit.SECONDS.toMillis(2 * ACQUIRE_TIMEOUT_S);
        for (Thread thread : threads) {
            thread.join(Math.max(1, joinUntil - System.currentTimeMillis()));
        }
        if (failure.get() != null) {
            throw new IllegalStateException("an entity's task failed", failure.get());
        }
        for (Thread thread : threads) {
            if (thread.isAlive()) {
                throw new IllegalStateException("an entity's task did not finish");
            }
        }
        System.out.printf(java.util.Locale.ROOT,
            "RESULT kind=entities tasks=%d handoffs=%d releases=%d secs=%.3f%n",
            tasks, holds.get(), releases.get(), millis / 1000.0);
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
