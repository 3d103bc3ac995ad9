"""A refused start changes nothing on disk (regression: with raft.dir outside data.dir, a
data directory of another cluster was refused only after a new raft directory had been
bootstrapped; a bad plugin name left a freshly formatted data directory behind).

Each test lists the work directory (names, kinds, sizes and contents) before and after a
start that must be refused, and asserts the listings are equal.
"""
import hashlib
import os
import unittest

from harness import Node


def tree(root, skip=("sluiced.log",)):
    """{relative path: (kind, digest)} of everything under root.

    fs-storage's clean-shutdown marker is left out: the storage engine takes it when it is
    constructed, before a later plugin or the metadata store refuses the start; a start the
    broker refuses puts it back, other refusals cost the next start its fast path (a full
    recovery scan), never data. (Since every
    broker's start makes storage.dir, for its storage.properties, a stopped node without
    streams has the marker too.)"""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(d, name), root)] = ("dir", None)
        for name in files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            if rel in skip or name == ".clean-shutdown":
                continue
            with open(p, "rb") as f:
                out[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


class RefusedStart(unittest.TestCase):
    def node(self, **kw):
        n = Node(**kw)
        self.addCleanup(n.cleanup)
        return n

    def assert_refused_without_a_trace(self, node, expect_in_log, status=1):
        before = tree(node.workdir)
        code, out = node.start_expect_failure()
        self.assertEqual(code, status, out)
        self.assertIn(expect_in_log, out)
        self.assertEqual(tree(node.workdir), before, "the refused start changed the disk:\n" + out)

    def test_out_of_range_node_keys_are_config_errors(self):
        # Once taken as they came: controller.interval_ms = 0 spun the controller,
        # metadata.timeout_ms = 0 timed out every catalog call, and a huge
        # broker.max_records_per_publish was truncated to 32 bits.
        for key, value in (("controller.interval_ms", "0"), ("controller.interval_ms", "-5"),
                           ("metadata.timeout_ms", "0"), ("broker.max_records_per_publish", "4294967297"),
                           ("controller.preferred_leader_interval_ms", "-1")):
            node = self.node()
            node.extra[key] = value
            before = tree(node.workdir)
            code, out = node.start_expect_failure()
            self.assertEqual(code, 2, (key, value, out))
            self.assertIn(key + " must be between", out)
            self.assertEqual(tree(node.workdir), before, "the refused start changed the disk:\n" + out)

    def test_refused_start_of_another_clusters_data_dir_bootstraps_no_raft_dir(self):
        # A node of cluster X, then its data directory started with a new raft.dir outside
        # it: raft-meta bootstraps cluster Y, which the data directory refuses.
        node = self.node()
        node.start()
        self.assertEqual(node.stop(), 0)
        node.extra["raft.dir"] = os.path.join(node.workdir, "elsewhere", "raft")
        self.assert_refused_without_a_trace(node, "cluster", status=3)  # another cluster's: needs an operator

    def test_refused_start_with_a_bad_plugin_name_leaves_no_data_dir(self):
        node = self.node()
        node.data_dir = os.path.join(node.workdir, "a", "b", "data")
        node.extra["storage.plugin"] = "no-such-storage"
        self.assert_refused_without_a_trace(node, "no-such-storage")

    def test_refused_start_with_a_bad_api_plugin_keeps_an_existing_data_dir_as_it_was(self):
        node = self.node()
        node.start()
        self.assertEqual(node.stop(), 0)
        node.extra["api.plugin"] = "no-such-api"
        self.assert_refused_without_a_trace(node, "no-such-api")


if __name__ == "__main__":
    unittest.main()
