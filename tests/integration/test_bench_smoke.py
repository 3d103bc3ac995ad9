"""sluice-bench --brokers still runs end to end: the replicated comparison starts one broker
and three brokers of its own, alternates the two loads in rounds, and reports every figure
with no failed request (docs/benchmarks.md "Replicated publish"). Figures are not asserted:
this machine's speed is not a test condition; that the run completes cleanly is."""
import os
import re
import subprocess
import tempfile
import unittest

from harness import SLUICED

BENCH = os.path.join(os.path.dirname(SLUICED), "sluice-bench")


class BenchSmoke(unittest.TestCase):
    def test_replicated_comparison_runs_in_rounds_without_failures(self):
        with tempfile.TemporaryDirectory(prefix="sluice-bench-smoke-") as d:
            p = subprocess.run([BENCH, "--brokers", "3", "--seconds", "2", "--rounds", "2",
                                "--connections", "2", "--dir", d],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=600)
            out = p.stdout
            self.assertEqual(p.returncode, 0, out[-3000:] + p.stderr[-3000:])
            rounds = re.findall(r"round +(\d+): 1 broker +(\d+) rec/s, 3 brokers +(\d+) rec/s", out)
            self.assertEqual([r[0] for r in rounds], ["1", "2"], out)
            for _, single, rep in rounds:
                self.assertGreater(int(single), 0, out)
                self.assertGreater(int(rep), 0, out)
            failed = re.findall(r"(1 broker, RF 1, leader|3 brokers, RF 3, quorum) .* failed (\d+)", out)
            self.assertEqual(len(failed), 2, out)
            for name, n in failed:
                self.assertEqual(n, "0", name + ": " + out)
            self.assertRegex(out, r"replicated / single +\d+\.\d\d")
            # Every process it started is gone (it stops them all at the end).
            left = subprocess.run(["pgrep", "-f", "data.dir=" + d], stdout=subprocess.PIPE, text=True)
            self.assertEqual(left.stdout.strip(), "", "sluiced processes left running")


if __name__ == "__main__":
    unittest.main()
