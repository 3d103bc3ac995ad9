"""Counters in the catalog (docs/api.md "Counters (catalog)", metadata level 18): REST and
CLI against a real sluiced. A recreated counter is a new, higher incarnation, also after a
restart; counters are refused until the fleet feature `counters` is finalized; bad input
gets its stable error code. The data plane (docs/api.md "Counters"): adds and reads of keys,
idempotent adds by producer id + sequence (also across a SIGKILL), exact sums under
concurrent clients, overflow, a recreated counter starting at 0, and a broker that slept
through a delete and recreate serving only the new incarnation.
"""
import json
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from harness import SLUICE_CLI, Node, poll


def with_headers(node, method, path, body=None):
    """status, parsed body, response headers"""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if node.token:
        headers["Authorization"] = "Bearer " + node.token
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(node.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def problem(node, method, path, body=None):
    st, payload = node.request(method, path, body, raw=True)
    return st, json.loads(payload) if payload else None


class CountersTest(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()
        self.node.ensure_ns()
        self.base = self.node.ns_path() + "/counters"

    def tearDown(self):
        self.node.cleanup()

    def create(self, name="hits"):
        return self.node.request("POST", self.base, {"name": name})

    def test_recreate_is_a_new_higher_incarnation_also_after_a_restart(self):
        seen = []
        for _ in range(3):
            c = self.create()
            self.assertEqual((c["tenant"], c["namespace"], c["name"]), ("t", "n", "hits"))
            self.assertGreater(c["incarnation"], 0)
            if seen:
                self.assertGreater(c["incarnation"], seen[-1])
            seen.append(c["incarnation"])
            self.assertEqual(self.node.request("GET", self.base + "/hits"), c)
            d = self.node.request("DELETE", self.base + "/hits")
            self.assertEqual(d, c)
        tombs = self.node.request("GET", "/v1/tombstones")
        # The counter's backing streams leave stream tombstones ("__counter.<inc>.<seq>.n.hits"),
        # the counter itself none.
        self.assertNotIn("hits", [t["name"] for t in tombs.get("tombstones", [])],
                         "counter tombstones are not stream tombstones")
        self.node.stop()
        self.node.start()
        c = self.create()
        self.assertGreater(c["incarnation"], seen[-1], "the tombstone survived the restart")
        self.assertEqual(self.node.request("GET", self.base)["counters"], [c])

    def test_bad_input_each_gets_its_code(self):
        cases = [
            ("POST", self.base, {"name": "bad name"}, 400, "invalid_name"),
            ("POST", self.base, {"name": ""}, 400, "invalid_name"),
            ("POST", self.base, {"name": "x" * 256}, 400, "invalid_name"),
            ("POST", self.base, {"name": "c", "spare": 1}, 400, "unknown_field"),
            ("POST", self.base, {}, 400, "invalid_argument"),
            ("POST", self.base, {"name": 5}, 400, "invalid_argument"),
            ("POST", self.base, b"{not json", 400, "malformed_body"),
            ("GET", self.base + "/nope", None, 404, "not_found"),
            ("DELETE", self.base + "/nope", None, 404, "not_found"),
            ("GET", "/v1/tenants/t/namespaces/none/counters", None, 404, "not_found"),
            ("POST", "/v1/tenants/t/namespaces/none/counters", {"name": "c"}, 404, "not_found"),
            ("GET", self.base + "/bad%00name", None, 400, "invalid_name"),
        ]
        for method, path, body, status, code in cases:
            with self.subTest(method=method, path=path, body=body):
                st, p = problem(self.node, method, path, body)
                self.assertEqual(st, status, p)
                self.assertEqual(p["code"], code, p)
        self.create()
        st, p = problem(self.node, "POST", self.base, {"name": "hits"})
        self.assertEqual((st, p["code"]), (409, "already_exists"), p)
        st, p = problem(self.node, "DELETE", self.node.ns_path(), None)
        self.assertEqual((st, p["code"]), (409, "conflict"), "a namespace with a counter is not deleted")

    def key_path(self, key, counter="hits"):
        return self.base + "/" + counter + "/keys/" + urllib.parse.quote(key, safe="")

    def add(self, key, delta, producer=None, seq=None, counter="hits"):
        path = self.key_path(key, counter) + "/add"
        if producer is not None:
            path += "?producer_id=%d&sequence=%d" % (producer, seq)
        return problem(self.node, "POST", path, {"delta": delta})

    def get(self, key, counter="hits"):
        return problem(self.node, "GET", self.key_path(key, counter))

    def test_add_and_get(self):
        self.create()
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 0}), "a key never added to reads 0")
        self.assertEqual(self.add("k", 5), (200, {"key": "k", "value": 5}))
        self.assertEqual(self.add("k", -7), (200, {"key": "k", "value": -2}))
        self.assertEqual(self.add("other", 3), (200, {"key": "other", "value": 3}))
        self.assertEqual(self.add("k", 0), (200, {"key": "k", "value": -2}))
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": -2}))
        self.assertEqual(self.get("other"), (200, {"key": "other", "value": 3}))
        # Durable: a clean restart and a SIGKILL both recover every acknowledged add.
        self.node.stop()
        self.node.start()
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": -2}))
        self.assertEqual(self.add("k", 10), (200, {"key": "k", "value": 8}))
        self.node.kill()
        self.node.start()
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 8}))
        self.assertEqual(self.get("other"), (200, {"key": "other", "value": 3}))

    def test_a_lone_brokers_leftover_backing_stream_is_deleted_when_it_starts_again(self):
        """As for caches (test_cache.py): the only broker dies between a counter's catalog
        delete and its backing stream's delete, so no broker saw the delete in the change
        feed; it deletes the leftover when it starts again, and keeps a live counter's."""
        gone, kept = self.create("gone"), self.create("kept")
        for name in ("gone", "kept"):
            self.assertEqual(self.add("k", 1, counter=name)[0], 200)
        backing = lambda c: "%s/streams/__counter.%d.%d.n.%s" % (self.node.ns_path(), c["incarnation"],
                                                                  c["created_seq"], c["name"])
        self.assertEqual(self.node.request("GET", backing(gone), raw=True)[0], 200)
        self.node.stop()
        self.node.env["SLUICE_FAILPOINTS"] = "cache.delete.after_catalog,cache.sweep.before_delete"
        self.node.start()
        try:
            self.node.request("DELETE", self.base + "/gone")
        except Exception:  # the failpoint kills the broker before it answers
            pass
        self.node.proc.wait(timeout=60)
        self.assertEqual(self.node.proc.returncode, -9, "the failpoint was not reached:\n" + self.node.log_tail())
        self.node.env.pop("SLUICE_FAILPOINTS")
        self.node.start()
        poll(lambda: self.node.request("GET", backing(gone), raw=True)[0] == 404,
             "the leftover backing stream to be deleted", timeout=60)
        with open(self.node.log_path, "rb") as f:
            self.assertIn(b"found 1 backing stream(s) of deleted counters at start", f.read())
        self.assertEqual(self.node.request("GET", backing(kept), raw=True)[0], 200)
        self.assertEqual(self.get("k", counter="kept"), (200, {"key": "k", "value": 1}))

    def test_recreated_counter_starts_at_zero(self):
        self.create()
        self.assertEqual(self.add("k", 41)[1]["value"], 41)
        self.assertEqual(self.add("k", 1, producer=9, seq=0)[1]["value"], 42)
        self.node.request("DELETE", self.base + "/hits")
        st, p = self.get("k")
        self.assertEqual((st, p["code"]), (404, "not_found"), p)
        st, p = self.add("k", 1)
        self.assertEqual((st, p["code"]), (404, "not_found"), p)
        self.create()
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 0}))
        # The producer's window went with the old incarnation: sequence 0 is new again.
        self.assertEqual(self.add("k", 2, producer=9, seq=0), (200, {"key": "k", "value": 2}))
        self.node.kill()
        self.node.start()
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 2}))

    def test_if_incarnation_pins_an_add_to_the_counter_it_was_meant_for(self):
        """Review finding: nothing tied an add to one incarnation, so a retry across a
        delete and recreate (or through a broker still serving the deleted counter) landed
        in another counter. Reads and adds name the incarnation; if_incarnation refuses
        another one and adds nothing."""
        first = self.create()
        st, body, headers = with_headers(self.node, "GET", self.key_path("k"))
        self.assertEqual(st, 200)
        self.assertEqual(headers.get("Sluice-Counter-Incarnation"), str(first["incarnation"]))
        path = self.key_path("k") + "/add?if_incarnation=%d" % first["incarnation"]
        st, body, headers = with_headers(self.node, "POST", path, {"delta": 5})
        self.assertEqual((st, body), (200, {"key": "k", "value": 5}))
        self.assertEqual(headers.get("Sluice-Counter-Incarnation"), str(first["incarnation"]))
        self.node.request("DELETE", self.base + "/hits")
        second = self.create()
        self.assertGreater(second["incarnation"], first["incarnation"])
        st, p = problem(self.node, "POST", path, {"delta": 1})
        self.assertEqual((st, p["code"], p["outcome"]), (409, "conflict", "definite"), p)
        self.assertIn("deleted and created again", p["detail"])
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 0}), "the refused add added something")
        for bad in ("-1", "x", ""):
            st, p = problem(self.node, "POST", self.key_path("k") + "/add?if_incarnation=" + bad, {"delta": 1})
            self.assertEqual((st, p["code"]), (400, "invalid_argument"), bad)
            self.assertIn("if_incarnation", p["detail"])
        st, p = problem(self.node, "POST", self.key_path("k") + "/add?if_incarnation=%d" % second["incarnation"],
                        {"delta": 2})
        self.assertEqual((st, p), (200, {"key": "k", "value": 2}))

    def test_retried_adds_apply_once_also_across_a_sigkill(self):
        self.create()
        self.assertEqual(self.add("k", 10, producer=7, seq=0), (200, {"key": "k", "value": 10}))
        self.assertEqual(self.add("k", 10, producer=7, seq=0),
                         (200, {"key": "k", "value": 10, "duplicate": True}))
        self.assertEqual(self.add("k", 5, producer=7, seq=1), (200, {"key": "k", "value": 15}))
        self.assertEqual(self.add("k", 100, producer=8, seq=0), (200, {"key": "k", "value": 115}))
        st, p = self.add("k", 1, producer=7, seq=3)
        self.assertEqual((st, p["code"], p["expected_sequence"]), (409, "sequence_gap", 2), p)
        self.assertIn("expected sequence 2", p["detail"])
        self.assertEqual(self.get("k")[1]["value"], 115, "a refused add changes nothing")
        self.node.kill()
        self.node.start()
        # The windows survive: retries answer the original values and change nothing.
        self.assertEqual(self.add("k", 10, producer=7, seq=0)[1], {"key": "k", "value": 10, "duplicate": True})
        self.assertEqual(self.add("k", 5, producer=7, seq=1)[1], {"key": "k", "value": 15, "duplicate": True})
        self.assertEqual(self.add("k", 100, producer=8, seq=0)[1], {"key": "k", "value": 115, "duplicate": True})
        self.assertEqual(self.get("k")[1]["value"], 115)
        self.assertEqual(self.add("k", 1, producer=7, seq=2), (200, {"key": "k", "value": 116}))
        # Only the last 5 answers are remembered: sequence 0 falls out after 6 adds.
        for seq in range(3, 8):
            self.assertEqual(self.add("k", 1, producer=7, seq=seq)[0], 200)
        st, p = self.add("k", 10, producer=7, seq=0)
        self.assertEqual((st, p["code"], p["expected_sequence"]), (409, "sequence_gap", 8), p)
        self.assertEqual(self.add("k", 1, producer=7, seq=3)[1]["duplicate"], True)
        # Producers are per key.
        self.assertEqual(self.add("j", 1, producer=7, seq=0), (200, {"key": "j", "value": 1}))

    def test_concurrent_clients_sum_exactly(self):
        self.create()
        clients, per_client = 8, 40
        errors = []

        def run(cid):
            for i in range(per_client):
                # Every other client is an idempotent producer that also retries each add.
                if cid % 2:
                    st, p = self.add("hot", 1, producer=100 + cid, seq=i)
                    st2, p2 = self.add("hot", 1, producer=100 + cid, seq=i)
                    if st2 != 200 or not p2.get("duplicate") or p2["value"] != p["value"]:
                        errors.append((cid, i, st2, p2))
                else:
                    st, p = self.add("hot", 1)
                if st != 200:
                    errors.append((cid, i, st, p))

        threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 300
        for t in threads:
            t.join(max(1, deadline - time.monotonic()))
        self.assertFalse(any(t.is_alive() for t in threads), "clients did not finish in time")
        self.assertEqual(errors, [])
        self.assertEqual(self.get("hot"), (200, {"key": "hot", "value": clients * per_client}))

    def test_overflow_is_refused_and_changes_nothing(self):
        self.create()
        top = 2 ** 63 - 1
        self.assertEqual(self.add("k", top)[1]["value"], top)
        st, p = self.add("k", 1)
        self.assertEqual((st, p["code"], p["value"]), (409, "counter_overflow", top), p)
        st, p = self.add("k", 1, producer=3, seq=0)
        self.assertEqual((st, p["code"]), (409, "counter_overflow"), p)
        # The refused add did not take the sequence: 0 is still the next.
        self.assertEqual(self.add("k", -1, producer=3, seq=0)[1]["value"], top - 1)
        self.assertEqual(self.add("m", -2 ** 63)[1]["value"], -2 ** 63)
        st, p = self.add("m", -1)
        self.assertEqual((st, p["code"]), (409, "counter_overflow"), p)
        self.assertEqual(self.get("k")[1]["value"], top - 1)

    def test_bad_add_and_get_input(self):
        self.create()
        add = self.key_path("k") + "/add"
        cases = [
            ("POST", add, {}, 400, "invalid_argument"),
            ("POST", add, {"delta": "5"}, 400, "invalid_argument"),
            ("POST", add, {"delta": 1.5}, 400, "invalid_argument"),
            ("POST", add, {"delta": 2 ** 63}, 400, "invalid_argument"),
            ("POST", add, {"delta": None}, 400, "invalid_argument"),
            ("POST", add, {"delta": 1, "by": 2}, 400, "unknown_field"),
            ("POST", add, b"{nope", 400, "malformed_body"),
            ("POST", add, b"[1]", 400, "invalid_argument"),
            ("POST", add + "?producer_id=1", {"delta": 1}, 400, "invalid_argument"),
            ("POST", add + "?sequence=1", {"delta": 1}, 400, "invalid_argument"),
            ("POST", add + "?producer_id=0&sequence=0", {"delta": 1}, 400, "invalid_argument"),
            ("POST", add + "?producer_id=x&sequence=0", {"delta": 1}, 400, "invalid_argument"),
            ("POST", add + "?producer_id=1&sequence=-1", {"delta": 1}, 400, "invalid_argument"),
            ("POST", add + "?ack=none", {"delta": 1}, 400, "invalid_argument"),
            ("POST", add + "?ack=all", {"delta": 1}, 400, "invalid_argument"),
            ("POST", self.key_path("k", "nope") + "/add", {"delta": 1}, 404, "not_found"),
            ("GET", self.key_path("k", "nope"), None, 404, "not_found"),
            ("GET", self.key_path("x" * 513), None, 400, "invalid_key"),
            ("POST", self.key_path("x" * 513) + "/add", {"delta": 1}, 400, "invalid_key"),
            ("GET", self.key_path("a b"), None, 400, "invalid_key"),
            ("POST", self.key_path("..") + "/add", {"delta": 1}, 400, "invalid_key"),
            ("GET", self.key_path("."), None, 400, "invalid_key"),
            ("POST", self.key_path("a\u00e9") + "/add", {"delta": 1}, 400, "invalid_key"),
            ("GET", self.base + "/hits/keys/%01", None, 400, "invalid_key"),
            ("GET", self.base + "/hits/keys/", None, 400, "invalid_key"),
            ("PUT", self.key_path("k"), None, 405, "method_not_allowed"),
            ("GET", add, None, 405, "method_not_allowed"),
        ]
        for method, path, body, status, code in cases:
            with self.subTest(method=method, path=path, body=body):
                st, p = problem(self.node, method, path, body)
                self.assertEqual(st, status, p)
                if code:
                    self.assertEqual(p["code"], code, p)
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 0}), "no bad add changed anything")
        for ack in ("leader", "quorum"):  # one replica: quorum is the leader's own sync
            st, p = problem(self.node, "POST", add + "?ack=" + ack, {"delta": 2})
            self.assertEqual(st, 200, p)
        self.assertEqual(self.get("k"), (200, {"key": "k", "value": 4}))

    def test_cli_create_show_list_delete(self):
        def cli(*args):
            p = subprocess.run([SLUICE_CLI, "--url", self.node.url, "counter"] + list(args),
                               capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout, p.stderr

        rc, out, err = cli("create", "t/n/a")
        self.assertEqual(rc, 0, err)
        a = json.loads(out)
        self.assertGreater(a["incarnation"], 0)
        self.assertEqual(cli("create", "t/n/b")[0], 0)
        rc, out, err = cli("show", "t/n/a")
        self.assertEqual((rc, json.loads(out)), (0, a), err)
        rc, out, err = cli("list", "t/n")
        self.assertEqual(rc, 0, err)
        self.assertEqual([json.loads(x)["name"] for x in out.splitlines()], ["a", "b"])
        rc, out, err = cli("delete", "t/n/a")
        self.assertEqual((rc, json.loads(out)), (0, a), err)
        rc, out, err = cli("show", "t/n/a")
        self.assertNotEqual(rc, 0)
        self.assertIn("not_found", out + err)
        rc, _, err = cli("list", "t")
        self.assertEqual(rc, 2, "TENANT/NS is required: a usage error")
        rc, _, err = cli("frobnicate", "t/n/a")
        self.assertEqual(rc, 2)

    def test_cli_add_and_get(self):
        def cli(*args):
            p = subprocess.run([SLUICE_CLI, "--url", self.node.url, "counter"] + list(args),
                               capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout, p.stderr

        first = self.create()
        # Every answer names the counter incarnation that gave it (Sluice-Counter-Incarnation).
        def j(out):
            v = json.loads(out)
            self.assertEqual(v.pop("incarnation"), first["incarnation"], out)
            return v

        rc, out, err = cli("get", "t/n/hits", "a/b?c")
        self.assertEqual((rc, j(out)), (0, {"key": "a/b?c", "value": 0}), err)
        rc, out, err = cli("add", "t/n/hits", "a/b?c", "5")
        self.assertEqual((rc, j(out)), (0, {"key": "a/b?c", "value": 5}), err)
        rc, out, err = cli("add", "t/n/hits", "a/b?c", "--", "-7")
        self.assertEqual((rc, j(out)), (0, {"key": "a/b?c", "value": -2}), err)
        rc, out, err = cli("add", "t/n/hits", "k", "3", "--producer-id", "4", "--sequence", "0")
        self.assertEqual((rc, j(out)), (0, {"key": "k", "value": 3}), err)
        rc, out, err = cli("add", "t/n/hits", "k", "3", "--producer-id", "4", "--sequence", "0")
        self.assertEqual((rc, j(out)), (0, {"key": "k", "value": 3, "duplicate": True}), err)
        rc, out, err = cli("add", "t/n/hits", "k", "3", "--producer-id", "4", "--sequence", "5")
        self.assertNotEqual(rc, 0)
        self.assertIn("sequence_gap", out + err)
        self.assertEqual(self.get("a/b?c"), (200, {"key": "a/b?c", "value": -2}), "the key went through encoded")
        for bad in (["add", "t/n/hits", "k", "x"], ["add", "t/n/hits", "k", "1.5"],
                    ["add", "t/n/hits", "k", "99999999999999999999"], ["add", "t/n/hits", "k"],
                    ["add", "t/n/hits", "k", "1", "--producer-id", "1"], ["get", "t/n/hits"]):
            with self.subTest(args=bad):
                self.assertEqual(cli(*bad)[0], 2, "a usage error")
        # Review finding: the CLI could not pin an add to the incarnation an uncertain first
        # attempt went to, so its retry could land on a counter created anew under the name.
        rc, out, err = cli("add", "t/n/hits", "k", "1", "--if-incarnation", str(first["incarnation"]))
        self.assertEqual((rc, j(out)), (0, {"key": "k", "value": 4}), err)
        self.node.request("DELETE", self.base + "/hits")
        self.create()
        rc, out, err = cli("add", "t/n/hits", "k", "1", "--if-incarnation", str(first["incarnation"]))
        self.assertEqual(rc, 1, out + err)
        self.assertIn("conflict", out + err)
        self.assertEqual(self.get("k")[1]["value"], 0, "the pinned add landed on the new counter")
        rc, out, err = cli("get", "t/n/nope", "k")
        self.assertNotEqual(rc, 0)
        self.assertIn("not_found", out + err)


class CounterBrokersTest(unittest.TestCase):
    """One raft-meta controller and three brokers: adds through every broker to one key are
    linearizable (an exact sum, retries applied once) and every broker answers the same."""

    def setUp(self):
        # The controller decides liveness: it needs the brokers' session timeout (3 s) too, or
        # a failover (a broker stopped) waits for its default 10 s, as long as an add's retry.
        self.controller = Node(extra={"node.id": "11", "node.roles": "controller",
                                      "broker.session_timeout_ms": "3000"})
        ctl = {"metadata.backend": "raft", "metadata.controllers": "127.0.0.1:%d" % self.controller.rpc_port}
        self.brokers = [Node(extra=dict(ctl, **{"node.id": str(i), "node.roles": "broker",
                                                 "broker.session_timeout_ms": "3000",
                                                 "replication.max_lag_ms": "1500",
                                                 "stream.default_replication_factor": "3"})) for i in (1, 2, 3)]

    def tearDown(self):
        for n in self.brokers + [self.controller]:
            n.cleanup()

    def test_adds_through_every_broker_sum_exactly(self):
        self.controller.start()
        for n in self.brokers:
            n.start()
        poll(lambda: len(self.controller.request("GET", "/v1/brokers")["brokers"]) == 3, "3 brokers registered")
        self.brokers[0].ensure_ns()
        self.brokers[0].request("POST", self.brokers[0].ns_path() + "/counters", {"name": "hits"})
        path = self.brokers[0].ns_path() + "/counters/hits/keys/hot"
        poll(lambda: all(problem(b, "GET", path)[0] == 200 for b in self.brokers), "every broker to serve the counter")
        clients, per_client, errors = 8, 25, []

        def run(cid):
            b = self.brokers[cid % 3]
            for i in range(per_client):
                q = "/add?producer_id=%d&sequence=%d" % (500 + cid, i)
                st, p = problem(b, "POST", path + q, {"delta": 3})
                # The retry goes through another broker: the window is in the log, not the broker.
                st2, p2 = problem(self.brokers[(cid + 1) % 3], "POST", path + q, {"delta": 3})
                if st != 200 or st2 != 200 or not p2.get("duplicate") or p2["value"] != p["value"]:
                    errors.append((cid, i, st, p, st2, p2))

        threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 300
        for t in threads:
            t.join(max(1, deadline - time.monotonic()))
        self.assertFalse(any(t.is_alive() for t in threads), "clients did not finish in time")
        self.assertEqual(errors, [])
        for b in self.brokers:
            self.assertEqual(problem(b, "GET", path), (200, {"key": "hot", "value": 3 * clients * per_client}))


    def test_broker_slept_through_delete_and_recreate(self):
        """The counter twin of the felix case: broker 3 sleeps while the counter is deleted
        and recreated; awake, it serves the new incarnation only (old keys read 0, an old
        producer's sequence is not a duplicate), and broker 2, which stayed up with the old
        incarnation's index, drops it when the change feed reports the delete."""
        # The recreated counter's backing stream is created while broker 3 sleeps: with
        # replication factor 2, once the catalog no longer counts broker 3 live (a factor of 3
        # needs 3 live brokers; a sleeping broker counted live would get a replica).
        for b in self.brokers:
            b.extra["stream.default_replication_factor"] = "2"
        self.controller.start()
        for n in self.brokers:
            n.start()
        poll(lambda: len(self.controller.request("GET", "/v1/brokers")["brokers"]) == 3, "3 brokers registered")
        b1, b2, b3 = self.brokers
        b1.ensure_ns()
        base = b1.ns_path() + "/counters"
        b1.request("POST", base, {"name": "hits"})
        key = lambda k: base + "/hits/keys/" + k

        def add(b, k, delta, q=""):
            # Until the controller sees a stopped broker gone, a shard it led answers 503 (transient).
            return poll(lambda: (lambda a: a if a[0] != 503 else None)(problem(b, "POST", key(k) + "/add" + q,
                                                                                {"delta": delta})),
                        "an add of %s through broker %s" % (k, b.extra["node.id"]))

        old_keys = ["old%d" % i for i in range(12)]
        for k in old_keys:
            self.assertEqual(add(b1, k, 5)[0], 200)
        self.assertEqual(add(b1, "p", 5, "?producer_id=77&sequence=0"), (200, {"key": "p", "value": 5}))
        poll(lambda: problem(b3, "GET", key("old0")) == (200, {"key": "old0", "value": 5}),
             "broker 3 to serve the old counter")
        self.assertEqual(problem(b2, "GET", key("old0")), (200, {"key": "old0", "value": 5}))
        self.assertGreater(counter_indexed_shards(b2), 0)

        self.assertEqual(b3.stop(), 0)
        poll(lambda: not any(b["id"] == 3 and b["live"] for b in b1.request("GET", "/v1/brokers")["brokers"]),
             "the catalog to count broker 3 no longer live")
        b1.request("DELETE", base + "/hits")
        # Broker 2 did not handle the delete: the change feed tells it to drop the indexes.
        poll(lambda: counter_indexed_shards(b2) == 0, "broker 2 to drop the deleted counter's indexes")
        b1.request("POST", base, {"name": "hits"})
        for i in range(5):
            self.assertEqual(add(b1, "new%d" % i, 1)[0], 200)

        b3.start()
        poll(lambda: problem(b3, "GET", key("new0")) == (200, {"key": "new0", "value": 1}),
             "broker 3 to serve the new counter")
        for b in (b2, b3):
            for k in old_keys:
                self.assertEqual(problem(b, "GET", key(k)), (200, {"key": k, "value": 0}), (b.extra["node.id"], k))
        # The old incarnation's producer window is gone with it: sequence 0 applies again.
        st, body = add(b3, "p", 1, "?producer_id=77&sequence=0")
        self.assertEqual((st, body), (200, {"key": "p", "value": 1}))
        self.assertEqual(problem(b2, "GET", key("p")), (200, {"key": "p", "value": 1}))


def counter_indexed_shards(node):
    """The node's sluice_counter_indexed_shards gauge."""
    st, body = node.request("GET", "/metrics", raw=True)
    for line in body.decode().splitlines():
        if line.startswith("sluice_counter_indexed_shards "):
            return int(float(line.split()[1]))
    raise AssertionError("no sluice_counter_indexed_shards in /metrics")


class CountersBeforeTheFinalizeTest(unittest.TestCase):
    """An upgraded cluster: `counters` held back at bootstrap, as on a cluster that was
    bootstrapped by a level-17 build."""

    def setUp(self):
        self.node = Node(extra={"metadata.bootstrap_hold_back": "counters"}).start()
        self.node.ensure_ns()
        self.base = self.node.ns_path() + "/counters"

    def tearDown(self):
        self.node.cleanup()

    def test_refused_until_finalized(self):
        st, p = problem(self.node, "POST", self.base, {"name": "hits"})
        self.assertEqual((st, p["code"]), (409, "conflict"), p)
        self.assertIn("counters", p["detail"])
        feats = {f["name"]: f for f in self.node.request("GET", "/v1/features")["features"]}
        self.assertFalse(feats["counters"]["finalized"])
        self.assertEqual(feats["counters"]["required_level"], 18)
        self.node.request("POST", "/v1/features/counters/finalize", {})
        c = self.node.request("POST", self.base, {"name": "hits"})
        self.assertGreater(c["incarnation"], 0)


if __name__ == "__main__":
    unittest.main()
