"""Issue 13, caches: the data plane (docs/api.md "Caches") against real processes.

A cache incarnation's entries live in a hidden backing stream; these tests check what a
client sees: round trips, revisions, TTL expiry (also across a SIGKILL), acknowledged
writes across a SIGKILL, compare-and-set races, recreates, and every bad input, on one
broker. The cases across brokers are in test_cache_brokers.py."""
import json
import subprocess
import threading
import time
import unittest

from cache_support import CacheClient, ThrowawayPostgres, call, cas_race, check_chain, create_cache
from harness import DEADLINE_S, SLUICE_CLI, Node, poll

# "*": every feature this build knows, so a feature added later is held back too.
HOLD_BACK = {"metadata.bootstrap_hold_back": "*"}


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
        check_chain(self, wins, clients[0], "counter")

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


class CacheTestsPostgres(ThrowawayPostgres, CacheTests):
    """Every single-broker case of CacheTests on postgres-meta."""

    def node(self, extra=None, **kw):
        cfg = self.pg_config(1)
        cfg.update(extra or {})
        n = super().node(extra=cfg, **kw)
        self.assertEqual(n.request("GET", "/v1/cluster")["metadata_backend"], "postgres")
        return n


if __name__ == "__main__":
    unittest.main()
