"""The peer transport between real sluiced processes on loopback (docs/replication.md
"Peer transport"):

- two brokers of one cluster probe each other with `sluiced probe-peer` (hello and ping);
- a node of another cluster is refused both ways, both cluster ids in the probe's output
  and in the refusing node's log;
- garbage bytes sent to a peer port close that connection (logged) and the node still
  answers a probe.

Nothing sleeps to wait for a condition: every wait polls with a generous deadline.
"""
import os
import socket
import subprocess
import time
import unittest

from harness import cleanup_all, DEADLINE_S, SLUICED, Node, poll

FAST = {"metadata.timeout_ms": "15000", "metadata.start_timeout_ms": "60000"}


def meta_properties(node):
    out = {}
    with open(os.path.join(node.data_dir, "meta.properties")) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                out[k] = v
    return out


def probe(from_node, to_node):
    """sluiced probe-peer from `from_node`'s identity (its data.dir) to `to_node`'s peer port."""
    args = [SLUICED, "--set", "data.dir=" + from_node.data_dir,
            "--set", "node.id=" + from_node.extra.get("node.id", "1"),
            "probe-peer", "127.0.0.1:%d" % to_node.peer_port]
    return subprocess.run(args, capture_output=True, text=True, timeout=DEADLINE_S)


class PeerTransportTest(unittest.TestCase):
    def setUp(self):
        self.nodes = []

    def tearDown(self):
        for n in self.nodes:
            n.stop()
        cleanup_all(self.nodes)

    def node(self, **extra):
        n = Node(extra=dict(FAST, **extra))
        self.nodes.append(n)
        return n

    def two_brokers(self):
        first = self.node(**{"node.id": "1"}).start()
        second = self.node(**{"node.id": "2", "node.roles": "broker",
                              "metadata.controllers": "127.0.0.1:%d" % first.rpc_port}).start()
        self.assertEqual(meta_properties(first)["cluster.id"], meta_properties(second)["cluster.id"])
        return first, second

    def test_two_brokers_probe_each_other(self):
        first, second = self.two_brokers()
        cluster = meta_properties(first)["cluster.id"]
        for a, b, b_id in ((first, second, 2), (second, first, 1)):
            out = probe(a, b)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("node.id %d" % b_id, out.stdout)
            self.assertIn("directory.id " + meta_properties(b)["directory.id"], out.stdout)
            self.assertIn("cluster.id " + cluster, out.stdout)
        # Each logged where its transport listens.
        for n in (first, second):
            self.assertIn("listening on 127.0.0.1:%d" % n.peer_port, n.current_log())

    def test_another_cluster_is_refused_naming_both_ids(self):
        first, _ = self.two_brokers()
        other = self.node(**{"node.id": "3"}).start()  # bootstraps its own cluster
        ours, theirs = meta_properties(first)["cluster.id"], meta_properties(other)["cluster.id"]
        self.assertNotEqual(ours, theirs)
        for a, b in ((other, first), (first, other)):
            out = probe(a, b)
            self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
            self.assertIn("cluster_id_mismatch", out.stderr)
            self.assertIn(ours, out.stderr)
            self.assertIn(theirs, out.stderr)
            poll(lambda: "cluster id mismatch" in b.current_log() and ours in b.current_log()
                 and theirs in b.current_log(), "the refusal with both ids in the log of %s" % b.log_path)
        self.assertEqual(probe(first, first).returncode, 0)  # and they still serve their own

    def test_garbage_on_the_peer_port_closes_that_connection_only(self):
        first, second = self.two_brokers()
        with socket.create_connection(("127.0.0.1", first.peer_port), timeout=DEADLINE_S) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: sluice\r\n\r\n" + os.urandom(256))
            end = time.monotonic() + DEADLINE_S
            closed = False
            while time.monotonic() < end:
                try:
                    chunk = s.recv(4096)  # the node's hello, then the close
                except ConnectionResetError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
            self.assertTrue(closed, "the node kept a connection that sent garbage")
        poll(lambda: "malformed frame" in first.current_log(), "the logged reason in " + first.log_path)
        out = probe(second, first)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("node.id 1", out.stdout)


if __name__ == "__main__":
    unittest.main()
