"""Two sluiced brokers on one PostgreSQL catalog (issue 5): no controllers, the database is
the control plane. Needs the `sluice_pg` ctest fixture (SLUICE_TEST_PG_URL)."""
import json
import os
import random
import unittest

from harness import HttpError, Node, poll, record_value

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
        for n in self.nodes:
            n.cleanup()

    def start(self, node_id, **extra):
        n = pg_node(node_id, self.schema, **extra)
        self.nodes.append(n)
        return n.start()

    def test_create_through_one_broker_is_served_by_the_other(self):
        a = self.start(1)
        b = self.start(2)
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
            with self.assertRaises(HttpError) as e:  # the other broker does not hold it
                other.fetch("shared", shard, 0)
            self.assertEqual(e.exception.status, 421)
            self.assertEqual([record_value(r) for r in node.fetch_all("shared", shard)],
                             [b"on-%d" % leader])
        # A delete through B reaches A too: its data is removed there.
        b.request("DELETE", b.ns_path() + "/streams/shared")
        poll(lambda: a.stream_dirs("t", "n", "shared") == [] and b.stream_dirs("t", "n", "shared") == [],
             "both brokers to delete their shards")

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

    def test_controller_role_is_refused_with_postgres(self):
        n = pg_node(1, self.schema, **{"node.roles": "controller,broker"})
        self.nodes.append(n)
        code, out = n.start_expect_failure()
        self.assertEqual(code, 2)
        self.assertIn("no controllers", out)


if __name__ == "__main__":
    unittest.main()
