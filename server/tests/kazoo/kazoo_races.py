"""Shows, on demand, the timing races for which ``kazoo_shim.RACY`` leaves kazoo tests out.

Each race is a missed wake-up inside one of kazoo's own tests: the test's main thread checks
(or waits for) a flag that another thread of the test may already have moved on from. Whether
it is missed depends only on how late the main thread is scheduled, not on the server. This
script runs the test in a loop against the server ``kazoo_shim`` picks (``ZK_CURATOR_BIN``,
``ZK_SHIM_SERVER=real`` or ``ZK_HOSTS``, as for the shim) and, with ``--stall``, holds the
main thread for that long at the racy point, as a loaded machine sometimes does. Instead of
hanging as the unmodified test does, each run that hits the race is counted as ``missed`` and
unblocked: the main thread's wait is bounded, and a run counts as missed only when, at the
end of that bound, the test is in the state it cannot leave (the semaphore's event clear,
or the contender holding the lock waiting for an event nobody set).

    PYTHONPATH=server/tests/kazoo ZK_CURATOR_BIN=target/debug/zk-curator \\
        /usr/bin/python3 server/tests/kazoo/kazoo_races.py semaphore --runs 10 --stall 0.5

Races:

* ``semaphore``: ``TestSemaphore::test_handle_session_loss``. After starting the thread that
  expires the session, the main thread waits for ``expire_semaphore.wake_event``. The session
  loss sets that event, but the semaphore's own acquire loop, which is retrying after the
  loss, clears it again at the top of its next round (``Semaphore._inner_acquire``) and then
  waits for a lease that only the main thread can free. A main thread that comes to its wait
  after that clear waits forever.
* ``lock``: ``KazooLockTests::test_lock``. After letting contender *n* go (``event.set()``),
  the main thread waits while ``active_thread`` is set, meaning "until contender *n* is
  done". When contender *n* releases and contender *n+1* takes the lock and sets
  ``active_thread`` before the main thread looks, the main thread waits for contender *n+1*,
  which waits for the main thread. The window is the time contender *n* needs to wake,
  release (one round trip) and contender *n+1* to see the deletion and take the lock (a
  notification and a round trip): a few milliseconds. pytest-timeout then fails the test,
  but kazoo's ``tearDown`` joins the blocked contender thread with no timeout, so the whole
  pytest run hangs.

Each run prints how it ended; the semaphore race also prints the main thread's margin (how
long before the semaphore consumed the wake-up the main thread came to wait for it).
"""

import argparse
import io
import logging
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kazoo_shim  # noqa: E402
import kazoo.recipe.lock as kazoo_lock  # noqa: E402
import kazoo.testing.harness as harness  # noqa: E402
from kazoo.tests import test_lock  # noqa: E402

# How long a stalled main thread waits before the run counts as having hit the race.
MISSED_AFTER = 10.0


class Counters:
    """What the patched events saw: runs that hit a race, the event the main thread waited on."""

    def __init__(self):
        self.missed = 0
        self.watched = None


COUNTERS = Counters()


class _RaceHit(Exception):
    """Ends a run that hit the race instead of letting it hang."""


def _is_main():
    return threading.current_thread() is threading.main_thread()


class _SemaphoreWakeEvent(threading.Event):
    """``Semaphore.wake_event``, whose wait from the test's main thread starts late.

    It notes when the main thread comes to wait, when the event is first set (the session
    loss) and when the semaphore first clears it after that: the difference is the margin the
    main thread had. Near zero or below, the unmodified test can hang (the arrival is noted
    a little before the event is looked at)."""

    stall = 0.0

    def __init__(self):
        super().__init__()
        self.arrived = None
        self.first_set = None
        self.consumed = None

    def set(self):
        if self.first_set is None:
            self.first_set = time.monotonic()
        super().set()

    def clear(self):
        if self.first_set is not None and self.consumed is None:
            self.consumed = time.monotonic()
        super().clear()

    def wait(self, timeout=None):
        if not _is_main():
            return super().wait(timeout)
        self.arrived = time.monotonic()
        COUNTERS.watched = self
        time.sleep(self.stall)
        if super().wait(MISSED_AFTER if timeout is None else timeout):
            return True
        # The semaphore cleared the event before the main thread got here: the unmodified
        # test waits here forever. Count it and let the test go on.
        COUNTERS.missed += 1
        return True

    def margin(self):
        """Seconds between the main thread's arrival and the clear that consumed the loss."""
        if self.arrived is None or self.consumed is None:
            return None
        return self.consumed - self.arrived


