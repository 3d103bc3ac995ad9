"""What the cache tests share (test_cache.py, test_cache_brokers.py, test_cache_compaction.py):
an HTTP client for a cache's keys, a compare-and-set race, and a throwaway PostgreSQL for
the postgres-meta variants."""
import http.client
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse

from harness import DEADLINE_S, free_port


def call(node, method, path, body=None, timeout=DEADLINE_S):
    """(status, headers dict (lower-case names), body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", node.http_port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/octet-stream"} if body is not None else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


class CacheClient:
    def __init__(self, node, cache="c", tenant="t", ns="n"):
        self.node = node
        self.base = "%s/caches/%s" % (node.ns_path(tenant, ns), cache)

    def path(self, key, **q):
        p = self.base + "/keys/" + urllib.parse.quote(key, safe="")
        return p + ("?" + urllib.parse.urlencode(q) if q else "")

    def put(self, key, value, **q):
        st, _, body = call(self.node, "PUT", self.path(key, **q), value)
        return st, json.loads(body) if body else None

    def get(self, key):
        """(status, value or problem, revision, expires_at)"""
        st, h, body = call(self.node, "GET", self.path(key))
        if st != 200:
            return st, json.loads(body), None, None
        exp = h.get("sluice-expires-at")
        return st, body, int(h["sluice-revision"]), int(exp) if exp else None

    def delete(self, key, **q):
        st, _, body = call(self.node, "DELETE", self.path(key, **q))
        return st, json.loads(body) if body else None

    def list(self, **q):
        st, _, body = call(self.node, "GET", self.base + "/keys" + ("?" + urllib.parse.urlencode(q) if q else ""))
        return st, json.loads(body)

    def keys(self, prefix=""):
        st, body = self.list(prefix=prefix, limit=1000)
        assert st == 200, body
        return [k["key"] for k in body["keys"]]


def indexed_shards(node):
    """The node's sluice_cache_indexed_shards gauge."""
    st, _, body = call(node, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("sluice_cache_indexed_shards "):
            return int(float(line.split()[1]))
    raise AssertionError("no sluice_cache_indexed_shards in /metrics")


def create_cache(node, name="c", **spec):
    node.ensure_ns()
    body = {"name": name}
    body.update(spec)
    return node.request("POST", node.ns_path() + "/caches", body)


def cas_race(clients, key, wins_wanted, deadline_s=120):
    """Clients (one per thread) read the key's revision and put with if_revision = it, until
    `wins_wanted` puts have won in all, or the deadline. Returns [(if_revision, new revision,
    value)] of every win and the number of 409 revision_mismatch answers."""
    wins, lock, losses = [], threading.Lock(), [0]
    stop = time.monotonic() + deadline_s
    errors = []

    def worker(i, c):
        n = 0
        while time.monotonic() < stop:
            with lock:
                if len(wins) >= wins_wanted:
                    return
            st, _, rev, _ = c.get(key)
            cur = rev if st == 200 else 0
            value = b"w%d-%d" % (i, n)
            n += 1
            st, body = c.put(key, value, if_revision=cur)
            with lock:
                if st == 200:
                    wins.append((cur, body["revision"], value))
                elif st == 409 and body["code"] == "revision_mismatch":
                    losses[0] += 1
                else:
                    errors.append((st, body))
                    return

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline_s + 60)
    assert not errors, errors
    return wins, losses[0]


def check_chain(test, wins, c, key):
    """Exactly one put won each revision: the winners form one chain from 0."""
    by_expected = {}
    for exp, new, _ in wins:
        by_expected.setdefault(exp, []).append(new)
    test.assertEqual([e for e, v in by_expected.items() if len(v) > 1], [],
                     "two puts won the same revision: %r" % by_expected)
    chain = sorted(wins, key=lambda w: w[1])
    prev = 0
    for exp, new, _ in chain:
        test.assertEqual(exp, prev, "a win did not build on the previous win: %r" % chain)
        test.assertGreater(new, prev)
        prev = new
    st, value, rev, _ = c.get(key)
    test.assertEqual((st, rev, value), (200, chain[-1][1], chain[-1][2]))


PG_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support", "pg_test_server.sh")


class ThrowawayPostgres:
    """A PostgreSQL of the test class's own (tests/support/pg_test_server.sh on a free
    port), so the cache tests run against postgres-meta without the ctest fixture; each test
    gets a schema of its own."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pg_work = tempfile.mkdtemp(prefix="sluice-pgcache-")
        os.chmod(cls.pg_work, 0o755)
        cls.pg_dir = os.path.join(cls.pg_work, "pg")
        port = free_port()
        p = subprocess.run(["bash", PG_SCRIPT, "start", cls.pg_dir, str(port)], capture_output=True, text=True,
                           timeout=180)
        if p.returncode != 0:
            shutil.rmtree(cls.pg_work, ignore_errors=True)
            raise AssertionError("cannot start a throwaway PostgreSQL: " + p.stdout + p.stderr)
        cls.pg_url = "host=127.0.0.1 port=%d user=postgres dbname=sluice_test" % port

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["bash", PG_SCRIPT, "stop", cls.pg_dir], capture_output=True, timeout=180)
        shutil.rmtree(cls.pg_work, ignore_errors=True)
        super().tearDownClass()

    def pg_config(self, node_id):
        if not hasattr(self, "schema"):
            self.schema = "cache_%08x" % random.getrandbits(32)
        return {"node.id": str(node_id), "node.roles": "broker", "metadata.backend": "postgres",
                "metadata.postgres.url": self.pg_url, "metadata.postgres.schema": self.schema}
