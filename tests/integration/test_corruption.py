"""Acceptance 3: a flipped byte in a sealed segment stops the node with the file and the
position; a torn, never-acknowledged tail is truncated with a log line saying so."""
import os
import shutil
import struct
import unittest

from harness import Node, record_value, segments


def batch_starts(path):
    """Byte positions of the batches in a segment (walks the length fields)."""
    with open(path, "rb") as f:
        data = f.read()
    pos, out = 0, []
    while pos + 72 <= len(data):
        length = struct.unpack_from("<I", data, pos + 4)[0]
        out.append((pos, length))
        pos += length
    return out


class Corruption(unittest.TestCase):
    def setUp(self):
        self.node = Node(extra={"storage.segment_bytes": "8192"}).start()
        inc = self.node.create_stream("c", shards=1)["incarnation"]
        for i in range(40):
            self.node.publish_binary("c", [(None, b"x" * 200 + b"%d" % i)] * 5)
        self.assertEqual(self.node.stop(), 0)
        self.segs = segments(self.node, "t", "n", "c", 0, inc)
        self.assertGreater(len(self.segs), 2, "the test needs sealed segments")

    def tearDown(self):
        self.node.cleanup()

    def test_flipped_byte_in_sealed_segment_fails_start_naming_file_and_position(self):
        sealed = self.segs[1]
        starts = batch_starts(sealed)
        batch_pos, length = starts[len(starts) // 2]
        flip = batch_pos + 72 + 10  # inside the records of that batch
        with open(sealed, "r+b") as f:
            f.seek(flip)
            b = f.read(1)
            f.seek(flip)
            f.write(bytes([b[0] ^ 0x40]))
        code, out = self.node.start_expect_failure()
        # 3: needs an operator; systemd does not restart the node on it (a restart every
        # 2 s for ever, before).
        self.assertEqual(code, 3, out[-2000:])
        self.assertIn(os.path.basename(sealed), out)
        self.assertIn("at byte %d" % batch_pos, out)
        self.assertIn("corrupt", out)

    def test_repair_flag_lets_an_operator_start_anyway(self):
        sealed = self.segs[1]
        with open(sealed, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        code, _ = self.node.start_expect_failure()
        self.assertEqual(code, 3)
        self.node.extra["storage.repair"] = "true"
        self.node.start()
        self.assertIn("repair", self.node.current_log().lower())
        # What survives is a dense prefix of the log.
        recs = self.node.fetch_all("c", 0)
        self.assertEqual([r["offset"] for r in recs], list(range(len(recs))))

    def test_a_single_replica_whose_log_directory_is_gone_stops_the_start_until_repair(self):
        """Its only copy deleted by hand while the rest of storage.dir stays: opened empty, it
        would hand out offsets 0.. again for other records. The start stops (exit 3, naming
        the shard), and storage.repair accepts the loss."""
        shard_dir = os.path.dirname(os.path.dirname(self.segs[0]))
        shutil.rmtree(shard_dir)
        code, out = self.node.start_expect_failure()
        self.assertEqual(code, 3, out[-2000:])
        self.assertIn("held its only copy, and its log is gone", out)
        self.assertIn("storage.repair", out)
        # The refused start put back the clean-shutdown marker it took (the node stopped
        # cleanly in setUp): the next start reads no log's tail again.
        self.assertTrue(os.path.exists(os.path.join(self.node.data_dir, "shards", ".clean-shutdown")),
                        "a refused start consumed the clean-shutdown marker")
        self.node.extra["storage.repair"] = "true"
        self.node.start()
        self.assertEqual(self.node.fetch_all("c", 0), [])
        res = self.node.publish_binary("c", [(None, b"after")])
        self.assertEqual(res[0]["offset"], 0, res)

    def test_torn_unacknowledged_tail_is_truncated_with_a_log_line(self):
        active = self.segs[-1]
        size_before = os.path.getsize(active)
        with open(active, "rb") as f:
            first_batch = f.read(200)
        # A torn write: the start of a batch whose declared length runs past the end.
        with open(active, "ab") as f:
            f.write(first_batch[:120])
        self.node.start()
        log = self.node.current_log()
        self.assertIn("truncated torn tail", log)
        self.assertIn("never acknowledged", log)
        self.assertEqual(os.path.getsize(active), size_before)
        recs = self.node.fetch_all("c", 0)
        self.assertEqual(len(recs), 200)
        self.assertEqual(record_value(recs[-1]), b"x" * 200 + b"39")


if __name__ == "__main__":
    unittest.main()
