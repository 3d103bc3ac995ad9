"""Issue 13, caches across brokers: one controller and three brokers (or one PostgreSQL
catalog), caches replicated on all three. Compare-and-set races across brokers,
acknowledged puts across a leader kill, expiry on the leader's clock, recreates through
another broker, and a broker that slept through a delete and recreate. The single-broker
cases are in test_cache.py."""
import time
import unittest

from cache_support import CacheClient, ThrowawayPostgres, call, cas_race, check_chain, create_cache, indexed_shards
from harness import DEADLINE_S, Node, poll


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
        check_chain(self, wins, clients[0], "counter")
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
