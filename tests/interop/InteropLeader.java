// The JVM side of the leader-election interop tests (tests/interop_leader.rs):
// an Apache Curator LeaderLatch or LeaderSelector on the election path the
// Rust side also uses, driven one command at a time from standard input.
// Every command gets exactly one line back on standard output, so the Rust
// side reads the answer to what it asked and nothing else.
//
// While it leads, the participant keeps a marker file `lead-java-...` in the
// shared marker directory: it creates the marker when its term begins, counts
// the `lead-` markers of every participant (Rust or JVM) at that moment, and
// deletes its marker before giving leadership up. Two markers at once are two
// leaders at once. It also appends "java" to the shared log, so the test can
// see that both languages led in turn.
//
// Usage: InteropLeader CONNECT latch|selector PATH MARKERS
//
// Commands (answers in quotes):
//   start ID       a new latch or selector with that participant id, started ("ok")
//   await          wait (60 s) until it leads ("leading", "leading-with-another",
//                  or "timeout")
//   has            "true" or "false": hasLeadership()
//   leader         "leader ID IS_LEADER": getLeader()
//   participants   "participants ID,ID,...": getParticipants(), in order
//   release        selector: let the running takeLeadership return ("released")
//   requeue        selector: requeue() ("requeued true|false")
//   close          give up and close ("closed")
//   rounds N       contend: N terms, each as a new latch (latch mode) or an
//                  auto-requeued selector's N terms (selector mode); "violations K"
//   exit           close the client and exit with status 0

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class InteropLeader {
    private static final long WAIT_SECONDS = 60;

    private static CuratorFramework client;
    private static String path;
    private static Path markers;
    private static final AtomicInteger markerCount = new AtomicInteger();

    private static LeaderLatch latch;
    private static LeaderSelector selector;
    private static Path latchMarker;

    // The scripted selector's term: told when it begins, let go by "release".
    private static final Semaphore termBegan = new Semaphore(0);
    private static final Semaphore letGo = new Semaphore(0);
    private static final Semaphore termEnded = new Semaphore(0);
    private static volatile String termBeginning = "timeout";

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String mode = args[1];
        path = args[2];
        markers = Paths.get(args[3]);
        if (!mode.equals("latch") && !mode.equals("selector")) {
            throw new IllegalArgumentException("unknown mode " + mode);
        }
        boolean latchMode = mode.equals("latch");

        client = CuratorFrameworkFactory.newClient(connect, 10000, 10000, new ExponentialBackoffRetry(100, 5));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("could not connect to " + connect);
        }
        System.out.println("ready");
        System.out.flush();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            String answer = latchMode ? latchCommand(words) : selectorCommand(words);
            System.out.println(answer);
            System.out.flush();
            if (words[0].equals("exit")) {
                break;
            }
        }
        client.close();
        System.exit(0);
    }

    private static String latchCommand(String[] words) throws Exception {
        switch (words[0]) {
            case "start":
                latch = new LeaderLatch(client, path, words[1]);
                latch.start();
                return "ok";
            case "await":
                if (!latch.await(WAIT_SECONDS, TimeUnit.SECONDS)) {
                    return "timeout";
                }
                latchMarker = markers.resolve(markerName());
                return enter(latchMarker) ? "leading" : "leading-with-another";
            case "has":
                return Boolean.toString(latch.hasLeadership());
            case "leader":
                return describe(latch.getLeader());
            case "participants":
                return "participants " + ids(latch.getParticipants());
            case "close":
                if (latchMarker != null) {
                    Files.deleteIfExists(latchMarker);
                    latchMarker = null;
                }
                latch.close();
                return "closed";
            case "rounds":
                return "violations " + latchRounds(Integer.parseInt(words[1]));
            case "exit":
                return "bye";
            default:
                throw new IllegalArgumentException("unknown command " + words[0]);
        }
    }

    private static String selectorCommand(String[] words) throws Exception {
        switch (words[0]) {
            case "start":
                selector = new LeaderSelector(client, path, new ScriptedTerm());
                selector.setId(words[1]);
                selector.start();
                return "ok";
            case "await":
                if (!termBegan.tryAcquire(WAIT_SECONDS, TimeUnit.SECONDS)) {
                    return "timeout";
                }
                return termBeginning;
            case "has":
                return Boolean.toString(selector.hasLeadership());
            case "leader":
                return describe(selector.getLeader());
            case "participants":
                return "participants " + ids(selector.getParticipants());
            case "release":
                letGo.release();
                return termEnded.tryAcquire(WAIT_SECONDS, TimeUnit.SECONDS) ? "released" : "timeout";
            case "requeue":
                return "requeued " + selector.requeue();
            case "close":
                selector.close();
                return "closed";
            case "rounds":
                return "violations " + selectorRounds(Integer.parseInt(words[1]));
            case "exit":
                return "bye";
            default:
                throw new IllegalArgumentException("unknown command " + words[0]);
        }
    }

    // The term of the scripted selector: it begins, waits for "release" (or
    // an interruption), and ends, its marker deleted before it returns.
    private static class ScriptedTerm extends LeaderSelectorListenerAdapter {
        @Override
        public void takeLeadership(CuratorFramework unused) throws Exception {
            Path mine = markers.resolve(markerName());
            try {
                termBeginning = enter(mine) ? "leading" : "leading-with-another";
                termBegan.release();
                letGo.tryAcquire(WAIT_SECONDS, TimeUnit.SECONDS);
            } finally {
                Files.deleteIfExists(mine);
                termEnded.release();
            }
        }
    }

    // N terms, each on a new latch that closes once it has led.
    private static int latchRounds(int rounds) throws Exception {
        int violations = 0;
        for (int round = 0; round < rounds; round++) {
            LeaderLatch contender = new LeaderLatch(client, path, "java-round-" + round);
            contender.start();
            if (!contender.await(WAIT_SECONDS, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no leadership within " + WAIT_SECONDS + " s");
            }
            Path mine = markers.resolve(markerName());
            if (!enter(mine)) {
                violations++;
            }
            Thread.sleep(15);
            Files.delete(mine);
            contender.close();
        }
        return violations;
    }

    // N terms of one auto-requeued selector, then it closes.
    private static int selectorRounds(int rounds) throws Exception {
        AtomicInteger violations = new AtomicInteger();
        CountDownLatch terms = new CountDownLatch(rounds);
        LeaderSelector contender = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
            @Override
            public void takeLeadership(CuratorFramework unused) throws Exception {
                Path mine = markers.resolve(markerName());
                try {
                    if (!enter(mine)) {
                        violations.incrementAndGet();
                    }
                    Thread.sleep(15);
                } finally {
                    Files.deleteIfExists(mine);
                    terms.countDown();
                }
            }
        });
        contender.setId("java-rounds");
        contender.autoRequeue();
        contender.start();
        boolean done = terms.await(2 * WAIT_SECONDS, TimeUnit.SECONDS);
        contender.close();
        if (!done) {
            throw new IllegalStateException(terms.getCount() + " term(s) missing");
        }
        return violations.get();
    }

    private static String markerName() {
        return "lead-java-" + ProcessHandle.current().pid() + "-" + markerCount.incrementAndGet();
    }

    // Creates the leader's marker and logs the turn: whether it is the only
    // leader's marker.
    private static boolean enter(Path mine) throws Exception {
        Files.createFile(mine);
        Files.write(markers.resolve("log"), "java\n".getBytes(),
            StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        int leaders = 0;
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(markers, "lead-*")) {
            for (Path ignored : entries) {
                leaders++;
            }
        }
        return leaders == 1;
    }

    private static String describe(Participant leader) {
        return "leader " + leader.getId() + " " + leader.isLeader();
    }

    private static String ids(Iterable<Participant> participants) {
        List<String> ids = new ArrayList<>();
        for (Participant participant : participants) {
            ids.add(participant.getId());
        }
        return String.join(",", ids);
    }
}
