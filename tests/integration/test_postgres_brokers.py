"""Two sluiced brokers on one PostgreSQL catalog (issue 5): no controllers, the database is
the control plane. Needs the `sluice_pg` ctest fixture (SLUICE_TEST_PG_URL)."""
import json
import os
import random
import unittest

from harness import cleanup_all, HttpError, Node, poll, record_value

PG_URL = os.environ.get("SLUICE_TEST_PG_URL", "")


def pg_node(node_id, schema, **extra):
    cfg = {"node.id": str(node_id), "node.roles": "broker", "metadata.backend": "postgres",
           "metadata.postgres.url": PG_URL, "metadata.postgres.schema": schema,
           "broker.session_timeout_ms": "3000"}
    cfg.update(extra)
    return Node(extra=cfg)


class PostgresBrokers(unittest.TestCase):
    def setUp(self):
        self.assertTrue(PG_URL, "SLUICE_TEST_PG_URL is not set: run through ctest (fixture sluice_pg)")
        self.schema = "it_%08x" % random.getrandbits(32)
        self.nodes = []

    def tearDown(self):
        cleanup_all(self.nodes)

    def start(self, node_id, **extra):
        n = pg_node(node_id, self.schema, **extra)
        self.nodes.append(n)
        return n.start()

    def test_create_through_one_broker_is_served_by_the_other(self):
        a = pg_node(1, self.schema)
        b = pg_node(2, self.schema)
        # A call for the other broker's shard is forwarded to it (docs/replication.md); a
        # static peer directory too, so the test does not wait for the catalog's addresses.
        peers = "1=127.0.0.1:%d,2=127.0.0.1:%d" % (a.peer_port, b.peer_port)
        for n in (a, b):
            n.extra["transport.peers"] = peers
            self.nodes.append(n)
            n.start()
        ca = a.request("GET", "/v1/cluster")
        cb = b.request("GET", "/v1/cluster")
        self.assertEqual(ca["metadata_backend"], "postgres")
        self.assertEqual(ca["cluster_id"], cb["cluster_id"], "one catalog, one cluster id")
        poll(lambda: len(a.request("GET", "/v1/brokers")["brokers"]) == 2, "both brokers registered")

        created = a.create_stream("shared", shards=2)
        self.assertGreater(created["incarnation"], 0)
        # B learns the stream from the change feed (LISTEN/NOTIFY), without asking A.
        shards = poll(lambda: self._shards(b, "shared"), "broker 2 to apply the create")
        leaders = {s["shard"]: s["leader"] for s in shards}
        self.assertEqual(sorted(leaders.values()), [1, 2], "one shard placed on each broker")
        for shard, leader in leaders.items():
            node = a if leader == 1 else b
            other = b if leader == 1 else a
            res = node.request("POST", node.ns_path() + "/streams/shared/records",
                               {"records": [{"value": "on-%d" % leader, "shard": shard}]})
            self.assertEqual(res["results"], [{"shard": shard, "offset": 0}])
            self.assertEqual([record_value(r) for r in node.fetch_all("shared", shard)],
                             [b"on-%d" % leader])
            # The other broker does not hold it: it forwards the read to the leader.
            self.assertEqual([record_value(r) for r in other.fetch_all("shared", shard)],
                             [b"on-%d" % leader])
        # A delete through B reaches A too: its data is removed there.
        b.request("DELETE", b.ns_path() + "/streams/shared")
        poll(lambda: a.stream_dirs("t", "n", "shared") == [] and b.stream_dirs("t", "n", "shared") == [],
             "both brokers to delete their shards")

    def test_caches_are_stored_and_an_older_instance_is_refused_after_the_finalize(self):
        """postgres-meta at level 14 (issue 13): caches through the REST API of two brokers on
        one catalog, incarnations that never repeat, and the database refusing a cache create
        by an instance below 14 once cache_incarnations is finalized (SL005 -> 409)."""
        a = self.start(1)
        b = self.start(2)
        a.ensure_ns()
        feats = {f["name"]: f for f in a.request("GET", "/v1/features")["features"]}
        self.assertTrue(feats["cache_incarnations"]["finalized"], "finalized at bootstrap")
        caches = a.ns_path() + "/caches"
        first = a.request("POST", caches, {"name": "sessions", "default_ttl_ms": 60000})
        self.assertGreater(first["incarnation"], 0)
        self.assertEqual(first["default_ttl_ms"], 60000)
        seen = b.request("GET", b.ns_path() + "/caches/sessions")
        self.assertEqual(seen["incarnation"], first["incarnation"], "one catalog")
        b.request("DELETE", b.ns_path() + "/caches/sessions")
        st, _ = a.request("GET", caches + "/sessions", raw=True)
        self.assertEqual(st, 404)
        again = a.request("POST", caches, {"name": "sessions"})
        self.assertGreater(again["incarnation"], first["incarnation"], "never reused")
        self.assertEqual([c["name"] for c in b.request("GET", b.ns_path() + "/caches")["caches"]],
                         ["sessions"])
        # An instance run at level 10 (as a build from before cache incarnations would) is
        # refused by the database itself.
        old = self.start(3, **{"metadata.level": "10"})
        st, body = old.request("POST", old.ns_path() + "/caches", {"name": "legacy"}, raw=True)
        self.assertEqual(st, 409, body)
        self.assertIn("cache_incarnations is finalized", body.decode() if isinstance(body, bytes) else body)
        st, body = old.request("DELETE", old.ns_path() + "/caches/sessions", raw=True)
        self.assertEqual(st, 409, body)
        self.assertEqual(a.request("GET", caches + "/sessions")["incarnation"], again["incarnation"])

    def test_counters_are_stored_and_an_instance_below_18_is_refused(self):
        a = self.start(1)
        b = self.start(2)
        a.ensure_ns()
        counters = a.ns_path() + "/counters"
        first = a.request("POST", counters, {"name": "hits"})
        self.assertGreater(first["incarnation"], 0)
        self.assertEqual(b.request("GET", b.ns_path() + "/counters/hits"), first, "one catalog")
        b.request("DELETE", b.ns_path() + "/counters/hits")
        again = a.request("POST", counters, {"name": "hits"})
        self.assertGreater(again["incarnation"], first["incarnation"], "never reused")
        self.assertEqual(b.request("GET", b.ns_path() + "/counters")["counters"], [again])
        # An instance run at level 17 (as a build from before counters would) cannot write
        # them; the database refuses what it would write anyway (migration 7).
        old = self.start(3, **{"metadata.level": "17"})
        st, body = old.request("POST", old.ns_path() + "/counters", {"name": "legacy"}, raw=True)
        self.assertEqual(st, 409, body)
        st, body = old.request("DELETE", old.ns_path() + "/counters/hits", raw=True)
        self.assertEqual(st, 409, body)
        self.assertEqual(a.request("GET", counters + "/hits"), again)

    def _shards(self, node, stream):
        st, body = node.request("GET", node.ns_path() + "/streams/%s/shards" % stream, raw=True)
        return json.loads(body)["shards"] if st == 200 else None

    def test_wrong_credentials_exit_with_a_clear_message_and_no_secret(self):
        url = "host=127.0.0.1 port=%s user=sluice_pw password=not-the-Secret-42 dbname=sluice_test" % (
            PG_URL.split("port=")[1].split()[0])
        n = pg_node(1, self.schema, **{"metadata.postgres.url": url})
        self.nodes.append(n)
        code, out = n.start_expect_failure()
        self.assertEqual(code, 1)
        self.assertIn("password", out.lower())
        self.assertNotIn("not-the-Secret-42", out)
        errors = [l for l in out.splitlines() if " ERROR " in l]
        self.assertEqual(len(errors), 1, out)

    def test_database_outage_keeps_open_shards_publishing(self):
        """Its own PostgreSQL (the shared one must stay up for other tests): stop it under a
        running broker, publish to an open shard, see readiness drop, start it again."""
        import subprocess
        import tempfile
        from harness import free_port
        script = os.path.join(os.path.dirname(__file__), "..", "support", "pg_test_server.sh")
        work = tempfile.mkdtemp(prefix="sluice-pgout-")
        os.chmod(work, 0o755)
        pg_dir, port = os.path.join(work, "pg"), free_port()
        run = lambda *a: subprocess.run([script] + list(a), capture_output=True, text=True, timeout=120)
        r = run("start", pg_dir, str(port))
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            url = "host=127.0.0.1 port=%d user=postgres dbname=sluice_test" % port
            n = self.start(1, **{"metadata.postgres.url": url, "metadata.timeout_ms": "2000"})
            n.create_stream("steady", shards=1)
            self.assertEqual(run("halt", pg_dir).returncode, 0)
            poll(lambda: n.request("GET", "/readyz", raw=True)[0] == 503, "readiness to drop")
            res = n.publish_binary("steady", [(None, b"during-outage")])
            self.assertEqual(res[0]["offset"], 0, "publishes to open shards keep working")
            st, body = n.request("POST", n.ns_path() + "/streams", {"name": "later"}, raw=True)
            self.assertEqual(st, 503, body)
            self.assertEqual(json.loads(body)["outcome"], "transient")
            self.assertEqual(run("resume", pg_dir).returncode, 0)
            poll(lambda: n.request("GET", "/readyz", raw=True)[0] == 200, "readiness to return")
            self.assertGreater(n.create_stream("later", shards=1)["incarnation"], 0)
            self.assertEqual([record_value(r) for r in n.fetch_all("steady", 0)], [b"during-outage"])
        finally:
            run("stop", pg_dir)
            import shutil
            shutil.rmtree(work, ignore_errors=True)

    def test_bad_pool_size_is_refused_with_a_clear_message(self):
        for value, says in (("0", "metadata.postgres.pool_size must be between 1 and 64, got 0"),
                            ("65", "metadata.postgres.pool_size must be between 1 and 64, got 65"),
                            ("lots", "metadata.postgres.pool_size")):
            n = pg_node(1, self.schema, **{"metadata.postgres.pool_size": value})
            self.nodes.append(n)
            code, out = n.start_expect_failure()
            self.assertNotEqual(code, 0, out)
            self.assertIn(says, out)

    def test_controller_role_is_refused_with_postgres(self):
        n = pg_node(1, self.schema, **{"node.roles": "controller,broker"})
        self.nodes.append(n)
        code, out = n.start_expect_failure()
        self.assertEqual(code, 2)
        self.assertIn("no controllers", out)


if __name__ == "__main__":
    unittest.main()
