"""Acceptance 6, the level-8 baseline as specified (felix post-mortem, "before"): a delete
unregisters the stream and leaves its data; a recreate reopens it, old records and all.

This pins today's behaviour on purpose. The incarnations issue changes it behind the
`stream_incarnations` feature, and this test then becomes
legacy_recreate_before_finalize."""
import unittest

from harness import HttpError, Node, record_value


class LegacyRecreate(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()

    def tearDown(self):
        self.node.cleanup()

    def test_level8_delete_then_recreate_reopens_the_old_records(self):
        n = self.node
        n.create_stream("orders", shards=1)
        n.publish_binary("orders", [(None, b"old-%d" % i) for i in range(5)])
        deleted = n.request("DELETE", n.ns_path() + "/streams/orders")
        self.assertEqual(deleted["incarnation"], 0)
        with self.assertRaises(HttpError) as e:
            n.fetch("orders", 0, 0)
        self.assertEqual(e.exception.status, 404)
        again = n.create_stream("orders", shards=1)
        self.assertEqual(again["incarnation"], 0)
        recs = n.fetch_all("orders", 0)
        self.assertEqual([record_value(r) for r in recs], [b"old-%d" % i for i in range(5)])
        # Offsets continue where the deleted stream stopped: they do not restart at 0.
        res = n.publish_binary("orders", [(None, b"new")])
        self.assertEqual(res[0]["offset"], 5)
        # Tombstones do not exist at level 8.
        status, _ = n.request("GET", "/v1/tombstones", raw=True)
        self.assertIn(status, (404,))


if __name__ == "__main__":
    unittest.main()
