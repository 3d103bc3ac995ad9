"""The sluice CLI against a real node: create, publish from stdin, consume, delete, --help."""
import subprocess
import unittest

from harness import SLUICE_CLI, Node


class Cli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = Node().start()

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def sluice(self, *args, stdin=None, ok=True):
        p = subprocess.run([SLUICE_CLI, "--url", self.node.url] + list(args), input=stdin,
                           capture_output=True, text=True, timeout=120)
        if ok:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def test_help_on_every_command(self):
        for cmd in ([], ["cluster"], ["tenant"], ["namespace"], ["stream"], ["shards"], ["publish"], ["consume"]):
            p = self.sluice(*(cmd + ["--help"]))
            self.assertIn("Usage", p.stdout)

    def test_create_publish_consume_delete(self):
        self.sluice("stream", "create", "cli/ns/lines", "--shards", "2")
        lines = "".join("line %d\n" % i for i in range(1234))
        p = self.sluice("publish", "cli/ns/lines", "--key", "k", "--batch", "100", stdin=lines)
        self.assertIn("published 1234 records", p.stderr)
        p = self.sluice("consume", "cli/ns/lines", "--from", "earliest")
        self.assertEqual(p.stdout, lines)  # one key: one shard, in order
        p = self.sluice("consume", "cli/ns/lines", "--from", "1230", "--offsets",
                        "--shard", self.shard_of_key())
        self.assertEqual(len(p.stdout.splitlines()), 4)
        p = self.sluice("stream", "list", "cli/ns")
        self.assertIn("lines", p.stdout)
        self.sluice("stream", "delete", "cli/ns/lines")
        p = self.sluice("stream", "get", "cli/ns/lines", ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("404 not_found", p.stderr)

    def shard_of_key(self):
        for s in ("0", "1"):
            p = self.sluice("consume", "cli/ns/lines", "--shard", s, "--max", "1")
            if p.stdout:
                return s
        self.fail("no shard holds the records")

    def test_usage_errors_exit_2(self):
        p = self.sluice("stream", "create", "not-a-stream-path", ok=False)
        self.assertEqual(p.returncode, 2)
        p = self.sluice("frobnicate", ok=False)
        self.assertEqual(p.returncode, 2)

    def test_follow_sees_new_records(self):
        self.sluice("stream", "create", "cli/ns/follow")
        proc = subprocess.Popen([SLUICE_CLI, "--url", self.node.url, "consume", "cli/ns/follow",
                                 "--follow", "--max", "3"], stdout=subprocess.PIPE, text=True)
        self.sluice("publish", "cli/ns/follow", stdin="a\nb\nc\n")
        out, _ = proc.communicate(timeout=120)
        self.assertEqual(out, "a\nb\nc\n")


if __name__ == "__main__":
    unittest.main()
