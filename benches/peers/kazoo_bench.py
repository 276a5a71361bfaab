"""The kazoo side of the lock benchmark (benches/locks.rs).

The same workloads as the Rust contenders, with Debian's python3-kazoo,
against the same ZooKeeper. Every figure is printed as ONE line

    RESULT kind=<kind> key=value key=value ...

which the Rust harness parses.

Usage:
    python3 kazoo_bench.py serve
        a long-lived process (it stays warm across reps) that reads one
        command a line on stdin and answers each with ONE line, `RESULT ...`
        or `FAILED: ...`:
          connect     <connect> <sessions>          open (and keep) sessions
          uncontended <connect> <path> <cycles>     on the first kept session
          contended   <connect> <path> <sessions> <tasks> <millis>
                      <tasks> threads over the first <sessions> kept sessions
          entities    <connect> <base> <tasks> <millis>
                      <tasks> threads on the first kept session, thread i
                      on <base>/e<i> (one lock per entity), each looping
                      acquire -> release on its own path
          quit
    python3 kazoo_bench.py memory <connect> <path> <clients> <waiters>
        one shot, in a fresh process

Exit status 0 = figures printed, anything else = failure (reason on stderr).
"""

import gc
import math
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

try:
    from kazoo.version import __version__ as KAZOO_VERSION
except ImportError:  # pragma: no cover
    KAZOO_VERSION = "unknown"

# No single acquire may take longer than this (the harness bounds the run too).
ACQUIRE_TIMEOUT_S = 30


# The same session timeout as every contender (few pings in the request counts).
SESSION_TIMEOUT_S = 30.0


def client(connect):
    zk = KazooClient(hosts=connect, timeout=SESSION_TIMEOUT_S)
    zk.start(timeout=30)
    return zk


def acquire(lock):
    if not lock.acquire(timeout=ACQUIRE_TIMEOUT_S):
        raise RuntimeError("acquire timed out after %s s" % ACQUIRE_TIMEOUT_S)


def percentile(sorted_samples, q):
    """Nearest-rank percentile."""
    rank = int(math.ceil(q * len(sorted_samples)))
    return sorted_samples[max(0, min(len(sorted_samples) - 1, rank - 1))]


# Kept sessions, by connect string: they stay warm across reps.
POOL = {}


def sessions(connect, count):
    pool = POOL.setdefault(connect, [])
    while len(pool) < count:
        pool.append(client(connect))
    return pool[:count]


def uncontended(zk, path, cycles):
    lock = Lock(zk, path)
    samples = []
    acquires = []
    start = time.perf_counter()
    for _ in range(cycles):
        t0 = time.perf_counter()
        acquire(lock)
        acquires.append(time.perf_counter() - t0)
        lock.release()
        samples.append(time.perf_counter() - t0)
    secs = time.perf_counter() - start
    samples.sort()
    acquires.sort()
    return (
        "RESULT kind=uncontended cycles=%d secs=%.6f p50_ms=%.4f p99_ms=%.4f"
        " acq_p50_ms=%.4f acq_p99_ms=%.4f"
        % (
            cycles,
            secs,
            percentile(samples, 0.50) * 1e3,
            percentile(samples, 0.99) * 1e3,
            percentile(acquires, 0.50) * 1e3,
            percentile(acquires, 0.99) * 1e3,
        )
    )


def contended(clients, path, tasks, millis):
    """`tasks` threads, thread i on session i % len(clients), loop
    acquire -> release on ONE path for a fixed time. A hold that starts
    after the deadline is released and not counted."""
    # switches: holds by another thread than the previous hold's.
    # released: when the last holder began its release (time.monotonic(),
    # None: not yet); the next acquire to return in the window measures the
    # hand-off from there.
    counts = {"handoffs": 0, "switches": 0, "releases": 0, "last": None, "released": None}
    gaps = []
    count_lock = threading.Lock()
    failures = []
    go = threading.Event()
    deadline = [0.0]

    def run(ident, zk):
        lock = Lock(zk, path)
        try:
            go.wait()
            while True:
                acquire(lock)
                now = time.monotonic()
                late = now >= deadline[0]
                if not late:
                    with count_lock:
                        counts["handoffs"] += 1
                        if counts["last"] != ident:
                            counts["switches"] += 1
                        counts["last"] = ident
                        if counts["released"] is not None:
                            gaps.append(now - counts["released"])
                with count_lock:
                    counts["released"] = time.monotonic()
                lock.release()
                with count_lock:
                    counts["releases"] += 1
                if late:
                    break
        except Exception as err:  # reported below
            failures.append(err)

    threads = [
        threading.Thread(target=run, args=(i, clients[i % len(clients)]), daemon=True)
        for i in range(tasks)
    ]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + millis / 1000.0
    go.set()
    join_until = time.monotonic() + millis / 1000.0 + 2 * ACQUIRE_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.001, join_until - time.monotonic()))
    if failures:
        raise RuntimeError("a contender failed: %r" % failures[0])
    if any(thread.is_alive() for thread in threads):
        raise RuntimeError("a contender did not finish")
    gap = ""
    if gaps:
        gaps.sort()
        gap = " handoff_p50_ms=%.3f handoff_p99_ms=%.3f" % (
            percentile(gaps, 0.50) * 1e3,
            percentile(gaps, 0.99) * 1e3,
        )
    return (
        "RESULT kind=contended sessions=%d tasks=%d handoffs=%d switches=%d releases=%d secs=%.3f%s"
        % (
            len(clients),
            tasks,
            counts["handoffs"],
            counts["switches"],
            counts["releases"],
            millis / 1000.0,
            gap,
        )
    )