def _patch_semaphore(stall):
    _SemaphoreWakeEvent.stall = stall
    original = kazoo_lock.Semaphore.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.wake_event = _SemaphoreWakeEvent()

    kazoo_lock.Semaphore.__init__ = init
    return lambda: test_lock.TestSemaphore("test_handle_session_loss")


class _ContenderEvent(threading.Event):
    """A contender's event in ``test_lock``. Setting it from the main thread stalls the main
    thread afterwards; waiting on it from a contender notes the contender's name."""

    stall = 0.0
    all_events = []

    def __init__(self, case):
        super().__init__()
        self.case = case
        self.contender = None
        _ContenderEvent.all_events.append(self)

    def wait(self, timeout=None):
        # The contender set `active_thread` to its name just before, and holds the lock.
        self.contender = self.case.active_thread
        return super().wait(timeout)

    def set(self):
        super().set()
        if _is_main():
            time.sleep(self.stall)


class _MainCondition(threading.Condition):
    """``test_lock``'s condition. When the main thread's wait on it lasts long, it looks for
    the deadlock: the contender named by ``active_thread`` waits for an event that only the
    main thread would set."""

    def __init__(self, case):
        super().__init__()
        self.case = case

    def wait(self, timeout=None):
        if not _is_main() or timeout is not None:
            return super().wait(timeout)
        if super().wait(MISSED_AFTER / 2):
            return True
        active = self.case.active_thread
        stuck = [
            e for e in _ContenderEvent.all_events if e.contender == active and not e.is_set()
        ]
        if active is None or not stuck:
            return False  # kazoo's loop looks again
        # The unmodified main thread waits here forever. Count it, let every contender go,
        # and end the run (kazoo's tearDown then joins the contenders, which finish).
        COUNTERS.missed += 1
        for event in _ContenderEvent.all_events:
            threading.Event.set(event)
        raise _RaceHit("contender %s took the lock before the main thread looked" % active)


def _patch_lock(stall):
    _ContenderEvent.stall = stall
    test_lock.KazooLockTests.make_event = lambda self: _ContenderEvent(self)
    test_lock.KazooLockTests.make_condition = lambda self: _MainCondition(self)
    return lambda: test_lock.KazooLockTests("test_lock")


# Each race: patches kazoo's test once, returns a factory of the test case to run.
RACES = {"semaphore": _patch_semaphore, "lock": _patch_lock}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("race", choices=sorted(RACES))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--stall", type=float, default=0.0, help="seconds (default 0)")
    args = parser.parse_args()
    if args.runs < 1 or args.stall < 0:
        parser.error("--runs must be at least 1 and --stall not negative")
    logging.basicConfig(level=logging.ERROR)
    harness.get_global_cluster = kazoo_shim._cluster
    new_case = RACES[args.race](args.stall)
    # Contender threads of a run ended by _RaceHit fail once their client is stopped.
    threading.excepthook = lambda hook_args: None
    failed = 0
    margins = []
    try:
        for run in range(args.runs):
            _ContenderEvent.all_events = []
            case = new_case()
            before = COUNTERS.missed
            COUNTERS.watched = None
            started = time.monotonic()
            result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(case)
            missed = COUNTERS.missed > before
            failed += 0 if result.wasSuccessful() or missed else 1
            margin = COUNTERS.watched.margin() if COUNTERS.watched is not None else None
            if margin is not None:
                margins.append(margin)
            print(
                "run %d: %s (%.2fs)%s"
                % (
                    run + 1,
                    "missed wake-up" if missed else ("ok" if result.wasSuccessful() else "failed"),
                    time.monotonic() - started,
                    "" if margin is None else ", margin %.1f ms" % (margin * 1000),
                ),
                flush=True,
            )
    finally:
        kazoo_shim.pytest_unconfigure(None)
    print(
        "%s: %d runs, stall %.2fs: %d missed wake-ups, %d other failures"
        % (args.race, args.runs, args.stall, COUNTERS.missed, failed)
    )
    if margins:
        margins.sort()
        print(
            "main thread's margin before the semaphore consumed the wake-up: "
            "min %.1f ms, median %.1f ms, max %.1f ms; under 10 ms in %d of %d runs"
            % (
                margins[0] * 1000,
                margins[len(margins) // 2] * 1000,
                margins[-1] * 1000,
                sum(1 for m in margins if m < 0.010),
                len(margins),
            )
        )


if __name__ == "__main__":
    main()
