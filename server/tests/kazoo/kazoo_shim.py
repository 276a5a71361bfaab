"""A pytest plugin that runs kazoo's own test suite against a server that is already running,
instead of the ZooKeeper cluster kazoo's harness starts from Java.

kazoo's test cases (``kazoo.testing.KazooTestCase``) ask ``kazoo.testing.harness`` for a
"global cluster" and connect to its servers. This plugin replaces that cluster with one
server:

* ``ZK_HOSTS=host:port``: a server someone else started (the Rust test starts Apache
  ZooKeeper this way), or
* ``ZK_CURATOR_BIN=/path/to/zk-curator``: the plugin starts ``zk-curator server --port 0``
  itself, reads the connect string it prints, and stops that process (by its own handle) when
  the session ends, or
* ``ZK_SHIM_SERVER=real``: the plugin starts Apache ZooKeeper 3.8 from Debian's jars
  (``/usr/share/java``) on a free 127.0.0.1 port with a private data directory, configured as
  kazoo's harness configures its servers (super user ``super:test``), and stops it the same
  way. This is how the figures for Apache ZooKeeper were measured.

Run it as ``python3 -m pytest -p kazoo_shim --pyargs kazoo.tests.test_lock ...`` with this
directory on ``PYTHONPATH``. The modules to run, and those left out, are listed in
``MODULES`` and ``EXCLUDED`` below; ``DESELECTED`` names single tests that fail on Apache
ZooKeeper 3.8 through this shim too, so they say nothing about the embedded server, and
``RACY`` those whose outcome is a timing race on either server (``kazoo_races.py`` in this
directory forces the races in kazoo's lock tests on demand, on either server).
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import kazoo.testing.harness as harness

# kazoo's test modules that run against one running server.
MODULES = [
    "kazoo.tests.test_barrier",
    "kazoo.tests.test_cache",
    "kazoo.tests.test_client",
    "kazoo.tests.test_connection",
    "kazoo.tests.test_counter",
    "kazoo.tests.test_election",
    "kazoo.tests.test_lease",
    "kazoo.tests.test_lock",
    "kazoo.tests.test_partitioner",
    "kazoo.tests.test_party",
    "kazoo.tests.test_queue",
    "kazoo.tests.test_watchers",
    "kazoo.tests.test_paths",
    "kazoo.tests.test_retry",
    "kazoo.tests.test_security",
    "kazoo.tests.test_exceptions",
    "kazoo.tests.test_hosts",
    "kazoo.tests.test_build",
    "kazoo.tests.test_utils",
    "kazoo.tests.test_threading_handler",
    "kazoo.tests.test_interrupt",
]

# Modules left out, and why.
EXCLUDED = {
    "kazoo.tests.test_sasl": "SASL (not supported by the embedded server; needs a JAAS setup)",
    "kazoo.tests.test_eventlet_handler": "needs eventlet (not installed with python3-kazoo)",
    "kazoo.tests.test_gevent_handler": "needs gevent (not installed with python3-kazoo)",
}

# Tests (a `Class::test` or a whole `::Class::`) left out because they stop servers or
# reconfigure the ensemble; each fails on Apache ZooKeeper 3.8 through this shim as well, so
# it says nothing about the embedded server.
DESELECTED = {
    "::TestClient::test_request_queuing_session_expired": "stops the cluster's servers",
    "::TestClient::test_request_queuing_session_recovered": "stops the cluster's servers",
    "::TestClient::test_update_host_list": "stops the cluster's servers",
    "::TestReadOnlyMode::test_read_only": "stops two servers of a 3-node cluster",
    "::TestReconfig::": "reconfiguration of a 3-node ensemble (reconfigEnabled)",
}

# Tests left out because their outcome is a race the server does not decide.
RACY = {
    # It sends a 1 MB setData, then asks its own connection thread to drop the connection,
    # and expects the set to fail. When the reply is back before that thread handles the drop
    # (a server that answers from memory, a loaded machine), the set succeeds and the test
    # fails; it did once on the embedded server while the machine was busy compiling. Real
    # ZooKeeper usually loses the race by syncing 1 MB to its log first.
    "::TestConnectionDrop::test_connection_dropped": "races the client's own drop against a 1 MB reply",
    # After starting the thread that expires the client's session, the main thread waits for
    # the semaphore's `wake_event`. The loss sets it, but the semaphore, retrying its acquire
    # after the loss, clears it at the top of its next round and waits for the only lease,
    # which the main thread frees after its wait: a main thread that comes to the wait after
    # that clear waits forever (pytest-timeout fails it at 60 s). When the semaphore is still
    # waiting for a reply as the loss arrives, the clear comes after the reconnection and a
    # retry back-off (about 0.1-0.6 s later); when it is already parked waiting for a lease,
    # within a few milliseconds, less than the GIL's 5 ms switch interval. It timed out once
    # in 8 suite runs on this server. Nothing the server does decides it: on a loaded machine
    # (load average 8 on 2 cores), 100 runs each through `kazoo_races.py semaphore` missed
    # the wake-up once on Apache ZooKeeper 3.8 (once more with `forceSync=no`) and not on
    # this server, with a margin under 10 ms in 6 (7) and 16 runs; `--stall 0.5` makes every
    # run miss it on either server.
    "::TestSemaphore::test_handle_session_loss::": "main thread can miss the semaphore's wake-up after the session loss",
    # After letting contender n go, the main thread waits while `active_thread` is set,
    # meaning until contender n is done; if contender n has released and contender n+1 has
    # taken the lock and set `active_thread` before the main thread looks, each waits for the
    # other. pytest-timeout fails the test, but kazoo's tearDown then joins the blocked
    # contender with no timeout, so the whole run hangs. The window is contender n's release
    # and contender n+1's acquire: a few milliseconds, widened on a default ZooKeeper by the
    # fsync of the release's delete. On a loaded machine, 60 runs each through
    # `kazoo_races.py lock` hit it 5 times on this server, 4 on Apache ZooKeeper 3.8 with
    # `forceSync=no` and none on ZooKeeper with its default fsync; `--stall 0.5` hits it on
    # every run on either server. It hung one of 15 runs of this module here.
    "::KazooLockTests::test_lock::": "main thread can look after the next contender took the lock",
}


class _Server:
    """One running server, as kazoo's harness sees a cluster member."""

    def __init__(self, address):
        self.address = address
        self.running = True

    def run(self):
        pass

    def stop(self):
        raise RuntimeError("kazoo_shim cannot stop the server; exclude this test")

    def destroy(self):
        pass


