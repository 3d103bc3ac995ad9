"""Issue 13, caches: the data plane (docs/api.md "Caches") against real processes.

A cache incarnation's entries live in a hidden backing stream; these tests check what a
client sees: round trips, revisions, TTL expiry (also across a SIGKILL), acknowledged
writes across a SIGKILL, compare-and-set races, recreate and a broker that slept through a
delete and recreate, and every bad input."""
import http.client
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

from harness import DEADLINE_S, SLUICE_CLI, Node, free_port, poll

HOLD_BACK = {"metadata.bootstrap_hold_back": "stream_incarnations,cache_incarnations,replicated_shards,"
                                              "shard_reassignment,counters,cache_compaction,lost_copy_fetch"}


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


class CacheTests(unittest.TestCase):
    def setUp(self):
        self.nodes = []

    def tearDown(self):
        for n in self.nodes:
            n.cleanup()

    def node(self, **kw):
        n = Node(**kw)
        self.nodes.append(n)
        return n.start()

    def check_chain(self, wins, c, key):
        """Exactly one put won each revision: the winners form one chain from 0."""
        by_expected = {}
        for exp, new, _ in wins:
            by_expected.setdefault(exp, []).append(new)
        self.assertEqual([e for e, v in by_expected.items() if len(v) > 1], [],
                         "two puts won the same revision: %r" % by_expected)
        chain = sorted(wins, key=lambda w: w[1])
        prev = 0
        for exp, new, _ in chain:
            self.assertEqual(exp, prev, "a win did not build on the previous win: %r" % chain)
            self.assertGreater(new, prev)
            prev = new
        st, value, rev, _ = c.get(key)
        self.assertEqual((st, rev, value), (200, chain[-1][1], chain[-1][2]))

    def test_round_trip_revisions_and_list(self):
        n = self.node()
        create_cache(n)
        c = CacheClient(n)
        st, r1 = c.put("user:1", b"alice")
        self.assertEqual(st, 200, r1)
        self.assertNotIn("expires_at_ms", r1)
        st, value, rev, exp = c.get("user:1")
        self.assertEqual((st, value, rev, exp), (200, b"alice", r1["revision"], None))
        st, r2 = c.put("user:1", b"\x00\xffbinary")
        self.assertGreater(r2["revision"], r1["revision"], "revisions go up")
        self.assertEqual(c.get("user:1")[:3], (200, b"\x00\xffbinary", r2["revision"]))
        for k in ("user:2", "user:3", "order:1", "user:10"):
            self.assertEqual(c.put(k, b"v-" + k.encode())[0], 200)
        self.assertEqual(c.keys(), ["order:1", "user:1", "user:10", "user:2", "user:3"])
        self.assertEqual(c.keys("user:1"), ["user:1", "user:10"])
        # Paging: limit and the continuation.
        st, page = c.list(prefix="user:", limit=2)
        self.assertEqual(([k["key"] for k in page["keys"]], page["next"]), (["user:1", "user:10"], "user:10"))
        st, page = c.list(prefix="user:", limit=2, after=page["next"])
        self.assertEqual([k["key"] for k in page["keys"]], ["user:2", "user:3"])
        st, page = c.list(prefix="user:", limit=2, after="user:3")
        self.assertEqual((page["keys"], page.get("next")), ([], None))
        # Delete, then 404; a second delete is 404; the revision keeps going up afterwards.
        st, d = c.delete("user:1")
        self.assertEqual(st, 200, d)
        self.assertGreater(d["revision"], r2["revision"])
        st, p, _, _ = c.get("user:1")
        self.assertEqual((st, p["code"]), (404, "not_found"))
        self.assertEqual(c.delete("user:1")[0], 404)
        self.assertNotIn("user:1", c.keys())
        st, r3 = c.put("user:1", b"again")
        self.assertGreater(r3["revision"], d["revision"])
        # Conditional writes: 0 = only if absent; a stale revision is refused and writes nothing.
        st, body = c.put("user:1", b"nope", if_revision=0)
        self.assertEqual((st, body["code"], body["current_revision"]), (409, "revision_mismatch", r3["revision"]))
        st, body = c.put("fresh", b"x", if_revision=0)
        self.assertEqual(st, 200, body)
        st, body = c.put("user:1", b"cas", if_revision=r3["revision"])
        self.assertEqual(st, 200, body)
        st, body = c.delete("user:1", if_revision=r3["revision"])
        self.assertEqual((st, body["code"]), (409, "revision_mismatch"))
        self.assertEqual(c.get("user:1")[1], b"cas")
        # The backing stream is hidden and reserved.
        self.assertEqual(n.request("GET", n.ns_path() + "/streams")["streams"], [])

    def test_ttl_expiry_and_restart_does_not_bring_it_back(self):
        n = self.node()
        create_cache(n)
        create_cache(n, "d", default_ttl_ms=1000)
        c, d = CacheClient(n), CacheClient(n, "d")
        before = int(time.time() * 1000)
        st, r = c.put("short", b"s", ttl_ms=1000)
        self.assertEqual(st, 200, r)
        self.assertGreaterEqual(r["expires_at_ms"], before + 1000)
        self.assertLess(r["expires_at_ms"], before + 1000 + 30000)
        self.assertEqual(c.put("long", b"l", ttl_ms=3600000)[0], 200)
        self.assertEqual(c.put("forever", b"f")[0], 200)
        st, r = d.put("dflt", b"x")  # the cache's default_ttl_ms
        self.assertIn("expires_at_ms", r)
        st, _, _, exp = c.get("long")
        self.assertIsNotNone(exp)
        poll(lambda: c.get("short")[0] == 404, "the 1 s key to expire", timeout=30)
        poll(lambda: d.get("dflt")[0] == 404, "the default-TTL key to expire", timeout=30)
        self.assertEqual(c.keys(), ["forever", "long"], "an expired key is not listed")
        self.assertEqual(d.keys(), [])
        # if_revision sees an expired key as absent.
        self.assertEqual(c.put("short", b"s2", if_revision=0)[0], 200)
        self.assertEqual(c.put("short", b"s3", ttl_ms=500)[0], 200)
        poll(lambda: c.get("short")[0] == 404, "the rewritten key to expire", timeout=30)
        n.kill()
        n.start()
        self.assertEqual(c.get("short")[0], 404, "a restart does not bring an expired key back")
        self.assertEqual(d.get("dflt")[0], 404)
        self.assertEqual(c.get("forever")[:2], (200, b"f"))
        self.assertEqual(c.get("long")[:2], (200, b"l"))
        self.assertEqual(c.keys(), ["forever", "long"])

    def test_expiry_follows_the_leaders_clock_not_the_accepting_brokers(self):
        """A broker whose cache clock is an hour behind (cache.clock_skew_ms) accepts a put
        with a TTL: the expiry is the shard leader's append time + TTL (storage stamps it
        with the real clock), not the skewed clock's, and a restart (the index rebuilt from
        the log) computes the very same expiry."""
        n = self.node(extra={"cache.clock_skew_ms": "-3600000"})
        create_cache(n)
        c = CacheClient(n)
        before = int(time.time() * 1000)
        st, r = c.put("k", b"v", ttl_ms=600000)
        after = int(time.time() * 1000)
        self.assertEqual(st, 200, r)
        self.assertGreaterEqual(r["expires_at_ms"], before + 600000, "not the skewed clock's expiry")
        self.assertLessEqual(r["expires_at_ms"], after + 600000)
        st, value, rev, exp = c.get("k")
        self.assertEqual((st, value, exp), (200, b"v", r["expires_at_ms"]))
        st, listed = c.list()
        self.assertEqual(listed["keys"][0]["expires_at_ms"], r["expires_at_ms"])
        n.kill()
        n.start()
        self.assertEqual(c.get("k")[:4], (200, b"v", rev, r["expires_at_ms"]), "the same expiry after a restart")

    def test_every_acknowledged_put_survives_sigkill(self):
        n = self.node()
        create_cache(n)
        c = CacheClient(n)
        acked = {}
        lock = threading.Lock()

        def writer(w):
            for i in range(60):
                key = "k%d" % ((w * 7 + i) % 25)  # overlapping keys: overwrites across writers
                st, r = c.put(key, b"%d-%d" % (w, i))
                assert st == 200, r
                with lock:
                    if key not in acked or acked[key][0] < r["revision"]:
                        acked[key] = (r["revision"], b"%d-%d" % (w, i))

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(len(acked), 25)
        n.kill()
        n.start()
        for key, (rev, value) in acked.items():
            self.assertEqual(c.get(key)[:3], (200, value, rev), key)
        self.assertEqual(sorted(c.keys()), sorted(acked))

    def test_a_lone_brokers_leftover_backing_stream_is_deleted_when_it_starts_again(self):
        """The only broker dies between a cache's catalog delete and its backing stream's
        delete (failpoint cache.delete.after_catalog; cache.sweep.before_delete too, in case
        its own change feed gets there first). No other broker saw the delete, so it finds
        the leftover itself when it starts again, and a live cache's stream is kept."""
        n = Node(env={"SLUICE_FAILPOINTS": "cache.delete.after_catalog,cache.sweep.before_delete"})
        self.nodes.append(n)
        n.start()
        gone = create_cache(n, "gone")
        kept = create_cache(n, "kept")
        for name in ("gone", "kept"):
            self.assertEqual(CacheClient(n, name).put("k", b"v")[0], 200)
        backing = lambda c, name: "%s/streams/__cache.%d.%d.n.%s" % (n.ns_path(), c["incarnation"], c["created_seq"], name)
        self.assertEqual(call(n, "GET", backing(gone, "gone"))[0], 200)
        try:
            n.request("DELETE", n.ns_path() + "/caches/gone")
        except Exception:  # the failpoint kills the broker before it answers
            pass
        n.proc.wait(timeout=60)
        self.assertEqual(n.proc.returncode, -9, "the failpoint was not reached:\n" + n.log_tail())
        n.env.pop("SLUICE_FAILPOINTS")
        n.start()
        self.assertEqual(call(n, "GET", n.ns_path() + "/caches/gone")[0], 404, "the catalog delete was applied")
        poll(lambda: call(n, "GET", backing(gone, "gone"))[0] == 404, "the leftover backing stream to be deleted",
             timeout=60)
        swept = lambda: next(int(float(l.split()[1])) for l in call(n, "GET", "/metrics")[2].decode().splitlines()
                             if l.startswith("sluice_cache_leftovers_deleted_total "))
        poll(lambda: swept() == 1, "the leftover to be counted")
        with open(n.log_path, "rb") as f:
            self.assertIn(b"found 1 backing stream(s) of deleted caches at start", f.read())
        self.assertEqual(call(n, "GET", backing(kept, "kept"))[0], 200, "a live cache's backing stream is kept")
        self.assertEqual(CacheClient(n, "kept").get("k")[:2], (200, b"v"))

    def test_compare_and_set_race_8_clients(self):
        n = self.node()
        create_cache(n)
        clients = [CacheClient(n) for _ in range(8)]
        wins, losses = cas_race(clients, "counter", 40)
        self.assertGreaterEqual(len(wins), 40)
        self.check_chain(wins, clients[0], "counter")

    def test_recreate_serves_nothing_of_the_old_incarnation(self):
        n = self.node()
        old = create_cache(n)
        c = CacheClient(n)
        for i in range(10):
            self.assertEqual(c.put("old%d" % i, b"old")[0], 200)
        n.request("DELETE", n.ns_path() + "/caches/c")
        self.assertEqual(c.get("old0")[0], 404)  # the cache is gone
        self.assertEqual(c.get("old0")[1]["code"], "not_found")
        new = create_cache(n)
        self.assertGreater(new["incarnation"], old["incarnation"])
        for i in range(10):
            self.assertEqual(c.get("old%d" % i)[0], 404)
        self.assertEqual(c.keys(), [])
        st, r = c.put("old0", b"new")
        self.assertEqual(st, 200)
        self.assertEqual(c.get("old0")[1], b"new")
        self.assertEqual(c.put("old1", b"x", if_revision=0)[0], 200, "old1 is absent in the new incarnation")

    def test_a_compare_and_set_read_from_a_deleted_cache_never_writes_the_recreated_one(self):
        """Regression (review): revisions count within one incarnation, so a client that read
        revision R from a cache that was then deleted and created again could win an
        if_revision=R write on the new cache once a key there reached R. Reads and writes
        name the cache's incarnation; if_incarnation refuses another (409 conflict)."""
        n = self.node()
        old = create_cache(n)
        c = CacheClient(n)
        st, body = c.put("k", b"old")
        self.assertEqual((st, body["incarnation"]), (200, old["incarnation"]))
        st, h, _ = call(n, "GET", c.path("k"))
        self.assertEqual((st, int(h["sluice-cache-incarnation"])), (200, old["incarnation"]))
        n.request("DELETE", n.ns_path() + "/caches/c")
        new = create_cache(n)
        st, body = c.put("k", b"new")
        self.assertEqual((st, body["incarnation"]), (200, new["incarnation"]))
        rev = body["revision"]  # the revision matches: only the incarnation tells them apart
        for op in (lambda: c.put("k", b"stale", if_revision=rev, if_incarnation=old["incarnation"]),
                   lambda: c.delete("k", if_revision=rev, if_incarnation=old["incarnation"])):
            st, body = op()
            self.assertEqual((st, body["code"]), (409, "conflict"), body)
            self.assertIn("created again", body["detail"])
        self.assertEqual(c.get("k")[1:3], (b"new", rev), "nothing was written")
        for bad in ("-1", "x", "1.5"):
            st, body = c.put("k", b"v", if_incarnation=bad)
            self.assertEqual((st, body["code"]), (400, "invalid_argument"), bad)
        st, body = c.put("k", b"newer", if_revision=rev, if_incarnation=new["incarnation"])
        self.assertEqual(st, 200, body)
        self.assertEqual(c.get("k")[1], b"newer")

    def test_delete_and_recreate_at_once_never_serves_the_old_incarnation(self):
        """The broker that handles a delete forgets the cache at once, not when its change
        feed reports the delete: a recreate right after it (before the feed has caught up)
        answers nothing of the old incarnation."""
        n = self.node()
        create_cache(n)
        c = CacheClient(n)
        for rnd in range(8):
            for i in range(3):
                self.assertEqual(c.put("k%d" % i, b"round%d" % rnd)[0], 200)
            self.assertEqual(c.get("k0")[:2], (200, b"round%d" % rnd))  # the resolution is remembered
            n.request("DELETE", n.ns_path() + "/caches/c")
            create_cache(n)
            for i in range(3):
                st, body, _, _ = c.get("k%d" % i)
                self.assertEqual(st, 404, "round %d: k%d served from the old incarnation: %r" % (rnd, i, body))
            self.assertEqual(c.keys(), [], "round %d" % rnd)

    def test_recreate_before_cache_incarnations_is_finalized(self):
        """Level-8 behaviour: every create has incarnation 0 and a delete leaves the stream's
        data on disk; the backing stream's name carries the create's change sequence, so
        a recreated cache still starts empty."""
        n = self.node(extra=HOLD_BACK)
        old = create_cache(n)
        self.assertEqual(old["incarnation"], 0)
        c = CacheClient(n)
        for i in range(5):
            self.assertEqual(c.put("old%d" % i, b"old")[0], 200)
        n.request("DELETE", n.ns_path() + "/caches/c")
        new = create_cache(n)
        self.assertEqual(new["incarnation"], 0)
        for i in range(5):
            self.assertEqual(c.get("old%d" % i)[0], 404)
        self.assertEqual(c.keys(), [])

    def test_reserved_stream_names(self):
        n = self.node()
        cache = create_cache(n)
        self.assertEqual(CacheClient(n).put("k", b"v")[0], 200)
        st, body = n.request("POST", n.ns_path() + "/streams", {"name": "__mine"}, raw=True)
        self.assertEqual((st, json.loads(body)["code"]), (400, "invalid_name"))
        self.assertEqual(n.request("GET", n.ns_path() + "/streams")["streams"], [], "backing streams are not listed")
        backing = "__cache.%d.%d.n.c" % (cache["incarnation"], cache["created_seq"])
        base = n.ns_path() + "/streams/" + backing
        for method, path, body in (("GET", "/shards/0/records?offset=0", None),
                                   ("POST", "/records", {"records": [{"value": "x"}]}),
                                   ("GET", "/groups", None), ("GET", "/groups/g/shards/0/records", None),
                                   ("GET", "/shards/0/subscribe", None)):
            st, b = n.request(method, base + path, body, raw=True)
            self.assertEqual((st, json.loads(b)["code"]), (400, "invalid_name"), path)
        # The operator's paths reach it: a cache's shards are repaired like a stream's.
        self.assertEqual(n.request("GET", base)["name"], backing)
        shards = n.request("GET", base + "/shards")["shards"]
        self.assertEqual(len(shards), 4)
        self.assertEqual(sum(s["high_watermark"] for s in shards), 1, "one write so far")

    def test_bad_input(self):
        n = self.node(extra={"cache.max_value_bytes": "1024", "cache.max_key_bytes": "64"})
        create_cache(n)
        c = CacheClient(n)
        self.assertEqual(c.put("keep", b"v")[0], 200)

        def put_raw(path, value=b"v"):
            st, _, body = call(n, "PUT", c.base + path, value)
            return st, json.loads(body)

        cases = {
            "empty key": (put_raw("/keys/"), 400, "invalid_key"),
            "too long key": (c.put("k" * 65, b"v"), 400, "invalid_key"),
            "space in key": (put_raw("/keys/a%20b"), 400, "invalid_key"),
            "control byte in key": (put_raw("/keys/a%01b"), 400, "invalid_key"),
            "non-ASCII key": (put_raw("/keys/caf%C3%A9"), 400, "invalid_key"),
            # Dot segments (review): DELETE .../keys/.. normalized by a client or proxy is a
            # delete of the cache itself, so no such key can be written.
            "key ..": (put_raw("/keys/%2E%2E"), 400, "invalid_key"),
            "key .": (put_raw("/keys/%2e"), 400, "invalid_key"),
            "raw key ..": (put_raw("/keys/.."), 400, "invalid_key"),
            "value over cache.max_value_bytes": (c.put("big", b"x" * 1025), 413, "body_too_large"),
            "negative ttl": (c.put("t", b"v", ttl_ms=-5), 400, "invalid_argument"),
            "zero ttl": (c.put("t", b"v", ttl_ms=0), 400, "invalid_argument"),
            "junk ttl": (c.put("t", b"v", ttl_ms="soon"), 400, "invalid_argument"),
            "bad if_revision": (c.put("t", b"v", if_revision="abc"), 400, "invalid_argument"),
            "negative if_revision": (c.put("t", b"v", if_revision=-1), 400, "invalid_argument"),
            "ack=none": (c.put("t", b"v", ack="none"), 400, "invalid_argument"),
            "bad ack": (c.put("t", b"v", ack="all"), 400, "invalid_argument"),
            "unknown cache": (CacheClient(n, "nope").put("k", b"v"), 404, "not_found"),
            "unknown cache get": (CacheClient(n, "nope").get("k")[:2], 404, "not_found"),
            "unknown cache list": (CacheClient(n, "nope").list(), 404, "not_found"),
            "bad list limit": (c.list(limit=0), 400, "invalid_argument"),
            "bad list prefix": (c.list(prefix="a b"), 400, "invalid_key"),
            "bad cache name": (CacheClient(n, "..").put("k", b"v"), 400, "invalid_name"),
        }
        for what, ((st, body), want_st, want_code) in cases.items():
            self.assertEqual((st, body["code"]), (want_st, want_code), what)
        self.assertEqual(c.put("exact", b"x" * 1024)[0], 200, "a value at the limit is taken")
        self.assertEqual(c.keys(), ["exact", "keep"], "no bad request wrote anything")
        # Dots elsewhere in a key, and as a list prefix, are fine.
        self.assertEqual(c.put("...", b"d")[0], 200)
        self.assertEqual(c.put(".x", b"d")[0], 200)
        self.assertEqual(c.list(prefix=".")[0], 200)
        self.assertEqual(c.get("keep")[:2], (200, b"v"))

    def test_cli(self):
        n = self.node()
        n.ensure_ns()

        def cli(*args, stdin=None):
            p = subprocess.run([SLUICE_CLI, "--url", n.url, "cache"] + list(args), input=stdin,
                               capture_output=True, timeout=DEADLINE_S)
            return p.returncode, p.stdout, p.stderr.decode()

        self.assertEqual(cli("--help")[0], 0)
        self.assertIn(b"sluice cache put", cli("--help")[1])
        self.assertEqual(cli("frobnicate", "t/n/c")[0], 2)
        self.assertEqual(cli("put", "t/n/c", "k", "--ttl", "5")[0], 2, "options are never guessed")
        rc, out, err = cli("create", "t/n/c")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["name"], "c")
        rc, out, err = cli("put", "t/n/c", "a/b?c", "hello")
        self.assertEqual(rc, 0, err)
        rev = json.loads(out)["revision"]
        self.assertEqual(cli("get", "t/n/c", "a/b?c")[1], b"hello", "a key with '/' and '?' round-trips")
        rc, out, err = cli("put", "t/n/c", "bin", "--ttl-ms", "3600000", stdin=b"\x00\x01 from stdin\n")
        self.assertEqual(rc, 0, err)
        self.assertIn("expires_at_ms", json.loads(out))
        self.assertEqual(cli("get", "t/n/c", "bin")[1], b"\x00\x01 from stdin\n")
        j = json.loads(cli("get", "t/n/c", "a/b?c", "--json")[1])
        self.assertEqual((j["value"], j["revision"]), ("hello", rev))
        inc = j["incarnation"]
        self.assertGreater(inc, 0)
        rc, out, err = cli("put", "t/n/c", "a/b?c", "x", "--if-revision", "0")
        self.assertEqual(rc, 1)
        self.assertIn("409 revision_mismatch", err)
        rc, out, err = cli("put", "t/n/c", "a/b?c", "x", "--if-revision", str(rev), "--if-incarnation", str(inc + 1))
        self.assertEqual(rc, 1)
        self.assertIn("409 conflict", err)
        self.assertEqual(cli("get", "t/n/c", "a/b?c")[1], b"hello")
        self.assertEqual([json.loads(l)["key"] for l in cli("list", "t/n/c")[1].splitlines()], ["a/b?c", "bin"])
        self.assertEqual(len(cli("list", "t/n/c", "--prefix", "b")[1].splitlines()), 1)
        rc, out, err = cli("delete", "t/n/c", "a/b?c", "--if-revision", str(rev))
        self.assertEqual(rc, 0, err)
        rc, out, err = cli("get", "t/n/c", "a/b?c")
        self.assertEqual(rc, 1)
        self.assertIn("404 not_found", err)
        self.assertEqual(cli("drop", "t/n/c")[0], 0)
        self.assertIn("404 not_found", cli("get", "t/n/c", "bin")[2])


