"""The SDK is enough to write a plugin: build sdk/examples/memory-storage out of tree against
the exported SluiceSDK package, load it into a real sluiced, and publish and fetch; and run
the SDK's storage conformance kit against it (docs/plugin-sdk.md "Checking a storage
engine")."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

from harness import Node, record_value

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_PACKAGE = os.environ.get("SDK_PACKAGE_DIR", "")
PLUGINS_DIR = os.environ.get("PLUGINS_DIR", "")

# The reasons the kit gives for a SKIPPED test: a documented opt-out, or a hook the
# example cannot offer (it writes nothing, so it has no crash or I/O failure to inject).
# The example declares exactly these opt-outs (memory_storage_conformance_test.cc).
EXAMPLE_OPT_OUTS = {"no_restart_persistence", "no_groups"}
MISSING_HOOKS = ("no crash hook (StorageConformanceParams::crash)",
                 "no I/O failure hook (StorageConformanceParams::fail_io)")


class SdkExample(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="sluice-sdk-")
        cls.build = os.path.join(cls.work, "build")
        subprocess.run(["cmake", "-S", os.path.join(ROOT, "sdk/examples/memory-storage"), "-B", cls.build,
                        "-DCMAKE_PREFIX_PATH=" + SDK_PACKAGE], check=True, capture_output=True, timeout=300)
        subprocess.run(["cmake", "--build", cls.build], check=True, capture_output=True, timeout=900)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_out_of_tree_storage_plugin_serves_a_stream(self):
        plugins = os.path.join(self.work, "plugins")
        shutil.copytree(PLUGINS_DIR, plugins)
        shutil.copy(os.path.join(self.build, "libsluice-memory-storage.so"), plugins)
        node = Node(extra={"plugins.dir": plugins, "storage.plugin": "memory-storage"})
        try:
            node.start()
            self.assertIn("memory only", node.current_log())
            node.create_stream("mem", shards=2)
            res = node.publish_binary("mem", [(b"k", b"v%d" % i) for i in range(10)])
            shard = res[0]["shard"]
            self.assertEqual([r["offset"] for r in res], list(range(10)))
            recs = node.fetch_all("mem", shard)
            self.assertEqual([record_value(r) for r in recs], [b"v%d" % i for i in range(10)])
        finally:
            node.cleanup()

    def test_out_of_tree_storage_plugin_passes_the_conformance_kit(self):
        exe = os.path.join(self.build, "memory_storage_conformance")
        self.assertTrue(os.path.exists(exe), "the SDK package did not offer Sluice::storage_conformance")
        report = os.path.join(self.work, "conformance.xml")
        run = subprocess.run([exe, "--gtest_output=xml:" + report], capture_output=True, text=True,
                             timeout=600)
        self.assertEqual(run.returncode, 0, run.stdout[-4000:] + run.stderr[-4000:])
        cases = ET.parse(report).getroot().iter("testcase")
        passed, skipped = [], {}
        for case in cases:
            name = case.get("name").split("/")[0]
            self.assertIsNone(case.find("failure"), name)
            skip = case.find("skipped")
            if skip is None:
                self.assertEqual(case.get("result"), "completed", name)
                passed.append(name)
            else:
                skipped[name] = skip.get("message", "").splitlines()[-1]
        for name, reason in skipped.items():
            opt_out = re.match(r"opt-out (\w+)", reason)
            if opt_out:
                self.assertIn(opt_out.group(1), EXAMPLE_OPT_OUTS, "%s: %s" % (name, reason))
            else:
                self.assertIn(reason, MISSING_HOOKS, "%s skipped for an undocumented reason" % name)
        # What the example implements is tested, not skipped.
        for prefix in ("Offsets", "Fetch", "HighWatermarkCovers", "Notify", "BadInputMalformed",
                       "Incarnations", "DeleteIncarnations"):
            self.assertTrue([n for n in passed if n.startswith(prefix)], "no %s test passed" % prefix)
            self.assertFalse([n for n in skipped if n.startswith(prefix)], "a %s test was skipped" % prefix)
        # What it leaves out answers not_supported (checked by the kit before it skips).
        self.assertIn("checked: every group call answers not_supported",
                      skipped["GroupsDeliverInOffsetOrderAndAcksMoveTheCommittedOffset"])
        # Idempotent producers are implemented (in memory: the restart clause is skipped by
        # no_restart_persistence).
        for name in ("ProducersRetryOfARecentSequenceIsADuplicate", "ProducersFirstSendToANewIncarnationIsNeverADuplicate"):
            self.assertIn(name, passed)


if __name__ == "__main__":
    unittest.main()
