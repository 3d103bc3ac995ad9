"""Operator commands: `sluiced admin list-data` and `admin delete-data`, offline, on a real
data directory. The operator's delete is the other word (besides the control plane's)
on which data may be deleted."""
import subprocess
import unittest

from harness import SLUICED, Node


class Admin(unittest.TestCase):
    def setUp(self):
        self.node = Node(extra={"metadata.bootstrap_hold_back": "stream_incarnations,cache_incarnations"})

    def tearDown(self):
        self.node.cleanup()

    def admin(self, *args):
        cmd = [SLUICED, "--set", "data.dir=" + self.node.data_dir, "admin"] + list(args)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def test_operator_removes_data_a_level_8_delete_left_behind(self):
        n = self.node
        n.start()
        n.create_stream("left", shards=2)
        n.publish_binary("left", [(b"k%d" % i, b"v") for i in range(10)])
        n.request("DELETE", n.ns_path() + "/streams/left")
        # While the node runs, the data directory is locked.
        busy = self.admin("list-data")
        self.assertEqual(busy.returncode, 1)
        self.assertIn("in use by another sluiced", busy.stderr)
        self.assertEqual(n.stop(), 0)

        listed = self.admin("list-data")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("t/n/left shard 0 incarnation 0", listed.stdout)
        self.assertIn("t/n/left shard 1 incarnation 0", listed.stdout)

        bad = self.admin("delete-data", "../etc/x", "--up-to", "0")
        self.assertNotEqual(bad.returncode, 0)
        bad = self.admin("delete-data", "t/n/..", "--up-to", "0")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("stream name has '.' at position 0", bad.stderr)
        self.assertEqual(self.admin("delete-data", "t/n/left", "--up-to", "x").returncode, 2)
        # Not an incarnation number: "-1" once read as 2^64-1 (every incarnation, the live one too).
        for up_to in ("-1", " 0", "+0", "0x1", "", "18446744073709551616"):
            refused = self.admin("delete-data", "t/n/left", "--up-to", up_to)
            self.assertEqual(refused.returncode, 2, (up_to, refused.stderr))
            self.assertIn("--up-to expects an incarnation number", refused.stderr)
        self.assertEqual(len(n.stream_dirs("t", "n", "left")), 2, "a refused delete-data deleted nothing")

        done = self.admin("delete-data", "t/n/left", "--up-to", "0")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("deleted 2 shard directories", done.stdout)
        self.assertEqual(n.stream_dirs("t", "n", "left"), [])
        self.assertNotIn("t/n/left", self.admin("list-data").stdout)
        # The node starts normally afterwards.
        n.start()

    def test_admin_refuses_unknown_options_and_arguments(self):
        # Refused as usage errors (exit 2, naming the word, with the usage line) before
        # the data directory is even looked at: this one is not formatted.
        for args, named in ((["list-data", "--bogus"], "'--bogus'"),
                            (["list-data", "extra"], "'extra'"),
                            (["rebuild-metadata", "--force"], "'--force'"),
                            (["delete-data", "t/n/left", "--up-to", "0", "--now"], "'--now'"),
                            (["delete-data", "t/n/left", "--upto", "0"], "'--upto'"),
                            (["delete-data", "t/n/left"], "--up-to"),
                            (["frobnicate"], "'frobnicate'")):
            with self.subTest(args=args):
                r = self.admin(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 2, r.stderr)
                self.assertIn(named, lines[0])
                self.assertTrue(lines[1].startswith("Usage: sluiced "), r.stderr)

    def test_admin_refuses_an_unformatted_directory(self):
        r = self.admin("list-data")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no formatted data directory", r.stderr)


if __name__ == "__main__":
    unittest.main()