class CacheBrokers(unittest.TestCase):
    """One raft-meta controller and three brokers; caches replicated on all three."""

    def setUp(self):
        # The controller decides liveness: it needs the brokers' session timeout (3 s) too,
        # or a failover waits for its default 10 s, as long as a cache call's retry.
        self.controller = Node(extra={"node.id": "11", "node.roles": "controller", "broker.session_timeout_ms": "3000"})
        ctl = {"metadata.backend": "raft", "metadata.controllers": "127.0.0.1:%d" % self.controller.rpc_port}
        self.brokers = {i: Node(extra=dict(ctl, **{
            "node.id": str(i), "node.roles": "broker", "broker.session_timeout_ms": "3000",
            "replication.max_lag_ms": "1500", "stream.default_replication_factor": "3"})) for i in (1, 2, 3)}

    def tearDown(self):
        for n in list(self.brokers.values()) + [self.controller]:
            n.cleanup()

    def start_all(self):
        self.controller.start()
        for n in self.brokers.values():
            n.start()
        poll(lambda: len(self.controller.request("GET", "/v1/brokers")["brokers"]) == 3, "3 brokers registered")

    def test_compare_and_set_race_across_brokers(self):
        self.start_all()
        create_cache(self.brokers[1])
        clients = [CacheClient(self.brokers[1 + i % 3]) for i in range(8)]
        poll(lambda: all(c.get("x")[0] == 404 for c in clients), "every broker to serve the cache")
        wins, losses = cas_race(clients, "counter", 30)
        self.assertGreaterEqual(len(wins), 30)
        CacheTests.check_chain(self, wins, clients[0], "counter")
        # Every broker answers the same latest value.
        latest = max(wins, key=lambda w: w[1])
        for b in self.brokers.values():
            self.assertEqual(CacheClient(b).get("counter")[:3], (200, latest[2], latest[1]))

    def leads_a_backing_shard(self, i):
        """Whether broker i's log says it took the leader role of a cache's backing shard."""
        with open(self.brokers[i].log_path, "rb") as f:
            return any(b"__cache." in line and b"leading in epoch" in line for line in f)

    def test_acknowledged_puts_survive_a_leader_kill(self):
        """ack=quorum puts, then SIGKILL of a broker leading backing shards: after the
        failover every acknowledged value is served, and writes (and compare-and-set) go
        on under the new leaders, whose producer state came with the log."""
        self.start_all()
        create_cache(self.brokers[1])
        c = CacheClient(self.brokers[1])
        acked = {}
        for i in range(40):
            st, r = c.put("k%d" % i, b"v%d" % i, ack="quorum")
            self.assertEqual(st, 200, r)
            acked["k%d" % i] = (r["revision"], b"v%d" % i)
        victim = poll(lambda: next((i for i in (2, 3, 1) if self.leads_a_backing_shard(i)), None),
                      "a broker to log that it leads a backing shard")
        self.brokers[victim].kill()
        c = CacheClient(self.brokers[next(i for i in (1, 2, 3) if i != victim)])
        # The controller moves the shards the victim led within a few seconds
        # (broker.session_timeout_ms 3 s); until then a read or a write meets a transient
        # error, which the broker retries for 10 s: the client never sees it. Every read
        # answers every acknowledged value (the new leader's high watermark is waited for),
        # and every write decides against it (if_revision = the acknowledged revision).
        # A failover slower than the broker's 10 s retry (a loaded machine) answers 503
        # "transient" (a read is never "uncertain"): the client asks again, within the
        # test's deadline; any other answer fails.
        def read(k):
            deadline = time.monotonic() + DEADLINE_S
            while True:
                st, value, got_rev, _ = c.get(k)
                if st == 503 and value.get("outcome") == "transient" and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                return st, value, got_rev
        for k, (rev, v) in acked.items():
            t0 = time.monotonic()
            st, value, got_rev = read(k)
            self.assertEqual((st, value, got_rev), (200, v, rev), (k, value, time.monotonic() - t0))
        for i in range(40):
            k = "k%d" % i
            st, r = c.put(k, b"w%d" % i, ack="quorum", if_revision=acked[k][0])
            self.assertEqual(st, 200, (k, r))
            self.assertGreater(r["revision"], acked[k][0])
        for i in range(40):
            self.assertEqual(c.get("k%d" % i)[:2], (200, b"w%d" % i))
        self.assertEqual(c.get("k7")[1], b"w7")

    def test_expiry_follows_the_leader_not_a_skewed_accepting_broker(self):
        """Broker 2's cache clock runs an hour ahead (cache.clock_skew_ms). Puts with a 2 s
        TTL through it expire 2 s after the shard leader appended them, on broker 1 and
        broker 3 (an expiry from broker 2's clock would keep them an hour), and every broker
        reports the same expiry."""
        self.brokers[2].extra["cache.clock_skew_ms"] = "3600000"
        self.start_all()
        create_cache(self.brokers[1])
        c1, c2, c3 = (CacheClient(self.brokers[i]) for i in (1, 2, 3))
        expiries = {}
        for i in range(8):  # keys on every shard, so on leaders other than broker 2 too
            k = "k%d" % i
            before = int(time.time() * 1000)
            put = lambda: c2.put(k, b"v", ttl_ms=2000)
            st, r = poll(lambda: (lambda a: a if a[0] != 503 else None)(put()), "a put through broker 2")
            after = int(time.time() * 1000)
            self.assertEqual(st, 200, r)
            self.assertGreaterEqual(r["expires_at_ms"], before + 2000)
            self.assertLessEqual(r["expires_at_ms"], after + 2000, "not broker 2's (skewed) clock")
            expiries[k] = r["expires_at_ms"]
        for c in (c1, c3):
            for k, exp in expiries.items():
                st, _, _, got = c.get(k)
                if st == 200:  # not yet expired on this broker's clock
                    self.assertEqual(got, exp, k)
        for c in (c1, c3):
            poll(lambda: all(c.get(k)[0] == 404 for k in expiries), "the 2 s keys to expire", timeout=30)
            self.assertEqual(c.keys(), [])

    def test_recreate_through_another_broker_at_once(self):
        """A delete through one broker and a recreate through another right after it: the
        recreating broker forgets what it remembered of the cache at once (not when its
        change feed reports the delete), so it never answers from the old incarnation."""
        self.start_all()
        b1, b2 = self.brokers[1], self.brokers[2]
        create_cache(b1)
        c2 = CacheClient(b2)
        for rnd in range(6):
            for i in range(3):
                put = lambda: c2.put("k%d" % i, b"round%d" % rnd)
                st, r = poll(lambda: (lambda a: a if a[0] != 503 else None)(put()), "a put in round %d" % rnd)
                self.assertEqual(st, 200, r)
            self.assertEqual(c2.get("k0")[:2], (200, b"round%d" % rnd))  # broker 2 remembers the cache
            b1.request("DELETE", b1.ns_path() + "/caches/c")
            create_cache(b2)
            for i in range(3):
                st, body, _, _ = c2.get("k%d" % i)
                self.assertEqual(st, 404, "round %d: k%d served from the old incarnation: %r" % (rnd, i, body))

    def test_a_backing_stream_left_by_a_crash_is_deleted_by_another_broker(self):
        """Broker 1 dies between the cache's catalog delete and its backing stream's delete
        (failpoint cache.delete.after_catalog). The other brokers see the delete in the
        change feed and delete the leftover stream: its shards close everywhere."""
        b1, b2, b3 = self.brokers[1], self.brokers[2], self.brokers[3]
        # Also before its own sweep: broker 1's change feed may report the delete (and its
        # sweep delete the stream) before the failpoint in the request handler fires.
        b1.env["SLUICE_FAILPOINTS"] = "cache.delete.after_catalog,cache.sweep.before_delete"
        self.start_all()
        create_cache(b2)
        put = lambda: CacheClient(b2).put("k", b"v")
        st, r = poll(lambda: (lambda a: a if a[0] != 503 else None)(put()), "a put through broker 2")
        self.assertEqual(st, 200, r)
        def backing_name():
            text = call(b2, "GET", "/metrics")[2].decode()
            at = text.find('stream="__cache.')
            return text[at + 8:text.index('"', at + 8)] if at >= 0 else None
        name = poll(backing_name, "broker 2 to serve the backing stream")
        stream = lambda: call(b2, "GET", b2.ns_path() + "/streams/" + name)[0]
        self.assertEqual(stream(), 200)
        try:
            b1.request("DELETE", b1.ns_path() + "/caches/c")
        except Exception:  # the failpoint kills broker 1 before it answers
            pass
        b1.proc.wait(timeout=60)
        self.assertEqual(b1.proc.returncode, -9, "the failpoint was not reached:\n" + b1.log_tail())
        # Once the change feed reports the delete (postgres-meta polls for it).
        poll(lambda: CacheClient(b2).get("k")[0] == 404, "broker 2 to see the cache deleted")
        poll(lambda: stream() == 404, "the leftover backing stream to be deleted", timeout=60)
        swept = lambda b: next(int(float(l.split()[1])) for l in call(b, "GET", "/metrics")[2].decode().splitlines()
                               if l.startswith("sluice_cache_leftovers_deleted_total "))
        # Counted once the delete's answer reaches the broker (just after the catalog applied it).
        poll(lambda: swept(b2) + swept(b3) == 1, "one broker to count the leftover it deleted")

    def test_broker_slept_through_delete_and_recreate(self):
        # The recreated cache's backing stream is created while broker 3 sleeps, so with
        # replication factor 2, once the catalog no longer counts broker 3 live (a factor of 3
        # would need 3 live brokers; a sleeping broker counted live would get a replica and
        # hold up ack=quorum). It used to depend on the recreate beating the session timeout.
        for b in self.brokers.values():
            b.extra["stream.default_replication_factor"] = "2"
        self.start_all()
        b1, b3 = self.brokers[1], self.brokers[3]
        create_cache(b1)
        old_keys = ["old%d" % i for i in range(20)]
        for k in old_keys:
            self.assertEqual(CacheClient(b1).put(k, b"old")[0], 200)
        poll(lambda: CacheClient(b3).get("old0")[:2] == (200, b"old"), "broker 3 to serve the old cache")
        self.assertEqual(sorted(CacheClient(b3).keys()), sorted(old_keys))
        b2 = self.brokers[2]
        self.assertEqual(CacheClient(b2).get("old0")[:2], (200, b"old"))
        self.assertGreater(indexed_shards(b2), 0)
        self.assertEqual(b3.stop(), 0)
        poll(lambda: not any(b["id"] == 3 and b["live"] for b in b1.request("GET", "/v1/brokers")["brokers"]),
             "the catalog to count broker 3 no longer live")
        b1.request("DELETE", b1.ns_path() + "/caches/c")
        # Broker 2 did not handle the delete: the change feed tells it to drop the indexes.
        poll(lambda: indexed_shards(b2) == 0, "broker 2 to drop the deleted cache's indexes")
        create_cache(b1)
        for i in range(5):
            # Until the controller sees broker 3 gone (broker.session_timeout_ms), a shard it
            # leads answers 503 unavailable (transient): retry those.
            last = []
            put = lambda: last.append(CacheClient(b1).put("new%d" % i, b"new")) or last[-1]
            st, r = poll(lambda: (lambda a: a if a[0] != 503 else None)(put()),
                         lambda: "a put while broker 3 sleeps (last answer: %r)" % (last[-1:],))
            self.assertEqual(st, 200, r)
        b3.start()
        c3 = CacheClient(b3)
        poll(lambda: c3.get("new0")[:2] == (200, b"new"), "broker 3 to serve the new cache")
        for k in old_keys:
            self.assertEqual(c3.get(k)[0], 404, k)
        self.assertEqual(c3.keys(), ["new%d" % i for i in range(5)])
        # Broker 2 stayed up with the old incarnation's index in memory: it serves nothing old either.
        c2 = CacheClient(self.brokers[2])
        for k in old_keys:
            self.assertEqual(c2.get(k)[0], 404, k)
        self.assertEqual(c3.put("old0", b"x", if_revision=0)[0], 200, "old0 is absent in the new incarnation")


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


class CacheTestsPostgres(ThrowawayPostgres, CacheTests):
    """Every single-broker case of CacheTests on postgres-meta."""

    def node(self, extra=None, **kw):
        cfg = self.pg_config(1)
        cfg.update(extra or {})
        n = super().node(extra=cfg, **kw)
        self.assertEqual(n.request("GET", "/v1/cluster")["metadata_backend"], "postgres")
        return n


class CacheBrokersPostgres(ThrowawayPostgres, CacheBrokers):
    """Every three-broker case of CacheBrokers on one PostgreSQL catalog (no controllers)."""

    def setUp(self):
        self.controller = None
        self.brokers = {i: Node(extra=dict(self.pg_config(i), **{
            "broker.session_timeout_ms": "3000", "replication.max_lag_ms": "1500",
            "stream.default_replication_factor": "3"})) for i in (1, 2, 3)}

    def tearDown(self):
        for n in self.brokers.values():
            n.cleanup()

    def start_all(self):
        for n in self.brokers.values():
            n.start()
        poll(lambda: len(self.brokers[1].request("GET", "/v1/brokers")["brokers"]) == 3, "3 brokers registered")


if __name__ == "__main__":
    unittest.main()
