"""A kazoo (Python) client takes and releases a lock, driven over stdin/stdout
by testing/tests/embedded_kazoo.rs: it prints `acquired <node>`, waits for a
line on stdin, releases, and prints `released`."""
import sys

from kazoo.client import KazooClient

hosts, path = sys.argv[1], sys.argv[2]
client = KazooClient(hosts=hosts, timeout=10.0)
client.start(timeout=20)
lock = client.Lock(path, "kazoo-contender")
if not lock.acquire(timeout=20):
    print("timeout", flush=True)
    sys.exit(2)
print("acquired " + str(lock.node), flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
client.stop()
client.close()