class _Cluster(list):
    def start(self):
        pass

    def stop(self):
        raise RuntimeError("kazoo_shim cannot stop the server; exclude this test")

    def terminate(self):
        pass


_CLUSTER = None
_PROCESS = None
_TEMP = None

# `super:test`, digested as ZooKeeper's DigestAuthenticationProvider does (kazoo's harness
# uses the same value).
_SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _four_letter(port, word):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(word.encode())
            return s.recv(64).decode(errors="replace")
    except OSError:
        return ""


def _start_real_zookeeper():
    """Starts Apache ZooKeeper from Debian's jars; returns its connect string."""
    global _PROCESS, _TEMP
    jars = "/usr/share/java"
    classpath = ":".join(
        os.path.join(jars, j) for j in ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-nop.jar")
    )
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java not found (apt-get install -y zookeeper)")
    _TEMP = tempfile.mkdtemp(prefix="kazoo-shim-zk-")
    port = _free_port()
    config = os.path.join(_TEMP, "zoo.cfg")
    with open(config, "w") as f:
        f.write(
            "tickTime=2000\nclientPort=%d\nclientPortAddress=127.0.0.1\ndataDir=%s\n"
            "admin.enableServer=false\n4lw.commands.whitelist=*\n" % (port, _TEMP)
        )
    _PROCESS = subprocess.Popen(
        [java, "-Xmx256m", "-Dzookeeper.DigestAuthenticationProvider.superDigest=" + _SUPER_DIGEST,
         "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while _four_letter(port, "ruok") != "imok":
        if _PROCESS.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("Apache ZooKeeper did not start")
        time.sleep(0.1)
    return "127.0.0.1:%d" % port


def _start_server():
    """The connect string of the server to test, starting `zk-curator server` if asked."""
    global _PROCESS
    hosts = os.environ.get("ZK_HOSTS")
    if hosts:
        return hosts
    if os.environ.get("ZK_SHIM_SERVER") == "real":
        return _start_real_zookeeper()
    binary = os.environ.get("ZK_CURATOR_BIN")
    if not binary:
        raise RuntimeError(
            "set ZK_HOSTS=host:port, ZK_SHIM_SERVER=real or ZK_CURATOR_BIN=/path/to/zk-curator"
        )
    # kazoo's harness makes `super:test` a super user; the embedded server gets the same.
    _PROCESS = subprocess.Popen(
        [binary, "server", "--port", "0", "--super-user", "super:test"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = _PROCESS.stdout.readline().strip()
    if not line:
        _PROCESS.kill()
        raise RuntimeError("zk-curator server printed no connect string")
    return line


def _cluster():
    global _CLUSTER
    if _CLUSTER is None:
        _CLUSTER = _Cluster([_Server(_start_server())])
    return _CLUSTER


def pytest_configure(config):
    harness.get_global_cluster = _cluster


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        name = item.nodeid.split("/")[-1]
        if any(d in "::" + name + "::" for d in [*DESELECTED, *RACY]):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_unconfigure(config):
    global _PROCESS
    if _PROCESS is not None:
        _PROCESS.terminate()
        try:
            _PROCESS.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _PROCESS.kill()
            _PROCESS.wait()
        _PROCESS = None
    if _TEMP is not None:
        shutil.rmtree(_TEMP, ignore_errors=True)
