"""A power cut must not erase a node (regression: the data directory and raft.dir were
created with std::filesystem::create_directories alone, so after a power cut a new node came
back empty, "formatted", with every acknowledged record gone).

A SIGKILL keeps the page cache; a power cut does not. This test runs a real sluiced under an
LD_PRELOAD shim (tests/support/fs_trace_shim.cc) that records every mkdir, every open with
O_CREAT, every rename and every fsync/fdatasync in order, SIGKILLs it after acknowledged
publishes, and then "power-cuts" the trace with a model of a file system that keeps a
directory entry only once its parent directory has been fsynced:

  * a name created (mkdir, open O_CREAT) or renamed into a directory survives only if that
    directory was fsynced after the name appeared, and the directory itself survives;
  * a file renamed into place keeps its content only if it was fsynced before the rename;
  * a directory that existed before the trace survives.

It asserts that data.dir, raft.dir, meta.properties and every segment that held
acknowledged records survive, with data.dir nested under new directories and with raft.dir
outside data.dir.
"""
import os
import unittest

from harness import SLUICED, Node

SHIM = os.environ.get("SLUICE_FS_TRACE_SHIM") or os.path.join(
    os.path.dirname(os.path.dirname(SLUICED)), "tests", "support", "libsluice_fs_trace_shim.so")


def parse_trace(path):
    """[(seq, op, path, path2 or None)] in file order (O_APPEND, one write per line)."""
    events = []
    with open(path) as f:
        for n, line in enumerate(f):
            parts = line.rstrip("\n").split(" ")
            if len(parts) < 4:
                continue  # a line torn by the SIGKILL
            op, a = parts[2], os.path.normpath(parts[3])
            b = os.path.normpath(parts[4]) if len(parts) > 4 else None
            events.append((n, op, a, b))
    return events


class PowerCutModel:
    """What a file system that persists names only on a parent fsync keeps of a trace."""

    def __init__(self, events):
        self.appeared = {}     # name -> position where it (last) appeared in its directory
        self.dir_syncs = {}    # path -> positions of fsyncs of that path
        self.data_syncs = {}   # path -> positions of fsync/fdatasync of that path
        self.renamed_from = {}  # name -> (source, position) of the rename that put it there
        for pos, op, a, b in events:
            if op in ("mkdir", "create"):
                self.appeared.setdefault(a, pos)  # an O_CREAT of an existing file makes no name
            elif op == "rename":
                self.appeared[b] = pos
                self.renamed_from[b] = (a, pos)
                self.appeared.pop(a, None)
            elif op in ("fsync", "fdatasync"):
                self.data_syncs.setdefault(a, []).append(pos)
                if op == "fsync":
                    self.dir_syncs.setdefault(a, []).append(pos)

    def why_lost(self, path):
        """None if `path` survives the power cut, else the reason it does not."""
        path = os.path.normpath(path)
        if path == "/":
            return None
        parent = os.path.dirname(path)
        if path in self.appeared:
            at = self.appeared[path]
            if not any(s > at for s in self.dir_syncs.get(parent, [])):
                return "%s: its directory %s was never fsynced after the name was created" % (path, parent)
            if path in self.renamed_from:
                src, rpos = self.renamed_from[path]
                if not any(s < rpos for s in self.data_syncs.get(src, [])):
                    return "%s: renamed from %s, which was not fsynced before the rename" % (path, src)
        return self.why_lost(parent)


class PowerLoss(unittest.TestCase):
    def setUp(self):
        self.assertTrue(os.path.exists(SHIM), "the trace shim is not built: %s" % SHIM)

    def run_node_and_cut(self, raft_outside):
        node = Node()
        self.addCleanup(node.cleanup)
        work = os.path.realpath(node.workdir)
        node.data_dir = os.path.join(work, "a", "b", "data")
        raft_dir = os.path.join(work, "r", "s", "raft") if raft_outside else os.path.join(node.data_dir, "raft")
        if raft_outside:
            node.extra["raft.dir"] = raft_dir
        trace = os.path.join(work, "fs-trace.log")
        node.env = {"LD_PRELOAD": SHIM, "SLUICE_FS_TRACE": trace}
        node.start()
        node.create_stream("pc", shards=2)
        acked = 0
        for i in range(20):
            acked += len(node.publish_binary("pc", [(b"k%d" % j, b"v%d-%d" % (i, j)) for j in range(10)]))
        self.assertEqual(acked, 200)
        # Every segment that holds an acknowledged record, as the node left it.
        shards_root = os.path.join(node.data_dir, "shards")
        segs = []
        for d, _, files in os.walk(shards_root):
            segs += [os.path.join(d, f) for f in files if f.endswith(".log") and os.path.getsize(os.path.join(d, f)) > 0]
        node.kill()
        self.assertTrue(segs, "no segment holds the acknowledged records under %s" % shards_root)

        model = PowerCutModel(parse_trace(trace))
        self.assertIn(node.data_dir, model.appeared, "the trace did not see the data directory created")
        raft_files = [os.path.join(raft_dir, f) for f in ("metadata1", "metadata2")
                      if os.path.exists(os.path.join(raft_dir, f))]
        self.assertTrue(raft_files, "no raft metadata file in %s" % raft_dir)
        return model, {
            "data.dir": [node.data_dir],
            "meta.properties": [os.path.join(node.data_dir, "meta.properties")],
            "segments with acknowledged records": segs,
            "raft.dir": [raft_dir] + raft_files,
        }

    def assert_survive(self, model, paths, kinds):
        lost = ["%s: %s" % (kind, why) for kind in kinds for why in (model.why_lost(p) for p in paths[kind]) if why]
        self.assertEqual(lost, [], "a power cut now would lose:\n  " + "\n  ".join(lost))

    def test_power_cut_keeps_a_new_nodes_directories(self):
        model, paths = self.run_node_and_cut(raft_outside=False)
        self.assert_survive(model, paths, list(paths))

    def test_power_cut_keeps_the_data_dir_with_raft_dir_outside_it(self):
        model, paths = self.run_node_and_cut(raft_outside=True)
        self.assert_survive(model, paths, ["data.dir", "meta.properties", "segments with acknowledged records"])

    # raft.dir is created by raft-meta (raft_meta_bootstrap.cc), not by the host.
    def test_power_cut_keeps_a_raft_dir_outside_the_data_dir(self):
        model, paths = self.run_node_and_cut(raft_outside=True)
        self.assert_survive(model, paths, ["raft.dir"])


if __name__ == "__main__":
    unittest.main()
