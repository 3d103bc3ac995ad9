"""What sluiced logs: one line per loaded plugin, and `log.level` (regression: every DEBUG
line always printed, including one per second per down Raft peer; no line said which plugin
files were loaded)."""
import os
import re
import unittest

from harness import LOG_LINE, Node, poll

FAST = {"raft.election_timeout_ms": "1000", "raft.heartbeat_timeout_ms": "100",
        "metadata.timeout_ms": "15000", "metadata.start_timeout_ms": "60000"}
LOADED = re.compile(r" INFO plugins: loaded plugin (\S+) \(kind (\w+), SDK (\S+)\) from (\S+)$")


def levels(text):
    """The level of every log line in text."""
    return [m.group(1) for m in (LOG_LINE.match(line) for line in text.splitlines()) if m]


class Logging(unittest.TestCase):
    def node(self, **extra):
        n = Node(extra=extra)
        self.addCleanup(n.cleanup)
        return n

    def test_each_loaded_plugin_is_logged_with_file_name_kind_and_sdk_version(self):
        node = self.node()
        node.start()
        loaded = {}
        for line in node.current_log().splitlines():
            m = LOADED.search(line)
            if m:
                loaded[m.group(1)] = (m.group(2), m.group(3), m.group(4))
        self.assertEqual(sorted(loaded), ["fs-storage", "http-api", "raft-meta"], node.current_log())
        self.assertEqual(loaded["fs-storage"][0], "storage")
        self.assertEqual(loaded["raft-meta"][0], "metadata")
        self.assertEqual(loaded["http-api"][0], "api")
        for name, (_, sdk, path) in loaded.items():
            self.assertRegex(sdk, r"^\d+\.\d+\.\d+")
            self.assertTrue(os.path.isfile(path), path)
            self.assertEqual(os.path.basename(path), "libsluice-%s.so" % name)

    def test_log_level_warn_drops_info_lines(self):
        node = self.node(**{"log.level": "warn"})
        node.start()
        self.assertEqual(node.stop(), 0)
        out = node.current_log()
        self.assertNotIn("INFO", levels(out), out)
        self.assertNotIn("DEBUG", levels(out), out)

    def test_invalid_log_level_is_a_configuration_error(self):
        node = self.node(**{"log.level": "verbose"})
        code, out = node.start_expect_failure()
        self.assertEqual(code, 2, out)
        self.assertIn("log.level must be debug, info, warn or error, got 'verbose'", out)
        self.assertFalse(os.path.exists(node.data_dir), "a configuration error touched the disk")

    def test_default_log_level_drops_the_raft_transports_debug_lines(self):
        # Two controllers: the Raft transport logs its connections at DEBUG. Member 2 runs at
        # log.level=debug and shows those lines exist; member 1, at the default, has none.
        first = self.node(**dict(FAST, **{"node.id": "1", "node.roles": "controller"}))
        first.start()
        second = self.node(**dict(FAST, **{"node.id": "2", "node.roles": "controller", "log.level": "debug",
                                           "metadata.join": "127.0.0.1:%d" % first.rpc_port}))
        second.start()

        def two_members_in_step():
            m = first.request("GET", "/v1/metadata/members", timeout=10)
            ms = m["members"]
            return len(ms) == 2 and len({(x["applied"], x["state_hash"]) for x in ms}) == 1 \
                and not any(x["role"] in ("unreachable", "unavailable") for x in ms)
        poll(two_members_in_step, "member 2 to join and catch up")
        poll(lambda: "DEBUG" in levels(second.current_log()), "a DEBUG line from member 2's raft transport")
        self.assertIn("raft connection", "\n".join(
            line for line in second.current_log().splitlines() if " DEBUG " in line))
        out = first.current_log()
        self.assertNotIn("DEBUG", levels(out), out)
        self.assertIn("INFO", levels(out))


if __name__ == "__main__":
    unittest.main()