def entities(zk, base, tasks, millis):
    """`tasks` threads on ONE session, thread i on a path of its own
    (<base>/e<i>): one lock per entity, as services take locks. Each loops
    acquire -> release for a fixed time; no thread waits for another. A
    hold that starts after the deadline is released and not counted."""
    counts = {"handoffs": 0, "releases": 0}
    count_lock = threading.Lock()
    failures = []
    go = threading.Event()
    deadline = [0.0]

    def run(lock):
        try:
            go.wait()
            while True:
                acquire(lock)
                late = time.monotonic() >= deadline[0]
                lock.release()
                with count_lock:
                    if not late:
                        counts["handoffs"] += 1
                    counts["releases"] += 1
                if late:
                    break
        except Exception as err:  # reported below
            failures.append(err)

    threads = [
        threading.Thread(target=run, args=(Lock(zk, "%s/e%d" % (base, i)),), daemon=True)
        for i in range(tasks)
    ]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + millis / 1000.0
    go.set()
    join_until = time.monotonic() + millis / 1000.0 + 2 * ACQUIRE_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.001, join_until - time.monotonic()))
    if failures:
        raise RuntimeError("an entity's task failed: %r" % failures[0])
    if any(thread.is_alive() for thread in threads):
        raise RuntimeError("an entity's task did not finish")
    return "RESULT kind=entities tasks=%d handoffs=%d releases=%d secs=%.3f" % (
        tasks,
        counts["handoffs"],
        counts["releases"],
        millis / 1000.0,
    )


def serve():
    print("READY version=%s" % KAZOO_VERSION, flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        try:
            if words[0] == "connect":
                sessions(words[1], int(words[2]))
                answer = "RESULT kind=connect sessions=%s" % words[2]
            elif words[0] == "uncontended":
                answer = uncontended(sessions(words[1], 1)[0], words[2], int(words[3]))
            elif words[0] == "contended":
                answer = contended(
                    sessions(words[1], int(words[3])), words[2], int(words[4]), int(words[5])
                )
            elif words[0] == "entities":
                answer = entities(
                    sessions(words[1], 1)[0], words[2], int(words[3]), int(words[4])
                )
            else:
                answer = "FAILED: unknown command %s" % words[0]
        except Exception as err:  # the harness shows this line as the reason
            answer = "FAILED: %r" % (err,)
        print(answer.replace("\n", " "), flush=True)
    for pool in POOL.values():
        for zk in pool:
            zk.stop()
            zk.close()


def rss_kib():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def memory(connect, path, client_count, waiters):
    """One client holds the lock; `waiters` threads (over `client_count`
    sessions) block in acquire() behind it. Reports the RSS growth."""
    holder_zk = client(connect)
    holder = Lock(holder_zk, path)
    clients = [client(connect) for _ in range(client_count)]
    acquire(holder)
    locks = [Lock(clients[i % client_count], path) for i in range(waiters)]
    gc.collect()
    time.sleep(0.1)
    before = rss_kib()
    failures = []

    def run(lock):
        try:
            acquire(lock)
            lock.release()
        except Exception as err:  # reported below
            failures.append(err)

    threads = [threading.Thread(target=run, args=(lock,), daemon=True) for lock in locks]
    for thread in threads:
        thread.start()
    wait_until = time.monotonic() + 30
    while len(holder_zk.get_children(path)) < waiters + 1:
        if time.monotonic() > wait_until or failures:
            raise RuntimeError("the waiters did not all queue: %r" % failures[:1])
        time.sleep(0.02)
    time.sleep(0.3)  # let every waiter set its watch and park
    gc.collect()
    after = rss_kib()
    holder.release()
    for thread in threads:
        thread.join(2 * ACQUIRE_TIMEOUT_S)
    if failures:
        raise RuntimeError("a waiter failed: %r" % failures[0])
    print(
        "RESULT kind=memory waiters=%d rss_kib_before=%d rss_kib_after=%d"
        % (waiters, before, after)
    )
    for zk in clients + [holder_zk]:
        zk.stop()
        zk.close()


def main(argv):
    if len(argv) == 2 and argv[1] == "serve":
        serve()
        return 0
    if len(argv) != 6 or argv[1] != "memory":
        print(__doc__, file=sys.stderr)
        return 2
    connect, path, a, b = argv[2], argv[3], int(argv[4]), int(argv[5])
    try:
        memory(connect, path, a, b)
    except Exception as err:  # the harness shows this line as the reason
        print("FAILED: %r" % err, file=sys.stderr)
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
