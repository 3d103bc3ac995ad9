"""Acceptance 5 (plugins) and node identity, at the process level: each broken start exits
non-zero with one clear line, and never crashes."""
import os
import re
import unittest

from harness import TEST_PLUGIN_DIR, Node


class StartupRefusals(unittest.TestCase):
    def setUp(self):
        self.node = Node()

    def tearDown(self):
        self.node.cleanup()

    def assertOneClearError(self, code, out, *needles, status=1):
        # 1 = could not start; 3 = needs an operator (docs/configuration.md "Exit status");
        # a crash would be negative (signal)
        self.assertEqual(code, status, out)
        errors = [l for l in out.splitlines() if " ERROR " in l]
        self.assertEqual(len(errors), 1, out)
        for n in needles:
            self.assertIn(n, errors[0])

    def test_missing_plugin(self):
        self.node.extra["storage.plugin"] = "no-such-storage"
        code, out = self.node.start_expect_failure()
        self.assertOneClearError(code, out, "libsluice-no-such-storage.so", "not found")

    def test_wrong_kind(self):
        self.node.extra["storage.plugin"] = "http-api"
        code, out = self.node.start_expect_failure()
        self.assertOneClearError(code, out, "libsluice-http-api.so", "wrong kind")

    def test_abi_mismatch(self):
        self.node.extra["plugins.dir"] = TEST_PLUGIN_DIR
        self.node.extra["storage.plugin"] = "test-bad-abi"
        code, out = self.node.start_expect_failure()
        self.assertOneClearError(code, out, "libsluice-test-bad-abi.so", "ABI mismatch")

    def test_unknown_config_key_is_a_usage_error(self):
        self.node.extra["storage.segmnet_bytes"] = "10"
        code, out = self.node.start_expect_failure()
        self.assertEqual(code, 2)
        self.assertIn("unknown configuration key 'storage.segmnet_bytes'", out)

    def test_data_dir_of_another_cluster_is_refused_naming_both_ids(self):
        self.node.start()
        real = self.node.request("GET", "/v1/cluster")["cluster_id"]
        self.node.stop()
        other = "0badc0de-0000-4000-8000-000000000000"
        path = os.path.join(self.node.data_dir, "meta.properties")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(re.sub(r"cluster\.id=.*", "cluster.id=" + other, text))
        code, out = self.node.start_expect_failure()
        self.assertOneClearError(code, out, real, other, status=3)

    def test_data_dir_of_another_node_is_refused(self):
        self.node.start()
        self.node.stop()
        self.node.extra["node.id"] = "2"
        code, out = self.node.start_expect_failure()
        self.assertOneClearError(code, out, "node.id 1", "node.id 2")

    def test_two_processes_cannot_share_a_data_dir(self):
        self.node.start()
        twin = Node(workdir=self.node.workdir, data_dir=self.node.data_dir)
        code, out = twin.start_expect_failure()
        self.assertOneClearError(code, out, "in use by another sluiced")
        self.assertIsNone(self.node.proc.poll())  # the first node is unharmed

    def test_help_and_version(self):
        import subprocess
        from harness import SLUICED
        out = subprocess.run([SLUICED, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0)
        self.assertIn("--config FILE", out.stdout)
        out = subprocess.run([SLUICED, "--help-config"], capture_output=True, text=True, timeout=30)
        self.assertIn("storage.fsync", out.stdout)
        out = subprocess.run([SLUICED, "--bogus"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)

    def test_unknown_options_and_arguments_are_refused_with_the_usage_line(self):
        import subprocess
        from harness import SLUICED
        for args, named in ((["--bogus"], "'--bogus'"),
                            (["--set", "data.dir=" + self.node.data_dir, "--bogus=1"], "'--bogus'"),
                            (["--conf", "x.properties"], "'--conf'"),  # never an abbreviation of --config
                            (["--print-config", "stray"], "'stray'"),
                            (["--config"], "'--config'")):
            with self.subTest(args=args):
                out = subprocess.run([SLUICED] + args, capture_output=True, text=True, timeout=30)
                self.assertEqual(out.returncode, 2, out.stderr)
                lines = out.stderr.splitlines()
                self.assertEqual(len(lines), 2, out.stderr)
                self.assertIn(named, lines[0])
                self.assertTrue(lines[1].startswith("Usage: sluiced "), out.stderr)
        self.assertFalse(os.path.exists(self.node.data_dir))  # refused before touching the disk


class SystemdNotify(unittest.TestCase):
    """The unit is Type=notify (packaging/systemd/sluiced.service): sluiced must say READY=1
    once it serves, not before, and STOPPING=1 when it drains (review finding: Type=simple
    made `systemctl start` return at once, so a rolling restart could stop the next replica
    while this one still recovered)."""

    def test_ready_is_sent_once_the_node_serves_and_stopping_when_it_drains(self):
        import socket
        import tempfile
        tmp = tempfile.mkdtemp(prefix="sluice-notify-")
        path = os.path.join(tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(120)
        node = Node(env={"NOTIFY_SOCKET": path})
        self.addCleanup(node.cleanup)
        self.addCleanup(sock.close)
        node.spawn()
        messages = []
        while not any("READY=1" in m for m in messages):
            messages.append(sock.recv(4096).decode())
        # READY=1 comes after the status of each start phase, and the node answers by then.
        self.assertTrue(any("STATUS=starting the metadata store" in m for m in messages), messages)
        self.assertTrue(any("STATUS=opening this node's shards" in m for m in messages), messages)
        status, _ = node.request("GET", "/readyz", raw=True)
        self.assertEqual(status, 200)
        node.stop()
        rest = []
        sock.settimeout(1)
        try:
            while True:
                rest.append(sock.recv(4096).decode())
        except socket.timeout:
            pass
        self.assertTrue(any("STOPPING=1" in m for m in rest), rest)


if __name__ == "__main__":
    unittest.main()
