"""A kazoo participant for tests/kazoo_interop.rs: takes a kazoo lock (or
leads a kazoo election) on one path, round after round, beside Rust
participants of zk-curator on the same path.

    kazoo_participant.py CONNECT MODE PATH ROUNDS MARKERS

MODE: `lock` (kazoo's Lock), `write` (WriteLock), `read` (ReadLock),
`semaphore` (a Semaphore of 2 leases), `election` (Election.run), `hold`
(a Lock held until standard input closes, then released), or `lead` (an
Election led until standard input closes).

Each critical section goes as the Rust side's does: a marker file
`<w|r>-python-<pid>-<round>` is created in MARKERS, the markers present are
checked against the rule (a writer alone; a reader with no writer), a line
`python` is appended to MARKERS/log, and the section's wall-clock start and
end (nanoseconds) are appended to MARKERS/intervals as
`<w|r> python <start> <end>` for the test to check for overlaps afterwards.
Prints `ready` once connected, `held` in `hold` mode once it holds, `led`
in `lead` mode once it leads, and
exits 0 with no violation seen, 1 with some, 2 on a usage error.
"""
import os
import sys
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout

SECTION_S = 0.015


SEMAPHORE_LEASES = 2


def allowed(markers, kind):
    names = os.listdir(markers)
    writers = sum(1 for n in names if n.startswith("w-"))
    readers = sum(1 for n in names if n.startswith("r-"))
    leases = sum(1 for n in names if n.startswith("s-"))
    if kind == "w":
        return writers == 1 and readers == 0
    if kind == "s":
        return leases <= SEMAPHORE_LEASES
    return writers == 0


def section(markers, kind, tag):
    start = time.time_ns()
    mine = os.path.join(markers, "%s-python-%d-%s" % (kind, os.getpid(), tag))
    open(mine, "x").close()
    with open(os.path.join(markers, "log"), "a") as log:
        log.write("python\n")
    ok = allowed(markers, kind)
    time.sleep(SECTION_S)
    os.remove(mine)
    end = time.time_ns()
    with open(os.path.join(markers, "intervals"), "a") as out:
        out.write("%s python %d %d\n" % (kind, start, end))
    return ok


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    connect, mode, path, rounds, markers = sys.argv[1:]
    rounds = int(rounds)
    zk = KazooClient(hosts=connect, timeout=10.0)
    zk.start(timeout=30)
    print("ready", flush=True)
    identifier = "python-%d" % os.getpid()
    violations = 0
    try:
        if mode == "hold":
            lock = zk.Lock(path, identifier)
            lock.acquire(timeout=60)
            print("held", flush=True)
            sys.stdin.read()
            lock.release()
            return 0
        if mode == "lead":
            def lead():
                print("led", flush=True)
                sys.stdin.read()
            zk.Election(path, identifier).run(lead)
            return 0
        if mode == "semaphore":
            semaphore = zk.Semaphore(path, identifier, max_leases=SEMAPHORE_LEASES)
            for round_ in range(rounds):
                if not semaphore.acquire(timeout=60):
                    print("no lease in 60 s", file=sys.stderr)
                    return 1
                try:
                    violations += 0 if section(markers, "s", round_) else 1
                finally:
                    semaphore.release()
        elif mode == "election":
            election = zk.Election(path, identifier)
            for round_ in range(rounds):
                result = []
                election.run(lambda: result.append(section(markers, "w", round_)))
                violations += 0 if all(result) and result else 1
        else:
            make = {"lock": zk.Lock, "write": zk.WriteLock, "read": zk.ReadLock}.get(mode)
            if make is None:
                print("unknown mode %r" % mode, file=sys.stderr)
                return 2
            kind = "r" if mode == "read" else "w"
            lock = make(path, identifier)
            # kazoo 2.8's ReadLock waits for every writer present, even one
            # queued after it, which waits for it in turn (kazoo #650, fixed
            # in 2.9): a reader gives up after a short wait and queues again.
            wait_s = 2 if mode == "read" else 60
            gave_up = 0
            for round_ in range(rounds):
                while True:
                    try:
                        if lock.acquire(timeout=wait_s):
                            break
                    except LockTimeout:
                        pass
                    gave_up += 1
                    if gave_up > 60:
                        print("no lock after %d tries" % gave_up, file=sys.stderr)
                        return 1
                try:
                    violations += 0 if section(markers, kind, round_) else 1
                finally:
                    lock.release()
    finally:
        zk.stop()
        zk.close()
    print("violations %d" % violations, flush=True)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
