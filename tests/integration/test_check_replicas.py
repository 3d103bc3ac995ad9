"""tools/check_replicas.py can fail: each violation it exists to catch is planted in
synthetic replicas (real segment encoding, real CRC-32C) and must be reported."""
import os
import shutil
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import check_replicas  # noqa: E402

INC = 0xAB


def batch(base, values, inc=INC):
    recs = b""
    for v in values:
        recs += struct.pack("<IIIq", 0xFFFFFFFF, len(v), 0, 1000) + v
    length = 72 + len(recs)
    body = struct.pack("<HHQQqqIIQQ", 1, 0, base, inc, 1000, 1000, len(values), 0, 0, 0) + recs
    crc = check_replicas.crc32c(body)
    return struct.pack("<III", 0x31424C53, length, crc) + body


class CheckReplicas(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="check-replicas-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def replica(self, name, segments):
        d = os.path.join(self.dir, name, "0-%016x" % INC)
        os.makedirs(os.path.join(d, "log"))
        for base, data in segments:
            with open(os.path.join(d, "log", "%020d.log" % base), "wb") as f:
                f.write(data)
        return d

    def log(self, n=6):
        """Offsets 0..n-1 in batches of 2, values v0.. ; one segment per 4 records."""
        first = batch(0, [b"v0", b"v1"]) + batch(2, [b"v2", b"v3"])
        second = b"".join(batch(o, [b"v%d" % o, b"v%d" % (o + 1)]) for o in range(4, n, 2))
        return [(0, first), (4, second)]

    def test_crc32c_is_the_castagnoli_check_value(self):
        self.assertEqual(check_replicas.crc32c(b"123456789"), 0xE3069283)

    def test_identical_replicas_pass_with_the_acknowledged_records(self):
        a, b = self.replica("a", self.log()), self.replica("b", self.log())
        problems, _ = check_replicas.check([a, b], 6, [(0, b"v0"), (5, b"v5")])
        self.assertEqual(problems, [])

    def test_a_byte_that_differs_below_the_high_watermark_fails(self):
        segs = self.log()
        bad = bytearray(segs[0][1])
        good_b = batch(2, [b"v2", b"v3"])
        bad[len(bad) - len(good_b):] = batch(2, [b"v2", b"vX"])  # valid CRC, other content
        a, b = self.replica("a", segs), self.replica("b", [(0, bytes(bad)), segs[1]])
        problems, _ = check_replicas.check([a, b], 6, [])
        self.assertTrue(any("differ at offset 2" in p for p in problems), problems)
        # Above the watermark replicas may differ (not yet acknowledged): hwm 2 passes.
        problems, _ = check_replicas.check([a, b], 2, [])
        self.assertEqual(problems, [])

    def test_a_gap_a_bad_crc_and_another_incarnation_fail(self):
        gap = [(0, batch(0, [b"v0", b"v1"]) + batch(3, [b"v3"]))]
        problems, _ = check_replicas.check([self.replica("gap", gap)], 2, [])
        self.assertTrue(any("expected 2" in p for p in problems), problems)
        corrupt = bytearray(batch(0, [b"v0", b"v1"]))
        corrupt[-1] ^= 1
        problems, _ = check_replicas.check([self.replica("crc", [(0, bytes(corrupt))])], 0, [])
        self.assertTrue(any("CRC" in p for p in problems), problems)
        other = [(0, batch(0, [b"v0"], inc=INC + 1))]
        problems, _ = check_replicas.check([self.replica("inc", other)], 1, [])
        self.assertTrue(any("incarnation" in p for p in problems), problems)

    def test_a_replica_short_of_the_watermark_or_missing_an_ack_fails(self):
        a, short = self.replica("a", self.log()), self.replica("short", self.log()[:1])
        problems, _ = check_replicas.check([a, short], 6, [])
        self.assertTrue(any("short of the high watermark" in p for p in problems), problems)
        problems, _ = check_replicas.check([a], 6, [(3, b"v3"), (4, b"nope")])
        self.assertTrue(any("acknowledged offset 4" in p for p in problems), problems)
        problems, _ = check_replicas.check([a], 6, [(7, b"v7")])
        self.assertTrue(any("not below the high watermark" in p for p in problems), problems)

    def test_a_torn_tail_is_allowed_but_stray_bytes_mid_log_are_not(self):
        segs = self.log()
        torn = [segs[0], (4, segs[1][1] + batch(6, [b"v6"])[:40])]
        problems, _ = check_replicas.check([self.replica("torn", torn)], 6, [])
        self.assertEqual(problems, [])
        stray = [(0, segs[0][1] + b"xx"), segs[1]]
        problems, _ = check_replicas.check([self.replica("stray", stray)], 6, [])
        self.assertTrue(problems)

    def test_the_command_line_exits_1_on_a_violation(self):
        a = self.replica("a", self.log())
        self.assertEqual(check_replicas.main(["--replica", a, "--hwm", "6"]), 0)
        self.assertEqual(check_replicas.main(["--replica", a, "--hwm", "8"]), 1)


if __name__ == "__main__":
    unittest.main()
