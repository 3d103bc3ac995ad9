"""Acceptance 1: a node comes up, a 4-shard stream takes 10,000 records with ack leader, and
every record comes back in order with matching offsets."""
import unittest

from harness import Node, record_value


class Tour(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()

    def tearDown(self):
        self.node.cleanup()

    def test_cluster_identity_is_served(self):
        c = self.node.request("GET", "/v1/cluster")
        self.assertEqual(c["metadata_backend"], "raft")
        self.assertEqual(c["node_id"], 1)
        self.assertEqual(len(c["cluster_id"]), 36)
        self.assertIn("broker", c["roles"])
        with open(self.node.data_dir + "/meta.properties") as f:
            props = dict(l.strip().split("=", 1) for l in f if "=" in l and not l.startswith("#"))
        self.assertEqual(props["cluster.id"], c["cluster_id"])
        self.assertEqual(props["node.id"], "1")
        self.assertEqual(len(props["directory.id"]), 36)

    def test_ten_thousand_records_on_four_shards_round_trip(self):
        n = self.node
        created = n.create_stream("orders", shards=4)
        self.assertEqual(created["shards"], 4)
        self.assertGreater(created["incarnation"], 0)  # a fresh cluster starts with incarnations
        sent = {}  # (shard, offset) -> value
        per_request = 500
        for base in range(0, 10000, per_request):
            recs = [(b"key-%d" % (i % 97), b"value-%06d" % i) for i in range(base, base + per_request)]
            results = n.publish_binary("orders", recs, ack="leader")
            self.assertEqual(len(results), per_request)
            for (k, v), res in zip(recs, results):
                self.assertNotIn((res["shard"], res["offset"]), sent)
                sent[(res["shard"], res["offset"])] = v
        self.assertEqual(len(sent), 10000)
        got = 0
        for shard in range(4):
            recs = n.fetch_all("orders", shard)
            offsets = [r["offset"] for r in recs]
            self.assertEqual(offsets, list(range(len(recs))), "shard %d offsets not contiguous" % shard)
            for r in recs:
                self.assertEqual(record_value(r), sent[(shard, r["offset"])])
            got += len(recs)
        self.assertEqual(got, 10000)
        # Keys are routed by hash: every record of one key is on one shard, in publish order.
        shards_of_key0 = {s for (s, o), v in sent.items() if int(v[6:]) % 97 == 0}
        self.assertEqual(len(shards_of_key0), 1)

    def test_json_publish_and_fetch_shapes(self):
        n = self.node
        n.create_stream("j", shards=1)
        res = n.request("POST", n.ns_path() + "/streams/j/records?ack=leader",
                        {"records": [{"key": "a", "value": "hello", "headers": {"h": "1"}},
                                     {"value_base64": "/wA="}]})
        self.assertEqual(res["results"], [{"shard": 0, "offset": 0}, {"shard": 0, "offset": 1}])
        r = n.fetch("j", 0, "earliest")
        self.assertEqual(r["records"][0]["value"], "hello")
        self.assertEqual(r["records"][0]["key"], "a")
        self.assertEqual(r["records"][1]["value_base64"], "/wA=")  # not UTF-8: stays base64
        self.assertEqual(r["next_offset"], 2)
        latest = n.fetch("j", 0, "latest")
        self.assertEqual(latest["records"], [])
        self.assertEqual(latest["next_offset"], 2)

    def test_restart_keeps_catalog_and_records(self):
        n = self.node
        n.create_stream("keep", shards=2)
        n.publish_binary("keep", [(b"k", b"v%d" % i) for i in range(100)])
        self.assertEqual(n.stop(), 0)
        n.start()
        streams = n.request("GET", n.ns_path() + "/streams")
        self.assertIn("keep", [s["name"] for s in streams["streams"]] if isinstance(streams, dict) else
                      [s["name"] for s in streams])
        total = sum(len(n.fetch_all("keep", s)) for s in range(2))
        self.assertEqual(total, 100)


if __name__ == "__main__":
    unittest.main()
