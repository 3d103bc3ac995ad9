"""The SDK is enough to write a plugin: build sdk/examples/memory-storage out of tree against
the exported SluiceSDK package, load it into a real sluiced, and publish and fetch."""
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import Node, record_value

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_PACKAGE = os.environ.get("SDK_PACKAGE_DIR", "")
PLUGINS_DIR = os.environ.get("PLUGINS_DIR", "")


class SdkExample(unittest.TestCase):
    def test_out_of_tree_storage_plugin_serves_a_stream(self):
        work = tempfile.mkdtemp(prefix="sluice-sdk-")
        try:
            build = os.path.join(work, "build")
            subprocess.run(["cmake", "-S", os.path.join(ROOT, "sdk/examples/memory-storage"), "-B", build,
                            "-DCMAKE_PREFIX_PATH=" + SDK_PACKAGE], check=True, capture_output=True, timeout=300)
            subprocess.run(["cmake", "--build", build], check=True, capture_output=True, timeout=600)
            plugins = os.path.join(work, "plugins")
            shutil.copytree(PLUGINS_DIR, plugins)
            shutil.copy(os.path.join(build, "libsluice-memory-storage.so"), plugins)
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
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
