// A JVM participant for the cross-language tests (tests/interop.rs): takes
// an Apache Curator lock on the same path the Rust side uses, `rounds` times,
// and checks mutual exclusion through marker files in a shared directory:
// while holding, it creates its own marker, then counts the markers of every
// participant (Rust or JVM) and reports a violation if the lock's rule is
// broken; it also appends "java" to the shared log, so the test can see that
// both languages really took turns. Once connected it prints how its
// ZooKeeper client was configured ("connected secure=<bool>", plus the socket
// class when secure; the Rust side checks it), then "ready". TLS comes from
// the ZooKeeper client's system properties (zookeeper.client.secure,
// zookeeper.clientCnxnSocket, zookeeper.ssl.*), set on the java command line.
// In "hold" mode it takes the mutex once and keeps it until its standard
// input closes (see hold()); "hold-write" and "hold-read" do the same with
// the write or the read lock of an InterProcessReadWriteLock, "hold-lease"
// with a lease of an InterProcessSemaphoreV2 of <leases> leases.
// In "mutex" mode, each round also prints "held czxid=<C> waited_ms=<W>":
// the czxid of its own lock node and how long the acquire took (the
// fairness test of cohort hand-off counts the holds it waited through).
// Exit status 0 = no violation, 3 = violations, anything else = error (an
// exception ends the JVM at once, though Curator's threads still run).

import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.client.ZKClientConfig;

public class Interop {
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        String connect = args[0];
        String mode = args[1];
        String path = args[2];
        int rounds = Integer.parseInt(args[3]);
        Path markers = Paths.get(args[4]);
        int leases = Integer.parseInt(args[5]);

        CuratorFramework client =
            CuratorFrameworkFactory.newClient(connect, 10000, 10000, new ExponentialBackoffRetry(100, 5));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("could not connect to " + connect);
        }
        ZKClientConfig config = client.getZookeeperClient().getZooKeeper().getClientConfig();
        boolean secure = config.getBoolean(ZKClientConfig.SECURE_CLIENT);
        System.out.println("connected secure=" + secure + (secure
            ? " socket=" + config.getProperty(ZKClientConfig.ZOOKEEPER_CLIENT_CNXN_SOCKET)
            : ""));
        InterProcessMutex mutex = null;
        InterProcessSemaphoreV2 semaphore = null;
        String kind;
        switch (mode) {
            case "mutex":
                mutex = new NodeMutex(client, path);
                kind = "w";
                break;
            case "write":
                mutex = new InterProcessReadWriteLock(client, path).writeLock();
                kind = "w";
                break;
            case "read":
                mutex = new InterProcessReadWriteLock(client, path).readLock();
                kind = "r";
                break;
            case "semaphore":
                semaphore = new InterProcessSemaphoreV2(client, path, leases);
                kind = "s";
                break;
            case "hold":
                hold(client, new NodeMutex(client, path));
                return;
            case "hold-write":
                hold(client, new InterProcessReadWriteLock(client, path).writeLock());
                return;
            case "hold-read":
                hold(client, new InterProcessReadWriteLock(client, path).readLock());
                return;
            case "hold-lease":
                holdLease(client, new InterProcessSemaphoreV2(client, path, leases));
                return;
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.out.println("ready");
        System.out.flush();

        int violations = 0;
        for (int round = 0; round < rounds; round++) {
            Lease lease = null;
            long asked = System.nanoTime();
            if (mutex != null) {
                if (!mutex.acquire(60, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("lock timed out");
                }
                long waited = (System.nanoTime() - asked) / 1_000_000;
                if (mutex instanceof NodeMutex) {
                    String node = ((NodeMutex) mutex).node();
                    long czxid = client.checkExists().forPath(node).getCzxid();
                    System.out.println("held czxid=" + czxid + " waited_ms=" + waited);
                }
            } else {
                lease = semaphore.acquire(60, TimeUnit.SECONDS);
                if (lease == null) {
                    throw new IllegalStateException("lease timed out");
                }
            }
            Path mine = markers.resolve(kind + "-java-" + ProcessHandle.current().pid() + "-" + round);
            Files.createFile(mine);
            Files.write(markers.resolve("log"), "java\n".getBytes(),
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            if (!allowed(markers, kind, leases)) {
                violations++;
                System.out.println("violation in round " + round);
            }
            Thread.sleep(15);
            Files.delete(mine);
            if (mutex != null) {
                mutex.release();
            } else {
                semaphore.returnLease(lease);
            }
        }
        System.out.println("violations=" + violations);
        client.close();
        System.exit(violations == 0 ? 0 : 3);
    }

    /**
     * "hold" modes: takes the lock, prints "held node=<N>" (a plain mutex,
     * which names its node) or "held" (a read-write lock's side), and keeps
     * it until standard input closes; then says whether it still believed
     * it held ("still held=<bool>", Curator's own view: it has no loss
     * signal), releases if it can, and exits 0.
     */
    private static void hold(CuratorFramework client, InterProcessMutex mutex) throws Exception {
        System.out.println("ready");
        System.out.flush();
        if (!mutex.acquire(60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("lock timed out");
        }
        System.out.println(mutex instanceof NodeMutex
            ? "held node=" + ((NodeMutex) mutex).node()
            : "held");
        System.out.flush();
        while (System.in.read() != -1) {
            // Until the test closes our standard input.
        }
        System.out.println("still held=" + mutex.isAcquiredInThisProcess());
        try {
            mutex.release();
        } catch (Exception e) {
            System.out.println("release failed: " + e);
        }
        client.close();
        System.exit(0);
    }

    /**
     * "hold-lease" mode: takes a lease, prints "held", keeps it until
     * standard input closes, returns it and exits 0.
     */
    private static void holdLease(CuratorFramework client, InterProcessSemaphoreV2 semaphore)
            throws Exception {
        System.out.println("ready");
        System.out.flush();
        Lease lease = semaphore.acquire(60, TimeUnit.SECONDS);
        if (lease == null) {
            throw new IllegalStateException("lease timed out");
        }
        System.out.println("held");
        System.out.flush();
        while (System.in.read() != -1) {
            // Until the test closes our standard input.
        }
        semaphore.returnLease(lease);
        client.close();
        System.exit(0);
    }

    /** A mutex that names its own lock node (Curator keeps that protected). */
    static class NodeMutex extends InterProcessMutex {
        NodeMutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    private static boolean allowed(Path markers, String kind, int leases) throws Exception {
        int writers = 0, readers = 0, holders = 0;
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(markers)) {
            for (Path entry : entries) {
                String name = entry.getFileName().toString();
                if (name.startsWith("w-")) writers++;
                if (name.startsWith("r-")) readers++;
                if (name.startsWith("s-")) holders++;
            }
        }
        switch (kind) {
            case "w": return writers == 1 && readers == 0;
            case "r": return writers == 0;
            default: return holders <= leases;
        }
    }
}
